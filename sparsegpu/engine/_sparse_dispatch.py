"""Dispatch of sparse products ``A @ B``: where they compute, and their operands there.

A product goes to the GPU when ``A`` (the left operand, as scipy lets the left operand
decide) is a sparsegpu matrix whose backend in force (``A.backend``, ``use_backend``,
``SPARSEGPU_BACKEND``, ``auto``) computes on a residence that has a SpGEMM engine (the
GPU backends, and ``auto`` with a usable GPU), and the result's dtype is one the engine
computes (float32, float64, complex64, complex128). Otherwise scipy computes it on the
host, as ever: under ``use_backend("scipy")`` ``A @ B`` is scipy's product exactly.

The operands reach the engine as CSR mirrors of the *stored layout* of the result (see
:meth:`operands`), so that a CSC left operand (``A.T``, ``P.T``) gives a CSC result as it
does in scipy, and neither ``A.T @ A`` nor ``P.T @ A @ P`` forms a transpose on the host:
a transpose is built once on the device and shared by every ``A.T``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..backends import cusparse, spgemm
from ..backends.hash_spgemm import GpuSpgemm
from ..device import _cuda
from ..device._mirror import CUPY, DeviceMatrix
from . import _sparse_planning
from ._planning import level_in_force
from ._registry import AUTO, get_backend
from ._select import name_in_force, result_dtype
from ._sparse_planning import SpgemmPlan


def where(A, B):
    """``(engine, residence, value dtype, reason)`` of ``A @ B``; the engine is None (and
    the reason says why) when scipy computes it on the host."""
    value_dtype = result_dtype(A.dtype, B.dtype)
    name = name_in_force(None, A._sg_backend)
    if name == AUTO:
        reason = _cuda.unavailable_reason()
        if reason is not None:
            return None, None, value_dtype, f"no GPU ({reason})"
        residence = CUPY
    else:
        residence = get_backend(name).residence
        if not residence.copies:
            return None, None, value_dtype, f"backend {name!r} computes on the host"
    engine = engine_for(residence)
    if engine is None:
        return None, None, value_dtype, f"no SpGEMM engine where backend {name!r} computes"
    if value_dtype not in engine.value_dtypes:
        takes = ", ".join(map(str, engine.value_dtypes))
        return None, None, value_dtype, f"the GPU computes {takes}, not {value_dtype}"
    return engine, residence, value_dtype, f"backend {name!r}"


# the GPU's engine: cuSPARSE's algorithms and our hash rows (no CUDA work until it computes)
_GPU_ENGINE = GpuSpgemm()


def engine_for(residence) -> spgemm.SpgemmEngine | None:
    """The usable SpGEMM engine of ``residence`` (one registered for it, else the GPU's for
    the GPU), or None: scipy computes the product."""
    engine = spgemm.registered_engine(residence.name)
    if engine is None and residence.name == CUPY.name:
        engine = _GPU_ENGINE
    if engine is None or engine.unavailable_reason() is not None:
        return None
    return engine


def operands(A, B, residence, value_dtype, as_csr=False) -> tuple[DeviceMatrix, DeviceMatrix]:
    """``(left, right)``: CSR mirrors whose product is the stored layout of ``A @ B``.

    For a CSR ``A`` (or ``as_csr``) that is ``A @ B`` itself; for a CSC ``A`` (whose
    arrays are the CSR arrays of ``A.T``) it is ``(A @ B).T = B.T @ A.T``, the arrays of a
    CSC result.
    """
    if A.format == "csr" or as_csr:
        return _csr(A, residence, value_dtype), _csr(B, residence, value_dtype)
    return _csr(B, residence, value_dtype, True), _csr(A, residence, value_dtype, True)


def _csr(M, residence, value_dtype, transpose: bool = False) -> DeviceMatrix:
    """The CSR mirror of ``M`` (of ``M.T`` with ``transpose``) at ``residence``: a
    sparsegpu matrix's own (kept, a transpose made once on the device from the arrays it
    shares with its views), a scipy matrix's (or a BSR one's CSR form) uploaded for this
    product.

    A BSR operand is converted on the host and uploaded for each product rather than
    given a kept mirror: scipy's ``getrow`` of a BSR matrix is such a product (a one-row
    selector times it), and a mirror kept on a matrix only read that way would hold the
    whole matrix on the device (and fail scipy's pickling test, which compares every
    instance attribute)."""
    if hasattr(M, "_sg_mirror") and M.format != "bsr":
        mirror = M._sg_mirror(residence, value_dtype, transpose)
        if transpose and M.format == "csr":
            _known_from_the_matrix(mirror, M._sg_mirror(residence, value_dtype))
        return mirror
    M = (M.transpose() if transpose else M).tocsr()
    return DeviceMatrix.from_host(
        M.data, M.indices, M.indptr, M.shape, residence, value_dtype=value_dtype
    )


def _known_from_the_matrix(transpose: DeviceMatrix, stored: DeviceMatrix) -> None:
    """What the transpose's mirror can take from its matrix's without a pass over it: the
    transpose (:func:`transposed`) of a canonical matrix is canonical (one check, of the
    matrix), its pattern is the matrix's, so its pattern key derives from theirs, and its
    columns are the matrix's rows."""
    if "canonical" not in transpose.formats and spgemm.canonical(stored) is stored:
        spgemm.mark_canonical(transpose)
    transpose.column_bound = stored.known_longest_row
    key = stored.formats.get("pattern_key")
    if key is not None:
        derived = (transpose.shape, transpose.nnz, str(transpose.index_dtype), ("T", hash(key)))
        transpose.formats.setdefault("pattern_key", derived)


def transposed(matrix: DeviceMatrix) -> DeviceMatrix:
    """The CSR of ``matrix``'s transpose where it lives: cuSPARSE's transposition on the
    GPU where it applies, else one stable sort of the column indices
    (:meth:`DeviceMatrix.transpose`)."""
    return cusparse.transpose(matrix) or matrix.transpose()


def _sparse_2d(B) -> bool:
    return sp.issparse(B) and B.ndim == 2


def _on_device(A, B):
    """``(engine, residence, value dtype)`` of a sparse ``A @ B`` that a device computes
    (its CUDA context made current), or None: scipy computes it."""
    if A.ndim != 2 or not _sparse_2d(B):
        return None
    engine, residence, value_dtype, _ = where(A, B)
    if engine is None:
        return None
    _cuda.ensure_context()
    return engine, residence, value_dtype


def multiply(
    A, B, *, algorithm=None, memory_limit=None, planning=None, as_csr=False
) -> DeviceMatrix | None:
    """The stored layout of ``A @ B`` computed where ``A``'s backend computes (a canonical
    DeviceMatrix; CSR of the product itself with ``as_csr``), or None when scipy is to
    compute it (see the module docstring).

    Shapes are the caller's (scipy's ``_matmul_dispatch``) to check.
    """
    found = _on_device(A, B)
    if found is None:
        return None
    engine, residence, value_dtype = found
    left, right = operands(A, B, residence, value_dtype, as_csr)
    level = level_in_force(planning, A._sg_planning)
    product = _sparse_planning.multiply_sparse(
        left, right, engine, level=level, algorithm=algorithm, memory_limit=memory_limit
    )
    return _with_operands_index_dtype(A, product, left, right)


def galerkin(A, P) -> DeviceMatrix | None:
    """The CSR of ``P.T @ A @ P`` computed where ``A``'s backend computes, as
    ``P.T @ (A @ P)`` on mirrors (``A @ P`` never becomes a matrix on the host side, and
    ``P.T``'s mirror is kept with ``P``'s), or None when scipy is to compute it."""
    found = _on_device(A, P)
    if found is None:
        return None
    engine, residence, value_dtype = found
    level = level_in_force(None, A._sg_planning)
    left, right = _csr(A, residence, value_dtype), _csr(P, residence, value_dtype)
    AP = _sparse_planning.multiply_sparse(left, right, engine, level=level)
    PT = _csr(P, residence, value_dtype, transpose=True)
    product = _sparse_planning.multiply_sparse(PT, AP, engine, level=level)
    return _with_operands_index_dtype(A, product, left, right)


def _with_operands_index_dtype(A, product: DeviceMatrix, left, right) -> DeviceMatrix:
    """scipy's sparse arrays keep int64 indices from an operand; its matrices narrow them
    to int32 where they fit, as the product comes (int32 unless sizes need more)."""
    wide = np.dtype(np.int64)
    if wide in (left.index_dtype, right.index_dtype) and not isinstance(A, sp.spmatrix):
        return spgemm.with_index_dtype(product, wide)
    return product


def explain(A, B) -> SpgemmPlan:
    """How ``A @ B`` runs now: :class:`~sparsegpu.engine._sparse_planning.SpgemmPlan`."""
    if not _sparse_2d(B):
        raise TypeError(f"B must be a 2-D sparse matrix, got {type(B).__name__}")
    level = level_in_force(None, A._sg_planning)
    if A.format == "bsr":  # _BSRMixin._matmul_sparse: scipy's BSR product, a BSR result
        return SpgemmPlan(
            "scipy",
            level,
            "scipy on the host: a BSR left operand is multiplied by scipy's BSR kernels "
            "(sparsegpu's engines multiply CSR: A.tocsr() @ B runs on the GPU)",
        )
    engine, residence, value_dtype, reason = where(A, B)
    if engine is None:
        return SpgemmPlan("scipy", level, f"scipy on the host: {reason}")
    left, right = operands(A, B, residence, value_dtype)
    return _sparse_planning.explain_sparse(left, right, engine, level=level)


def check_operands(A, B) -> None:
    """The argument checks of the public functions (TypeError / ValueError saying what)."""
    if not hasattr(A, "_sg_mirror"):
        raise TypeError(
            f"A must be a sparsegpu matrix, got {type(A).__name__}; wrap it with "
            "sparsegpu.csr_matrix(A)"
        )
    if not _sparse_2d(B):
        raise TypeError(f"B must be a 2-D scipy or sparsegpu sparse matrix, got {type(B).__name__}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(
            f"dimension mismatch: A has shape {A.shape} but B has shape {B.shape}; "
            f"B needs {A.shape[1]} rows"
        )
