"""The ``merge_path`` backend: merge-path SpMV, balanced for any row-length distribution.

The kernel (``kernels/merge_path.cu``: Merrill & Garland, "Merge-based Parallel Sparse
Matrix-Vector Multiplication", SC'16) splits the merge of row ends and nonzeros into equal
tiles, so a matrix whose rows follow a power law, with one row holding most nonzeros or
with many empty rows, keeps every thread equally busy.
Tile start coordinates are computed once per plan on the device (one ``searchsorted``),
and with them which tiles carry a partial sum into which row: a tile's carry row is the
next tile's start row. Each product is one kernel launch: the tiles that carry into a row
and the tile in which it ends arrive at that row's counter, and the last to arrive adds
the carries, a warp striding over them (a second, fix-up launch cost 3-6 us a product on
large matrices; a serial walk over 500 tiles per dense row once made an arrow matrix 1.7x
slower than cuSPARSE). Sums run in a fixed order whatever the scheduling: results are
bitwise reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _compile, _cuda
from .._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, KernelLaunch, name_expression
from .._mirror import DeviceMatrix
from .base import Backend, Plan
from .policy import Policy, as_int, check_block_size

SOURCE = "merge_path.cu"


# (block_size, nnz_per_thread) pairs the merge-path kernel is compiled for: tiles of 512 to
# 2048 merge items keep a complex128 tile in 48 KiB of static shared memory.
MERGE_PATH_SHAPES = ((128, 4), (128, 8), (128, 16), (256, 4), (256, 8))


@dataclass(frozen=True)
class MergePathPolicy(Policy):
    """The load-balanced ``merge_path`` kernel (Merrill & Garland).

    Attributes
    ----------
    block_size : int
        Threads per block; one block consumes one tile of ``block_size * nnz_per_thread``
        merge items.
    nnz_per_thread : int
        Merge-path items (nonzeros and row ends) each thread consumes.

    ``(block_size, nnz_per_thread)`` must be one of ``MERGE_PATH_SHAPES``.
    """

    block_size: int = 256
    nnz_per_thread: int = 8

    def __post_init__(self):
        super().__post_init__()
        check_block_size(self)
        as_int(self, "nnz_per_thread", self.nnz_per_thread)
        if (self.block_size, self.nnz_per_thread) not in MERGE_PATH_SHAPES:
            raise ValueError(
                f"(block_size, nnz_per_thread) = ({self.block_size}, {self.nnz_per_thread}) "
                f"is not compiled; choose one of {list(MERGE_PATH_SHAPES)}"
            )


def spmv_name(value_dtype, index_dtype, block_size: int, nnz_per_thread: int) -> str:
    """C++ name expression of the main kernel for one instantiation."""
    return name_expression("merge_path_spmv", value_dtype, index_dtype, block_size, nnz_per_thread)


FAMILY = _compile.register_family(
    _compile.KernelFamily(
        SOURCE,
        tuple(
            spmv_name(v, i, block, items)
            for v in CXX_VALUE_TYPES
            for i in CXX_INDEX_TYPES
            for block, items in MERGE_PATH_SHAPES
        ),
    )
)


def tile_coordinates(indptr, nnz: int, tile_items: int, xp):
    """Start (row, nonzero) of every tile of the merge path, plus the end: two arrays.

    Tile ``t`` starts on diagonal ``d = t * tile_items`` of the merge of the row ends
    ``indptr[1:]`` with the nonzero indices; its start row is the number of rows ``p``
    whose end item comes before ``d``: ``indptr[p + 1] + p + 1 <= d``.
    """
    n_rows = int(indptr.shape[0]) - 1
    n_items = n_rows + nnz
    n_tiles = max(-(-n_items // tile_items), 1)
    diagonals = xp.minimum(xp.arange(n_tiles + 1, dtype=np.int64) * tile_items, n_items)
    keys = indptr[1:].astype(np.int64) + xp.arange(1, n_rows + 1, dtype=np.int64)
    rows = xp.searchsorted(keys, diagonals, side="right").astype(np.int64)
    return rows.astype(indptr.dtype), (diagonals - rows).astype(indptr.dtype)


def carry_runs(tile_row, n_rows: int, xp):
    """Which tiles carry partial sums into which row, and who adds them: two int32 arrays.

    Tile ``t`` ends inside row ``tile_row[t + 1]`` (its carry row: the next tile starts
    there). The tile in which that row ends, ``f``, writes its y; tiles ``a .. f - 1`` carry
    into it (a run) and ``f`` finishes the run. ``carry_finisher[t]`` is the ``f`` of tile
    ``t``'s carry (-1 when the carry is past the last row: the last tile);
    ``run_first[f]`` is the ``a`` of the run tile ``f`` finishes (-1 when ``f`` finishes
    none: no row ends in it, or ``f == 0``). A run's counter expects ``f - a + 1`` arrivals.
    """
    n_tiles = int(tile_row.shape[0]) - 1
    starts = tile_row[:n_tiles].astype(np.int64)
    ends = tile_row[1:].astype(np.int64)
    # the last tile starting in row r is where r ends; the first one's predecessor carries
    last_in = xp.searchsorted(starts, ends, side="right") - 1
    carry_finisher = xp.where(ends < n_rows, last_in, -1)
    first_in = xp.searchsorted(starts, starts, side="left")
    tiles = xp.arange(n_tiles)
    finishes = (ends > starts) & (tiles > 0)
    run_first = xp.where(finishes, xp.maximum(first_in, 1) - 1, -1)
    return carry_finisher.astype(np.int32), run_first.astype(np.int32)


class MergePathPlan(Plan):
    """Compiled merge-path kernel, tile coordinates, carry runs and per-stream scratch."""

    def __init__(self, matrix: DeviceMatrix, policy: MergePathPolicy):
        super().__init__(matrix, policy)
        cupy = _cuda.cupy_or_none()
        self._cupy = cupy
        n_rows = matrix.shape[0]
        self._n_rows = n_rows
        tile_items = policy.block_size * policy.nnz_per_thread
        self._tile_row, self._tile_nz = tile_coordinates(
            matrix.indptr, matrix.nnz, tile_items, cupy
        )
        self.n_tiles = int(self._tile_row.shape[0]) - 1
        self._carry_finisher, self._run_first = carry_runs(self._tile_row, n_rows, cupy)
        spmv = _compile.get_kernel(
            SOURCE,
            spmv_name(matrix.dtype, matrix.index_dtype, policy.block_size, policy.nnz_per_thread),
        )
        self._bound: dict = {}
        self._current_stream = cupy.cuda.get_current_stream
        self._spmv = KernelLaunch(
            spmv,
            policy.block_size,
            (
                matrix.indptr,
                matrix.indices,
                matrix.data,
                "x",
                "y",
                self._tile_row,
                self._tile_nz,
                "carry_value",
                self._carry_finisher,
                self._run_first,
                "counters",
            ),
        )

    def _launch_for(self, stream_ptr: int):
        """The launch bound to one stream's scratch: the carries every product writes and
        the runs' arrival counters (zero between products: the last arrival resets)."""
        bound = self._bound.get(stream_ptr)
        if bound is None:
            cupy = self._cupy
            carry_value = cupy.empty(self.n_tiles, dtype=self._dtype)
            counters = cupy.zeros(self.n_tiles, dtype=np.uint32)
            launch = self._spmv.bind(carry_value=carry_value, counters=counters)
            bound = self._bound[stream_ptr] = (launch, (carry_value, counters))  # kept alive
        return bound[0]

    def _matvec(self, x, y):
        if self._n_rows == 0:
            return y
        self._launch_for(self._current_stream().ptr).xy(self.n_tiles, x, y)
        return y


class MergePathBackend(Backend):
    """Merge-path SpMV: equal work per thread whatever the row lengths; deterministic."""

    name = "merge_path"
    description = "load-balanced merge-path SpMV for irregular rows (deterministic, no atomics)"
    policy_type = MergePathPolicy
    planned = True

    def default_policy(self, matrix):
        return MergePathPolicy(source="default")

    def candidates(self, matrix):
        return [
            MergePathPolicy(block_size=block, nnz_per_thread=items, source="candidate")
            for block, items in MERGE_PATH_SHAPES
        ]

    def plan(self, matrix, policy):
        return MergePathPlan(matrix, policy)


BACKENDS = [MergePathBackend()]
