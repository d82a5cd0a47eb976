"""Short rows first and tiny rows first (:mod:`.hash_spgemm`'s docstring): every row tried
first in slots indexed by the row (a group of lanes, or a thread, a row: no listing
before), only the rows of more products listed (on the device where their classes
allow), and those run as short rows or in the tables of :mod:`._hash_rows`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..device import _cuda
from . import _hash_kernels, _hash_rows
from .spgemm import INT64, Budget, DoesNotFit, ResultSink

# Short first (spgemm_short_first): where hash rows take a product whose rows are short on
# average, every row is first tried as a short row of SHORT_FIRST_SLOTS products
# (_hash_kernels; no listing before it), and only the rows of more are listed; of those,
# classes of up to SHORT_FIRST_LISTED_SLOTS run as (slotted) short rows too, the rest in
# tables. Taken (takes_short_first) where the known longest rows bound a row's products by
# SHORT_FIRST_MAX_BOUND (tables of a warp's group: no whole-block, global or dense rows
# among what is left) and the products a row are at most SHORT_FIRST_SLOTS on average.
# Fitted with the first product's rule for short rows (hash_spgemm). SHORT_FIRST_LISTED_SLOTS:
# 256 (fit P1 instance, seed 11, H200, spgemm_short_narrow_h200: its 45 rows of 129-223
# products took 0.088 ms in tables, count and fill, and 0.041 as short rows of 256, fill and
# move; the product 1.180 against 1.221 ms with 128).
SHORT_FIRST_LISTED_SLOTS = 256
SHORT_FIRST_MAX_BOUND = 1024
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
TINY_BLOCK = 128  # threads a block of the tiny rows' kernels
TINY_COUNT_SHIFT = 1


def takes_short_first(left, right) -> bool:
    """Whether the hash rows start with the short fill over every row (see
    :data:`~._hash_kernels.SHORT_FIRST_SLOTS`): L's longest row times R's, where both are known
    without a pass, at most :data:`SHORT_FIRST_MAX_BOUND`, and at most
    :data:`~._hash_kernels.SHORT_FIRST_SLOTS` products a row on average (``nnz(L)`` times R's
    mean row length over L's rows)."""
    longest = (left.known_longest_row, right.known_longest_row)
    if None in longest or longest[0] * longest[1] > SHORT_FIRST_MAX_BOUND:
        return False
    return _few_products_a_row(left, right)


def _few_products_a_row(left, right) -> bool:
    """At most :data:`~._hash_kernels.SHORT_FIRST_SLOTS` products a row of L on average,
    estimated as ``nnz(L)`` times R's mean row length (no pass)."""
    products = left.nnz * (right.nnz / right.shape[0] if right.shape[0] else 0.0)
    return products <= _hash_kernels.SHORT_FIRST_SLOTS * max(left.shape[0], 1)


def takes_tiny_first(left, right) -> bool:
    """Whether the hash rows start with the tiny rows' fill over every row (see
    :data:`TINY_FIRST`), where short rows first do not start: at most
    :data:`~._hash_kernels.SHORT_FIRST_SLOTS` products a row on average (``nnz(L)`` times R's
    mean row length over L's rows), whatever the longest rows."""
    return bool(TINY_FIRST) and _few_products_a_row(left, right)


@dataclass
class _ShortFirst:
    """What :func:`_short_first_symbolic` leaves for the numeric pass: the rows' products
    where they were left to the listing (``over``, 0 for the rows in the first slots), the first
    slots, the listing of the rest (None where no row was left), the listed rows run as short
    rows (:class:`~._hash_rows._ShortRows` of that listing, or None) and the listed rows' table
    classes (``[(slots, first, count)]``, the numeric tables' slots)."""

    nnz: int
    sizes: object
    over: object
    slot_indices: object
    slot_data: object
    rows: object
    short: _hash_rows._ShortRows | None
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
        grid = max(
            1,
            min(
                -(-nnz // _hash_kernels.BLOCK),
                _hash_kernels.TOTAL_BLOCKS_PER_SM * device.multiprocessors,
            ),
        )
        arguments = (left.indices, nnz, right.indptr, products)
        name = _hash_kernels._index_kernel("spgemm_entry_products", index)
        _hash_kernels._launch_short(name, grid, arguments, _hash_kernels.BLOCK)
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
            grid = _hash_kernels._grid_of(TINY_BLOCK, m, device)
            name = _hash_kernels._tiny_first_kernel(left.dtype, index, slots)
            _hash_kernels._launch_short(name, grid, arguments, TINY_BLOCK)
        finally:
            budget.release(offsets)
        return True
    lanes = _hash_kernels.SHORT_GROUPS[slots][0]
    arguments = (
        left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
        m, slot_indices, slot_data, sizes, over,
    )  # fmt: skip
    grid = _hash_kernels._grid_of(_hash_kernels.SHORT_BLOCK // lanes, m, device)
    narrow = _hash_kernels.narrow_keys(index, n_cols, _hash_kernels.SHORT_GROUPS[slots][1])
    name = _hash_kernels._short_first_kernel(left.dtype, index, slots, narrow)
    _hash_kernels._launch_short(name, grid, arguments)
    return True


def _short_first_symbolic(
    left, right, budget: Budget, indptr, tiny: bool = False
) -> _ShortFirst | None:
    """``C``'s row offsets into ``indptr`` by the short fill over every row
    (``spgemm_short_first``; ``tiny``: ``spgemm_tiny_first``), then the listing of the rows it
    left (by their products: read on the device and counted as short rows where every row is
    bounded by :data:`~._hash_kernels.LISTED_GROUPS`' largest class, else read by the host:
    short rows of up to :data:`SHORT_FIRST_LISTED_SLOTS` slotted, or counted where their slots
    do not fit, the others counted in tables); None where the first slots do not fit the budget,
    nor, ``tiny``, the running count of the entries' products (the caller lists every row
    instead)."""
    device = _cuda.device_info()
    m, index, n_cols = left.shape[0], left.index_dtype, right.shape[1]
    slots = _hash_kernels.TINY_FIRST_SLOTS if tiny else _hash_kernels.SHORT_FIRST_SLOTS
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
            classes = _hash_kernels._classes(_hash_kernels._list_rows(over, m, n_cols, False, rows))
        listed = [(_hash_kernels._slots(c), first, count) for c, first, count in classes]
        short_classes = [
            c for c in listed if c[0] <= SHORT_FIRST_LISTED_SLOTS and c[0] < n_cols
        ]  # the first (the listing's order)
        if short_classes:
            slotted = _hash_rows._short_slotted(
                left, right, rows, short_classes, sizes, budget, device
            )
            if slotted is None:
                for s, first, count in short_classes:
                    _hash_rows._short_count(left, right, rows[first:], count, s, sizes, device)
            short = _hash_rows._ShortRows(rows, short_classes, *(slotted or ()))
        table_classes = classes[len(short_classes) :]
        shift = TINY_COUNT_SHIFT if tiny else 0
        _hash_rows._count_tables(left, right, rows, table_classes, sizes, budget, device, shift)
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
    :data:`~._hash_kernels.LISTED_GROUPS`): 32-bit indices and a bound of every row's products
    within the largest class."""
    fits = np.dtype(index_dtype) == np.int32 and bound <= max(_hash_kernels.LISTED_GROUPS)
    return fits and bool(SHORT_FIRST_DEVICE_LISTING)


def _listed_grid(device) -> int:
    """The grid of a class listed on the device: its rows are unknown to the host, so the
    grid-stride loop's most blocks (those with no row return at once)."""
    return _hash_kernels.SHORT_BLOCKS_PER_SM * device.multiprocessors


def _listed_slots(bound: int) -> tuple:
    """The classes of :data:`~._hash_kernels.LISTED_GROUPS` that rows of more than
    :data:`~._hash_kernels.SHORT_FIRST_SLOTS` and at most ``bound`` products may fall in (a class of
    ``slots`` holds rows of more than ``slots // 2``)."""
    return tuple(slots for slots in _hash_kernels.LISTED_GROUPS if slots // 2 < bound)


def _listed_class(slots: int) -> int:
    """The listing's class of rows of at most ``slots`` products (a power of two)."""
    return int(slots).bit_length() - 1


def _listed_on_device(left, right, over, rows, bound: int, sizes, device):
    """The rows the first slots left (``over[row]``: their products, each more than
    :data:`~._hash_kernels.SHORT_FIRST_SLOTS` and at most ``bound``) listed by their products into
    ``rows`` and counted class by class into ``sizes``, each class's range read on the
    device; the listing's class counts (on the device) for the numeric pass."""
    m, index = left.shape[0], left.index_dtype
    # capped at the bound, not at C's columns: a row's class holds all its products
    counts = _hash_kernels._list_rows(over, m, bound, False, rows)
    for slots in _listed_slots(bound):
        arguments = (
            left.indptr, left.indices, right.indptr, right.indices, rows, counts,
            _listed_class(slots), sizes,
        )  # fmt: skip
        name = _hash_kernels._short_count_listed_kernel(index, slots)
        _hash_kernels._launch_short(name, _listed_grid(device), arguments)
    return counts


def _fill_listed(left, right, state, indptr, indices, data, device) -> None:
    """The rows :func:`_listed_on_device` counted, filled into ``C`` class by class."""
    n_cols = right.shape[1]
    for slots in state.listed_slots:
        narrow = _hash_kernels.narrow_keys(
            left.index_dtype, n_cols, _hash_kernels.LISTED_GROUPS[slots][1]
        )
        arguments = (
            left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
            state.rows, state.listed_counts, _listed_class(slots), indptr, indices, data,
        )  # fmt: skip
        name = _hash_kernels._short_fill_listed_kernel(left.dtype, left.index_dtype, slots, narrow)
        _hash_kernels._launch_short(name, _listed_grid(device), arguments)


def _short_first_numeric(left, right, state: _ShortFirst, indptr, indices, data, budget):
    """``C``'s entries: the first slots moved into place, the listed short rows moved (or
    computed), the listed others' tables filled."""
    device = _cuda.device_info()
    m = left.shape[0]
    over = state.over  # also the unread listed rows' argument
    arguments = (over, m, over, state.slot_indices, state.slot_data, indptr, indices, data)
    if state.tiny:
        name = _hash_kernels._slot_move_kernel(
            left.dtype, left.index_dtype, _hash_kernels.TINY_FIRST_SLOTS, 1, False
        )
        _hash_kernels._launch_short(
            name, _hash_kernels._grid_of(TINY_BLOCK, m, device), arguments, TINY_BLOCK
        )
    else:
        name = _hash_kernels._slot_move_kernel(
            left.dtype, left.index_dtype, _hash_kernels.SHORT_FIRST_SLOTS, 32, False
        )
        grid = _hash_kernels._grid_of(_hash_kernels.SHORT_BLOCK // 32, m, device)
        _hash_kernels._launch_short(name, grid, arguments)
    if state.listed_counts is not None:
        _fill_listed(left, right, state, indptr, indices, data, device)
    if state.short is not None:
        _hash_rows._short_numeric(left, right, state.short, indptr, indices, data, device)
    _hash_rows._fill_tables(
        left, right, state.rows, state.tables, indptr, indices, data, budget, device
    )


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
