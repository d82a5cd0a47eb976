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

``--mode calls`` (issue 47) times what a user sees instead, wall clock from the call to a
synchronized result, operands already on the device (made by an earlier product): the first
``A @ A`` of a *new* pattern (fresh operands, sparse plans forgotten) against cupyx's on
fresh operands made the same way, by a cupyx product (median of three, ``--samples``, in
alternation, who goes first alternating by sample, after a throw-away first product of the
class compiled every kernel), the first ten calls of one pattern (planning included) beside
cupyx's, and the first
``sg.galerkin_product(A, P)`` against cupyx's ``P.T @ A @ P`` (aggregates of 8: 2 x 2 x 2
on the 3-D stencils, random elsewhere). Its matrices (:func:`call_matrices`): the classes
of issue 47, ``fit`` the instances the rule and planning were looked at on
(``benchmarks/experiments/spgemm_first_phases.py``), ``heldout`` the others.

Timing as ``benchmarks/spgemm.py``: every answer checked against cupyx first (same
structure, values within the dtype's tolerance), then the GPU columns in alternation,
median of ``--repeat`` CUDA-event samples after a warm-up. Peak device memory: the growth
of CuPy's pool over one product.

Usage (on a GPU machine)::

    python -m benchmarks.spgemm_first --out first.json --md first.md
    python -m benchmarks.spgemm_first --from-json first.json --md first.md   # no GPU
    python -m benchmarks.spgemm_first --mode calls --out calls.json --md calls.md
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
from sparsegpu.device._mirror import CUPY
from sparsegpu.engine import _sparse_dispatch, _sparse_planning

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
        engine, residence, value_dtype, _ = _sparse_dispatch.where(*operands)
        left, right = _sparse_dispatch.operands(*operands, residence, value_dtype)
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


def call_matrices(xp) -> list:
    """``(set, name, builder)`` of ``--mode calls``: issue 47's classes (3-D 7-point
    stencils, power-law rows, 3 x 3 blocks, R-MAT, and held out a 3-D 27-point stencil,
    3-D 3 x 3 blocks and a P1 mesh in random order)."""
    return [
        ("fit", "stencil3d7_120", lambda: synthetic.stencil_3d(120, points=7, xp=xp)),
        ("fit", "powerlaw_1500k", lambda: synthetic.power_law(1_500_000, mean=3.0, seed=1, xp=xp)),
        ("fit", "blocks3_2d_400", lambda: synthetic.block_mesh(400, 3, 2, xp=xp)),
        ("heldout", "stencil3d7_160", lambda: synthetic.stencil_3d(160, points=7, xp=xp)),
        (
            "heldout",
            "powerlaw_2m",
            lambda: synthetic.power_law(2_000_000, mean=3.75, seed=2, xp=xp),
        ),
        ("heldout", "blocks3_2d_548", lambda: synthetic.block_mesh(548, 3, 2, xp=xp)),
        ("heldout", "stencil3d27_70", lambda: synthetic.stencil_3d(70, points=27, xp=xp)),
        # the first run's one loss of hash rows (a bound on the products a row was fitted on
        # it, dropped in the third round, when hash rows won it)
        ("fit", "blocks3_3d_36", lambda: synthetic.block_mesh(36, 3, 3, xp=xp)),
        ("heldout", "blocks3_3d_30", lambda: synthetic.block_mesh(30, 3, 3, seed=1, xp=xp)),
        ("heldout", "blocks2_3d_50", lambda: synthetic.block_mesh(50, 2, 3, seed=2, xp=xp)),
        ("heldout", "rmat_s16", lambda: synthetic.rmat(16, 16, seed=5, xp=xp)),
        # added in the fifth round: the steady benchmark's P1 mesh (ALG1 on both sides, our
        # weakest held-out row there), held out as it was
        ("heldout", "fem_p1_300k_random", lambda: common.fem_p1(300_000, "random")),
        ("fit", "rmat_s17", lambda: synthetic.rmat(17, 16, xp=xp)),
    ]


def wall_ms(fn, cupy):
    """``(milliseconds, fn())``: wall clock from the call to its synchronized result."""
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    out = fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) * 1e3, out


def fresh_sg(base, identity):
    """A new sparsegpu matrix on the device, made by a product (``base @ I``), whose
    pattern planning has never seen."""
    fresh = sg.spgemm(base, identity, planning="estimate")
    _sparse_planning.forget_sparse_plans()
    return fresh


def fresh_cupyx(Acx, cupyx_sparse):
    """A new cupyx matrix made by a cupyx product (``Acx @ I``), as ``fresh_sg`` makes
    sparsegpu's: what cupyx's product knows of its result (canonical, since CuPy 14) it
    knows of this one, so its first product checks nothing a user's would not. (Until
    the fifth round this was a copy of the arrays, whose format cupyx then checked before
    its product: 0.1 ms or so that an operand made by a product does not cost.)"""
    n = Acx.shape[1]
    identity = _CUPYX_IDENTITY.get((n, Acx.dtype))
    if identity is None:
        _CUPYX_IDENTITY.clear()
        identity = cupyx_sparse.identity(n, dtype=Acx.dtype, format="csr")
        identity.sum_duplicates()
        _CUPYX_IDENTITY[(n, Acx.dtype)] = identity
    return Acx @ identity


_CUPYX_IDENTITY: dict = {}


def aggregates_of_8(name, n, dtype):
    """The prolongation of the Galerkin product: 2 x 2 x 2 aggregates on the 3-D
    stencils, random aggregates of 8 elsewhere."""
    if name.startswith("stencil3d"):
        return spgemm_bench.aggregation_3d(round(n ** (1 / 3))).astype(dtype)
    coarse = np.random.default_rng(0).permutation(n) % max(n // 8, 1)
    return sp.csr_matrix(
        (np.ones(n, dtype=dtype), (np.arange(n), coarse)), shape=(n, max(n // 8, 1))
    )


def call_operands(group, name, S, dtype, cupyx_sparse):
    """``(row, base, identity, Acx)``: a result row's header, ``S`` as a sparsegpu matrix
    (the base fresh operands are made from), the identity they are made with, and
    cupyx's copy (canonical)."""
    S = S.astype(dtype)
    base = sg.csr_matrix(S)
    identity = sg.csr_matrix(sp.identity(S.shape[1], dtype=dtype, format="csr"))
    Acx = cupyx_sparse.csr_matrix(base)
    Acx.sum_duplicates()
    row = {"set": group, "matrix": name, "dtype": np.dtype(dtype).name, "nnz": int(S.nnz)}
    row["shape"] = list(S.shape)
    return row, base, identity, Acx


def run_calls(group, name, S, dtype, cupy, cupyx_sparse, log, calls=10, samples=3) -> dict:
    """One matrix of ``--mode calls`` (see the module docstring)."""
    row, base, identity, Acx = call_operands(group, name, S, dtype, cupyx_sparse)
    for algorithm in (None, "hash", "alg1"):  # every kernel of the class compiled
        A = fresh_sg(base, identity)
        sg.spgemm(A, A, algorithm=algorithm)
    fresh_cupyx(Acx, cupyx_sparse) @ fresh_cupyx(Acx, cupyx_sparse)
    first, cupyx_first = [], []
    for sample in range(samples):
        # who goes first alternates sample by sample: neither always runs just after the
        # other's product
        for side in ("sg", "cupyx") if sample % 2 == 0 else ("cupyx", "sg"):
            if side == "sg":
                A = fresh_sg(base, identity)
                ms, C = wall_ms(lambda A=A: A @ A, cupy)
                first.append(ms)
            else:
                B = fresh_cupyx(Acx, cupyx_sparse)
                ms, reference = wall_ms(lambda B=B: B @ B, cupy)
                cupyx_first.append(ms)
    row["ran"] = sg.explain(A, A).last.algorithm
    row["result_nnz"] = int(reference.nnz)
    row["first_ms"], row["cupyx_first_ms"] = float(np.median(first)), float(np.median(cupyx_first))
    row["disagreements"] = {}
    problem = spgemm_bench.agree(C, reference, dtype, cupy)
    if problem is not None:
        row["disagreements"]["first"] = problem
    del C, reference
    A = fresh_sg(base, identity)
    row["calls_ms"] = [wall_ms(lambda A=A: A @ A, cupy)[0] for _ in range(calls)]
    B = fresh_cupyx(Acx, cupyx_sparse)
    row["cupyx_calls_ms"] = [wall_ms(lambda B=B: B @ B, cupy)[0] for _ in range(calls)]
    plan = sg.explain(A, A)
    row["plan"] = {
        "algorithm": plan.algorithm, "planning_ms": plan.planning_ms,
        "products_ms": plan.products_ms, "product_ms": plan.product_ms, "text": str(plan),
    }  # fmt: skip
    problem = spgemm_bench.agree(A @ A, B @ B, dtype, cupy)
    if problem is not None:
        row["disagreements"]["planned"] = problem
    P = aggregates_of_8(name, S.shape[0], dtype)
    galerkin, cupyx_galerkin = [], []
    Pcx = cupyx_sparse.csr_matrix(P)  # one untimed product each: every kernel compiled
    sg.galerkin_product(fresh_sg(base, identity), sg.csr_matrix(P))
    Pcx.T @ fresh_cupyx(Acx, cupyx_sparse) @ Pcx
    for sample in range(samples):
        for side in ("sg", "cupyx") if sample % 2 == 0 else ("cupyx", "sg"):
            if side == "sg":
                A = fresh_sg(base, identity)
                Psg = sg.csr_matrix(P)
                Psg._sg_mirror(CUPY, np.dtype(dtype))  # resident, as cupyx's P is
                ms, G = wall_ms(lambda A=A, P=Psg: sg.galerkin_product(A, P), cupy)
                galerkin.append(ms)
            else:
                B, Pcx = fresh_cupyx(Acx, cupyx_sparse), cupyx_sparse.csr_matrix(P)
                ms, reference = wall_ms(lambda B=B, P=Pcx: P.T @ B @ P, cupy)
                cupyx_galerkin.append(ms)
    row["galerkin_first_ms"] = float(np.median(galerkin))
    row["cupyx_galerkin_first_ms"] = float(np.median(cupyx_galerkin))
    problem = spgemm_bench.agree(G, reference.tocsr(), dtype, cupy)
    if problem is not None:
        row["disagreements"]["galerkin"] = problem
    log(
        f"  {name}: first {row['first_ms']:.2f} ms ({row['ran']}) vs cupyx "
        f"{row['cupyx_first_ms']:.2f}; calls "
        + " ".join(f"{c:.1f}" for c in row["calls_ms"])
        + f"; galerkin {row['galerkin_first_ms']:.2f} vs {row['cupyx_galerkin_first_ms']:.2f}; "
        f"{row['disagreements'] or 'all agree'}"
    )
    return row


def markdown_calls(result: dict) -> str:
    lines = [
        "# First products of a new pattern, the first ten calls of one, and the first "
        "Galerkin product: sparsegpu against cupyx (issue 47)",
        "",
        f"Device: {result.get('device', '?')}; CuPy {result.get('cupy', '?')}. Wall clock "
        "from the call to a synchronized result, operands resident on the device (made by "
        "an earlier product), in a warm process (every kernel compiled before); first "
        f"products: median of {result.get('samples', 3)} new patterns, in alternation with "
        "cupyx's on fresh operands made by a cupyx product"
        + (" (who goes first alternating sample by sample)" if result.get("sides_turn") else "")
        + "; answers checked against "
        "cupyx. `fit`: the instances the rule and planning were looked at on; `heldout`: "
        "the others.",
        "",
        *([result["note"], ""] if "note" in result else []),
        "| set | matrix | nnz | nnz out | ran | first | cupyx first | x cupyx | "
        "calls 1-10 (ms) | max call / first | planning / products (ms) | planned | "
        "galerkin first | cupyx P.T@A@P | x cupyx |",
        "|" + "---|" * 15,
    ]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"| {row['set']} | {row['matrix']} | {row['error']} |" + " |" * 12)
            continue
        calls = " ".join(f"{c:.1f}" for c in row["calls_ms"])
        plan = row["plan"]
        flag = f" (disagrees: {', '.join(row['disagreements'])})" if row["disagreements"] else ""
        lines.append(
            f"| {row['set']} | {row['matrix']} | {row['nnz']:,} | {row['result_nnz']:,} | "
            f"{row['ran']}{flag} | {row['first_ms']:.2f} | {row['cupyx_first_ms']:.2f} | "
            f"{row['cupyx_first_ms'] / row['first_ms']:.2f}x | {calls} | "
            f"{max(row['calls_ms']) / row['first_ms']:.2f} | {plan['planning_ms']:.1f} / "
            f"{plan['products_ms']:.1f} | {plan['algorithm']} | {row['galerkin_first_ms']:.2f} | "
            f"{row['cupyx_galerkin_first_ms']:.2f} | "
            f"{row['cupyx_galerkin_first_ms'] / row['galerkin_first_ms']:.2f}x |"
        )
    lines += calls_summary(result["rows"])
    return "\n".join(lines) + "\n"


def calls_summary(rows) -> list[str]:
    """The bars' lines, set by set (held out first: what a claim rests on): the first
    product against cupyx on the matrices of >= 0.5M nonzeros, and the first Galerkin
    product, each as its least ratio (to three places, so that a tie under 1.0 shows) and
    geometric mean."""
    out = []
    for group in ("heldout", "fit"):
        done = [r for r in rows if "error" not in r and r["set"] == group]
        big = [r for r in done if r["nnz"] >= 500_000]
        if not big:
            continue
        first = [r["cupyx_first_ms"] / r["first_ms"] for r in big]
        galerkin = [r["cupyx_galerkin_first_ms"] / r["galerkin_first_ms"] for r in done]
        label = "held out" if group == "heldout" else "fit"
        out += [
            "",
            f"{label.capitalize()}, first product against cupyx on the matrices of >= 0.5M "
            f"nonzeros: min {min(first):.3f}x, geomean {_geomean(first):.2f}x; first Galerkin "
            f"product against cupyx's P.T @ A @ P: min {min(galerkin):.3f}x, geomean "
            f"{_geomean(galerkin):.2f}x.",
        ]
    return out


def _geomean(ratios) -> float:
    return float(np.exp(np.mean(np.log(ratios))))


def warm_planning(dtype) -> None:
    """Plan a small pattern to the end (its products paid for it), so that the kernels of
    planning's checks are compiled before anything is timed (once a process)."""
    S = synthetic.stencil_3d(12, points=7).astype(dtype)
    A = sg.csr_matrix(S)
    for _ in range(3 * _sparse_planning.CANDIDATE_COST):
        A @ A
    _sparse_planning.forget_sparse_plans()


def main_calls(args, cupy, cupyx_sparse) -> int:
    result = {
        "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "cupy": cupy.__version__,
        "mode": "calls",
        "samples": args.samples,
        "sides_turn": True,  # who goes first alternates by sample (since the 32nd session)
        "command": " ".join(sys.argv),
        "rows": [],
    }
    sets = set(args.sets.split(","))
    matrices = call_matrices(cupy)
    known = {m[0] for m in matrices}
    if not sets <= known:
        raise SystemExit(
            f"spgemm_first --mode calls: unknown set(s) {sorted(sets - known)} in --sets "
            f"{args.sets!r}; the calls mode has {', '.join(sorted(known))}"
        )
    chosen = [m for m in matrices if m[0] in sets]
    if args.only:
        keep = set(args.only.split(","))
        chosen = [m for m in chosen if m[1] in keep]
    for group, name, builder in chosen:
        S = sp.csr_matrix(builder())
        S.sum_duplicates()
        spgemm_bench.log(f"{group} {name}: {S.shape[0]:,} x {S.shape[1]:,}, {S.nnz:,} nonzeros")
        for dtype in (np.dtype(d) for d in args.dtypes.split(",")):
            warm_planning(dtype)
            try:
                row = run_calls(
                    group, name, S, dtype, cupy, cupyx_sparse, spgemm_bench.log,
                    samples=args.samples,
                )  # fmt: skip
            except Exception as exc:  # one matrix's failure is reported, not the run's end
                row = {"set": group, "matrix": name, "dtype": dtype.name}
                row["error"] = f"{type(exc).__name__}: {exc}"
                spgemm_bench.log(f"  {name}: {row['error']}")
            result["rows"].append(row)
            _sparse_planning.forget_sparse_plans()
            cupy.get_default_memory_pool().free_all_blocks()
        if args.out:
            args.out.write_text(json.dumps(result, indent=1))
    return spgemm_bench.finish(args, result, markdown_calls)


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
    parser.add_argument("--mode", choices=("steady", "calls"), default="steady")
    parser.add_argument(
        "--samples",
        type=int,
        default=3,
        help="calls mode: new patterns whose first products give the median (default 3)",
    )
    args = parser.parse_args(argv)
    if args.mode == "calls" and args.dtypes == parser.get_default("dtypes"):
        args.dtypes = "float64"
    render = markdown_calls if args.mode == "calls" else markdown
    if args.from_json and json.loads(args.from_json.read_text()).get("mode") == "calls":
        render = markdown_calls
    started = spgemm_bench.start(args, render)
    if isinstance(started, int):
        return started
    cupy, cupyx_sparse = started
    if args.mode == "calls":
        return main_calls(args, cupy, cupyx_sparse)
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
