"""Row partitions: contiguous row blocks balanced by nonzeros (PETSc's MPIAIJ layout)."""

from __future__ import annotations

import numpy as np


def balanced_offsets(indptr: np.ndarray, parts: int) -> np.ndarray:
    """Row offsets (``parts + 1`` of them) splitting the rows into contiguous blocks of
    about equal work, a row's work being its nonzeros plus one.

    The plus one splits rows evenly where there are no nonzeros; a row is never split,
    so one very long row makes its block heavier than the others, and with more parts
    than rows some blocks are empty.

    Examples
    --------
    >>> import numpy as np
    >>> balanced_offsets(np.array([0, 1, 2, 3, 4]), 2).tolist()
    [0, 2, 4]
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    n_rows = indptr.size - 1
    work = indptr + np.arange(n_rows + 1, dtype=np.int64)  # cumulative work before each row
    targets = work[-1] * np.arange(1, parts, dtype=np.float64) / parts
    inner = np.searchsorted(work, targets, side="left")
    return np.concatenate(([0], np.minimum(inner, n_rows), [n_rows])).astype(np.int64)


def even_offsets(n: int, parts: int) -> np.ndarray:
    """Offsets splitting ``n`` entries into ``parts`` contiguous blocks of equal size (+-1)."""
    return (np.arange(parts + 1, dtype=np.int64) * n) // parts


def check_offsets(offsets, n: int, parts: int, what: str) -> np.ndarray:
    """``offsets`` as int64, checked: ``parts + 1`` non-decreasing values from 0 to ``n``."""
    array = np.asarray(offsets)
    if array.shape != (parts + 1,) or array.dtype.kind not in "iu":
        raise ValueError(
            f"{what} must be {parts + 1} integers (one more than the {parts} ranks), got "
            f"{offsets!r}"
        )
    array = array.astype(np.int64)
    if array[0] != 0 or array[-1] != n or np.any(np.diff(array) < 0):
        raise ValueError(f"{what} must rise from 0 to {n} without going down, got {array.tolist()}")
    return array


def owners(offsets: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The block (rank) holding each global ``index`` under ``offsets``."""
    return np.searchsorted(offsets, index, side="right") - 1
