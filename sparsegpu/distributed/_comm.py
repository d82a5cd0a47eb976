"""MPI plumbing: importing mpi4py, agreeing on errors, and waits that cannot hang.

Failure protocol
----------------
Every collective operation of :mod:`sparsegpu.distributed` (construction, products, dots,
scatter, gather) ends at a well-defined point where the ranks agree on whether any of
them failed:

* a rank whose local work raises keeps its side of the communication going (it still
  posts its halo sends, with zeros, and still joins the reductions), then every rank
  learns the failing ranks and their messages (one extra ``allgather``, only on the
  error path) and raises the same :class:`RankError`;
* every wait (point-to-point halo messages and the non-blocking reductions alike) is a
  ``Test`` loop with a deadline (``timeout`` seconds, default
  ``SPARSEGPU_MPI_TIMEOUT`` or 120): a rank that never arrives (it died, or is stuck
  outside this operation) makes the others raise :class:`TimeoutError` naming the
  operation and, for halo messages, the silent ranks, instead of hanging.

After a ``TimeoutError`` the communicator's state is undefined (a message may still be
in flight): end the job, e.g. with ``comm.Abort()``.
"""

from __future__ import annotations

import os
import time

import numpy as np

ENV_TIMEOUT = "SPARSEGPU_MPI_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
# how long a wait spins on Test before it starts sleeping between tests
_SPIN_SECONDS = 1e-3
_SLEEP_SECONDS = 1e-4


class RankError(RuntimeError):
    """A collective operation failed on one or more ranks; raised on every rank.

    Attributes
    ----------
    ranks : list of int
        The ranks whose local work raised.
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
            "pip install 'sparsegpu[mpi]' (mpi4py and MPICH from PyPI) or against your "
            "cluster's MPI (env MPICC=mpicc pip install mpi4py)"
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
    timeout = float(timeout)
    if not np.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    return timeout or None


def wait_all(requests: list, timeout: float | None, what: str, peers=None) -> None:
    """Complete ``requests`` or raise TimeoutError after ``timeout`` seconds.

    ``peers[i]`` is the rank at the other end of ``requests[i]`` (named in the error).
    """
    if not requests:
        return
    MPI = mpi()
    if timeout is None:
        MPI.Request.Waitall(requests)
        return
    start = time.monotonic()
    while not MPI.Request.Testall(requests):
        elapsed = time.monotonic() - start
        if elapsed > timeout:
            silent = ""
            if peers is not None:
                pending = sorted({peers[i] for i, r in enumerate(requests) if not r.Test()})
                silent = f" (still waiting on rank(s) {pending})"
            raise TimeoutError(
                f"{what}: not complete after {timeout:g} s{silent}; a rank died or is stuck "
                f"outside this operation. End the job (comm.Abort()); raise the limit with "
                f"timeout= or {ENV_TIMEOUT} if the operation is just slow"
            )
        if elapsed > _SPIN_SECONDS:
            time.sleep(_SLEEP_SECONDS)


def allreduce_sum(comm, values: np.ndarray, timeout: float | None, what: str) -> np.ndarray:
    """Sum a small numpy array over the ranks (non-blocking, with the deadline)."""
    out = np.empty_like(values)
    request = comm.Iallreduce(values, out, op=mpi().SUM)
    wait_all([request], timeout, what)
    return out


# bytes of each rank's error message carried by the error-path allgather
MESSAGE_BYTES = 512


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def raise_if_failed(comm, failed: float, error, timeout, what: str) -> None:
    """Raise the same RankError on every rank when ``failed`` (a summed flag) is nonzero.

    ``error`` is this rank's exception or None; the failing ranks' messages (the first
    ``MESSAGE_BYTES`` bytes of each) are gathered, only on this error path and with the
    deadline, so that every rank can name them.
    """
    if not failed:
        return
    mine = np.zeros(MESSAGE_BYTES + 1, dtype=np.uint8)
    if error is not None:
        text = _describe(error).encode("utf-8", "replace")[:MESSAGE_BYTES]
        mine[0] = 1
        mine[1 : 1 + len(text)] = np.frombuffer(text, dtype=np.uint8)
    table = np.empty((comm.Get_size(), MESSAGE_BYTES + 1), dtype=np.uint8)
    wait_all([comm.Iallgather(mine, table)], timeout, f"{what}: sharing the error")
    ranks = [rank for rank in range(len(table)) if table[rank, 0]]
    detail = "; ".join(
        f"rank {rank}: " + table[rank, 1:].tobytes().rstrip(b"\0").decode("utf-8", "replace")
        for rank in ranks
    )
    raise RankError(f"{what} failed on rank(s) {ranks} ({detail})", ranks) from error


def agree(comm, error, timeout, what: str) -> None:
    """Collective: raise the same RankError on every rank if ``error`` is set on any."""
    flag = np.array([0.0 if error is None else 1.0])
    total = allreduce_sum(comm, flag, timeout, what)
    raise_if_failed(comm, total[0], error, timeout, what)


def local_rank(comm) -> int:
    """This rank's index among the ranks sharing its node."""
    node = comm.Split_type(mpi().COMM_TYPE_SHARED)
    try:
        return node.Get_rank()
    finally:
        node.Free()
