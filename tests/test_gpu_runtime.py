"""GPU-only behaviour of the foundation: streams, threads, device memory, no host copies."""

from __future__ import annotations

import gc
import threading
import traceback

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.datasets import synthetic
from sparsegpu.testing import assert_product_close, random_vector


@pytest.fixture
def big(cupy):
    # synthetic, not scipy.sparse.random: with an int seed scipy 1.18 draws the positions
    # by permuting all m*n cells (4e8 here), which took minutes on the GPU machine
    S = sp.csr_matrix(synthetic.uniform_random(20_000, 10, seed=11))  # plain scipy: the oracle
    return sg.csr_matrix(S), S


def test_cupy_in_cupy_out_without_host_copy(gpu_backend_name, cupy, big):
    A, S = big
    A.backend = gpu_backend_name
    x = cupy.asarray(random_vector(S.shape[1], np.float64, 1))
    A @ x  # warm: mirror and plan made
    y = A @ x
    assert type(y) is cupy.ndarray and y.dtype == np.float64 and y.shape == (S.shape[0],)
    assert_product_close(y, S @ x.get(), np.float64, int(np.diff(S.indptr).max()))


def test_threads_on_their_own_streams(gpu_backend_name, cupy, big):
    A, S = big
    A.backend = gpu_backend_name
    xs = [random_vector(S.shape[1], np.float64, seed) for seed in range(8)]
    expected = [S @ x for x in xs]
    results = [None] * 8
    errors = []

    def work(i):
        try:
            with cupy.cuda.Stream(non_blocking=True) as stream:
                x = cupy.asarray(xs[i])
                for _ in range(5):
                    y = A @ x
                results[i] = y.get()
                stream.synchronize()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for got, want in zip(results, expected, strict=True):
        assert_product_close(got, want, np.float64, int(np.diff(S.indptr).max()))


def test_plan_made_on_one_stream_is_ready_on_another(gpu_backend_name, cupy):
    """Mirrors and plans (A's and A.T's) made on the default stream, used at once from a
    non-blocking stream that does not wait for the default one. Power-law blocks of 50,000
    columns on the diagonal: irregular rows whose columns delta16 can compress (its format
    is built on the default stream too)."""
    S = sp.block_diag(
        [synthetic.power_law(50_000, seed=3 + block) for block in range(4)], format="csr"
    )
    A = sg.csr_matrix(S)
    A.backend = gpu_backend_name
    x = cupy.asarray(random_vector(S.shape[1], np.float64, 4))
    A @ x, A.T @ x  # mirrors and plans queued on the default stream, not waited for
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        y, z = A @ x, A.T @ x
    stream.synchronize()
    longest = int(np.diff(S.indptr).max())
    assert_product_close(y, S @ x.get(), np.float64, longest)
    assert_product_close(z, S.T @ x.get(), np.float64, int(np.diff(S.tocsc().indptr).max()))


def test_fresh_thread_with_a_vector_made_elsewhere(gpu_backend_name, cupy, big):
    """A thread whose first CUDA work is sparsegpu's launch (no context bound yet)."""
    A, S = big
    A.backend = gpu_backend_name
    x_host = random_vector(S.shape[1], np.float64, 2)
    x = cupy.asarray(x_host)
    A @ x  # plan made on this thread
    cupy.cuda.get_current_stream().synchronize()
    results, errors = [], []

    def work(vector):
        try:
            results.append(A @ vector)
            cupy.cuda.get_current_stream().synchronize()
        except Exception:
            errors.append(traceback.format_exc())

    for vector in (x, x_host):  # the device hot path, then the host-vector path
        thread = threading.Thread(target=work, args=(vector,))
        thread.start()
        thread.join()
    assert not errors, "\n".join(errors)
    for y in results:
        assert_product_close(y, S @ x_host, np.float64, int(np.diff(S.indptr).max()))


def test_out_of_memory_is_a_clear_memory_error_and_leaves_the_matrix_usable(gpu_backend_name, cupy):
    S = sp.csr_matrix(synthetic.uniform_random(50_000, 100, seed=5))  # ~60 MB
    A = sg.csr_matrix(S)
    pool = cupy.get_default_memory_pool()
    # matrices of earlier tests may still await the cycle collector; CuPy collects them
    # when an allocation fails, and the memory they free would then fit under the limit
    gc.collect()
    pool.free_all_blocks()
    limit = pool.get_limit()
    pool.set_limit(size=pool.used_bytes() + (1 << 20))
    try:
        with pytest.raises(MemoryError, match=r"needs [\d,]+ bytes of GPU memory but only"):
            sg.matvec(A, np.ones(S.shape[1]), backend=gpu_backend_name)
    finally:
        pool.set_limit(size=limit)
    x = random_vector(S.shape[1], np.float64, 3)
    assert_product_close(A @ x, S @ x, np.float64, int(np.diff(S.indptr).max()))
    assert_product_close(
        sg.matvec(A, x, backend=gpu_backend_name), S @ x, np.float64, int(np.diff(S.indptr).max())
    )


def test_results_queued_on_a_stream_share_its_event_and_settle(cupy):
    """Results queued on one stream record one event of that stream (made once); each
    settles (waits for its work, then forgets the event) whoever recorded it last."""
    import scipy.sparse as sp

    from sparsegpu.device._mirror import CUPY, DeviceMatrix

    S = sp.random(50, 50, density=0.1, random_state=2, format="csr")
    a = DeviceMatrix.from_host(S.data, S.indices, S.indptr, S.shape, CUPY).queued()
    b = DeviceMatrix.from_host(S.data, S.indices, S.indptr, S.shape, CUPY).queued()
    assert a._ready is b._ready is not None
    with cupy.cuda.Stream(non_blocking=True):
        c = DeviceMatrix.from_host(S.data, S.indices, S.indptr, S.shape, CUPY).queued()
    assert c._ready is not a._ready
    for m in (a, b, c):
        m.settle()
        assert m._ready is None
