"""Experiment (issue 18, fourteenth session): sliced ELL with 16-bit column offsets.

Not a backend: a one-off prototype that decided whether a sliced ELL layout (SELL-C-sigma,
Kreutzer et al., SISC 2014) with 16-bit column offsets is worth building as a layout of
``delta16``. Per slice of 32 / ``tpr`` rows (one warp), the entries are stored
column-major (32 consecutive values and 16-bit offsets per step, padded with zeros to the
slice's longest row), with one base column and one start per slice and no ``indptr``:
about 66 bytes a row on the 2-D 5-point stencil in float64 where plain CSR reads 80 and
``delta16`` 70. ``window`` > 0 sorts the rows by length within windows of that many rows
(the sigma of SELL-C-sigma) to cut the padding of irregular rows; y is then written
through the permutation. Sorting can widen a slice's columns past 16 bits (the 3-D
7-point stencil with window 1024): such a layout is not built, and the result says so.

Result (H200, ``sliced_ell_prototype_h200.json``): slower than ``delta16``'s best on 10
of the 12 matrix and dtype pairs; faster only on the 2-D 9-point and 3-D 27-point
stencils in float64. Not built into the library; see docs/benchmarks/results/README.md.

The layouts are built on the host (numpy), once per matrix; every kernel variant is
checked against the first plain candidate's answer before it is timed. Printed per matrix
and dtype: the best of the ``shuffle`` sweep, of the ``delta16`` sweep, and of the sliced
variants (threads per row 1/2/4/8, window 0/1024, block 256/512), median CUDA-event times
of ``out=`` products, one candidate after another.

Usage (on a GPU machine, from the repository root)::

    python -m benchmarks.experiments.sliced_ell_prototype --out r.json --md r.md
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import numpy as np

from benchmarks import common, compressed_indices
from sparsegpu import measure
from sparsegpu.device._mirror import CUPY, PlanKey
from sparsegpu.engine import _registry

THREADS_PER_ROW = (1, 2, 4, 8)
WINDOWS = (0, 1024)
BLOCKS = (256, 512)

KERNEL = r"""
template <typename T, int TPR, bool SORTED>
__device__ void sell(const long long* __restrict__ start, const int* __restrict__ base,
                     const unsigned short* __restrict__ off, const T* __restrict__ val,
                     const T* __restrict__ x, T* __restrict__ y, const int* __restrict__ perm,
                     int n_rows) {
  const int C = 32 / TPR;
  const long long s = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (s >= (n_rows + C - 1) / C) return;
  const long long p0 = start[s], p1 = start[s + 1];
  const int b = base[s];
  T sum = 0;
#pragma unroll 4
  for (long long p = p0 + lane; p < p1; p += 32) sum += __ldg(val + p) * __ldg(x + b + off[p]);
#pragma unroll
  for (int o = TPR / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const long long r = s * C + lane / TPR;
  if (lane % TPR == 0 && r < n_rows) y[SORTED ? perm[r] : r] = sum;
}
"""


def kernel_source() -> str:
    source = KERNEL
    for t in ("double", "float"):
        for tpr in THREADS_PER_ROW:
            for srt in (0, 1):
                name = f"sell_{t}_{tpr}_{srt}"
                sorted_ = "true" if srt else "false"
                source += (
                    f'extern "C" __global__ void __launch_bounds__(512) {name}('
                    f"const long long* a, const int* b, const unsigned short* c, const {t}* d, "
                    f"const {t}* e, {t}* f, const int* g, int n) "
                    f"{{ sell<{t}, {tpr}, {sorted_}>(a, b, c, d, e, f, g, n); }}\n"
                )
    return source


def build(S, tpr: int, window: int, cupy) -> dict:
    """The sliced layout of CSR matrix ``S`` (no empty rows), on the device."""
    n, rows_per_slice = S.shape[0], 32 // tpr
    lengths = np.diff(S.indptr).astype(np.int64)
    if window:  # longest first within each window
        perm = np.lexsort((-lengths, np.arange(n) // window)).astype(np.int32)
    else:
        perm = np.arange(n, dtype=np.int32)
    n_slices = -(-n // rows_per_slice)
    padded = np.zeros(n_slices * rows_per_slice, np.int64)
    padded[:n] = lengths[perm]
    steps = -(-padded.reshape(n_slices, rows_per_slice).max(1) // tpr)
    start = np.zeros(n_slices + 1, np.int64)
    start[1:] = np.cumsum(steps * 32)
    position = np.empty(n, np.int64)
    position[perm] = np.arange(n)
    row_of = np.repeat(np.arange(n), lengths)
    j = np.arange(S.nnz) - np.repeat(S.indptr[:-1].astype(np.int64), lengths)
    q = position[row_of]
    slice_of, r = q // rows_per_slice, q % rows_per_slice
    slot = start[slice_of] + (j // tpr) * 32 + r * tpr + j % tpr
    cols = S.indices.astype(np.int64)
    firsts = S.indptr[:-1].astype(np.int64)
    low = np.full(padded.shape, np.iinfo(np.int64).max)
    low[:n] = np.minimum.reduceat(cols, firsts)[perm]
    high = np.full(padded.shape, -1)
    high[:n] = np.maximum.reduceat(cols, firsts)[perm]
    base = low.reshape(n_slices, rows_per_slice).min(1)
    span = int((high.reshape(n_slices, rows_per_slice).max(1) - base).max())
    if span >= 1 << 16:  # (sorting rows within a window can widen a slice's columns)
        raise ValueError(f"a slice spans {span:,} columns: its offsets do not fit 16 bits")
    offsets = np.zeros(int(start[-1]), np.uint16)
    offsets[slot] = (cols - base[slice_of]).astype(np.uint16)
    values = np.zeros(int(start[-1]), np.float64)
    values[slot] = S.data
    return {
        "start": cupy.asarray(start), "base": cupy.asarray(base.astype(np.int32)),
        "offsets": cupy.asarray(offsets), "values": cupy.asarray(values),
        "perm": cupy.asarray(perm), "n": n, "n_slices": n_slices,
        "padding": float(start[-1] / S.nnz), "span": span,
    }  # fmt: skip


def us(fn) -> float:
    return 1e3 * measure.cuda_time(fn, warmup=3, repeat=20).median_ms


def best_of_sweeps(mirror, x, y):
    """{backend: (µs, policy)} over the shuffle and delta16 sweeps, and the first answer."""
    best, reference = {}, None
    registry = _registry.registered()
    for name in ("shuffle", "delta16"):
        backend = registry[name]
        for policy in backend.candidates(mirror):
            try:
                plan = mirror.get_plan(
                    PlanKey(name, policy), lambda b=backend, p=policy: b.plan(mirror, p)
                )
                plan.matvec(x, out=y)
            except Exception:  # a policy that cannot launch here
                continue
            if reference is None:
                reference = y.copy()
            t = us(lambda plan=plan: plan.matvec(x, out=y))
            if name not in best or t < best[name][0]:
                best[name] = (t, repr(policy))
    return best, reference


def markdown(results: list) -> str:
    """One line per matrix and dtype: the best of each side and the sliced layout's."""
    lines = [
        "# Sliced ELL with 16-bit offsets (prototype) against delta16 and shuffle",
        "",
        "Median CUDA-event times (µs), `out=` given, one candidate after another; ratios "
        "are shuffle's best over the other's (> 1: faster than shuffle).",
        "",
        "| matrix | dtype | shuffle best | delta16 best | ratio | sliced best | ratio "
        "| sliced variant | padding |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for row in results:
        plain, d16 = row["best"]["shuffle"][0], row["best"]["delta16"][0]
        valid = {k: v for k, v in row["sliced"].items() if v["relative_error"] < 1e-3}
        top = min(valid, key=lambda k: valid[k]["us"])
        t = valid[top]["us"]
        lines.append(
            f"| {row['matrix']} | {row['dtype']} | {plain:.1f} | {d16:.1f} | {plain / d16:.3f} "
            f"| {t:.1f} | {plain / t:.3f} | {top} | {valid[top]['padding']:.3f} |"
        )
    wins = sum(
        min(v["us"] for v in r["sliced"].values() if v["relative_error"] < 1e-3)
        < r["best"]["delta16"][0]
        for r in results
    )
    lines += ["", f"The sliced layout is faster than delta16's best on {wins} of {len(results)}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False))
    parser.add_argument("--scale", choices=("full", "small"), default="full")
    args = parser.parse_args(argv)
    if args.from_json:
        results = json.loads(pathlib.Path(args.from_json).read_text())
        pathlib.Path(args.md).write_text(markdown(results))
        return 0

    import cupy

    import sparsegpu as sg

    matrices = compressed_indices.matrices(args.scale)
    module = cupy.RawModule(code=kernel_source(), options=("-std=c++17",))
    results = []
    for _, name, make in matrices:
        if "random" in name:  # 16-bit offsets do not apply
            continue
        S64 = make().astype(np.float64)
        S64.indices, S64.indptr = S64.indices.astype(np.int32), S64.indptr.astype(np.int32)
        began = time.time()
        layouts, too_wide = {}, {}
        for t in THREADS_PER_ROW:
            for w in WINDOWS:
                try:
                    layouts[(t, w)] = build(S64, t, w, cupy)
                except ValueError as exc:
                    too_wide[f"tpr={t} window={w}"] = str(exc)
        print(f"{name}: layouts built in {time.time() - began:.1f} s", flush=True)
        for dtype in (np.float64, np.float32):
            S = S64.astype(dtype)
            mirror = sg.csr_matrix(S)._sg_mirror(CUPY, dtype)
            x = cupy.asarray(np.random.default_rng(1).standard_normal(S.shape[1]).astype(dtype))
            y = cupy.empty(S.shape[0], dtype)
            best, reference = best_of_sweeps(mirror, x, y)
            scale = max(float(cupy.abs(reference).max()), 1.0)
            ctype = "double" if dtype == np.float64 else "float"
            row = {
                "matrix": name, "dtype": np.dtype(dtype).name, "best": best, "sliced": {},
                "not_built": too_wide,
            }  # fmt: skip
            for (tpr, window), layout in layouts.items():
                kernel = module.get_function(f"sell_{ctype}_{tpr}_{int(bool(window))}")
                values = layout["values"].astype(dtype)
                arguments = (
                    layout["start"], layout["base"], layout["offsets"], values, x, y,
                    layout["perm"], np.int32(layout["n"]),
                )  # fmt: skip
                for block in BLOCKS:
                    grid = (-(-layout["n_slices"] * 32 // block),)
                    y.fill(0)
                    kernel(grid, (block,), arguments)
                    error = float(cupy.abs(y - reference).max()) / scale
                    t = us(lambda k=kernel, g=grid, b=block, a=arguments: k(g, (b,), a))
                    row["sliced"][f"tpr={tpr} window={window} block={block}"] = {
                        "us": t, "padding": layout["padding"], "span": layout["span"],
                        "relative_error": error,
                    }  # fmt: skip
            valid = {k: v["us"] for k, v in row["sliced"].items() if v["relative_error"] < 1e-3}
            top = min(valid, key=valid.get)
            plain = best["shuffle"][0]
            print(
                f"{name:30s} {row['dtype']:8s} shuffle {plain:7.1f} µs  delta16 "
                f"{best['delta16'][0]:7.1f} ({plain / best['delta16'][0]:.3f})  sliced {top} "
                f"{valid[top]:7.1f} ({plain / valid[top]:.3f}, padding "
                f"{row['sliced'][top]['padding']:.3f})",
                flush=True,
            )
            results.append(row)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    if args.md:
        pathlib.Path(args.md).write_text(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
