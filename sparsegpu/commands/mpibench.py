"""``sparsegpu mpibench``: strong and weak scaling of distributed products, under mpiexec.

``mpiexec -n P sparsegpu mpibench`` measures on 1, 2, 4, ... and P ranks of the one job
(sub-communicators; the other ranks wait): the 7-point Poisson stencil on a fixed
``n^3`` grid (strong scaling) and on a grid growing with the ranks so that each holds
about ``--weak-rows`` rows (weak scaling); with ``--irregular N``, the 7-point stencil on
``N^3`` numbered in random order, split by rows and by a graph partition. Rank 0 prints
the tables: time per product, per halo exchange, per CG iteration, halo bytes per product
and the share of the product spent in the exchange.
"""

from __future__ import annotations

import json

import numpy as np

from ..cli import CommandError, positive_int, require_matplotlib

HELP = "strong/weak scaling of distributed products and CG (run under mpiexec -n P)"


def add_arguments(parser) -> None:
    parser.add_argument("--n", type=positive_int, default=128,
                        help="grid edge of the strong-scaling stencil (default 128)")  # fmt: skip
    parser.add_argument("--weak-rows", type=positive_int, default=2**20,
                        help="rows per rank for weak scaling (default 2**20)")  # fmt: skip
    parser.add_argument("--irregular", type=int, default=0,
                        help="also a randomly numbered N^3 mesh, split by rows and by a graph "
                        "partition (pymetis)")  # fmt: skip
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--repeat", type=positive_int, default=20)
    parser.add_argument("--cg-iterations", type=positive_int, default=50)
    parser.add_argument("--json", help="also write the rows to this JSON file (rank 0)")
    parser.add_argument(
        "--plot",
        help="also draw time per product and per CG iteration against ranks, measured and "
        "as the cost model predicts, to this PNG file (rank 0; needs matplotlib)",
    )


def _rank_counts(size: int) -> list[int]:
    counts = [1 << k for k in range(size.bit_length()) if 1 << k <= size]
    return counts if counts[-1] == size else counts + [size]


def run(args) -> int:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise CommandError(f'mpibench needs mpi4py ({exc}); pip install -e ".[mpi]"') from None
    from .. import distributed as sgd
    from ..datasets.synthetic import permuted, stencil_3d
    from ..distributed import _bench

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if args.plot and rank == 0:
        require_matplotlib()
    dtype = np.dtype(args.dtype)
    rows = {"strong": [], "weak": [], "irregular": []}
    kinds = [("strong", "rows"), ("weak", "rows")]
    if args.irregular:
        kinds += [("irregular", "rows"), ("irregular", "graph")]
    for ranks in _rank_counts(world.Get_size()):
        sub = world.Split(0 if rank < ranks else MPI.UNDEFINED, rank)
        for kind, partition in kinds:
            n = {"strong": args.n, "irregular": args.irregular}.get(kind)
            n = n or round((ranks * args.weak_rows) ** (1 / 3))
            if sub != MPI.COMM_NULL:
                S = None
                if sub.Get_rank() == 0:
                    S = stencil_3d(n).astype(dtype)
                    S = permuted(S, seed=5) if kind == "irregular" else S
                A = sgd.csr_matrix(S, sub, partition=partition)
                del S
                row = {"ranks": ranks, "grid": n, "rows": A.shape[0], "nnz": A.nnz,
                       "partition": partition}  # fmt: skip
                row.update(_bench.measure(A, args.repeat, args.cg_iterations))
                rows[kind].append(row)
            world.Barrier()
        if sub != MPI.COMM_NULL:
            sub.Free()
    if rank == 0:
        print(f"sparsegpu mpibench: {world.Get_size()} ranks, {dtype}, {_bench.clock()}")
        titles = {
            "strong": f"strong scaling, {args.n}^3 grid",
            "weak": f"weak scaling, ~{args.weak_rows:,} rows per rank",
            "irregular": f"randomly numbered {args.irregular}^3 mesh, by rows and by graph",
        }
        for kind, title in titles.items():
            if not rows[kind]:
                continue
            print(f"\n{title}")
            print(f"{'ranks':>5} {'grid':>6} {'split':>6} {'nnz':>13} {'product ms':>11} "
                  f"{'halo ms':>9} {'CG iter ms':>11} {'halo bytes':>12} "
                  f"{'comm %':>7}")  # fmt: skip
            for r in rows[kind]:
                print(f"{r['ranks']:>5} {r['grid']:>6} {r['partition']:>6} {r['nnz']:>13,} "
                      f"{r['product_ms']:>11.4f} {r['halo_ms']:>9.4f} "
                      f"{r['cg_iteration_ms']:>11.4f} {r['halo_bytes']:>12,} "
                      f"{100 * r['comm_fraction']:>7.1f}")  # fmt: skip
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"clock": _bench.clock(), "dtype": dtype.name, **rows}, f, indent=2)
        if args.plot:
            plot(rows, {k: titles[k] for k in ("strong", "weak")}, dtype.itemsize, args.plot)
            print(f"\nplot: {args.plot}")
    return 0


def plot(rows: dict, titles: dict, itemsize: int, path: str) -> None:
    """Strong and weak scaling side by side: measured times, and the cost model's
    prediction with its product rate taken from the one-rank measurement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..distributed import cost_model, stencil_halo

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for ax, (kind, title) in zip(axes, titles.items(), strict=True):
        measured = rows[kind]
        ranks = [r["ranks"] for r in measured]
        ax.plot(ranks, [r["product_ms"] for r in measured], "o-", label="product, measured")
        ax.plot(
            ranks, [r["cg_iteration_ms"] for r in measured], "s-", label="CG iteration, measured"
        )
        one = measured[0]
        rate = one["nnz"] / (one["product_ms"] * 1e-3)
        model = []
        for r in measured:
            halo, neighbours = stencil_halo(r["grid"], r["ranks"], itemsize)
            estimate = cost_model(
                r["nnz"],
                r["rows"],
                r["ranks"],
                halo_bytes=halo,
                neighbours=neighbours,
                product_rate=rate,
                itemsize=itemsize,
            )
            model.append(estimate.product_s * 1e3)
        ax.plot(ranks, model, "--", label="product, cost model")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks")
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.legend(fontsize="small")
    fig.savefig(path, dpi=120)
    plt.close(fig)
