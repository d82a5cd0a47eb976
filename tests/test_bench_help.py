"""Every benchmark script is a module of the ``benchmarks`` package whose ``--help`` runs
on any machine, CuPy or not (issue 44), and none of them reaches a sibling by path."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .scripts import ROOT

BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts)
    for path in BENCHMARKS.rglob("*.py")
    if path.name not in ("__init__.py", "common.py")
)
# CuPy hidden (an import of it fails) whether or not this machine has it
WITHOUT_CUPY = (
    "import runpy, sys; sys.modules['cupy'] = None; sys.argv = [sys.argv[1], '--help']; "
    "runpy.run_module(sys.argv[0], run_name='__main__')"
)


def test_every_script_is_listed():
    assert len(SCRIPTS) >= 20 and "benchmarks.auto_vs_cusparse" in SCRIPTS


@pytest.mark.parametrize("module", SCRIPTS)
def test_help_runs_without_cupy(module):
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_CUPY, module],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


@pytest.mark.parametrize("path", sorted(BENCHMARKS.rglob("*.py")), ids=lambda p: p.name)
def test_no_script_changes_sys_path_or_loads_a_sibling_by_file(path):
    text = path.read_text()
    assert "sys.path" not in text
    # merge_path_variants loads a checkout's merge_path.py (a library file), never a script
    if path.name != "merge_path_variants.py":
        assert "spec_from_file_location" not in text
