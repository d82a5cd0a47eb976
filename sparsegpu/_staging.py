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

A large x is copied in chunks, several at once (NumPy's copy releases the GIL), and each
chunk is sent as soon as it is in the pinned buffer, so the host copy and the PCIe
transfer overlap instead of following each other. (Page-locking the caller's array in
place was tried and measured slower: scipy's ``cg`` allocates a new ``p`` every solve, and
registering 12.8 MB costs more than the copies it saves over 20 iterations.)
"""

from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

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
_lock = threading.Lock()


def _buffer(owner, cupy, shape, dtype) -> _Upload:
    key = (threading.get_ident(), shape, np.dtype(dtype))
    with _lock:
        buffers = _uploads.setdefault(owner, {})
        entry = buffers.get(key)
        if entry is None:
            entry = buffers[key] = _Upload(cupy, shape, dtype)
    return entry


#: Uploads at least this large are copied and sent in chunks of :data:`CHUNK_BYTES`.
PIPELINE_MIN_BYTES = 4 << 20
CHUNK_BYTES = 1 << 20
_copiers: ThreadPoolExecutor | None = None


def _copier_pool() -> ThreadPoolExecutor:
    global _copiers
    with _lock:
        if _copiers is None:
            workers = max(1, min(4, (os.cpu_count() or 1) - 1))
            _copiers = ThreadPoolExecutor(workers, thread_name_prefix="sparsegpu-staging")
    return _copiers


def chunks(rows: int, row_bytes: int, chunk_bytes: int | None = None) -> list[tuple[int, int]]:
    """Row ranges ``[(start, stop), ...]`` of about ``chunk_bytes`` each covering ``rows``."""
    step = max(1, (CHUNK_BYTES if chunk_bytes is None else chunk_bytes) // max(row_bytes, 1))
    return [(start, min(start + step, rows)) for start in range(0, rows, step)]


def upload(x: np.ndarray, dtype, owner):
    """x (NumPy) as a new C-contiguous CuPy array of ``dtype``, copied through the pinned
    buffer ``owner`` (a mirror) keeps for this thread, shape and dtype; asynchronous on
    the current stream (a large x in overlapped chunks, see the module)."""
    cupy = _cuda.cupy_or_none()
    x = np.asarray(x)
    staging = _buffer(owner, cupy, x.shape, dtype)
    if staging.sent is not None:
        staging.sent.synchronize()  # the previous upload has left the buffer
    device = cupy.empty(x.shape, dtype=dtype)
    stream = cupy.cuda.get_current_stream()
    host = staging.host
    if host.nbytes < PIPELINE_MIN_BYTES or x.ndim == 0:
        np.copyto(host, x, casting="unsafe")
        device.set(host, stream=stream)
    else:
        row_bytes = host.nbytes // host.shape[0]
        pieces = chunks(host.shape[0], row_bytes)
        pool = _copier_pool()
        copies = [pool.submit(np.copyto, host[a:b], x[a:b], casting="unsafe") for a, b in pieces]
        for (a, b), copy in zip(pieces, copies, strict=True):
            copy.result()
            cupy.cuda.runtime.memcpyAsync(
                device.data.ptr + a * row_bytes, host.ctypes.data + a * row_bytes,
                (b - a) * row_bytes, cupy.cuda.runtime.memcpyHostToDevice, stream.ptr,
            )  # fmt: skip
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
