"""Fewer bytes per nonzero (issue 18): ``delta16`` against the best plain CSR backend.

For each matrix and dtype, in one run, median CUDA-event times of ``A @ x`` (``out=``
given, so every side does the same work):

``plain``
    the best of: the ``shuffle`` backend with every policy of its autotuner sweep
    (``CsrVectorBackend.candidates``: threads per row x block size, register caps, load
    shapes), the ``vector`` and ``readonly`` defaults, ``merge_path`` in each compiled
    shape, and cuSPARSE called directly (``DirectSpMV`` from ``auto_vs_cusparse.py``: CSR
    ALG1 and ALG2).
``delta16``
    the ``delta16`` backend with every policy of its own sweep
    (``Delta16Backend.candidates``), and its default policy alone.
``auto``
    what ``sparsegpu.choose(A, x)`` (planning ``measure``, default policies) picks, and its
    time: the check that planning picks ``delta16`` where it wins and not where it loses.

Every candidate is first screened alone (median of 15, one candidate after another); then
the ``FINALISTS`` fastest of each side and ``auto`` are timed again together, one sample of
each in turn (``cuda_time_interleaved``, median of 21), and those are the times reported. A
slow stretch of the machine or a clock change then falls on both sides alike: timed one
after another, the same code's ratio moved by up to 0.2 between runs on the small matrices.

Every candidate's answer is checked against cuSPARSE's before it is timed. "ratio" is
plain / delta16 (> 1: delta16 faster). The matrices, and which set each belongs to:

``generated``
    2-D 5- and 9-point and 3-D 7- and 27-point stencils in natural order.
``fem-generated``
    the P1 (linear triangle) finite-element stiffness matrix of a Delaunay triangulation
    of uniformly random points in the unit square, assembled here (scipy.spatial), in
    reverse Cuthill-McKee order (as a mesh generator or partitioner would hand it over)
    and in random order (where 16-bit offsets cannot apply: delta16 is refused).
``real-replicated``
    bcsstk13 (HB, a structural FEM stiffness matrix bundled with sparsegpu) repeated on
    the diagonal of a block-diagonal matrix to pass 5M nonzeros. No SuiteSparse matrix of
    5M nonzeros or more can be downloaded on the benchmark machine.

None of these matrices took part in choosing the kernel's knobs or the refusal threshold.

Usage (on a GPU machine)::

    python -m benchmarks.compressed_indices --out r.json --md r.md --plot r.png
    python -m benchmarks.compressed_indices --from-json r.json --md r.md   # no GPU
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

import sparsegpu as sg
from benchmarks import common
from benchmarks.common import DirectSpMV, fem_p1, replicated
from sparsegpu import measure
from sparsegpu.backends import delta16
from sparsegpu.device._mirror import CUPY
from sparsegpu.engine import _registry

# the issue-18 bars: delta16 over the best plain backend
BAR = {"float64": 1.12, "float32": 1.2}
PLAIN_DEFAULTS = ("vector", "readonly")
# the screen's fastest candidates of each side that are timed again, in alternation
FINALISTS = 3
FINAL = {"warmup": 3, "repeat": 21}


def matrices(scale: str) -> list:
    """(set, name, builder) of every matrix; ``scale="small"`` for a quick check."""
    big = scale == "full"
    points = 1_000_000 if big else 20_000
    nnz = 5_000_000 if big else 200_000
    return [
        *(("generated", name, make) for name, make in common.stencils(scale)),
        ("fem-generated", f"fem_p1_delaunay_{points}_rcm", lambda: fem_p1(points, "rcm")),
        ("fem-generated", f"fem_p1_delaunay_{points}_random", lambda: fem_p1(points, "random")),
        ("real-replicated", "bcsstk13_blockdiag", lambda: replicated("bcsstk13", nnz)),
    ]


def _time(fn) -> float:
    return measure.cuda_time(fn, warmup=3, repeat=15).median_ms


def _candidates(A, dtype, cupy):
    """(label, backend, policy) of every sparsegpu candidate; delta16 only where it takes A."""
    registry = _registry.registered()
    mirror = A._sg_mirror(CUPY, dtype)
    shuffle = registry["shuffle"]
    out = [("plain", shuffle, p) for p in shuffle.candidates(mirror)]
    out += [("plain", registry[n], registry[n].default_policy(mirror)) for n in PLAIN_DEFAULTS]
    merge_path = registry["merge_path"]
    out += [("plain", merge_path, p) for p in merge_path.candidates(mirror)]
    backend = registry["delta16"]
    if backend.supports(mirror):
        out += [("delta16", backend, p) for p in backend.candidates(mirror)]
    return mirror, out


def bench_one(set_label, name, host, dtype, cupy, copy_gbs) -> dict:
    S, A, x, y = common.spmv_operands(host, dtype, cupy)
    mirror, candidates = _candidates(A, dtype, cupy)
    row = {
        "set": set_label, "matrix": name, "dtype": np.dtype(dtype).name,
        "n_rows": S.shape[0], "n_cols": S.shape[1], "nnz": S.nnz,
        "plain_bytes": measure.matrix_spmv_bytes(mirror),
    }  # fmt: skip
    table = delta16.chunk_table(mirror)
    row["compressed_fraction"] = table.fraction
    row["delta16_supported"] = _registry.registered()["delta16"].supports(mirror)
    # cuSPARSE called directly: the reference answer, and two plain candidates
    reference = cupy.empty_like(y)
    times, calls, directs = {}, {}, []
    try:
        for algorithm in ("csr_alg1", "csr_alg2"):
            direct = DirectSpMV(mirror, x, reference, algorithm)
            directs.append(direct)
            direct()
            times[f"cusparse_{algorithm}"] = ("plain", _time(direct))
            calls[f"cusparse_{algorithm}"] = direct
        expected = reference.copy()
        row.update(
            _screen_and_final(name, S, mirror, candidates, x, y, expected, times, calls, cupy)
        )
        _finish(row, mirror, times, copy_gbs)
    finally:
        for direct in directs:
            direct.close()
    return row


def _screen_and_final(name, S, mirror, candidates, x, y, expected, times, calls, cupy) -> dict:
    """Check and screen every candidate (``_time``, one after another), then time the
    ``FINALISTS`` fastest of each side and planning's pick together, in alternation."""
    dtype = mirror.dtype
    scale = float(cupy.abs(expected).max()) if expected.size else 1.0
    tol = 64 * np.finfo(dtype).eps * max(scale, 1.0) * max(int(mirror.stats.max), 1)
    for label, backend, policy in candidates:
        key = f"{backend.name} {policy!r}"
        plan, failure = common.launch(mirror, backend, policy, x, y)
        if failure is not None:
            times[key] = (label, None, failure)
            continue
        error = float(cupy.abs(y - expected).max()) if y.size else 0.0
        if not error <= tol:
            raise AssertionError(f"{name} {dtype}: {key} is off by {error:.3e} (> {tol:.3e})")
        calls[key] = lambda plan=plan: plan.matvec(x, out=y)
        times[key] = (label, _time(calls[key]))
    timed = {k: v for k, v in times.items() if v[1] is not None}
    row = {"candidates_timed": len(timed), "screen": {}}
    finals = {}
    for label in ("plain", "delta16"):
        mine = {k: v[1] for k, v in timed.items() if v[0] == label}
        if mine:
            key = min(mine, key=mine.get)
            row["screen"][label] = {"candidate": key, "ms": mine[key]}
            finals.update({k: calls[k] for k in sorted(mine, key=mine.get)[:FINALISTS]})
    # what planning by measurement picks, on a fresh matrix, with default policies
    fresh = sg.csr_matrix(S)
    choice = sg.choose(fresh, x)
    row["auto_choice"] = choice.backend
    row["auto_planning_ms"] = choice.planning_ms
    row["auto_measured"] = {m.backend: m.ms for m in choice.measurements if m.ms is not None}
    finals["auto"] = lambda: fresh.dot(x)
    final = {k: t.median_ms for k, t in measure.cuda_time_interleaved(finals, **FINAL).items()}
    row["auto_ms"] = final.pop("auto")
    row["finals"] = final
    for label in ("plain", "delta16"):
        mine = {k: ms for k, ms in final.items() if timed[k][0] == label}
        best = min(mine, key=mine.get) if mine else None
        row[label] = {"candidate": best, "ms": mine[best]} if mine else None
    if row["delta16"] is not None:
        default = _registry.registered()["delta16"].default_policy(mirror)
        row["delta16_default"] = {
            "candidate": f"delta16 {default!r}",
            "ms": timed[f"delta16 {default!r}"][1],
        }
        row["ratio"] = row["plain"]["ms"] / row["delta16"]["ms"]
    return row


def _finish(row, mirror, times, copy_gbs) -> None:
    """Bytes and bandwidths of the winners."""
    if row["delta16"] is not None:
        columns = delta16.compressed_columns(mirror)
        row["delta16_bytes"] = row["plain_bytes"] - mirror.indices.nbytes + columns.column_bytes()
        row["delta16_pct_copy"] = (
            100 * measure.gb_per_s(row["delta16_bytes"], row["delta16"]["ms"]) / copy_gbs
        )
    row["plain_pct_copy"] = (
        100 * measure.gb_per_s(row["plain_bytes"], row["plain"]["ms"]) / copy_gbs
    )
    row["cusparse_best_ms"] = min(times["cusparse_csr_alg1"][1], times["cusparse_csr_alg2"][1])


def summarize(rows) -> dict:
    out = {}
    for dtype in ("float64", "float32"):
        mine = [r for r in rows if r["dtype"] == dtype and r.get("ratio")]
        if not mine:
            continue
        ratios = [r["ratio"] for r in mine]
        out[dtype] = {
            "geomean_ratio": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "min_ratio": min(ratios),
            "meets_bar": [r["matrix"] for r in mine if r["ratio"] >= BAR[dtype]],
            "misses_bar": [r["matrix"] for r in mine if r["ratio"] < BAR[dtype]],
            "auto_picks_delta16_where_it_wins": all(
                r["auto_choice"] == "delta16" for r in mine if r["ratio"] >= 1.03
            ),
        }
    losers = [r for r in rows if not r.get("ratio") or r["ratio"] < 1.0]
    out["auto_never_picks_delta16_where_it_loses"] = all(
        r["auto_choice"] != "delta16" for r in losers
    )
    return out


def markdown(result) -> str:
    lines = [
        f"# delta16 against the best plain CSR backend — {result['device']}",
        "",
        f"Copy bandwidth {result['copy_gb_per_s']:.0f} GB/s. Median CUDA-event times, `out=` "
        "given; plain = best of the shuffle sweep, vector/readonly defaults, merge_path "
        "shapes and cuSPARSE called directly (ALG1/ALG2)."
        + (
            f" Every candidate screened one after another; the {FINALISTS} fastest of each "
            "side and planning's pick timed again in alternation (the times shown)."
            if any("finals" in r for r in result["results"])
            else ""
        ),
        "",
        "| set | matrix | dtype | nnz | compressed | plain best | µs | delta16 best | µs "
        "| ratio | bar | delta16 % copy | auto picks | auto µs |",
        "|---|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in result["results"]:
        d = r.get("delta16")
        cells = [
            r["set"], r["matrix"], r["dtype"], f"{r['nnz']:,}",
            f"{100 * r['compressed_fraction']:.0f}%",
            r["plain"]["candidate"].split(" ")[0], f"{1e3 * r['plain']['ms']:.1f}",
        ]  # fmt: skip
        if d:
            cells += [
                d["candidate"].split(" ", 1)[1], f"{1e3 * d['ms']:.1f}", f"{r['ratio']:.3f}",
                str(BAR[r["dtype"]]), f"{r['delta16_pct_copy']:.0f}%",
            ]  # fmt: skip
        else:
            cells += ["refused", "—", "—", "—", "—"]
        cells += [r["auto_choice"], f"{1e3 * r['auto_ms']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Summary:", "", "```", json.dumps(result["summary"], indent=1), "```", ""]
    return "\n".join(lines)


def plot(result, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["results"] if r.get("ratio")]
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{r['matrix']}\n{r['dtype']}" for r in rows]
    ax.bar(range(len(rows)), [r["ratio"] for r in rows], color="tab:blue")
    for dtype, bar in BAR.items():
        ax.axhline(bar, ls="--", lw=1, color="tab:red" if dtype == "float32" else "tab:orange")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("best plain CSR / best delta16 (time)")
    ax.set_title(f"delta16 against the best plain CSR backend ({result['device']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.scale_arguments(), common.output_arguments())
    args = parser.parse_args(argv)
    cupy, status = common.begin(args, summarize, markdown, plot)
    if cupy is None:
        return status
    result = common.gpu_header(args.scale)
    todo = common.keep_matching(matrices(args.scale), args.only)
    common.measure_each(
        todo, common.dtypes_of(args), result, args.out, cupy,
        lambda entry, host, dtype: bench_one(
            entry[0], entry[1], host, dtype, cupy, result["copy_gb_per_s"]
        ),
    )  # fmt: skip
    return common.finish(result, args, summarize, markdown, plot)


if __name__ == "__main__":
    sys.exit(main())
