"""Run scipy's own CSR (or BSR) tests with sparsegpu's classes in place of scipy's.

scipy ships its test suite (``scipy/sparse/tests``). This imports its modules while
``scipy.sparse.csr_array`` and ``scipy.sparse.csr_matrix`` are sparsegpu's classes, so
every test that makes a CSR matrix makes a sparsegpu one (and its products run on the
backend in force), then runs the CSR tests among them with pytest:

* ``test_base.py``: the ``TestCSR*`` classes (canonical and non-canonical, array and
  matrix), scipy's generic sparse tests;
* ``test_64bit.py``: their runs with 64-bit indices;
* ``test_csr.py``, and the CSR tests of the 1-D modules.

``--format bsr`` swaps ``bsr_array`` and ``bsr_matrix`` instead and runs the BSR tests:
the ``TestBSR*`` classes of ``test_base.py`` and their 64-bit runs in ``test_64bit.py``.

It leaves out the tests in ``LEFT_OUT`` (scipy's own, needing more host memory than a
test machine has), prints pass/fail/skip counts and the failures grouped by their
error's last line, and sorts them into the deliberate differences from scipy
(docs/user_guide, "Known differences from scipy": float16 values are accepted) and the
rest. Exit status 0 when
every failure is a deliberate difference.

Usage (from the repository root; on a GPU machine the GPU backends run the products)::

    PYTHONPATH=$PWD python tools/scipy_suite.py [--format csr|bsr] [--backend NAME]
        [--out FILE] [-- PYTEST ARGS]

``--backend`` sets ``SPARSEGPU_BACKEND`` (default: ``auto``, what users get); ``host-copy``
(the test-only backend of ``sparsegpu.testing``, registered here) runs the GPU backends'
mirror machinery and sparse products on host copies, so that what a GPU run leaves on the
matrices (kept mirrors) meets scipy's tests on a machine without one. It runs in one
process: pytest-xdist's ``-n`` is refused, since its workers would not see the swap.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Suite:
    """scipy's tests of one format: the modules, the ``-k`` selection, the classes swapped."""

    modules: tuple
    select: str
    classes: tuple


SUITES = {
    "csr": Suite(
        (
            "test_base",  # first: test_64bit imports its classes
            "test_64bit",
            "test_csr",
            "test_common1d",
            "test_arithmetic1d",
            "test_indexing1d",
            "test_minmax1d",
        ),
        "CSR or csr",
        ("csr_array", "csr_matrix"),
    ),
    "bsr": Suite(("test_base", "test_64bit"), "BSR or bsr", ("bsr_array", "bsr_matrix")),
}

# Tests left out, with why: scipy's own tests that need more host memory than a test
# machine has. test_large_assignments (scipy 1.18's test_csr.py) runs wherever 64 GB are
# free and then takes more: on the 128 GB device machine it was killed with scipy's own
# classes as with ours, taking the whole run with it.
LEFT_OUT = {
    "test_csr.py::test_large_assignments": "needs more host memory than 128 GB holds",
}

# The deliberate differences, by the scipy test that finds them (its runs with 64-bit
# indices in test_64bit included)
DELIBERATE = {
    "test_dtype_check": "float16 values are accepted (scipy refuses them)",
}


class Swap:
    """A pytest plugin: scipy's test modules imported with sparsegpu's classes of one
    format, and every test's outcome kept."""

    def __init__(self, suite: Suite, left_out: dict[str, str]):
        self.suite = suite
        self.left_out = left_out
        self.reports = {}
        self.deselected: list[str] = []

    def pytest_configure(self, config):
        import scipy.sparse as sparse

        import sparsegpu as sg

        names = self.suite.classes
        saved = {name: getattr(sparse, name) for name in names}
        for name in names:
            setattr(sparse, name, getattr(sg, name))
        try:  # only the test modules see the swap; scipy itself keeps its own classes
            for module_name in self.suite.modules:
                module = importlib.import_module(f"scipy.sparse.tests.{module_name}")
                if any(
                    hasattr(module, name) and module.__dict__[name] is not getattr(sg, name)
                    for name in names
                ):
                    raise RuntimeError(f"{module_name} was imported before the swap")
        finally:
            for name, cls in saved.items():
                setattr(sparse, name, cls)

    def pytest_collection_modifyitems(self, config, items):
        """Leave out the tests of ``left_out``, matched by the end of their node id
        (``--deselect`` takes ids relative to the rootdir, which scipy's tests are not in:
        given their absolute path it matched nothing, and the 64 GB test still ran)."""
        gone = [item for item in items if _is_left_out(item.nodeid, self.left_out)]
        if gone:
            config.hook.pytest_deselected(items=gone)
            items[:] = [item for item in items if not _is_left_out(item.nodeid, self.left_out)]
        self.deselected = [item.nodeid for item in gone]

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            previous = self.reports.get(report.nodeid)
            if previous is None or previous.outcome == "passed":
                self.reports[report.nodeid] = report


def _is_left_out(nodeid: str, left_out) -> bool:
    """True when ``nodeid`` (parameters aside) ends with one of ``left_out``'s ids."""
    base = nodeid.split("[", 1)[0]
    return any(base == test or base.endswith("/" + test) for test in left_out)


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
    parser.add_argument("--format", choices=sorted(SUITES), default="csr", help="whose tests")
    parser.add_argument("--backend", default=None, help="SPARSEGPU_BACKEND for the run")
    parser.add_argument("--out", type=Path, default=None, help="write a JSON summary here")
    parser.add_argument(
        "--leave-out", action="append", default=[], metavar="FILE.py::TEST",
        help="leave this test out too (its id from the test file on, e.g. "
        "test_csr.py::test_broadcast_to); may be repeated",
    )  # fmt: skip
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    if any(a == "-n" or a.startswith(("-n", "--numprocesses", "--dist")) for a in args.pytest_args):
        # xdist's workers are other processes, which the swap (made here) never reaches:
        # their tests would run scipy's own classes and pass for nothing
        parser.error("run without pytest-xdist (-n): the classes are swapped in this process")
    if args.backend == "host-copy":
        # the test-only backend (sparsegpu.testing) that runs the GPU backends' mirror
        # machinery on host copies, and its sparse products: what a GPU run keeps on the
        # matrices, checked on any machine
        from sparsegpu.testing import register_host_copy

        register_host_copy()
    if args.backend:
        os.environ["SPARSEGPU_BACKEND"] = args.backend

    import pytest
    import scipy

    tests = Path(scipy.__file__).parent / "sparse" / "tests"
    suite = SUITES[args.format]
    left_out = {**LEFT_OUT, **dict.fromkeys(args.leave_out, "left out on the command line")}
    plugin = Swap(suite, left_out)
    pytest.main(
        [
            *(str(tests / f"{name}.py") for name in suite.modules),
            "-k",
            suite.select,
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
    print(f"\nscipy {scipy.__version__}'s {args.format.upper()} tests with sparsegpu's classes:")
    print(
        f"  {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
        f"or xfailed (backend {os.environ.get('SPARSEGPU_BACKEND', 'auto')})"
    )
    for test, why in left_out.items():
        matched = sum(_is_left_out(nodeid, (test,)) for nodeid in plugin.deselected)
        found = f"{matched} test{'s' * (matched != 1)}" if matched else "not in this scipy"
        print(f"  left out: {test} ({why}; {found})")
    for what, n in deliberate.most_common():
        print(f"  {n:5d} deliberate: {what}")
    for line, n in other.most_common():
        print(f"  {n:5d} OTHER: {line}")
    if args.out is not None:
        args.out.write_text(
            json.dumps(
                {
                    "scipy": scipy.__version__,
                    "format": args.format,
                    "counts": dict(counts),
                    "deliberate": dict(deliberate),
                    "left_out": left_out,
                    "deselected": plugin.deselected,
                    "other": dict(other),
                    "failed": sorted(failed),
                },
                indent=1,
            )
            + "\n"
        )
    if not counts["passed"]:
        print("  no test passed: nothing was checked (a -k that selects nothing?)")
        return 1
    return 0 if not other else 1


if __name__ == "__main__":
    sys.exit(main())
