"""``sparsegpu bench [MATRIX ...]``: every backend and cuSPARSE, timed in one run."""

from __future__ import annotations

import json
from pathlib import Path

from .. import bench
from .._console import console, group_by_reason, progress, table
from ..backends import canonical_name
from ..cli import (
    CommandError,
    add_backend_arguments,
    add_matrix_arguments,
    comma_list,
    positive_int,
    require_matplotlib,
)
from ..device import _cuda

HELP = "time every available backend and cuSPARSE on matrices: ms, GB/s, share of peak, speed-up"


def _backend_names(text: str) -> list[str]:
    """Comma-separated backend names, former names (``adaptive``) mapped to current ones."""
    return [canonical_name(name) for name in comma_list(text)]


def add_arguments(parser) -> None:
    add_matrix_arguments(parser, "the synthetic suite on a GPU, the bundled matrices on a CPU")
    add_backend_arguments(
        parser,
        "comma-separated backends to time ('cupyx' is CuPy's own product); "
        "default: every available one",
        f"comma-separated value dtypes from {', '.join(bench.DTYPE_CHOICES)} (default: float64)",
        names=_backend_names,
        default_dtypes=["float64"],
        metavar="NAMES",
    )
    parser.add_argument(
        "--repeat", type=positive_int, default=20, help="timed samples per row (median kept)"
    )
    parser.add_argument("--json", metavar="FILE", help="write every result to FILE as JSON")
    parser.add_argument("--plot", metavar="FILE", help="draw GB/s per backend per matrix")


def _print(report: bench.BenchReport) -> None:
    out = console()
    columns, rows = bench.results_table(report.to_json())
    gpu = report.machine.get("gpu")
    title = f"sparsegpu bench on {gpu['name'] if gpu else 'the CPU (wall-clock, median)'}"
    out.print(table(title, columns, rows, set(columns[3:]) - {"note"}))
    if report.peak_gb_per_s:
        out.print(f"100% of peak = {report.peak_gb_per_s:,.0f} GB/s ({report.peak_source})")
    for names, reason in group_by_reason(report.unavailable):
        if reason == _cuda.backend_reason():  # the GPU's whole story, once
            reason = f"no usable GPU: {_cuda.unavailable_reason()}"
        out.print(f"{', '.join(names)}: unavailable ({reason})", soft_wrap=True)
    for names, reason in group_by_reason(report.skipped):
        out.print(f"{', '.join(names)}: skipped ({reason})", soft_wrap=True)


def _check_outputs(args) -> None:
    """Fail before the run, not after it, when an output file cannot be written."""
    if args.plot:
        require_matplotlib()
    for flag, target in (("--json", args.json), ("--plot", args.plot)):
        parent = Path(target).expanduser().resolve().parent if target else None
        if parent is not None and not parent.is_dir():
            raise CommandError(f"{flag} {target}: the directory {parent} does not exist")


def run(args) -> int:
    try:  # a matrix that cannot be found fails first, before what --plot needs
        bench.resolve_matrices(args.matrices, gpu=_cuda.cupy_or_none() is not None)
    except bench.BenchError as exc:
        raise CommandError(str(exc)) from None
    _check_outputs(args)
    try:
        with progress(transient=True) as bar:
            report = bench.run(
                args.matrices,
                dtypes=args.dtypes,
                backends=args.backends,
                repeat=args.repeat,
                progress=bar,
            )
    except bench.BenchError as exc:
        raise CommandError(str(exc)) from None
    _print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_json(), f, indent=2)
            f.write("\n")
        console().print(f"results written to {args.json}")
    if args.plot:
        bench.plot(report.to_json(), args.plot)
        console().print(f"plot written to {args.plot}")
    for row in report.failed:
        console(stderr=True).print(
            f"FAILED: {row.backend} on {row.matrix} ({row.dtype}): {row.message}"
        )
    return 1 if report.failed else 0
