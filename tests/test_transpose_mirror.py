"""A.T, A.H and copies share or reuse device mirrors, and are never stale.

Runs on the host-copy backend (the GPU backends' mirror machinery, on the CPU) and on
every GPU backend where one is usable.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.device import _mirror
from sparsegpu.engine import _sparse_dispatch

COPYING_BACKENDS = ["host-copy"] + [
    name
    for name, b in sg.engine._registry.registered().items()
    if b.residence.name == "cupy" and "csr" in b.formats  # these tests multiply CSR matrices
]


@pytest.fixture(params=COPYING_BACKENDS)
def copying_backend(request):
    from .conftest import skip_unless_available

    skip_unless_available(request.param)
    return request.param


@pytest.fixture
def builds(monkeypatch):
    """Counts of mirror uploads and device transposes (every transposed mirror is made by
    ``_sparse_dispatch.transposed``: cuSPARSE's transposition on the GPU, else a sort)."""
    counts = {"upload": 0, "transpose": 0}
    from_host, transposed = _mirror.DeviceMatrix.from_host.__func__, _sparse_dispatch.transposed

    def counting_from_host(cls, *args, **kwargs):
        counts["upload"] += 1
        return from_host(cls, *args, **kwargs)

    def counting_transposed(matrix):
        counts["transpose"] += 1
        return transposed(matrix)

    monkeypatch.setattr(_mirror.DeviceMatrix, "from_host", classmethod(counting_from_host))
    monkeypatch.setattr(_sparse_dispatch, "transposed", counting_transposed)
    return counts


def _matrix(dtype=np.float64, backend="host-copy"):
    rng = np.random.default_rng(0)
    S = sp.random(40, 30, density=0.2, random_state=rng, format="csr")
    if np.dtype(dtype).kind == "c":
        S = S + 1j * sp.random(40, 30, density=0.2, random_state=rng, format="csr")
    S = S.astype(dtype).tocsr()
    A = sg.csr_matrix(S)
    A.backend = backend
    return S, A


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_transpose_is_built_once_for_every_A_T(copying_backend, dtype, builds):
    S, A = _matrix(dtype, copying_backend)
    x = np.arange(40.0)
    for _ in range(3):
        np.testing.assert_allclose(A.T @ x, S.T @ x, rtol=1e-12)
    assert builds == {"upload": 1, "transpose": 1}
    np.testing.assert_allclose(A @ np.ones(30), S @ np.ones(30), rtol=1e-12)
    assert builds["upload"] == 1, "A and A.T share one upload"


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_adjoint_reuses_the_mirrors(copying_backend, dtype, builds):
    S, A = _matrix(dtype, copying_backend)
    x = np.arange(40.0)
    np.testing.assert_allclose(A.T @ x, S.T @ x, rtol=1e-12)
    for _ in range(2):
        AH = A.conj().T
        np.testing.assert_allclose(AH @ x, S.conj().T @ x, rtol=1e-12)
    assert builds == {"upload": 1, "transpose": 1}


def test_view_of_A_T_cannot_write_behind_the_mirror(copying_backend):
    S, A = _matrix(backend=copying_backend)
    T = A.T  # a view made before the mirror exists
    A @ np.ones(30)
    T.data[0] = 5.0  # writes through: drops the mirrors of A and every A.T
    expected = sp.csr_matrix((np.asarray(A.data), A.indices, A.indptr), shape=A.shape)
    np.testing.assert_allclose(A @ np.ones(30), expected @ np.ones(30), rtol=1e-12)


def test_assigning_data_drops_the_shared_mirrors(copying_backend):
    S, A = _matrix(backend=copying_backend)
    x = np.arange(40.0)
    T = A.T
    T @ x
    A.data = A.data * 2
    np.testing.assert_allclose(A.T @ x, 2 * (S.T @ x), rtol=1e-12)
    np.testing.assert_allclose(A @ np.ones(30), 2 * (S @ np.ones(30)), rtol=1e-12)


def test_change_through_the_view_drops_A_mirror(copying_backend):
    S, A = _matrix(backend=copying_backend)
    A @ np.ones(30)
    T = A.T
    T.sort_indices()  # an in-place method through the view drops both mirrors
    T.data[0] += 1.0  # so the arrays are writable again
    expected = sp.csr_matrix((A.data, A.indices, A.indptr), shape=A.shape) @ np.ones(30)
    np.testing.assert_allclose(A @ np.ones(30), expected, rtol=1e-12)


def test_copy_is_seeded_and_independent(copying_backend, builds):
    S, A = _matrix(backend=copying_backend)
    A @ np.ones(30)
    B = A.copy()
    np.testing.assert_allclose(B @ np.ones(30), S @ np.ones(30), rtol=1e-12)
    assert builds["upload"] == 1
    B.data[0] = 7.0  # writes through B's own arrays: A keeps its mirror and values
    np.testing.assert_allclose(A @ np.ones(30), S @ np.ones(30), rtol=1e-12)
    B.data = B.data * 0 + S.data * 3
    np.testing.assert_allclose(B @ np.ones(30), 3 * (S @ np.ones(30)), rtol=1e-12)
    np.testing.assert_allclose(A @ np.ones(30), S @ np.ones(30), rtol=1e-12)


@pytest.mark.parametrize(
    "derive",
    [
        lambda A: A * 2,
        lambda A: A - 0.5 * sp.eye(*A.shape),
        lambda A: A.astype(np.float32),
        lambda A: abs(A),
        lambda A: A.conj(),
        lambda A: A.T,
        lambda A: A.copy(),
    ],
    ids=["scalar", "shift", "astype", "abs", "conj", "T", "copy"],
)
def test_derived_matrices_keep_the_backend(derive):
    _, A = _matrix()
    assert derive(A).backend == "host-copy"
