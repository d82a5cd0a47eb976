"""Backend registry and selection: precedence, errors, scoping, availability."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.backends.base import Backend
from sparsegpu.engine import _select
from sparsegpu.testing import CountingBackend


@pytest.fixture
def counters():
    """Two counting backends, 'first' and 'second', registered for one test."""
    made = {name: CountingBackend(name=name) for name in ("first", "second")}
    for backend in made.values():
        sg.register_backend(backend, replace=True)
    yield made
    for name in made:
        sg.unregister_backend(name)


@pytest.fixture
def matrix():
    return sg.csr_matrix(sp.random(20, 20, density=0.3, format="csr", random_state=3))


def _used(counters):
    return {name: b.matvecs for name, b in counters.items()}


def test_backends_lists_every_backend_with_reason():
    statuses = {b.name: b for b in sg.backends()}
    assert statuses["scipy"].available and statuses["scipy"].reason is None
    for status in statuses.values():
        assert status.available == (status.reason is None)
        assert status.description


def test_precedence_explicit_over_matrix_over_scope_over_env(counters, matrix, monkeypatch):
    x = np.ones(20)
    monkeypatch.setenv("SPARSEGPU_BACKEND", "first")
    matrix @ x
    assert _used(counters) == {"first": 1, "second": 0}
    with sg.use_backend("second"):
        matrix @ x
    assert _used(counters) == {"first": 1, "second": 1}
    matrix.backend = "first"
    with sg.use_backend("second"):
        matrix @ x
    assert _used(counters) == {"first": 2, "second": 1}
    sg.matvec(matrix, x, backend="second")
    assert _used(counters) == {"first": 2, "second": 2}
    matrix.backend = None
    monkeypatch.delenv("SPARSEGPU_BACKEND")
    with sg.use_backend("first"):
        matrix @ x
    assert _used(counters) == {"first": 3, "second": 2}


def test_auto_without_gpu_is_scipy(matrix, monkeypatch):
    monkeypatch.delenv("SPARSEGPU_BACKEND", raising=False)
    if sg.device._cuda.unavailable_reason() is None:
        pytest.skip("a GPU is usable here: auto picks a GPU backend")
    assert _select.select(matrix._sg_operand(), np.float64).backend == "scipy"


def test_unknown_backend_names_the_choices(matrix):
    with pytest.raises(ValueError, match=r"(?s)unknown backend .nope.*scipy: available"):
        matrix.backend = "nope"
    with pytest.raises(ValueError, match="unknown backend"):
        with sg.use_backend("nope"):
            pass
    with pytest.raises(ValueError, match="unknown backend"):
        sg.matvec(matrix, np.ones(20), backend="nope")
    with pytest.raises(TypeError, match="must be a str"):
        matrix.backend = 3


def test_env_var_with_unknown_name_fails_clearly(matrix, monkeypatch):
    monkeypatch.setenv("SPARSEGPU_BACKEND", "nope")
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        matrix @ np.ones(20)


class _Unavailable(Backend):
    name = "unavailable-test"
    description = "test-only: never available"

    def unavailable_reason(self):
        return "it needs hardware this test does not have"


def test_unavailable_backend_says_why_and_lists_the_others(matrix):
    sg.register_backend(_Unavailable(), replace=True)
    try:
        with pytest.raises(sg.BackendUnavailableError, match="needs hardware") as info:
            matrix.backend = "unavailable-test"
        assert "scipy: available" in str(info.value)
        status = {b.name: b for b in sg.backends()}["unavailable-test"]
        assert not status.available and "hardware" in status.reason
        assert _select.select(matrix._sg_operand(), np.float64).backend != "unavailable-test"
    finally:
        sg.unregister_backend("unavailable-test")


def test_unsupported_dtype_is_a_type_error_naming_the_supported(matrix):
    narrow = CountingBackend(name="narrow")
    narrow.value_dtypes = (np.dtype(np.float32),)
    sg.register_backend(narrow, replace=True)
    try:
        with pytest.raises(
            TypeError,
            match=r"'narrow' does not support value dtype float64.*"
            r"supports float32",
        ):
            sg.matvec(matrix, np.ones(20), backend="narrow")
    finally:
        sg.unregister_backend("narrow")


def test_register_refuses_duplicates_and_auto():
    with pytest.raises(ValueError, match="already registered"):
        sg.register_backend(CountingBackend(name="scipy"))
    with pytest.raises(ValueError, match="cannot be named 'auto'"):
        sg.register_backend(CountingBackend(name="auto"))


def test_use_backend_is_thread_local(counters, matrix):
    x = np.ones(20)
    barrier = threading.Barrier(2)
    errors = []

    def work(name):
        try:
            with sg.use_backend(name):
                barrier.wait()
                for _ in range(10):
                    matrix @ x
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _used(counters) == {"first": 10, "second": 10}


def test_use_backend_restores_on_exception(counters, matrix):
    with pytest.raises(RuntimeError):
        with sg.use_backend("first"):
            raise RuntimeError("boom")
    assert _select.scoped_backend() is None


def test_policy_of_the_wrong_family_is_refused(matrix):
    from sparsegpu.tuning import CsrVectorPolicy

    with pytest.raises(TypeError, match="takes a NoPolicy, got CsrVectorPolicy"):
        sg.matvec(matrix, np.ones(20), backend="scipy", policy=CsrVectorPolicy())
    with pytest.raises(TypeError, match="must be a sparsegpu Policy"):
        matrix.policy = {"block_size": 128}


def test_derived_matrices_keep_the_backend_choice(counters, matrix):
    matrix.backend = "first"
    assert matrix.T.backend == "first"
    assert matrix.copy().backend == "first"
    matrix.T @ np.ones(20)
    assert counters["first"].matvecs == 1


def test_policy_set_after_a_product_takes_effect(matrix):
    from sparsegpu.testing import HostCopyBackend
    from sparsegpu.tuning import CsrVectorPolicy

    seen = []

    class Recording(HostCopyBackend):
        name = "recording"
        policy_type = CsrVectorPolicy

        def plan(self, mirror, policy):
            seen.append(policy)
            return super().plan(mirror, policy)

    sg.register_backend(Recording(), replace=True)
    try:
        matrix.backend = "recording"
        matrix @ np.ones(20)
        matrix.policy = CsrVectorPolicy(block_size=64, threads_per_row=4)
        matrix @ np.ones(20)
        matrix @ np.ones(20)
        assert seen == [CsrVectorPolicy(), CsrVectorPolicy(block_size=64, threads_per_row=4)]
    finally:
        sg.unregister_backend("recording")
