"""A matrix's mirrors: the copies of its arrays where backends compute, and what keeps them fresh.

Each sparsegpu matrix holds one :class:`MatrixMirrors` (made on its first product, in its
``__dict__`` as ``_sg_mirrors``): its mirrors and choices (``cache``), the device arrays
it shares with the views of the same arrays (``shared``: ``A``, ``A.T``, ``A.T.T``), the
host buffers it holds (``roots``) and the fingerprint of its arrays while they are handed
out. The matrix class keeps scipy's side (argument handling, the hooks); this module keeps
the mirrors never stale:

* a mirror is dropped by every change of the arrays (:func:`invalidate`, for every
  matrix holding the same buffers), and rebuilt and validated by the next
  product (:meth:`MatrixMirrors.mirror`);
* an array handed out while a mirror holds it marks its buffer exposed (:func:`expose`),
  and the next product compares the arrays with the fingerprint taken then
  (:meth:`MatrixMirrors.check_writes`), so writes by compiled code are seen;
* a result kept on the device (``matrix.__dict__["_sg_pending"]``) gets its host arrays
  on first host use (:meth:`MatrixMirrors.materialise`).

The methods take the matrix they belong to (the object holds no reference back to it:
holders are found through weak references, and a collected matrix releases its holds).
Everything that builds, drops or assigns runs under :data:`MIRROR_LOCK`.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ..device import _host_buffers
from ..device._host_buffers import (
    ARRAY_NAMES,
    MIRROR_LOCK,
    apply_forgotten,
    hold,
    holders_of,
    is_held,
    live_refs,
    live_sharers,
    own_arrays,
    reached_from_outside,
    root_id,
    same_memory,
    unhold,
)
from ..device._mirror import DeviceMatrix, MatrixCache, MirrorKey, Residence
from ..engine import _sparse_dispatch


class MatrixMirrors:
    """The mirror state of one matrix (see the module docstring)."""

    __slots__ = ("cache", "shared", "roots", "fingerprint", "written")

    def __init__(self):
        self.cache: MatrixCache | None = None  # mirrors by MirrorKey, choices, plans
        self.shared: dict | None = None  # device arrays shared with views, and the sharers
        self.roots: set[int] = set()  # ids of the host buffers held
        self.fingerprint: int | None = None  # of the arrays, taken when handed out
        self.written = False  # written from outside: the next upload keeps the arrays

    # ------------------------------------------------------------------ building
    def mirror(self, matrix, residence: Residence, value_dtype, transpose: bool) -> DeviceMatrix:
        """The validated mirror for ``residence`` in ``value_dtype`` (made once)."""
        value_dtype = np.dtype(value_dtype)
        key = MirrorKey(residence.name, value_dtype if residence.copies else None, transpose)
        cache = self.cache
        if cache is not None:
            mirror = cache.mirrors.get(key)
            if mirror is not None:
                return mirror
        with MIRROR_LOCK:
            cache = self.cache_dict()
            mirror = cache.mirrors.get(key)
            if mirror is None:
                mirror = self._build(matrix, residence, value_dtype, transpose)
                mirror.settle()  # usable from any stream once published
                cache.mirrors[key] = mirror
            return mirror

    def cache_dict(self) -> MatrixCache:
        """The cache holding the mirrors and choices (made under the lock)."""
        with MIRROR_LOCK:
            if self.cache is None:  # never made, or dropped by invalidate
                self.cache = MatrixCache()
            return self.cache

    def _build(self, matrix, residence, value_dtype, transpose) -> DeviceMatrix:
        csr_shape, transposed = matrix._sg_layout()
        if not residence.copies:
            self.materialise(matrix)
            arrays = arrays_of(matrix)
            # The host mirror aliases the arrays (scipy computes on them, also in CSC
            # layout), so it is never stale; they are still held, so that a write through
            # A.data/A.indices is checked and the next product validates them again (an
            # index written out of range is a ValueError, not a crash in scipy's kernel).
            mirror = matrix._sg_mirror_type.from_host(*arrays, csr_shape, residence)
            mirror.layout = "csc" if transposed != transpose else "csr"
            mirror.shape = matrix.shape[::-1] if transpose else matrix.shape
            self.hold(matrix, arrays)
            return mirror
        # "stored" (the arrays as CSR) and "transposed" live in a dict shared with the
        # views holding the same arrays (A, every A.T, A.T.T): A.T is a new object each
        # time it is evaluated, and this way it uploads and transposes only once.
        shared = self.shared_arrays(matrix)
        stored = shared.get((residence.name, "stored"))
        if stored is None:
            self.materialise(matrix)  # a result kept on another residence's device
            arrays = arrays_of(matrix)
            written, self.written = self.written, False
            if not written:
                arrays = own_arrays(live_sharers(shared), arrays)
            stored = matrix._sg_mirror_type.from_host(*arrays, csr_shape, residence)
            shared[(residence.name, "stored")] = stored
            del arrays
            for sharer in live_sharers(shared):
                mirrors_of(sharer).hold(sharer, arrays_of(sharer))
            if written:  # arrays still reachable from outside stay watched
                self.watch_if_reached()
        stored.settle()  # a product may still write it, on another stream
        base = stored
        if transposed != transpose:
            base = shared.get((residence.name, "transposed"))
            if base is None:
                base = shared[(residence.name, "transposed")] = _sparse_dispatch.transposed(stored)
        return base if base.dtype == value_dtype else base.astype(value_dtype)

    # ------------------------------------------------------------------ sharing
    def shared_arrays(self, matrix) -> dict:
        """The device arrays this matrix shares with views of the same arrays."""
        if self.shared is None:
            self.shared = {"sharers": [weakref.ref(matrix)]}
        return self.shared

    def share_with(self, matrix, view) -> None:
        """Let ``view``, holding the same memory as ``matrix``, share its device arrays.

        Invariant: while the shared dict holds a device copy, every live sharer holds the
        buffers (registered), so a change through any of them drops them all.
        """
        arrays = [matrix.__dict__.get(n) for n in ARRAY_NAMES]
        theirs = [view.__dict__.get(n) for n in ARRAY_NAMES]
        if any(
            a is None or b is None or not same_memory(a, b)
            for a, b in zip(arrays, theirs, strict=True)
        ):
            return
        with MIRROR_LOCK:
            shared = self.shared_arrays(matrix)
            shared["sharers"] = live_refs(shared["sharers"]) + [weakref.ref(view)]
            theirs_mirrors = mirrors_of(view)
            theirs_mirrors.shared = shared
            if has_device_arrays(shared):
                theirs_mirrors.hold(view, theirs)

    def seed_copy(self, other, conjugate: bool) -> None:
        """Give ``other``, a fresh copy (or conjugate) of the matrix, the device arrays it
        already has, so that ``A.copy()`` and ``A.conj()`` (hence ``A.H`` and scipy's
        adjoint operators) upload and transpose nothing again.

        ``other``'s arrays equal the matrix's now and its device arrays are never stale,
        so the seeded ones are exact; ``other``'s arrays are then held like those of any
        matrix whose mirror was built from them.
        """
        shared = self.shared
        if not shared:
            return
        with MIRROR_LOCK:
            seeded = {
                key: (mirror.conj() if conjugate else mirror)
                for key, mirror in shared.items()
                if key != "sharers"
            }
            if not seeded:
                return
            theirs = mirrors_of(other)
            theirs.shared = {"sharers": [weakref.ref(other)], **seeded}
            theirs.hold(other, arrays_of(other))

    def materialise(self, matrix) -> None:
        """Make the host arrays of a result kept on the device (its first host use).

        Every live matrix sharing the same pending arrays (a result and its transposes)
        takes the same downloaded arrays; as a device copy of them lives, they are held
        like those of any matrix with a mirror.
        """
        if "_sg_pending" not in matrix.__dict__:
            return
        with MIRROR_LOCK:
            pending = matrix.__dict__.get("_sg_pending")
            if pending is None:
                return
            arrays = pending.host()
            shared = self.shared or {"sharers": [weakref.ref(matrix)]}
            for sharer in [matrix, *live_sharers(shared)]:
                d = sharer.__dict__
                if d.get("_sg_pending") is not pending:
                    continue
                d.update(zip(ARRAY_NAMES, arrays, strict=True))
                del d["_sg_pending"]
                theirs = mirrors_of(sharer)
                if has_device_arrays(theirs.shared or ()):
                    theirs.hold(sharer, arrays)
            pending.forget_host()

    @staticmethod
    def kept_on_device(matrix, stored: DeviceMatrix, pending, shared) -> None:
        """Make ``matrix`` (new, without arrays) a result kept on the device: ``pending``
        its arrays there, sharing ``shared`` (None: a new dict holding ``stored``)."""
        matrix.__dict__["_sg_pending"] = pending
        if shared is None:
            shared = {"sharers": [], (stored.residence.name, "stored"): stored}
        with MIRROR_LOCK:
            shared["sharers"] = live_refs(shared["sharers"]) + [weakref.ref(matrix)]
        mirrors_of(matrix).shared = shared

    # ------------------------------------------------------------------ holds and drops
    def hold(self, matrix, arrays) -> None:
        """Hold the buffers behind ``arrays`` while the matrix's mirror lives."""
        hold(matrix, self.roots, arrays)

    def release(self, matrix) -> None:
        """Drop the mirrors and the holds on buffers (call under MIRROR_LOCK)."""
        self.cache = None
        self.shared = None
        self.fingerprint = None
        roots, self.roots = self.roots, set()
        for root in roots:
            unhold(root, id(matrix))

    def drop(self, matrix) -> None:
        """Drop the matrix's own mirrors (an attribute now refers to another array)."""
        if self.cache is not None or self.roots:
            with MIRROR_LOCK:
                apply_forgotten()
                self.release(matrix)

    # ------------------------------------------------------------------ writes from outside
    def watch_if_reached(self) -> None:
        """Mark the held buffers exposed (fingerprinted now) while something besides their
        holders can reach them (call under MIRROR_LOCK)."""
        holders = {id(m): m for root in self.roots for m in holders_of(root)}
        if reached_from_outside([a for m in holders.values() for a in arrays_of(m)]):
            for root in set(self.roots):
                mark_exposed(root, holders_of(root))

    def check_writes(self, matrix) -> None:
        """Before a product: if a buffer this matrix holds was handed out since its last
        check, compare its holders' arrays with their fingerprints; a difference (a write,
        by Python or compiled code) drops the mirrors, so the product rebuilds them from
        the arrays as they are now. The mark stays while something besides the holders
        can still reach the buffers (see :mod:`sparsegpu.device._host_buffers`)."""
        exposed = _host_buffers.exposed
        if not exposed or not self.roots or exposed.isdisjoint(self.roots):
            return
        with MIRROR_LOCK:
            apply_forgotten()
            marked = self.roots & exposed
            holders = list({id(m): m for root in marked for m in holders_of(root)}.values())
            written = [m for m in holders if mirrors_of(m).fingerprint != _fingerprint(m)]
            for other in written:
                invalidate(other)
                # an array written from outside keeps reaching the matrix, as in scipy:
                # the next upload reads it as it is (no copy-on-upload), watched
                mirrors_of(other).written = True
            if written:
                return  # dropped: the rebuilt mirrors are checked anew
            if any(has_device_arrays(mirrors_of(m).shared or ()) for m in holders) and (
                reached_from_outside([a for m in holders for a in arrays_of(m)])
            ):
                return  # still reachable: the next product checks again
            exposed.difference_update(marked)
            for other in holders:
                mirrors_of(other).fingerprint = None


def rewrite_device_values(matrix, data) -> bool:
    """Write ``data`` into ``matrix``'s values in place on the device, keeping its plans
    there: for a result kept on the device whose host arrays were never made and which no
    view shares (multigrid's own level matrices, re-set-up with new values). Its plans
    that read the values where they are stay (so its next product selects and plans
    nothing); what was made from the old values goes: mirrors in other dtypes, the
    transpose, other formats, the plans that copied values, reorderings
    (:meth:`DeviceMatrix.rewrite_values`). ``data``: the stored layout's entry order and
    dtype, on the current stream. Returns False, changing nothing, where that does not
    hold (the caller makes a new matrix)."""
    d = matrix.__dict__
    pending, mirrors = d.get("_sg_pending"), d.get("_sg_mirrors")
    if pending is None or mirrors is None or mirrors.shared is None:
        return False
    stored = pending.device
    if data.shape != stored.data.shape or data.dtype != stored.dtype:
        return False
    with MIRROR_LOCK:
        shared = mirrors.shared
        sharers = live_sharers(shared)
        if (
            d.get("_sg_pending") is not pending
            or pending.downloaded  # its host copy taken: that copy would be stale
            or len(sharers) != 1
            or sharers[0] is not matrix
            or shared.get((stored.residence.name, "stored")) is not stored
        ):
            return False
        stored.rewrite_values(data)
        for key in [k for k in shared if k != "sharers" and shared[k] is not stored]:
            del shared[key]
        cache = mirrors.cache
        if cache is not None:
            cache.mirrors = {k: m for k, m in cache.mirrors.items() if m is stored}
            kept = set(map(id, stored.plans.values()))
            cache.choices = {k: c for k, c in cache.choices.items() if id(c.plan) in kept}
            cache.reorderings.clear()
    return True


def invalidate(matrix) -> None:
    """``matrix``'s arrays are about to change: drop the mirrors of every matrix that shares
    a buffer with it (``A.T`` shares ``A``'s), its own included; a matrix without mirrors
    gets no state."""
    d = matrix.__dict__
    if "_sg_pending" in d:
        mirrors_of(matrix).materialise(matrix)
    mirrors = d.get("_sg_mirrors")
    roots = {root_id(d[n]) for n in ARRAY_NAMES if n in d}
    if mirrors is not None:
        roots.update(mirrors.roots)
    if (mirrors is None or mirrors.cache is None) and not is_held(roots):
        return  # no mirror here nor on any matrix sharing these buffers
    with MIRROR_LOCK:
        apply_forgotten()
        for root in roots:
            for other in holders_of(root):
                mirrors_of(other).release(other)
        if mirrors is not None:
            mirrors.release(matrix)


def mirrors_of(matrix) -> MatrixMirrors:
    """The matrix's mirror state (made on first use)."""
    mirrors = matrix.__dict__.get("_sg_mirrors")
    if mirrors is None:  # setdefault: two threads making it keep the same one
        mirrors = matrix.__dict__.setdefault("_sg_mirrors", MatrixMirrors())
    return mirrors


def has_device_arrays(shared) -> bool:
    """True when a shared dict holds a device copy (which a write leaves stale; host
    mirrors read the arrays themselves)."""
    return any(key != "sharers" for key in shared)


def arrays_of(matrix) -> list:
    d = matrix.__dict__
    return [d[n] for n in ARRAY_NAMES]


def _fingerprint(matrix) -> int:
    return _host_buffers.fingerprint(arrays_of(matrix))


def mark_exposed(root: int, holders: list) -> None:
    """Buffer ``root`` is being handed out: fingerprint its holders' arrays (those not
    fingerprinted since their last check), then mark it (call under MIRROR_LOCK)."""
    for matrix in holders:
        mirrors = mirrors_of(matrix)
        if mirrors.fingerprint is None:
            mirrors.fingerprint = _fingerprint(matrix)
    _host_buffers.exposed.add(root)


# Reads of the arrays by sparsegpu itself, whose results are copies or views it tracks
# (a transpose sharing the arrays): they expose nothing.
_internal = threading.local()


class reading_internally:
    def __enter__(self):
        _internal.depth = getattr(_internal, "depth", 0) + 1

    def __exit__(self, *exc):
        _internal.depth -= 1


def expose(value) -> None:
    """``value``, a matrix's array, is handed out: if a mirror holds its buffer, mark the
    buffer, so that the next product checks whether it was written (compiled code writes
    without Python seeing it)."""
    if not _host_buffers.held_any():  # every A.data read asks: the cheapest test first
        return
    root = _host_buffers.unmarked_root(value)
    if root is None or getattr(_internal, "depth", 0):
        return
    with MIRROR_LOCK:
        holders = holders_of(root)
        if holders:
            mark_exposed(root, holders)
