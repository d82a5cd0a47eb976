"""sparsegpu.datasets.synthetic: shapes, nonzero counts, seeds, row-length properties."""

from __future__ import annotations

import numpy as np
import pytest

import sparsegpu as sg
from sparsegpu.datasets import synthetic


def row_lengths(A):
    return np.diff(A.indptr)


def rows_sorted(A):
    """Whether the columns increase within every row."""
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), row_lengths(A))
    keys = rows * A.shape[1] + A.indices
    return bool(np.all(np.diff(keys) >= 0))


def same(A, B):
    return (
        A.shape == B.shape
        and np.array_equal(A.indptr, B.indptr)
        and np.array_equal(A.indices, B.indices)
        and np.array_equal(A.data, B.data)
    )


# ------------------------------------------------------------------------- stencils
STENCILS = {
    # name: (builder, rows, nnz) for a grid of side n=6
    "2d-5": (lambda: synthetic.stencil_2d(6), 36, 5 * 36 - 4 * 6),
    "2d-9": (lambda: synthetic.stencil_2d(6, points=9), 36, (3 * 6 - 2) ** 2),
    "3d-7": (lambda: synthetic.stencil_3d(6), 216, 7 * 216 - 6 * 36),
    "3d-27": (lambda: synthetic.stencil_3d(6, points=27), 216, (3 * 6 - 2) ** 3),
}


@pytest.mark.parametrize("case", STENCILS, ids=list(STENCILS))
def test_stencil_shape_and_nnz(case):
    build, rows, nnz = STENCILS[case]
    A = build()
    assert isinstance(A, sg.csr_matrix)
    assert A.shape == (rows, rows) and A.nnz == nnz
    assert A.has_sorted_indices and rows_sorted(A)


@pytest.mark.parametrize("case", STENCILS, ids=list(STENCILS))
def test_stencil_is_symmetric_positive_definite(case):
    A = STENCILS[case][0]()
    dense = A.toarray()
    np.testing.assert_array_equal(dense, dense.T)
    assert np.linalg.eigvalsh(dense).min() > 0


@pytest.mark.parametrize("case", STENCILS, ids=list(STENCILS))
def test_stencil_interior_rows_sum_to_zero(case):
    A = STENCILS[case][0]()
    full_rows = row_lengths(A) == row_lengths(A).max()
    np.testing.assert_allclose(np.asarray(A.sum(axis=1)).ravel()[full_rows], 0)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=["float32", "complex64"])
def test_stencil_dtype(dtype):
    assert synthetic.stencil_2d(4, dtype=dtype).dtype == dtype


@pytest.mark.parametrize(
    "build", [lambda: synthetic.stencil_2d(4, points=7), lambda: synthetic.stencil_3d(4, points=9)]
)
def test_stencil_refuses_unknown_point_counts(build):
    with pytest.raises(ValueError, match="use"):
        build()


# --------------------------------------------------------------------- random rows
def test_uniform_random_rows_have_exactly_per_row():
    A = synthetic.uniform_random(500, 7, n_cols=300, seed=1)
    assert A.shape == (500, 300) and A.nnz == 3500
    assert np.all(row_lengths(A) == 7)
    assert A.indices.min() >= 0 and A.indices.max() < 300
    assert rows_sorted(A)


def test_uniform_random_values_in_range_and_not_zero():
    A = synthetic.uniform_random(200, 5, seed=2)
    assert np.all(np.abs(A.data) <= 1) and np.any(A.data != 0)


def test_uniform_random_refuses_bad_sizes():
    with pytest.raises(ValueError, match="invalid sizes"):
        synthetic.uniform_random(-1, 3)


def test_power_law_columns_are_unsorted():
    assert not rows_sorted(synthetic.power_law(2_000, seed=3))


def test_power_law_row_lengths():
    A = synthetic.power_law(50_000, mean=12.0, max_row=2_000, seed=3)
    lengths = row_lengths(A)
    assert abs(lengths.mean() - 12.0) < 0.2 * 12.0
    assert lengths.max() <= 2_000
    assert lengths.max() > 20 * lengths.mean()  # a heavy tail, not uniform rows
    assert A.indices.min() >= 0 and A.indices.max() < 50_000


def test_power_law_refuses_infinite_mean():
    with pytest.raises(ValueError, match="exponent"):
        synthetic.power_law(10, exponent=1.0)


def test_long_rows_row_lengths():
    A = synthetic.long_rows(1_000, n_cols=5_000, short=3, long=2_000, n_long=4, seed=4)
    lengths = row_lengths(A)
    assert np.count_nonzero(lengths == 2_000) == 4
    assert np.count_nonzero(lengths == 3) == 996
    assert lengths[0] == lengths[-1] == 2_000  # spread from the first row to the last
    assert rows_sorted(A) and A.has_sorted_indices


def test_long_rows_clipped_to_the_columns():
    A = synthetic.long_rows(100, n_cols=50, long=1_000, n_long=2)
    assert row_lengths(A).max() == 50


def test_long_rows_refuses_bad_sizes():
    with pytest.raises(ValueError, match="invalid sizes"):
        synthetic.long_rows(10, n_long=11)


SEEDED = {
    "uniform": lambda seed: synthetic.uniform_random(300, 4, seed=seed),
    "power-law": lambda seed: synthetic.power_law(300, max_row=100, seed=seed),
    "long-rows": lambda seed: synthetic.long_rows(300, long=200, n_long=2, seed=seed),
}


@pytest.mark.parametrize("case", SEEDED, ids=list(SEEDED))
def test_same_seed_same_matrix(case):
    assert same(SEEDED[case](7), SEEDED[case](7))


@pytest.mark.parametrize("case", SEEDED, ids=list(SEEDED))
def test_other_seed_other_matrix(case):
    assert not same(SEEDED[case](7), SEEDED[case](8))


# ---------------------------------------------------------------------------- suite
SMALL = synthetic.suite("small")


def test_suites_name_the_same_classes():
    full = synthetic.suite("full")
    strip = [name.split("_")[0] for name in SMALL]
    assert strip == [name.split("_")[0] for name in full]


@pytest.mark.parametrize("name", list(SMALL))
def test_small_suite_builds(name):
    A = SMALL[name]()
    assert isinstance(A, sg.csr_matrix) and A.nnz > 0


def test_suite_refuses_unknown_scale():
    with pytest.raises(ValueError, match="scale"):
        synthetic.suite("huge")


# ------------------------------------------------------------------------------ GPU
def test_stencil_built_on_the_gpu_matches_the_host(cupy):
    assert same(synthetic.stencil_3d(5, points=27, xp=cupy), synthetic.stencil_3d(5, points=27))


@pytest.mark.parametrize("case", SEEDED, ids=list(SEEDED))
def test_seeded_generators_on_the_gpu_are_reproducible(cupy, case):
    build = {
        "uniform": lambda: synthetic.uniform_random(300, 4, seed=5, xp=cupy),
        "power-law": lambda: synthetic.power_law(300, max_row=100, seed=5, xp=cupy),
        "long-rows": lambda: synthetic.long_rows(300, long=200, n_long=2, seed=5, xp=cupy),
    }[case]
    assert same(build(), build())
