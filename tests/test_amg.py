"""sparsegpu.linalg.amg: smoothed-aggregation multigrid, checked against PyAMG's answers.

The CPU tests run on the scipy backend (what CI has); the ``gpu`` ones run the same set-up
and cycle on the device and skip without one. Every problem is small and seeded.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import sparsegpu as sg
from sparsegpu.device._rows import row_ids
from sparsegpu.linalg.multigrid import _aggregation

pyamg = pytest.importorskip("pyamg")
from pyamg.gallery import diffusion_stencil_2d, linear_elasticity, poisson, stencil_grid  # noqa: E402

SOLVERS = ["cg", "gmres", "bicgstab", "minres"]


def anisotropic(n: int = 128):
    """2-D diffusion, anisotropy 1e-3 rotated 30 degrees (PyAMG's gallery, FD)."""
    stencil = diffusion_stencil_2d(epsilon=1e-3, theta=np.pi / 6, type="FD")
    return stencil_grid(stencil, (n, n), format="csr")


PROBLEMS = {
    "poisson": lambda: poisson((128, 128), format="csr"),
    "anisotropic": anisotropic,
}


def rhs(n: int, seed: int = 0):
    return np.random.default_rng(seed).standard_normal(n)


def pyamg_iterations(ml, b, **kwargs) -> int:
    residuals: list[float] = []
    ml.solve(b, tol=1e-8, accel="cg", residuals=residuals, **kwargs)
    return len(residuals) - 1


def our_iterations(ml, b) -> tuple[int, np.ndarray]:
    residuals: list[float] = []
    x = ml.solve(b, rtol=1e-8, residuals=residuals)
    return len(residuals) - 1, x


@pytest.fixture(scope="module")
def pyamg_solvers():
    return {name: pyamg.smoothed_aggregation_solver(make()) for name, make in PROBLEMS.items()}


@pytest.fixture(scope="module")
def hierarchies():
    return {name: sg.linalg.amg(sg.csr_matrix(make())) for name, make in PROBLEMS.items()}


# ---------------------------------------------------------------------- hierarchy
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_hierarchy_is_sane_against_pyamg(name, pyamg_solvers, hierarchies):
    ours, theirs = hierarchies[name], pyamg_solvers[name]
    rows = [level.A.shape[0] for level in ours.levels]
    assert len(rows) >= 3
    assert all(a > 3 * b for a, b in zip(rows, rows[1:], strict=False))  # each level coarsens well
    assert rows[-1] <= 500
    assert ours.operator_complexity() <= 1.6
    assert 0.8 <= ours.operator_complexity() / theirs.operator_complexity() <= 1.2
    assert 0.8 <= ours.grid_complexity() / theirs.grid_complexity() <= 1.2
    # level 1 of the same size class as PyAMG's (aggregates of similar size)
    assert 0.6 <= rows[1] / theirs.levels[1].A.shape[0] <= 1.4


def test_repr_lists_levels_and_complexities(hierarchies):
    ml = hierarchies["poisson"]
    text = repr(ml)
    assert f"Number of Levels:     {len(ml.levels)}" in text
    assert f"{ml.operator_complexity():6.3f}" in text
    assert f"{ml.levels[1].A.nnz:>12}" in text
    assert "galerkin" in text and "aggregation" in text
    assert set(ml.setup_seconds) >= {"strength", "aggregation", "galerkin", "total"}


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_iterations_within_1_5x_of_pyamg(name, pyamg_solvers, hierarchies):
    A = PROBLEMS[name]()
    b = rhs(A.shape[0])
    theirs = pyamg_iterations(pyamg_solvers[name], b)
    ours, x = our_iterations(hierarchies[name], b)
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)
    assert ours <= 1.5 * theirs, (ours, theirs)


def test_galerkin_levels_are_pt_a_p(hierarchies):
    ml = hierarchies["anisotropic"]
    for fine, coarse in zip(ml.levels, ml.levels[1:], strict=False):
        P = sp.csr_matrix(fine.P)
        expected = (P.T @ sp.csr_matrix(fine.A) @ P).toarray()
        assert np.allclose(sp.csr_matrix(coarse.A).toarray(), expected, atol=1e-12)
        assert abs(sp.csr_matrix(fine.R) - P.T).max() == 0


# ---------------------------------------------------------------------- aggregation
def test_mis2_aggregates_cover_the_grid_with_roots_three_apart():
    A = poisson((30, 30), format="csr")
    indptr, indices = _aggregation.symmetric_strength(A.indptr, A.indices, A.data, 0.0, 1, np)
    aggregate, count = _aggregation.mis2_aggregate(indptr, indices, np, seed=3)
    assert (aggregate >= 0).all() and set(np.unique(aggregate)) == set(range(count))
    graph = sp.csr_matrix((np.ones(indices.shape[0]), indices, indptr), shape=A.shape)
    # every aggregate lies within distance 2 of one node: its diameter is at most 4
    distance = sp.csgraph.shortest_path(graph, unweighted=True)
    for a in range(count):
        members = np.flatnonzero(aggregate == a)
        assert distance[np.ix_(members, members)].max() <= 4
    assert 900 / 13 <= count <= 900 / 3


def test_isolated_nodes_stay_unaggregated():
    A = sp.block_diag([poisson((6, 6)), sp.eye(4)], format="csr")
    indptr, indices = _aggregation.symmetric_strength(A.indptr, A.indices, A.data, 0.0, 1, np)
    aggregate, _ = _aggregation.mis2_aggregate(indptr, indices, np)
    assert (aggregate[-4:] == -1).all() and (aggregate[:-4] >= 0).all()


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_tentative_prolongator_reproduces_b_with_orthonormal_columns(k, dtype, xp):
    """T's columns are orthonormal and T R = B on every aggregated node (rigid-body modes:
    k = 6; complex B), nothing on a node of no aggregate."""
    rng = np.random.default_rng(1)
    aggregate = np.repeat(np.arange(10), 4)
    aggregate[[3, 17]] = -1  # two nodes in no aggregate
    B = rng.standard_normal((80, k)).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        B += 1j * rng.standard_normal((80, k))
    (indptr, indices, data), shape, coarse = _aggregation.tentative_prolongator(
        xp.asarray(aggregate), 10, xp.asarray(B), 2, xp
    )
    host = [a.get() if hasattr(a, "get") else a for a in (data, indices, indptr, coarse)]
    T = sp.csr_matrix(tuple(host[:3]), shape=shape)
    assigned = np.repeat(aggregate >= 0, 2)
    assert np.allclose((T @ host[3])[assigned], B[assigned])
    assert np.allclose((T @ host[3])[~assigned], 0)
    assert np.allclose((T.conj().T @ T).toarray(), np.eye(shape[1]))


# ---------------------------------------------------------------------- as a preconditioner
@pytest.fixture(scope="module")
def small():
    A = sg.csr_matrix(poisson((48, 48), format="csr"))
    return A, sg.linalg.amg(A, max_coarse=40)


@pytest.mark.parametrize("solver", SOLVERS)
def test_every_krylov_solver_takes_it(solver, small):
    A, ml = small
    b = rhs(A.shape[0], seed=2)
    # minres stops on the preconditioned residual (scipy's rule): a tighter rtol for it
    rtol, bound = (1e-10, 1e-7) if solver == "minres" else (1e-8, 2e-8)
    x, info = getattr(sg.linalg, solver)(A, b, rtol=rtol, M=ml)
    used = sg.linalg.last_solve_info()
    assert info == 0
    assert np.linalg.norm(b - A @ x) <= bound * np.linalg.norm(b)
    getattr(sg.linalg, solver)(A, b, rtol=rtol)
    assert used.iterations <= 25 < sg.linalg.last_solve_info().iterations
    assert f"AMGHierarchy: {len(ml.levels)} levels" in used.preconditioner
    assert "operator complexity" in used.preconditioner


def test_scipy_cg_takes_it_with_numpy_vectors(small):
    A, ml = small
    b = rhs(A.shape[0], seed=3)
    count = []
    x, info = spl.cg(A, b, rtol=1e-8, M=ml, callback=lambda xk: count.append(1))
    assert info == 0 and len(count) <= 20
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)


def test_cycle_is_a_symmetric_linear_operator(small):
    A, ml = small
    rng = np.random.default_rng(4)
    u, v = rng.standard_normal((2, A.shape[0]))
    assert np.isclose(u @ (ml @ v), (ml @ u) @ v, rtol=1e-10)
    assert np.allclose(ml @ (2 * u + v), 2 * (ml @ u) + ml @ v)
    assert (ml.matvec(u.reshape(-1, 1))).shape == (A.shape[0], 1)
    assert u @ (ml @ u) > 0  # positive definite: a valid CG preconditioner


def test_solve_keeps_a_residual_history(small):
    A, ml = small
    b = rhs(A.shape[0], seed=5)
    residuals: list[float] = []
    x = ml.solve(b, rtol=1e-10, residuals=residuals)
    assert residuals[0] == pytest.approx(np.linalg.norm(b))
    assert residuals[-1] <= 1e-10 * np.linalg.norm(b)
    assert np.linalg.norm(b - A @ x) == pytest.approx(residuals[-1], rel=1e-6)
    stationary: list[float] = []
    ml.solve(b, rtol=1e-6, accel=None, maxiter=60, residuals=stationary)
    assert stationary[-1] <= 1e-6 * np.linalg.norm(b)
    assert all(b < a for a, b in zip(stationary, stationary[1:], strict=False))


@pytest.mark.parametrize("smoother", ["jacobi", "l1_jacobi", ("chebyshev", {"degree": 2})])
def test_other_smoothers_converge(smoother, small):
    A, _ = small
    ml = sg.linalg.amg(A, presmoother=smoother, postsmoother=smoother, max_coarse=40)
    b = rhs(A.shape[0], seed=6)
    iterations, x = our_iterations(ml, b)
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)
    assert iterations <= 30


# ---------------------------------------------------------------------- re-set-up
def _new_values(A, seed: int):
    """A with new values on the same pattern: a random SPD diagonal scaling."""
    scale = np.random.default_rng(seed).uniform(0.5, 2.0, A.shape[0])
    return sg.csr_matrix(sp.diags(scale) @ A @ sp.diags(scale))


def test_update_equals_a_fresh_set_up():
    A = sg.csr_matrix(anisotropic(40))
    ml = sg.linalg.amg(A, max_coarse=20)
    A_new = _new_values(A, seed=7)
    ml.update(A_new)
    fresh = sg.linalg.amg(A_new, max_coarse=20)
    assert len(ml.levels) == len(fresh.levels)
    for ours, theirs in zip(ml.levels, fresh.levels, strict=False):
        assert np.allclose(sp.csr_matrix(ours.A).toarray(), sp.csr_matrix(theirs.A).toarray())
    b = rhs(A.shape[0], seed=8)
    assert np.allclose(ml @ b, fresh @ b)
    x = ml.solve(b, rtol=1e-8)
    assert np.linalg.norm(b - A_new @ x) <= 1e-8 * np.linalg.norm(b)


def test_update_refuses_another_pattern():
    A = sg.csr_matrix(poisson((20, 20), format="csr"))
    ml = sg.linalg.amg(A, max_coarse=20)
    with pytest.raises(ValueError, match="sparsity pattern differs"):
        ml.update(sg.csr_matrix(A + sp.eye(400, k=3)))
    with pytest.raises(ValueError, match="shape"):
        ml.update(sg.csr_matrix(poisson((21, 21), format="csr")))


# ---------------------------------------------------------------------- PyAMG interop
def test_a_pyamg_hierarchy_runs_on_sparsegpu_matrices():
    A = anisotropic(64)
    theirs = pyamg.smoothed_aggregation_solver(A, max_coarse=30)
    ml = sg.linalg.amg(theirs)
    assert [lv.A.shape for lv in ml.levels] == [lv.A.shape for lv in theirs.levels]
    assert all(isinstance(lv.A, sg.csr_matrix) for lv in ml.levels)
    assert abs(sp.csr_matrix(ml.levels[0].P) - theirs.levels[0].P).max() == 0
    b = rhs(A.shape[0], seed=9)
    iterations, x = our_iterations(ml, b)
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)
    assert iterations <= 1.5 * pyamg_iterations(theirs, b)


# ---------------------------------------------------------------------- elasticity
def test_elasticity_with_rigid_body_modes_within_1_5x_of_pyamg():
    A, B = linear_elasticity((40, 40), format="bsr")
    b = rhs(A.shape[0], seed=10)
    theirs = pyamg_iterations(pyamg.smoothed_aggregation_solver(A, B=B), b)
    ml = sg.linalg.amg(sg.bsr_matrix(A), B=B)
    assert ml.levels[1].B.shape[1] == 3 and ml.levels[1].blocksize == 3
    ours, x = our_iterations(ml, b)
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)
    assert ours <= 1.5 * theirs, (ours, theirs)
    constant_only = sg.linalg.amg(sg.bsr_matrix(A))  # one constant per unknown of a node
    assert constant_only.levels[1].B.shape[1] == 2


# ---------------------------------------------------------------------- bad input
BAD = [
    (lambda: sp.random(5, 6, density=0.5, random_state=0, format="csr"), {}, "square"),
    (lambda: poisson((5, 5)), {"B": np.ones((24, 1))}, r"B must have shape \(25, k\)"),
    (lambda: poisson((5, 5)), {"B": np.zeros((25, 1))}, "zero column"),
    (lambda: poisson((5, 5)), {"strength": "classical"}, "strength must be"),
    (lambda: poisson((5, 5)), {"presmoother": "gauss_seidel"}, "presmoother must be"),
    (lambda: poisson((5, 5)), {"postsmoother": ("jacobi", {"sweeps": 2})}, "unknown options"),
    (lambda: poisson((5, 5)), {"coarse_solver": "qr"}, "coarse_solver must be"),
    (lambda: poisson((5, 5)), {"max_levels": 0}, "max_levels must be an integer >= 1"),
    (lambda: poisson((5, 5)), {"aggregate": "standard"}, "option 'aggregate' is not offered"),
    (lambda: poisson((5, 5)), {"smooth": ("jacobi", {"omega": 3.0})}, r"omega must be in"),
]


@pytest.mark.parametrize("make, kwargs, message", BAD, ids=[m for _, _, m in BAD])
def test_bad_input_is_a_clear_error(make, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sg.linalg.amg(sg.csr_matrix(make()), **kwargs)


def test_non_finite_values_and_zero_diagonals_are_refused():
    A = poisson((5, 5), format="csr").astype(float)
    A.data[3] = np.nan
    with pytest.raises(ValueError, match="non-finite value"):
        sg.linalg.amg(sg.csr_matrix(A))
    Z = poisson((5, 5), format="lil").astype(float)
    Z[7, 7] = 0
    with pytest.raises(ValueError, match="zero .*diagonal entry at row 7"):
        sg.linalg.amg(sg.csr_matrix(Z.tocsr()), max_coarse=4)


def test_singular_coarse_level_is_a_clear_error():
    # the Laplacian of a pure Neumann problem: constants are its null space
    L = sp.csr_matrix(poisson((12, 12), format="csr"))
    L = L - sp.diags(np.asarray(L.sum(axis=1)).ravel())
    with pytest.raises(ValueError, match="coarsest level .* is singular"):
        sg.linalg.amg(sg.csr_matrix(L), max_coarse=30)
    ml = sg.linalg.amg(sg.csr_matrix(L), max_coarse=30, coarse_solver="pinv")
    assert np.isfinite(ml @ np.ones(144)).all()


def test_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="sparse matrix"):
        sg.linalg.amg(np.eye(4))


# ---------------------------------------------------------------------- on the GPU
@pytest.mark.gpu
def test_gpu_hierarchy_and_captured_cycle(cupy):
    A = sg.csr_matrix(anisotropic(128))
    ml = sg.linalg.amg(A)
    assert ml.xp is cupy
    host = sg.csr_matrix(A.copy())
    host.backend = "scipy"  # the same set-up on the host
    cpu = sg.linalg.amg(host)
    assert cpu.xp is np
    assert 0.8 <= ml.operator_complexity() / cpu.operator_complexity() <= 1.25
    b = cupy.asarray(rhs(A.shape[0]))
    x, info = sg.linalg.cg(A, b, rtol=1e-8, M=ml)
    used = sg.linalg.last_solve_info()
    assert info == 0 and isinstance(x, cupy.ndarray)
    assert float(cupy.linalg.norm(b - A @ x)) <= 1e-8 * float(cupy.linalg.norm(b))
    assert used.graphs, used.graphs_reason
    assert "inside the solver's CUDA graphs" in used.preconditioner
    theirs = pyamg_iterations(pyamg.smoothed_aggregation_solver(anisotropic(128)), b.get())
    assert used.iterations <= 1.5 * theirs


@pytest.mark.gpu
@pytest.mark.parametrize("solver", SOLVERS)
def test_gpu_every_solver_takes_it(cupy, solver):
    A = sg.csr_matrix(poisson((64, 64), format="csr"))
    ml = sg.linalg.amg(A, max_coarse=40)
    b = cupy.asarray(rhs(A.shape[0], seed=1))
    rtol, bound = (1e-10, 1e-7) if solver == "minres" else (1e-8, 2e-8)
    x, info = getattr(sg.linalg, solver)(A, b, rtol=rtol, M=ml)
    assert info == 0
    assert float(cupy.linalg.norm(b - A @ x)) <= bound * float(cupy.linalg.norm(b))
    assert sg.linalg.last_solve_info().iterations <= 25


@pytest.mark.gpu
def test_gpu_cycle_matches_the_host_cycle_and_updates(cupy):
    A = sg.csr_matrix(anisotropic(48))
    ml = sg.linalg.amg(A, max_coarse=30, seed=5)
    v = rhs(A.shape[0], seed=11)
    y = ml @ cupy.asarray(v)
    assert isinstance(y, cupy.ndarray) and np.allclose((ml @ v), y.get())
    A_new = _new_values(A, seed=12)
    ml.update(A_new)
    x = ml.solve(cupy.asarray(v), rtol=1e-8)
    assert float(cupy.linalg.norm(cupy.asarray(v) - A_new @ x)) <= 1e-8 * np.linalg.norm(v)


@pytest.mark.gpu
def test_gpu_elasticity_and_pyamg_interop(cupy):
    A, B = linear_elasticity((40, 40), format="bsr")
    b = cupy.asarray(rhs(A.shape[0], seed=13))
    ml = sg.linalg.amg(sg.bsr_matrix(A), B=B)
    theirs = pyamg.smoothed_aggregation_solver(A, B=B)
    x, info = sg.linalg.cg(sg.csr_matrix(A), b, rtol=1e-8, M=ml)
    assert info == 0
    assert sg.linalg.last_solve_info().iterations <= 1.5 * pyamg_iterations(theirs, b.get())
    moved = sg.linalg.amg(theirs)
    x, info = sg.linalg.cg(sg.csr_matrix(A), b, rtol=1e-8, M=moved)
    assert info == 0 and moved.xp is cupy


def test_update_of_a_pyamg_hierarchy_keeps_its_transfers():
    A = anisotropic(48)
    moved = sg.linalg.amg(pyamg.smoothed_aggregation_solver(A, max_coarse=30))
    P = sp.csr_matrix(moved.levels[0].P).copy()
    A_new = _new_values(A, seed=14)
    moved.update(A_new)
    assert abs(sp.csr_matrix(moved.levels[0].P) - P).max() == 0
    coarse = (P.T @ sp.csr_matrix(A_new) @ P).toarray()
    assert np.allclose(sp.csr_matrix(moved.levels[1].A).toarray(), coarse)
    b = rhs(A.shape[0], seed=15)
    x = moved.solve(b, rtol=1e-8)
    assert np.linalg.norm(b - A_new @ x) <= 1e-8 * np.linalg.norm(b)


def test_solve_from_a_starting_guess_calls_back_with_iterates_only(small):
    A, ml = small
    b = rhs(A.shape[0], seed=16)
    x0 = np.ones(A.shape[0])
    seen, residuals = [], []
    x = ml.solve(b, x0=x0, rtol=1e-8, residuals=residuals, callback=seen.append)
    assert residuals[0] == pytest.approx(np.linalg.norm(b - A @ x0))
    assert len(seen) == len(residuals) - 1 and not np.array_equal(seen[0], x0)
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)


def test_set_up_fingerprints_no_host_array(cupy, monkeypatch):
    """The set-up reads A where it lives: checking its format on the host must not hand its
    arrays out (a CRC-32 of each, 1.5 s on a 117M-entry matrix, made the 3-D Poisson
    256^3 set-up four times slower)."""
    from sparsegpu.classes import _mirrors

    made = []
    original = _mirrors._fingerprint
    monkeypatch.setattr(_mirrors, "_fingerprint", lambda m: made.append(m) or original(m))
    A = sg.csr_matrix(poisson((40, 40), format="csr"))
    A @ np.ones(A.shape[0])  # its device mirror, holding copies of the host arrays
    ml = sg.linalg.amg(A)
    assert not made, "the set-up handed A's arrays out"
    x, info = sg.linalg.cg(A, cupy.asarray(rhs(A.shape[0])), rtol=1e-8, M=ml)
    assert info == 0


def test_set_up_and_update_of_a_bsr_matrix_hand_no_array_out(monkeypatch):
    """A BSR input whose scipy original the user keeps (so its arrays stay reachable):
    the set-up and an update read its blocksize, convert it and multiply without handing
    an array out, so no product fingerprints it (a CRC-32 of every array, 12-17 ms of an
    elasticity 24^3 set-up and of its update on an H200, where the set-up's phases took
    54 ms). A write into A after them is still seen."""
    from sparsegpu.classes import _mirrors

    made = []
    original = _mirrors._fingerprint
    monkeypatch.setattr(_mirrors, "_fingerprint", lambda m: made.append(m) or original(m))
    A_host, B = linear_elasticity((12, 12), format="bsr")
    A = sg.bsr_matrix(A_host)
    x = rhs(A.shape[0], seed=3)
    y = A @ x
    ml = sg.linalg.amg(A, B=B)
    new = sg.bsr_matrix(A_host * 2.0)
    new @ x
    ml.update(new)
    assert A.blocksize == (2, 2) and not made, "the set-up or update handed arrays out"
    A.data[...] *= 3.0
    assert np.allclose(A @ x, 3.0 * y)


# ---------------------------------------------------------------------- device twins
def _awkward(value_dtype, index_dtype, n: int = 300, seed: int = 4):
    """A Hermitian matrix with an empty row (no diagonal either) and a tie at the strength
    threshold of theta 0.25 (|a_ij|^2 == theta^2 |a_ii| |a_jj|)."""
    rng = np.random.default_rng(seed)
    M = sp.random(n, n, density=0.03, random_state=rng, format="csr")
    if np.dtype(value_dtype).kind == "c":
        M = M + 1j * sp.random(n, n, density=0.03, random_state=rng, format="csr")
    M = (M + M.conj().T).tolil()
    M[10, :] = 0
    M[:, 10] = 0
    M.setdiag(np.r_[np.full(n // 2, 4.0), np.full(n - n // 2, 1.0)])
    M[10, 10] = 0
    M[20, 21] = M[21, 20] = 1.0  # 1 == 0.25^2 * 4 * 4
    M = M.tocsr().astype(value_dtype)
    M.sort_indices()
    return M.indptr.astype(index_dtype), M.indices.astype(index_dtype), M.data


def _node_strength(indptr, indices, data, theta: float, blocksize: int):
    """symmetric_strength's node graph worked out pair by pair: each pair of nodes' block
    norm (squares summed in the entries' order), kept off the diagonal where its square is
    at least theta^2 times its two nodes' diagonal norms."""
    n = (len(indptr) - 1) // blocksize
    squares: dict = {}
    for i in range(len(indptr) - 1):
        for k in range(indptr[i], indptr[i + 1]):
            pair = (i // blocksize, int(indices[k]) // blocksize)
            squares[pair] = squares.get(pair, 0.0) + abs(data[k]) * abs(data[k])
    norms = {pair: np.sqrt(total) for pair, total in squares.items()}
    d = [norms.get((node, node), 0.0) for node in range(n)]
    rows: list = [[] for _ in range(n)]
    for (row, col), norm in sorted(norms.items()):
        if row != col and norm * norm >= theta * theta * d[row] * d[col]:
            rows[row].append(col)
    return np.r_[0, np.cumsum([len(r) for r in rows])], np.array([c for r in rows for c in r])


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("theta", [0.0, 0.25])
@pytest.mark.parametrize("blocksize", [2, 3])
def test_block_strength_is_the_node_graph(blocksize, theta, index_dtype, xp):
    """The strength graph of a block matrix (blocksize > 1: pairs of nodes amalgamated,
    their offsets found by a binary search, the kept pairs' offsets read off a running
    count) equals the node graph worked out pair by pair, on the host and on the GPU; an
    empty row and an empty node (row 10: nodes 5 and 3) among them."""
    indptr, indices, data = _awkward(np.float64, index_dtype)
    expected = _node_strength(indptr, indices, data, theta, blocksize)
    arrays = [xp.asarray(a) for a in (indptr, indices, data)]
    graph = _aggregation.symmetric_strength(*arrays, theta, blocksize, xp)
    graph = [g.get() if hasattr(g, "get") else g for g in graph]
    assert graph[0].dtype == index_dtype
    for ours, theirs in zip(graph, expected, strict=True):
        assert np.array_equal(ours, theirs)


@pytest.mark.gpu
@pytest.mark.parametrize("value_dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("theta", [0.0, 0.25])
def test_gpu_row_kernels_match_their_host_twins(cupy, value_dtype, index_dtype, theta):
    indptr, indices, data = _awkward(value_dtype, index_dtype)
    on_device = [cupy.asarray(a) for a in (indptr, indices, data)]
    d_host = _aggregation.diagonal(indptr, indices, data, np)
    d = _aggregation.diagonal(*on_device, cupy)
    assert d.dtype == d_host.dtype and np.array_equal(d.get(), d_host)
    graph_host = _aggregation.symmetric_strength(indptr, indices, data, theta, 1, np)
    graph = _aggregation.symmetric_strength(*on_device, theta, 1, cupy)
    for ours, theirs in zip(graph, graph_host, strict=True):
        assert np.array_equal(ours.get(), theirs)
    key = np.random.default_rng(2).permutation(len(d_host)).astype(np.uint64)
    rows = row_ids(graph_host[0], np)
    spread_host = _aggregation._spread_max(key, (*graph_host, rows), np)
    spread = _aggregation._spread_max(cupy.asarray(key), (*graph, None), cupy)
    assert np.array_equal(spread.get(), spread_host)
    safe = np.where(d_host == 0, 1, d_host)
    s_host = _aggregation.jacobi_smoothing(indptr, indices, data, safe, 0.7, np)
    s = _aggregation.jacobi_smoothing(*on_device, cupy.asarray(safe), 0.7, cupy)
    tolerance = 1e-5 if np.dtype(value_dtype) in (np.float32, np.complex64) else 1e-13
    assert s.dtype == s_host.dtype and np.allclose(s.get(), s_host, rtol=tolerance, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_gpu_spectral_radius_matches_the_host_loop(cupy, dtype):
    import cupyx.scipy.sparse as cupy_sparse

    from sparsegpu.linalg.multigrid._smoothing import spectral_radius

    A = (anisotropic(40) * (1 + 1j if np.dtype(dtype).kind == "c" else 1)).astype(dtype)
    A = (A + A.conj().T) / 2
    d_inv_sqrt = 1 / np.sqrt(np.abs(A.diagonal()))
    host = spectral_radius(lambda x: A @ x, A.shape[0], d_inv_sqrt, np, seed=3, dtype=dtype)
    A_device = cupy_sparse.csr_matrix(A)
    device = spectral_radius(lambda x: A_device @ x, A.shape[0], cupy.asarray(d_inv_sqrt),
                             cupy, seed=3, dtype=dtype)  # fmt: skip
    exact = spl.eigsh(sp.diags(d_inv_sqrt) @ A @ sp.diags(d_inv_sqrt), k=1)[0][0]
    assert 0.9 * exact <= host <= exact * (1 + 1e-12)
    assert 0.9 * exact <= device <= exact * (1 + 1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("n_side", [7, 120])  # one block of a step's reduction; 57 blocks
def test_gpu_lanczos_coefficients_equal_the_host_twins(cupy, dtype, n_side):
    """kernels/lanczos.cu's steps (their own reductions over the blocks' parts) give the
    host loop's coefficients from the same start vector, and the same on a second run."""
    import cupyx.scipy.sparse as cupy_sparse

    from sparsegpu.linalg.multigrid._smoothing import _lanczos_device, _lanczos_host

    complex_ = np.dtype(dtype).kind == "c"
    A = (anisotropic(n_side) * (1 + 1j if complex_ else 1)).astype(dtype)
    A = ((A + A.conj().T) / 2).tocsr()
    real = np.empty(0, dtype=dtype).real.dtype
    d = (1 / np.sqrt(np.abs(A.diagonal()))).astype(real)
    rng = np.random.default_rng(5)
    v = rng.standard_normal(A.shape[0]) + (1j * rng.standard_normal(A.shape[0]) if complex_ else 0)
    v = (v / np.linalg.norm(v)).astype(dtype)
    host = _lanczos_host(lambda x: A @ x, v, d, 12)
    A_device = cupy_sparse.csr_matrix(A)

    def device_run():
        return _lanczos_device(lambda x: A_device @ x, cupy.asarray(v), cupy.asarray(d), 12)

    device = device_run()
    tolerance = 2e-3 if real == np.float32 else 1e-9
    for ours, theirs in zip(device, host, strict=True):
        assert np.allclose(ours, theirs, rtol=tolerance, atol=tolerance * abs(theirs).max())
    again = device_run()
    assert all(np.array_equal(a, b) for a, b in zip(again, device, strict=True))


@pytest.mark.gpu
def test_gpu_update_gathers_r_and_equals_a_fresh_set_up(cupy):
    from sparsegpu.linalg.multigrid._bridge import CUPY

    def index_arrays(M):
        return M._sg_mirror(CUPY, M.dtype).indices

    A = sg.csr_matrix(anisotropic(64))
    ml = sg.linalg.amg(A, max_coarse=30, seed=5)
    before = [(index_arrays(lv.P), index_arrays(lv.R), index_arrays(c.A))
              for lv, c in zip(ml.levels[:-1], ml.levels[1:], strict=True)]  # fmt: skip
    objects = [(lv.P, lv.R, c.A) for lv, c in zip(ml.levels[:-1], ml.levels[1:], strict=True)]
    b = cupy.ones(A.shape[0])
    ml.solve(b, rtol=1e-8)  # the cycle's products planned on the set-up's matrices
    plans = [dict(lv.A._sg_mirror(CUPY, lv.A.dtype).plans) for lv in ml.levels[1:-1]]
    A_new = sg.csr_matrix(_new_values(A, seed=12))
    ml.update(A_new)
    for (P, R, coarse), lv, c in zip(before, ml.levels[:-1], ml.levels[1:], strict=True):
        # the kept patterns' path: P, R and the coarse matrix share the set-up's indices
        assert index_arrays(lv.P) is P and index_arrays(lv.R) is R
        assert index_arrays(c.A) is coarse
    for (P, R, coarse), lv, c in zip(objects, ml.levels[:-1], ml.levels[1:], strict=True):
        # the values written into the set-up's own matrices: their SpMV plans kept
        assert lv.P is P and lv.R is R and c.A is coarse
    for level, before in zip(ml.levels[1:-1], plans, strict=True):
        # the smoothed levels' SpMV plans, bound to the values array, are the same objects
        kept = {key: plan for key, plan in before.items() if plan.values_by_reference}
        now = level.A._sg_mirror(CUPY, level.A.dtype).plans
        assert kept and all(now.get(key) is plan for key, plan in kept.items()), (before, now)
    x = ml.solve(b, rtol=1e-8)
    residual = cupy.linalg.norm(b - A_new @ x) / cupy.linalg.norm(b)
    assert float(residual) <= 1e-8
    fresh = sg.linalg.amg(A_new, max_coarse=30, seed=5)
    for level, other in zip(ml.levels[:-1], fresh.levels[:-1], strict=True):
        P, R = sp.csr_matrix(level.P), sp.csr_matrix(level.R)
        assert (R != P.T.tocsr()).nnz == 0  # the gathered R is P's transpose exactly
        assert abs(P - sp.csr_matrix(other.P)).max() <= 1e-12 * abs(P).max()
    for level, other in zip(ml.levels[1:], fresh.levels[1:], strict=True):
        coarse = sp.csr_matrix(level.A)
        assert abs(coarse - sp.csr_matrix(other.A)).max() <= 1e-10 * abs(coarse).max()
    assert np.isclose(ml.levels[0].rho, fresh.levels[0].rho, rtol=1e-12)
