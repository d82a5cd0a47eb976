"""The halo exchange: which x entries each rank sends to which, and how they travel.

A :class:`HaloPlan` is made once, collectively, when a distributed matrix is built: each
rank names the off-rank columns its rows reference (its ghosts, sorted by global column,
so the ghosts owned by one rank are one contiguous slice), and tells every owner which
of its entries it needs (one ``alltoall`` of index lists at construction). From then on a
product exchanges exactly those entries, neighbour to neighbour (``Irecv``/``Isend``).

A transport moves the entries. :class:`HostStaged` is the one implemented: NumPy vectors
are sent as they are; CuPy vectors are gathered on the device into one packed buffer,
copied to pinned host memory, sent, and the received ghosts copied back to the device.
Device-to-device transports (NCCL, CUDA-aware MPI) are not implemented: they were not
testable where this was written, and host staging works with any MPI.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _comm
from ._partition import owners

HALO_TAG = 17


@dataclass
class HaloPlan:
    """Who sends what to whom in a product (the same for every product of a matrix).

    Attributes
    ----------
    recv_ranks : list of int
        The ranks owning this rank's ghosts, ascending.
    recv_bounds : numpy.ndarray
        ``ghosts[recv_bounds[k]:recv_bounds[k + 1]]`` come from ``recv_ranks[k]``.
    send_ranks : list of int
        The ranks needing entries this rank owns, ascending.
    send_indices : list of numpy.ndarray
        Local indices (into this rank's x block) sent to each of ``send_ranks``.
    n_ghost : int
        Off-rank x entries this rank receives per product.
    """

    recv_ranks: list
    recv_bounds: np.ndarray
    send_ranks: list
    send_indices: list
    n_ghost: int

    @property
    def neighbours(self) -> list:
        """Every rank this one exchanges with, ascending."""
        return sorted(set(self.recv_ranks) | set(self.send_ranks))

    def bytes_per_product(self, itemsize: int) -> tuple[int, int]:
        """(bytes received, bytes sent) by this rank per product."""
        sent = sum(int(indices.size) for indices in self.send_indices)
        return self.n_ghost * itemsize, sent * itemsize


def make_plan(comm, ghost_cols: np.ndarray, col_offsets: np.ndarray) -> HaloPlan:
    """Set up the halo of this rank (collective: every rank calls it once).

    ``ghost_cols`` are the sorted global columns this rank's rows reference off-rank.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    owner = owners(col_offsets, ghost_cols)
    recv_ranks = [int(r) for r in np.unique(owner)]
    recv_bounds = np.searchsorted(owner, recv_ranks + [size], side="left").astype(np.int64)
    wanted = [None] * size
    for k, source in enumerate(recv_ranks):
        wanted[source] = ghost_cols[recv_bounds[k] : recv_bounds[k + 1]].astype(np.int64)
    asked = comm.alltoall(wanted)
    start = col_offsets[rank]
    send_ranks = [r for r in range(size) if asked[r] is not None]
    send_indices = [asked[r] - start for r in send_ranks]
    return HaloPlan(recv_ranks, recv_bounds, send_ranks, send_indices, int(ghost_cols.size))


class HostStaged:
    """The exchange through host memory (pinned for CuPy vectors); works with any MPI.

    Parameters
    ----------
    comm : mpi4py communicator
        The matrix's private communicator.
    plan : HaloPlan
    xp : module
        numpy or cupy: where the vectors live.
    dtype : numpy.dtype
        The value dtype exchanged.
    timeout : float or None
        Seconds a product may wait for its neighbours.
    """

    name = "host-staged"

    def __init__(self, comm, plan: HaloPlan, xp, dtype, timeout):
        self.comm, self.plan, self.xp = comm, plan, xp
        self.dtype = np.dtype(dtype)
        self.timeout = timeout
        self.on_device = xp is not np
        n_send = sum(int(indices.size) for indices in plan.send_indices)
        self._send_bounds = np.concatenate(
            ([0], np.cumsum([indices.size for indices in plan.send_indices]))
        ).astype(np.int64)
        packed = np.concatenate(plan.send_indices) if plan.send_indices else np.zeros(0, np.int64)
        if self.on_device:
            import cupyx

            self._pack_index = xp.asarray(packed)
            self._send_host = cupyx.empty_pinned(n_send, dtype=self.dtype)
            self._recv_host = cupyx.empty_pinned(plan.n_ghost, dtype=self.dtype)
        else:
            self._pack_index = packed
            self._send_host = np.empty(n_send, dtype=self.dtype)
            self._recv_host = np.empty(plan.n_ghost, dtype=self.dtype)

    @staticmethod
    def reason(xp) -> str:
        """Why this transport was chosen, for :meth:`sparsegpu.distributed.csr_matrix.explain`."""
        if xp is np:
            return "vectors live on the host: MPI sends the NumPy buffers directly"
        return (
            "vectors live on the GPU: packed on the device, staged through pinned host "
            "buffers (NCCL and CUDA-aware MPI transports are not implemented yet)"
        )

    def start(self, x_local):
        """Post the receives and the sends of ``x_local``'s entries.

        Returns (requests, peers, error): a packing error is returned, not raised, after
        zeros were sent in its place, so the neighbours are never left waiting.
        """
        plan, comm = self.plan, self.comm
        requests, peers = [], []
        for k, source in enumerate(plan.recv_ranks):
            lo, hi = plan.recv_bounds[k], plan.recv_bounds[k + 1]
            requests.append(comm.Irecv(self._recv_host[lo:hi], source=source, tag=HALO_TAG))
            peers.append(source)
        error = None
        try:
            if not self._send_host.size:
                pass  # nothing to send: no gather, and no wait for the device
            elif self.on_device:
                packed = x_local[self._pack_index]
                packed.get(out=self._send_host)  # waits for the gather kernel
            else:
                np.take(x_local, self._pack_index, out=self._send_host)
        except Exception as exc:
            error = exc
            self._send_host[...] = 0
        for k, dest in enumerate(plan.send_ranks):
            lo, hi = self._send_bounds[k], self._send_bounds[k + 1]
            requests.append(comm.Isend(self._send_host[lo:hi], dest=dest, tag=HALO_TAG))
            peers.append(dest)
        return requests, peers, error

    def finish(self, requests, peers):
        """Wait for the exchange (with the deadline); the ghosts, where the vectors live."""
        _comm.wait_all(requests, self.timeout, "halo exchange", peers)
        if self.on_device and self._recv_host.size:
            return self.xp.asarray(self._recv_host)
        return self._recv_host  # also the empty ghost vector of a rank with no halo
