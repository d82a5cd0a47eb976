"""Expected failures of the command line: one line on stderr, exit status 1 or 2, never a
traceback (offline, a missing file, no GPU), and the reason a GPU is missing."""

from __future__ import annotations

import sys
import types

import pytest

from sparsegpu import bench, cli
from sparsegpu.device import _cuda
from sparsegpu.engine import _registry
from sparsegpu.engine._tuning_store import TuningCacheError
from sparsegpu.io import suitesparse
from sparsegpu.measure import probe

needs_no_gpu = pytest.mark.skipif(
    _cuda.unavailable_reason() is None, reason="a GPU is usable here; this is the no-GPU path"
)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No SuiteSparse collection reachable (a closed local port) and an empty cache."""
    monkeypatch.setenv("SPARSEGPU_SUITESPARSE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SPARSEGPU_DATA_DIR", str(tmp_path / "suitesparse"))


def assert_one_line(capsys, status, expected_status, *words):
    err = capsys.readouterr().err
    assert status == expected_status, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize(
    ("argv", "status", "words"),
    [
        (["bench", "HB/west0479", "--repeat", "1"], 2, ("HB/west0479", "cannot download")),
        (["bench", "missing.mtx.gz"], 2, ("missing.mtx.gz", "no such file")),
        (["bench", "karate", "--json", "/nonexistent/r.json"], 2, ("/nonexistent", "--json")),
        (["fetch", "--no-progress", "HB/west0479"], 1, ("cannot download",)),
        (["info", "HB/west0479"], 1, ("sparsegpu fetch HB/west0479",)),
        (["autotune", "--no-save", "missing.mtx.gz"], 2, ("missing.mtx.gz", "no such file")),
    ],
    ids=[
        "bench-offline",
        "bench-missing-file",
        "bench-json-directory",
        "fetch-offline",
        "info-not-cached",
        "autotune",
    ],
)
def test_expected_failure_is_one_line(offline, capsys, argv, status, words):
    assert_one_line(capsys, cli.main(argv), status, *words)


@needs_no_gpu
@pytest.mark.parametrize(
    ("argv", "status"),
    [(["probe"], 1), (["bench", "--backends", "shuffle"], 2)],
    ids=["probe", "bench-gpu-backend"],
)
def test_no_gpu_is_one_line(capsys, argv, status):
    assert_one_line(capsys, cli.main(argv), status, "CuPy" if _no_cupy() else "GPU")


def _no_cupy() -> bool:
    return "CuPy is not installed" in (_cuda.unavailable_reason() or "")


def test_offline_bench_of_a_bundled_suitesparse_name_works(offline, capsys):
    assert cli.main(["bench", "HB/bcsstk13", "--backends", "scipy", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "HB/bcsstk13" in out and "REFUSED" not in out and "FAILED" not in out


def test_info_of_a_bundled_suitesparse_name_works_offline(offline, capsys):
    assert cli.main(["info", "HB/bcsstk13"]) == 0
    assert "2003 x 2003" in capsys.readouterr().out


@pytest.mark.parametrize(
    "error",
    [
        suitesparse.DownloadError("cannot download x"),
        FileNotFoundError(2, "No such file or directory", "m.mtx"),
        _registry.BackendUnavailableError("backend 'shuffle' is not available here\nsummary"),
        probe.NoGPUError("no GPU"),
        TuningCacheError("cache unusable"),
        MemoryError("needs 8 GB, 1 GB free"),
        bench.BenchError("no matrix 'x'"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_library_errors_end_a_command_with_one_line(monkeypatch, capsys, error):
    def fail(args):
        raise error

    monkeypatch.setattr("sparsegpu.commands.info.run", fail)
    assert_one_line(capsys, cli.main(["info"]), 1, "sparsegpu info:")


def test_a_bug_keeps_its_traceback(monkeypatch):
    def fail(args):
        raise KeyError("a bug")

    monkeypatch.setattr("sparsegpu.commands.info.run", fail)
    with pytest.raises(KeyError):
        cli.main(["info"])


@pytest.mark.parametrize(
    ("driver_version", "device_files", "platform", "missing"),
    [
        (0, ["/dev/nvidia0"], "linux", "driver version 0"),
        (None, [], "linux", "/dev/nvidia*"),
        (12080, [], "linux", "/dev/nvidia*"),
        (12080, ["/dev/nvidia0", "/dev/nvidiactl"], "linux", None),
        (None, [], "win32", None),
    ],
    ids=["driver-0", "no-device-files", "driver-but-no-device-files", "driver", "windows"],
)
def test_missing_driver_is_told_apart(driver_version, device_files, platform, missing):
    found = _cuda._missing_driver(driver_version, device_files, platform)
    assert found == missing if missing is None else missing in found


@needs_no_gpu
def test_bench_prints_a_shared_reason_once(capsys):
    assert cli.main(["bench", "stencil2d_64", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count(_cuda.unavailable_reason()) == 1


@needs_no_gpu
def test_info_prints_a_shared_reason_once(capsys):
    assert cli.main(["info"]) == 0
    # rich wraps the line at the terminal's width (80 columns without one, as under xdist)
    out = " ".join(capsys.readouterr().out.split())
    assert out.count(" ".join(_cuda.unavailable_reason().split())) == 1


@needs_no_gpu
def test_the_gpu_reason_is_said_once_per_list_of_backends():
    """Each GPU backend says it in a few words; the full story (the error, what to do)
    comes once (issue 33: it was repeated for every backend)."""
    import sparsegpu as sg

    full = _cuda.unavailable_reason()
    reasons = {b.reason for b in sg.backends() if not b.available}
    assert reasons == {_cuda.backend_reason()} and full not in _cuda.backend_reason()
    with pytest.raises(sg.BackendUnavailableError) as excinfo:
        sg.use_backend("shuffle").__enter__()
    assert str(excinfo.value).count(full) == 1
    assert str(excinfo.value).count(_cuda.backend_reason()) == 2  # the error and the list


@pytest.fixture
def no_driver_cupy(monkeypatch):
    """A CuPy that imports but finds no driver, as on a machine without NVIDIA hardware."""

    class Runtime:
        @staticmethod
        def getDeviceCount():
            raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

        @staticmethod
        def driverGetVersion():
            return 0

    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=Runtime)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _cuda._probe.cache_clear()
    yield
    _cuda._probe.cache_clear()


def test_no_driver_is_named_as_such(no_driver_cupy):
    reason = _cuda.unavailable_reason()
    assert reason.startswith("no NVIDIA driver/GPU found (")
    assert "driver version 0" in reason and "cudaErrorInsufficientDriver" in reason
