"""The lead-call experiment (benchmarks/experiments/lead_call.py) on the CPU: its table
marks each side's fastest candidate and its summary measures each side from the loop."""

from __future__ import annotations

import pytest

from benchmarks.experiments import lead_call


@pytest.fixture(scope="module")
def script():
    return lead_call


def test_the_table_and_the_distance_from_the_loop(script):
    row = {
        "set": "dev", "matrix": "m", "dtype": "float64", "nnz": 10, "inner": 1,
        "candidates": {
            "block a": {"without_us": 107.0, "with_us": 80.0, "loop_us": 80.0},
            "block b": {"without_us": 102.0, "with_us": 88.0, "loop_us": 88.0},
        },
        "best": {"without": "block b", "with": "block a", "loop": "block a"},
        "chosen_without": [("block b", 30.0)], "chosen_with": [("block a", 40.0)],
    }  # fmt: skip
    text = script.markdown({"device": "GPU", "command": "cmd", "results": [row]})
    assert "| block a (best: with, loop) | 107.0 | 80.0 | 80.0 |" in text
    assert "| block b (best: without) | 102.0 | 88.0 | 88.0 |" in text
    assert "| m | float64 | block a | block b (30 ms) | block a (40 ms) |" in text
    # (27/80 + 14/88) / 2 = 24.8% without; 0.0% with
    assert "without 24.8%, with 0.0%" in text
