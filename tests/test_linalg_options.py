"""The solvers' ``graphs=`` and ``reorder=`` options and ``last_solve_info``: the same
answers with or without them, on every backend; graphs ignored (with the reason) where
there is nothing to capture; on a GPU, graphs change neither x nor the iteration count."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import sparsegpu as sg
from sparsegpu.datasets.synthetic import stencil_2d
from sparsegpu.linalg import _options as linalg_options

from .test_linalg import TOL, _to_numpy, general, hpd, jacobi, ours, relative_residual, rhs

SOLVERS = ["cg", "bicgstab", "gmres", "minres"]


def scrambled(S, seed=0):
    """S with its rows and columns numbered in random order (a badly numbered mesh)."""
    perm = np.random.default_rng(seed).permutation(S.shape[0])
    return sp.csr_matrix(S)[perm][:, perm].tocsr()


def solve(solver, A, b, **options):
    if solver == "minres":
        options.pop("atol", None)
    return getattr(sg.linalg, solver)(A, b, **options)


CUSPARSE_REASON = (
    "backend 'cusparse' cannot be captured (CuPy refuses cuSPARSE calls during stream capture)"
)


def assert_captured(used, backend_name):
    """Graphs were used, or (cuSPARSE, texture: not capturable) the solve fell back to the
    plain loop and said why."""
    if sg.engine._registry.registered()[backend_name].capturable:
        assert used.graphs, used.graphs_reason
    else:
        assert not used.graphs, used.graphs_reason
        assert used.graphs_reason.startswith(f"backend {backend_name!r} cannot be captured (")


# ----------------------------------------------------------------------------- reorder
@pytest.mark.parametrize("cls", [sg.csr_matrix, sg.csr_array, sg.csc_matrix])
def test_reorder_returns_the_permuted_matrix_of_the_same_class(cls):
    S = scrambled(stencil_2d(12))
    A = cls(S)
    A.backend = "scipy"
    B, perm = sg.reorder(A)
    assert type(B) is cls and B.backend == "scipy"
    assert np.array_equal(np.sort(perm), np.arange(S.shape[0]))
    assert (sp.csr_matrix(B) != S[perm][:, perm]).nnz == 0


def bandwidth(S):
    coo = sp.coo_matrix(S)
    return int(np.abs(coo.row - coo.col).max())


def test_reorder_brings_a_scrambled_mesh_back_to_a_band():
    S = scrambled(stencil_2d(30))
    B, _ = sg.reorder(sg.csr_matrix(S))
    assert bandwidth(B) <= 2 * 30 < bandwidth(S) / 4


def test_reorder_symmetrizes_a_nonsymmetric_pattern():
    S = general(np.float64)
    B, perm = sg.reorder(sg.csr_matrix(S))
    assert (sp.csr_matrix(B) != S[perm][:, perm]).nnz == 0


@pytest.mark.parametrize(
    "A,method,error",
    [(sp.random(4, 5, density=0.5, random_state=0), "rcm", "square"), (sp.eye(4), "amd", "rcm")],
    ids=["rectangular", "unknown-method"],
)
def test_reorder_refuses(A, method, error):
    with pytest.raises(ValueError, match=error):
        sg.reorder(sg.csr_matrix(A), method)


@pytest.mark.parametrize("reorder", ["rcm", "auto", None])
@pytest.mark.parametrize("solver", SOLVERS)
def test_reordered_solve_gives_the_same_answer(solver, reorder, backend_name, xp, monkeypatch):
    monkeypatch.setattr(linalg_options, "ORDERING_S_PER_NONZERO", 0.0)  # auto: at once
    S = scrambled(hpd(np.float64))
    b = rhs(S.shape[0], np.float64, xp=xp)
    plain, info_plain = solve(solver, ours(S, backend_name), b, rtol=1e-10)
    x, info = solve(solver, ours(S, backend_name), b, rtol=1e-10, reorder=reorder)
    assert type(x) is type(b)
    assert info == info_plain == 0
    assert relative_residual(S, x, b) <= 1e-8
    np.testing.assert_allclose(_to_numpy(x), _to_numpy(plain), rtol=1e-6, atol=1e-8)
    used = sg.linalg.last_solve_info()
    assert used.solver == solver
    assert used.reorder == (None if reorder is None else "rcm"), used.reorder_reason


class _Clock:
    """``time.perf_counter`` ticking a second a call: a solve (one call at its start, one
    at its end) lasts one second."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


def test_auto_reorders_once_the_time_spent_unordered_reaches_the_orderings_cost(monkeypatch):
    """Ski rental (issue 33): a matrix solved once is never reordered; one solved again and
    again is reordered once its unordered solves have cost what the ordering would."""
    S = scrambled(hpd(np.float64))
    monkeypatch.setattr(linalg_options, "time", _Clock())
    monkeypatch.setattr(linalg_options, "ORDERING_S_PER_NONZERO", 2.5 / S.nnz)
    A, b = ours(S, "scipy"), rhs(S.shape[0], np.float64)
    seen = []
    for _ in range(5):
        x, info = sg.linalg.cg(A, b, rtol=1e-10, reorder="auto")
        assert info == 0 and relative_residual(S, x, b) <= 1e-8
        used = sg.linalg.last_solve_info()
        seen.append((used.reorder, used.unordered_s))
        assert used.ordering_estimate_s == pytest.approx(2.5)
    assert seen == [(None, 0.0), (None, 1.0), (None, 2.0), ("rcm", 3.0), ("rcm", 3.0)]
    assert "earlier solve is kept" in used.reorder_reason
    A.data = A.data * 2.0  # another matrix: nothing spent on it yet
    sg.linalg.cg(A, b, reorder="auto")
    used = sg.linalg.last_solve_info()
    assert used.reorder is None and used.unordered_s == 0.0
    assert "0 s spent solving A unordered < the ordering's estimated 2.5 s" in used.reorder_reason


def test_auto_computes_the_column_spread_once_a_matrix(monkeypatch):
    calls = []
    original = linalg_options.RowLengthStats.from_indptr
    monkeypatch.setattr(
        linalg_options.RowLengthStats,
        "from_indptr",
        lambda *a, **k: calls.append(1) or original(*a, **k),
    )
    S = scrambled(hpd(np.float64))
    A, b = ours(S, "scipy"), rhs(S.shape[0], np.float64)
    for _ in range(3):
        sg.linalg.cg(A, b, reorder="auto")
    assert len(calls) == 1
    A.data = A.data * 2.0  # another matrix
    sg.linalg.cg(A, b, reorder="auto")
    assert len(calls) == 2


def test_auto_keeps_a_well_numbered_matrix(backend_name):
    S = sp.csr_matrix(stencil_2d(12)) + sp.identity(144, format="csr")
    sg.linalg.cg(ours(S, backend_name), rhs(S.shape[0], np.float64), reorder="auto")
    used = sg.linalg.last_solve_info()
    assert used.reorder is None and "not reordered" in used.reorder_reason


@pytest.mark.parametrize("as_operator", [False, True], ids=["M-matrix", "M-operator"])
def test_reorder_permutes_x0_and_the_preconditioner_alike(as_operator, backend_name):
    S = scrambled(hpd(np.float64, n=16))
    b = rhs(S.shape[0], np.float64)
    M = ours(jacobi(S), backend_name) if not as_operator else spl.aslinearoperator(jacobi(S))
    x0 = np.linspace(0, 1, S.shape[0])
    want, _ = sg.linalg.cg(ours(S, backend_name), b, x0=x0, M=M, rtol=1e-10)
    calls = []
    x, info = sg.linalg.cg(ours(S, backend_name), b, x0=x0, M=M, rtol=1e-10, reorder="rcm",
                           callback=lambda xk: calls.append(_to_numpy(xk).copy()))  # fmt: skip
    assert info == 0
    np.testing.assert_allclose(x, want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(calls[-1], x, rtol=0, atol=0)  # the callback sees x as returned


def test_lsqr_leaves_a_rectangular_matrix_in_order(backend_name):
    S = sp.random(30, 20, density=0.3, random_state=1, format="csr") + sp.eye(30, 20)
    b = rhs(30, np.float64)
    x = sg.linalg.lsqr(ours(S.tocsr(), backend_name), b, reorder="auto")[0]
    want = spl.lsqr(S, b)[0]
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-7)
    assert "not square" in sg.linalg.last_solve_info().reorder_reason


def test_lsqr_reorders_a_square_matrix(backend_name):
    S = scrambled(general(np.float64))
    b = rhs(S.shape[0], np.float64)
    x = sg.linalg.lsqr(ours(S, backend_name), b, atol=1e-12, btol=1e-12, reorder="rcm")[0]
    assert relative_residual(S, x, b) <= 1e-8
    assert sg.linalg.last_solve_info().reorder == "rcm"


def test_the_permutation_is_made_once_per_matrix(backend_name, monkeypatch):
    from sparsegpu.classes import _reorder
    from sparsegpu.linalg import _options

    A = ours(scrambled(hpd(np.float64)), backend_name)
    made = []
    real = _reorder.reorder
    monkeypatch.setattr(_reorder, "reorder", lambda *a, **k: made.append(1) or real(*a, **k))
    orderings = []
    real_ordering = _options.Ordering.__init__

    def counted(self, perm):
        orderings.append(perm is not None)
        real_ordering(self, perm)

    monkeypatch.setattr(_options.Ordering, "__init__", counted)
    for seed in range(3):
        sg.linalg.cg(A, rhs(A.shape[0], np.float64, seed=seed), reorder="rcm")
    assert len(made) == 1
    assert sum(orderings) == 1  # its inverse and device copies are kept with it


@pytest.mark.parametrize("solver", SOLVERS)
def test_hermitian_solvers_order_without_symmetrizing(solver, monkeypatch):
    from sparsegpu.classes import _reorder

    S = scrambled(hpd(np.float64))
    S.sort_indices()
    asked = []
    real = _reorder.rcm_permutation

    def recording(A, symmetric=False):
        asked.append(symmetric)
        return real(A, symmetric)

    monkeypatch.setattr(_reorder, "rcm_permutation", recording)
    getattr(sg.linalg, solver)(sg.csr_matrix(S), rhs(S.shape[0], np.float64), reorder="rcm")
    assert asked == [solver in ("cg", "minres")]
    # a symmetric pattern with sorted indices: the same ordering either way
    np.testing.assert_array_equal(real(S, symmetric=True), real(S))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
@pytest.mark.parametrize("kind", ["mesh", "empty-rows"])
def test_large_matrices_are_permuted_on_the_device(cupy, monkeypatch, kind, dtype, index_dtype):
    from sparsegpu.classes import _reorder
    from sparsegpu.testing import random_sparse

    if kind == "mesh":
        S = scrambled(hpd(dtype))
    else:  # a few empty rows and columns, nonzeros anywhere
        S = random_sparse((150, 150), 0.01, 3, dtype).tocsr()
        assert (np.diff(S.indptr) == 0).any()
    S.indices, S.indptr = S.indices.astype(index_dtype), S.indptr.astype(index_dtype)
    perm = _reorder.rcm_permutation(S)
    on_host = S[perm][:, perm]
    monkeypatch.setattr(_reorder, "DEVICE_PERMUTE_MIN_NNZ", 0)
    used = []
    real = _reorder._permuted_on_device
    monkeypatch.setattr(_reorder, "_permuted_on_device",
                        lambda *a: used.append(1) or real(*a))  # fmt: skip
    B = _reorder.permute(sg.csr_matrix(S), perm)
    assert used == [1]
    assert isinstance(B, sg.csr_matrix) and B.dtype == dtype and B.shape == S.shape
    assert B.has_sorted_indices and B.nnz == on_host.nnz
    assert (sp.csr_matrix(B) != on_host).nnz == 0


def test_rcm_needs_a_sparsegpu_matrix_and_auto_skips_operators():
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64)
    with pytest.raises(TypeError, match="sparsegpu matrix"):
        sg.linalg.cg(spl.aslinearoperator(S), b, reorder="rcm")
    x, info = sg.linalg.cg(spl.aslinearoperator(S), b, reorder="auto")
    assert info == 0 and sg.linalg.last_solve_info().reorder is None


@pytest.mark.parametrize("solver", [*SOLVERS, "lsqr"])
@pytest.mark.parametrize("bad", [{"reorder": "amd"}, {"graphs": "yes"}, {"graphs": 2}],
                         ids=["reorder", "graphs-str", "graphs-int"])  # fmt: skip
def test_bad_options_are_refused(solver, bad):
    S = hpd(np.float64)
    with pytest.raises(ValueError, match=next(iter(bad))):
        getattr(sg.linalg, solver)(sg.csr_matrix(S), rhs(S.shape[0], np.float64), **bad)


# ------------------------------------------------------------------------------ graphs
@pytest.mark.parametrize("graphs", [True, False, "auto"])
@pytest.mark.parametrize("solver", [*SOLVERS, "lsqr"])
def test_graphs_accepted_everywhere_same_answer(solver, graphs, backend_name, xp):
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64, xp=xp)
    run = getattr(sg.linalg, solver)
    kw = {} if solver == "lsqr" else {"rtol": 1e-10}
    want = run(ours(S, backend_name), b, graphs=False, **kw)
    got = run(ours(S, backend_name), b, graphs=graphs, **kw)
    np.testing.assert_allclose(_to_numpy(got[0]), _to_numpy(want[0]), rtol=1e-12, atol=1e-14)
    used = sg.linalg.last_solve_info()
    assert used.graphs_reason, "a solve says why it did or did not capture"
    if graphs is False:
        assert used.graphs is False and used.graphs_reason == "graphs=False"


def test_graphs_ignored_on_the_host(backend_name):
    if sg.engine._registry.registered()[backend_name].residence.xp is not np:
        pytest.skip("a GPU backend: graphs apply")
    S = hpd(np.float64)
    sg.linalg.cg(ours(S, backend_name), rhs(S.shape[0], np.float64), graphs=True)
    used = sg.linalg.last_solve_info()
    assert used.graphs is False and "nothing to capture" in used.graphs_reason


# what each solver is given in the graph tests: cg a Hermitian positive definite matrix,
# bicgstab a general one; cg's check_every is its block size under graphs
GRAPH_CASES = [
    ("cg", {}), ("cg", {"check_every": 1}), ("cg", {"check_every": 5}),
    ("bicgstab", {}), ("bicgstab", {"maxiter": 3}), ("bicgstab", {"maxiter": 15}),
    ("minres", {}), ("minres", {"maxiter": 4}), ("minres", {"maxiter": 20}),
    ("minres", {"shift": 2.5}),
    ("gmres", {"restart": 4}), ("gmres", {"restart": 3, "maxiter": 3}), ("gmres", {"restart": 9}),
]  # fmt: skip


def graph_problem(solver, dtype, n):
    return (general if solver in ("bicgstab", "gmres") else hpd)(dtype, n=n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128],
                         ids=["float32", "float64", "complex128"])  # fmt: skip
@pytest.mark.parametrize("solver,options", GRAPH_CASES, ids=lambda c: str(c))
def test_graphs_change_neither_x_nor_the_iteration_count(
    gpu_backend_name, cupy, dtype, solver, options
):
    S = graph_problem(solver, dtype, 20)
    b = rhs(S.shape[0], dtype, xp=cupy)
    rtol = 1e-4 if np.dtype(dtype).char in "fF" else 1e-10
    run = getattr(sg.linalg, solver)
    plain, info_plain = run(ours(S, gpu_backend_name), b, graphs=False, rtol=rtol, **options)
    plain_used = sg.linalg.last_solve_info()
    x, info = run(ours(S, gpu_backend_name), b, graphs=True, rtol=rtol, **options)
    used = sg.linalg.last_solve_info()
    assert_captured(used, gpu_backend_name)
    assert info == info_plain and info in (0, options.get("maxiter"))
    assert used.iterations == plain_used.iterations > 1
    assert cupy.array_equal(x, plain)


@pytest.mark.parametrize("maxiter", [3, 17, 40])
def test_cg_graphs_stop_at_maxiter_like_plain(gpu_backend_name, cupy, maxiter):
    S = hpd(np.float64, n=24)
    b = rhs(S.shape[0], np.float64, xp=cupy)
    plain, info_plain = sg.linalg.cg(ours(S, gpu_backend_name), b, rtol=1e-14, maxiter=maxiter,
                                     graphs=False)  # fmt: skip
    count = sg.linalg.last_solve_info().iterations
    x, info = sg.linalg.cg(ours(S, gpu_backend_name), b, rtol=1e-14, maxiter=maxiter)
    assert info == info_plain == maxiter
    assert sg.linalg.last_solve_info().iterations == count == maxiter
    assert cupy.array_equal(x, plain)


@pytest.mark.parametrize("solver", ["cg", "bicgstab", "minres", "gmres"])
def test_graphs_hold_a_sparsegpu_preconditioner(gpu_backend_name, cupy, solver):
    # a real system for cg; bicgstab takes thousands of iterations on bcsstk13
    if solver == "cg":
        S = sp.csr_matrix(sg.datasets.load("bcsstk13"))
    else:
        S = graph_problem(solver, np.float64, 20)
    b = rhs(S.shape[0], np.float64, xp=cupy)
    M = ours(jacobi(S), gpu_backend_name)
    run = getattr(sg.linalg, solver)
    if solver == "gmres":
        run = functools.partial(run, restart=5, graphs=True)  # not auto's rate-based choice
    plain, _ = run(ours(S, gpu_backend_name), b, rtol=1e-8, M=M, graphs=False)
    x, info = run(ours(S, gpu_backend_name), b, rtol=1e-8, M=M)
    assert_captured(sg.linalg.last_solve_info(), gpu_backend_name)
    assert info == 0 and cupy.array_equal(x, plain)


@pytest.mark.parametrize(
    "options,reason",
    [
        ({"callback": lambda xk: None}, "callback"),
        ({"M": "operator"}, "preconditioner"),
        ({"graphs": False}, "graphs=False"),
    ],
    ids=["callback", "M-operator", "off"],
)
def test_cg_says_why_it_did_not_capture(gpu_backend_name, cupy, options, reason):
    S = hpd(np.float64)
    if options.get("M") == "operator":
        options = {"M": spl.aslinearoperator(jacobi(S))}
    x, info = sg.linalg.cg(ours(S, gpu_backend_name), rhs(S.shape[0], np.float64, xp=cupy),
                           **options)  # fmt: skip
    used = sg.linalg.last_solve_info()
    assert info == 0 and not used.graphs and reason in used.graphs_reason


def test_cg_graphs_with_numpy_operands_on_a_gpu_backend(gpu_backend_name, cupy):
    S = hpd(np.float64, n=20)
    b = rhs(S.shape[0], np.float64)
    x, info = sg.linalg.cg(ours(S, gpu_backend_name), b, rtol=1e-10)
    assert isinstance(x, np.ndarray) and info == 0
    assert_captured(sg.linalg.last_solve_info(), gpu_backend_name)
    assert relative_residual(S, x, b) <= 1e-10


def test_auto_plans_among_capturable_backends_for_graphs(cupy):
    # bcsstk13 (condition ~1e10) with Jacobi: unpreconditioned cg needs more than 10 n
    S = sp.csr_matrix(sg.datasets.load("bcsstk13"))
    b = rhs(S.shape[0], np.float64, xp=cupy)
    M = sg.csr_matrix(jacobi(S))
    x, info = sg.linalg.cg(sg.csr_matrix(S), b, rtol=1e-8, M=M)
    used = sg.linalg.last_solve_info()
    assert info == 0 and used.graphs, used.graphs_reason


def lsqr_problem(dtype, m=60, n=40):
    S = (sp.random(m, n, density=0.2, random_state=1, format="csr") + sp.eye(m, n)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        S = (S + 1j * sp.random(m, n, density=0.2, random_state=2, format="csr")).astype(dtype)
    return S.tocsr(), rhs(m, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128],
                         ids=["float32", "float64", "complex128"])  # fmt: skip
@pytest.mark.parametrize("options", [{}, {"iter_lim": 4}, {"damp": 0.5, "calc_var": True}],
                         ids=str)  # fmt: skip
def test_lsqr_graphs_change_nothing(gpu_backend_name, cupy, dtype, options):
    S, b = lsqr_problem(dtype)
    b = cupy.asarray(b)
    plain = sg.linalg.lsqr(ours(S, gpu_backend_name), b, graphs=False, **options)
    got = sg.linalg.lsqr(ours(S, gpu_backend_name), b, graphs=True, **options)
    assert_captured(sg.linalg.last_solve_info(), gpu_backend_name)
    assert got[1:9] == plain[1:9] and plain[2] > 1
    assert cupy.array_equal(got[0], plain[0]) and cupy.array_equal(got[9], plain[9])


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=["float32", "complex64"])
def test_gmres_cycle_kernels_in_every_dtype(gpu_backend_name, cupy, dtype):
    S = graph_problem("gmres", dtype, 20)
    b = rhs(S.shape[0], dtype, xp=cupy)
    plain, info_plain = sg.linalg.gmres(ours(S, gpu_backend_name), b, rtol=1e-4, restart=4,
                                        graphs=False)  # fmt: skip
    count = sg.linalg.last_solve_info().iterations
    x, info = sg.linalg.gmres(ours(S, gpu_backend_name), b, rtol=1e-4, restart=4, graphs=True)
    used = sg.linalg.last_solve_info()
    assert_captured(used, gpu_backend_name)
    assert info == info_plain == 0 and used.iterations == count > 4
    assert cupy.array_equal(x, plain)
    assert relative_residual(S, x, b) <= 1e-4


def test_gmres_x_callback_keeps_the_graph(gpu_backend_name, cupy):
    """callback_type="x" is called between cycles, so cycles are still replayed as graphs;
    it sees the same x after each cycle either way."""
    S = graph_problem("gmres", np.float64, 20)
    b = rhs(S.shape[0], np.float64, xp=cupy)
    seen = {}
    for graphs in (False, True):
        calls = []
        x, info = sg.linalg.gmres(ours(S, gpu_backend_name), b, rtol=1e-10, restart=4,
                                  callback=lambda xk, calls=calls: calls.append(xk.copy()),
                                  callback_type="x",
                                  graphs=graphs)  # fmt: skip
        seen[graphs] = (x, info, calls, sg.linalg.last_solve_info())
    assert_captured(seen[True][3], gpu_backend_name)
    assert seen[True][1] == seen[False][1] == 0
    assert len(seen[True][2]) == len(seen[False][2]) > 2
    for got, want in zip(seen[True][2], seen[False][2], strict=True):
        assert cupy.array_equal(got, want)
    assert cupy.array_equal(seen[True][0], seen[False][0])


def test_gmres_per_iteration_callback_runs_without_graphs(gpu_backend_name, cupy):
    S = graph_problem("gmres", np.float64, 20)
    b = rhs(S.shape[0], np.float64, xp=cupy)
    estimates = []
    x, info = sg.linalg.gmres(ours(S, gpu_backend_name), b, rtol=1e-10, restart=4,
                              callback=estimates.append, callback_type="pr_norm")  # fmt: skip
    used = sg.linalg.last_solve_info()
    assert info == 0 and not used.graphs and "callback" in used.graphs_reason
    assert len(estimates) == used.iterations
    assert estimates[-1] < 1e-10 <= estimates[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128],
                         ids=lambda d: np.dtype(d).name)  # fmt: skip
@pytest.mark.parametrize("n", [1, 255, 256, 257, 70_000])
def test_multi_dot_rows_are_bitwise_the_dot_of_each_row(cupy, dtype, n):
    """kernels/dot.cu: multi_dot_partial/final give each row the sum dot_partial/final give
    it alone (GMRES's Gram-Schmidt relies on the one fixed order of additions)."""
    from sparsegpu.device._compile import get_kernel
    from sparsegpu.device._launch import KernelLaunch, name_expression
    from sparsegpu.linalg._vector import DOT_BLOCK, DOT_MAX_BLOCKS, _Dot

    rng = np.random.default_rng(n)
    m, ld = 5, n + 3
    host = rng.standard_normal((m, ld)) + (
        1j * rng.standard_normal((m, ld)) if np.dtype(dtype).kind == "c" else 0
    )
    basis = cupy.asarray(host.astype(dtype))
    w = cupy.asarray(rhs(n, dtype, seed=n))
    blocks = max(1, min(DOT_MAX_BLOCKS, -(-n // DOT_BLOCK)))
    partial = cupy.empty(m * blocks, dtype=dtype)
    out = cupy.empty(m, dtype=dtype)
    kernel = lambda name: get_kernel("dot.cu", name_expression(name, dtype))  # noqa: E731
    KernelLaunch(kernel("multi_dot_partial"), DOT_BLOCK, (basis, ld, w, n, blocks, partial))(
        m * blocks
    )
    KernelLaunch(kernel("multi_dot_final"), DOT_BLOCK, (partial, blocks, out))(m)
    dot = _Dot(cupy, dtype)
    for k in range(m):
        row = cupy.ascontiguousarray(basis[k, :n])
        assert out[k].item() == dot(row, w).item()
    want = np.conj(host[:, :n].astype(dtype)) @ cupy.asnumpy(w)
    np.testing.assert_allclose(
        cupy.asnumpy(out), want, rtol=1e-4 if np.dtype(dtype).char in "fF" else 1e-12
    )


# ------------------------------------------- the block bookkeeping, replayed on the host
class ReplayOnHost:
    """Stands in for a captured graph: ``launch`` runs the step ``size`` times."""

    failure = None

    def __init__(self, step, size, stream):
        self.step, self.size = step, size

    def launch(self):
        for _ in range(self.size):
            self.step()


class FailedCapture(ReplayOnHost):
    failure = "capture failed (RuntimeError: stand-in)"


@pytest.fixture
def host_graphs(monkeypatch):
    """cg's graph path on NumPy operands: the capture replaced by a host replay, so CI
    checks which iterations run, the flag reads and the fallbacks."""
    from contextlib import nullcontext

    from sparsegpu.linalg import _graphs, _options

    monkeypatch.setattr(_options, "graph_refusal", lambda *args: None)
    monkeypatch.setattr(_graphs, "private_stream", lambda: nullcontext())

    def use(block_class):
        monkeypatch.setattr(_graphs, "Block", block_class)

    return use


HOST_CASES = [
    *[("cg", {"check_every": c}) for c in (None, 1, 5)],
    *[
        (solver, {"M": M})
        for solver in ("bicgstab", "minres")
        for M in (None, "matrix", "operator")
    ],
    ("minres", {"shift": 2.5}),
]


@pytest.mark.parametrize("maxiter", [None, 1, 2, 3, 17, 40])
@pytest.mark.parametrize("solver,options", HOST_CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("block_class", [ReplayOnHost, FailedCapture], ids=["replay", "failed"])
def test_blocks_give_the_plain_answer(host_graphs, block_class, solver, options, maxiter):
    host_graphs(block_class)
    S = graph_problem(solver, np.float64, 16)
    b = rhs(S.shape[0], np.float64)
    options = {"rtol": 1e-12, "maxiter": maxiter, **options}
    if options.get("M") is not None:
        M = jacobi(S)
        options["M"] = ours(M, "scipy") if options["M"] == "matrix" else spl.aslinearoperator(M)
    run = getattr(sg.linalg, solver)
    # on the scipy backend: the block bookkeeping on NumPy operands, on every machine (on a
    # GPU, auto may plan another backend for a solve without graphs, a rounding apart)
    plain, info_plain = run(ours(S, "scipy"), b, graphs=False, **options)
    count = sg.linalg.last_solve_info().iterations
    x, info = run(ours(S, "scipy"), b, **options)
    used = sg.linalg.last_solve_info()
    assert info == info_plain
    assert used.iterations == count
    np.testing.assert_array_equal(x, plain)
    if block_class is ReplayOnHost and maxiter in (None, 40) and not options.get("check_every"):
        assert used.graphs and used.block == (15 if solver == "minres" else 16)
    too_few = maxiter in (1, 2) or (solver == "minres" and maxiter == 3)
    if block_class is FailedCapture and not too_few:
        assert not used.graphs and used.graphs_reason == FailedCapture.failure


class FakeStream:
    def __init__(self, fail_begin=False):
        self.fail_begin, self.ended = fail_begin, False

    def begin_capture(self):
        if self.fail_begin:
            raise RuntimeError("no stream capture here")

    def end_capture(self):
        self.ended = True
        return "graph"


def test_block_records_why_a_capture_failed():
    from sparsegpu.linalg._graphs import Block

    def allocating_step():
        raise MemoryError("allocation during capture")

    stream = FakeStream()
    block = Block(allocating_step, 4, stream)
    assert stream.ended, "a failed capture is still ended"
    assert block.failure == "capture failed (MemoryError: allocation during capture)"
    unavailable = Block(lambda: None, 4, FakeStream(fail_begin=True))
    assert unavailable.failure == "stream capture unavailable: no stream capture here"
    steps = []
    captured = Block(lambda: steps.append(1), 3, FakeStream())
    assert captured.failure is None and len(steps) == 3


def test_no_collection_during_a_capture():
    import gc

    from sparsegpu.linalg._graphs import Block

    seen = []
    Block(lambda: seen.append(gc.isenabled()), 2, FakeStream())
    assert seen == [False, False] and gc.isenabled()


def test_bicgstab_breakdown_in_a_block_is_reported_like_plain(host_graphs):
    """rho vanishes at the first iteration's top (-10) and omega inside a block (-11):
    the status the host reads between blocks gives scipy's codes."""
    host_graphs(ReplayOnHost)
    b = np.array([1.0, 0.0])
    rotation = sg.csr_matrix(sp.csr_matrix(np.array([[0.0, 1.0], [-1.0, 0.0]])))
    want_x, want = spl.bicgstab(sp.csr_matrix(rotation.toarray()), b, maxiter=40)
    x, info = sg.linalg.bicgstab(rotation, b, maxiter=40)
    assert info == want != 0
    np.testing.assert_allclose(x, want_x)


def test_bicgstab_counts_the_iterations_scipy_runs():
    S = general(np.float64, n=16)
    b = rhs(S.shape[0], np.float64)
    seen = []
    x, info = sg.linalg.bicgstab(sg.csr_matrix(S), b, rtol=1e-10,
                                 callback=lambda xk: seen.append(1))  # fmt: skip
    used = sg.linalg.last_solve_info()
    assert info == 0 and used.iterations in (len(seen), len(seen) + 1)


def test_a_backend_that_cannot_be_captured_is_said(host_graphs, monkeypatch):
    """A's plan on a backend without capture (cuSPARSE on a GPU): the plain loop, and why."""
    host_graphs(ReplayOnHost)
    backend = sg.engine._registry.registered()["host-copy"]
    monkeypatch.setattr(backend, "capturable", False)
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64)
    for solver in ("cg", "bicgstab"):
        plain = solve(solver, ours(S, "scipy"), b, rtol=1e-10)[0]
        x, info = solve(solver, ours(S, "host-copy"), b, rtol=1e-10)
        used = sg.linalg.last_solve_info()
        assert info == 0 and not used.graphs
        assert used.graphs_reason == "backend 'host-copy' cannot be captured"
        np.testing.assert_allclose(x, plain, rtol=1e-12)
    M = ours(jacobi(S), "host-copy")
    sg.linalg.cg(ours(S, "scipy"), b, M=M)
    reason = sg.linalg.last_solve_info().graphs_reason
    assert reason == "the preconditioner's backend 'host-copy' cannot be captured"


def test_cusparse_reason_names_cupys_refusal():
    from types import SimpleNamespace

    from sparsegpu.linalg import _options

    cusparse = SimpleNamespace(backend="cusparse", capturable=False)
    ok = SimpleNamespace(backend="merge_path", capturable=True)
    assert _options.backend_refusal((("", ok), ("M ", None))) is None
    assert _options.backend_refusal((("", cusparse),)) == CUSPARSE_REASON
    assert not sg.engine._registry.registered()["cusparse"].capturable


@pytest.mark.parametrize("graphs", [False, "auto"])
def test_minres_stops_on_an_indefinite_preconditioner_inside_a_block(host_graphs, graphs):
    """(r2, M r2) < 0 some iterations in: scipy's error, found by the host between blocks."""
    host_graphs(ReplayOnHost)
    S = hpd(np.float64)
    n = S.shape[0]
    M = sg.csr_matrix(sp.diags(np.where(np.arange(n) < 0.8 * n, 1.0, -1.0)).tocsr())
    with pytest.raises(ValueError, match="does not define a Hermitian"):
        sg.linalg.minres(sg.csr_matrix(S), np.ones(n), M=M, graphs=graphs)


def test_minres_counts_scipys_iterations_and_calls_back_after_the_last():
    S = hpd(np.float64)
    b = rhs(S.shape[0], np.float64)
    seen, theirs = [], []
    sg.linalg.minres(sg.csr_matrix(S), b, rtol=1e-10, callback=lambda xk: seen.append(1))
    spl.minres(S, b, **{TOL: 1e-10}, callback=lambda xk: theirs.append(1))
    assert sg.linalg.last_solve_info().iterations == len(seen) == len(theirs)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("iter_lim", [None, 1, 2, 3, 17, 40])
@pytest.mark.parametrize("options", [{}, {"damp": 0.5, "calc_var": True}], ids=str)
@pytest.mark.parametrize("block_class", [ReplayOnHost, FailedCapture], ids=["replay", "failed"])
def test_lsqr_blocks_give_the_plain_answer(host_graphs, block_class, options, iter_lim, dtype):
    host_graphs(block_class)
    S, b = lsqr_problem(dtype)
    options = {"atol": 1e-12, "btol": 1e-12, "iter_lim": iter_lim, **options}
    plain = sg.linalg.lsqr(ours(S, "scipy"), b, graphs=False, **options)
    got = sg.linalg.lsqr(ours(S, "scipy"), b, **options)
    used = sg.linalg.last_solve_info()
    assert got[1:9] == plain[1:9] and used.iterations == plain[2]
    np.testing.assert_array_equal(got[0], plain[0])
    np.testing.assert_array_equal(got[9], plain[9])
    if block_class is ReplayOnHost and iter_lim in (None, 40):
        assert used.graphs and used.block == 16
    if block_class is FailedCapture and iter_lim not in (1, 2):
        assert not used.graphs and used.graphs_reason == FailedCapture.failure


def test_lsqr_says_when_its_matrix_cannot_be_captured(host_graphs, monkeypatch):
    host_graphs(ReplayOnHost)
    monkeypatch.setattr(sg.engine._registry.registered()["host-copy"], "capturable", False)
    S, b = lsqr_problem(np.float64)
    want = sg.linalg.lsqr(ours(S, "scipy"), b)
    got = sg.linalg.lsqr(ours(S, "host-copy"), b)
    used = sg.linalg.last_solve_info()
    assert not used.graphs and used.graphs_reason == "backend 'host-copy' cannot be captured"
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)


# -------------------------------------------------------------- gmres's restart cycle
@pytest.mark.parametrize("maxiter", [None, 0, 1, 2, 3, 40])
@pytest.mark.parametrize("options", [{"restart": 4}, {"restart": 6, "M": "matrix"},
                                     {"restart": 5, "M": "operator"}, {"restart": 3, "x0": 1}],
                         ids=str)  # fmt: skip
@pytest.mark.parametrize("block_class", [ReplayOnHost, FailedCapture], ids=["replay", "failed"])
def test_gmres_cycles_replayed_give_the_plain_answer(host_graphs, block_class, options, maxiter):
    """A whole cycle per replay (the first one plain): x, info and the inner iteration count
    are the plain loop's, which ends a cycle at the first flag read after it stopped."""
    host_graphs(block_class)
    S = general(np.float64, n=16)
    b = rhs(S.shape[0], np.float64)
    options = {"rtol": 1e-12, "maxiter": maxiter, **options}
    if options.get("M") is not None:
        M = jacobi(S)
        options["M"] = ours(M, "scipy") if options["M"] == "matrix" else spl.aslinearoperator(M)
    if options.get("x0") is not None:
        options["x0"] = rhs(S.shape[0], np.float64, seed=options["x0"])
    plain, info_plain = sg.linalg.gmres(ours(S, "scipy"), b, graphs=False, **options)
    count = sg.linalg.last_solve_info().iterations
    x, info = sg.linalg.gmres(ours(S, "scipy"), b, graphs=True, **options)
    used = sg.linalg.last_solve_info()
    assert info == info_plain and info in (0, maxiter)
    assert used.iterations == count
    assert (count == 0) == (maxiter == 0), "maxiter=0 runs no cycle, with or without graphs"
    np.testing.assert_array_equal(x, plain)
    if maxiter is None:
        assert info == 0 and relative_residual(S, x, b) <= 1e-12
    captures = maxiter is None or maxiter > 1
    if maxiter == 0:
        np.testing.assert_array_equal(x, options.get("x0", np.zeros_like(x)))
    if block_class is ReplayOnHost and captures:
        assert used.graphs and used.block == options["restart"], used.graphs_reason
    if block_class is FailedCapture and captures:
        assert not used.graphs and used.graphs_reason == FailedCapture.failure


@pytest.mark.parametrize("graphs", ["auto", True])
def test_gmres_auto_captures_only_where_cycles_are_left(host_graphs, graphs):
    """graphs="auto" replays cycles only when the first cycle's convergence rate predicts
    enough of them to pay for the capture; True captures regardless. Same answer."""
    host_graphs(ReplayOnHost)
    S = general(np.float64, n=16)
    b = rhs(S.shape[0], np.float64)
    for restart, rtol, few in ((15, 1e-8, True), (4, 1e-12, False)):
        plain, _ = sg.linalg.gmres(ours(S, "scipy"), b, rtol=rtol, restart=restart, graphs=False)
        x, info = sg.linalg.gmres(ours(S, "scipy"), b, rtol=rtol, restart=restart, graphs=graphs)
        used = sg.linalg.last_solve_info()
        assert info == 0
        np.testing.assert_array_equal(x, plain)
        if few and graphs == "auto":
            assert not used.graphs and "predicts" in used.graphs_reason, used.graphs_reason
        else:
            assert used.graphs, used.graphs_reason


def test_cycles_left_extrapolates_the_first_cycle():
    from sparsegpu.linalg._gmres import cycles_left

    assert cycles_left(1.0, 1e-3, 1e-8) == 2  # 1e-3 a cycle: two more reach 1e-9
    assert cycles_left(1.0, 1e-9, 1e-8) == 0
    assert cycles_left(1.0, 0.5, 1e-3) == 9
    assert cycles_left(1.0, 1.0, 1e-8) == math.inf  # stagnation: capture
    assert cycles_left(1.0, 2.0, 1e-8) == math.inf


def test_gmres_reads_a_short_cycle_once():
    """Without graphs a cycle that stops early ends at the next flag read: the state is
    read every CHECK_EVERY inner iterations, not after each."""
    from sparsegpu.linalg import _gmres

    S = general(np.float64, n=16)
    b = rhs(S.shape[0], np.float64)
    reads = []
    original = _gmres.GmresCycle.active

    def counted(self):
        reads.append(1)
        return original(self)

    _gmres.GmresCycle.active = counted
    try:
        x, info = sg.linalg.gmres(ours(S, "scipy"), b, rtol=1e-10, restart=40, graphs=False)
    finally:
        _gmres.GmresCycle.active = original
    iterations = sg.linalg.last_solve_info().iterations
    assert info == 0 and iterations < 40
    assert len(reads) == -(-iterations // _gmres.CHECK_EVERY)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_gmres_exhausted_krylov_space_is_an_exact_solve(backend_name, xp, dtype):
    """A with three distinct eigenvalues: the Krylov space is exhausted at the third inner
    iteration (h = 0), which ends the cycle with the exact answer."""
    n = 30
    values = np.array([1.0, 2.0, 5.0])[np.arange(n) % 3].astype(dtype)
    S = sp.diags(values).tocsr()
    b = rhs(n, dtype, xp=xp)
    x, info = sg.linalg.gmres(ours(S, backend_name), b, rtol=1e-14)
    assert info == 0 and sg.linalg.last_solve_info().iterations == 3
    np.testing.assert_allclose(_to_numpy(x), _to_numpy(b) / values, rtol=1e-12)


def test_gmres_zero_pivot_is_reported_not_divided_by(backend_name, xp):
    """A nilpotent A: the first Krylov vector maps to 0, the Hessenberg's pivot is 0. No
    division by it: x stays finite and info says the solve did not converge."""
    S = sp.csr_matrix(np.array([[0.0, 1.0], [0.0, 0.0]]))
    b = xp.asarray(np.array([1.0, 0.0]))
    x, info = sg.linalg.gmres(ours(S, backend_name), b, maxiter=4)
    assert info == 4
    assert np.all(np.isfinite(_to_numpy(x)))


@pytest.mark.parametrize("restart", [0, -3, 2.5, True, "20"])
def test_gmres_refuses_a_bad_restart(restart):
    S = general(np.float64)
    with pytest.raises(ValueError, match="restart must be a positive integer"):
        sg.linalg.gmres(sg.csr_matrix(S), rhs(S.shape[0], np.float64), restart=restart)
