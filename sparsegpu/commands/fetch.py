"""``sparsegpu fetch``: download matrices of the SuiteSparse collection into the cache."""

from __future__ import annotations

from ..cli import CommandError
from ..io import suitesparse

HELP = "download SuiteSparse matrices (Group/Name) into the local cache"


def add_arguments(parser) -> None:
    parser.add_argument("names", nargs="+", metavar="NAME", help="'Group/Name', e.g. HB/bcsstk13")
    parser.add_argument(
        "--data-dir",
        help=f"cache directory (default: ${suitesparse.DATA_DIR_ENV} or the user cache)",
    )
    parser.add_argument("--refresh", action="store_true", help="download again even if cached")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    for name in args.names:
        try:
            path = suitesparse.fetch(
                name,
                data_dir=args.data_dir,
                refresh=args.refresh,
                progress=not args.no_progress,
            )
        except (ValueError, OSError) as exc:
            raise CommandError(f"{name}: {exc}", status=1) from None
        print(path)
    return 0
