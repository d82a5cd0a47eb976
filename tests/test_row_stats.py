"""The one-pass kernels of ``kernels/row_stats.cu`` (row statistics, the upload's check,
the canonical-order check) against NumPy and scipy, on awkward index arrays."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsegpu.backends import spgemm
from sparsegpu.device._mirror import CUPY, HOST, DeviceMatrix, RowLengthStats


def _awkward_indptrs():
    rng = np.random.default_rng(7)
    long_rows = np.concatenate([[0], np.cumsum(rng.choice([0, 1, 3, 5000], size=3000))])
    return {
        "one_row": np.array([0, 4]),
        "one_empty_row": np.array([0, 0]),
        "all_empty": np.zeros(5000, dtype=np.int64),
        "regular": np.arange(0, 7 * 4000 + 1, 7),
        "power_law_with_empty_rows": long_rows,
        "small_coarse_level": np.concatenate([[0], np.cumsum(rng.integers(0, 30, size=355))]),
    }


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("name", sorted(_awkward_indptrs()))
def test_row_stats_on_the_device_equal_numpys(cupy, name, index_dtype):
    """The one-pass kernel (kernels/row_stats.cu) against the NumPy statistics, exactly."""
    indptr = _awkward_indptrs()[name].astype(index_dtype)
    n_cols = 9000
    indices = (np.arange(indptr[-1]) * 7919 % n_cols).astype(index_dtype)
    on_host = RowLengthStats.from_indptr(indptr, n_cols, np, indices=indices)
    on_device = RowLengthStats.from_indptr(
        cupy.asarray(indptr), n_cols, cupy, indices=cupy.asarray(indices)
    )
    assert on_device == on_host
    lengths = np.diff(indptr)
    assert (on_device.min, on_device.max, on_device.empty_rows) == (
        lengths.min(),
        lengths.max(),
        int((lengths == 0).sum()),
    )
    assert on_device.std == pytest.approx(lengths.std(), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_row_stats_read_through_pinned_words_equal_numpys(cupy, index_dtype):
    """Without the column spread the statistics come back through pinned host words
    (row_length_stats_host, one event, its scratch left as it found it): every awkward
    indptr in turn, a slice of one (indptr[0] > 0), and each read again, equal NumPy's
    exactly, so no read sees another's shares."""
    indptrs = dict(_awkward_indptrs())
    indptrs["a_slice"] = indptrs["power_law_with_empty_rows"][1000:]
    for _ in range(2):
        for name, indptr in sorted(indptrs.items()):
            indptr = indptr.astype(index_dtype)
            on_host = RowLengthStats.from_indptr(indptr, 9000, np)
            on_device = RowLengthStats.from_indptr(cupy.asarray(indptr), 9000, cupy)
            assert on_device == on_host, name


@pytest.mark.parametrize("bad", ["decreasing_indptr", "negative_index", "index_past_the_end"])
def test_the_upload_check_names_the_bad_spot_on_the_device(cupy, bad):
    """The check made in the row statistics' pass still refuses what it refused."""
    indptr, indices = np.array([0, 2, 3, 5]), np.array([0, 3, 1, 2, 4])
    if bad == "decreasing_indptr":
        indptr = np.array([0, 3, 2, 5])
    elif bad == "negative_index":
        indices[3] = -1
    else:
        indices[3] = 5
    with pytest.raises(ValueError, match=r"not monotone|out of range: indices\[3\]"):
        DeviceMatrix.from_host(np.ones(5), indices, indptr, (3, 5), CUPY)


def _awkward_matrices():
    rng = np.random.default_rng(11)
    sorted_rows = sp.random(700, 500, density=0.02, format="csr", random_state=1)
    sorted_rows.sort_indices()
    long_row = sp.random(600, 3000, density=0.001, format="csr", random_state=2).tolil()
    long_row[300, :] = rng.random(3000) + 1
    empty_rows = sp.csr_matrix(sorted_rows.toarray() * (np.arange(700) % 3 == 0)[:, None])
    matrices = {
        "sorted": sorted_rows,
        "long_row_in_a_block": long_row.tocsr(),
        "empty_rows": empty_rows,
        "one_row": sp.csr_matrix(np.array([[0.0, 1.0, 2.0, 0.0, 3.0]])),
    }
    swapped = sorted_rows.copy()  # two entries of row 257 (the second block) swapped
    start = swapped.indptr[257]
    swapped.indices[[start, start + 1]] = swapped.indices[[start + 1, start]]
    matrices["unsorted_in_the_second_block"] = swapped
    repeated = sorted_rows.copy()  # a duplicate: row 5's second entry repeats its first
    start = repeated.indptr[5]
    repeated.indices[start + 1] = repeated.indices[start]
    matrices["duplicate"] = repeated
    last = sorted_rows.copy()  # the matrix's last two entries in the wrong order
    last.indices[[-1, -2]] = last.indices[[-2, -1]]
    matrices["unsorted_last_row"] = last
    return matrices


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("name", sorted(_awkward_matrices()))
def test_canonical_check_on_the_device_agrees_with_scipy(cupy, name, index_dtype):
    """``rows_rising`` says canonical exactly where scipy does (rows that rise strictly)."""
    M = _awkward_matrices()[name]
    expected = bool(
        sp.csr_matrix((M.data, M.indices, M.indptr), shape=M.shape).has_canonical_format
    )
    indptr, indices = M.indptr.astype(index_dtype), M.indices.astype(index_dtype)
    assert expected == (name in ("sorted", "long_row_in_a_block", "empty_rows", "one_row"))
    on_device = DeviceMatrix(
        cupy.asarray(M.data), cupy.asarray(indices), cupy.asarray(indptr), M.shape, CUPY
    )
    on_host = DeviceMatrix(M.data, indices, indptr, M.shape, HOST)
    assert spgemm.is_canonical(on_device) == expected == spgemm.is_canonical(on_host)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("name", sorted(_awkward_matrices()))
def test_the_upload_counts_canonical_order_in_its_check(cupy, name, index_dtype, monkeypatch):
    """The upload's one-transfer check also counts the entries that do not rise (the same
    ``rows_rising``), so a first product's canonical check needs no pass of its own, and
    says canonical exactly where scipy does; a copy with its indices in another dtype keeps
    what was counted, one with other indices does not."""
    from sparsegpu.device import _mirror

    M = _awkward_matrices()[name]
    expected = bool(
        sp.csr_matrix((M.data, M.indices, M.indptr), shape=M.shape).has_canonical_format
    )
    indptr, indices = M.indptr.astype(index_dtype), M.indices.astype(index_dtype)
    uploaded = DeviceMatrix.from_host(M.data, indices, indptr, M.shape, CUPY)
    assert uploaded.rows_rise is expected
    monkeypatch.setattr(spgemm, "rows_rise_on_device", lambda *a: pytest.fail("a second pass"))
    assert spgemm.is_canonical(uploaded) == expected
    other_dtype = np.int64 if index_dtype == np.int32 else np.int32
    cast = uploaded.same_rows(indices=uploaded.indices.astype(other_dtype))
    assert cast.rows_rise is expected
    other = uploaded.same_rows(indices=cupy.zeros_like(uploaded.indices))
    assert other.rows_rise is None
    host = DeviceMatrix.from_host(M.data, indices, indptr, M.shape, _mirror.HOST)
    assert host.rows_rise is None  # the host's check does not count it


def test_a_block_mirror_upload_does_not_count_canonical_order(cupy, monkeypatch):
    """The BSR mirror's check reads its blocks' statistics and index range in the same
    transfer as the CSR one, but nobody reads its blocks' order: no ``rows_rising`` pass."""
    from sparsegpu.device import _block_mirror, _mirror

    launched = []
    launch = _mirror._launch_stats

    def recording(name, *args):
        launched.append(name.split("<")[0])
        return launch(name, *args)

    monkeypatch.setattr(_mirror, "_launch_stats", recording)
    B = sp.random(40, 60, density=0.2, random_state=5, format="csr").tobsr(blocksize=(2, 3))
    _block_mirror.DeviceBlockMatrix.from_host(B.data, B.indices, B.indptr, B.shape, CUPY)
    assert "index_range" in launched and "rows_rising" not in launched
    launched.clear()
    C = sp.csr_matrix(B)
    DeviceMatrix.from_host(C.data, C.indices, C.indptr, C.shape, CUPY)
    assert "rows_rising" in launched
