"""Memory safety and never-stale answers: every ``out=``, every plan operand, every
write path a careless user takes (issue: memory-safe and never stale).

Plans are called directly (as ``sparsegpu.linalg`` does) with operands that are too
short, of the wrong dtype, not contiguous or overlapping: each is a ValueError before a
pointer reaches a kernel. ``sg.matvec(..., out=)`` follows numpy's ``out=`` rules.
"""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.testing import assert_product_close

from .conftest import BACKEND_NAMES, skip_unless_available


@pytest.fixture(params=BACKEND_NAMES)
def any_backend(request):
    skip_unless_available(request.param)
    return request.param


def _matrix(n=40, m=30, seed=0, dtype=np.float64):
    return sg.csr_matrix(sp.random(n, m, density=0.2, format="csr", random_state=seed, dtype=dtype))


def _plan_and_module(A, backend):
    plan = sg.engine._planning.plan_for(A, A.dtype, backend=backend)
    return plan, plan.matrix.xp


@pytest.mark.parametrize(
    "case",
    [
        "short x",
        "long x",
        "x dtype",
        "x strided",
        "x 2-D for matvec",
        "short out",
        "out dtype",
        "out strided",
        "out is x",
    ],
)
def test_plan_matvec_refuses_bad_operands(any_backend, case):
    A = _matrix(40, 40)
    plan, xp = _plan_and_module(A, any_backend)
    if xp is np and case in ("x dtype", "x strided", "x 2-D for matvec", "out strided", "out is x"):
        pytest.skip("the scipy plan takes any numpy x and copies into out (no raw pointers)")
    x = xp.ones(40)
    out = None
    if case == "short x":
        x = xp.ones(39)
    elif case == "long x":
        x = xp.ones(41)
    elif case == "x dtype":
        x = xp.ones(40, dtype=np.float32)
    elif case == "x strided":
        x = xp.ones(80)[::2]
    elif case == "x 2-D for matvec":
        x = xp.ones((40, 2))
    elif case == "short out":
        out = xp.empty(39)
    elif case == "out dtype":
        out = xp.empty(40, dtype=np.int32)
    elif case == "out strided":
        out = xp.empty(80)[::2]
    elif case == "out is x":
        out = x
    with pytest.raises((ValueError, TypeError)):
        plan.matvec(x, out=out)


@pytest.mark.parametrize("out_shape", [(1, 20), (40, 2), (39, 3), (40,)])
def test_plan_matmat_refuses_a_short_out(any_backend, out_shape):
    A = _matrix(40, 30)
    plan, xp = _plan_and_module(A, any_backend)
    with pytest.raises(ValueError, match="shape"):
        plan.matmat(xp.ones((30, 3)), out=xp.empty(out_shape))


@pytest.mark.parametrize("k", [1, 3, 20])
@pytest.mark.parametrize("out_shape", [(1, 20), (39, "k"), ("n", 1)])
def test_matvec_out_of_the_wrong_shape_is_refused(any_backend, k, out_shape, xp):
    if xp.__name__ == "cupy":
        skip_unless_available(any_backend)
    A = _matrix(40, 30)
    shape = tuple(k if s == "k" else 40 if s == "n" else s for s in out_shape)
    if shape == (40, k):
        pytest.skip("the right shape")
    out = xp.zeros(shape)
    canary = xp.zeros(100)
    with pytest.raises(ValueError, match="shape"):
        sg.matvec(A, xp.ones((30, k)), backend=any_backend, out=out)
    assert float(abs(canary).sum()) == 0.0 and float(abs(out).sum()) == 0.0


def test_matvec_out_never_truncates_floats_into_ints(any_backend, xp):
    A = _matrix(40, 30)
    with pytest.raises(TypeError, match="same_kind"):
        sg.matvec(A, xp.ones(30), backend=any_backend, out=xp.zeros(40, dtype=np.int64))


def test_matvec_out_of_a_wider_dtype_is_filled(any_backend, xp):
    A = _matrix(40, 30, dtype=np.float32)
    out = xp.zeros(40, dtype=np.complex128)
    got = sg.matvec(A, xp.ones(30, dtype=np.float32), backend=any_backend, out=out)
    assert got is out
    want = sp.csr_matrix(A) @ np.ones(30, dtype=np.float32)
    assert np.allclose(out.get() if hasattr(out, "get") else out, want, rtol=1e-5)


@pytest.mark.parametrize("k", [None, 2, 17])
def test_matvec_out_aliasing_x_gives_the_right_answer(any_backend, xp, k):
    A = _matrix(40, 40, seed=3)
    rng = np.random.default_rng(0)
    host = rng.standard_normal(40 if k is None else (40, k))
    want = sp.csr_matrix(A) @ host
    x = xp.asarray(host)
    got = sg.matvec(A, x, backend=any_backend, out=x)
    assert got is x
    assert_product_close(got.get() if hasattr(got, "get") else got, want, np.float64, 40)


def test_assignment_racing_a_first_product_is_never_stale_for_good(any_backend):
    """A.data assigned while other threads make A's first product: once the threads are
    done, every product sees the new data (the choice made meanwhile was dropped)."""
    for seed in range(20):
        A = _matrix(300, 300, seed=seed)
        x = np.ones(300)
        new = np.arange(A.nnz, dtype=np.float64)
        start = threading.Barrier(5)

        def product(A=A, x=x, start=start):
            start.wait()
            try:
                sg.matvec(A, x, backend=any_backend)
            except ValueError:
                pass  # a product racing with the assignment may see an inconsistent pair

        threads = [threading.Thread(target=product) for _ in range(4)]
        for t in threads:
            t.start()
        start.wait()
        A.data = new
        for t in threads:
            t.join()
        want = sp.csr_matrix((new, A.indices, A.indptr), shape=A.shape) @ x
        assert_product_close(sg.matvec(A, x, backend=any_backend), want, np.float64, 300)


def test_a_read_only_user_array_stays_read_only(any_backend):
    S = sp.random(30, 30, density=0.2, format="csr", random_state=1)
    data = S.data.copy()
    data.flags.writeable = False
    A = sg.csr_matrix((data, S.indices.copy(), S.indptr.copy()), shape=S.shape)
    sg.matvec(A, np.ones(30), backend=any_backend)
    A.data = np.ones(A.nnz)  # the mirror goes
    assert not data.flags.writeable


_CHANGES = {
    "prune": lambda A: A.prune(),
    "data = data[:nnz]": lambda A: setattr(A, "data", A.data[: A.nnz]),
    "indices = indices[:nnz]": lambda A: setattr(A, "indices", A.indices[: A.nnz]),
}


@pytest.mark.parametrize("change", list(_CHANGES.values()), ids=list(_CHANGES))
def test_arrays_are_writable_again_once_the_mirror_is_gone(any_backend, change):
    A = _matrix()
    sg.matvec(A, np.ones(A.shape[1]), backend=any_backend)
    change(A)
    A.sort_indices()  # scipy writes in place: raised "WRITEBACKIFCOPY base is read-only"
    assert A.data.flags.writeable and A.indices.flags.writeable


def test_index_written_out_of_range_after_a_product_is_a_value_error(any_backend):
    A = _matrix()
    sg.matvec(A, np.ones(A.shape[1]), backend=any_backend)
    A.indices[0] = 10**9  # crashed the process in scipy's kernel on the host path
    with pytest.raises(ValueError, match="column index out of range"):
        sg.matvec(A, np.ones(A.shape[1]), backend=any_backend)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_in_place_index_edit_after_a_product_is_seen(any_backend, index_dtype):
    """int64 indices with small values: scipy's constructor would keep an int32 copy."""
    S = sp.random(30, 30, density=0.2, format="csr", random_state=2)
    A = sg.csr_matrix(
        (S.data.copy(), S.indices.astype(index_dtype), S.indptr.astype(index_dtype)),
        shape=S.shape,
    )
    x = np.arange(30.0)
    sg.matvec(A, x, backend=any_backend)
    A.indices[:] = (A.indices + 1) % 30
    want = sp.csr_matrix((np.asarray(A.data), np.asarray(A.indices), A.indptr), shape=A.shape)
    assert_product_close(sg.matvec(A, x, backend=any_backend), want @ x, np.float64, 30)


@pytest.mark.parametrize("order", [">", "<"])
def test_non_native_byte_order_computes(any_backend, order):
    S = sp.random(30, 30, density=0.2, format="csr", random_state=4)
    A = sg.csr_matrix((S.data.astype(order + "f8"), S.indices, S.indptr), shape=S.shape)
    assert_product_close(
        sg.matvec(A, np.ones(30), backend=any_backend), S @ np.ones(30), np.float64, 30
    )


def test_two_dimensional_data_is_named():
    S = sp.random(10, 10, density=0.3, format="csr", random_state=5)
    A = sg.csr_matrix(S)
    A.__dict__["data"] = A.data.reshape(-1, 1)  # what a hand-made matrix can hold
    with pytest.raises(ValueError, match="data must be 1-D"):
        A @ np.ones(10)


def test_host_out_of_memory_is_reported_as_host_memory(monkeypatch):
    A = _matrix()

    def out_of_memory(self, x, out=None):
        raise MemoryError("Unable to allocate 1.0 TiB")

    from sparsegpu.backends.scipy_reference import ScipyPlan

    monkeypatch.setattr(ScipyPlan, "matvec", out_of_memory)
    with pytest.raises(MemoryError, match="host memory") as info:
        sg.matvec(A, np.ones(A.shape[1]), backend="scipy")
    assert "GPU" not in str(info.value)


def test_write_through_arrays_behave_as_plain_arrays(any_backend):
    A = _matrix()
    plain = np.array(A.data)
    sg.matvec(A, np.ones(A.shape[1]), backend=any_backend)
    assert type(A.data * 2) is np.ndarray
    assert repr(A.data[:2]) == repr(plain[:2])
    assert type(pickle.loads(pickle.dumps(A.data))) is np.ndarray
    assert np.array_equal(pickle.loads(pickle.dumps(A)).data, plain)
