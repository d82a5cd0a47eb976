"""benchmarks/compressed_indices.py on the CPU: its matrices, summary and --from-json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import compressed_indices

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "docs" / "benchmarks" / "results" / "compressed_indices_h200.json"


@pytest.fixture(scope="module")
def script():
    return compressed_indices


@pytest.mark.parametrize("order", ["rcm", "random"])
def test_fem_matrix_is_a_p1_stiffness_matrix(script, order):
    A = script.fem_p1(3000, order, seed=1)
    assert A.shape == (3000, 3000)
    assert abs(A - A.T).max() < 1e-12  # symmetric
    np.testing.assert_allclose(A @ np.ones(3000), 0.0, atol=1e-9)  # constants in the kernel
    assert (A.diagonal() > 0).all()
    assert 6.0 < A.nnz / A.shape[0] < 8.0  # a Delaunay mesh: about 7 a row


def test_rcm_order_is_banded_and_random_order_is_not(script):
    rcm, random = script.fem_p1(20_000, "rcm"), script.fem_p1(20_000, "random")
    spread = {
        name: np.abs(M.tocoo().row - M.tocoo().col).mean()
        for name, M in (("rcm", rcm), ("random", random))
    }
    assert spread["rcm"] * 20 < spread["random"]


def test_replicated_reaches_the_nonzeros_asked_for(script):
    A = script.replicated("bcsstk13", 200_000)
    assert A.nnz >= 200_000 and A.shape[0] % 2003 == 0


def test_small_matrices_build(script):
    names = [name for _, name, _ in script.matrices("small")]
    assert len(names) == len(set(names)) == 7


def test_from_json_redraws_the_committed_result(script, tmp_path):
    md = tmp_path / "r.md"
    assert script.main(["--from-json", str(RESULT), "--md", str(md)]) == 0
    text = md.read_text()
    assert "stencil2d_5pt_3000" in text and "refused" in text
    summary = script.summarize(json.loads(RESULT.read_text())["results"])
    assert summary["auto_never_picks_delta16_where_it_loses"] is True
    assert 1.0 < summary["float64"]["geomean_ratio"] < 1.3


def test_refuses_an_unknown_order(script):
    with pytest.raises(ValueError, match="order must be 'rcm' or 'random'"):
        script.fem_p1(100, "natural")
