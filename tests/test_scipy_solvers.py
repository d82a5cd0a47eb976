"""scipy.sparse.linalg with a sparsegpu matrix: same answers as scipy alone, and every
product (and adjoint product) went through the sparsegpu dispatcher.

Each test runs a solver twice: on a plain scipy matrix (the oracle) and on the same matrix
as a ``sparsegpu.csr_matrix`` whose backend is a :class:`CountingBackend` around one
registered backend (scipy and host-copy on CPU, every GPU backend on the GPU machine).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import sparsegpu as sg
from sparsegpu.datasets.synthetic import stencil_2d
from sparsegpu.testing import CountingBackend, random_sparse

from .conftest import BACKEND_NAMES, skip_unless_available

DTYPES = [np.float64, np.complex128]
# scipy < 1.12 calls the relative tolerance ``tol``
TOL = "rtol" if "rtol" in inspect.signature(spl.cg).parameters else "tol"


@pytest.fixture(params=BACKEND_NAMES)
def counting(request):
    """A CountingBackend around each registered backend, registered under a test name."""
    skip_unless_available(request.param)
    inner = sg.engine._registry.registered()[request.param]
    backend = CountingBackend(inner, name=f"counting-{request.param}")
    sg.register_backend(backend, replace=True)
    yield backend
    sg.unregister_backend(backend.name)


@pytest.fixture(params=DTYPES, ids=lambda d: np.dtype(d).name)
def dtype(request):
    return np.dtype(request.param)


def hermitian_positive_definite(dtype, n=16):
    """A shifted 2-D Laplacian plus a small skew-Hermitian-times-i part: HPD, well posed."""
    L = sp.csr_matrix(stencil_2d(n)) + sp.identity(n * n)
    K = random_sparse((n * n, n * n), 0.01, 1, dtype)
    return (L.astype(dtype) + 0.1 * (K + K.conj().T)).tocsr()


def nonsymmetric(dtype, n=16):
    L = sp.csr_matrix(stencil_2d(n)) + sp.identity(n * n)
    return (L.astype(dtype) + 0.2 * random_sparse((n * n, n * n), 0.01, 2, dtype)).tocsr()


def rectangular(dtype):
    A = random_sparse((90, 60), 0.1, 3, dtype)
    return (A + sp.eye(90, 60, dtype=dtype)).tocsr()


def rhs(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(n)
    return b.astype(dtype)


def ours(S, backend: CountingBackend):
    A = sg.csr_matrix(S)
    A.backend = backend.name
    return A


def assert_close(actual, desired, rtol):
    actual, desired = np.asarray(actual), np.asarray(desired)
    assert actual.shape == desired.shape
    err = np.linalg.norm(actual - desired)
    assert err <= rtol * max(np.linalg.norm(desired), 1.0), f"relative error {err:.3e}"


def assert_adjoint_routed(backend: CountingBackend, shape):
    m, n = shape
    assert backend.shapes[(m, n)] > 0, f"no product with A {shape}: {dict(backend.shapes)}"
    assert backend.shapes[(n, m)] > 0, f"no adjoint product A^H: {dict(backend.shapes)}"


def test_cg(counting, dtype):
    S = hermitian_positive_definite(dtype)
    b = rhs(S.shape[0], dtype)
    want, want_info = spl.cg(S, b, atol=0.0, **{TOL: 1e-10})
    got, info = spl.cg(ours(S, counting), b, atol=0.0, **{TOL: 1e-10})
    assert info == want_info == 0
    assert_close(got, want, 1e-7)
    assert counting.matvecs > 0


def test_minres(counting):
    """Real only: scipy's minres does not conjugate (it rejects complex Hermitian A)."""
    S = hermitian_positive_definite(np.float64)
    b = rhs(S.shape[0], np.float64)
    want, want_info = spl.minres(S, b, **{TOL: 1e-10})
    got, info = spl.minres(ours(S, counting), b, **{TOL: 1e-10})
    assert info == want_info == 0
    assert_close(got, want, 1e-7)
    assert counting.matvecs > 0


@pytest.mark.parametrize("solver", ["gmres", "bicgstab"])
def test_general_solvers(solver, counting, dtype):
    S = nonsymmetric(dtype)
    b = rhs(S.shape[0], dtype)
    want, want_info = getattr(spl, solver)(S, b, atol=0.0, **{TOL: 1e-10})
    got, info = getattr(spl, solver)(ours(S, counting), b, atol=0.0, **{TOL: 1e-10})
    assert info == want_info == 0
    assert_close(got, want, 1e-7)
    assert counting.matvecs > 0


@pytest.mark.parametrize("solver", ["lsqr", "lsmr"])
def test_least_squares(counting, dtype, solver):
    S = rectangular(dtype)
    b = rhs(S.shape[0], dtype)
    want = getattr(spl, solver)(S, b, atol=1e-12, btol=1e-12)
    got = getattr(spl, solver)(ours(S, counting), b, atol=1e-12, btol=1e-12)
    assert got[1] == want[1]
    assert_close(got[0], want[0], 1e-8)
    assert_adjoint_routed(counting, S.shape)


def test_eigsh(counting, dtype):
    S = hermitian_positive_definite(dtype)
    v0 = rhs(S.shape[0], dtype, seed=5)
    want = spl.eigsh(S, k=4, v0=v0, tol=1e-10, return_eigenvectors=False)
    got = spl.eigsh(ours(S, counting), k=4, v0=v0, tol=1e-10, return_eigenvectors=False)
    np.testing.assert_allclose(np.sort(got), np.sort(want), rtol=1e-8)
    assert counting.matvecs > 0


def test_svds(counting, dtype):
    S = rectangular(dtype)
    v0 = rhs(min(S.shape), dtype, seed=6)
    want = spl.svds(S, k=3, v0=v0, tol=1e-10, return_singular_vectors=False)
    got = spl.svds(ours(S, counting), k=3, v0=v0, tol=1e-10, return_singular_vectors=False)
    np.testing.assert_allclose(np.sort(got), np.sort(want), rtol=1e-8)
    assert_adjoint_routed(counting, S.shape)


@pytest.mark.parametrize("columns", [1, 3], ids=["vector", "3-columns"])
def test_expm_multiply(counting, dtype, columns):
    S = (-0.1 * hermitian_positive_definite(dtype)).tocsr()
    B = rhs(S.shape[0] * columns, dtype).reshape(S.shape[0], columns)
    B = B[:, 0] if columns == 1 else B
    want = spl.expm_multiply(S, B)
    got = spl.expm_multiply(ours(S, counting), B)
    assert_close(got, want, 1e-10)
    # expm_multiply shifts A (A - mu I): the shifted matrix keeps the backend
    assert counting.matvecs + counting.matmats > 0


def test_linear_operator_adjoint_is_built_once(counting):
    """aslinearoperator(A).rmatvec uses A.T.conj(): a copy seeded with A's mirrors."""
    S = rectangular(np.float64)
    A = ours(S, counting)
    A.planning = "estimate"  # counted products: none spent timing cuSPARSE's algorithms
    op = spl.aslinearoperator(A)
    u = rhs(S.shape[0], np.float64)
    for _ in range(3):
        np.testing.assert_allclose(op.rmatvec(u), S.T @ u, rtol=1e-12)
    assert counting.shapes[(S.shape[1], S.shape[0])] == 3
