"""Benchmark the seed kernel family against cuSPARSE (through cupyx) on the synthetic suite.

For each matrix of ``sparsegpu.datasets.synthetic.suite(scale)`` and each value dtype,
every kernel backend (``vector``, ``texture``, ``readonly``, ``shuffle``, ``swcache``) is
timed at each policy of a small sweep around its untuned policy, and the best is kept;
cuSPARSE's ``cupyx.scipy.sparse.csr_matrix @ x`` is timed in the same run. Every answer is
checked against scipy on the host before it is timed. Reported per run: median ms (CUDA
events), GB/s (values + indices + row pointers + x + y, once each), % of the device's
copy bandwidth measured in the same run (a large device-to-device copy: bytes read +
written), and the ratio to cupyx.

Usage: ``python -m benchmarks.kernel_family [--scale full] [--dtypes float64 float32]
[--output docs/benchmarks/results/kernel_family_h200.json] [--plot FILE]``.
A markdown table is written beside the JSON file. Needs a GPU and CuPy.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu import _console, bench, measure
from sparsegpu.backends.csr_vector import CsrVectorPolicy
from sparsegpu.backends.policy import THREADS_PER_ROW_CHOICES
from sparsegpu.backends.swcache import SoftwareCachePolicy
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.engine import _planning, _registry
from sparsegpu.measure import probe

ROOT = Path(__file__).resolve().parent.parent
KERNEL_BACKENDS = ("vector", "texture", "readonly", "shuffle", "swcache")
SWEEP_BLOCK_SIZES = (64, 128, 256)
SWEEP_CACHE_BLOCK_SIZES = (128, 256)
SWEEP_CACHE_SHAPES = ((32, 8), (64, 8), (128, 4), (256, 1))
# the seed of x (sparsegpu.measure.random_vector), as in every result so far
X_SEED = 11
DEFAULT_OUTPUT = ROOT / "docs" / "benchmarks" / "results" / "kernel_family_h200.json"


def copy_bandwidth(nbytes: int = 2**31) -> dict:
    """``sparsegpu.measure.probe``'s device-to-device copy, in this run: GB/s counting bytes read
    plus bytes written (the 100% of every "% of copy")."""
    copied, median_ms, gbs = probe.measure_copy(nbytes)
    return {"bytes": copied, "median_ms": median_ms, "gb_per_s": gbs}


def texture_object_cost_us(cupy, repeat: int = 200) -> float:
    """Host time to create one texture object over a 1M-element float64 x (microseconds)."""
    from sparsegpu.backends.csr_vector import TextureCache

    x = cupy.ones(1 << 20, dtype=np.float64)
    cache = TextureCache(np.float64, capacity=1)
    start = time.perf_counter()
    for _ in range(repeat):
        cache._entries.clear()
        cache.texture_for(x)
    return (time.perf_counter() - start) / repeat * 1e6


def sweep(backend, mirror) -> list:
    """The policies timed for one backend: block sizes x threads per row around the untuned one.

    Threads per row from an eighth to twice the untuned choice; the software cache keeps the
    untuned threads per row and sweeps its cache shape instead.
    """
    untuned = backend.default_policy(mirror)
    out = [untuned]
    if isinstance(untuned, SoftwareCachePolicy):
        for block in SWEEP_CACHE_BLOCK_SIZES:
            for line_size, num_lines in SWEEP_CACHE_SHAPES:
                out.append(
                    SoftwareCachePolicy(
                        block, untuned.threads_per_row, line_size=line_size, num_lines=num_lines
                    )
                )
        return list(dict.fromkeys(out))
    t = untuned.threads_per_row
    for threads in THREADS_PER_ROW_CHOICES:
        if t // 8 <= threads <= 2 * t:
            out += [CsrVectorPolicy(block, threads) for block in SWEEP_BLOCK_SIZES]
    return list(dict.fromkeys(out))


def time_plan(plan, x, y) -> measure.Timing:
    return measure.cuda_time(lambda: plan.matvec(x, out=y), warmup=3, repeat=15)


def check(oracle, y, what) -> None:
    """``y`` against scipy's answer, by the one answer check (on the GPU: no host copy)."""
    problem = oracle.error(y)
    if problem is not None:
        raise AssertionError(f"{what}: {problem}")


def run_matrix(cupy, name, A, dtype, copy_gbs, progress, task) -> list[dict]:
    """cupyx (``sparsegpu bench``'s reference contender), then each kernel backend at the
    best policy of its sweep; every answer checked against scipy's (:class:`Oracle`)."""
    rows = []
    n_rows, n_cols = A.shape
    nbytes = measure.spmv_bytes(n_rows, n_cols, A.nnz, np.dtype(dtype).itemsize, A.indices.itemsize)

    def record(backend_name, policy, timing):
        ms = timing.median_ms
        gbs = measure.gb_per_s(nbytes, ms)
        return {
            "matrix": name,
            "dtype": np.dtype(dtype).name,
            "backend": backend_name,
            "policy": None if policy is None else {**policy.knobs(), "source": policy.source},
            "median_ms": ms,
            "gb_per_s": gbs,
            "percent_of_copy": 100.0 * gbs / copy_gbs,
            "n_rows": n_rows,
            "n_cols": n_cols,
            "nnz": int(A.nnz),
            "bytes": nbytes,
        }

    cupyx = bench.CupyxContender().prepare(A, dtype, seed=X_SEED)
    x = cupyx.x
    oracle = measure.Oracle(sp.csr_matrix(A), dtype, x=x.get())
    check(oracle, cupyx.call(), f"cupyx {name}")
    cupyx_row = record("cupyx", None, measure.cuda_time(cupyx.call, warmup=3, repeat=15))
    rows.append(cupyx_row)
    y = cupy.empty(n_rows, dtype=dtype)
    for backend_name in KERNEL_BACKENDS:
        backend = _registry.registered()[backend_name]
        mirror = A._sg_mirror(backend.residence, dtype)
        if not backend.supports(mirror):
            progress.advance(task)
            continue
        best = None
        for policy in sweep(backend, mirror):
            plan = _planning.plan_for(A, dtype, backend=backend_name, policy=policy)
            y.fill(np.nan)
            plan.matvec(x, out=y)
            check(oracle, y, f"{backend_name} {policy} {name}")
            row = record(backend_name, policy, time_plan(plan, x, y))
            if best is None or row["median_ms"] < best["median_ms"]:
                best = row
        mirror.plans.clear()
        best["speedup_vs_cupyx"] = cupyx_row["median_ms"] / best["median_ms"]
        rows.append(best)
        progress.advance(task)
    return rows


def markdown(result: dict) -> str:
    lines = [
        f"# Kernel family on {result['device']['name']}",
        "",
        f"Copy bandwidth measured in the same run: {result['copy']['gb_per_s']:.0f} GB/s "
        f"(device-to-device, bytes read + written). Texture object creation: "
        f"{result['texture_object_create_us']:.1f} us. Generated by "
        "`python -m benchmarks.kernel_family`; each backend at the best policy of its sweep.",
        "",
        "| matrix | dtype | backend | policy | median ms | GB/s | % of copy | x cupyx |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for r in result["results"]:
        policy = (
            ""
            if r["policy"] is None
            else ", ".join(f"{k}={v}" for k, v in r["policy"].items() if k != "source")
        )
        ratio = f"{r['speedup_vs_cupyx']:.2f}" if "speedup_vs_cupyx" in r else "1.00"
        lines.append(
            f"| {r['matrix']} | {r['dtype']} | {r['backend']} | {policy} | {r['median_ms']:.4f} "
            f"| {r['gb_per_s']:.0f} | {r['percent_of_copy']:.1f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def write(result: dict, output: Path) -> None:
    """The JSON result and its markdown table (after every matrix, so a cut run keeps its part)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1) + "\n")
    output.with_suffix(".md").write_text(markdown(result))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = sorted({r["dtype"] for r in result["results"]})
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(11, 4 * len(dtypes)), squeeze=False)
    backends = ["cupyx", *KERNEL_BACKENDS]
    for ax, dtype in zip(axes[:, 0], dtypes, strict=True):
        rows = [r for r in result["results"] if r["dtype"] == dtype]
        matrices = list(dict.fromkeys(r["matrix"] for r in rows))
        width = 0.8 / len(backends)
        for i, backend in enumerate(backends):
            values = [
                next(
                    (r["gb_per_s"] for r in rows if r["matrix"] == m and r["backend"] == backend), 0
                )
                for m in matrices
            ]
            ax.bar(np.arange(len(matrices)) + i * width, values, width, label=backend)
        ax.axhline(result["copy"]["gb_per_s"], color="k", linestyle="--", label="copy")
        ax.set_xticks(np.arange(len(matrices)) + 0.4 - width / 2, matrices, rotation=15)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{dtype} on {result['device']['name']}")
        ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="full", choices=["full", "small"])
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    parser.add_argument("--matrices", nargs="*", help="suite names to run (default: all)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--plot", type=Path, help="also draw GB/s per backend to this file")
    args = parser.parse_args(argv)
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print(f"kernel_family: needs a GPU: {_cuda.unavailable_reason()}", file=sys.stderr)
        return 1
    info = _cuda.device_info()
    copy = copy_bandwidth()
    result = {
        "benchmark": "kernel_family",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {
            "name": info.name,
            "compute_capability": list(info.compute_capability),
            "multiprocessors": info.multiprocessors,
        },
        "versions": {**_cuda.versions(), "sparsegpu": sg.__version__},
        "scale": args.scale,
        "copy": copy,
        "texture_object_create_us": texture_object_cost_us(cupy),
        "results": [],
    }
    plan = []
    for dtype in args.dtypes:
        suite = synthetic.suite(args.scale, dtype=np.dtype(dtype), xp=cupy)
        plan += [
            (dtype, n, make) for n, make in suite.items() if not args.matrices or n in args.matrices
        ]
    with _console.progress() as progress:
        task = progress.add_task("kernel family", total=len(plan) * len(KERNEL_BACKENDS))
        for dtype, name, make in plan:
            progress.update(task, description=f"{name} {dtype}")
            A = make()
            result["results"] += run_matrix(
                cupy, name, A, np.dtype(dtype), copy["gb_per_s"], progress, task
            )
            del A
            cupy.get_default_memory_pool().free_all_blocks()
            write(result, args.output)
    if args.plot:
        plot(result, args.plot)
    columns = ["matrix", "dtype", "backend", "median ms", "GB/s", "% copy", "x cupyx"]
    rows = [
        [
            r["matrix"],
            r["dtype"],
            r["backend"],
            f"{r['median_ms']:.4f}",
            f"{r['gb_per_s']:.0f}",
            f"{r['percent_of_copy']:.1f}",
            f"{r.get('speedup_vs_cupyx', 1.0):.2f}",
        ]
        for r in result["results"]
    ]
    title = f"kernel family, copy bandwidth {copy['gb_per_s']:.0f} GB/s"
    _console.console().print(_console.table(title, columns, rows, right=set(columns[3:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
