"""``Y = A @ X`` on the GPU for a CSR mirror and a dense X of k columns, reading A once.

The row-split SpMM kernels (``kernels/csr_spmm.cu``): a group of lanes per row, each lane
holding a 16-byte tile of X's row (row-major X) or a few columns (column-major X), in
k-wide accumulators. The vector family's plans run them with their policy's threads per
row as the lanes that split a row's nonzeros (planning times a few); every other GPU
backend without an SpMM of its own runs them with the shape of :func:`launch_shape`.
"""

from __future__ import annotations

from ..device._compile import KernelFamily, get_kernel, register_family
from ..device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, KernelLaunch, name_expression
from ..device._occupancy import threads_per_row_for

_POWERS_OF_TWO = (1, 2, 4, 8, 16, 32)
BLOCK_SIZE = 256
# bytes of X a lane loads at once from a row-major X (one 16-byte vector)
TILE_BYTES = 16


def rows_kernel_name(value_dtype, index_dtype, column_lanes: int, nonzero_lanes: int) -> str:
    """The C++ name of a row-major instantiation, e.g. ``csr_spmm_rows<double, int, 4, 2>``."""
    return name_expression("csr_spmm_rows", value_dtype, index_dtype, column_lanes, nonzero_lanes)


def columns_kernel_name(value_dtype, index_dtype, nonzero_lanes: int) -> str:
    """The C++ name of a column-major instantiation, e.g. ``csr_spmm_columns<float, int, 2>``."""
    return name_expression("csr_spmm_columns", value_dtype, index_dtype, nonzero_lanes)


SPMM_FAMILY = register_family(
    KernelFamily(
        "csr_spmm.cu",
        tuple(
            rows_kernel_name(v, i, c, n)
            for v in CXX_VALUE_TYPES
            for i in CXX_INDEX_TYPES
            for c in _POWERS_OF_TWO
            for n in _POWERS_OF_TWO
            if c * n <= 32
        )
        + tuple(
            columns_kernel_name(v, i, n)
            for v in CXX_VALUE_TYPES
            for i in CXX_INDEX_TYPES
            for n in _POWERS_OF_TWO
        ),
    )
)


def spmm_supports(value_dtype) -> bool:
    """Whether the SpMM kernels are instantiated for ``value_dtype`` (not the 16-bit
    floats: their products go column by column through the matvec kernels)."""
    return value_dtype in CXX_VALUE_TYPES


def _power_of_two_at_least(n: int) -> int:
    return next((p for p in _POWERS_OF_TWO if p >= n), _POWERS_OF_TWO[-1])


def tile_width(value_dtype) -> int:
    """Values of X's row one lane loads at once (16 bytes: 4 floats, 2 doubles...)."""
    return max(1, TILE_BYTES // value_dtype.itemsize)


def column_lanes(value_dtype, k: int, fortran: bool = False) -> int:
    """Lanes across X's columns for X of k columns: enough 16-byte tiles of a row-major X's
    rows (one column each of a column-major X) to cover k, a power of two, at most a warp."""
    width = 1 if fortran else tile_width(value_dtype)
    return _power_of_two_at_least(max(-(-k // width), 1))


def nonzero_lanes_for(mean_row_length: float, lanes_left: int) -> int:
    """Lanes splitting a row's nonzeros: the matvec kernels' rule (about half the mean
    row length, :func:`sparsegpu.device._occupancy.threads_per_row_for`) within what the column
    lanes leave of a warp."""
    return threads_per_row_for(mean_row_length, limit=lanes_left)


def launch_shape(matrix, k: int, fortran: bool, nonzero_lanes: int | None = None):
    """(column lanes, nonzero lanes) of the row-split kernel for this mirror and k.

    ``nonzero_lanes`` (a policy's threads per row) is capped to what the column lanes
    leave of a warp; by default the rule of :func:`nonzero_lanes_for`. A column-major X
    has one column lane.
    """
    columns = 1 if fortran else column_lanes(matrix.dtype, k)
    left = 32 // columns
    if nonzero_lanes is None:
        return columns, nonzero_lanes_for(matrix.stats.mean, left)
    return columns, min(_power_of_two_at_least(nonzero_lanes), left)


def is_fortran(X) -> bool:
    """True for a 2-D X stored column by column (and not also row by row)."""
    if hasattr(X, "_f_contiguous"):  # CuPy keeps both as attributes (.flags builds an object)
        return X.ndim == 2 and X._f_contiguous and not X._c_contiguous
    return X.ndim == 2 and not X.flags.c_contiguous and X.flags.f_contiguous


class SpmmLaunches:
    """What the SpMM kernels of one mirror share (the row-split kernel here, the merge-path
    SpMM in :mod:`sparsegpu.backends.merge_path`): their launches, made once per k, memory
    order and 16-byte alignment (:meth:`_make`), so that a product only sets X's and Y's
    pointers, as a matvec does.

    ``spmm(X, Y)`` fills ``Y`` with ``A @ X`` for a CuPy X of shape (n_cols, k) and Y of
    (n_rows, k), both C-contiguous or both Fortran-contiguous, in the mirror's dtype
    (checked by the caller: :meth:`sparsegpu.backends.base.Plan.matmat`).

    Parameters
    ----------
    matrix : DeviceMatrix
        A validated CSR mirror on the GPU.
    block_size : int
        Threads per block of the main kernel.
    """

    def __init__(self, matrix, block_size: int = BLOCK_SIZE):
        self.matrix = matrix
        self.block_size = block_size
        self._launches: dict = {}

    def __call__(self, X, Y):
        k = X.shape[1]
        fortran = not X._c_contiguous  # (checked: C- or Fortran-contiguous)
        # a row-major X and Y whose rows all start on 16-byte boundaries are read and
        # written 16 bytes at a time (the kernels' vectors flag)
        key = (k, fortran, not fortran and (X.data.ptr | Y.data.ptr) % TILE_BYTES == 0)
        launches = self._launches.get(key)
        if launches is None:
            vectors = key[2] and (k * self.matrix.dtype.itemsize) % TILE_BYTES == 0
            launches = self._launches[key] = self._make(k, fortran, vectors)
        for launch, grid in launches:
            launch.xy(grid, X, Y)
        return Y

    def _make(self, k: int, fortran: bool, vectors: bool) -> tuple:
        """The ``(KernelLaunch, grid)`` pairs that compute ``A @ X`` for k columns in that
        order, run in turn (none where there is nothing to compute)."""
        raise NotImplementedError


class RowSplitSpmm(SpmmLaunches):
    """The row-split SpMM of one mirror.

    Parameters
    ----------
    matrix : DeviceMatrix
        A validated CSR mirror on the GPU.
    nonzero_lanes : int, optional
        Lanes splitting a row's nonzeros (see :func:`launch_shape`).
    block_size : int
        Threads per block.
    """

    def __init__(self, matrix, nonzero_lanes: int | None = None, block_size: int = BLOCK_SIZE):
        super().__init__(matrix, block_size)
        self.nonzero_lanes = nonzero_lanes

    def shape(self, k: int, fortran: bool) -> tuple[int, int]:
        """(column lanes, nonzero lanes) for k columns in that memory order."""
        return launch_shape(self.matrix, k, fortran, self.nonzero_lanes)

    def _make(self, k: int, fortran: bool, vectors: bool) -> tuple:
        m = self.matrix
        (n_rows, n_cols), value, index = m.shape, m.dtype, m.index_dtype
        if n_rows == 0 or k == 0:
            return ()
        columns, nonzero = self.shape(k, fortran)
        if fortran:
            name = columns_kernel_name(value, index, nonzero)
            arguments = (m.indptr, m.indices, m.data, "x", "y", n_rows, n_cols, k)
        else:
            name = rows_kernel_name(value, index, columns, nonzero)
            arguments = (m.indptr, m.indices, m.data, "x", "y", n_rows, k, int(vectors))
        launch = KernelLaunch(get_kernel(SPMM_FAMILY.source, name), self.block_size, arguments)
        return ((launch, -(-n_rows * columns * nonzero // self.block_size)),)
