"""Sweep the launch knobs of the kernels on the large synthetic matrices, beside cuSPARSE.

For each matrix and dtype: the ``shuffle`` backend (the CSR vector kernel with ``__ldg`` and
the shuffle reduction) over threads per row x unroll x streamed matrix loads x register cap
x block size, the ``merge_path`` kernel at every compiled shape, the ``cusparse`` backend
(descriptors reused: the raw-cuSPARSE time) with CSR ALG1 and ALG2, and two floors measured
on the same matrix: the copy bandwidth, and a *gather* kernel that reads the matrix's column
indices and x[column] once each and nothing else (no values, no y per row), which bounds
what any CSR SpMV can do on a matrix whose columns are scattered: every gather moves at least
one 32-byte sector from L2 to the SM, whatever the kernel.

Every policy's answer is checked against the cuSPARSE answer before it is timed. Results
are written after every matrix (JSON lines), so a run cut short keeps what it measured.

Usage (GPU machine), then the summary the docs show (any machine)::

    python -m benchmarks.knob_sweep --out sweep.jsonl [--matrices stencil3d27_150,...]
    python -m benchmarks.knob_sweep --summarize sweep.jsonl --out summary.json --md summary.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time

import numpy as np

import sparsegpu as sg
from sparsegpu import measure
from sparsegpu.backends.csr_vector import CsrVectorPolicy
from sparsegpu.backends.cusparse import CusparsePolicy
from sparsegpu.backends.merge_path import MERGE_PATH_SHAPES, MergePathPolicy
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.engine import _planning, _registry
from sparsegpu.measure import probe

GATHER_SOURCE = r"""
template <typename V, typename I>
__global__ void gather(const I* __restrict__ indices, const V* __restrict__ x,
                       V* __restrict__ out, long long nnz) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  V sum = 0;
  for (; k + 3 * stride < nnz; k += 4 * stride) {
    const I c0 = __ldcs(indices + k), c1 = __ldcs(indices + k + stride);
    const I c2 = __ldcs(indices + k + 2 * stride), c3 = __ldcs(indices + k + 3 * stride);
    sum += __ldg(x + c0) + __ldg(x + c1) + __ldg(x + c2) + __ldg(x + c3);
  }
  for (; k < nnz; k += stride) sum += __ldg(x + __ldcs(indices + k));
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
"""

SWEEPS = {
    # matrix: (threads per row, unroll, stream, register caps, vector loads, block sizes)
    "stencil3d27_150": (
        (8, 16),
        (1, 2, 4),
        (False, True),
        (None, 40),
        (False, True),
        (512, 1024),
    ),
    "stencil2d_4096": (
        (1, 2, 4),
        (1, 2, 4),
        (False, True),
        (None,),
        (False, True),
        (128, 512),
    ),
    "uniform_4M_x16": ((4, 8), (1, 2), (True,), (None,), (False, True), (256,)),
    "powerlaw_4M": ((), (), (), (), (), (), ()),
}


def gather_floor(cupy, mirror, x, repeat) -> float:
    value = "double" if x.dtype == np.float64 else "float"
    index = "int" if mirror.indices.dtype == np.int32 else "long long"
    name = f"gather<{value}, {index}>"
    module = cupy.RawModule(code=GATHER_SOURCE, name_expressions=[name], options=("-std=c++17",))
    kernel = module.get_function(name)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    grid, block = sms * 8, 256
    out = cupy.empty(grid * block, dtype=x.dtype)
    nnz = np.int64(mirror.nnz)
    return measure.cuda_time(
        lambda: kernel((grid,), (block,), (mirror.indices, x, out, nnz)), repeat=repeat
    ).median_ms


def sweep_matrix(name, build, dtype, cupy, copy_gbs, repeat, emit):
    A = sg.csr_matrix(build())
    A.sum_duplicates()
    A = sg.csr_matrix(A.astype(dtype))
    residence = _registry.registered()["cusparse"].residence
    mirror = A._sg_mirror(residence, np.dtype(dtype))
    nbytes = measure.matrix_spmv_bytes(mirror)
    x = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, A.shape[1]).astype(dtype))
    y = cupy.empty(A.shape[0], dtype=dtype)
    reference = sg.matvec(A, x, backend="cusparse", policy=CusparsePolicy("csr_alg1")).copy()
    scale = max(float(cupy.abs(reference).max()), 1.0)
    tol = 64 * np.finfo(dtype).eps * math.sqrt(max(mirror.stats.max, 1)) * scale
    base = {
        "matrix": name,
        "dtype": np.dtype(dtype).name,
        "nnz": int(mirror.nnz),
        "n_rows": A.shape[0],
        "bytes": nbytes,
        "copy_gb_per_s": copy_gbs,
    }

    def timed(backend, policy):
        plan = _planning.plan_for(A, dtype, backend=backend, policy=policy)
        plan.matvec(x, out=y)
        err = float(cupy.abs(y - reference).max())
        if not err <= tol:
            raise AssertionError(f"{name} {dtype} {backend} {policy}: error {err:.3e}")
        ms = measure.cuda_time(lambda: plan.matvec(x, out=y), repeat=repeat).median_ms
        gbs = measure.gb_per_s(nbytes, ms)
        emit(
            {
                **base,
                "backend": backend,
                "knobs": policy.knobs(),
                "ms": ms,
                "gb_per_s": gbs,
                "pct_copy": 100 * gbs / copy_gbs,
            }
        )
        return ms

    floor_ms = gather_floor(cupy, mirror, x, repeat)
    emit({**base, "backend": "gather_floor", "knobs": {}, "ms": floor_ms})
    for algorithm in ("csr_alg1", "csr_alg2"):
        timed("cusparse", CusparsePolicy(algorithm))
    for block, items in MERGE_PATH_SHAPES:
        timed("merge_path", MergePathPolicy(block, items))
    for tpr, unroll, stream, cap, vector, block in itertools.product(*SWEEPS[name]):
        policy = CsrVectorPolicy(
            block,
            tpr,
            cap,
            unroll=unroll,
            stream_matrix=stream,
            vector_loads=vector,
        )
        timed("shuffle", policy)


def summarize(jsonl_path) -> tuple[dict, str]:
    """(JSON summary, markdown) of a sweep: per matrix and dtype, the floors, cuSPARSE, and
    each backend's fastest policy (for shuffle also the fastest without quad loads)."""
    records = [json.loads(line) for line in open(jsonl_path)]
    header, rows = records[0], [r for r in records[1:] if "matrix" in r]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["matrix"], r["dtype"]), []).append(r)
    out = {"device": header.get("device"), "copy_gb_per_s": header["copy_gb_per_s"], "rows": []}
    lines = [
        f"# Launch-knob sweep on {header.get('device')}",
        "",
        f"Copy bandwidth {header['copy_gb_per_s']:.0f} GB/s; median of CUDA-event timings; "
        "raw records in `knob_sweep_h200.jsonl` (`benchmarks/knob_sweep.py`). The gather "
        "floor reads the column indices and gathers x once each, nothing else.",
        "",
        "| matrix | dtype | gather floor ms | cuSPARSE ms | merge_path ms | shuffle ms | % copy "
        "| shuffle/cuSPARSE | best shuffle policy | best without quad loads |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for (matrix, dtype), group in groups.items():

        def best(backend, keep=lambda r: True, group=group):
            chosen = [r for r in group if r["backend"] == backend and keep(r)]
            return min(chosen, key=lambda r: r["ms"]) if chosen else None

        floor, cus, merged = best("gather_floor"), best("cusparse"), best("merge_path")
        shu = best("shuffle")
        scalar = best("shuffle", lambda r: not r["knobs"].get("vector_loads"))
        row = {
            "matrix": matrix,
            "dtype": dtype,
            "gather_floor_ms": floor["ms"],
            "cusparse": cus,
            "merge_path": merged,
            "shuffle": shu,
            "shuffle_scalar_loads": scalar,
        }
        out["rows"].append(row)
        if shu is None:
            lines.append(
                f"| {matrix} | {dtype} | {floor['ms']:.4f} | {cus['ms']:.4f} | {merged['ms']:.4f} "
                "| - | - | - | - | - |"
            )
            continue

        def knobs(r):
            return " ".join(f"{k}={v}" for k, v in r["knobs"].items() if v not in (None, False))

        lines.append(
            f"| {matrix} | {dtype} | {floor['ms']:.4f} | {cus['ms']:.4f} | {merged['ms']:.4f} | "
            f"{shu['ms']:.4f} | {shu['pct_copy']:.1f} | {cus['ms'] / shu['ms']:.2f}x | "
            f"{knobs(shu)} | {knobs(scalar)} ({scalar['pct_copy']:.1f}%) |"
        )
    return out, "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--summarize", metavar="JSONL", help="write --out (JSON) and --md from a sweep"
    )
    parser.add_argument("--md", help="markdown summary (with --summarize)")
    parser.add_argument("--out", required=True, help="JSON-lines file to append results to")
    parser.add_argument("--matrices", default=",".join(SWEEPS))
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    if args.summarize:
        summary, markdown = summarize(args.summarize)
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
        if args.md:
            with open(args.md, "w") as f:
                f.write(markdown)
        return 0
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print(f"no GPU: {_cuda.unavailable_reason()}", file=sys.stderr)
        return 1
    suite = synthetic.suite("full", xp=cupy)
    copy_gbs = probe.measure_copy()[2]
    out = open(args.out, "a")

    def emit(record):
        out.write(json.dumps(record) + "\n")
        out.flush()

    emit({"device": _cuda.device_info().name, "copy_gb_per_s": copy_gbs, "time": time.time()})
    for name in args.matrices.split(","):
        for dtype in args.dtypes.split(","):
            start = time.perf_counter()
            sweep_matrix(name, suite[name], np.dtype(dtype), cupy, copy_gbs, args.repeat, emit)
            cupy.get_default_memory_pool().free_all_blocks()
            print(f"{name} {dtype}: {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
