"""The halo plan: which x entries each rank sends to which (how they travel: ``_transport``).

A :class:`HaloPlan` is made once, collectively, when a distributed matrix is built: each
rank names the off-rank columns its rows reference (its ghosts, sorted by global column,
so the ghosts owned by one rank are one contiguous slice), and tells every owner which
of its entries it needs (one non-blocking all-to-all of counts and one of indices, with
the deadline). From then on a product exchanges exactly those entries, neighbour to
neighbour.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._partition import owners


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


def make_plan(ctx, ghost_cols: np.ndarray, col_offsets: np.ndarray) -> HaloPlan:
    """Set up the halo of this rank (collective, within ``ctx``'s deadline).

    ``ghost_cols`` are the sorted global columns this rank's rows reference off-rank.
    """
    size, rank = ctx.size, ctx.rank
    owner = owners(col_offsets, ghost_cols)
    recv_ranks = [int(r) for r in np.unique(owner)]
    recv_bounds = np.searchsorted(owner, recv_ranks + [size], side="left").astype(np.int64)
    wanted = np.bincount(owner, minlength=size).astype(np.int64)
    asked = np.empty(size, dtype=np.int64)
    ctx.wait([ctx.comm.Ialltoall(wanted, asked)], "csr_matrix: the halo's sizes")
    columns = np.ascontiguousarray(ghost_cols, dtype=np.int64)
    incoming = np.empty(int(asked.sum()), dtype=np.int64)
    send = [columns, wanted, np.concatenate(([0], np.cumsum(wanted)[:-1])), _int64()]
    receive = [incoming, asked, np.concatenate(([0], np.cumsum(asked)[:-1])), _int64()]
    ctx.wait([ctx.comm.Ialltoallv(send, receive)], "csr_matrix: the halo's entries")
    start = col_offsets[rank]
    bounds = np.concatenate(([0], np.cumsum(asked)))
    send_ranks = [r for r in range(size) if asked[r]]
    send_indices = [incoming[bounds[r] : bounds[r + 1]] - start for r in send_ranks]
    return HaloPlan(recv_ranks, recv_bounds, send_ranks, send_indices, int(ghost_cols.size))


def _int64():
    from ._comm import mpi

    return mpi().INT64_T
