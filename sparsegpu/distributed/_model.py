"""A cost model of distributed products and CG iterations (a model, not a measurement)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CostEstimate:
    """What :func:`cost_model` predicts for one rank count (seconds; a model).

    Attributes
    ----------
    ranks : int
    product_s : float
        ``T_local(nnz / P) + halo_bytes / bandwidth + latency * neighbours``.
    cg_iteration_s : float
        ``product_s`` plus the vector updates and ``allreduces * log2(P) * alpha``.
    communication_fraction : float
        The share of ``cg_iteration_s`` spent communicating.
    speedup : float
        ``cg_iteration_s`` on one rank over this one.
    """

    ranks: int
    product_s: float
    cg_iteration_s: float
    communication_fraction: float
    speedup: float


def cost_model(nnz, n_rows, ranks, *, halo_bytes, neighbours, product_rate=3e11,
               vector_rate=4e12, bandwidth=20e9, latency=5e-6, allreduce_latency=5e-6,
               allreduces=3, itemsize=8) -> CostEstimate:  # fmt: skip
    """Predicted time of one distributed product and one CG iteration on ``ranks`` GPUs.

    A model, clearly: each rank multiplies ``nnz / P`` nonzeros at ``product_rate``
    nonzeros per second, receives ``halo_bytes`` from ``neighbours`` ranks over links of
    ``bandwidth`` bytes/s with ``latency`` seconds each (not overlapped, a pessimistic
    choice), and a CG iteration adds five vector sweeps of ``n_rows / P`` entries at
    ``vector_rate`` bytes/s and ``allreduces`` reductions of ``log2(P) * allreduce_latency``:

    ``T_product(P) = nnz / (P * product_rate) + halo_bytes / bandwidth + latency * neighbours``

    ``T_cg(P) = T_product(P) + 5 * 3 * itemsize * n_rows / (P * vector_rate)
    + allreduces * ceil(log2 P) * allreduce_latency``

    Parameters
    ----------
    nnz, n_rows : int
        The global matrix's nonzeros and rows.
    ranks : int
        P, the number of GPUs (one rank each).
    halo_bytes : int
        Bytes one rank receives per product (the busiest rank; see
        ``A.explain()`` for a real matrix, or :func:`stencil_halo`).
    neighbours : int
        Ranks the busiest rank exchanges with.
    product_rate : float
        Local product speed, nonzeros per second (default 3e11: about an H200's FP64
        CSR product on a regular matrix, 12-16 bytes a nonzero at ~4 TB/s).
    vector_rate : float
        Local memory bandwidth for the vector updates, bytes per second (default 4e12).
    bandwidth : float
        Bytes per second of one halo transfer, host staging included (default 20e9).
    latency : float
        Seconds per halo message (default 5e-6).
    allreduce_latency : float
        Seconds per step of a ``log2 P``-step allreduce (default 5e-6).
    allreduces : int
        Reductions per CG iteration (default 3: the two dot products and the product's
        closing error agreement; 4 with a preconditioner).
    itemsize : int
        Bytes per value (8 for float64).

    Returns
    -------
    CostEstimate

    Examples
    --------
    >>> est = cost_model(10**9, 10**8, 64, halo_bytes=2 * 8 * 464**2, neighbours=2)
    >>> round(est.product_s * 1e3, 3), round(est.communication_fraction, 2)
    (0.234, 0.73)
    """
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, got {ranks}")

    def one(p, halo, links):
        local = nnz / (p * product_rate)
        exchange = halo / bandwidth + latency * links
        vectors = 5 * 3 * itemsize * n_rows / (p * vector_rate)
        reduce = allreduces * math.ceil(math.log2(p)) * allreduce_latency if p > 1 else 0.0
        return local + exchange, local + exchange + vectors + reduce, exchange + reduce

    product, iteration, communication = one(ranks, halo_bytes if ranks > 1 else 0,
                                            neighbours if ranks > 1 else 0)  # fmt: skip
    single = one(1, 0, 0)[1]
    return CostEstimate(ranks, product, iteration, communication / iteration, single / iteration)


def stencil_halo(n: int, ranks: int, itemsize: int = 8) -> tuple[int, int]:
    """(halo bytes received, neighbours) of the busiest rank for the 7-point stencil on an
    ``n^3`` grid in natural order, split into contiguous row blocks (a model).

    While a block holds at least one ``n x n`` plane it needs one plane from each side:
    ``2 n^2`` values from 2 neighbours, however many ranks there are. Thinner blocks
    need about their own size from each side, ``2 (n^3 / P + n)`` values, from up to 6
    ranks (the blocks one plane above and below can straddle two ranks each).

    Examples
    --------
    >>> stencil_halo(512, 64)
    (4194304, 2)
    >>> stencil_halo(512, 1024)
    (2105344, 6)
    """
    if ranks == 1:
        return 0, 0
    rows = n**3 / ranks
    if rows >= n * n:
        return 2 * n * n * itemsize, 2
    return int(2 * (rows + n) * itemsize), 6
