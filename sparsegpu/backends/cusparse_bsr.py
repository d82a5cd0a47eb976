"""The ``cusparse_bsr`` backend: cuSPARSE's generic SpMV/SpMM on BSR, descriptors made once.

The products of ``sparsegpu.bsr_matrix`` / ``bsr_array`` on the GPU: the blocks as scipy
stores them (``data`` of shape ``(n_blocks, R, C)``, each block row-major) described once
per plan by ``cusparseCreateBsr`` (CUDA 12.1 on; CuPy has no binding for it, so it is
called through ctypes in the library CuPy loaded, as :mod:`.cusparse_spgemm` does), then
multiplied by ``cusparseSpMV`` (``CUSPARSE_SPMV_BSR_ALG1``) and ``cusparseSpMM``
(``CUSPARSE_SPMM_BSR_ALG1``) through CuPy's bindings, with everything else of
:class:`~.cusparse.CusparsePlan`: workspaces per stream, dense descriptors per buffer,
this thread's handle.

Where cuSPARSE refuses the matrix (on the H100 with CUDA 13: rectangular blocks, which
``cusparseCreateBsr`` refuses, and 1x1 blocks, whose first SpMV answers
``CUSPARSE_STATUS_NOT_SUPPORTED``; a trial product when the plan is made finds out), and
for non-canonical BSR (a block row whose block columns do not increase: unsorted or
repeated blocks, which scipy allows and cuSPARSE's BSR routines are not given), the plan
multiplies the CSR form of the same blocks, built once on the device (each row's columns
sorted for a non-canonical matrix), with cuSPARSE's CSR SpMV and SpMM;
:attr:`CusparseBsrPlan.refused` says why. Where only its BSR SpMM
refuses (column-major blocks; first met at an ``A @ X``), ``A @ X`` runs column by column
through the BSR SpMV. Square blocks of 2 to 8, every value and index type, run as BSR
(``benchmarks/cusparse_bsr.py``'s support table).

For timing it beside other block kernels: :func:`bsr_plan` takes device BSR arrays and
returns a plan with ``matvec(x, out=None)`` and ``matmat(X, out=None)``.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from ..device._block_mirror import DeviceBlockMatrix
from .base import FLOAT_AND_COMPLEX, INT32_AND_INT64, Plan
from .cusparse import (
    CUDA_DATA_TYPE,
    INDEX_BASE_ZERO,
    INDEX_TYPE,
    ORDER_COL,
    ORDER_ROW,
    CusparseLibraryBackend,
    CusparsePlan,
    CusparsePolicy,
    _bindings,
    _Descriptor,
    device_pointer,
)
from .cusparse_spgemm import CusparseCallError, _library
from .policy import Policy

# cusparseSpMVAlg_t / cusparseSpMMAlg_t values for BSR (cusparse.h, CUDA 12 and 13)
SPMV_ALGORITHM = {"default": 0, "bsr_alg1": 6}
SPMM_ALGORITHM = {"default": 0, "bsr_alg1": 14}
# cusparseOrder_t of the values inside each block
BLOCK_ORDER = {"row": ORDER_ROW, "column": ORDER_COL}


@dataclass(frozen=True)
class CusparseBsrPolicy(Policy):
    """cuSPARSE generic SpMV and SpMM on BSR.

    Attributes
    ----------
    algorithm : str
        SpMV's: ``"default"`` or ``"bsr_alg1"`` (CUSPARSE_SPMV_BSR_ALG1).
    spmm_algorithm : str
        SpMM's (``A @ X``): ``"default"`` or ``"bsr_alg1"`` (CUSPARSE_SPMM_BSR_ALG1).
    block_order : str
        How the values of a block lie in memory for cuSPARSE: ``"row"`` (scipy's order,
        read in place) or ``"column"`` (a transposed copy of the blocks, made once per
        plan). cuSPARSE's BSR SpMM reads row-major blocks only: a column-major plan
        multiplies ``A @ X`` one column at a time (``spmm_refused`` says so).
    """

    algorithm: str = "default"
    spmm_algorithm: str = "default"
    block_order: str = "row"

    def __post_init__(self):
        super().__post_init__()
        for field, allowed in (
            ("algorithm", SPMV_ALGORITHM),
            ("spmm_algorithm", SPMM_ALGORITHM),
            ("block_order", BLOCK_ORDER),
        ):
            if getattr(self, field) not in allowed:
                raise ValueError(
                    f"{field}={getattr(self, field)!r} is not allowed; choose one of "
                    f"{list(allowed)}"
                )

    # what CusparsePlan reads of its policy
    preprocess = False


@functools.cache
def _create_bsr():
    """``cusparseCreateBsr`` of the library CuPy loaded, as a ctypes function, or None."""
    lib = _library()
    function = getattr(lib, "cusparseCreateBsr", None) if lib is not None else None
    if function is None:
        return None
    i64, p = ctypes.c_int64, ctypes.c_void_p
    # spMatDescr*, brows, bcols, bnnz, rowBlockSize, colBlockSize, bsrRowOffsets,
    # bsrColInd, bsrValues, bsrRowOffsetsType, bsrColIndType, idxBase, valueType, order
    function.argtypes = [ctypes.POINTER(p), i64, i64, i64, i64, i64, p, p, p] + [ctypes.c_int] * 5
    function.restype = ctypes.c_int
    return function


class CusparseBsrPlan(CusparsePlan):
    """cuSPARSE SpMV/SpMM of a BSR mirror with descriptors and workspaces made once.

    Attributes
    ----------
    refused : str or None
        Why cuSPARSE's BSR routines do not multiply this matrix (the plan then multiplies
        its CSR form with cuSPARSE's CSR routines), or None.
    spmm_refused : str or None
        Why cuSPARSE's BSR SpMM does not (``A @ X`` then runs column by column), or None.
    """

    _spmv_algorithms = SPMV_ALGORITHM
    _spmm_algorithms = SPMM_ALGORITHM

    def __init__(self, matrix: DeviceBlockMatrix, policy: CusparseBsrPolicy):
        self.refused = self.spmm_refused = None
        self._csr_plan = None
        self._refusal = _bindings().CuSparseError
        canonical = matrix.has_sorted_blocks()
        try:
            if not canonical:
                raise CusparseCallError("a block row's block columns do not increase", -1)
            super().__init__(matrix, policy)
            if not self._empty:
                self._trial()
        except (self._refusal, CusparseCallError) as exc:
            Plan.__init__(self, matrix, policy)
            self.refused = f"cuSPARSE's BSR SpMV refused this matrix ({exc})"
            # cuSPARSE's CSR routines read rows with repeated columns in order (the
            # duplicates of the CSR suite), so a non-canonical matrix's rows are sorted
            csr = matrix.to_csr(sort_columns=not canonical)
            self._csr_plan = CusparsePlan(csr, CusparsePolicy(algorithm="csr_alg1"))
            matrix.settle()

    def _trial(self) -> None:
        """One product on placeholder vectors: cuSPARSE answers NOT_SUPPORTED for a block
        shape it does not take (2x3 on the H100, CUDA 13) at the first SpMV, not before."""
        x = self._cupy.zeros(self._n_cols, dtype=self._dtype)
        y = self._cupy.empty(self._n_rows, dtype=self._dtype)
        CusparsePlan._matvec(self, x, y)
        self._cupy.cuda.get_current_stream().synchronize()

    def _sparse_descriptor(self, lib, matrix: DeviceBlockMatrix, policy) -> _Descriptor:
        create = _create_bsr()
        if create is None:
            raise CusparseCallError("cusparseCreateBsr (not found in libcusparse)", -1)
        R, C = matrix.blocksize
        values = matrix.data
        if policy.block_order == "column":  # each block transposed, kept with the plan
            values = self._column_blocks = values.transpose(0, 2, 1).copy()
        index_type = INDEX_TYPE[matrix.index_dtype]
        handle = ctypes.c_void_p()
        status = create(
            ctypes.byref(handle),
            matrix.shape[0] // R,
            matrix.shape[1] // C,
            matrix.n_blocks,
            R,
            C,
            matrix.indptr.data.ptr,
            device_pointer(matrix.indices),
            device_pointer(values),
            index_type,
            index_type,
            INDEX_BASE_ZERO,
            CUDA_DATA_TYPE[matrix.dtype],
            BLOCK_ORDER[policy.block_order],
        )
        if status != 0:
            raise CusparseCallError("cusparseCreateBsr", status)
        return _Descriptor(handle.value, lib.destroySpMat)

    def _matvec(self, x, y):
        if self._csr_plan is not None:
            return self._csr_plan._matvec(x, y)
        return super()._matvec(x, y)

    def _matmat(self, X, Y):
        if self._csr_plan is not None:
            return self._csr_plan._matmat(X, Y)
        if self.spmm_refused is None:
            try:
                return super()._matmat(X, Y)
            except self._refusal as exc:
                self.spmm_refused = f"cuSPARSE's BSR SpMM refused ({exc})"
        return Plan._matmat(self, X, Y)  # one BSR SpMV per column


class CusparseBsrBackend(CusparseLibraryBackend):
    """cuSPARSE generic SpMV/SpMM on the BSR classes' blocks."""

    name = "cusparse_bsr"
    description = "cuSPARSE generic SpMV/SpMM on BSR blocks (sparsegpu.bsr_matrix); made once"
    policy_type = CusparseBsrPolicy
    value_dtypes = FLOAT_AND_COMPLEX
    index_dtypes = INT32_AND_INT64
    formats = ("bsr",)

    def default_policy(self, matrix):
        return CusparseBsrPolicy(source="default")

    def candidates(self, matrix):
        return CusparseBsrPolicy.grid(algorithm=SPMV_ALGORITHM, block_order=BLOCK_ORDER)

    def planning_candidates(self, matrix):
        # the block order is the knob that differs by block size (H100, 27-point meshes,
        # cusparse_bsr_h100.json: column-major 3x3 blocks 0.054 ms against row-major 0.085
        # in float64; 2x2 and 6x6 within 5%); a column-major plan holds a copy of the blocks
        return CusparseBsrPolicy.grid(block_order=BLOCK_ORDER)

    def matmat_candidates(self, matrix, columns, order):
        return CusparseBsrPolicy.grid(spmm_algorithm=SPMM_ALGORITHM)

    def plan(self, matrix, policy):
        return CusparseBsrPlan(matrix, policy)


def bsr_plan(indptr, indices, data, shape, policy: CusparseBsrPolicy | None = None):
    """A cuSPARSE BSR plan of device arrays: ``plan.matvec(x, out=None)`` and
    ``plan.matmat(X, out=None)`` (``X`` C- or Fortran-ordered), checked like every plan's.

    Parameters
    ----------
    indptr, indices : cupy.ndarray
        Block row pointers and block column indices (int32 or int64).
    data : cupy.ndarray of shape (n_blocks, R, C)
        The blocks, row-major (scipy's ``bsr_matrix.data``).
    shape : tuple of int
        Scalar rows and columns.
    policy : CusparseBsrPolicy, optional
        Default: the library's algorithms on the blocks as they are.

    Raises
    ------
    ValueError, TypeError
        For inconsistent arrays (checked on the device before cuSPARSE reads them).
    """
    matrix = DeviceBlockMatrix.from_device(indptr, indices, data, shape)
    return CusparseBsrPlan(matrix, policy or CusparseBsrPolicy(source="default"))


BACKENDS = [CusparseBsrBackend()]
