"""Host arrays made on first use: a product result kept where it was computed.

A sparse product of GPU operands (``A @ B``) leaves its result on the device. The result is
a sparsegpu class like any other, but its ``data``/``indices``/``indptr`` are not in its
``__dict__`` yet: a :class:`PendingArrays` holds the device copy instead, and the first
read of one of them (by the user, by scipy, by pickling) downloads all three at once. A
product or a solve on the result uses the device copy directly, so ``A @ B @ C`` never
round-trips through the host.

Matrices that share their arrays (a result and its ``.T``) share one PendingArrays, so they
download once and get the same host arrays, as scipy's transposes share theirs.
"""

from __future__ import annotations

import threading

import numpy as np

from . import _cuda, _staging
from ._mirror import DeviceMatrix


class PendingArrays:
    """The device copy of a matrix whose host arrays are not made yet.

    Attributes
    ----------
    device : DeviceMatrix
        The CSR arrays of the matrix's stored layout (its own for CSR, its transpose's for
        CSC), canonical: sorted column indices, no duplicates.
    """

    __slots__ = ("device", "_host", "_lock")

    def __init__(self, device: DeviceMatrix):
        self.device = device
        self._host: tuple | None = None
        self._lock = threading.Lock()

    @property
    def dtype(self) -> np.dtype:
        return self.device.dtype

    @property
    def nnz(self) -> int:
        return self.device.nnz

    @property
    def index_dtype(self) -> np.dtype:
        return self.device.index_dtype

    def host(self) -> tuple:
        """``(data, indices, indptr)`` on the host, downloaded once."""
        with self._lock:
            if self._host is None:
                d = self.device
                d.settle()  # the product writing it may run on another stream
                self._host = tuple(_download(a) for a in (d.data, d.indices, d.indptr))
            return self._host

    @property
    def downloaded(self) -> bool:
        """Whether the host arrays are made (a matrix taking them now, or one holding them)."""
        return self._host is not None

    def forget_host(self) -> None:
        """Drop this object's references to the host arrays (every sharer has taken
        them), so that they are referenced by the matrices alone."""
        with self._lock:
            self._host = None


def _download(a) -> np.ndarray:
    """A host copy of a device array in ordinary memory (a private copy of a host one)."""
    if _cuda.is_cupy_array(a):
        return _staging.download_pageable(a)
    return np.array(a, copy=True)
