"""benchmarks/merge_path_variants.py on the CPU: its arguments, table and --from-json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import merge_path_variants
from sparsegpu.device import _cuda

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "docs" / "benchmarks" / "results" / "merge_path_variants_h200.json"


@pytest.fixture(scope="module")
def script():
    return merge_path_variants


def _fake_result():
    shapes = {"256x8": 240.0, "128x4": 250.0}
    return {
        "device": "fake",
        "variants": ["before", "after"],
        "variant_files": {"before": "/tmp/b.cu", "after": "merge_path.cu"},
        "results": [
            {
                "matrix": "arrow_2M_x8_16x1M",
                "dtype": "float64",
                "nnz": 31_999_840,
                "raw_us": {"csr_alg1": 280.0, "csr_alg2": 220.0},
                "variants_us": {"before": shapes, "after": {"256x8": 200.0, "128x4": 210.0}},
            }
        ],
    }


def test_summary_takes_each_variants_best_shape_against_the_best_algorithm(script):
    s = script.summarize(_fake_result()["results"][0])
    assert s["raw_best_us"] == 220.0
    assert s["before"] == {"best_us": 240.0, "shape": "256x8", "vs_raw": 220.0 / 240.0}
    assert s["after"]["vs_raw"] == pytest.approx(1.1)


def test_from_json_writes_the_table(script, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_fake_result()))
    md = tmp_path / "r.md"
    assert script.main(["--from-json", str(path), "--md", str(md)]) == 0
    text = md.read_text()
    assert "| arrow_2M_x8_16x1M | float64 | 31,999,840 | 220.0 | 240.0 (256x8) | 0.917x |" in text


def test_the_table_says_how_rows_were_timed_only_where_the_result_does(script):
    result = _fake_result()
    assert "alternation" not in script.markdown(result)
    result["results"][0]["calls_per_sample"] = 5
    assert "in alternation, one sample of each per round, each a loop of 5" in script.markdown(
        result
    )


@pytest.mark.parametrize("bad", ["before", "=x.cu", "before=", "before=/no/such/file.cu"])
def test_a_variant_must_name_an_existing_file(script, bad, capsys):
    with pytest.raises(SystemExit):
        script.main(["--variant", bad])
    assert "--variant" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["1st=.", "a-b=."])
def test_a_variant_name_must_be_an_identifier(script, bad, capsys):
    with pytest.raises(SystemExit):
        script.main(["--variant", bad.replace(".", str(ROOT))])
    assert "identifier" in capsys.readouterr().err


def test_a_directory_variant_must_be_a_checkout(script, tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.main(["--variant", f"before={tmp_path}"])
    assert "not a sparsegpu checkout" in capsys.readouterr().err


def test_a_checkout_brings_its_own_plan_module(script):
    from sparsegpu.backends import merge_path as current

    name, path = script.parse_variant(f"here={ROOT}")
    assert (name, path) == ("here", ROOT)
    module = script.plan_module("here", ROOT)
    assert module is not current
    assert module.__name__ == "sparsegpu.backends._merge_path_variant_here"
    assert module.MergePathPlan is not current.MergePathPlan
    assert module.SOURCE == current.SOURCE == "merge_path.cu"


@pytest.mark.skipif(_cuda.cupy_or_none() is not None, reason="would run the benchmark")
def test_no_gpu_exits_2(script):
    assert script.main(["--variant", f"after={ROOT / 'sparsegpu/kernels/merge_path.cu'}"]) == 2


@pytest.mark.skipif(not RESULT.exists(), reason="no committed result yet")
def test_the_committed_result_redraws(script, tmp_path):
    md = tmp_path / "r.md"
    assert script.main(["--from-json", str(RESULT), "--md", str(md)]) == 0
    assert "arrow_3M_x6_48x400k" in md.read_text()
