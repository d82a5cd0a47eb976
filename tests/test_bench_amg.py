"""benchmarks.amg on the CPU: its problems, one measured row, the summary and the
redraw from the committed H200 result (the benchmark itself runs on a GPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from .scripts import ROOT

pytest.importorskip("pyamg")
RESULT = ROOT / "docs" / "benchmarks" / "results" / "amg_h200.json"


@pytest.fixture(scope="module")
def script():
    from benchmarks import amg

    return amg


@pytest.mark.parametrize(
    "name, size, rows",
    [("poisson3d", 5, 125), ("anisotropic2d", 9, 81), ("jumping3d", 10, 1000),
     ("jumping3d_wall", 10, 1000), ("elasticity3d", 3, 3 * 3 * 16), ("circuit2d", 40, 1600)],
)  # fmt: skip
def test_problems_are_symmetric_positive_definite(script, name, size, rows):
    A, B = script.make_problem(name, size, "fit")
    dense = A.toarray()
    assert A.shape == (rows, rows)
    assert np.allclose(dense, dense.T, rtol=1e-12, atol=1e-9 * abs(dense).max())
    assert np.linalg.eigvalsh(dense).min() > 0
    if name == "elasticity3d":
        assert A.format == "bsr" and B.shape == (rows, 6)


@pytest.mark.parametrize("name", ["jumping3d", "jumping3d_wall", "circuit2d"])
def test_random_problems_differ_between_sets(script, name):
    fit, _ = script.make_problem(name, 16, "fit")
    heldout, _ = script.make_problem(name, 16, "heldout")
    assert abs(fit - heldout).max() > 0


def test_the_one_wall_instance_is_the_variant_that_matched_the_issue(script):
    """jumping3d_wall is jumping_variants' "fv-harmonic-one-wall-high=0.25" (the instance
    whose Jacobi-CG, CG and PyAMG iterations matched the issue's), in its own draws."""
    from benchmarks.experiments import jumping_variants

    found = jumping_variants.build("fv-harmonic-one-wall-high=0.25", 16, 2)
    assert abs(script.jumping3d_wall(16, 2)[0] - found).max() == 0
    # one Dirichlet wall: the rows of the other five walls have no boundary term
    A = script.jumping3d_wall(12, 3)[0]
    off = np.asarray(abs(A).sum(axis=1)).ravel() - A.diagonal()
    walls = np.isclose(A.diagonal(), off).reshape(12, 12, 12)
    assert not walls[0].any() and walls[-1].all()


def test_the_circuit_stand_in_is_a_power_grid(script):
    """circuit2d: G3_circuit's rows' lengths (about 4.6 entries a row, its 4.8), a
    diagonal that varies over decades (what makes Jacobi pay), supply pads every 32 nodes,
    weakly diagonally dominant (an M-matrix: no positive off-diagonal)."""
    A, _ = script.circuit2d(96, 1)
    assert A.shape == (96 * 96,) * 2 and 4.3 < A.nnz / A.shape[0] < 4.8
    d = A.diagonal()
    off = A - sp.diags(d)
    assert off.max() <= 0 and np.all(d >= -np.asarray(off.sum(axis=1)).ravel())
    assert np.quantile(d, 0.9) / np.quantile(d, 0.1) > 30
    pads = np.flatnonzero(d + np.asarray(off.sum(axis=1)).ravel() > 100)
    assert len(pads) == 3 * 3  # 16, 48, 80 in each direction


def test_one_row_on_the_host(script):
    A, B = script.make_problem("jumping3d", 12, "fit")
    row = script.gpu_run("jumping3d", A, B, maxiter=5000)
    for method in ("cg", "jacobi_cg", "amg_cg"):
        assert row[method]["converged"], row[method]
    assert row["amg_cg"]["iterations"] < row["jacobi_cg"]["iterations"]
    assert row["amg_cg"]["updated_relative_residual"] <= 1e-8
    summary = script.summarize([{"problem": "j", **row}, {"problem": "x", "error": "E"}])
    assert set(summary) == {"j"} and summary["j"]["speedup_over_jacobi_cg"] > 0


def test_redraw_from_the_committed_result(script, tmp_path):
    md = tmp_path / "amg.md"
    assert script.main(["--from-json", str(RESULT), "--md", str(md)]) == 0
    text = md.read_text()
    rows = json.loads(RESULT.read_text())["results"]
    assert all(row["problem"] in text for row in rows)
    assert "poisson3d_256 | 16,777,216" in text
