"""benchmarks/host_path.py on the CPU: it runs a product's Python path on its stand-in
CuPy, in a process of its own (the stand-in replaces CuPy in ``sys.modules``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .scripts import ROOT


def test_the_stand_in_runs_every_product_of_both_plans(tmp_path):
    out = tmp_path / "host_path.json"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "benchmarks.host_path", "--calls", "3", "--repeats", "1",
         "--out", str(out)],
        cwd=ROOT, env=environment, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    result = json.loads(out.read_text())["host_us"]
    assert set(result) == {"row_group", "cusparse"}
    for times in result.values():
        assert len(times) == 2 + 2 * 2 * 3  # A @ x with and without out=, then A @ X
        assert all(us > 0 for us in times.values())
