"""Result vectors and blocks taken back by a plan (sparsegpu.device._result_buffers).

On the CPU against a stand-in CuPy whose arrays have CuPy's shape (array -> pointer ->
memory); on the GPU through ``A @ x`` and ``A @ X`` with real CuPy arrays, where every
result a caller still reaches must keep its values.
"""

from __future__ import annotations

import types
import weakref

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.device import _result_buffers as rb


class _Memory:
    pass


class _Pointer:
    def __init__(self, mem):
        self.mem = mem

    def __add__(self, offset):  # a pointer into the same memory
        return _Pointer(self.mem)


class _Array:
    def __init__(self, shape, dtype, memptr=None, order="C"):
        self.shape, self.dtype, self.order = shape, dtype, order
        self.data = memptr if memptr is not None else _Pointer(_Memory())

    def view(self):
        return _Array(self.shape, self.dtype, self.data, self.order)


@pytest.fixture
def fake_cupy():
    """A CuPy of :class:`_Array` with a switchable current stream; counts allocations."""
    stream = types.SimpleNamespace(ptr=1)

    def ndarray(shape, dtype, order="C"):
        module.allocations += 1
        return _Array(shape, dtype, order=order)

    module = types.SimpleNamespace(
        ndarray=ndarray, cuda=types.SimpleNamespace(get_current_stream=lambda: stream)
    )
    module.stream, module.allocations = stream, 0
    return module


def _buffers(cupy):
    return rb.ResultBuffers(cupy, (4,), np.dtype(np.float64))


def test_a_dropped_result_is_taken_back(fake_cupy):
    buffers = _buffers(fake_cupy)
    first_id = id(buffers.take())  # dropped at once, as ``A @ x`` in a timing loop
    assert id(buffers.take()) == first_id
    assert fake_cupy.allocations == 1


def test_a_held_result_is_never_handed_out_again(fake_cupy):
    buffers = _buffers(fake_cupy)
    held = [buffers.take() for _ in range(5)]
    assert len({id(y) for y in held}) == 5


@pytest.mark.parametrize(
    "keep",
    [
        pytest.param(lambda y: y.view(), id="a view (shares the pointer)"),
        pytest.param(lambda y: y.data, id="the memory pointer"),
        pytest.param(lambda y: y.data + 8, id="a pointer into it"),
        pytest.param(lambda y: y.data.mem, id="the memory"),
        pytest.param(lambda y: _Array((2,), y.dtype, y.data + 16), id="a memptr array"),
    ],
)
def test_a_result_whose_memory_is_still_reachable_is_not_taken_back(fake_cupy, keep):
    buffers = _buffers(fake_cupy)
    kept = keep(buffers.take())
    second = buffers.take()
    assert fake_cupy.allocations == 2
    del kept, second
    buffers.take()  # once let go, both are free again
    assert fake_cupy.allocations == 2


def test_a_loop_that_holds_the_previous_result_alternates_two_buffers(fake_cupy):
    buffers = _buffers(fake_cupy)
    q = None
    for _ in range(10):
        q = buffers.take()  # the previous q is still held while the next one is taken
    assert q is not None and fake_cupy.allocations == rb.SLOTS


def test_another_stream_gets_a_new_buffer_and_the_old_ones_are_released(fake_cupy):
    buffers = _buffers(fake_cupy)
    first = weakref.ref(buffers.take())
    fake_cupy.stream.ptr = 2
    buffers.take()
    assert fake_cupy.allocations == 2
    assert first() is None  # the first stream's buffer was let go, not kept for later
    buffers.take()
    assert fake_cupy.allocations == 2  # the second stream's came back


def test_only_small_device_results_are_kept():
    assert rb.ResultBuffers.wanted(True, rb.MAX_BYTES) == rb.ENABLED
    assert not rb.ResultBuffers.wanted(True, rb.MAX_BYTES + 1)
    assert not rb.ResultBuffers.wanted(True, 0)
    assert not rb.ResultBuffers.wanted(False, 8)


@pytest.mark.parametrize("over", [0, 1], ids=["a fraction of the matrix", "past it"])
def test_results_up_to_a_fraction_of_the_matrix_are_kept(over):
    matrix_nbytes = 64 * rb.MAX_BYTES
    nbytes = matrix_nbytes // rb.MATRIX_FRACTION + over
    assert rb.ResultBuffers.wanted(True, nbytes, matrix_nbytes) == (rb.ENABLED and not over)
    assert not rb.ResultBuffers.wanted(False, nbytes, matrix_nbytes)


# A @ X's blocks: a ResultBuffers per (k, order), the latest SHAPES of them.


def _blocks(cupy, n_rows=4):
    return rb.BlockResults(cupy, n_rows, np.dtype(np.float64))


@pytest.mark.parametrize("fortran", [False, True], ids=["C", "F"])
def test_a_dropped_block_is_taken_back_in_its_order(fake_cupy, fortran):
    blocks = _blocks(fake_cupy)
    first = blocks.take(3, fortran)
    first_id = id(first)
    assert (first.shape, first.order) == ((4, 3), "F" if fortran else "C")
    del first
    assert id(blocks.take(3, fortran)) == first_id
    assert fake_cupy.allocations == 1


def test_a_held_block_is_never_handed_out_again(fake_cupy):
    blocks = _blocks(fake_cupy)
    held = [blocks.take(3, False) for _ in range(5)]
    assert len({id(Y) for Y in held}) == 5


def test_each_k_and_order_has_blocks_of_its_own(fake_cupy):
    blocks = _blocks(fake_cupy)
    shapes = [(3, False), (3, True), (5, False)]
    taken = {shape: id(blocks.take(*shape)) for shape in shapes}  # each dropped at once
    assert fake_cupy.allocations == 3
    for shape in shapes:
        Y = blocks.take(*shape)
        assert id(Y) == taken[shape] and Y.shape == (4, shape[0])
    assert fake_cupy.allocations == 3


@pytest.mark.parametrize(
    "keep",
    [
        pytest.param(lambda Y: Y.view(), id="a view (a column, the transpose)"),
        pytest.param(lambda Y: Y.data, id="the memory pointer"),
        pytest.param(lambda Y: Y.data + 8, id="a pointer into it"),
        pytest.param(lambda Y: _Array((2, 3), Y.dtype, Y.data + 16), id="a memptr array"),
    ],
)
def test_a_block_whose_memory_is_still_reachable_is_not_taken_back(fake_cupy, keep):
    blocks = _blocks(fake_cupy)
    kept = keep(blocks.take(3, True))
    second = blocks.take(3, True)
    assert fake_cupy.allocations == 2
    del kept, second
    blocks.take(3, True)
    assert fake_cupy.allocations == 2


def test_a_large_block_is_new_every_time_and_never_kept(fake_cupy):
    k = 3
    n_rows = rb.MAX_BYTES // (8 * k) + 1  # one row past MAX_BYTES
    blocks = _blocks(fake_cupy, n_rows)
    first = blocks.take(k, False)
    gone = weakref.ref(first)
    del first
    assert gone() is None  # nothing but the caller held it
    blocks.take(k, False)
    assert fake_cupy.allocations == 2


def test_a_block_of_a_fraction_of_a_large_matrix_is_kept(fake_cupy):
    k = 3
    n_rows = rb.MAX_BYTES // (8 * k) + 1  # past MAX_BYTES, within a large matrix's share
    blocks = rb.BlockResults(fake_cupy, n_rows, np.dtype(np.float64), 64 * rb.MAX_BYTES)
    first = id(blocks.take(k, False))
    assert id(blocks.take(k, False)) == first  # the dropped block came back
    assert fake_cupy.allocations == 1


def test_only_the_latest_shapes_keep_their_blocks(fake_cupy):
    blocks = _blocks(fake_cupy)
    oldest = weakref.ref(blocks.take(1, False))
    for k in range(2, rb.SHAPES + 2):  # SHAPES newer shapes
        blocks.take(k, False)
    assert oldest() is None  # its buffers were let go with its shape
    blocks.take(1, False)
    assert fake_cupy.allocations == rb.SHAPES + 2
    blocks.take(rb.SHAPES + 1, False)  # the newest shape's buffer is still there
    assert fake_cupy.allocations == rb.SHAPES + 2


# On the GPU: real CuPy arrays through ``A @ x`` and ``A @ X``.


def _small(dtype=np.float64):
    S = sp.random(300, 200, density=0.05, format="csr", random_state=3, dtype=dtype)
    return S, sg.csr_matrix(S)


def _x(cupy, seed, n=200, dtype=np.float64):
    return cupy.asarray(np.random.default_rng(seed).uniform(-1, 1, n).astype(dtype))


def test_a_dropped_product_is_reused_on_the_gpu(cupy, gpu_backend_name):
    S, A = _small()
    A.backend = gpu_backend_name
    x = _x(cupy, 0)
    if not rb.ENABLED:
        pytest.skip("result buffers are off on a free-threaded interpreter")
    # the second product plans (a named cusparse measures its algorithms) and may keep
    # another plan than the first, with buffers of its own: reuse is asked of the plan kept
    A @ x
    A @ x
    pointer = (A @ x).data.ptr
    y = A @ x  # the last result was dropped: its buffer comes back
    assert y.data.ptr == pointer
    np.testing.assert_allclose(cupy.asnumpy(y), S @ cupy.asnumpy(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "keep",
    [
        pytest.param(lambda cupy, y: y, id="the array"),
        pytest.param(lambda cupy, y: y[1:], id="a view"),
        pytest.param(
            lambda cupy, y: cupy.ndarray((y.size - 2,), y.dtype, memptr=y.data + 2 * y.itemsize),
            id="a memptr array",
        ),
        pytest.param(lambda cupy, y: cupy.from_dlpack(y), id="a DLPack import"),
    ],
)
def test_products_never_overwrite_a_result_still_reachable(cupy, gpu_backend_name, keep):
    S, A = _small()
    A.backend = gpu_backend_name
    x1, x2 = _x(cupy, 1), _x(cupy, 2)
    y1 = A @ x1
    expected = cupy.asnumpy(y1)
    kept = keep(cupy, y1)
    offset = y1.size - kept.size
    del y1
    for _ in range(2 * rb.SLOTS):  # every slot is offered while kept holds its buffer
        A @ x2
    np.testing.assert_array_equal(cupy.asnumpy(kept), expected[offset:])


def test_a_result_reused_on_another_stream_is_not_the_first_streams(cupy):
    S, A = _small()
    A.backend = "vector"
    x = _x(cupy, 4)
    cupy.cuda.Device().synchronize()  # x is ready before streams that do not wait for it
    first = cupy.cuda.Stream(non_blocking=True)
    second = cupy.cuda.Stream(non_blocking=True)
    with first:
        pointer = (A @ x).data.ptr
    with second:
        y = A @ x
        assert y.data.ptr != pointer
        np.testing.assert_allclose(cupy.asnumpy(y), S @ cupy.asnumpy(x), rtol=1e-12)


def _X(cupy, seed, k, order, n=200):
    X = np.random.default_rng(seed).uniform(-1, 1, (n, k))
    return cupy.asarray(X, order=order)


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_dropped_block_product_is_reused_on_the_gpu(cupy, gpu_backend_name, order):
    S, A = _small()
    A.backend = gpu_backend_name
    if not rb.ENABLED:
        pytest.skip("result buffers are off on a free-threaded interpreter")
    Xs = [_X(cupy, seed, 6, order) for seed in range(3)]
    A @ Xs[0]  # the estimate, then the plan kept (see the vector test above)
    A @ Xs[0]
    pointer = (A @ Xs[1]).data.ptr
    Y = A @ Xs[2]  # the last result was dropped: its buffer comes back, with X2's product
    assert Y.data.ptr == pointer
    assert Y.flags.f_contiguous if order == "F" else Y.flags.c_contiguous
    np.testing.assert_allclose(cupy.asnumpy(Y), S @ cupy.asnumpy(Xs[2]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize(
    "keep",
    [
        pytest.param(lambda cupy, Y: Y, id="the array"),
        pytest.param(lambda cupy, Y: Y[:, 1], id="a column"),
        pytest.param(lambda cupy, Y: Y.T, id="the transpose"),
        pytest.param(
            lambda cupy, Y: cupy.ndarray((Y.size - 2,), Y.dtype, memptr=Y.data + 2 * Y.itemsize),
            id="a memptr array",
        ),
        pytest.param(lambda cupy, Y: cupy.from_dlpack(Y), id="a DLPack import"),
    ],
)
def test_block_products_never_overwrite_a_result_still_reachable(
    cupy, gpu_backend_name, keep, order
):
    S, A = _small()
    A.backend = gpu_backend_name
    Y1 = A @ _X(cupy, 1, 6, order)
    kept = keep(cupy, Y1)
    expected = cupy.asnumpy(kept).copy()
    del Y1
    X2 = _X(cupy, 2, 6, order)
    for _ in range(2 * rb.SLOTS):  # every slot is offered while kept holds its buffer
        A @ X2
    np.testing.assert_array_equal(cupy.asnumpy(kept), expected)
