"""The benchmarks page's loader: folders with some, none or bad result files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from sparsegpu import bench, probe

EXTENSION = Path(__file__).resolve().parents[1] / "docs" / "_ext" / "sparsegpu_results.py"


@pytest.fixture(scope="module")
def extension():
    pytest.importorskip("sphinx")
    spec = importlib.util.spec_from_file_location("sparsegpu_results", EXTENSION)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:  # a Sphinx whose docutils layer does not import here
        pytest.skip(f"the docs extension's Sphinx dependencies do not import here: {exc}")
    return module


@pytest.fixture(scope="module")
def bench_data():
    return bench.run(["stencil2d_64"], backends=["scipy"], repeat=1).to_json()


def test_bench_file_is_recognised(extension, tmp_path, bench_data):
    path = tmp_path / "bench_cpu.json"
    path.write_text(json.dumps(bench_data))
    kind, data = extension.classify(path)
    assert kind == "bench"
    assert data["results"][0]["matrix"] == "stencil2d_64"


def test_probe_file_is_recognised(extension, tmp_path):
    result = probe.ProbeResult(device={"name": "X"}, copy_bytes=8, copy_ms=1.0, copy_gb_per_s=1.0)
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(result.to_json()))
    assert extension.classify(path) == ("probe", result)


def test_other_json_is_shown_as_is(extension, tmp_path):
    path = tmp_path / "solvers.json"
    path.write_text(json.dumps({"solver": "cg", "seconds": 1.25}))
    assert extension.classify(path) == ("other", {"solver": "cg", "seconds": 1.25})


@pytest.mark.parametrize(
    "content",
    ["{broken", json.dumps({"schema": bench.SCHEMA, "results": "none"})],
    ids=["not-json", "bad-bench-file"],
)
def test_bad_file_is_an_error_naming_it(extension, tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="bad.json"):
        extension.classify(path)


def test_table_node_has_every_row(extension, bench_data):
    columns, rows = bench.results_table(bench_data)
    table = extension.table_node(columns, rows)
    assert len(list(table.findall(lambda n: n.tagname == "row"))) == len(rows) + 1


@pytest.mark.parametrize(
    ("name", "present"),
    [("sparsegpu.bench", True), ("sparsegpu.no_such_module", False), ("no_such_pkg.mod", False)],
)
def test_optional_api_modules_are_detected(extension, name, present):
    assert extension._module_present(name) is present
