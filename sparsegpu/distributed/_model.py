"""A cost model of distributed products and CG iterations (a model, not a measurement).

:func:`cost_model` is the formula; :class:`Fit` holds its rates, :func:`fit_cost_model`
fits them on a ``benchmarks/distributed_scaling.py`` result (one to a few GPUs of one
node), and :func:`predict` applies a fit to the 7-point stencil at any GPU count. Past one
node the network's figures are assumptions, said so in the fit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CostEstimate:
    """What :func:`cost_model` predicts for one rank count (seconds; a model).

    Attributes
    ----------
    ranks : int
    product_s : float
        One distributed product.
    cg_iteration_s : float
        One CG iteration: the product, the vector updates and the reductions.
    communication_fraction : float
        The share of ``cg_iteration_s`` not spent in local work (the exchange where the
        local product does not hide it, the product's fixed overhead, the reductions).
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
               allreduces=2, itemsize=8, overlap=True, overhead=0.0, gpus_per_node=None,
               network_bandwidth=None, network_latency=None,
               network_allreduce_latency=None) -> CostEstimate:  # fmt: skip
    """Predicted time of one distributed product and one CG iteration on ``ranks`` GPUs.

    A model, clearly. Each rank multiplies ``nnz / P`` nonzeros at ``product_rate``
    nonzeros a second; its halo, ``halo_bytes`` (the busiest rank's) from up to
    ``neighbours`` ranks, travels in one grouped exchange of ``latency`` seconds plus the
    bytes at ``bandwidth``, hidden behind the local product (``overlap``, sparsegpu's
    order) or after it, and a product costs ``overhead`` more on several ranks (the
    off-rank rows, the events):

    ``T_product(P) = max(nnz / (P rate), latency + halo / bandwidth) + overhead``

    A CG iteration adds five vector sweeps of ``n_rows / P`` entries (15 values a row
    read or written) at ``vector_rate`` bytes a second and ``allreduces`` reductions of
    ``allreduce_latency`` per doubling of the ranks:

    ``T_cg(P) = T_product(P) + 15 itemsize n_rows / (P vector_rate)
    + allreduces ceil(log2 P) allreduce_latency``

    Past ``gpus_per_node`` ranks (when given) the busiest halo crosses the network
    (``network_bandwidth``, ``network_latency``) and each reduction adds
    ``network_allreduce_latency`` per doubling of the node count.

    Parameters
    ----------
    nnz, n_rows : int
        The global matrix's nonzeros and rows.
    ranks : int
        P, the number of GPUs (one rank each).
    halo_bytes : int
        Bytes the busiest rank receives per product (``A.explain().max_halo_bytes`` for a
        real matrix, or :func:`stencil_halo`).
    neighbours : int
        Ranks the busiest rank exchanges with (recorded; the exchange is grouped).
    product_rate, vector_rate, bandwidth, latency, allreduce_latency, overhead
        As above (defaults: round figures for one H200 with host staging; pass a
        :class:`Fit`'s, or use :func:`predict`).
    allreduces : int
        Reductions per CG iteration (2: ``r.r`` and ``p.Ap``; 3 with a preconditioner).
    itemsize : int
        Bytes per value (8 for float64).
    overlap : bool
        Whether the exchange hides behind the local product (True) or follows it.
    gpus_per_node, network_bandwidth, network_latency, network_allreduce_latency
        Past one node (all four given, or none).

    Returns
    -------
    CostEstimate

    Examples
    --------
    >>> est = cost_model(10**9, 10**8, 64, halo_bytes=2 * 8 * 464**2, neighbours=2)
    >>> round(est.product_s * 1e3, 3), round(est.communication_fraction, 2)
    (0.177, 0.65)
    """
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, got {ranks}")
    network = (network_bandwidth, network_latency, network_allreduce_latency)
    if (gpus_per_node is None) != all(value is None for value in network) or (
        gpus_per_node is not None and any(value is None for value in network)
    ):
        raise ValueError(
            "pass gpus_per_node with network_bandwidth, network_latency and "
            "network_allreduce_latency (all four), or none of them"
        )

    def one(p):
        local = nnz / (p * product_rate)
        vectors = 15 * itemsize * n_rows / (p * vector_rate)
        if p == 1:
            return local, local + vectors, 0.0
        across = gpus_per_node is not None and p > gpus_per_node
        link_bandwidth, link_latency = network[:2] if across else (bandwidth, latency)
        exchange = link_latency + halo_bytes / link_bandwidth
        product = (max(local, exchange) if overlap else local + exchange) + overhead
        inside = min(p, gpus_per_node) if gpus_per_node else p
        reduce = allreduce_latency * math.ceil(math.log2(inside))
        if across:
            reduce += network_allreduce_latency * math.ceil(math.log2(p / gpus_per_node))
        iteration = product + vectors + allreduces * reduce
        return product, iteration, iteration - local - vectors

    product, iteration, communication = one(ranks)
    single = one(1)[1]
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


# Past one node nothing here was measured: InfiniBand NDR (400 Gb/s, a link per GPU, as
# on DGX H100 and most H100 clusters) at about 80% of its 50 GB/s, NCCL's point-to-point
# latency over it, and NCCL's small-message allreduce adding about 15 us per doubling of
# the nodes (tree algorithm). Assumptions, not readings.
NETWORK = {"gpus_per_node": 8, "network_bandwidth": 40e9, "network_latency": 8e-6,
           "network_allreduce_latency": 15e-6}  # fmt: skip


@dataclass(frozen=True)
class Fit:
    """The rates of :func:`cost_model`, fitted on measurements of one node.

    Attributes
    ----------
    product_rate : float
        Nonzeros a second of one GPU's product (the strong-scaling matrix on one GPU).
    vector_rate : float
        Bytes a second of CG's vector work (one GPU's CG iteration less its product).
    bandwidth, latency : float
        The halo exchange inside the node: a least-squares line through the halo-alone
        times (every run on several GPUs) against the busiest rank's halo bytes.
    overhead : float
        What a distributed product costs beyond ``max(local product, exchange)``
        (the mean over the runs on several GPUs).
    allreduce_latency : float
        Per doubling of the GPUs, what a CG iteration on several GPUs costs beyond its
        product and vector work, over its two reductions (the mean).
    itemsize : int
    gpus_per_node, network_bandwidth, network_latency, network_allreduce_latency
        Past one node: :data:`NETWORK`'s assumptions.
    source : str
        What it was fitted on.
    """

    product_rate: float
    vector_rate: float
    bandwidth: float
    latency: float
    overhead: float
    allreduce_latency: float
    itemsize: int = 8
    gpus_per_node: int = NETWORK["gpus_per_node"]
    network_bandwidth: float = NETWORK["network_bandwidth"]
    network_latency: float = NETWORK["network_latency"]
    network_allreduce_latency: float = NETWORK["network_allreduce_latency"]
    source: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    def parameters(self) -> dict:
        """The keyword arguments of :func:`cost_model` this fit gives."""
        out = self.as_dict()
        out.pop("source")
        return out


def _distributed_rows(result, stencils_only=True):
    """(entry, row) of every run on several ranks (the stencils' only, by default)."""
    for entry in result["matrices"]:
        if stencils_only and entry["kind"] == "irregular":
            continue
        for row in entry["distributed"]:
            if row["ranks"] > 1 and (row["partition"] == "rows" or not stencils_only):
                yield entry, row


def _product_ms(graph, call) -> float:
    """A product's time as a solver runs it (captured in a graph) where it was measured so:
    what the CG iterations the model also predicts contain."""
    return call if graph is None else graph


def fit_cost_model(result: dict) -> Fit:
    """The model's rates from a ``benchmarks/distributed_scaling.py`` result (its stencil
    runs; the irregular matrix is left for checking). See :class:`Fit` for each rate."""
    itemsize = 8 if result["dtype"] == "float64" else 4
    strong = next(e for e in result["matrices"] if e["kind"] == "strong")
    one = strong["single"]
    product_s = _product_ms(one["product_ms"].get("sparsegpu_graph"),
                            one["product_ms"]["sparsegpu"]) * 1e-3  # fmt: skip
    product_rate = strong["nnz"] / product_s
    vector_rate = 15 * itemsize * strong["rows"] / (one["cg_iteration_ms"] * 1e-3 - product_s)
    # every exchange measured, the irregular matrix's too: its large halos resolve the bandwidth
    points = [(row["max_halo_bytes"], row["halo_ms"] * 1e-3)
              for _, row in _distributed_rows(result, stencils_only=False)]  # fmt: skip
    latency, bandwidth = _line(points)
    overheads, reductions = [], []
    for entry, row in _distributed_rows(result):
        p = row["ranks"]
        local = entry["nnz"] * row["imbalance"] / (p * product_rate)
        exchange = latency + row["max_halo_bytes"] / bandwidth
        product = _product_ms(row.get("product_graph_ms"), row["product_ms"]) * 1e-3
        overheads.append(product - max(local, exchange))
        vectors = 15 * itemsize * entry["rows"] / (p * vector_rate)
        spare = row["cg_iteration_ms"] * 1e-3 - product - vectors
        reductions.append(spare / (2 * math.ceil(math.log2(p))))
    return Fit(
        product_rate=product_rate,
        vector_rate=vector_rate,
        bandwidth=bandwidth,
        latency=latency,
        overhead=max(0.0, sum(overheads) / len(overheads)) if overheads else 0.0,
        allreduce_latency=max(0.0, sum(reductions) / len(reductions)) if reductions else 0.0,
        itemsize=itemsize,
        source=f"{result['ranks']} x {result.get('device')}, {result['dtype']}: stencil runs of "
        f"benchmarks/distributed_scaling.py (n={result['args']['n']}, weak rows="
        f"{result['args']['weak_rows']})",
    )


def _line(points) -> tuple[float, float]:
    """(latency, bandwidth) of ``seconds = latency + bytes / bandwidth`` through ``points``
    (least squares; a single point, or a slope that is not positive, gives zero latency)."""
    if not points:
        return 0.0, float("inf")
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    if slope <= 0:
        return 0.0, mean_x / mean_y
    latency = mean_y - slope * mean_x
    if latency < 0:
        return 0.0, mean_x / mean_y
    return latency, 1.0 / slope


def predict(fit: Fit, kind: str, ranks: int, *, grid=None, weak_rows=None) -> CostEstimate:
    """:func:`cost_model` with ``fit``'s rates for the 7-point stencil in natural order:
    ``kind`` "strong" on a ``grid``^3 grid, or "weak" with ``weak_rows`` rows a GPU (the
    grid growing with the GPUs), split into contiguous row blocks."""
    if kind == "strong":
        n = int(grid)
    elif kind == "weak":
        n = round((ranks * weak_rows) ** (1 / 3))
    else:
        raise ValueError(f"kind must be 'strong' or 'weak', got {kind!r}")
    halo, neighbours = stencil_halo(n, ranks, fit.itemsize)
    return cost_model(7 * n**3 - 6 * n**2, n**3, ranks, halo_bytes=halo, neighbours=neighbours,
                      **fit.parameters())  # fmt: skip
