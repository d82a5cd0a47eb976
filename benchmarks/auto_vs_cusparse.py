"""sparsegpu ``auto`` against cupyx ``A @ x`` and raw cuSPARSE (descriptors reused).

On the matrices of ``--set`` (issue 13: tune and fit on one set, report on another):

``heldout`` (the default)
    ``sparsegpu.datasets.synthetic.heldout_suite(scale)`` ("heldout-generated": arrow-like,
    R-MAT, meshes numbered in random order, short-and-wide, tall, and the tuning classes
    with other parameters; they took no part in anything) and every Matrix Market file
    in ``--matrices`` ("heldout-real": the bundled SuiteSparse matrices, which fitted the
    small-matrix threshold of the rules but took no part in measurement).
``tuning``
    ``synthetic.suite(scale)``: the classes the autotuner ran on, the shipped defaults
    and the rules' regular-rows preference were fitted to.
``both``
    all of them, each row labelled with its set.
``classes-fit``, ``classes-heldout``, ``classes-heldout-long``
    ``synthetic.class_check_suite``'s parts: randomly numbered 3-D meshes and rows of
    ~25 with a few rows of thousands, where an outside check found ``auto`` behind
    cuSPARSE (issue 34); the fix was chosen on the first, claimed on the other two (the
    last: the 80k-220k-row long-row regime).

For every matrix, in each dtype asked for: the median time (CUDA events) of ``A @ x``
through cuSPARSE called directly ("raw": :class:`DirectSpMV`, the C program that makes
the matrix, x and y descriptors and the workspace once and then calls only
``cusparseSpMV``; CSR ALG1 and ALG2, the best kept), cupyx.scipy.sparse, sparsegpu's
``merge_path`` and ``cusparse`` backends (``cusparse`` as users call it, allocating y;
``cusparse_out`` with ``out=`` given, the same work as the direct program), ``auto``
planning by estimate (the rules alone, ``A.planning = "estimate"``) and ``auto``
planning by measurement (``sparsegpu.choose(A, x)`` first: its choice, what it measured
and what planning cost are recorded). Every answer is checked against cupyx's before
anything is timed, then all columns of a matrix are timed in alternation (one sample of
each per round, the order rotating), so that the host's drift falls on them alike; a
sample is a loop of at least ``MIN_CALLS`` products (as a solver runs them: one call
between events would add its launch latency on an idle GPU to every sample). GB/s
counts values + indices + row pointers + x + y once; "% copy"
is against the device-to-device copy bandwidth measured in the same run. Also measured:
host time per call of ``A @ x`` on a 1,000-row matrix (no sync between calls), for
sparsegpu and cupyx.

Usage (on a GPU machine)::

    python -m benchmarks.auto_vs_cusparse --out results.json --md results.md --plot results.png
    python -m benchmarks.auto_vs_cusparse --from-json results.json --md results.md  # no GPU
"""

from __future__ import annotations

import math
import pathlib
import sys
import time

import numpy as np

import sparsegpu as sg
from benchmarks import common
from benchmarks.common import DirectSpMV
from sparsegpu import measure
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.engine import _planning, _registry, _rules
from sparsegpu.measure import probe

DEFAULT_MATRICES = str(common.BUNDLED)
HOST_CALLS = 3000
SETS = common.SPMV_SETS
# the issue-13 bar: auto (planning "measure") against cuSPARSE called directly
CLOSE = 0.97
# the fewest products timed between one pair of events (see bench_one)
MIN_CALLS = 5

# Which matrices took part in what, in words (the markdown prints it).
PROVENANCE = {
    "tuning": (
        '`synthetic.suite("full")`: the autotune runs, the shipped sm_90 defaults and the '
        "rules' regular-rows preference were fitted on these classes"
    ),
    "heldout-real": (
        "the SuiteSparse matrices bundled with sparsegpu: they fitted the small-matrix "
        "threshold `SMALL_ITEMS` of the rules, so they are held out from measurement (the "
        "`measure` claim) but not from the rules (the `estimate` column)"
    ),
    "heldout-generated": (
        '`synthetic.heldout_suite("full")`: classes the tuning suite lacks (arrow-like, '
        "R-MAT, meshes numbered in random order, short-and-wide, tall) and its classes with "
        "other parameters; they took no part in tuning, fitting or defaults"
    ),
    "classes-fit": (
        '`synthetic.class_check_suite("fit")`: the randomly numbered 3-D meshes and small '
        "rectangular matrices with one long row that issue 34's outside check found `auto` "
        "behind cuSPARSE on (other instances of the classes); the fix was found and fitted "
        "on these"
    ),
    "classes-heldout": (
        '`synthetic.class_check_suite("heldout")`: the same two classes at other sizes, '
        "seeds and row-length mixes; they took no part in the fix"
    ),
    "classes-heldout-long": (
        '`synthetic.class_check_suite("heldout-long")`: rows of about 25 with one or two '
        "long rows at 80k-220k rows, the regime the fix was fitted on, at sizes, seeds and "
        "mixes that took no part in it"
    ),
}


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
    out["auto_backend"] = _planning.explain(A).backend
    out["auto_us"] = host_overhead_us(lambda: A @ x, cupy)
    # where the time goes: the dispatcher without scipy's operator, then the plan alone
    out["auto_matvec_function_us"] = host_overhead_us(lambda: sg.matvec(A, x), cupy)
    plan = _planning.plan_for(A, np.float64)
    out["auto_plan_only_us"] = host_overhead_us(lambda: plan.matvec(x), cupy)
    for name in ("cusparse", "merge_path"):
        B = sg.csr_matrix(A)
        B.backend = name
        out[f"{name}_us"] = host_overhead_us(lambda B=B: B @ x, cupy)
    return out


matrices = common.spmv_set


def canonical(build, dtype, cupyx_sparse):
    """(sparsegpu matrix, cupyx matrix), both with sorted, summed indices."""
    Acx = cupyx_sparse.csr_matrix(build().astype(dtype))
    Acx.sum_duplicates()
    return sg.csr_matrix(Acx), Acx


def bench_one(name, build, dtype, cupy, cupyx_sparse, copy_gbs, set_label="heldout") -> dict:
    A, Acx = canonical(build, dtype, cupyx_sparse)
    n_rows, n_cols = A.shape
    x = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, n_cols).astype(dtype))
    reference = Acx @ x
    mirror = A._sg_mirror(_registry.registered()["cusparse"].residence, np.dtype(dtype))
    nbytes = measure.matrix_spmv_bytes(mirror)
    # Calls per event pair: small products need many to be above the event resolution;
    # and at least MIN_CALLS, so that a sample is a loop of products as a solver runs
    # them. With one call between events on an idle GPU, the call's host latency before
    # its first kernel (10-20 us: the dispatcher, cuSPARSE's own host work) sat inside
    # every sample of a 300 us product, and the ratios of large matrices were within a
    # few percent of each other's launch latencies.
    inner = max(MIN_CALLS, min(200, int(2e8 // max(nbytes, 1))))
    scale = max(float(cupy.abs(reference).max()), 1.0)
    tol = 64 * np.finfo(dtype).eps * math.sqrt(max(mirror.stats.max, 1)) * scale

    def check(y, what):
        err = float(cupy.abs(y - reference).max()) if y.size else 0.0
        if not err <= tol:
            raise AssertionError(f"{name} {np.dtype(dtype)} {what}: error {err:.3e} > {tol:.3e}")

    # Every column is checked first, then all are timed in alternation (one sample of
    # each per round): the host's speed drifts over seconds, and timed one after another
    # a slow stretch would fall on one column only (a small matrix's columns moved by up
    # to 1.5x within one run that way).
    fns = {}
    directs = []
    for algorithm in ("csr_alg1", "csr_alg2"):
        if mirror.nnz == 0:
            break  # cuSPARSE refuses empty matrices
        y = cupy.empty(n_rows, dtype=dtype)
        direct = DirectSpMV(mirror, x, y, algorithm)
        directs.append(direct)
        direct()
        check(y, f"raw {algorithm}")
        fns[f"raw_{algorithm}"] = direct
    check(Acx @ x, "cupyx")
    fns["cupyx"] = lambda: Acx @ x
    for backend in ("merge_path", "cusparse"):
        check(sg.matvec(A, x, backend=backend), backend)
        fns[backend] = lambda backend=backend: sg.matvec(A, x, backend=backend)
    # the cusparse backend doing the direct program's work: x and y given
    y_out = cupy.empty(n_rows, dtype=dtype)
    check(sg.matvec(A, x, backend="cusparse", out=y_out), "cusparse out=")
    fns["cusparse_out"] = lambda: sg.matvec(A, x, backend="cusparse", out=y_out)
    cusparse_policy = repr(_planning.plan_for(A, dtype, backend="cusparse").policy)

    # auto planning by estimate (the rules alone), on a fresh matrix
    estimate_matrix = sg.csr_matrix(Acx)
    estimate_matrix.planning = "estimate"
    check(estimate_matrix @ x, "auto (estimate)")
    fns["auto_estimate"] = lambda M=estimate_matrix: M @ x

    # auto planning by measurement, on a fresh matrix: plan now on this x, then time
    measured = sg.csr_matrix(Acx)
    choice = sg.choose(measured, x)
    check(measured @ x, "auto (measure)")
    fns["auto"] = lambda M=measured: M @ x

    timings = measure.cuda_time_interleaved(fns, inner=inner)
    for direct in directs:
        direct.close()
    times = {key: t.median_ms for key, t in timings.items()}
    raw = {k: v for k, v in times.items() if k.startswith("raw_")}
    times["raw_best"] = min(raw.values())
    estimate = sg.explain(estimate_matrix)
    decided = sg.explain(measured)
    del estimate_matrix, measured, fns

    planning_ms = None if choice.planning_ms is None else float(choice.planning_ms)
    stats = mirror.stats
    row = {
        "matrix": name,
        "set": set_label,
        "dtype": np.dtype(dtype).name,
        "n_rows": n_rows,
        "n_cols": n_cols,
        "nnz": int(mirror.nnz),
        "row_mean": stats.mean,
        "row_max": stats.max,
        "row_class": _rules.row_class(stats),
        "bytes": nbytes,
        "calls_per_sample": inner,
        "auto_backend": choice.backend,
        "auto_policy": repr(choice.policy),
        "auto_level": choice.level,
        "auto_reason": choice.reason,
        "auto_explained_backend": decided.backend,  # what products used after planning
        "auto_explained_level": getattr(decided, "level", None),
        "planning_ms": planning_ms,
        "planning_measurements": [
            {
                "backend": m.backend,
                "policy": repr(m.policy),
                "ms": None if m.ms is None else float(m.ms),
                "agreed": bool(m.agreed),
                "note": getattr(m, "note", ""),  # "one sample: ..." for a hopeless one
            }
            for m in choice.measurements
        ],
        "auto_estimate_backend": estimate.backend,
        "auto_estimate_policy": repr(estimate.policy),
        "auto_estimate_level": getattr(estimate, "level", None),
        "ms": times,
        "gb_per_s": {k: measure.gb_per_s(nbytes, v) for k, v in times.items()},
        "auto_vs_raw_best": times["raw_best"] / times["auto"],
        "auto_estimate_vs_raw_best": times["raw_best"] / times["auto_estimate"],
        "auto_vs_cupyx": times["cupyx"] / times["auto"],
        "merge_path_vs_raw_best": times["raw_best"] / times["merge_path"],
        "cusparse_vs_raw_best": times["raw_best"] / times["cusparse"],
        "cusparse_out_vs_raw_best": times["raw_best"] / times["cusparse_out"],
        "cusparse_policy": cusparse_policy,
        # what planning cost, in products of the planned choice
        "planning_products": None if planning_ms is None else planning_ms / times["auto"],
    }
    row["pct_copy"] = {k: 100 * v / copy_gbs for k, v in row["gb_per_s"].items()}
    return row


def _geomean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def groups(rows) -> dict:
    """``{group: rows}``: each set present, and "heldout" (generated and real together)
    where both held-out sets are present: the set the issue-13 claim is about."""
    by_set = {}
    for r in rows:
        by_set.setdefault(r.get("set", "unlabelled"), []).append(r)
    out = {}
    if "heldout-generated" in by_set and "heldout-real" in by_set:
        out["heldout"] = by_set["heldout-generated"] + by_set["heldout-real"]
    for label in ("heldout-generated", "heldout-real", "tuning"):
        if label in by_set:
            out[label] = by_set.pop(label)
    return {**out, **by_set}


def summarize(rows) -> dict:
    """Per set (and all held-out together) and dtype: ``auto``'s ratios and planning cost.

    Ratios are speed-ups (time of the other / time of ``auto``, higher is better);
    ``auto`` is planning ``measure`` unless the key says estimate. ``arrow_auto_vs_raw_best``
    is the lowest over the arrow-like matrices (None where the set has none).
    """
    out = {}
    for group, members in groups(rows).items():
        out[group] = {}
        for dtype in sorted({r["dtype"] for r in members}):
            sel = [r for r in members if r["dtype"] == dtype]
            worst = min(sel, key=lambda r: r["auto_vs_raw_best"])
            arrows = [r["auto_vs_raw_best"] for r in sel if r["matrix"].startswith("arrow")]
            arrows_mp = [
                r["merge_path_vs_raw_best"] for r in sel if r["matrix"].startswith("arrow")
            ]
            parity = [r["cusparse_out_vs_raw_best"] for r in sel if "cusparse_out_vs_raw_best" in r]
            parity_alloc = [r["cusparse_vs_raw_best"] for r in sel if "cusparse_vs_raw_best" in r]
            planning = [r["planning_ms"] for r in sel if r.get("planning_ms") is not None]
            out[group][dtype] = {
                "matrices": len(sel),
                "geomean_auto_vs_raw_best": _geomean([r["auto_vs_raw_best"] for r in sel]),
                "min_auto_vs_raw_best": worst["auto_vs_raw_best"],
                "worst_matrix": worst["matrix"],
                "matrices_below_close": [r["matrix"] for r in sel if r["auto_vs_raw_best"] < CLOSE],
                "matrices_below_raw": [r["matrix"] for r in sel if r["auto_vs_raw_best"] < 1.0],
                "geomean_auto_estimate_vs_raw_best": _geomean(
                    [r.get("auto_estimate_vs_raw_best") for r in sel]
                ),
                "geomean_auto_vs_cupyx": _geomean([r["auto_vs_cupyx"] for r in sel]),
                "arrow_auto_vs_raw_best": min(arrows) if arrows else None,
                "arrow_merge_path_vs_raw_best": min(arrows_mp) if arrows_mp else None,
                "geomean_cusparse_out_vs_raw_best": _geomean(parity),
                "min_cusparse_out_vs_raw_best": min(parity) if parity else None,
                "max_cusparse_out_vs_raw_best": max(parity) if parity else None,
                "geomean_cusparse_vs_raw_best": _geomean(parity_alloc),
                "mean_planning_ms": float(np.mean(planning)) if planning else None,
                "max_planning_ms": max(planning) if planning else None,
                "max_planning_matrix": (
                    max(sel, key=lambda r: r.get("planning_ms") or 0)["matrix"]
                    if planning
                    else None
                ),
            }
    return out


def _x(value, digits=2) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def _ms(value, digits=4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _method_text(result) -> str:
    """How the columns were timed, where the result says (older results do not: one
    column after another, one product a sample for the large matrices)."""
    if result.get("timing") != "interleaved":
        return ""
    calls = [r.get("calls_per_sample", 1) for r in result["results"]] or [1]
    return (
        ", the columns of a matrix timed in alternation (one sample of each per round), "
        f"each sample a loop of {min(calls)} to {max(calls)} products"
    )


def markdown(result) -> str:
    rows = result["results"]
    summary = result.get("summary") or summarize(rows)
    lines = [
        f"# auto vs cuSPARSE on {result['device']}",
        "",
        f"Copy bandwidth {result['copy_gb_per_s']:.0f} GB/s. CuPy {result['versions']['cupy']}, "
        f"CUDA {result['versions']['cuda_runtime']}. Median of CUDA-event timings"
        f"{_method_text(result)}; every "
        "answer checked against cupyx's first. `auto` plans by measurement "
        "(`sparsegpu.choose(A, x)` on a fresh matrix, then `A @ x` timed); `auto est.` is "
        "`auto` planning by estimate (the rules alone). Ratios are speed-ups of `auto` "
        "(higher is better); raw is cuSPARSE called directly (descriptors of A, x and y and the "
        "workspace made once, then one `cusparseSpMV` per product), best of ALG1 and ALG2; "
        "`cusparse out=` is sparsegpu's cusparse backend given the same x and y.",
        "",
        "Which matrices were used to fit what:",
        "",
    ]
    present = {r.get("set", "unlabelled") for r in rows}
    lines += [f"- **{label}**: {text}." for label, text in PROVENANCE.items() if label in present]
    lines += [
        "",
        "| matrix | set | dtype | nnz | auto (measure) | auto ms | auto GB/s | % copy | "
        "raw best ms | cupyx ms | merge_path ms | cusparse out= ms | auto est. | auto est. ms | "
        "planning ms | auto/raw | auto est./raw | auto/cupyx | cusparse out=/raw |",
        "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"
        "---:|",
    ]
    for r in rows:
        ms = r["ms"]
        lines.append(
            f"| {r['matrix']} | {r.get('set', '-')} | {r['dtype']} | {r['nnz']:,} | "
            f"{r['auto_backend']} | {ms['auto']:.4f} | {r['gb_per_s']['auto']:.0f} | "
            f"{r['pct_copy']['auto']:.0f} | {ms['raw_best']:.4f} | {ms['cupyx']:.4f} | "
            f"{_ms(ms.get('merge_path'))} | {_ms(ms.get('cusparse_out'))} | "
            f"{r.get('auto_estimate_backend', '-')} | "
            f"{_ms(ms.get('auto_estimate'))} | {_ms(r.get('planning_ms'), 1)} | "
            f"{r['auto_vs_raw_best']:.2f}x | {_x(r.get('auto_estimate_vs_raw_best'))} | "
            f"{r['auto_vs_cupyx']:.2f}x | {_x(r.get('cusparse_out_vs_raw_best'))} |"
        )
    lines += [
        "",
        f'Per set and dtype ("heldout" is generated and real together; below {CLOSE} '
        "lists the matrices where `auto` is below that fraction of raw cuSPARSE):",
        "",
        "| set | dtype | matrices | geomean auto/raw | min auto/raw (matrix) | "
        f"below {CLOSE}x | geomean auto est./raw | geomean auto/cupyx | arrow auto/raw | "
        "arrow merge_path/raw | cusparse out=/raw geomean (min, max) | cusparse/raw geomean | "
        "planning ms mean | planning ms max (matrix) |",
        "|---|---|---:|---:|---|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for group, per_dtype in summary.items():
        for dtype, s in per_dtype.items():
            below = ", ".join(s["matrices_below_close"]) or "none"
            most = (
                "-"
                if s["max_planning_ms"] is None
                else f"{s['max_planning_ms']:.1f} ({s['max_planning_matrix']})"
            )
            lines.append(
                f"| {group} | {dtype} | {s['matrices']} | {_x(s['geomean_auto_vs_raw_best'])} | "
                f"{_x(s['min_auto_vs_raw_best'])} ({s['worst_matrix']}) | {below} | "
                f"{_x(s['geomean_auto_estimate_vs_raw_best'])} | "
                f"{_x(s['geomean_auto_vs_cupyx'])} | {_x(s['arrow_auto_vs_raw_best'])} | "
                f"{_x(s.get('arrow_merge_path_vs_raw_best'))} | "
                f"{_x(s.get('geomean_cusparse_out_vs_raw_best'))} "
                f"({_x(s.get('min_cusparse_out_vs_raw_best'))}, "
                f"{_x(s.get('max_cusparse_out_vs_raw_best'))}) | "
                f"{_x(s.get('geomean_cusparse_vs_raw_best'))} | "
                f"{_ms(s['mean_planning_ms'], 1)} | {most} |"
            )
    lines += [
        "",
        "Planning cost: `planning ms` is the wall time of `sparsegpu.choose(A, x)` (every "
        "candidate timed with CUDA events and its answer compared), paid once per matrix; "
        "the JSON keeps each candidate's time and agreement per row "
        "(`planning_measurements`) and the cost in products of the chosen backend "
        "(`planning_products`).",
    ]
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


SHORT = {"heldout-generated": "gen", "heldout-real": "real", "tuning": "tune"}
SET_LEGEND = "gen = held-out generated, real = held-out real, tune = tuning suite"


def plot(result, path) -> None:
    """Per dtype: GB/s of auto, raw cuSPARSE and cupyx, and auto's speed-ups (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = sorted({r["dtype"] for r in result["results"]})
    most = max(sum(r["dtype"] == d for r in result["results"]) for d in dtypes)
    width = max(9.0, 0.4 * most)  # room for every matrix name
    fig, axes = plt.subplots(2, len(dtypes), figsize=(width * len(dtypes), 9), squeeze=False)
    series = (
        ("auto", "sparsegpu auto"),
        ("raw_best", "raw cuSPARSE (best alg)"),
        ("cupyx", "cupyx"),
    )
    for column, dtype in enumerate(dtypes):
        sel = [r for r in result["results"] if r["dtype"] == dtype]
        pos = np.arange(len(sel))
        names = [f"{r['matrix']} [{SHORT.get(r.get('set'), '?')}]" for r in sel]
        ax = axes[0, column]
        for k, (key, label) in enumerate(series):
            ax.bar(pos + (k - 1) * 0.27, [r["gb_per_s"][key] for r in sel], 0.27, label=label)
        ax.axhline(result["copy_gb_per_s"], color="k", lw=0.8, ls="--", label="copy bandwidth")
        ax.set_xticks(pos, names, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{dtype}: SpMV bandwidth on {result['device']}")
        ax.legend(fontsize=7)
        ax = axes[1, column]
        bars = (
            ("auto_vs_raw_best", "auto (measure) / raw cuSPARSE"),
            ("auto_estimate_vs_raw_best", "auto (estimate) / raw cuSPARSE"),
            ("auto_vs_cupyx", "auto (measure) / cupyx"),
        )
        for k, (key, label) in enumerate(bars):
            values = [r.get(key) or np.nan for r in sel]
            ax.bar(pos + (k - 1) * 0.27, values, 0.27, label=label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(CLOSE, color="r", lw=0.6, ls=":")
        ax.set_yscale("log")
        ax.set_xticks(pos, names, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("speed-up (higher is better)")
        ax.set_title(f"{dtype}: speed-up of sparsegpu auto")
        ax.set_xlabel(f"[set]: {SET_LEGEND}", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments())
    parser.add_argument("--scale", default="full", choices=["full", "small"])
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument(
        "--set",
        default="heldout",
        choices=SETS,
        help="heldout: held-out generated classes and the real matrices of --matrices; "
        "tuning: synthetic.suite (what was tuned and fitted on); both; classes-fit and "
        "classes-heldout, classes-heldout-long: synthetic.class_check_suite's parts",
    )
    parser.add_argument(
        "--matrices",
        default=DEFAULT_MATRICES,
        help="folder of .mtx(.gz) files (held-out real matrices)",
    )
    args = parser.parse_args(argv)
    cupy, status = common.begin(args, summarize, markdown, plot)
    if cupy is None:
        return status
    if not hasattr(sg, "plan"):
        print("this sparsegpu has no sparsegpu.plan (planning by measurement)", file=sys.stderr)
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
        # how the columns were timed: in alternation, a loop of products a sample
        "timing": "interleaved",
        "results": [],
    }
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    result["set"] = args.set
    result["scale"] = args.scale
    result["provenance"] = PROVENANCE
    todo = matrices(args.set, args.scale, pathlib.Path(args.matrices), cupy)

    def prepare(entry):
        """A dtype-independent build, made once for every dtype (None: built per dtype)."""
        _set_label, _name, make, per_dtype = entry
        return None if per_dtype else make(None)

    def bench(entry, host, dtype):
        set_label, name, make, per_dtype = entry
        build = (lambda: make(dtype)) if per_dtype else (lambda: host)
        return bench_one(name, build, dtype, cupy, cupyx_sparse, copy_gbs, set_label)

    common.measure_each(todo, dtypes, result, args.out, cupy, bench, prepare=prepare)
    return common.finish(result, args, summarize, markdown, plot)


if __name__ == "__main__":
    sys.exit(main())
