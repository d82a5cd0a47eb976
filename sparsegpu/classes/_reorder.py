"""Locality reordering: a symmetric permutation that brings a matrix's nonzeros near the
diagonal, so that a product's reads of x are neighbours instead of gathers.

Reverse Cuthill-McKee from ``scipy.sparse.csgraph`` on the symmetrized pattern
(``|A| + |A|^T``): a mesh numbered in random order gets its band back. Measured on the
H200, a 3-D 7-point mesh in random order runs the product at 36% of copy bandwidth,
about 90% in natural order (issue 15).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..device import _cuda
from ..device._rows import row_ids
from ._matrix import _SparseGPUMixin

METHODS = ("rcm",)


def rcm_permutation(A, symmetric: bool = False) -> np.ndarray:
    """The reverse Cuthill-McKee ordering of the square matrix ``A``'s symmetrized pattern
    (int64 ``perm``: row ``i`` of the reordered matrix is row ``perm[i]`` of A).

    ``symmetric=True`` says A's pattern is symmetric already (a Hermitian matrix: what
    ``cg`` and ``minres`` require), so ``|A| + |A|^T`` is not formed: about a fifth of
    the ordering's time on a large mesh, and the same ordering where A's column indices
    are sorted. On a pattern that is not symmetric it is still a valid permutation, only
    possibly a worse one."""
    S = sp.csr_matrix(A)
    if S.shape[0] != S.shape[1]:
        raise ValueError(
            f"reordering needs a square matrix, got shape {S.shape}; a symmetric "
            "permutation of a rectangular matrix does not exist"
        )
    pattern = sp.csr_matrix((np.ones(S.nnz, dtype=np.int8), S.indices, S.indptr), shape=S.shape)
    if not symmetric:
        pattern = (pattern + pattern.T).tocsr()
    # imported here: csgraph imports scipy.sparse.linalg and scipy.linalg (0.1 s)
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    return np.asarray(reverse_cuthill_mckee(pattern, symmetric_mode=True), dtype=np.int64)


#: Matrices with at least this many nonzeros are permuted on the GPU when there is one
#: (on the H200 scipy's ``S[perm][:, perm]`` took 5.3 s of a 109M-nonzero mesh's first
#: reordered solve).
DEVICE_PERMUTE_MIN_NNZ = 1 << 20


def _permuted_on_device(S: sp.csr_matrix, perm: np.ndarray, cupy) -> sp.csr_matrix:
    """``S[perm][:, perm]`` computed with CuPy and brought back: new row i is old row
    perm[i] with its columns renumbered through the inverse permutation (in the row's own
    order, then sorted as scipy keeps them)."""
    n = S.shape[0]
    indptr = cupy.asarray(S.indptr.astype(np.int64, copy=False))
    p = cupy.asarray(perm)
    inverse = cupy.empty_like(p)
    inverse[p] = cupy.arange(n, dtype=p.dtype)
    new_indptr = cupy.zeros(n + 1, dtype=cupy.int64)
    cupy.cumsum((indptr[1:] - indptr[:-1])[p], out=new_indptr[1:])
    k = cupy.arange(S.nnz, dtype=cupy.int64)
    rows = row_ids(new_indptr, cupy, nnz=S.nnz)
    positions = k - new_indptr[rows] + indptr[p[rows]]
    del k, rows
    indices = inverse[cupy.asarray(S.indices)[positions]].astype(S.indices.dtype)
    data = cupy.asarray(S.data)[positions]
    B = sp.csr_matrix(
        (data.get(), indices.get(), new_indptr.astype(S.indptr.dtype).get()), shape=S.shape
    )
    B.sort_indices()
    return B


def _permuted(S: sp.csr_matrix, perm: np.ndarray) -> sp.csr_matrix:
    cupy = _cuda.cupy_or_none() if S.nnz >= DEVICE_PERMUTE_MIN_NNZ else None
    if cupy is not None:
        try:
            return _permuted_on_device(S, perm, cupy)
        except cupy.cuda.memory.OutOfMemoryError:
            pass  # too large for what the device has free: the host does it
    return S[perm][:, perm]


def permute(A, perm: np.ndarray):
    """``A[perm][:, perm]`` as the same sparsegpu class as A (backend kept); computed on
    the GPU for large matrices when there is one."""
    S = _permuted(sp.csr_matrix(A), np.asarray(perm, dtype=np.int64))
    B = type(A)(S.asformat(A.format)) if isinstance(A, _SparseGPUMixin) else S
    if isinstance(A, _SparseGPUMixin):
        B.backend = A.backend
    return B


def reorder(A, method: str = "rcm", *, symmetric: bool = False):
    """A symmetric locality reordering of the square sparse matrix ``A``.

    Parameters
    ----------
    A : sparsegpu or scipy sparse matrix, square
    method : {"rcm"}
        ``"rcm"``: reverse Cuthill-McKee (``scipy.sparse.csgraph``) on the symmetrized
        pattern.
    symmetric : bool, optional
        A's pattern is known to be symmetric (A Hermitian): the symmetrized pattern is not
        formed, which saves time on large matrices (see :func:`rcm_permutation`).

    Returns
    -------
    B : matrix of A's class
        ``A[perm][:, perm]``: solve ``B y = b[perm]``, then ``x[perm] = y``.
    perm : numpy.ndarray of int64

    Examples
    --------
    >>> import numpy as np, sparsegpu as sg
    >>> from sparsegpu.datasets.synthetic import stencil_2d
    >>> A = stencil_2d(10)
    >>> shuffle = np.random.default_rng(0).permutation(A.shape[0])
    >>> scrambled = sg.csr_matrix(A[shuffle][:, shuffle])
    >>> B, perm = sg.reorder(scrambled)
    >>> bool((B != scrambled[perm][:, perm]).nnz == 0)
    True
    """
    if method not in METHODS:
        raise ValueError(f"unknown reordering method {method!r}; use one of {METHODS}")
    perm = rcm_permutation(A, symmetric=symmetric)
    return permute(A, perm), perm
