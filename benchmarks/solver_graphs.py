"""Issues 15 and 33 on the GPU: CG with CUDA graphs, locality reordering and auto's rule
for it, the numpy drop-in path.

Sections (each recorded as soon as it is done; an error in one is recorded and the others
still run):

* ``graphs``: ``sparsegpu.linalg.cg`` to ``--rtol`` with graphs, without, and
  ``cupyx.scipy.sparse.linalg.cg`` on a cupyx matrix. Real SPD matrices: the bundled
  ``bcsstk13`` (Jacobi preconditioner, a sparsegpu diagonal matrix) and the graph
  Laplacians (+ 0.01 I) of the bundled DIMACS10 meshes ``fe_4elt2``, ``cti``, ``cs4``;
  then synthetic 3-D 7-point Poisson matrices of 0.1-8M nonzeros (marked ``synthetic``).
  Time to solution is the wall median of ``--repeat`` solves after one warm-up (a graph
  solve captures anew each call: the capture is in the time). Iteration counts come from
  ``last_solve_info()`` (ours) and a callback (cupyx, an untimed run).
* ``others``: ``bicgstab``, ``minres`` and ``lsqr`` (``atol = btol = --rtol``) with graphs
  and without on the three Laplacians, iteration counts from ``last_solve_info()``.
* ``gmres``: ``sparsegpu.linalg.gmres`` (restart ``--restart``) with graphs (a whole
  restart cycle per replay) and without, and ``cupyx.scipy.sparse.linalg.gmres``, on the
  three Laplacians and the bundled nonsymmetric ``cage10``; inner iteration counts from
  ``last_solve_info()``.
* ``reorder``: a 3-D 7-point mesh of ``--mesh-grid``^3 rows numbered in random order,
  ``cg(..., reorder="rcm")`` against ``reorder=None``: the solve with the permutation
  cached on the matrix (what every solve after the first costs) and the first solve,
  which includes ``sg.reorder``.
* ``reorder_rule``: ``reorder="auto"``'s rule (reorder once the time spent solving a
  matrix unordered reaches the ordering's estimated cost). First the cost model is fitted
  on this machine: the ordering (``cached_rcm``: reverse Cuthill-McKee on the host, the
  permutation) of randomly numbered 3-D 7-point meshes of ``--fit-grids``^3 rows, least
  squares through the origin in seconds per nonzero; the rest of the section uses that
  fit. Then, on a held-out matrix (a 7-point mesh of ``--rule-grid``^3 rows, a size not
  fitted, in another random order; large enough that x does not fit in the H200's L2,
  where reordering pays), ``--rule-solves`` cg solves of one matrix with
  ``reorder=None``, ``"rcm"`` and ``"auto"``: each solve's wall time (the first and the
  tenth), the totals after k solves against the better of None and rcm in hindsight, and
  which solve auto reordered at.
* ``numpy_path``: ``scipy.sparse.linalg.cg`` with numpy vectors, ``--iterations``
  iterations, on a ``--numpy-grid``^3 (1.6M-row) Poisson matrix: scipy's matrix; scipy's
  own vector work (a product that costs nothing: the floor of this path); a sparsegpu
  matrix as shipped (scipy's ``p`` page-locked in place from its second product), with x
  copied through the pinned staging buffer every time, and with pageable copies. Wall
  medians of ``--numpy-rounds`` solves each, timed in alternation.

Usage: ``python -m benchmarks.solver_graphs --out DIR`` (writes solver_graphs_h200.json
and .md; prints the table last).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import time
import traceback
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import sparsegpu as sg
from sparsegpu import measure
from sparsegpu.classes import _reorder
from sparsegpu.datasets.synthetic import stencil_3d
from sparsegpu.device import _staging


def timed(fn, cupy, repeat=1):
    """(median wall seconds, last result) of fn(), the device synchronised around each."""
    times, result = [], None
    for _ in range(repeat):
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        result = fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def laplacian(name):
    """The graph Laplacian of a bundled mesh + 0.01 I: SPD, a real mesh's structure."""
    S = sp.csr_matrix(scipy.io.mmread(sg.datasets.path(name)))
    pattern = ((abs(S) + abs(S.T)) > 0).astype(np.float64)
    pattern.setdiag(0)
    pattern.eliminate_zeros()
    degree = np.asarray(pattern.sum(axis=1)).ravel()
    return (sp.diags(degree + 0.01) - pattern).tocsr()


def problems(grids):
    bcsstk13 = sp.csr_matrix(scipy.io.mmread(sg.datasets.path("bcsstk13")))
    yield "bcsstk13", bcsstk13, sp.diags(1 / bcsstk13.diagonal()).tocsr(), "real"
    for name in ("fe_4elt2", "cti", "cs4"):
        yield f"{name}-laplacian", laplacian(name), None, "real"
    for grid in grids:
        yield f"poisson3d_{grid}", sp.csr_matrix(stencil_3d(grid)), None, "synthetic"


def ours(A, b, M, args, cupy, graphs):
    """sparsegpu.linalg.cg timed after a warm-up, with what last_solve_info says."""

    def solve():
        return sg.linalg.cg(A, b, rtol=args.rtol, M=M, graphs=graphs)

    return timed_solve(solve, A, b, cupy, args.repeat)


def timed_solve(solve, A, b, cupy, repeat):
    """A sparsegpu.linalg solve timed after a warm-up, with what last_solve_info says."""
    solve()
    seconds, result = timed(solve, cupy, repeat)
    used = sg.linalg.last_solve_info()
    x = result[0]
    return {
        "seconds": seconds,
        "iterations": used.iterations,
        "info": int(result[1]),  # info, or lsqr's istop
        "graphs": used.graphs,
        "why": used.graphs_reason,
        "residual": float(cupy.linalg.norm(b - A @ x) / cupy.linalg.norm(b)),
    }


def cupyx_cg(S, b, M_host, args, cupy):
    import cupyx.scipy.sparse as cusp
    import cupyx.scipy.sparse.linalg as cuspl

    A = cusp.csr_matrix(S)
    M = None if M_host is None else cusp.csr_matrix(M_host)
    tol = {"rtol" if "rtol" in inspect.signature(cuspl.cg).parameters else "tol": args.rtol}
    count = []
    cuspl.cg(A, b, M=M, callback=lambda xk: count.append(1), **tol)
    seconds, (x, info) = timed(lambda: cuspl.cg(A, b, M=M, **tol), cupy, args.repeat)
    return {
        "seconds": seconds,
        "iterations": len(count),
        "info": int(info),
        "residual": float(cupy.linalg.norm(b - A @ x) / cupy.linalg.norm(b)),
    }


def bench_graphs(args, cupy, report):
    rows = report["graphs"] = []
    for name, S, M_host, kind in problems(args.grids):
        b = cupy.asarray(np.random.default_rng(0).uniform(-1, 1, S.shape[0]))
        A = sg.csr_matrix(S)
        M = None if M_host is None else sg.csr_matrix(M_host)
        row = {"matrix": name, "kind": kind, "n": S.shape[0], "nnz": int(S.nnz)}
        row["graphs"] = ours(A, b, M, args, cupy, True)
        row["plain"] = ours(A, b, M, args, cupy, False)
        row["cupyx"] = cupyx_cg(S, b, M_host, args, cupy)
        row["vs_cupyx"] = row["cupyx"]["seconds"] / row["graphs"]["seconds"]
        row["vs_plain"] = row["plain"]["seconds"] / row["graphs"]["seconds"]
        rows.append(row)
    real = [r["vs_cupyx"] for r in rows if r["kind"] == "real"]
    report["graphs_summary"] = {
        "geomean_vs_cupyx_real": math.exp(np.mean(np.log(real))),
        "geomean_vs_cupyx_all": math.exp(np.mean(np.log([r["vs_cupyx"] for r in rows]))),
        "iterations_identical": all(
            r["graphs"]["iterations"] == r["plain"]["iterations"] for r in rows
        ),
    }


def bench_others(args, cupy, report):
    """bicgstab, minres and lsqr with graphs against without, on the real Laplacians."""
    rows = report["others"] = []
    for name, S, _, kind in problems([]):
        if kind != "real" or name == "bcsstk13":
            continue
        A = sg.csr_matrix(S)
        b = cupy.asarray(np.random.default_rng(0).uniform(-1, 1, S.shape[0]))
        solvers = {
            "bicgstab": lambda graphs, A=A, b=b: sg.linalg.bicgstab(
                A, b, rtol=args.rtol, graphs=graphs
            ),
            "minres": lambda graphs, A=A, b=b: sg.linalg.minres(
                A, b, rtol=args.rtol, graphs=graphs
            ),
            "lsqr": lambda graphs, A=A, b=b: sg.linalg.lsqr(
                A, b, atol=args.rtol, btol=args.rtol, graphs=graphs
            ),
        }
        for solver, run in solvers.items():
            row = {"matrix": name, "solver": solver, "n": S.shape[0], "nnz": int(S.nnz)}
            for graphs in (True, False):
                solve = functools.partial(run, graphs)
                row["graphs" if graphs else "plain"] = timed_solve(solve, A, b, cupy, args.repeat)
            row["vs_plain"] = row["plain"]["seconds"] / row["graphs"]["seconds"]
            row["iterations_identical"] = row["plain"]["iterations"] == row["graphs"]["iterations"]
            rows.append(row)


def bench_gmres(args, cupy, report):
    """gmres with graphs, without, and cupyx's gmres, on the Laplacians and cage10."""
    import cupyx.scipy.sparse as cusp
    import cupyx.scipy.sparse.linalg as cuspl

    rows = report["gmres"] = []
    cage10 = sp.csr_matrix(scipy.io.mmread(sg.datasets.path("cage10")))
    cases = [(name, S) for name, S, _, kind in problems([]) if name != "bcsstk13"]
    for name, S in [*cases, ("cage10", cage10)]:
        A = sg.csr_matrix(S)
        b = cupy.asarray(np.random.default_rng(0).uniform(-1, 1, S.shape[0]))
        row = {"matrix": name, "n": S.shape[0], "nnz": int(S.nnz), "restart": args.restart}
        for label, graphs in (("graphs", True), ("plain", False), ("auto", "auto")):
            run = functools.partial(sg.linalg.gmres, A, b, rtol=args.rtol, restart=args.restart,
                                    graphs=graphs)  # fmt: skip
            row[label] = timed_solve(run, A, b, cupy, args.repeat)
        C = cusp.csr_matrix(S)
        tol = {"rtol" if "rtol" in inspect.signature(cuspl.gmres).parameters else "tol": args.rtol}
        theirs = functools.partial(cuspl.gmres, C, b, restart=args.restart,
                                   maxiter=10 * S.shape[0], **tol)  # fmt: skip
        theirs()
        seconds, (x, info) = timed(theirs, cupy, args.repeat)
        row["cupyx"] = {
            "seconds": seconds,
            "info": int(info),
            "residual": float(cupy.linalg.norm(b - C @ x) / cupy.linalg.norm(b)),
        }
        row["vs_plain"] = row["plain"]["seconds"] / row["graphs"]["seconds"]
        row["vs_cupyx"] = row["cupyx"]["seconds"] / row["graphs"]["seconds"]
        row["auto_vs_plain"] = row["plain"]["seconds"] / row["auto"]["seconds"]
        row["auto_vs_cupyx"] = row["cupyx"]["seconds"] / row["auto"]["seconds"]
        row["iterations_identical"] = (
            row["plain"]["iterations"] == row["graphs"]["iterations"] == row["auto"]["iterations"]
        )
        rows.append(row)


def scrambled_mesh(grid, seed=0):
    S = sp.coo_matrix(stencil_3d(grid))
    perm = np.random.default_rng(seed).permutation(S.shape[0])
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.shape[0])
    return sp.csr_matrix((S.data, (inverse[S.row], inverse[S.col])), shape=S.shape)


def bench_reorder(args, cupy, report):
    S = scrambled_mesh(args.mesh_grid)
    b = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, S.shape[0]))
    entry = report["reorder"] = {"grid": args.mesh_grid, "n": S.shape[0], "nnz": int(S.nnz)}
    answers = {}
    for label in ("rcm", None):
        A = sg.csr_matrix(S)
        first, _ = timed(lambda a=A, r=label: sg.linalg.cg(a, b, rtol=args.rtol, reorder=r), cupy)
        seconds, (x, info) = timed(
            lambda a=A, r=label: sg.linalg.cg(a, b, rtol=args.rtol, reorder=r), cupy, args.repeat
        )
        used = sg.linalg.last_solve_info()
        answers[label] = x
        entry[str(label)] = {
            "first_solve_seconds": first,
            "seconds": seconds,
            "iterations": used.iterations,
            "info": info,
            "why": used.reorder_reason,
            "residual": float(cupy.linalg.norm(b - A @ x) / cupy.linalg.norm(b)),
        }
    entry["speedup"] = entry["None"]["seconds"] / entry["rcm"]["seconds"]
    entry["speedup_first_solve"] = (
        entry["None"]["first_solve_seconds"] / entry["rcm"]["first_solve_seconds"]
    )
    entry["relative_difference"] = float(
        cupy.linalg.norm(answers["rcm"] - answers[None]) / cupy.linalg.norm(answers[None])
    )
    # where the first reordered solve's extra time goes (host work, timed apart)
    start = time.perf_counter()
    perm = _reorder.rcm_permutation(S)
    entry["rcm_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    _reorder.permute(S, perm)
    entry["permute_seconds"] = time.perf_counter() - start


def ordering_seconds(A, cupy) -> float:
    """Wall time of what ``reorder="auto"`` pays to reorder A: its cached RCM ordering."""
    from sparsegpu.linalg import _options

    matrix = sg.csr_matrix(A)
    seconds, _ = timed(lambda: _options.cached_rcm(matrix, symmetric=True), cupy)
    return seconds


def bench_reorder_rule(args, cupy, report):
    from sparsegpu.linalg import _options

    entry = report["reorder_rule"] = {"fit": [], "model_before": _options.ORDERING_S_PER_NONZERO}
    for grid in args.fit_grids:
        S = scrambled_mesh(grid)
        entry["fit"].append({"grid": grid, "nnz": int(S.nnz), "seconds": ordering_seconds(S, cupy)})
    nnz = np.array([f["nnz"] for f in entry["fit"]], dtype=np.float64)
    seconds = np.array([f["seconds"] for f in entry["fit"]])
    fitted = float(nnz @ seconds / (nnz @ nnz))
    entry["seconds_per_nonzero"] = fitted
    _options.ORDERING_S_PER_NONZERO = fitted  # the rest of the section uses this run's fit

    S = scrambled_mesh(args.rule_grid, seed=3)  # held out: a size and numbering not fitted
    b = cupy.asarray(np.random.default_rng(2).uniform(-1, 1, S.shape[0]))
    entry.update(grid=args.rule_grid, n=S.shape[0], nnz=int(S.nnz), solves=args.rule_solves)
    entry["ordering_estimate_seconds"] = fitted * S.nnz
    entry["ordering_seconds"] = ordering_seconds(S, cupy)  # the estimate's error, held out
    warm = sg.csr_matrix(scrambled_mesh(12))  # kernels compiled before any timing
    for label in (None, "rcm", "auto"):
        sg.linalg.cg(warm, cupy.ones(warm.shape[0]), rtol=args.rtol, reorder=label)
    for label in (None, "rcm", "auto"):
        A = sg.csr_matrix(S)
        runs = []
        for _ in range(args.rule_solves):
            wall, (x, info) = timed(
                lambda a=A, r=label: sg.linalg.cg(a, b, rtol=args.rtol, reorder=r), cupy
            )
            used = sg.linalg.last_solve_info()
            runs.append(
                {"seconds": wall, "info": info, "iterations": used.iterations,
                 "reordered": used.reorder == "rcm", "why": used.reorder_reason,
                 "residual": float(cupy.linalg.norm(b - A @ x) / cupy.linalg.norm(b))}
            )  # fmt: skip
        entry[str(label)] = runs
    totals = {k: np.cumsum([r["seconds"] for r in entry[k]]) for k in ("None", "rcm", "auto")}
    best = np.minimum(totals["None"], totals["rcm"])
    entry["auto_over_hindsight"] = [float(v) for v in totals["auto"] / best]
    entry["auto_reordered_at"] = next(
        (k + 1 for k, r in enumerate(entry["auto"]) if r["reordered"]), None
    )


@contextmanager
def pageable_copies(cupy):
    """The copies as they were before the pinned staging (for the comparison)."""
    upload, download = _staging.upload, _staging.download
    _staging.upload = lambda x, dtype, owner: cupy.asarray(np.ascontiguousarray(x, dtype=dtype))
    _staging.download = lambda y: y.get()
    try:
        yield
    finally:
        _staging.upload, _staging.download = upload, download


@contextmanager
def staging_only(cupy):
    """x always copied into the staging buffer, never page-locked in place (before 2026-11)."""
    threshold = _staging.REGISTER_MIN_BYTES
    _staging.REGISTER_MIN_BYTES = math.inf
    try:
        yield
    finally:
        _staging.REGISTER_MIN_BYTES = threshold


COPY_MODES = {
    "pinned": ("x page-locked in place from its second product, pinned results", None),
    "staging": ("x copied through the pinned staging buffer, pinned results", staging_only),
    "pageable": ("pageable copies both ways", pageable_copies),
}


def bench_numpy_path(args, cupy, report):
    """scipy's cg on scipy's matrix, on a free product and on ours in each copy mode, timed
    in alternation (one solve of each per round, the order rotating), so a slow stretch of
    the host falls on all of them alike."""
    S = sp.csr_matrix(stencil_3d(args.numpy_grid))
    b = np.random.default_rng(2).uniform(-1, 1, S.shape[0])
    tol = {"rtol" if "rtol" in inspect.signature(spl.cg).parameters else "tol": 1e-30}
    entry = report["numpy_path"] = {
        "n": S.shape[0],
        "nnz": int(S.nnz),
        "iterations": args.iterations,
        "rounds": args.numpy_rounds,
        "timing": "wall median of one solve per round, the solves in alternation",
    }
    # scipy's own vector work: the same iterations with a product that costs nothing (it
    # returns one precomputed vector), the floor of any matrix on this path
    q = S @ b
    free = spl.LinearOperator(S.shape, matvec=lambda v: q, dtype=S.dtype)
    A = sg.csr_matrix(S)
    A @ b  # the upload and the plan, once
    solvers = {"scipy_alone": S, "vector_work": free}
    solvers.update(dict.fromkeys(COPY_MODES, A))
    answers = {}

    def solve(label):
        context = COPY_MODES[label][1] if label in COPY_MODES else None
        with context(cupy) if context is not None else nullcontext():
            answers[label], _ = spl.cg(solvers[label], b, maxiter=args.iterations, **tol)

    timings = measure.host_time_interleaved(
        {label: functools.partial(solve, label) for label in solvers},
        warmup=1,
        repeat=args.numpy_rounds,
    )
    scipy_seconds = timings["scipy_alone"].median_ms / 1e3
    x_scipy = answers["scipy_alone"]
    for label, timing in timings.items():
        seconds = timing.median_ms / 1e3
        entry[label] = {"seconds": seconds, "samples_ms": list(timing.samples_ms)}
        if label != "scipy_alone":
            entry[label]["vs_scipy"] = scipy_seconds / seconds
        if label in COPY_MODES:
            entry[label]["what"] = COPY_MODES[label][0]
            x = answers[label]
            entry[label]["relative_difference"] = float(
                np.linalg.norm(x - x_scipy) / np.linalg.norm(x_scipy)
            )


def markdown(report) -> str:
    lines = [
        f"# Issue 15 on {report['device']}",
        "",
        f"CG to rtol {report['rtol']}: time to solution (wall median of {report['repeat']}).",
        "",
        "| matrix | kind | n | nnz | iterations (graphs / plain / cupyx) | graphs ms | plain ms "
        "| cupyx ms | vs plain | vs cupyx |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.get("graphs", []):
        g, p, c = r["graphs"], r["plain"], r["cupyx"]
        lines.append(
            f"| {r['matrix']} | {r['kind']} | {r['n']:,} | {r['nnz']:,} | {g['iterations']} / "
            f"{p['iterations']} / {c['iterations']} | {g['seconds'] * 1e3:.2f} | "
            f"{p['seconds'] * 1e3:.2f} | {c['seconds'] * 1e3:.2f} | {r['vs_plain']:.2f}x | "
            f"{r['vs_cupyx']:.2f}x |"
        )
    summary = report.get("graphs_summary")
    if summary:
        lines += [
            "",
            f"Geomean vs cupyx: real {summary['geomean_vs_cupyx_real']:.2f}x, all "
            f"{summary['geomean_vs_cupyx_all']:.2f}x; iteration counts identical with and "
            f"without graphs: {summary['iterations_identical']}.",
        ]
    others = report.get("others")
    if others:
        lines += [
            "",
            "bicgstab, minres and lsqr to the same tolerance, with graphs against without:",
            "",
            "| matrix | solver | iterations (graphs / plain) | graphs ms | plain ms | vs plain |",
            "|---|---|---|---|---|---|",
        ]
        for r in others:
            g, p = r["graphs"], r["plain"]
            lines.append(
                f"| {r['matrix']} | {r['solver']} | {g['iterations']} / {p['iterations']} | "
                f"{g['seconds'] * 1e3:.2f} | {p['seconds'] * 1e3:.2f} | {r['vs_plain']:.2f}x |"
            )
    gmres_rows = report.get("gmres")
    if gmres_rows:
        lines += [
            "",
            f"gmres (restart {gmres_rows[0]['restart']}) to the same tolerance: graphs=True (a "
            "restart cycle per graph replay), graphs=False (the same kernels launched one by "
            "one), graphs='auto' (the default: captures when the first cycle predicts two or "
            "more to go), and cupyx:",
            "",
            "| matrix | n | nnz | inner iterations | graphs ms | plain ms | auto ms (captured) "
            "| cupyx ms | graphs vs plain | auto vs plain | auto vs cupyx |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in gmres_rows:
            g, p, a, c = r["graphs"], r["plain"], r["auto"], r["cupyx"]
            same = "" if r["iterations_identical"] else " (differ)"
            lines.append(
                f"| {r['matrix']} | {r['n']:,} | {r['nnz']:,} | {g['iterations']}{same} | "
                f"{g['seconds'] * 1e3:.2f} | {p['seconds'] * 1e3:.2f} | "
                f"{a['seconds'] * 1e3:.2f} ({'yes' if a['graphs'] else 'no'}) | "
                f"{c['seconds'] * 1e3:.2f} | {r['vs_plain']:.2f}x | {r['auto_vs_plain']:.2f}x | "
                f"{r['auto_vs_cupyx']:.2f}x |"
            )
    entry = report.get("reorder")
    if entry and "speedup" in entry:
        lines += [
            "",
            f"Random-order 3-D 7-point mesh, {entry['n']:,} rows, {entry['nnz']:,} nonzeros:",
            "",
            "| reorder | iterations | solve ms | first solve ms (with sg.reorder) |",
            "|---|---|---|---|",
        ]
        for label in ("rcm", "None"):
            e = entry[label]
            lines.append(
                f"| {label} | {e['iterations']} | {e['seconds'] * 1e3:.1f} | "
                f"{e['first_solve_seconds'] * 1e3:.1f} |"
            )
        lines += [
            "",
            f"rcm vs None: {entry['speedup']:.2f}x (solve), {entry['speedup_first_solve']:.2f}x "
            "(first solve); relative difference of the answers "
            f"{entry['relative_difference']:.1e}.",
        ]
        if "rcm_seconds" in entry:
            lines.append(
                f"Of the first solve's extra time: the ordering (symmetrized pattern and "
                f"reverse Cuthill-McKee, on the host) {entry['rcm_seconds']:.1f} s, the "
                f"permuted copy (`sg.reorder`'s, on the GPU) {entry['permute_seconds']:.1f} s."
            )
    lines += _rule_markdown(report.get("reorder_rule"))
    entry = report.get("numpy_path")
    if entry and "pageable" in entry:
        lines += [
            "",
            f"scipy.sparse.linalg.cg, numpy vectors, {entry['n']:,} rows, "
            f"{entry['iterations']} iterations"
            + (f" ({entry['timing']}, {entry['rounds']} rounds):" if "timing" in entry else ":"),
            "",
            "| matrix | ms / iteration | vs scipy alone |",
            "|---|---|---|",
            f"| scipy | {entry['scipy_alone']['seconds'] / entry['iterations'] * 1e3:.2f} | 1 |",
        ]
        if "vector_work" in entry:
            e = entry["vector_work"]
            lines.append(
                f"| (scipy's vector work alone: a product that costs nothing) | "
                f"{e['seconds'] / entry['iterations'] * 1e3:.2f} | {e['vs_scipy']:.2f}x |"
            )
        for label, (what, _) in COPY_MODES.items():
            if label not in entry:
                continue
            e = entry[label]
            lines.append(
                f"| sparsegpu, {what} | {e['seconds'] / entry['iterations'] * 1e3:.2f} | "
                f"{e['vs_scipy']:.2f}x |"
            )
    for section, error in report.get("errors", {}).items():
        lines += ["", f"**{section} failed**: `{error.splitlines()[-1]}`"]
    return "\n".join(lines) + "\n"


def _rule_markdown(entry) -> list[str]:
    if not entry or "auto_over_hindsight" not in entry:
        return []
    fit = ", ".join(f"{f['grid']}^3 ({f['nnz']:,} nnz) {f['seconds']:.2f} s" for f in entry["fit"])
    lines = [
        "",
        f'`reorder="auto"`: the ordering\'s cost fitted on random-order 7-point meshes ({fit}): '
        f"{entry['seconds_per_nonzero'] * 1e9:.1f} ns a nonzero. Held out: a random-order "
        f"7-point mesh, {entry['n']:,} rows, {entry['nnz']:,} nonzeros, ordering estimated "
        f"{entry['ordering_estimate_seconds']:.2f} s, measured {entry['ordering_seconds']:.2f} "
        f"s; {entry['solves']} cg solves of one matrix each:",
        "",
        "| reorder | first solve s | tenth solve s | total s | total / better in hindsight |",
        "|---|---|---|---|---|",
    ]
    best = [min(a, b) for a, b in zip(*(np.cumsum([r["seconds"] for r in entry[k]])
                                         for k in ("None", "rcm")), strict=True)]  # fmt: skip
    for label in ("None", "rcm", "auto"):
        runs = entry[label]
        total = sum(r["seconds"] for r in runs)
        tenth = runs[9]["seconds"] if len(runs) >= 10 else float("nan")
        lines.append(
            f"| {label} | {runs[0]['seconds']:.3f} | {tenth:.3f} | {total:.2f} | "
            f"{total / best[-1]:.2f}x |"
        )
    worst = max(entry["auto_over_hindsight"])
    lines += [
        "",
        f"auto reordered at solve {entry['auto_reordered_at']}; over the first k solves, k = "
        f"1..{entry['solves']}, auto took at most {worst:.2f}x the better of None and rcm "
        "in hindsight.",
    ]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for JSON and .md")
    parser.add_argument("--name", default="solver_graphs_h200")
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--grids",
        type=lambda text: [int(g) for g in text.split(",")],
        default=[24, 50, 80, 104],
        help="Poisson grids (0.1-8M nonzeros)",
    )
    parser.add_argument("--mesh-grid", type=int, default=150, help="150^3 x 7 = 23.6M nonzeros")
    parser.add_argument("--numpy-grid", type=int, default=117, help="117^3 = 1.6M rows")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--numpy-rounds", type=int, default=7, help="numpy path: solves each")
    parser.add_argument("--restart", type=int, default=20, help="gmres's restart")
    parser.add_argument(
        "--fit-grids",
        type=lambda text: [int(g) for g in text.split(",")],
        default=[60, 100, 140],
        help="reorder_rule: the meshes the ordering's cost is fitted on",
    )
    parser.add_argument("--rule-grid", type=int, default=200, help="200^3 x 7 = 56M nonzeros")
    parser.add_argument("--rule-solves", type=int, default=10)
    parser.add_argument("--sections", default="graphs,others,gmres,reorder,reorder_rule,numpy_path")
    args = parser.parse_args(argv)
    from sparsegpu.device import _cuda

    cupy = _cuda.cupy_or_none()
    if cupy is None:
        raise SystemExit(f"no GPU: {_cuda.unavailable_reason()}")
    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "device": _cuda.device_info().name,
        "versions": _cuda.versions(),
        "rtol": args.rtol,
        "repeat": args.repeat,
        "errors": {},
    }
    sections = {
        "graphs": bench_graphs,
        "others": bench_others,
        "gmres": bench_gmres,
        "reorder": bench_reorder,
        "reorder_rule": bench_reorder_rule,
        "numpy_path": bench_numpy_path,
    }
    for name in args.sections.split(","):
        start = time.perf_counter()
        try:
            sections[name](args, cupy, report)
        except Exception:
            report["errors"][name] = traceback.format_exc()
        report.setdefault("section_seconds", {})[name] = time.perf_counter() - start
        (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1, default=str))
    table = markdown(report)
    (args.out / f"{args.name}.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
