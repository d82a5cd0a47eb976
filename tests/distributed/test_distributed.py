"""sparsegpu.distributed against scipy on the global matrix, on every rank count.

Run under ``mpiexec -n P`` for P = 1..4 (``.ci/run``); alone, pytest runs it on one rank.
Every rank builds the same seeded global matrix (the oracle), only rank 0 hands it to
the constructor, and results gathered everywhere are compared with scipy's.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

MPI = pytest.importorskip("mpi4py.MPI")

import sparsegpu as sg  # noqa: E402
import sparsegpu.distributed as sgd  # noqa: E402
from sparsegpu.datasets.synthetic import permuted, stencil_2d  # noqa: E402
from sparsegpu.device import _cuda  # noqa: E402
from sparsegpu.testing import (  # noqa: E402
    assert_product_close,
    awkward_matrices,
    random_vector,
)

DTYPES = [np.float32, np.float64, np.complex128]
INDEX_DTYPES = [np.int32, np.int64]
DATASETS = ["west0067", "lp_afiro", "karate", "bcsstk13"]
# a short deadline: a test that would hang fails in seconds instead
TIMEOUT = 20.0


def _ids(values):
    return [np.dtype(v).name for v in values]


def distribute(S, comm, **kwargs):
    """A distributed matrix of S, handed over by rank 0 only."""
    kwargs.setdefault("timeout", TIMEOUT)
    return sgd.csr_matrix(S if comm.Get_rank() == 0 else None, comm, **kwargs)


def scatter(A, v, comm):
    return A.scatter(v if comm.Get_rank() == 0 else None)


def needs_ranks(comm, n):
    if comm.Get_size() < n:
        pytest.skip(f"needs {n} ranks, running on {comm.Get_size()}")


def max_row(S) -> int:
    return int(np.diff(S.indptr).max()) if S.shape[0] else 1


def check_product(S, comm, dtype, **kwargs):
    A = distribute(S, comm, **kwargs)
    assert A.shape == S.shape and A.nnz == S.nnz and A.dtype == S.dtype
    x = random_vector(S.shape[1], dtype, seed=1)
    y = (A @ scatter(A, x, comm)).gather(root=None)
    assert_product_close(y, S @ x, dtype, max_row(S), "distributed product")
    return A


def bundled(name, dtype, index_dtype):
    S = sp.csr_matrix(sg.io.mmread(sg.datasets.path(name)), dtype=dtype)
    if np.dtype(dtype).kind == "c":  # give complex runs an imaginary part
        S = S + 0.5j * sp.csr_matrix((np.ones(S.nnz), S.indices, S.indptr), shape=S.shape)
    S.indices = S.indices.astype(index_dtype)
    S.indptr = S.indptr.astype(index_dtype)
    return S


# ------------------------------------------------------------------ products
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=_ids(INDEX_DTYPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=_ids(DTYPES))
@pytest.mark.parametrize("name", DATASETS)
def test_product_matches_scipy_on_bundled_matrices(comm, name, dtype, index_dtype):
    S = bundled(name, dtype, index_dtype)
    A = check_product(S, comm, dtype)
    assert A.diag_block.indices.dtype == np.dtype(index_dtype)


@pytest.mark.parametrize("name", sorted(awkward_matrices()))
def test_product_on_awkward_matrices(comm, name):
    S = sp.csr_matrix(awkward_matrices(np.float64)[name])
    S.sum_duplicates()
    check_product(S, comm, np.float64)


def test_more_ranks_than_rows(comm):
    S = sp.csr_matrix(np.array([[2.0, 1.0], [1.0, 3.0]]))
    A = check_product(S, comm, np.float64)
    assert sorted(np.diff(A.row_offsets).tolist())[-2:] == ([1, 1] if comm.size > 1 else [2])


@pytest.mark.parametrize("split", ["all_on_last", "empty_middle", "dense_row_alone"])
def test_custom_row_splits(comm, split):
    n, size = 60, comm.Get_size()
    S = sp.random(n, n, density=0.1, random_state=3, format="csr") + sp.eye(n, format="csr")
    S = S.tolil()
    S[17, :] = np.arange(1, n + 1)  # the one dense row
    S = S.tocsr()
    if split == "all_on_last":
        offsets = [0] * size + [n]
    elif split == "empty_middle":
        offsets = np.linspace(0, n, size + 1).astype(int)
        if size > 2:
            offsets[1] = offsets[2]
    else:  # rank 0: rows before 17; rank 1: the dense row alone; the rest after it
        offsets = [0] + ([17, 18] if size > 2 else [17] if size == 2 else []) + [n]
        offsets = offsets[:size] + [n]
    A = check_product(S, comm, np.float64, row_offsets=offsets)
    assert A.row_offsets.tolist() == list(offsets)


def test_from_local_rows_matches_scipy(comm):
    S = stencil_2d(12).astype(np.float64)
    size, rank = comm.Get_size(), comm.Get_rank()
    offsets = sgd.balanced_offsets(S.indptr, size)
    lo, hi = offsets[rank], offsets[rank + 1]
    A = sgd.csr_matrix.from_local_rows(S[lo:hi], lo, S.shape[1], comm, timeout=TIMEOUT)
    assert A.local_rows == (lo, hi)
    x = random_vector(S.shape[0], np.float64, seed=2)
    y = (A @ scatter(A, x, comm)).gather(root=0)
    if rank == 0:
        assert_product_close(y, S @ x, np.float64, 5)
    else:
        assert y is None


def test_one_rank_equals_the_single_gpu_path(comm):
    S = sg.csr_matrix(bundled("bcsstk13", np.float64, np.int32))
    x = random_vector(S.shape[0], np.float64, seed=4)
    A = distribute(S, comm.Split(color=comm.Get_rank(), key=0))  # a comm of size 1 per rank
    y = (A @ A.scatter(x)).gather()
    assert A.explain().ranks[0].ghosts == 0
    # the same backend on the same arrays: equal up to the kernel's summation order
    assert_product_close(y, S @ x, np.float64, max_row(S))


def test_vectors_and_reductions(comm):
    A = distribute(stencil_2d(9), comm)
    u_global = random_vector(81, np.complex128, seed=5)
    v_global = random_vector(81, np.complex128, seed=6)
    u, v = scatter(A, u_global, comm), scatter(A, v_global, comm)
    assert np.isclose(u.vdot(v), np.vdot(u_global, v_global))
    assert np.isclose(u.dot(v), np.dot(u_global, v_global))
    assert np.isclose(u.norm(), np.linalg.norm(u_global))
    w = (2 * u - v / 4 + 1).copy()
    w += u
    w *= 0.5
    np.testing.assert_allclose(w.gather(None), (3 * u_global - v_global / 4 + 1) * 0.5)


def test_explain_reports_every_rank(comm):
    S = bundled("bcsstk13", np.float64, np.int32)
    A = distribute(S, comm)
    report = sgd.explain(A)
    assert len(report.ranks) == comm.Get_size()
    assert sum(r.nnz for r in report.ranks) == S.nnz
    # on the CPU: host staging; on a GPU a rank: NCCL (CuPy's) or CUDA-aware MPI
    several = ("nccl", "cuda-aware-mpi", "host") if _cuda.cupy_or_none() else ("host",)
    assert report.transport in (several if comm.Get_size() > 1 else ("local",))
    assert report.transport == A.transport
    assert (report.halo_bytes > 0) == (comm.Get_size() > 1)
    assert report.max_halo_bytes <= report.halo_bytes
    assert 1.0 <= report.imbalance < 1.5
    text = str(report)
    assert f"transport: {report.transport}" in text and "partition: rows" in text


def test_the_off_rank_block_holds_only_the_rows_that_reach_other_ranks(comm):
    S = stencil_2d(12).astype(np.float64)
    A = check_product(S, comm, np.float64)
    lo, hi = A.local_rows
    block = S[lo:hi].tocsr()
    cols = block.indices
    rows = np.repeat(np.arange(hi - lo), np.diff(block.indptr))
    reaching = np.unique(rows[(cols < lo) | (cols >= hi)])
    np.testing.assert_array_equal(A.offdiag_rows, reaching)
    assert A.offdiag_block.shape[0] == reaching.size
    assert A.offdiag_block.nnz + A.diag_block.nnz == block.nnz


# ------------------------------------------------------------------- solvers
def nonsymmetric(n, dtype):
    """Convection-diffusion on an n x n grid: nonsymmetric, well conditioned."""
    S = stencil_2d(n).astype(dtype)
    shift = sp.diags([0.3 * np.ones(n * n - 1)], [1], format="csr").astype(dtype)
    return sp.csr_matrix(S + shift)


def hermitian(n, dtype):
    S = stencil_2d(n).astype(dtype)
    return sp.csr_matrix(S + 0j) if np.dtype(dtype).kind == "c" else S


def solve_both(solver, S, b_global, comm, **kwargs):
    """(x gathered, info, iterations) of the distributed solve, and the same of
    sparsegpu's single-process solve of the global system (the reference)."""
    A = distribute(S, comm)
    x, info = getattr(sg.linalg, solver)(A, scatter(A, b_global, comm), **kwargs)
    iterations = sg.linalg.last_solve_info().iterations
    single_x, single_info = getattr(sg.linalg, solver)(sg.csr_matrix(S), b_global, **kwargs)
    single = sg.linalg.last_solve_info().iterations
    return (x.gather(root=None), info, iterations), (single_x, single_info, single)


SOLVERS = ["cg", "minres", "bicgstab", "gmres"]


@pytest.mark.parametrize("dtype", DTYPES, ids=_ids(DTYPES))
@pytest.mark.parametrize("solver", SOLVERS)
def test_solvers_match_the_single_process_solve(comm, solver, dtype):
    hermitian_solver = solver in ("cg", "minres")
    S = hermitian(16, dtype) if hermitian_solver else nonsymmetric(12, dtype)
    b_global = random_vector(S.shape[0], dtype, seed=7)
    rtol = 1e-4 if dtype == np.float32 else 1e-9
    (x, info, iterations), (x1, info1, iterations1) = solve_both(solver, S, b_global, comm,
                                                                 rtol=rtol)  # fmt: skip
    assert info == info1 == 0
    # the same steps; only the order of the dot products' additions differs
    assert abs(iterations - iterations1) <= 1, (iterations, iterations1)

    def residual(v):
        return np.linalg.norm(S @ v - b_global) / np.linalg.norm(b_global)

    # minres's rtol bounds another quantity: held to what the single-process solve reaches
    assert residual(x) < 2 * (residual(x1) if solver == "minres" else rtol)
    np.testing.assert_allclose(x, x1, rtol=0, atol=100 * rtol * abs(x1).max())


def test_the_distributed_linalg_module_is_sparsegpu_linalg():
    assert sgd.linalg.cg is sg.linalg.cg and sgd.linalg.gmres is sg.linalg.gmres


COMPLEX_AND_REAL = [np.float64, np.complex128]


@pytest.mark.parametrize("dtype", COMPLEX_AND_REAL, ids=_ids(COMPLEX_AND_REAL))
def test_lsqr_on_a_rectangular_matrix(comm, dtype):
    rng = np.random.default_rng(3)
    S = sp.random(60, 25, density=0.2, random_state=4, format="csr", dtype=np.float64)
    S = (S + sp.eye(60, 25, format="csr")).astype(dtype)
    if np.dtype(dtype).kind == "c":
        S = sp.csr_matrix(S + 0.3j * sp.random(60, 25, density=0.1, random_state=5))
    b_global = rng.standard_normal(60).astype(dtype)
    A = distribute(S, comm)
    assert A.row_layout is not A.col_layout
    result = sg.linalg.lsqr(A, scatter(A, b_global, comm), atol=1e-10, btol=1e-10)
    expected = sla.lsqr(S, b_global, atol=1e-10, btol=1e-10)
    x = result[0].gather(root=None)
    assert result[1] == expected[1] and abs(result[2] - expected[2]) <= 1
    np.testing.assert_allclose(x, expected[0], rtol=1e-6, atol=1e-8)


def test_the_transposed_product_matches_scipy(comm):
    S = sp.random(40, 30, density=0.15, random_state=6, format="csr") + sp.eye(40, 30)
    S = sp.csr_matrix(S)
    A = distribute(S, comm)
    u = random_vector(40, np.float64, seed=3)
    y = A.rmatvec(scatter(A, u, comm)).gather(root=None)
    assert_product_close(y, S.T @ u, np.float64, 40, "transposed product")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("where", ["numpy", "cupy"])
def test_the_reverse_halo_sums_repeated_entries(where, dtype):
    """``add_at`` adds each returned contribution at its column, repeated columns summed
    (complex values too: CuPy's ``add.at`` takes real values only)."""
    from sparsegpu.distributed import _halo_kernels

    xp = np if where == "numpy" else _cuda.cupy_or_none()
    if xp is None:
        pytest.skip(f"no GPU here: {_cuda.backend_reason()}")
    index = np.array([0, 3, 3, 1, 3, 0], dtype=np.int64)
    values = random_vector(index.size, dtype, seed=5)
    y = random_vector(5, dtype, seed=6)
    expected = y.copy()
    np.add.at(expected, index, values)
    out = xp.asarray(y)
    _halo_kernels.add_at(out, xp.asarray(index), xp.asarray(values))
    np.testing.assert_allclose(_cuda.to_host(out), expected, rtol=1e-6)


def test_gmres_refuses_a_fractional_restart_like_the_single_process_solver(comm):
    A = distribute(nonsymmetric(6, np.float64), comm)
    b = scatter(A, np.ones(36), comm)
    with pytest.raises(ValueError, match="restart must be a positive integer, got 2.7"):
        sg.linalg.gmres(A, b, restart=2.7)


def test_solvers_report_the_iteration_limit_like_scipy(comm):
    S = stencil_2d(16)
    b_global = np.ones(S.shape[0])
    A = distribute(S, comm)
    b = scatter(A, b_global, comm)
    for name in ("cg", "bicgstab"):
        _, info = getattr(sg.linalg, name)(A, b, rtol=1e-12, maxiter=3)
        _, expected = getattr(sla, name)(S, b_global, rtol=1e-12, maxiter=3)
        assert info == expected == 3, name


def test_preconditioners_as_functions_and_as_distributed_matrices(comm):
    S = sp.csr_matrix(stencil_2d(14) + sp.diags(np.linspace(1, 50, 196)))
    A = distribute(S, comm)
    b = scatter(A, np.ones(196), comm)
    d = A.diagonal()
    x, info = sg.linalg.cg(A, b, rtol=1e-10, M=lambda r: r / d)
    assert info == 0
    assert np.linalg.norm(S @ x.gather(None) - 1) < 1e-9 * 14
    iterations = sg.linalg.last_solve_info().iterations
    M = distribute(sp.diags(1 / S.diagonal(), format="csr"), comm, row_offsets=A.row_offsets)
    x, info = sg.linalg.cg(A, b, rtol=1e-10, M=M)
    assert info == 0 and abs(sg.linalg.last_solve_info().iterations - iterations) <= 1
    assert np.linalg.norm(S @ x.gather(None) - 1) < 1e-9 * 14


def test_cg_from_a_starting_guess_and_zero_rhs(comm):
    S = stencil_2d(10)
    A = distribute(S, comm)
    zero = A.zeros()
    x, info = sg.linalg.cg(A, zero)
    assert info == 0 and x.norm() == 0
    b = scatter(A, np.ones(100), comm)
    x, info = sg.linalg.cg(A, b, x0=b.copy(), rtol=1e-10)
    assert info == 0
    assert np.linalg.norm(S @ x.gather(None) - 1) < 1e-9 * 10


def test_without_x0_a_probe_is_made_for_the_first_plans_only(comm, monkeypatch):
    """A's products are planned on a seeded random block of its columns when there is no
    x0: made for the first solve in a dtype, not again for every later one."""
    from sparsegpu.distributed import _space

    made, probe = [], _space._probe
    monkeypatch.setattr(
        _space, "_probe", lambda layout, dtype: made.append(dtype) or probe(layout, dtype)
    )
    A = distribute(stencil_2d(8), comm)
    b = scatter(A, np.ones(64), comm)
    for _ in range(2):
        x, info = sg.linalg.cg(A, b, rtol=1e-8)
        assert info == 0
    x, info = sg.linalg.cg(A, b.astype(np.complex128))
    assert info == 0
    assert made == [np.float64, np.complex128]


def test_a_callback_sees_distributed_iterates(comm):
    S = stencil_2d(8)
    A = distribute(S, comm)
    seen = []
    sg.linalg.cg(A, scatter(A, np.ones(64), comm), rtol=1e-8,
                 callback=lambda xk: seen.append(type(xk).__name__))  # fmt: skip
    assert seen and set(seen) == {"DistributedVector"}


def test_distributed_solves_say_why_they_are_not_reordered_or_captured(comm):
    A = distribute(stencil_2d(8), comm)
    sg.linalg.cg(A, scatter(A, np.ones(64), comm), reorder="rcm", graphs=True)
    used = sg.linalg.last_solve_info()
    assert used.reorder is None and "ordered when it is built" in used.reorder_reason
    assert used.graphs_reason
    # One rank on a GPU (transport "local") or NCCL can be captured; the host and MPI
    # transports have the host wait for every message and say so.
    if A._transport.capturable and A._transport.on_device:
        assert used.graphs, used.graphs_reason
    else:  # the transport named, or numpy operands: the solve runs on the host
        reason = used.graphs_reason
        assert not used.graphs and (A.transport in reason or "on the host" in reason)


def test_with_nccl_a_solve_captures_its_iterations(comm):
    S = stencil_2d(40)
    A = distribute(S, comm)
    if A.transport != "nccl":
        pytest.skip(f"the transport here is {A.transport}: graphs need NCCL")
    b_global = random_vector(S.shape[0], np.float64, seed=9)
    x, info = sg.linalg.cg(A, scatter(A, b_global, comm), rtol=1e-10)
    used = sg.linalg.last_solve_info()
    assert info == 0 and used.graphs, used.graphs_reason
    assert np.linalg.norm(S @ x.gather(None) - b_global) < 1e-9 * np.linalg.norm(b_global)


def test_solver_arguments_of_the_wrong_kind_are_refused(comm):
    A = distribute(stencil_2d(5), comm)
    with pytest.raises(sgd.RankError, match="b must be a DistributedVector"):
        sg.linalg.cg(A, np.ones(25))
    B = distribute(sp.csr_matrix(np.eye(7)), comm)
    with pytest.raises(sgd.RankError, match="not split like A's rows"):
        sg.linalg.cg(A, B.scatter(np.ones(7) if comm.Get_rank() == 0 else None))


# ----------------------------------------------------------------- partition
def test_a_graph_partition_cuts_the_halo_of_a_randomly_numbered_mesh(comm):
    pytest.importorskip("pymetis")
    S = permuted(stencil_2d(30), seed=2)
    rows = check_product(S, comm, np.float64)
    graph = check_product(S, comm, np.float64, partition="graph")
    by_rows, by_graph = rows.explain(), graph.explain()
    if comm.Get_size() > 1:
        assert by_graph.partition.startswith("graph: METIS")
        assert by_graph.halo_bytes < by_rows.halo_bytes / 3
    assert by_graph.imbalance < 1.1
    b_global = random_vector(S.shape[0], np.float64, seed=8)
    x, info = sg.linalg.cg(graph, scatter(graph, b_global, comm), rtol=1e-10)
    assert info == 0
    assert np.linalg.norm(S @ x.gather(root=None) - b_global) < 1e-9 * np.linalg.norm(b_global)


def test_without_pymetis_a_graph_partition_warns_and_splits_by_rows(comm, monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)
    S = stencil_2d(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        A = check_product(S, comm, np.float64, partition="graph")
    report = A.explain()
    assert "pymetis is not installed" in report.partition
    if comm.Get_rank() == 0:
        assert any("pip install pymetis" in str(w.message) for w in caught)


def test_a_graph_partition_of_a_rectangular_matrix_fails_everywhere(comm):
    with pytest.raises(sgd.RankError, match="partition='graph' needs a square matrix"):
        distribute(sp.csr_matrix(np.ones((4, 3))), comm, partition="graph")


def test_bad_partition_and_transport_names_are_refused(comm, monkeypatch):
    with pytest.raises(ValueError, match="partition must be one of"):
        distribute(stencil_2d(3), comm, partition="metis")
    with pytest.raises(ValueError, match="transport must be one of"):
        distribute(stencil_2d(3), comm, transport="infiniband")
    monkeypatch.setenv("SPARSEGPU_TRANSPORT", "carrier-pigeon")
    with pytest.raises(ValueError, match="SPARSEGPU_TRANSPORT must be one of"):
        distribute(stencil_2d(3), comm)


def test_a_transport_that_cannot_run_is_refused_on_every_rank(comm):
    needs_ranks(comm, 2)
    if _cuda.cupy_or_none() is not None:
        pytest.skip("a GPU is here: NCCL may run")
    with pytest.raises(ValueError, match="transport 'nccl' cannot run here: vectors live on"):
        distribute(stencil_2d(4), comm, transport="nccl")


def test_the_host_transport_can_be_asked_for(comm, monkeypatch):
    monkeypatch.setenv("SPARSEGPU_TRANSPORT", "host")
    A = check_product(stencil_2d(6), comm, np.float64)
    if comm.Get_size() > 1:
        assert A.transport == "host"
        assert "SPARSEGPU_TRANSPORT=host" in A.explain().transport_reason


# ------------------------------------------------------------------- reading
def test_mmread_and_load_match_the_single_process_reader(comm):
    S = sg.io.mmread(sg.datasets.path("cryg2500"))
    for A in (
        sgd.mmread(sg.datasets.path("cryg2500"), comm, timeout=TIMEOUT),
        sgd.load("cryg2500", comm, timeout=TIMEOUT),
    ):
        assert A.shape == S.shape and A.nnz == S.nnz
        x = random_vector(S.shape[0], np.float64, seed=9)
        y = (A @ scatter(A, x, comm)).gather(None)
        assert_product_close(y, S @ x, np.float64, max_row(S))


def test_a_missing_file_fails_on_every_rank(comm, tmp_path):
    with pytest.raises(sgd.RankError, match=r"rank\(s\) \[0\].*FileNotFoundError"):
        sgd.mmread(tmp_path / "missing.mtx", comm, timeout=TIMEOUT)
