"""``Y = A @ X`` on the GPU for a CSR mirror and a dense X of k columns, reading A once.

The default :meth:`sparsegpu.backends.base.Plan.matmat` of every GPU backend that does not
bring its own (cuSPARSE brings SpMM) runs this kernel (``kernels/csr_spmm.cu``): k
separate products read the matrix k times, this reads it once per ``column_lanes``
columns (once for k <= 32).
"""

from __future__ import annotations

from ._compile import KernelFamily, get_kernel, register_family
from ._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, KernelLaunch, name_expression
from ._occupancy import threads_per_row_for

_POWERS_OF_TWO = (1, 2, 4, 8, 16, 32)
BLOCK_SIZE = 256


def kernel_name(value_dtype, index_dtype, threads_per_row: int, column_lanes: int) -> str:
    """The C++ name of one instantiation, e.g. ``csr_spmm<double, int, 32, 16>``."""
    return name_expression("csr_spmm", value_dtype, index_dtype, threads_per_row, column_lanes)


SPMM_FAMILY = register_family(
    KernelFamily(
        "csr_spmm.cu",
        tuple(
            kernel_name(v, i, t, c)
            for v in CXX_VALUE_TYPES
            for i in CXX_INDEX_TYPES
            for t in _POWERS_OF_TWO
            for c in _POWERS_OF_TWO
            if c <= t
        ),
    )
)


def spmm_supports(value_dtype) -> bool:
    """Whether the one-pass kernel is instantiated for ``value_dtype`` (not the 16-bit
    floats: their products go column by column through the matvec kernels)."""
    return value_dtype in CXX_VALUE_TYPES


def _power_of_two_at_least(n: int) -> int:
    return next(p for p in _POWERS_OF_TWO if p >= n) if n <= 32 else 32


def launch_shape(mean_row_length: float, k: int) -> tuple[int, int]:
    """(threads_per_row, column_lanes) for k columns and the mean row length.

    Lanes across columns cover k (up to a warp); the rest of the warp splits the row's
    nonzeros by the matvec kernels' rule (:func:`sparsegpu._occupancy.threads_per_row_for`).
    """
    column_lanes = _power_of_two_at_least(max(k, 1))
    nonzero_lanes = threads_per_row_for(mean_row_length, limit=32 // column_lanes)
    return column_lanes * nonzero_lanes, column_lanes


def csr_spmm(matrix, X, out):
    """``A @ X`` for a device mirror ``matrix`` and a C-contiguous (n_cols, k) CuPy X.

    The operands are checked by the caller (:meth:`sparsegpu.backends.base.Plan.operands`).

    Parameters
    ----------
    matrix : DeviceMatrix
        A validated CSR mirror on the GPU.
    X : cupy.ndarray
        Shape (n_cols, k), C-contiguous, in the mirror's dtype.
    out : cupy.ndarray
        Shape (n_rows, k), C-contiguous, in the mirror's dtype.

    Returns
    -------
    cupy.ndarray of shape (n_rows, k).
    """
    n_rows = matrix.shape[0]
    k = int(X.shape[1])
    if n_rows == 0 or k == 0:
        return out
    threads_per_row, column_lanes = launch_shape(matrix.stats.mean, k)
    kernel = get_kernel(
        SPMM_FAMILY.source,
        kernel_name(matrix.dtype, matrix.index_dtype, threads_per_row, column_lanes),
    )
    grid = (n_rows * threads_per_row + BLOCK_SIZE - 1) // BLOCK_SIZE
    launch = KernelLaunch(
        kernel, BLOCK_SIZE, (matrix.data, matrix.indices, matrix.indptr, X, out, n_rows, k)
    )
    launch(grid)
    return out
