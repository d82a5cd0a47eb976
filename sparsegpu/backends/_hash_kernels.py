"""The hash rows' kernels (:mod:`.hash_spgemm` describes the algorithm): their sources and
instantiations, their names, the sizes of their tables and groups, a launch by name, the
listing of rows by class, and the dense rows' launch: what the passes of
:mod:`._hash_rows` (rows listed by their tables) and :mod:`._hash_first` (short and tiny
rows first) share. They read these names through this module (``_hash_kernels.NAME``), so
that one assignment here (a test's, an experiment's variant) reaches every pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..device import _cuda
from ..device._compile import KernelFamily, get_kernel, register_family
from ..device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, KernelLaunch, name_expression
from .spgemm import Budget, DoesNotFit

SOURCE = "spgemm_hash.cu"
SHORT_SOURCE = "spgemm_short.cu"
SHORT_BLOCK = 128  # threads a block of the short rows' kernels (as the kernel's constant)
SHORT_BLOCKS_PER_SM = 16  # their grid-stride loops' blocks an SM
# (lanes a row, the most products a row) of the short rows' kernels, by the row's table
SHORT_GROUPS = {32: (8, 32), 64: (16, 64), 128: (32, 128), 256: (32, 256)}
# short rows first's first slots: rows of at most this many products (:mod:`._hash_first`)
SHORT_FIRST_SLOTS = 64
# Short rows first, listed on the device: where the known longest rows bound every row by
# the largest of these classes' products (and the indices are 32-bit: a class of 512
# products of 64-bit indices and complex128 values would take more than the 48 KiB of
# static shared memory a block), the rows left by the first slots are listed by their
# products and every class is counted, then filled, by kernels that read the class's rows
# off the listing's counts on the device (spgemm_short_count_listed and _fill_listed): no
# host wait for the class counts and no slots, one wait (for C's nonzeros) in the product.
# (lanes a row, the most products a row) of each class, by its products.
LISTED_GROUPS = {128: SHORT_GROUPS[128], 256: SHORT_GROUPS[256], 512: (32, 512)}
# tiny first's first slots, a thread a row: rows of at most this many products (fitted with
# TINY_FIRST, :mod:`._hash_first`)
TINY_FIRST_SLOTS = 8
CLASSES = 64  # as the kernels count them (class 0: rows with nothing to compute)
MAX_CLASS = 30  # tables of up to 2^30 slots (larger: DoesNotFit, a leaner algorithm runs)
BLOCK = 256  # threads per block of the listing kernels
# Tables of up to this many slots: a group of a warp's lanes per row (see GROUPS), blocks of
# up to ROWS_PER_BLOCK warps whose tables take at most WARP_BLOCK_BYTES of shared memory
# together (a table of 1,024 keys of a symbolic pass is 4 KiB: eight rows a block)
WARP_SLOTS = 1024
SLOTS_PER_LANE = 4  # a warp's group of lanes for a table: slots / SLOTS_PER_LANE lanes
WHOLE_BLOCK_MIN_THREADS = 256  # a block per row: at least this many threads, 1 per 8 slots
ROWS_PER_BLOCK = 8
WARP_BLOCK_BYTES = 32 * 1024
# Shared memory a kernel declares statically (spgemm_hash_count's counters), kept out of
# what its tables may take
STATIC_SHARED_BYTES = 1024
# Rows whose table is in global memory: this many blocks an SM, each with its own table
GLOBAL_BLOCKS_PER_SM = 2
# blocks an SM of spgemm_products_total (a grid-stride loop over L's entries)
TOTAL_BLOCKS_PER_SM = 8
# the kernels' default dynamic shared memory limit (more needs the function's opt-in)
DEFAULT_SHARED_BYTES = 48 * 1024
# Dense rows (spgemm_dense_count / spgemm_dense_fill): a class whose tables have at least
# DENSE_MIN_SLOTS slots (DENSE_MIN_FILL_SLOTS in the numeric pass) and 1 / DENSE_MIN_SHARE
# as many as C has columns runs a block per row over a bitmap of all the columns in shared
# memory (and, numeric, a dense row of values a block in global memory: DENSE_BLOCKS_PER_SM
# blocks an SM, their rows of values at most DENSE_MAX_BYTES together) where the bitmap
# fits; DENSE_MIN_SHARE 0: never. Fitted on R-MAT 17 (hash_spgemm: the skewed rows rule)
DENSE_MIN_SHARE = 64
DENSE_MIN_SLOTS = 2048
DENSE_MIN_FILL_SLOTS = 4096
DENSE_THREADS = 1024
DENSE_BLOCKS_PER_SM = 2
DENSE_MAX_BYTES = 2**30


def _index_kernel(template: str, index_dtype, *parameters) -> str:
    """``template<Index, parameters...>`` (the listing and symbolic kernels)."""
    arguments = [CXX_INDEX_TYPES[np.dtype(index_dtype)], *map(str, parameters)]
    return f"{template}<{', '.join(arguments)}>"


def _count_kernel(index_dtype, lanes: int, whole_block: bool) -> str:
    return _index_kernel("spgemm_hash_count", index_dtype, lanes, _flag(whole_block))


def _sample_kernel(index_dtype, lanes: int, whole_block: bool) -> str:
    return _index_kernel("spgemm_hash_sample", index_dtype, lanes, _flag(whole_block))


def _fill_kernel(value_dtype, index_dtype, lanes: int, whole_block: bool) -> str:
    return name_expression("spgemm_hash_fill", value_dtype, index_dtype, lanes, _flag(whole_block))


def _dense_count_kernel(index_dtype) -> str:
    return _index_kernel("spgemm_dense_count", index_dtype)


def _dense_fill_kernel(value_dtype, index_dtype) -> str:
    return name_expression("spgemm_dense_fill", value_dtype, index_dtype)


def _short_count_kernel(index_dtype, slots: int) -> str:
    lanes, cap = SHORT_GROUPS[slots]
    return _index_kernel("spgemm_short_count", index_dtype, lanes, cap)


# The short rows' numeric sort moves one 32-bit key a product where it fits (narrow_keys);
# False: never (the two compared in one process, spgemm_hash_kernels --variants). Fit
# matrices, H200, spgemm_short_narrow_h200: the short fill over every row of the 7-point
# 120^3 stencil 1.77 ms against 2.18 (the product 2.40 against 2.81), of the P1 instance
# 0.319 against 0.372 (1.165 against 1.180).
SHORT_NARROW = True


def narrow_keys(index_dtype, n_cols: int, cap: int) -> bool:
    """Whether the short rows' numeric sort of rows of up to ``cap`` products moves one
    32-bit key a product (``NARROW`` in kernels/spgemm_short.cu: the column above the
    product's place among the row's): 32-bit indices, and C's ``n_cols`` columns below
    2^(32 - log2 cap) - 1, so that no key is the sort's pad (and :data:`SHORT_NARROW`)."""
    bits = int(cap).bit_length() - 1
    fits = np.dtype(index_dtype) == np.int32 and n_cols < (1 << (32 - bits)) - 1
    return bool(SHORT_NARROW) and fits


def _short_fill_kernel(value_dtype, index_dtype, slots: int, slotted: bool, narrow=False) -> str:
    lanes, cap = SHORT_GROUPS[slots]
    return name_expression(
        "spgemm_short_fill", value_dtype, index_dtype, lanes, cap, _flag(slotted), _flag(narrow)
    )


def _short_count_listed_kernel(index_dtype, slots: int) -> str:
    lanes, cap = LISTED_GROUPS[slots]
    return _index_kernel("spgemm_short_count_listed", index_dtype, lanes, cap)


def _short_fill_listed_kernel(value_dtype, index_dtype, slots: int, narrow: bool) -> str:
    lanes, cap = LISTED_GROUPS[slots]
    return name_expression(
        "spgemm_short_fill_listed", value_dtype, index_dtype, lanes, cap, _flag(narrow)
    )


def _slot_move_kernel(value_dtype, index_dtype, slots: int, lanes: int, listed: bool) -> str:
    """The move of slotted rows into ``C``: ``lanes`` lanes a row (32, or 1 for tiny
    first's), ``listed`` (the short fill's listed rows) or every row (the first slots)."""
    return name_expression(
        "spgemm_slot_move", value_dtype, index_dtype, slots, lanes, _flag(listed)
    )


def _short_first_kernel(value_dtype, index_dtype, slots: int, narrow=False) -> str:
    lanes, cap = SHORT_GROUPS[slots]
    return name_expression(
        "spgemm_short_first", value_dtype, index_dtype, lanes, cap, _flag(narrow)
    )


def _tiny_first_kernel(value_dtype, index_dtype, slots: int) -> str:
    return name_expression("spgemm_tiny_first", value_dtype, index_dtype, slots)


def _flag(value: bool) -> str:
    return "true" if value else "false"


# (lanes a row, whole block): groups of a warp's lanes, several rows a warp, for tables of
# up to 32 and 64 slots (short rows: more rows' loads in flight a warp); a warp; a block
GROUPS = ((8, False), (16, False), (32, False), (32, True))

HASH_FAMILY = register_family(
    KernelFamily(
        SOURCE,
        tuple(
            _index_kernel(template, index)
            for index in CXX_INDEX_TYPES
            for template in (
                "spgemm_hash_bounds",
                "spgemm_products_total",
                "spgemm_hash_classes",
                "spgemm_hash_bin",
            )
        )
        + tuple(
            kernel(index, lanes, whole)
            for kernel in (_count_kernel, _sample_kernel)
            for index in CXX_INDEX_TYPES
            for lanes, whole in GROUPS
        )
        + tuple(
            _fill_kernel(value, index, lanes, whole)
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
            for lanes, whole in GROUPS
        )
        + tuple(_dense_count_kernel(index) for index in CXX_INDEX_TYPES)
        + tuple(
            _dense_fill_kernel(value, index)
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
        ),
    )
)


# the slot moves (slots, lanes a row, listed rows): the short fill's slotted classes, the
# first slots of short rows first (a warp a row) and of tiny first (a thread a row)
_SLOT_MOVES = (
    *((s, 32, True) for s in SHORT_GROUPS),
    (SHORT_FIRST_SLOTS, 32, False),
    (TINY_FIRST_SLOTS, 1, False),
)

# the short rows' NARROW instantiations by index type (32-bit keys: 32-bit indices only)
_NARROW_OF = {index: (False, True) if index == np.int32 else (False,) for index in CXX_INDEX_TYPES}

SHORT_FAMILY = register_family(
    KernelFamily(
        SHORT_SOURCE,
        tuple(_index_kernel("spgemm_short_unlist", index) for index in CXX_INDEX_TYPES)
        + tuple(_short_count_kernel(index, s) for index in CXX_INDEX_TYPES for s in SHORT_GROUPS)
        + tuple(
            _short_fill_kernel(value, index, s, slotted, narrow)
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
            for s in SHORT_GROUPS
            for slotted in (False, True)
            for narrow in _NARROW_OF[index]
        )
        + tuple(
            _slot_move_kernel(value, index, slots, lanes, listed)
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
            for slots, lanes, listed in _SLOT_MOVES
        )
        + tuple(
            _short_first_kernel(value, index, SHORT_FIRST_SLOTS, narrow)
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
            for narrow in _NARROW_OF[index]
        )
        + tuple(_index_kernel("spgemm_entry_products", index) for index in CXX_INDEX_TYPES)
        + tuple(
            _tiny_first_kernel(value, index, TINY_FIRST_SLOTS)
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
        )
        + tuple(_short_count_listed_kernel(np.int32, s) for s in LISTED_GROUPS)
        + tuple(
            _short_fill_listed_kernel(value, np.int32, s, narrow)
            for value in CXX_VALUE_TYPES
            for s in LISTED_GROUPS
            for narrow in (False, True)
        ),
    )
)


@dataclass(frozen=True)
class TableLaunch:
    """How one class of rows runs: a warp or a block per row, the launch, and where the
    tables are (``global_slots`` > 0: a table of that many slots per block in global
    memory)."""

    lanes: int
    whole_block: bool
    block: int
    grid: int
    shared_bytes: int
    global_slots: int = 0


def table_launch(slots: int, slot_bytes: int, rows: int, device) -> TableLaunch:
    """The launch of ``rows`` rows whose tables have ``slots`` slots of ``slot_bytes``."""
    table = slots * slot_bytes
    if slots <= WARP_SLOTS and table <= WARP_BLOCK_BYTES:
        # 32 slots: 8 lanes, 64: 16, more: a warp (SLOTS_PER_LANE 4)
        lanes = min(32, max(8, slots // SLOTS_PER_LANE))
        most = ROWS_PER_BLOCK * 32 // lanes
        groups = max(1, min(most, WARP_BLOCK_BYTES // table, rows))
        return TableLaunch(lanes, False, lanes * groups, -(-rows // groups), groups * table)
    if table <= device.shared_memory_per_block_optin - STATIC_SHARED_BYTES:
        threads = min(1024, max(WHOLE_BLOCK_MIN_THREADS, slots // 8))
        return TableLaunch(32, True, threads, rows, table)
    grid = min(rows, GLOBAL_BLOCKS_PER_SM * device.multiprocessors)
    return TableLaunch(32, True, 1024, grid, 0, slots)


def _bitmap_bytes(n_cols: int) -> int:
    """Bytes of a dense row's bitmap of ``n_cols`` columns (32-bit words)."""
    return 4 * -(-n_cols // 32)


def dense_rows_fit(n_cols: int, device) -> bool:
    """Whether rows may run as dense rows at all: :data:`DENSE_MIN_SHARE` set and a bitmap
    of ``n_cols`` columns within this GPU's shared memory a block."""
    return bool(DENSE_MIN_SHARE) and (
        _bitmap_bytes(n_cols) <= device.shared_memory_per_block_optin - STATIC_SHARED_BYTES
    )


def dense_launch(
    slots: int, n_cols: int, rows: int, device, value_bytes: int = 0
) -> TableLaunch | None:
    """The launch of ``rows`` rows of tables of ``slots`` slots as dense rows (a block per
    row over a bitmap of C's ``n_cols`` columns; ``value_bytes`` > 0, the numeric pass:
    ``global_slots`` the dense row of values of each block), or None where they keep
    their tables: a table of less than :data:`DENSE_MIN_SLOTS` slots
    (:data:`DENSE_MIN_FILL_SLOTS` numeric) or 1 /
    :data:`DENSE_MIN_SHARE` of the columns, or a bitmap beyond shared memory."""
    if not dense_rows_fit(n_cols, device):
        return None
    least = DENSE_MIN_FILL_SLOTS if value_bytes else DENSE_MIN_SLOTS
    if slots < least or slots * DENSE_MIN_SHARE < n_cols:
        return None
    grid = min(rows, DENSE_BLOCKS_PER_SM * device.multiprocessors)
    if value_bytes:
        grid = max(1, min(grid, DENSE_MAX_BYTES // (n_cols * value_bytes)))
    shared = _bitmap_bytes(n_cols)
    return TableLaunch(32, True, DENSE_THREADS, grid, shared, n_cols if value_bytes else 0)


def _kernel(name: str, shared_bytes: int, source: str = SOURCE):
    """The compiled kernel, allowed ``shared_bytes`` of dynamic shared memory (the
    function's opt-in beyond the default 48 KiB)."""
    kernel = get_kernel(source, name)
    beyond_default = shared_bytes + STATIC_SHARED_BYTES > DEFAULT_SHARED_BYTES
    if beyond_default and kernel.max_dynamic_shared_size_bytes < shared_bytes:
        kernel.max_dynamic_shared_size_bytes = shared_bytes
    return kernel


# (device, kernel, block, shared bytes) -> its KernelLaunch, every parameter a named slot
_launches: dict = {}


def _launch(
    name: str, grid: int, block: int, arguments, shared_bytes: int = 0, source: str = SOURCE
) -> None:
    """Launch ``name`` (of ``source``) on ``arguments`` (its launch made once per shape: a
    product's few launches each only write their slots)."""
    if grid <= 0:
        return
    slots = {f"p{i}": argument for i, argument in enumerate(arguments)}
    key = (_cuda.cupy_or_none().cuda.Device().id, name, block, shared_bytes)
    launch = _launches.get(key)
    if launch is None:
        kernel = _kernel(name, shared_bytes, source)
        launch = _launches.setdefault(key, KernelLaunch(kernel, block, list(slots), shared_bytes))
    launch(grid, **slots)


def _launch_short(name: str, grid: int, arguments, block: int | None = None) -> None:
    """Launch ``name`` of the short rows' source (blocks of :data:`SHORT_BLOCK` threads,
    or ``block``) on ``arguments``, as :func:`_launch`."""
    _launch(name, grid, SHORT_BLOCK if block is None else block, arguments, source=SHORT_SOURCE)


def _list_rows(sizes, n_rows: int, cap: int, half: bool, rows):
    """Launch the listing of the rows with something to compute into ``rows``, class by
    class (by the table ``sizes`` needs, see the kernels); the class counts, on the device
    (read them with :func:`_classes`)."""
    cupy = _cuda.cupy_or_none()
    index = sizes.dtype
    counters = cupy.zeros(2 * CLASSES, dtype=np.uint64)
    counts, cursors = counters[:CLASSES], counters[CLASSES:]
    grid = -(-n_rows // BLOCK)
    arguments = (sizes, n_rows, cap, int(half))
    _launch(_index_kernel("spgemm_hash_classes", index), grid, BLOCK, (*arguments, counts))
    bin_arguments = (*arguments, counts, cursors, rows)
    _launch(_index_kernel("spgemm_hash_bin", index), grid, BLOCK, bin_arguments)
    return counts


def _classes(counts) -> list[tuple[int, int, int]]:
    """``[(class, first, count)]`` of the classes present in a listing (one host
    synchronisation), as the kernels place them (class 0, nothing to compute, unlisted)."""
    host = counts.get().astype(np.int64)
    starts = np.zeros(CLASSES, dtype=np.int64)
    starts[2:] = np.cumsum(host[1:-1])
    return [(c, int(starts[c]), int(host[c])) for c in range(1, CLASSES) if host[c]]


def _slots(table_class: int) -> int:
    if table_class > MAX_CLASS:
        raise DoesNotFit(0, None, f"a row's hash table of 2^{table_class} slots")
    return 1 << table_class


def _global_tables(budget: Budget, launch: TableLaunch, dtype, what: str):
    return (
        budget.empty(launch.grid * launch.global_slots, dtype, what)
        if launch.global_slots
        else None
    )


def _grid_of(groups: int, rows: int, device) -> int:
    """The grid of a grid-stride loop of ``rows`` rows, ``groups`` a block."""
    return max(1, min(-(-rows // groups), SHORT_BLOCKS_PER_SM * device.multiprocessors))


def table_slots(need: int) -> int:
    """The slots of a table for ``need`` keys: the kernels' ``table_class`` (a power of
    two, at least 32)."""
    return max(32, 1 << max(int(need) - 1, 0).bit_length())
