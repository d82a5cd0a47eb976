"""NumPy vectors through pinned staging buffers (GPU only): right answers, results that
never alias a reused buffer, threads that each get their own buffer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from sparsegpu.datasets.synthetic import stencil_2d
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


@pytest.fixture
def register_small(monkeypatch):
    """Every vector counts as large enough to be page-locked in place."""
    from sparsegpu import _staging

    monkeypatch.setattr(_staging, "REGISTER_MIN_BYTES", 0)
    return _staging


def test_a_vector_uploaded_twice_is_sent_from_where_it_lies(gpu_backend_name, cupy,
                                                            register_small):  # fmt: skip
    S = hpd(np.float64)
    A = ours(S, gpu_backend_name)
    x = rhs(S.shape[0], np.float64, seed=3)
    before = register_small.registered_bytes()
    first = A @ x  # staged, remembered
    assert register_small.registered_bytes() == before
    x *= 2  # changed in place between products, as scipy's cg changes p
    second = A @ x  # registered now
    assert register_small.registered_bytes() == before + x.nbytes
    x[:] = rhs(S.shape[0], np.float64, seed=4)
    third = A @ x
    want = x.copy()
    x[:] = np.nan  # changed right after the product: the product has read x already
    np.testing.assert_allclose(first * 2, second, rtol=1e-12)
    np.testing.assert_allclose(third, S @ want, rtol=1e-12)
    del x  # its memory is unregistered before NumPy frees it
    assert register_small.registered_bytes() == before


def test_views_and_other_dtypes_keep_the_staging_buffer(gpu_backend_name, cupy, register_small):
    S = hpd(np.float64)
    A = ours(S, gpu_backend_name)
    before = register_small.registered_bytes()
    wide = np.stack([rhs(S.shape[0], np.float64, seed=s) for s in range(2)], axis=1)
    column = wide[:, 1]  # strided view, not its own memory
    single = rhs(S.shape[0], np.float32, seed=5)  # converted on the way
    for _ in range(3):
        np.testing.assert_allclose(A @ column, S @ column, rtol=1e-12)
        assert_product_close(A @ single, S @ single, np.float64, int(np.diff(S.indptr).max()))
    assert register_small.registered_bytes() == before


def test_registrations_stay_under_the_limit(gpu_backend_name, cupy, register_small, monkeypatch):
    # vectors of 320 kB: each in memory of its own, so each can be registered
    S = (sp.csr_matrix(stencil_2d(200)) + 4 * sp.identity(200 * 200)).tocsr()
    A = ours(S, gpu_backend_name)
    xs = [rhs(S.shape[0], np.float64, seed=s) for s in range(4)]
    before = register_small.registered_bytes()
    monkeypatch.setattr(register_small, "REGISTER_LIMIT_BYTES",
                        before + 2 * xs[0].nbytes)  # fmt: skip
    for _ in range(3):
        for x in xs:
            np.testing.assert_allclose(A @ x, S @ x, rtol=1e-12)
            assert register_small.registered_bytes() <= register_small.REGISTER_LIMIT_BYTES
    assert register_small.registered_bytes() > before  # some are registered, not all
    del xs, x
    assert register_small.registered_bytes() == before


def test_scipy_cg_with_registered_vectors(gpu_backend_name, cupy, register_small):
    S = hpd(np.float64, n=30)
    b = rhs(S.shape[0], np.float64)
    before = register_small.registered_bytes()
    x, info = spl.cg(ours(S, gpu_backend_name), b, atol=0, **{TOL: 1e-10})
    want, _ = spl.cg(sp.csr_matrix(S), b, atol=0, **{TOL: 1e-10})
    assert info == 0
    np.testing.assert_allclose(x, want, rtol=1e-8, atol=1e-10)
    assert register_small.registered_bytes() == before  # cg's p is gone, so is its lock
