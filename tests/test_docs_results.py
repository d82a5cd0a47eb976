"""The benchmarks page's loader: folders with some, none or bad result files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparsegpu import bench
from sparsegpu.measure import probe

from .scripts import load_script

EXTENSION = Path(__file__).resolve().parents[1] / "docs" / "_ext" / "sparsegpu_results.py"


@pytest.fixture(scope="module")
def extension():
    pytest.importorskip("sphinx")
    try:
        module = load_script(EXTENSION)
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


RESULTS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "results"
PAGE = RESULTS.parent / "index.rst"


def test_autotune_file_is_recognised_and_tabled(extension, tmp_path):
    policy = {"block_size": 256, "threads_per_row": 2}
    best = {"time_ms": 0.05, "gb_per_s": 3900.0, "policy": policy}
    winner = {"backend": "shuffle", "value_dtype": "float64", "best": best, "gain": 1.1}
    winner["untuned"] = {**best, "time_ms": 0.055}
    report = {"matrix": "m", "row_class": "short", "overall": {"float64": winner}}
    report["winners"] = [winner]
    path = tmp_path / "autotune.json"
    path.write_text(json.dumps([report]))
    kind, data = extension.classify(path)
    assert kind == "autotune"
    columns, rows = extension.autotune_rows(data)
    assert rows == [
        ["m", "short", "float64", "* shuffle", rows[0][4], "50.0", "3,900", "55.0", "1.10x"]
    ]
    assert "block_size=256" in rows[0][4] and len(columns) == len(rows[0])


def test_markdown_summary_becomes_tables_and_text(extension):
    text = "# Title\n\nSome `code` here.\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n| 3 |\n"
    found = extension.markdown_nodes(text)
    assert [n.tagname for n in found] == ["rubric", "paragraph", "table"]
    assert found[1].astext() == "Some code here."
    assert len(list(found[2].findall(lambda n: n.tagname == "row"))) == 3


def test_descriptions_are_read_per_file(extension):
    lines = ["a.json: one", "   two", "b.json: three"]
    assert extension.descriptions(lines) == {"a.json": "one two", "b.json": "three"}


def test_every_committed_result_file_is_described(extension):
    page = PAGE.read_text()
    described = extension.descriptions(page.split(".. sparsegpu-results::", 1)[1].splitlines())
    for path in sorted(RESULTS.glob("*.json")):
        assert described.get(path.name), f"{path.name} has no sentence in {PAGE.name}"
        if extension.classify(path)[0] == "other":
            assert path.with_suffix(".md").exists(), f"{path.name} has no .md summary"
