"""Strength of connection, aggregation and the tentative prolongator, as array code.

Every function here takes CSR arrays in one array module ``xp`` (numpy or cupy) and
returns arrays in it: the same code runs on the host and on the GPU, with no loop over
rows or aggregates (a loop over rounds of the independent-set search, a handful of them,
is the only one).

* :func:`symmetric_strength`: PyAMG's ``('symmetric', {'theta': theta})``, the node graph
  of ``|a_ij| >= theta sqrt(|a_ii a_jj|)``; for block matrices (``blocksize`` unknowns a
  node) on the blocks' Frobenius norms, as PyAMG amalgamates a BSR matrix.
* :func:`mis2_aggregate`: aggregates grown around a distance-2 maximal independent set
  (MIS-2) of the strength graph, found in parallel rounds with random priorities (Bell,
  Dalton and Olson, "Exposing fine-grained parallelism in algebraic multigrid methods",
  SIAM J. Sci. Comput. 2012): every root takes its neighbours, then every node left joins
  an aggregate next to it. Nodes without strong neighbours stay out of every aggregate
  (a zero row of the prolongator), as in PyAMG's standard aggregation.
* :func:`tentative_prolongator`: the near-null space ``B`` restricted to each aggregate and
  orthonormalised there (PyAMG's ``fit_candidates``), here from the eigendecomposition of
  each aggregate's k x k Gram matrix, batched; the coarse near-null space comes with it.
"""

from __future__ import annotations

import numpy as np

from ...device._rows import row_ids
from ._bridge import (
    CXX_INDEX_TYPES,
    CXX_VALUE_TYPES,
    KernelFamily,
    get_kernel,
    name_expression,
    reducible,
    register_family,
    running_count,
)

# The row-wise steps on the GPU (kernels/aggregation.cu): a thread a row
AGGREGATION = "aggregation.cu"
_VALUE_KERNELS = ("csr_diagonal", "strength_count", "strength_fill", "jacobi_prolongator")
register_family(
    KernelFamily(
        AGGREGATION,
        tuple(
            name_expression(kernel, value, index)
            for kernel in _VALUE_KERNELS
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
        )
        + tuple(f"spread_max<{index}>" for index in CXX_INDEX_TYPES.values()),
    )
)
ROW_BLOCK = 256


def _rows_kernel(name: str, n_rows: int, indptr, data=None):
    """Launch ``name`` of kernels/aggregation.cu over ``n_rows`` rows (a thread a row):
    a function of the kernel's arguments."""
    if data is not None:
        name = name_expression(name, data.dtype, indptr.dtype)
    else:  # spread_max: the index type only
        name = f"{name}<{CXX_INDEX_TYPES[np.dtype(indptr.dtype)]}>"
    kernel = get_kernel(AGGREGATION, name)
    blocks = max(1, min(-(-n_rows // ROW_BLOCK), 1 << 20))
    return lambda *arguments: kernel((blocks,), (ROW_BLOCK,), arguments)


def diagonal(indptr, indices, data, xp):
    """The diagonal of a square canonical CSR matrix (zeros where none is stored)."""
    n = int(indptr.shape[0]) - 1
    if xp is not np:
        d = xp.empty(n, dtype=data.dtype)
        _rows_kernel("csr_diagonal", n, indptr, data)(indptr, indices, data, np.int64(n), d)
        return d
    rows = row_ids(indptr, xp)
    on = indices == rows
    d = xp.zeros(n, dtype=data.dtype)
    d[rows[on]] = data[on]
    return d


def jacobi_smoothing(indptr, indices, data, d, scale: float, xp):
    """The values of ``I - scale D^-1 A`` on A's (canonical) pattern, ``d`` A's diagonal."""
    if xp is not np:
        n = int(indptr.shape[0]) - 1
        out = xp.empty_like(data)
        launch = _rows_kernel("jacobi_prolongator", n, indptr, data)
        launch(indptr, indices, data, 1 / d, np.float64(scale), np.int64(n), out)
        return out
    rows = row_ids(indptr, xp)
    return (-scale) * data / d[rows] + (indices == rows)


def _csr_from_mask(indptr, indices, keep, xp):
    """The CSR pattern of the entries ``keep`` selects: its row offsets are the running
    count of kept entries read at ``indptr`` (:func:`~sparsegpu.backends.spgemm.running_count`)."""
    return running_count(keep, xp)[indptr].astype(indptr.dtype), indices[keep]


def symmetric_strength(indptr, indices, data, theta: float, blocksize: int, xp):
    """The strength graph ``(indptr, indices)`` of nodes (``blocksize`` unknowns each),
    without its diagonal: the pairs with ``|a_ij| >= theta * sqrt(|a_ii| |a_jj|)``."""
    if xp is not np and blocksize == 1:
        return _strength_by_rows(indptr, indices, data, theta, xp)
    rows = row_ids(indptr, xp)
    values = xp.abs(data)
    cols = indices
    n = (int(indptr.shape[0]) - 1) // blocksize
    if blocksize > 1:
        # amalgamate: one entry per pair of nodes, its block's Frobenius norm
        node_rows, node_cols = rows // blocksize, cols // blocksize
        key = node_rows.astype(np.int64) * n + node_cols
        pairs, inverse = xp.unique(key, return_inverse=True)
        squares = xp.zeros(pairs.shape[0], dtype=values.dtype)
        xp.add.at(squares, inverse.ravel(), values * values)
        rows = (pairs // n).astype(indptr.dtype)
        cols = (pairs % n).astype(indices.dtype)
        values = xp.sqrt(squares)
        # the pairs are sorted by row: each row's first pair found by a binary search
        bounds = xp.arange(n + 1, dtype=rows.dtype)
        indptr = xp.searchsorted(rows, bounds, side="left").astype(indptr.dtype)
    on = cols == rows
    d = xp.zeros(n, dtype=values.dtype)
    d[rows[on]] = values[on]
    keep = ~on
    if theta > 0:
        keep &= values * values >= (theta * theta) * d[rows] * d[cols]
    return _csr_from_mask(indptr, cols, keep, xp)


def _strength_by_rows(indptr, indices, data, theta: float, xp):
    """:func:`symmetric_strength` of a scalar matrix on the GPU: its rows' kept entries
    counted, then written (``strength_count``, ``strength_fill``)."""
    n = int(indptr.shape[0]) - 1
    magnitude = xp.abs(diagonal(indptr, indices, data, xp))
    theta2 = magnitude.dtype.type(theta * theta)
    counts = xp.empty(n, dtype=indptr.dtype)
    _rows_kernel("strength_count", n, indptr, data)(
        indptr, indices, data, magnitude, theta2, np.int64(n), counts
    )
    pointer = xp.zeros(n + 1, dtype=indptr.dtype)
    pointer[1:] = xp.cumsum(counts)
    kept = xp.empty(int(pointer[-1]), dtype=indices.dtype)
    _rows_kernel("strength_fill", n, indptr, data)(
        indptr, indices, data, magnitude, theta2, np.int64(n), pointer, kept
    )
    return pointer, kept


def _spread_max(key, graph, xp):
    """``max(key[i], max over neighbours j of key[j])`` for every node i of the symmetric
    ``graph`` (indptr, indices, each entry's row); unsigned keys: CuPy's scatter-max
    takes uint64, not int64. On the GPU gathered by rows (``spread_max``)."""
    indptr, cols, rows = graph
    if xp is not np:
        n = key.shape[0]
        out = xp.empty_like(key)
        _rows_kernel("spread_max", n, indptr)(indptr, cols, key, np.int64(n), out)
        return out
    out = key.copy()
    xp.maximum.at(out, rows, key[cols])
    return out


def mis2_aggregate(indptr, indices, xp, seed: int = 0):
    """Aggregates of the strength graph ``(indptr, indices)`` (symmetric, no diagonal).

    Returns
    -------
    aggregate : array of int64, one per node
        The node's aggregate (0..count-1), or -1 for a node with no strong neighbour.
    count : int
    """
    n = int(indptr.shape[0]) - 1
    graph = (indptr, indices, row_ids(indptr, xp) if xp is np else None)
    isolated = xp.diff(indptr) == 0
    # priorities: a random permutation (distinct keys), 0 once out, n + 1 once a root
    priority = xp.random.RandomState(seed).permutation(n).astype(np.uint64) + np.uint64(1)
    key = xp.where(isolated, np.uint64(0), priority)
    root_key = np.uint64(n + 1)
    while True:
        undecided = (key > 0) & (key < root_key)
        if not bool(reducible(undecided).any()):
            break
        near = _spread_max(_spread_max(key, graph, xp), graph, xp)
        key = xp.where(undecided & (near == key), root_key, key)
        key = xp.where(undecided & (near == root_key) & (key != root_key), np.uint64(0), key)
    roots = key == root_key
    count = int(reducible(roots).sum())
    # aggregate numbers shifted by one (0: none yet): the roots', then their neighbours'
    # (one root within distance 1: roots are 3 apart), then the rest join a neighbour's
    shifted = xp.where(roots, xp.cumsum(roots), 0).astype(np.uint64)
    shifted = _spread_max(shifted, graph, xp)
    second = _spread_max(shifted, graph, xp)
    shifted = xp.where(shifted > 0, shifted, second)
    aggregate = xp.where(isolated, -1, shifted.astype(np.int64) - 1)
    left = (aggregate < 0) & ~isolated  # only on a graph that is not symmetric
    extra = int(reducible(left).sum())
    if extra:
        aggregate = xp.where(left, count + xp.cumsum(left) - 1, aggregate)
        count += extra
    return aggregate, count


def _scatter_add(out, rows, values, xp) -> None:
    """``out[rows[i]] += values[i]`` (rows repeating), complex values too: CuPy's
    ``add.at`` takes real types only, so a complex pair is added as two reals (the
    arrays seen as their real and imaginary parts side by side)."""
    if xp is not np and xp.iscomplexobj(out):
        real = out.real.dtype
        out, values = out.view(real), xp.ascontiguousarray(values).view(real)
    xp.add.at(out, rows, values)


def tentative_prolongator(aggregate, count: int, B, blocksize: int, xp):
    """The tentative prolongator T (CSR arrays) and the coarse near-null space.

    ``B`` (n x k, ``blocksize`` rows a node) restricted to each aggregate is written
    ``B_a = Q_a R_a`` with orthonormal columns ``Q_a`` (columns of a rank-deficient
    aggregate left zero); T holds the Q_a (k columns an aggregate), the coarse B the R_a.

    Returns
    -------
    (indptr, indices, data), shape, coarse_B
    """
    n, k = B.shape
    dof_aggregate = xp.repeat(aggregate, blocksize)
    assigned = dof_aggregate >= 0
    target = xp.where(assigned, dof_aggregate, 0)
    gram = xp.zeros((count, k, k), dtype=B.dtype)
    kept_B = xp.where(assigned[:, None], B, 0)  # a node of no aggregate adds nothing
    for p in range(k):  # row p of each aggregate's Gram matrix from column p on: one scatter
        # (a scatter per entry was k (k + 1) / 2 of them: 21 for rigid-body modes, a tenth
        # of an elasticity set-up in launches)
        row = xp.zeros((count, k - p), dtype=B.dtype)
        _scatter_add(row, target, kept_B[:, p : p + 1].conj() * kept_B[:, p:], xp)
        gram[:, p, p:] = row
        gram[:, p:, p] = row.conj()
    if k == 1:
        norm = xp.sqrt(gram[:, 0, 0].real)
        positive = norm > 0
        scale = xp.where(positive, 1 / xp.where(positive, norm, 1), 0)
        Q = B * scale[target][:, None]
        coarse = norm.astype(B.dtype).reshape(count, 1)
    else:
        values, vectors = xp.linalg.eigh(gram)
        largest = values.max(axis=1, keepdims=True)
        kept = values > 1e-10 * xp.maximum(largest, np.finfo(np.float64).tiny)
        root = xp.sqrt(xp.where(kept, values, 0))
        inverse_root = xp.where(kept, 1 / xp.where(kept, root, 1), 0)
        # Q_i = B_i V diag(1/sqrt(lambda)); R_a = diag(sqrt(lambda)) V^H
        basis = vectors * inverse_root[:, None, :]
        Q = xp.einsum("ij,ijk->ik", B, basis[target])
        coarse = (root[:, :, None] * vectors.conj().transpose(0, 2, 1)).reshape(count * k, k)
    lengths = xp.where(assigned, k, 0)
    indptr = xp.zeros(n + 1, dtype=np.int32 if count * k < 2**31 and n * k < 2**31 else np.int64)
    indptr[1:] = xp.cumsum(lengths)
    columns = (dof_aggregate[assigned][:, None] * k + xp.arange(k)).ravel()
    data = Q[assigned].ravel()
    return (indptr, columns.astype(indptr.dtype), data), (n, count * k), coarse
