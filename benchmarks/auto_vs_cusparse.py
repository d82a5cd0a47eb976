"""sparsegpu ``auto`` against cupyx ``A @ x`` and raw cuSPARSE (descriptors reused).

For every matrix of ``sparsegpu.datasets.synthetic.suite(scale)`` and every Matrix Market
file in ``--matrices`` (read with scipy.io.mmread), in each dtype asked for: the median
time (CUDA events) of ``A @ x`` through sparsegpu's ``auto``, the ``merge_path`` and
``cusparse`` backends, cupyx.scipy.sparse, and raw cuSPARSE SpMV with descriptors and
workspace made once (CSR ALG1 and ALG2, the best kept). Every answer is checked against
cupyx's before anything is timed. GB/s counts values + indices + row pointers + x + y
once; "% copy" is against the device-to-device copy bandwidth measured in the same run.
Also measured: host time per call of ``A @ x`` on a 1,000-row matrix (no sync between
calls), for sparsegpu and cupyx.

Usage (on a GPU machine)::

    python benchmarks/auto_vs_cusparse.py --out results.json --md results.md --plot results.png
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import math
import pathlib
import sys
import time

import numpy as np
import scipy.io

import sparsegpu as sg
from sparsegpu import _console, _cuda, _dispatch, _registry, _select, _timing, probe
from sparsegpu.backends.cusparse import CusparsePlan
from sparsegpu.datasets import synthetic
from sparsegpu.tuning import CusparsePolicy

# the SuiteSparse matrices bundled with sparsegpu (sparsegpu.datasets)
DEFAULT_MATRICES = str(importlib.resources.files("sparsegpu.datasets") / "data")
HOST_CALLS = 3000


def host_overhead_us(fn, cupy, calls=HOST_CALLS) -> float:
    """Host microseconds per call of ``fn`` over many calls without synchronizing."""
    for _ in range(50):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    cupy.cuda.get_current_stream().synchronize()
    return elapsed / calls * 1e6


def measure_host_overhead(cupy, cupyx_sparse) -> dict:
    A = synthetic.uniform_random(1000, 10, dtype=np.float64, seed=1)
    A.sum_duplicates()
    x = cupy.asarray(np.random.default_rng(0).uniform(-1, 1, 1000))
    Acx = cupyx_sparse.csr_matrix(A)
    out = {"n_rows": 1000, "nnz": int(A.nnz), "cupyx_us": host_overhead_us(lambda: Acx @ x, cupy)}
    out["auto_backend"] = _select.explain(A).backend
    out["auto_us"] = host_overhead_us(lambda: A @ x, cupy)
    # where the time goes: the dispatcher without scipy's operator, then the plan alone
    out["auto_matvec_function_us"] = host_overhead_us(lambda: sg.matvec(A, x), cupy)
    plan = _dispatch.plan_for(A, np.float64)
    out["auto_plan_only_us"] = host_overhead_us(lambda: plan.matvec(x), cupy)
    for name in ("cusparse", "merge_path"):
        B = sg.csr_matrix(A)
        B.backend = name
        out[f"{name}_us"] = host_overhead_us(lambda B=B: B @ x, cupy)
    return out


def real_matrices(folder: pathlib.Path) -> dict:
    out = {}
    for path in sorted(folder.glob("*.mtx*")):
        name = path.name.split(".mtx")[0]
        out[name] = lambda path=path: scipy.io.mmread(str(path)).tocsr()
    return out


def canonical(build, dtype, cupyx_sparse):
    """(sparsegpu matrix, cupyx matrix), both with sorted, summed indices."""
    Acx = cupyx_sparse.csr_matrix(build().astype(dtype))
    Acx.sum_duplicates()
    return sg.csr_matrix(Acx), Acx


def bench_one(name, build, dtype, cupy, cupyx_sparse, copy_gbs) -> dict:
    A, Acx = canonical(build, dtype, cupyx_sparse)
    n_rows, n_cols = A.shape
    x = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, n_cols).astype(dtype))
    reference = Acx @ x
    mirror = A._sg_mirror(_registry.registered()["cusparse"].residence, np.dtype(dtype))
    nbytes = _timing.matrix_spmv_bytes(mirror)
    # small products need several calls per event pair to be above the event resolution
    inner = max(1, min(200, int(2e8 // max(nbytes, 1))))
    scale = max(float(cupy.abs(reference).max()), 1.0)
    tol = 64 * np.finfo(dtype).eps * math.sqrt(max(mirror.stats.max, 1)) * scale

    def check(y, what):
        err = float(cupy.abs(y - reference).max()) if y.size else 0.0
        if not err <= tol:
            raise AssertionError(f"{name} {np.dtype(dtype)} {what}: error {err:.3e} > {tol:.3e}")

    raw = {}
    for algorithm in ("csr_alg1", "csr_alg2"):
        plan = CusparsePlan(mirror, CusparsePolicy(algorithm))
        y = cupy.empty(n_rows, dtype=dtype)
        check(plan.matvec(x, out=y), f"raw {algorithm}")
        raw[algorithm] = _timing.cuda_time(
            lambda plan=plan, y=y: plan.matvec(x, out=y), inner=inner
        ).median_ms
        del plan
    times = {f"raw_{k}": v for k, v in raw.items()}
    times["raw_best"] = min(raw.values())
    check(Acx @ x, "cupyx")
    times["cupyx"] = _timing.cuda_time(lambda: Acx @ x, inner=inner).median_ms
    for backend in ("merge_path", "cusparse"):
        check(sg.matvec(A, x, backend=backend), backend)
        times[backend] = _timing.cuda_time(
            lambda backend=backend: sg.matvec(A, x, backend=backend), inner=inner
        ).median_ms
    auto = _select.explain(A)
    check(A @ x, "auto")
    times["auto"] = _timing.cuda_time(lambda: A @ x, inner=inner).median_ms
    stats = mirror.stats
    row = {
        "matrix": name,
        "dtype": np.dtype(dtype).name,
        "n_rows": n_rows,
        "n_cols": n_cols,
        "nnz": int(mirror.nnz),
        "row_mean": stats.mean,
        "row_max": stats.max,
        "row_class": _select.row_class(stats),
        "bytes": nbytes,
        "auto_backend": auto.backend,
        "auto_policy": repr(auto.policy),
        "ms": times,
        "gb_per_s": {k: _timing.gb_per_s(nbytes, v) for k, v in times.items()},
        "auto_vs_raw_best": times["raw_best"] / times["auto"],
        "auto_vs_cupyx": times["cupyx"] / times["auto"],
        "merge_path_vs_raw_best": times["raw_best"] / times["merge_path"],
    }
    row["pct_copy"] = {k: 100 * v / copy_gbs for k, v in row["gb_per_s"].items()}
    return row


def summarize(rows) -> dict:
    out = {}
    for dtype in sorted({r["dtype"] for r in rows}):
        sel = [r for r in rows if r["dtype"] == dtype]
        out[dtype] = {
            "geomean_auto_vs_cupyx": float(
                np.exp(np.mean([np.log(r["auto_vs_cupyx"]) for r in sel]))
            ),
            "geomean_auto_vs_raw_best": float(
                np.exp(np.mean([np.log(r["auto_vs_raw_best"]) for r in sel]))
            ),
            "min_auto_vs_raw_best": min(r["auto_vs_raw_best"] for r in sel),
            "matrices_below_raw": [r["matrix"] for r in sel if r["auto_vs_raw_best"] < 1.0],
        }
    return out


def markdown(result) -> str:
    lines = [
        f"# auto vs cuSPARSE on {result['device']}",
        "",
        f"Copy bandwidth {result['copy_gb_per_s']:.0f} GB/s. CuPy {result['versions']['cupy']}, "
        f"CUDA {result['versions']['cuda_runtime']}. Median of CUDA-event timings.",
        "",
        "| matrix | dtype | nnz | auto | auto ms | auto GB/s | % copy | raw best ms | "
        "cupyx ms | merge_path ms | auto/raw | auto/cupyx |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["results"]:
        ms = r["ms"]
        lines.append(
            f"| {r['matrix']} | {r['dtype']} | {r['nnz']:,} | {r['auto_backend']} | "
            f"{ms['auto']:.4f} | {r['gb_per_s']['auto']:.0f} | {r['pct_copy']['auto']:.0f} | "
            f"{ms['raw_best']:.4f} | {ms['cupyx']:.4f} | {ms['merge_path']:.4f} | "
            f"{r['auto_vs_raw_best']:.2f}x | {r['auto_vs_cupyx']:.2f}x |"
        )
    lines += [
        "",
        "| dtype | geomean auto/cupyx | geomean auto/raw | min auto/raw |",
        "|---|---:|---:|---:|",
    ]
    for dtype, s in result["summary"].items():
        lines.append(
            f"| {dtype} | {s['geomean_auto_vs_cupyx']:.2f}x | {s['geomean_auto_vs_raw_best']:.2f}x "
            f"| {s['min_auto_vs_raw_best']:.2f}x |"
        )
    h = result["host_overhead"]
    lines += [
        "",
        f"Host time per `A @ x` call, 1,000 rows, cupy x, no sync: sparsegpu auto "
        f"({h['auto_backend']}) {h['auto_us']:.1f} µs, cusparse {h['cusparse_us']:.1f} µs, "
        f"merge_path {h['merge_path_us']:.1f} µs; cupyx {h['cupyx_us']:.1f} µs. Of auto's: "
        f"`sparsegpu.matvec(A, x)` {h['auto_matvec_function_us']:.1f} µs, the plan's "
        f"matvec alone {h['auto_plan_only_us']:.1f} µs.",
    ]
    return "\n".join(lines) + "\n"


def plot(result, path) -> None:
    """Per dtype: GB/s of auto, raw cuSPARSE and cupyx, and auto's speed-ups (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = sorted({r["dtype"] for r in result["results"]})
    fig, axes = plt.subplots(2, len(dtypes), figsize=(9 * len(dtypes), 9), squeeze=False)
    series = (
        ("auto", "sparsegpu auto"),
        ("raw_best", "raw cuSPARSE (best alg)"),
        ("cupyx", "cupyx"),
    )
    for column, dtype in enumerate(dtypes):
        sel = [r for r in result["results"] if r["dtype"] == dtype]
        pos = np.arange(len(sel))
        names = [r["matrix"] for r in sel]
        ax = axes[0, column]
        for k, (key, label) in enumerate(series):
            ax.bar(pos + (k - 1) * 0.27, [r["gb_per_s"][key] for r in sel], 0.27, label=label)
        ax.axhline(result["copy_gb_per_s"], color="k", lw=0.8, ls="--", label="copy bandwidth")
        ax.set_xticks(pos, names, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{dtype}: SpMV bandwidth on {result['device']}")
        ax.legend(fontsize=7)
        ax = axes[1, column]
        ax.bar(pos - 0.2, [r["auto_vs_raw_best"] for r in sel], 0.4, label="auto / raw cuSPARSE")
        ax.bar(pos + 0.2, [r["auto_vs_cupyx"] for r in sel], 0.4, label="auto / cupyx")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(pos, names, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("speed-up (higher is better)")
        ax.set_title(f"{dtype}: speed-up of sparsegpu auto")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_outputs(result, args) -> None:
    """The JSON, markdown and plot files asked for, and the table on stdout."""
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    if args.md:
        pathlib.Path(args.md).write_text(text)
    if args.plot:
        plot(result, args.plot)
    _console.console().print(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="full", choices=["full", "small"])
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--matrices", default=DEFAULT_MATRICES, help="folder of .mtx(.gz) files")
    parser.add_argument("--out", help="JSON result file")
    parser.add_argument("--md", help="markdown table file")
    parser.add_argument("--plot", help="PNG plot file (needs matplotlib)")
    parser.add_argument(
        "--from-json", help="redraw --md/--plot from an earlier result file (no GPU needed)"
    )
    args = parser.parse_args(argv)
    if args.from_json:
        write_outputs(json.loads(pathlib.Path(args.from_json).read_text()), args)
        return 0
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print(f"no GPU: {_cuda.unavailable_reason()}", file=sys.stderr)
        return 2
    import cupyx.scipy.sparse as cupyx_sparse

    info = _cuda.device_info()
    copy_gbs = probe.measure_copy()[2]  # the 100% of "% copy", measured in this run
    result = {
        "device": info.name,
        "versions": _cuda.versions(),
        "sparsegpu": sg.__version__,
        "copy_gb_per_s": copy_gbs,
        "host_overhead": measure_host_overhead(cupy, cupyx_sparse),
        "results": [],
    }
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    folder = pathlib.Path(args.matrices)
    jobs = [
        (name, build, dtype)
        for dtype in dtypes
        for name, build in {
            **synthetic.suite(args.scale, dtype=dtype, xp=cupy),
            **(real_matrices(folder) if folder.is_dir() else {}),
        }.items()
    ]
    with _console.progress() as bar:
        task = bar.add_task("benchmark", total=len(jobs))
        for name, build, dtype in jobs:
            bar.update(task, description=f"{name} {dtype.name}")
            result["results"].append(bench_one(name, build, dtype, cupy, cupyx_sparse, copy_gbs))
            cupy.get_default_memory_pool().free_all_blocks()
            if args.out:  # partial results survive an interrupted run
                pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
            bar.advance(task)
    result["summary"] = summarize(result["results"])
    write_outputs(result, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
