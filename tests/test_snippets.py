"""Every Python snippet of README.md and docs/ runs as written, on any machine.

Extracted: README's ```python blocks, and in every ``docs/**/*.rst`` the
``.. code-block:: python`` blocks and the doctest (``>>>``) blocks. The snippets of one
document run in order in one namespace, as a reader would type them: each test runs the
blocks before its own first, in a fresh temporary directory, against a local stand-in of
the SuiteSparse collection (``tests/collection_server.py``), so nothing needs a network.

The convention (CONTRIBUTING.md, "Snippets in the docs"): without a usable GPU, a line
whose comment starts with ``# GPU only`` is not run (nor the indented block it opens), and
a block whose first line is ``# GPU only`` is skipped; a block importing an optional
module that is not installed (PyAMG) is skipped, and left out of the later blocks' runs.
Blocks in other languages (bash, console, text) are never run.
"""

from __future__ import annotations

import doctest
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparsegpu.device import _cuda
from sparsegpu.testing import no_gpu_reason

ROOT = Path(__file__).resolve().parents[1]
GPU_ONLY = re.compile(r"#\s*GPU only\b")
MARKDOWN_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
RST_CODE_BLOCK = re.compile(r"^(\s*)\.\. code-block::\s*python\s*$")


@dataclass(frozen=True)
class Snippet:
    """One block of a document: where it starts, its text, and how it is run."""

    path: Path
    line: int
    code: str
    doctest: bool = False

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def markdown_snippets(path: Path) -> list[Snippet]:
    """The ```python blocks of a Markdown file."""
    text = path.read_text()
    return [
        Snippet(path, text.count("\n", 0, m.start()) + 2, m.group(1))
        for m in MARKDOWN_BLOCK.finditer(text)
    ]


def rst_snippets(path: Path) -> list[Snippet]:
    """The ``.. code-block:: python`` blocks and the doctest paragraphs of an rst file."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        directive = RST_CODE_BLOCK.match(lines[i])
        if directive:
            indent = len(directive.group(1))
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].strip().startswith(":")):
                i += 1  # the directive's options and the blank line after them
            start, body = i, []
            while i < len(lines) and (
                not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
            ):
                body.append(lines[i])
                i += 1
            code = textwrap.dedent("\n".join(body)).strip("\n") + "\n"
            found.append(Snippet(path, start + 1, code))
        elif lines[i].lstrip().startswith(">>>"):
            start, body = i, []
            while i < len(lines) and lines[i].strip():
                body.append(lines[i])
                i += 1
            found.append(Snippet(path, start + 1, textwrap.dedent("\n".join(body)) + "\n", True))
        else:
            i += 1
    return found


def without_gpu_lines(code: str) -> str:
    """``code`` without its ``# GPU only`` lines and the indented blocks they open."""
    kept, opener_indent = [], None
    for line in code.splitlines():
        indent = len(line) - len(line.lstrip())
        if opener_indent is not None and (not line.strip() or indent > opener_indent):
            continue
        opener_indent = None
        if GPU_ONLY.search(line):
            if GPU_ONLY.split(line)[0].rstrip().endswith(":"):
                opener_indent = indent
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


# what Sphinx writes under docs/ (autosummary stubs, the built site) is not a document
BUILD_OUTPUTS = {"generated", "_build"}


def documents() -> list[Path]:
    pages = sorted((ROOT / "docs").rglob("*.rst"))
    kept = [p for p in pages if not BUILD_OUTPUTS & set(p.relative_to(ROOT).parts)]
    return [ROOT / "README.md", *kept]


def snippets(path: Path) -> list[Snippet]:
    return markdown_snippets(path) if path.suffix == ".md" else rst_snippets(path)


ALL = [s for path in documents() for s in snippets(path)]


def run(snippet: Snippet, namespace: dict, gpu: bool) -> None:
    """Run one snippet in ``namespace``; an AssertionError names the document and line."""
    if snippet.code.lstrip().startswith("# GPU only") and not gpu:
        return
    code = snippet.code if gpu else without_gpu_lines(snippet.code)
    if snippet.doctest:
        parsed = doctest.DocTestParser().get_doctest(
            code, namespace, snippet.id, str(snippet.path), snippet.line - 1
        )
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(parsed, clear_globs=False)
        assert runner.failures == 0, f"{snippet.id}: {runner.failures} doctest failure(s)"
        return
    exec(compile(code, snippet.id, "exec"), namespace)


OPTIONAL_MODULES = ("pyamg",)  # a block importing one is skipped where it is not installed


def missing_module(snippet: Snippet) -> str | None:
    """The optional module (PyAMG: ``.[amg]``) that ``snippet`` imports and this
    environment lacks, or None."""
    for name in OPTIONAL_MODULES:
        if re.search(rf"^\s*import .*\b{name}\b", snippet.code, re.MULTILINE):
            try:
                __import__(name)
            except ImportError:
                return name
    return None


def needs_mpi(snippet: Snippet) -> bool:
    """Whether ``snippet`` runs after (or is) a block of its document that uses mpi4py (the
    distributed page, the README's "Several GPUs" block)."""
    return snippet.path.name == "distributed.rst" or any(
        "mpi4py" in s.code for s in ALL if s.path == snippet.path and s.line <= snippet.line
    )


@pytest.mark.parametrize("snippet", ALL, ids=[s.id for s in ALL])
def test_snippet_runs(snippet, server, tmp_path, monkeypatch):
    gpu = _cuda.unavailable_reason() is None
    if snippet.code.lstrip().startswith("# GPU only") and not gpu:
        pytest.skip(no_gpu_reason())  # the block is marked '# GPU only'
    if needs_mpi(snippet):
        # one process is a communicator of size 1: the block runs wherever mpi4py imports
        pytest.importorskip("mpi4py.MPI", reason=f"{snippet.id} needs mpi4py")
    missing = missing_module(snippet)
    if missing is not None:
        pytest.skip(f"{snippet.id} needs {missing} (pip install -e '.[amg]')")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__snippet__"}
    for earlier in (s for s in ALL if s.path == snippet.path and s.line < snippet.line):
        if missing_module(earlier) is None:  # later blocks never use an optional module's
            run(earlier, namespace, gpu)
    run(snippet, namespace, gpu)


def test_every_document_with_code_is_found():
    names = {s.path.relative_to(ROOT).as_posix() for s in ALL}
    assert {"README.md", "docs/index.rst", "docs/solvers.rst"} <= names


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("a = 1\nb = 2  # GPU only\n", "a = 1\n"),
        ("a = 1\nb = 2  # GPU only: why\nc = 3\n", "a = 1\nc = 3\n"),
        ("with f():  # GPU only\n    g()\n\n    h()\ni = 1\n", "i = 1\n"),
        ("s = '# gpu'\n", "s = '# gpu'\n"),
    ],
    ids=["line", "line-with-reason", "block", "unmarked"],
)
def test_gpu_only_lines_are_dropped(code, expected):
    assert without_gpu_lines(code) == expected


def test_rst_extraction(tmp_path):
    path = tmp_path / "page.rst"
    path.write_text(
        "Title\n=====\n\n.. code-block:: python\n   :caption: c\n\n   a = 1\n\n   b = a\n\n"
        "Text.\n\n.. code-block:: bash\n\n   ls\n\n>>> 1 + 1\n2\n"
    )
    assert [(s.line, s.code, s.doctest) for s in rst_snippets(path)] == [
        (7, "a = 1\n\nb = a\n", False),
        (17, ">>> 1 + 1\n2\n", True),
    ]


@pytest.mark.parametrize(
    ("code", "passes"),
    [(">>> x = 2\n>>> x + 1\n3\n", True), (">>> 1 + 1\n3\n", False)],
    ids=["right", "wrong"],
)
def test_doctest_snippet_is_checked(code, passes):
    snippet = Snippet(ROOT / "docs" / "page.rst", 1, code, doctest=True)
    if passes:
        run(snippet, {}, gpu=False)
    else:
        with pytest.raises(AssertionError, match="docs/page.rst:1"):
            run(snippet, {}, gpu=False)
