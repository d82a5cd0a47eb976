"""Terminal output shared by every command: rich tables and progress bars.

Commands print through :func:`console` and build tables with :func:`table`, so that
``sparsegpu info``, ``bench``, ``autotune``, ``fetch`` and ``probe`` look alike and all
degrade to plain text when the output is not a terminal (CI logs, pipes).
"""

from __future__ import annotations

import functools
import os
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

# Width when the output is a file or a pipe (CI logs, `| tee`): rich would use 80 and cut
# the benchmark tables' columns; COLUMNS, when set, wins as usual.
PIPED_WIDTH = 160


@functools.cache
def console(stderr: bool = False) -> Console:
    """The shared console (stdout) or error console (stderr)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if os.environ.get("COLUMNS") or stream.isatty() else PIPED_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=False, markup=False, width=width)


def table(title: str | None, columns: list[str], rows: list[list], right: set[str] = ()):
    """A rich Table with the given columns; columns named in ``right`` are right-aligned."""
    t = Table(title=title, title_justify="left", header_style="bold")
    for name in columns:
        t.add_column(name, justify="right" if name in right else "left")
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row))
    return t


def progress(transient: bool = False, transfer: bool = False) -> Progress:
    """A progress bar on stderr: count, elapsed and remaining time, or, with ``transfer``,
    bytes, speed and remaining time (downloads)."""
    if transfer:
        columns = (DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    else:
        columns = (MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        *columns,
        console=console(stderr=True),
        transient=transient,
    )


def group_by_reason(reasons: dict[str, str]) -> list[tuple[list[str], str]]:
    """``{name: reason}`` as ``[(names, reason)]``, one entry per distinct reason, so that
    the reason eight GPU backends share (no GPU) is printed once."""
    grouped: dict[str, list[str]] = {}
    for name, reason in reasons.items():
        grouped.setdefault(reason, []).append(name)
    return [(names, reason) for reason, names in grouped.items()]
