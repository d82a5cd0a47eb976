"""Run under ``mpiexec -n P python -m pytest tests/distributed`` (or alone: one rank).

Every test ends with the ranks agreeing on its outcome: a test that failed on some rank
fails on every rank (naming the ranks), so the ranks never drift apart into different
tests and wait on each other forever. The agreement runs at each test's teardown (which
every rank reaches, whatever happened in setup or call) and has its own deadline.
"""

from __future__ import annotations

import getpass
import os
import tempfile

import numpy as np
import pytest

try:
    from mpi4py import MPI
except ImportError:  # the test modules skip themselves (pytest.importorskip)
    MPI = None

# seconds the ranks wait for each other at the end of a test before giving up
AGREE_TIMEOUT = 120.0
_FAILED = pytest.StashKey[bool]()


def _world_size() -> int:
    return MPI.COMM_WORLD.Get_size() if MPI is not None else 1


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """One temporary directory per rank: pytest's shared one is cleaned up by every
    process at start, and ranks removing each other's directories race."""
    if _world_size() > 1 and config.option.basetemp is None:
        rank = MPI.COMM_WORLD.Get_rank()
        name = f"pytest-of-{getpass.getuser()}-mpi-rank{rank}"
        config.option.basetemp = os.path.join(tempfile.gettempdir(), name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if _world_size() == 1:
        return
    if report.failed:
        item.stash[_FAILED] = True
    if call.when != "teardown":
        return
    from sparsegpu.distributed import _comm

    world = MPI.COMM_WORLD
    mine = np.array([1 if item.stash.get(_FAILED, False) else 0], dtype=np.int64)
    flags = np.empty(world.Get_size(), dtype=np.int64)
    _comm.wait_all([world.Iallgather(mine, flags)], AGREE_TIMEOUT, f"agreeing on {item.nodeid}")
    failed = np.flatnonzero(flags).tolist()
    if failed and not mine[0]:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} failed on rank(s) {failed} (passed on this rank)"


@pytest.fixture
def comm():
    """MPI.COMM_WORLD (one rank when pytest runs without mpiexec)."""
    return MPI.COMM_WORLD
