"""``A @ X`` (issue 34): every backend, and every candidate planning times for ``A @ X``
(cuSPARSE's SpMM algorithms, the row-split kernel's shapes, the merge-path SpMM), against
scipy on awkward matrices, for k = 0 to well past a warp of column tiles, X in C and in
Fortran order, NumPy and CuPy; every launch shape the kernels can ask for is instantiated."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.backends import _spmm, merge_path
from sparsegpu.backends.base import Plan
from sparsegpu.device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES
from sparsegpu.device._mirror import DeviceMatrix, Residence
from sparsegpu.engine import _registry
from sparsegpu.testing import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    assert_product_close,
    awkward_matrices,
)

MATRIX_NAMES = list(awkward_matrices())
# no column, one (the vector product), a few, past one pass of the column lanes
COLUMNS = [0, 1, 3, 33]
ORDERS = ["C", "F"]
# the matrices that break SpMM kernels most: long rows, empty rows, power-law rows, shapes
CANDIDATE_MATRICES = ["power_law", "one_long_row", "half_rows_empty", "tall_500x30", "row_1x300"]
GPU_BACKENDS = [n for n, b in _registry.registered().items() if b.residence.name == "cupy"]


def _dense(rows: int, k: int, dtype, order: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (rows, k))
    if np.dtype(dtype).kind == "c":
        X = X + 1j * rng.uniform(-1, 1, (rows, k))
    return np.asarray(X.astype(dtype), order=order)


def _longest(S) -> int:
    lengths = np.diff(S.indptr)
    return int(lengths.max()) if lengths.size else 1


def _layout_kept(Y, X) -> bool:
    """A GPU result in X's order where X had only one (a Fortran X is read as it is, and
    its product written the same way); scipy's, on the host, is C-ordered."""
    fortran_only = X.flags.f_contiguous and not X.flags.c_contiguous
    return not fortran_only or Y.flags.f_contiguous or isinstance(Y, np.ndarray)


# ---------------------------------------------------------------- instantiations
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("lanes", [None, 1, 2, 4, 8, 16, 32])
@pytest.mark.parametrize("mean_row_length", [0.0, 0.5, 3.0, 7.0, 40.0, 5000.0])
def test_every_row_split_shape_is_instantiated(mean_row_length, lanes, order):
    names = set(_spmm.SPMM_FAMILY.instantiations)
    for value in CXX_VALUE_TYPES:
        mirror = SimpleNamespace(dtype=value, stats=SimpleNamespace(mean=mean_row_length))
        for k in (*range(2, 70), 127, 128, 129, 1000):
            columns, nonzero = _spmm.launch_shape(mirror, k, order == "F", lanes)
            assert columns * nonzero <= 32
            for index in CXX_INDEX_TYPES:
                if order == "F":
                    assert columns == 1
                    assert _spmm.columns_kernel_name(value, index, nonzero) in names
                else:
                    assert _spmm.rows_kernel_name(value, index, columns, nonzero) in names


def test_column_lanes_cover_k_in_tiles_of_16_bytes():
    assert _spmm.column_lanes(np.dtype(np.float32), 8) == 2  # two lanes of four floats
    assert _spmm.column_lanes(np.dtype(np.float64), 8) == 4  # four lanes of two doubles
    assert _spmm.column_lanes(np.dtype(np.complex128), 3) == 4  # one value a lane
    assert _spmm.column_lanes(np.dtype(np.float64), 1000) == 32  # a warp, then passes


@pytest.mark.parametrize("order", ORDERS)
def test_every_merge_path_spmm_team_is_instantiated(order):
    names = set(merge_path.FAMILY.instantiations)
    for value in CXX_VALUE_TYPES:
        for index in CXX_INDEX_TYPES:
            assert merge_path.spmm_zero_name(value, index) in names
            for k in range(2, 300):
                lanes = _spmm.column_lanes(np.dtype(value), k, order == "F")
                assert merge_path.spmm_name(value, index, lanes, order == "C") in names


# ------------------------------------ the per-product path on stand-in device arrays
class _DeviceArray:
    """An array with CuPy's attributes (shape, dtype, contiguity, a pointer), no numpy
    array: what a plan on the GPU checks, on the CPU."""

    _next_address = 1 << 20

    def __init__(self, shape, dtype=np.float64, order="C", ptr=None):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)
        self.size = int(np.prod(shape))
        self.itemsize = self.dtype.itemsize
        self.nbytes = self.size * self.itemsize
        if ptr is None:  # 256-byte aligned, as CuPy's allocations (whatever ran before)
            ptr = _DeviceArray._next_address
            _DeviceArray._next_address += -(-(max(self.nbytes, 1) + 512) // 256) * 256
        self.data = SimpleNamespace(ptr=ptr, mem=None)
        one = self.ndim < 2 or 1 in self.shape
        self._c_contiguous = order == "C" or one
        self._f_contiguous = order == "F" or one

    @property
    def flags(self):
        return SimpleNamespace(c_contiguous=self._c_contiguous, f_contiguous=self._f_contiguous)


class _Recording(Plan):
    """A plan on stand-in device arrays whose products only record their operands."""

    def _matmat(self, X, Y):
        self.products.append((X, Y))
        return Y


@pytest.fixture
def device_plan():
    """A (30 x 20) float64 plan on a stand-in device module."""
    stream = SimpleNamespace(ptr=1)
    module = SimpleNamespace(
        ndarray=_DeviceArray,
        __name__="stand-in device module",
        cuda=SimpleNamespace(get_current_stream=lambda: stream),
    )
    residence = Residence("stand-in", lambda: module, None, copies=True)
    mirror = DeviceMatrix(
        _DeviceArray((5,)), _DeviceArray((5,), np.int32), _DeviceArray((31,), np.int32),
        (30, 20), residence,
    )  # fmt: skip
    plan = _Recording(mirror, sg.tuning.NoPolicy())
    plan.products = []
    return plan


@pytest.mark.parametrize("order", ORDERS)
def test_a_device_block_gets_a_result_in_its_own_order(device_plan, order):
    X = _DeviceArray((20, 6), order=order)
    Y = device_plan.matmat(X)
    assert device_plan.products == [(X, Y)]
    assert Y.shape == (30, 6) and (Y._f_contiguous if order == "F" else Y._c_contiguous)


@pytest.mark.parametrize("order", ORDERS)
def test_an_out_in_x_order_is_written_as_it_is(device_plan, order):
    X = _DeviceArray((20, 6), order=order)
    out = _DeviceArray((30, 6), order=order)
    assert device_plan.takes_out(X, out)
    assert device_plan.matmat(X, out=out) is out
    assert device_plan.products == [(X, out)]


def _overlapping(X, shape, order):
    return _DeviceArray(shape, order=order, ptr=X.data.ptr + X.nbytes // 2)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    "bad, message",
    [
        pytest.param(lambda X, o: _DeviceArray((30, 5), order=o), "shape", id="other shape"),
        pytest.param(
            lambda X, o: _DeviceArray((30, 6), order="C" if o == "F" else "F"),
            "contiguous",
            id="other order",
        ),
        pytest.param(
            lambda X, o: _DeviceArray((30, 6), np.float32, order=o), "dtype", id="other dtype"
        ),
        pytest.param(lambda X, o: np.zeros((30, 6), order=o), "array", id="a numpy out"),
        pytest.param(lambda X, o: _overlapping(X, (30, 6), o), "shares memory", id="overlap"),
    ],
)
def test_an_out_that_cannot_take_the_product_as_it_is_is_refused(device_plan, order, bad, message):
    """The dispatcher copies into such an out (``takes_out`` is False); the plan itself
    refuses it before any pointer reaches a kernel."""
    X = _DeviceArray((20, 6), order=order)
    out = bad(X, order)
    assert not device_plan.takes_out(X, out)
    with pytest.raises(ValueError, match=message):
        device_plan.matmat(X, out=out)
    assert device_plan.products == []


class _CountingSpmm(_spmm.SpmmLaunches):
    """SpMM launches that record what was made and launched."""

    def __init__(self):
        super().__init__(SimpleNamespace(dtype=np.dtype(np.float64)))
        self.made, self.launched = [], []

    def _make(self, k, fortran, vectors):
        self.made.append((k, fortran, vectors))
        launch = SimpleNamespace(xy=lambda grid, X, Y: self.launched.append((grid, X, Y)))
        return ((launch, 1), (launch, 2))


def test_an_spmm_launch_is_made_once_per_k_order_and_alignment():
    spmm = _CountingSpmm()
    X, Y = _DeviceArray((20, 4)), _DeviceArray((30, 4))
    for _ in range(3):
        assert spmm(X, Y) is Y
    assert spmm.made == [(4, False, True)]  # 4 doubles a row: 16-byte rows, aligned starts
    assert spmm.launched == [(1, X, Y), (2, X, Y)] * 3  # every launch, in turn
    spmm(_DeviceArray((20, 4), ptr=X.data.ptr + 8), Y)  # a view one double in
    spmm(_DeviceArray((20, 3)), _DeviceArray((30, 3)))  # rows of 24 bytes
    spmm(_DeviceArray((20, 4), order="F"), _DeviceArray((30, 4), order="F"))
    assert spmm.made[1:] == [(4, False, False), (3, False, False), (4, True, False)]


# ---------------------------------------------------------------- every backend
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("k", COLUMNS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("matrix_name", MATRIX_NAMES)
def test_matmat_matches_scipy(backend_name, matrix_name, dtype, index_dtype, k, order):
    xp = sg.device._cuda.cupy_or_none() if backend_name in GPU_BACKENDS else np
    S = awkward_matrices(dtype, index_dtype, seed=1)[matrix_name]
    X = _dense(S.shape[1], k, dtype, order, seed=k)
    A = sg.csr_matrix(S)
    A.backend = backend_name
    for _ in range(2):  # the second product of a named backend may plan its policy
        Y = A @ xp.asarray(X, order=order)
        assert isinstance(Y, xp.ndarray) and _layout_kept(Y, X)
        assert_product_close(Y, S @ X, dtype, _longest(S), what=f"A @ X (k={k}, {order})")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("k", [2, 5, 64, 130])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
@pytest.mark.parametrize("matrix_name", ["power_law", "random_200x150"])
def test_numpy_and_cupy_operands(backend_name, xp, matrix_name, dtype, k, order):
    S = awkward_matrices(dtype, np.int32, seed=2)[matrix_name]
    X = _dense(S.shape[1], k, dtype, order, seed=k)
    A = sg.csr_matrix(S)
    A.backend = backend_name
    Y = A @ xp.asarray(X, order=order)
    assert isinstance(Y, xp.ndarray)
    assert_product_close(Y, S @ X, dtype, _longest(S), what=f"A @ X (k={k}, {order})")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("k", [3, 33])
def test_transposed_matmat_matches_scipy(backend_name, xp, k, order):
    S = awkward_matrices(np.float64, np.int32, seed=2)["power_law"]
    X = _dense(S.shape[0], k, np.float64, order, seed=k)
    A = sg.csr_matrix(S)
    A.backend = backend_name
    for _ in range(2):
        Y = A.T @ xp.asarray(X, order=order)
        assert_product_close(Y, S.T @ X, np.float64, S.shape[0], what=f"A.T @ X (k={k})")


@pytest.mark.parametrize("columns", [1, 4], ids=["vector", "4-columns"])
def test_operand_viewed_at_an_odd_offset(gpu_backend_name, cupy, columns):
    """x (or X) a view starting mid-allocation, as a solver's Krylov basis rows are."""
    S = awkward_matrices(np.float64, np.int32, seed=3)["random_200x150"]
    A = sg.csr_matrix(S)
    A.backend = gpu_backend_name
    storage = np.random.default_rng(4).uniform(-1, 1, (S.shape[1] + 1) * columns)
    X = storage[columns:].reshape(S.shape[1], columns)
    X = X[:, 0] if columns == 1 else X
    Y = A @ cupy.asarray(storage)[columns:].reshape(X.shape)
    assert_product_close(Y, S @ X, np.float64, 12)


@pytest.mark.parametrize("out_order", ORDERS)
@pytest.mark.parametrize("order", ORDERS)
def test_out_is_filled_in_either_order(backend_name, xp, order, out_order):
    S = awkward_matrices(np.float64, np.int32, seed=5)["random_200x150"]
    X = _dense(S.shape[1], 6, np.float64, order, seed=6)
    out = xp.full((S.shape[0], 6), np.nan, order=out_order)
    Y = sg.matvec(sg.csr_matrix(S), xp.asarray(X, order=order), backend=backend_name, out=out)
    assert Y is out
    assert_product_close(out, S @ X, np.float64, _longest(S))


def _sharing(xp, n: int, k: int, order: str, shift: int, seed: int):
    """X of (n, k) and an out of the same shape in one allocation, ``shift`` entries
    apart in X's memory order (0: out is X)."""
    flat = xp.asarray(np.random.default_rng(seed).uniform(-1, 1, n * k + shift))
    X = flat[shift:].reshape((n, k), order=order)
    out = flat[: n * k].reshape((n, k), order=order)
    return X, out


@pytest.mark.parametrize("shift", [0, 1], ids=["out is X", "out one entry before X"])
@pytest.mark.parametrize("order", ORDERS)
def test_an_out_sharing_memory_with_x_gets_the_product_of_x_as_it_was(
    backend_name, xp, order, shift
):
    S = awkward_matrices(np.float64, np.int32, seed=10)["random_200x150"]
    S = S[:150]  # square: out may be X itself
    A = sg.csr_matrix(S)
    for seed in range(3):  # the estimate, the measurement, the measured plan
        X, out = _sharing(xp, 150, 6, order, shift, seed)
        expected = S @ (X.get() if hasattr(X, "get") else X.copy())
        assert sg.matvec(A, X, backend=backend_name, out=out) is out
        assert_product_close(out, expected, np.float64, _longest(S))


@pytest.mark.parametrize("order", ORDERS)
def test_an_out_reused_product_after_product_holds_each_answer(gpu_backend_name, cupy, order):
    """An out in X's order is written as it is (a block method's loop), every product."""
    S = awkward_matrices(np.float64, np.int32, seed=12)["power_law"]
    A = sg.csr_matrix(S)
    A.backend = gpu_backend_name
    out = cupy.full((S.shape[0], 8), np.nan, order=order)
    for seed in range(4):
        X = _dense(S.shape[1], 8, np.float64, order, seed=seed)
        assert sg.matvec(A, cupy.asarray(X, order=order), out=out) is out
        assert_product_close(out, S @ X, np.float64, _longest(S), what=f"product {seed}")


# ------------------------------------------------------------ every A @ X candidate
def _candidates(backend_name, S, dtype, k, order):
    """The policies planning times for ``A @ X`` on ``backend_name`` (skips without any)."""
    backend = _registry.get_backend(backend_name)
    A = sg.csr_matrix(S)
    mirror = A._sg_mirror(backend.residence, dtype)
    policies = backend.matmat_candidates(mirror, sg.engine._choice.k_bucket(k), order)
    if not policies:
        pytest.skip(f"{backend_name} has no A @ X candidates of its own for {order} order")
    return A, policies


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("k", [2, 8, 33])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("matrix_name", CANDIDATE_MATRICES)
def test_every_matmat_candidate_matches_scipy(
    gpu_backend_name, cupy, matrix_name, dtype, index_dtype, k, order
):
    S = awkward_matrices(dtype, index_dtype, seed=7)[matrix_name]
    A, policies = _candidates(gpu_backend_name, S, dtype, k, order)
    X = _dense(S.shape[1], k, dtype, order, seed=k)
    for policy in policies:
        Y = sg.matvec(A, cupy.asarray(X, order=order), backend=gpu_backend_name, policy=policy)
        assert_product_close(Y, S @ X, dtype, _longest(S), what=f"{policy} (k={k}, {order})")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("k", [2, 8, 64])
def test_auto_plans_matmat_and_keeps_the_answer(cupy, k, order):
    S = awkward_matrices(np.float64, np.int32, seed=8)["power_law"]
    A = sg.csr_matrix(S)
    X = cupy.asarray(_dense(S.shape[1], k, np.float64, order, seed=k), order=order)
    for _ in range(3):  # the estimate, the measurement, the measured plan
        assert_product_close(A @ X, S @ X.get(), np.float64, _longest(S))
    choice = sg.explain(A, X)
    assert choice.level == "measure" and choice.operation.kind == "A @ X"
    assert choice.operation.order == order and len(choice.measurements) >= 2


@pytest.mark.parametrize("order", ORDERS)
def test_rows_cut_by_merge_path_runs_are_summed(cupy, order):
    """One row holding most nonzeros spans many teams of the merge-path SpMM: the teams'
    shares are added into a row cleared first, every product (the clearing runs again)."""
    rng = np.random.default_rng(9)
    dense_row = sp.csr_matrix(rng.uniform(-1, 1, (1, 4000)))
    S = sp.vstack([sp.random(50, 4000, density=0.01, random_state=9), dense_row]).tocsr()
    policy = sg.tuning.MergePathPolicy(256, 4)
    X = _dense(4000, 8, np.float64, order, seed=9)
    A = sg.csr_matrix(S)
    for _ in range(3):
        Y = sg.matvec(A, cupy.asarray(X, order=order), backend="merge_path", policy=policy)
        assert_product_close(Y, S @ X, np.float64, 4000)
