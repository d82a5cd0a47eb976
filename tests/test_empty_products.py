"""Products with nothing in them (issue 33): zero rows, zero columns, zero nonzeros and
``A @ X`` with k = 0 columns, on every backend and through ``auto``'s planning, with NumPy
and CuPy operands. Each product is made three times: the first runs on the estimate, the
second plans by measurement (the step that once took ``X[:, 0]`` of an X with no column),
the third runs on what planning kept."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.testing import INDEX_DTYPES, assert_product_close

SHAPES = {
    "0x0": (0, 0),
    "0x6": (0, 6),
    "6x0": (6, 0),
    "no_nonzeros_6x5": (6, 5),
    "7x5": (7, 5),
}
# None: a vector; 0: no column; 20: past SPMM_MIN_COLUMNS (the one-pass SpMM kernel)
COLUMNS = [None, 0, 1, 3, 20]


def _matrix(name, index_dtype):
    shape = SHAPES[name]
    density = 0.0 if name.startswith("no_nonzeros") or 0 in shape else 0.4
    S = sp.random(*shape, density=density, random_state=3, format="csr")
    S.indices = S.indices.astype(index_dtype)
    S.indptr = S.indptr.astype(index_dtype)
    return S


def _operand(n, k, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, n if k is None else (n, k))


def _check_three_products(A, S, X, xp):
    want = S @ X
    for attempt in range(3):
        Y = A @ xp.asarray(X)
        assert isinstance(Y, xp.ndarray), f"product {attempt + 1} left x's array module"
        assert_product_close(Y, want, np.float64, 5, what=f"product {attempt + 1}")


@pytest.mark.parametrize("k", COLUMNS, ids=lambda k: "vector" if k is None else f"k{k}")
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(SHAPES))
def test_every_backend(backend_name, xp, name, index_dtype, k):
    S = _matrix(name, index_dtype)
    A = sg.csr_matrix(S)
    A.backend = backend_name
    _check_three_products(A, S, _operand(S.shape[1], k), xp)


@pytest.mark.parametrize("k", COLUMNS, ids=lambda k: "vector" if k is None else f"k{k}")
@pytest.mark.parametrize("name", list(SHAPES))
def test_auto_plans_through_them(xp, name, k):
    S = _matrix(name, np.int32)
    _check_three_products(sg.csr_matrix(S), S, _operand(S.shape[1], k), xp)


@pytest.mark.parametrize("name", list(SHAPES))
def test_plan_takes_an_x_without_columns(xp, name):
    """``sg.choose`` given no column to measure on returns the estimate, and products go on."""
    S = _matrix(name, np.int32)
    A = sg.csr_matrix(S)
    choice = sg.choose(A, xp.asarray(_operand(S.shape[1], 0)))
    assert choice.backend in [b.name for b in sg.backends()]
    _check_three_products(A, S, _operand(S.shape[1], 2), xp)
