"""Run scipy's own CSR tests with sparsegpu's classes in place of scipy's.

scipy ships its test suite (``scipy/sparse/tests``). This imports its modules while
``scipy.sparse.csr_array`` and ``scipy.sparse.csr_matrix`` are sparsegpu's classes, so
every test that makes a CSR matrix makes a sparsegpu one (and its products run on the
backend in force), then runs the CSR tests among them with pytest:

* ``test_base.py``: the ``TestCSR*`` classes (canonical and non-canonical, array and
  matrix), scipy's generic sparse tests;
* ``test_64bit.py``: their runs with 64-bit indices;
* ``test_csr.py``, and the CSR tests of the 1-D modules.

It prints pass/fail/skip counts and the failures grouped by their error's last line, and
sorts them into the deliberate differences from scipy (docs/user_guide, "Known
differences from scipy": float16 values are accepted) and the rest. Exit status 0 when
every failure is a deliberate difference.

Usage (from the repository root; on a GPU machine the GPU backends run the products)::

    PYTHONPATH=$PWD python tools/scipy_suite.py [--backend NAME] [--out FILE] [-- PYTEST ARGS]

``--backend`` sets ``SPARSEGPU_BACKEND`` (default: ``auto``, what users get).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import re
import sys
from pathlib import Path

MODULES = (
    "test_base",  # first: test_64bit imports its classes
    "test_64bit",
    "test_csr",
    "test_common1d",
    "test_arithmetic1d",
    "test_indexing1d",
    "test_minmax1d",
)
SELECT = "CSR or csr"

# The deliberate differences, by the scipy test that finds them (its runs with 64-bit
# indices in test_64bit included)
DELIBERATE = {
    "test_dtype_check": "float16 values are accepted (scipy refuses them)",
}


class Swap:
    """A pytest plugin: scipy's test modules imported with sparsegpu's CSR classes, and
    every test's outcome kept."""

    def __init__(self):
        self.reports = {}

    def pytest_configure(self, config):
        import scipy.sparse as sparse

        import sparsegpu as sg

        saved = sparse.csr_array, sparse.csr_matrix
        sparse.csr_array, sparse.csr_matrix = sg.csr_array, sg.csr_matrix
        try:  # only the test modules see the swap; scipy itself keeps its own classes
            for name in MODULES:
                module = importlib.import_module(f"scipy.sparse.tests.{name}")
                if module.__dict__.get("csr_array") is not sg.csr_array and hasattr(
                    module, "csr_array"
                ):
                    raise RuntimeError(f"{name} was imported before the swap")
        finally:
            sparse.csr_array, sparse.csr_matrix = saved

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            previous = self.reports.get(report.nodeid)
            if previous is None or previous.outcome == "passed":
                self.reports[report.nodeid] = report


def _error_line(report) -> str:
    text = str(report.longrepr)
    lines = [line for line in text.splitlines() if line.startswith("E ")]
    return (lines[-1][1:].strip() if lines else text.splitlines()[-1])[:160]


def _deliberate(nodeid: str) -> str | None:
    for test, what in DELIBERATE.items():
        if re.search(rf"\b{test}\b", nodeid):
            return what
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default=None, help="SPARSEGPU_BACKEND for the run")
    parser.add_argument("--out", type=Path, default=None, help="write a JSON summary here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.backend:
        os.environ["SPARSEGPU_BACKEND"] = args.backend

    import pytest
    import scipy

    tests = Path(scipy.__file__).parent / "sparse" / "tests"
    plugin = Swap()
    pytest.main(
        [
            *(str(tests / f"{name}.py") for name in MODULES),
            "-k",
            SELECT,
            "-q",
            "-p",
            "no:cacheprovider",
            "--no-header",
            "--tb=short",
            "-rN",
            "-p",
            "no:warnings",
            *args.pytest_args,
        ],
        plugins=[plugin],
    )
    counts = collections.Counter(r.outcome for r in plugin.reports.values())
    failed = {nodeid: r for nodeid, r in plugin.reports.items() if r.outcome == "failed"}
    deliberate = collections.Counter()
    other = collections.Counter()
    for nodeid, report in failed.items():
        what = _deliberate(nodeid)
        if what is not None:
            deliberate[what] += 1
        else:
            other[_error_line(report)] += 1
    print(f"\nscipy {scipy.__version__}'s CSR tests with sparsegpu's classes:")
    print(
        f"  {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
        f"or xfailed (backend {os.environ.get('SPARSEGPU_BACKEND', 'auto')})"
    )
    for what, n in deliberate.most_common():
        print(f"  {n:5d} deliberate: {what}")
    for line, n in other.most_common():
        print(f"  {n:5d} OTHER: {line}")
    if args.out is not None:
        args.out.write_text(
            json.dumps(
                {
                    "scipy": scipy.__version__,
                    "counts": dict(counts),
                    "deliberate": dict(deliberate),
                    "other": dict(other),
                    "failed": sorted(failed),
                },
                indent=1,
            )
            + "\n"
        )
    return 0 if not other else 1


if __name__ == "__main__":
    sys.exit(main())
