"""The ``scipy`` backend: the CPU reference and the test oracle.

It runs scipy's own compiled CSR kernels on the host arrays (no copy), through the same
dispatch path, validation and plan cache as the GPU backends. It takes every dtype scipy
takes, and float16/bfloat16 (computed in float32 and rounded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..device._dtypes import HALF_DTYPES, half_result_dtype, is_half
from ..device._mirror import HOST, DeviceMatrix
from .base import INT32_AND_INT64, Backend, Plan
from .policy import Policy

ALL_SCIPY_DTYPES = tuple(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.uint8,
        np.int16,
        np.uint16,
        np.int32,
        np.uint32,
        np.int64,
        np.uint64,
        np.float32,
        np.float64,
        np.longdouble,
        np.complex64,
        np.complex128,
        np.clongdouble,
    )
)


@dataclass(frozen=True)
class NoPolicy(Policy):
    """For backends with no knobs (``scipy``)."""


class ScipyPlan(Plan):
    """Wraps the mirror in a plain scipy CSR (or CSC, or BSR) matrix once; products call
    scipy's own kernels through its product hooks, not through its operator a second time."""

    def __init__(self, matrix: DeviceMatrix, policy):
        super().__init__(matrix, policy)
        # The arrays are set directly: scipy's constructor would keep an int32 copy of
        # int64 indices that hold small values, and the host arrays are what this reads.
        # scipy has no 16-bit float kernels: those compute on a float32 copy of the values
        # (made once per plan) and round the result, as the GPU kernels accumulate.
        self._half = matrix.dtype if is_half(matrix.dtype) else None
        compute = np.dtype(np.float32) if self._half is not None else matrix.dtype
        if matrix.format == "bsr":
            csr = sp.bsr_matrix(
                matrix.shape, blocksize=matrix.blocksize, dtype=compute.newbyteorder("=")
            )
        else:
            csr = (sp.csc_matrix if matrix.layout == "csc" else sp.csr_matrix)(
                matrix.shape, dtype=compute.newbyteorder("=")
            )
        data = matrix.data if self._half is None else matrix.data.astype(np.float32)
        csr.data, csr.indices, csr.indptr = data, matrix.indices, matrix.indptr
        # scipy >= 1.13 names the hooks _matmul_*, older releases _mul_*
        self._vector = getattr(csr, "_matmul_vector", None) or csr._mul_vector
        self._multivector = getattr(csr, "_matmul_multivector", None) or csr._mul_multivector

    def matvec(self, x, out=None):
        """scipy's product; ``out`` is checked like numpy's (exact shape, ``same_kind``).

        On the host no kernel reads raw pointers and scipy writes a new array, so ``out``
        may be any writable numpy array, also one sharing memory with ``x``.
        """
        n_cols = self.matrix.shape[1]
        if type(x) is not np.ndarray or x.ndim not in (1, 2) or x.shape[0] != n_cols:
            raise ValueError(
                f"x must be a 1-D or 2-D numpy array with {n_cols} rows, got "
                f"{type(x).__name__} {getattr(x, 'shape', '')}"
            )
        want = None
        if self._half is not None:  # numpy's promotion, computed in float32 or wider
            want = half_result_dtype(self._half, x.dtype)
            x = x.astype(np.promote_types(np.float32, want) if is_half(want) else want)
        y = self._vector(x) if x.ndim == 1 else self._multivector(x)
        if want is not None:
            y = y.astype(want)
        if out is None:
            return y
        if not isinstance(out, np.ndarray) or out.shape != y.shape:
            raise ValueError(
                f"out must be a numpy array of shape {y.shape}, got "
                f"{type(out).__name__} {getattr(out, 'shape', '')}"
            )
        np.copyto(out, y, casting="same_kind")
        return out

    matmat = matvec  # scipy's product takes 1-D and 2-D operands alike


class ScipyBackend(Backend):
    name = "scipy"
    description = "CPU reference: scipy's compiled CSR/BSR kernels (always available, the oracle)"
    residence = HOST
    formats = ("csr", "bsr")
    value_dtypes = ALL_SCIPY_DTYPES + HALF_DTYPES
    index_dtypes = INT32_AND_INT64
    policy_type = NoPolicy

    def unavailable_reason(self):
        return None

    def plan(self, matrix, policy):
        return ScipyPlan(matrix, policy)


BACKENDS = [ScipyBackend()]
