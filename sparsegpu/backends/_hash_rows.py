"""The hash rows' two passes over rows listed by their tables (:mod:`.hash_spgemm`'s steps
1-3): the rows' bounds and listing, the symbolic pass (short rows, tables in shared or
global memory, dense rows), ``C``'s offsets, and the numeric pass; :func:`hash_count`
counts ``C``'s entries with the symbolic pass alone. Short and tiny rows first
(:mod:`._hash_first`) list only the rows their first slots leave, and run them through
these tables."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..device import _cuda
from . import _hash_kernels
from .spgemm import Budget, DoesNotFit

# Rows of at most this many products (their tables of at most this many slots in the
# symbolic listing) run short rows (kernels/spgemm_short.cu: a group of lanes gathers the
# row's products in shared memory and sorts them in registers: no table) in both passes;
# 0: never.
# Fitted with the first product's rule for short rows (hash_spgemm: SHORT_MIN_PRODUCTS'
# comment)
SHORT_SLOTS = 64
# A whole block's numeric table of at least this many slots is merged, not sorted
# (spgemm_hash.cu's merged rows: its entries gathered into C, sorted in runs by each warp,
# merged pair by pair); 0: never. Fit matrices, H200, forced hash rows (spgemm_hash_kernels
# --variants, runs of 128 then): power-law 1.5M 3.10 ms at 2,048 against 3.31 never, 3.17
# at 4,096 and 3.19 at 8,192; the 3-D 3 x 3 blocks 36^3 (18.05-18.14 ms) and R-MAT 17
# (62.7-63.6) alike at every setting. The smallest whole-block table: every one merged.
MERGE_SLOTS = 2048
BOUND_LANES = 8  # lanes per row of spgemm_hash_bounds (as the kernel's constant)


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


def _short_count(left, right, rows, count: int, slots: int, sizes, device) -> None:
    lanes = _hash_kernels.SHORT_GROUPS[slots][0]
    arguments = (left.indptr, left.indices, right.indptr, right.indices, rows, count, sizes)
    grid = _hash_kernels._grid_of(_hash_kernels.SHORT_BLOCK // lanes, count, device)
    name = _hash_kernels._short_count_kernel(left.index_dtype, slots)
    _hash_kernels._launch_short(name, grid, arguments)


def _short_fill_launch(left, right, rows, count, slots, outputs, slotted, device) -> None:
    lanes = _hash_kernels.SHORT_GROUPS[slots][0]
    arguments = (
        left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
        rows, count, *outputs,
    )  # fmt: skip
    grid = _hash_kernels._grid_of(_hash_kernels.SHORT_BLOCK // lanes, count, device)
    narrow = _hash_kernels.narrow_keys(
        left.index_dtype, right.shape[1], _hash_kernels.SHORT_GROUPS[slots][1]
    )
    name = _hash_kernels._short_fill_kernel(left.dtype, left.index_dtype, slots, slotted, narrow)
    _hash_kernels._launch_short(name, grid, arguments)


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
        grid = _hash_kernels._grid_of(_hash_kernels.SHORT_BLOCK // 32, count, device)
        name = _hash_kernels._slot_move_kernel(left.dtype, left.index_dtype, slots, 32, True)
        _hash_kernels._launch_short(name, grid, arguments)


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
    name = _hash_kernels._index_kernel("spgemm_short_unlist", rows.dtype)
    grid = -(-listed // _hash_kernels.BLOCK)
    _hash_kernels._launch_short(name, grid, (short.rows, listed, sizes), _hash_kernels.BLOCK)
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
        grid = -(-m * BOUND_LANES // _hash_kernels.BLOCK)
        bounds = _hash_kernels._index_kernel("spgemm_hash_bounds", index)
        _hash_kernels._launch(
            bounds, grid, _hash_kernels.BLOCK, (left.indptr, left.indices, right.indptr, m, sizes)
        )
        n_cols = right.shape[1]
        classes = _hash_kernels._classes(_hash_kernels._list_rows(sizes, m, n_cols, False, rows))
        short_classes = [(_hash_kernels._slots(c), first, count) for c, first, count in classes]
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
            counts = _hash_kernels._list_rows(sizes, m, 2**62, True, rows)
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
        dense = _hash_kernels.dense_launch(_hash_kernels._slots(table_class), n_cols, count, device)
        slots = _hash_kernels._slots(table_class + shift)
        if dense is not None:
            arguments = (
                left.indptr, left.indices, right.indptr, right.indices, rows[first:],
                count, n_cols, sizes,
            )  # fmt: skip
            name = _hash_kernels._dense_count_kernel(index)
            _hash_kernels._launch(name, dense.grid, dense.block, arguments, dense.shared_bytes)
            continue
        launch = _hash_kernels.table_launch(slots, index.itemsize, count, device)
        keys = _hash_kernels._global_tables(
            budget, launch, index, "the hash SpGEMM's global tables"
        )
        arguments = (
            left.indptr, left.indices, right.indptr, right.indices, rows[first:],
            count, n_cols, sizes, slots, 0 if keys is None else keys, shift,
        )  # fmt: skip
        name = _hash_kernels._count_kernel(index, launch.lanes, launch.whole_block)
        _hash_kernels._launch(name, launch.grid, launch.block, arguments, launch.shared_bytes)
        budget.release(keys)


def _numeric(left, right, counts, rows, indptr, indices, data, budget: Budget, short=None):
    """``C``'s entries into ``indices`` and ``data`` (row offsets ``indptr``; the rows
    listed by their entries, ``counts`` the classes' counts; ``short`` the short rows)."""
    device = _cuda.device_info()
    if short is not None:
        _short_numeric(left, right, short, indptr, indices, data, device)
    classes = [
        (_hash_kernels._slots(c), first, count)
        for c, first, count in _hash_kernels._classes(counts)
    ]
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
        launch = _hash_kernels.table_launch(slots, slot_bytes, count, device)
        keys = _hash_kernels._global_tables(
            budget, launch, index, "the hash SpGEMM's global tables"
        )
        try:
            values = _hash_kernels._global_tables(
                budget, launch, dtype, "the hash SpGEMM's global tables"
            )
        except DoesNotFit:
            budget.release(keys)
            raise
        arguments = (
            left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
            rows[first:], count, slots, indptr, indices, data,
            0 if keys is None else keys, 0 if values is None else values, MERGE_SLOTS,
        )  # fmt: skip
        name = _hash_kernels._fill_kernel(dtype, index, launch.lanes, launch.whole_block)
        _hash_kernels._launch(name, launch.grid, launch.block, arguments, launch.shared_bytes)
        budget.release(keys, values)


def _dense_numeric(left, right, rows, count, slots, indptr, indices, data, budget, device):
    """``count`` rows of ``rows`` as dense rows where :func:`~._hash_kernels.dense_launch`
    takes them and their dense rows of values fit the budget (False: they keep their
    tables)."""
    n_cols = right.shape[1]
    dense = _hash_kernels.dense_launch(slots, n_cols, count, device, left.dtype.itemsize)
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
        name = _hash_kernels._dense_fill_kernel(left.dtype, left.index_dtype)
        _hash_kernels._launch(name, dense.grid, dense.block, arguments, dense.shared_bytes)
    finally:
        budget.release(values)
    return True


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
