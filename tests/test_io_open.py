"""sparsegpu.io.open_matrix: one rule for a matrix named on a command line."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg


@pytest.fixture
def matrix():
    return sp.random(30, 20, density=0.2, format="csr", random_state=np.random.default_rng(0))


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz", ".npz"])
def test_a_file_is_read_whatever_its_suffix(tmp_path, matrix, suffix):
    path = tmp_path / f"m{suffix}"
    if suffix == ".npz":
        sp.save_npz(path, matrix)
    else:
        sg.io.mmwrite(path, matrix)
    source = sg.io.resolve_matrix(path)
    assert source.name == "m" and source.origin == str(path)
    assert (source.path is None) == (suffix == ".npz")
    A = sg.io.open_matrix(str(path))
    assert isinstance(A, sg.csr_matrix)
    np.testing.assert_allclose(A.toarray(), matrix.toarray())


@pytest.mark.parametrize(
    "spec", ["bcsstk13", "HB/bcsstk13", "bcsstk13.mtx.gz", "BCSSTK13"], ids=str
)
def test_a_bundled_matrix_by_name_collection_name_or_file_name(tmp_path, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)  # no such file here: the bundled one
    source = sg.io.resolve_matrix(spec)
    shown = spec.removesuffix(".mtx.gz")
    assert (source.name, source.origin) == (shown, "bundled (HB/bcsstk13)")
    assert source.path == sg.datasets.path("bcsstk13")
    assert sg.io.open_matrix(spec).nnz == 83883


def test_a_bundled_name_under_another_group_is_the_bundled_matrix(monkeypatch, tmp_path):
    # names are unique in the collection: HB/cage10 is vanHeukelum/cage10, read offline
    monkeypatch.setenv("SPARSEGPU_SUITESPARSE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SPARSEGPU_DATA_DIR", str(tmp_path))
    assert sg.io.resolve_matrix("HB/cage10").origin == "bundled (vanHeukelum/cage10)"


def test_an_existing_file_wins_over_a_bundled_name(tmp_path, monkeypatch, matrix):
    monkeypatch.chdir(tmp_path)
    sg.io.mmwrite("bcsstk13.mtx.gz", matrix)
    assert sg.io.open_matrix("bcsstk13.mtx.gz").shape == matrix.shape


@pytest.mark.parametrize("spec", ["./bcsstk13.mtx", "missing.mtx", "/nowhere/m.npz"])
def test_a_missing_file_is_file_not_found(tmp_path, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=f"^{spec}: no such file$"):
        sg.io.resolve_matrix(spec)


def test_an_unknown_name_lists_the_bundled_ones():
    with pytest.raises(ValueError, match=r"'nothing' is not a file, a bundled matrix \(.*karate"):
        sg.io.resolve_matrix("nothing")


def test_a_collection_name_not_cached_is_refused_when_downloads_are_not_allowed(tmp_path):
    with pytest.raises(ValueError, match="HB/nothing: not in the SuiteSparse cache .*fetch it"):
        sg.io.resolve_matrix("HB/nothing", data_dir=tmp_path, download=False)
    source = sg.io.resolve_matrix("HB/nothing", data_dir=tmp_path)  # downloaded when loaded
    assert source.origin == "SuiteSparse" and source.path is None


def test_a_bad_npz_names_the_file(tmp_path):
    path = tmp_path / "m.npz"
    np.savez(path, a=np.ones(3))
    with pytest.raises(ValueError, match="m.npz: not a scipy .npz sparse matrix"):
        sg.io.open_matrix(path)
