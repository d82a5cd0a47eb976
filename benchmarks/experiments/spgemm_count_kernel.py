"""The rule's count of a first product's intermediate products, kernel against kernel
(issue 47).

``spgemm_products_total`` (a thread per entry of L summing the lengths of the R rows it
selects; the rule and the index dtype of skewed rows' first products wait for it) as the
library has it, against the kernel before ``COUNT_LOADS`` (one gather in flight a thread,
an atomic a warp; its text is kept here). CUDA-event medians of the count alone on
operands just made by a product (``A @ I``: in the L2 cache as a first product finds them)
and after the L2 cache is flushed, and the wall clock of the library's count from the
launch to the host's read. Fit matrices of ``spgemm_first --mode calls`` only (the
power-law 1.5M, R-MAT 17, the 7-point stencil 120^3), unless ``--only`` names others.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_count_kernel --out FILE.json [--md FILE.md]
        [--only NAME,...] [--repeat N]
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import common, spgemm_first
from sparsegpu.backends import _hash_kernels, hash_spgemm
from sparsegpu.engine import _sparse_dispatch

BEFORE = r"""
#define FULL_WARP 0xffffffffu
extern "C" __global__ void total_before(const int* __restrict__ a_indices, long long nnz,
                                        const int* __restrict__ b_indptr,
                                        unsigned long long* __restrict__ counter,
                                        unsigned long long* __restrict__ host_total) {
    unsigned long long sum = 0;
    for (long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; j < nnz;
         j += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int column = __ldg(a_indices + j);
        sum += static_cast<unsigned long long>(__ldg(b_indptr + column + 1) -
                                               __ldg(b_indptr + column));
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        sum += __shfl_xor_sync(FULL_WARP, sum, offset);
    }
    if ((threadIdx.x & 31) == 0 && sum) {
        atomicAdd(counter, sum);
        __threadfence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned long long done = atomicAdd(counter + 1, 1ull);
        if (done == gridDim.x - 1ull) {
            __threadfence();
            const unsigned long long total = atomicExch(counter, 0ull);
            atomicExch(counter + 1, 0ull);
            *reinterpret_cast<volatile unsigned long long*>(host_total) = total;
            __threadfence_system();
        }
    }
}
"""

MODULE = "benchmarks.experiments.spgemm_count_kernel"
DEFAULT_ONLY = ("powerlaw_1500k", "rmat_s17", "stencil3d7_120")


def operands(A):
    """The canonical CSR mirrors of ``A @ A`` as the engine gets them."""
    from sparsegpu.backends import spgemm

    _, residence, value_dtype, _ = _sparse_dispatch.where(A, A)
    left, right = _sparse_dispatch.operands(A, A, residence, value_dtype)
    return spgemm.canonical(left), spgemm.canonical(right)


def measure(name, S, cupy, repeat: int) -> dict:
    import cupyx

    base = sg.csr_matrix(S)
    identity = sg.csr_matrix(sp.identity(S.shape[1], dtype=S.dtype, format="csr"))
    flush = cupy.empty(256 * 2**20, dtype=np.uint8)
    kernel = cupy.RawKernel(BEFORE, "total_before")
    counters = cupy.zeros(2, dtype=np.uint64)
    host = cupyx.empty_pinned(1, dtype=np.uint64)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    blocks = _hash_kernels.TOTAL_BLOCKS_PER_SM * sms
    row = {"matrix": name, "nnz": int(S.nnz)}
    times: dict = {"before": [], "after": [], "before_cold": [], "after_cold": [], "wall": []}
    counts = set()
    for _ in range(repeat):
        A = sg.spgemm(base, identity, planning="estimate")  # fresh: just written
        left, right = operands(A)
        if left.index_dtype != np.int32:
            raise SystemExit(f"{name}: int32 operands expected")
        grid = min(-(-left.nnz // _hash_kernels.BLOCK), blocks)
        for cold in (False, True):
            for which in ("before", "after"):
                if cold:
                    flush.fill(1)
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                cupy.cuda.Device().synchronize()
                start.record()
                if which == "before":
                    args = (
                        left.indices,
                        np.int64(left.nnz),
                        right.indptr,
                        counters,
                        host.ctypes.data,
                    )
                    kernel((grid,), (_hash_kernels.BLOCK,), args)
                    end.record()
                    end.synchronize()
                    counts.add(int(host[0]))
                else:
                    count = hash_spgemm._DeviceCount(left, right)
                    end.record()
                    end.synchronize()
                    counts.add(count.value())
                key = which + ("_cold" if cold else "")
                times[key].append(cupy.cuda.get_elapsed_time(start, end))
        cupy.cuda.Device().synchronize()
        begin = time.perf_counter()
        hash_spgemm._DeviceCount(left, right).value()
        times["wall"].append((time.perf_counter() - begin) * 1e3)
    if len(counts) != 1:
        raise SystemExit(f"{name}: the kernels disagree: {sorted(counts)}")
    row["products"] = counts.pop()
    for key, values in times.items():
        row[f"{key}_ms"] = float(np.median(values[1:] if len(values) > 1 else values))
    print(name, {k: round(v, 4) for k, v in row.items() if k.endswith("_ms")}, flush=True)
    return row


def markdown(result) -> str:
    lines = [
        "# The rule's count of intermediate products, kernel against kernel (issue 47)",
        "",
        f"Device: {result['device']}. Command: `{result['command']}`. "
        + common.doc_paragraph(__doc__, 1),
        "",
        "| matrix | nnz | products | before (ms) | after (ms) | before, L2 flushed "
        "| after, L2 flushed | launch to read, wall (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in result["rows"]:
        lines.append(
            f"| {r['matrix']} | {r['nnz']:,} | {r['products']:,} | {r['before_ms']:.4f} | "
            f"{r['after_ms']:.4f} | {r['before_cold_ms']:.4f} | {r['after_cold_ms']:.4f} | "
            f"{r['wall_ms']:.4f} |"
        )
    warm = ", ".join(f"{r['matrix']} {r['before_ms'] / r['after_ms']:.2f}x" for r in result["rows"])
    cold = ", ".join(
        f"{r['matrix']} {r['before_cold_ms'] / r['after_cold_ms']:.2f}x" for r in result["rows"]
    )
    lines += [
        "",
        f"Reading: before against after on operands just written (as a first product finds "
        f"them): {warm}; with the L2 cache flushed: {cold}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = common.experiment_parser(__doc__, DEFAULT_ONLY, 11).parse_args(argv)
    if args.from_json:
        common.markdown_again(args.from_json, args.md, markdown)
        return 0
    import cupy

    chosen = set(args.only.split(","))
    rows = []
    for _, name, build in spgemm_first.call_matrices(np):
        if name in chosen:
            rows.append(measure(name, build().astype(np.float64), cupy, args.repeat))
    result = {**common.experiment_header(MODULE), "rows": rows}
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
