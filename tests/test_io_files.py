"""Files sparsegpu creates honour the umask (mode 0o666 & ~umask), as scipy's do."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.engine._tuning_store import TunedEntry, TuningCache, TuningContext
from sparsegpu.io import suitesparse


@pytest.fixture(params=[0o022, 0o027, 0o002], ids=["022", "027", "002"])
def umask(request):
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz", ".mtx.bz2"])
def test_mmwrite_honours_the_umask(tmp_path, umask, suffix):
    path = tmp_path / f"m{suffix}"
    sg.io.mmwrite(path, sp.eye(3, format="csr"))
    assert mode(path) == 0o666 & ~umask


def test_tuning_cache_honours_the_umask(tmp_path, umask):
    context = TuningContext("host x", "host", 1, "-", "-", "0", "ab" * 32)
    entry = TunedEntry(
        "vector", "float64", "int32", "short", "CsrVectorPolicy", {}, 1.0, 1.0, None, "m", "t"
    )
    path = TuningCache(tmp_path).record(context, [entry])
    assert mode(path) == 0o666 & ~umask


def test_suitesparse_files_honour_the_umask(server, tmp_path, umask):
    suitesparse.index()
    suitesparse.load("HB/west0067", progress=False)
    cache = tmp_path / "cache"
    created = [cache / "ssstats.csv", *(cache / "MM" / "HB" / "west0067").iterdir()]
    assert {p.name: mode(p) for p in created} == {p.name: 0o666 & ~umask for p in created}
    assert np.load(cache / "MM" / "HB" / "west0067" / "west0067.npz")["version"] == 1
