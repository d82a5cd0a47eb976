"""The ``sparsegpu`` command: ``info | bench | autotune | fetch | probe``.

Each subcommand is a module in :mod:`sparsegpu.commands` with ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; this file only wires them up.
Errors a user can fix (bad arguments, no GPU, no network, a missing file) print one line
and exit non-zero (2 for a bad request, 1 for what this machine cannot do); only a bug
prints a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("info", "fetch", "bench", "probe", "autotune", "mpibench")


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 2 unless given."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def positive_int(text: str) -> int:
    """argparse type: an int >= 1, with a message naming the bad value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def comma_list(text: str) -> list[str]:
    """An argparse type: a comma-separated list of names, none empty."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return items


def add_matrix_arguments(
    parser, default: str, *, synthetic: bool = True, download: bool = True
) -> None:
    """The positional ``MATRIX`` arguments of a command that reads matrices (resolved by
    :func:`sparsegpu.io.resolve_matrix`, synthetic names by ``sparsegpu.bench``);
    ``default`` says what the command takes without any."""
    names = "a bundled or synthetic name" if synthetic else "a bundled name"
    collection = "a SuiteSparse Group/Name" + ("" if download else " already in the cache")
    parser.add_argument(
        "matrices",
        nargs="*",
        metavar="MATRIX",
        help=f"a .mtx/.mtx.gz/.mtx.bz2/.npz path or a SuiteSparse archive, {names}, or "
        f"{collection} (default: {default})",
    )


def add_backend_arguments(
    parser, backends: str, dtypes: str, *, names=comma_list, default_dtypes=None, metavar=None
) -> None:
    """``--backends`` and ``--dtypes`` of a command that runs backends on value dtypes: each a
    comma-separated list (``names`` reads the backends'), ``backends`` and ``dtypes`` their
    help; ``metavar`` the backends' (``BACKENDS`` when None)."""
    parser.add_argument("--backends", type=names, metavar=metavar, help=backends)
    parser.add_argument(
        "--dtypes", type=comma_list, default=default_dtypes, metavar="DTYPES", help=dtypes
    )


def require_matplotlib() -> None:
    """For ``--plot``: a one-line error when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise CommandError(f"--plot needs matplotlib ({exc}); pip install matplotlib") from None


def expected_errors() -> tuple[type[BaseException], ...]:
    """The library's errors that mean "this machine or this input cannot do that", not a
    bug: no network or file (OSError, DownloadError included), no GPU, no memory, a bad
    benchmark request, an unusable tuning cache. Commands end on them with one line."""
    from .bench import BenchError
    from .engine._registry import BackendUnavailableError
    from .engine._tuning_store import TuningCacheError
    from .measure.probe import NoGPUError

    return (OSError, MemoryError, BackendUnavailableError, BenchError, NoGPUError, TuningCacheError)


def _fail(command: str, exc: BaseException, status: int) -> int:
    """Print ``exc`` as one line (the first of its message) and return ``status``."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    print(f"sparsegpu {command}: {lines[0]}", file=sys.stderr)
    return status


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every option's default, except where there is none (None, False)
    or the help text already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False) or "default" in text:
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="sparsegpu",
        description="scipy.sparse-compatible SpMV on NVIDIA GPUs: inspect, benchmark, tune.",
    )
    parser.add_argument("--version", action="version", version=f"sparsegpu {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f".commands.{name}", __package__)
        p = sub.add_parser(
            name, help=module.HELP, description=module.HELP, formatter_class=HelpFormatter
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sparsegpu`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except CommandError as exc:
        return _fail(args.command, exc, exc.status)
    except expected_errors() as exc:
        return _fail(args.command, exc, 1)
    except KeyboardInterrupt:
        print(f"sparsegpu {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
