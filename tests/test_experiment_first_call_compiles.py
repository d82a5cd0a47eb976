"""The first-call compilation probe (benchmarks/experiments/first_call_compiles.py) on the
CPU: a user's session runs its steps on the smoke instances and reports them; nothing
compiles without a GPU (its compilations are recorded only there)."""

from __future__ import annotations

import json

import pytest

from benchmarks.experiments import first_call_compiles as probe
from sparsegpu.device import _cuda


def test_a_session_reports_each_step(tmp_path):
    out, md = tmp_path / "c.json", tmp_path / "c.md"
    assert probe.main(["--set", "smoke", "--problems", "circuit2d",
                       "--out", str(out), "--md", str(md)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    steps = [row["step"] for row in result["steps"]]
    assert steps == [f"circuit2d_40 {s}" for s in
                     ("set-up", "solve", "update", "update again", "solve again")]  # fmt: skip
    assert all(row["seconds"] > 0 for row in result["steps"])
    compiled = [row for row in result["steps"] if row["compiles"]]
    if _cuda.cupy_or_none() is None:
        assert not compiled  # nothing compiles without a GPU
    # (on a GPU, a step compiles what no earlier test in this process and no other worker
    # has put in the kernel cache yet: the test suite's order decides, so only its record
    # is checked: each compiling step listed once)
    assert [c["step"] for c in result["compiles"]] == [row["step"] for row in compiled]
    assert "| step | seconds |" in md.read_text()


def test_the_probe_refuses_the_held_out_set():
    with pytest.raises(SystemExit):
        probe.main(["--set", "heldout"])


def test_compilations_are_counted_from_the_profile():
    """NVRTC's compileProgram, as cProfile keys a built-in, is what is counted."""

    class Stats:
        stats = {
            ("~", 0, "<built-in method cupy_backends.cuda.libs.nvrtc.compileProgram>"):
                (2, 2, 3.5, 3.5, {}),
            ("x.py", 3, "compile"): (1, 1, 0.25, 0.25, {}),
        }  # fmt: skip

    assert probe.nvrtc_compiles(Stats()) == (2, 3.5)
