"""Mixed precision, opt-in per matrix (``A.mixed_precision``): float32 values kept on the
GPU for products with float64 vectors, computed in float64 (the vector family, delta16 and
cuSPARSE); never chosen without the opt-in; refused clearly by backends that cannot."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.engine import _planning
from sparsegpu.testing import (
    INDEX_DTYPES,
    assert_product_close,
    awkward_matrices,
    random_vector,
)

MIXED_BACKENDS = ["vector", "readonly", "shuffle", "delta16", "cusparse"]


def _max_row(S) -> int:
    lengths = np.diff(S.tocsr().indptr)
    return int(lengths.max()) if lengths.size else 1


# ---------------------------------------------------------------------------------- CPU
def test_off_by_default_and_takes_only_a_bool():
    A = sg.csr_matrix(sp.eye(3, dtype=np.float32))
    assert A.mixed_precision is False
    A.mixed_precision = True
    assert A.mixed_precision is True
    with pytest.raises(TypeError, match="mixed_precision must be True or False, got 'yes'"):
        A.mixed_precision = "yes"
    assert A.mixed_precision is True


def test_derived_matrices_keep_the_setting():
    A = sg.csr_matrix(sp.random(20, 10, density=0.3, format="csr", random_state=0, dtype="f"))
    A.mixed_precision = True
    assert A.T.mixed_precision and A.copy().mixed_precision and (A * 2).mixed_precision


def test_changes_nothing_on_the_host():
    """scipy widens the values itself: the setting is accepted and the answer unchanged."""
    S = sp.random(50, 40, density=0.2, format="csr", random_state=1, dtype=np.float32)
    A = sg.csr_matrix(S)
    A.mixed_precision = True
    x = random_vector(40, np.float64, seed=2)
    y = sg.matvec(A, x, backend="scipy")
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, S @ x)


# ---------------------------------------------------------------------------------- GPU
@pytest.mark.parametrize("matrix_name", list(awkward_matrices(np.float32, np.int32)))
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("backend", [None, *MIXED_BACKENDS])
def test_values_stay_narrow_and_the_answer_is_the_wide_one(cupy, backend, index_dtype, matrix_name):
    narrow, wide = np.dtype(np.float32), np.dtype(np.float64)
    S = awkward_matrices(narrow, index_dtype, seed=3)[matrix_name]
    A = sg.csr_matrix(S)
    A.mixed_precision = True
    A.backend = backend
    if backend == "delta16" and S.nnz:
        mirror = A._sg_mirror(sg.device._mirror.CUPY, narrow)
        if not sg.engine._registry.registered()["delta16"].supports(mirror):
            pytest.skip("delta16 refuses this matrix (scattered columns)")
    x = random_vector(S.shape[1], wide, seed=4)
    y = A @ cupy.asarray(x)
    assert isinstance(y, cupy.ndarray) and y.dtype == wide
    # the float64 product of the float32 values, to float64's tolerance
    assert_product_close(y, S.astype(wide) @ x, wide, _max_row(S), what=matrix_name)
    resolved = _planning.planned_choice(A, wide)
    assert resolved.choice.backend == (backend or resolved.choice.backend)
    assert resolved.choice.storage_dtype == narrow
    if resolved.choice.backend == "cusparse" and S.nnz > S.shape[0] * S.shape[1]:
        # more entries than positions: cuSPARSE is given the repeats summed, in the wide type
        assert resolved.plan.matrix.dtype == wide
    else:
        assert resolved.plan.matrix.dtype == narrow  # the values were not widened
    # numpy in, numpy out; several columns; out=
    assert_product_close(A @ x, S.astype(wide) @ x, wide, _max_row(S))
    X = np.stack([x, 2 * x], axis=1)
    assert_product_close(A @ X, S.astype(wide) @ X, wide, _max_row(S))
    out = cupy.empty(S.shape[0], dtype=wide)
    assert sg.matvec(A, cupy.asarray(x), out=out) is out


@pytest.mark.parametrize("backend", MIXED_BACKENDS)
def test_many_columns_go_column_by_column(cupy, backend):
    """From SPMM_MIN_COLUMNS columns on, a widened product runs the one-pass SpMM kernel;
    a mixed one must not (that kernel reads X in the values' dtype)."""
    S = sg.datasets.synthetic.stencil_2d(40, dtype=np.float32)
    S.data = np.random.default_rng(11).uniform(-1, 1, S.nnz).astype(np.float32)
    A = sg.csr_matrix(S)
    A.mixed_precision = True
    A.backend = backend
    X = np.random.default_rng(12).uniform(-1, 1, (S.shape[1], 20))
    Y = A @ cupy.asarray(X)
    assert Y.dtype == np.float64
    assert_product_close(Y, S.astype(np.float64) @ X, np.float64, _max_row(S))


def test_never_chosen_without_the_opt_in(cupy):
    S = sg.datasets.synthetic.stencil_2d(50, dtype=np.float32)
    A = sg.csr_matrix(S)
    x = cupy.asarray(random_vector(S.shape[1], np.float64, seed=5))
    A @ x
    resolved = _planning.planned_choice(A, np.float64)
    assert resolved.choice.storage_dtype is None
    assert resolved.plan.matrix.dtype == np.float64  # widened on the device, as before
    A.mixed_precision = True  # the switch takes effect on the next product
    A @ x
    assert _planning.planned_choice(A, np.float64).plan.matrix.dtype == np.float32
    assert "mixed precision: the values stay float32" in str(sg.explain(A, np.float64))


def test_cusparse_gives_the_widened_answer(cupy):
    """Every float32 is a float64: mixed and widened products agree to float64's rounding."""
    S = sg.datasets.synthetic.stencil_3d(20, points=27, dtype=np.float32)
    x = cupy.asarray(random_vector(S.shape[1], np.float64, seed=6))
    widened = sg.matvec(sg.csr_matrix(S), x, backend="cusparse")
    A = sg.csr_matrix(S)
    A.mixed_precision = True
    mixed = sg.matvec(A, x, backend="cusparse")
    assert float(cupy.abs(mixed - widened).max()) <= 1e-12 * float(cupy.abs(widened).max())


def test_complex_products_are_widened_as_before(cupy):
    """cuSPARSE refuses complex64 values with complex128 vectors: the setting leaves them."""
    S = awkward_matrices(np.complex64, np.int32, seed=3)["power_law"]
    A = sg.csr_matrix(S)
    A.mixed_precision = True
    x = random_vector(S.shape[1], np.complex128, seed=7)
    assert_product_close(
        A @ cupy.asarray(x), S.astype(np.complex128) @ x, np.complex128, _max_row(S)
    )
    assert _planning.planned_choice(A, np.complex128).choice.storage_dtype is None


def test_products_in_the_narrow_dtype_are_not_mixed(cupy):
    S = sg.datasets.synthetic.stencil_2d(30, dtype=np.float32)
    A = sg.csr_matrix(S)
    A.mixed_precision = True
    y = A @ cupy.ones(S.shape[1], dtype=np.float32)
    assert y.dtype == np.float32
    assert _planning.planned_choice(A, np.float32).choice.storage_dtype is None


@pytest.mark.parametrize("backend", ["texture", "swcache", "merge_path"])
def test_a_backend_that_cannot_says_what_to_do(cupy, backend):
    A = sg.csr_matrix(sg.datasets.synthetic.stencil_2d(30, dtype=np.float32))
    A.mixed_precision = True
    with pytest.raises(TypeError, match=r"does not compute float32 values with float64.*'shuffle'"):
        sg.matvec(A, cupy.ones(A.shape[1]), backend=backend)


@pytest.mark.parametrize("backend", ["shuffle", "delta16"])
def test_same_bits_as_the_widened_kernel_of_the_same_shape(cupy, backend):
    """float32 values widened in registers give exactly the widened mirror's sums."""
    S = sg.datasets.synthetic.stencil_2d(60, points=9, dtype=np.float32)
    S.data = np.random.default_rng(8).uniform(-1, 1, S.nnz).astype(np.float32)
    x = cupy.asarray(random_vector(S.shape[1], np.float64, seed=9))
    policy = sg.engine._registry.registered()[backend].policy_type(256, 4)
    widened = sg.matvec(sg.csr_matrix(S), x, backend=backend, policy=policy)
    A = sg.csr_matrix(S)
    A.mixed_precision = True
    mixed = sg.matvec(A, x, backend=backend, policy=policy)
    assert cupy.array_equal(mixed, widened)


def test_irregular_rows_go_to_cusparse(cupy):
    lengths = np.ones(200_000, dtype=np.int64)
    lengths[7] = 100_000
    rng = np.random.default_rng(2)
    S = sg.testing.from_row_lengths(lengths, 120_000, np.float32, np.int32, rng)
    A = sg.csr_matrix(S)
    A.mixed_precision = True
    choice = sg.explain(A, np.float64)
    assert choice.backend == "cusparse" and "irregular" in choice.reason


def test_auto_plans_among_the_backends_that_compute_it(cupy):
    S = sg.datasets.synthetic.stencil_2d(300, dtype=np.float32)
    A = sg.csr_matrix(S)
    A.mixed_precision = True
    x = cupy.asarray(random_vector(S.shape[1], np.float64, seed=10))
    choice = sg.choose(A, x)
    assert choice.storage_dtype == np.float32 and choice.level == "measure"
    timed = {m.backend for m in choice.measurements if m.ms is not None}
    assert {"shuffle", "delta16", "cusparse"} <= timed
    pair = (np.dtype(np.float32), np.dtype(np.float64))
    assert all(pair in sg.engine._registry.registered()[name].mixed_pairs for name in timed)
    assert all(m.agreed for m in choice.measurements if m.ms is not None)
    assert sg.explain(A, np.float64) == choice
    # the products run what planning chose, on the float32 values
    kept = A._sg_cache_dict().choices[_planning.auto_key(A._sg_operand(), np.float64)]
    assert kept.choice.backend == choice.backend and kept.plan.matrix.dtype == np.float32
    assert_product_close(A @ x, S.astype(np.float64) @ x.get(), np.float64, 5)
