"""Where the time of ``A @ B`` goes: each layer of sparsegpu's path against cuSPARSE called
directly and cupyx, on the same operands and algorithm.

Columns, from the outside in (all at planning level ``estimate``: every product runs the
rule's algorithm from scratch, a first product's work):

- ``op``: ``A @ B`` on sparsegpu matrices (dispatch, planning, driver, engine, the result
  wrapped as a matrix kept on the device);
- ``spgemm``: ``sg.spgemm(A, B, algorithm=...)`` with the rule's algorithm;
- ``planning``: ``_sparse_planning.multiply_sparse`` on the CSR mirrors;
- ``driver``: ``backends.spgemm.multiply`` (budget, index dtype, whole or in blocks);
- ``engine``: the engine's ``multiply`` into a result sink;
- ``cusparse_alg1``: cuSPARSE SpGEMM ALG1 called directly (``benchmarks/spgemm.py``'s),
  where the rule picks ALG1;
- ``cupyx``: ``cupyx.scipy.sparse`` on the same device arrays.

Median of ``--repeat`` CUDA-event samples in alternation after a warm-up; every answer
checked against cupyx's first. ``--profile`` also writes cProfile's top functions (by own
time) of ``op`` on the first matrix, to see the host work a product carries.

Nothing here is fitted: it measures the path, on the held-out matrices of
``benchmarks/spgemm.py``.

Usage (on a GPU machine)::

    python -m benchmarks.spgemm_layers --out layers.json --md layers.md --profile prof.txt
    python -m benchmarks.spgemm_layers --from-json layers.json --md layers.md   # no GPU
"""

from __future__ import annotations

import cProfile
import io
import pathlib
import pstats
import sys

import numpy as np

import sparsegpu as sg
from benchmarks import common
from benchmarks import spgemm as spgemm_bench
from benchmarks.common import DirectSpGEMM
from sparsegpu import measure
from sparsegpu.backends import spgemm
from sparsegpu.engine import _sparse_dispatch, _sparse_planning

LAYERS = ("op", "spgemm", "planning", "driver", "engine", "cusparse_alg1", "cupyx")


def layer_fns(form, S, dtype, cupyx_sparse) -> tuple[dict, str]:
    """``({column: fn}, the rule's algorithm)`` for ``A @ A`` or ``A.T @ A``."""
    A = sg.csr_matrix(S.astype(dtype))
    A.planning = "estimate"
    Acx = cupyx_sparse.csr_matrix(A)
    Acx.sum_duplicates()
    left, right = (A, A) if form == "A@A" else (A.T, A)
    left_cx, right_cx = (Acx, Acx) if form == "A@A" else (Acx.T, Acx)
    engine, residence, value_dtype, _ = _sparse_dispatch.where(left, right)
    L, R = _sparse_dispatch.operands(left, right, residence, value_dtype)
    L, R = spgemm.canonical(L), spgemm.canonical(R)
    algorithm = engine.rule(L, R)

    def engine_only():
        shape = (L.shape[0], R.shape[1])
        sink = spgemm.ResultSink(spgemm.Budget(L.xp), shape, L.dtype, L.index_dtype, residence)
        return engine.multiply(L, R, algorithm, sink)

    fns = {
        "op": lambda: left @ right,
        "spgemm": lambda: sg.spgemm(left, right, algorithm=algorithm),
        "planning": lambda: _sparse_planning.multiply_sparse(L, R, engine, level="estimate"),
        "driver": lambda: spgemm.multiply(engine, L, R, algorithm, spgemm.Budget(L.xp))[0],
        "engine": engine_only,
    }
    if algorithm == "alg1":
        fns["cusparse_alg1"] = DirectSpGEMM(L, R)
    fns["cupyx"] = lambda: left_cx @ right_cx
    return fns, algorithm


def _device_result(result):
    if isinstance(result, spgemm.DeviceMatrix):
        return result.indptr, result.indices, result.data
    return result


def run_dtype(name, form, S, dtype, repeat, cupy, cupyx_sparse, log) -> dict:
    fns, algorithm = layer_fns(form, S, dtype, cupyx_sparse)
    row = {"matrix": name, "form": form, "dtype": np.dtype(dtype).name, "nnz": int(S.nnz)}
    row["algorithm"] = algorithm
    reference = fns["cupyx"]()
    if reference.format != "csr":
        reference = reference.tocsr()
    row["disagreements"] = {}
    for key, fn in fns.items():
        if key != "cupyx":
            problem = spgemm_bench.agree(_device_result(fn()), reference, dtype, cupy)
            if problem is not None:
                row["disagreements"][key] = problem
    for key, timing in measure.cuda_time_interleaved(fns, warmup=2, repeat=repeat).items():
        row[f"{key}_ms"] = timing.median_ms
    log(
        f"  {name} {row['dtype']} ({algorithm}): "
        + ", ".join(f"{k} {row[f'{k}_ms']:.3f}" for k in fns)
        + f" ms; {row['disagreements'] or 'all agree'}"
    )
    return row


def profile_text(form, S, dtype, cupyx_sparse, cupy, calls=200, top=35) -> str:
    """cProfile's top functions by own time over ``calls`` products ``op``."""
    fn = layer_fns(form, S, dtype, cupyx_sparse)[0]["op"]
    for _ in range(3):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return f"{calls} products of {form} in {np.dtype(dtype).name}\n" + out.getvalue()


def markdown(result: dict) -> str:
    lines = [
        "# Where the time of `A @ B` goes: sparsegpu's layers against cuSPARSE direct and cupyx",
        "",
        f"Device: {result.get('device', '?')}; CuPy {result.get('cupy', '?')}. Median of "
        f"{result.get('repeat')} CUDA-event samples in alternation, milliseconds; planning "
        "level estimate (the rule's algorithm, from scratch); answers checked against cupyx.",
        "",
        "| matrix | product | dtype | algorithm | " + " | ".join(LAYERS) + " | op vs cupyx |",
        "|" + "---|" * (len(LAYERS) + 5),
    ]
    for row in result["rows"]:
        cells = [f"{row[f'{k}_ms']:.3f}" if f"{k}_ms" in row else "—" for k in LAYERS]
        flag = f" (disagrees: {', '.join(row['disagreements'])})" if row["disagreements"] else ""
        lines.append(
            f"| {row['matrix']} | {row['form']} | {row['dtype']} | {row['algorithm']}{flag} | "
            + " | ".join(cells)
            + f" | {row['cupyx_ms'] / row['op_ms']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False, paths=True))
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--profile", type=pathlib.Path, help="cProfile's top functions of op")
    args = parser.parse_args(argv)
    started = spgemm_bench.start(args, markdown)
    if isinstance(started, int):
        return started
    cupy, cupyx_sparse = started
    result = {
        "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "cupy": cupy.__version__,
        "repeat": args.repeat,
        "command": " ".join(sys.argv),
        "rows": [],
    }
    chosen = [
        m for m in spgemm_bench.matrices("full", cupy) if not m[1].startswith(spgemm_bench.GALERKIN)
    ]
    for i, (name, form, builder) in enumerate(chosen):
        spgemm_bench.log(f"[{i + 1}/{len(chosen)}] {name} ({form})")
        S = builder()
        for dtype in (np.float64, np.float32):
            row = run_dtype(name, form, S, dtype, args.repeat, cupy, cupyx_sparse, spgemm_bench.log)
            result["rows"].append(row)
        if args.profile and i == len(chosen) - 2:  # the P1 mesh: ALG1, about 1 ms
            args.profile.write_text(profile_text(form, S, np.float64, cupyx_sparse, cupy))
    return spgemm_bench.finish(args, result, markdown)


if __name__ == "__main__":
    sys.exit(main())
