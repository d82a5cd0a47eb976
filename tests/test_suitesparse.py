"""sparsegpu.io.suitesparse against a local stand-in for the collection (127.0.0.1 only):
the index, search, fetch (progress, verification, safe extraction, locking), the binary
cache, offline use, and every failure leaving the cache as it was."""

from __future__ import annotations

import errno
import shutil
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import sparsegpu as sg
from sparsegpu.io import _archive, suitesparse

from .collection_server import index_text


@pytest.fixture
def offline(monkeypatch):
    """Point the collection at a closed port: any download now fails."""

    def go():
        monkeypatch.setenv(suitesparse.URL_ENV, "http://127.0.0.1:9")

    return go


def leftovers(tmp_path):
    """Files in the cache other than finished entries, the index and lock files."""
    cache = tmp_path / "cache"
    return sorted(
        str(p.relative_to(cache))
        for p in cache.rglob("*")
        if p.name.startswith(".") and not p.name.endswith(".lock")
    )


# ---------------------------------------------------------------------------- index
def test_index_is_downloaded_once(server):
    first = suitesparse.index()
    second = suitesparse.index()
    assert first == second and len(first) == 12
    assert server.requests.count("/files/ssstats.csv") == 1


def test_index_columns(server):
    record = suitesparse.index()[0]
    assert (record.id, record.full_name, record.rows, record.cols, record.nnz) == (
        1,
        "HB/bcsstk13",
        2003,
        2003,
        83_883,
    )
    assert record.is_real and not record.is_binary and record.spd
    assert record.kind == "computational fluid dynamics problem"
    assert record.pattern_entries == 83_883
    assert record.url() == f"{server.url}/MM/HB/bcsstk13.tar.gz"


SEARCHES = {
    "group": ({"group": "HB"}, ["HB/bcsstk13", "HB/west0067"]),
    "name-pattern": ({"name": "BCSSTK*"}, ["HB/bcsstk13"]),
    "nnz-range": ({"nnz": (150, 300), "group": "[HLN]*"}, ["Newman/karate", "HB/west0067"]),
    "open-range": ({"rows": (2000, None)}, ["HB/bcsstk13", "Bad/corrupt"]),
    "exact-cols": ({"cols": 51}, ["LPnetlib/lp_afiro"]),
    "kind": ({"kind": "LINEAR PROG"}, ["LPnetlib/lp_afiro"]),
    "spd": ({"spd": True}, ["HB/bcsstk13", "Bad/corrupt"]),
    "limit": ({"kind": "graph", "limit": 2}, ["Newman/karate", "Bad/truncated"]),
}


@pytest.mark.parametrize("case", SEARCHES, ids=list(SEARCHES))
def test_search(server, case):
    criteria, expected = SEARCHES[case]
    assert [r.full_name for r in suitesparse.search(**criteria)] == expected


def test_search_rejects_a_bad_range(server):
    with pytest.raises(ValueError, match=r"\(lo, hi\)"):
        suitesparse.search(nnz=(1, 2, 3))


def test_parse_index_names_a_malformed_line():
    text = index_text(["HB,bcsstk13,2003,many,1,1,0,0,0,1,1,kind"]).decode()
    with pytest.raises(ValueError, match="line 3 is malformed"):
        suitesparse.parse_index(text)


def test_parse_index_catches_a_truncated_file():
    text = index_text().decode().replace("12\n", "40\n", 1)
    with pytest.raises(ValueError, match="declares 40 matrices but lists 12"):
        suitesparse.parse_index(text)


def test_damaged_cached_index_is_downloaded_again(server, tmp_path):
    suitesparse.index()
    (tmp_path / "cache" / "ssstats.csv").write_text("garbage")
    with pytest.warns(UserWarning, match="damaged"):
        assert len(suitesparse.index()) == 12
    assert server.requests.count("/files/ssstats.csv") == 2


# ---------------------------------------------------------------------------- fetch
def test_fetch_extracts_into_the_cache(server, tmp_path):
    path = suitesparse.fetch("HB/bcsstk13", progress=False)
    assert path == tmp_path / "cache" / "MM" / "HB" / "bcsstk13" / "bcsstk13.mtx"
    assert sg.io.mminfo(path).suitesparse.full_name == "HB/bcsstk13"
    assert leftovers(tmp_path) == []


def test_fetch_twice_downloads_once(server):
    suitesparse.fetch("HB/bcsstk13", progress=False)
    suitesparse.fetch("HB/bcsstk13", progress=False)
    assert server.requests.count("/MM/HB/bcsstk13.tar.gz") == 1


def test_fetch_keeps_auxiliary_files(server):
    path = suitesparse.fetch("LPnetlib/lp_afiro", progress=False)
    assert (path.parent / "lp_afiro_b.mtx").is_file()


def test_progress_bar_stays_off_stdout(server, capsys):
    suitesparse.fetch("Newman/karate", progress=True)
    assert capsys.readouterr().out == ""


def test_bare_name_resolves_through_the_index(server):
    assert suitesparse.fetch("bcsstk13", progress=False).parent.parent.name == "HB"


def test_ambiguous_bare_name_lists_the_candidates(server):
    with pytest.raises(ValueError, match="Newman/karate, Other/karate"):
        suitesparse.fetch("karate", progress=False)


@pytest.mark.parametrize("name", ["../etc/passwd", "HB/..", "HB/a/b", "/abs", "HB/", "x y"])
def test_malformed_names_are_refused(server, name):
    with pytest.raises(ValueError, match="not a collection name|no matrix named"):
        suitesparse.fetch(name, progress=False)


def test_concurrent_fetches_download_once(server):
    errors = []

    def work():
        try:
            suitesparse.fetch("HB/bcsstk13", progress=False)
        except Exception as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert server.requests.count("/MM/HB/bcsstk13.tar.gz") == 1


# ------------------------------------------------------------------------- failures
FAILURES = {
    "404": ("Bad/missing", suitesparse.DownloadError, "404"),
    "truncated": ("Bad/truncated", suitesparse.DownloadError, "truncated|broke off"),
    "path-traversal": ("Bad/traversal", ValueError, r"'\.\.'"),
    "symlink": ("Bad/symlink", ValueError, "symbolic link"),
    "absolute-path": ("Bad/absolute", ValueError, "absolute path"),
    "corrupt-archive": ("Bad/corrupt", ValueError, "damaged or truncated archive"),
    "bad-matrix-file": ("Bad/badmtx", ValueError, "array.*pattern"),
    "nul-after-last-value": ("Bad/nul", ValueError, r"nul\.mtx: line \d+: .*NUL byte"),
}


@pytest.mark.parametrize("case", FAILURES, ids=list(FAILURES))
def test_failed_fetch_raises_and_leaves_no_entry(server, tmp_path, case):
    name, error, message = FAILURES[case]
    with pytest.raises(error, match=message):
        suitesparse.fetch(name, progress=False)
    assert name not in suitesparse.cached()
    assert leftovers(tmp_path) == []
    assert not (tmp_path / "evil.mtx").exists()
    assert not list(tmp_path.rglob("evil.mtx"))


def test_archive_expanding_past_the_limit_is_refused(server, tmp_path, monkeypatch):
    monkeypatch.setattr(_archive, "MIN_EXTRACT_LIMIT", 1000)
    monkeypatch.setattr(_archive, "MAX_EXPANSION_RATIO", 2)
    with pytest.raises(ValueError, match="expands to more than"):
        suitesparse.fetch("HB/bcsstk13", progress=False)
    assert suitesparse.cached() == []


def test_failed_refresh_keeps_the_old_copy(server):
    suitesparse.fetch("HB/west0067", progress=False)
    del server.routes["/MM/HB/west0067.tar.gz"]
    with pytest.raises(suitesparse.DownloadError, match="404"):
        suitesparse.fetch("HB/west0067", progress=False, refresh=True)
    assert suitesparse.load("HB/west0067").nnz == 294


def test_refresh_downloads_again(server):
    suitesparse.fetch("HB/west0067", progress=False)
    suitesparse.fetch("HB/west0067", progress=False, refresh=True)
    assert server.requests.count("/MM/HB/west0067.tar.gz") == 2


def test_unreachable_collection_says_what_to_do(server, offline):
    offline()
    with pytest.raises(suitesparse.DownloadError, match="cannot download .* cache"):
        suitesparse.fetch("HB/bcsstk13", progress=False)


# ----------------------------------------------------------------------------- load
def test_load_matches_the_bundled_matrix(server):
    A = suitesparse.load("HB/bcsstk13", progress=False)
    B = sg.datasets.load("bcsstk13")
    assert isinstance(A, sg.csr_matrix)
    assert abs(A - B).max() == 0


def test_load_as_array(server):
    assert isinstance(suitesparse.load("HB/west0067", array=True, progress=False), sg.csr_array)


def test_second_load_reads_the_binary_copy(server, monkeypatch):
    first = suitesparse.load("HB/bcsstk13", progress=False)
    monkeypatch.setattr(suitesparse, "mmread", lambda *a, **k: pytest.fail("parsed again"))
    second = suitesparse.load("HB/bcsstk13")
    assert second.shape == first.shape
    np.testing.assert_array_equal(second.indptr, first.indptr)
    np.testing.assert_array_equal(second.indices, first.indices)
    np.testing.assert_array_equal(second.data, first.data)


def test_damaged_binary_copy_is_rebuilt(server, tmp_path):
    suitesparse.load("HB/west0067", progress=False)
    binary = tmp_path / "cache" / "MM" / "HB" / "west0067" / "west0067.npz"
    data = bytearray(binary.read_bytes())
    data[200:400] = bytes(200)
    binary.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="damaged binary copy"):
        assert suitesparse.load("HB/west0067").nnz == 294
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert suitesparse.load("HB/west0067").nnz == 294


def test_binary_copy_follows_a_changed_mtx(server):
    path = suitesparse.fetch("HB/west0067", progress=False)
    suitesparse.load("HB/west0067")
    sg.io.mmwrite(path, sg.datasets.load("LFAT5"))
    assert suitesparse.load("HB/west0067").shape == (14, 14)


def test_everything_works_offline_from_the_cache(server, offline):
    suitesparse.index()
    suitesparse.load("HB/bcsstk13", progress=False)
    offline()
    assert suitesparse.load("HB/bcsstk13").nnz == 83_883
    assert suitesparse.load("bcsstk13").nnz == 83_883
    assert [r.name for r in suitesparse.search(group="HB")] == ["bcsstk13", "west0067"]
    assert suitesparse.cached() == ["HB/bcsstk13"]


def test_load_without_download_says_how_to_fetch(server):
    with pytest.raises(FileNotFoundError, match="sparsegpu fetch HB/bcsstk13"):
        suitesparse.load("HB/bcsstk13", download=False)


def test_cache_dir_default(monkeypatch):
    # the default is platformdirs' user cache; the GPU machine has no platformdirs
    pytest.importorskip("platformdirs")
    monkeypatch.delenv(suitesparse.DATA_DIR_ENV, raising=False)
    monkeypatch.delenv("SPARSEGPU_CACHE_DIR", raising=False)
    assert suitesparse.cache_dir().parts[-2:] == ("sparsegpu", "suitesparse")


def test_cache_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv(suitesparse.DATA_DIR_ENV, str(tmp_path))
    assert suitesparse.cache_dir() == tmp_path
    assert suitesparse.cache_dir(tmp_path / "x") == tmp_path / "x"


def test_base_url_default_and_override(monkeypatch):
    monkeypatch.delenv(suitesparse.URL_ENV, raising=False)
    assert suitesparse.base_url() == "https://sparse.tamu.edu"
    monkeypatch.setenv(suitesparse.URL_ENV, "http://127.0.0.1:8000/mirror/")
    assert suitesparse.archive_url("HB", "x") == "http://127.0.0.1:8000/mirror/MM/HB/x.tar.gz"


def test_a_fetch_held_elsewhere_times_out_with_the_lock_named(server, tmp_path, monkeypatch):
    import filelock

    monkeypatch.setattr(suitesparse, "LOCK_TIMEOUT_S", 0.2)
    group_dir = tmp_path / "cache" / "MM" / "HB"
    group_dir.mkdir(parents=True)
    held = filelock.FileLock(str(group_dir / ".bcsstk13.lock"))
    with held, pytest.raises(suitesparse.DownloadError, match=r"\.bcsstk13\.lock"):
        suitesparse.fetch("HB/bcsstk13", progress=False)
    assert suitesparse.cached() == []


# ------------------------------------------------------------- deadlines, full disks
def test_a_trickling_server_is_abandoned_at_the_deadline(server, monkeypatch, tmp_path):
    monkeypatch.setenv(suitesparse.DEADLINE_ENV, "0.3")
    began = time.monotonic()
    with pytest.raises(suitesparse.DownloadError, match=r"0\.3 s deadline .* bytes received"):
        suitesparse.fetch("Bad/trickle", progress=False)
    assert time.monotonic() - began < 2
    assert suitesparse.cached() == []
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("value", ["0", "-5", "soon", "inf", "nan"])
def test_a_bad_deadline_setting_is_refused(monkeypatch, value):
    monkeypatch.setenv(suitesparse.DEADLINE_ENV, value)
    with pytest.raises(ValueError, match=f"{suitesparse.DEADLINE_ENV}=.*positive number"):
        suitesparse.download_deadline()


def test_deadline_default(monkeypatch):
    monkeypatch.delenv(suitesparse.DEADLINE_ENV, raising=False)
    assert suitesparse.download_deadline() == suitesparse.DOWNLOAD_DEADLINE_S


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_while_downloading_says_so(server):
    url = suitesparse.archive_url("HB", "bcsstk13")
    with pytest.raises(OSError, match=r"/dev/full: the disk is full .* after writing") as exc:
        suitesparse._download(url, Path("/dev/full"), "x", progress=False)
    assert exc.value.errno == errno.ENOSPC
    assert "bomb" not in str(exc.value) and "expands" not in str(exc.value)


def test_a_full_disk_while_extracting_is_not_an_archive_bomb(server, monkeypatch, tmp_path):
    usage = shutil.disk_usage(tmp_path)._replace(free=1000)
    monkeypatch.setattr(_archive.shutil, "disk_usage", lambda path: usage)
    with pytest.raises(OSError, match=r"the disk is full: extracting .* needs \d+ bytes") as exc:
        suitesparse.fetch("HB/bcsstk13", progress=False)
    assert exc.value.errno == errno.ENOSPC and "1000 are free" in str(exc.value)
    assert suitesparse.cached() == []
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC, errno.EACCES])
def test_load_returns_the_matrix_when_the_binary_copy_cannot_be_written(server, monkeypatch, code):
    suitesparse.fetch("HB/west0067", progress=False)
    (suitesparse.path("HB/west0067").parent / "west0067.npz").unlink()

    def refuse(*args):
        raise OSError(code, "refused")

    monkeypatch.setattr(suitesparse, "create_beside", refuse)
    with pytest.warns(UserWarning, match="binary copy could not be written.*matrix is returned"):
        assert suitesparse.load("HB/west0067").nnz == 294


def test_a_killed_fetch_leaves_nothing_the_next_fetch_keeps(server, tmp_path):
    group = tmp_path / "cache" / "MM" / "Newman"
    stale = group / ".karate.k1ll3d_x"
    (stale / "unpacked" / "karate").mkdir(parents=True)
    (stale / "karate.tar.gz").write_bytes(b"half")
    other = group / ".karate.b.k1ll3d_x"  # another matrix's ("karate.b"), not ours to judge
    other.mkdir()
    suitesparse.fetch("Newman/karate", progress=False)
    assert not stale.exists()
    assert other.is_dir()
