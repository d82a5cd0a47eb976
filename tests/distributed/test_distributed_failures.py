"""sparsegpu.distributed given bad input and failing ranks: disagreeing ranks, a rank that
raises mid-product or never joins, timeouts that name the missing rank, waits that never
spin; split from ``test_distributed.py``. Run under ``mpiexec -n P`` like it.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
import scipy.sparse as sp

MPI = pytest.importorskip("mpi4py.MPI")

import sparsegpu as sg  # noqa: E402
import sparsegpu.distributed as sgd  # noqa: E402
from sparsegpu.datasets.synthetic import stencil_2d  # noqa: E402
from sparsegpu.device import _cuda  # noqa: E402

from .test_distributed import TIMEOUT, distribute, needs_ranks, scatter  # noqa: E402

# ----------------------------------------------------------------- bad input


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


# a deadline for the tests of failures, and the slack a wait may take beyond it
SHORT = 2.0
SLACK = 3.0


def break_products(A, after: int = 0):
    """Make this rank's local products raise after ``after`` good ones (those of plain
    products and of solves alike)."""
    calls = []

    class Broken:
        def __init__(self, good):
            self.good = good

        def matvec(self, x, out=None):
            calls.append(1)
            if len(calls) > after:
                raise ArithmeticError("injected failure")
            return self.good.matvec(x, out=out)

    for capturable in (False, True):
        work = A._work_for(np.dtype(np.float64), None, capturable)
        work.diag = Broken(work.diag)


def test_an_exception_mid_product_fails_everywhere(comm):
    A = distribute(stencil_2d(10), comm)
    x = scatter(A, np.ones(100), comm)
    culprit = comm.Get_size() - 1
    if comm.Get_rank() == culprit:
        break_products(A)
    began = time.monotonic()
    # the culprit raises in its product; the others at their next operation that waits
    with pytest.raises(sgd.RankError, match=rf"rank\(s\) \[{culprit}\].*injected failure"):
        (A @ x).gather(root=None)
    assert time.monotonic() - began < TIMEOUT
    # the matrix's communicator is spent: it says so rather than hanging on stale messages
    with pytest.raises(sgd.RankError, match="failed earlier and cannot be used again"):
        A @ x
    B = distribute(stencil_2d(10), comm)  # a new matrix works
    np.testing.assert_allclose((B @ scatter(B, np.ones(100), comm)).gather(None),
                               stencil_2d(10) @ np.ones(100))  # fmt: skip


@pytest.mark.parametrize("solver", ["cg", "gmres"])
def test_an_exception_mid_solve_fails_everywhere_within_the_deadline(comm, solver):
    # one solve first, so that compiling the solver's kernels (seconds on a fresh GPU
    # process: run alone under NCCL, this test failed its bound) is not timed below
    warm = distribute(stencil_2d(12), comm)
    getattr(sg.linalg, solver)(warm, scatter(warm, np.ones(144), comm), rtol=1e-12)
    A = distribute(stencil_2d(12), comm, timeout=SHORT)
    b = scatter(A, np.ones(144), comm)
    culprit = comm.Get_size() - 1
    if comm.Get_rank() == culprit:
        # the second product: one a plain iteration makes (cg times its second iteration
        # plain to size its graph blocks; a product that a graph replays never calls this
        # Python, so a failure injected later, past a capture of one iteration, could not
        # happen: under a loaded GPU suite the block was that short)
        break_products(A, after=1)
    began = time.monotonic()
    with pytest.raises(sgd.RankError, match=rf"rank\(s\) \[{culprit}\].*injected failure"):
        getattr(sg.linalg, solver)(A, b, rtol=1e-12)
    assert time.monotonic() - began < SHORT + SLACK


# Under NCCL the waiting rank used to abort NCCL before raising its TimeoutError, and NCCL
# (since 2.16) frees a communicator only once every rank of the node aborts it: rank 1,
# which never joined, never does, so rank 0 hung (2 x H200, NCCL 2.28). A timeout now
# aborts nothing (test_a_timeout_never_aborts_what_every_rank_must_abort), so rank 0
# raises; but the halo and the norm's reduction it queued wait on its GPU for rank 1 for
# good, and the next test's first GPU work would wait behind them: after such a timeout
# the job must end (the error says so). Not run under NCCL; the host transport checks the
# timeout on every machine.
NCCL_WORK_LEFT_WAITING = (
    "under NCCL the product rank 1 never joined stays queued on rank 0's GPU (nothing can "
    "end it without rank 1: NCCL >= 2.16 frees an aborted communicator only when every "
    "rank aborts it), so the next test's GPU work would wait for good; the job must end"
)


@pytest.mark.parametrize("transport", ["auto", "host"])
def test_a_rank_missing_a_product_times_out_instead_of_hanging(comm, transport):
    needs_ranks(comm, 2)
    A = distribute(stencil_2d(10), comm, timeout=SHORT, transport=transport)
    if A.transport == "nccl":  # the same on every rank: they leave the test together
        pytest.xfail(NCCL_WORK_LEFT_WAITING)
    x = scatter(A, np.ones(100), comm)
    if comm.Get_rank() == 1:  # rank 1 never joins this product
        return
    began = time.monotonic()
    # its neighbours wait for its halo; everyone waits for it in the norm's reduction
    with pytest.raises(TimeoutError, match=rf"not complete after {SHORT:g} s") as caught:
        (A @ x).norm()
    assert time.monotonic() - began < 2 * SHORT + SLACK
    if 1 in A._halo.recv_ranks:
        assert "still waiting on rank(s) [1]" in str(caught.value)
    # no barrier here: the end-of-test agreement (conftest) has its own deadline


def test_a_timeout_never_aborts_what_every_rank_must_abort(comm):
    """A context's transports hear of its failure with the error: a TimeoutError (which
    no other rank hears of) must not make them abort anything every rank must abort
    (NCCL's communicator); a RankError (which every rank gets) may."""
    needs_ranks(comm, 2)
    from sparsegpu.distributed import _comm

    heard = []
    ctx = _comm.open_context(comm, SHORT)
    ctx.on_failure(heard.append)
    if comm.Get_rank() == 0:  # the others never enter: rank 0 times out
        with pytest.raises(TimeoutError, match="did not enter it"):
            ctx.enter("explain")
        assert len(heard) == 1 and isinstance(heard[0], TimeoutError)
    others = _comm.open_context(comm, TIMEOUT)
    others.on_failure(heard.append)
    if comm.Get_rank() == 1:  # a local error: told to every rank, each of which hears it
        raise_here = others.fail(ArithmeticError("injected"), "a product")
        assert isinstance(raise_here, sgd.RankError)
    else:  # waiting on a message rank 1 never sends: the notice ends the wait
        buffer = np.zeros(1)
        request = others.comm.Irecv(buffer, source=1, tag=99)
        with pytest.raises(sgd.RankError, match="injected"):
            others.wait([request], "waiting")
        request.Cancel()
        request.Wait()
    assert isinstance(heard[-1], sgd.RankError)


def test_a_timed_out_nccl_channel_is_set_aside_only_with_work_queued():
    """After a timeout a NCCL channel is never aborted; it is taken out of use (the next
    matrix makes another) only when work of it may still be queued on a stream."""
    from sparsegpu.distributed import _transport

    class Stream:
        def __init__(self, done):
            self.done = done

    class Comm:
        aborted = 0

        def abort(self):
            Comm.aborted += 1

    idle = _transport._Channel(Comm(), Stream(True))
    assert not idle.set_aside([Stream(True), Stream(True)]) and idle.alive
    busy = _transport._Channel(Comm(), Stream(False))
    assert busy.set_aside([busy.stream, Stream(True)]) and not busy.alive
    assert Comm.aborted == 0
    busy.abort()  # already out of use: nothing more to end
    assert Comm.aborted == 0
    idle.abort()  # after an error every rank gets: aborted
    assert Comm.aborted == 1 and not idle.alive


@pytest.mark.parametrize("capturing", [True, False])
def test_a_nccl_abort_first_ends_a_capture_in_progress(monkeypatch, capturing):
    """A rank's failure can come within a solve's captured iterations; NCCL's abort waited
    for good for the calls the capture held, so the transport ends the capture (dropping
    it) before it aborts. After a timeout it does neither."""
    import types

    from sparsegpu.distributed import _transport

    events = []

    class Stream:
        done = True

        def __init__(self):
            self.capturing = capturing

        def is_capturing(self):
            return self.capturing

        def end_capture(self):
            events.append("end capture")
            self.capturing = False

    class Comm:
        def abort(self):
            events.append("abort")

    current = Stream()
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: current))
    monkeypatch.setattr(_cuda, "cupy_or_none", lambda: cupy)
    transport = object.__new__(_transport.Nccl)
    transport.stream = Stream()
    transport.channel = _transport._Channel(Comm(), transport.stream)
    transport.abort(TimeoutError("a rank never came"))
    assert events == [] and transport.channel.alive
    transport.abort(sgd.RankError("rank 1 failed", [1]))
    assert events == (["end capture", "abort"] if capturing else ["abort"])
    assert not current.capturing and not transport.channel.alive


def test_explain_on_one_rank_names_the_others_within_the_deadline(comm):
    """The docs' first example used to hang: ``explain()`` called on rank 0 only."""
    needs_ranks(comm, 2)
    A = distribute(stencil_2d(6), comm, timeout=SHORT)
    if comm.Get_rank() != 0:
        return
    others = list(range(1, comm.Get_size()))
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=rf"explain: rank\(s\) {re.escape(str(others))} did not "
                       rf"enter it within {SHORT:g} s"):  # fmt: skip
        A.explain()
    assert time.monotonic() - began < SHORT + SLACK
    with pytest.raises(sgd.RankError, match="cannot be used again"):
        A.explain()


def test_waits_yield_then_sleep_longer_and_never_spin(monkeypatch):
    """4 ranks on 2 cores took 60x the time of 2: waits spun before they slept. Every
    pause of a wait now gives the core away: yields first, then sleeps doubling to 0.2 ms."""
    from sparsegpu.distributed import _comm

    pauses = []

    class Clock:  # the module's time, stood in for: sleeps advance it
        now = 0.0

        @classmethod
        def monotonic(cls):
            return cls.now

        @classmethod
        def sleep(cls, seconds):
            pauses.append(seconds)
            cls.now += seconds

    monkeypatch.setattr(_comm, "time", Clock)
    monkeypatch.setattr(_comm, "_yield_core", lambda: pauses.append("yield"))
    backoff = _comm.Backoff()
    for _ in range(3):
        backoff.pause()
    assert pauses == ["yield"] * 3
    Clock.now += _comm._YIELD_SECONDS
    pauses.clear()
    for _ in range(10):
        backoff.pause()
    assert pauses[:3] == [1e-5, 2e-5, 4e-5]
    assert pauses[-1] == _comm._LONGEST_SLEEP_SECONDS == max(pauses)


def test_a_rank_that_never_calls_the_solver_is_named_in_the_others_timeout(comm):
    needs_ranks(comm, 2)
    A = distribute(stencil_2d(6), comm, timeout=SHORT)
    b = scatter(A, np.ones(36), comm)
    missing = comm.Get_size() - 1
    if comm.Get_rank() == missing:  # never enters cg
        return
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=rf"cg: rank\(s\) \[{missing}\] did not enter it"):
        sg.linalg.cg(A, b)
    assert time.monotonic() - began < SHORT + SLACK


def test_ranks_in_different_collectives_fail_at_once_naming_each_other(comm):
    needs_ranks(comm, 2)
    A = distribute(stencil_2d(6), comm, timeout=60.0)
    x = scatter(A, np.ones(36), comm)
    began = time.monotonic()
    if comm.Get_rank() == 0:
        with pytest.raises(sgd.RankError, match=r"rank 0 entered explain .* rank 1 entered gather"):
            A.explain()
    else:
        with pytest.raises(sgd.RankError, match=r"entered gather .* rank 0 entered explain"):
            x.gather()
    assert time.monotonic() - began < SLACK  # not the deadline: the roll call tells at once


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
