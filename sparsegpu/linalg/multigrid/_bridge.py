"""The sparsegpu pieces multigrid needs from the floors below it, all in one place.

Everything else in this package goes through the solvers' own modules
(``linalg._operator``) and this one; only here does it reach into the core: the classes and
their products (``sg.spgemm``, ``sg.galerkin_product``), where a matrix computes, its
canonical CSR arrays there, a sparsegpu matrix made from device arrays without a trip
through the host, and the elementwise steps read from ``kernels/*.cu`` and their registry.
(Importing ``sparsegpu`` itself from here would run up the floors: the package's face
imports the solvers.)
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...backends.spgemm import canonical as spgemm_canonical
from ...backends.spgemm import running_count
from ...classes._matrix import _SparseGPUMixin, csr_array, csr_matrix
from ...classes._mirrors import reading_internally, rewrite_device_values
from ...classes._products import galerkin_product, spgemm
from ...device import _cuda
from ...device._compare import arrays_equal
from ...device._compile import KernelFamily, get_kernel, register_elementwise, register_family
from ...device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, KernelLaunch, name_expression
from ...device._mirror import CUPY, DeviceMatrix
from ...engine import _planning
from ...engine._sparse_planning import repeating
from .._operator import Operator, as_operator
from .._vector import step_sources

reducible = _cuda.reducible

__all__ = [
    "CXX_INDEX_TYPES",
    "CXX_VALUE_TYPES",
    "KernelFamily",
    "KernelLaunch",
    "Operator",
    "as_operator",
    "canonical",
    "csr_arrays",
    "galerkin_product",
    "get_kernel",
    "cupy_or_none",
    "is_device_array",
    "matrix_from_arrays",
    "name_expression",
    "reducible",
    "register_elementwise",
    "register_family",
    "repeating",
    "running_count",
    "spgemm",
    "step_sources",
    "transpose",
    "where_computes",
    "with_values",
]


def cupy_or_none():
    """CuPy when a GPU is usable here, else None."""
    return _cuda.cupy_or_none()


def is_device_array(a) -> bool:
    return _cuda.is_cupy_array(a)


def where_computes(A):
    """numpy or cupy: where the products of the sparsegpu matrix ``A`` run (the module of
    the backend its products would take: a GPU backend's, or the host for ``scipy``).

    Read from selection's estimate, which is where an operator made without a
    right-hand side runs; no plan is made (a BSR matrix's plan built its block layout on
    the device, only for the matrix to be converted to CSR: part of the 22 ms an
    elasticity set-up spent before its first phase)."""
    return _planning.estimate(A).implementation.residence.xp


def canonical(A):
    """``A`` as a sparsegpu CSR matrix with sorted indices and no duplicates (a copy
    only when it has to change)."""
    if not isinstance(A, _SparseGPUMixin):
        A = csr_matrix(A)
    elif A.format == "bsr" and where_computes(A) is not np:
        A = _csr_of_blocks(A)
    elif A.format != "csr":
        with reading_internally():  # the conversion copies: nothing handed out
            A = A.tocsr()
    if where_computes(A) is not np:  # checked on the device mirror (kept as a mark)
        mirror = A._sg_mirror(CUPY, A.dtype)
        if spgemm_canonical(mirror) is mirror:
            return A
    with reading_internally():  # the check hands no array out: nothing to fingerprint
        done = A.has_canonical_format
    if not done:
        A = A.copy()
        A.sum_duplicates()
    return A


def _csr_of_blocks(A):
    """The CSR matrix of a BSR ``A`` that computes on the GPU, converted where its blocks
    are (scipy's conversion on the host read A's arrays, which then had to be
    fingerprinted for writes: 26 ms of an elasticity set-up)."""
    blocks = A._sg_mirror(CUPY, A.dtype)
    if blocks.format != "bsr":
        return A.tocsr()
    stored = spgemm_canonical(blocks.to_csr(sort_columns=True))
    kind = csr_matrix if isinstance(A, sp.spmatrix) else csr_array
    return kind._sg_on_device(stored, A.shape, A)


def csr_arrays(A, xp):
    """``(indptr, indices, data)`` of the canonical CSR matrix ``A`` in ``xp`` (the
    device mirror's arrays on the GPU: uploaded once, shared with A's products)."""
    if xp is np:
        with reading_internally():  # multigrid reads them and writes none: nothing exposed
            return A.indptr, A.indices, A.data
    mirror = A._sg_mirror(CUPY, A.dtype)
    return mirror.indptr, mirror.indices, mirror.data


def matrix_from_arrays(indptr, indices, data, shape, like):
    """A sparsegpu CSR matrix of these canonical CSR arrays (in numpy or cupy), with
    ``like``'s backend choice; on the GPU it stays there (host arrays made on first read)."""
    shape = (int(shape[0]), int(shape[1]))
    if not _cuda.is_cupy_array(data):
        with reading_internally():  # scipy's format check reads arrays multigrid made
            matrix = csr_matrix((data, indices, indptr), shape=shape)
        return like._sg_inherit(matrix)
    index_dtype = indptr.dtype
    stored = DeviceMatrix(data, indices.astype(index_dtype, copy=False), indptr, shape, CUPY)
    return csr_matrix._sg_on_device(stored, shape, like)


def transpose(P, previous=None, xp=None):
    """``P.T`` as its own CSR matrix (transposed where P lives, kept on the device; ``xp``
    where that is, when the caller knows). ``previous``: the transpose of an earlier P
    (this function's); where P has that P's pattern by construction (its index arrays,
    :func:`with_values`), the kept order makes this one a gather of P's values."""
    xp = xp or where_computes(P)
    if xp is np:
        return P._sg_inherit(csr_matrix(P.T.tocsr()))
    mirror = P._sg_mirror(CUPY, P.dtype)
    shape = (P.shape[1], P.shape[0])
    if previous is not None:
        kept = previous._sg_mirror(CUPY, previous.dtype)
        if kept.shape == shape and kept.dtype == mirror.dtype:
            gathered = kept.transposed_values(mirror)  # P of the kept pattern only
            if gathered is not None:
                if rewrite_device_values(previous, gathered.data):
                    return previous  # its plans kept (see with_values)
                return csr_matrix._sg_on_device(gathered, shape, P)
    return csr_matrix._sg_on_device(mirror.transpose(keep_order=True), shape, P)


def with_values(previous, values=None, fresh=None, xp=None):
    """A matrix of ``previous``'s pattern with new values, which planning and products
    take without a pass over it: ``values`` in previous's entry order, or a ``fresh``
    matrix's (a product of the same pattern pair, which has the same pattern).
    ``previous`` itself with the values written in place where it is a result kept on the
    device that nothing else shares (:func:`rewrite_device_values`: its plans kept), else a
    new matrix (:meth:`DeviceMatrix.with_values`: the pattern's statistics and keys kept).
    None where that cannot be (on the host, other sizes): the caller keeps what it has.
    ``xp``: where previous computes, when the caller knows."""
    if (xp or where_computes(previous)) is np:
        return None
    kept = previous._sg_mirror(CUPY, previous.dtype)
    written_by = None
    if fresh is not None:
        written_by = fresh._sg_mirror(CUPY, fresh.dtype)
        if fresh.shape != previous.shape or written_by.nnz != kept.nnz:
            return None
        if not (  # the same pattern, checked (an identity, or kernels/compare.cu)
            arrays_equal(written_by.indices, kept.indices)
            and arrays_equal(written_by.indptr, kept.indptr)
        ):
            return None
        values = written_by.data
    if values.shape != kept.data.shape or values.dtype != kept.dtype:
        return None
    if rewrite_device_values(previous, values):
        # the values written into previous's own: its SpMV plans stay (a level's next
        # products select and plan nothing), where it is a matrix of the hierarchy's own
        return previous
    stored = kept.with_values(values, written_by)
    return type(previous)._sg_on_device(stored, previous.shape, previous)
