"""``A @ X`` with k = 1..64 columns: every GPU backend against scipy, on awkward matrices;
the default GPU matmat (one CSR kernel reading A once) has an instantiation for every
launch shape it can ask for."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu import _spmm
from sparsegpu._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES
from sparsegpu.testing import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    assert_product_close,
    awkward_matrices,
)

MATRIX_NAMES = list(awkward_matrices())
COLUMNS = [1, 3, 32, 33, 64]


@pytest.mark.parametrize("k", range(1, 65))
@pytest.mark.parametrize("mean_row_length", [0.0, 0.5, 3.0, 7.0, 40.0, 5000.0])
def test_every_launch_shape_is_instantiated(k, mean_row_length):
    threads_per_row, column_lanes = _spmm.launch_shape(mean_row_length, k)
    assert column_lanes >= min(k, 32)
    for value in CXX_VALUE_TYPES:
        for index in CXX_INDEX_TYPES:
            name = _spmm.kernel_name(value, index, threads_per_row, column_lanes)
            assert name in _spmm.SPMM_FAMILY.instantiations


@pytest.mark.parametrize("k", COLUMNS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("matrix_name", MATRIX_NAMES)
def test_matmat_matches_scipy(gpu_backend_name, cupy, matrix_name, dtype, index_dtype, k):
    S = awkward_matrices(dtype, index_dtype, seed=1)[matrix_name]
    rng = np.random.default_rng(k)
    X = rng.uniform(-1, 1, (S.shape[1], k)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        X = X + 1j * rng.uniform(-1, 1, X.shape).astype(dtype)
    A = sg.csr_matrix(S)
    A.backend = gpu_backend_name
    Y = A @ cupy.asarray(X)
    assert isinstance(Y, cupy.ndarray)
    row_lengths = np.diff(S.indptr)
    longest = int(row_lengths.max()) if len(row_lengths) else 1
    assert_product_close(Y, sp.csr_matrix(S) @ X, dtype, longest, what=f"A @ X (k={k})")


def test_transposed_matmat_matches_scipy(gpu_backend_name, cupy):
    S = awkward_matrices(np.float64, np.int32, seed=2)["power_law"]
    X = np.random.default_rng(0).uniform(-1, 1, (S.shape[0], 16))
    A = sg.csr_matrix(S)
    A.backend = gpu_backend_name
    assert_product_close(A.T @ cupy.asarray(X), S.T @ X, np.float64, S.shape[0])


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
