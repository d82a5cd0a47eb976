"""Host buffers held read-only while a GPU copy of them lives, and copy-on-upload.

A matrix whose mirror copies its arrays (a GPU upload, a cast, a transpose) holds the
buffers behind them read-only, so an in-place write (``A.data[0] = 1``) is refused by numpy
or goes through :mod:`sparsegpu.classes._write_through` instead of leaving the copy stale. This
module is the process-wide registry of those holds: which matrices hold which buffer, and
which arrays sparsegpu itself made read-only (only those are made writable again). Before
an upload, :func:`own_arrays` replaces any array something else can reach by a private copy.

Everything here runs under :data:`MIRROR_LOCK`, the lock every mirror build, drop and
assignment takes.
"""

from __future__ import annotations

import collections
import functools
import sys
import threading
import weakref

import numpy as np

ARRAY_NAMES = ("data", "indices", "indptr")

MIRROR_LOCK = threading.RLock()
# A host buffer is read-only while any matrix holds a copying mirror made from it.
# id(buffer) -> {id(matrix): weakref(matrix)}: the matrices holding it
_holders: dict[int, dict[int, weakref.ref]] = {}
# id(buffer) -> the arrays of it (the buffer itself first, when it was writable) that
# sparsegpu made read-only; only these are made writable again, so a user's read-only
# array stays read-only
_locked: dict[int, list] = {}


def base_chain(a):
    """``a`` and the arrays it views, innermost last (scipy hands ``A.T`` views)."""
    chain = [a]
    while isinstance(chain[-1].base, np.ndarray):
        chain.append(chain[-1].base)
    return chain


def root_id(a) -> int:
    return id(base_chain(a)[-1])


def unhold(root: int, matrix_id: int) -> bool:
    """Remove one holder of a buffer; the last one out makes it writable again (True)."""
    holders = _holders.get(root)
    if holders is None:
        return False
    holders.pop(matrix_id, None)
    if holders:
        return False
    del _holders[root]
    # in locking order, the buffer first: numpy lets a view be writable only when its base is
    for arr in _locked.pop(root, ()):
        try:
            arr.flags.writeable = True
        except ValueError:  # read-only before sparsegpu saw it: not ours to unlock
            pass
    return True


# holds released by garbage-collected matrices, applied under MIRROR_LOCK
_forgotten: collections.deque = collections.deque()


def _forget(root: int, matrix_id: int, _ref) -> None:
    """weakref callback: a matrix holding a buffer was garbage-collected.

    It never waits for MIRROR_LOCK: the garbage collector runs it in whatever thread
    allocated, which may hold another lock (CuPy's memory pool, say) that the lock's
    owner needs. The release is queued and applied now if the lock is free, else by the
    next mirror operation.
    """
    _forgotten.append((root, matrix_id))
    if MIRROR_LOCK.acquire(blocking=False):
        try:
            apply_forgotten()
        finally:
            MIRROR_LOCK.release()


def apply_forgotten() -> None:
    """Apply the queued releases of collected matrices (call under MIRROR_LOCK)."""
    while _forgotten:
        unhold(*_forgotten.popleft())


def hold(matrix, roots: set, arrays) -> None:
    """Hold the buffers behind ``arrays`` read-only for ``matrix`` (call under MIRROR_LOCK).

    ``roots`` is the matrix's own set of held buffer ids, updated in place.
    """
    apply_forgotten()
    for a in arrays:
        chain = base_chain(a)
        root = id(chain[-1])
        holders = _holders.setdefault(root, {})
        if id(matrix) not in holders:
            holders[id(matrix)] = weakref.ref(matrix, functools.partial(_forget, root, id(matrix)))
        roots.add(root)
        flipped = _locked.setdefault(root, [])
        for arr in reversed(chain):  # the buffer first
            if arr.flags.writeable:
                arr.flags.writeable = False
                flipped.append(arr)


def is_held(roots) -> bool:
    """True when any buffer id in ``roots`` is held by some matrix."""
    return not set(roots).isdisjoint(_holders)


def holders_of(root: int) -> list:
    """The live matrices holding buffer ``root``."""
    return [m for m in (ref() for ref in list(_holders.get(root, {}).values())) if m is not None]


def free_born_locked(a, unlocked: set[int]) -> None:
    """Make writable the views in ``a``'s chain made while its buffer was locked.

    A view of a read-only buffer is born read-only (``A.data[:nnz]`` taken after a product,
    scipy's ``prune``): once sparsegpu gives the buffer back (its id in ``unlocked``), such
    views follow it.
    """
    chain = base_chain(a)
    if id(chain[-1]) not in unlocked or not chain[-1].flags.writeable:
        return
    for arr in reversed(chain[:-1]):
        try:
            arr.flags.writeable = True
        except ValueError:
            break


def own_arrays(sharers: list, arrays: list) -> list:
    """Copy-on-upload: the arrays a copying mirror is made from, owned by the matrices.

    An array something else also refers to (a view of a larger buffer, an array the user
    passed in and kept, ``np.frombuffer`` over a bytearray, a memoryview's base, an earlier
    ``v = A.data``) is replaced, in every sharer, by a private copy before the upload, so
    that no earlier alias can write what the GPU holds: such a write changes the old
    buffer, no longer the matrix. Costs one host copy of those arrays per upload
    (memcpy speed; the upload itself crosses PCIe).
    """
    owned = []
    for i, name in enumerate(ARRAY_NAMES):
        a = arrays[i]
        if not _aliased(a, sum(m.__dict__.get(name) is a for m in sharers)):
            owned.append(a)
            continue
        private = a.copy()
        for m in sharers:
            if same_memory(m.__dict__.get(name, private), a):
                m.__dict__[name] = private
        owned.append(private)
    return owned


def _aliased(a, holders: int) -> bool:
    """True when something besides ``holders`` matrices can reach ``a``'s memory.

    Counted references: ``a`` is held by each holder's dict, the caller's list and local,
    this parameter and getrefcount's argument; each base in its chain only by the view
    above it, the local ``base`` and the argument. Memory owned by something that is not
    an array (a bytearray, a memoryview, an mmap) is always aliased.
    """
    if sys.getrefcount(a) > holders + 4:
        return True
    base = a.base
    while base is not None:
        if not isinstance(base, np.ndarray) or sys.getrefcount(base) > 3:
            return True
        base = base.base
    return False


def live_refs(refs: list) -> list:
    return [ref for ref in refs if ref() is not None]


def live_sharers(shared: dict) -> list:
    return [m for m in (ref() for ref in shared["sharers"]) if m is not None]


def same_memory(a, b) -> bool:
    """True when two arrays are the same elements of the same buffer (a view of it all)."""
    ia, ib = a.__array_interface__, b.__array_interface__
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and ia["data"][0] == ib["data"][0]
        and ia.get("strides") == ib.get("strides")
    )
