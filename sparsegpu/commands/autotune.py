"""``sparsegpu autotune``: find the fastest policy of every backend on this GPU.

Tunes the matrices given (Matrix Market files, bundled or synthetic names, SuiteSparse
names like ``HB/bcsstk13``, resolved as ``sparsegpu bench`` does) or, when none is
given, a default suite with one synthetic matrix per row-length class, and writes the
winners to the tuning cache, which selection consults for policies and for ``auto``.
Prints a table of the winners (GB/s, gain over the untuned default); ``--plot FILE``
draws time versus block size per backend (as in G-DEP's K20 tuning of the CSR vector
kernel, "Kepler explained, part 2", G-DEP high-speed computing notes no. 25).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path

import numpy as np

from .._console import console, progress, table
from ..backends import canonical_name
from ..backends.policy import format_knobs
from ..cli import CommandError, add_backend_arguments, add_matrix_arguments, require_matplotlib
from ..engine import _registry

HELP = "tune every backend's launch policy on this GPU and remember the winners"

# The default run must finish within two minutes on an H200, matrix generation included.
DEFAULT_SUITE_BUDGET_S = 90.0


def default_suite(scale: str = "full") -> dict:
    """One synthetic matrix per row-length class: ``{name: (row class, factory)}``.

    ``"full"``: 13 to 23 million nonzeros each, enough to reach the bandwidth regime of
    an H200 (products of tens of microseconds) while the whole default run stays under
    two minutes. ``"small"``: the same classes at CPU-test sizes.
    """
    from ..datasets import synthetic

    sizes = {
        "full": {
            "grid2d": 2048,
            "grid3d": 96,
            "long_rows": 40_000,
            "scattered_rows": 1_000_000,
            "power_rows": 2_000_000,
        },
        "small": {
            "grid2d": 64,
            "grid3d": 12,
            "long_rows": 500,
            "scattered_rows": 10_000,
            "power_rows": 20_000,
        },
    }
    if scale not in sizes:
        raise ValueError(f"scale={scale!r}; use 'full' or 'small'")
    n = sizes[scale]
    return {
        f"stencil2d_{n['grid2d']}": ("short", lambda: synthetic.stencil_2d(n["grid2d"])),
        f"stencil3d27_{n['grid3d']}": (
            "medium",
            lambda: synthetic.stencil_3d(n["grid3d"], points=27),
        ),
        f"uniform_{n['long_rows']}_x400": (
            "long",
            lambda: synthetic.uniform_random(n["long_rows"], 400, n_cols=max(n["long_rows"], 4000)),
        ),
        f"uniform_{n['scattered_rows']}_x16": (
            "scattered",
            lambda: synthetic.uniform_random(n["scattered_rows"], 16),
        ),
        f"powerlaw_{n['power_rows']}": (
            "irregular",
            lambda: synthetic.power_law(
                n["power_rows"], mean=8.0, max_row=min(100_000, n["power_rows"] // 4)
            ),
        ),
    }


def add_arguments(parser) -> None:
    add_matrix_arguments(parser, "a synthetic matrix per row-length class")
    add_backend_arguments(
        parser,
        "comma-separated backends to tune (default: every available GPU backend)",
        "comma-separated value dtypes (float32,float64,complex64,complex128, and "
        "float16,bfloat16); default: each matrix's own dtype (float64 for the default suite)",
    )
    parser.add_argument(
        "--index-dtype", choices=("int32", "int64"), help="index dtype (default: the matrix's)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help=f"time limit for the whole run, shared among the matrices (default: none; "
        f"{DEFAULT_SUITE_BUDGET_S:g} s for the default suite)",
    )
    parser.add_argument(
        "--repeat", type=int, default=20, help="timed samples per candidate (median taken)"
    )
    parser.add_argument("--cache-dir", metavar="DIR", help="tuning cache directory to use")
    parser.add_argument(
        "--no-save", action="store_true", help="measure only; leave the tuning cache as it is"
    )
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    parser.add_argument(
        "--plot", metavar="FILE", help="draw time versus block size per backend (matplotlib)"
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--show", action="store_true", help="list the tuning cache and exit")
    what.add_argument("--clear", action="store_true", help="delete the tuning cache and exit")


# --------------------------------------------------------------------------- checks
def _check_options(args) -> None:
    """Everything that can be judged before touching a GPU or a file."""
    if args.budget is not None and not (args.budget > 0 and math.isfinite(args.budget)):
        raise CommandError(f"--budget {args.budget:g} must be a positive number of seconds")
    if args.repeat < 1:
        raise CommandError(f"--repeat {args.repeat} must be at least 1")
    if (args.show or args.clear) and args.matrices:
        flag = "--show" if args.show else "--clear"
        raise CommandError(f"{flag} takes no MATRIX; run it on its own")
    if args.dtypes:
        from ..backends.base import FLOAT_AND_COMPLEX
        from ..device._dtypes import HALF_DTYPES

        tunable = FLOAT_AND_COMPLEX + HALF_DTYPES
        for name in args.dtypes:
            try:
                ok = np.dtype(name) in tunable
            except TypeError:
                ok = False
            if not ok:
                raise CommandError(
                    f"--dtypes: cannot tune {name!r}; choose from "
                    + ", ".join(str(d) for d in tunable)
                )
    if args.plot:
        require_matplotlib()
        parent = Path(args.plot).expanduser().resolve().parent
        if not parent.is_dir():
            raise CommandError(f"--plot {args.plot}: the directory {parent} does not exist")


def _cache(args):
    from ..engine._tuning_store import TuningCache, TuningCacheError

    try:
        return TuningCache(args.cache_dir) if args.cache_dir else TuningCache()
    except TuningCacheError as exc:
        raise CommandError(f"{exc} (or pass --cache-dir)") from None


def _backends(args) -> list[str]:
    """The backend names to tune; a one-line error when there are none (no GPU)."""
    from ..tuning.autotune import ORACLE, default_backends

    if args.backends is None:
        try:
            return [b.name for b in default_backends()]
        except _registry.BackendUnavailableError as exc:
            raise CommandError(str(exc), status=1) from None
    args.backends = [canonical_name(name) for name in args.backends]
    for name in args.backends:
        if name in (_registry.AUTO, ORACLE):
            raise CommandError(
                f"--backends: {name!r} has nothing to tune; name the backends to tune "
                "(see `sparsegpu info`)"
            )
        try:
            _registry.get_backend(name)
        except _registry.BackendUnavailableError as exc:
            raise CommandError(f"--backends: {str(exc).splitlines()[0]}", status=1) from None
        except ValueError:
            known = ", ".join(n for n in _registry.registered() if n != ORACLE)
            raise CommandError(f"--backends: unknown backend {name!r}; known: {known}") from None
    return list(dict.fromkeys(args.backends))


# ------------------------------------------------------------------------- matrices
def _workload(args):
    """[(name, loader)] to tune, and the total budget (None for no limit).

    Matrices given are resolved like ``sparsegpu bench`` resolves them (file path,
    synthetic or bundled name, SuiteSparse ``Group/Name``); none given: the default suite.
    """
    if args.matrices:
        from .. import bench
        from ..device import _cuda

        try:
            sources = bench.resolve_matrices(args.matrices, gpu=_cuda.cupy_or_none() is not None)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        return [(source.name, source.open) for source in sources], args.budget
    suite = default_suite("full")
    budget = args.budget if args.budget is not None else DEFAULT_SUITE_BUDGET_S
    return [(name, factory) for name, (_, factory) in suite.items()], budget


# --------------------------------------------------------------------------- output
def _knobs_text(knobs: dict) -> str:
    return format_knobs(knobs) or "-"


def _policy_text(policy) -> str:
    return _knobs_text(policy.shown_knobs()) if policy is not None else "-"


def _for_tables(out):
    """``out`` on a terminal; for logs and pipes a 200-column console (rich would use 80)."""
    if out.is_terminal:
        return out
    from rich.console import Console

    return Console(file=out.file, width=200, highlight=False, soft_wrap=False, markup=False)


def _winner_rows(reports) -> list[list]:
    rows = []
    for report in reports:
        for dtype in report.dtypes:
            overall = report.winner(dtype)
            for w in sorted(
                (w for w in report.winners if w.value_dtype == dtype),
                key=lambda w: w.best.time_ms,
            ):
                rows.append(
                    [
                        report.matrix,
                        report.row_class,
                        dtype,
                        ("* " if w is overall else "") + w.backend,
                        _policy_text(w.best.policy),
                        f"{w.best.time_ms * 1e3:.1f}",
                        f"{w.best.gb_per_s:.0f}",
                        f"{w.untuned.time_ms * 1e3:.1f}" if w.untuned is not None else None,
                        f"{w.gain:.2f}x" if w.gain is not None else None,
                    ]
                )
    return rows


def _print_reports(reports, args, cache) -> None:
    out = console()
    columns = ["matrix", "rows", "dtype", "backend", "tuned policy", "µs", "GB/s"]
    columns += ["default µs", "gain"]
    _for_tables(out).print(
        table(
            "Autotune winners (* fastest overall)",
            columns,
            _winner_rows(reports),
            right={"µs", "GB/s", "default µs", "gain"},
        )
    )
    err = console(stderr=True)
    for report in reports:
        for r in report.problems():
            err.print(
                f"{report.matrix}: {r.backend} {r.value_dtype} {_policy_text(r.policy)} "
                f"{r.status}: {r.message} (excluded)",
                soft_wrap=True,
            )
        skipped = {(r.backend, r.value_dtype, r.message) for r in report.results if not r.policy}
        for backend, dtype, message in sorted(skipped):
            err.print(f"{report.matrix}: {backend} {dtype} skipped: {message}", soft_wrap=True)
        if report.budget_exhausted:
            err.print(
                f"{report.matrix}: the time budget ran out before every candidate ran",
                soft_wrap=True,
            )
        if report.cache_error:
            err.print(f"{report.matrix}: not saved: {report.cache_error}", soft_wrap=True)
    if args.no_save:
        out.print("not saved (--no-save)")
    elif any(r.cache_path for r in reports):
        out.print(f"saved to {cache.path}", soft_wrap=True)


def _show(cache, as_json: bool) -> int:
    listing = cache.entries()
    if as_json:
        print(
            json.dumps(
                [{"context": vars(c), "entry": e.to_json()} for c, e in listing],
                indent=2,
            )
        )
        return 0
    out = console()
    if not listing:
        out.print(f"the tuning cache {cache.path} is empty", soft_wrap=True)
        return 0
    rows = [
        [
            f"{c.device} ({c.compute_capability})",
            e.backend,
            e.value_dtype,
            e.index_dtype,
            e.row_class,
            _knobs_text(e.knobs),
            f"{e.gb_per_s:.0f}",
            f"{e.gain:.2f}x" if e.gain is not None else None,
            e.matrix,
            e.tuned_at,
        ]
        for c, e in sorted(listing, key=lambda ce: (ce[0].device, ce[1].key))
    ]
    columns = ["device", "backend", "dtype", "index", "rows", "policy", "GB/s", "gain"]
    columns += ["tuned on", "when"]
    _for_tables(out).print(
        table(f"Tuning cache {cache.path}", columns, rows, right={"GB/s", "gain"})
    )
    return 0


# ---------------------------------------------------------------------------- run
def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    console(stderr=True).print(f"sparsegpu autotune: warning: {message}", soft_wrap=True)


def run(args) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = _one_line_warning
        return _run(args)


def _run(args) -> int:
    _check_options(args)
    cache = _cache(args)
    if args.show:
        return _show(cache, args.json)
    if args.clear:
        removed = cache.clear()
        console().print(
            f"removed {cache.path}" if removed else f"no tuning cache at {cache.path}",
            soft_wrap=True,
        )
        return 0
    backends = _backends(args)
    workload, budget = _workload(args)

    from ..tuning.autotune import autotune

    reports = []
    start = time.monotonic()
    with progress(transient=True) as bar:
        task = bar.add_task("autotune", total=None)

        def update(done, total, label):
            bar.update(task, completed=done, total=total, description=label)

        for i, (name, load) in enumerate(workload):
            bar.update(task, completed=0, total=None, description=f"{name}: loading")
            share = None
            try:
                A = load()
                if budget is not None:
                    share = max(budget - (time.monotonic() - start), 0.0) / (len(workload) - i)
                report = autotune(
                    A,
                    backends=backends,
                    dtypes=args.dtypes,
                    budget=share,
                    index_dtype=args.index_dtype,
                    repeat=args.repeat,
                    progress=update,
                    cache=cache,
                    save=not args.no_save,
                    name=name,
                )
            except (OSError, TypeError, ValueError, MemoryError) as exc:
                from ..bench import BenchError

                named = isinstance(exc, BenchError)  # says its matrix already
                raise CommandError(str(exc) if named else f"{name}: {exc}") from None
            reports.append(report)
    if args.plot:
        from ..tuning.plot import plot_block_size_sweep

        plot_block_size_sweep(reports, args.plot)
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        _print_reports(reports, args, cache)
        if args.plot:
            console().print(f"plot written to {args.plot}", soft_wrap=True)
    return 0
