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

Two ways to shorten the upload were built and measured slower on the H200 (scipy's ``cg``,
1.6M rows, ``benchmarks/solver_graphs.py``): page-locking the caller's array in place
(``cudaHostRegister``; scipy allocates a new ``p`` every solve, and registering 12.8 MB cost
more than 20 iterations of copies saved: 11.82 against 10.79 ms an iteration), and copying
x in 1 MB chunks on a few threads with each chunk sent as soon as it was in the buffer
(9.94 against 9.29 ms). scipy's own vector work is 8.0 ms of those 9.3.
"""

from __future__ import annotations

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
_lock = threading.Lock()


def _buffer(owner, cupy, shape, dtype) -> _Upload:
    key = (threading.get_ident(), shape, np.dtype(dtype))
    with _lock:
        buffers = _uploads.setdefault(owner, {})
        entry = buffers.get(key)
        if entry is None:
            entry = buffers[key] = _Upload(cupy, shape, dtype)
    return entry


def upload(x: np.ndarray, dtype, owner):
    """x (NumPy) as a new C-contiguous CuPy array of ``dtype``, copied through the pinned
    buffer ``owner`` (a mirror) keeps for this thread, shape and dtype; asynchronous on
    the current stream."""
    cupy = _cuda.cupy_or_none()
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
