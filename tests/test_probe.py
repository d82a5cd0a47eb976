"""``sparsegpu probe``: the no-GPU message, the per-device cache, and (on a GPU) a real run."""

from __future__ import annotations

import json

import pytest

from sparsegpu import cli
from sparsegpu.device import _cuda
from sparsegpu.measure import probe

DEVICE = {
    "name": "Test GPU 9000",
    "compute_capability": "9.0",
    "multiprocessors": 132,
    "memory_bytes": 2**37,
}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSEGPU_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _result(**changes):
    fields = dict(
        device=DEVICE,
        copy_bytes=2**30,
        copy_ms=0.5,
        copy_gb_per_s=4294.97,
        offset=[probe.BandwidthPoint(0, 0.1, 4000.0), probe.BandwidthPoint(1, 0.11, 3900.0)],
        stride=[probe.BandwidthPoint(1, 0.1, 4000.0), probe.BandwidthPoint(2, 0.2, 2000.0)],
        created="2026-11-22T00:00:00+00:00",
    )
    fields.update(changes)
    return probe.ProbeResult(**fields)


@pytest.fixture
def no_gpu():
    if _cuda.unavailable_reason() is None:
        pytest.skip("a GPU is usable here; the no-GPU path is tested on CPU machines")


def test_no_gpu_is_one_line_and_nonzero(no_gpu, capsys):
    status = cli.main(["probe"])
    err = capsys.readouterr().err.strip()
    assert status != 0
    assert err.count("\n") == 0
    assert err.startswith("sparsegpu probe: no GPU")


@pytest.mark.parametrize("argv", [["--cached"], ["--json"], ["--plot", "p.png"]])
def test_no_gpu_fails_the_same_with_any_option(no_gpu, argv, capsys, tmp_path, monkeypatch):
    if "--plot" in argv:
        pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["probe", *argv]) == 1
    assert "no GPU" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_copy_bandwidth_without_gpu_raises(no_gpu):
    with pytest.raises(probe.NoGPUError, match="no GPU"):
        probe.copy_bandwidth()


def test_cache_dir_follows_environment(private_cache):
    assert probe.cache_dir() == private_cache


def test_save_then_load_round_trip(private_cache):
    path = probe.save(_result())
    assert path.parent.parent == private_cache
    assert probe.load_cached(DEVICE) == _result()


def test_cache_is_per_device():
    probe.save(_result())
    other = dict(DEVICE, multiprocessors=114)
    assert probe.load_cached(other) is None


def test_corrupt_cache_is_set_aside_not_lost(private_cache):
    path = probe.save(_result())
    path.write_text("{ truncated")
    with pytest.warns(RuntimeWarning, match="unreadable"):
        assert probe.load_cached(DEVICE) is None
    assert not path.exists()
    (aside,) = path.parent.glob("*.corrupt-*")
    assert aside.read_text() == "{ truncated"


@pytest.mark.parametrize(
    "data",
    [
        {"schema": "sparsegpu-probe/0"},
        {"schema": probe.SCHEMA, "device": DEVICE},
        {"schema": probe.SCHEMA, "device": DEVICE, "copy_bytes": 1, "copy_ms": "x"},
    ],
    ids=["old-schema", "missing-fields", "bad-number"],
)
def test_from_json_rejects_malformed(data):
    with pytest.raises(ValueError, match="sparsegpu-probe/1"):
        probe.ProbeResult.from_json(data)


def test_json_is_plain_data():
    data = json.loads(json.dumps(_result().to_json()))
    assert data["schema"] == probe.SCHEMA
    assert data["offset"][1] == {"parameter": 1, "median_ms": 0.11, "gb_per_s": 3900.0}


def test_measure_rejects_unprobed_dtype():
    with pytest.raises(ValueError, match="int8"):
        probe.measure(dtype="int8")


def test_plot_draws_a_file(tmp_path):
    pytest.importorskip("matplotlib")
    assert probe.plot(_result(), tmp_path / "probe.png").stat().st_size > 1000


@pytest.mark.gpu
def test_probe_on_gpu_is_cached(cupy, capsys):
    assert cli.main(["probe", "--json", "--repeat", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["copy_gb_per_s"] > 0
    assert [p["parameter"] for p in data["offset"]] == list(range(probe.MAX_OFFSET + 1))
    assert [p["parameter"] for p in data["stride"]] == list(range(1, probe.MAX_STRIDE + 1))
    cached = probe.load_cached()
    assert cached.copy_gb_per_s == data["copy_gb_per_s"]
