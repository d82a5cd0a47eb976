"""The SpGEMM probes of this round on the CPU: the Markdown table both write (their GPU
parts run on the device only)."""

from __future__ import annotations

import argparse
import json

from benchmarks import common
from benchmarks.experiments import spgemm_alg1_blocks, spgemm_esc_probe, spgemm_rows_probe


def test_the_table_is_printed_and_written_under_its_title(tmp_path, capsys):
    path = tmp_path / "probe.md"
    lines = ["| matrix | ms |", "|---|---:|", "| powerlaw | 1.500 |"]
    common.table_md(path, spgemm_esc_probe.__doc__, {"device": "GPU"}, "Medians.", lines)
    text = path.read_text()
    assert text.startswith("# " + spgemm_esc_probe.__doc__.splitlines()[0])
    assert "{'device': 'GPU'}" in text and "Medians." in text
    assert text.rstrip().endswith("| powerlaw | 1.500 |")
    assert "| powerlaw | 1.500 |" in capsys.readouterr().out


def test_no_path_prints_only(tmp_path, capsys):
    common.table_md(None, spgemm_alg1_blocks.__doc__, {}, "", ["| a |"])
    assert capsys.readouterr().out.strip() == "| a |"
    assert not list(tmp_path.iterdir())


def test_the_rows_probe_keeps_its_kernels_apart_from_the_library():
    # its CUDA is its own (no include of the library's headers, every kernel extern "C")
    source = spgemm_rows_probe.SOURCE
    assert "#include" not in source
    for name in ("entry_products", "rows_main", "rows_long", "move_slots"):
        assert f"void {name}(" in source or f"\n{name}(" in source


def test_a_probes_rows_become_its_table_and_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(common, "experiment_header", lambda module: {"command": module})
    row = {"set": "fit", "matrix": "powerlaw", "config": "8:256", "same": True,
           "wall_ms": 2.0, "cupyx_ms": 1.5, "rows_main": 0.75, "move": 0.1}  # fmt: skip
    out = tmp_path / "probe.json"
    args = argparse.Namespace(out=out, md=None)
    columns = [("CONFIG", "---", lambda r: r["config"]), ("wall", "---:", lambda r: "2.000")]
    spgemm_esc_probe.write_results(args, spgemm_esc_probe.__doc__, "m", [row], columns, "n")
    assert json.loads(out.read_text()) == {"command": "m", "rows": [row]}
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "| set | matrix | CONFIG | wall | rows_main | move |",
        "|---|---|---|---:|---:|---:|",
        "| fit | powerlaw | 8:256 | 2.000 | 0.750 | 0.100 |",
    ]
