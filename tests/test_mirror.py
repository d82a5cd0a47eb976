"""The device mirror is made once, validated once, shared, and never stale.

Each way a scipy matrix can change in place (item and diagonal assignment, index sorting,
duplicate summing, pruning, resizing, in-place arithmetic, assigning ``data``/``indices``/
``indptr``/``shape``/dtype, aliases through a transpose) is applied after a product has
built a mirror, then a product is compared with plain scipy's on the same mutated matrix.
On CI the host-copy backend (which copies the arrays as an upload would) stands in for the
GPU; on a GPU machine every GPU backend runs the same tests.
"""

from __future__ import annotations

import copy
import pickle
import threading
import traceback

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.device._mirror import HOST, DeviceMatrix
from sparsegpu.testing import CountingBackend, assert_product_close, random_vector

from .conftest import BACKEND_NAMES, GPU_BACKEND_NAMES, skip_unless_available

COPYING_BACKENDS = ["host-copy"] + GPU_BACKEND_NAMES


@pytest.fixture(params=COPYING_BACKENDS)
def copying_backend(request):
    """Backends whose mirror is a copy (the ones that could go stale)."""
    skip_unless_available(request.param)
    return request.param


def _fresh(seed=0, n=60, m=50, dtype=np.float64):
    S = sp.random(n, m, density=0.15, format="csr", random_state=seed, dtype=dtype)
    return sg.csr_matrix(S)


def _check(A, backend, what):
    """A product of A on the backend equals plain scipy's product of A as it is now."""
    plain = sp.csr_matrix((A.data.copy(), A.indices.copy(), A.indptr.copy()), shape=A.shape)
    x = random_vector(A.shape[1], A.dtype, 42)
    rows = int(np.diff(plain.indptr).max()) if plain.shape[0] else 1
    assert_product_close(sg.matvec(A, x, backend=backend), plain @ x, plain.dtype, rows, what)
    xt = random_vector(A.shape[0], A.dtype, 43)
    assert_product_close(
        sg.matvec(A.T, xt, backend=backend), plain.T @ xt, plain.dtype, A.shape[0], what + " (T)"
    )


def _set_existing(A):
    r, c = A.nonzero()
    A[r[0], c[0]] = 123.0


def _set_new(A):
    A[0, 0] = 0.0 if A[0, 0] else 7.0
    A[A.shape[0] - 1, A.shape[1] - 1] = 5.0


def _setdiag(A):
    A.setdiag(3.0)


def _unsorted_then_sort(A):
    A.indices = A.indices.copy()  # make a row unsorted through the public attribute
    lo, hi = A.indptr[0], A.indptr[1]
    A.indices[lo:hi] = A.indices[lo:hi][::-1].copy()
    A.data[lo:hi] = A.data[lo:hi][::-1].copy()
    A.has_sorted_indices = False
    A.sort_indices()


def _duplicates_then_sum(A):
    A.indices = np.concatenate([A.indices[:1], A.indices[1:]])
    row0 = A.indptr[1] - A.indptr[0]
    if row0 >= 2:
        new_indices = A.indices.copy()
        new_indices[A.indptr[0] + 1] = new_indices[A.indptr[0]]
        A.indices = new_indices
    A.has_canonical_format = False
    A.sum_duplicates()


def _eliminate_zeros(A):
    data = A.data.copy()
    data[::3] = 0
    A.data = data
    A.eliminate_zeros()


def _prune(A):
    A.indptr = A.indptr.copy()
    A.prune()


def _resize(A):
    A.resize(A.shape[0] + 3, A.shape[1] - 2)


def _imul(A):
    A *= 2.5


def _itruediv(A):
    A /= 4.0


def _assign_data(A):
    A.data = A.data * -1.0


def _assign_indices(A):
    A.indices = (A.indices + 1) % A.shape[1]
    A.has_sorted_indices = False


def _assign_indptr(A):
    indptr = A.indptr.copy()
    indptr[1:-1] = indptr[2:]  # row 0 takes row 1's entries, the last row gets none extra
    indptr[-2] = indptr[-1]
    A.indptr = indptr


def _dtype_change(A):
    A.data = (A.data * 2).astype(np.float32)


def _abs_hidden_sum_duplicates(A):
    # abs() calls sum_duplicates() in place on a non-canonical matrix
    A.has_canonical_format = False
    abs(A)


def _max_hidden_sum_duplicates(A):
    A.has_canonical_format = False
    A.max()


def _shape_setter(A):
    A.shape = (A.shape[1], A.shape[0]) if A.shape[0] == A.shape[1] else A.shape


def _alias_through_transpose(A):
    AT = A.T  # shares A's arrays
    AT.data = AT.data  # noqa: PLW0127 - assignment through the alias must drop A's mirror
    AT *= 3.0  # in-place through the alias


MUTATIONS = {
    "setitem_existing": _set_existing,
    "setitem_new": _set_new,
    "setdiag": _setdiag,
    "sort_indices": _unsorted_then_sort,
    "sum_duplicates": _duplicates_then_sum,
    "eliminate_zeros": _eliminate_zeros,
    "prune": _prune,
    "resize": _resize,
    "imul": _imul,
    "itruediv": _itruediv,
    "assign_data": _assign_data,
    "assign_indices": _assign_indices,
    "assign_indptr": _assign_indptr,
    "dtype_change": _dtype_change,
    "abs_sum_duplicates": _abs_hidden_sum_duplicates,
    "max_sum_duplicates": _max_hidden_sum_duplicates,
    "shape_setter": _shape_setter,
    "alias_transpose": _alias_through_transpose,
}


@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_mutation_after_product_is_seen(copying_backend, mutation):
    A = _fresh()
    _check(A, copying_backend, "before")
    MUTATIONS[mutation](A)
    _check(A, copying_backend, f"after {mutation}")


_WRITES = {
    "data[:] = v": lambda A: A.data.__setitem__(slice(None), np.arange(A.nnz) + 1.0),
    "data[0] = v": lambda A: A.data.__setitem__(0, 7.0),
    "data *= 2": lambda A: A.data.__imul__(2),
    "data.fill": lambda A: A.data.fill(3.0),
    "np.multiply(out=data)": lambda A: np.multiply(A.data, 0.5, out=A.data),
    "view of data[2:9]": lambda A: A.data[2:9].__setitem__(slice(None), -1.0),
    "indices[:] = roll": lambda A: A.indices.__setitem__(slice(None), np.roll(A.indices, 1)),
}


@pytest.mark.parametrize("write", list(_WRITES.values()), ids=list(_WRITES))
def test_in_place_write_through_the_attribute_is_seen(copying_backend, write):
    """The idiom of Newton and time-stepping codes (``A.data[:] = new``) just works: the
    write drops the mirror first, and the next product reads the new values."""
    A = _fresh()
    sg.matvec(A, np.ones(A.shape[1]), backend=copying_backend)
    write(A)
    assert A.data.flags.writeable and A.indices.flags.writeable  # the mirror gave them back
    _check(A, copying_backend, "after the in-place write")


def test_mutation_unlocks_arrays(copying_backend):
    A = _fresh()
    sg.matvec(A, np.ones(A.shape[1]), backend=copying_backend)
    A.sort_indices()  # any scipy mutator drops the mirror and gives the arrays back
    A.data[0] = 9.0
    _check(A, copying_backend, "after unlock")


def test_user_arrays_are_given_back_writable(copying_backend):
    S = sp.random(30, 30, density=0.2, format="csr", random_state=1)
    data, indices, indptr = S.data.copy(), S.indices.copy(), S.indptr.copy()
    A = sg.csr_matrix((data, indices, indptr), shape=S.shape)
    sg.matvec(A, np.ones(30), backend=copying_backend)
    A.data = A.data.copy()
    A.indices = A.indices.copy()
    A.indptr = A.indptr.copy()
    assert data.flags.writeable and indices.flags.writeable and indptr.flags.writeable


def test_mirror_made_once_and_reused():
    counting = CountingBackend(name="counting-mirror")
    sg.register_backend(counting, replace=True)
    try:
        A = _fresh()
        x = np.ones(A.shape[1])
        for _ in range(3):
            sg.matvec(A, x, backend="counting-mirror")
        cache = A.__dict__["_sg_mirrors"].cache
        mirrors = [m for k, m in cache.mirrors.items() if k.residence == "host-copy"]
        assert len(mirrors) == 1
        assert len(mirrors[0].plans) == 1  # made once
        assert list(mirrors[0].default_policies) == ["counting-mirror"]
        assert counting.matvecs == 3
    finally:
        sg.unregister_backend("counting-mirror")


def test_threads_share_one_mirror(copying_backend):
    A = _fresh(n=400, m=300)
    x = random_vector(300, np.float64, 5)
    expected = sp.csr_matrix(A) @ x
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(sg.matvec(A, x, backend=copying_backend))
        except Exception:  # reported below with its traceback text
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "\n".join(errors)
    assert len(results) == 160
    for y in results:
        assert_product_close(y, expected, np.float64, 400)
    keys = [k for k in A.__dict__["_sg_mirrors"].shared if k != "sharers" and k[1] == "stored"]
    assert len(keys) == 1


@pytest.mark.parametrize("dump", ["pickle", "deepcopy", "copy"])
def test_pickle_and_copy_drop_the_mirror(copying_backend, dump):
    A = _fresh()
    A.backend = "scipy"
    sg.matvec(A, np.ones(A.shape[1]), backend=copying_backend)
    if dump == "pickle":
        B = pickle.loads(pickle.dumps(A))
    elif dump == "deepcopy":
        B = copy.deepcopy(A)
    else:
        B = A.copy()
    assert type(B) is sg.csr_matrix
    assert B.backend == "scipy"
    assert getattr(B.__dict__.get("_sg_mirrors"), "cache", None) is None
    B.data = B.data.copy()
    B.data[0] = 5.0
    _check(B, copying_backend, dump)


# ------------------------------------------------------------------- validation
def _bad(kind):
    data = np.array([1.0, 2.0, 3.0, 4.0])
    indices = np.array([0, 2, 1, 3], dtype=np.int32)
    indptr = np.array([0, 2, 3, 4], dtype=np.int32)
    if kind == "index_too_large":
        indices[2] = 9
    elif kind == "negative_index":
        indices[3] = -1
    elif kind == "indptr_decreasing":
        indptr[1:3] = [3, 2]
    A = sg.csr_matrix((3, 4))
    A.data, A.indices, A.indptr = data, indices, indptr
    return A


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("index_too_large", r"indices\[2\] = 9 \(row 1\).*4 columns"),
        ("negative_index", r"indices\[3\] = -1"),
        ("indptr_decreasing", r"indptr\[2\] = 2 < indptr\[1\] = 3"),
    ],
)
@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_invalid_arrays_are_refused_before_any_product(backend, kind, message):
    skip_unless_available(backend)
    A = _bad(kind)
    with pytest.raises(ValueError, match=message):
        sg.matvec(A, np.ones(4), backend=backend)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_wrong_lengths_are_refused(backend):
    skip_unless_available(backend)
    A = sg.csr_matrix((3, 4))
    A.indptr = np.array([0, 1, 2], dtype=np.int32)  # needs 4 entries
    with pytest.raises(ValueError, match="indptr has length 3, expected n_rows \\+ 1 = 4"):
        sg.matvec(A, np.ones(4), backend=backend)
    A = sg.csr_matrix((3, 4))
    A.indptr = np.array([0, 1, 2, 3], dtype=np.int32)
    A.indices = np.array([0, 1, 2], dtype=np.int32)
    A.data = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="indptr\\[-1\\] = 3 but indices has 3 and data has 2"):
        sg.matvec(A, np.ones(4), backend=backend)
    A = sg.csr_matrix((3, 4))
    A.indptr = np.array([1, 1, 2, 3], dtype=np.int32)
    A.indices = np.array([0, 1, 2], dtype=np.int32)
    A.data = np.array([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="indptr\\[0\\] is 1, expected 0"):
        sg.matvec(A, np.ones(4), backend=backend)


def test_fixing_invalid_arrays_makes_the_matrix_usable(copying_backend):
    A = _bad("index_too_large")
    with pytest.raises(ValueError):
        sg.matvec(A, np.ones(4), backend=copying_backend)
    indices = A.indices.copy()
    indices[2] = 1
    A.indices = indices
    _check(A, copying_backend, "after fixing")


def test_a_collected_holder_never_waits_for_the_mirror_lock():
    """The GC runs weakref callbacks in any thread; one that waited for the mirror lock
    could deadlock against a thread holding it. The release is queued instead."""
    import gc

    from sparsegpu.device import _host_buffers

    A = _fresh(seed=9)
    sg.matvec(A, np.ones(A.shape[1]), backend="host-copy")
    root = _host_buffers.root_id(A.__dict__["data"])  # the buffer the mirror holds
    assert _host_buffers.is_held({root})
    held, release = threading.Event(), threading.Event()

    def hold_the_lock():
        with _host_buffers.MIRROR_LOCK:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert held.wait(30)
    try:
        del A
        gc.collect()  # runs the callback here, while the other thread holds the lock
        assert _host_buffers.is_held({root})  # queued, not yet applied
    finally:
        release.set()
        holder.join()
    sg.matvec(_fresh(seed=10), np.ones(50), backend="host-copy")  # applies the queue
    assert not _host_buffers.is_held({root})


def _alias_earlier_view(A):
    view = A.data[:]
    return lambda: view.__setitem__(slice(None), 99.0)


def _alias_sibling_view(A):
    big = np.concatenate([A.data, A.data])
    A.data = big[: A.nnz]
    sibling = big[: A.nnz]
    return lambda: sibling.__setitem__(slice(None), 99.0)


def _alias_bytearray(A):
    raw = bytearray(A.data.tobytes())
    A.data = np.frombuffer(raw, dtype=A.data.dtype)
    return lambda: raw.__setitem__(slice(0, 8), np.float64(99).tobytes())


def _alias_memoryview(A):
    memory = np.asarray(memoryview(A.data))
    return lambda: memory.__setitem__(slice(None), 99.0)


def _alias_passed_in(A):
    data = A.data.copy()
    A.data = data  # the caller keeps its own reference
    return lambda: data.__setitem__(slice(None), 99.0)


@pytest.mark.parametrize(
    "alias",
    [
        _alias_earlier_view,
        _alias_sibling_view,
        _alias_bytearray,
        _alias_memoryview,
        _alias_passed_in,
    ],
    ids=["earlier view", "sibling view", "frombuffer(bytearray)", "memoryview", "kept array"],
)
def test_writes_through_earlier_aliases_never_make_a_product_stale(copying_backend, alias):
    """Copy-on-upload: an alias taken before the first product writes the old buffer, not
    what the GPU holds, so host arrays and products agree (the documented contract)."""
    A = _fresh()
    write = alias(A)
    sg.matvec(A, np.ones(A.shape[1]), backend=copying_backend)
    write()
    _check(A, copying_backend, "after a write through an earlier alias")


def test_a_derived_format_waits_only_where_its_making_queued_work(monkeypatch):
    """``derived`` settles after making a format that left device work behind (the
    default), not after one that did not (a descriptor, a value read back)."""
    S = sp.random(20, 20, density=0.2, random_state=1, format="csr")
    m = DeviceMatrix.from_host(S.data, S.indices, S.indptr, S.shape, HOST)
    settled = []
    monkeypatch.setattr(m, "settle", lambda: settled.append(True))
    assert m.derived("queued", lambda: 1) == 1 and settled == [True]
    assert m.derived("read back", lambda: 2, queues=False) == 2 and settled == [True]
    assert m.derived("queued", lambda: pytest.fail("made twice")) == 1


def test_values_rewritten_in_place_keep_only_the_plans_that_read_them(copying_backend):
    """Multigrid's re-set-up writes new values into the matrices it made itself
    (``rewrite_device_values``): products and host reads see the new values, the plans
    bound to the values array stay, everything made from the old values is made again,
    and a matrix whose arrays something else may read is refused (the caller makes a
    new one)."""
    from sparsegpu.classes._mirrors import rewrite_device_values

    S = sp.random(70, 70, density=0.1, format="csr", random_state=3) + sp.eye(70)
    A = sg.csr_matrix(S.tocsr())
    A.backend = "host-copy" if copying_backend == "host-copy" else None
    C = A @ A  # a result kept where it was computed, its host arrays not made
    if "_sg_pending" not in C.__dict__:
        pytest.skip(f"products of {A.backend or 'the GPU'} are not kept off the host")
    stored = C.__dict__["_sg_pending"].device
    x, xt = random_vector(70, C.dtype, 42), random_vector(70, C.dtype, 43)
    old = (S @ S).tocsr()
    assert_product_close(sg.matvec(C, x, backend=copying_backend), old @ x, old.dtype, 70, "")
    sg.matvec(C.T, xt, backend=copying_backend)  # a transposed mirror, made from old values
    plans = dict(stored.plans)
    new = stored.data * 2 + 1
    assert not rewrite_device_values(C, new[:-1])  # another length: refused, nothing changed
    assert not rewrite_device_values(C, new.astype(np.float32))
    assert rewrite_device_values(C, new)
    assert C.__dict__["_sg_pending"].device is stored and "_sg_pending" in C.__dict__
    kept = {k: p for k, p in plans.items() if p.values_by_reference}
    assert {k: stored.plans.get(k) for k in kept} == kept  # the same plan objects
    assert all(k in kept for k in stored.plans)  # the others were dropped
    expected = old.copy()
    expected.data = expected.data * 2 + 1
    what = "after the rewrite"
    y = sg.matvec(C, x, backend=copying_backend)
    assert_product_close(y, expected @ x, old.dtype, 70, what)
    yt = sg.matvec(C.T, xt, backend=copying_backend)
    assert_product_close(yt, expected.T @ xt, old.dtype, 70, what + " (T)")
    np.testing.assert_allclose(C.toarray(), expected.toarray(), rtol=1e-12)
    # its host arrays now exist (and may be held by the caller): never written behind them
    assert not rewrite_device_values(C, new * 3)
    np.testing.assert_allclose(C.toarray(), expected.toarray(), rtol=1e-12)


def test_a_matrix_sharing_its_arrays_with_a_view_is_not_rewritten(copying_backend):
    from sparsegpu.classes._mirrors import rewrite_device_values

    S = sp.random(50, 50, density=0.1, format="csr", random_state=4) + sp.eye(50)
    A = sg.csr_matrix(S.tocsr())
    A.backend = "host-copy" if copying_backend == "host-copy" else None
    C = A @ A
    if "_sg_pending" not in C.__dict__:
        pytest.skip(f"products of {A.backend or 'the GPU'} are not kept off the host")
    view = C.T  # shares C's arrays
    stored = C.__dict__["_sg_pending"].device
    if rewrite_device_values(C, stored.data * 5):
        pytest.fail("a matrix whose arrays a live view shares was rewritten")
    expected = (S @ S).tocsr().T
    np.testing.assert_allclose(view.toarray(), expected.toarray(), rtol=1e-12)
