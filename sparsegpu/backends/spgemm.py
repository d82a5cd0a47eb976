"""Sparse times sparse (``C = L @ R``) where a residence computes: engines and the driver.

An :class:`SpgemmEngine` multiplies two canonical CSR mirrors of one residence (cuSPARSE
SpGEMM for the GPU, :mod:`sparsegpu.backends.cusparse_spgemm`, which dispatch knows; others
by residence name, :func:`register_engine`); a residence without one (the host, where
scipy computes) keeps scipy's product.

:func:`multiply` runs one product within a :class:`Budget` of device memory:

1. the whole product with the algorithm asked for (cuSPARSE ALG1: fastest, the largest
   work buffers: cupy#7044 saw 6 GB where csrgemm2 took 1 GB);
2. where its work space does not fit, the engine's memory-lean algorithms (cuSPARSE ALG2,
   then ALG3 in chunks of the intermediate products);
3. where none fits, in row blocks of ``L`` balanced by their intermediate products: a
   first pass counts each block's nonzeros, the result is allocated once, and a second
   pass writes each block into it (a block that still does not fit is halved);
4. a result that cannot fit at all raises :class:`~sparsegpu.device._mirror.DeviceMemoryError`
   (a MemoryError) with the bytes it needs and the bytes free, before anything big is
   allocated; the operands and the process stay usable.

Results are canonical CSR (sorted column indices, no duplicates); entries whose products
cancel to exactly zero stay stored (scipy drops them, cuSPARSE and cupyx keep them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..device import _cuda
from ..device._mirror import (
    DeviceMatrix,
    DeviceMemoryError,
    device_free_bytes,
    is_out_of_memory,
    memory_error,
    pattern_key_of,
    rows_rise_on_device,
)
from .base import FLOAT_AND_COMPLEX

INT32_MAX = np.iinfo(np.int32).max
INT32, INT64 = np.dtype(np.int32), np.dtype(np.int64)


class DoesNotFit(Exception):
    """One attempt at a product needs more device memory than it may take (internal:
    :func:`multiply` answers it with a leaner attempt, or a MemoryError)."""

    def __init__(self, needed: int, free: int | None, what: str):
        super().__init__(f"{what}: {needed:,} bytes needed, {free} free")
        self.needed = needed
        self.free = free
        self.what = what


class Refused(RuntimeError):
    """An engine cannot run one algorithm on these operands (the library answered an
    error other than memory); planning leaves that candidate out, and a product tries the
    next algorithm."""


class Reconsider(Exception):
    """What a product assumed of its intermediate products while they were still being
    counted (:class:`Counted`) did not hold: nothing was launched for it, and the rule
    and the index dtype are decided again on the exact count (internal)."""


class Counted:
    """The intermediate products of one product, counted on the device: launched ahead of
    the host work that would otherwise wait for the count, and read when it is needed.

    While the count runs, the rule and :func:`compute_operands` may assume what their
    usual answer needs of it (:meth:`expect`: a skewed product's few products a row,
    products within int32); :meth:`check` reads the count and tests those assumptions
    just before the product's first launch (:meth:`ResultSink.before_launch`), raising
    :class:`Reconsider` where one fails. Only host work (and the narrowing of int64
    operands to int32, whose values fit: their sizes are within int32) runs on an
    assumption, so a wrong one costs host time, never a product launched with the wrong
    index dtype or algorithm. Subclasses (an engine's) implement :meth:`done` and
    :meth:`_read`."""

    # whether the operands' sizes leave the index dtype to the count
    # (:func:`products_decide_indices`), where the one who launched it worked that out
    # (None: not known; :func:`compute_operands` works it out)
    decides_indices: bool | None = None

    def __init__(self):
        self._exact: int | None = None
        self._expected: list = []

    def done(self) -> bool:
        """Whether the count has finished (no wait)."""
        return self._exact is not None

    def value(self) -> int:
        """The exact count (waits for it)."""
        if self._exact is None:
            self._exact = int(self._read())
        return self._exact

    def _read(self) -> int:
        raise NotImplementedError

    def expect(self, holds, what: str) -> None:
        """Assume ``holds(count)`` until :meth:`check`; ``what`` says what was assumed."""
        self._expected.append((holds, what))

    def check(self) -> None:
        """Test the assumptions made (once): :class:`Reconsider` naming those that fail."""
        if not self._expected:
            return
        exact = self.value()
        failed = [what for holds, what in self._expected if not holds(exact)]
        self._expected = []
        if failed:
            raise Reconsider(f"{exact:,} products: not " + "; not ".join(failed))


def exact_products(products) -> int | None:
    """``products`` (an int, a :class:`Counted` or None) as an int where it is known
    without waiting, else None."""
    if isinstance(products, Counted):
        return products.value() if products.done() else None
    return products


class SpgemmError(RuntimeError):
    """No algorithm of the engine could compute a product (each refused it): what the user
    sees instead of the library's own status."""


def free_bytes(xp) -> int | None:
    """Bytes a new allocation in ``xp`` can take now (None on the host: no known bound)."""
    return None if xp is np else device_free_bytes()


class Budget:
    """The device memory one product may take (work buffers and result), and its peak.

    Parameters
    ----------
    xp : module
        numpy or cupy.
    limit : int, optional
        Bytes this product may hold at once; None: whatever the device (and CuPy's pool
        limit) lets it allocate.
    """

    def __init__(self, xp, limit: int | None = None):
        if limit is not None and (not isinstance(limit, (int, np.integer)) or limit < 0):
            raise ValueError(f"memory_limit must be a number of bytes >= 0, got {limit!r}")
        self.xp = xp
        self.limit = None if limit is None else int(limit)
        self.in_use = 0
        self.peak = 0

    def free(self) -> int | None:
        """Bytes this product may still take (None: no known bound)."""
        device = free_bytes(self.xp)
        if self.limit is None:
            return device
        left = self.limit - self.in_use
        return left if device is None else min(left, device)

    def reserve(self, nbytes: int, what: str) -> int:
        """Count ``nbytes`` as taken (memory a library allocates by itself); DoesNotFit
        beyond the limit."""
        nbytes = int(nbytes)
        self._check(nbytes, what)
        self._count(nbytes)
        return nbytes

    def empty(self, size: int, dtype, what: str):
        """A new 1-D array of ``size`` elements, counted; DoesNotFit when the limit or the
        device refuses it (and then nothing is counted)."""
        dtype = np.dtype(dtype)
        nbytes = int(size) * dtype.itemsize
        self._check(nbytes, what)
        try:
            array = self.xp.empty(int(size), dtype=dtype)
        except Exception as exc:
            if is_out_of_memory(exc):
                raise DoesNotFit(nbytes, free_bytes(self.xp), what) from exc
            raise
        self._count(nbytes)
        return array

    def _check(self, nbytes: int, what: str) -> None:
        if self.limit is not None and self.in_use + nbytes > self.limit:
            raise DoesNotFit(nbytes, self.limit - self.in_use, what)

    def _count(self, nbytes: int) -> None:
        self.in_use += nbytes
        self.peak = max(self.peak, self.in_use)

    def release(self, *arrays) -> None:
        """Stop counting ``arrays`` (their owner drops them)."""
        for a in arrays:
            if a is not None:
                self.in_use -= a.nbytes

    def unreserve(self, nbytes: int) -> None:
        self.in_use -= int(nbytes)


@dataclass
class Slot:
    """Where a row block's product goes in a result allocated beforehand: rows
    ``row0 ..`` of ``indptr``, entries from ``offset`` on of ``indices`` and ``data``."""

    indptr: object
    indices: object
    data: object
    row0: int
    offset: int


class ResultSink:
    """The arrays an engine writes one product into: new ones (the whole result) or a
    block's part of a result allocated beforehand (a :class:`Slot`)."""

    def __init__(self, budget: Budget, shape, dtype, index_dtype, residence, slot=None):
        self.budget = budget
        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = np.dtype(dtype)
        self.index_dtype = np.dtype(index_dtype)
        self.residence = residence
        self.slot = slot
        self.nnz = 0
        # what must hold before the product's first launch (Counted.check), or None
        self.check = None
        self._indptr = None
        self._arrays = None
        self._allocated = []  # what this sink took from the budget

    def _empty(self, size, dtype, what):
        self._allocated.append(self.budget.empty(size, dtype, what))
        return self._allocated[-1]

    def indptr(self):
        """The ``shape[0] + 1`` row offsets (from 0) to fill, allocated on first call (a
        library may want them before it knows the nonzeros)."""
        if self._indptr is None:
            what = "the result" if self.slot is None else "a row block's row offsets"
            self._indptr = self._empty(self.shape[0] + 1, self.index_dtype, what)
        return self._indptr

    def before_launch(self) -> None:
        """What an engine calls before it launches anything for this product: the
        assumptions made of a count still running are checked (:class:`Reconsider`)."""
        check, self.check = self.check, None
        if check is not None:
            check()

    def allocate(self, nnz: int):
        """``(indptr, indices, data)`` to fill: :meth:`indptr` and ``nnz`` entries."""
        self.nnz = int(nnz)
        indptr = self.indptr()
        if self.slot is None:
            indices = self._empty(nnz, self.index_dtype, "the result")
            data = self._empty(nnz, self.dtype, "the result")
        else:
            s = self.slot
            indices = s.indices[s.offset : s.offset + nnz]
            data = s.data[s.offset : s.offset + nnz]
        self._arrays = (indptr, indices, data)
        return self._arrays

    def discard(self) -> None:
        """Give back what was allocated (the product did not complete)."""
        self.budget.release(*self._allocated)
        self._allocated, self._indptr, self._arrays = [], None, None

    def finish(self):
        """The product as a DeviceMatrix, or (into a slot) the entries it wrote."""
        indptr, indices, data = self._arrays
        if self.slot is None:
            return DeviceMatrix(data, indices, indptr, self.shape, self.residence)
        s = self.slot
        m = self.shape[0]
        s.indptr[s.row0 + 1 : s.row0 + m + 1] = indptr[1:] + s.offset
        self.budget.release(indptr)
        return self.nnz


class SpgemmEngine:
    """Multiplies canonical CSR mirrors of one residence: ``C = L @ R``.

    Subclasses implement :meth:`_multiply` (and :meth:`reuse` where the library can redo a
    product of the same patterns with new values only).

    Attributes
    ----------
    name : str
    value_dtypes : tuple of dtype
    default_algorithm : str
        What an unplanned product runs.
    """

    name = ""
    value_dtypes = FLOAT_AND_COMPLEX
    default_algorithm = "alg1"

    def unavailable_reason(self) -> str | None:
        return None

    def algorithms(self) -> tuple[str, ...]:
        """The algorithms planning may time here, the default first."""
        return (self.default_algorithm,)

    def planning_algorithms(self) -> tuple[str, ...]:
        """The algorithms planning level ``measure`` times (``exhaustive``: every one of
        :meth:`algorithms`): those that can be the fastest, not only the leanest."""
        return self.algorithms()

    def estimate(self, left, right) -> tuple[str, str]:
        """``(algorithm, reason)``: what a product of these operands runs before any
        measurement (the first product of a pair of patterns, and planning level
        ``estimate``); here the default."""
        return self.default_algorithm, "the engine's default"

    def rule(self, left, right) -> str:
        """The algorithm :meth:`estimate` names, without its reason (what a product reads
        before it runs: no text made per product)."""
        return self.estimate(left, right)[0]

    def rule_and_products(self, left, right, counted=None) -> tuple[str, int | Counted | None]:
        """``(rule's algorithm, the intermediate products where the rule counted them,
        else None)``: a product passes the count on to :func:`multiply`, which then does not
        count them again. ``counted``: the products where the caller has them (an int, or
        a :class:`Counted` launched by :meth:`products_ahead`), passed on."""
        return self.rule(left, right), counted

    def products_ahead(self, left, right) -> Counted | None:
        """The intermediate products' count launched now, where the rule or the index
        dtype will read it (the first product of a pair), so that the device counts them
        while the host plans; None where nothing will read it, or the engine cannot."""
        return None

    def lean_algorithms(self) -> tuple[str, ...]:
        """Algorithms taking less work space, tried in order when the default's does not
        fit."""
        return ()

    def check_algorithm(self, algorithm: str) -> None:
        """A ValueError naming this engine's algorithms unless ``algorithm`` is one."""
        if algorithm == self.default_algorithm:  # every product the rule runs: no lookup
            return
        known = dict.fromkeys(self.algorithms() + self.lean_algorithms())
        if algorithm not in known:
            raise ValueError(
                f"algorithm {algorithm!r} is not one this engine ({self.name}) runs here; "
                f"choose one of {', '.join(map(repr, known))}"
            )

    def multiply(self, left, right, algorithm: str, sink: ResultSink):
        """``left @ right`` into ``sink``; DoesNotFit when its work space does not fit.
        ``_multiply`` calls ``sink.before_launch()`` before its first launch (here, for
        an engine that does not: before it)."""
        self.check_algorithm(algorithm)
        if not self.checks_before_launch:
            sink.before_launch()
        return self._multiply(left, right, algorithm, sink)

    # whether _multiply calls sink.before_launch() itself (as late as it can)
    checks_before_launch = False

    def count(self, left, right, algorithm: str, budget: Budget) -> int:
        """Nonzeros of ``left @ right`` (the first pass over row blocks)."""
        return self._count(left, right, algorithm, budget)

    # whether the result's index dtype follows its nonzeros (scipy's rule) rather than its
    # intermediate products (a library whose 32-bit product cannot take more)
    narrows_by_result = False

    def total_products(self, left, right) -> int:
        """The intermediate products of ``left @ right`` (one gather over L's column
        indices and one sum; one transfer)."""
        if not left.nnz:
            return 0
        lengths = left.xp.diff(right.indptr)
        return int(lengths[left.indices].sum(dtype=np.int64))

    def result_nnz(self, left, right, budget: Budget) -> int:
        """Nonzeros of ``left @ right`` however many (over 2^31 too), counted on the
        operands as they are: what decides the result's index dtype when its products
        are more than 32-bit indices hold. Here: counted with 64-bit operands."""
        wide = np.dtype(np.int64)
        return self.count(
            with_index_dtype(left, wide),
            with_index_dtype(right, wide),
            self.default_algorithm,
            budget,
        )

    def _multiply(self, left, right, algorithm, sink):
        raise NotImplementedError

    def _count(self, left, right, algorithm, budget):
        raise NotImplementedError

    def reuse(self, left, right, budget: Budget):
        """A plan redoing ``left @ right`` for new values of the same patterns, or None
        where this engine has none."""
        return None


_engines: dict[str, SpgemmEngine] = {}


def register_engine(residence_name: str, engine: SpgemmEngine) -> None:
    """Let ``engine`` compute the sparse products of matrices whose backend lives in
    residence ``residence_name``, instead of the built-in one (tests register one for
    their host-copy residence)."""
    _engines[residence_name] = engine


def registered_engine(residence_name: str) -> SpgemmEngine | None:
    """The engine registered for ``residence_name``, or None."""
    return _engines.get(residence_name)


# ------------------------------------------------------------------------ operands
def is_canonical(matrix: DeviceMatrix) -> bool:
    """True when every row's column indices strictly increase (sorted, no duplicates);
    one pass and one transfer, or none where the upload's check counted it."""
    if matrix.rows_rise is not None:
        return matrix.rows_rise
    xp, nnz = matrix.xp, matrix.nnz
    if nnz < 2:
        return True
    if xp is not np and matrix.indptr.dtype == matrix.indices.dtype:
        return rows_rise_on_device(matrix.indptr, matrix.indices, xp)
    starts = xp.zeros(nnz + 1, dtype=bool)
    starts[matrix.indptr[:-1]] = True  # an empty row marks the next row's start
    rising = matrix.indices[1:] > matrix.indices[:-1]
    return bool((rising | starts[1:nnz]).all())


def running_count(mask, xp):
    """0, then the number of True values of ``mask`` up to each place (int64, one longer
    than ``mask``). Read at a CSR matrix's row offsets it gives the row offsets of the
    entries ``mask`` keeps: a scan and a gather, where a bincount of the kept entries' rows
    adds with atomics that collide on the GPU."""
    counts = xp.zeros(int(mask.shape[0]) + 1, dtype=np.int64)
    xp.cumsum(mask, dtype=np.int64, out=counts[1:])
    return counts


def canonical_copy(matrix: DeviceMatrix) -> DeviceMatrix:
    """The matrix with its entries sorted in each row and duplicates summed (where it
    lives; one sort of the entries)."""
    xp = matrix.xp
    (n_rows, n_cols), nnz = matrix.shape, matrix.nnz
    lengths = xp.diff(matrix.indptr).astype(np.int64)
    rows = xp.repeat(xp.arange(n_rows, dtype=np.int64), lengths)
    key = rows * max(n_cols, 1) + matrix.indices.astype(np.int64)
    order = xp.argsort(key)
    key = key[order]
    first = xp.ones(nnz, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    # distinct entries up to each place (0 before the first): the sort keeps each row's
    # entries where its row offsets put them, so the copy's row offsets are this read at the
    # matrix's (one gather; a bincount of the rows took 3.3 of a 4.7 ms copy of power-law
    # rows, 3.8M entries, H200, CuPy 14)
    distinct = running_count(first, xp)
    count = int(distinct[-1])
    data = xp.zeros(count, dtype=matrix.dtype)
    _scatter_add(xp, data, distinct[1:] - 1, matrix.data[order])
    key = key[first]
    indptr = distinct[matrix.indptr].astype(matrix.index_dtype)
    indices = (key % max(n_cols, 1)).astype(matrix.index_dtype)
    copy = DeviceMatrix(data, indices, indptr, matrix.shape, matrix.residence)
    # summing duplicates never lengthens a row: the matrix's longest row, where known without
    # a pass, bounds the copy's (a product of it needs no pass over the copy to bound its
    # rows, nor does a product of that product's result: describe_product)
    copy.row_bound = matrix.known_longest_row
    return copy


def _scatter_add(xp, target, positions, values) -> None:
    """``target[positions] += values`` with repeated positions summed (``ufunc.at``; CuPy's
    takes real dtypes only: a complex one is done as its real and imaginary parts)."""
    if target.dtype.kind == "c" and xp is not np:
        parts = target.view(target.real.dtype).reshape(-1, 2)
        for part, source in ((0, values.real), (1, values.imag)):
            column = xp.zeros(target.shape[0], dtype=parts.dtype)
            xp.add.at(column, positions, source)
            parts[:, part] = column
        return
    xp.add.at(target, positions, values)


# What ``formats["canonical"]`` holds for a matrix that is canonical itself: not the
# matrix, whose reference to itself would keep a product's result (and its device memory)
# alive until Python's cycle collector happens to run.
_ITSELF = "itself"


def canonical(matrix: DeviceMatrix) -> DeviceMatrix:
    """``matrix`` when it is canonical, else its canonical copy (checked once per mirror)."""
    found = matrix.derived(
        "canonical", lambda: _ITSELF if is_canonical(matrix) else canonical_copy(matrix)
    )
    return matrix if found is _ITSELF else found


def mark_canonical(matrix: DeviceMatrix) -> DeviceMatrix:
    """Record that ``matrix`` is canonical (a product's result), so that it is not checked."""
    matrix.formats["canonical"] = _ITSELF
    return matrix


def with_index_dtype(matrix: DeviceMatrix, index_dtype) -> DeviceMatrix:
    """The same matrix with its index arrays in ``index_dtype`` (shared when already so)."""
    index_dtype = np.dtype(index_dtype)
    if matrix.index_dtype == index_dtype:
        return matrix
    return matrix.same_rows(
        indices=matrix.indices.astype(index_dtype), indptr=matrix.indptr.astype(index_dtype)
    )


def row_products(left: DeviceMatrix, right: DeviceMatrix):
    """The intermediate products of each row of ``left @ right`` (int64, where they live):
    ``sum over k in row i of L of nnz(row k of R)``."""
    xp = left.xp
    right_lengths = xp.diff(right.indptr).astype(np.int64)
    running = xp.zeros(left.nnz + 1, dtype=np.int64)
    if left.nnz:
        running[1:] = xp.cumsum(right_lengths[left.indices])
    return running[left.indptr[1:]] - running[left.indptr[:-1]]


def row_block(matrix: DeviceMatrix, row0: int, row1: int, host_indptr) -> DeviceMatrix:
    """Rows ``row0:row1`` of ``matrix`` (views of its entries; ``host_indptr`` its row
    offsets on the host)."""
    start, stop = int(host_indptr[row0]), int(host_indptr[row1])
    indptr = matrix.indptr[row0 : row1 + 1] - matrix.indptr.dtype.type(start)
    block = DeviceMatrix(
        matrix.data[start:stop],
        matrix.indices[start:stop],
        indptr,
        (row1 - row0, matrix.shape[1]),
        matrix.residence,
    )
    return mark_canonical(block)


def empty_product(left, right, index_dtype, budget: Budget) -> DeviceMatrix:
    """The product of operands with no nonzeros (or no rows, columns or inner dimension)."""
    m, n = left.shape[0], right.shape[1]
    indptr = budget.empty(m + 1, index_dtype, "the result")
    indptr.fill(0)
    data = budget.empty(0, left.dtype, "the result")
    indices = budget.empty(0, index_dtype, "the result")
    return mark_canonical(DeviceMatrix(data, indices, indptr, (m, n), left.residence))


# -------------------------------------------------------------------------- driver
@dataclass
class Outcome:
    """How one product ran: the algorithm, the row blocks (1: whole) and the device bytes
    it held at most (work buffers and result)."""

    algorithm: str
    blocks: int
    peak_bytes: int


def multiply(
    engine: SpgemmEngine, left, right, algorithm: str, budget: Budget, products: int | None = None
):
    """``(C, Outcome)``: ``left @ right`` (canonical CSR mirrors of one residence) as a
    canonical DeviceMatrix (int32 indices unless its sizes need int64), whole when it
    fits, else with a leaner algorithm, else in row blocks (see the module docstring).
    ``products``: the intermediate products, where the caller counted them already (an
    int), or is counting them (a :class:`Counted`: what was assumed of them is checked
    before the first launch; :class:`Reconsider` where it does not hold).

    Raises
    ------
    DeviceMemoryError
        When the result itself (or one row's work space) cannot fit.
    SpgemmError
        When the engine refused the product with every algorithm (a library status other
        than memory): never the library's own error.
    """
    if is_empty(left, right):
        return run_once(engine, left, right, algorithm, budget), Outcome(algorithm, 1, budget.peak)
    left, right, nnz = compute_operands(engine, left, right, budget, products)
    if nnz is not None:  # counted: a result that cannot fit is refused before any work
        _check_result_fits(left, right, nnz, budget)
    check = products.check if isinstance(products, Counted) else None
    refused = {}
    for attempt in (algorithm, *[a for a in engine.lean_algorithms() if a != algorithm]):
        try:
            product = run_once(engine, left, right, attempt, budget, ready=True, check=check)
        except DoesNotFit:
            continue
        except Refused as exc:
            refused[attempt] = exc
            continue
        return product, Outcome(attempt, 1, budget.peak)
    if check is not None:  # (once checked, it passes at once)
        check()
    usable = [a for a in (algorithm, *engine.lean_algorithms()) if a not in refused]
    if usable:
        sink_args = ((left.shape[0], right.shape[1]), left.dtype, left.index_dtype, left.residence)
        try:
            product, blocks = _in_row_blocks(engine, left, right, usable[0], budget, sink_args)
        except Refused as exc:
            refused[usable[0]] = exc
        else:
            return mark_canonical(product), Outcome(usable[0], blocks, budget.peak)
    raise SpgemmError(
        f"the {engine.name} engine could not compute this ({left.shape[0]:,} x "
        f"{left.shape[1]:,}, {left.nnz:,} nonzeros) @ ({right.shape[0]:,} x {right.shape[1]:,}, "
        f"{right.nnz:,} nonzeros) product: "
        + "; ".join(f"{name}: {exc}" for name, exc in refused.items())
        + "; A.backend = 'scipy' computes it on the host"
    )


def run_once(
    engine: SpgemmEngine,
    left,
    right,
    algorithm: str,
    budget: Budget,
    ready: bool = False,
    check=None,
) -> DeviceMatrix:
    """``left @ right`` whole with ``algorithm`` and nothing else: DoesNotFit when its
    work space or result does not fit (what planning times). ``ready``: the operands are
    :func:`compute_operands`' already. ``check``: called before the first launch
    (:meth:`ResultSink.before_launch`)."""
    if not ready:
        left, right, _ = compute_operands(engine, left, right, budget)
        if is_empty(left, right):  # (multiply's, ready, returned before: never with a check)
            return empty_product(left, right, left.index_dtype, budget)
    shape = (left.shape[0], right.shape[1])
    sink = ResultSink(budget, shape, left.dtype, left.index_dtype, left.residence)
    sink.check = check
    try:
        product = engine.multiply(left, right, algorithm, sink)
    except Reconsider:
        sink.discard()
        raise
    return mark_canonical(product)


def is_empty(left, right) -> bool:
    """True for a product with nothing to compute (no nonzeros, rows or columns)."""
    return min(left.nnz, right.nnz, *left.shape, *right.shape) == 0


def compute_operands(engine: SpgemmEngine, left, right, budget: Budget, products=None):
    """The operands with the index dtype the engine computes in: int32 (the fast
    kernels) unless a size of theirs or of the result needs int64.

    The result has at most as many nonzeros as the intermediate products and as
    ``m x n``; the products are bounded by ``nnz(L)`` times R's longest row (and by
    ``nnz(R)`` times L's fullest column, where that is known), and counted
    (:meth:`SpgemmEngine.total_products`, one pass) only when the bound is over int32.
    Products past int32 take int64 indices: cuSPARSE's 32-bit SpGEMM does not compute
    them (cupyx's product of R-MAT scale 18 by itself came back empty). The result's
    nonzeros are then counted (:meth:`SpgemmEngine.result_nnz`, a symbolic pass) where
    the engine narrows by the result as scipy does (``narrows_by_result``: int32 when the
    result fits), or where the result may not fit in memory, so that it is refused before
    any work with its size. ``products``: the count where the caller has it (the rule's:
    a skewed product's rule counts them, and counting again cost 0.1 ms of a 1.9 ms first
    product of power-law rows); a :class:`Counted` still running is not waited for: int32
    is assumed (:meth:`Counted.expect`) and checked before the product's first launch.
    Returns ``(left, right, the result's nonzeros where they were counted, else None)``."""
    nnz = None
    decides = products.decides_indices if isinstance(products, Counted) else None
    if decides is None:
        decides = products_decide_indices(left, right)
    if decides:
        if products is None:
            products = engine.total_products(left, right)
        elif isinstance(products, Counted):
            if not products.done():
                products.expect(lambda exact: exact <= INT32_MAX, "within 32-bit indices")
                return with_index_dtype(left, INT32), with_index_dtype(right, INT32), None
            products.check()  # the rule's assumption first: no symbolic pass for nothing
            products = products.value()
        wide = products > INT32_MAX
        if wide and (engine.narrows_by_result or not _may_fit(left, right, products, budget)):
            try:
                nnz = engine.result_nnz(left, right, budget)
            except DoesNotFit:  # not even the count fits: 64-bit, as the products say
                nnz = None
            if nnz is not None and engine.narrows_by_result:
                wide = nnz > INT32_MAX
    else:
        wide = max(left.nnz, right.nnz, *left.shape, *right.shape) > INT32_MAX
    index_dtype = INT64 if wide else INT32
    return with_index_dtype(left, index_dtype), with_index_dtype(right, index_dtype), nnz


def products_decide_indices(left, right) -> bool:
    """Whether the index dtype of ``left @ right`` waits for its intermediate products:
    no size of the operands needs int64 by itself, and the bounds of the products (and
    ``m x n``) allow more than int32 holds."""
    if max(left.nnz, right.nnz, *left.shape, *right.shape) > INT32_MAX:
        return False
    n = right.shape[1]
    return left.shape[0] * n > INT32_MAX and _products_may_pass_int32(left, right, n)


def _products_may_pass_int32(left, right, n: int) -> bool:
    """Whether the bounds of ``left @ right``'s intermediate products allow more than
    int32 holds: ``nnz(L)`` times R's longest row, and, where L's columns are known (a
    transpose's), ``nnz(R)`` times the most entries a column of L holds (what a
    transposed prolongation's product reads before any pass: P's longest row)."""
    if left.column_bound is not None and right.nnz * left.column_bound <= INT32_MAX:
        return False
    return left.nnz * min(right.longest_row, n) > INT32_MAX


def _may_fit(left, right, products: int, budget: Budget) -> bool:
    """Whether a 64-bit result of at most ``products`` (and ``m x n``) entries fits."""
    bound = min(products, left.shape[0] * right.shape[1])
    free = budget.free()
    return free is None or (left.shape[0] + 1 + bound) * 8 + bound * left.dtype.itemsize <= free


def _check_result_fits(left, right, nnz: int, budget: Budget) -> None:
    """A MemoryError naming the result's nonzeros and bytes unless it fits in ``budget``
    (the work space aside: leaner algorithms and row blocks answer that)."""
    m, n = left.shape[0], right.shape[1]
    needed = (m + 1 + nnz) * left.index_dtype.itemsize + nnz * left.dtype.itemsize
    free = budget.free()
    if free is not None and needed > free:
        what = f"the result of this {m:,} x {n:,} product ({nnz:,} nonzeros)"
        raise memory_error(needed, what, free)


def _in_row_blocks(engine, left, right, algorithm, budget: Budget, sink_args):
    """``(C, number of blocks)``: the product in row blocks of ``left`` (two passes)."""
    host_indptr = _to_host(left.indptr).astype(np.int64)
    running = np.zeros(left.shape[0] + 1, dtype=np.int64)
    running[1:] = np.cumsum(_to_host(row_products(left, right)))

    def halves(row0, row1):
        """Two blocks with about half the intermediate products each."""
        middle = int(np.searchsorted(running, (running[row0] + running[row1]) // 2))
        middle = min(max(middle, row0 + 1), row1 - 1)
        return (row0, middle), (middle, row1)

    def block(row0, row1):
        return row_block(left, row0, row1, host_indptr)

    # pass 1: a partition whose blocks fit, with their nonzeros
    sizes, pending = [], list(halves(0, left.shape[0])) if left.shape[0] > 1 else [(0, 1)]
    while pending:
        row0, row1 = pending.pop(0)
        try:
            sizes.append((row0, row1, engine.count(block(row0, row1), right, algorithm, budget)))
        except DoesNotFit as exc:
            if row1 - row0 == 1:
                raise _row_does_not_fit(row0, exc) from exc
            pending[:0] = halves(row0, row1)
    total = sum(nnz for _, _, nnz in sizes)
    shape, dtype, index_dtype, residence = sink_args
    needed = (shape[0] + 1 + total) * np.dtype(index_dtype).itemsize + total * dtype.itemsize
    try:
        indptr = budget.empty(shape[0] + 1, index_dtype, "the result")
        indices = budget.empty(total, index_dtype, "the result")
        data = budget.empty(total, dtype, "the result")
    except DoesNotFit as exc:
        what = f"the result of this {shape[0]:,} x {shape[1]:,} product ({total:,} nonzeros)"
        raise memory_error(needed, what, exc.free) from exc
    indptr[:1] = 0
    # pass 2: each block written into the result (halved again if it no longer fits beside it)
    offset, pending, blocks = 0, [(row0, row1) for row0, row1, _ in sizes], 0
    while pending:
        row0, row1 = pending.pop(0)
        slot = Slot(indptr, indices, data, row0, offset)
        sink = ResultSink(budget, (row1 - row0, shape[1]), dtype, index_dtype, residence, slot)
        try:
            offset += engine.multiply(block(row0, row1), right, algorithm, sink)
            blocks += 1
        except DoesNotFit as exc:
            if row1 - row0 == 1:
                raise _row_does_not_fit(row0, exc) from exc
            pending[:0] = halves(row0, row1)
    return DeviceMatrix(data, indices, indptr, shape, residence), blocks


def _row_does_not_fit(row: int, exc: DoesNotFit) -> DeviceMemoryError:
    what = f"the work space of row {row:,} of this product ({exc.what})"
    return memory_error(exc.needed, what, exc.free)


def _to_host(a):
    return a.get() if _cuda.is_cupy_array(a) else np.asarray(a)


def describe_product(product: DeviceMatrix, left: DeviceMatrix, right: DeviceMatrix):
    """``product`` (``left @ right``, fresh) with what its operands tell of it recorded, so
    that a product with it needs no pass over it first: a bound of its longest row (the
    operands' longest rows multiplied, where both are known without a pass) and, where the
    operands have theirs, its pattern's key (theirs determine its pattern)."""
    bounds = (left.known_longest_row, right.known_longest_row)
    if None not in bounds:  # never a pass for it: a later product reads one when it needs it
        product.row_bound = min(bounds[0] * bounds[1], product.shape[1])
    keys = (left.formats.get("pattern_key"), right.formats.get("pattern_key"))
    if None not in keys:  # hashed: a chain of products keeps a key of one size
        key = (product.shape, product.nnz, product.index_dtype, ("product", hash(keys)))
        product.formats.setdefault("pattern_key", key)
    return product


def pattern_key(matrix: DeviceMatrix) -> tuple:
    """:func:`~sparsegpu.device._mirror.pattern_key_of` ``matrix``'s arrays, computed once
    per mirror (a mirror made from host arrays has it from them: no transfer)."""
    return matrix.derived(  # its transfer has waited for the sample it read
        "pattern_key", lambda: pattern_key_of(matrix.indptr, matrix.indices, matrix), queues=False
    )
