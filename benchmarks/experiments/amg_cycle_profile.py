"""Where a multigrid V-cycle spends its time, level by level (issue 46: the circuit
stand-in's cycle took about 1.1 ms an iteration at 1.59M unknowns, which kept multigrid-cg
at 2.4-2.95x Jacobi-cg against the bar's 3x).

On the ``fit`` instances of ``benchmarks.amg`` only (never the held-out ones), for each
problem:

* each level's rows and stored entries, its time in a cycle with and without the levels
  below (the cycle run uncaptured, each level's entry and exit marked by CUDA events,
  medians over ``--repeat`` cycles), and how many launches it makes;
* the level's SpMV alone (median of ``--repeat``) and the bytes a CSR SpMV must move
  (values, column indices, row offsets, x once and y), as GB/s: how far the products are
  from the memory's speed;
* the whole cycle uncaptured and, from a solve (whose iterations replay the cycle inside
  CUDA graphs), the time an iteration: the difference is launch overhead a graph removes;
* Jacobi-cg on the same instance (the bar's yardstick), and with ``--cprofile`` the host
  functions the first set-up spent its time in (cProfile: it slows the Python it
  watches, so its shares, not its seconds, are what to read);
* with ``--blocks``, cg's solve (multigrid and Jacobi as M) with its graph blocks as
  chosen, with 16 iterations a block, and without graphs;
* with ``--setups N``, N more set-ups of the same matrix (the times, and the host profile
  of the slowest: planning or compiling that one set-up meets);
* with ``--variants``, the set-up, iterations and solve of other ``amg`` options on the
  same instance (smoothers, ``max_coarse``), each against the default.

``--sizes circuit2d=1260`` draws a fit instance (the fit set's seed) at another size: the
held-out set's size, never its draw.

On a machine without a GPU the same runs with NumPy and ``perf_counter`` (a smoke test of
the script; its numbers mean nothing).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.amg_cycle_profile --out FILE.json --md FILE.md
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import io
import pstats
import sys
import time

import numpy as np

from benchmarks import amg, common

DEFAULT_PROBLEMS = ("circuit2d", "poisson3d", "anisotropic2d", "jumping3d_wall")
# amg options tried against the default with --variants (name: keyword arguments)
VARIANTS = {
    "chebyshev degree 2": {"presmoother": ("chebyshev", {"degree": 2, "lower_bound": 0.1}),
                           "postsmoother": ("chebyshev", {"degree": 2, "lower_bound": 0.1})},
    "chebyshev lower 1/30": {"presmoother": ("chebyshev", {"degree": 3, "lower_bound": 1 / 30}),
                             "postsmoother": ("chebyshev", {"degree": 3, "lower_bound": 1 / 30})},
    "max_coarse 2000": {"max_coarse": 2000},
    "max_coarse 1000": {"max_coarse": 1000},
    "max_coarse 100": {"max_coarse": 100},
}  # fmt: skip


class Marks:
    """Moments on the device's stream (CUDA events), or the host clock without a GPU."""

    def __init__(self, xp):
        self.xp = xp

    def mark(self):
        if self.xp is np:
            return time.perf_counter()
        event = self.xp.cuda.Event()
        event.record()
        return event

    def ms(self, start, stop) -> float:
        if self.xp is np:
            return (stop - start) * 1e3
        stop.synchronize()
        return self.xp.cuda.get_elapsed_time(start, stop)


def level_times(cycle, b, out, repeat: int, marks: Marks) -> tuple[list, float]:
    """Median milliseconds of each level with the levels below it (inclusive), and of the
    whole cycle, over ``repeat`` uncaptured cycles."""
    inclusive: dict[int, list] = {}
    original = cycle._level

    def marked(i):
        start = marks.mark()
        original(i)
        inclusive.setdefault(i, []).append((start, marks.mark()))

    cycle._level = marked
    wholes = []
    try:
        for _ in range(repeat):
            start = marks.mark()
            cycle.apply(b, out)
            wholes.append((start, marks.mark()))
    finally:
        del cycle._level  # the class's method again
    levels = [
        float(np.median([marks.ms(a, z) for a, z in inclusive[i]])) for i in sorted(inclusive)
    ]
    return levels, float(np.median([marks.ms(a, z) for a, z in wholes]))


def launches(cycle, b, out) -> list[int]:
    """Launches each level makes in one cycle (products and elementwise steps)."""
    counts: dict[int, int] = {}
    current = [0]
    original_level = cycle._level

    def counted_level(i):
        outer, current[0] = current[0], i
        original_level(i)
        current[0] = outer

    def counting(fn):
        def wrapped(*args, **kwargs):
            counts[current[0]] = counts.get(current[0], 0) + 1
            return fn(*args, **kwargs)

        return wrapped

    steps = cycle.steps
    saved_steps = {n: getattr(steps, n) for n in ("scaled", "jacobi", "residual", "add",
                                                  "chebyshev_start", "chebyshev")}  # fmt: skip
    saved_ops = []
    for work in cycle.work:
        for op in work.operators():
            saved_ops.append((op, op.matvec))
            op.matvec = counting(op.matvec)
    for name, fn in saved_steps.items():
        setattr(steps, name, counting(fn))
    cycle._level = counted_level
    try:
        cycle.apply(b, out)
    finally:
        del cycle._level
        for name in saved_steps:
            delattr(steps, name)
        for op, fn in saved_ops:
            op.matvec = fn
    return [counts.get(i, 0) for i in range(len(cycle.work))]


def spmv(work, repeat: int, marks: Marks) -> tuple[float, float]:
    """Median milliseconds of the level's ``A @ x`` and its GB/s at the bytes a CSR SpMV
    must move."""
    A = work.level.A
    times = []
    work.A.matvec(work.x, out=work.ax)
    for _ in range(repeat):
        start = marks.mark()
        work.A.matvec(work.x, out=work.ax)
        times.append(marks.ms(start, marks.mark()))
    ms = float(np.median(times))
    value = np.dtype(A.dtype).itemsize
    moved = A.nnz * (value + 4) + (A.shape[0] + 1) * 4 + (A.shape[0] + A.shape[1]) * value
    return ms, moved / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")


def profiled(fn):
    """``fn()`` under cProfile: its result and the profiler's ``pstats.Stats``."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        result = fn()
    finally:
        profiler.disable()
    return result, pstats.Stats(profiler)


def profile_text(stats, top: int = 25) -> str:
    """The ``top`` functions by own time and sparsegpu's ``top`` by cumulative time."""
    text = io.StringIO()
    stats.stream = text
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats("sparsegpu", top)  # ours, by what they hold
    return text.getvalue()


def host_profile(fn, top: int = 25):
    """``fn()`` under cProfile: its result and :func:`profile_text`."""
    result, stats = profiled(fn)
    return result, profile_text(stats, top)


def timed_solve(sg, A, b, M, xp, **options):
    """(iterations, seconds) of the second of two solves (the first plans)."""
    sg.linalg.cg(A, b, rtol=amg.RTOL, M=M, **options)
    _, seconds = amg._timed(lambda: sg.linalg.cg(A, b, rtol=amg.RTOL, M=M, **options), xp)
    return int(sg.linalg.last_solve_info().iterations), seconds


# cg's ways of running its iterations compared (name: cg's keyword arguments)
BLOCKINGS = {"default": {}, "16 a block": {"check_every": 16}, "no graphs": {"graphs": False}}


def blockings(sg, A, b, preconditioners, xp) -> list:
    """Each preconditioner's solve under each of :data:`BLOCKINGS` (the block the default
    chose, from ``last_solve_info``)."""
    rows = []
    for label, M in preconditioners.items():
        for name, options in BLOCKINGS.items():
            iterations, seconds = timed_solve(sg, A, b, M, xp, **options)
            used = sg.linalg.last_solve_info()
            rows.append({"M": label, "blocking": name, "iterations": iterations,
                         "seconds": seconds, "block": int(used.block),
                         "graphs": bool(used.graphs)})  # fmt: skip
    return rows


def repeated_setups(sg, A_in, B, xp, count: int) -> dict:
    """``count`` more set-ups of the same matrix (each under cProfile), their seconds, and
    the host profile of the slowest: a set-up far slower than the others is planning or a
    compilation that a user would meet at that call."""
    seconds, slowest = [], (-1.0, None)
    for _ in range(count):
        amg._sync(xp)
        started = time.perf_counter()
        _, text = host_profile(lambda: sg.linalg.amg(A_in, B=B))
        amg._sync(xp)
        seconds.append(time.perf_counter() - started)
        if seconds[-1] > slowest[0]:
            slowest = (seconds[-1], text)
    return {"seconds": seconds, "slowest_profile": slowest[1]}


def variants(sg, A_in, B, A, b, xp, names) -> list:
    """Set-up, iterations and solve of each variant's options (and the default's) on this
    instance, set up afresh in turn (the finest level's plans known by then)."""
    rows = []
    for name in ["default", *names]:
        options = VARIANTS.get(name, {})
        ml, setup = amg._timed(lambda options=options: sg.linalg.amg(A_in, B=B, **options), xp)
        iterations, solve = timed_solve(sg, A, b, ml, xp)
        rows.append({"variant": name, "setup_s": setup, "iterations": iterations,
                     "solve_s": solve, "seconds": setup + solve, "levels": len(ml.levels),
                     "ms_per_iteration": solve * 1e3 / max(iterations, 1)})  # fmt: skip
    return rows


def profile(name: str, size: int, repeat: int, sg, xp, cprofile=False, tried=(),
            blocks=False, setups=0) -> dict:  # fmt: skip
    A_host, B = amg.make_problem(name, size, "fit")
    A_in = sg.bsr_matrix(A_host) if A_host.format == "bsr" else sg.csr_matrix(A_host)
    A = sg.csr_matrix(A_host.tocsr())
    b_host = amg.right_hand_side(A.shape[0])
    b = xp.asarray(b_host)
    A_in @ b  # resident before the set-up, as in benchmarks.amg
    setup_text = None
    if cprofile:
        ml, setup_text = host_profile(lambda: sg.linalg.amg(A_in, B=B))
    else:
        ml = sg.linalg.amg(A_in, B=B)
    phases = dict(ml.setup_seconds)
    jacobi = timed_solve(sg, A, b, sg.diags(1 / A_host.diagonal()), xp)
    marks = Marks(xp)
    sg.linalg.cg(A, b, rtol=amg.RTOL, M=ml)  # plans made, kernels compiled
    (x, _), seconds = amg._timed(lambda: sg.linalg.cg(A, b, rtol=amg.RTOL, M=ml), xp)
    info = sg.linalg.last_solve_info()
    cycle = ml._cycle(np.dtype(A.dtype), capturable=False)
    out = xp.empty(A.shape[0], dtype=A.dtype)
    cycle.apply(b, out)
    inclusive, whole = level_times(cycle, b, out, repeat, marks)
    counts = launches(cycle, b, out)
    levels = []
    for i, work in enumerate(cycle.work):
        below = inclusive[i + 1] if i + 1 < len(inclusive) else 0.0
        row = {
            "rows": int(work.level.A.shape[0]),
            "nnz": int(work.level.A.nnz),
            "inclusive_ms": inclusive[i],
            "own_ms": inclusive[i] - below,
            "launches": counts[i],
        }
        if work.inverse is None:
            row["spmv_ms"], row["spmv_gb_s"] = spmv(work, repeat, marks)
        levels.append(row)
    iterations = int(info.iterations)
    return {
        "problem": f"{name}_{size}",
        "levels": levels,
        "cycle_uncaptured_ms": whole,
        "solve_s": seconds,
        "iterations": iterations,
        "ms_per_iteration": seconds * 1e3 / max(iterations, 1),
        "graphs": bool(info.graphs),
        "relative_residual": amg.relative_residual(A_host.tocsr(), amg._host(x), b_host),
        "setup_phases_s": phases,
        "jacobi_cg": {"iterations": jacobi[0], "seconds": jacobi[1]},
        "setup_profile": setup_text,
        "variants": variants(sg, A_in, B, A, b, xp, tried) if tried else [],
        "setups": repeated_setups(sg, A_in, B, xp, setups),
        "blockings": blockings(sg, A, b, {"amg": ml, "jacobi": sg.diags(1 / A_host.diagonal())}, xp)
        if blocks
        else [],  # fmt: skip
    }


def markdown(rows: list) -> str:
    lines = []
    for row in rows:
        lines += [
            f"### {row['problem']}: {row['iterations']} iterations, "
            f"{row['ms_per_iteration']:.3f} ms an iteration (graphs: {row['graphs']}), "
            f"cycle uncaptured {row['cycle_uncaptured_ms']:.3f} ms; Jacobi-cg "
            f"{row['jacobi_cg']['iterations']} iterations, {row['jacobi_cg']['seconds']:.4f} s",
            "",
            "set-up phases (s): "
            + ", ".join(f"{k} {v:.4f}" for k, v in row["setup_phases_s"].items()),
            "",
            "| level | rows | nnz | own ms | with levels below ms | launches | SpMV ms "
            "| SpMV GB/s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for i, level in enumerate(row["levels"]):
            spmv_ms = level.get("spmv_ms")
            spmv_text = "—" if spmv_ms is None else f"{spmv_ms:.4f} | {level['spmv_gb_s']:.0f}"
            if spmv_ms is None:
                spmv_text += " | —"
            lines.append(
                f"| {i} | {level['rows']:,} | {level['nnz']:,} | {level['own_ms']:.4f} | "
                f"{level['inclusive_ms']:.4f} | {level['launches']} | {spmv_text} |"
            )
        lines.append("")
        if row["variants"]:
            jacobi = row["jacobi_cg"]["seconds"]
            lines += [
                "| variant | levels | set-up s | iterations | solve s | ms/it | x Jacobi-cg |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
            for v in row["variants"]:
                lines.append(
                    f"| {v['variant']} | {v['levels']} | {v['setup_s']:.4f} | {v['iterations']} "
                    f"| {v['solve_s']:.4f} | {v['ms_per_iteration']:.3f} "
                    f"| {jacobi / v['seconds']:.2f}x |"
                )
            lines.append("")
        if row["blockings"]:
            lines += ["| M | blocking | block | iterations | solve s |", "|---|---|---:|---:|---:|"]
            for v in row["blockings"]:
                lines.append(f"| {v['M']} | {v['blocking']} | {v['block'] if v['graphs'] else '—'} "
                             f"| {v['iterations']} | {v['seconds']:.4f} |")  # fmt: skip
            lines.append("")
        if row["setups"]["seconds"]:
            lines += ["set-ups again (s, under cProfile): "
                      + ", ".join(f"{t:.4f}" for t in row["setups"]["seconds"]), "",
                      "the slowest one's host profile:", "", "```",
                      row["setups"]["slowest_profile"].strip(), "```", ""]  # fmt: skip
        if row["setup_profile"]:
            lines += ["first set-up's host profile (cProfile, by own time):", "", "```",
                      row["setup_profile"].strip(), "```", ""]  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=",".join(DEFAULT_PROBLEMS))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--set", default="fit", choices=["fit", "smoke"],
                        help="instances (never the held-out ones)")  # fmt: skip
    parser.add_argument(
        "--sizes", default="", help="NAME=SIZE,...: fit draws at other sizes (e.g. circuit2d=1260)"
    )
    parser.add_argument(
        "--cprofile", action="store_true", help="profile the first set-up's host functions"
    )
    parser.add_argument(
        "--variants", default="", help="comma-separated names of VARIANTS to try, or 'all'"
    )
    parser.add_argument(
        "--blocks",
        action="store_true",
        help="cg's solve with each of BLOCKINGS (graph block sizes)",
    )
    parser.add_argument(
        "--setups",
        type=int,
        default=0,
        help="set up this many more times on the same matrix, profiled",
    )
    parser.add_argument("--out", help="JSON result file")
    parser.add_argument("--md", help="markdown file")
    args = parser.parse_args(argv)
    import sparsegpu as sg

    xp = amg._device()
    if xp is not np:
        amg.warm_up()
    wanted = args.problems.split(",")
    sizes = {}
    for item in filter(None, args.sizes.split(",")):
        name, _, size = item.partition("=")
        sizes[name] = ast.literal_eval(size)
    tried = (
        list(VARIANTS) if args.variants == "all" else list(filter(None, args.variants.split(",")))
    )
    unknown = set(tried) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {sorted(VARIANTS)}")
    rows = []
    for name, size in amg.SETS[args.set]:
        if name in wanted:
            size = sizes.get(name, size)
            rows.append(
                profile(
                    name, size, args.repeat, sg, xp, args.cprofile, tried, args.blocks, args.setups
                )
            )
            common.save_partial({"set": args.set, "results": rows}, args.out)
    common.write_outputs({"set": args.set, "results": rows}, args,
                         lambda result: markdown(result["results"]), None)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
