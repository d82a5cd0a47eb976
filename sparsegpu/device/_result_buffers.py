"""Result vectors and blocks a plan takes back once their caller has let go of them.

On a small matrix ``A @ x`` is bound by host time, and allocating y from CuPy's pool is a
fifth of it (1.4-1.9 us of the 7-10 us a call costs on the H200's host;
``docs/benchmarks/results/per_call_twelfth_h200.json``). A plan keeps the last :data:`SLOTS` result
vectors it handed out, when they are small (:data:`MAX_BYTES`, or up to a
:data:`MATRIX_FRACTION` of the matrix's own bytes), and a product without
``out=`` takes one back instead of allocating when

- nothing but the plan refers to the array, to its memory pointer or to its memory: the
  caller dropped it, and no view, ``memptr=`` array, pointer offset, DLPack capsule or
  ``__cuda_array_interface__`` consumer (they all keep a reference) holds its bytes; and
- the current stream is the one it was made on.

That is exactly when CuPy's pool would hand those bytes to the next allocation on that
stream without waiting, so a taken-back vector is as safe as a fresh one; its old
contents are overwritten like a fresh vector's garbage. Two slots, because in a loop
``q = A @ p`` the caller still holds the previous ``q`` while the next product runs.

The reference counts a free vector has are measured at import on an object of the same
shape (array -> pointer -> memory), by the same code, so the test does not depend on how
an interpreter counts borrowed references. Any reference the test does not expect only
makes it allocate. Off on a free-threaded interpreter, whose counts are not exact.

``A @ X`` keeps its results the same way, per (k, memory order) of X
(:class:`BlockResults`): a small block product is as host-bound as a vector's, and its
allocation as large a part of it.
"""

from __future__ import annotations

import functools
import sys
import threading

# Results up to this size are taken back, and larger ones up to 1 / MATRIX_FRACTION of the
# matrix's bytes (each plan holds at most SLOTS of them, so at most a quarter of the
# matrix). Allocating a result of several MB from CuPy's pool cost 3-12 us of host time a
# call on the H100's host (class_path_h100.json: 2-22 MB results), which a product pays in
# full where the GPU waits for the call: the first product after a synchronization (a
# solver's iteration after its dot product) and products shorter than the host's time.
MAX_BYTES = 1 << 20
MATRIX_FRACTION = 8
SLOTS = 2
# (k, memory order) shapes of A @ X results each plan keeps buffers for, the most recent
# ones: a block method's loop uses one or two; more would hold memory for shapes gone by.
SHAPES = 4


def _free_or_counts(slots, free):
    """The first array of ``slots`` that only ``slots`` refers to (given ``free``, the
    counts of such an array), or None; with ``free`` None, the counts of ``slots[0]``."""
    getrefcount = sys.getrefcount
    for y in slots:
        data = y.data
        counts = (getrefcount(y), getrefcount(data), getrefcount(data.mem))
        if free is None:
            return counts
        if counts == free:
            return y
    return None


class _Shape:
    """An object shaped like a CuPy array for :func:`_free_or_counts` to measure: array ->
    pointer (``.data``) -> memory (``.mem``), each held only by the one above it."""

    __slots__ = ("data", "mem")


def _measured_free_counts() -> tuple:
    array, pointer, memory = _Shape(), _Shape(), _Shape()
    pointer.mem = memory
    array.data = pointer
    slots = [array]
    del array, pointer, memory
    return _free_or_counts(slots, None)


FREE_COUNTS = _measured_free_counts()
ENABLED = getattr(sys, "_is_gil_enabled", lambda: True)()


class ResultBuffers:
    """The small result vectors of one plan, taken back when their caller has dropped them.

    Parameters
    ----------
    cupy : module
        CuPy (for the current stream and the allocation).
    shape : tuple
        The result's shape.
    dtype : numpy.dtype
        The result's dtype.
    order : {"C", "F"}
        The result's memory order (a 2-D result's).
    """

    def __init__(self, cupy, shape, dtype, order="C"):
        self._allocate = functools.partial(cupy.ndarray, shape, dtype, order=order)
        self._current_stream = cupy.cuda.get_current_stream
        self._slots: list = []
        self._stream = None
        self._lock = threading.Lock()

    @staticmethod
    def wanted(on_device: bool, nbytes: int, matrix_nbytes: int = 0) -> bool:
        """True when a plan with results of ``nbytes`` (of a matrix of ``matrix_nbytes``)
        should keep them (see the module)."""
        limit = max(MAX_BYTES, matrix_nbytes // MATRIX_FRACTION)
        return on_device and ENABLED and 0 < nbytes <= limit

    def take(self):
        """A result vector: one the caller has let go of on this stream, or a new one."""
        stream = self._current_stream().ptr
        slots = self._slots
        if stream == self._stream:
            y = _free_or_counts(slots, FREE_COUNTS)
            if y is not None:
                return y
        y = self._allocate()
        with self._lock:  # two threads may both allocate; the slots stay a list of SLOTS
            if stream != self._stream:
                self._slots = slots = []
                self._stream = stream
            slots.append(y)
            if len(slots) > SLOTS:
                del slots[0]
        return y


class BlockResults:
    """The result blocks of one plan's ``A @ X``: a :class:`ResultBuffers` for each of the
    :data:`SHAPES` (k, memory order) most recently asked for, when the result is small
    (:meth:`ResultBuffers.wanted`); a larger one is a new array each time (CuPy's pool).

    Parameters
    ----------
    cupy : module
    n_rows : int
        The result's rows.
    dtype : numpy.dtype
    matrix_nbytes : int, optional
        The matrix's bytes (results up to a :data:`MATRIX_FRACTION` of them are kept).
    """

    def __init__(self, cupy, n_rows: int, dtype, matrix_nbytes: int = 0):
        self._cupy = cupy
        self._n_rows = n_rows
        self._dtype = dtype
        self._matrix_nbytes = matrix_nbytes
        self._by_shape: dict = {}
        self._lock = threading.Lock()

    def take(self, k: int, fortran: bool):
        """An (n_rows, k) result in Fortran order (``fortran``) or C order: one its caller
        has let go of on this stream, or a new one."""
        take = self._by_shape.get((k, fortran))
        if take is None:
            take = self._add(k, fortran)
        return take()

    def _add(self, k: int, fortran: bool):
        shape, order = (self._n_rows, k), "F" if fortran else "C"
        nbytes = self._n_rows * k * self._dtype.itemsize
        if ResultBuffers.wanted(True, nbytes, self._matrix_nbytes):
            take = ResultBuffers(self._cupy, shape, self._dtype, order).take
        else:
            take = functools.partial(self._cupy.ndarray, shape, self._dtype, order=order)
        with self._lock:  # the oldest shape goes, and its buffers with it
            by_shape = self._by_shape
            by_shape[(k, fortran)] = take
            while len(by_shape) > SHAPES:
                del by_shape[next(iter(by_shape))]
        return take
