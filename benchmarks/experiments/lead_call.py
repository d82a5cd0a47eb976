"""What the lead call of a timing sample changes (issue 35's planning noise).

Planning times each candidate in samples of ``inner`` products (one product on matrices
over ``_planning.SAMPLE_BYTES``), each sample after a synchronisation. Without the lead
call (``sparsegpu.measure._timing``) the first product's launch latency falls inside the sample:
on ``mesh_b2_n56_random`` (H200, float64) planning measured the block layout's default
policy at 88.1 us and an 8-lane one at 87.2 us, and kept the 8-lane one, where back to back
they run at 69.5 and 76.7 us. For each matrix and dtype and each of planning's candidates
this records, median of 15 samples, in alternation:

``without``
    planning's sample as it was: ``inner`` products after a synchronisation, timed from
    when the host recorded the start event;
``with``
    the same sample after its untimed lead product;
``loop``
    the reference: a loop of ``LOOP`` products after a lead one (what a solver sees).

and which candidate ``sparsegpu.choose`` keeps, ``--plans`` times on a fresh matrix each,
without and with the lead call.

Matrices: the block-mesh ``dev`` matrix where the wrong choice was seen and a ``fit``
block mesh (``benchmarks/blocks.py``'s sets), the 3-D 27-point stencil, and a small
bundled matrix whose products the host's pace decides.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.lead_call --out lead_call.json --md lead_call.md
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import sys

import numpy as np

import sparsegpu as sg
from benchmarks import common
from sparsegpu import datasets
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.device._mirror import PlanKey
from sparsegpu.engine import _planning, _registry

# the private module itself: the experiment swaps its cuda_time_interleaved, which
# planning calls, to time without the lead call
from sparsegpu.measure import _timing

LOOP = 8
REPEAT = 15


def matrices() -> list:
    """``(set, name, builder)``: two of ``blocks``' meshes, a 27-point stencil, bcsstk13."""
    meshes = common.pick(common.block_meshes("full"), ("mesh_b2_n56_random", "mesh_b3_n30"))
    return [
        *((s, name, make) for s, name, _, make in meshes),
        ("other", "stencil3d_27pt_100", lambda: synthetic.stencil_3d(100, points=27)),
        ("other", "bcsstk13", lambda: datasets.load("bcsstk13").tocsr()),
    ]


@contextlib.contextmanager
def _lead(on: bool):
    """Timings (planning's included) with the lead call (``on``) or as they were."""
    real = _timing.cuda_time_interleaved
    if not on:
        _timing.cuda_time_interleaved = functools.partial(real, lead=False)
    try:
        yield
    finally:
        _timing.cuda_time_interleaved = real


def _timed(fns: dict, inner: int, lead: bool) -> dict:
    with _lead(lead):
        timings = _timing.cuda_time_interleaved(fns, warmup=1, repeat=REPEAT, inner=inner)
    return {key: t.median_ms * 1e3 for key, t in timings.items()}


def _choices(S, x, plans: int, lead: bool) -> list:
    out = []
    with _lead(lead):
        for _ in range(plans):
            choice = sg.choose(sg.csr_matrix(S), x)
            out.append((f"{choice.backend} {choice.policy!r}", choice.planning_ms))
    return out


def _plan(mirror, backend, policy):
    return mirror.get_plan(PlanKey(backend.name, policy), lambda: backend.plan(mirror, policy))


def bench_one(set_label, name, S, dtype, cupy, plans) -> dict:
    S = S.astype(dtype)
    A = sg.csr_matrix(S)
    x = cupy.asarray(np.random.default_rng(1).standard_normal(S.shape[1]).astype(dtype))
    choice = sg.choose(A, x)
    mirror = A._sg_mirror(_registry.registered()["shuffle"].residence, np.dtype(dtype))
    streamed = mirror.nbytes + 2 * x.nbytes
    inner = max(1, min(_planning.SAMPLE_PRODUCTS, int(_planning.SAMPLE_BYTES // streamed)))
    fns = {}
    for m in choice.measurements:
        if m.ms is None or not m.agreed:
            continue
        backend = _registry.registered()[m.backend]
        plan_mirror = A._sg_mirror(backend.residence, np.dtype(dtype))
        plan = _plan(plan_mirror, backend, m.policy)
        y = cupy.empty(S.shape[0], dtype=dtype)
        fns[f"{m.backend} {m.policy!r}"] = lambda plan=plan, y=y: plan.matvec(x, out=y)
    without = _timed(fns, inner, lead=False)
    with_ = _timed(fns, inner, lead=True)
    loop = _timed(fns, LOOP, lead=True)
    return {
        "set": set_label,
        "matrix": name,
        "dtype": np.dtype(dtype).name,
        "nnz": int(S.nnz),
        "inner": inner,
        "candidates": {
            key: {"without_us": without[key], "with_us": with_[key], "loop_us": loop[key]}
            for key in fns
        },
        "best": {
            side: min(values, key=values.get)
            for side, values in (("without", without), ("with", with_), ("loop", loop))
        },
        "chosen_without": _choices(S, x, plans, lead=False),
        "chosen_with": _choices(S, x, plans, lead=True),
    }


def markdown(result) -> str:
    lines = [
        f"# The lead call of a timing sample — {result['device']}",
        "",
        "Median of 15 CUDA-event samples (us a product), the three ways timed in alternation. "
        "`without`: planning's sample as it was (the first launch's latency inside); `with`: "
        f"the same sample after an untimed lead product; `loop`: {LOOP} products a sample, the "
        "reference. Command: `" + result["command"] + "`.",
        "",
        "| set | matrix | dtype | inner | candidate | without | with | loop |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for row in result["results"]:
        for key, t in row["candidates"].items():
            marks = [s for s in ("without", "with", "loop") if row["best"][s] == key]
            label = key[:70] + (f" (best: {', '.join(marks)})" if marks else "")
            lines.append(
                f"| {row['set']} | {row['matrix']} | {row['dtype']} | {row['inner']} | {label} "
                f"| {t['without_us']:.1f} | {t['with_us']:.1f} | {t['loop_us']:.1f} |"
            )
    lines += [
        "",
        "Planning's choice on a fresh matrix, each time (its median planning time):",
        "",
        "| matrix | dtype | loop's best | planning kept, without | planning kept, with |",
    ]
    lines += ["|---|---|---|---|---|"]
    for row in result["results"]:
        without, with_ = (
            "; ".join(sorted({kept for kept, _ in row[side]}))
            + f" ({statistics.median(ms for _, ms in row[side]):.0f} ms)"
            for side in ("chosen_without", "chosen_with")
        )
        best = row["best"]["loop"]
        lines.append(f"| {row['matrix']} | {row['dtype']} | {best} | {without} | {with_} |")
    rows = [
        abs(t["with_us"] - t["loop_us"]) / t["loop_us"]
        for row in result["results"]
        for t in row["candidates"].values()
    ]
    old = [
        abs(t["without_us"] - t["loop_us"]) / t["loop_us"]
        for row in result["results"]
        for t in row["candidates"].values()
    ]
    lines += [
        "",
        f"Median distance from the loop's time: without {100 * statistics.median(old):.1f}%, "
        f"with {100 * statistics.median(rows):.1f}%.",
    ]
    return "\n".join(lines) + "\n"


def plot(result, path) -> None:
    """Each candidate's sample time without and with the lead call against its time in a
    loop (on the diagonal: the sample tells the loop's time)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5.5))
    times = [t for row in result["results"] for t in row["candidates"].values()]
    loop = [t["loop_us"] for t in times]
    ax.scatter(loop, [t["without_us"] for t in times], s=12, label="without the lead call")
    ax.scatter(loop, [t["with_us"] for t in times], s=12, label="with it")
    top = max(max(loop), max(t["without_us"] for t in times)) * 1.05
    ax.plot([0, top], [0, top], color="grey", linewidth=0.8)
    ax.set_xlabel(f"a product in a loop of {LOOP} (us)")
    ax.set_ylabel("planning's sample (us a product)")
    ax.set_title(result["device"])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments())
    parser.add_argument("--plans", type=int, default=3, help="fresh plannings per side")
    parser.add_argument("--only", help="comma-separated matrix names")
    args = parser.parse_args(argv)
    cupy, status = common.begin(args, lambda rows: None, markdown, plot)
    if cupy is None:
        return status
    result = {
        "device": _cuda.device_info().name,
        "versions": _cuda.versions(),
        "command": "python -m benchmarks.experiments.lead_call " + " ".join(argv or sys.argv[1:]),
        "results": [],
    }
    only = set(args.only.split(",")) if args.only else None
    for set_label, name, build in matrices():
        if only and name not in only:
            continue
        S = build()
        for dtype in (np.float64, np.float32):
            row = bench_one(set_label, name, S, dtype, cupy, args.plans)
            result["results"].append(row)
            print(f"{name} {np.dtype(dtype).name}: best {row['best']}", flush=True)
    common.write_outputs(result, args, markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
