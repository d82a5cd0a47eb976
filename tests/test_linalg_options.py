"""The solvers' ``graphs=`` and ``reorder=`` options and ``last_solve_info``: the same
answers with or without them, on every backend; graphs ignored (with the reason) where
there is nothing to capture; on a GPU, graphs change neither x nor the iteration count."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import sparsegpu as sg
from sparsegpu.datasets.synthetic import stencil_2d
from sparsegpu.linalg import _options as linalg_options

from .test_linalg import _to_numpy, general, hpd, jacobi, ours, relative_residual, rhs

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
