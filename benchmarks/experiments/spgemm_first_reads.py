"""What a first product reads of its operands before it starts (issue 47).

A first ``A @ A`` of a matrix just uploaded from the host with unsorted rows (as scipy
keeps a matrix built from COO triplets before ``sum_duplicates``): its canonical copy is
made on the device, and the rule and the index dtype read the longest row of it. Variants,
in one process, in alternation (the order turning each sample), wall clock from the call
to the synchronized result, the mirror uploaded before the stopwatch (a new matrix each
sample: its canonical copy and statistics are new):

* ``library``: as the library is (the copy keeps the uploaded matrix's longest row as a
  bound; statistics read through pinned host words);
* ``stats by copy``: row statistics uploaded, computed and copied back (before);
* ``no kept bound``: the canonical copy keeps no bound (its rows are read);
* ``before``: both;
* ``cupyx``: its product of a copy with the same unsorted rows (``sum_duplicates`` then
  ``@``, as a user of cupyx must: its SpGEMM takes canonical operands only).

The fit power-law 1.5M of ``spgemm_first --mode calls`` (its rows are unsorted as built,
with a few duplicates), unless ``--only`` names others (those built sorted are left out).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_first_reads --out FILE.json [--md FILE.md]
        [--only NAME,...] [--repeat N]
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import common, spgemm_first
from sparsegpu.backends import spgemm
from sparsegpu.device import _mirror
from sparsegpu.engine import _sparse_dispatch

MODULE = "benchmarks.experiments.spgemm_first_reads"
DEFAULT_ONLY = ("powerlaw_1500k",)
VARIANTS = ("library", "stats by copy", "no kept bound", "before")


def _stats_by_copy(indptr, n_rows, xp):
    return _mirror._row_stats_on_device(indptr, n_rows, xp).get()


def _copy_without_bound(original):
    def copy(matrix):
        out = original(matrix)
        out.row_bound = None
        return out

    return copy


def variant(name):
    """Patch the library as ``name`` has it; returns the undo."""
    saved = (_mirror._row_summary_to_host, spgemm.canonical_copy)
    if name in ("stats by copy", "before"):
        _mirror._row_summary_to_host = _stats_by_copy
    if name in ("no kept bound", "before"):
        spgemm.canonical_copy = _copy_without_bound(saved[1])

    def undo():
        _mirror._row_summary_to_host, spgemm.canonical_copy = saved

    return undo


def measure(name, S, cupy, cupyx_sparse, repeat: int) -> dict:
    S = sp.csr_matrix(S, dtype=np.float64)
    if S.has_sorted_indices:
        print(f"{name}: its rows are sorted as built (no canonical copy): left out", flush=True)
        return None
    order = [*VARIANTS, "cupyx"]
    times: dict = {k: [] for k in order}
    answers = {}
    for sample in range(repeat + 2):
        turn = sample % len(order)
        for key in order[turn:] + order[:turn]:
            if key == "cupyx":
                B = cupyx_sparse.csr_matrix(
                    (cupy.asarray(S.data), cupy.asarray(S.indices), cupy.asarray(S.indptr)),
                    shape=S.shape,
                )
                B.has_canonical_format = False

                def fn(B=B):
                    B.sum_duplicates()
                    return B @ B

                undo = None
            else:
                A = sg.csr_matrix(S)
                A.planning = "estimate"
                _sparse_dispatch.operands(A, A, _mirror.CUPY, np.dtype(np.float64))  # upload

                def fn(A=A):
                    return A @ A

                undo = variant(key)
            try:
                ms, out = spgemm_first.wall_ms(fn, cupy)
            finally:
                if undo is not None:
                    undo()
            if sample >= 2:
                times[key].append(ms)
            if sample == 0:
                answers[key] = int(out.nnz)
    if len(set(answers.values())) != 1:
        raise SystemExit(f"{name}: the variants disagree on nnz: {answers}")
    row = {"matrix": name, "nnz": int(S.nnz), "nnz_out": answers["library"]}
    for key, values in times.items():
        row[f"{key}_ms"] = float(np.median(values))
    print(name, {k: round(v, 3) for k, v in row.items() if k.endswith("_ms")}, flush=True)
    return row


def markdown(result) -> str:
    lines = [
        "# What a first product reads of its operands before it starts (issue 47)",
        "",
        f"Device: {result['device']}. Command: `{result['command']}`. Medians of "
        f"{result['repeat']} samples. {common.doc_paragraph(__doc__, 1)}",
        "",
        __doc__.split("\n\n")[2].strip(),
        "",
        "| matrix | nnz | nnz out | " + " | ".join(f"{k} (ms)" for k in VARIANTS) + " | cupyx "
        "(ms) | library x before | library x cupyx |",
        "|---|---|---|" + "---|" * (len(VARIANTS) + 3),
    ]
    for r in result["rows"]:
        cells = " | ".join(f"{r[f'{k}_ms']:.3f}" for k in (*VARIANTS, "cupyx"))
        lines.append(
            f"| {r['matrix']} | {r['nnz']:,} | {r['nnz_out']:,} | {cells} | "
            f"{r['before_ms'] / r['library_ms']:.2f}x | {r['cupyx_ms'] / r['library_ms']:.2f}x |"
        )
    if result.get("reading"):
        lines += ["", "Reading: " + result["reading"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = common.experiment_parser(__doc__, DEFAULT_ONLY, 11).parse_args(argv)
    if args.from_json:
        return common.markdown_again(args.from_json, args.md, markdown)
    import cupy
    import cupyx.scipy.sparse as cupyx_sparse

    chosen = set(args.only.split(","))
    rows = [
        measure(name, build(), cupy, cupyx_sparse, args.repeat)
        for _, name, build in spgemm_first.call_matrices(np)
        if name in chosen
    ]
    rows = [row for row in rows if row is not None]
    result = {**common.experiment_header(MODULE), "repeat": args.repeat, "rows": rows}
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
