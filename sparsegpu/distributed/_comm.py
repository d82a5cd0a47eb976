"""MPI plumbing: importing mpi4py, errors that reach every rank, and waits that cannot hang.

Failure protocol
----------------
A distributed matrix talks on a :class:`Context`: a private duplicate of the user's
communicator with a deadline (``timeout``, default ``SPARSEGPU_MPI_TIMEOUT`` or 120 s).

* **Products, dots and solver iterations** never wait for the other ranks on the host
  (the halo and the reductions are ordered on the GPU by CUDA events). A rank whose local
  work raises still keeps its side of the communication going (it sends zeros), then
  sends a *notice* of its error to every rank and raises :class:`RankError`. The others
  raise the same RankError at their next sparsegpu operation on that communicator, or
  while waiting in one: every operation looks for notices on entry (a non-blocking probe),
  and every wait looks for them while it waits.
* **Guarded collectives** (building a matrix, ``scatter``, ``gather``, ``explain``, the
  end of a solve) begin with a *roll call*: every rank tells every other one which
  collective it entered (its name and sequence number). A rank that does not arrive
  within the deadline is named in the :class:`TimeoutError` the others raise; a rank that
  entered a different collective is named at once, in a RankError on both sides.
* **Every wait has the deadline**: MPI requests are completed by ``Test`` loops, GPU work
  by event queries, so a rank that never comes makes the others raise TimeoutError
  instead of hanging.

A context that failed (a RankError or a timeout) refuses every later operation with the
first error: messages may still be in flight. After a RankError (which every rank gets)
NCCL's traffic is aborted on every rank. After a timeout it is not (an abort would wait
for the rank that never came): the NCCL channel is set aside if work of it may still be
queued, so that no later matrix's messages pair with it, and that work waits on the GPU
for the missing rank. Build the matrix again, or end the job (``comm.Abort()``, what a
timeout's message says); run scripts as ``python -m mpi4py script.py`` so that an
uncaught exception on one rank ends every rank.
"""

from __future__ import annotations

import os
import pickle
import time

import numpy as np

ENV_TIMEOUT = "SPARSEGPU_MPI_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
# Between the tests of a wait: yields of the core for the first _YIELD_SECONDS, then
# sleeps from the first to the longest, doubling. A wait never spins without yielding:
# with more ranks than cores (4 ranks on 2), a spinning rank holds the core the rank it
# waits for needs (a CG took 30-60x longer); a yield costs a microsecond when no other
# process wants the core, so a short wait on a core of its own still ends at once.
_YIELD_SECONDS = 1e-3
_FIRST_SLEEP_SECONDS = 1e-5
_LONGEST_SLEEP_SECONDS = 2e-4
# message tags on a context's private communicator
HALO_TAG, ROLL_TAG, NOTICE_TAG, SETUP_TAG = 17, 18, 19, 20
# bytes of an error's text carried by a notice
MESSAGE_BYTES = 1024

#: The guarded collectives, by the code their roll call carries.
COLLECTIVES = ("csr_matrix", "scatter", "gather", "explain", "the end of a solve", "a solve")


class RankError(RuntimeError):
    """A distributed operation failed on one or more ranks; raised on every rank.

    Attributes
    ----------
    ranks : list of int
        The ranks whose local work raised (or that were out of step).
    """

    def __init__(self, message: str, ranks: list[int]):
        super().__init__(message)
        self.ranks = ranks


def mpi():
    """mpi4py's ``MPI`` module, or an ImportError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(
            f"sparsegpu.distributed needs mpi4py ({exc}); install it with "
            'pip install -e ".[mpi]" from the clone (mpi4py and MPICH from PyPI), or '
            "against your cluster's MPI (env MPICC=mpicc pip install mpi4py)"
        ) from None
    return MPI


def resolve_comm(comm):
    """``comm``, or ``MPI.COMM_WORLD`` when None."""
    return mpi().COMM_WORLD if comm is None else comm


def resolve_timeout(timeout) -> float | None:
    """Seconds a wait may take: ``timeout``, else the environment, else the default.

    None or 0 from the environment means wait forever.
    """
    if timeout is None:
        text = os.environ.get(ENV_TIMEOUT)
        if text is None:
            return DEFAULT_TIMEOUT
        try:
            timeout = float(text)
        except ValueError:
            raise ValueError(f"{ENV_TIMEOUT} must be a number of seconds, got {text!r}") from None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.number)):
        raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
    timeout = float(timeout)
    if not np.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    return timeout or None


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _timeout_error(what: str, timeout: float, detail: str) -> TimeoutError:
    return TimeoutError(
        f"{what}: not complete after {timeout:g} s{detail}; a rank died or is stuck outside "
        f"this operation. End the job (comm.Abort()); raise the limit with timeout= or "
        f"{ENV_TIMEOUT} if the operation is just slow"
    )


class Backoff:
    """The pause between two tests of a wait: for its first :data:`_YIELD_SECONDS` a
    yield of the core (``os.sched_yield``: another rank on this core runs, else the test
    comes again at once), then sleeps from :data:`_FIRST_SLEEP_SECONDS` doubling to
    :data:`_LONGEST_SLEEP_SECONDS`. A message that arrives during a sleep is seen at most
    one sleep late (0.2 ms at worst: with other work on the cores, sleeps of 1 ms made a
    4-rank CG on 2 cores take 25x its time in some runs)."""

    def __init__(self):
        self.start = time.monotonic()
        self.seconds = _FIRST_SLEEP_SECONDS

    def pause(self) -> None:
        if time.monotonic() - self.start < _YIELD_SECONDS:
            _yield_core()
            return
        time.sleep(self.seconds)
        self.seconds = min(2 * self.seconds, _LONGEST_SLEEP_SECONDS)


def _yield_core() -> None:
    if hasattr(os, "sched_yield"):
        os.sched_yield()
    else:  # Windows
        time.sleep(0)


def wait_all(requests: list, timeout: float | None, what: str, peers=None, poll=None) -> None:
    """Complete ``requests`` or raise TimeoutError after ``timeout`` seconds.

    ``peers[i]`` is the rank at the other end of ``requests[i]`` (named in the error);
    ``poll()`` is called while waiting (a context's notice check).
    """
    if not requests:
        return
    MPI = mpi()
    if timeout is None and poll is None:
        MPI.Request.Waitall(requests)
        return
    start, backoff = time.monotonic(), Backoff()
    while not MPI.Request.Testall(requests):
        if poll is not None:
            poll()
        if timeout is not None and time.monotonic() - start > timeout:
            silent = ""
            if peers is not None:
                pending = sorted({peers[i] for i, r in enumerate(requests) if not r.Test()})
                silent = f" (still waiting on rank(s) {pending})"
            raise _timeout_error(what, timeout, silent)
        backoff.pause()


def _text_buffer(text: str) -> np.ndarray:
    encoded = text.encode("utf-8", "replace")[:MESSAGE_BYTES]
    buffer = np.zeros(MESSAGE_BYTES, dtype=np.uint8)
    buffer[: len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    return buffer


def _buffer_text(buffer: np.ndarray) -> str:
    return buffer.tobytes().rstrip(b"\0").decode("utf-8", "replace")


class Context:
    """A private communicator with a deadline, guarded collectives and error notices.

    Parameters
    ----------
    comm : mpi4py communicator
        Used as it is (the caller duplicates the user's communicator first).
    timeout : float or None
        Seconds any wait may take (None: for ever).

    Attributes
    ----------
    comm, timeout, rank, size
    failure : BaseException or None
        The first error this context ended with; every later operation raises it again.
    """

    def __init__(self, comm, timeout):
        self.comm = comm
        self.timeout = timeout
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.failure = None
        self._sequence = 0
        self._sent = []  # notices in flight (their buffers must outlive the sends)
        self._on_failure = []  # callbacks run once when the context fails (abort NCCL)

    # ------------------------------------------------------------- failures
    def on_failure(self, callback) -> None:
        """Run ``callback(error)`` once if this context fails (transports end or set aside
        their traffic: see :meth:`_fail`)."""
        self._on_failure.append(callback)

    def _fail(self, error: BaseException) -> BaseException:
        """Record this context's first failure and tell its transports (``on_failure``).

        An error (a RankError: this rank's own, sent to every rank by :meth:`fail`, or
        another's, from a notice) reaches every rank, so every rank's transport may abort
        its traffic. A TimeoutError reaches no one: the rank waited for does not know, so
        a transport must not abort anything that needs every rank to abort (NCCL frees an
        aborted communicator only once every rank of the node aborts it: the rank that
        timed out would hang there instead of raising)."""
        if self.failure is None:
            self.failure = error
            for callback in self._on_failure:
                try:
                    callback(error)
                except Exception:  # noqa: S110 - the first error is the one to report
                    pass
        return error

    def _dead(self) -> RankError:
        ranks = getattr(self.failure, "ranks", [])
        return RankError(
            f"this distributed object's communicator failed earlier and cannot be used "
            f"again ({_describe(self.failure)}); build the matrix again, or end the job",
            ranks,
        )

    def check(self) -> None:
        """Raise if this context failed, or if another rank sent notice of an error
        (cheap: one non-blocking probe)."""
        if self.failure is not None:
            raise self._dead() from self.failure
        if self.size == 1:
            return
        MPI = mpi()
        status = MPI.Status()
        if not self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=NOTICE_TAG, status=status):
            return
        notices = []
        while True:
            buffer = np.empty(MESSAGE_BYTES + 1, dtype=np.uint8)
            self.comm.Recv(buffer, source=status.Get_source(), tag=NOTICE_TAG)
            notices.append((status.Get_source(), _buffer_text(buffer[1:])))
            if not self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=NOTICE_TAG, status=status):
                break
        ranks = sorted({rank for rank, _ in notices})
        detail = "; ".join(text for _, text in notices)
        raise self._fail(RankError(detail, ranks))

    def fail(self, error: BaseException, what: str) -> RankError:
        """This rank's local work in ``what`` raised ``error``: tell every other rank (they
        raise at their next operation, or while waiting in one) and return the RankError
        to raise here. The caller has kept its side of the communication going."""
        if isinstance(error, RankError):
            return error
        message = f"{what} failed on rank(s) [{self.rank}] (rank {self.rank}: {_describe(error)})"
        rank_error = RankError(message, [self.rank])
        rank_error.__cause__ = error
        if self.failure is None and self.size > 1:
            buffer = np.concatenate(([1], _text_buffer(message))).astype(np.uint8)
            self._sent.append(buffer)
            for rank in range(self.size):
                if rank != self.rank:
                    self.comm.Isend(buffer, dest=rank, tag=NOTICE_TAG)
        self._fail(rank_error)
        return rank_error

    # ---------------------------------------------------------------- waits
    def wait(self, requests: list, what: str, peers=None) -> None:
        """Complete MPI ``requests`` within the deadline, raising notices that arrive."""
        try:
            wait_all(requests, self.timeout, what, peers, poll=self.check)
        except TimeoutError as exc:
            raise self._fail(exc) from None

    def wait_device(self, stream, what: str, detail: str = "") -> None:
        """Wait for the work queued on ``stream`` within the deadline (event queries),
        raising notices that arrive meanwhile; ``detail`` says what it waits on."""
        event = stream.record()
        if event.done:
            self.check()
            return
        start, backoff = time.monotonic(), Backoff()
        while not event.done:
            self.check()
            if self.timeout is not None and time.monotonic() - start > self.timeout:
                raise self._fail(_timeout_error(what, self.timeout, detail)) from None
            backoff.pause()
        self.check()

    def allreduce(self, values: np.ndarray, what: str, op=None) -> np.ndarray:
        """Reduce a small host array over the ranks (non-blocking, with the deadline)."""
        out = np.empty_like(values)
        if self.size == 1:
            out[...] = values
            return out
        request = self.comm.Iallreduce(values, out, op=op or mpi().SUM)
        self.wait([request], what)
        return out

    def share(self, error, root: int, what: str) -> None:
        """Collective: the error ``root`` had (or None) reaches every rank, each of which
        raises the same RankError naming it."""
        buffer = np.zeros(MESSAGE_BYTES + 1, dtype=np.uint8)
        if self.rank == root and error is not None:
            buffer[0], buffer[1:] = 1, _text_buffer(_describe(error))
        self.wait([self.comm.Ibcast(buffer, root=root)], what)
        if buffer[0]:
            text = _buffer_text(buffer[1:])
            raise RankError(f"{what} failed on rank(s) [{root}] (rank {root}: {text})",
                            [root]) from error  # fmt: skip

    def agree(self, error, what: str) -> None:
        """Collective: if any rank has an ``error``, every rank raises the same RankError
        naming the failing ranks and their errors. One small allreduce; the texts are
        gathered only on that path. The context stays usable."""
        flag = np.array([0 if error is None else 1], dtype=np.int64)
        if not self.allreduce(flag, what)[0]:
            return
        mine = np.zeros(MESSAGE_BYTES + 1, dtype=np.uint8)
        if error is not None:
            mine[0], mine[1:] = 1, _text_buffer(_describe(error))
        table = np.empty((self.size, MESSAGE_BYTES + 1), dtype=np.uint8)
        self.wait([self.comm.Iallgather(mine, table)], what)
        ranks = [rank for rank in range(self.size) if table[rank, 0]]
        detail = "; ".join(f"rank {r}: {_buffer_text(table[r, 1:])}" for r in ranks)
        raise RankError(f"{what} failed on rank(s) {ranks} ({detail})", ranks) from error

    def allgather_objects(self, obj, what: str) -> list:
        """Every rank's picklable ``obj``, in rank order (non-blocking, with the deadline)."""
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        sizes = np.empty(self.size, dtype=np.int64)
        self.wait([self.comm.Iallgather(np.array([data.size], dtype=np.int64), sizes)], what)
        out = np.empty(int(sizes.sum()), dtype=np.uint8)
        displacements = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        request = self.comm.Iallgatherv(data, [out, sizes, displacements, mpi().BYTE])
        self.wait([request], what)
        return [pickle.loads(out[start : start + size].tobytes())
                for start, size in zip(displacements, sizes, strict=True)]  # fmt: skip

    # ------------------------------------------------------ guarded collectives
    def enter(self, collective: str, what: str | None = None) -> None:
        """The roll call opening guarded ``collective`` (one of COLLECTIVES), called
        ``what`` in messages (the collective's own name by default: a solve is named by
        its solver).

        Raises TimeoutError naming the ranks that did not enter within the deadline, or
        RankError naming those that entered another collective.
        """
        self.check()
        code = COLLECTIVES.index(collective)
        what = what or collective
        sequence = self._sequence
        self._sequence += 1
        if self.size == 1:
            return
        mine = np.array([sequence, code], dtype=np.int64)
        others = [r for r in range(self.size) if r != self.rank]
        tokens = np.zeros((self.size, 2), dtype=np.int64)
        receives = [self.comm.Irecv(tokens[r], source=r, tag=ROLL_TAG) for r in others]
        sends = [self.comm.Isend(mine, dest=r, tag=ROLL_TAG) for r in others]
        MPI = mpi()
        start, backoff = time.monotonic(), Backoff()
        while not MPI.Request.Testall(receives):
            self.check()
            if self.timeout is not None and time.monotonic() - start > self.timeout:
                missing = [r for r, request in zip(others, receives, strict=True)
                           if not request.Test()]  # fmt: skip
                raise self._fail(
                    TimeoutError(
                        f"{what}: rank(s) {missing} did not enter it within {self.timeout:g} s. "
                        f"{what} is collective: every rank of the communicator must call it, "
                        "in the same order as the others (call it on every rank, then print "
                        "on one); a rank that died or raised elsewhere never arrives"
                    )
                ) from None
            backoff.pause()
        MPI.Request.Waitall(sends)
        astray = [r for r in others if tokens[r, 0] != sequence or tokens[r, 1] != code]
        if astray:
            described = ", ".join(
                f"rank {r} entered {COLLECTIVES[tokens[r, 1]]} (its collective #{tokens[r, 0]})"
                for r in astray
            )
            raise self._fail(
                RankError(
                    f"the ranks are out of step: rank {self.rank} entered {what} (its "
                    f"collective #{sequence}) while {described}; every rank must make the "
                    "same collective calls in the same order",
                    astray,
                )
            )


def local_rank(comm) -> int:
    """This rank's index among the ranks sharing its node (after a roll call: every rank
    is known to be here, so the blocking split cannot hang)."""
    node = comm.Split_type(mpi().COMM_TYPE_SHARED)
    try:
        return node.Get_rank()
    finally:
        node.Free()


def open_context(comm, timeout, what: str = "csr_matrix") -> Context:
    """A new private context on ``comm`` (collective): the roll call of ``what`` on the
    user's communicator, then a duplicate of it, both within the deadline."""
    Context(comm, timeout).enter(what)
    private, request = comm.Idup()
    wait_all([request], timeout, f"{what}: duplicating the communicator")
    return Context(private, timeout)
