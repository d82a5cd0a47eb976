"""Host <-> device copies of NumPy vectors through pinned (page-locked) host memory, and
the moves of a product's operands to where its backend computes and back
(:func:`to_residence`, :func:`from_residence`).

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

A large x (at least :data:`REGISTER_MIN_BYTES`) that comes back is sent from where it is,
with no copy: on its second sighting its memory is page-locked in place
(``cudaHostRegister``) and stays so for as long as the array lives. The lock is released by
a weak-reference callback on the array that owns the memory, which numpy runs before it
frees that memory, so sparsegpu never keeps a caller's array alive and never sends from
memory that was given back. scipy's ``cg`` hands every product the same ``p``. Memory that
is page-locked already (a result of an earlier product, CuPy's pinned pool) is sent
directly too. On the H200, 1.6M rows of float64 (12.8 MB): copying into the staging buffer
cost 1.5 ms a product, the registration 1.5 ms once (and 0.6 ms to undo), the transfer
0.25 ms either way. An earlier version registered x on every product, which cost more than
it saved (11.82 against 10.79 ms a CG iteration); copying x in 1 MB chunks on a few
threads, each chunk sent as soon as it was in the buffer, was slower too (9.94 against
9.29 ms).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import os
import threading
import weakref

import numpy as np

from . import _cuda

REGISTER_MIN_BYTES = 1 << 20
"""Smaller vectors are copied into the staging buffer: the copy costs less than the call
that asks whether their memory is page-locked."""
REGISTER_MAX_BYTES = 4 << 30
"""At most this much of the caller's memory is page-locked by sparsegpu at a time; past it,
vectors go through the staging buffer."""
_SIGHTINGS = 8  # large vectors remembered (by address and size, no reference kept)
_CUDA_MEMORY_TYPE_HOST = 1  # cudaPointerAttributes.type of page-locked host memory


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


class _Registered:
    """The caller's memory sparsegpu has page-locked: one entry per owning array."""

    def __init__(self):
        self.entries: dict[int, tuple[int, int, weakref.ref]] = {}  # id(root) -> ptr, size, ref
        self.seen: collections.OrderedDict = collections.OrderedDict()  # (ptr, size) sightings
        self.refused: dict[int, weakref.ref] = {}  # id(root) -> ref: arrays the driver refused
        self.lock = threading.Lock()

    def nbytes(self) -> int:
        return sum(size for _, size, _ in list(self.entries.values()))

    def locked(self, root) -> bool:
        entry = self.entries.get(id(root))
        return entry is not None and entry[2]() is root

    def add(self, root, runtime) -> bool:
        """Page-lock ``root``'s memory on its second sighting; True when it is locked."""
        key = (root.ctypes.data, root.nbytes)
        with self.lock:
            if self.locked(root):
                return True
            refused = self.refused.get(id(root))
            if refused is not None and refused() is root:
                return False
            if key not in self.seen:
                self.seen[key] = None
                if len(self.seen) > _SIGHTINGS:
                    self.seen.popitem(last=False)
                return False
            if self.nbytes() + root.nbytes > REGISTER_MAX_BYTES:
                return False
            try:
                runtime.hostRegister(key[0], key[1], 0)
            except Exception:  # a page locked by someone else, read-only pages, ...
                # not again for this array (a dead one's entry is dropped with it)
                self.refused[id(root)] = weakref.ref(root, functools.partial(self.forget, id(root)))
                return False
            del self.seen[key]
            ref = weakref.ref(root, functools.partial(self.release, id(root), key[0], runtime))
            self.entries[id(root)] = (key[0], key[1], ref)
            return True

    def release(self, key: int, ptr: int, runtime, _ref=None) -> None:
        """Unlock one array's memory. The weak-reference callback: numpy runs it before it
        frees the memory. No lock: it may run inside ``add`` in this thread (a collection),
        and ``dict.pop`` is atomic."""
        if self.entries.pop(key, None) is None:
            return
        try:
            runtime.hostUnregister(ptr)
        except Exception:  # interpreter shutdown, or the context is gone: nothing to undo
            pass

    def forget(self, key: int, _ref=None) -> None:
        """A refused array died: its id may come back as another array's."""
        self.refused.pop(key, None)

    def clear(self, runtime) -> None:
        for key, (ptr, _, _) in list(self.entries.items()):
            self.release(key, ptr, runtime)
        self.seen.clear()
        self.refused.clear()


_registered = _Registered()


def registered_bytes() -> int:
    """Bytes of callers' arrays page-locked by sparsegpu now."""
    return _registered.nbytes()


def release_registered() -> None:
    """Unlock every caller's array sparsegpu page-locked, and forget the arrays it has seen
    (they are locked again when they come back twice)."""
    cupy = _cuda.cupy_or_none()
    if cupy is not None:
        _registered.clear(cupy.cuda.runtime)


def _sendable(x: np.ndarray, cupy) -> bool:
    """True when x's memory is page-locked, by sparsegpu (on x's second sighting) or by
    whoever allocated it, so the device can read it where it is."""
    root = x  # the array that owns x's memory (x may view it)
    while isinstance(root.base, np.ndarray):
        root = root.base
    if _registered.locked(root):
        return True
    runtime = cupy.cuda.runtime
    try:
        if runtime.pointerGetAttributes(x.ctypes.data).type == _CUDA_MEMORY_TYPE_HOST:
            return True
    except Exception:
        return False
    # only memory an ndarray owns: its weak-reference callback runs before the memory goes
    if not root.flags.owndata:
        return False
    return _registered.add(root, runtime)


def upload(x: np.ndarray, dtype, owner):
    """x (NumPy) as a new C-contiguous CuPy array of ``dtype``, on the current stream.

    A large C-contiguous x of ``dtype`` whose memory is page-locked (see the module
    docstring) is sent from where it is, and the stream is waited for, since the caller
    may write x once this returns. Anything else is copied through the pinned buffer
    ``owner`` (a mirror) keeps for this thread, shape and dtype and sent asynchronously.
    """
    cupy = _cuda.cupy_or_none()
    if (
        x.nbytes >= REGISTER_MIN_BYTES
        and x.dtype == dtype
        and x.flags.c_contiguous
        and _sendable(x, cupy)
    ):
        device = cupy.empty(x.shape, dtype=dtype)
        stream = cupy.cuda.get_current_stream()
        device.set(x, stream=stream)
        stream.synchronize()
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


# A download of at least this many bytes into ordinary (pageable) memory is pipelined
# (:func:`download_pageable`); a smaller one is one copy.
PIPELINE_MIN_BYTES = 16 << 20
# Each chunk of a pipelined download: sent into one of two pinned buffers, then copied out
# of it in pieces of at least PIECE_BYTES on up to COPY_THREADS host threads.
CHUNK_BYTES = 32 << 20
PIECE_BYTES = 1 << 20
COPY_THREADS = 8
_copiers = None
_copiers_lock = threading.Lock()


def _copy_workers() -> int:
    return max(1, min(COPY_THREADS, os.cpu_count() or 1))


def _copy_threads():
    """The host threads that copy downloaded chunks out of pinned memory (made once)."""
    global _copiers
    with _copiers_lock:
        if _copiers is None:
            _copiers = concurrent.futures.ThreadPoolExecutor(_copy_workers(), "sparsegpu-copy")
        return _copiers


def _copy_piece(destination, buffer, start: int, a: int, b: int) -> None:
    """Bytes ``a:b`` of a chunk that starts at ``start``, from ``buffer`` to their place."""
    np.copyto(destination[a:b], buffer[a - start : b - start])


def pipelined_copy(
    nbytes: int, fetch, destination: np.ndarray, buffers, threads, workers: int
) -> None:
    """Copy ``nbytes`` bytes, chunk by chunk, into the uint8 array ``destination``.

    ``fetch(start, stop, buffer)`` fills ``buffer[: stop - start]`` with bytes
    ``start:stop`` of the source and returns once they are there (a device-to-pinned
    copy); the copy of that chunk out of ``buffer`` then runs in pieces on ``threads``
    while the next chunk is fetched into the other buffer (``workers`` pieces a chunk). A
    buffer is refilled only once every piece of its previous chunk has left it.
    """
    pending = [[] for _ in buffers]
    for number, start in enumerate(range(0, nbytes, len(buffers[0]))):
        stop = min(start + len(buffers[0]), nbytes)
        which = number % len(buffers)
        buffer = buffers[which]
        for piece in pending[which]:
            piece.result()
        fetch(start, stop, buffer)
        size = max(PIECE_BYTES, -(-(stop - start) // workers))
        pending[which] = [
            threads.submit(_copy_piece, destination, buffer, start, a, min(a + size, stop))
            for a in range(start, stop, size)
        ]
    for pieces in pending:
        for piece in pieces:
            piece.result()


def download_pageable(y) -> np.ndarray:
    """The CuPy array y as a NumPy array in ordinary memory of its own (what ``y.get()``
    returns), on the current stream.

    A large y goes through two pinned chunk buffers of CuPy's pool (:data:`CHUNK_BYTES`
    each, reused across calls) with the copies out of them on a few host threads, so that
    the device-to-host transfer runs at pinned-memory speed and the host's copying and
    page faulting run in parallel beside it (:func:`pipelined_copy`). A plain ``y.get()``
    into fresh pageable memory runs at a few GB/s (3.5 GB/s for a 620 MB result on the
    H100 of the device machine): the driver stages it through a bounce buffer and one
    thread copies and faults every page.
    """
    cupy = _cuda.cupy_or_none()
    y = cupy.ascontiguousarray(y)
    out = np.empty(y.shape, dtype=y.dtype)
    stream = cupy.cuda.get_current_stream()
    if y.nbytes < PIPELINE_MIN_BYTES:
        y.get(stream=stream, out=out)
        return out
    source = y.reshape(-1).view(np.uint8)
    buffers = [
        np.frombuffer(cupy.cuda.alloc_pinned_memory(CHUNK_BYTES), np.uint8, CHUNK_BYTES)
        for _ in range(2)
    ]

    def fetch(start, stop, buffer):
        source[start:stop].get(stream=stream, out=buffer[: stop - start])

    destination = out.reshape(-1).view(np.uint8)
    pipelined_copy(y.nbytes, fetch, destination, buffers, _copy_threads(), _copy_workers())
    return out


def operands(x, out, matrix, dtype, order: str = "C"):
    """A product's operands where ``matrix`` (its plan's mirror) computes: ``(xr, out,
    target)``.

    ``out`` is checked first (:func:`check_out`: before anything is computed); ``xr`` is
    ``x`` moved there in ``dtype`` and memory ``order`` (:func:`to_residence`, through
    ``matrix``'s staging buffer); ``out`` comes back where the result can be written into
    it as it is (there, in ``dtype`` and ``order``, sharing no memory with ``xr``), else
    None, and ``target`` is the caller's ``out`` to copy the result into.
    """
    if out is not None:
        check_out(out, x, matrix.shape[0], dtype)
    residence = matrix.residence
    xr = to_residence(x, residence, dtype, matrix, order)
    if out is None or (
        isinstance(out, np.ndarray) == (residence.xp is np)
        and out.dtype == dtype
        and (out.flags.f_contiguous if order == "F" else out.flags.c_contiguous)
        and not (isinstance(out, np.ndarray) == isinstance(xr, np.ndarray) and _may_share(out, xr))
    ):
        return xr, out, None
    return xr, None, out  # the caller's buffer can't be written directly: copied into after


def check_out(out, x, n_rows: int, dtype=None) -> None:
    """Refuse an ``out`` the result of ``A @ x`` (``n_rows`` rows) cannot go into, before
    anything is computed.

    Like numpy's ``out=``: a numpy or cupy array of exactly the result's shape (no
    broadcasting), and, given the result's ``dtype``, one that dtype casts to under
    ``same_kind`` (no float into int).
    """
    if not (isinstance(out, np.ndarray) or _cuda.is_cupy_array(out)):
        raise TypeError(f"out must be a numpy or cupy array, got {type(out).__name__}")
    want = (n_rows,) if x.ndim == 1 else (n_rows, x.shape[1])
    if out.shape != want:
        raise ValueError(f"out has shape {out.shape} but the product has shape {want}")
    if dtype is not None and not np.can_cast(dtype, out.dtype, "same_kind"):
        raise TypeError(
            f"cannot write the {dtype} product into an out of dtype {out.dtype} "
            f"(casting rule 'same_kind'); pass an out of dtype {dtype}"
        )


def _may_share(a, b) -> bool:
    """True when ``a`` and ``b``, arrays of one module, may share memory."""
    xp = np if isinstance(a, np.ndarray) else _cuda.cupy_or_none()
    return bool(xp.may_share_memory(a, b))


def to_residence(x, residence, dtype, owner=None, order: str = "C"):
    """x moved (if needed) to where a backend computes, in ``dtype`` and memory order
    ``order`` (``"C"``, or ``"F"`` for an (n, k) X a plan reads as it is); a NumPy x goes
    through ``owner``'s pinned staging buffer (:func:`upload`) when an owner is given.

    Parameters
    ----------
    x : numpy.ndarray or cupy.ndarray
        (A CuPy array is anything that is not a NumPy array: dispatch and planning hand
        nothing else.)
    residence : Residence
        Where the plan's mirror lives.
    dtype : dtype
    owner : DeviceMatrix, optional
        The mirror whose staging buffers a C-order upload may use.
    order : {"C", "F"}
    """
    xp = residence.xp
    fortran = order == "F" and x.ndim == 2
    on_device = not isinstance(x, np.ndarray)  # (x is one or the other)
    if xp is np:  # the scipy backend (and the test backends that copy on the host)
        if on_device:
            x = x.get()
        return np.asfortranarray(x, dtype=dtype) if fortran else np.ascontiguousarray(x, dtype)
    if on_device:
        if x.dtype != dtype:
            x = x.astype(dtype)
        return xp.asfortranarray(x) if fortran else xp.ascontiguousarray(x)
    if fortran:
        return residence.upload(np.asfortranarray(x, dtype=dtype))
    if owner is not None and residence.name == "cupy":
        return upload(x, dtype, owner)
    return residence.upload(np.ascontiguousarray(x, dtype=dtype))


def from_residence(y, want_cupy: bool):
    """A product's result ``y`` in the caller's array module (CuPy when ``want_cupy``)."""
    if want_cupy:
        if not _cuda.is_cupy_array(y):
            return _cuda.cupy_or_none().asarray(y)
        return y
    if _cuda.is_cupy_array(y):
        return download(y)
    return y
