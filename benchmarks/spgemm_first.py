"""The first product of a pattern, ``A @ B``: sparsegpu's hash rows, its rule, cuSPARSE ALG1
called directly, cupyx and scipy.

A first product cannot reuse anything of an earlier one: ``first`` is ``A @ B`` at planning
level ``estimate`` (every product runs what the rule of
:meth:`sparsegpu.backends.hash_spgemm.GpuSpgemm.estimate` picks, from scratch: exactly a
first product's work), beside ``hash`` and ``alg1`` (``sg.spgemm(A, B, algorithm=...)``),
``cusparse_alg1`` (cuSPARSE SpGEMM ALG1 called directly, operand descriptors made once),
``cupyx`` (``cupyx.scipy.sparse`` on the same device arrays) and, for float64, ``scipy``
on the host (one sample) against ``first`` including the download of the result.

Three sets of matrices. ``fit``: the rule's thresholds (``HASH_MIN_PRODUCTS``,
``HASH_MIN_ROW_PRODUCTS``, ``HASH_MIN_COMPRESSION``) were chosen on these only: the 2-D
5-point and 9-point stencils 1000^2, the 3-D 7-point stencils 64^3 and 100^3, the 3-D
27-point stencil 40^3, R-MAT scale 15, ``A.T @ A`` of a 300k x 25k matrix and the
SuiteSparse matrices bundled with sparsegpu (the second fit added the 9-point, the 7-point
100^3, the 27-point 40^3 and the tall matrix, to span products per row and per entry).
``heldout``: the matrices of ``benchmarks/spgemm.py`` (2-D 5-point 2000^2, 3-D 27-point
100^3, R-MAT scale 16, a P1 FEM mesh of 300k points in random order, ``A.T @ A`` of a
400k x 40k matrix, the Galerkin product of the 2-D stencil): no threshold was read from
them (their results under the first rule showed its misses, which is why it was refitted).
``galerkin``
(``--sets galerkin``): two more Galerkin products, added when the Galerkin path was reworked
on the 2-D one (the 3-D 27-point stencil 100^3 with 2 x 2 x 2 aggregates, a P1 mesh of 300k
points in random order with random aggregates of 4 points), so held out from that work.

Timing as ``benchmarks/spgemm.py``: every answer checked against cupyx first (same
structure, values within the dtype's tolerance), then the GPU columns in alternation,
median of ``--repeat`` CUDA-event samples after a warm-up. Peak device memory: the growth
of CuPy's pool over one product.

Usage (on a GPU machine)::

    python -m benchmarks.spgemm_first --out first.json --md first.md
    python -m benchmarks.spgemm_first --from-json first.json --md first.md   # no GPU
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import scipy
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import common
from benchmarks import spgemm as spgemm_bench
from benchmarks.common import DirectSpGEMM
from sparsegpu import datasets, measure
from sparsegpu.backends import spgemm
from sparsegpu.datasets import synthetic
from sparsegpu.engine import _sparse_product

RMAT = {"a": 0.45, "b": 0.55 / 3, "c": 0.55 / 3}


def fit_matrices(xp) -> list:
    """``(set, name, form, builder)`` of the fit set."""
    out = [
        ("fit", "stencil2d5_1000", "A@A", lambda: synthetic.stencil_2d(1000, xp=xp)),
        ("fit", "stencil3d7_64", "A@A", lambda: synthetic.stencil_3d(64, points=7, xp=xp)),
        ("fit", "rmat_s15_e16", "A@A", lambda: synthetic.rmat(15, 16, xp=xp, **RMAT)),
        # added for the second fit (the rule's products-per-result axis): 81, 49 and
        # about 700 products a row, and a tall A.T @ A whose products hardly repeat
        ("fit", "stencil2d9_1000", "A@A", lambda: synthetic.stencil_2d(1000, points=9, xp=xp)),
        ("fit", "stencil3d7_100", "A@A", lambda: synthetic.stencil_3d(100, points=7, xp=xp)),
        ("fit", "stencil3d27_40", "A@A", lambda: synthetic.stencil_3d(40, points=27, xp=xp)),
        (
            "fit",
            "tall_300k_x8_25k",
            "A.T@A",
            lambda: synthetic.uniform_random(300_000, 8, n_cols=25_000, seed=5, xp=xp),
        ),
    ]
    for name in datasets.names():
        info = datasets.info(name)
        form = "A@A" if info.rows == info.cols else "A.T@A"
        out.append(("fit", name, form, lambda name=name: datasets.load(name)))
    return out


def heldout_matrices(xp) -> list:
    return [("heldout", *m) for m in spgemm_bench.matrices("full", xp)]


def galerkin_matrices(xp) -> list:
    """The Galerkin products added when the Galerkin path was reworked (held out from it)."""
    return [("galerkin", *m) for m in spgemm_bench.galerkin_matrices("full", xp)]


def _products(form, S, dtype, cupyx_sparse):
    """``{column: fn}`` and the sparsegpu operands of ``explain`` (None: Galerkin)."""
    A = sg.csr_matrix(S.astype(dtype))
    A.planning = "estimate"  # every product is a first product: the rule, from scratch
    Acx = cupyx_sparse.csr_matrix(A)
    Acx.sum_duplicates()
    if form.startswith(spgemm_bench.GALERKIN):
        P = spgemm_bench.prolongation(form, S, dtype)
        Psg, Pcx = sg.csr_matrix(P), cupyx_sparse.csr_matrix(P)
        Psg.planning = "estimate"
        fns = {"first": lambda: sg.galerkin_product(A, Psg), "cupyx": lambda: Pcx.T @ Acx @ Pcx}
        return fns, None, P
    left, right = (A, A) if form == "A@A" else (A.T, A)
    left_cx, right_cx = (Acx, Acx) if form == "A@A" else (Acx.T, Acx)
    fns = {
        "first": lambda: left @ right,
        "hash": lambda: sg.spgemm(left, right, algorithm="hash"),
        "alg1": lambda: sg.spgemm(left, right, algorithm="alg1"),
        "cupyx": lambda: left_cx @ right_cx,
    }
    return fns, (left, right), None


def run_dtype(group, name, form, S, dtype, repeat, cupy, cupyx_sparse, log) -> dict:
    row = {"set": group, "matrix": name, "form": form, "dtype": np.dtype(dtype).name}
    row.update(shape=list(S.shape), nnz=int(S.nnz))
    fns, operands, P = _products(form, S, dtype, cupyx_sparse)
    if operands is not None:
        engine, residence, value_dtype, _ = _sparse_product.where(*operands)
        left, right = _sparse_product.operands(*operands, residence, value_dtype)
        left, right = spgemm.canonical(left), spgemm.canonical(right)
        row["rule"], row["rule_reason"] = engine.estimate(left, right)
        row["bound"] = int(left.stats.max) * int(right.stats.max)
        row["products"] = int(spgemm.row_products(left, right).sum())
        fns["cusparse_alg1"] = DirectSpGEMM(left, right)
    reference = fns["cupyx"]()
    if reference.format != "csr":
        reference = reference.tocsr()
    row["result_nnz"] = int(reference.nnz)
    row["disagreements"] = {}
    for key, fn in fns.items():
        problem = None if key == "cupyx" else spgemm_bench.agree(fn(), reference, dtype, cupy)
        if problem is not None:
            row["disagreements"][key] = problem
        if key == "first" and operands is not None:  # what the first product ran
            row["ran"] = sg.explain(*operands).last.algorithm
    for key, fn in fns.items():
        row[f"peak_{key}"] = int(spgemm_bench.peak_of(fn, cupy)[0])
    for key, timing in measure.cuda_time_interleaved(fns, warmup=1, repeat=repeat).items():
        row[f"{key}_ms"] = timing.median_ms
    if np.dtype(dtype) == np.float64:
        row["first_with_host_copy_ms"] = measure.host_time(
            lambda: fns["first"]().data, warmup=1, repeat=3
        ).median_ms
        S64 = S.astype(dtype)
        start = time.perf_counter()
        expected = spgemm_bench.scipy_product(form, S64, P)
        row["scipy_ms"] = (time.perf_counter() - start) * 1e3
        problem = spgemm_bench.agree_with_scipy(fns["first"](), expected, dtype)
        if problem is not None:
            row["disagreements"]["scipy"] = problem
    times = ", ".join(f"{k} {row[f'{k}_ms']:.3f}" for k in fns)
    log(f"  {name} {row['dtype']}: {times} ms; ran {row.get('ran', '-')}; "
        f"{row['disagreements'] or 'all agree'}")  # fmt: skip
    return row


def _ratio(row, numerator, denominator) -> str:
    if f"{numerator}_ms" not in row or f"{denominator}_ms" not in row:
        return "—"
    return f"{row[f'{numerator}_ms'] / row[f'{denominator}_ms']:.2f}x"


def markdown(result: dict) -> str:
    lines = [
        "# The first product of a pattern: sparsegpu (hash rows / ALG1 by rule) against "
        "cuSPARSE ALG1 called directly, cupyx and scipy",
        "",
        f"Device: {result.get('device', '?')}; CuPy {result.get('cupy', '?')}, scipy "
        f"{result.get('scipy', '?')}. Median of {result.get('repeat')} CUDA-event samples "
        "after warm-up, in alternation; every answer checked against cupyx (float64 also "
        "against scipy). `first`: `A @ B` at planning level estimate (the rule's choice, "
        f"from scratch). Rule: {result.get('rule', '?')}; fitted on the `fit` rows only; "
        "the `heldout` rows took no part. `bound`: L's longest row x R's longest row.",
        "",
        *([result["note"], ""] if "note" in result else []),
        "| set | matrix | product | dtype | nnz in | nnz out | bound | ran | first | hash | "
        "sg ALG1 | cuSPARSE ALG1 | cupyx | first vs cupyx | first vs ALG1 direct | "
        "hash vs ALG1 direct | scipy | x scipy incl. copy | peak MiB first / ALG1 / cupyx |",
        "|" + "---|" * 19,
    ]
    for row in result["rows"]:

        def ms(key, row=row):
            return f"{row[key]:.3f}" if key in row else "—"

        scipy_ratio = (
            f"{row['scipy_ms'] / row['first_with_host_copy_ms']:.1f}x" if "scipy_ms" in row else "—"
        )
        peaks = [row.get("peak_first"), row.get("peak_cusparse_alg1"), row.get("peak_cupyx")]
        peak_text = " / ".join("—" if p is None else f"{p / 2**20:.1f}" for p in peaks)
        flag = (
            " (disagrees: " + ", ".join(row["disagreements"]) + ")" if row["disagreements"] else ""
        )
        lines.append(
            f"| {row['set']} | {row['matrix']} | {row['form']} | {row['dtype']} | "
            f"{row['nnz']:,} | {row['result_nnz']:,} | {row.get('bound', '—')} | "
            f"{row.get('ran', 'galerkin')}{flag} | {ms('first_ms')} | {ms('hash_ms')} | "
            f"{ms('alg1_ms')} | {ms('cusparse_alg1_ms')} | {ms('cupyx_ms')} | "
            f"{_ratio(row, 'cupyx', 'first')} | {_ratio(row, 'cusparse_alg1', 'first')} | "
            f"{_ratio(row, 'cusparse_alg1', 'hash')} | {ms('scipy_ms')} | {scipy_ratio} | "
            f"{peak_text} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False, paths=True))
    parser.add_argument("--sets", default="fit,heldout")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", help="comma-separated matrix names")
    args = parser.parse_args(argv)
    started = spgemm_bench.start(args, markdown)
    if isinstance(started, int):
        return started
    cupy, cupyx_sparse = started
    from sparsegpu.backends import hash_spgemm

    log = spgemm_bench.log
    result = {
        "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "cupy": cupy.__version__,
        "scipy": scipy.__version__,
        "repeat": args.repeat,
        "rule": (
            f"hash rows for {', '.join(map(str, hash_spgemm.HASH_DTYPES))} products of >= "
            f"{hash_spgemm.HASH_MIN_PRODUCTS:,} products, >= "
            f"{hash_spgemm.HASH_MIN_ROW_PRODUCTS} a row on average, <= "
            f"{hash_spgemm.HASH_MAX_ROW_PRODUCTS:,} a row, >= "
            f"{hash_spgemm.HASH_MIN_COMPRESSION} products an entry on "
            f"{hash_spgemm.SAMPLE_ROWS:,} sampled rows; cuSPARSE ALG1 otherwise"
        ),
        "command": " ".join(sys.argv),
        "rows": [],
    }
    chosen = []
    sets = args.sets.split(",")
    if "fit" in sets:
        chosen += fit_matrices(cupy)
    if "heldout" in sets:
        chosen += heldout_matrices(cupy)
    if "galerkin" in sets:
        chosen += galerkin_matrices(cupy)
    if args.only:
        keep = set(args.only.split(","))
        chosen = [m for m in chosen if m[1] in keep]
    for group, name, form, builder in chosen:
        S = sp.csr_matrix(builder())
        S.sum_duplicates()
        log(f"{group} {name}: {S.shape[0]:,} x {S.shape[1]:,}, {S.nnz:,} nonzeros, {form}")
        for dtype in (np.dtype(d) for d in args.dtypes.split(",")):
            result["rows"].append(
                run_dtype(group, name, form, S, dtype, args.repeat, cupy, cupyx_sparse, log)
            )
            cupy.get_default_memory_pool().free_all_blocks()
        if args.out:
            args.out.write_text(json.dumps(result, indent=1))
    return spgemm_bench.finish(args, result, markdown)


if __name__ == "__main__":
    sys.exit(main())
