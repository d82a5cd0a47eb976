"""Every example in the package's docstrings (``>>>``) runs and shows what it says.

They never ran before issue 33, and one had drifted (``last_solve_info``'s iteration
count). Collected here rather than by ``--doctest-modules``, so that the README's test
command runs them, each as its own test: an example that imports mpi4py skips where it
is not installed, and ``sparsegpu.__main__`` (which runs the command line) is left out.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import sparsegpu


def _doctests() -> list[doctest.DocTest]:
    names = ["sparsegpu"] + [
        module.name
        for module in pkgutil.walk_packages(sparsegpu.__path__, "sparsegpu.")
        if module.name != "sparsegpu.__main__"
    ]
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = []
    for name in sorted(names):
        module = importlib.import_module(name)
        found += [test for test in finder.find(module, name, module=module) if test.examples]
    return found


DOCTESTS = _doctests()


def test_the_examples_are_found():
    names = {test.name for test in DOCTESTS}
    assert len(DOCTESTS) > 25 and "sparsegpu.linalg._options.last_solve_info" in names


@pytest.mark.parametrize("test", DOCTESTS, ids=[test.name for test in DOCTESTS])
def test_docstring_example(test, tmp_path, monkeypatch):
    source = "".join(example.source for example in test.examples)
    if "mpi4py" in source and importlib.util.find_spec("mpi4py") is None:
        pytest.skip("the example needs mpi4py (pip install -e '.[mpi]')")
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=lambda text: print(text, end=""))
    assert runner.failures == 0, f"{test.name}: {runner.failures} example(s) show another result"
