"""The distributed examples of the docs and the README, run by every rank as a reader would.

``tests/test_snippets.py`` runs them in one process (a communicator of one rank); here
they run under ``mpiexec -n 1..4`` (``.ci/run``), so an example that calls a collective on
one rank only, or leaves ``info`` unchecked, fails in CI instead of hanging a reader.
"""

from __future__ import annotations

import pytest

from ..test_snippets import ROOT, markdown_snippets, rst_snippets, run

pytest.importorskip("mpi4py.MPI")

from sparsegpu.device import _cuda  # noqa: E402


def _readme_blocks():
    """The README's python blocks from its "Several GPUs" section on."""
    text = (ROOT / "README.md").read_text()
    first = text.count("\n", 0, text.index("## Several GPUs")) + 1
    return [s for s in markdown_snippets(ROOT / "README.md") if s.line > first][:1]


EXAMPLES = {
    "docs/distributed.rst": lambda: rst_snippets(ROOT / "docs" / "distributed.rst"),
    "README.md, Several GPUs": _readme_blocks,
}


@pytest.mark.parametrize("document", sorted(EXAMPLES))
def test_the_examples_run_on_every_rank(document, tmp_path, monkeypatch):
    blocks = EXAMPLES[document]()
    assert blocks, f"no python blocks found in {document}"
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__snippet__"}
    gpu = _cuda.unavailable_reason() is None
    for block in blocks:
        run(block, namespace, gpu)
