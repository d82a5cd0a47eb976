"""Host <-> device copies of NumPy vectors through pinned (page-locked) host memory.

``scipy.sparse.linalg.cg(A_sparsegpu, b_numpy)`` uploads x and downloads y on every
product. From pageable memory the driver stages each copy through a bounce buffer of its
own and the copy cannot be asynchronous: that path ran 15.9 ms a CG iteration on a
1.6M-row system on the H200 (issue 15).

Uploads go through one pinned buffer per (mirror, thread, shape, dtype), reused: x is
copied into it and sent asynchronously on the current stream; before the buffer is
refilled, the previous copy out of it is waited for (an event). Downloads land in a
fresh block of CuPy's pinned memory pool that the returned array owns: it goes back to
the pool only when that array is freed, so a result never aliases a buffer that a later
product overwrites.

A large vector uploaded a second time from the same memory (scipy's ``cg`` multiplies the
same ``p`` buffer in every iteration) is page-locked where it lies instead
(``cudaHostRegister``) and sent from there: the host copy into the staging buffer, the
largest cost left on this path, goes. A registration lasts as long as the array (a weak
reference ends it before NumPy frees the memory), is limited to
:data:`REGISTER_LIMIT_BYTES` in all (least recently used first out), and the copy out of
it is waited for before :func:`upload` returns, so the caller may change or free x at
once. Memory that cannot be registered (a view, a page shared with a registered range, a
driver that refuses) keeps the staging buffer.
"""

from __future__ import annotations

import collections
import threading
import weakref

import numpy as np

from . import _cuda


class _Upload:
    """A pinned host buffer and the event of the last copy out of it."""

    def __init__(self, cupy, shape, dtype):
        nbytes = max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)
        memory = cupy.cuda.alloc_pinned_memory(nbytes)
        self.host = np.frombuffer(memory, dtype=dtype, count=int(np.prod(shape))).reshape(shape)
        self.sent = None


_uploads: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.RLock()  # a finalizer may run (and take it) inside a locked region


def _buffer(owner, cupy, shape, dtype) -> _Upload:
    key = (threading.get_ident(), shape, np.dtype(dtype))
    with _lock:
        buffers = _uploads.setdefault(owner, {})
        entry = buffers.get(key)
        if entry is None:
            entry = buffers[key] = _Upload(cupy, shape, dtype)
    return entry


#: Vectors smaller than this always go through the staging buffer (registering costs
#: more than copying them).
REGISTER_MIN_BYTES = 1 << 20
#: The most host memory page-locked in place at once, over all arrays.
REGISTER_LIMIT_BYTES = 4 << 30


class _Registered:
    """One array's memory, page-locked in place until the array dies or is evicted."""

    def __init__(self, cupy, x: np.ndarray):
        self.pointer = x.ctypes.data
        self.nbytes = x.nbytes
        cupy.cuda.runtime.hostRegister(self.pointer, self.nbytes, 0)
        self.finalizer = weakref.finalize(x, _forget, self.pointer)
        self.finalizer.atexit = False  # at exit the process's memory goes anyway

    def release(self) -> None:
        self.finalizer.detach()
        cupy = _cuda.cupy_or_none()
        if cupy is not None:
            try:
                cupy.cuda.runtime.hostUnregister(self.pointer)
            except cupy.cuda.runtime.CUDARuntimeError:  # pragma: no cover - driver gone
                pass


# pointer -> _Registered, least recently used first; arrays seen once: pointer -> weakref
_registered: collections.OrderedDict = collections.OrderedDict()
_seen: collections.OrderedDict = collections.OrderedDict()
_refused: set = set()
_registered_bytes = 0


def _forget(pointer: int) -> None:
    """The array at ``pointer`` is being freed: unregister its memory first."""
    global _registered_bytes
    with _lock:
        entry = _registered.pop(pointer, None)
        _seen.pop(pointer, None)
        _refused.discard(pointer)
        if entry is not None:
            _registered_bytes -= entry.nbytes
    if entry is not None:
        entry.release()


def _in_place(cupy, x: np.ndarray, dtype) -> bool:
    """Whether x can be sent from where it lies (registering it on its second upload)."""
    global _registered_bytes
    if (
        x.dtype != dtype
        or x.nbytes < REGISTER_MIN_BYTES
        or x.nbytes > REGISTER_LIMIT_BYTES
        or not x.flags.c_contiguous
        or not x.flags.owndata
        or not hasattr(cupy.cuda.runtime, "hostRegister")
    ):
        return False
    pointer = x.ctypes.data
    with _lock:
        entry = _registered.get(pointer)
        if entry is not None and entry.nbytes == x.nbytes and entry.finalizer.peek()[0] is x:
            _registered.move_to_end(pointer)
            return True
        if pointer in _refused:
            return False
        seen = _seen.pop(pointer, None)
        if seen is None or seen() is not x:
            _seen[pointer] = weakref.ref(x)
            while len(_seen) > 64:
                _seen.popitem(last=False)
            return False
        evicted = []
        while _registered and _registered_bytes + x.nbytes > REGISTER_LIMIT_BYTES:
            _, old = _registered.popitem(last=False)
            _registered_bytes -= old.nbytes
            evicted.append(old)
    for old in evicted:
        old.release()
    try:
        entry = _Registered(cupy, x)
    except cupy.cuda.runtime.CUDARuntimeError:
        with _lock:  # e.g. a page shared with a registered range: stage this one
            _refused.add(pointer)
        return False
    with _lock:
        _registered[pointer] = entry
        _registered_bytes += entry.nbytes
    return True


def registered_bytes() -> int:
    """Host memory page-locked in place now (for tests and diagnostics)."""
    return _registered_bytes


def upload(x: np.ndarray, dtype, owner):
    """x (NumPy) as a new C-contiguous CuPy array of ``dtype`` on the current stream:
    sent from x's own memory when it is registered (see the module), else copied through
    the pinned buffer ``owner`` (a mirror) keeps for this thread, shape and dtype and sent
    asynchronously."""
    cupy = _cuda.cupy_or_none()
    if _in_place(cupy, x, np.dtype(dtype)):
        device = cupy.empty(x.shape, dtype=dtype)
        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memcpyAsync(
            device.data.ptr, x.ctypes.data, x.nbytes,
            cupy.cuda.runtime.memcpyHostToDevice, stream.ptr,
        )  # fmt: skip
        stream.synchronize()  # the caller may change x as soon as this returns
        return device
    staging = _buffer(owner, cupy, x.shape, dtype)
    if staging.sent is not None:
        staging.sent.synchronize()  # the previous upload has left the buffer
    np.copyto(staging.host, x, casting="unsafe")
    device = cupy.empty(x.shape, dtype=dtype)
    stream = cupy.cuda.get_current_stream()
    device.set(staging.host, stream=stream)
    staging.sent = stream.record()
    return device


def download(y) -> np.ndarray:
    """The CuPy array y as a NumPy array in memory of its own (pinned, from CuPy's pool),
    copied on the current stream, which is then waited for."""
    cupy = _cuda.cupy_or_none()
    y = cupy.ascontiguousarray(y)
    memory = cupy.cuda.alloc_pinned_memory(max(y.nbytes, 1))
    host = np.frombuffer(memory, dtype=y.dtype, count=y.size).reshape(y.shape)
    stream = cupy.cuda.get_current_stream()
    y.get(stream=stream, out=host)
    stream.synchronize()
    return host
