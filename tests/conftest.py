"""Shared fixtures: every registered backend (unavailable ones skip with their reason),
the test-only host-copy backend, and the array modules x can live in."""

from __future__ import annotations

import collections
import faulthandler
import itertools
import os
import signal

import numpy as np
import pytest

import sparsegpu as sg
from sparsegpu.device import _cuda
from sparsegpu.io import suitesparse
from sparsegpu.testing import no_gpu_reason, register_host_copy

from .collection_server import CollectionServer

# A hung GPU run can be asked where every thread is: with SPARSEGPU_TEST_STACKS=FILE, SIGUSR1
# writes all Python stacks to FILE (faulthandler works while a thread holds the GIL in C
# code), e.g. `timeout -s USR1 -k 30 600 python -m pytest ...` (CONTRIBUTING.md, the GPU suite).
_STACKS = os.environ.get("SPARSEGPU_TEST_STACKS")
if _STACKS and hasattr(signal, "SIGUSR1"):
    faulthandler.register(signal.SIGUSR1, file=open(_STACKS, "a"), all_threads=True)  # noqa: SIM115

# ... or by itself, with no signal (mpiexec does not pass one on to the ranks): with
# SPARSEGPU_TEST_HANG_SECONDS=N as well, a test still running after N seconds (and every N
# seconds after) writes every thread's stack to FILE.rank<R>, R the MPI rank (or the
# pytest-xdist worker; 0 alone).
# faulthandler's own thread writes them, so a thread holding the GIL in C code (NCCL's
# abort) does not stop it.
_HANG_SECONDS = os.environ.get("SPARSEGPU_TEST_HANG_SECONDS")
if _STACKS and _HANG_SECONDS:
    _RANK = next(
        (
            os.environ[v]
            for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "PYTEST_XDIST_WORKER")
            if v in os.environ
        ),
        "0",
    )
    _HANG_FILE = open(f"{_STACKS}.rank{_RANK}", "a")  # noqa: SIM115 - open for the run

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        _HANG_FILE.write(f"--- {item.nodeid}\n")
        _HANG_FILE.flush()
        faulthandler.dump_traceback_later(float(_HANG_SECONDS), repeat=True, file=_HANG_FILE)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()


# The host-copy backend runs the mirror/invalidation machinery of the GPU backends on
# the CPU, so CI exercises it; register it (and its sparse products "on the device", host
# copies with a modelled work space) before collection parametrizes over backends.
register_host_copy()

# the backends of the CSR classes' products (cusparse_bsr reads the BSR classes' mirrors:
# tests/test_bsr.py)
_REGISTERED = sg.engine._registry.registered()
BACKEND_NAMES = [b.name for b in sg.backends() if "csr" in _REGISTERED[b.name].formats]
GPU_BACKEND_NAMES = [
    name for name, b in _REGISTERED.items() if b.residence.name == "cupy" and "csr" in b.formats
]


def skip_unless_available(name: str) -> None:
    status = {b.name: b for b in sg.backends()}[name]
    if status.reason is not None and status.reason == _cuda.backend_reason():
        pytest.skip(no_gpu_reason())  # every GPU backend's skips on one summary line
    if not status.available:
        pytest.skip(f"backend {name!r} unavailable: {status.reason}")


_CACHE_DIRS = itertools.count()


@pytest.fixture(autouse=True)
def _forget_measured_plans():
    """Plans measured for a fingerprint are process-wide: one test's must not decide the
    next test's choice."""
    yield
    from sparsegpu.engine import _planning, _sparse_planning

    _planning.forget_measurements()
    _sparse_planning.forget_sparse_plans()


@pytest.fixture(autouse=True)
def _isolated_tuning_cache(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's tuning cache: each gets an empty one, and the
    package's shipped defaults read as empty (tests of them pass their path explicitly)."""
    from sparsegpu.engine import _tuning_store as cache

    # a fresh path, not created: the cache makes its directory when it first writes, and
    # making ~30,000 directories (one per test, most of them skips) cost minutes
    fresh = tmp_path_factory.getbasetemp() / f"tuning-cache-{next(_CACHE_DIRS)}"
    monkeypatch.setenv("SPARSEGPU_CACHE_DIR", str(fresh))
    monkeypatch.setitem(cache._defaults_memo, "<package>", {})


@pytest.fixture(params=BACKEND_NAMES)
def backend_name(request) -> str:
    """Each registered backend by name; unavailable ones skip with their reason."""
    skip_unless_available(request.param)
    return request.param


@pytest.fixture(
    params=GPU_BACKEND_NAMES
    or [pytest.param("none", marks=pytest.mark.skip(reason="no GPU backend is registered"))]
)
def gpu_backend_name(request) -> str:
    """Each GPU backend by name; skips without a GPU."""
    skip_unless_available(request.param)
    return request.param


@pytest.fixture
def cupy():
    """CuPy, or a skip saying why the GPU is unusable."""
    mod = _cuda.cupy_or_none()
    if mod is None:
        pytest.skip(no_gpu_reason())
    return mod


@pytest.fixture(params=["numpy", "cupy"])
def xp(request):
    """The array module of x: numpy always, cupy when a GPU is usable."""
    if request.param == "numpy":
        return np
    mod = _cuda.cupy_or_none()
    if mod is None:
        pytest.skip(no_gpu_reason())
    return mod


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A stand-in SuiteSparse collection on 127.0.0.1, with the cache in ``tmp_path/cache``."""
    # The stand-in serves matrices that also ship with the package: fetch them from it,
    # as from the real collection, rather than copying the bundled files
    monkeypatch.setattr(suitesparse, "_bundled_name", lambda name: None)
    with CollectionServer() as running:
        monkeypatch.setenv(suitesparse.URL_ENV, running.url)
        monkeypatch.setenv(suitesparse.DATA_DIR_ENV, str(tmp_path / "cache"))
        yield running


def pytest_terminal_summary(terminalreporter):
    """One line per skip reason with its count, instead of a line per skipped test (a CPU
    run skips hundreds of GPU tests for the same reason); ``-rs`` still lists them all."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    counts = collections.Counter(_skip_reason(report) for report in skipped)
    terminalreporter.section(f"{len(skipped)} skipped, by reason", sep="-")
    for reason, count in counts.most_common():
        terminalreporter.write_line(f"{count:6d}  {reason}")


def _skip_reason(report) -> str:
    """The reason of a skip report (its longrepr is ``(path, line, "Skipped: reason")``)."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")
