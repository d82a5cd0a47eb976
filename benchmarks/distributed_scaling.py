"""Several GPUs against one: strong and weak scaling, and an irregular matrix partitioned.

Run under ``mpiexec -n P`` with one GPU a rank (issue 32's table: P = 4). On sub-groups of
1, 2, 4, ... P ranks of the one job (the other ranks wait), for each matrix:

* **one GPU** (rank 0 alone, before any distributed matrix exists): ``A @ x`` of a
  ``sparsegpu.csr_matrix`` planned by measurement, cuSPARSE called directly (descriptors
  reused, best of CSR ALG1/ALG2) and cupyx, timed in alternation; one CG iteration of
  ``sparsegpu.linalg.cg`` (the difference of runs of ``--cg-long`` and ``--cg-short``
  iterations at ``rtol=0``, divided: set-up cancels); a CG solve to ``--rtol`` (its
  iteration count and solution are the references);
* **the distributed matrix** on P ranks (``transport`` auto: NCCL where each rank has a
  GPU): ``A @ x``, the halo exchange alone, one CG iteration measured the same way, the
  CG solve, and the answers checked against one GPU's: the product to the dtype's
  tolerance (``sparsegpu.measure.measure.tolerance``), the solve's iterations and solution.

Matrices: the 7-point Poisson stencil on ``--n``^3 (strong scaling), on grids growing
with P so that each rank holds about ``--weak-rows`` rows (weak scaling), and the
7-point stencil on ``--irregular``^3 numbered in random order (a mesh with no locality,
not tuned on) on one GPU and on P, split by rows and by a graph partition (METIS through
pymetis); the halo bytes of both are recorded. Nothing here was tuned on these matrices.

Timings: medians of CUDA-event samples (each a loop of ``MIN_CALLS`` products after a
barrier, the slowest rank's median). Rank 0 writes the JSON (``--out``), a Markdown
table of the issue's bars (``--md``) and a plot of measured times beside the cost
model's (``--plot``, the model's rates fitted on these measurements: see
``sparsegpu.distributed.fit_cost_model``). ``--from-json`` redraws both without a GPU::

    mpiexec -n 4 -x NCCL_NVLS_ENABLE=0 python -m benchmarks.distributed_scaling \\
        --out scaling.json --md scaling.md --plot scaling.png
"""

from __future__ import annotations

import gc
import json
import pathlib
import time

import numpy as np

import sparsegpu as sg
import sparsegpu.distributed as sgd
from benchmarks import common
from benchmarks.auto_vs_cusparse import MIN_CALLS
from benchmarks.common import DirectSpMV
from sparsegpu import measure
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.distributed import _bench
from sparsegpu.engine import _planning, _registry
from sparsegpu.linalg import _graphs

# products captured in one graph to time them as a solver runs them
GRAPH_CALLS = 10

BAR_GPUS = 4  # the GPU count the bars are set for
BARS = {
    "strong_product": 3.3,
    "strong_cg": 3.0,
    "weak_product": 0.90,
    "weak_cg": 0.85,
    "irregular_graph": 2.0,
}


def _rank_counts(size: int) -> list[int]:
    counts = [1 << k for k in range(size.bit_length()) if 1 << k <= size]
    return counts if counts[-1] == size else counts + [size]


def _stencil(n, dtype):
    cupy = _cuda.cupy_or_none()
    return synthetic.stencil_3d(n, dtype=dtype, xp=cupy or np)


def _random_numbered(n, dtype):
    cupy = _cuda.cupy_or_none()
    return synthetic.permuted(_stencil(n, dtype), seed=5, xp=cupy or np)


def _seeded(n, dtype, seed):
    return measure.random_vector(n, dtype, seed=seed)


def _cg_runs(solve, short, long, repeat, timer):
    """ms per CG iteration: ``solve(k)`` for ``long`` and ``short`` iterations, divided."""
    first = timer(lambda: solve(short), repeat)
    second = timer(lambda: solve(long), repeat)
    return (second - first) / (long - short)


def _graph_ms(fn, calls, timer) -> tuple[float | None, str | None]:
    """(milliseconds a call of ``fn`` takes as a solver runs it: ``calls`` of them captured
    as one CUDA graph and replayed, no host in the loop; why not, where a graph cannot hold
    them: no GPU, host staging, a failed capture)."""
    if _cuda.cupy_or_none() is None:
        return None, "no GPU"
    with _graphs.private_stream() as stream:
        fn()  # plans made and kernels compiled before the capture
        block = _graphs.Block(fn, calls, stream)
        if block.failure is not None:
            return None, block.failure
        return timer(block.launch) / calls, None


def single_gpu(S, args, dtype) -> dict:
    """One GPU (rank 0 alone): products (sparsegpu; cuSPARSE direct and cupyx beside it),
    CG. Without a GPU (a dry run of this script on the CPU) sparsegpu's alone, on the host."""
    cupy = _cuda.cupy_or_none()
    xp = cupy or np
    A = sg.csr_matrix(S)
    x = xp.asarray(_seeded(S.shape[1], dtype, 1))
    sg.choose(A, x)
    y_ref = A @ x
    columns = {"sparsegpu": lambda: A @ x}
    directs = []
    if cupy is not None:
        import cupyx.scipy.sparse as csp

        reference = csp.csr_matrix(S)
        columns["cupyx"] = lambda: reference @ x
        mirror = A._sg_mirror(_registry.registered()["cusparse"].residence, np.dtype(dtype))
        for algorithm in ("csr_alg1", "csr_alg2"):
            y = cupy.empty(S.shape[0], dtype=dtype)
            direct = DirectSpMV(mirror, x, y, algorithm)
            direct()
            error = float(cupy.abs(y - y_ref).max() / cupy.abs(y_ref).max())
            if not error <= measure.tolerance(dtype, 7):
                raise AssertionError(f"cuSPARSE {algorithm} disagrees: {error:.3e}")
            directs.append(direct)
            columns[f"cusparse_{algorithm}"] = direct
        timings = measure.cuda_time_interleaved(columns, repeat=args.repeat, inner=MIN_CALLS)
        timer = measure.cuda_time
    else:
        timings = measure.host_time_interleaved(columns, repeat=args.repeat, inner=MIN_CALLS)
        timer = measure.host_time
    for direct in directs:
        direct.close()
    ms = {name: t.median_ms for name, t in timings.items()}
    graph_failure = "no GPU"
    if directs:
        ms["cusparse_best"] = min(ms["cusparse_csr_alg1"], ms["cusparse_csr_alg2"])
        plan = _planning.plan_for(A, dtype, x=x, capturable=True)
        y = cupy.empty(S.shape[0], dtype=dtype)
        ms["sparsegpu_graph"], graph_failure = _graph_ms(
            lambda: plan.matvec(x, out=y), GRAPH_CALLS,
            lambda fn: timer(fn, repeat=args.repeat).median_ms,
        )  # fmt: skip
    b = xp.asarray(_seeded(S.shape[0], dtype, 2))
    cg_ms = _cg_runs(lambda k: sg.linalg.cg(A, b, rtol=0.0, maxiter=k), args.cg_short,
                     args.cg_long, args.cg_repeat,
                     lambda fn, repeat: timer(fn, warmup=1, repeat=repeat).median_ms)  # fmt: skip
    began = time.perf_counter()
    x_solved, info = sg.linalg.cg(A, b, rtol=args.rtol)
    used = sg.linalg.last_solve_info()
    x_host = _cuda.to_host(x_solved)
    return {
        "product_ms": ms,
        "cg_iteration_ms": cg_ms,
        "cg_graphs": used.graphs,
        "product_graph_failure": graph_failure,
        "solve": {
            "info": int(info),
            "iterations": used.iterations,
            "seconds": time.perf_counter() - began,
        },  # fmt: skip
        "y": _cuda.to_host(y_ref),
        "x": x_host,
    }


def distributed(S, sub, partition, args, dtype, reference) -> dict:
    """The distributed matrix on ``sub``'s ranks, timed and checked against ``reference``
    (one GPU's results, on the sub-group's rank 0)."""
    root = sub.Get_rank() == 0
    began = time.perf_counter()
    A = sgd.csr_matrix(S if root else None, sub, partition=partition)
    built = time.perf_counter() - began
    report = A.explain()
    x = A.scatter(_seeded(A.shape[1], dtype, 1) if root else None)
    y = (A @ x).gather(root=0)
    product_ms = _bench.time_ms(lambda: A @ x, sub, args.repeat, inner=MIN_CALLS)
    out = A.row_layout.xp.empty(A.row_layout.n_local, dtype=dtype)
    graph_ms, graph_failure = _graph_ms(lambda: A._product(x.local, out, True), GRAPH_CALLS,
                         lambda fn: _bench.time_ms(fn, sub, args.repeat))  # fmt: skip
    halo = A._work_for(np.dtype(dtype), x.local).halo

    def exchange():
        halo.start(x.local)
        halo.finish()

    halo_ms = _bench.time_ms(exchange, sub, args.repeat, inner=MIN_CALLS)
    b = A.scatter(_seeded(A.shape[0], dtype, 2) if root else None)

    def timer(fn, repeat):
        return _bench.time_ms(fn, sub, repeat, warmup=1)

    cg_ms = _cg_runs(lambda k: sg.linalg.cg(A, b, rtol=0.0, maxiter=k), args.cg_short,
                     args.cg_long, args.cg_repeat, timer)  # fmt: skip
    sub.Barrier()
    began = time.perf_counter()
    x_solved, info = sg.linalg.cg(A, b, rtol=args.rtol)
    used = sg.linalg.last_solve_info()
    x_global = x_solved.gather(root=0)
    seconds = time.perf_counter() - began
    row = {
        "ranks": sub.Get_size(),
        "partition": partition,
        "partition_note": report.partition,
        "transport": report.transport,
        "transport_reason": report.transport_reason,
        "build_s": built,
        "halo_bytes": report.halo_bytes,
        "max_halo_bytes": report.max_halo_bytes,
        "imbalance": report.imbalance,
        "neighbours": max(len(r.neighbours) for r in report.ranks),
        "product_ms": product_ms,
        "product_graph_ms": graph_ms,
        "product_graph_failure": graph_failure,
        "halo_ms": halo_ms,
        "cg_iteration_ms": cg_ms,
        "cg_graphs": used.graphs,
        "cg_graphs_reason": used.graphs_reason,
        "solve": {"info": int(info), "iterations": used.iterations, "seconds": seconds},
        "explain": str(report),
    }
    if root:
        row["product_error"] = float(
            np.abs(y - reference["y"]).max() / np.abs(reference["y"]).max()
        )
        row["product_tolerance"] = measure.tolerance(dtype, 7)
        row["solution_difference"] = float(
            np.linalg.norm(x_global - reference["x"]) / np.linalg.norm(reference["x"])
        )
        b_global = _seeded(S.shape[0], dtype, 2)
        row["residual"] = float(np.linalg.norm(S @ x_global - b_global) / np.linalg.norm(b_global))
        row["iterations_single"] = reference["solve"]["iterations"]
    return row


def _release() -> None:
    """Give the device memory of the last matrix back (its arrays are gone by now)."""
    gc.collect()
    cupy = _cuda.cupy_or_none()
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()


def run(args) -> dict:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    cupy = _cuda.cupy_or_none()
    if cupy is not None:  # one GPU a rank, as the distributed matrices will take them
        node = world.Split_type(MPI.COMM_TYPE_SHARED)
        cupy.cuda.Device(node.Get_rank() % cupy.cuda.runtime.getDeviceCount()).use()
    dtype = np.dtype(args.dtype)
    counts = _rank_counts(size)
    weak_grids = {p: round((p * args.weak_rows) ** (1 / 3)) for p in counts}
    matrices = [("strong", args.n, counts, ["rows"])]
    for p in sorted({1, size}):  # the weak bar compares P ranks with one
        if weak_grids[p] != args.n:
            matrices.append(("weak", weak_grids[p], [p], ["rows"]))
    if args.irregular:  # its bar is at P ranks: one GPU, then P split both ways
        matrices.append(("irregular", args.irregular, sorted({1, size}), ["rows", "graph"]))
    result = {"ranks": size, "dtype": dtype.name, "args": vars(args), "device": None,
              "matrices": []}  # fmt: skip
    if rank == 0:
        result["device"] = _cuda.device_info().name if cupy is not None else "no GPU (dry run)"
        result["versions"] = _cuda.versions()
    for kind, n, ranks, partitions in matrices:
        S = None
        entry = {"kind": kind, "grid": n}
        if rank == 0:
            began = time.perf_counter()
            S = (_random_numbered if kind == "irregular" else _stencil)(n, dtype)
            entry.update(rows=S.shape[0], nnz=int(S.nnz), build_s=time.perf_counter() - began)
            entry["single"] = single_gpu(S, args, dtype)
            _release()
            print(f"{kind} {n}^3: one GPU {entry['single']['product_ms']['sparsegpu']:.4f} ms "
                  f"a product, {entry['single']['cg_iteration_ms']:.4f} ms a CG iteration",
                  flush=True)  # fmt: skip
        world.Barrier()
        entry["distributed"] = []
        for p in ranks:
            sub = world.Split(0 if rank < p else MPI.UNDEFINED, rank)
            for partition in partitions if p > 1 else partitions[:1]:
                if sub != MPI.COMM_NULL:
                    row = distributed(S, sub, partition, args, dtype, entry.get("single"))
                    _release()
                    if rank == 0:
                        entry["distributed"].append(row)
                        print(f"  {p} ranks, {partition}: {row['product_ms']:.4f} ms a product, "
                              f"{row['cg_iteration_ms']:.4f} ms a CG iteration, "
                              f"{row['transport']}", flush=True)  # fmt: skip
                world.Barrier()
            if sub != MPI.COMM_NULL:
                sub.Free()
        if rank == 0:
            for key in ("y", "x"):
                entry["single"].pop(key)
            result["matrices"].append(entry)
            if args.out:  # what is done so far survives a run cut short
                _write(result, args.out)
        del S
    return result


def _write(result, path) -> None:
    pathlib.Path(path).write_text(json.dumps(result, indent=2, default=float))


# ----------------------------------------------------------------------- report
def _find(result, kind, ranks, partition="rows"):
    for entry in result["matrices"]:
        if entry["kind"] != kind and not (kind == "weak" and entry["kind"] == "strong"):
            continue
        for row in entry["distributed"]:
            if row["ranks"] == ranks and row["partition"] == partition:
                if kind != "weak" or entry["grid"] == _weak_grid(result, ranks):
                    return entry, row
    return None, None


def _weak_grid(result, ranks):
    return round((ranks * result["args"]["weak_rows"]) ** (1 / 3))


def _product(single, row=None):
    """(one GPU's, the row's) product ms as a solver runs them (a CUDA graph), where both
    were measured that way, else as ``A @ x`` calls; and which it is."""
    graph = single["product_ms"].get("sparsegpu_graph")
    if graph is not None and (row is None or row.get("product_graph_ms") is not None):
        return graph, (row or {}).get("product_graph_ms"), "in a graph"
    return single["product_ms"]["sparsegpu"], (row or {}).get("product_ms"), "A @ x calls"


def bars(result) -> list[dict]:
    """The issue's bars: measured value, the bar, met or not (products as a solver runs
    them, in a CUDA graph, where measured so; ``A @ x`` calls are in every run's row)."""
    size = result["ranks"]
    out = []
    strong, row = _find(result, "strong", size)
    if row is not None:
        one = strong["single"]
        base, mine, how = _product(one, row)
        out.append(("strong_product", f"strong {strong['grid']}³ product ({how}), {size} GPUs "
                    "vs one", base / mine))  # fmt: skip
        out.append(("strong_cg", f"strong {strong['grid']}³ CG iteration, {size} GPUs vs one",
                    one["cg_iteration_ms"] / row["cg_iteration_ms"]))  # fmt: skip
    base_entry, _ = _find(result, "weak", 1)
    top, row = _find(result, "weak", size)
    if base_entry is not None and row is not None:
        one = base_entry["single"]
        base, mine, how = _product(one, row)
        out.append(("weak_product", f"weak product efficiency ({how}; {base_entry['grid']}³ on "
                    f"one GPU, {top['grid']}³ on {size})", base / mine))  # fmt: skip
        out.append(("weak_cg", "weak CG iteration efficiency",
                    one["cg_iteration_ms"] / row["cg_iteration_ms"]))  # fmt: skip
    irregular, row = _find(result, "irregular", size, "graph")
    if row is not None:
        base, mine, how = _product(irregular["single"], row)
        out.append(("irregular_graph", f"randomly numbered {irregular['grid']}³ mesh, graph "
                    f"partition, {size} GPUs vs one (product, {how})", base / mine))  # fmt: skip
    # the bars are the for BAR_GPUS GPUs: other counts are reported, not judged
    judged = size == BAR_GPUS
    return [{"key": k, "what": w, "value": v, "bar": BARS[k],
             "met": v >= BARS[k] if judged else None} for k, w, v in out]  # fmt: skip


def _ms(value) -> str:
    return "" if value is None else f"{value:.4f}"


def markdown(result) -> str:
    lines = [
        f"# Several GPUs: {result['ranks']} × {result.get('device')}, {result['dtype']}",
        "",
        "`"
        + " ".join(
            ["mpiexec -n", str(result["ranks"]), "python", "benchmarks/distributed_scaling.py"]
        )
        + "` "  # fmt: skip
        f"(n={result['args']['n']}, weak rows={result['args']['weak_rows']:,}, irregular="
        f"{result['args']['irregular']}); medians of CUDA-event samples, the slowest rank's.",
        "",
        "## The issue's bars",
        "",
        "| bar | measured | needed | met |",
        "|---|---:|---:|---|",
    ]
    for bar in bars(result):
        met = {True: "yes", False: "**no**", None: f"not judged: the bar is for {BAR_GPUS} GPUs"}
        lines.append(f"| {bar['what']} | {bar['value']:.2f} | {bar['bar']:.2f} | "
                     f"{met[bar['met']]} |")  # fmt: skip
    lines += [
        "",
        "## Every run",
        "",
        "| matrix | nnz | GPUs | partition | transport | product ms (A @ x) | in a graph | "
        "vs one GPU | halo ms | CG iter ms | vs one GPU | halo bytes | imbalance | "
        "CG iterations (one GPU) | product error | solution difference | residual |",
        "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for entry in result["matrices"]:
        one = entry["single"]
        name = f"{entry['kind']} {entry['grid']}³"
        lines.append(
            f"| {name} | {entry['nnz']:,} | 1 (sparsegpu) | | | "
            f"{one['product_ms']['sparsegpu']:.4f} | "
            f"{_ms(one['product_ms'].get('sparsegpu_graph'))} | 1.00 | | "
            f"{one['cg_iteration_ms']:.4f} | 1.00 | | | "
            f"{one['solve']['iterations']} | | | |"
        )
        if "cusparse_best" in one["product_ms"]:
            lines.append(
                f"| {name} | | 1 (cuSPARSE direct / cupyx) | | | "
                f"{one['product_ms']['cusparse_best']:.4f} / {one['product_ms']['cupyx']:.4f} "
                "| | | | | | | | | | | |"
            )
        for row in entry["distributed"]:
            lines.append(
                f"| {name} | | {row['ranks']} | {row['partition']} | {row['transport']} | "
                f"{row['product_ms']:.4f} | {_ms(row.get('product_graph_ms'))} | "
                f"{_product(one, row)[0] / _product(one, row)[1]:.2f} | "
                f"{row['halo_ms']:.4f} | {row['cg_iteration_ms']:.4f} | "
                f"{one['cg_iteration_ms'] / row['cg_iteration_ms']:.2f} | "
                f"{row['halo_bytes']:,} | {row['imbalance']:.3f} | "
                f"{row['solve']['iterations']} ({row['iterations_single']}) | "
                f"{row['product_error']:.1e} | {row['solution_difference']:.1e} | "
                f"{row['residual']:.1e} |"
            )
    return "\n".join(lines) + "\n"


def plot(result, path) -> None:
    """Measured product and CG-iteration times against GPUs, beside the cost model's
    prediction (fitted on these measurements) out to 1024 GPUs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fit = sgd.fit_cost_model(result)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for ax, kind in zip(axes, ("strong", "weak"), strict=True):
        measured = []
        for p in _rank_counts(result["ranks"]):
            entry, row = _find(result, kind, p)
            if row is not None:
                product = row.get("product_graph_ms") or row["product_ms"]
                measured.append((p, product, row["cg_iteration_ms"]))
        if measured:
            p, product, iteration = zip(*measured, strict=True)
            ax.plot(p, product, "o", label="product, measured")
            ax.plot(p, iteration, "s", label="CG iteration, measured")
        grid = result["args"]["n"] if kind == "strong" else None
        gpus = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
        model = [sgd.predict(fit, kind, p, grid=grid, weak_rows=result["args"]["weak_rows"])
                 for p in gpus]  # fmt: skip
        ax.plot(gpus, [m.product_s * 1e3 for m in model], "--", label="product, cost model")
        ax.plot(
            gpus, [m.cg_iteration_s * 1e3 for m in model], ":", label="CG iteration, cost model"
        )
        ax.axvline(fit.gpus_per_node + 0.5, color="grey", lw=0.5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs (model past the line: across nodes, a prediction)")
        ax.set_ylabel("ms")
        ax.set_title(
            f"{kind} scaling"
            + (f", {grid}³" if grid else f", {result['args']['weak_rows']:,} rows a GPU")
        )
        ax.legend(fontsize="small")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments())
    parser.add_argument("--n", type=int, default=256, help="strong-scaling grid (default 256)")
    parser.add_argument("--weak-rows", type=int, default=4_194_304,
                        help="rows a GPU for weak scaling (default 2**22)")  # fmt: skip
    parser.add_argument("--irregular", type=int, default=200,
                        help="randomly numbered mesh's grid (0: none; default 200)")  # fmt: skip
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--cg-short", type=int, default=20)
    parser.add_argument("--cg-long", type=int, default=100)
    parser.add_argument("--cg-repeat", type=int, default=3)
    parser.add_argument("--rtol", type=float, default=1e-8)
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(pathlib.Path(args.from_json).read_text())
    else:
        result = run(args)
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() != 0:
            return 0
        result["bars"] = bars(result)
        result["fit"] = sgd.fit_cost_model(result).as_dict()
        if args.out:
            _write(result, args.out)
    if args.md:
        pathlib.Path(args.md).write_text(markdown(result))
    if args.plot:
        plot(result, args.plot)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
