"""What launching the products count ahead saves a first product (issue 47).

A skewed first product (the rule counts its products exactly) and a large one (its index
dtype waits for the count) used to wait for ``spgemm_products_total`` before any host work
of the product. ``GpuSpgemm.products_ahead`` launches the count right after the pair
lookup and the rule and the index dtype assume their usual answer until just before the
first launch. This times, in one process and in alternation (the order turning by one
each sample), the first ``A @ A`` of a new pattern (the calls mode's fresh operands) with
the count ahead, with ``products_ahead`` switched off (the count then runs where the rule
or ``compute_operands`` needs it, waited for), and cupyx's first product on fresh
operands: wall clock from the call to a synchronized result, medians.

Matrices: fit-class instances only (the calls mode's fit power-law 1.5M, whose rule
counts; the P1 instance of ``spgemm_alg1_overhead``, whose product counts nothing: the
control).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_count_ahead --samples 21 --out F.json --md F.md
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys

import numpy as np
import scipy.sparse as sp

from benchmarks import common, spgemm_first

MODULE = "benchmarks.experiments.spgemm_count_ahead"
SIDES = ("ahead", "waited", "cupyx")


def matrices() -> list:
    """``(name, builder)``: fit-class instances (see the module docstring)."""
    from sparsegpu.datasets import synthetic

    return [
        ("powerlaw_1500k", lambda: synthetic.power_law(1_500_000, mean=3.0, seed=1)),
        ("fem_p1_250k_random_seed11", lambda: common.fem_p1(250_000, "random", seed=11)),
    ]


@contextlib.contextmanager
def _count_ahead(on: bool):
    """First products with the count launched ahead (``on``) or where it is read."""
    from sparsegpu.backends.hash_spgemm import GpuSpgemm

    real = GpuSpgemm.products_ahead
    if not on:
        GpuSpgemm.products_ahead = lambda self, left, right: None
    try:
        yield
    finally:
        GpuSpgemm.products_ahead = real


def run_one(name, S, samples: int, cupy, cupyx_sparse) -> dict:
    row, base, identity, Acx = spgemm_first.call_operands("fit", name, S, np.float64, cupyx_sparse)
    for on in (True, False):  # every kernel compiled, each path run once
        with _count_ahead(on):
            A = spgemm_first.fresh_sg(base, identity)
            A @ A
    spgemm_first.fresh_cupyx(Acx, cupyx_sparse) @ spgemm_first.fresh_cupyx(Acx, cupyx_sparse)
    times: dict = {side: [] for side in SIDES}
    for sample in range(samples):
        turn = sample % len(SIDES)
        for side in SIDES[turn:] + SIDES[:turn]:
            if side == "cupyx":
                B = spgemm_first.fresh_cupyx(Acx, cupyx_sparse)
                times[side].append(spgemm_first.wall_ms(lambda B=B: B @ B, cupy)[0])
                continue
            with _count_ahead(side == "ahead"):
                A = spgemm_first.fresh_sg(base, identity)
                times[side].append(spgemm_first.wall_ms(lambda A=A: A @ A, cupy)[0])
    import sparsegpu as sg

    row["ran"] = sg.explain(A, A).last.algorithm
    row["samples_ms"] = times
    row.update(common.medians(times, "_ms"))
    return row


def markdown(result: dict) -> str:
    lines = [
        "# First products with the products count launched ahead, and without (issue 47)",
        "",
        f"Device: {result['device']}. Command: `{result['command']}`. Fit-class instances only; "
        "wall clock from the call to a synchronized result, fresh operands made by a product, "
        "medians of alternating samples (the order turning each sample).",
        "",
        "| matrix | ran | count ahead (ms) | count waited for (ms) | cupyx (ms) | "
        "x cupyx, ahead | x cupyx, waited |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        ahead, waited, cupyx = r["ahead_ms"], r["waited_ms"], r["cupyx_ms"]
        lines.append(
            f"| {r['matrix']} | {r['ran']} | {ahead:.3f} | {waited:.3f} | {cupyx:.3f} | "
            f"{cupyx / ahead:.3f}x | {cupyx / waited:.3f}x |"
        )
    if result.get("note"):
        lines += ["", result["note"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--md", type=pathlib.Path)
    parser.add_argument("--samples", type=int, default=21)
    args = parser.parse_args(argv)
    cupy = common.require_gpu()
    if cupy is None:
        return 2
    import cupyx.scipy.sparse as cupyx_sparse

    result = {**common.experiment_header(MODULE), "rows": []}
    for name, build in matrices():
        S = sp.csr_matrix(build())
        S.sum_duplicates()
        row = run_one(name, S, args.samples, cupy, cupyx_sparse)
        result["rows"].append(row)
        print(
            f"{name}: ahead {row['ahead_ms']:.3f}, waited {row['waited_ms']:.3f}, cupyx "
            f"{row['cupyx_ms']:.3f} ms ({row['ran']})",
            flush=True,
        )
        common.save_partial(result, args.out)
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
