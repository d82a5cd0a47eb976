"""benchmarks/half_precision.py on the CPU: its matrices, values, summary and --from-json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import sparsegpu as sg
from benchmarks import half_precision

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "docs" / "benchmarks" / "results" / "half_precision_h200.json"


@pytest.fixture(scope="module")
def script():
    return half_precision


def test_small_matrices_build_with_seeded_random_values(script):
    built = [(name, make()) for name, make in script.matrices("small")]
    assert len({name for name, _ in built}) == 4
    S = script.with_random_values(built[0][1])
    again = script.with_random_values(built[0][1])
    assert S.dtype == np.float64 and S.indices.dtype == np.int32
    np.testing.assert_array_equal(S.data, again.data)
    assert -1.0 <= S.data.min() and S.data.max() < 1.0
    # random values are not all exact in 16 bits: the error columns measure something
    assert np.any(S.data.astype(np.float16).astype(np.float64) != S.data)


def test_candidates_take_only_backends_that_take_16_bit_values(script):
    backend = sg.engine._registry.registered()["merge_path"]
    assert np.dtype(np.float16) not in backend.value_dtypes


def test_from_json_redraws_the_committed_result(script, tmp_path):
    md = tmp_path / "r.md"
    assert script.main(["--from-json", str(RESULT), "--md", str(md)]) == 0
    text = md.read_text()
    assert "stencil3d_7pt_180" in text and "bfloat16" in text
    result = json.loads(RESULT.read_text())
    summary = script.summarize(result["results"])
    for dtype in ("float16", "bfloat16"):
        mine = summary["per_dtype"][dtype]
        assert 1.0 < mine["geomean_speedup"] <= mine["geomean_speedup_vs_plain"]
        # float16 keeps 11 bits, bfloat16 8: the documented errors
        limit = 1e-3 if dtype == "float16" else 1e-2
        assert mine["max_norm_rel_error"] < limit
    assert summary == result["summary"]
