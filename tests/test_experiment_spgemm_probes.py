"""The SpGEMM probes of this round on the CPU: the Markdown table both write (their GPU
parts run on the device only)."""

from __future__ import annotations

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
