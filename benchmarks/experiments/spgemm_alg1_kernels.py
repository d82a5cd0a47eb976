"""Where cuSPARSE's ALG1 spends a first product's GPU time, kernel by kernel (issue 47).

For the calls mode's power-law matrices (fit 1.5M; ``--only`` picks), ``A @ A`` by cupyx
(cuSPARSE's ALG1) and by sparsegpu (its rule, planning ``estimate``), each product run
alone from an idle device under ``torch.profiler`` (CUPTI's record of every kernel and copy
in the process, CuPy's and cuSPARSE's included). Per product: the span from its first
kernel's start to its last one's end, the kernels' busy time, the idle time between them,
and each kernel's time (medians over the repeats), so that what a new algorithm must beat
is priced kernel by kernel.

Usage (on a GPU machine, with torch)::

    python -m benchmarks.experiments.spgemm_alg1_kernels --out FILE.json [--md FILE.md]
        [--only powerlaw_1500k,powerlaw_2m] [--repeat 7]
    python -m benchmarks.experiments.spgemm_alg1_kernels --from-json FILE.json --md FILE.md
"""

from __future__ import annotations

import collections
import json

import numpy as np
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import common, spgemm_first
from benchmarks.experiments import spgemm_split_probe
from sparsegpu.datasets import synthetic

MODULE = "benchmarks.experiments.spgemm_alg1_kernels"
SIDES = ("cupyx", "sparsegpu", "hash", "short32")
WALLS = 9  # unprofiled wall clocks a side
MATRICES = {
    "powerlaw_1500k": lambda xp: synthetic.power_law(1_500_000, mean=3.0, seed=1, xp=xp),
    "powerlaw_2m": lambda xp: synthetic.power_law(2_000_000, mean=3.75, seed=2, xp=xp),
}


def short_name(name: str) -> str:
    """A kernel's name without its template arguments and parameter list."""
    base = name.split("(")[0].split("<")[0]
    return base.replace("void ", "").strip()[:70]


def profile_products(make, run, repeat, cupy, torch):
    """Per repeat, the kernels and copies of one ``run(make())`` from an idle device (the
    operands ``make()`` returns made before the profile), as lists of
    ``(name, start_us, duration_us)``."""
    from torch.profiler import ProfilerActivity, profile

    spans = []
    for _ in range(repeat):
        operands = make()
        cupy.cuda.Device().synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run(*operands)
            cupy.cuda.Device().synchronize()
        events = []
        for e in prof.events():
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            start, took = float(e.time_range.start), float(e.time_range.elapsed_us())
            events.append((short_name(e.name), start, took))
        events.sort(key=lambda t: t[1])
        spans.append(events)
    return spans


def summarize(spans):
    per_kernel = collections.defaultdict(list)
    totals = {"span_us": [], "busy_us": [], "launches": []}
    for events in spans:
        if not events:
            continue
        start = events[0][1]
        end = max(s + d for _, s, d in events)
        busy = sum(d for _, _, d in events)
        totals["span_us"].append(end - start)
        totals["busy_us"].append(busy)
        totals["launches"].append(len(events))
        this = collections.defaultdict(float)
        for name, _, d in events:
            this[name] += d
        for name, d in this.items():
            per_kernel[name].append(d)
    out = {k: float(np.median(v)) for k, v in totals.items()}
    out["idle_us"] = out["span_us"] - out["busy_us"]
    out["kernels"] = sorted(
        ((n, float(np.median(v)), len(v)) for n, v in per_kernel.items()),
        key=lambda t: -t[1],
    )
    return out


def short_part(Acx, cupy, most: int):
    """The rows of ``Acx`` of at most ``most`` products in ``Acx @ Acx`` (scipy, canonical)."""
    part = Acx[cupy.nonzero(spgemm_split_probe.row_products(Acx, cupy) <= most)[0]]
    part.sum_duplicates()
    return part.get()


def one_matrix(name, repeat, sides, cupy, cupyx_sparse, torch) -> dict:
    """The profiles of cupyx's and sparsegpu's ``A @ A`` on matrix ``name``, fresh
    operands made by a product as ``spgemm_first --mode calls`` makes them; ``hash``: the
    hash rows forced; ``short32``: the hash rows on the rows of at most 32 products only."""
    row, base, identity, Acx = spgemm_first.call_operands(
        "fit", name, sp.csr_matrix(MATRICES[name](cupy)), np.float64, cupyx_sparse
    )

    def fresh(left):  # a new pattern (fresh_sg forgets the sparse plans)
        return lambda: (spgemm_first.fresh_sg(left, identity),)

    def square(A):
        return A @ A

    runs = {}  # side -> (make the operands, the product)
    if "cupyx" in sides:
        runs["cupyx"] = (lambda: (spgemm_first.fresh_cupyx(Acx, cupyx_sparse),), square)
    if "sparsegpu" in sides:
        runs["sparsegpu"] = (fresh(base), square)
    if "hash" in sides:
        runs["hash"] = (fresh(base), lambda A: sg.spgemm(A, A, algorithm="hash"))
    if "short32" in sides:
        part = sg.csr_matrix(short_part(Acx, cupy, 32))
        runs["short32"] = (
            lambda: (spgemm_first.fresh_sg(part, identity), spgemm_first.fresh_sg(base, identity)),
            lambda L, R: sg.spgemm(L, R, algorithm="hash"),
        )
    for _ in range(2):  # compile and warm
        for make, run in runs.values():
            run(*make())
    for side, (make, run) in runs.items():
        walls = []
        for _ in range(WALLS):
            operands = make()
            walls.append(spgemm_first.wall_ms(lambda r=run, o=operands: r(*o), cupy)[0])
        row[side] = summarize(profile_products(make, run, repeat, cupy, torch))
        row[side]["wall_ms"] = float(np.median(walls))
    print(json.dumps(row)[:2000], flush=True)
    return row


def markdown(result) -> str:
    lines = [
        "# cuSPARSE ALG1's first product, kernel by kernel (issue 47)",
        "",
        f"Device: {result['device']}. Command: `{result['command']}`. "
        f"{common.doc_paragraph(__doc__, 1)} Microseconds, medians of {result['repeat']}.",
        "",
    ]
    for row in result["rows"]:
        for side in [k for k in SIDES if k in row]:
            s = row[side]
            lines += [
                f"## {row['matrix']}, {side}",
                "",
                f"Wall clock {s['wall_ms']:.3f} ms unprofiled (median of {WALLS}). "
                f"Profiled: span {s['span_us']:.1f} us, kernels and copies busy "
                f"{s['busy_us']:.1f}, idle between them {s['idle_us']:.1f}, "
                f"{s['launches']:.0f} launches.",
                "",
                "| kernel or copy | us | products seen |",
                "|---|---:|---:|",
            ]
            lines += [f"| `{n}` | {t:.1f} | {k} |" for n, t, k in s["kernels"][:14]]
            lines.append("")
    if result.get("reading"):
        lines += [f"Reading: {result['reading']}", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = common.experiment_parser(__doc__, only=["powerlaw_1500k"], repeat=7)
    parser.add_argument("--sides", default="cupyx,sparsegpu", help=f"of {','.join(SIDES)}")
    args = parser.parse_args(argv)
    if args.from_json:
        return common.markdown_again(args.from_json, args.md, markdown)
    import cupy
    import cupyx.scipy.sparse as cupyx_sparse
    import torch

    rows = [
        one_matrix(name, args.repeat, args.sides.split(","), cupy, cupyx_sparse, torch)
        for name in args.only.split(",")
    ]
    result = {**common.experiment_header(MODULE), "repeat": args.repeat, "rows": rows}
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
