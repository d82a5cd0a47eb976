"""The comparisons planning and re-set-up make on the device (``device/_compare.py``,
``kernels/compare.cu``) against NumPy's: equality of index and value arrays, and the
count of entries outside an answer's bound, at sizes around a warp, a block and the
grid's stride (each lane of a warp must vote in every round)."""

from __future__ import annotations

import numpy as np
import pytest

from sparsegpu.device._compare import BLOCK, MAX_BLOCKS, arrays_equal, count_outside
from sparsegpu.measure._oracle import AnswerCheck

SIZES = [1, 31, 33, BLOCK + 5, BLOCK * MAX_BLOCKS + 37]
DTYPES = [np.int32, np.int64, np.float32, np.float64, np.complex64, np.complex128]


def _values(n, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-1000, 1000, n).astype(dtype)
    a = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(n)
    return a.astype(dtype)


def test_arrays_equal_on_the_host_is_numpys():
    a = np.arange(5)
    assert arrays_equal(a, a.copy()) and not arrays_equal(a, a[::-1].copy())
    assert not arrays_equal(a, a[:4]) and arrays_equal(np.zeros(0), np.zeros(0))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", SIZES)
def test_arrays_equal_finds_one_difference_anywhere(cupy, n, dtype):
    a = _values(n, dtype, 0)
    assert arrays_equal(cupy.asarray(a), cupy.asarray(a))
    for at in sorted({0, n // 2, n - 1}):
        b = a.copy()
        b[at] = b[at] + 1
        assert not arrays_equal(cupy.asarray(a), cupy.asarray(b)), at
    if np.dtype(dtype).kind == "c":  # the imaginary part alone
        b = a.copy()
        b[n - 1] += 1j
        assert not arrays_equal(cupy.asarray(a), cupy.asarray(b))


def test_arrays_equal_shapes_types_nan_and_views(cupy):
    a = cupy.arange(12, dtype=cupy.int32)
    assert not arrays_equal(a, a[:11]) and arrays_equal(a[:0], a[:0])
    assert arrays_equal(a.reshape(3, 4), a.reshape(3, 4).copy())
    assert arrays_equal(a[::2], cupy.ascontiguousarray(a[::2]))  # a strided view
    assert arrays_equal(a, a.astype(cupy.int64))  # other types: CuPy's comparison
    nan = cupy.asarray([1.0, np.nan])
    assert not arrays_equal(nan, nan.copy())  # numpy's: NaN differs from itself


@pytest.mark.parametrize("dtype", DTYPES[2:], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", SIZES)
def test_count_outside_is_numpys_count(cupy, n, dtype):
    y = _values(n, dtype, 1)
    rng = np.random.default_rng(2)
    reference = y + (rng.uniform(-1, 1, n) * 1e-3).astype(dtype)
    bound = 5e-4
    want = int(np.count_nonzero(~(np.abs(y.astype(np.complex128) - reference) <= bound)))
    assert count_outside(cupy.asarray(y), cupy.asarray(reference), bound) == want
    bounds = rng.uniform(0, 1e-3, n)
    want = int(np.count_nonzero(~(np.abs(y.astype(np.complex128) - reference) <= bounds)))
    assert count_outside(cupy.asarray(y), cupy.asarray(reference), cupy.asarray(bounds)) == want


def test_count_outside_counts_nan_and_declines_what_it_cannot_take(cupy):
    y = cupy.asarray([1.0, np.nan, 3.0])
    assert count_outside(y, cupy.asarray([1.0, 2.0, 3.0]), 0.0) == 1
    assert count_outside(y, y.astype(cupy.float32), 1.0) is None  # types differ
    assert count_outside(y, y, cupy.ones((3, 1))) is None  # a bound it would broadcast
    ints = cupy.arange(3)
    assert count_outside(ints, ints, 0.0) is None


@pytest.mark.parametrize("where", ["numpy", "cupy"])
def test_answer_check_says_the_same_on_both(where, request):
    xp = np
    if where == "cupy":
        xp = request.getfixturevalue("cupy")
    reference = np.linspace(0, 1, 1000)
    check = AnswerCheck(reference, 1e-9)
    good = reference + 5e-10
    bad = good.copy()
    bad[737] += 1e-6
    assert check.error(xp.asarray(good)) is None
    message = check.error(xp.asarray(bad))
    assert message is not None and "737" in message
    nan = good.copy()
    nan[3] = np.nan
    assert "not written" in check.error(xp.asarray(nan))
