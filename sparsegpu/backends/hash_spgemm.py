"""SpGEMM of our own on the GPU: hash rows (``kernels/spgemm_hash.cu``), beside cuSPARSE's.

:class:`GpuSpgemm` is the GPU's SpGEMM engine: cuSPARSE's algorithms (``alg1``, ``alg2``,
``alg3``, SpGEMMreuse; :mod:`sparsegpu.backends.cusparse_spgemm`) and ``"hash"``, which
computes ``C = L @ R`` in two passes over the rows of ``L`` as nsparse does:

1. each row's bound (its products: the lengths of the rows of ``R`` it selects); rows are
   listed by the hash table that bound needs (a power of two of slots, at least 32);
2. symbolic: each row's distinct columns counted in its table (shared memory: 8, 16 or
   32 lanes of a warp per row for tables of up to :data:`WARP_SLOTS` slots, several rows a
   block, else a block per row; tables too big for shared memory in global memory, a
   table per block that loops over such rows); a scan of the counts gives ``C``'s row offsets;
3. numeric: rows listed again by their entries (tables of 1.5 times the entries, 1.25
   times past 128), each row's products summed in its table, the table sorted by column
   and written: canonical CSR. A block's table of at least :data:`MERGE_SLOTS` slots is
   not sorted whole: its entries are gathered into the row's place in ``C``, sorted in
   runs by each warp and merged pair by pair (the longest power-law rows' tables took 0.2
   ms each to sort in shared memory, 0.5 in global memory).

Rows of at most :data:`SHORT_SLOTS` products are *short rows* (``kernels/spgemm_short.cu``)
in both passes: a group of lanes gathers the row's products in shared memory and sorts them
in registers, no table; where their work space fits, the symbolic pass writes them into
slots of their class's size and the numeric pass moves them into place (no count pass).
With 32-bit indices and ``C``'s columns below 2^(32 - log2 slots) - 1 (:func:`narrow_keys`)
the numeric sort moves one 32-bit key a product, the column above the product's place among
the row's, and the runs' sums read the values where the gather left them.

*Short rows first* (:func:`takes_short_first`: rows bounded by at most
:data:`SHORT_FIRST_MAX_BOUND` products by the known longest rows, at most
:data:`SHORT_FIRST_SLOTS` a row on average, as a P1 mesh's square): no bounds and no listing
of every row; one kernel (``spgemm_short_first``) sums each row's products and computes the
rows of at most :data:`SHORT_FIRST_SLOTS` into slots indexed by the row, and only the rows
of more are listed (by their products: short rows of up to
:data:`SHORT_FIRST_LISTED_SLOTS`, then tables); the numeric pass moves the slots and fills
the listed rows' tables (twice their symbolic slots) without listing them again: one host
synchronisation fewer, none before the scan where the bound is at most
:data:`SHORT_FIRST_SLOTS`, nor where it is at most :data:`LISTED_GROUPS`' largest class
(32-bit indices): there every listed row is a short row, counted and then filled by kernels
that read their class's rows off the listing's counts on the device. Where its slots (a
slot a row) do not fit the budget, every row is listed as above. *Tiny first*
(:func:`takes_tiny_first`: skewed rows, no known bound, as power-law rows) starts the same
way with a thread a row (``spgemm_tiny_first``: rows of at most :data:`TINY_FIRST_SLOTS`
products in registers; each row's products read off the running count of ``L``'s entries'
products, so no thread walks a long row) and lists the others on the host.

Rows whose tables would hold a large share of ``C``'s columns (R-MAT's hubs: tables of at
least 1 / :data:`DENSE_MIN_SHARE` of the columns) are *dense rows* in both passes, where a
bitmap of all the columns fits in shared memory: a block per row sets a bit per column
(symbolic: the bits counted), sums the products into a dense row of values in global
memory, and writes the columns in order from the bitmap, a warp per word (no sort), as
spECK's dense accumulators do.

Two host synchronisations (the class counts of the symbolic listing; those of the numeric
listing with ``C``'s number of entries). Work space: two arrays of ``L``'s rows (bounds,
then entries; the row lists) and, for rows whose table does not fit in shared memory, the
blocks' global tables; counted in the product's :class:`~.spgemm.Budget` (``DoesNotFit``
beyond it).

Which of ``hash`` and ``alg1`` a first product runs is :meth:`GpuSpgemm.estimate`'s rule;
planning times both (and the others) on the second product of a pair of patterns.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..device import _cuda
from ..device._compile import KernelFamily, get_kernel, register_family
from ..device._host_words import HostWords
from ..device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, KernelLaunch, name_expression
from . import select_spgemm
from .cusparse_spgemm import CusparseSpgemm
from .select_spgemm import SELECT
from .spgemm import (
    INT64,
    Budget,
    Counted,
    DoesNotFit,
    ResultSink,
    exact_products,
    products_decide_indices,
    with_index_dtype,
)

HASH = "hash"
SOURCE = "spgemm_hash.cu"
SHORT_SOURCE = "spgemm_short.cu"
# Rows of at most this many products (their tables of at most this many slots in the
# symbolic listing) run short rows (kernels/spgemm_short.cu: a group of lanes gathers the
# row's products in shared memory and sorts them in registers: no table) in both passes;
# 0: never.
# Fitted below (SHORT_SLOTS' comment)
SHORT_SLOTS = 64
SHORT_BLOCK = 128  # threads a block of the short rows' kernels (as the kernel's constant)
SHORT_BLOCKS_PER_SM = 16  # their grid-stride loops' blocks an SM
# (lanes a row, the most products a row) of the short rows' kernels, by the row's table
SHORT_GROUPS = {32: (8, 32), 64: (16, 64), 128: (32, 128), 256: (32, 256)}
# Short first (spgemm_short_first): where hash rows take a product whose rows are short on
# average, every row is first tried as a short row of SHORT_FIRST_SLOTS products (no
# listing before it), and only the rows of more are listed; of those, classes of up to
# SHORT_FIRST_LISTED_SLOTS run as (slotted) short rows too, the rest in tables. Taken
# (takes_short_first) where the known longest rows bound a row's products by
# SHORT_FIRST_MAX_BOUND (tables of a warp's group: no whole-block, global or dense rows
# among what is left) and the products a row are at most SHORT_FIRST_SLOTS on average.
# Fitted below (the rule's comment). SHORT_FIRST_LISTED_SLOTS: 256 (fit P1 instance, seed
# 11, H200, spgemm_short_narrow_h200: its 45 rows of 129-223 products took 0.088 ms in
# tables, count and fill, and 0.041 as short rows of 256, fill and move; the product 1.180
# against 1.221 ms with 128).
SHORT_FIRST_SLOTS = 64
SHORT_FIRST_LISTED_SLOTS = 256
SHORT_FIRST_MAX_BOUND = 1024
# Short rows first, listed on the device: where the known longest rows bound every row by
# the largest of these classes' products (and the indices are 32-bit: a class of 512
# products of 64-bit indices and complex128 values would take more than the 48 KiB of
# static shared memory a block), the rows left by the first slots are listed by their
# products and every class is counted, then filled, by kernels that read the class's rows
# off the listing's counts on the device (spgemm_short_count_listed and _fill_listed): no
# host wait for the class counts and no slots, one wait (for C's nonzeros) in the product.
# (lanes a row, the most products a row) of each class, by its products.
LISTED_GROUPS = {128: SHORT_GROUPS[128], 256: SHORT_GROUPS[256], 512: (32, 512)}
# False: the listing is always read by the host (the two compared in one process,
# spgemm_hash_kernels --variants)
SHORT_FIRST_DEVICE_LISTING = True
# Tiny first (spgemm_tiny_first): where the rows are skewed (no known bound, a power-law
# matrix's few long rows among many of a few products), short rows first start with a
# thread a row instead: each row's products read off the running count of L's entries'
# products (no lane walks a long row), the rows of at most TINY_FIRST_SLOTS products
# computed in registers into slots indexed by the row, the others listed as short first
# lists them (host listing: short rows, then tables of 2^TINY_COUNT_SHIFT times their
# class's slots in the count, so that rows of nearly all-distinct products do not fill
# them). TINY_FIRST 0: never. TINY_FIRST_SLOTS fitted on the fit power-law 1.5M only (H200,
# forced hash rows, spgemm_tiny_slots_fit_h200): rows of at most 4, 8 and 16 products a
# thread 2.54, 2.56 and 2.88 ms (16: the thread's insertion 0.56 ms over every row, 0.22
# with 8); 8 leaves fewer rows to the listing. The first product's rule keeps ALG1 on
# power-law rows (1.33 ms there): tiny first runs where hash rows are forced or timed by
# planning, and on skewed rows the rule counts into hash rows.
TINY_FIRST = 1
TINY_FIRST_SLOTS = 8
TINY_BLOCK = 128  # threads a block of the tiny rows' kernels
TINY_COUNT_SHIFT = 1
# A whole block's numeric table of at least this many slots is merged, not sorted
# (spgemm_hash.cu's merged rows: its entries gathered into C, sorted in runs by each warp,
# merged pair by pair); 0: never. Fit matrices, H200, forced hash rows (spgemm_hash_kernels
# --variants, runs of 128 then): power-law 1.5M 3.10 ms at 2,048 against 3.31 never, 3.17
# at 4,096 and 3.19 at 8,192; the 3-D 3 x 3 blocks 36^3 (18.05-18.14 ms) and R-MAT 17
# (62.7-63.6) alike at every setting. The smallest whole-block table: every one merged.
MERGE_SLOTS = 2048
CLASSES = 64  # as the kernels count them (class 0: rows with nothing to compute)
MAX_CLASS = 30  # tables of up to 2^30 slots (larger: DoesNotFit, a leaner algorithm runs)
BLOCK = 256  # threads per block of the listing kernels
BOUND_LANES = 8  # lanes per row of spgemm_hash_bounds (as the kernel's constant)
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
# fits; DENSE_MIN_SHARE 0: never. Fitted on R-MAT 17 (the rule's comment below)
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


@dataclass
class _ShortRows:
    """The rows a product runs as short rows (the symbolic listing's first rows, copied out
    of it for the numeric pass, which lists the others again), ``[(slots, first, count)]``
    of their classes within them and, where the symbolic pass wrote them into slots
    (:func:`_short_slotted`), those slots' indices and values (else None: the numeric
    pass computes them)."""

    rows: object
    classes: list
    slot_indices: object = None
    slot_data: object = None


def _grid_of(groups: int, rows: int, device) -> int:
    """The grid of a grid-stride loop of ``rows`` rows, ``groups`` a block."""
    return max(1, min(-(-rows // groups), SHORT_BLOCKS_PER_SM * device.multiprocessors))


def _short_count(left, right, rows, count: int, slots: int, sizes, device) -> None:
    lanes = SHORT_GROUPS[slots][0]
    arguments = (left.indptr, left.indices, right.indptr, right.indices, rows, count, sizes)
    grid = _grid_of(SHORT_BLOCK // lanes, count, device)
    name = _short_count_kernel(left.index_dtype, slots)
    _launch(name, grid, SHORT_BLOCK, arguments, source=SHORT_SOURCE)


def _short_fill_launch(left, right, rows, count, slots, outputs, slotted, device) -> None:
    lanes = SHORT_GROUPS[slots][0]
    arguments = (
        left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
        rows, count, *outputs,
    )  # fmt: skip
    grid = _grid_of(SHORT_BLOCK // lanes, count, device)
    narrow = narrow_keys(left.index_dtype, right.shape[1], SHORT_GROUPS[slots][1])
    name = _short_fill_kernel(left.dtype, left.index_dtype, slots, slotted, narrow)
    _launch(name, grid, SHORT_BLOCK, arguments, source=SHORT_SOURCE)


def _slot_bases(classes: list) -> list[int]:
    """Where each short class's slots start (``count`` slots of ``slots`` entries each)."""
    return list(np.cumsum([0] + [slots * count for slots, _, count in classes[:-1]]))


def _short_slotted(left, right, rows, classes, sizes, budget: Budget, device):
    """The short rows computed into slots of their class's entries a row, their sizes into
    ``sizes`` (one pass: no count, the numeric pass moves them); ``(indices, data)`` of
    the slots, or None where they do not fit the budget (the rows are counted instead)."""
    entries = sum(slots * count for slots, _, count in classes)
    try:
        indices = budget.empty(entries, left.index_dtype, "the hash SpGEMM's short rows' slots")
    except DoesNotFit:
        return None
    try:
        data = budget.empty(entries, left.dtype, "the hash SpGEMM's short rows' slots")
    except DoesNotFit:
        budget.release(indices)
        return None
    for (slots, first, count), base in zip(classes, _slot_bases(classes), strict=True):
        outputs = (0, indices[base:], data[base:], sizes)
        _short_fill_launch(left, right, rows[first:], count, slots, outputs, True, device)
    return indices, data


def _short_numeric(left, right, short: _ShortRows, indptr, indices, data, device) -> None:
    """The short rows into ``C``: moved from their slots, or computed now."""
    if short.slot_indices is None:
        for slots, first, count in short.classes:
            outputs = (indptr, indices, data, 0)
            rows = short.rows[first:]
            _short_fill_launch(left, right, rows, count, slots, outputs, False, device)
        return
    for (slots, first, count), base in zip(short.classes, _slot_bases(short.classes), strict=True):
        rows = short.rows[first:]
        arguments = (
            rows, count, rows, short.slot_indices[base:], short.slot_data[base:], indptr,
            indices, data,
        )  # fmt: skip
        grid = _grid_of(SHORT_BLOCK // 32, count, device)
        name = _slot_move_kernel(left.dtype, left.index_dtype, slots, 32, True)
        _launch(name, grid, SHORT_BLOCK, arguments, source=SHORT_SOURCE)


def _set_short_rows_apart(classes: list, rows, sizes, budget: Budget, slotted):
    """The short rows (``classes``, the first of the symbolic listing ``rows``; ``slotted``
    their slots or None) copied out of it and their sizes set to 0, so that the numeric
    listing leaves them out; None where there are none."""
    if not classes:
        return None
    slots, first, count = classes[-1]
    listed = first + count
    copy = budget.empty(listed, rows.dtype, "the hash SpGEMM's short rows")
    short = _ShortRows(copy, classes, *(slotted or ()))
    short.rows.data.copy_from_device_async(rows.data, short.rows.nbytes)  # no kernel to build
    name = _index_kernel("spgemm_short_unlist", rows.dtype)
    _launch(name, -(-listed // BLOCK), BLOCK, (short.rows, listed, sizes), source=SHORT_SOURCE)
    return short


def _release_short(budget: Budget, short: _ShortRows | None) -> None:
    if short is not None:
        budget.release(short.rows, short.slot_indices, short.slot_data)


def _is_short(slots: int, n_cols: int) -> bool:
    """Whether rows of a symbolic class of tables of ``slots`` slots run as short rows: at
    most :data:`SHORT_SLOTS`, and fewer than ``C``'s columns (the listing caps a row's
    products at them: a class of as many slots may hold rows of more products)."""
    return slots <= SHORT_SLOTS and slots < n_cols


def _symbolic(left, right, budget: Budget, indptr, list_numeric: bool):
    """``C``'s row offsets into ``indptr`` and its nonzeros; with the row sizes (each row's
    entries now) and the row lists, which the caller releases, and (``list_numeric``) the
    class counts of the numeric pass's listing, queued into the row lists, and the short
    rows (:class:`_ShortRows`, None where none: the caller releases its rows), left out
    of that listing."""
    device = _cuda.device_info()
    m, index = left.shape[0], left.index_dtype
    sizes = budget.empty(m, index, "the hash SpGEMM's row sizes")
    try:
        rows = budget.empty(m, index, "the hash SpGEMM's row lists")
    except DoesNotFit:
        budget.release(sizes)
        raise
    short = slotted = None
    try:
        grid = -(-m * BOUND_LANES // BLOCK)
        bounds = _index_kernel("spgemm_hash_bounds", index)
        _launch(bounds, grid, BLOCK, (left.indptr, left.indices, right.indptr, m, sizes))
        n_cols = right.shape[1]
        classes = _classes(_list_rows(sizes, m, n_cols, False, rows))
        short_classes = [(_slots(c), first, count) for c, first, count in classes]
        short_classes = [c for c in short_classes if _is_short(c[0], n_cols)]  # the first
        if short_classes and list_numeric:
            slotted = _short_slotted(left, right, rows, short_classes, sizes, budget, device)
        if short_classes and slotted is None:
            for slots, first, count in short_classes:
                _short_count(left, right, rows[first:], count, slots, sizes, device)
        _count_tables(left, right, rows, classes[len(short_classes) :], sizes, budget, device)
        indptr[:1] = 0
        _cuda.cupy_or_none().cumsum(sizes, dtype=indptr.dtype, out=indptr[1:])
        counts = None
        if list_numeric:
            # the numeric pass's listing queued before the host waits for the nonzeros
            short = _set_short_rows_apart(short_classes, rows, sizes, budget, slotted)
            counts = _list_rows(sizes, m, 2**62, True, rows)
        return int(indptr[-1]), sizes, rows, counts, short
    except BaseException:
        budget.release(sizes, rows)
        if short is not None:
            _release_short(budget, short)
        elif slotted is not None:
            budget.release(*slotted)
        raise


def _count_tables(
    left, right, rows, classes, sizes, budget: Budget, device, shift: int = 0
) -> None:
    """The entries of the rows of ``classes`` (``[(table class, first, count)]`` of the
    listing ``rows``, by their bounds in ``sizes``) into ``sizes``: tables (of ``2^shift``
    times the slots of their class), or dense rows."""
    index, n_cols = left.index_dtype, right.shape[1]
    for table_class, first, count in classes:
        dense = dense_launch(_slots(table_class), n_cols, count, device)
        slots = _slots(table_class + shift)
        if dense is not None:
            arguments = (
                left.indptr, left.indices, right.indptr, right.indices, rows[first:],
                count, n_cols, sizes,
            )  # fmt: skip
            name = _dense_count_kernel(index)
            _launch(name, dense.grid, dense.block, arguments, dense.shared_bytes)
            continue
        launch = table_launch(slots, index.itemsize, count, device)
        keys = _global_tables(budget, launch, index, "the hash SpGEMM's global tables")
        arguments = (
            left.indptr, left.indices, right.indptr, right.indices, rows[first:],
            count, n_cols, sizes, slots, 0 if keys is None else keys, shift,
        )  # fmt: skip
        name = _count_kernel(index, launch.lanes, launch.whole_block)
        _launch(name, launch.grid, launch.block, arguments, launch.shared_bytes)
        budget.release(keys)


def _numeric(left, right, counts, rows, indptr, indices, data, budget: Budget, short=None):
    """``C``'s entries into ``indices`` and ``data`` (row offsets ``indptr``; the rows
    listed by their entries, ``counts`` the classes' counts; ``short`` the short rows)."""
    device = _cuda.device_info()
    if short is not None:
        _short_numeric(left, right, short, indptr, indices, data, device)
    classes = [(_slots(c), first, count) for c, first, count in _classes(counts)]
    _fill_tables(left, right, rows, classes, indptr, indices, data, budget, device)


def _fill_tables(left, right, rows, classes, indptr, indices, data, budget: Budget, device):
    """The entries of the rows of ``classes`` (``[(slots, first, count)]`` of ``rows``:
    tables of at least the slots each row's entries take) into ``indices`` and ``data``:
    tables, or dense rows."""
    index, dtype = left.index_dtype, left.dtype
    slot_bytes = index.itemsize + dtype.itemsize
    for slots, first, count in classes:
        dense = (rows[first:], count, slots, indptr, indices, data)
        if _dense_numeric(left, right, *dense, budget, device):
            continue
        launch = table_launch(slots, slot_bytes, count, device)
        keys = _global_tables(budget, launch, index, "the hash SpGEMM's global tables")
        try:
            values = _global_tables(budget, launch, dtype, "the hash SpGEMM's global tables")
        except DoesNotFit:
            budget.release(keys)
            raise
        arguments = (
            left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
            rows[first:], count, slots, indptr, indices, data,
            0 if keys is None else keys, 0 if values is None else values, MERGE_SLOTS,
        )  # fmt: skip
        name = _fill_kernel(dtype, index, launch.lanes, launch.whole_block)
        _launch(name, launch.grid, launch.block, arguments, launch.shared_bytes)
        budget.release(keys, values)


def _dense_numeric(left, right, rows, count, slots, indptr, indices, data, budget, device):
    """``count`` rows of ``rows`` as dense rows where :func:`dense_launch` takes them and
    their dense rows of values fit the budget (False: they keep their tables)."""
    n_cols = right.shape[1]
    dense = dense_launch(slots, n_cols, count, device, left.dtype.itemsize)
    if dense is None:
        return False
    try:
        values = budget.empty(dense.grid * n_cols, left.dtype, "the hash SpGEMM's dense rows")
    except DoesNotFit:
        return False
    try:
        values.fill(0)
        arguments = (
            left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
            rows, count, n_cols, indptr, indices, data, values,
        )  # fmt: skip
        name = _dense_fill_kernel(left.dtype, left.index_dtype)
        _launch(name, dense.grid, dense.block, arguments, dense.shared_bytes)
    finally:
        budget.release(values)
    return True


def takes_short_first(left, right) -> bool:
    """Whether the hash rows start with the short fill over every row (see
    :data:`SHORT_FIRST_SLOTS`): L's longest row times R's, where both are known without a
    pass, at most :data:`SHORT_FIRST_MAX_BOUND`, and at most :data:`SHORT_FIRST_SLOTS`
    products a row on average (``nnz(L)`` times R's mean row length over L's rows)."""
    longest = (left.known_longest_row, right.known_longest_row)
    if None in longest or longest[0] * longest[1] > SHORT_FIRST_MAX_BOUND:
        return False
    return _few_products_a_row(left, right)


def _few_products_a_row(left, right) -> bool:
    """At most :data:`SHORT_FIRST_SLOTS` products a row of L on average, estimated as
    ``nnz(L)`` times R's mean row length (no pass)."""
    products = left.nnz * (right.nnz / right.shape[0] if right.shape[0] else 0.0)
    return products <= SHORT_FIRST_SLOTS * max(left.shape[0], 1)


def takes_tiny_first(left, right) -> bool:
    """Whether the hash rows start with the tiny rows' fill over every row (see
    :data:`TINY_FIRST`), where short rows first do not start: at most
    :data:`SHORT_FIRST_SLOTS` products a row on average (``nnz(L)`` times R's mean row
    length over L's rows), whatever the longest rows."""
    return bool(TINY_FIRST) and _few_products_a_row(left, right)


@dataclass
class _ShortFirst:
    """What :func:`_short_first_symbolic` leaves for the numeric pass: the rows' products
    where they were left to the listing (``over``, 0 for the rows in the first slots), the
    first slots, the listing of the rest (None where no row was left), the listed rows run
    as short rows (:class:`_ShortRows` of that listing, or None) and the listed rows' table
    classes (``[(slots, first, count)]``, the numeric tables' slots)."""

    nnz: int
    sizes: object
    over: object
    slot_indices: object
    slot_data: object
    rows: object
    short: _ShortRows | None
    tables: list
    # where the listing is read on the device (_listed_on_device): its class counts, and
    # the classes launched (:func:`_listed_slots` of the bound of a listed row's products)
    listed_counts: object = None
    listed_slots: tuple = ()
    # the first kernel was the tiny rows' (TINY_FIRST_SLOTS slots a row) where True
    tiny: bool = False

    def arrays(self) -> tuple:
        """Every array the budget lent it."""
        arrays = (self.sizes, self.over, self.slot_indices, self.slot_data, self.rows)
        if self.short is not None:
            arrays += (self.short.slot_indices, self.short.slot_data)
        return tuple(a for a in arrays if a is not None)


def _entry_offsets(left, right, budget: Budget):
    """The running count of ``L``'s entries' products (``nnz(L) + 1``, int64): at ``j``
    the products of the entries before ``j``, so that a row's are two reads."""
    cupy, device = _cuda.cupy_or_none(), _cuda.device_info()
    nnz, index = left.nnz, left.index_dtype
    offsets = budget.empty(nnz + 1, INT64, "the hash SpGEMM's entries' products")
    try:
        products = budget.empty(max(nnz, 1), index, "the hash SpGEMM's entries' products")
    except DoesNotFit:
        budget.release(offsets)
        raise
    try:
        grid = max(1, min(-(-nnz // BLOCK), TOTAL_BLOCKS_PER_SM * device.multiprocessors))
        arguments = (left.indices, nnz, right.indptr, products)
        _launch(_index_kernel("spgemm_entry_products", index), grid, BLOCK, arguments,
                source=SHORT_SOURCE)  # fmt: skip
        offsets[:1] = 0
        cupy.cumsum(products[:nnz], dtype=INT64, out=offsets[1:])
    finally:
        budget.release(products)
    return offsets


def _first_rows(left, right, budget: Budget, slots: int, held: list, tiny: bool) -> bool:
    """The first kernel over every row: the rows of at most ``slots`` products into the
    first slots (``held``: sizes, over, slot indices, slot data), the others' products
    into ``over``; a thread a row (``tiny``, reading the rows' products off
    :func:`_entry_offsets`) or short first's groups. False (nothing run) where the
    entries' products do not fit the budget."""
    device = _cuda.device_info()
    m, index, n_cols = left.shape[0], left.index_dtype, right.shape[1]
    sizes, over, slot_indices, slot_data = held
    if tiny:
        try:
            offsets = _entry_offsets(left, right, budget)
        except DoesNotFit:
            return False
        try:
            arguments = (
                left.indptr, left.indices, left.data, right.indptr, right.indices,
                right.data, offsets, m, slot_indices, slot_data, sizes, over,
            )  # fmt: skip
            grid = _grid_of(TINY_BLOCK, m, device)
            name = _tiny_first_kernel(left.dtype, index, slots)
            _launch(name, grid, TINY_BLOCK, arguments, source=SHORT_SOURCE)
        finally:
            budget.release(offsets)
        return True
    lanes = SHORT_GROUPS[slots][0]
    arguments = (
        left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
        m, slot_indices, slot_data, sizes, over,
    )  # fmt: skip
    grid = _grid_of(SHORT_BLOCK // lanes, m, device)
    narrow = narrow_keys(index, n_cols, SHORT_GROUPS[slots][1])
    name = _short_first_kernel(left.dtype, index, slots, narrow)
    _launch(name, grid, SHORT_BLOCK, arguments, source=SHORT_SOURCE)
    return True


def _short_first_symbolic(
    left, right, budget: Budget, indptr, tiny: bool = False
) -> _ShortFirst | None:
    """``C``'s row offsets into ``indptr`` by the short fill over every row
    (``spgemm_short_first``; ``tiny``: ``spgemm_tiny_first``), then the listing of the rows
    it left (by their products: read on the device and counted as short rows where every
    row is bounded by :data:`LISTED_GROUPS`' largest class, else read by the host: short
    rows of up to :data:`SHORT_FIRST_LISTED_SLOTS` slotted, or counted where their slots do
    not fit, the others counted in tables); None where the first slots do not fit the
    budget, nor, ``tiny``, the running count of the entries' products (the caller lists
    every row instead)."""
    device = _cuda.device_info()
    m, index, n_cols = left.shape[0], left.index_dtype, right.shape[1]
    slots = TINY_FIRST_SLOTS if tiny else SHORT_FIRST_SLOTS
    held = []
    try:
        for size, dtype in ((m, index), (m, index), (m * slots, index), (m * slots, left.dtype)):
            held.append(budget.empty(size, dtype, "the hash SpGEMM's short rows' slots"))
    except DoesNotFit:
        budget.release(*held)
        return None
    sizes, over = held[:2]
    short = None
    try:
        if not _first_rows(left, right, budget, slots, held, tiny):
            budget.release(*held)
            return None
        rows, classes = None, []
        # longest_row is an upper bound of every row's length (a mirror's arrays are never
        # written), so where the bound is within the slots no row was left: no listing
        # (skewed rows, tiny: always listed, their bound unread)
        bound = None if tiny else left.longest_row * right.longest_row
        if bound is None or bound > slots:
            rows = budget.empty(m, index, "the hash SpGEMM's row lists")
            held.append(rows)
            if bound is not None and _lists_on_device(index, bound):
                counts = _listed_on_device(left, right, over, rows, bound, sizes, device)
                _scan_sizes(sizes, indptr)
                nnz, listed = int(indptr[-1]), _listed_slots(bound)
                return _ShortFirst(nnz, *held[:4], rows, None, [], counts, listed)
            classes = _classes(_list_rows(over, m, n_cols, False, rows))
        listed = [(_slots(c), first, count) for c, first, count in classes]
        short_classes = [
            c for c in listed if c[0] <= SHORT_FIRST_LISTED_SLOTS and c[0] < n_cols
        ]  # the first (the listing's order)
        if short_classes:
            slotted = _short_slotted(left, right, rows, short_classes, sizes, budget, device)
            if slotted is None:
                for s, first, count in short_classes:
                    _short_count(left, right, rows[first:], count, s, sizes, device)
            short = _ShortRows(rows, short_classes, *(slotted or ()))
        table_classes = classes[len(short_classes) :]
        shift = TINY_COUNT_SHIFT if tiny else 0
        _count_tables(left, right, rows, table_classes, sizes, budget, device, shift)
        _scan_sizes(sizes, indptr)
        # the numeric tables: twice the symbolic class's slots hold any row's table (the
        # fill sizes a row's table by its entries, a half again over them, and its
        # entries are at most its products, which its class holds)
        tables = [(2 * s, first, count) for s, first, count in listed[len(short_classes) :]]
        nnz = int(indptr[-1])
        return _ShortFirst(nnz, *held[:4], rows, short, tables, tiny=tiny)
    except BaseException:
        budget.release(*held)
        if short is not None:
            budget.release(short.slot_indices, short.slot_data)
        raise


def _scan_sizes(sizes, indptr) -> None:
    """``C``'s row offsets: 0, then the running sum of the rows' ``sizes``."""
    indptr[:1] = 0
    _cuda.cupy_or_none().cumsum(sizes, dtype=indptr.dtype, out=indptr[1:])


def _lists_on_device(index_dtype, bound: int) -> bool:
    """Whether short rows first list the rows their first slots left on the device (see
    :data:`LISTED_GROUPS`): 32-bit indices and a bound of every row's products within the
    largest class."""
    fits = np.dtype(index_dtype) == np.int32 and bound <= max(LISTED_GROUPS)
    return fits and bool(SHORT_FIRST_DEVICE_LISTING)


def _listed_grid(device) -> int:
    """The grid of a class listed on the device: its rows are unknown to the host, so the
    grid-stride loop's most blocks (those with no row return at once)."""
    return SHORT_BLOCKS_PER_SM * device.multiprocessors


def _listed_slots(bound: int) -> tuple:
    """The classes of :data:`LISTED_GROUPS` that rows of more than
    :data:`SHORT_FIRST_SLOTS` and at most ``bound`` products may fall in (a class of
    ``slots`` holds rows of more than ``slots // 2``)."""
    return tuple(slots for slots in LISTED_GROUPS if slots // 2 < bound)


def _listed_class(slots: int) -> int:
    """The listing's class of rows of at most ``slots`` products (a power of two)."""
    return int(slots).bit_length() - 1


def _listed_on_device(left, right, over, rows, bound: int, sizes, device):
    """The rows the first slots left (``over[row]``: their products, each more than
    :data:`SHORT_FIRST_SLOTS` and at most ``bound``) listed by their products into
    ``rows`` and counted class by class into ``sizes``, each class's range read on the
    device; the listing's class counts (on the device) for the numeric pass."""
    m, index = left.shape[0], left.index_dtype
    # capped at the bound, not at C's columns: a row's class holds all its products
    counts = _list_rows(over, m, bound, False, rows)
    for slots in _listed_slots(bound):
        arguments = (
            left.indptr, left.indices, right.indptr, right.indices, rows, counts,
            _listed_class(slots), sizes,
        )  # fmt: skip
        name = _short_count_listed_kernel(index, slots)
        _launch(name, _listed_grid(device), SHORT_BLOCK, arguments, source=SHORT_SOURCE)
    return counts


def _fill_listed(left, right, state, indptr, indices, data, device) -> None:
    """The rows :func:`_listed_on_device` counted, filled into ``C`` class by class."""
    n_cols = right.shape[1]
    for slots in state.listed_slots:
        narrow = narrow_keys(left.index_dtype, n_cols, LISTED_GROUPS[slots][1])
        arguments = (
            left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
            state.rows, state.listed_counts, _listed_class(slots), indptr, indices, data,
        )  # fmt: skip
        name = _short_fill_listed_kernel(left.dtype, left.index_dtype, slots, narrow)
        _launch(name, _listed_grid(device), SHORT_BLOCK, arguments, source=SHORT_SOURCE)


def _short_first_numeric(left, right, state: _ShortFirst, indptr, indices, data, budget):
    """``C``'s entries: the first slots moved into place, the listed short rows moved (or
    computed), the listed others' tables filled."""
    device = _cuda.device_info()
    m = left.shape[0]
    over = state.over  # also the unread listed rows' argument
    arguments = (over, m, over, state.slot_indices, state.slot_data, indptr, indices, data)
    if state.tiny:
        name = _slot_move_kernel(left.dtype, left.index_dtype, TINY_FIRST_SLOTS, 1, False)
        _launch(name, _grid_of(TINY_BLOCK, m, device), TINY_BLOCK, arguments, source=SHORT_SOURCE)
    else:
        name = _slot_move_kernel(left.dtype, left.index_dtype, SHORT_FIRST_SLOTS, 32, False)
        grid = _grid_of(SHORT_BLOCK // 32, m, device)
        _launch(name, grid, SHORT_BLOCK, arguments, source=SHORT_SOURCE)
    if state.listed_counts is not None:
        _fill_listed(left, right, state, indptr, indices, data, device)
    if state.short is not None:
        _short_numeric(left, right, state.short, indptr, indices, data, device)
    _fill_tables(left, right, state.rows, state.tables, indptr, indices, data, budget, device)


def _short_first_multiply(left, right, sink: ResultSink, tiny: bool = False):
    """``left @ right`` into ``sink`` starting with the short fill over every row (``tiny``:
    the tiny rows' fill), or None where its slots do not fit (nothing allocated then but
    ``sink``'s row offsets)."""
    budget = sink.budget
    state = _short_first_symbolic(left, right, budget, sink.indptr(), tiny)
    if state is None:
        return None
    try:
        indptr, indices, data = sink.allocate(state.nnz)
        _short_first_numeric(left, right, state, indptr, indices, data, budget)
    finally:
        budget.release(*state.arrays())
    return sink.finish()


def hash_multiply(left, right, sink: ResultSink):
    """``left @ right`` (canonical CSR mirrors on the GPU, one index dtype) into ``sink``."""
    budget = sink.budget
    try:
        if takes_short_first(left, right):
            product = _short_first_multiply(left, right, sink)
            if product is not None:
                return product
        elif takes_tiny_first(left, right):
            product = _short_first_multiply(left, right, sink, tiny=True)
            if product is not None:
                return product
    except DoesNotFit:
        sink.discard()
        raise
    try:
        nnz, sizes, rows, counts, short = _symbolic(left, right, budget, sink.indptr(), True)
        try:
            indptr, indices, data = sink.allocate(nnz)
            _numeric(left, right, counts, rows, indptr, indices, data, budget, short)
        finally:
            budget.release(sizes, rows)
            _release_short(budget, short)
    except DoesNotFit:
        sink.discard()
        raise
    return sink.finish()


def hash_count(left, right, budget: Budget, offsets_dtype=None) -> int:
    """Nonzeros of ``left @ right`` (the symbolic pass alone), summed in ``offsets_dtype``
    (default the operands' index dtype; int64 counts past 2^31 on int32 operands, each
    row's count being below it)."""
    offsets_dtype = left.index_dtype if offsets_dtype is None else offsets_dtype
    indptr = budget.empty(left.shape[0] + 1, offsets_dtype, "the row offsets")
    try:
        nnz, sizes, rows, _, _ = _symbolic(left, right, budget, indptr, False)
        budget.release(sizes, rows)
        return nnz
    finally:
        budget.release(indptr)


# Rows of L whose products and distinct columns the rule counts (spread evenly over L)
SAMPLE_ROWS = 1024


def table_slots(need: int) -> int:
    """The slots of a table for ``need`` keys: the kernels' ``table_class`` (a power of
    two, at least 32)."""
    return max(32, 1 << max(int(need) - 1, 0).bit_length())


def sample_rows(n_rows: int) -> np.ndarray:
    """The rows of L the rule samples: :data:`SAMPLE_ROWS` spread evenly (as the kernel
    ``spgemm_hash_sample`` takes them)."""
    count = min(n_rows, SAMPLE_ROWS)
    return np.arange(count, dtype=np.int64) * (n_rows - 1) // max(count - 1, 1)


def sampled_compression(left, right, bound: int) -> float | None:
    """Products per entry of ``left @ right`` on the rows of :func:`sample_rows` (one
    kernel counts their products and distinct columns; one host synchronisation): how
    many products each entry of ``C`` sums, the work hash rows save over ALG1's sort of
    every product. ``bound`` bounds a row's products (at most
    :data:`HASH_MAX_ROW_PRODUCTS`). None, and nothing launched, where a table of that
    many keys does not fit in this GPU's shared memory (int64 keys on a GPU of 99 KiB a
    block): the sampling kernel keeps its tables there."""
    m, index = left.shape[0], left.index_dtype
    count = min(m, SAMPLE_ROWS)
    slots = table_slots(min(bound, right.shape[1]))
    launch = table_launch(slots, index.itemsize, count, _cuda.device_info())
    if launch.global_slots:
        return None
    cupy = _cuda.cupy_or_none()
    totals = cupy.zeros(2, dtype=np.uint64)
    arguments = (left.indptr, left.indices, right.indptr, right.indices, count, m, slots, totals)
    name = _sample_kernel(index, launch.lanes, launch.whole_block)
    _launch(name, launch.grid, launch.block, arguments, launch.shared_bytes)
    entries, products = (int(v) for v in totals.get())
    return products / entries if entries else 1.0


# The rule of a first product, fitted on the FIT set of benchmarks/spgemm_first.py only
# (H200, spgemm_first_fit_h200.json; the held-out sets took no part): hash rows for float32
# and float64 products of at least HASH_MIN_PRODUCTS intermediate products (estimated as
# nnz(L) x R's mean row length), at least HASH_MIN_ROW_PRODUCTS of them a row on average, no
# row over HASH_MAX_ROW_PRODUCTS (L's longest row x R's longest: every row's table in shared
# memory) and at least HASH_MIN_COMPRESSION products per entry of C on a sample of rows
# (sampled_compression, read only where the rest holds, and where its tables fit in shared
# memory); cuSPARSE ALG1 otherwise.
# On the fit set hash rows beat cuSPARSE ALG1 called directly on one matrix, in both dtypes:
# the 3-D 27-point stencil 40^3 (42.9M products, 670 a row, 5.9 products an entry; hash
# 1.66 ms, ALG1 direct 4.43 in float64; 1.90 against 4.95 in float32). They lost on
# every other: where products fold little (the tall A.T @ A, 19.2M products, 768 a row, 1.16
# an entry: 1.40x slower; the 2-D 9-point stencil, 80.8M, 3.24 an entry: 1.27x), where rows
# are short (the 5- and 7-point stencils: 25 and 48 a row), where rows need tables beyond
# shared memory (R-MAT, PGPgiantcompo) and where there are few products (bcsstk13: 4.6M
# products, 11.5 an entry, 2.9x slower). Each threshold is the geometric mean of the
# nearest loss and the win: 4.6M and 42.9M products, 81 and 670 a row, 3.24 and 5.87 an
# entry. (The first fit, on the H100 without the compression, took hash rows for the 2-D
# 5-point stencils, which ALG1 wins once our path around it is as lean as cupyx's.)
HASH_MIN_PRODUCTS = 14_000_000
HASH_MIN_ROW_PRODUCTS = 230
# (Until issue 47's third round hash rows also took at most 2,187 products a row on
# average: on the fit set's 3-D 3 x 3 blocks, blocks3_3d_36 (81 entries and 6,561 products
# a row), they took 35.3 ms where ALG1 took 30.6. That loss was a block per row whose 32
# warps took the row's entries 32 at a time, three of them busy, and numeric tables of 1.5
# times the entries doubled to 1,024 slots; with the entries shared over the warps and
# tables of 1.25 times past 128 entries they take 21.1 ms there (ALG1 30.2, H200), and no
# fit matrix bounds the products a row from above any more.)
HASH_MIN_COMPRESSION = 4.4
HASH_MAX_ROW_PRODUCTS = 16_384
HASH_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Skewed rows (issue 47's fourth round): where a row may have more than
# HASH_MAX_ROW_PRODUCTS products (no sample fits in shared memory) the rule above keeps
# ALG1; but rows whose tables would hold a large share of C's columns run as dense rows
# (DENSE_MIN_SHARE), and there hash rows win where the rows' products are many. So products
# estimated at HASH_MIN_SKEWED_ESTIMATE or more (R's mean row length undercounts skewed
# rows: R-MAT 17's estimate is 28.8M, its products 1,089M) whose bound exceeds
# HASH_MAX_ROW_PRODUCTS, with a bitmap of C's columns within shared memory, and whose
# entries of L times R's longest row could reach the thresholds, have their products counted
# exactly (one kernel, one 8-byte read, about 0.1 ms), and run hash rows
# where they are at least HASH_MIN_PRODUCTS and HASH_MIN_SKEWED_ROW_PRODUCTS a row on
# average. Fitted on the skewed matrices of the fit sets only (H200; the held-out R-MAT 16s
# took no part): R-MAT 17 (call_matrices; 8,305 products a row, 2.37 an entry) ran hash rows
# with dense rows in 82.1 ms against ALG1's 129.7 in float64 (595.7 without dense rows),
# 72.4 against 90.8 in float32; the fit set's R-MAT 15 (a = 0.45: 701 a row, 1.13 an entry)
# still lost with dense rows (3.63 against 3.19 ms; 10.4 without), as did PGPgiantcompo
# (0.9M products: 1.75 against 0.83). The threshold is the geometric mean of 701 and 8,305
# a row. (DENSE_MIN_SHARE 16, 32, 64, 128 and 512-thread blocks: 91.4, 82.9, 82.1, 81.9,
# 83.0 ms on R-MAT 17; 4: 194. There the symbolic pass's dense rows won from tables of
# 2,048 slots, 0.62 against 1.88 ms, and the numeric pass's from 4,096, 5.3 against 8.7,
# losing at 2,048, 2.25 against 1.81: DENSE_MIN_SLOTS and DENSE_MIN_FILL_SLOTS.)
HASH_MIN_SKEWED_ESTIMATE = 1_000_000
HASH_MIN_SKEWED_ROW_PRODUCTS = 2_400


# The first product's rule for select products: rows of L of at most SELECT_RULE_MAX
# entries. Fitted on A @ P with aggregates of 8 (benchmarks/experiments/spgemm_select_fit.py,
# H200, float64, first products of new patterns; held-out matrices took no part): the 3-D
# 7-point stencil 120^3 (rows of 7) 0.74 ms against ALG1's 1.39, every bundled SuiteSparse
# matrix of rows of at most 32 (0.24-0.40 ms against 0.46-0.60: fixed costs), and a loss on
# the 2-D 3 x 3 blocks 400^2 (rows of 27, random aggregates): 3.06 against 1.53, where a
# thread's insertion sort of 27 entries in random order costs more than ALG1. 13 is the
# geometric mean of 7 and 27 entries.
SELECT_RULE_MAX = 13


# The first product's rule for short rows: hash rows where every row is a short row by a
# bound known without a pass (L's longest row times R's: at most SHORT_SLOTS products, fewer
# than C's columns), in float64 (SHORT_DTYPES), of at least SHORT_MIN_PRODUCTS products
# (estimated as for the rule above). Fitted on fit matrices only (H200, first products of
# new patterns, benchmarks/experiments/spgemm_short_fit.py, spgemm_short_fit_h200 and
# spgemm_short_fit_float32_h200): in float64 hash rows with short rows beat ALG1 on the
# 3-D 7-point stencils 100^3 and 120^3 (rows of 49 products: 2.09 against 2.27 ms, 3.26
# against 3.65) and the 2-D 5-point stencil 1000^2 (25 a row, 5.0M products: 1.32 against
# 1.39), and lost on every small matrix of short rows (the listing's fixed costs: cti,
# cs4, jagmesh7, cryg2500, olm1000, ...: at most 0.55M products). The threshold is the
# geometric mean of 0.55M and 5.0M. In float32 they lost on all three stencils (3.20
# against 3.15, 2.19 against 2.05, 1.38 against 1.32: ALG1 gains more from the narrower
# values than the sort in registers does), so the rule keeps ALG1 there. (SHORT_SLOTS:
# rows of 49 products ran short rows in 3.26 ms against tables' 6.10; the 2-D 9-point
# stencil's rows of 81, in the class of 128 slots, 3.97 as short rows against 3.76 in
# tables: 64. SHORT_GROUPS' 16 lanes for rows of up to 64: in one run, whose files were
# not kept, 8 lanes took 3.41 against ALG1's 3.59 on the 120^3 stencil, 32 lanes 4.13
# against 3.66, in float32 2.89 against 3.00 and 3.50 against 2.90.)
SHORT_MIN_PRODUCTS = 1_600_000
SHORT_DTYPES = (np.dtype(np.float64),)
# float32, since the short rows sort one 32-bit key a product (SHORT_NARROW): short rows
# first where no row is listed (the known longest rows bound every row by
# SHORT_FIRST_SLOTS products) and the rows average at least SHORT_FLOAT32_ROW_PRODUCTS.
# Fit matrices only (H200, spgemm_short_fit_float32_narrow_h200 and
# spgemm_short_narrow_float32_h200): the 3-D 7-point stencils (rows of 49, none listed) won,
# 2.31 against ALG1's 2.96 ms on 120^3 and 1.46 against 1.94 on 100^3; the 2-D 5-point
# 1000^2 (rows of 25, none listed) lost, 1.22 against 1.10, the 2-D 9-point (rows of 81,
# all listed) 3.84 against 2.49 and the P1 instance (a tenth of its rows listed) 1.05
# against 0.88. The threshold is the geometric mean of 25 and 49 products a row.
SHORT_FLOAT32 = np.dtype(np.float32)
SHORT_FLOAT32_ROW_PRODUCTS = 35


def _short_first_rule(left, right, products: int) -> bool:
    """The first product's rule for short rows (above): float64, at least
    SHORT_MIN_PRODUCTS products, and short rows first (:func:`takes_short_first`: bounds
    read only where known); in float32 also no row listed and at least
    SHORT_FLOAT32_ROW_PRODUCTS products a row on average."""
    if products < SHORT_MIN_PRODUCTS:
        return False
    if left.dtype == SHORT_FLOAT32:
        longest = (left.known_longest_row, right.known_longest_row)
        if None in longest or longest[0] * longest[1] > SHORT_FIRST_SLOTS:
            return False
        if products < SHORT_FLOAT32_ROW_PRODUCTS * max(left.shape[0], 1):
            return False
    elif left.dtype not in SHORT_DTYPES:
        return False
    return takes_short_first(left, right)


def _selects(left, right) -> bool:
    """The first product's rule for select products (:mod:`.select_spgemm`): rows of R of
    at most one entry and of L of at most SELECT_RULE_MAX, read only where known without a
    pass (R first: the rarer)."""
    longest = right.known_longest_row
    if longest is None or longest > 1:
        return False
    longest = left.known_longest_row
    return longest is not None and longest <= SELECT_RULE_MAX


class _DeviceCount(Counted):
    """The products of ``left @ right`` summed on the device (``spgemm_products_total``: a
    thread per entry of L summing the lengths of the R rows it selects into one 64-bit
    counter, its last block writing the total into pinned host memory) behind an event:
    launched, not waited for (:class:`~sparsegpu.backends.spgemm.Counted`). Its counters,
    host word and event are a :class:`_CountSlot` of this thread's, given back once read."""

    def __init__(self, left, right, rule_path: str | None = None):
        super().__init__()
        # where the rule goes, known when the count was launched (GpuSpgemm._rule_path):
        # the rule does not work it out again
        self.rule_path = rule_path
        if not left.nnz:  # nothing to launch (a grid of no blocks is no launch at all)
            self._exact, self._slot = 0, None
            return
        if left.index_dtype != right.index_dtype:  # the kernel reads both in one type
            left, right = with_index_dtype(left, INT64), with_index_dtype(right, INT64)
        cupy = _cuda.cupy_or_none()
        stream = cupy.cuda.get_current_stream()
        slot = self._slot = _CountSlot.take(cupy)
        # a count never read gives its slot back once the kernel has written it: from a
        # finalizer that holds the slot, never from __del__, so the slot and its event do
        # not join the garbage a collection frees with this count (CuPy's Event frees its
        # handle in its own __del__: a pool given the slot from __del__ held a freed event)
        self._unread = weakref.finalize(self, _CountSlot.settle, slot)
        self._unread.atexit = False
        # One launch, its counters and host word bound: the kernel's last block writes the
        # total into the pinned host word and zeroes the counters for the next count. (A
        # memset before it, a copy after it and the generic launch's key and argument list
        # cost this count 30 us of host time on a first product's critical path, H200.)
        grid = min(-(-left.nnz // BLOCK), slot.blocks)
        slot.launch(left.index_dtype)(grid, p0=left.indices, p1=left.nnz, p2=right.indptr)
        slot.event.record(stream)

    def done(self) -> bool:
        return self._exact is not None or self._slot.event.done

    def _read(self) -> int:
        self._unread.detach()
        slot, self._slot = self._slot, None
        return int(slot.collect()[0])


# the slots a thread keeps per device (more are made while that many counts are unread)
COUNT_SLOTS = 4


class _CountSlot(HostWords):
    """The device counters of a count (its sum and its blocks done, zero between counts),
    the pinned host word its kernel writes the total into, and the event after the kernel
    (:class:`~sparsegpu.device._host_words.HostWords`), kept per thread and device for the
    next count (making them took 90 us of a 1.4 ms first product on the H200: a pinned
    allocation, an event, a zeroed array)."""

    __slots__ = ("blocks", "launches")
    KIND = "spgemm_products_total"
    KEEP = COUNT_SLOTS

    def __init__(self, cupy, device: int):
        super().__init__(cupy, device, np.zeros(2, dtype=np.uint64), 1)
        self.blocks = TOTAL_BLOCKS_PER_SM * _cuda.device_info().multiprocessors
        self.launches: dict = {}  # index dtype -> the count's launch, counters bound

    def launch(self, index_dtype) -> KernelLaunch:
        """``spgemm_products_total`` of ``index_dtype`` into this slot."""
        launch = self.launches.get(index_dtype)
        if launch is None:
            kernel = _kernel(_index_kernel("spgemm_products_total", index_dtype), 0)
            fixed = [self.scratch, self.host_on_device]
            launch = self.launches[index_dtype] = KernelLaunch(
                kernel, BLOCK, ["p0", "p1", "p2", *fixed]
            )
        return launch


# GpuSpgemm._rule_path's answers: the rule counts skewed rows, or takes the default
# algorithm with nothing to decide (None: a select, short rows first or a sample may decide)
SKEWED_PATH, DEFAULT_PATH = "skewed", "default"


def _known_path(counted) -> str | None:
    """The rule's path ``counted`` was launched with (:meth:`GpuSpgemm._rule_path`)."""
    return getattr(counted, "rule_path", None)


def _estimate(left, right) -> tuple[int, float, bool]:
    """``(products, products a row, whether a sample of rows may decide for hash rows)``,
    the products estimated from R's mean row length (its sizes: no pass over it)."""
    products = int(left.nnz * (right.nnz / right.shape[0] if right.shape[0] else 0.0))
    per_row = products / max(left.shape[0], 1)
    may_sample = left.dtype in HASH_DTYPES and products >= HASH_MIN_PRODUCTS
    return products, per_row, may_sample and per_row >= HASH_MIN_ROW_PRODUCTS


class GpuSpgemm(CusparseSpgemm):
    """The GPU's SpGEMM engine: cuSPARSE's algorithms and our hash rows (module docstring)."""

    name = "gpu"

    def algorithms(self):
        return (*super().algorithms(), HASH, SELECT)

    def planning_algorithms(self):
        return (*super().planning_algorithms(), HASH, SELECT)

    def estimate(self, left, right) -> tuple[str, str]:
        if _selects(left, right):
            return SELECT, (
                f"rule: every row of R has at most one entry and every row of L at most "
                f"{SELECT_RULE_MAX}: select (L's rows with their columns mapped, "
                "sorted and summed: one product an entry)"
            )
        algorithm, products, per_row, bound, compression, exact = self._rule(left, right)
        if bound is None:  # what explain shows: the bound read now
            bound = left.longest_row * right.longest_row
        measures = (
            f"{left.dtype}, about {products:,} products, {per_row:.1f} a row on average, "
            f"at most {bound:,}"
        )
        if algorithm == HASH and _short_first_rule(left, right, products):
            return HASH, (
                f"rule: {measures}: hash rows, short rows first (every row of at most "
                f"{SHORT_FIRST_SLOTS} products sorted in registers, no listing; the rest "
                f"listed: short rows of up to {SHORT_FIRST_LISTED_SLOTS}, then tables, or, "
                f"rows of <= {max(LISTED_GROUPS)} with 32-bit indices, all short rows listed "
                "on the device; "
                f"float64, >= {SHORT_MIN_PRODUCTS:,} products, <= {SHORT_FIRST_SLOTS} a row "
                f"on average, rows of <= {SHORT_FIRST_MAX_BOUND:,} by the known longest rows; "
                f"float32: every row of <= {SHORT_FIRST_SLOTS}, >= "
                f"{SHORT_FLOAT32_ROW_PRODUCTS} a row on average)"
            )
        if compression is not None:
            measures += f", {compression:.2f} an entry on {SAMPLE_ROWS:,} rows"
        if exact is not None:
            measures += (
                f", exactly {exact:,} products ({exact / max(left.shape[0], 1):,.1f} a row; "
                f"rows of over {HASH_MAX_ROW_PRODUCTS:,}: dense rows where their tables would "
                f"hold 1/{DENSE_MIN_SHARE} of the columns)"
            )
        if algorithm == HASH:
            return HASH, f"rule: {measures}: hash rows"
        takes = " and ".join(map(str, HASH_DTYPES))
        return algorithm, (
            f"rule: {measures}: cuSPARSE ALG1 (hash rows take {takes} products of >= "
            f"{HASH_MIN_PRODUCTS:,} products, >= {HASH_MIN_ROW_PRODUCTS} a row on average, "
            f"<= {HASH_MAX_ROW_PRODUCTS:,} a row, >= {HASH_MIN_COMPRESSION} an entry; or, "
            f"rows of over {HASH_MAX_ROW_PRODUCTS:,} products, >= "
            f"{HASH_MIN_SKEWED_ROW_PRODUCTS:,} a row on average counted exactly; or, short "
            f"rows first: rows of <= {SHORT_FIRST_MAX_BOUND:,} products by the known longest "
            f"rows, <= {SHORT_FIRST_SLOTS} a row on average, >= {SHORT_MIN_PRODUCTS:,} "
            f"products, float64; float32 where every row has <= {SHORT_FIRST_SLOTS} products "
            f"by the known longest rows and >= {SHORT_FLOAT32_ROW_PRODUCTS} a row on average)"
        )

    def rule(self, left, right) -> str:
        return self.rule_and_products(left, right)[0]

    def rule_and_products(self, left, right, counted=None) -> tuple[str, int | Counted | None]:
        path = _known_path(counted)
        if path == DEFAULT_PATH:  # known when the count was launched: nothing to decide
            return self.default_algorithm, counted
        if path is None and _selects(left, right):
            return SELECT, counted
        found = self._rule(left, right, counted)
        return found[0], found[5] if found[5] is not None else counted

    def products_ahead(self, left, right) -> Counted | None:
        # launched where the rule will count skewed rows or the index dtype waits for the
        # count: the first products of power-law rows (the rule's count took 0.1 ms of a
        # 1.4 ms product, the device idle while the host waited for it)
        if left.xp is np or not left.nnz:
            return None
        path = self._rule_path(left, right)
        decides = products_decide_indices(left, right)
        if path == SKEWED_PATH or decides:
            count = _DeviceCount(left, right, path)
            count.decides_indices = decides
            return count
        return None

    def _rule_path(self, left, right) -> str | None:
        """Where :meth:`_rule` goes where that is known without a pass: SKEWED_PATH (it
        counts the products: skewed rows), DEFAULT_PATH (the default algorithm, nothing to
        decide), or None (a select, short rows first, or a sample of rows may decide)."""
        if _selects(left, right):
            return None
        products, per_row, may_sample = _estimate(left, right)
        if _short_first_rule(left, right, products) or may_sample:
            return None  # short rows first, or a sample may decide first
        counts = self._skewed_count_needed(left, right, products)
        if _short_first_rule(left, right, products):  # on longest rows it read just now
            return None
        return SKEWED_PATH if counts else DEFAULT_PATH

    @staticmethod
    def _skewed_count_needed(left, right, products: int) -> bool:
        """Whether the products of skewed rows are counted: where the most products L and
        R can have (L's entries times R's longest row; R's entries times L's fullest
        column where a transpose knows it) could reach the thresholds, and a row's bound
        is over :data:`HASH_MAX_ROW_PRODUCTS` (power-law rows of a few entries and the
        P.T @ (A @ P) of aggregation cannot: no pass, nothing read)."""
        if left.dtype not in HASH_DTYPES or products < HASH_MIN_SKEWED_ESTIMATE:
            return False
        most = left.nnz * right.longest_row
        if left.column_bound is not None:
            most = min(most, right.nnz * left.column_bound)
        most_needed = max(HASH_MIN_PRODUCTS, HASH_MIN_SKEWED_ROW_PRODUCTS * left.shape[0])
        if most < most_needed or not dense_rows_fit(right.shape[1], _cuda.device_info()):
            return False
        return left.longest_row * right.longest_row > HASH_MAX_ROW_PRODUCTS

    def _rule(self, left, right, counted=None) -> tuple:
        """``(algorithm, products, products a row, bound of a row's products (None where
        it was not needed: reading it may cost a pass over a fresh operand), products an
        entry on a sample of rows or None where the rest decided, the exact products (a
        :class:`Counted` still running, where the rule assumed few a row of it) or None
        where they were not counted)``. ``counted``: the products where the caller has
        them (an int, or a :class:`Counted`)."""
        products, per_row, takes = _estimate(left, right)
        # known when the count was launched: not again (DEFAULT_PATH never gets here:
        # rule_and_products answers it)
        counts = _known_path(counted) == SKEWED_PATH
        if not counts and _short_first_rule(left, right, products):
            return HASH, products, per_row, None, None, None
        bound = left.longest_row * right.longest_row if takes else None
        if takes and bound > HASH_MAX_ROW_PRODUCTS:  # a recorded bound: the exact one
            bound = left.row_stats.max * right.row_stats.max
        compression = None
        if takes and bound <= HASH_MAX_ROW_PRODUCTS:
            compression = sampled_compression(left, right, bound)
        takes = compression is not None and compression >= HASH_MIN_COMPRESSION
        exact = None
        if not takes and (counts or self._skewed_count_needed(left, right, products)):
            bound = left.longest_row * right.longest_row  # recorded ones, if loose
            m = left.shape[0]

            def skewed(count: int) -> bool:
                return count >= HASH_MIN_PRODUCTS and count >= HASH_MIN_SKEWED_ROW_PRODUCTS * m

            exact = exact_products(counted)
            if exact is None and isinstance(counted, Counted):
                # still counting: ALG1 (skewed rows are rare), checked before its launch
                exact = counted
                counted.expect(lambda count: not skewed(count), "few products a row")
            else:
                if exact is None:
                    exact = self.total_products(left, right)
                takes = skewed(exact)
        algorithm = HASH if takes else self.default_algorithm
        return algorithm, products, per_row, bound, compression, exact

    def _multiply(self, left, right, algorithm, sink: ResultSink):
        if algorithm == HASH:
            sink.before_launch()
            return hash_multiply(left, right, sink)
        if algorithm == SELECT:
            sink.before_launch()
            return select_spgemm.select_multiply(left, right, sink)
        return super()._multiply(left, right, algorithm, sink)

    def _count(self, left, right, algorithm, budget: Budget) -> int:
        if algorithm == HASH:
            return hash_count(left, right, budget)
        if algorithm == SELECT:
            return select_spgemm.select_count(left, right, budget)
        return super()._count(left, right, algorithm, budget)

    def total_products(self, left, right) -> int:
        # a thread per entry of L summing the lengths of the R rows it selects into one
        # 64-bit counter (one kernel, which writes the host word): no array of nnz(L), no
        # row's group of lanes walking a hub row of R-MAT alone (0.7 ms on scale 17,
        # where the whole first product took 0.4 ms longer than cupyx's; an empty L
        # launches nothing)
        return _DeviceCount(left, right).value()

    def result_nnz(self, left, right, budget: Budget) -> int:
        # the hash rows' symbolic pass on the operands as they are (int32: the fast
        # kernels), its offsets in int64; cuSPARSE's count on 64-bit operands where a
        # row's table would not fit
        try:
            return hash_count(left, right, budget, np.dtype(np.int64))
        except DoesNotFit:
            return super().result_nnz(left, right, budget)
