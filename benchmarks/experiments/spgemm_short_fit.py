"""Short rows against tables and cuSPARSE ALG1 on first products (issue 47, the fit of
``_hash_rows.SHORT_SLOTS`` and of the first product's rule for rows of few products).

On fit matrices only (``spgemm_first``'s calls-mode fit instances, the steady fit set's
stencils and the bundled SuiteSparse matrices; held-out instances take no part): the first
``A @ A`` of a new pattern in ``--dtype`` (wall clock from the call to a synchronized
result, operands resident and made by a product, median of ``--repeat`` in alternation)
by hash rows with ``SHORT_SLOTS`` of each of ``--slots`` (0: no short rows), by
``algorithm="alg1"``, by the rule (``A @ A``) and by cupyx, each answer checked against
cupyx.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_short_fit --out FILE.json --md FILE.md
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
import scipy.sparse as sp

from benchmarks import common, spgemm_first
from benchmarks import spgemm as spgemm_bench
from sparsegpu import datasets
from sparsegpu.datasets import synthetic

FIRST = spgemm_first
SLOTS = (0, 32, 64, 128, 256)


def matrices(xp) -> list:
    """``(name, builder)`` of the fit matrices (none held out anywhere)."""
    out = [(name, build) for group, name, build in FIRST.call_matrices(xp) if group == "fit"]
    out += [
        ("stencil2d5_1000", lambda: synthetic.stencil_2d(1000, xp=xp)),
        ("stencil2d9_1000", lambda: synthetic.stencil_2d(1000, points=9, xp=xp)),
        ("stencil3d7_100", lambda: synthetic.stencil_3d(100, points=7, xp=xp)),
    ]
    out += [(name, lambda name=name: datasets.load(name)) for name in datasets.names()]
    return out


def columns(slots) -> dict:
    """``{column: (algorithm, SHORT_SLOTS or None)}``."""
    out = {f"hash_short{s}": ("hash", s) for s in slots}
    out["alg1"] = ("alg1", None)
    out["rule"] = (None, None)
    return out


def markdown(rows: list, slots, dtype: str = "float64") -> str:
    keys = list(columns(slots)) + ["cupyx"]
    lines = [
        f"# Short rows: first `A @ A` (wall clock, ms, median), {dtype}, fit matrices only",
        "",
        "| matrix | nnz | " + " | ".join(keys) + " | rule ran |",
        "|---|---|" + "---|" * len(keys) + "---|",
    ]
    for row in rows:
        cells = [f"{row[k + '_ms']:.3f}" for k in keys]
        head = f"| {row['matrix']} | {row['nnz']:,} | "
        lines.append(head + " | ".join(cells) + f" | {row['ran']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--md", type=pathlib.Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--slots", type=int, nargs="+", default=list(SLOTS))
    parser.add_argument("--only", nargs="+", help="these matrices only")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument(
        "--groups",
        nargs="+",
        default=[],
        metavar="SLOTS=LANES",
        help="short rows of a class of SLOTS run LANES lanes a row (_hash_kernels.SHORT_GROUPS)",
    )
    args = parser.parse_args(argv)
    cupy = common.require_gpu()
    if cupy is None:
        return 2
    import cupyx.scipy.sparse as cupyx_sparse

    import sparsegpu as sg
    from sparsegpu.backends import _hash_kernels, _hash_rows

    default = _hash_rows.SHORT_SLOTS
    for setting in args.groups:
        slots, lanes = (int(v) for v in setting.split("="))
        _hash_kernels.SHORT_GROUPS[slots] = (lanes, slots)
    dtype = np.dtype(args.dtype)
    fns = columns(args.slots)
    rows = []
    for name, build in matrices(cupy):
        if args.only and name not in args.only:
            continue
        S = sp.csr_matrix(build())
        if S.shape[0] != S.shape[1]:
            continue
        S.sum_duplicates()
        row, base, identity, Acx = FIRST.call_operands("fit", name, S, dtype, cupyx_sparse)

        def run(key, A):
            algorithm, slots = fns[key]
            _hash_rows.SHORT_SLOTS = default if slots is None else slots
            try:
                return sg.spgemm(A, A, algorithm=algorithm) if algorithm else A @ A
            finally:
                _hash_rows.SHORT_SLOTS = default

        for key in fns:  # every kernel compiled
            run(key, FIRST.fresh_sg(base, identity))
        B = FIRST.fresh_cupyx(Acx, cupyx_sparse)
        reference = B @ B
        times = {}
        for _ in range(args.repeat):
            for key in fns:
                A = FIRST.fresh_sg(base, identity)
                ms, C = FIRST.wall_ms(lambda A=A, key=key: run(key, A), cupy)
                times.setdefault(key, []).append(ms)
                problem = spgemm_bench.agree(C, reference, dtype, cupy)
                assert problem is None, (name, key, problem)
            B = FIRST.fresh_cupyx(Acx, cupyx_sparse)
            times.setdefault("cupyx", []).append(FIRST.wall_ms(lambda B=B: B @ B, cupy)[0])
        row.update(common.medians(times, "_ms"))
        row["ran"] = sg.explain(A, A).last.algorithm
        rows.append(row)
        print(
            f"{name}: "
            + ", ".join(f"{k} {row[k + '_ms']:.3f}" for k in (*fns, "cupyx"))
            + f" ms (rule ran {row['ran']})",
            flush=True,
        )
        saved = {"rows": rows, "slots": args.slots, "dtype": dtype.name, "groups": args.groups}
        common.save_partial(saved, args.out)
    if args.md:
        args.md.write_text(markdown(rows, args.slots, dtype.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
