"""sparsegpu.distributed against scipy on the global matrix, on every rank count.

Run under ``mpiexec -n P`` for P = 1..4 (``.ci/run``); alone, pytest runs it on one rank.
Every rank builds the same seeded global matrix (the oracle), only rank 0 hands it to
the constructor, and results gathered everywhere are compared with scipy's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

MPI = pytest.importorskip("mpi4py.MPI")

import sparsegpu as sg  # noqa: E402
import sparsegpu.distributed as sgd  # noqa: E402
from sparsegpu.datasets.synthetic import stencil_2d  # noqa: E402
from sparsegpu.testing import assert_product_close, awkward_matrices, random_vector  # noqa: E402

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
    assert report.transport == "host-staged"
    assert (report.halo_bytes > 0) == (comm.Get_size() > 1)
    assert "host-staged" in str(report)


# ------------------------------------------------------------------- solvers
def nonsymmetric(n, dtype):
    """Convection-diffusion on an n x n grid: nonsymmetric, well conditioned."""
    S = stencil_2d(n).astype(dtype)
    shift = sp.diags([0.3 * np.ones(n * n - 1)], [1], format="csr").astype(dtype)
    return sp.csr_matrix(S + shift)


@pytest.mark.parametrize("dtype", DTYPES, ids=_ids(DTYPES))
def test_cg_matches_scipy(comm, dtype):
    S = stencil_2d(16).astype(dtype)
    b_global = random_vector(S.shape[0], dtype, seed=7)
    if np.dtype(dtype).kind == "c":
        S = sp.csr_matrix(S + 0j)  # Hermitian: the stencil is real symmetric
    A = distribute(S, comm)
    b = scatter(A, b_global, comm)
    rtol = 1e-4 if dtype == np.float32 else 1e-9
    x, info = sgd.linalg.cg(A, b, rtol=rtol)
    expected, expected_info = sla.cg(S, b_global, rtol=rtol)
    assert info == expected_info == 0
    x_global = x.gather(root=None)
    residual = np.linalg.norm(S @ x_global - b_global) / np.linalg.norm(b_global)
    assert residual < 2 * rtol
    np.testing.assert_allclose(x_global, expected, rtol=0, atol=50 * rtol * abs(expected).max())


@pytest.mark.parametrize("solver", ["bicgstab", "gmres"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_ids(DTYPES))
def test_nonsymmetric_solvers_match_scipy(comm, solver, dtype):
    S = nonsymmetric(12, dtype)
    b_global = random_vector(S.shape[0], dtype, seed=8)
    A = distribute(S, comm)
    rtol = 1e-4 if dtype == np.float32 else 1e-9
    x, info = getattr(sgd.linalg, solver)(A, scatter(A, b_global, comm), rtol=rtol)
    expected, expected_info = getattr(sla, solver)(S, b_global, rtol=rtol)
    assert info == expected_info == 0
    x_global = x.gather(root=None)
    residual = np.linalg.norm(S @ x_global - b_global) / np.linalg.norm(b_global)
    assert residual < 2 * rtol


def test_solvers_report_the_iteration_limit_like_scipy(comm):
    S = stencil_2d(16)
    b_global = np.ones(S.shape[0])
    A = distribute(S, comm)
    b = scatter(A, b_global, comm)
    for name in ("cg", "bicgstab"):
        _, info = getattr(sgd.linalg, name)(A, b, rtol=1e-12, maxiter=3)
        _, expected = getattr(sla, name)(S, b_global, rtol=1e-12, maxiter=3)
        assert info == expected == 3, name


def test_preconditioned_cg_with_jacobi(comm):
    S = stencil_2d(14) + sp.diags(np.linspace(1, 50, 196))
    A = distribute(sp.csr_matrix(S), comm)
    b = scatter(A, np.ones(196), comm)
    d = A.diagonal()
    x, info = sgd.linalg.cg(A, b, rtol=1e-10, M=lambda r: r / d)
    assert info == 0
    assert np.linalg.norm(S @ x.gather(None) - 1) < 1e-9 * 14


def test_cg_from_a_starting_guess_and_zero_rhs(comm):
    S = stencil_2d(10)
    A = distribute(S, comm)
    zero = A.zeros()
    x, info = sgd.linalg.cg(A, zero)
    assert info == 0 and x.norm() == 0
    b = scatter(A, np.ones(100), comm)
    x, info = sgd.linalg.cg(A, b, x0=b.copy(), rtol=1e-10)
    assert info == 0
    assert np.linalg.norm(S @ x.gather(None) - 1) < 1e-9 * 10


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


# ----------------------------------------------------------------- bad input
def needs_ranks(comm, n):
    if comm.Get_size() < n:
        pytest.skip(f"needs {n} ranks, running on {comm.Get_size()}")


def local_block(S, comm):
    offsets = sgd.balanced_offsets(S.indptr, comm.Get_size())
    lo, hi = offsets[comm.Get_rank()], offsets[comm.Get_rank() + 1]
    return S[lo:hi], lo


def test_ranks_disagreeing_on_the_shape_fail_everywhere(comm):
    needs_ranks(comm, 2)
    S = stencil_2d(6)
    block, lo = local_block(S, comm)
    n_cols = 36 + (1 if comm.Get_rank() == 1 else 0)
    if comm.Get_rank() == 1:
        block = sp.hstack([block, sp.csr_matrix((block.shape[0], 1))]).tocsr()
    with pytest.raises(ValueError, match="rank 1 has 37"):
        sgd.csr_matrix.from_local_rows(block, lo, n_cols, comm, timeout=TIMEOUT)


def test_ranks_disagreeing_on_the_dtype_fail_everywhere(comm):
    needs_ranks(comm, 2)
    block, lo = local_block(stencil_2d(6), comm)
    if comm.Get_rank() == 1:
        block = block.astype(np.float32)
    with pytest.raises(ValueError, match="rank 1 has float32"):
        sgd.csr_matrix.from_local_rows(block, lo, 36, comm, timeout=TIMEOUT)


def test_gapped_row_blocks_fail_everywhere(comm):
    needs_ranks(comm, 2)
    block, lo = local_block(stencil_2d(6), comm)
    with pytest.raises(ValueError, match="rank 1 says its rows start at"):
        sgd.csr_matrix.from_local_rows(
            block, lo + (1 if comm.Get_rank() == 1 else 0), 36, comm, timeout=TIMEOUT
        )


def test_a_bad_block_on_one_rank_fails_everywhere(comm):
    block, lo = local_block(stencil_2d(6), comm)
    if comm.Get_rank() == comm.Get_size() - 1:
        block = "not a matrix"
    with pytest.raises(sgd.RankError, match=rf"rank\(s\) \[{comm.Get_size() - 1}\]"):
        sgd.csr_matrix.from_local_rows(block, lo, 36, comm, timeout=TIMEOUT)


def test_a_bad_row_split_fails_everywhere(comm):
    with pytest.raises(sgd.RankError, match="row_offsets must"):
        distribute(stencil_2d(4), comm, row_offsets=[0, 3])


def test_an_exception_mid_product_fails_everywhere(comm):
    A = distribute(stencil_2d(10), comm)
    x = scatter(A, np.ones(100), comm)
    culprit = comm.Get_size() - 1
    if comm.Get_rank() == culprit:

        def broken(x_local, dtype):
            raise ArithmeticError("injected failure")

        A._local_diag = broken
    with pytest.raises(sgd.RankError, match=rf"rank\(s\) \[{culprit}\].*injected failure"):
        A @ x
    # the matrix still works afterwards: the failure was agreed on, nothing left in flight
    if comm.Get_rank() == culprit:
        del A._local_diag
    np.testing.assert_allclose((A @ x).gather(None), stencil_2d(10) @ np.ones(100))


def test_a_rank_missing_a_product_times_out_instead_of_hanging(comm):
    needs_ranks(comm, 2)
    A = distribute(stencil_2d(10), comm, timeout=1.0)
    x = scatter(A, np.ones(100), comm)
    if comm.Get_rank() == 1:  # rank 1 never joins this product
        return
    # its neighbours miss its halo message; the others miss it in the closing allreduce
    if 1 in A._halo.neighbours:
        expected = r"halo exchange: not complete after 1 s \(still waiting on rank\(s\) \[1\]\)"
    else:
        expected = r"the product: not complete after 1 s"
    with pytest.raises(TimeoutError, match=expected):
        A @ x
    # no barrier here: the end-of-test agreement (conftest) has its own deadline


def test_mismatched_vectors_are_refused(comm):
    A = distribute(stencil_2d(5), comm)
    B = distribute(sp.csr_matrix(np.eye(7)), comm)
    with pytest.raises(ValueError, match="split"):
        A @ B.scatter(np.ones(7) if comm.Get_rank() == 0 else None)
    with pytest.raises(TypeError, match="DistributedVector"):
        A @ np.ones(25)
    with pytest.raises(sgd.RankError, match="scatter"):
        scatter(A, np.ones(3), comm)


def test_each_rank_has_its_own_temporary_directory(comm, tmp_path):
    paths = comm.allgather(str(tmp_path))
    assert len(set(paths)) == comm.Get_size()


def test_mpibench_prints_both_tables(comm, capsys, tmp_path):
    from sparsegpu.cli import main

    out = tmp_path / "mpibench.json"
    argv = ["mpibench", "--n", "8", "--weak-rows", "200", "--repeat", "2", "--cg-iterations", "2"]
    assert main(argv + ["--json", str(out)]) == 0
    if comm.Get_rank() == 0:
        text = capsys.readouterr().out
        assert "strong scaling, 8^3 grid" in text and "weak scaling" in text
        rows = json.loads(out.read_text())
        assert [r["ranks"] for r in rows["strong"]][-1] == comm.Get_size()


def test_mpibench_draws_measured_and_modelled_scaling(comm, tmp_path):
    pytest.importorskip("matplotlib")
    from sparsegpu.cli import main

    # every rank names the same file: rank 0 draws it
    plot = comm.bcast(str(tmp_path / "scaling.png") if comm.Get_rank() == 0 else None, root=0)
    argv = ["mpibench", "--n", "8", "--weak-rows", "200", "--repeat", "2", "--cg-iterations", "2"]
    assert main(argv + ["--plot", plot]) == 0
    if comm.Get_rank() == 0:
        with open(plot, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
