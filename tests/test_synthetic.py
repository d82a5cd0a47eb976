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


# ------------------------------------------------------------------- held-out classes
def test_arrow_dense_rows_first_then_short_rows():
    A = synthetic.arrow(1_000, row_length=5, n_dense=3, dense_length=400, n_cols=2_000, seed=1)
    lengths = row_lengths(A)
    assert A.shape == (1_000, 2_000) and A.nnz == 3 * 400 + 997 * 5
    assert list(lengths[:3]) == [400] * 3 and np.all(lengths[3:] == 5)
    assert rows_sorted(A) and A.has_sorted_indices
    assert A.indices.min() >= 0 and A.indices.max() < 2_000
    dense = A.indices[: A.indptr[1]]
    assert len(np.unique(dense)) == 400  # distinct columns, spread over all of them
    assert dense[-1] > 2_000 * 0.99 - 5


def test_arrow_dense_rows_clipped_to_the_columns():
    A = synthetic.arrow(100, row_length=2, n_dense=1, dense_length=1_000, n_cols=50)
    assert row_lengths(A)[0] == 50 and len(np.unique(A.indices[:50])) == 50


def test_arrow_refuses_bad_sizes():
    with pytest.raises(ValueError, match="invalid sizes"):
        synthetic.arrow(10, n_dense=11)


def test_rmat_shape_duplicates_summed_and_skew():
    A = synthetic.rmat(10, edge_factor=8, seed=2)
    lengths = row_lengths(A)
    assert A.shape == (1024, 1024)
    assert 0 < A.nnz <= 8 * 1024 and A.nnz > 0.5 * 8 * 1024
    assert rows_sorted(A) and A.has_sorted_indices
    rows = np.repeat(np.arange(1024), lengths)
    keys = rows * 1024 + A.indices
    assert np.all(np.diff(keys) > 0)  # no repeated entry: duplicates were summed
    assert lengths.max() > 10 * lengths.mean()  # a skewed, graph-like degree distribution


def test_rmat_sums_repeated_edges():
    # scale 1, many edges: the 4 possible entries each summed from many draws
    A = synthetic.rmat(1, edge_factor=200, permute=False, seed=3)
    assert A.nnz == 4
    assert np.abs(A.data).max() > 1  # sums of many values in [-1, 1)


def test_rmat_unpermuted_puts_the_heavy_vertex_first():
    lengths = row_lengths(synthetic.rmat(10, edge_factor=8, permute=False, seed=2))
    assert lengths.argmax() == 0


def test_rmat_refuses_bad_probabilities():
    with pytest.raises(ValueError, match="R-MAT"):
        synthetic.rmat(4, a=0.6, b=0.3, c=0.3)


def test_permuted_is_a_symmetric_permutation():
    A = synthetic.stencil_2d(7)
    B = synthetic.permuted(A, seed=3)
    assert B.shape == A.shape and B.nnz == A.nnz
    assert rows_sorted(B) and B.has_sorted_indices
    assert sorted(row_lengths(B)) == sorted(row_lengths(A))
    dense_a, dense_b = A.toarray(), B.toarray()
    assert not np.array_equal(dense_a, dense_b)
    np.testing.assert_array_equal(dense_b, dense_b.T)  # symmetry survives P A P^T
    # recover p from the diagonal-free structure: P A P^T has the same spectrum
    np.testing.assert_allclose(np.linalg.eigvalsh(dense_a), np.linalg.eigvalsh(dense_b))


def test_permuted_matches_scipy_indexing():
    A = synthetic.uniform_random(60, 5, seed=4)
    A.sum_duplicates()
    B = synthetic.permuted(A, seed=5)
    p = np.argsort(np.random.default_rng(5).random(60))
    np.testing.assert_array_equal(B.toarray(), A.toarray()[p][:, p])


def test_permuted_refuses_non_square():
    with pytest.raises(ValueError, match="square"):
        synthetic.permuted(synthetic.uniform_random(5, 2, n_cols=7))


HELDOUT_SEEDED = {
    "arrow": lambda seed: synthetic.arrow(300, 4, 2, 100, seed=seed),
    "rmat": lambda seed: synthetic.rmat(8, 4, seed=seed),
    "permuted": lambda seed: synthetic.permuted(synthetic.stencil_2d(10), seed=seed),
}


@pytest.mark.parametrize("case", HELDOUT_SEEDED, ids=list(HELDOUT_SEEDED))
def test_heldout_generators_same_seed_same_matrix(case):
    build = HELDOUT_SEEDED[case]
    assert same(build(7), build(7)) and not same(build(7), build(8))


HELDOUT_SMALL = synthetic.heldout_suite("small")


def test_heldout_suites_name_the_same_classes():
    def strip(names):
        return [name.split("_")[0] + ("_permuted" if "permuted" in name else "") for name in names]

    assert strip(HELDOUT_SMALL) == strip(synthetic.heldout_suite("full"))


def test_heldout_names_are_not_tuning_names():
    tuning = set(synthetic.suite("full")) | set(synthetic.suite("small"))
    held = set(synthetic.heldout_suite("full")) | set(HELDOUT_SMALL)
    assert not tuning & held


@pytest.mark.parametrize("name", list(HELDOUT_SMALL))
def test_small_heldout_suite_builds(name):
    A = HELDOUT_SMALL[name]()
    assert isinstance(A, sg.csr_matrix) and A.nnz > 0
    assert A.indptr[-1] == A.nnz and np.all(np.diff(A.indptr) >= 0)
    assert A.indices.min() >= 0 and A.indices.max() < A.shape[1]
    if A.has_sorted_indices:
        assert rows_sorted(A)
    assert same(A, HELDOUT_SMALL[name]())  # seeded: the same matrix every time


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
@pytest.mark.parametrize("name", ["arrow_20k_x8_4x5k", "rmat_s12_e8", "stencil2d_50_permuted"])
def test_heldout_dtypes(name, dtype):
    assert synthetic.heldout_suite("small", dtype=dtype)[name]().dtype == dtype


def test_heldout_suite_refuses_unknown_scale():
    with pytest.raises(ValueError, match="scale"):
        synthetic.heldout_suite("huge")


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


@pytest.mark.parametrize("case", HELDOUT_SEEDED, ids=list(HELDOUT_SEEDED))
def test_heldout_generators_on_the_gpu_are_reproducible(cupy, case):
    build = {
        "arrow": lambda: synthetic.arrow(300, 4, 2, 100, seed=5, xp=cupy),
        "rmat": lambda: synthetic.rmat(8, 4, seed=5, xp=cupy),
        "permuted": lambda: synthetic.permuted(synthetic.stencil_2d(10), seed=5, xp=cupy),
    }[case]
    A = build()
    assert same(A, build()) and rows_sorted(A)


# ------------------------------------------------- issue 34's class-check suite
def test_random_mesh_3d_is_a_renumbered_stencil():
    A = synthetic.random_mesh_3d(5, points=27, seed=2)
    S = synthetic.stencil_3d(5, points=27)
    assert A.shape == S.shape and A.nnz == S.nnz and rows_sorted(A)
    assert sorted(row_lengths(A)) == sorted(row_lengths(S))
    assert not same(A, S)
    np.testing.assert_allclose(np.linalg.eigvalsh(A.toarray()), np.linalg.eigvalsh(S.toarray()))


@pytest.mark.parametrize("points", [7, 27])
def test_random_mesh_3d_drops_pairs_symmetrically(points):
    A = synthetic.random_mesh_3d(6, points=points, drop=0.4, seed=3)
    full = synthetic.stencil_3d(6, points=points).nnz
    pattern = (A != 0).astype(np.int8)
    assert abs(pattern - pattern.T).nnz == 0  # a pair goes from both of its rows
    assert np.all(A.diagonal() != 0)  # the diagonal stays
    off = full - 216
    assert 0.3 * off < full - A.nnz < 0.5 * off  # about 40% of the pairs
    assert row_lengths(A).min() < row_lengths(A).max()


def test_random_mesh_3d_refuses_a_bad_drop():
    with pytest.raises(ValueError, match="drop"):
        synthetic.random_mesh_3d(4, drop=1.0)


def test_long_row_mix_row_lengths():
    A = synthetic.long_row_mix(2_000, 5_000, mean=20, spread=0.5, long=3_000, n_long=2, seed=1)
    lengths = row_lengths(A)
    assert A.shape == (2_000, 5_000)
    assert np.count_nonzero(lengths == 3_000) == 2
    short = lengths[lengths != 3_000]
    assert short.min() >= 10 and short.max() <= 30 and 18 < short.mean() < 22
    long_row = int(np.flatnonzero(lengths == 3_000)[0])
    columns = A.indices[A.indptr[long_row] : A.indptr[long_row + 1]]
    assert len(np.unique(columns)) == 3_000  # distinct columns in a long row
    assert rows_sorted(A) and A.has_sorted_indices
    assert A.indices.max() < 5_000


def test_long_row_mix_clips_to_the_columns():
    A = synthetic.long_row_mix(50, 40, mean=60, long=100, seed=2)
    assert row_lengths(A).max() == 40


@pytest.mark.parametrize(
    "kwargs", [{"n_long": 11}, {"spread": 1.5}, {"mean": -1}], ids=["n_long", "spread", "mean"]
)
def test_long_row_mix_refuses_bad_sizes(kwargs):
    with pytest.raises(ValueError, match="invalid sizes|spread"):
        synthetic.long_row_mix(10, **kwargs)


CLASS_SEEDED = {
    "random-mesh": lambda seed: synthetic.random_mesh_3d(5, points=7, drop=0.2, seed=seed),
    "long-row-mix": lambda seed: synthetic.long_row_mix(200, 300, long=150, seed=seed),
}


@pytest.mark.parametrize("case", CLASS_SEEDED, ids=list(CLASS_SEEDED))
def test_class_generators_seeded(case):
    build = CLASS_SEEDED[case]
    assert same(build(7), build(7)) and not same(build(7), build(8))


def test_class_check_parts_are_disjoint():
    fit, held = synthetic.class_check_suite("fit"), synthetic.class_check_suite("heldout")
    long = synthetic.class_check_suite("heldout-long")
    assert fit and held and long and not set(fit) & set(held)
    assert not set(long) & (set(fit) | set(held))
    with pytest.raises(ValueError, match="part"):
        synthetic.class_check_suite("both")
