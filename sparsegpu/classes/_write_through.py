"""The host arrays a matrix hands out while a mirror holds them: writes reach the mirror.

While a matrix has a mirror, its ``data``/``indices``/``indptr`` buffers are read-only (a
GPU copy of them must not go stale). ``A.data`` then returns a :class:`WriteThroughArray`
view: an in-place write through it, the idiom of Newton and time-stepping codes written
for scipy (``A.data[:] = new_values``, ``A.data *= 2``, ``A.data.fill(0)``), first drops
the mirrors of every matrix sharing the buffer, gives the buffer back, then writes; the
next product builds a new mirror from the new values. Everything else behaves as a plain
``numpy.ndarray``: arithmetic on it returns plain arrays.
"""

from __future__ import annotations

import weakref

import numpy as np


class WriteThroughArray(np.ndarray):
    """A read-only view of a matrix's host array whose in-place writes drop the mirror first.

    Item assignment, ``fill``, ``put``, ``sort`` and ufuncs with ``out=`` (``+=``, ``*=``,
    ``np.multiply(a, b, out=A.data)``) work; other writers (``np.copyto``, ``ctypes``)
    still meet numpy's read-only error, never a stale product.
    """

    _sg_owner: weakref.ref | None = None

    def __array_finalize__(self, obj):
        # views of it (``A.data[2:5]``) write through too; copies are plain arrays' copies
        owner = getattr(obj, "_sg_owner", None)
        if owner is not None and np.may_share_memory(self, obj):
            self._sg_owner = owner

    def _sg_release(self) -> None:
        """Drop the owner's mirrors and make this view writable, before a write."""
        if self.flags.writeable:
            return
        owner = self._sg_owner() if self._sg_owner is not None else None
        if owner is None:
            return  # the matrix is gone; a still-locked buffer keeps numpy's error
        owner._sg_invalidate()
        try:
            self.flags.writeable = True
        except ValueError:  # read-only before sparsegpu saw it: numpy refuses the write
            pass

    def __setitem__(self, key, value):
        self._sg_release()
        super().__setitem__(key, value)

    def fill(self, value):
        self._sg_release()
        super().fill(value)

    def put(self, *args, **kwargs):
        self._sg_release()
        super().put(*args, **kwargs)

    def sort(self, *args, **kwargs):
        self._sg_release()
        super().sort(*args, **kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if out is not None:
            for array in out:
                if isinstance(array, WriteThroughArray):
                    array._sg_release()
            kwargs["out"] = tuple(_plain(a) for a in out)
        result = getattr(ufunc, method)(*(_plain(a) for a in inputs), **kwargs)
        if out is not None and len(out) == 1 and isinstance(out[0], WriteThroughArray):
            return out[0]  # ``a += 1`` rebinds ``a`` to what this returns
        return result

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))

    def __reduce__(self):  # pickles as the plain array it shows
        return self.view(np.ndarray).copy().__reduce__()


def _plain(a):
    return a.view(np.ndarray) if isinstance(a, WriteThroughArray) else a


def write_through(array: np.ndarray, owner) -> np.ndarray:
    """``array`` as a :class:`WriteThroughArray` view owned by matrix ``owner``."""
    view = array.view(WriteThroughArray)
    view._sg_owner = weakref.ref(owner)
    return view
