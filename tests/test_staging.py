"""NumPy vectors through pinned staging buffers (GPU only): right answers, results that
never alias a reused buffer, threads that each get their own buffer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from sparsegpu.testing import assert_product_close

from .test_linalg import TOL, hpd, ours, rhs


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128],
                         ids=["float32", "float64", "complex128"])  # fmt: skip
def test_numpy_products_match_scipy(gpu_backend_name, cupy, dtype):
    S = hpd(dtype)
    A = ours(S, gpu_backend_name)
    for seed in range(3):
        x = rhs(S.shape[0], dtype, seed=seed)
        max_row = int(np.diff(S.indptr).max())
        assert_product_close(A @ x, (S @ x).astype(dtype), dtype, max_row)


def test_results_do_not_alias_reused_buffers(gpu_backend_name, cupy):
    S = hpd(np.float64)
    A = ours(S, gpu_backend_name)
    x1, x2 = rhs(S.shape[0], np.float64, seed=1), rhs(S.shape[0], np.float64, seed=2)
    y1 = A @ x1
    kept = y1.copy()
    y2 = A @ x2
    assert not np.shares_memory(y1, y2)
    np.testing.assert_array_equal(y1, kept)
    np.testing.assert_allclose(y2, S @ x2, rtol=1e-12)


def test_an_input_changed_after_the_product_is_not_reread(gpu_backend_name, cupy):
    S = hpd(np.float64)
    A = ours(S, gpu_backend_name)
    x = rhs(S.shape[0], np.float64)
    y = A @ x
    x[:] = 0
    np.testing.assert_allclose(y, S @ rhs(S.shape[0], np.float64), rtol=1e-12)


def test_threads_get_right_answers(gpu_backend_name, cupy):
    S = hpd(np.float64, n=40)
    A = ours(S, gpu_backend_name)

    def wrong_products(seed) -> int:
        with cupy.cuda.Stream(non_blocking=True):
            xs = [rhs(S.shape[0], np.float64, seed=seed * 100 + k) for k in range(20)]
            return sum(not np.allclose(A @ x, S @ x, rtol=1e-12) for x in xs)

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(wrong_products, range(4))) == 0


def test_scipy_cg_on_a_sparsegpu_matrix(gpu_backend_name, cupy):
    S = hpd(np.float64, n=30)
    b = rhs(S.shape[0], np.float64)
    x, info = spl.cg(ours(S, gpu_backend_name), b, atol=0, **{TOL: 1e-10})
    want, _ = spl.cg(sp.csr_matrix(S), b, atol=0, **{TOL: 1e-10})
    assert info == 0
    np.testing.assert_allclose(x, want, rtol=1e-8, atol=1e-10)
