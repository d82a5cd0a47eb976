"""The ``merge_path`` backend: merge-path SpMV, balanced for any row-length distribution.

The kernel (``kernels/merge_path.cu``: Merrill & Garland, "Merge-based Parallel Sparse
Matrix-Vector Multiplication", SC'16) splits the merge of row ends and nonzeros into equal
tiles, so a matrix whose rows follow a power law, with one row holding most nonzeros or
with many empty rows, keeps every thread equally busy.
Tile start coordinates are computed once per plan on the device (one ``searchsorted``);
each product is one kernel launch (up to ``FUSED_FIXUP_MAX_TILES`` tiles the last block to
finish adds the carried partial sums) or two (a fix-up launch adds them). A row spanning
more than a warp of tiles has its carries summed by a whole warp, lanes striding over them
(a serial walk over 500 tiles per dense row made an arrow matrix 1.7x slower than
cuSPARSE). Sums run in a fixed order whatever the scheduling: results are bitwise
reproducible.

``A @ X`` runs the merge-path SpMM of the same file (``merge_path_spmm``), X and Y in
either memory order: runs of ``SPMM_ITEMS_PER_THREAD * nnz_per_thread`` merge items per
team of lanes across X's columns, rows cut by a run's boundary cleared first and added
with atomics (those rows agree to rounding, not bitwise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..device import _compile, _cuda
from ..device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, KernelLaunch, name_expression
from ..device._mirror import DeviceMatrix
from ._spmm import SpmmLaunches, column_lanes, spmm_supports
from .base import Backend, Plan
from .policy import Policy, as_int, check_block_size

SOURCE = "merge_path.cu"
FIXUP_BLOCK = 256
WARP_LANES = 32
# Up to this many tiles the last block adds the carries itself (a few strided passes over
# the carries, cheaper than a second launch); beyond it a separate fix-up kernel does,
# so that one block's serial tail never shows on large matrices.
FUSED_FIXUP_MAX_TILES = 1024


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


def fixup_name(value_dtype, index_dtype) -> str:
    """C++ name expression of the carry fix-up kernel."""
    return name_expression("merge_path_fixup", value_dtype, index_dtype)


SPMM_COLUMN_LANES = (1, 2, 4, 8, 16, 32)
# Merge items a team of the SpMM consumes, per nnz_per_thread of the policy: a team is a
# few lanes where the SpMV's tile is a block, so its runs are shorter (32 or 64 items).
SPMM_ITEMS_PER_THREAD = 8


def spmm_name(value_dtype, index_dtype, column_lanes: int, row_major: bool) -> str:
    """C++ name expression of the merge-path SpMM for teams of ``column_lanes`` lanes and a
    row-major (C-order) or column-major X."""
    return name_expression(
        "merge_path_spmm", value_dtype, index_dtype, column_lanes, str(row_major).lower()
    )


def spmm_zero_name(value_dtype, index_dtype) -> str:
    """C++ name expression of the kernel clearing the rows the SpMM adds into."""
    return name_expression("merge_path_spmm_zero", value_dtype, index_dtype)


FAMILY = _compile.register_family(
    _compile.KernelFamily(
        SOURCE,
        tuple(
            spmv_name(v, i, block, items)
            for v in CXX_VALUE_TYPES
            for i in CXX_INDEX_TYPES
            for block, items in MERGE_PATH_SHAPES
        )
        + tuple(fixup_name(v, i) for v in CXX_VALUE_TYPES for i in CXX_INDEX_TYPES)
        + tuple(
            spmm_name(v, i, lanes, row_major)
            for v in CXX_VALUE_TYPES
            for i in CXX_INDEX_TYPES
            for lanes in SPMM_COLUMN_LANES
            for row_major in (True, False)
        )
        + tuple(spmm_zero_name(v, i) for v in CXX_VALUE_TYPES for i in CXX_INDEX_TYPES),
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


def longest_run(tile_row, xp) -> int:
    """The most consecutive tiles that start in one row: about how many tiles carry a
    partial sum of the longest row (1 when every row fits in a tile)."""
    n = int(tile_row.shape[0])
    if n < 2:
        return n
    changes = xp.flatnonzero(tile_row[1:] != tile_row[:-1]) + 1
    bounds = xp.concatenate(
        (xp.zeros(1, dtype=changes.dtype), changes, xp.full(1, n, changes.dtype))
    )
    return int(xp.diff(bounds).max())


class MergePathPlan(Plan):
    """Compiled merge-path kernels, tile coordinates and per-stream carry buffers."""

    values_by_reference = True  # its kernels are bound to the mirror's data array

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
        spmv = _compile.get_kernel(
            SOURCE,
            spmv_name(matrix.dtype, matrix.index_dtype, policy.block_size, policy.nnz_per_thread),
        )
        fixup = _compile.get_kernel(SOURCE, fixup_name(matrix.dtype, matrix.index_dtype))
        # the fused fix-up walks each row's carries in one thread: only where no row spans
        # more than a warp of tiles (else the warp-per-run fix-up kernel does)
        self.longest_carry_run = longest_run(self._tile_row, cupy)
        self.fused_fixup = (
            1 < self.n_tiles <= FUSED_FIXUP_MAX_TILES and self.longest_carry_run <= WARP_LANES
        )
        self._separate_fixup = self.n_tiles > 1 and not self.fused_fixup
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
                "carry_row",
                "carry_value",
                n_rows,
                "tiles_done",
            ),
        )
        self._fixup = KernelLaunch(
            fixup,
            FIXUP_BLOCK,
            ("carry_row", "carry_value", self.n_tiles, n_rows, "y"),
        )
        self._fixup_grid = -(-self.n_tiles * WARP_LANES // FIXUP_BLOCK)  # a warp per tile
        self._spmm = None  # the merge-path SpMM, made on the first A @ X

    def _launches(self, stream_ptr: int):
        """(main launch, fix-up launch) for one stream, bound to that stream's scratch: carry
        rows and values written by every product, and the finished-tile counter of the
        fused fix-up (a null pointer without it)."""
        launches = self._bound.get(stream_ptr)
        if launches is None:
            cupy = self._cupy
            counter = cupy.zeros(1, dtype=np.uint32) if self.fused_fixup else 0
            carry_row = cupy.empty(self.n_tiles, dtype=self.matrix.index_dtype)
            carry_value = cupy.empty(self.n_tiles, dtype=self._dtype)
            launches = (
                self._spmv.bind(carry_row=carry_row, carry_value=carry_value, tiles_done=counter),
                self._fixup.bind(carry_row=carry_row, carry_value=carry_value),
                (carry_row, carry_value, counter),  # kept alive with the launches
            )
            self._bound[stream_ptr] = launches
        return launches

    def _matvec(self, x, y):
        if self._n_rows == 0:
            return y
        spmv, fixup, _ = self._launches(self._current_stream().ptr)
        spmv.xy(self.n_tiles, x, y)
        if self._separate_fixup:
            fixup.xy(self._fixup_grid, x, y)  # (a kernel without x: see KernelLaunch)
        return y

    def _matmat(self, X, Y):
        """``A @ X`` by the merge-path SpMM (see the module docstring); 16-bit floats and
        k = 1 take the base class's way."""
        if X.shape[1] < 2 or not self._spmm_kernels or self._n_rows == 0:
            return super()._matmat(X, Y)
        spmm = self._spmm
        if spmm is None:
            spmm = self._spmm = MergePathSpmm(self.matrix, self.policy)
        return spmm(X, Y)


class MergePathSpmm(SpmmLaunches):
    """The merge-path SpMM of one mirror and policy: team start coordinates and the rows
    cut by a run's boundary (made once), and per k, order and alignment the clearing of
    those rows and the main launch."""

    def __init__(self, matrix: DeviceMatrix, policy: MergePathPolicy):
        super().__init__(matrix, policy.block_size)
        cupy = _cuda.cupy_or_none()
        items = SPMM_ITEMS_PER_THREAD * policy.nnz_per_thread
        self._team_row, self._team_nz = tile_coordinates(matrix.indptr, matrix.nnz, items, cupy)
        self.n_teams = int(self._team_row.shape[0]) - 1
        starts = self._team_row[:-1]
        cut = self._team_nz[:-1] > matrix.indptr[starts]
        self._cut_rows = cupy.unique(starts[cut]).astype(matrix.index_dtype)

    def _make(self, k: int, fortran: bool, vectors: bool) -> tuple:
        m = self.matrix
        (n_rows, n_cols), value, index = m.shape, m.dtype, m.index_dtype
        lanes = column_lanes(value, k, fortran)
        main = KernelLaunch(
            _compile.get_kernel(SOURCE, spmm_name(value, index, lanes, not fortran)),
            self.block_size,
            (
                m.indptr, m.indices, m.data, "x", "y", self._team_row, self._team_nz,
                self.n_teams, n_rows, n_cols, k, int(vectors),
            ),
        )  # fmt: skip
        launches = ((main, -(-self.n_teams * lanes // self.block_size)),)
        n_cut = int(self._cut_rows.shape[0])
        if n_cut:  # the cut rows cleared first: the main kernel adds into them
            strides = (1, n_rows) if fortran else (k, 1)  # of Y's rows and columns
            zero = KernelLaunch(
                _compile.get_kernel(SOURCE, spmm_zero_name(value, index)),
                FIXUP_BLOCK,
                (self._cut_rows, n_cut, k, *strides, "y"),
            )
            launches = ((zero, -(-n_cut * k // FIXUP_BLOCK)), *launches)
        return launches


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

    def planned_policies(self, matrix):
        # every compiled tile shape: the best one differs by matrix. On the H100, rows of
        # ~25 with one row of 6,000 (synthetic.class_check_suite("fit"), 60k-100k rows):
        # (128, 8) ran 1.19-1.21x cuSPARSE where the tuned and default shapes planning
        # timed before ran 1.00-1.15x, and the winner moved between (128, 8), (256, 4)
        # and (256, 8) from one matrix and dtype to the next (class_fit_h100_run2.json)
        return self.candidates(matrix)

    def plan(self, matrix, policy):
        return MergePathPlan(matrix, policy)

    def matmat_candidates(self, matrix, columns, order):
        # the merge-path SpMM with runs of 32 and 64 merge items per team
        if not spmm_supports(matrix.dtype):
            return []
        return [MergePathPolicy(256, items, source="candidate") for items in (4, 8)]


BACKENDS = [MergePathBackend()]
