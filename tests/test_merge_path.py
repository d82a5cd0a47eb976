"""The ``merge_path`` backend: partition, oracle, awkward matrices, determinism."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
import sparsegpu.tuning
from sparsegpu._version import REMOVED_IN
from sparsegpu.backends import canonical_name
from sparsegpu.backends.merge_path import (
    FAMILY,
    MERGE_PATH_SHAPES,
    SPMM_COLUMN_LANES,
    MergePathPolicy,
    longest_run,
    tile_coordinates,
)
from sparsegpu.engine import _registry
from sparsegpu.engine._tuning_store import TunedEntry
from sparsegpu.testing import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    assert_product_close,
    awkward_matrices,
    from_row_lengths,
    random_vector,
)

AWKWARD_NAMES = list(awkward_matrices())
DTYPE_IDS = [np.dtype(d).name for d in VALUE_DTYPES]
INDEX_IDS = [np.dtype(d).name for d in INDEX_DTYPES]
SHAPE_IDS = [f"{b}x{i}" for b, i in MERGE_PATH_SHAPES]


def _max_row(A) -> int:
    return int(np.diff(A.indptr).max()) if A.shape[0] else 1


def _long_row_and_empty_rows(dtype, index_dtype):
    """One row holding most nonzeros (spanning many tiles) among mostly empty rows."""
    rng = np.random.default_rng(7)
    lengths = np.zeros(5000, dtype=np.int64)
    lengths[rng.choice(5000, 300, replace=False)] = rng.integers(1, 4, 300)
    lengths[2500] = 40_000
    return sg.csr_matrix(from_row_lengths(lengths, 50_000, dtype, index_dtype, rng))


# ------------------------------------------------------------------ CPU: the partition
@pytest.mark.parametrize("tile_items", [1, 7, 64, 2048])
@pytest.mark.parametrize("name", AWKWARD_NAMES)
def test_tiles_follow_the_merge_path(name, tile_items):
    A = awkward_matrices(np.float64, np.int64, seed=0)[name]
    ends = A.indptr[1:]
    rows, nzs = tile_coordinates(A.indptr, A.nnz, tile_items, np)
    total = A.shape[0] + A.nnz
    assert rows[0] == 0 and nzs[0] == 0
    assert rows[-1] == A.shape[0] and nzs[-1] == A.nnz
    assert np.all(np.diff(rows + nzs) <= tile_items)
    for i, j in zip(rows, nzs, strict=True):
        assert i + j <= total
        assert np.all(ends[:i] <= j), "a row counted as ended before all its nonzeros"
        if i < A.shape[0]:
            assert ends[i] >= j, "a nonzero consumed past the end of its row"


@pytest.mark.parametrize(
    "tile_row, expected",
    [([0], 1), ([0, 1, 2, 3], 1), ([0, 0, 0, 1, 2, 2, 5], 3), ([4, 4, 4, 4], 4), ([0, 7, 7], 2)],
)
def test_longest_run_counts_tiles_starting_in_one_row(tile_row, expected):
    assert longest_run(np.array(tile_row), np) == expected


def test_every_instantiation_is_registered():
    names = set(FAMILY.instantiations)
    assert "merge_path_spmv<complex128, long long, 128, 16>" in names
    assert "merge_path_fixup<float, int>" in names
    assert "merge_path_spmm<double, long long, 16, false>" in names
    spmm = 4 * 2 * len(SPMM_COLUMN_LANES) * 2 + 4 * 2  # the SpMM (both orders), its clearing
    assert len(names) == 4 * 2 * len(MERGE_PATH_SHAPES) + 4 * 2 + spmm


@pytest.mark.parametrize("shape", [(64, 8), (256, 16), (512, 4)])
def test_uncompiled_shapes_are_refused(shape):
    with pytest.raises(ValueError, match="not compiled"):
        MergePathPolicy(block_size=shape[0], nnz_per_thread=shape[1])


# ------------------------------------------------------- the former name ``adaptive``
def test_former_name_warns_and_names_the_new_one():
    with pytest.warns(DeprecationWarning, match="'adaptive' is now called 'merge_path'"):
        assert canonical_name("adaptive") == "merge_path"


def test_current_names_pass_without_a_warning(recwarn):
    assert canonical_name("merge_path") == "merge_path"
    assert canonical_name("auto") == "auto"
    assert not recwarn.list


def test_former_name_resolves_in_the_registry():
    with pytest.warns(DeprecationWarning, match="merge_path"):
        try:
            backend = _registry.get_backend("adaptive")
        except _registry.BackendUnavailableError as exc:  # no GPU here: the new name's reason
            assert "'merge_path' is not available" in str(exc)
        else:
            assert backend.name == "merge_path"


def test_tuning_cache_entries_under_the_former_names_load():
    raw = {
        "backend": "adaptive",
        "value_dtype": "float64",
        "index_dtype": "int32",
        "row_class": "irregular",
        "policy_type": "AdaptivePolicy",
        "knobs": {"block_size": 256, "nnz_per_thread": 4},
        "time_ms": 0.1,
        "gb_per_s": 100.0,
        "untuned_time_ms": None,
        "matrix": "m",
        "tuned_at": "2026-11-22T05:34:29+00:00",
    }
    entry = TunedEntry.from_json(raw)
    assert entry.backend == "merge_path"
    assert entry.policy(MergePathPolicy) == MergePathPolicy(256, 4)


def test_former_policy_name_is_importable_with_a_warning():
    with pytest.warns(DeprecationWarning, match="MergePathPolicy"):
        assert sparsegpu.tuning.AdaptivePolicy is MergePathPolicy


def test_former_name_computes_the_same_product(cupy):
    A = sg.csr_matrix(awkward_matrices(np.float64, np.int32, seed=1)["power_law"])
    x = cupy.asarray(random_vector(A.shape[1], np.float64, seed=2))
    with pytest.warns(DeprecationWarning, match="merge_path"):
        y = sg.matvec(A, x, backend="adaptive")
    assert cupy.array_equal(y, sg.matvec(A, x, backend="merge_path"))


# --------------------------------------------------------------------- GPU: products
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", AWKWARD_NAMES)
def test_matvec_matches_scipy(cupy, name, dtype, index_dtype):
    A = sg.csr_matrix(awkward_matrices(dtype, index_dtype, seed=1)[name])
    x = random_vector(A.shape[1], dtype, seed=2)
    y = sg.matvec(A, cupy.asarray(x), backend="merge_path")
    assert isinstance(y, cupy.ndarray)
    assert_product_close(y, sp.csr_matrix(A) @ x, dtype, _max_row(A), what=name)


@pytest.mark.parametrize("shape", MERGE_PATH_SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=DTYPE_IDS)
def test_every_shape_on_a_row_spanning_many_tiles(cupy, dtype, shape):
    A = _long_row_and_empty_rows(dtype, np.int32)
    x = random_vector(A.shape[1], dtype, seed=3)
    policy = MergePathPolicy(block_size=shape[0], nnz_per_thread=shape[1])
    y = sg.matvec(A, cupy.asarray(x), backend="merge_path", policy=policy)
    assert_product_close(y, sp.csr_matrix(A) @ x, dtype, _max_row(A))


@pytest.mark.parametrize("shape", [(128, 4), (256, 8)], ids=["128x4", "256x8"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=DTYPE_IDS)
def test_arrow_rows_spanning_hundreds_of_tiles_are_summed_by_warps(cupy, dtype, index_dtype, shape):
    # 4 rows of 150,000 nonzeros among 3,000 of 8: each dense row spans 70-290 tiles, more
    # than a warp, so the warp-per-run fix-up kernel adds the carries (with 128x4 tiles
    # there are also more tiles than the fused fix-up takes)
    lengths = np.full(3_004, 8, dtype=np.int64)
    lengths[[0, 1, 1500, 3003]] = 150_000
    rng = np.random.default_rng(11)
    A = sg.csr_matrix(from_row_lengths(lengths, 200_000, dtype, index_dtype, rng))
    policy = MergePathPolicy(block_size=shape[0], nnz_per_thread=shape[1])
    plan = sg.engine._planning.plan_for(A, dtype, backend="merge_path", policy=policy)
    assert plan.longest_carry_run > 32 and not plan.fused_fixup
    x = random_vector(A.shape[1], dtype, seed=12)
    xd = cupy.asarray(x)
    y = sg.matvec(A, xd, backend="merge_path", policy=policy)
    assert_product_close(y, sp.csr_matrix(A) @ x, dtype, _max_row(A))
    again = sg.matvec(A, xd, backend="merge_path", policy=policy)
    assert cupy.array_equal(y.view(np.uint8), again.view(np.uint8))


def _rows_around_tile_multiples(tile: int, dtype, index_dtype):
    """Rows of lengths at and around multiples of the tile (so some tiles lie wholly inside
    one row and others end a row on their first or last item), between short rows."""
    lengths = [3, tile - 1, 2, tile, 0, tile + 1, 5, 2 * tile, 1, 3 * tile - 2, 7, 5 * tile + 3]
    rng = np.random.default_rng(21)
    return sp.csr_matrix(from_row_lengths(lengths, 8 * tile, dtype, index_dtype, rng))


@pytest.mark.parametrize("shape", MERGE_PATH_SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=DTYPE_IDS)
def test_tiles_inside_one_row_sum_like_the_rest(cupy, dtype, index_dtype, shape):
    # the kernel sums a tile in which no row ends by a block reduction (no merge search);
    # the matrix has such tiles at every offset against the row starts
    tile = shape[0] * shape[1]
    S = _rows_around_tile_multiples(tile, dtype, index_dtype)
    rows, _ = tile_coordinates(S.indptr, S.nnz, tile, np)
    assert np.any(np.diff(rows) == 0), "no tile lies inside one row: the test misses its path"
    A = sg.csr_matrix(S)
    x = random_vector(A.shape[1], dtype, seed=22)
    xd = cupy.asarray(x)
    policy = MergePathPolicy(block_size=shape[0], nnz_per_thread=shape[1])
    y = sg.matvec(A, xd, backend="merge_path", policy=policy)
    assert_product_close(y, S @ x, dtype, _max_row(A))
    again = sg.matvec(A, xd, backend="merge_path", policy=policy)
    assert cupy.array_equal(y.view(np.uint8), again.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
def test_results_are_bitwise_reproducible(cupy, dtype):
    A = _long_row_and_empty_rows(dtype, np.int64)
    x = cupy.asarray(random_vector(A.shape[1], dtype, seed=4))
    first = sg.matvec(A, x, backend="merge_path")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        again = [sg.matvec(A, x, backend="merge_path") for _ in range(5)]
    stream.synchronize()
    for y in again:
        assert cupy.array_equal(first.view(np.uint8), y.view(np.uint8))


def test_out_argument_is_written(cupy):
    A = sg.csr_matrix(awkward_matrices(np.float64, np.int32, seed=1)["power_law"])
    x = cupy.asarray(random_vector(A.shape[1], np.float64, seed=5))
    out = cupy.full(A.shape[0], np.nan)
    assert sg.matvec(A, x, backend="merge_path", out=out) is out
    assert_product_close(out, sp.csr_matrix(A) @ x.get(), np.float64, _max_row(A))


# ------------------------------------------------ deprecated names: when they go
def _deprecated_plan():
    A = sg.csr_matrix(awkward_matrices(np.float64, np.int32, seed=1)["power_law"])
    return sg.plan(A, random_vector(A.shape[1], np.float64, seed=2))


DEPRECATED = {
    "sparsegpu.plan": _deprecated_plan,
    "sparsegpu.tuning.AdaptivePolicy": lambda: sparsegpu.tuning.AdaptivePolicy,
    "adaptive": lambda: canonical_name("adaptive"),
}


@pytest.mark.parametrize("name", DEPRECATED)
def test_deprecated_name_says_when_it_goes(name):
    """Each deprecation names the release and date that removes the name, and the
    CHANGELOG's Deprecated section names the same for it."""
    assert REMOVED_IN == "sparsegpu 0.3 (2027-06-01)"
    with pytest.warns(DeprecationWarning, match=re.escape(f"will be removed in {REMOVED_IN}")):
        DEPRECATED[name]()
    changelog = (Path(sparsegpu.__file__).parent.parent / "CHANGELOG.md").read_text()
    unreleased = changelog.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]
    deprecated = unreleased.split("### Deprecated", 1)[1].split("\n### ", 1)[0]
    assert f"removed in {REMOVED_IN}" in deprecated
    assert f"`{name.split('.')[-1]}" in deprecated or f"`{name}" in deprecated
