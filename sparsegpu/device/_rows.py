"""The row of every stored entry of a CSR matrix, on the host or the GPU (the multigrid
set-up's strength and diagonal, the synthetic matrices, the block structure's counts, a
reordering, the distributed split all read it)."""

from __future__ import annotations

import numpy as np


def row_ids(indptr, xp=np, dtype=None, nnz: int | None = None):
    """The row of each of the ``nnz`` entries (``indptr[-1]``, read from the device where
    not given) of a CSR matrix of row offsets ``indptr``, in ``dtype`` (``indptr``'s by
    default): on the host by ``repeat``; on the GPU by a binary search of each entry in
    ``indptr`` (CuPy's ``repeat`` takes its counts from the host)."""
    dtype = indptr.dtype if dtype is None else np.dtype(dtype)
    if xp is np:
        return np.repeat(np.arange(indptr.shape[0] - 1, dtype=dtype), np.diff(indptr))
    entries = xp.arange(int(indptr[-1]) if nnz is None else nnz, dtype=indptr.dtype)
    return (xp.searchsorted(indptr, entries, side="right") - 1).astype(dtype, copy=False)
