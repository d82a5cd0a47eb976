"""Writers that bypass Python keep working, and never make a product stale (issue 45).

The host arrays stay writable after a product, as in scipy, on every backend: compiled
code (``np.copyto``, ufuncs with ``out=``, ctypes, PyAMG's C++ helpers) writes them
without asking Python. A product that follows such a write reads the arrays as they are
now: the array handed out marked its buffer, and the product compared the arrays with the
fingerprint taken then. The host-copy backend (a mirror that copies, as a GPU upload does)
stands in for the GPU here; on a GPU machine every GPU backend runs the same tests.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import sparsegpu as sg
from sparsegpu.device import _host_buffers
from sparsegpu.testing import assert_product_close, random_vector

from .conftest import BACKEND_NAMES, skip_unless_available


@pytest.fixture(params=BACKEND_NAMES)
def backend(request):
    skip_unless_available(request.param)
    return request.param


def _matrix(seed=0, n=60, m=50):
    return sg.csr_matrix(sp.random(n, m, density=0.15, format="csr", random_state=seed))


def _check(A, backend, what):
    """A product of A on ``backend`` equals plain scipy's product of A's arrays as they are."""
    plain = sp.csr_matrix((A.data.copy(), A.indices.copy(), A.indptr.copy()), shape=A.shape)
    x = random_vector(A.shape[1], A.dtype, 42)
    rows = int(np.diff(plain.indptr).max()) if plain.shape[0] else 1
    assert_product_close(sg.matvec(A, x, backend=backend), plain @ x, plain.dtype, rows, what)


def _memmove(target, values):
    ctypes.memmove(target.ctypes.data, values.ctypes.data, values.nbytes)


# each writes new values into A's data through code that Python does not see write
WRITERS = {
    "np.copyto": lambda d, v: np.copyto(d, v),
    "ufunc out=": lambda d, v: np.add(v, 0.0, out=d),
    "ctypes.memmove": _memmove,
    "uint8 view": lambda d, v: d.view(np.uint8).__setitem__(slice(None), v.view(np.uint8)),
    "setitem": lambda d, v: d.__setitem__(slice(None), v),
}


@pytest.mark.parametrize("write", list(WRITERS.values()), ids=list(WRITERS))
def test_write_after_a_product_is_seen(backend, write):
    A = _matrix()
    sg.matvec(A, np.ones(A.shape[1]), backend=backend)
    assert A.data.flags.writeable and A.indices.flags.writeable and A.indptr.flags.writeable
    write(A.data, np.linspace(-1.0, 2.0, A.nnz))
    _check(A, backend, "after the write")


@pytest.mark.parametrize("write", list(WRITERS.values()), ids=list(WRITERS))
def test_a_kept_array_keeps_writing_the_matrix(backend, write):
    """``d = A.data`` kept across products: every write through it reaches the matrix and
    the next product, as in scipy (the array stays the matrix's)."""
    A = _matrix(seed=1)
    sg.matvec(A, np.ones(A.shape[1]), backend=backend)
    data = A.data
    for round_ in range(4):
        sg.matvec(A, np.ones(A.shape[1]), backend=backend)
        write(data, np.linspace(-1.0, 1.0 + round_, A.nnz))
        assert A.data is data
        _check(A, backend, f"round {round_}")


def test_a_kept_view_keeps_writing_the_matrix(backend):
    A = _matrix(seed=2)
    sg.matvec(A, np.ones(A.shape[1]), backend=backend)
    part = A.data[3:9]
    _check(A, backend, "before")
    np.copyto(part, 100.0)
    _check(A, backend, "after a write through a kept view")


def test_a_write_through_the_transpose_is_seen(backend):
    A = _matrix(seed=3)
    sg.matvec(A, np.ones(A.shape[1]), backend=backend)
    sg.matvec(A.T, np.ones(A.shape[0]), backend=backend)
    np.copyto(A.T.data, 5.0)
    _check(A, backend, "after writing A.T.data")


def test_a_write_into_a_copy_sharing_the_mirror_is_seen(backend):
    """``C = C.copy(); C.data[:] = 1`` (PyAMG's filter_operator): the copy starts with the
    original's mirrors, and its write drops them, not the original's."""
    A = _matrix(seed=10)
    sg.matvec(A, np.ones(A.shape[1]), backend=backend)
    ones = A.copy()
    ones.data[:] = 1.0
    _check(ones, backend, "the written copy")
    _check(A, backend, "the original")


def test_index_written_out_of_range_by_compiled_code_is_a_value_error(backend):
    A = _matrix(seed=4)
    sg.matvec(A, np.ones(A.shape[1]), backend=backend)
    np.copyto(A.indices[:1], 10**6)
    with pytest.raises(ValueError, match="column index out of range"):
        sg.matvec(A, np.ones(A.shape[1]), backend=backend)


def test_an_unchanged_exposure_costs_one_check(backend, monkeypatch):
    """Reading the arrays costs one fingerprint then and one at the next product; the
    products after it, and products while nothing was read, check nothing."""
    A = _matrix(seed=5)
    x = np.ones(A.shape[1])
    xt = np.ones(A.shape[0])
    sg.matvec(A, x, backend=backend)
    prints = []
    fingerprint = _host_buffers.fingerprint
    monkeypatch.setattr(_host_buffers, "fingerprint", lambda a: prints.append(1) or fingerprint(a))
    for _ in range(5):
        sg.matvec(A, x, backend=backend)
        sg.matvec(A.T, xt, backend=backend)
        assert A.nnz > 0 and A.shape == (60, 50)
    assert prints == []
    assert float(np.sum(A.data)) != 0.0  # handed out, then dropped
    for _ in range(5):
        sg.matvec(A, x, backend=backend)
    assert len(prints) == 2


@pytest.mark.parametrize("bsr_backend", ["scipy", "host-copy", "cusparse_bsr", "block"])
def test_reading_a_blocksize_hands_nothing_out(bsr_backend, monkeypatch):
    """A BSR matrix's ``blocksize`` is read from its blocks' shape (scipy reads
    ``self.data.shape``, which handed the buffer out and made every later product
    fingerprint it); a write through ``data`` is still seen. On the backends that read
    BSR matrices (a CSR-only backend named for one is a TypeError)."""
    skip_unless_available(bsr_backend)
    backend = bsr_backend
    S = sp.random(60, 60, density=0.2, format="csr", random_state=8)
    A = sg.bsr_matrix(S, blocksize=(3, 3))
    x = np.ones(60)
    y = sg.matvec(A, x, backend=backend)
    prints = []
    fingerprint = _host_buffers.fingerprint
    monkeypatch.setattr(_host_buffers, "fingerprint", lambda a: prints.append(1) or fingerprint(a))
    for _ in range(3):
        assert A.blocksize == (3, 3)
        sg.matvec(A, x, backend=backend)
    assert prints == []
    A.data[...] *= 2.0
    assert np.allclose(sg.matvec(A, x, backend=backend), 2.0 * y)


def test_solver_products_check_nothing(backend, monkeypatch):
    S = sp.random(80, 80, density=0.05, format="csr", random_state=6)
    A = sg.csr_matrix(S @ S.T + sp.identity(80) * 8)
    A.backend = backend
    b = np.ones(80)
    spla.cg(A, b, maxiter=3)
    prints = []
    monkeypatch.setattr(_host_buffers, "fingerprint", lambda a: prints.append(1))
    spla.cg(A, b, maxiter=20)
    assert prints == []


def test_copy_on_upload_still_parts_earlier_aliases():
    """An array kept from before the first upload stops being the matrix's then (one
    private copy), so that an old alias never costs a check per product: documented."""
    A = _matrix(seed=7)
    earlier = A.data
    sg.matvec(A, np.ones(A.shape[1]), backend="host-copy")
    assert A.data is not earlier
    np.copyto(earlier, 9.0)
    assert not np.any(A.data == 9.0)
    _check(A, "host-copy", "after writing the parted alias")


def test_pyamg_satisfy_constraints_on_a_sparsegpu_matrix(backend):
    """PyAMG's C++ ``satisfy_constraints_helper`` writes ``np.ravel(U.data)`` in place."""
    smooth = pytest.importorskip("pyamg.aggregation.smooth")
    S = sp.random(6, 6, density=0.5, format="csr", random_state=0)
    B, BtBinv = np.ones((6, 1)), np.ones((6, 1, 1))
    want = smooth.satisfy_constraints(sp.bsr_array(S, blocksize=(1, 1)), B, BtBinv)
    U = sg.bsr_array(S, blocksize=(1, 1))
    U.backend = "scipy"
    x = random_vector(6, np.float64, 1)
    U @ x  # a mirror holds the arrays
    got = smooth.satisfy_constraints(U, B, BtBinv)
    np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(U @ x, want @ x, rtol=1e-12, atol=1e-14)
    A = _matrix(seed=8, n=30, m=30)
    A @ np.ones(30)
    C = sg.csr_matrix(A.T @ A)
    sg.matvec(C, np.ones(30), backend=backend)
    filtered = smooth.filter_operator(C, A, np.ones((30, 1)), np.ones((30, 1)), np.ones((30, 1, 1)))
    plain = smooth.filter_operator(
        sp.csr_matrix(C), sp.csr_matrix(A), np.ones((30, 1)), np.ones((30, 1)), np.ones((30, 1, 1))
    )
    np.testing.assert_allclose(filtered.toarray(), plain.toarray(), rtol=1e-12)


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("write", list(WRITERS.values()), ids=list(WRITERS))
def test_gpu_product_after_a_compiled_write_is_not_stale(gpu_backend_name, write, cupy):
    A = _matrix(seed=9, n=500, m=400)
    x = random_vector(400, np.float64, 3)
    A.backend = gpu_backend_name
    A @ cupy.asarray(x)  # the GPU copy lives
    data = A.data
    for round_ in range(3):
        write(data, np.linspace(-2.0, 1.0 + round_, A.nnz))
        plain = sp.csr_matrix((A.data.copy(), A.indices.copy(), A.indptr.copy()), shape=A.shape)
        got = (A @ cupy.asarray(x)).get()
        assert_product_close(got, plain @ x, np.float64, 500, f"round {round_}")


@pytest.mark.gpu
def test_gpu_product_after_pyamg_writers_is_not_stale(cupy):
    smooth = pytest.importorskip("pyamg.aggregation.smooth")
    skip_unless_available("cusparse_bsr")
    S = sp.random(60, 60, density=0.2, format="csr", random_state=10)
    B, BtBinv = np.ones((60, 1)), np.ones((60, 1, 1))
    U = sg.bsr_array(S, blocksize=(1, 1))
    U.backend = "cusparse_bsr"
    x = random_vector(60, np.float64, 4)
    U @ cupy.asarray(x)  # the GPU copy lives
    got = smooth.satisfy_constraints(U, B, BtBinv)  # C++ writes np.ravel(U.data)
    want = smooth.satisfy_constraints(sp.bsr_array(S, blocksize=(1, 1)), B, BtBinv)
    np.testing.assert_allclose((got @ cupy.asarray(x)).get(), want @ x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose((U @ cupy.asarray(x)).get(), want @ x, rtol=1e-10, atol=1e-12)


@pytest.mark.gpu
def test_gpu_product_of_a_written_copy_is_not_stale(gpu_backend_name, cupy):
    """PyAMG's filter_operator: ``C = C.copy(); C.data[:] = 1`` on a matrix whose GPU copy
    the copy shares until written."""
    S = sp.random(300, 300, density=0.05, format="csr", random_state=11)
    C = sg.csr_matrix(S)
    C.backend = gpu_backend_name
    x = random_vector(300, np.float64, 5)
    C @ cupy.asarray(x)
    ones = C.copy()
    ones.data[:] = 1
    assert_product_close(
        (ones @ cupy.asarray(x)).get(),
        sp.csr_matrix((np.ones(S.nnz), S.indices, S.indptr), shape=S.shape) @ x,
        np.float64,
        300,
    )
    assert_product_close((C @ cupy.asarray(x)).get(), S @ x, np.float64, 300)


@pytest.mark.parametrize("fmt", ["csr", "bsr"])
def test_an_empty_matrix_read_after_a_product(fmt):
    """An empty BSR matrix's data is (0, R, C): its fingerprint is of no bytes."""
    A = sg.csr_matrix((6, 4)) if fmt == "csr" else sg.bsr_matrix((6, 4), blocksize=(2, 2))
    A @ np.ones(4)
    assert A.data.size == 0
    np.testing.assert_array_equal(A @ np.ones(4), np.zeros(6))
