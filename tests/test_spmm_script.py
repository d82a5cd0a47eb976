"""benchmarks/spmm.py on the CPU: its sets, summary, markdown and --from-json.

The benchmark runs on a GPU only; these tests catch breakage of the parts that need none,
on a fake result shaped like a real one."""

from __future__ import annotations

import json

import pytest

from benchmarks import spmm


@pytest.fixture(scope="module")
def script():
    return spmm


def fake_row(matrix, set_label, dtype, order, k, auto, best=1.0):
    ms = {"cusparse_csr_alg2": best, "cusparse_best": best, "cupyx": 2 * best, "torch": 1.5 * best}
    ms["auto"] = auto
    three = {key: ms[key] for key in ("cusparse_best", "cupyx", "torch")}
    return {
        "matrix": matrix,
        "set": set_label,
        "dtype": dtype,
        "order": order,
        "k": k,
        "n_rows": 1000,
        "n_cols": 1000,
        "nnz": 5000,
        "ms": ms,
        "best_of_three": "cusparse_best",
        "auto_vs_best": best / auto,
        "auto_vs": {key: value / auto for key, value in three.items()},
        "auto_backend": "shuffle",
    }


def fake_result(rows):
    return {"device": "NVIDIA Test", "versions": {"cupy": "0", "cuda_runtime": 0}, "results": rows}


def test_summary_gives_the_bars_per_set(script):
    rows = [
        fake_row("a", "heldout", "float64", "C", 2, auto=0.5),
        fake_row("a", "heldout", "float64", "F", 2, auto=0.8),
        fake_row("b", "heldout", "float32", "C", 8, auto=1.1),  # 0.91x: under the bar
        fake_row("c", "fit", "float64", "C", 8, auto=0.25),
    ]
    summary = script.summarize(rows)
    held = summary["heldout"]
    assert held["rows"] == 3 and held["matrices"] == 2
    assert held["min_auto_vs_best"] == pytest.approx(1 / 1.1)
    assert held["worst"] == "b float32 C k=8"
    assert held["below_close"] == ["b float32 C k=8: 0.91x"]
    assert held["geomean_auto_vs_best"] == pytest.approx((2 * 1.25 / 1.1) ** (1 / 3))
    assert held["bars_met"] == {"every row >= 0.97x": False, "geomean >= 1.25x": True}
    assert set(held["by_dtype_and_order"]) == {"float64 C", "float64 F", "float32 C"}
    assert summary["fit"]["geomean_auto_vs_best"] == pytest.approx(4.0)


def test_markdown_has_a_row_per_matrix_dtype_and_order(script):
    rows = [
        fake_row("a", "heldout", "float64", order, k, auto=0.5)
        for order in ("C", "F")
        for k in (2, 8)
    ]
    text = script.markdown(fake_result(rows))
    assert "## heldout: geomean 2.00x, lowest 2.00x" in text
    assert "| a | 1,000 | 5,000 | float64 | C | 2.00x | 2.00x | shuffle |" in text
    assert "| k=2 | k=8 |" in text and "NOT met" not in text


def test_from_json_redraws_without_a_gpu(script, tmp_path):
    result = fake_result([fake_row("a", "heldout", "float64", "C", 2, auto=2.0)])
    source = tmp_path / "r.json"
    source.write_text(json.dumps(result))
    md = tmp_path / "r.md"
    assert script.main(["--from-json", str(source), "--md", str(md)]) == 0
    assert "every row >= 0.97x: NOT met" in md.read_text()


def test_sets_keep_fitting_and_claims_apart(script):
    fit = script.matrices("fit", False, script.DEFAULT_MATRICES)
    held = script.matrices("heldout", False, script.DEFAULT_MATRICES)
    assert set(fit) == {"stencil2d5_60", "stencil2d5_1000", "stencil3d27_64", "rmat_s17_e8"}
    assert {"stencil2d5_2000", "stencil3d27_100", "rmat_s19_e8", "bcsstk13"} <= set(held)
    assert not set(fit) & set(held)
    assert "karate" not in held  # under MIN_REAL_ROWS rows
    some = script.matrices("heldout", False, script.DEFAULT_MATRICES, ["cage10", "EX5"])
    assert {"cage10", "EX5"} <= set(some) and "bcsstk13" not in some
    with pytest.raises(ValueError, match="use one of"):
        script.matrices("tuning", False, script.DEFAULT_MATRICES)


def test_only_runs_the_matrices_it_names(script):
    only = ["cage10", "EX5", "rmat_s19_e8"]
    held = script.matrices("heldout", False, script.DEFAULT_MATRICES, None, only)
    assert set(held) == set(only)
    assert script.matrices("fit", False, script.DEFAULT_MATRICES, None, ["cage10"]) == {}
