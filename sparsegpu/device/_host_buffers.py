"""Host buffers behind a matrix's mirrors: who holds them, writes by compiled code, copy-on-upload.

A matrix whose mirror is made from its host arrays *holds* their buffers: this module is
the process-wide registry of those holds (which matrices hold which buffer), so that a
change through one matrix drops the mirrors of every matrix sharing the buffer.

The buffers stay writable, as in scipy: compiled code (pybind11, Cython, ``np.copyto``,
``out=``) writes them without asking Python. A write cannot go unseen all the same:

* handing an array out (``A.data``, ``A.indices``, ``A.indptr`` read while a mirror holds
  it) marks its buffer *exposed* (:data:`exposed`) and records, first, a fingerprint of
  the holders' arrays (:func:`fingerprint`, CRC-32 of their bytes);
* the next product of a holder compares the fingerprints again; a difference drops the
  mirrors, and the product builds (and validates) them anew
  (:mod:`sparsegpu.classes._mirrors` does both);
* the buffer stays exposed while something besides its holders can still reach it (an
  array kept from ``A.data``, a view of it: :func:`reached_from_outside`, by reference
  counts), so every product re-checks until that reference is gone; with none left, a
  product of unchanged arrays clears the mark and the products after it check nothing.

Before an upload, :func:`own_arrays` replaces any array something else can reach by a
private copy (copy-on-upload). Everything here runs under :data:`MIRROR_LOCK`, the lock
every mirror build, drop and assignment takes.
"""

from __future__ import annotations

import collections
import functools
import sys
import threading
import weakref
import zlib

import numpy as np

ARRAY_NAMES = ("data", "indices", "indptr")

MIRROR_LOCK = threading.RLock()
# A host buffer is held while any matrix holds a mirror made from it.
# id(buffer) -> {id(matrix): weakref(matrix)}: the matrices holding it
_holders: dict[int, dict[int, weakref.ref]] = {}
# the buffers handed out since their holders' last check (see the module docstring)
exposed: set[int] = set()


def base_chain(a):
    """``a`` and the arrays it views, innermost last (scipy hands ``A.T`` views)."""
    chain = [a]
    while isinstance(chain[-1].base, np.ndarray):
        chain.append(chain[-1].base)
    return chain


def root_id(a) -> int:
    return id(base_chain(a)[-1])


def unhold(root: int, matrix_id: int) -> None:
    """Remove one holder of a buffer; the last one out forgets the buffer."""
    holders = _holders.get(root)
    if holders is None:
        return
    holders.pop(matrix_id, None)
    if not holders:
        del _holders[root]
        exposed.discard(root)


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
    """Hold the buffers behind ``arrays`` for ``matrix`` (call under MIRROR_LOCK).

    ``roots`` is the matrix's own set of held buffer ids, updated in place.
    """
    apply_forgotten()
    for a in arrays:
        root = root_id(a)
        holders = _holders.setdefault(root, {})
        if id(matrix) not in holders:
            holders[id(matrix)] = weakref.ref(matrix, functools.partial(_forget, root, id(matrix)))
        roots.add(root)


def unmarked_root(a) -> int | None:
    """The id of the buffer behind ``a`` when a matrix holds it and it is not marked
    exposed yet, else None (every read of ``A.data`` asks: kept short)."""
    base = getattr(a, "base", None)
    while isinstance(base, np.ndarray):
        a, base = base, base.base
    root = id(a)
    return root if root in _holders and root not in exposed else None


def held_any() -> bool:
    """True when any buffer is held (else a handed-out array needs no marking)."""
    return bool(_holders)


def is_held(roots) -> bool:
    """True when any buffer id in ``roots`` is held by some matrix."""
    return not set(roots).isdisjoint(_holders)


def holders_of(root: int) -> list:
    """The live matrices holding buffer ``root``."""
    return [m for m in (ref() for ref in list(_holders.get(root, {}).values())) if m is not None]


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


# ------------------------------------------------------------ writes by compiled code
def fingerprint(arrays) -> int:
    """A CRC-32 of the arrays' bytes (with their lengths and dtypes): what a product
    compares to see whether an exposed buffer was written. About 1 GB/s on one core."""
    crc = 0
    for a in arrays:
        crc = zlib.crc32(f"{a.dtype.str}{a.shape}".encode(), crc)
        crc = zlib.crc32(np.ascontiguousarray(a).reshape(-1).view(np.uint8), crc)
    return crc


def reached_from_outside(arrays) -> bool:
    """True when something besides the dict entries that ``arrays`` lists (one entry per
    holder's reference) can reach their memory: an array kept from ``A.data``, a view of
    one, a non-array owner (a bytearray, an mmap).

    Counted references: each object is referred to by the entries of ``arrays`` that are
    it, by the views in the chains whose base it is, and here by ``arrays`` itself (once
    per entry), ``seen`` and getrefcount's argument.
    """
    listed = collections.Counter(id(a) for a in arrays)
    links: collections.Counter = collections.Counter()
    seen: dict[int, np.ndarray] = {}
    a = x = base = None
    for a in arrays:
        x = a
        while id(x) not in seen:
            seen[id(x)] = x
            base = x.base
            if base is None:
                break
            if not isinstance(base, np.ndarray):
                return True
            links[id(base)] += 1
            x = base
    del a, x, base
    for key in seen:
        if sys.getrefcount(seen[key]) - 2 > 2 * listed[key] + links[key]:
            return True
    return False
