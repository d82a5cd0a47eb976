"""The solvers' block bookkeeping under ``graphs=`` replayed on the host (blocks give the
plain answer, failed captures are said, breakdowns reported like the plain loop) and
GMRES's restart cycle; split from ``test_linalg_options.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import sparsegpu as sg

from .test_linalg import TOL, _to_numpy, general, hpd, jacobi, ours, relative_residual, rhs
from .test_linalg_options import CUSPARSE_REASON, graph_problem, lsqr_problem, solve


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

    from sparsegpu.linalg import _graphs, _krylov, _options

    monkeypatch.setattr(_options, "graph_refusal", lambda *args: None)
    monkeypatch.setattr(_graphs, "private_stream", lambda: nullcontext())
    # blocks of the most iterations, however long a host iteration takes here (the
    # sizing by time has its own tests below)
    monkeypatch.setattr(_krylov, "BLOCK_SECONDS", math.inf)

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


def test_a_block_holds_about_block_seconds_of_iterations():
    from sparsegpu.linalg._krylov import BLOCK_SECONDS, GRAPH_BLOCK, block_size

    assert block_size(BLOCK_SECONDS / 100) == GRAPH_BLOCK  # short iterations: the most
    assert block_size(BLOCK_SECONDS / 5) == 5
    assert block_size(BLOCK_SECONDS / 5, period=3) == 3  # a multiple of the period
    assert block_size(BLOCK_SECONDS * 10) == 1  # long ones: one at a time
    assert block_size(BLOCK_SECONDS * 10, period=3) == 3
    assert block_size(0.0) == GRAPH_BLOCK and block_size(BLOCK_SECONDS / 5, most=4) == 4


@pytest.mark.parametrize("solver,options", [("cg", {}), ("cg", {"M": "matrix"}),
                                            ("bicgstab", {}), ("minres", {})], ids=str)  # fmt: skip
@pytest.mark.parametrize("seconds", [1e-12, 0.3], ids=["short-blocks", "most"])
def test_long_iterations_are_captured_in_short_blocks(host_graphs, monkeypatch, solver,
                                                      options, seconds):  # fmt: skip
    """A block sized by iteration 1's time (BLOCK_SECONDS made tiny: every iteration is
    "long"), and the answer, info and count the plain loop's; an explicit check_every is
    the block as given."""
    from sparsegpu.linalg import _krylov

    host_graphs(ReplayOnHost)
    monkeypatch.setattr(_krylov, "BLOCK_SECONDS", seconds)
    S = graph_problem(solver, np.float64, 16)
    b = rhs(S.shape[0], np.float64)
    options = {"rtol": 1e-12, **options}
    if options.get("M") is not None:
        options["M"] = ours(jacobi(S), "scipy")
    run = getattr(sg.linalg, solver)
    plain, info_plain = run(ours(S, "scipy"), b, graphs=False, **options)
    count = sg.linalg.last_solve_info().iterations
    x, info = run(ours(S, "scipy"), b, **options)
    used = sg.linalg.last_solve_info()
    assert info == info_plain and used.iterations == count
    np.testing.assert_array_equal(x, plain)
    period = 3 if solver == "minres" else 1
    most = 16 - 16 % period
    assert used.graphs and used.block == (period if seconds < 1e-6 else most)
    assert used.graphs_reason == f"captured {used.block} iterations a block"
    if solver == "cg":
        run(ours(S, "scipy"), b, check_every=5, **options)
        assert sg.linalg.last_solve_info().block == 5


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
