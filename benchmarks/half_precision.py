"""16-bit values (issue 18, part 2): float16 and bfloat16 products against float32's.

For each matrix, in one run, median CUDA-event times of ``A @ x`` (``out=`` given) with A,
x and y in float32, float16 and bfloat16 (sums in float32 for the 16-bit types), each
dtype's best over:

* the ``shuffle`` backend with every policy of its autotuner sweep, the ``vector`` and
  ``readonly`` defaults, ``merge_path`` in each compiled shape (float32 only: it takes no
  16-bit values) -- "plain";
* the ``delta16`` backend (16-bit column offsets) with every policy of its sweep;
* cuSPARSE called directly (``DirectSpMV`` from ``auto_vs_cusparse.py``, CSR ALG1 and
  ALG2; CUDA_R_16F / CUDA_R_16BF with float32 compute for the 16-bit types).

and what ``sparsegpu.choose(A, x)`` (planning ``measure``, default policies) picks.

Mixed precision (``A.mixed_precision``, opt-in): a float32 matrix times a float64 x, once
as by default (values widened to float64 on the device, ``auto`` planned) and once with
the values kept float32 (cuSPARSE's mixed-precision SpMV), both checked against the
float64 product of the float32 values.

"speedup" is float32's best time (every candidate above, delta16 included) over the 16-bit
dtype's best; "speedup vs plain" divides by float32's best plain time instead. Each
candidate's answer is checked (:class:`sparsegpu.measure.measure.Oracle`, against the float64
product of the rounded values) before it is timed. The error of the fastest candidate is
reported against the float64 product of the float64 matrix and x (``err_*``: what a user
who rounds a float64 problem loses) and against the float64 product of the rounded
values (``arith_*``: what the arithmetic itself adds).

Matrices (generated here; none took part in tuning, and the 16-bit dtypes have no tuned
defaults at all): 2-D 5- and 9-point and 3-D 7- and 27-point stencils in natural order,
with random values in [-1, 1) (a stencil's constant coefficients are exact in every
16-bit type and would hide the rounding).

Usage (on a GPU machine)::

    python -m benchmarks.half_precision --out r.json --md r.md --plot r.png
    python -m benchmarks.half_precision --from-json r.json --md r.md   # no GPU
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

import sparsegpu as sg
from benchmarks import common
from benchmarks.common import DirectSpMV
from sparsegpu import measure
from sparsegpu.device._dtypes import BFLOAT16, is_half
from sparsegpu.device._mirror import CUPY
from sparsegpu.engine import _registry
from sparsegpu.measure import Oracle

# the issue-18 bar: a 16-bit product over float32's on a large stencil
BAR = 1.5
PLAIN_DEFAULTS = ("vector", "readonly")


matrices = common.stencils


def with_random_values(S, seed: int = 0):
    """S's pattern (int32 indices) with seeded values uniform in [-1, 1), float64."""
    S = S.tocsr().astype(np.float64)
    S.data = np.random.default_rng(seed).uniform(-1.0, 1.0, S.nnz)
    S.indices = S.indices.astype(np.int32)
    S.indptr = S.indptr.astype(np.int32)
    return S


def _time(fn) -> float:
    return measure.cuda_time(fn, warmup=3, repeat=15).median_ms


def candidates(mirror) -> list:
    """(label, backend, policy) of every sparsegpu candidate that takes this mirror."""
    registry = _registry.registered()
    out = []
    for name in ("shuffle", "merge_path"):
        backend = registry[name]
        if backend.supports(mirror):
            out += [("plain", backend, p) for p in backend.candidates(mirror)]
    for name in PLAIN_DEFAULTS:
        backend = registry[name]
        if backend.supports(mirror):
            out.append(("plain", backend, backend.default_policy(mirror)))
    backend = registry["delta16"]
    if backend.supports(mirror):
        out += [("delta16", backend, p) for p in backend.candidates(mirror)]
    return out


def bench_mixed(name, S64, x64, cupy) -> dict:
    """float32 values @ float64 x: widened on the device (the default) against kept float32
    (``A.mixed_precision``)."""
    x = cupy.asarray(x64)
    reference = Oracle(sg.csr_matrix(S64, dtype=np.float32).astype(np.float64), np.float64, x=x64)
    row = {"matrix": name, "nnz": S64.nnz}
    for label, mixed in (("widened", False), ("mixed", True)):
        A = sg.csr_matrix(S64, dtype=np.float32)
        A.mixed_precision = mixed
        choice = sg.choose(A, x)
        problem = reference.error(A @ x)
        if problem is not None:
            raise AssertionError(f"{name} {label}: {problem}")
        row[label] = {"backend": choice.backend, "ms": _time(lambda A=A: A.dot(x))}
    row["speedup"] = row["widened"]["ms"] / row["mixed"]["ms"]
    return row


def _errors(y, exact: np.ndarray) -> dict:
    """Norm-wise and entry-wise relative error of a device y against a float64 answer."""
    got = y.get().astype(np.float64)
    norm = float(np.linalg.norm(exact)) or 1.0
    scale = float(np.abs(exact).max()) or 1.0
    return {
        "norm_rel": float(np.linalg.norm(got - exact)) / norm,
        "max_rel": float(np.abs(got - exact).max()) / scale,
    }


def bench_one(name, S64, x64, dtype, cupy, copy_gbs) -> dict:
    dtype = np.dtype(dtype)
    A = sg.csr_matrix(S64, dtype=dtype)
    x_host = x64.astype(dtype)
    x = cupy.asarray(x_host)
    y = cupy.empty(S64.shape[0], dtype=dtype)
    mirror = A._sg_mirror(CUPY, dtype)
    row = {
        "matrix": name, "dtype": dtype.name, "n_rows": S64.shape[0], "nnz": S64.nnz,
        "bytes": measure.matrix_spmv_bytes(mirror),
    }  # fmt: skip
    rounded = sg.csr_matrix(S64, dtype=dtype).astype(np.float64)
    oracle = Oracle(rounded, dtype, x=x_host)
    exact = S64 @ x64  # the float64 problem's answer
    arithmetic = rounded @ x_host.astype(np.float64)  # the rounded values' exact answer
    times, errors = {}, {}
    for algorithm in ("csr_alg1", "csr_alg2"):
        direct = DirectSpMV(mirror, x, y, algorithm)
        try:
            direct()
            problem = oracle.error(y)
            if problem is not None:
                raise AssertionError(f"{name} {dtype}: cuSPARSE {algorithm}: {problem}")
            key = f"cusparse_{algorithm}"
            errors[key] = (_errors(y, exact), _errors(y, arithmetic))
            times[key] = ("cusparse", _time(direct))
        finally:
            direct.close()
    for label, backend, policy in candidates(mirror):
        key = f"{backend.name} {policy!r}"
        plan, failure = common.launch(mirror, backend, policy, x, y)
        if failure is not None:
            times[key] = (label, None, failure)
            continue
        problem = oracle.error(y)
        if problem is not None:
            raise AssertionError(f"{name} {dtype}: {key}: {problem}")
        errors[key] = (_errors(y, exact), _errors(y, arithmetic))
        times[key] = (label, _time(lambda plan=plan: plan.matvec(x, out=y)))
    timed = {k: v for k, v in times.items() if v[1] is not None}
    for label in ("plain", "delta16", "cusparse"):
        mine = {k: v[1] for k, v in timed.items() if v[0] == label}
        if mine:
            key = min(mine, key=mine.get)
            row[label] = {"candidate": key, "ms": mine[key]}
    best_key = min(timed, key=lambda k: timed[k][1])
    row["best"] = {"candidate": best_key, "ms": timed[best_key][1]}
    row["best_pct_copy"] = 100 * measure.gb_per_s(row["bytes"], row["best"]["ms"]) / copy_gbs
    row["err"], row["arith"] = errors[best_key]
    # what planning by measurement picks, on a fresh matrix, with default policies
    fresh = sg.csr_matrix(S64, dtype=dtype)
    choice = sg.choose(fresh, x)
    row["auto_choice"] = choice.backend
    row["auto_ms"] = _time(lambda: fresh.dot(x))
    row["auto_planning_ms"] = choice.planning_ms
    row["candidates_timed"] = len(timed)
    return row


def summarize(rows) -> dict:
    by = {(r["matrix"], r["dtype"]): r for r in rows}
    out = {"bar": BAR, "per_dtype": {}}
    for r in rows:
        if not is_half(_dtype(r["dtype"])):
            continue
        f32 = by.get((r["matrix"], "float32"))
        if f32 is None:
            continue
        r["speedup"] = f32["best"]["ms"] / r["best"]["ms"]
        r["speedup_vs_plain"] = f32["plain"]["ms"] / r["best"]["ms"]
        r["auto_speedup"] = f32["auto_ms"] / r["auto_ms"]
    for dtype in ("float16", "bfloat16"):
        mine = [r for r in rows if r["dtype"] == dtype and "speedup" in r]
        if not mine:
            continue
        speedups = [r["speedup"] for r in mine]
        plain = [r["speedup_vs_plain"] for r in mine]
        out["per_dtype"][dtype] = {
            "geomean_speedup": _geomean(speedups),
            "min_speedup": min(speedups),
            "meets_bar": [r["matrix"] for r in mine if r["speedup"] >= BAR],
            "misses_bar": [r["matrix"] for r in mine if r["speedup"] < BAR],
            "geomean_speedup_vs_plain": _geomean(plain),
            "meets_bar_vs_plain": [r["matrix"] for r in mine if r["speedup_vs_plain"] >= BAR],
            "misses_bar_vs_plain": [r["matrix"] for r in mine if r["speedup_vs_plain"] < BAR],
            "geomean_auto_speedup": _geomean([r["auto_speedup"] for r in mine]),
            "max_norm_rel_error": max(r["err"]["norm_rel"] for r in mine),
        }
    return out


def _geomean(values) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def _dtype(name: str) -> np.dtype:
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


def markdown(result) -> str:
    lines = [
        f"# 16-bit values against float32 — {result['device']}",
        "",
        f"Copy bandwidth {result['copy_gb_per_s']:.0f} GB/s. Median CUDA-event times, `out=` "
        "given. best = fastest of the shuffle sweep, vector/readonly defaults, merge_path "
        "shapes (float32), the delta16 sweep and cuSPARSE called directly (ALG1/ALG2). "
        "speedup = float32 best / this dtype's best (delta16 float32 included); vs plain = "
        "float32's best without delta16. err: relative error (2-norm) against the float64 "
        "product of the float64 matrix and x; arith: against the float64 product of the "
        "rounded values. % copy counts the plain CSR bytes of the dtype (int32 indices) at the "
        "best time: an effective rate, above 100% where delta16 reads fewer bytes.",
        "",
        "| matrix | dtype | nnz | best | µs | % copy | cuSPARSE µs | speedup | vs plain "
        "| err | arith | auto picks | auto µs |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in result["results"]:
        best = r["best"]["candidate"]
        cells = [
            r["matrix"], r["dtype"], f"{r['nnz']:,}", best.split(" ")[0],
            f"{1e3 * r['best']['ms']:.1f}",
            f"{r['best_pct_copy']:.0f}%", f"{1e3 * r['cusparse']['ms']:.1f}",
            f"{r['speedup']:.2f}" if "speedup" in r else "—",
            f"{r['speedup_vs_plain']:.2f}" if "speedup_vs_plain" in r else "—",
            f"{r['err']['norm_rel']:.1e}", f"{r['arith']['norm_rel']:.1e}",
            r["auto_choice"], f"{1e3 * r['auto_ms']:.1f}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    if result.get("mixed"):
        lines += [
            "",
            "Mixed precision (`A.mixed_precision`): a float32 matrix times a float64 x, "
            "values widened on the device (the default, `auto` planned) against kept float32 "
            "(cuSPARSE's mixed-precision SpMV).",
            "",
            "| matrix | widened: backend | µs | mixed: backend | µs | speedup |",
            "|---|---|---:|---|---:|---:|",
        ]
        for r in result["mixed"]:
            w, m = r["widened"], r["mixed"]
            lines.append(
                f"| {r['matrix']} | {w['backend']} | {1e3 * w['ms']:.1f} | {m['backend']} "
                f"| {1e3 * m['ms']:.1f} | {r['speedup']:.2f} |"
            )
    lines += ["", "Summary:", "", "```", json.dumps(result["summary"], indent=1), "```", ""]
    return "\n".join(lines)


def plot(result, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["results"] if "speedup" in r]
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{r['matrix']}\n{r['dtype']}" for r in rows]
    ax.bar(range(len(rows)), [r["speedup"] for r in rows], color="tab:green")
    ax.axhline(BAR, ls="--", lw=1, color="tab:red", label=f"bar {BAR}x")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("float32 best / 16-bit best (time)")
    ax.set_title(f"16-bit values against float32 ({result['device']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.scale_arguments(dtypes=None), common.output_arguments())
    args = parser.parse_args(argv)
    cupy, status = common.begin(args, summarize, markdown, plot)
    if cupy is None:
        return status
    if BFLOAT16 is None:
        print("bfloat16 needs ml_dtypes: pip install ml_dtypes", file=sys.stderr)
        return 2
    result = common.gpu_header(args.scale)
    result["mixed"] = []

    def prepare(entry):
        name, make = entry
        S64 = with_random_values(make())
        x64 = np.random.default_rng(1).uniform(-1.0, 1.0, S64.shape[1])
        result["mixed"].append(bench_mixed(name, S64, x64, cupy))
        return S64, x64

    todo = common.keep_matching(matrices(args.scale), args.only, position=0)
    dtypes = [np.dtype(np.float32), np.dtype(np.float16), BFLOAT16]
    common.measure_each(
        todo, dtypes, result, args.out, cupy,
        lambda entry, host, dtype: bench_one(
            entry[0], *host, dtype, cupy, result["copy_gb_per_s"]
        ),
        prepare=prepare, name_at=0,
    )  # fmt: skip
    return common.finish(result, args, summarize, markdown, plot)


if __name__ == "__main__":
    sys.exit(main())
