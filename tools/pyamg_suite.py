"""Run PyAMG's own test suite with sparsegpu's classes in place of scipy's.

PyAMG (``pip install -e ".[amg]"``) is a real client of scipy.sparse that nobody here
wrote: its setup multiplies, adds and converts sparse matrices, and its C++ helpers
(``amg_core``) write into their arrays in place. This swaps ``scipy.sparse``'s
``csr_array``/``csr_matrix``, ``csc_array``/``csc_matrix`` and ``bsr_array``/``bsr_matrix``
for sparsegpu's before PyAMG is imported, also in ``scipy.sparse._csr``, ``_csc`` and
``_bsr`` (which scipy's own conversions build their results with), so that every matrix
PyAMG and its tests make is a sparsegpu one and its products run on the backend in force;
sparsegpu's own modules keep scipy's classes (they build scipy operands on purpose). Then
it runs PyAMG's installed tests (``pytest --pyargs pyamg``) in this process, prints the
pass/fail/skip counts and the failures grouped by their error's last line, and exits 0
when none failed.

Usage (from the repository root)::

    PYTHONPATH=$PWD python tools/pyamg_suite.py [--backend NAME] [--out FILE] [-- PYTEST ARGS]

``--backend`` sets ``SPARSEGPU_BACKEND`` (default: ``auto``); ``host-copy`` (the test-only
backend of ``sparsegpu.testing``) runs the GPU backends' mirror machinery on host copies.
pytest-xdist's ``-n`` is refused: its workers would not see the swap.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import types
from pathlib import Path

SWAPPED = {
    "_csr": ("csr_array", "csr_matrix"),
    "_csc": ("csc_array", "csc_matrix"),
    "_bsr": ("bsr_array", "bsr_matrix"),
}


def swap_classes() -> None:
    """scipy.sparse's CSR, CSC and BSR classes replaced by sparsegpu's, process-wide, except
    in sparsegpu's own modules (which see a copy of scipy.sparse with scipy's classes)."""
    if "pyamg" in sys.modules:
        raise RuntimeError("pyamg was imported before the swap: its modules hold scipy's classes")
    import importlib

    import scipy.sparse as sparse

    import sparsegpu as sg
    import sparsegpu.testing  # noqa: F401 - loaded before the swap, like the library

    original = types.ModuleType("scipy.sparse")
    original.__dict__.update(sparse.__dict__)
    for module in [m for name, m in sys.modules.items() if name.startswith("sparsegpu")]:
        if getattr(module, "sp", None) is sparse:
            module.sp = original
    for private, names in SWAPPED.items():
        module = importlib.import_module(f"scipy.sparse.{private}")
        for name in names:
            setattr(sparse, name, getattr(sg, name))
            setattr(module, name, getattr(sg, name))


class Outcomes:
    """A pytest plugin keeping every test's outcome."""

    def __init__(self):
        self.reports = {}

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            previous = self.reports.get(report.nodeid)
            if previous is None or previous.outcome == "passed":
                self.reports[report.nodeid] = report


def _error_line(report) -> str:
    text = str(report.longrepr)
    lines = [line for line in text.splitlines() if line.startswith("E ")]
    return (lines[-1][1:].strip() if lines else text.splitlines()[-1])[:160]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default=None, help="SPARSEGPU_BACKEND for the run")
    parser.add_argument("--out", type=Path, default=None, help="write a JSON summary here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    if any(a.startswith(("-n", "--numprocesses", "--dist")) for a in args.pytest_args):
        parser.error("run without pytest-xdist (-n): the classes are swapped in this process")
    if args.backend == "host-copy":
        from sparsegpu.testing import register_host_copy

        register_host_copy()
    if args.backend:
        os.environ["SPARSEGPU_BACKEND"] = args.backend
    swap_classes()

    import pytest

    plugin = Outcomes()
    pytest.main(
        ["--pyargs", "pyamg", "-q", "-p", "no:cacheprovider", "--no-header", "--tb=short",
         "-rN", "-p", "no:warnings", *args.pytest_args],
        plugins=[plugin],
    )  # fmt: skip
    import pyamg
    import scipy.sparse as sparse

    import sparsegpu as sg

    if sparse.csr_array is not sg.csr_array or pyamg.aggregation.aggregation.csr_array is not (
        sg.csr_array
    ):
        print("the swap did not hold: PyAMG ran on scipy's classes")
        return 1
    counts = collections.Counter(r.outcome for r in plugin.reports.values())
    failed = {nodeid: r for nodeid, r in plugin.reports.items() if r.outcome == "failed"}
    errors = collections.Counter(_error_line(r) for r in failed.values())
    print(f"\npyamg {pyamg.__version__}'s tests with sparsegpu's classes:")
    print(
        f"  {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
        f"or xfailed (backend {os.environ.get('SPARSEGPU_BACKEND', 'auto')})"
    )
    for line, n in errors.most_common():
        print(f"  {n:5d} {line}")
    if args.out is not None:
        summary = {"pyamg": pyamg.__version__, "counts": dict(counts), "failed": sorted(failed)}
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    if not counts["passed"]:
        print("  no test passed: nothing was checked")
        return 1
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
