"""tools/scipy_suite.py runs scipy's own CSR tests on sparsegpu's classes (issue 33)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from .scripts import ROOT


def _suite(*args) -> subprocess.CompletedProcess:
    """tools/scipy_suite.py run with ``args``; it must exit 0 (every failure deliberate)."""
    run = subprocess.run(
        [sys.executable, "tools/scipy_suite.py", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def test_scipy_suite_swaps_the_classes_and_sorts_the_failures():
    """scipy's float16 check fails only because the swap took effect (scipy's own classes
    refuse float16); the tool calls it deliberate, and the shape test passes with our
    wording."""
    selection = "TestCSR and not NonCanonical and not Bit and (test_dtype_check or test_reshape)"
    run = _suite("--", "-k", selection)
    assert "2 passed, 2 failed" in run.stdout, run.stdout[-2000:]
    assert "2 deliberate: float16 values are accepted" in run.stdout


def test_scipy_suite_runs_the_bsr_tests_on_the_bsr_classes():
    """``--format bsr`` swaps scipy's BSR classes: its float16 check fails only because the
    swap took effect (deliberate), and its product tests pass on sparsegpu's classes."""
    selection = "TestBSR and not NonCanonical and not Bit and (test_dtype_check or test_mu)"
    run = _suite("--format", "bsr", "--", "-k", selection)
    assert "BSR tests with sparsegpu's classes" in run.stdout
    assert "2 deliberate: float16 values are accepted" in run.stdout
    assert re.search(r"[1-9]\d* passed, 2 failed", run.stdout), run.stdout[-2000:]


def test_scipy_suite_refuses_xdist():
    """xdist's workers would run scipy's own classes: a run with -n is refused, not passed."""
    run = subprocess.run(
        [sys.executable, "tools/scipy_suite.py", "--format", "bsr", "--", "-n", "4"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "run without pytest-xdist" in run.stderr, run.stderr


def test_scipy_suite_runs_on_host_copies():
    """``--backend host-copy`` registers the test-only backend, so scipy's tests meet the
    mirrors a GPU run keeps on their matrices (its pickling test compares every instance
    attribute, and a kept mirror would be one) on a machine without a GPU."""
    # getrow of a BSR matrix is (one-row selector) @ A: a mirror kept on the classes'
    # shared matrix there failed the later pickling test of the class beside it
    selection = "(TestBSRMatrix or TestBSRNonCanonicalMatrix) and not Bit and "
    selection += "(test_getrow or test_pickle)"
    run = _suite("--format", "bsr", "--backend", "host-copy", "--", "-k", selection)
    assert "(backend host-copy)" in run.stdout
    assert re.search(r"\b4 passed, 0 failed", run.stdout), run.stdout[-2000:]


def test_scipy_suite_leaves_out_what_it_says():
    """A left-out test does not run, and the summary says how many it matched (scipy's
    tests are outside the rootdir: a --deselect of their absolute path matched nothing,
    so the 64 GB test it named still ran on the device machine)."""
    selection = "test_csr and (test_broadcast_to or test_csr_bool_indexing)"
    left = "test_csr.py::test_broadcast_to"
    run = _suite("--leave-out", left, "--", "-k", selection)
    assert re.search(r"\b1 passed, 0 failed", run.stdout), run.stdout[-2000:]
    assert f"left out: {left} (left out on the command line; 1 test)" in run.stdout
    assert "left out: test_csr.py::test_large_assignments" in run.stdout
