"""Row partitions: contiguous row blocks balanced by nonzeros (PETSc's MPIAIJ layout), or
the parts of a graph partition (METIS, through pymetis) for irregular matrices."""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp


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


PARTITIONS = ("rows", "graph")


def check_partition(partition) -> str:
    if partition not in PARTITIONS:
        raise ValueError(
            f"partition must be one of {', '.join(map(repr, PARTITIONS))}, got {partition!r}"
        )
    return partition


def graph_order(S, parts: int):
    """A graph partition of square ``S`` into ``parts`` (METIS through pymetis, on the
    symmetrized pattern, vertices weighted by their row's work), as ``(order, offsets,
    note)``: new row k is S's row ``order[k]``, part r holds new rows
    ``offsets[r]:offsets[r + 1]``, and ``note`` says what was done.

    Without pymetis (``pip install -e ".[partition]"``) the rows stay in order and are
    split into contiguous blocks balanced by nonzeros, with a warning (``order`` None).
    """
    if S.shape[0] != S.shape[1]:
        raise ValueError(
            f"partition='graph' needs a square matrix (its pattern is a graph), got shape "
            f"{S.shape}; use partition='rows'"
        )
    n = S.shape[0]
    try:
        import pymetis
    except ImportError as exc:
        note = (
            f"graph partition asked for, but pymetis is not installed ({exc}; pip install "
            "pymetis): contiguous row blocks balanced by nonzeros instead"
        )
        warnings.warn(note, RuntimeWarning, stacklevel=3)
        return None, balanced_offsets(S.indptr, parts), note
    if parts == 1 or n <= parts:
        why = "one rank" if parts == 1 else f"{n} rows for {parts} ranks"
        return None, balanced_offsets(S.indptr, parts), f"graph: nothing to partition ({why})"
    pattern = sp.csr_matrix((np.ones(S.nnz, dtype=np.int8), S.indices, S.indptr), shape=S.shape)
    graph = (pattern + pattern.T).tocsr()
    graph.setdiag(0)
    graph.eliminate_zeros()
    weights = (np.diff(S.indptr) + 1).astype(np.int64)
    starts, adjacent = graph.indptr.astype(np.int64), graph.indices.astype(np.int64)
    if hasattr(pymetis, "CSRAdjacency"):
        result = pymetis.part_graph(parts, pymetis.CSRAdjacency(starts, adjacent), vweights=weights)
    else:
        result = pymetis.part_graph(parts, xadj=starts, adjncy=adjacent, vweights=weights)
    cut, membership = result[0], np.asarray(result[1], dtype=np.int64)
    order = np.argsort(membership, kind="stable")
    counts = np.bincount(membership, minlength=parts)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return order, offsets, f"graph: METIS (pymetis), {int(cut):,} edges cut"


def permute(S, order: np.ndarray):
    """``S[order][:, order]`` (rows and columns renumbered alike), indices sorted."""
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size, dtype=order.dtype)
    rows = S[order]
    rows.indices = inverse[rows.indices].astype(rows.indices.dtype, copy=False)
    rows.has_sorted_indices = False
    rows.sort_indices()
    return rows
