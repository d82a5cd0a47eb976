"""Validated copies of a matrix's CSR arrays where a backend computes ("mirrors").

A :class:`DeviceMatrix` is the CSR arrays of one matrix, in one array module (CuPy for
the GPU backends, NumPy for the scipy reference), in one value dtype, validated once when
it is made. Backends only ever see a DeviceMatrix, so invalid input never reaches a kernel
(a bad index on the GPU would kill the CUDA context of the whole process).

A :class:`Residence` says where a mirror lives and how host arrays get there.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from . import _compile, _cuda
from ._host_words import HostWords
from ._launch import CXX_INDEX_TYPES


@dataclass(frozen=True)
class Residence:
    """Where a backend's mirror lives.

    Attributes
    ----------
    name : str
        Cache key (``"host"``, ``"cupy"``, ...).
    get_xp : callable
        Returns the array module (numpy or cupy).
    upload : callable
        Host numpy array -> array in that module. ``copies`` says whether it copies.
    copies : bool
        True when the mirror holds copies; the host arrays are then locked (read-only)
        while the mirror lives, so that an in-place write cannot make it stale.
    """

    name: str
    get_xp: Callable[[], Any]
    upload: Callable[[np.ndarray], Any]
    copies: bool

    @property
    def xp(self):
        return self.get_xp()


HOST = Residence("host", lambda: np, lambda a: a, copies=False)
CUPY = Residence(
    "cupy",
    lambda: _cuda.cupy_or_none(),
    lambda a: _cuda.cupy_or_none().asarray(a),
    copies=True,
)


# Rows sampled for the column spread (evenly spaced; their first and last stored column).
SPREAD_SAMPLE_ROWS = 4096


@dataclass(frozen=True)
class RowLengthStats:
    """Row-length statistics of a CSR matrix, computed once per mirror.

    ``imbalance`` is max / mean: 1 for perfectly regular rows, large for power-law rows.
    ``column_spread`` is the mean distance of a row's first and last stored column from
    the row's place on the diagonal (row * n_cols / n_rows), as a fraction of n_cols, over
    up to ``SPREAD_SAMPLE_ROWS`` evenly spaced non-empty rows: near 0 for banded matrices
    (stencils, meshes in a good ordering), about 0.44 for 16 uniformly random columns a row.
    """

    n_rows: int
    n_cols: int
    nnz: int
    mean: float
    std: float
    min: int
    max: int
    empty_rows: int
    column_spread: float = 0.0

    @property
    def imbalance(self) -> float:
        return self.max / self.mean if self.mean > 0 else 0.0

    @classmethod
    def from_indptr(cls, indptr, n_cols: int, xp, indices=None) -> RowLengthStats:
        """Statistics of the rows of ``indptr`` (and, given ``indices``, the column spread);
        on the GPU one launch (``kernels/row_stats.cu``) and one device-to-host transfer."""
        n_rows = int(indptr.shape[0]) - 1
        if n_rows <= 0:
            return cls(max(n_rows, 0), n_cols, 0, 0.0, 0.0, 0, 0, 0)
        spread = indices is not None and indices.shape[0] and n_cols
        samples = _spread_samples(indptr, indices, n_rows, xp) if spread else None
        if xp is np:
            summary = np.concatenate([_row_summary_on_host(indptr)] + ([samples] if spread else []))
        else:
            indptr = xp.ascontiguousarray(indptr)
            if spread:
                summary = _row_stats_on_device(indptr, n_rows, xp, samples).get()
            else:  # what a product reads of a fresh operand, its host waiting
                summary = _row_summary_to_host(indptr, n_rows, xp)
        return cls.from_summary(summary, n_rows, n_cols, spread=bool(spread))

    @classmethod
    def from_summary(cls, summary, n_rows: int, n_cols: int, spread: bool = False):
        """The statistics from ``row_length_stats``' six integers (``kernels/row_stats.cu``)
        and, with ``spread``, the column spread's samples after them."""
        empty, lo, hi, squares, first, nnz = (int(v) for v in summary[:6])
        total = nnz - first  # the sum of the lengths
        mean = total / n_rows
        variance = (squares * n_rows - total * total) / (n_rows * n_rows)  # exact integers
        column_spread = _column_spread(summary[6:], n_rows, n_cols) if spread else 0.0
        return cls(
            n_rows, n_cols, nnz, mean, math.sqrt(max(variance, 0.0)), lo, hi, empty, column_spread
        )


ROW_STATS_BLOCK = 256
ROW_STATS_FAMILY = _compile.register_family(
    _compile.KernelFamily(
        "row_stats.cu",
        tuple(
            f"{k}<{t}>"
            for k in ("row_length_stats", "row_length_stats_host", "index_range", "rows_rising")
            for t in ("int", "long long")
        ),
    )
)


def _row_summary_on_host(indptr) -> np.ndarray:
    """``row_length_stats``' six integers (see ``kernels/row_stats.cu``) with NumPy."""
    lengths = np.diff(indptr).astype(np.int64)
    return np.array(
        [
            (lengths == 0).sum(),
            lengths.min(),
            lengths.max(),
            (lengths * lengths).sum(),
            indptr[0],
            indptr[-1],
        ],
        dtype=np.int64,
    )


class _StatsWords(HostWords):
    """The scratch of ``row_length_stats_host`` (its blocks' shares: 0, LLONG_MAX,
    LLONG_MIN, 0, and the blocks done) and the six integers it writes for the host."""

    __slots__ = ()
    KIND = "row_length_stats_host"

    def __init__(self, cupy, device: int):
        most = np.iinfo(np.int64).max
        super().__init__(cupy, device, np.array([0, most, -most - 1, 0, 0], np.int64), 6)


def _row_summary_to_host(indptr, n_rows: int, xp) -> np.ndarray:
    """``row_length_stats``' six integers of a contiguous device ``indptr``, written by
    ``row_length_stats_host`` into pinned host memory and read after an event
    (:mod:`._host_words`: no upload before the launch, no copy after it)."""
    name = f"row_length_stats_host<{_cxx_index(indptr)}>"
    slot = _StatsWords.take(xp)
    _launch_stats(
        name, n_rows, (indptr, np.int64(n_rows), slot.scratch, np.uint64(slot.host_on_device))
    )
    return slot.read(xp.cuda.get_current_stream())


def _row_stats_on_device(indptr, n_rows: int, xp, samples=None, indices=None, rising=True):
    """One int64 array on the device: ``row_length_stats``' six integers (see
    ``kernels/row_stats.cu``), then, given ``indices``, their smallest and largest
    (``index_range``) and the entries that do not rise in their row (``rows_rising``;
    -1 where indptr and indices differ in dtype, or ``rising`` is False: not counted),
    then ``samples``."""
    index = _cxx_index(indptr)
    head = np.array([0, np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0, 0, 0], np.int64)
    if indices is not None:
        head = np.concatenate([head, [np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0]])
    out = xp.asarray(head)
    _launch_stats(f"row_length_stats<{index}>", n_rows, (indptr, np.int64(n_rows), out))
    if indices is not None and indices.shape[0]:
        index = _cxx_index(indices)
        n = indices.shape[0]
        _launch_stats(f"index_range<{index}>", n, (indices, np.int64(n), out[6:]))
        if rising and indices.dtype == indptr.dtype:  # the same transfer: no wait of its own
            falls = out[8:9]
            _launch_stats(
                f"rows_rising<{index}>", n_rows, (indptr, indices, np.int64(n_rows), falls)
            )
        else:
            out[8] = -1
    return out if samples is None else xp.concatenate([out, samples])


# What a mirror's formats hold of its pattern alone (kept by DeviceMatrix.with_values):
# spgemm.canonical's mark and the pattern key.
PATTERN_FORMATS = ("canonical", "pattern_key")

# Entries of each index array sampled for a pattern's key (evenly spaced).
PATTERN_SAMPLES = 32


def pattern_key_of(indptr, indices, matrix) -> tuple:
    """A cheap key of the pattern of ``matrix`` whose index arrays (on the device or
    still on the host) are ``indptr`` and ``indices``: shape, nnz, index dtype and a sample
    of the arrays (one small transfer from the device). Equal keys suggest, and never
    prove, equal patterns: whatever reuses work across patterns compares them."""
    xp = np if isinstance(indptr, np.ndarray) else matrix.xp
    picks = []
    for array in (indptr, indices):
        if array.shape[0]:
            where = np.linspace(0, array.shape[0] - 1, PATTERN_SAMPLES).astype(np.int64)
            where = xp.asarray(where)  # made on the host: no kernel for the positions
            picks.append(array[where].astype(np.int64))
    sample = _to_host(xp.concatenate(picks), xp) if picks else np.zeros(0)
    return (matrix.shape, matrix.nnz, str(matrix.index_dtype), tuple(sample.tolist()))


def rows_rise_on_device(indptr, indices, xp) -> bool:
    """Whether every row's column indices strictly increase (``rows_rising`` of
    ``kernels/row_stats.cu``: one launch, one transfer); indptr and indices contiguous
    device arrays of one index dtype."""
    n_rows = indptr.shape[0] - 1
    out = xp.zeros(1, dtype=np.uint64)
    _launch_stats(
        f"rows_rising<{_cxx_index(indptr)}>", n_rows, (indptr, indices, np.int64(n_rows), out)
    )
    return int(out.get()[0]) == 0


def _cxx_index(array) -> str:
    """The C++ index type of a contiguous int32 or int64 device array (the kernels'
    ``Index``, as ``_launch.CXX_INDEX_TYPES`` names it)."""
    name = CXX_INDEX_TYPES.get(np.dtype(array.dtype))
    if name is None:
        raise TypeError(f"index arrays must be int32 or int64, got {array.dtype}")
    return name


def _launch_stats(name: str, n: int, arguments) -> None:
    blocks = max(1, min(-(-n // ROW_STATS_BLOCK), 1024))
    kernel = _compile.get_kernel("row_stats.cu", name)
    kernel((blocks,), (ROW_STATS_BLOCK,), arguments)


def _spread_samples(indptr, indices, n_rows: int, xp):
    """The column spread's samples as one int64 array: up to SPREAD_SAMPLE_ROWS evenly
    spaced rows' numbers, starts, ends, first and last stored columns (gathers only: no
    reduction on the device)."""
    # the sample's row numbers are made on the host (no sort on the device, no wait)
    rows = np.unique(np.linspace(0, n_rows - 1, min(n_rows, SPREAD_SAMPLE_ROWS)).astype(np.int64))
    on = xp.asarray(rows)
    starts = indptr[on].astype(np.int64)
    ends = indptr[on + 1].astype(np.int64)
    nnz = int(indices.shape[0])
    first = indices[xp.minimum(starts, nnz - 1)].astype(np.int64)
    last = indices[xp.clip(ends - 1, 0, nnz - 1)].astype(np.int64)
    return xp.concatenate([on, starts, ends, first, last])


def _column_spread(samples: np.ndarray, n_rows: int, n_cols: int) -> float:
    """Mean |column - diagonal position| / n_cols of the first and last stored entry of the
    sampled rows (:func:`_spread_samples`, on the host; empty rows are left out)."""
    rows, starts, ends, first, last = np.asarray(samples, dtype=np.int64).reshape(5, -1)
    filled = ends > starts
    if not filled.any():
        return 0.0
    diagonal = rows[filled] * (n_cols / n_rows)
    distance = np.abs(first[filled] - diagonal) + np.abs(last[filled] - diagonal)
    return float((distance / (2.0 * n_cols)).mean())


def _to_host(a, xp):
    return a.get() if xp is not np else a


class PlanKey(NamedTuple):
    """Where a plan is kept on its mirror: one per backend, policy and vector dtype (None:
    the mirror's own; a mixed-precision plan reads wider vectors)."""

    backend: str
    policy: Any
    vector_dtype: np.dtype | None = None


class MirrorKey(NamedTuple):
    """Where a mirror is kept on its matrix: a copying residence has one per value dtype."""

    residence: str
    value_dtype: np.dtype | None
    transpose: bool = False  # the mirror of the matrix's transpose


class ChoiceKey(NamedTuple):
    """What one product's choice depends on besides the matrix (see ``_dispatch``): the
    name in force, x's dtype, the per-call policy and planning level, the matrix's, the
    registry's generation and the operation (``A @ x``, or ``A @ X`` by k bucket and
    order)."""

    name: str
    x_dtype: np.dtype
    policy: Any
    planning: str | None
    matrix_policy: Any
    matrix_planning: str | None
    generation: int
    operation: Any


class MatrixCache:
    """What a matrix keeps between products: its mirrors, the choices made on them, and
    matrices derived from it (a solver's reordering).

    Dropped as a whole when the matrix changes; a choice lives in the same object as the
    mirrors it was made from, so it can never outlive them.
    """

    __slots__ = (
        "mirrors",
        "choices",
        "reorderings",
        "measured",
        "planning_lock",
        "unordered_s",
        "column_spread",
    )

    def __init__(self):
        self.mirrors: dict[MirrorKey, DeviceMatrix] = {}
        self.choices: dict[ChoiceKey, Any] = {}
        # (value dtype, operation) -> the Choice planning measured for this matrix (what
        # explain shows)
        self.measured: dict[tuple, Any] = {}
        # held (never waited for) by the thread planning this matrix
        self.planning_lock = threading.Lock()
        # (method, backend name) -> (permuted matrix, permutation)
        self.reorderings: dict[tuple[str, str | None], Any] = {}
        # seconds the solvers spent on this matrix unordered under reorder="auto" (what
        # its rule weighs against the ordering's cost)
        self.unordered_s = 0.0
        # the solvers' reorder="auto" asks every solve: a pass over the indices, made once
        self.column_spread: float | None = None


_stream_events = threading.local()


def _stream_event(cuda, stream):
    """This thread's event for results queued on ``stream`` (one per device and stream,
    made once, without timing), re-recorded by every :meth:`DeviceMatrix.queued` there.

    Waiting for a later record of the same stream waits for everything before it too, so
    a matrix whose event was recorded again by a later product still finds its own work
    done when it settles (settling waits for the whole stream anyway); a product's host
    work then pays one record and no event's creation (14 us of a 1 ms product on the
    H200 after cuSPARSE's last wait, where the host runs cold)."""
    events = getattr(_stream_events, "events", None)
    if events is None:
        events = _stream_events.events = {}
    key = (cuda.runtime.getDevice(), stream.ptr)
    event = events.get(key)
    if event is None:
        if len(events) >= 64:  # streams made and dropped by the thousand: start afresh
            events.clear()
        event = events[key] = cuda.Event(disable_timing=True)
    return event


class DeviceMatrix:
    """Validated CSR arrays of one matrix in one array module and value dtype.

    Attributes
    ----------
    data, indices, indptr : array
        CSR arrays (``indices`` int32 or int64, ``indptr`` the same dtype); exactly nnz long.
    shape : tuple of int
    xp : module
        numpy or cupy.
    residence : Residence
    layout : str
        ``"csr"``; ``"csc"`` only for host mirrors that alias a CSC matrix's arrays
        (the scipy backend computes on those directly). GPU backends always get CSR.
    plans : dict of PlanKey to Plan
        Backend plans made on this mirror.
    formats : dict of str to object
        Other storage formats of the matrix built from this mirror (:meth:`derived`).
    default_policies : dict of str to Policy
        The policy each backend uses here when none is given (tuned entry or untuned).
    tuned_scores : dict of str to float, or None
        The tuning store's GB/s for each backend that has an entry for this mirror's class
        (looked up once by selection; None until then).
    format : str
        ``"csr"``: the storage format backends read (``Backend.formats``); the BSR
        mirror (:class:`sparsegpu.device._block_mirror.DeviceBlockMatrix`) says ``"bsr"``.
    """

    format = "csr"

    def __init__(self, data, indices, indptr, shape, residence: Residence):
        self.data = data
        self.indices = indices
        self.indptr = indptr
        self.shape = (int(shape[0]), int(shape[1]))
        self.residence = residence
        self.layout = "csr"
        self.xp = residence.xp
        self.plans: dict[PlanKey, Any] = {}
        self.formats: dict[str, Any] = {}
        self.default_policies: dict[str, Any] = {}
        self.tuned_scores: dict[str, float] | None = None
        self._stats: RowLengthStats | None = None
        self._row_stats: RowLengthStats | None = None
        # an upper bound of the longest row, where a product recorded one (its operands'
        # longest rows multiplied): what sparse products read before any pass over it
        self.row_bound: int | None = None
        # an upper bound of the most entries a column holds, where one is known (a
        # transpose's: its matrix's longest row)
        self.column_bound: int | None = None
        # whether every row's column indices strictly increase (canonical CSR), where the
        # upload's check counted it in its pass (None: not known)
        self.rows_rise: bool | None = None
        # the event after the work still writing these arrays (a product's result,
        # returned without waiting for it), which settle() waits for
        self._ready = None
        self._lock = threading.RLock()  # plans made under it may read stats
        # a transpose's gather from its source's entries, when kept (transpose(keep_order)),
        # and the source's index arrays whose values it gathers
        self.source_order = None
        self._source_arrays: tuple | None = None

    @property
    def nnz(self) -> int:
        return int(self.data.shape[0])

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def index_dtype(self) -> np.dtype:
        return self.indices.dtype

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.indices.nbytes + self.indptr.nbytes

    @property
    def stats(self) -> RowLengthStats:
        """Row-length statistics, computed on first use (on the device, one transfer).

        Computed once even when threads race for it: on a fresh machine each computation
        also compiles CuPy's reduction kernels, and eight threads doing that at once took
        a minute on the H200.
        """
        if self._stats is None:
            with self._lock:
                if self._stats is None:
                    self._stats = RowLengthStats.from_indptr(
                        self.indptr, self.shape[1], self.xp, indices=self.indices
                    )
        return self._stats

    @property
    def known_longest_row(self) -> int | None:
        """:attr:`longest_row` where it is known without a pass over the matrix, else None."""
        known = self._stats or self._row_stats
        return known.max if known is not None else self.row_bound

    @property
    def longest_row(self) -> int:
        """An upper bound of the longest row's length: exact where the row statistics are
        known, else the bound a product recorded (:attr:`row_bound`), else computed (the
        statistics, one pass)."""
        known = self.known_longest_row
        return known if known is not None else self.row_stats.max

    @property
    def row_stats(self) -> RowLengthStats:
        """:attr:`stats` without the column spread (0 unless :attr:`stats` was computed):
        what sparse products read of a matrix, cheaper for a product's fresh result."""
        if self._stats is not None:
            return self._stats
        if self._row_stats is None:
            with self._lock:
                if self._row_stats is None:
                    self._row_stats = RowLengthStats.from_indptr(
                        self.indptr, self.shape[1], self.xp
                    )
        return self._row_stats

    def get_plan(self, key, make: Callable[[], Any]):
        """The plan cached under ``key``, made once even when threads race for it."""
        return self._made_once(self.plans, key, make)

    def derived(self, name: str, make: Callable[[], Any], queues: bool = True):
        """Another storage format of this mirror's matrix (``delta16``'s compressed
        columns), made once by ``make()`` even when threads race for it, and dropped with
        the mirror (so it can never be stale). ``queues=False``: ``make`` leaves no device
        work behind (a library's descriptor, a value it read back), so nothing is waited
        for before it is published."""
        return self._made_once(self.formats, name, make, queues)

    def _made_once(self, store: dict, key, make: Callable[[], Any], queues: bool = True):
        found = store.get(key)
        if found is None:
            with self._lock:
                found = store.get(key)
                if found is None:
                    found = make()
                    if queues:
                        self.settle()
                    store[key] = found
        return found

    def settle(self) -> None:
        """Wait for the work just queued on the current stream (building this mirror or a
        plan on it), and for the product still writing this matrix (:meth:`queued`) on
        whatever stream it runs. Other streams do not wait for queued work: a product on a
        non-blocking stream right after a plan was made on the default one read the
        merge-path tile table before it was written (an illegal address on the H200)."""
        if self.xp is not np:
            ready = self._ready
            if ready is not None:  # cleared once passed: a thread that reads None after
                ready.synchronize()  # that finds the work done
                self._ready = None
            self.xp.cuda.get_current_stream().synchronize()

    def queued(self) -> DeviceMatrix:
        """Mark this matrix as still being written by the work queued on the current stream
        (a product's result, returned without waiting: the host's work after the last
        launch runs beside it); :meth:`settle`, which every first use as a mirror and the
        host copy call, waits for it from any stream. Returns this matrix."""
        if self.xp is not np:
            stream = self.xp.cuda.get_current_stream()
            ready = _stream_event(self.xp.cuda, stream)
            ready.record(stream)
            self._ready = ready
        return self

    # ------------------------------------------------------------------ building
    @classmethod
    def from_host(cls, data, indices, indptr, shape, residence: Residence, value_dtype=None):
        """Check lengths on the host, upload, validate on the device, cast values.

        Raises
        ------
        ValueError
            Naming the first invalid position (nothing is launched on invalid arrays).
        MemoryError
            When the arrays do not fit in device memory, with the bytes needed and free.
        """
        n_rows, n_cols = int(shape[0]), int(shape[1])
        for name, array in (("data", data), ("indices", indices), ("indptr", indptr)):
            if np.ndim(array) != 1:
                raise ValueError(
                    f"{name} must be 1-D, got shape {np.shape(array)}; CSR arrays are flat"
                )
        indptr = np.asarray(indptr)
        if indptr.ndim != 1 or indptr.shape[0] != n_rows + 1:
            raise ValueError(
                f"indptr has length {indptr.shape[0] if indptr.ndim == 1 else indptr.shape}, "
                f"expected n_rows + 1 = {n_rows + 1}"
            )
        if indptr[0] != 0:
            raise ValueError(f"indptr[0] is {indptr[0]}, expected 0")
        nnz = int(indptr[-1])
        if nnz < 0 or nnz > min(len(indices), len(data)):
            raise ValueError(
                f"indptr[-1] = {nnz} but indices has {len(indices)} and data has {len(data)} "
                "entries; indptr[-1] is the number of stored entries and must fit in both"
            )
        if len(indices) != len(data):
            raise ValueError(
                f"indices has {len(indices)} entries but data has {len(data)}; they must match"
            )
        index_dtype = np.promote_types(indptr.dtype, np.asarray(indices).dtype)
        if index_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise TypeError(f"index arrays must be int32 or int64, got {index_dtype}")
        value_dtype = np.dtype(value_dtype or data.dtype)
        host = (
            np.asarray(data[:nnz]),
            np.asarray(indices[:nnz], dtype=index_dtype),
            np.asarray(indptr, dtype=index_dtype),
        )
        what = f"the device mirror of this matrix ({nnz:,} nonzeros, {value_dtype})"
        dev = upload_arrays(host, residence, value_dtype, what)
        stats, rises = _validate(dev[2], dev[1], n_cols, residence.xp, rising=True)
        matrix = cls(dev[0], dev[1], dev[2], (n_rows, n_cols), residence)
        matrix._row_stats = stats  # read in the check's pass (None on the host)
        matrix.rows_rise = rises
        matrix.formats["pattern_key"] = pattern_key_of(host[2], host[1], matrix)
        return matrix

    def transpose(self, keep_order: bool = False) -> DeviceMatrix:
        """CSR of the transpose, built where the mirror lives (one stable sort of the
        column indices: entries are in row order, so equal columns keep their rows in
        order, and the transpose of a canonical matrix is canonical).

        ``keep_order``: the transpose keeps that sort as ``source_order`` (its entry k is
        this matrix's entry ``source_order[k]``), so the transpose of new values on this
        pattern is one gather (:meth:`transposed_values`)."""
        xp = self.xp
        n_rows, n_cols = self.shape
        # a sort of the 32-bit columns rather than of 64-bit (column, row) keys: half the
        # radix passes on the GPU
        order = xp.argsort(self.indices, kind="stable")
        if xp is np:
            rows = np.repeat(np.arange(n_rows, dtype=self.index_dtype), np.diff(self.indptr))
            rows = rows[order]
        else:  # the row of each entry taken, found in indptr (CuPy's repeat reads the host)
            rows = xp.searchsorted(self.indptr, order, side="right") - 1
        counts = (
            xp.bincount(self.indices, minlength=n_cols)
            if self.nnz
            else xp.zeros(n_cols, dtype=np.int64)
        )
        indptr = xp.zeros(n_cols + 1, dtype=self.index_dtype)
        if n_cols:
            indptr[1:] = xp.cumsum(counts)
        transposed = DeviceMatrix(
            self.data[order], rows.astype(self.index_dtype, copy=False), indptr,
            (n_cols, n_rows), self.residence,
        )  # fmt: skip
        if keep_order:
            transposed.source_order = order
            transposed._source_arrays = (self.indices, self.indptr)
        return transposed

    def transposed_values(self, source: DeviceMatrix) -> DeviceMatrix | None:
        """This transpose (made with ``keep_order``) of ``source``, a matrix of the pattern
        it was made from with other values: one gather of source's values, the index arrays
        shared. ``source`` must share that matrix's index arrays (the same objects:
        :meth:`with_values` keeps them), so that the pattern is the same by construction;
        None otherwise (or without a kept order)."""
        arrays = self._source_arrays
        if arrays is None or source.indices is not arrays[0] or source.indptr is not arrays[1]:
            return None
        same = self.with_values(source.data[self.source_order], written_by=source)
        same.source_order, same._source_arrays = self.source_order, arrays
        return same

    def with_values(self, data, written_by: DeviceMatrix | None = None) -> DeviceMatrix:
        """This pattern with other values (``data``, in this matrix's entry order): the
        index arrays shared and what is known of the pattern kept (row statistics, bounds,
        the canonical mark, the pattern key), so that planning it needs no pass over it.
        ``written_by``: the mirror whose queued work still writes ``data`` (a product's
        fresh result), whose event it takes."""
        same = self.same_rows(data=data)
        same.formats.update(self._pattern_formats())
        if written_by is not None and written_by._ready is not None:
            same._ready = written_by._ready
        return same

    def rewrite_values(self, data) -> None:
        """Copy ``data`` (this matrix's dtype and entry order, queued on the current stream
        or done) into the values in place, for a mirror that nothing else shares (the
        caller checks: :func:`sparsegpu.classes._mirrors.rewrite_device_values`). The
        plans whose kernels read the values where they are (``Plan.values_by_reference``)
        stay, bound to the same array; the other plans and every format made from the old
        values go (what is known of the pattern stays)."""
        ready = self._ready
        if ready is not None:  # a product still writing the array, perhaps on another stream
            ready.synchronize()
            self._ready = None
        self.data[...] = data  # queued behind the current stream's work: no wait for it
        self.plans = {
            key: plan
            for key, plan in self.plans.items()
            if getattr(plan, "values_by_reference", False)
        }
        self.formats = self._pattern_formats()
        self.queued()

    def _pattern_formats(self) -> dict:
        """The formats that hold only what is known of the pattern (a canonical *copy*
        would hold the values too)."""
        return {
            name: found
            for name, found in self.formats.items()
            if name in PATTERN_FORMATS and not isinstance(found, DeviceMatrix)
        }

    def astype(self, value_dtype) -> DeviceMatrix:
        """The same structure with values cast (shares the index arrays)."""
        return self.same_rows(data=self.data.astype(value_dtype))

    def conj(self) -> DeviceMatrix:
        """Complex conjugate values (shares the index arrays)."""
        return self.same_rows(data=self.data.conj())

    def same_rows(self, data=None, indices=None, indptr=None) -> DeviceMatrix:
        """A matrix of this one's type and rows, with the arrays given in place of this one's
        (values cast or conjugated, indices in another dtype): what is known of its rows
        (statistics, the bound a product recorded) stays known."""
        same = type(self)(
            self.data if data is None else data,
            self.indices if indices is None else indices,
            self.indptr if indptr is None else indptr,
            self.shape,
            self.residence,
        )
        same._stats, same._row_stats, same.row_bound = self._stats, self._row_stats, self.row_bound
        same.column_bound = self.column_bound
        if indices is None or indices.dtype != self.indices.dtype:  # the same order
            same.rows_rise = self.rows_rise
        return same.queued() if self._ready is not None else same


def upload_arrays(host, residence: Residence, value_dtype, what: str) -> list:
    """``host`` (values first, then index arrays) uploaded to ``residence``, the values cast
    to ``value_dtype``; a MemoryError naming ``what`` with the bytes needed and free when
    they do not fit. A device copy is in native byte order."""
    if residence.copies:
        host = tuple(a.astype(a.dtype.newbyteorder("="), copy=False) for a in host)
        value_dtype = value_dtype.newbyteorder("=")
    try:
        dev = [residence.upload(a) for a in host]
        if dev[0].dtype != value_dtype:
            dev[0] = dev[0].astype(value_dtype)
    except Exception as exc:
        if is_out_of_memory(exc):
            raise memory_error(sum(a.nbytes for a in host), what) from exc
        raise
    return dev


def _validate(indptr, indices, n_cols: int, xp, unit: str = "column", rising: bool = False):
    """Check monotone indptr and in-range indices with one transfer; name the first bad spot
    (``unit``: what an index counts, ``"column"`` or ``"block column"``). Returns the row
    statistics where the check computed them (on the GPU: the same pass), else None; with
    ``rising``, ``(statistics, whether every row's indices strictly increase)``, the second
    None where the check did not count it (on the host)."""
    n_rows = indptr.shape[0] - 1
    if n_rows <= 0:
        if not indices.shape[0] or 0 <= indices.min() and indices.max() < n_cols:
            return (None, None) if rising else None
    else:
        rises = None
        if xp is np:
            summary = np.concatenate(
                [_row_summary_on_host(indptr)]
                + ([[indices.min(), indices.max()]] if indices.shape[0] else [])
            )
        else:
            # block mirrors do not ask: nobody reads their blocks' order
            summary = _row_stats_on_device(indptr, n_rows, xp, indices=indices, rising=rising)
            summary = summary.get()
            if indices.shape[0] and summary[8] >= 0:
                rises = bool(summary[8] == 0)
        stats = RowLengthStats.from_summary(summary, n_rows, n_cols)
        bad_index = indices.shape[0] and (summary[6] < 0 or summary[7] >= n_cols)
        if stats.min >= 0 and not bad_index:
            return (stats, rises) if rising else stats
    if n_rows > 0:
        drops = indptr[1:] < indptr[:-1]
        if bool(drops.any()):
            row = int(xp.argmax(drops))
            lo, hi = (int(v) for v in _to_host(indptr[row : row + 2], xp))
            raise ValueError(
                f"indptr is not monotone: indptr[{row + 1}] = {hi} < indptr[{row}] = {lo}; "
                "row pointers must never decrease"
            )
    bad = (indices < 0) | (indices >= n_cols)
    pos = int(xp.argmax(bad))
    value = int(_to_host(indices[pos : pos + 1], xp)[0])
    row = int(xp.searchsorted(indptr, pos, side="right")) - 1
    raise ValueError(
        f"{unit} index out of range: indices[{pos}] = {value} ({unit.replace('column', 'row')} "
        f"{row}) but the matrix has {n_cols} {unit}s; indices must lie in [0, {n_cols})"
    )


class DeviceMemoryError(MemoryError):
    """Not enough GPU memory for a mirror or a product; says how much was needed and free."""


def device_free_bytes() -> int | None:
    """Bytes a new GPU allocation can take now: the device's free memory plus what CuPy's
    pool holds unused, within the pool's limit when one is set; None without a GPU."""
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        return None
    try:
        pool = cupy.get_default_memory_pool()
        free = cupy.cuda.runtime.memGetInfo()[0] + pool.free_bytes()
        limit = pool.get_limit()
    except Exception:
        return None
    if limit:
        free = min(free, limit - pool.used_bytes())
    return max(int(free), 0)


def memory_error(needed: int, what: str, free: int | None = None) -> DeviceMemoryError:
    """A MemoryError saying what needed how many bytes and how many are free on the GPU
    (``free`` when the caller knows it better, else :func:`device_free_bytes`)."""
    if free is None:
        free = device_free_bytes()
    free_text = "an unknown number of" if free is None else f"{free:,}"
    return DeviceMemoryError(
        f"{what} needs {needed:,} bytes of GPU memory but only {free_text} bytes are free; "
        "free GPU memory or use the 'scipy' backend (A.backend = 'scipy')"
    )


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CuPy's OutOfMemoryError (or a MemoryError)."""
    return type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, MemoryError)
