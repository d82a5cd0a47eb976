"""benchmarks/auto_vs_cusparse.py on the CPU: its sets, summary, markdown and --from-json.

The benchmark runs on a GPU only (the lead's H200 run); these tests catch breakage of the
parts that need none, on a fake result shaped like a real one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks import auto_vs_cusparse
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda

from .scripts import load_script


@pytest.fixture(scope="module")
def script():
    return auto_vs_cusparse


def fake_row(matrix, set_label, dtype, auto, estimate, raw=1.0, cupyx=2.0, planning=5.0):
    """A result row with the fields bench_one writes; times in ms."""
    ms = {
        "raw_csr_alg1": raw,
        "raw_csr_alg2": raw * 1.1,
        "raw_best": raw,
        "cupyx": cupyx,
        "merge_path": raw * 0.9,
        "cusparse": raw * 1.05,
        "auto_estimate": estimate,
        "auto": auto,
    }
    gbs = {k: 1000.0 / v for k, v in ms.items()}
    return {
        "matrix": matrix,
        "set": set_label,
        "dtype": dtype,
        "n_rows": 100,
        "n_cols": 100,
        "nnz": 1_234_567,
        "row_mean": 12.3,
        "row_max": 40,
        "row_class": "regular",
        "bytes": 1_000_000,
        "auto_backend": "merge_path",
        "auto_policy": "MergePathPolicy()",
        "auto_level": "measure",
        "auto_reason": "measured fastest",
        "auto_explained_backend": "merge_path",
        "auto_explained_level": "measure",
        "planning_ms": planning,
        "planning_measurements": [
            {"backend": "merge_path", "policy": "MergePathPolicy()", "ms": auto, "agreed": True},
            {"backend": "cusparse", "policy": "CusparsePolicy()", "ms": None, "agreed": False},
        ],
        "auto_estimate_backend": "csr_vector",
        "auto_estimate_policy": "VectorPolicy()",
        "auto_estimate_level": "estimate",
        "ms": ms,
        "gb_per_s": gbs,
        "auto_vs_raw_best": raw / auto,
        "auto_estimate_vs_raw_best": raw / estimate,
        "auto_vs_cupyx": cupyx / auto,
        "merge_path_vs_raw_best": 1 / 0.9,
        "planning_products": None if planning is None else planning / auto,
        "pct_copy": {k: v / 30 for k, v in gbs.items()},
    }


def fake_result(script):
    rows = []
    for dtype in ("float64", "float32"):
        rows += [
            fake_row("arrow_2M_x8_16x1M", "heldout-generated", dtype, auto=0.8, estimate=1.6),
            fake_row("rmat_s21_e16", "heldout-generated", dtype, auto=1.0, estimate=1.0),
            fake_row("tall_72k_x16_2700", "heldout-generated", dtype, auto=1.25, estimate=1.3),
            fake_row("bcsstk13", "heldout-real", dtype, auto=0.5, estimate=0.6, planning=9.0),
            fake_row("stencil2d_4096", "tuning", dtype, auto=0.7, estimate=0.7),
        ]
    result = {
        "device": "NVIDIA H200",
        "versions": {"cupy": "13.6.0", "cuda_runtime": 12080},
        "sparsegpu": "0.0",
        "copy_gb_per_s": 3000.0,
        "set": "both",
        "scale": "full",
        "provenance": script.PROVENANCE,
        "host_overhead": {
            "n_rows": 1000,
            "nnz": 10000,
            "cupyx_us": 46.0,
            "auto_backend": "csr_vector",
            "auto_us": 10.0,
            "auto_matvec_function_us": 8.0,
            "auto_plan_only_us": 5.0,
            "cusparse_us": 12.0,
            "merge_path_us": 9.0,
        },
        "results": rows,
    }
    result["summary"] = script.summarize(rows)
    return result


def test_summary_per_set_and_dtype(script):
    summary = fake_result(script)["summary"]
    assert set(summary) == {"heldout-generated", "heldout-real", "heldout", "tuning"}
    for per_dtype in summary.values():
        assert set(per_dtype) == {"float32", "float64"}
    gen = summary["heldout-generated"]["float64"]
    assert gen["matrices"] == 3
    assert math.isclose(gen["geomean_auto_vs_raw_best"], (1.25 * 1.0 * 0.8) ** (1 / 3))
    assert math.isclose(gen["min_auto_vs_raw_best"], 0.8)
    assert gen["worst_matrix"] == "tall_72k_x16_2700"
    assert gen["matrices_below_close"] == ["tall_72k_x16_2700"]
    assert gen["matrices_below_raw"] == ["tall_72k_x16_2700"]
    assert math.isclose(gen["arrow_auto_vs_raw_best"], 1.25)
    assert math.isclose(gen["geomean_auto_estimate_vs_raw_best"], (1 / 1.6 / 1.0 / 1.3) ** (1 / 3))
    assert math.isclose(gen["geomean_auto_vs_cupyx"], 2 * (1.25 * 1.0 * 0.8) ** (1 / 3))
    assert gen["mean_planning_ms"] == 5.0 and gen["max_planning_ms"] == 5.0
    held = summary["heldout"]["float32"]
    assert held["matrices"] == 4
    assert held["max_planning_ms"] == 9.0 and held["max_planning_matrix"] == "bcsstk13"
    assert summary["tuning"]["float64"]["arrow_auto_vs_raw_best"] is None
    json.dumps(summary)  # the JSON keeps it


def test_markdown_says_which_matrices_were_which(script):
    result = fake_result(script)
    text = script.markdown(result)
    for label in ("tuning", "heldout-real", "heldout-generated"):
        assert f"**{label}**" in text
    assert "SMALL_ITEMS" in text and "took no part" in text
    assert "| matrix | set | dtype |" in text
    assert "| arrow_2M_x8_16x1M | heldout-generated | float64 | 1,234,567 | merge_path |" in text
    assert "planning ms" in text
    assert "| heldout | float32 | 4 |" in text
    assert "tall_72k_x16_2700" in text.split("Per set and dtype")[1]
    # only the sets present are described
    only_real = dict(result, results=[r for r in result["results"] if r["set"] == "heldout-real"])
    only_real.pop("summary")
    text = script.markdown(only_real)
    assert "**heldout-real**" in text and "**tuning**" not in text


def test_summary_without_planning_times(script):
    rows = [fake_row("a", "heldout-real", "float64", auto=1.0, estimate=1.0, planning=None)]
    s = script.summarize(rows)["heldout-real"]["float64"]
    assert s["mean_planning_ms"] is None and s["max_planning_matrix"] is None
    assert "| - |" in script.markdown(dict(fake_result(script), results=rows, summary=None))


def test_from_json_redraws_without_a_gpu(script, tmp_path):
    result = fake_result(script)
    result.pop("summary")  # recomputed from the rows
    source = tmp_path / "result.json"
    source.write_text(json.dumps(result))
    md = tmp_path / "result.md"
    assert script.main(["--from-json", str(source), "--md", str(md)]) == 0
    text = md.read_text()
    assert "| heldout-generated | float64 | 3 |" in text


def test_plot_from_fake_result(script, tmp_path):
    pytest.importorskip("matplotlib")
    script.plot(fake_result(script), tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_set_argument(script):
    with pytest.raises(SystemExit):
        script.main(["--set", "training"])


@pytest.mark.skipif(_cuda.cupy_or_none() is not None, reason="would run the benchmark")
def test_no_gpu_exits_2(script):
    assert script.main(["--set", "heldout"]) == 2


def test_sets_label_the_matrices(script):
    folder = Path(script.DEFAULT_MATRICES)
    heldout = script.matrices("heldout", "small", folder, cupy=None)
    labels = {label for label, *_ in heldout}
    assert labels == {"heldout-generated", "heldout-real"}
    generated = [name for label, name, *_ in heldout if label == "heldout-generated"]
    assert generated == list(synthetic.heldout_suite("small"))
    real = [name for label, name, *_ in heldout if label == "heldout-real"]
    assert "bcsstk13" in real and len(real) == len(list(folder.glob("*.mtx*")))
    assert not any(per_dtype for *_, per_dtype in heldout)  # built once for every dtype
    tuning = script.matrices("tuning", "small", folder, cupy=None)
    assert [name for _, name, *_ in tuning] == list(synthetic.suite("small"))
    assert all(label == "tuning" and per_dtype for label, _, _, per_dtype in tuning)
    both = script.matrices("both", "small", folder, cupy=None)
    assert len(both) == len(heldout) + len(tuning)
    with pytest.raises(ValueError, match="set"):
        script.matrices("training", "small", folder, cupy=None)


def test_heldout_builds_are_host_matrices(script):
    folder = Path(script.DEFAULT_MATRICES)
    for label, name, make, _ in script.matrices("heldout", "small", folder, cupy=None):
        if label == "heldout-real" and name != "bcsstk13":
            continue  # one real matrix is enough here
        A = make(None)
        assert A.shape[0] > 0 and A.nnz > 0 and isinstance(A.data, np.ndarray), name


# -------------------------------------------------- bench_one with CPU stand-ins for the GPU
class _FakeMeasurement:
    def __init__(self, backend, ms, note=""):
        self.backend, self.policy, self.ms, self.agreed = backend, ("policy", backend), ms, True
        self.note = note


class _FakeChoice:
    """What ``sparsegpu.plan`` returns, as far as the benchmark reads it."""

    backend = "scipy"
    policy = ("policy", "scipy")
    reason = "measured fastest"
    level = "measure"
    planning_ms = np.float64(3.5)
    measurements = (
        _FakeMeasurement("scipy", 0.1),
        _FakeMeasurement("cusparse", None, note="one sample: over 4x the fastest so far"),
    )


def test_bench_one_with_cpu_stand_ins(script, monkeypatch):
    """Every step of bench_one, with numpy for cupy, scipy for cupyx and fake timings: catches
    a broken row (a name, a key, a field that is not JSON) before the GPU run."""
    import scipy.sparse as sp

    import sparsegpu as sg

    if sg.device._cuda.unavailable_reason() is None:
        pytest.skip("CPU stand-ins for cupy: with a GPU, auto computes on it (the real run)")
    from sparsegpu.device._mirror import HOST

    class FakeRegistry:
        @staticmethod
        def registered():
            return {"cusparse": type("B", (), {"residence": HOST})()}

    class FakeDirect:
        def __init__(self, mirror, x, y, algorithm):
            self.A = sp.csr_matrix((mirror.data, mirror.indices, mirror.indptr), mirror.shape)
            self.x, self.y = x, y

        def __call__(self):
            self.y[...] = self.A @ self.x

        def close(self):
            pass

    class FakePlanning:
        @staticmethod
        def plan_for(A, dtype, backend=None):
            return type("P", (), {"policy": ("policy", backend)})()

    def fake_matvec(A, x, backend=None, out=None):
        if out is None:
            return sp.csr_matrix(A) @ x
        out[...] = sp.csr_matrix(A) @ x
        return out

    planned = []

    def fake_plan(A, x):
        planned.append(A)
        return _FakeChoice()

    timings = iter(range(1, 1000))
    monkeypatch.setattr(script, "_registry", FakeRegistry)
    monkeypatch.setattr(script, "DirectSpMV", FakeDirect)
    monkeypatch.setattr(script, "_planning", FakePlanning)

    def fake_interleaved(fns, inner=1):
        out = {}
        for key, fn in fns.items():
            fn()
            out[key] = type("T", (), {"median_ms": 0.01 * next(timings)})()
        return out

    monkeypatch.setattr(script.measure, "cuda_time_interleaved", fake_interleaved)
    monkeypatch.setattr(sg, "matvec", fake_matvec)
    monkeypatch.setattr(sg, "choose", fake_plan)
    folder = Path(script.DEFAULT_MATRICES)
    rows = []
    for label, name, make, _ in script.matrices("heldout", "small", folder, cupy=None)[:3]:
        host = make(None)
        for dtype in (np.float64, np.float32):
            rows.append(
                script.bench_one(name, lambda host=host: host, dtype, np, sp, 3000.0, label)
            )
    assert len(planned) == len(rows)
    row = rows[0]
    assert row["set"] == "heldout-generated" and row["dtype"] == "float64"
    assert row["auto_backend"] == "scipy" and row["auto_level"] == "measure"
    assert row["planning_ms"] == 3.5 and type(row["planning_ms"]) is float
    assert row["planning_measurements"][1] == {
        "backend": "cusparse",
        "policy": "('policy', 'cusparse')",
        "ms": None,
        "agreed": True,
        "note": "one sample: over 4x the fastest so far",
    }
    assert set(row["ms"]) == {
        "raw_csr_alg1",
        "raw_csr_alg2",
        "raw_best",
        "cupyx",
        "merge_path",
        "cusparse",
        "cusparse_out",
        "auto_estimate",
        "auto",
    }
    assert row["auto_vs_raw_best"] == row["ms"]["raw_best"] / row["ms"]["auto"]
    assert row["cusparse_out_vs_raw_best"] == row["ms"]["raw_best"] / row["ms"]["cusparse_out"]
    assert row["cusparse_policy"] == "('policy', 'cusparse')"
    # a sample is a loop of products, however large the matrix
    assert all(r["calls_per_sample"] >= script.MIN_CALLS > 1 for r in rows)
    result = fake_result(script)
    result["results"] = rows
    result["summary"] = script.summarize(rows)
    json.dumps(result)
    assert "| arrow_20k_x8_4x5k | heldout-generated | float64 |" in script.markdown(result)


def test_markdown_says_how_columns_were_timed_only_where_the_result_does(script):
    result = fake_result(script)
    assert "alternation" not in script.markdown(result)  # an older result: no claim
    result["timing"] = "interleaved"
    for row, calls in zip(result["results"], (5, 200, 40), strict=False):
        row["calls_per_sample"] = calls
    text = script.markdown(result)
    assert "timed in alternation" in text
    low = min(r.get("calls_per_sample", 1) for r in result["results"])
    assert f"a loop of {low} to 200 products" in text


def test_readme_table_is_drawn_from_a_bench_file():
    """tools/readme_bench_table.py gives the README's headline table from a committed
    sparsegpu bench --json file (issue 33: the table is regenerated from bench)."""
    from .scripts import ROOT

    module = load_script(Path("tools") / "readme_bench_table.py")
    data = json.loads((ROOT / "docs/benchmarks/results/bench_h200.json").read_text())
    drawn = module.table(data).splitlines()
    readme = (ROOT / "README.md").read_text().splitlines()
    first = next(i for i, line in enumerate(readme) if line.startswith("| 2-D 5-point stencil"))
    for row, line in zip(drawn[2:], readme[first:], strict=False):
        assert row.strip("| ").split(" | ")[:5] == line.strip("| ").split(" | ")[:5]


def test_cusparse_bsr_summary_is_drawn_from_its_result():
    """The committed summary of benchmarks/cusparse_bsr.py is what its JSON gives."""
    results = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "results"
    from benchmarks import cusparse_bsr as bsr

    result = json.loads((results / "cusparse_bsr_h100.json").read_text())
    summary = bsr.markdown(result)
    assert summary == (results / "cusparse_bsr_h100.md").read_text()
    assert "| 2x3 | CSR fallback | - |" in summary and "| 3x3 | BSR | BSR (row-major) |" in summary
