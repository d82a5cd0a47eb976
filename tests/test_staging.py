"""NumPy vectors through pinned staging buffers (GPU only): right answers, results that
never alias a reused buffer, threads that each get their own buffer; inputs that come back
page-locked in place, never read stale, unlocked with the array. Large downloads pipelined
through pinned chunks (the pipeline on the CPU too)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from sparsegpu.datasets.synthetic import stencil_2d
from sparsegpu.device import _staging
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


# -- a large x that comes back is sent from where it is (page-locked in place) ------------


@pytest.fixture
def lock_any_size(monkeypatch, cupy):
    """Page-lock inputs of any size (the threshold is 1 MiB), none locked before or after."""
    monkeypatch.setattr(_staging, "REGISTER_MIN_BYTES", 0)
    _staging.release_registered()
    yield _staging
    _staging.release_registered()


def _close(actual, desired, rtol=1e-12):
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=1e-12)


def _poisson(cupy, n=64):
    S = sp.csr_matrix(stencil_2d(n)).astype(np.float64)  # 4096 rows: x is 32 KiB
    return S, rhs(S.shape[0], np.float64, seed=3)


def test_an_input_used_twice_is_locked_and_read_where_it_is(gpu_backend_name, lock_any_size):
    S, x = _poisson(lock_any_size)
    A = ours(S, gpu_backend_name)
    _close(A @ x, S @ x)  # first sighting: copied
    assert lock_any_size.registered_bytes() == 0
    _close(A @ x, S @ x)  # second: locked, sent directly
    assert lock_any_size.registered_bytes() == x.nbytes
    for step in range(3):  # written in place between products: never a stale read
        x *= -0.5
        x[step] = 7.0
        _close(A @ x, S @ x)
    assert lock_any_size.registered_bytes() == x.nbytes


def test_the_lock_goes_with_the_array(gpu_backend_name, lock_any_size):
    S, x = _poisson(lock_any_size)
    A = ours(S, gpu_backend_name)
    A @ x, A @ x
    assert lock_any_size.registered_bytes() == x.nbytes
    del x  # numpy runs the callback before it frees the memory
    assert lock_any_size.registered_bytes() == 0
    for seed in range(4):  # new arrays, perhaps at the same address: right answers
        x = rhs(S.shape[0], np.float64, seed=10 + seed)
        for _ in range(3):
            _close(A @ x, S @ x)
    del x
    assert lock_any_size.registered_bytes() == 0


def test_views_and_column_vectors_lock_the_owner(gpu_backend_name, lock_any_size):
    S, _ = _poisson(lock_any_size)
    A = ours(S, gpu_backend_name)
    n = S.shape[0]
    owner = rhs(2 * n, np.float64, seed=4)
    column = owner[n:].reshape(-1, 1)  # as scipy's LinearOperator passes p
    for _ in range(3):
        _close(A @ column, S @ column)
    assert lock_any_size.registered_bytes() == owner.nbytes
    owner[n:] = 1.0
    _close(A @ column, S @ np.ones((n, 1)))
    del column, owner
    assert lock_any_size.registered_bytes() == 0


def test_page_locked_inputs_are_sent_without_locking(gpu_backend_name, lock_any_size, cupy):
    S, x = _poisson(cupy)
    A = ours(S, gpu_backend_name)
    y = A @ x  # a result lives in CuPy's pinned pool
    for _ in range(3):
        _close(A @ y, S @ (S @ x))
    assert lock_any_size.registered_bytes() == 0
    x2 = rhs(S.shape[0], np.float64, seed=5)  # locked by somebody else
    cupy.cuda.runtime.hostRegister(x2.ctypes.data, x2.nbytes, 0)
    try:
        for _ in range(3):
            _close(A @ x2, S @ x2)
        assert lock_any_size.registered_bytes() == 0
    finally:
        cupy.cuda.runtime.hostUnregister(x2.ctypes.data)


def test_what_cannot_be_locked_is_copied(gpu_backend_name, lock_any_size, cupy):
    S, x = _poisson(cupy)
    A = ours(S, gpu_backend_name)
    borrowed = np.frombuffer(bytearray(x.tobytes()), dtype=np.float64)  # owns no memory
    cast = x.astype(np.float32)  # needs a cast: goes through the staging buffer
    for _ in range(3):
        _close(A @ borrowed, S @ x)
        _close(A @ cast, S @ cast.astype(np.float64), rtol=1e-6)
    assert lock_any_size.registered_bytes() == 0


@pytest.mark.parametrize("why", ["driver refuses", "past the cap"])
def test_an_input_not_locked_is_copied(gpu_backend_name, lock_any_size, cupy, monkeypatch, why):
    S, x = _poisson(cupy)
    A = ours(S, gpu_backend_name)

    def refuse(*args):
        raise cupy.cuda.runtime.CUDARuntimeError(712)  # cudaErrorHostMemoryAlreadyRegistered

    if why == "driver refuses":
        monkeypatch.setattr(cupy.cuda.runtime, "hostRegister", refuse)
    else:
        monkeypatch.setattr(lock_any_size, "REGISTER_MAX_BYTES", x.nbytes - 1)
    for _ in range(3):
        _close(A @ x, S @ x)
    assert lock_any_size.registered_bytes() == 0


def test_threads_share_a_locked_input(gpu_backend_name, lock_any_size, cupy):
    S, x = _poisson(cupy)
    A = ours(S, gpu_backend_name)
    want = S @ x

    def wrong_products(seed) -> int:
        own = rhs(S.shape[0], np.float64, seed=seed)
        with cupy.cuda.Stream(non_blocking=True):
            return sum(
                not np.allclose(A @ x, want, rtol=1e-12, atol=1e-12)
                + (not np.allclose(A @ own, S @ own, rtol=1e-12, atol=1e-12))
                for _ in range(10)
            )

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(wrong_products, range(4))) == 0
    assert lock_any_size.registered_bytes() >= x.nbytes


def test_scipy_cg_with_its_p_locked(gpu_backend_name, lock_any_size):
    S, b = _poisson(lock_any_size, n=24)
    S = S + sp.identity(S.shape[0])
    x, info = spl.cg(ours(S, gpu_backend_name), b, atol=0, **{TOL: 1e-10})
    want, _ = spl.cg(sp.csr_matrix(S), b, atol=0, **{TOL: 1e-10})
    assert info == 0
    np.testing.assert_allclose(x, want, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("nbytes", [0, 1, 4095, 4096, 4097, 3 * 4096 + 17, 50_000])
@pytest.mark.parametrize("workers", [1, 3])
def test_pipelined_copy_delivers_every_byte_in_place(nbytes, workers, monkeypatch):
    monkeypatch.setattr(_staging, "PIECE_BYTES", 512)
    source = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    destination = np.zeros(nbytes, dtype=np.uint8)
    buffers = [np.empty(4096, np.uint8) for _ in range(2)]
    fetched = []

    def fetch(start, stop, buffer):
        fetched.append((start, stop))
        buffer[: stop - start] = source[start:stop]

    with ThreadPoolExecutor(workers) as threads:
        _staging.pipelined_copy(nbytes, fetch, destination, buffers, threads, workers)
    np.testing.assert_array_equal(destination, source)
    assert fetched == [(a, min(a + 4096, nbytes)) for a in range(0, nbytes, 4096)]


def test_a_large_download_is_pipelined_and_exact(cupy, monkeypatch):
    monkeypatch.setattr(_staging, "PIPELINE_MIN_BYTES", 1 << 16)
    monkeypatch.setattr(_staging, "CHUNK_BYTES", 1 << 17)
    y = cupy.random.default_rng(1).random(300_001)  # 2.4 MB: 19 chunks, the last one short
    out = _staging.download_pageable(y)
    assert type(out) is np.ndarray and out.flags.owndata
    np.testing.assert_array_equal(out, y.get())
    small = cupy.arange(10.0)
    np.testing.assert_array_equal(_staging.download_pageable(small), np.arange(10.0))
