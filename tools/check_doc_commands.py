"""Run every shell command of README.md and docs/**/*.rst that needs no GPU and no network.

The commands are the lines of README.md's ```` ```bash ```` / ```` ```console ```` blocks
and of the docs' ``.. code-block:: bash`` / ``console`` blocks (a ``console`` block's
commands are its ``$ `` lines; a line ending in ``\\`` continues on the next). They run
as a reader would run them from a clone: in a temporary clone (with this working tree's files),
each document's commands in order in one shell each, with the virtual environment's
``bin`` first on ``PATH``, each within a time limit. A line is skipped when its trailing
comment starts with

* ``# GPU only`` (it needs CuPy and an NVIDIA GPU),
* ``# network`` (it downloads), or
* ``# not run:`` and why (a cluster, a file of the reader's own, the whole test suite);

and a line that installs (``pip install``, ``git clone``) needs the network by nature:
CI's own steps install. Exits 1 when a command fails, naming its file and line.

Usage::

    python tools/check_doc_commands.py [--venv .venv] [--timeout 600] [--list] [FILE ...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELLS = ("bash", "sh", "shell", "console")
MARKERS = {"# GPU only": "needs a GPU", "# network": "needs the network", "# not run:": None}
_INSTALLS = re.compile(r"(^|[\s;&|/])(pip3? install|git clone)\s")
_FENCE = re.compile(r"^```(\w+)?\s*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\. code-block::\s*(\w+)\s*$")


@dataclass
class Command:
    """One command of a document: where it is, its text, and why it is skipped (if so)."""

    path: Path
    line: int
    text: str
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _skip_reason(text: str) -> str | None:
    comment = _trailing_comment(text)
    for marker, reason in MARKERS.items():
        if comment is not None and comment.startswith(marker):
            return reason or comment[len(marker) :].strip() or "marked not run"
    if _INSTALLS.search(text):
        return "installs: needs the network (CI's own steps install)"
    return None


def _trailing_comment(text: str) -> str | None:
    """The comment at the end of a shell line (a ``#`` after a blank, outside quotes)."""
    quote = None
    for k, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (k == 0 or text[k - 1].isspace()):
            return text[k:].strip()
    return None


def _commands(path: Path, numbered_lines, console: bool) -> list[Command]:
    """Commands of one block: ``[(line number, text)]`` with continuations joined."""
    out, pending, start = [], [], 0
    for number, raw in numbered_lines:
        text = raw.strip()
        if console and not pending:
            if not text.startswith("$ "):
                continue  # the output shown after a command
            text = text[2:]
        if not pending and (not text or text.startswith("#")):
            continue
        if not pending:
            start = number
        if text.endswith("\\"):
            pending.append(text[:-1].rstrip())
            continue
        joined = " ".join([*pending, text])
        pending = []
        out.append(Command(path, start, joined, _skip_reason(joined)))
    return out


def markdown_commands(path: Path) -> list[Command]:
    lines = path.read_text().splitlines()
    out, k = [], 0
    while k < len(lines):
        fence = _FENCE.match(lines[k])
        if fence is None:
            k += 1
            continue
        end = next(j for j in range(k + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group(1) in SHELLS:
            block = [(j + 1, lines[j]) for j in range(k + 1, end)]
            out += _commands(path, block, fence.group(1) == "console")
        k = end + 1
    return out


def rst_commands(path: Path) -> list[Command]:
    lines = path.read_text().splitlines()
    out, k = [], 0
    while k < len(lines):
        directive = _DIRECTIVE.match(lines[k])
        k += 1
        if directive is None or directive.group(2) not in SHELLS:
            continue
        indent = len(directive.group(1))
        block = []
        while k < len(lines) and (
            not lines[k].strip() or len(lines[k]) - len(lines[k].lstrip()) > indent
        ):
            block.append((k + 1, lines[k]))
            k += 1
        body = [(n, text) for n, text in block if not text.lstrip().startswith(":")]
        out += _commands(path, body, directive.group(2) == "console")
    return out


def documents(paths) -> list[Path]:
    if paths:
        return [Path(p).resolve() for p in paths]
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.rst"))]


def commands_of(path: Path) -> list[Command]:
    return markdown_commands(path) if path.suffix == ".md" else rst_commands(path)


def _copy_of_the_repository(target: Path) -> None:
    """A clone of the repository (asv reads its history), with the working tree's files
    (tracked, and new ones git does not ignore) over it: what a reader's clone holds."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(target)], check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            destination = target / os.fsdecode(name)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)


def run(commands: list[Command], venv: Path, timeout: float) -> list[Command]:
    """Run the commands not skipped; the failed ones (each printed as it ends)."""
    failed = []
    with tempfile.TemporaryDirectory(prefix="doc-commands-") as work:
        clone = Path(work) / "clone"
        _copy_of_the_repository(clone)
        # the venv's bin first; sparsegpu from the copy (as an editable install of it)
        path = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        env = dict(os.environ, PATH=path, VIRTUAL_ENV=str(venv), PYTHONPATH=str(clone))
        env.pop("PYTHONHOME", None)
        for command in commands:
            if command.skip is not None:
                print(f"skip  {command.where}: {command.text}  ({command.skip})")
                continue
            start = time.monotonic()
            try:
                done = subprocess.run(
                    ["bash", "-o", "pipefail", "-c", command.text],
                    cwd=clone,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
                status, output = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired as exc:
                status = f"timed out after {timeout:g} s"
                output = "".join(
                    part.decode() if isinstance(part, bytes) else part or ""
                    for part in (exc.stdout, exc.stderr)
                )
            seconds = time.monotonic() - start
            if status == 0:
                print(f"ok    {command.where}: {command.text}  ({seconds:.1f} s)", flush=True)
                continue
            failed.append(command)
            print(f"FAIL  {command.where}: {command.text}  (exit {status}, {seconds:.1f} s)")
            tail = output.strip().splitlines()[-15:]
            print("\n".join(f"      | {line}" for line in tail), flush=True)
    return failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="documents (default: README.md, docs/**/*.rst)")
    parser.add_argument(
        "--venv",
        default=str(Path(sys.executable).resolve().parents[1]),
        help="the virtual environment whose bin goes first on PATH (default: this python's)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per command")
    parser.add_argument("--list", action="store_true", help="list the commands, run none")
    args = parser.parse_args(argv)
    commands = [c for path in documents(args.files) for c in commands_of(path)]
    if args.list:
        for command in commands:
            print(f"{'skip' if command.skip else 'run '}  {command.where}: {command.text}")
        return 0
    failed = run(commands, Path(args.venv).absolute(), args.timeout)
    ran = sum(c.skip is None for c in commands)
    print(f"{ran - len(failed)} of {ran} commands ran as written; {len(commands) - ran} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
