"""Every candidate kernel of ``A @ x`` against cuSPARSE called directly, on the classes of
``synthetic.class_check_suite`` (issue 34: where an outside check found ``auto`` below
0.97x cuSPARSE), to see what planning chose, what it timed and what it left out.

For each matrix and dtype: cuSPARSE called directly (ALG1, ALG2), ``auto`` as users call
it after ``sparsegpu.choose`` (its choice and planning's own timings recorded), and the
plan of each candidate below called into one y (``plan.matvec(x, out=y)``): every shape
the merge-path kernel is compiled for, the shuffle kernel's threads per row near its
untuned choice at three block sizes, the untuned and tuned policies of shuffle, delta16,
readonly and vector, and the cusparse backend's algorithms. All timed in alternation
(CUDA events, a loop of products a sample), every answer checked against cupyx first.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spmv_class_candidates --part fit --out FILE.json
    python -m benchmarks.experiments.spmv_class_candidates --path --out FILE.json
    python -m benchmarks.experiments.spmv_class_candidates --from-json FILE.json --md FILE.md
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import sys

import numpy as np

import sparsegpu as sg
from benchmarks import auto_vs_cusparse, common
from sparsegpu import measure
from sparsegpu.backends.base import plan_on
from sparsegpu.backends.csr_vector import nearby_threads_per_row
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.engine import _planning, _registry, _rules, _select

BLOCKS = (128, 256, 512)


def candidates(A, dtype) -> list:
    """(label, backend, policy) of every candidate timed."""
    out = []
    registry = _registry.registered()
    for name in ("merge_path", "cusparse"):
        backend = registry[name]
        mirror = A._sg_mirror(backend.residence, dtype)
        out += [(f"{name} {p!r}", backend, p) for p in backend.candidates(mirror)]
    for name in ("shuffle", "delta16", "readonly", "vector"):
        backend = registry.get(name)
        if backend is None:
            continue
        mirror = A._sg_mirror(backend.residence, dtype)
        if not backend.supports(mirror):
            continue
        untuned = backend.default_policy(mirror)
        tuned = _select.default_policy(backend, mirror)
        policies = [untuned, tuned]
        if name == "shuffle":
            policies += [
                type(untuned)(block, threads, source="candidate")
                for threads in nearby_threads_per_row(untuned.threads_per_row)
                for block in BLOCKS
            ]
        out += [(f"{name} {p!r}", backend, p) for p in dict.fromkeys(policies)]
    return out


def bench(name, host, dtype, cupy, cupyx_sparse, avc) -> dict:
    Acx = cupyx_sparse.csr_matrix(host.astype(dtype))
    Acx.sum_duplicates()
    A = sg.csr_matrix(Acx)
    n_rows, n_cols = A.shape
    x = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, n_cols).astype(dtype))
    reference = Acx @ x
    mirror = A._sg_mirror(_registry.registered()["cusparse"].residence, np.dtype(dtype))
    nbytes = measure.matrix_spmv_bytes(mirror)
    inner = max(avc.MIN_CALLS, min(200, int(2e8 // max(nbytes, 1))))
    scale = max(float(cupy.abs(reference).max()), 1.0)
    tol = 64 * np.finfo(dtype).eps * math.sqrt(max(mirror.stats.max, 1)) * scale
    fns, directs, failed = {}, [], {}

    def check(y, what) -> bool:
        err = float(cupy.abs(y - reference).max()) if y.size else 0.0
        if not err <= tol:
            failed[what] = f"error {err:.3e} > {tol:.3e}"
            return False
        return True

    for algorithm in ("csr_alg1", "csr_alg2"):
        y = cupy.empty(n_rows, dtype=dtype)
        direct = avc.DirectSpMV(mirror, x, y, algorithm)
        directs.append(direct)
        direct()
        if check(y, f"raw {algorithm}"):
            fns[f"raw {algorithm}"] = direct
    measured = sg.csr_matrix(Acx)
    choice = sg.choose(measured, x)
    if check(measured @ x, "auto"):
        fns["auto"] = lambda: measured @ x
    for label, backend, policy in candidates(A, dtype):
        plan = plan_on(A._sg_mirror(backend.residence, dtype), backend, policy)
        y = cupy.empty(n_rows, dtype=dtype)
        try:
            plan.matvec(x, out=y)
        except Exception as exc:  # a candidate that cannot run here is reported
            failed[label] = f"{type(exc).__name__}: {exc}"
            continue
        if check(y, label):
            fns[label] = lambda plan=plan, y=y: plan.matvec(x, out=y)
    timings = measure.cuda_time_interleaved(fns, inner=inner, repeat=15)
    for direct in directs:
        direct.close()
    ms = {k: t.median_ms for k, t in timings.items()}
    raw = min(v for k, v in ms.items() if k.startswith("raw"))
    stats = mirror.stats
    return {
        "matrix": name,
        "dtype": np.dtype(dtype).name,
        "shape": [n_rows, n_cols],
        "nnz": int(mirror.nnz),
        "row_mean": stats.mean,
        "row_max": stats.max,
        "row_class": _rules.row_class(stats),
        "column_spread": stats.column_spread,
        "calls_per_sample": inner,
        "auto_backend": choice.backend,
        "auto_policy": repr(choice.policy),
        "auto_reason": choice.reason,
        "planning": [
            {"backend": m.backend, "policy": repr(m.policy), "ms": m.ms, "agreed": m.agreed}
            for m in choice.measurements
        ],
        "ms": ms,
        "raw_best_ms": raw,
        "vs_raw": {k: raw / v for k, v in ms.items()},
        "failed": failed,
    }


def user_path(name, host, dtype, cupy, cupyx_sparse, avc) -> dict:
    """Where ``A @ x`` spends GPU time its plan called directly does not: ``auto`` as users
    call it, ``sparsegpu.matvec``, the chosen plan's ``matvec`` allocating y and into one
    y, on the planned matrix, and raw cuSPARSE; timed with 5 and with 50 products a sample
    (what a sample's first call costs before the GPU starts shows as the difference), plus
    each one's host microseconds per call without synchronizing."""
    Acx = cupyx_sparse.csr_matrix(host.astype(dtype))
    Acx.sum_duplicates()
    n_rows, n_cols = Acx.shape
    x = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, n_cols).astype(dtype))
    M = sg.csr_matrix(Acx)
    choice = sg.choose(M, x)
    plan = _planning.plan_for(M, dtype)
    mirror = plan.matrix
    y = cupy.empty(n_rows, dtype=dtype)
    y_raw = cupy.empty(n_rows, dtype=dtype)
    direct = avc.DirectSpMV(mirror, x, y_raw, "csr_alg1")
    fns = {
        "raw csr_alg1": direct,
        "A @ x": lambda: M @ x,
        "sg.matvec": lambda: sg.matvec(M, x),
        "plan.matvec(x)": lambda: plan.matvec(x),
        "plan.matvec(x, out=y)": lambda: plan.matvec(x, out=y),
    }
    row = {"matrix": name, "dtype": np.dtype(dtype).name, "auto": choice.backend,
           "policy": repr(choice.policy)}  # fmt: skip
    for inner in (5, 50):
        timings = measure.cuda_time_interleaved(fns, inner=inner, repeat=15)
        row[f"ms_inner{inner}"] = {k: t.median_ms for k, t in timings.items()}
    row["host_us"] = {k: avc.host_overhead_us(fn, cupy, calls=300) for k, fn in fns.items()}
    direct.close()
    return row


def _short(label: str) -> str:
    """``"merge_path MergePathPolicy(source=..., block_size=128, ...)"`` as
    ``"merge_path 128/8"``: the backend and its knobs' values."""
    backend, _, policy = label.partition(" ")
    knobs = re.findall(r"(?:block_size|nnz_per_thread|threads_per_row|algorithm)=([^,)]+)", policy)
    return f"{backend} {'/'.join(v.strip(chr(39)) for v in knobs)}".strip()


def markdown(result) -> str:
    """The result as tables: per matrix and dtype, ``auto`` and the fastest candidates
    against cuSPARSE called directly (``bench``), or the user-path timings (``--path``)."""
    rows = result["results"]
    lines = [f"# SpMV candidates on the class-check matrices ({result['device']})", ""]
    if rows and "ms_inner5" in rows[0]:
        keys = list(rows[0]["ms_inner5"])
        lines += [
            "Microseconds a product with 5 and with 50 products a sample (CUDA events, in "
            "alternation), and host microseconds a call without synchronizing.",
            "",
            "| matrix | dtype | auto | " + " | ".join(f"{k} (5 / 50 / host)" for k in keys) + " |",
            "|---|---|---|" + "---:|" * len(keys),
        ]
        for r in rows:
            cells = [
                f"{r['ms_inner5'][k] * 1e3:.1f} / {r['ms_inner50'][k] * 1e3:.1f} / "
                f"{r['host_us'][k]:.1f}"
                for k in keys
            ]
            lines.append(
                f"| {r['matrix']} | {r['dtype']} | {r['auto']} | " + " | ".join(cells) + " |"
            )
        return "\n".join(lines) + "\n"
    lines += [
        "Each candidate's plan called into one y (`plan.matvec(x, out=y)`), `auto` as users "
        "call it after `sparsegpu.choose`, and cuSPARSE called directly; ratios are the "
        "best direct cuSPARSE time over each (above 1: faster than cuSPARSE).",
        "",
        "| matrix | dtype | row class | raw best us | auto | auto/raw | fastest candidates "
        "(x raw) | planning's timings (us) |",
        "|---|---|---|---:|---|---:|---|---|",
    ]
    for r in rows:
        best = sorted(
            ((k, v) for k, v in r["vs_raw"].items() if not k.startswith(("raw", "auto"))),
            key=lambda kv: -kv[1],
        )[:3]
        shown = "; ".join(f"{_short(k)} {v:.2f}x" for k, v in best)
        planned = ", ".join(
            f"{m['backend']} {m['ms'] * 1e3:.1f}" for m in r["planning"] if m["ms"] is not None
        )
        lines.append(
            f"| {r['matrix']} | {r['dtype']} | {r['row_class']} | {r['raw_best_ms'] * 1e3:.1f} | "
            f"{r['auto_backend']} | {r['vs_raw'].get('auto', 0):.3f}x | {shown} | {planned} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False))
    parser.add_argument("--part", default="fit", choices=["fit", "heldout"])
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--only", help="comma-separated matrix names")
    parser.add_argument("--path", action="store_true", help="user_path instead")
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(pathlib.Path(args.from_json).read_text())
        pathlib.Path(args.md).write_text(markdown(result))
        return 0
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print(f"no GPU: {_cuda.unavailable_reason()}", file=sys.stderr)
        return 2
    import cupyx.scipy.sparse as cupyx_sparse

    avc = auto_vs_cusparse
    rows = []
    only = set(args.only.split(",")) if args.only else None
    result = {"device": _cuda.device_info().name, "part": args.part, "results": rows}
    for name, build in synthetic.class_check_suite(args.part).items():
        if only and name not in only:
            continue
        host = build()
        for dtype in args.dtypes.split(","):
            if args.path:
                rows.append(user_path(name, host, np.dtype(dtype), cupy, cupyx_sparse, avc))
                pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
                print(json.dumps(rows[-1]))
                continue
            row = bench(name, host, np.dtype(dtype), cupy, cupyx_sparse, avc)
            rows.append(row)
            pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
            best = sorted(row["vs_raw"].items(), key=lambda kv: -kv[1])
            print(
                f"\n{name} {dtype} {row['row_class']} nnz {row['nnz']:,} max {row['row_max']} "
                f"raw {row['raw_best_ms'] * 1e3:.1f} us; auto {row['auto_backend']} "
                f"{row['vs_raw'].get('auto', 0):.3f}x {row['auto_policy']}"
            )
            for label, ratio in best[:6]:
                print(f"   {ratio:.3f}x {row['ms'][label] * 1e3:8.1f} us  {label}")
            print(
                "   planning:",
                [(m["backend"], m["ms"] and round(m["ms"] * 1e3, 1)) for m in row["planning"]],
            )
            if row["failed"]:
                print("   failed:", row["failed"])
        del host
        cupy.get_default_memory_pool().free_all_blocks()
    if args.md:
        pathlib.Path(args.md).write_text(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
