"""sparsegpu.datasets: every bundled real matrix loads and matches its metadata, with its
CC-BY attribution shipped beside it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sparsegpu as sg
from sparsegpu import datasets

DATA = Path(datasets.__file__).parent / "data"
NAMES = datasets.names()


def test_every_bundled_file_is_named():
    assert sorted(NAMES, key=str.lower) == sorted(
        (p.name[: -len(".mtx.gz")] for p in DATA.glob("*.mtx.gz")), key=str.lower
    )
    assert len(NAMES) == 15


def test_attribution_ships_with_the_data():
    text = (DATA / "README.md").read_text()
    assert "CC-BY 4.0" in text and "Davis" in text and "https://sparse.tamu.edu" in text
    for name in NAMES:
        assert f"{name}.mtx.gz" in text


@pytest.mark.parametrize("name", NAMES)
def test_load_matches_metadata(name):
    info = datasets.info(name)
    A = datasets.load(name)
    assert isinstance(A, sg.csr_matrix)
    assert A.shape == info.shape and A.nnz == info.nnz
    assert A.dtype == np.float64
    header = sg.io.mminfo(datasets.path(name))
    if header.suitesparse is not None:
        assert header.suitesparse.full_name == info.collection_name
        assert header.suitesparse.kind == info.kind


def test_symmetric_files_load_symmetric():
    A = datasets.load("bcsstk13")
    assert abs(A - A.T).max() == 0


def test_names_are_case_insensitive_and_take_collection_names():
    assert datasets.info("BCSSTK13") == datasets.info("HB/bcsstk13") == datasets.info("bcsstk13")


def test_load_as_array():
    assert isinstance(datasets.load("karate", array=True), sg.csr_array)


@pytest.mark.parametrize("name", ["nope", "Bai/bcsstk13", ""])
def test_unknown_name_lists_the_bundled_ones(name):
    with pytest.raises(ValueError, match="bundled: bcsstk13"):
        datasets.info(name)
