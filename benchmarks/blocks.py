"""Block-structured matrices (issue 35): the ``block`` layout against the best CSR path.

For each matrix and dtype, in one run, median CUDA-event times of ``y = A @ x`` (``out=``
given, so every side does the same work), every answer checked against cuSPARSE CSR's
first:

``csr``
    the best plain CSR path: cuSPARSE CSR called directly (``DirectSpMV`` from
    ``auto_vs_cusparse.py``, descriptors made once, ALG1 and ALG2), the ``shuffle``
    backend with the policies of its autotuner sweep at block sizes 256 and 512, the
    ``vector`` and ``readonly`` defaults and ``merge_path`` in each compiled shape: the
    fastest of them is the bar's denominator.
``ours``
    the ``csr`` side restricted to sparsegpu's own backends.
``delta16``
    the 16-bit column offsets of CSR (issue 18; not plain CSR, so not in the bar's
    denominator), untuned, where it takes the matrix: ``auto`` weighs it against the
    block layout.
``block``
    the ``block`` backend on the layout it builds from the CSR mirror, with its untuned
    policy (``block default``) and the best of its sweep (``BlockBackend.candidates``);
    planning times the untuned policy and two neighbours (``planning_candidates``).
``cusparse_bsr``
    cuSPARSE's BSR SpMV called directly on the same BSR arrays (sparsegpu's
    ``cusparse_bsr.bsr_plan``, descriptors made once), with the blocks row-major and
    column-major (a transposed copy): the faster of the two.
``auto``
    the plan ``sparsegpu.choose`` (planning ``measure``, default policies) picks on a
    fresh copy of the matrix, run without dispatch (``plan.matvec``): it must be the
    block layout where that wins and never where it loses.

Every candidate is screened alone (median of 15); then the 3 fastest CSR candidates, the
block candidates, cuSPARSE BSR and ``auto`` are timed again together, one sample of each in
turn (median of 21): the times reported. "% bound" is the block layout's bytes (block row
pointers, block columns, blocks, x and y, each once) over its time, against the device's
copy bandwidth measured in the same run.

Matrices (``block_mesh``: a 3-D hexahedral mesh's node graph, 27 neighbours per node, a
dense b x b block per coupling, b = 2, 3, 6 unknowns per node):

``fit``
    the meshes the block kernel was tuned on (its tiles, slots per lane and untuned lanes
    per block row came from a run on them): n = 40, 30, 20 nodes a side (6.1M-7.0M
    nonzeros), seed 0, natural order.
``dev``
    larger meshes (18M-30M nonzeros) with other seeds, in natural and in random node
    order (the blocks stay aligned, their columns scatter). Not fitted, but seen: the
    kernel was reworked twice after runs on them (to tiles of whole blocks, then lanes per
    block row as a template argument), and planning's three candidate policies were
    picked from the sweep timed on them.
``heldout``
    run once, after the last change: other sizes and seeds of the 3-D meshes, and 2-D
    meshes (quadrilateral node graphs, 9 neighbours a node, so 9 blocks a block row)
    with 2, 3 and 6 unknowns, a class none of the earlier runs had.
``heldout2``
    run once, after the whole-block kernel for 2 x 2 blocks and the timing's lead call
    (session 20), whose runs had seen ``heldout``: other sizes and seeds again, 2 x 2, 3 x 3
    and 6 x 6 blocks on 3-D and 2-D meshes, natural and random node order.
``heldout3``
    run once, after the whole-block kernel took 3 x 3 blocks too (planning times it beside
    the tiles; the 2-D 3 x 3 meshes of ``heldout`` and ``heldout2``, at 1.09-1.24x, were why):
    2-D and 3-D 3 x 3 meshes of other sizes and seeds.
``heldout4``
    run once, after whole blocks became the untuned policy of 3 x 3 blocks (from the fit
    set) and planning took four times the untuned lanes too (the 2-D 3 x 3 meshes, at
    1.24x in float64, were why): other 2-D and 3-D meshes again.
``dev2``
    2-D 3 x 3 meshes in natural and random order, first run in session 21's sweep of the
    whole-block kernel's knobs (``experiments/whole_block_sweep.py``), which chose from
    them (and the fit and dev sets) to have planning also time blocks read through L1.
``heldout5``
    run once, after that change: 2-D 3 x 3 meshes (three in natural order, the class
    that stood at 1.24x in float64, one random), a 3-D 3 x 3 and a 2-D 2 x 2 mesh.
``negative``
    matrices without aligned blocks, where ``auto`` must not pick the layout: a 3-unknown
    mesh with its unknowns (not its nodes) numbered at random, the 27-point stencil, and
    bcsstk13 (a real structural FEM matrix, fill 62% in 2 x 2 blocks) repeated on the
    diagonal.

Usage (on a GPU machine)::

    python -m benchmarks.blocks --out r.json --md r.md
    python -m benchmarks.blocks --from-json r.json --md r.md   # redraw, no GPU
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
from sparsegpu.backends import block
from sparsegpu.device._mirror import CUPY, PlanKey
from sparsegpu.engine import _planning, _registry

# the issue-35 bars: block layout over the best CSR path, float64 on blocks of 3 x 3 or
# larger, float32 on all; and one float64 case at 90% of the byte bound
BAR = {"float64": 1.25, "float32": 1.15}
BAR_MIN_BLOCK = {"float64": 3, "float32": 2}
BOUND_BAR = 90.0
# block over the best CSR path beyond which auto must pick it, and below which it must not
WIN, LOSS = 1.05, 0.97
PLAIN_DEFAULTS = ("vector", "readonly")
FINALISTS = 3
FINAL = {"warmup": 3, "repeat": 21}


def _cusparse_bsr():
    """sparsegpu's cuSPARSE BSR module, or None where this tree has none."""
    try:
        from sparsegpu.backends import cusparse_bsr
    except ImportError:
        return None
    return cusparse_bsr


matrices = common.block_meshes


def _time(fn) -> float:
    return measure.cuda_time(fn, warmup=3, repeat=15).median_ms


def _csr_candidates(mirror) -> list:
    """(backend, policy) of every sparsegpu CSR candidate."""
    registry = _registry.registered()
    shuffle, merge_path = registry["shuffle"], registry["merge_path"]
    # the sweep at the block sizes its winners use (each policy is a compilation)
    out = [(shuffle, p) for p in shuffle.candidates(mirror) if p.block_size in (256, 512)]
    out += [(registry[n], registry[n].default_policy(mirror)) for n in PLAIN_DEFAULTS]
    out += [(merge_path, p) for p in merge_path.candidates(mirror)]
    return out


def bench_one(set_label, name, unknowns, host, dtype, cupy, copy_gbs) -> dict:
    S, A, x, y = common.spmv_operands(host, dtype, cupy)
    mirror = A._sg_mirror(CUPY, dtype)
    structure = block.block_structure(mirror)
    b = structure.size
    row = {
        "set": set_label, "matrix": name, "unknowns": unknowns, "dtype": np.dtype(dtype).name,
        "n_rows": S.shape[0], "nnz": S.nnz, "block_size": b, "fill": structure.fill(b),
        "byte_ratio": structure.byte_ratio, "planning_refusal": structure.refuse_reason(),
    }  # fmt: skip
    expected = cupy.empty_like(y)
    times, calls, directs = {}, {}, []
    try:
        for algorithm in ("csr_alg1", "csr_alg2"):
            direct = DirectSpMV(mirror, x, expected, algorithm)
            directs.append(direct)
            direct()
        expected = expected.copy()
        for algorithm, direct in zip(("csr_alg1", "csr_alg2"), directs, strict=True):
            calls[f"cusparse_csr {algorithm}"] = direct
            times[f"cusparse_csr {algorithm}"] = ("csr", _time(direct))
        checker = _checker(cupy, mirror, expected, y, name)
        for backend, policy in _csr_candidates(mirror):
            _screen(times, calls, "ours", backend.name, policy, mirror, x, y, checker)
        delta16 = _registry.registered()["delta16"]
        if delta16.supports(mirror):
            policy = delta16.default_policy(mirror)
            _screen(times, calls, "delta16", "delta16", policy, mirror, x, y, checker)
        backend = _registry.registered()["block"]
        default = backend.default_policy(mirror)
        for policy in backend.candidates(mirror):
            label = "block default" if policy == default else "block"
            _screen(times, calls, label, "block", policy, mirror, x, y, checker)
        layout = block.block_layout(mirror, b)
        _screen_cusparse_bsr(times, calls, layout, S.shape, x, y, checker)
        row.update(_final(S, times, calls, x, y, cupy))
    finally:
        for direct in directs:
            direct.close()
    bound = layout.nbytes + x.nbytes + y.nbytes
    row["block_bytes"] = bound
    row["csr_bytes"] = measure.matrix_spmv_bytes(mirror)
    for side in ("block_default", "block_best", "auto"):
        row[f"{side}_pct_bound"] = 100 * measure.gb_per_s(bound, row[side]["ms"]) / copy_gbs
    return row


def _checker(cupy, mirror, expected, y, name):
    scale = float(cupy.abs(expected).max()) if expected.size else 1.0
    tol = 64 * np.finfo(mirror.dtype).eps * max(scale, 1.0) * max(int(mirror.stats.max), 1)

    def check(key):
        error = float(cupy.abs(y - expected).max()) if y.size else 0.0
        if not error <= tol:
            raise AssertionError(
                f"{name} {mirror.dtype}: {key} is off by {error:.3e} (> {tol:.3e})"
            )

    return check


def _screen(times, calls, label, backend_name, policy, mirror, x, y, check) -> None:
    """Plan, check and time one sparsegpu candidate (one that cannot launch is noted)."""
    key = f"{backend_name} {policy!r}"
    backend = _registry.registered()[backend_name]
    try:
        plan = mirror.get_plan(PlanKey(backend_name, policy), lambda: backend.plan(mirror, policy))
        y.fill(0)
        plan.matvec(x, out=y)
    except Exception as exc:
        times[key] = (label, None, f"{type(exc).__name__}: {exc}")
        return
    check(key)
    calls[key] = lambda: plan.matvec(x, out=y)
    times[key] = (label, _time(calls[key]))


def _screen_cusparse_bsr(times, calls, layout, shape, x, y, check) -> None:
    """cuSPARSE's BSR SpMV on the layout's arrays, with the blocks row- and column-major."""
    module = _cusparse_bsr()
    if module is None:
        times["cusparse_bsr"] = ("cusparse_bsr", None, "no cusparse_bsr in this tree")
        return
    rows, columns = layout.blocksize
    if shape[0] % rows or shape[1] % columns:
        times["cusparse_bsr"] = ("cusparse_bsr", None, f"{shape} is not whole {rows}x{columns}")
        return
    for order in ("row", "column"):
        key = f"cusparse_bsr {order}-major blocks"
        try:
            policy = module.CusparseBsrPolicy(block_order=order)
            plan = module.bsr_plan(layout.indptr, layout.indices, layout.data, shape, policy)
            y.fill(0)
            plan.matvec(x, out=y)
        except Exception as exc:
            times[key] = ("cusparse_bsr", None, f"{type(exc).__name__}: {exc}")
            continue
        check(key)
        calls[key] = lambda plan=plan: plan.matvec(x, out=y)
        times[key] = ("cusparse_bsr", _time(calls[key]))


def _final(S, times, calls, x, y, cupy) -> dict:
    """The finalists and ``auto`` timed together, in alternation."""
    timed = {k: v for k, v in times.items() if v[1] is not None}
    csr = {k: v[1] for k, v in timed.items() if v[0] in ("csr", "ours")}
    finals = {k: calls[k] for k in sorted(csr, key=csr.get)[:FINALISTS]}
    ours = {k: v[1] for k, v in timed.items() if v[0] == "ours"}
    finals.update({k: calls[k] for k in sorted(ours, key=ours.get)[:1]})
    blocks = {k: v[1] for k, v in timed.items() if v[0].startswith("block")}
    finals.update({k: calls[k] for k in sorted(blocks, key=blocks.get)[:FINALISTS]})
    finals.update(
        {
            k: calls[k]
            for k, v in timed.items()
            if v[0] in ("block default", "cusparse_bsr", "delta16")
        }
    )
    fresh = sg.csr_matrix(S)
    choice = sg.choose(fresh, x)
    auto_plan = _planning.plan_for(fresh, x.dtype, x=x)
    auto_out = cupy.empty_like(y)
    finals["auto"] = lambda: auto_plan.matvec(x, out=auto_out)
    final = {k: t.median_ms for k, t in measure.cuda_time_interleaved(finals, **FINAL).items()}
    row = {
        "screen": {k: v[1] for k, v in times.items()},
        "not_run": {k: v[2] for k, v in times.items() if v[1] is None},
        "finals": final,
        "auto_choice": choice.backend,
        "auto_policy": repr(choice.policy),
        "auto_planning_ms": choice.planning_ms,
        "auto_structure": list(choice.structure),
        "auto_measured": _fastest_by_backend(choice.measurements),
        "auto": {"candidate": f"auto -> {choice.backend}", "ms": final.pop("auto")},
    }

    def best(labels):
        mine = {k: ms for k, ms in final.items() if timed[k][0] in labels}
        key = min(mine, key=mine.get) if mine else None
        return {"candidate": key, "ms": mine[key]} if key else None

    row["csr_best"] = best(("csr", "ours"))
    row["ours_csr_best"] = best(("ours",))
    row["block_best"] = best(("block", "block default"))
    row["block_default"] = best(("block default",))
    row["cusparse_bsr"] = best(("cusparse_bsr",))
    row["delta16"] = best(("delta16",))
    base = row["csr_best"]["ms"]
    row["ratio_default"] = base / row["block_default"]["ms"]
    row["ratio_best"] = base / row["block_best"]["ms"]
    row["ratio_auto"] = base / row["auto"]["ms"]
    if row["cusparse_bsr"]:
        row["ratio_vs_cusparse_bsr"] = row["cusparse_bsr"]["ms"] / row["block_default"]["ms"]
    return row


CLAIM_SETS = ("dev", "dev2", "heldout", "heldout2", "heldout3", "heldout4", "heldout5")


def _fastest_by_backend(measurements) -> dict:
    """{backend: planning's time of its fastest candidate, ms} (a backend's candidates that
    could not run left out)."""
    out = {}
    for m in measurements:
        if m.ms is not None:
            out[m.backend] = min(m.ms, out.get(m.backend, m.ms))
    return out


def summarize(rows) -> dict:
    out = {}
    for set_label in CLAIM_SETS:
        for dtype in ("float64", "float32"):
            bars = _bars(rows, set_label, dtype)
            if bars:
                out[f"{set_label} {dtype}"] = bars
    return out | _auto_summary(rows)


def _bars(rows, set_label, dtype) -> dict | None:
    """The issue's speed bars on one set and dtype (blocks of BAR_MIN_BLOCK or more)."""
    claim = [
        r for r in rows
        if r["dtype"] == dtype and r["set"] == set_label
        and r["unknowns"] >= BAR_MIN_BLOCK[dtype]
    ]  # fmt: skip
    if not claim:
        return None
    return {
        "bar": BAR[dtype],
        "min_ratio_default": min(r["ratio_default"] for r in claim),
        "min_ratio_auto": min(r["ratio_auto"] for r in claim),
        "geomean_ratio_auto": math.exp(sum(math.log(r["ratio_auto"]) for r in claim) / len(claim)),
        "meets_bar_auto": [r["matrix"] for r in claim if r["ratio_auto"] >= BAR[dtype]],
        "misses_bar_auto": [r["matrix"] for r in claim if r["ratio_auto"] < BAR[dtype]],
        "best_pct_bound": max(r["block_default_pct_bound"] for r in claim),
        # what users get: the block layout as planning picks it
        "best_pct_bound_auto": max(
            (r["auto_pct_bound"] for r in claim if r["auto_choice"] == "block"), default=None
        ),
        "bound_bar_met": any(
            r["auto_choice"] == "block" and r["auto_pct_bound"] >= BOUND_BAR for r in claim
        ),
    }


def _auto_summary(rows) -> dict:
    out = {}
    # wins (over every other path, delta16 included) and losses by more than the noise of
    # planning's few samples; where auto picked another path that ran faster still (a
    # delta16 policy other than the one screened), it missed nothing
    out["auto_picks_block_where_it_wins"] = all(
        r["auto_choice"] == "block" or r["auto"]["ms"] <= r["block_default"]["ms"]
        for r in rows
        if r["ratio_default"] >= WIN
        and (r["delta16"] is None or r["delta16"]["ms"] >= WIN * r["block_default"]["ms"])
    )
    out["auto_never_picks_block_where_it_loses"] = all(
        r["auto_choice"] != "block" for r in rows if r["ratio_best"] < LOSS
    )
    out["auto_block_plan_slower_than_csr"] = [
        f"{r['matrix']} {r['dtype']} ({r['ratio_auto']:.2f}x)"
        for r in rows
        if r["auto_choice"] == "block" and r["ratio_auto"] < LOSS
    ]
    out["auto_picks_block_within_the_noise"] = [
        f"{r['matrix']} {r['dtype']}"
        for r in rows
        if r["auto_choice"] == "block" and LOSS <= r["ratio_best"] < 1.0
    ]
    return out


def markdown(result) -> str:
    lines = [
        f"# The block layout against the best CSR path — {result['device']}",
        "",
        f"Copy bandwidth {result['copy_gb_per_s']:.0f} GB/s. Median CUDA-event times (µs), "
        "`out=` given, answers checked against cuSPARSE CSR first. CSR best = the fastest of "
        "cuSPARSE CSR called directly (ALG1/ALG2) and sparsegpu's plain CSR backends "
        "(shuffle sweep, vector/readonly, merge_path shapes); delta16 (16-bit column "
        "offsets, untuned) beside it; block = the `block` backend's "
        "untuned policy on the layout built from the CSR mirror; cuSPARSE BSR = its BSR "
        "SpMV on the same blocks; auto = what planning picks by itself. Ratios are CSR best "
        "/ the side's time; % bound = the block layout's bytes over its time against the "
        "copy bandwidth (untuned; auto's where it picks the layout).",
        "",
        "| set | matrix | dtype | nnz | b | fill | CSR best | µs | ours CSR µs | delta16 µs "
        "| block µs | ratio | % bound | cuSPARSE BSR µs | auto picks | auto µs | auto ratio "
        "| auto % bound |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in result["results"]:
        bsr, d16 = r.get("cusparse_bsr"), r.get("delta16")
        cells = [
            r["set"], r["matrix"], r["dtype"], f"{r['nnz']:,}", str(r["block_size"]),
            f"{100 * r['fill']:.0f}%", r["csr_best"]["candidate"].split(" ")[0],
            f"{1e3 * r['csr_best']['ms']:.1f}", f"{1e3 * r['ours_csr_best']['ms']:.1f}",
            f"{1e3 * d16['ms']:.1f}" if d16 else "refused",
            f"{1e3 * r['block_default']['ms']:.1f}", f"{r['ratio_default']:.2f}",
            f"{r['block_default_pct_bound']:.0f}%",
            f"{1e3 * bsr['ms']:.1f}" if bsr else "—",
            r["auto_choice"], f"{1e3 * r['auto']['ms']:.1f}", f"{r['ratio_auto']:.2f}",
            f"{r['auto_pct_bound']:.0f}%" if r["auto_choice"] == "block" else "—",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Summary:", "", "```", json.dumps(result["summary"], indent=1), "```", ""]
    return "\n".join(lines)


def plot(result, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["results"]
    fig, ax = plt.subplots(figsize=(10, 4))
    labels = [f"{r['matrix']}\n{r['dtype']}" for r in rows]
    colors = {
        "fit": "tab:gray", "dev": "tab:cyan", "heldout": "tab:blue", "heldout2": "tab:green",
        "heldout3": "tab:olive", "heldout4": "tab:brown", "dev2": "tab:pink",
        "heldout5": "tab:red", "negative": "tab:purple",
    }  # fmt: skip
    ax.bar(range(len(rows)), [r["ratio_auto"] for r in rows],
           color=[colors[r["set"]] for r in rows])  # fmt: skip
    for dtype, bar in BAR.items():
        ax.axhline(bar, ls="--", lw=1, color="tab:red" if dtype == "float32" else "tab:orange")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("best CSR path / auto (time)")
    ax.set_title(
        f"auto on block-structured matrices ({result['device']}; grey fit, cyan and pink dev, "
        "blue held out, green, olive, brown and red held out later, purple no blocks)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.scale_arguments(), common.output_arguments())
    parser.add_argument(
        "--sets",
        help="comma-separated sets to run (fit, dev, heldout, heldout2, heldout3, heldout4, "
        "dev2, heldout5, negative)",
    )
    args = parser.parse_args(argv)
    cupy, status = common.begin(args, summarize, markdown, plot)
    if cupy is None:
        return status
    result = common.gpu_header(args.scale)
    todo = common.keep_matching(matrices(args.scale), args.only)
    if args.sets:
        todo = [t for t in todo if t[0] in args.sets.split(",")]
    common.measure_each(
        todo, common.dtypes_of(args), result, args.out, cupy,
        lambda entry, host, dtype: bench_one(
            *entry[:3], host, dtype, cupy, result["copy_gb_per_s"]
        ),
    )  # fmt: skip
    return common.finish(result, args, summarize, markdown, plot)


if __name__ == "__main__":
    sys.exit(main())
