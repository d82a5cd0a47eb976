"""``sparsegpu autotune``: argument errors, the no-GPU message, a CPU run with a test
backend, the cache listing, the default suite's row classes and the plot's data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu import cli
from sparsegpu._console import console
from sparsegpu.commands import autotune as autotune_command
from sparsegpu.commands import autotune as command
from sparsegpu.device import _cuda
from sparsegpu.device._mirror import RowLengthStats
from sparsegpu.engine import _rules
from sparsegpu.engine._tuning_store import TuningCache
from sparsegpu.tuning.plot import block_size_series, reference_lines
from tests.tuning_backends import CANDIDATES, ScriptedTimer, SweepBackend

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def sweep():
    backend = SweepBackend("sweep-cli")
    sg.register_backend(backend, replace=True)
    yield backend
    sg.unregister_backend("sweep-cli")


@pytest.fixture
def mtx(tmp_path) -> str:
    A = sp.random(80, 80, density=0.15, random_state=np.random.default_rng(0), format="csr")
    path = tmp_path / "small.mtx"
    scipy.io.mmwrite(str(path), A)
    return str(path)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """Tables one line per row, so that the tests can look for cell text."""
    monkeypatch.setattr(console(), "width", 300)


def run_cli(*argv) -> int:
    return cli.main(["autotune", *argv])


# ------------------------------------------------------------------- argument errors
ERRORS = {
    "negative_budget": (["--budget", "-5"], "--budget -5 must be a positive number"),
    "zero_budget": (["--budget", "0"], "--budget 0 must be a positive number"),
    "infinite_budget": (["--budget", "inf"], "--budget inf must be a positive number"),
    "zero_repeat": (["--repeat", "0"], "--repeat 0 must be at least 1"),
    "bad_dtype": (["--dtypes", "int16"], "--dtypes: cannot tune 'int16'"),
    "unknown_dtype": (["--dtypes", "float64,quad"], "--dtypes: cannot tune 'quad'"),
    "show_with_matrix": (["--show", "a.mtx"], "--show takes no MATRIX"),
    "clear_with_matrix": (["--clear", "a.mtx"], "--clear takes no MATRIX"),
    "unknown_backend": (["--backends", "nosuch"], "--backends: unknown backend 'nosuch'"),
    "auto_backend": (["--backends", "auto"], "--backends: 'auto' has nothing to tune"),
    "oracle_backend": (["--backends", "scipy"], "--backends: 'scipy' has nothing to tune"),
    "missing_plot_dir": (["--plot", "/no/such/dir/fig.png"], "does not exist"),
}


@pytest.mark.parametrize("argv,message", ERRORS.values(), ids=ERRORS.keys())
def test_argument_errors_are_one_line(argv, message, capsys, monkeypatch):
    # matplotlib is optional: the plot-directory check must not depend on it
    monkeypatch.setattr(autotune_command, "require_matplotlib", lambda: None)
    assert run_cli(*argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("sparsegpu autotune: ") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [["--budget", "soon"], ["--repeat", "many"], ["--index-dtype", "int16"], ["--backends", ","]],
    ids=["budget_text", "repeat_text", "index_dtype", "empty_backends"],
)
def test_unparsable_arguments_exit_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        run_cli(*argv)
    assert exc.value.code == 2
    assert "usage: sparsegpu autotune" in capsys.readouterr().err


def test_missing_matrix_file_is_a_clear_error(sweep, capsys):
    assert run_cli("no_such_matrix.mtx", "--backends", "sweep-cli") == 2
    assert "no_such_matrix.mtx: no such file" in capsys.readouterr().err


def test_unknown_matrix_name_is_a_clear_error(sweep, capsys):
    assert run_cli("nosuchmatrix", "--backends", "sweep-cli") == 2
    err = capsys.readouterr().err
    assert "'nosuchmatrix' is not a file, a bundled matrix" in err and err.count("\n") == 1


def test_unreadable_matrix_file_is_a_clear_error(sweep, tmp_path, capsys):
    bad = tmp_path / "bad.mtx"
    bad.write_text("this is not matrix market\n")
    assert run_cli(str(bad), "--backends", "sweep-cli") == 2
    err = capsys.readouterr().err
    assert f"{bad}: line 1" in err and err.count("bad.mtx") == 1  # the file named once


def test_suitesparse_names_are_loaded_through_sparsegpu_suitesparse(sweep, capsys, monkeypatch):
    def load(name, progress=True, **kwargs):
        return sp.random(50, 50, density=0.2, random_state=0, format="csr")

    monkeypatch.setattr("sparsegpu.io.suitesparse.load", load)
    assert run_cli("HB/fake", "--backends", "sweep-cli", "--repeat", "2", "--json") == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["matrix"] == "HB/fake" and report["shape"] == [50, 50]


def test_plot_without_matplotlib_fails_before_tuning(sweep, mtx, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert run_cli(mtx, "--backends", "sweep-cli", "--plot", str(tmp_path / "f.png")) == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib" in err
    assert TuningCache().entries() == []


def test_missing_platformdirs_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.delenv("SPARSEGPU_CACHE_DIR")
    monkeypatch.setitem(sys.modules, "platformdirs", None)
    assert run_cli("--show") == 2
    err = capsys.readouterr().err
    assert "platformdirs is not installed" in err and "--cache-dir" in err


def test_unavailable_backend_exits_non_zero_with_the_reason(capsys):
    class Off(SweepBackend):
        def unavailable_reason(self):
            return "needs a GPU"

    sg.register_backend(Off("sweep-off"), replace=True)
    try:
        assert run_cli("--backends", "sweep-off") == 1
    finally:
        sg.unregister_backend("sweep-off")
    err = capsys.readouterr().err
    assert "needs a GPU" in err and err.count("\n") == 1


@pytest.mark.skipif(_cuda.cupy_or_none() is not None, reason="a GPU is usable here")
def test_no_gpu_is_one_line_and_non_zero_without_traceback(tmp_path):
    env = {**os.environ, "SPARSEGPU_CACHE_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "sparsegpu", "autotune"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("sparsegpu autotune: no GPU to tune on: ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "tuning.json").exists()


# ---------------------------------------------------------------------- CPU runs
def test_json_run_reports_and_saves(sweep, mtx, tmp_path, capsys):
    cache_dir = tmp_path / "cli-cache"
    argv = [mtx, "--backends", "sweep-cli", "--repeat", "2", "--json"]
    assert run_cli(*argv, "--cache-dir", str(cache_dir)) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["matrix"] == "small" and report["shape"] == [80, 80]
    assert report["overall"]["float64"]["backend"] == "sweep-cli"
    assert {r["status"] for r in report["results"]} == {"ok"}
    [(_, entry)] = TuningCache(cache_dir).entries()
    assert entry.backend == "sweep-cli" and entry.matrix.startswith("small (80x80")


def test_table_run_lists_the_winner_and_its_gain(sweep, mtx, capsys):
    assert run_cli(mtx, "--backends", "sweep-cli", "--repeat", "2", "--dtypes", "float32") == 0
    out = capsys.readouterr().out
    assert "Autotune winners" in out and "* sweep-cli" in out and "float32" in out
    assert "block_size=" in out and f"saved to {TuningCache().path}" in out


def test_no_save_leaves_the_cache_alone(sweep, mtx, capsys):
    assert run_cli(mtx, "--backends", "sweep-cli", "--repeat", "2", "--no-save") == 0
    assert "not saved (--no-save)" in capsys.readouterr().out
    assert TuningCache().entries() == []


def test_wrong_candidates_are_listed_on_stderr(mtx, capsys):
    sg.register_backend(SweepBackend("sweep-bad", wrong={CANDIDATES[0]}), replace=True)
    try:
        assert run_cli(mtx, "--backends", "sweep-bad", "--repeat", "2") == 0
    finally:
        sg.unregister_backend("sweep-bad")
    err = capsys.readouterr().err
    assert "block_size=64 threads_per_row=4 wrong:" in err and "(excluded)" in err


def test_show_lists_the_cache_and_clear_removes_it(sweep, mtx, capsys):
    assert run_cli(mtx, "--backends", "sweep-cli", "--repeat", "2") == 0
    capsys.readouterr()
    assert run_cli("--show") == 0
    shown = capsys.readouterr().out
    assert "Tuning cache" in shown and "sweep-cli" in shown and "float64" in shown
    assert run_cli("--show", "--json") == 0
    [item] = json.loads(capsys.readouterr().out)
    assert item["entry"]["backend"] == "sweep-cli" and item["context"]["device"].startswith("host")
    assert run_cli("--clear") == 0
    assert "removed" in capsys.readouterr().out
    assert run_cli("--show") == 0
    assert "is empty" in capsys.readouterr().out
    assert run_cli("--clear") == 0
    assert "no tuning cache at" in capsys.readouterr().out


def test_cache_warnings_are_one_line(capsys):
    cache = TuningCache()
    cache.directory.mkdir(parents=True, exist_ok=True)
    cache.path.write_text("{not json")
    assert run_cli("--show") == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("sparsegpu autotune: warning: the tuning cache")
    assert captured.err.count("\n") == 1 and "moved it to" in captured.err
    assert "is empty" in captured.out


def test_plot_is_drawn(sweep, mtx, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    figure = tmp_path / "sweep.png"
    assert run_cli(mtx, "--backends", "sweep-cli", "--repeat", "2", "--plot", str(figure)) == 0
    assert figure.stat().st_size > 0


# ---------------------------------------------------------------- the default suite
@pytest.mark.parametrize("name", list(command.default_suite("small")))
def test_default_suite_covers_its_row_class(name):
    row_class, factory = command.default_suite("small")[name]
    A = factory()
    stats = RowLengthStats.from_indptr(A.indptr, A.shape[1], np, indices=A.indices)
    assert _rules.row_class(stats) == row_class


def test_default_suite_has_one_matrix_per_row_class():
    classes = [c for c, _ in command.default_suite("full").values()]
    assert sorted(classes) == ["irregular", "long", "medium", "scattered", "short"]


def test_default_suite_scale_is_checked():
    with pytest.raises(ValueError, match="scale='huge'"):
        command.default_suite("huge")


# ------------------------------------------------------------------------ plot data
def test_plot_series_takes_the_best_time_per_block_size(sweep):
    A = sg.csr_matrix(sp.random(50, 50, density=0.2, random_state=0, format="csr"))
    report = sg.autotune(A, "sweep-cli", timer=ScriptedTimer([sweep]), repeat=1, save=False)
    series = block_size_series(report, "float64")
    sizes = [p[0] for p in series["sweep-cli"]]
    assert sizes == [64, 128, 256, 512]
    best = {p[0]: p[1] for p in series["sweep-cli"]}
    assert best[64] == pytest.approx(64 / 100 + 4 / 1000)
    untuned = [(p[0], p[2]) for p in series["sweep-cli"] if p[2] is not None]
    assert untuned == [(256, pytest.approx(256 / 100 + 32 / 1000))]
    assert reference_lines(report, "float64") == {}
