"""benchmarks/solver_graphs.py on the CPU: the markdown of every section from a fake report
shaped like a real one (the benchmark itself needs a GPU)."""

from __future__ import annotations

import pytest

from benchmarks import solver_graphs


@pytest.fixture(scope="module")
def script():
    return solver_graphs


def solve(seconds, iterations, graphs=True):
    return {"seconds": seconds, "iterations": iterations, "info": 0, "graphs": graphs,
            "why": "", "residual": 1e-9}  # fmt: skip


def test_gmres_section(script):
    rows = [
        {"matrix": "cage10", "n": 11397, "nnz": 150645, "restart": 20,
         "graphs": solve(4.1e-3, 23), "plain": solve(2.9e-3, 23, False),
         "auto": solve(2.9e-3, 23, False), "cupyx": {"seconds": 6.9e-3, "info": 0},
         "vs_plain": 0.70, "vs_cupyx": 1.68, "auto_vs_plain": 1.0, "auto_vs_cupyx": 2.38,
         "iterations_identical": True},
        {"matrix": "cti-laplacian", "n": 16840, "nnz": 113304, "restart": 20,
         "graphs": solve(17e-3, 499), "plain": solve(48e-3, 499, False),
         "auto": solve(17e-3, 498), "cupyx": {"seconds": 0.1, "info": 0},
         "vs_plain": 2.8, "vs_cupyx": 6.0, "auto_vs_plain": 2.8, "auto_vs_cupyx": 6.0,
         "iterations_identical": False},
    ]  # fmt: skip
    text = script.markdown({"device": "GPU", "rtol": 1e-8, "repeat": 5, "gmres": rows})
    assert "gmres (restart 20)" in text
    assert (
        "| cage10 | 11,397 | 150,645 | 23 | 4.10 | 2.90 | 2.90 (no) | 6.90 | 0.70x | 1.00x" in text
    )
    assert "| cti-laplacian | 16,840 | 113,304 | 499 (differ) | 17.00 | 48.00 | 17.00 (yes)" in text


def test_errors_are_listed(script):
    text = script.markdown({"device": "GPU", "rtol": 1e-8, "repeat": 5,
                            "errors": {"gmres": "Traceback...\nValueError: boom"}})  # fmt: skip
    assert "**gmres failed**: `ValueError: boom`" in text


def test_numpy_path_section(script):
    mode = {"seconds": 0.2, "vs_scipy": 3.0, "relative_difference": 0.0}
    entry = {"n": 1601613, "nnz": 11_000_000, "iterations": 20,
             "scipy_alone": {"seconds": 0.6}, "vector_work": {"seconds": 0.18, "vs_scipy": 3.33},
             "pinned": mode, "staging": dict(mode, seconds=0.24, vs_scipy=2.5),
             "pageable": dict(mode, seconds=0.34, vs_scipy=1.76)}  # fmt: skip
    text = script.markdown({"device": "GPU", "rtol": 1e-8, "repeat": 3, "numpy_path": entry})
    assert "| scipy | 30.00 | 1 |" in text
    shipped = "| sparsegpu, x page-locked in place from its second product, pinned results"
    assert f"{shipped} | 10.00 | 3.00x |" in text
    staging = "| sparsegpu, x copied through the pinned staging buffer, pinned results"
    assert f"{staging} | 12.00 | 2.50x |" in text
    assert "| sparsegpu, pageable copies both ways | 17.00 | 1.76x |" in text


def test_reorder_rule_section(script):
    def runs(seconds, reordered_at=None):
        return [
            {"seconds": s, "info": 0, "iterations": 150, "residual": 1e-9, "why": "",
             "reordered": reordered_at is not None and k + 1 >= reordered_at}
            for k, s in enumerate(seconds)
        ]  # fmt: skip

    entry = {
        "fit": [{"grid": 60, "nnz": 1_500_000, "seconds": 0.1}],
        "seconds_per_nonzero": 7e-8, "n": 512_000, "nnz": 13_800_000, "solves": 10,
        "ordering_estimate_seconds": 0.97, "ordering_seconds": 1.1,
        "None": runs([0.3] * 10), "rcm": runs([1.2] + [0.1] * 9, 1),
        "auto": runs([0.3, 0.3, 0.3, 0.3, 1.2] + [0.1] * 5, 5),
        "auto_over_hindsight": [1.0, 1.0, 1.0, 1.1, 1.4, 1.3, 1.2, 1.2, 1.1, 1.1],
        "auto_reordered_at": 5,
    }  # fmt: skip
    text = script.markdown({"device": "GPU", "rtol": 1e-8, "repeat": 1, "reorder_rule": entry})
    assert "| auto | 0.300 | 0.100 | 2.90 | 1.38x |" in text
    assert "auto reordered at solve 5" in text and "at most 1.40x" in text
