"""sparsegpu.linalg: scipy's answers (scipy's own solvers are the oracle), in the array
module of b, on every backend; scipy's conventions for info, maxiter, x0, M, callback."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import sparsegpu as sg
from sparsegpu.datasets.synthetic import stencil_2d, stencil_3d
from sparsegpu.testing import random_sparse

TOL = "rtol" if "rtol" in inspect.signature(spl.cg).parameters else "tol"
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
SOLVE_RTOL = {"f": 1e-4, "d": 1e-10, "F": 1e-4, "D": 1e-10}


def _rtol(dtype):
    return SOLVE_RTOL[np.dtype(dtype).char]


def _to_numpy(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def hpd(dtype, n=12):
    """Hermitian positive definite: a shifted 2-D Laplacian plus a small Hermitian part."""
    L = sp.csr_matrix(stencil_2d(n)) + sp.identity(n * n)
    K = random_sparse((n * n, n * n), 0.02, 1, dtype)
    return (L.astype(dtype) + 0.1 * (K + K.conj().T)).astype(dtype).tocsr()


def general(dtype, n=12):
    L = sp.csr_matrix(stencil_2d(n)) + sp.identity(n * n)
    return (
        (L.astype(dtype) + 0.3 * random_sparse((n * n, n * n), 0.02, 2, dtype))
        .astype(dtype)
        .tocsr()
    )


def rhs(n, dtype, seed=0, xp=np):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(n)
    return xp.asarray(b.astype(dtype))


def ours(S, backend_name):
    A = sg.csr_matrix(S)
    A.backend = backend_name
    return A


def relative_residual(S, x, b):
    x, b = _to_numpy(x).astype(np.complex128), _to_numpy(b).astype(np.complex128)
    return np.linalg.norm(S @ x - b) / np.linalg.norm(b)


def real_matrix(name):
    """A bundled SuiteSparse matrix, read by scipy (the oracle's reader)."""
    return sp.csr_matrix(scipy.io.mmread(sg.datasets.path(name)))


def jacobi(S):
    return sp.diags(1 / S.diagonal()).tocsr()


@pytest.fixture(params=DTYPES, ids=lambda d: np.dtype(d).name)
def dtype(request):
    return np.dtype(request.param)


# ------------------------------------------------------------------ agreement with scipy
@pytest.mark.parametrize(
    "solver,matrix",
    [("cg", hpd), ("bicgstab", general), ("gmres", general), ("bicgstab", hpd)],
    ids=["cg-hpd", "bicgstab-general", "gmres-general", "bicgstab-hpd"],
)
def test_solver_matches_scipy(solver, matrix, backend_name, dtype, xp):
    S = matrix(dtype)
    b = rhs(S.shape[0], dtype, xp=xp)
    rtol = _rtol(dtype)
    x, info = getattr(sg.linalg, solver)(ours(S, backend_name), b, rtol=rtol)
    want, want_info = getattr(spl, solver)(S, _to_numpy(b), **{TOL: rtol})
    assert type(x) is type(b), "x comes back in b's array module"
    assert x.shape == (S.shape[0],)
    assert info == want_info == 0
    assert relative_residual(S, x, b) <= 1.01 * rtol
    assert np.linalg.norm(_to_numpy(x) - want) <= 100 * rtol * np.linalg.norm(want)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_minres_matches_dense_solution(backend_name, dtype, xp):
    S = hpd(dtype)
    b = rhs(S.shape[0], dtype, xp=xp)
    x, info = sg.linalg.minres(ours(S, backend_name), b, rtol=1e-12)
    assert info == 0
    exact = np.linalg.solve(S.toarray(), _to_numpy(b))
    np.testing.assert_allclose(_to_numpy(x), exact, rtol=1e-8, atol=1e-10)


def test_minres_indefinite_with_shift(backend_name):
    """(A - shift I) x = b with eigenvalues on both sides of zero: MINRES's own ground."""
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64)
    shift = 2.5
    x, info = sg.linalg.minres(ours(S, backend_name), b, shift=shift, rtol=1e-12)
    assert info == 0
    shifted = S.toarray() - shift * np.eye(S.shape[0])
    assert np.linalg.eigvalsh(shifted).min() < 0 < np.linalg.eigvalsh(shifted).max()
    np.testing.assert_allclose(x, np.linalg.solve(shifted, b), rtol=1e-7, atol=1e-9)


def test_cg_bcsstk13_jacobi(backend_name, xp):
    S = real_matrix("bcsstk13")
    b = rhs(S.shape[0], np.float64, xp=xp)
    x, info = sg.linalg.cg(ours(S, backend_name), b, rtol=1e-8, M=ours(jacobi(S), backend_name))
    want, want_info = spl.cg(S, _to_numpy(b), **{TOL: 1e-8}, M=jacobi(S))
    assert info == want_info == 0
    assert relative_residual(S, x, b) <= 1e-8
    np.testing.assert_allclose(_to_numpy(x), want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("solver", ["bicgstab", "gmres"])
def test_nonsymmetric_cage10(solver, backend_name):
    S = real_matrix("cage10")
    b = rhs(S.shape[0], np.float64)
    x, info = getattr(sg.linalg, solver)(ours(S, backend_name), b, rtol=1e-10)
    assert info == 0
    assert relative_residual(S, x, b) <= 1e-10


def test_cg_poisson_3d(backend_name):
    S = stencil_3d(10)
    b = rhs(S.shape[0], np.float64)
    x, info = sg.linalg.cg(ours(S, backend_name), b, rtol=1e-8)
    want, _ = spl.cg(sp.csr_matrix(S), b, **{TOL: 1e-8})
    assert info == 0
    np.testing.assert_allclose(x, want, rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------- conventions
def _counter():
    calls = []
    return calls, lambda xk: calls.append(_to_numpy(xk).copy())


@pytest.mark.parametrize("solver", ["cg", "bicgstab"])
def test_callback_once_per_iteration_like_scipy(solver, backend_name, xp):
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64, xp=xp)
    ours_calls, ours_cb = _counter()
    scipy_calls, scipy_cb = _counter()
    x, _ = getattr(sg.linalg, solver)(ours(S, backend_name), b, rtol=1e-8, callback=ours_cb)
    getattr(spl, solver)(S, _to_numpy(b), **{TOL: 1e-8}, callback=scipy_cb)
    assert len(ours_calls) == len(scipy_calls) > 0
    assert isinstance(ours_calls[-1], np.ndarray)
    np.testing.assert_allclose(ours_calls[-1], _to_numpy(x))


@pytest.mark.parametrize("solver", ["cg", "bicgstab", "gmres", "minres"])
def test_maxiter_reports_info(solver, backend_name):
    S = general(np.float64) if solver in ("bicgstab", "gmres") else hpd(np.float64)
    b = rhs(S.shape[0], np.float64)
    kwargs = {"restart": 2} if solver == "gmres" else {}
    x, info = getattr(sg.linalg, solver)(ours(S, backend_name), b, rtol=1e-14, maxiter=3, **kwargs)
    assert info == 3
    if solver != "gmres":  # gmres's inner iteration differs from scipy's; the others are scipy's
        want, want_info = getattr(spl, solver)(S, b, **{TOL: 1e-14}, maxiter=3)
        assert want_info == 3
        np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("solver", ["cg", "bicgstab", "gmres"])
def test_x0_exact_solution_needs_no_iteration(solver, backend_name):
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64)
    exact = np.linalg.solve(S.toarray(), b)
    calls, cb = _counter()
    x, info = getattr(sg.linalg, solver)(ours(S, backend_name), b, x0=exact, rtol=1e-6, callback=cb)
    assert info == 0
    assert len(calls) == 0
    np.testing.assert_allclose(x, exact, rtol=1e-12)


@pytest.mark.parametrize("solver", ["cg", "bicgstab", "gmres"])
def test_x0_starting_guess_is_used(solver, backend_name):
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64)
    x0 = rhs(S.shape[0], np.float64, seed=3)
    x, info = getattr(sg.linalg, solver)(ours(S, backend_name), b, x0=x0, rtol=1e-10)
    assert info == 0
    assert relative_residual(S, x, b) <= 1e-10
    assert not np.shares_memory(x, x0), "x0 is never overwritten"


@pytest.mark.parametrize("check_every", [1, 3, 1000])
def test_cg_check_every_does_not_change_the_answer(check_every, backend_name, xp):
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64, xp=xp)
    A = ours(S, backend_name)
    reference, _ = sg.linalg.cg(A, b, rtol=1e-9, check_every=1)
    x, info = sg.linalg.cg(A, b, rtol=1e-9, check_every=check_every)
    assert info == 0
    np.testing.assert_array_equal(_to_numpy(x), _to_numpy(reference))


def test_jacobi_preconditioner_cuts_iterations(backend_name):
    S = real_matrix("bcsstk13")
    b = rhs(S.shape[0], np.float64)
    plain, _ = _counter()
    preconditioned, _ = _counter()
    A = ours(S, backend_name)
    sg.linalg.cg(A, b, rtol=1e-6, maxiter=3000, callback=plain.append)
    _, info = sg.linalg.cg(A, b, rtol=1e-6, M=jacobi(S), callback=preconditioned.append)
    assert info == 0
    assert len(preconditioned) < len(plain) / 2


def test_zero_rhs_gives_zero_solution(backend_name):
    S = hpd(np.float64)
    for solver in (sg.linalg.cg, sg.linalg.bicgstab, sg.linalg.gmres, sg.linalg.minres):
        x, info = solver(ours(S, backend_name), np.zeros(S.shape[0]))
        assert info == 0 and not np.any(x)


# ------------------------------------------------------------------------- operators
@pytest.mark.parametrize(
    "wrap",
    [spl.aslinearoperator, lambda S: S.toarray(), lambda S: S],
    ids=["LinearOperator", "dense", "scipy-csr"],
)
def test_any_operator_with_matvec(wrap):
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64)
    x, info = sg.linalg.cg(wrap(S), b, rtol=1e-10)
    assert info == 0
    assert relative_residual(S, x, b) <= 1e-10


def test_preconditioner_as_linear_operator(backend_name):
    S = real_matrix("bcsstk13")
    b = rhs(S.shape[0], np.float64)
    d = 1 / S.diagonal()
    M = spl.LinearOperator(S.shape, matvec=lambda r: d * np.ravel(r), dtype=np.float64)
    x, info = sg.linalg.cg(ours(S, backend_name), b, rtol=1e-8, M=M)
    assert info == 0
    assert relative_residual(S, x, b) <= 1e-8


# ----------------------------------------------------------------------------- lsqr
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("damp", [0.0, 0.5], ids=["undamped", "damped"])
def test_lsqr_matches_scipy(backend_name, dtype, damp, xp):
    S = (random_sparse((90, 60), 0.1, 3, dtype) + sp.eye(90, 60, dtype=dtype)).tocsr()
    b = rhs(90, dtype, xp=xp)
    got = sg.linalg.lsqr(ours(S, backend_name), b, damp=damp, atol=1e-12, btol=1e-12)
    want = spl.lsqr(S, _to_numpy(b), damp=damp, atol=1e-12, btol=1e-12)
    assert len(got) == 10
    assert type(got[0]) is type(b)
    assert got[1] == want[1]
    # the stopping test sits near machine precision: rounding may move it by an iteration
    assert abs(got[2] - want[2]) <= 2
    np.testing.assert_allclose(_to_numpy(got[0]), want[0], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(got[3:5], want[3:5], rtol=1e-6)  # r1norm, r2norm


def test_lsqr_x0_and_calc_var(backend_name):
    S = (random_sparse((90, 60), 0.1, 3, np.float64) + sp.eye(90, 60)).tocsr()
    b = rhs(90, np.float64)
    x0 = rhs(60, np.float64, seed=9)
    got = sg.linalg.lsqr(ours(S, backend_name), b, x0=x0, calc_var=True, atol=1e-12, btol=1e-12)
    want = spl.lsqr(S, b, x0=x0, calc_var=True, atol=1e-12, btol=1e-12)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-8)
    # var sums ||d_k||^2 over the iterations: a last iteration at the rounding level moves it
    np.testing.assert_allclose(got[9], want[9], rtol=5e-2)


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("solver", ["cg", "bicgstab", "gmres", "minres"])
def test_non_square_is_refused(solver):
    S = sg.csr_matrix(random_sparse((5, 4), 0.5, 0, np.float64))
    with pytest.raises(ValueError, match=r"square matrix, got shape \(5, 4\).*lsqr"):
        getattr(sg.linalg, solver)(S, np.ones(5))


def test_bad_rhs_shape_is_refused():
    S = sg.csr_matrix(hpd(np.float64))
    with pytest.raises(ValueError, match=r"b has shape \(3,\); b must have shape \(144,\)"):
        sg.linalg.cg(S, np.ones(3))


def test_bad_x0_shape_is_refused():
    S = sg.csr_matrix(hpd(np.float64))
    with pytest.raises(ValueError, match=r"x0 has shape \(7,\)"):
        sg.linalg.bicgstab(S, np.ones(144), x0=np.ones(7))


def test_bad_preconditioner_shape_is_refused():
    S = sg.csr_matrix(hpd(np.float64))
    with pytest.raises(ValueError, match=r"preconditioner M has shape \(3, 3\)"):
        sg.linalg.cg(S, np.ones(144), M=sp.identity(3))


def test_non_numeric_rhs_is_refused():
    S = sg.csr_matrix(hpd(np.float64))
    with pytest.raises(TypeError, match="real or complex numbers, got dtype <U1"):
        sg.linalg.cg(S, np.array(["a"] * 144))


@pytest.mark.parametrize("maxiter", [-1, 2.5, "10"])
def test_bad_maxiter_is_refused(maxiter):
    S = sg.csr_matrix(hpd(np.float64))
    with pytest.raises(ValueError, match="maxiter must be a non-negative integer"):
        sg.linalg.cg(S, np.ones(144), maxiter=maxiter)


@pytest.mark.parametrize("check_every", [0, -3, 1.5])
def test_bad_check_every_is_refused(check_every):
    S = sg.csr_matrix(hpd(np.float64))
    with pytest.raises(ValueError, match="check_every must be a positive integer"):
        sg.linalg.cg(S, np.ones(144), check_every=check_every)


@pytest.mark.parametrize("rtol", [-1.0, np.nan])
def test_bad_tolerance_is_refused(rtol):
    S = sg.csr_matrix(hpd(np.float64))
    with pytest.raises(ValueError, match="rtol must be a finite number >= 0"):
        sg.linalg.cg(S, np.ones(144), rtol=rtol)


def test_lsqr_needs_an_adjoint():
    S = random_sparse((9, 6), 0.5, 0, np.float64)
    op = spl.LinearOperator(S.shape, matvec=lambda v: S @ v, dtype=np.float64)
    with pytest.raises((TypeError, NotImplementedError), match="rmatvec"):
        sg.linalg.lsqr(op, np.ones(9))


@pytest.mark.parametrize("space", ["ArraySpace", "DistributedSpace"])
def test_both_vector_spaces_implement_the_protocol(space):
    """The solvers run over ``linalg._space.VectorSpace``; each space defines every one of
    its methods itself (an inherited stub would answer None), with the protocol's
    parameters."""
    from sparsegpu.distributed._space import DistributedSpace
    from sparsegpu.linalg._space import ARRAYS, ArraySpace, VectorSpace

    cls = {"ArraySpace": ArraySpace, "DistributedSpace": DistributedSpace}[space]
    assert isinstance(ARRAYS, VectorSpace) and issubclass(cls, VectorSpace)
    methods = [name for name in vars(VectorSpace) if not name.startswith("_")]
    assert len(methods) == 9
    for name in methods:
        assert name in vars(cls), f"{space} does not define {name}"
        expected = inspect.signature(getattr(VectorSpace, name)).parameters
        assert inspect.signature(getattr(cls, name)).parameters.keys() == expected.keys(), name
