"""SpGEMM of our own on the GPU: hash rows (``kernels/spgemm_hash.cu``), beside cuSPARSE's.

:class:`GpuSpgemm` is the GPU's SpGEMM engine: cuSPARSE's algorithms (``alg1``, ``alg2``,
``alg3``, SpGEMMreuse; :mod:`sparsegpu.backends.cusparse_spgemm`) and ``"hash"``, which
computes ``C = L @ R`` in two passes over the rows of ``L`` as nsparse does:

1. each row's bound (its products: the lengths of the rows of ``R`` it selects); rows are
   listed by the hash table that bound needs (a power of two of slots, at least 32);
2. symbolic: each row's distinct columns counted in its table (shared memory: 8, 16 or
   32 lanes of a warp per row for tables of up to :data:`~._hash_kernels.WARP_SLOTS` slots,
   several rows a block, else a block per row; tables too big for shared memory in global
   memory, a table per block that loops over such rows); a scan of the counts gives ``C``'s row
   offsets;
3. numeric: rows listed again by their entries (tables of 1.5 times the entries, 1.25
   times past 128), each row's products summed in its table, the table sorted by column
   and written: canonical CSR. A block's table of at least :data:`~._hash_rows.MERGE_SLOTS` slots is
   not sorted whole: its entries are gathered into the row's place in ``C``, sorted in
   runs by each warp and merged pair by pair (the longest power-law rows' tables took 0.2
   ms each to sort in shared memory, 0.5 in global memory).

Rows of at most :data:`~._hash_rows.SHORT_SLOTS` products are *short rows*
(``kernels/spgemm_short.cu``) in both passes: a group of lanes gathers the row's products in
shared memory and sorts them in registers, no table; where their work space fits, the
symbolic pass writes them into slots of their class's size and the numeric pass moves them
into place (no count pass). With 32-bit indices and ``C``'s columns below 2^(32 - log2
slots) - 1 (:func:`~._hash_kernels.narrow_keys`) the numeric sort moves one 32-bit key a
product, the column above the product's place among the row's, and the runs' sums read the
values where the gather left them.

*Short rows first* (:func:`~._hash_first.takes_short_first`: rows bounded by at most
:data:`~._hash_first.SHORT_FIRST_MAX_BOUND` products by the known longest rows, at most
:data:`~._hash_kernels.SHORT_FIRST_SLOTS` a row on average, as a P1 mesh's square): no
bounds and no listing of every row; one kernel (``spgemm_short_first``) sums each row's
products and computes the rows of at most :data:`~._hash_kernels.SHORT_FIRST_SLOTS` into
slots indexed by the row, and only the rows of more are listed (by their products: short
rows of up to :data:`~._hash_first.SHORT_FIRST_LISTED_SLOTS`, then tables); the numeric pass
moves the slots and fills the listed rows' tables (twice their symbolic slots) without
listing them again: one host synchronisation fewer, none before the scan where the bound is
at most :data:`~._hash_kernels.SHORT_FIRST_SLOTS`, nor where it is at most
:data:`~._hash_kernels.LISTED_GROUPS`' largest class (32-bit indices): there every listed
row is a short row, counted and then filled by kernels that read their class's rows off the
listing's counts on the device. Where its slots (a slot a row) do not fit the budget, every
row is listed as above. *Tiny first* (:func:`~._hash_first.takes_tiny_first`: skewed rows,
no known bound, as power-law rows) starts the same way with a thread a row
(``spgemm_tiny_first``: rows of at most :data:`~._hash_kernels.TINY_FIRST_SLOTS` products in
registers; each row's products read off the running count of ``L``'s entries' products, so
no thread walks a long row) and lists the others on the host.

Rows whose tables would hold a large share of ``C``'s columns (R-MAT's hubs: tables of at
least 1 / :data:`~._hash_kernels.DENSE_MIN_SHARE` of the columns) are *dense rows* in both
passes, where a bitmap of all the columns fits in shared memory: a block per row sets a bit
per column (symbolic: the bits counted), sums the products into a dense row of values in
global memory, and writes the columns in order from the bitmap, a warp per word (no sort),
as spECK's dense accumulators do.

Two host synchronisations (the class counts of the symbolic listing; those of the numeric
listing with ``C``'s number of entries). Work space: two arrays of ``L``'s rows (bounds,
then entries; the row lists) and, for rows whose table does not fit in shared memory, the
blocks' global tables; counted in the product's :class:`~.spgemm.Budget` (``DoesNotFit``
beyond it).

Which of ``hash`` and ``alg1`` a first product runs is :meth:`GpuSpgemm.estimate`'s rule;
planning times both (and the others) on the second product of a pair of patterns.

This module holds the engine, its rule (with the sample and the products count it reads)
and :func:`hash_multiply`; the passes live in :mod:`._hash_rows` (rows listed by their
tables) and :mod:`._hash_first` (short and tiny rows first), their kernels, sizes and
launches in :mod:`._hash_kernels`. Each module reads the others' names through them
(``_hash_kernels.NAME``), so that one assignment (a test's, an experiment's variant)
reaches every pass.
"""

from __future__ import annotations

import sys
import types
import weakref

import numpy as np

from ..device import _cuda
from ..device._host_words import HostWords
from ..device._launch import KernelLaunch
from . import _hash_first, _hash_kernels, _hash_rows, select_spgemm
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


def hash_multiply(left, right, sink: ResultSink):
    """``left @ right`` (canonical CSR mirrors on the GPU, one index dtype) into ``sink``."""
    budget = sink.budget
    try:
        if _hash_first.takes_short_first(left, right):
            product = _hash_first._short_first_multiply(left, right, sink)
            if product is not None:
                return product
        elif _hash_first.takes_tiny_first(left, right):
            product = _hash_first._short_first_multiply(left, right, sink, tiny=True)
            if product is not None:
                return product
    except DoesNotFit:
        sink.discard()
        raise
    try:
        nnz, sizes, rows, counts, short = _hash_rows._symbolic(
            left, right, budget, sink.indptr(), True
        )
        try:
            indptr, indices, data = sink.allocate(nnz)
            _hash_rows._numeric(left, right, counts, rows, indptr, indices, data, budget, short)
        finally:
            budget.release(sizes, rows)
            _hash_rows._release_short(budget, short)
    except DoesNotFit:
        sink.discard()
        raise
    return sink.finish()


# Rows of L whose products and distinct columns the rule counts (spread evenly over L)
SAMPLE_ROWS = 1024


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
    slots = _hash_kernels.table_slots(min(bound, right.shape[1]))
    launch = _hash_kernels.table_launch(slots, index.itemsize, count, _cuda.device_info())
    if launch.global_slots:
        return None
    cupy = _cuda.cupy_or_none()
    totals = cupy.zeros(2, dtype=np.uint64)
    arguments = (left.indptr, left.indices, right.indptr, right.indices, count, m, slots, totals)
    name = _hash_kernels._sample_kernel(index, launch.lanes, launch.whole_block)
    _hash_kernels._launch(name, launch.grid, launch.block, arguments, launch.shared_bytes)
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
    SHORT_MIN_PRODUCTS products, and short rows first (:func:`~._hash_first.takes_short_first`:
    bounds read only where known); in float32 also no row listed and at least
    SHORT_FLOAT32_ROW_PRODUCTS products a row on average."""
    if products < SHORT_MIN_PRODUCTS:
        return False
    if left.dtype == SHORT_FLOAT32:
        longest = (left.known_longest_row, right.known_longest_row)
        if None in longest or longest[0] * longest[1] > _hash_kernels.SHORT_FIRST_SLOTS:
            return False
        if products < SHORT_FLOAT32_ROW_PRODUCTS * max(left.shape[0], 1):
            return False
    elif left.dtype not in SHORT_DTYPES:
        return False
    return _hash_first.takes_short_first(left, right)


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
        grid = min(-(-left.nnz // _hash_kernels.BLOCK), slot.blocks)
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
        self.blocks = _hash_kernels.TOTAL_BLOCKS_PER_SM * _cuda.device_info().multiprocessors
        self.launches: dict = {}  # index dtype -> the count's launch, counters bound

    def launch(self, index_dtype) -> KernelLaunch:
        """``spgemm_products_total`` of ``index_dtype`` into this slot."""
        launch = self.launches.get(index_dtype)
        if launch is None:
            kernel = _hash_kernels._kernel(
                _hash_kernels._index_kernel("spgemm_products_total", index_dtype), 0
            )
            fixed = [self.scratch, self.host_on_device]
            launch = self.launches[index_dtype] = KernelLaunch(
                kernel, _hash_kernels.BLOCK, ["p0", "p1", "p2", *fixed]
            )
        return launch


def module_of(name: str):
    """The module of the hash rows that holds ``name`` (this one or one of its passes'; a
    function or class one of them imports from elsewhere is not theirs): where a test or an
    experiment sets it, every pass reads it."""
    for module in (_hash_kernels, _hash_rows, _hash_first, sys.modules[__name__]):
        if name not in vars(module):
            continue
        value = vars(module)[name]
        if not isinstance(value, type | types.FunctionType):
            return module  # a constant, a table, a family: assigned here
        if value.__module__ == module.__name__:
            return module
    raise AttributeError(f"no hash rows' module holds {name!r}")


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
        first_slots = _hash_kernels.SHORT_FIRST_SLOTS
        first_bound = _hash_first.SHORT_FIRST_MAX_BOUND
        if algorithm == HASH and _short_first_rule(left, right, products):
            return HASH, (
                f"rule: {measures}: hash rows, short rows first (every row of at most "
                f"{first_slots} products sorted in registers, no listing; the rest listed: "
                f"short rows of up to {_hash_first.SHORT_FIRST_LISTED_SLOTS}, then tables, or, "
                f"rows of <= {max(_hash_kernels.LISTED_GROUPS)} with 32-bit indices, all short "
                "rows listed on the device; "
                f"float64, >= {SHORT_MIN_PRODUCTS:,} products, <= {first_slots} a row "
                f"on average, rows of <= {first_bound:,} by the known longest rows; "
                f"float32: every row of <= {first_slots}, >= "
                f"{SHORT_FLOAT32_ROW_PRODUCTS} a row on average)"
            )
        if compression is not None:
            measures += f", {compression:.2f} an entry on {SAMPLE_ROWS:,} rows"
        if exact is not None:
            measures += (
                f", exactly {exact:,} products ({exact / max(left.shape[0], 1):,.1f} a row; "
                f"rows of over {HASH_MAX_ROW_PRODUCTS:,}: dense rows where their tables would "
                f"hold 1/{_hash_kernels.DENSE_MIN_SHARE} of the columns)"
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
            f"rows first: rows of <= {first_bound:,} products by the known longest "
            f"rows, <= {first_slots} a row on average, >= {SHORT_MIN_PRODUCTS:,} "
            f"products, float64; float32 where every row has <= {first_slots} products "
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
        if most < most_needed or not _hash_kernels.dense_rows_fit(
            right.shape[1], _cuda.device_info()
        ):
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
            return _hash_rows.hash_count(left, right, budget)
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
            return _hash_rows.hash_count(left, right, budget, np.dtype(np.int64))
        except DoesNotFit:
            return super().result_nnz(left, right, budget)
