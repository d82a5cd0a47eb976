"""What planning's bookkeeping costs the products of a pattern before planning (issue 47).

The held-out P1 mesh of ``spgemm_first --mode calls`` (300k points in random order, short
rows first), float64: ``A @ A`` eight times on each of four fresh operands (a new pattern
each), wall clock from the call to the synchronized result and to the call's return.
The first product of a pattern is not timed, the later ones are (their stopwatches read at
the next product), and each runs planning's step, which returns until the products have
paid for the candidates' timing. Variants, in one process: the median of the timed
products read with NumPy (``np.median``, before) and with ``statistics.median`` (now), and
no planning step at all (the floor); the planning step's own host time.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.planning_bookkeeping --out FILE.json [--md FILE.md]
    python -m benchmarks.experiments.planning_bookkeeping --from-json FILE.json --md FILE.md
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks import common, spgemm_first

MODULE = "benchmarks.experiments.planning_bookkeeping"


def wall(fn, cupy) -> tuple[float, float]:
    """Milliseconds from the call to the synchronized result, and to the call's return."""
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    fn()
    returned = time.perf_counter()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) * 1e3, (returned - start) * 1e3


def measure(repeat: int, calls: int, cupy, cupyx_sparse) -> list:
    from sparsegpu.engine import _sparse_planning as planning

    S = common.fem_p1(300_000, "random")
    S.sum_duplicates()
    _, base, identity, _ = spgemm_first.call_operands(
        "heldout", "fem_p1_300k_random", S, np.float64, cupyx_sparse
    )
    for _ in range(2):  # compiled and warm
        A = spgemm_first.fresh_sg(base, identity)
        A @ A
    real_step, real_median = planning._plan_step, planning._Pair.product_ms
    spent: list = []

    def step(*args, **kwargs):
        start = time.perf_counter()
        real_step(*args, **kwargs)
        spent.append((time.perf_counter() - start) * 1e6)

    def numpy_median(pair):
        return float(np.median(pair.product_times)) if pair.product_times else None

    variants = {
        "np.median (before)": (step, property(numpy_median)),
        "statistics.median (now)": (step, real_median),
        "no planning step": (lambda *args, **kwargs: None, real_median),
    }
    rows = []
    try:
        for name, (plan_step, median) in variants.items():
            planning._plan_step, planning._Pair.product_ms = plan_step, median
            spent.clear()
            walls, returns = [], []
            for _ in range(repeat):
                A = spgemm_first.fresh_sg(base, identity)
                times = [wall(lambda A=A: A @ A, cupy) for _ in range(calls)]
                walls.append([t[0] for t in times])
                returns.append([t[1] for t in times])
            w, r = np.array(walls), np.array(returns)
            row = {
                "variant": name,
                "first_ms": float(np.median(w[:, 0])),
                "second_ms": float(np.median(w[:, 1])),
                "later_ms": float(np.median(w[:, 2:])),
                "later_return_ms": float(np.median(r[:, 2:])),
                "step_us": float(np.median(spent)) if spent else None,
            }
            print(row, flush=True)
            rows.append(row)
    finally:
        planning._plan_step, planning._Pair.product_ms = real_step, real_median
    return rows


def markdown(result) -> str:
    lines = [
        "# Planning's bookkeeping on the products before planning (issue 47)",
        "",
        f"Device: {result['device']}. Command: `{result['command']}`. "
        f"{common.doc_paragraph(__doc__, 1)} Milliseconds, medians of {result['repeat']} "
        f"patterns x the calls.",
        "",
        "| variant | call 1 | call 2 | calls 3-8 | calls 3-8, to return | planning step (us) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        step = "-" if r["step_us"] is None else f"{r['step_us']:.0f}"
        lines.append(
            f"| {r['variant']} | {r['first_ms']:.3f} | {r['second_ms']:.3f} | "
            f"{r['later_ms']:.3f} | {r['later_return_ms']:.3f} | {step} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = common.experiment_parser(__doc__, repeat=4)
    parser.add_argument("--calls", type=int, default=8)
    args = parser.parse_args(argv)
    if args.from_json:
        return common.markdown_again(args.from_json, args.md, markdown)
    import cupy
    import cupyx.scipy.sparse as cupyx_sparse

    rows = measure(args.repeat, args.calls, cupy, cupyx_sparse)
    result = {**common.experiment_header(MODULE), "repeat": args.repeat, "rows": rows}
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
