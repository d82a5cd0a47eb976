"""``sparsegpu fetch`` and ``sparsegpu info FILE|NAME`` against the local collection."""

from __future__ import annotations

import json

import pytest

from sparsegpu import datasets
from sparsegpu.cli import main
from sparsegpu.io import suitesparse


def test_fetch_prints_the_paths(server, tmp_path, capsys):
    assert main(["fetch", "--no-progress", "HB/bcsstk13", "Newman/karate"]) == 0
    out = capsys.readouterr().out.split()
    assert out == [
        str(tmp_path / "cache" / "MM" / "HB" / "bcsstk13" / "bcsstk13.mtx"),
        str(tmp_path / "cache" / "MM" / "Newman" / "karate" / "karate.mtx"),
    ]


def test_fetch_data_dir_option(server, tmp_path, capsys):
    assert main(["fetch", "--data-dir", str(tmp_path / "elsewhere"), "HB/west0067"]) == 0
    assert (tmp_path / "elsewhere" / "MM" / "HB" / "west0067" / "west0067.mtx").is_file()


@pytest.mark.parametrize(
    ("name", "message"),
    [("Bad/missing", "404"), ("Bad/traversal", "refusing"), ("../x", "not a collection name")],
    ids=["404", "traversal", "bad-name"],
)
def test_fetch_failure_is_one_line_and_nonzero(server, capsys, name, message):
    assert main(["fetch", "--no-progress", name]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sparsegpu fetch: {name}: ") and message in err
    assert err.count("\n") == 1


def test_fetch_offline_says_the_cache_still_works(server, capsys, monkeypatch):
    monkeypatch.setenv(suitesparse.URL_ENV, "http://127.0.0.1:9")
    assert main(["fetch", "--no-progress", "HB/bcsstk13"]) == 1
    assert "without a network" in capsys.readouterr().err


def test_info_of_a_dataset_a_file_and_a_cached_matrix(server, capsys):
    suitesparse.fetch("Newman/karate", progress=False)
    targets = ["bcsstk13", str(datasets.path("lp_afiro")), "Newman/karate"]
    assert main(["info", "--json", *targets]) == 0
    described = json.loads(capsys.readouterr().out)
    assert [d["shape"] for d in described] == [[2003, 2003], [27, 51], [34, 34]]
    assert [d["nnz"] for d in described] == [83_883, 102, 156]
    assert [d["symmetry"] for d in described] == ["symmetric", "general", "symmetric"]
    assert [d["field"] for d in described] == ["real", "real", "pattern"]
    karate = described[2]["row_lengths"]
    assert (karate["min"], karate["max"], karate["empty_rows"]) == (1, 17, 0)
    assert described[0]["kind"] == "computational fluid dynamics problem"


def test_info_table(capsys):
    assert main(["info", "karate"]) == 0
    out = capsys.readouterr().out
    assert "karate" in out and "34 x 34" in out and "pattern" in out and "1 / 17" in out


@pytest.mark.parametrize("target", ["/nonexistent.mtx", "./m.mtx.gz", "gone.tar.gz"])
def test_info_of_a_missing_file_says_so_and_not_fetch(target, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["info", target]) == 1
    err = capsys.readouterr().err
    assert err == f"sparsegpu info: {target}: no such file\n"


def test_fetch_of_a_bundled_matrix_works_offline(capsys, tmp_path, monkeypatch):
    """Both ship with the package (issue 33: they needed the network)."""
    monkeypatch.setenv(suitesparse.URL_ENV, "http://127.0.0.1:9")
    monkeypatch.setenv(suitesparse.DATA_DIR_ENV, str(tmp_path))
    assert main(["fetch", "--no-progress", "HB/west0067", "bcsstk13"]) == 0
    paths = capsys.readouterr().out.split()
    assert paths == [
        str(tmp_path / "MM" / "HB" / "west0067" / "west0067.mtx"),
        str(tmp_path / "MM" / "HB" / "bcsstk13" / "bcsstk13.mtx"),
    ]
    A = suitesparse.load("HB/bcsstk13")
    assert abs(A - datasets.load("bcsstk13")).max() == 0
    assert suitesparse.cached() == ["HB/bcsstk13", "HB/west0067"]
    with pytest.raises(suitesparse.DownloadError):  # a refresh asks the collection
        suitesparse.fetch("HB/west0067", refresh=True, progress=False)


def test_info_of_an_unknown_name_says_how_to_fetch(server, capsys):
    assert main(["info", "HB/west0479"]) == 1
    err = capsys.readouterr().err
    assert "sparsegpu fetch HB/west0479" in err and err.count("\n") == 1


def test_info_of_a_bad_file_names_it(tmp_path, capsys):
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix array pattern general\n2 2\n")
    assert main(["info", str(bad)]) == 1
    assert str(bad) in capsys.readouterr().err


def test_info_without_arguments_is_unchanged(capsys):
    assert main(["info", "--json"]) == 0
    assert {"versions", "gpus", "backends"} <= set(json.loads(capsys.readouterr().out))
