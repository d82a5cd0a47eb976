"""benchmarks/spgemm.py on the CPU: its matrices, its scipy products and --from-json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from .scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "spgemm.py"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


def test_small_matrices_build_on_the_host(script):
    for name, form, builder in script.matrices("small", np):
        S = sp.csr_matrix(builder())
        assert S.nnz > 0, name
        assert form in ("A@A", "A.T@A", "P.T@A@P"), form
        P = script.prolongation(form, S, np.float64)
        expected_shape = {
            "A@A": (S.shape[0], S.shape[1]),
            "A.T@A": (S.shape[1], S.shape[1]),
            "P.T@A@P": (None if P is None else P.shape[1],) * 2,
        }[form]
        assert script.scipy_product(form, S, P).shape == expected_shape, name


def test_aggregation_sums_each_2x2_block(script):
    P = script.aggregation(4)
    assert P.shape == (16, 4)
    np.testing.assert_array_equal(P.sum(axis=0).A1, [4, 4, 4, 4])
    np.testing.assert_array_equal(P.sum(axis=1).A1, np.ones(16))
    assert P[5, 0] == 1 and P[2, 1] == 1 and P[15, 3] == 1


def _fake_result():
    row = {
        "matrix": "stencil2d5_2000", "form": "A@A", "dtype": "float64", "shape": [4, 4],
        "nnz": 19_992_000, "result_nnz": 51_976_000, "planned_algorithm": "reuse",
        "plan": "A @ B: reuse (measure): ...", "held_bytes": 2**20, "disagreements": {},
        "planned_ms": 2.0, "alg1_ms": 4.1, "cusparse_alg1_ms": 4.0, "cupyx_ms": 4.2,
        "scipy_ms": 470.0, "planned_with_host_copy_ms": 40.0, "peak_planned": 2**29,
        "peak_alg1": 2**30, "peak_cusparse_alg1": 2**30, "peak_cupyx": 2**30,
    }  # fmt: skip
    blocked = {"alg1_peak": 2**30, "result_bytes": 2**29, "runs": [{"how": "row blocks only"}]}
    return {"device": "NVIDIA H200", "repeat": 7, "rows": [row], "blocked": blocked}


def test_markdown_has_the_ratios_and_the_plan(script):
    text = script.markdown(_fake_result())
    assert "| stencil2d5_2000 | A@A | float64 |" in text
    assert "2.10x / 1.02x" in text  # cupyx / planned, cupyx / ALG1
    assert "11.8x" in text  # scipy / (planned + host copy)
    assert "513 / 1024 / 1024" in text  # peak MiB, the reuse plan's held bytes included
    assert "row blocks only" in text and "reuse (measure)" in text


def test_from_json_writes_markdown_without_a_gpu(script, tmp_path):
    source = tmp_path / "result.json"
    source.write_text(json.dumps(_fake_result()))
    md = tmp_path / "result.md"
    assert script.main(["--from-json", str(source), "--md", str(md)]) == 0
    assert md.read_text() == script.markdown(_fake_result())
