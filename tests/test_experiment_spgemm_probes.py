"""The SpGEMM probes of this round on the CPU: the Markdown table they write, and their
CUDA kept their own (their GPU parts run on the device only)."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks import common
from benchmarks.experiments import (
    spgemm_alg1_blocks,
    spgemm_esc_probe,
    spgemm_heavy_apart,
    spgemm_rows_probe,
)


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


@pytest.mark.parametrize(
    "probe, kernels",
    [
        (spgemm_rows_probe, ("entry_products", "rows_main", "rows_long", "move_slots")),
        (
            spgemm_heavy_apart,
            (
                "row_products_sum",
                "classify",
                "heavy_list",
                "light_indptr",
                "light_entries",
                "heavy_sort",
                "heavy_dense",
                "heavy_prefix",
                "final_indptr",
                "move_light",
                "move_heavy",
                "light_starts",
            ),
        ),  # fmt: skip
    ],
)
def test_a_probe_keeps_its_kernels_apart_from_the_library(probe, kernels):
    # its CUDA is its own (no include of the library's headers), every kernel extern "C"
    source = probe.SOURCE
    assert "#include" not in source
    for name in kernels:
        assert f"void {name}(" in source or f"\n{name}(" in source
    assert source.count("__global__") == source.count('extern "C" __global__')


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


class _Stub:
    """What timed_in_turns reads of CuPy and of the operands: a clock to synchronize, and
    products that log who ran."""

    def __init__(self, log):
        self.log = log
        self.cuda = self
        self.fresh = 0

    def Device(self):  # noqa: N802 - CuPy's name
        return self

    def synchronize(self):
        pass

    def __matmul__(self, other):
        if other == "I":  # A @ identity: a fresh operand
            self.fresh += 1
            return _Stub(self.log)
        self.log.append("cupyx")
        return self


class _Timer:
    def __init__(self, ms):
        self.ms = ms

    def spans(self):
        return {"piece": self.ms}


def test_turns_alternate_drop_the_first_sample_and_give_fresh_operands():
    log = []
    A = _Stub(log)

    def product(name, ms):
        def run(B):
            assert B is not A  # a fresh operand each sample
            log.append(name)
            return _Timer(ms)

        return run

    products = {"p": product("p", 1.0), "q": product("q", 3.0)}
    walls, spans = spgemm_esc_probe.timed_in_turns(A, A, "I", products, repeat=4)
    assert log == ["cupyx", "p", "q", "p", "q", "cupyx", "q", "cupyx", "p"] + [
        "cupyx", "p", "q", "p", "q", "cupyx"]  # fmt: skip
    assert A.fresh == 15  # every sample, cupyx's too
    assert [len(walls[k]) for k in ("cupyx", "p", "q")] == [4, 4, 4]
    assert spans == {"p": [{"piece": 1.0}] * 4, "q": [{"piece": 3.0}] * 4}
    row = spgemm_esc_probe.median_row(
        "fit", "m", "p", "P", argparse.Namespace(nnz=5), argparse.Namespace(nnz=7),
        {"p": [1.0, 2.0, 9.0], "cupyx": [3.0]}, {"p": [{"x": 1.0}, {"x": 5.0}, {"x": 2.0}]},
    )  # fmt: skip
    assert row == {"set": "fit", "matrix": "m", "config": "P", "nnz": 5, "nnz_out": 7,
                   "wall_ms": 2.0, "cupyx_ms": 3.0, "x": 2.0}  # fmt: skip
    cells = [cell(row) for _, _, cell in spgemm_esc_probe.wall_columns("C")]
    assert cells == ["P", "2.000", "3.000", "1.50x"]


def test_a_piece_only_some_rows_have_gets_its_column_and_blanks(tmp_path, capsys):
    # a variant that times one more piece (the heavy rows run before ALG1, not beside it)
    rows = [
        {"set": "fit", "matrix": "m", "config": "a", "wall_ms": 2.0, "cupyx_ms": 1.0, "x": 0.5},
        {"set": "fit", "matrix": "m", "config": "b", "wall_ms": 3.0, "cupyx_ms": 1.0, "x": 0.25,
         "heavy rows": 1.5},
    ]  # fmt: skip
    args = argparse.Namespace(out=None, md=None)
    header = {"command": "from an earlier run's file"}
    spgemm_esc_probe.write_results(
        args, spgemm_esc_probe.__doc__, "m", rows, spgemm_esc_probe.wall_columns("C"), "n",
        header=header,
    )  # fmt: skip
    assert capsys.readouterr().out.splitlines() == [
        "| set | matrix | C | wall | cupyx | x cupyx | x | heavy rows |",
        "|---|---|---|---:|---:|---:|---:|---:|",
        "| fit | m | a | 2.000 | 1.000 | 0.50x | 0.500 |  |",
        "| fit | m | b | 3.000 | 1.000 | 0.33x | 0.250 | 1.500 |",
    ]
