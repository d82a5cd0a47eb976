"""The ``block`` backend: products over small dense blocks (BSR), with a kernel of our own.

A matrix from finite elements with several unknowns per mesh node stores its nonzeros in
small dense blocks. CSR reads one column index per nonzero (12 bytes a nonzero in float64
with int32 indices); a layout of b x b blocks reads one per block (8.44 bytes a nonzero for
full 3 x 3 blocks, 1.42x fewer). The kernel (``kernels/block.cu``) gives a group of lanes
to each block row and reads the block row's values as one coalesced vector, in tiles of
whole blocks; or, for small blocks (2 x 2, 3 x 3), each block whole to one lane, read in as
few loads as its size allows (``BlockPolicy.whole_blocks``, their untuned policy: a third of
the tiles' loads for 2 x 2, and few shuffles on short block rows).

Two ways in:

* :func:`block_plan` takes device BSR arrays (block row pointers, block columns, values of
  shape ``(nblocks, R, C)``, R and C in 1..8) and returns a plan with ``matvec`` and
  ``matmat``: what the BSR classes run.
* As a backend of the CSR classes, it finds the blocks itself: once per mirror, on the
  device, it counts the aligned b x b blocks the nonzeros touch for b = 2..8
  (``_block_structure.block_structure``: that module finds and lays out the blocks; the
  fill ratio is nnz / (stored blocks x b^2)), keeps the b whose layout reads the fewest
  bytes, and builds that layout from the mirror (``block_layout``: padded to whole
  blocks, duplicates summed, dropped with the mirror). ``auto``'s rules never pick it
  (whether a matrix has blocks is a property of its columns that the row statistics do
  not show); planning by measurement times it where
  the layout reads at most ``MAX_BYTE_RATIO`` of CSR's bytes, which is a minimum fill per
  block size and dtype (``min_fill``), and keeps it where it is fastest. Below that
  fill, planning leaves it out and ``explain`` says why. Named explicitly
  (``A.backend = "block"``), it takes any matrix, with the block size that reads the
  fewest bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..device import _compile, _cuda
from ..device import _occupancy as occupancy
from ..device._block_mirror import DeviceBlockMatrix
from ..device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, name_expression
from ..device._mirror import CUPY, DeviceMatrix
from ._block_structure import (
    SOURCE,
    BlockLayout,
    block_layout,
    block_structure,
    count_kernel_name,
)
from ._block_structure import host_block_structure as host_block_structure  # `sparsegpu info`
from .base import FLOAT_AND_COMPLEX, Backend
from .csr_vector import KernelPlan
from .policy import (
    SECONDARY,
    THREADS_PER_ROW_CHOICES,
    Policy,
    check_block_size,
    check_int_choice,
)

# Block shapes the kernel is instantiated for (rows and columns of a block).
BLOCK_DIMENSIONS = tuple(range(1, 9))
# Fewest lanes per block row: a group reads at least 8 consecutive values at a time (a
# 32- or 64-byte run; fewer lanes would read a block row like a thread-per-row kernel).
MIN_GROUP = 8
# The kernel's launch bound (kernels/block.cu): threads per block.
MAX_BLOCK_SIZE = 512
# Block shapes the whole-block kernel (kernels/block.cu: a lane per block) is instantiated
# for, and whose untuned policy it is: on the fit set of benchmarks/blocks.py (H100,
# blocks_h100.json), whole blocks at whole_group's lanes against the tiles' untuned policy:
# mesh_b2_n40 23.3 / 14.0 us against 24.9 / 15.9 (float64 / float32), mesh_b3_n30 21.3 /
# 12.5 against 24.9 / 18.3.
WHOLE_BLOCK_SHAPES = ((2, 2), (1, 4), (4, 1), (3, 3))
# The kernel's bound on the values and x entries of the blocks a lane keeps in flight
# (SPARSEGPU_WHOLE_BYTES's default in kernels/block.cu).
WHOLE_IN_FLIGHT_BYTES = 256


@dataclass(frozen=True)
class BlockPolicy(Policy):
    """The ``block`` kernel's launch knobs.

    Attributes
    ----------
    block_size : int
        Threads per CUDA block, a multiple of 32 up to 512 (the kernel's launch bound: up
        to 128 registers a thread).
    threads_per_block_row : int
        Lanes sharing one block row (1..32, a power of two), which read its values in
        tiles of whole blocks (:func:`group_widths`: a block shape needs enough lanes
        for one block).
    unroll : int
        Values each lane keeps in flight per trip through a block row (2, 4 or 8; whole
        tiles: at least the lane's positions in one tile).
    max_registers : int or None
        Register cap per thread (32..128, CUDA's ``__maxnreg__``) in place of the
        kernel's launch bound of 512 threads, which leaves the compiler up to 128: more
        warps in flight, at the price of spills.
    whole_blocks : bool
        Small blocks only (2 x 2, 1 x 4, 4 x 1, 3 x 3): each lane takes whole blocks, every
        ``threads_per_block_row``-th of its block row, each read in as few loads as its
        size allows (``block_spmv_whole``), ``unroll`` blocks in flight (at most 256 bytes
        of their values and x entries), instead of tiles of values spread over the lanes.
    cache_blocks : bool
        Whole blocks only: read the blocks through L1 (``__ldg``) instead of evict-first
        (``__ldcs``): a block of several loads per lane has its lines read by several
        successive loads of the warp. A compile-time macro (``SPARSEGPU_BLOCK_CACHED``).

    ``unroll`` and ``max_registers`` are compile-time macros of the kernel
    (``SPARSEGPU_UNROLL``, ``SPARSEGPU_MAX_REGISTERS``): a policy that changes them
    compiles its own variant (once, memoized).
    """

    block_size: int = 256
    threads_per_block_row: int = 32
    unroll: int = field(default=4, metadata=SECONDARY)
    max_registers: int | None = field(default=None, metadata=SECONDARY)
    whole_blocks: bool = False
    cache_blocks: bool = field(default=False, metadata=SECONDARY)

    def __post_init__(self):
        super().__post_init__()
        check_block_size(self)
        for name in ("whole_blocks", "cache_blocks"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not allowed for the block kernel; use "
                    "True or False"
                )
        if self.cache_blocks and not self.whole_blocks:
            raise ValueError(
                "cache_blocks=True is not allowed with whole_blocks=False: only the whole-block "
                "kernel reads its blocks through L1; set whole_blocks=True too, or leave "
                "cache_blocks False"
            )
        if self.block_size > MAX_BLOCK_SIZE:
            raise ValueError(
                f"block_size={self.block_size} is not allowed for the block kernel; use a "
                f"multiple of 32 up to {MAX_BLOCK_SIZE}"
            )
        check_int_choice(self, "threads_per_block_row", THREADS_PER_ROW_CHOICES)
        check_int_choice(self, "unroll", (2, 4, 8))
        cap = self.max_registers
        if cap is not None and (
            isinstance(cap, bool) or not isinstance(cap, int) or not 32 <= cap <= 128
        ):
            raise ValueError(
                f"max_registers={cap!r} is not allowed for the block kernel; use None or an "
                "int in 32..128"
            )

    def compile_options(self) -> tuple[str, ...]:
        """NVRTC options this policy adds to its kernel's compilation."""
        options = ()
        if self.unroll != 4:
            options += (f"-DSPARSEGPU_UNROLL={self.unroll}",)
        if self.max_registers is not None:
            options += (f"-DSPARSEGPU_MAX_REGISTERS={self.max_registers}",)
        if self.cache_blocks:
            options += ("-DSPARSEGPU_BLOCK_CACHED",)
        return options


def slots_per_lane(rows: int, columns: int) -> int:
    """Positions of a tile each lane owns for ``rows`` x ``columns`` blocks: from
    ceil(R C / 32) to 4, the count leaving the fewest of a warp's positions idle (the
    smallest on a tie): ``block_slots`` in ``kernels/block.cu``, the same rule."""
    rc = rows * columns

    def idle_share(slots):
        return (32 * slots - (32 * slots // rc) * rc) / slots

    return min(range(-(-rc // 32), 5), key=lambda slots: (idle_share(slots), slots))


def group_widths(rows: int, columns: int) -> tuple[int, ...]:
    """The lanes per block row the kernel takes for a block shape: powers of two from
    ``MIN_GROUP`` to 32 whose tile of ``lanes x slots_per_lane`` positions holds one
    block."""
    slots = slots_per_lane(rows, columns)
    return tuple(
        g for g in THREADS_PER_ROW_CHOICES if g >= MIN_GROUP and g * slots >= rows * columns
    )


def default_group(rows: int, columns: int, mean_blocks: float) -> int:
    """Lanes per block row for a block row of ``mean_blocks`` blocks: the width whose tiles
    of whole blocks leave the fewest positions idle over the block row (the widest on a
    tie). A 3-D mesh with 3 unknowns (27 blocks of 3 x 3): 32 lanes, 7 blocks in a tile of
    64 positions, 243 of 256 used; with 2 unknowns (27 blocks of 2 x 2): 16 lanes, 4
    blocks a tile, 108 of 112 used."""
    slots = slots_per_lane(rows, columns)
    blocks = max(1.0, mean_blocks)

    def used(g):
        per_tile = g * slots // (rows * columns)
        return blocks * rows * columns / (math.ceil(blocks / per_tile) * g * slots)

    return max(group_widths(rows, columns), key=lambda g: (round(used(g), 3), g))


def kernel_name(
    value_dtype, index_dtype, rows: int, columns: int, group: int, whole: bool = False
) -> str:
    """The C++ name of one instantiation, e.g. ``block_spmv<double, int, 3, 3, 32>`` (3 x 3
    blocks, 32 lanes per block row); ``whole``: ``block_spmv_whole``, whole blocks per
    lane (the shapes of :data:`WHOLE_BLOCK_SHAPES`)."""
    template = "block_spmv_whole" if whole else "block_spmv"
    return name_expression(template, value_dtype, index_dtype, rows, columns, group)


def takes_whole_blocks(rows: int, columns: int) -> bool:
    """Whether ``block_spmv_whole`` (whole blocks per lane) is instantiated for the shape."""
    return (rows, columns) in WHOLE_BLOCK_SHAPES


def whole_in_flight(rows: int, columns: int, itemsize: int, unroll: int = 4) -> int:
    """Blocks a lane of the whole-block kernel keeps in flight: ``unroll``, at most
    :data:`WHOLE_IN_FLIGHT_BYTES` of their values and x entries (the kernel's rule): 4 for
    2 x 2 blocks in float64, 2 for 3 x 3."""
    per_block = (rows * columns + columns) * itemsize
    return min(unroll, max(1, WHOLE_IN_FLIGHT_BYTES // per_block))


def whole_group(mean_blocks: float, unroll: int = 4) -> int:
    """Lanes per block row of the whole-block kernel: the fewest (a power of two up to 32)
    whose one trip of ``unroll`` blocks each covers a block row of ``mean_blocks``: 8 for
    a 3-D mesh's 27 blocks, 4 for a 2-D mesh's 9."""
    need = max(1.0, mean_blocks) / unroll
    return next((g for g in THREADS_PER_ROW_CHOICES if g >= need), THREADS_PER_ROW_CHOICES[-1])


def supports_blocksize(rows: int, columns: int) -> bool:
    """Whether the kernel is instantiated for ``rows`` x ``columns`` blocks (1..8 each)."""
    return rows in BLOCK_DIMENSIONS and columns in BLOCK_DIMENSIONS


# ------------------------------------------------------------------------------ plans
class BlockPlan(KernelPlan):
    """A compiled ``block_spmv`` instantiation over one :class:`BlockLayout`.

    ``matrix`` is what the plan checks operands against (its shape, dtype and module): a
    CSR mirror (whose own products of several columns run the row-split SpMM kernel on
    its CSR arrays), or a holder of the BSR arrays themselves (:func:`block_plan`: several
    columns run one block product each).
    """

    def __init__(self, matrix: DeviceMatrix, layout: BlockLayout, policy: BlockPolicy):
        super().__init__(matrix, policy)
        self.layout = layout
        if _is_bsr(matrix):
            self._spmm_kernels = False  # the row-split SpMM reads CSR arrays
        self.launches = matrix.shape[0] > 0 and layout.data.shape[0] > 0
        if not self.launches:
            return
        rows, columns = layout.blocksize
        whole = policy.whole_blocks
        if whole:
            _check_whole_blocks(layout)
        elif policy.threads_per_block_row not in group_widths(rows, columns):
            raise ValueError(
                f"threads_per_block_row={policy.threads_per_block_row} is too few for "
                f"{rows}x{columns} blocks; use one of {list(group_widths(rows, columns))}"
            )
        group = policy.threads_per_block_row
        self.kernel = _compile.get_kernel(
            SOURCE,
            kernel_name(matrix.dtype, layout.indices.dtype, rows, columns, group, whole),
            policy.compile_options(),
        )
        n_block_rows = layout.indptr.shape[0] - 1
        self._bind(
            (policy.block_size // group) * rows,
            (
                layout.indptr, layout.indices, layout.data, "x", "y",
                n_block_rows, matrix.shape[0], matrix.shape[1],
            ),
        )  # fmt: skip


def _check_whole_blocks(layout: BlockLayout) -> None:
    """Refuse ``whole_blocks`` for a layout the whole-block kernel cannot read: a shape
    outside :data:`WHOLE_BLOCK_SHAPES`, or values not aligned for its loads of a block."""
    rows, columns = layout.blocksize
    if not takes_whole_blocks(rows, columns):
        raise ValueError(
            "whole_blocks=True takes blocks of "
            f"{', '.join(f'{r}x{c}' for r, c in WHOLE_BLOCK_SHAPES)}, "
            f"not {rows}x{columns}; use whole_blocks=False"
        )
    alignment = _vector_alignment(layout.data.dtype, rows * columns)
    if layout.data.data.ptr % alignment:
        raise ValueError(
            f"whole_blocks=True reads each block as a vector, but the block values start at "
            f"an address that is not a multiple of {alignment} bytes; pass a copy of the "
            "values (data.copy()) or use whole_blocks=False"
        )


def _default_policy(
    n_blocks: int, n_block_rows: int, blocksize, value_dtype, index_dtype, whole: bool
) -> BlockPolicy:
    """The untuned policy: whole blocks per lane where ``whole`` (the shapes of
    :data:`WHOLE_BLOCK_SHAPES`, with the fit that chose them), else tiles; lanes from the
    mean blocks per block row (:func:`_lanes`), block size from the occupancy API on the
    compiled instantiation."""
    group = _lanes(n_blocks, n_block_rows, blocksize, np.dtype(value_dtype).itemsize, whole)
    if n_block_rows == 0 or n_blocks == 0:
        return BlockPolicy(threads_per_block_row=group, whole_blocks=whole, source="default")
    name = kernel_name(value_dtype, index_dtype, *blocksize, group, whole)
    block_size = occupancy.occupancy_block_size(
        _compile.get_kernel(SOURCE, name),
        block_sizes=[b for b in occupancy.BLOCK_SIZES if b <= MAX_BLOCK_SIZE],
    )
    return BlockPolicy(block_size, group, whole_blocks=whole, source="occupancy")


def _lanes(n_blocks: int, n_block_rows: int, blocksize, itemsize: int, whole: bool) -> int:
    """The untuned lanes per block row: :func:`whole_group`'s for whole blocks (with the
    blocks the kernel keeps in flight), else :func:`default_group`'s."""
    mean = n_blocks / max(n_block_rows, 1)
    if whole:
        return whole_group(mean, whole_in_flight(*blocksize, itemsize))
    return default_group(*blocksize, mean)


def _cache_may_help(blocksize, itemsize: int) -> bool:
    """Whether reading whole blocks of this shape through L1 (``cache_blocks``) is worth
    timing: where a block takes a lane more than one 16-byte load, its L1 lines are read by
    several successive loads of the warp; a one-load block gains nothing from L1."""
    rows, columns = blocksize
    return rows * columns * itemsize > 16


def _reads_whole_blocks(blocksize, data) -> bool:
    """Whether the whole-block kernel can read these block values (``data``: the device
    array of the blocks; None for a layout still to be built, which is aligned)."""
    if not takes_whole_blocks(*blocksize):
        return False
    rows, columns = blocksize
    return data is None or data.data.ptr % _vector_alignment(data.dtype, rows * columns) == 0


def _vector_alignment(dtype, values: int) -> int:
    """The alignment in bytes the whole-block kernel's loads of a block of ``values``
    values need: the largest power of two up to 16 that divides the block's bytes
    (``load_block`` in ``kernels/block.cu``)."""
    nbytes = values * np.dtype(dtype).itemsize
    return min(16, nbytes & -nbytes)


def block_plan(indptr, indices, data, shape, policy: BlockPolicy | None = None) -> BlockPlan:
    """A product plan over BSR arrays on the device (what the BSR classes run).

    Parameters
    ----------
    indptr : cupy.ndarray, int32 or int64
        Block row pointers, ``ceil(shape[0] / R) + 1`` long, from 0 to ``nblocks``.
    indices : cupy.ndarray, the same dtype
        The block column of each block, in ``0 .. ceil(shape[1] / C) - 1``.
    data : cupy.ndarray of shape (nblocks, R, C), C-contiguous
        The blocks, row-major; float32, float64, complex64 or complex128; R and C in 1..8.
    shape : tuple of int
        The matrix's shape; rows and columns of the last blocks past it are never read.
    policy : BlockPolicy, optional
        Default: lanes per block row from the mean values per block row, block size from
        the occupancy API.

    Returns
    -------
    BlockPlan
        ``plan.matvec(x, out=None)`` and ``plan.matmat(X, out=None)`` on CuPy's current
        stream (``matmat``: one block product per column of X).

    Raises
    ------
    ValueError
        For arrays that do not form a BSR matrix of ``shape`` (checked once, on the
        device, before any kernel reads them), naming what is wrong.
    TypeError
        For a dtype or block shape the kernel is not instantiated for.
    """
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        raise RuntimeError(f"no GPU: {_cuda.unavailable_reason()}")
    layout = _checked_layout(cupy, indptr, indices, data, shape)
    # what the plan checks operands against (the BSR classes' mirror type; its shape need
    # not be whole blocks here)
    holder = DeviceBlockMatrix(layout.data, layout.indices, layout.indptr, layout.shape, CUPY)
    if policy is None:
        policy = _default_policy(
            layout.data.shape[0],
            layout.indptr.shape[0] - 1,
            layout.blocksize,
            layout.data.dtype,
            layout.indices.dtype,
            _reads_whole_blocks(layout.blocksize, layout.data),
        )
    elif not isinstance(policy, BlockPolicy):
        raise TypeError(f"policy must be a BlockPolicy, got {type(policy).__name__}")
    return BlockPlan(holder, layout, policy)


def _checked_layout(cupy, indptr, indices, data, shape) -> BlockLayout:
    """The arrays as a :class:`BlockLayout` once they are shown to form a BSR matrix."""
    for name, array in (("indptr", indptr), ("indices", indices), ("data", data)):
        if not isinstance(array, cupy.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray, got {type(array).__name__}")
    if data.ndim != 3 or not data.flags.c_contiguous:
        raise ValueError(
            f"data must be a C-contiguous array of shape (nblocks, R, C), got shape "
            f"{data.shape}{'' if data.flags.c_contiguous else ' (not C-contiguous)'}"
        )
    rows, columns = int(data.shape[1]), int(data.shape[2])
    if not supports_blocksize(rows, columns):
        raise TypeError(
            f"the block kernel takes blocks of 1..8 rows and 1..8 columns, got {rows}x{columns}; "
            "use the cusparse_bsr backend for larger blocks"
        )
    if data.dtype not in FLOAT_AND_COMPLEX:
        raise TypeError(
            f"the block kernel does not support value dtype {data.dtype}; it supports "
            f"{', '.join(str(d) for d in FLOAT_AND_COMPLEX)}"
        )
    if indptr.dtype != indices.dtype or indices.dtype not in CXX_INDEX_TYPES:
        raise TypeError(
            f"indptr and indices must share one dtype, int32 or int64; got {indptr.dtype} and "
            f"{indices.dtype}"
        )
    n_rows, n_cols = int(shape[0]), int(shape[1])
    if n_rows < 0 or n_cols < 0:
        raise ValueError(f"shape must be non-negative, got {tuple(shape)}")
    n_block_rows, n_block_cols = -(-n_rows // rows), -(-n_cols // columns)
    n_blocks = int(data.shape[0])
    if indptr.ndim != 1 or indptr.shape[0] != n_block_rows + 1:
        raise ValueError(
            f"indptr has shape {indptr.shape}, expected ({n_block_rows + 1},): one entry per "
            f"block row of {rows} rows, plus one"
        )
    if indices.ndim != 1 or indices.shape[0] != n_blocks:
        raise ValueError(
            f"indices has shape {indices.shape}, expected ({n_blocks},): one block column per "
            "block of data"
        )
    if indices.dtype == np.int32 and n_blocks * rows * columns >= 2**32:
        raise ValueError(
            f"{n_blocks:,} blocks of {rows}x{columns} hold 2^32 values or more; int32 block "
            "indices cannot address them: use int64 indptr and indices"
        )
    first, last = (int(v) for v in cupy.stack((indptr[0], indptr[-1])).get())
    if first != 0 or last != n_blocks:
        raise ValueError(f"indptr must run from 0 to nblocks = {n_blocks}, got {first} .. {last}")
    if n_block_rows and bool((indptr[1:] < indptr[:-1]).any()):
        raise ValueError("indptr must be non-decreasing: a block row cannot end before it starts")
    if n_blocks:
        low, high = (int(v) for v in cupy.stack((indices.min(), indices.max())).get())
        if low < 0 or high >= n_block_cols:
            bad = low if low < 0 else high
            raise ValueError(
                f"block column {bad} is out of range: {n_cols} columns in blocks of {columns} "
                f"make {n_block_cols} block columns (0 .. {n_block_cols - 1})"
            )
    return BlockLayout(indptr, indices, data, (n_rows, n_cols))


# ---------------------------------------------------------------------------- backend
class BlockBackend(Backend):
    """SpMV over small dense blocks (see the module docstring)."""

    name = "block"
    description = (
        "small dense blocks (BSR, 1..8 x 1..8), a group of lanes per block row; on CSR, "
        "aligned b x b blocks found on the device"
    )
    policy_type = BlockPolicy
    value_dtypes = FLOAT_AND_COMPLEX
    estimated = False
    planned = True
    # the CSR classes' mirrors (blocks found and a layout built) and the BSR classes' (their
    # own arrays)
    formats = ("csr", "bsr")

    def refuse_reason(self, matrix: DeviceMatrix) -> str | None:
        if _is_bsr(matrix) and not supports_blocksize(*matrix.blocksize):
            rows, columns = matrix.blocksize
            return (
                f"its {rows}x{columns} blocks are larger than the kernel's 8x8; use the "
                "cusparse_bsr backend"
            )
        return None

    def planning_refuse_reason(self, matrix: DeviceMatrix) -> str | None:
        if _is_bsr(matrix) or matrix.xp is np or _cuda.cupy_or_none() is None:
            return None
        return block_structure(matrix).refuse_reason()

    def structure_note(self, matrix: DeviceMatrix) -> str | None:
        if _is_bsr(matrix) or matrix.xp is np or _cuda.cupy_or_none() is None:
            return None
        structure = block_structure(matrix)
        reason = structure.refuse_reason()
        return str(structure) + (f"; not timed: {reason}" if reason else "")

    def _layout(self, matrix: DeviceMatrix) -> BlockLayout:
        if _is_bsr(matrix):
            return BlockLayout(matrix.indptr, matrix.indices, matrix.data, matrix.shape)
        return block_layout(matrix, block_structure(matrix).size)

    def _blocks_and_block_rows(self, matrix: DeviceMatrix):
        """(stored blocks, block rows, (R, C)) of the layout this backend would run."""
        if _is_bsr(matrix):
            return matrix.data.shape[0], matrix.indptr.shape[0] - 1, tuple(matrix.blocksize)
        structure = block_structure(matrix)
        b = structure.size
        return structure.blocks[b], -(-matrix.shape[0] // b), (b, b)

    def policy_fits(self, matrix: DeviceMatrix, policy: BlockPolicy) -> bool:
        """Whole blocks only where the kernel reads this layout's blocks whole; tiles
        only with lanes enough for one block."""
        _, _, blocksize = self._blocks_and_block_rows(matrix)
        if policy.whole_blocks:
            return _reads_whole_blocks(blocksize, self._block_values(matrix))
        return policy.threads_per_block_row in group_widths(*blocksize)

    def _block_values(self, matrix: DeviceMatrix):
        """A BSR mirror's block values; None for a CSR mirror (its layout, still to be
        built, is aligned)."""
        return matrix.data if _is_bsr(matrix) else None

    def default_policy(self, matrix: DeviceMatrix) -> BlockPolicy:
        """Whole blocks per lane for the shapes of :data:`WHOLE_BLOCK_SHAPES`, else tiles;
        lanes per block row from the mean blocks per block row; block size from the
        occupancy API."""
        n_blocks, n_block_rows, blocksize = self._blocks_and_block_rows(matrix)
        whole = _reads_whole_blocks(blocksize, self._block_values(matrix))
        return _default_policy(
            n_blocks, n_block_rows, blocksize, matrix.dtype, matrix.index_dtype, whole
        )

    def candidates(self, matrix: DeviceMatrix) -> list[BlockPolicy]:
        """Block sizes 128 and 256 times every lanes per block row the block shape takes,
        times 4 or 8 values in flight, uncapped or capped at 48 registers; for the shapes
        of :data:`WHOLE_BLOCK_SHAPES`, also whole blocks per lane at half, once, twice and
        four times :func:`whole_group`'s lanes (up to 32), 4 or 8 blocks in flight, read
        evict-first or, where that may help (:func:`_cache_may_help`), through L1."""
        untuned = self.default_policy(matrix)
        n_blocks, n_block_rows, blocksize = self._blocks_and_block_rows(matrix)
        itemsize = matrix.dtype.itemsize
        out = [untuned] + [
            BlockPolicy(block_size, g, unroll, cap, source="candidate")
            for g in group_widths(*blocksize)
            for block_size in (128, 256)
            for unroll in (4, 8)
            for cap in (None, 48)
        ]
        if _reads_whole_blocks(blocksize, self._block_values(matrix)):
            g = _lanes(n_blocks, n_block_rows, blocksize, itemsize, whole=True)
            out += [
                BlockPolicy(
                    block_size,
                    lanes,
                    unroll,
                    whole_blocks=True,
                    cache_blocks=cached,
                    source="candidate",
                )
                for lanes in dict.fromkeys((max(1, g // 2), g, min(32, 2 * g), min(32, 4 * g)))
                for block_size in (128, 256)
                for unroll in (4, 8)
                for cached in ((False, True) if _cache_may_help(blocksize, itemsize) else (False,))
            ]
        return list(dict.fromkeys(out))

    def planning_candidates(self, matrix: DeviceMatrix) -> list[BlockPolicy]:
        """Whole blocks per lane (the untuned policy of 2 x 2 and 3 x 3 blocks): it, with
        twice and four times the lanes (up to 32), and the tiles' untuned policy; on the dev
        set's randomly numbered meshes twice the lanes ran 3-12% faster than the untuned
        rule's. Where a block takes a lane more than one 16-byte load, the untuned lanes
        and twice them also read the blocks through L1 (``cache_blocks``): on the 2-D 3 x 3
        mesh of the sweep's ``dev2`` set (float64, natural order) that ran 8.6% faster
        than any evict-first policy (``whole_block_sweep_h100``). Tiles (the other
        shapes): the untuned policy, with twice the values in flight, and with half the
        lanes per block row where the block shape takes that."""
        untuned = self.default_policy(matrix)
        n_blocks, n_block_rows, blocksize = self._blocks_and_block_rows(matrix)
        if untuned.whole_blocks:
            lanes = untuned.threads_per_block_row
            wider = [
                replace(untuned, threads_per_block_row=min(32, k * lanes), source="candidate")
                for k in (2, 4)
            ]
            cached = []
            if _cache_may_help(blocksize, matrix.dtype.itemsize):
                cached = [
                    replace(p, cache_blocks=True, source="candidate") for p in (untuned, wider[0])
                ]
            tiles = _lanes(n_blocks, n_block_rows, blocksize, matrix.dtype.itemsize, False)
            out = [
                untuned,
                *wider,
                *cached,
                BlockPolicy(untuned.block_size, tiles, source="candidate"),
            ]
            return list(dict.fromkeys(out))
        out = [untuned, replace(untuned, unroll=8, source="candidate")]
        half = untuned.threads_per_block_row // 2
        if half in group_widths(*blocksize):
            out.append(replace(untuned, threads_per_block_row=half, source="candidate"))
        return out

    def plan(self, matrix: DeviceMatrix, policy: BlockPolicy) -> BlockPlan:
        return BlockPlan(matrix, self._layout(matrix), policy)


def _is_bsr(matrix) -> bool:
    return matrix.format == "bsr"


BACKENDS = [BlockBackend()]

FAMILY = _compile.register_family(
    _compile.KernelFamily(
        SOURCE,
        tuple(
            kernel_name(value, index, rows, columns, group)
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
            for rows in BLOCK_DIMENSIONS
            for columns in BLOCK_DIMENSIONS
            for group in group_widths(rows, columns)
        )
        + tuple(
            kernel_name(value, index, rows, columns, group, whole=True)
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
            for rows in BLOCK_DIMENSIONS
            for columns in BLOCK_DIMENSIONS
            if takes_whole_blocks(rows, columns)
            for group in THREADS_PER_ROW_CHOICES
        )
        + tuple(count_kernel_name(index) for index in CXX_INDEX_TYPES),
    )
)
