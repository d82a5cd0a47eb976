"""The first-product floor probe (benchmarks/experiments/spgemm_first_floor.py) on the CPU:
its summary is written from a result file without a GPU (``--from-json``), and it needs a
GPU for anything else."""

from __future__ import annotations

import json

from benchmarks.experiments import spgemm_first_floor as floor

RESULT = {
    "device": "NVIDIA H200",
    "command": "python3 -m benchmarks.experiments.spgemm_first_floor --repeat 3",
    "rows": [
        {
            "matrix": "powerlaw_1500k",
            "medians_ms": [
                {"A @ A": 1.4131, "bare": 1.3125, "cupyx": 1.35},
                {"A @ A": 1.457, "bare": 1.35, "cupyx": 1.368},
            ],
            "via_transpose_ms": {
                "transpose": 0.5,
                "product": 2.5,
                "back": 0.8,
                "total": 3.8,
                "rule": "hash",
                "t_longest_row": 14,
            },
            "allocations": {"A @ A": 66, "bare": 51, "cupyx": 28},
            "count_alone": {"kernel_us": 82.8, "launch_us": 68.0, "to_result_us": 98.1},
        }
    ],
}


def test_the_summary_is_written_from_a_result_file(tmp_path):
    source, md = tmp_path / "floor.json", tmp_path / "floor.md"
    source.write_text(json.dumps(RESULT))
    assert floor.main(["--from-json", str(source), "--md", str(md)]) == 0
    text = md.read_text()
    assert "| variant | round 1 (ms) | round 2 (ms) |" in text
    assert "| A @ A | 1.413 | 1.457 |" in text and "| cupyx | 1.350 | 1.368 |" in text
    assert "in all 3.800" in text and "longest row of `A.T`: 14" in text
    assert "A @ A 66, bare 51, cupyx 28" in text
    assert RESULT["command"] in text


def test_without_a_gpu_it_measures_nothing(tmp_path, monkeypatch):
    from benchmarks import common

    monkeypatch.setattr(common, "require_gpu", lambda: None)
    out = tmp_path / "floor.json"
    assert floor.main(["--out", str(out)]) == 2
    assert not out.exists()
