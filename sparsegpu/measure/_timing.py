"""How sparsegpu measures: CUDA-event timings (median of repeats after warm-up) and the
byte count of a product, so every tool (bench, autotune, asv, probe) counts the same way.

Every CUDA-event sample starts with one untimed lead call, queued just before the start
event: while the GPU runs it, the host records the event and queues the first timed call,
so a sample times its calls as they run one after another in a solver's loop. Without it a
sample after a synchronisation also timed the first call's launch latency and its first
run on cold caches: 3-39 us on products of 50-150 us (H100), by candidate, enough for
planning to keep a block policy 10% slower than the untuned one
(docs/benchmarks/results/lead_call_h100.md). A loop the host cannot keep up with is still
timed at the host's pace.

:func:`time_candidates` is the one timing harness of planning, the autotuner and
``sparsegpu bench``: a calibration sample of each candidate, then its samples, taken in
alternation with the other candidates'. :class:`Stopwatch` times one call as it runs (no
lead call, no repeat): what sparse-product planning reads of the products a user asks for
and of its candidates, where a second run would cost a whole product.

Bytes counted for ``y = A @ x``: values + column indices + row pointers + x + y, each
once. Speed is never asserted in unit tests.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass

from ..device import _cuda

# A sample is a loop of products at least this long when the caller leaves the loop's
# length to the harness (CUDA events resolve about 0.5 us; a launch's latency on an idle
# GPU is 5-20 us, which a single short product would be timed with).
MIN_SAMPLE_MS = 0.2
MAX_INNER = 256


@dataclass(frozen=True)
class Timing:
    """Per-call times in milliseconds of one timed function.

    Attributes
    ----------
    samples_ms : tuple of float
        Each sample's time divided by ``inner``.
    inner : int
        Calls per sample.
    cut_short : bool
        Timed once only (:func:`time_candidates`: hopeless next to a faster candidate).
    """

    samples_ms: tuple[float, ...]
    inner: int = 1
    cut_short: bool = False

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)


def host_time(fn, *, warmup: int = 3, repeat: int = 20, inner: int = 1) -> Timing:
    """Time ``fn()`` on the host with ``time.perf_counter`` (host backends, wall clock).

    Parameters
    ----------
    fn : callable
        Runs the work to completion.
    warmup, repeat, inner : int
        As :func:`cuda_time`.

    Returns
    -------
    Timing
    """
    return host_time_interleaved({"fn": fn}, warmup=warmup, repeat=repeat, inner=inner)["fn"]


def cuda_time(fn, *, warmup: int = 3, repeat: int = 20, inner: int = 1) -> Timing:
    """Time ``fn()`` on the current CuPy stream with CUDA events.

    Parameters
    ----------
    fn : callable
        Launches the work (asynchronously) on the current stream.
    warmup : int
        Untimed calls first (compilation, plan making, caches).
    repeat : int
        Timed samples; the result keeps them all (use ``median_ms``).
    inner : int
        Calls per sample, for work shorter than the event resolution; each sample is
        the sample's time divided by ``inner``. Each sample also makes one untimed lead
        call before its start event (see the module docstring).

    Returns
    -------
    Timing

    Raises
    ------
    RuntimeError
        Without a usable GPU (the message says why).
    """
    return cuda_time_interleaved({"fn": fn}, warmup=warmup, repeat=repeat, inner=inner)["fn"]


def _inner_of(inner, name) -> int:
    """Calls per sample of ``name``: ``inner`` itself, or its entry when it is a dict."""
    return inner[name] if isinstance(inner, dict) else inner


def _interleaved(fns: dict, warmup: int, repeat: int, inner, sample) -> dict:
    """``{name: Timing}``: warm-up calls of each, then ``repeat`` rounds of one
    ``sample(fn, inner)`` (milliseconds a call) of each function, the order rotating a step
    every round."""
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    samples = {name: [] for name in names}
    for r in range(repeat):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            samples[name].append(sample(fns[name], _inner_of(inner, name)))
    return {name: Timing(tuple(samples[name]), _inner_of(inner, name)) for name in names}


def cuda_time_interleaved(
    fns: dict,
    *,
    warmup: int = 3,
    repeat: int = 20,
    inner: int = 1,
    lead: bool = True,
    before_sample=None,
) -> dict:
    """Time several functions with CUDA events, in alternation: one sample of each, then
    the next of each, the order rotating every round.

    A slow stretch of the host (its speed drifts by tens of percent over seconds on a
    shared machine) or a clock change of the GPU then falls on every function alike,
    where timing them one after another lets it fall on one of them only. Parameters as
    :func:`cuda_time`, for each function (``inner`` may also be a dict of each one's);
    returns ``{name: Timing}`` in ``fns``' order. ``lead=False`` leaves out each sample's
    lead call (see the module docstring): to show what it changes, never to measure.

    Parameters
    ----------
    fns : dict
        ``{name: fn}``, each launching its work on the current stream.
    warmup, repeat : int
        As :func:`cuda_time`.
    inner : int or dict
        Calls per sample, for all or ``{name: calls}``.
    lead : bool
        Make each sample's untimed lead call.
    before_sample : callable, optional
        Called, untimed, before every sample (after the lead call's launch is queued
        where there is one): a barrier across ranks, for example.

    Returns
    -------
    dict
        ``{name: Timing}``.
    """
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        raise RuntimeError(f"no GPU: {_cuda.unavailable_reason()}")
    stream = cupy.cuda.get_current_stream()

    def sample(fn, inner):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        if lead:
            fn()  # untimed (see the module docstring)
        if before_sample is not None:
            before_sample()
        start.record(stream)
        for _ in range(inner):
            fn()
        stop.record(stream)
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / inner

    for fn in fns.values():
        for _ in range(warmup):
            fn()
    stream.synchronize()  # the warm-up's work done before the first sample starts
    return _interleaved(fns, 0, repeat, inner, sample)


def host_time_interleaved(
    fns: dict, *, warmup: int = 3, repeat: int = 20, inner: int = 1, before_sample=None
) -> dict:
    """:func:`cuda_time_interleaved` with the host's clock (host backends).

    Parameters
    ----------
    fns : dict
        ``{name: fn}``, each running its work to completion.
    warmup, repeat, inner
        As :func:`cuda_time_interleaved`.
    before_sample : callable, optional
        Called, untimed, before every sample.

    Returns
    -------
    dict
        ``{name: Timing}``.
    """

    def sample(fn, inner):
        if before_sample is not None:
            before_sample()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - start) * 1e3 / inner

    return _interleaved(fns, warmup, repeat, inner, sample)


def time_candidates(
    fns: dict,
    *,
    on_host: bool = False,
    warmup: int = 1,
    repeat: int = 5,
    inner: int | None = None,
    hopeless: float | None = None,
    timer=None,
) -> dict:
    """The one timing harness: ``{key: Timing}`` of each function of ``fns``, in its order.

    Each candidate gets ``warmup`` untimed calls and one calibration sample, in turn;
    a candidate whose calibration sample is over ``hopeless`` times the fastest so far
    stops there (``Timing.cut_short``: a vector kernel on an arrow matrix's dense rows can
    run 200 times the best, and its repeats alone would cost hundreds of milliseconds).
    The others then get one untimed call each (the others ran since its calibration) and
    ``repeat`` samples each, taken in alternation, one of each per round
    (:func:`cuda_time_interleaved`), so that a slow stretch of the host falls on all of
    them alike; a single candidate, or one timed by ``timer``, gets its ``repeat``
    samples at once.

    Parameters
    ----------
    fns : dict
        ``{key: fn}``; ``fn()`` launches one product (on the current stream for the GPU).
    on_host : bool
        Time with the host's clock (host backends) instead of CUDA events.
    warmup, repeat : int
        Untimed calls before the calibration sample; samples after it.
    inner : int, optional
        Calls per sample; default: enough for a sample of ``MIN_SAMPLE_MS`` (from the
        calibration sample, at most ``MAX_INNER``).
    hopeless : float, optional
        The ratio to the fastest calibration sample so far beyond which a candidate is
        timed no further; default: every candidate is timed in full.
    timer : callable, optional
        ``timer(fn, warmup=, repeat=, inner=) -> Timing`` for one function (a scripted
        timer in tests, or the autotuner's ``timer=``); the candidates are then timed one
        after another with it.

    Returns
    -------
    dict
        ``{key: Timing}`` in ``fns``' order.
    """
    single = timer or (host_time if on_host else cuda_time)
    results, contenders, inners = {}, {}, {}
    fastest = None
    for key, fn in fns.items():
        first = single(fn, warmup=warmup, repeat=1, inner=inner or 1).median_ms
        inners[key] = inner or max(1, min(MAX_INNER, math.ceil(MIN_SAMPLE_MS / max(first, 1e-6))))
        if hopeless is not None and fastest is not None and first > hopeless * fastest:
            results[key] = Timing((first,), inner or 1, cut_short=True)
            continue
        fastest = first if fastest is None else min(fastest, first)
        contenders[key] = fn
    if timer is not None or len(contenders) == 1:
        for key, fn in contenders.items():
            results[key] = single(fn, warmup=0, repeat=repeat, inner=inners[key])
    elif contenders:
        interleaved = host_time_interleaved if on_host else cuda_time_interleaved
        results.update(interleaved(contenders, warmup=1, repeat=repeat, inner=inners))
    return {key: results[key] for key in fns}


_spare_events = threading.local()
# timing events a thread keeps for its stopwatches, per device
SPARE_EVENTS = 16
# stopwatches a thread made and nobody has read yet, per device, oldest first (weak
# references): their events come back once they are read, here at the latest
UNREAD_WATCHES = 64


def _event(cuda, device: int, extra: int = 0):
    """A timing event of ``device``: one a read stopwatch gave back, else
    one of a finished stopwatch nobody read yet (read now, without waiting), else a new one,
    with ``extra`` more kept for the next stopwatches. A first product of every new pattern
    makes a stopwatch its pattern's pair keeps unread, so without these its two events
    would be new ones each time. (``spgemm_first_layers_short_first_h200`` put 49 us of a
    0.88 ms first product on making them, in a fixed order later found to cost its first
    column 35-105 us, ``spgemm_first_layers_recycled_h200``: what reusing them saves on its
    own is not measured.)"""
    spare = _spare(device)
    if not spare:
        _read_finished(device)
    if spare:
        return spare.pop()
    spare.extend(cuda.Event() for _ in range(min(extra, SPARE_EVENTS)))
    return cuda.Event()


def _spare(device: int) -> list:
    by_device = getattr(_spare_events, "by_device", None)
    if by_device is None:
        by_device = _spare_events.by_device = {}
    return by_device.setdefault(device, [])


def _give_back(device: int, *events) -> None:
    kept = _spare(device)
    for event in events:
        if len(kept) < SPARE_EVENTS:
            kept.append(event)


def _unread(device: int) -> deque:
    by_device = getattr(_spare_events, "unread", None)
    if by_device is None:
        by_device = _spare_events.unread = {}
    found = by_device.get(device)
    if found is None:
        found = by_device[device] = deque(maxlen=UNREAD_WATCHES)
    return found


def _read_finished(device: int) -> None:
    """Read this thread's unread stopwatches of ``device``, oldest first, while they have
    finished (each read gives its two events back), until two events are spare: the first
    one still running stops the walk (the later ones were queued after it)."""
    unread, spare = _unread(device), _spare(device)
    while unread and len(spare) < 2:
        watch = unread[0]()
        if watch is not None and watch._ms is None and watch.ms(wait=False) is None:
            return
        unread.popleft()


class Stopwatch:
    """The time of the work queued between :meth:`stop` and the stopwatch's making: CUDA
    events on the current stream (read later, without waiting for the work now), or the
    host's clock (``on_host``). Once read, its events serve later stopwatches of the
    thread that read it; one left unread serves them too, read without waiting once it has
    finished (where the thread's spare events ran out). One dropped unread frees them."""

    def __init__(self, on_host: bool):
        self.on_host = on_host
        self._stop = None
        self._ms = None
        if on_host:
            self._start = time.perf_counter()
        else:
            cuda = _cuda.cupy_or_none().cuda
            self._device = cuda.runtime.getDevice()
            # the stop's event made now too, where there is none: the device is idle yet
            self._start = _event(cuda, self._device, extra=1)
            self._start.record()

    def stop(self) -> Stopwatch:
        if self.on_host:
            self._stop = time.perf_counter()
        else:
            cuda = _cuda.cupy_or_none().cuda
            self._stop = _event(cuda, self._device)
            self._stop.record()
            _unread(self._device).append(weakref.ref(self))
        return self

    # No __del__ gives a dropped stopwatch's events back: CuPy's Event destroys its handle
    # in its own __del__, and where a stopwatch was cyclic garbage (its pattern's pair in a
    # reference cycle) the collector ran both finalizers, so the pool got events whose
    # handles were gone; the next record segfaulted (or raised cudaErrorContextIsDestroyed).
    # A dropped stopwatch's events are freed with it.

    def ms(self, wait: bool = True) -> float | None:
        """Milliseconds from start to stop; None when ``wait`` is False and the work is
        still running (or the stopwatch was never stopped)."""
        if self._ms is not None:
            return self._ms
        if self._stop is None:
            return None
        if self.on_host:
            return (self._stop - self._start) * 1e3
        if not wait and not self._stop.done:
            return None
        self._stop.synchronize()
        cuda = _cuda.cupy_or_none().cuda
        self._ms = float(cuda.get_elapsed_time(self._start, self._stop))
        _give_back(self._device, self._start, self._stop)
        self._start = self._stop = None
        return self._ms


def timed_call(fn, *, on_host: bool):
    """``(fn(), milliseconds)``: one call and its time to completion (a
    :class:`Stopwatch`, waited for)."""
    watch = Stopwatch(on_host)
    result = fn()
    return result, watch.stop().ms()


def spmv_bytes(n_rows: int, n_cols: int, nnz: int, value_itemsize: int, index_itemsize: int):
    """Bytes a product ``y = A @ x`` must move: values, indices, indptr, x, y once each.

    Parameters
    ----------
    n_rows, n_cols, nnz : int
        The matrix's shape and stored entries.
    value_itemsize, index_itemsize : int
        Bytes of a value and of an index.

    Returns
    -------
    int
    """
    return (
        nnz * (value_itemsize + index_itemsize)
        + (n_rows + 1) * index_itemsize
        + n_cols * value_itemsize
        + n_rows * value_itemsize
    )


def matrix_spmv_bytes(matrix) -> int:
    """:func:`spmv_bytes` of a matrix's mirror.

    Parameters
    ----------
    matrix : DeviceMatrix
        A matrix's mirror (``shape``, ``nnz``, ``dtype``, ``index_dtype``).

    Returns
    -------
    int
    """
    n_rows, n_cols = matrix.shape
    return spmv_bytes(
        n_rows, n_cols, matrix.nnz, matrix.dtype.itemsize, matrix.index_dtype.itemsize
    )


def gb_per_s(nbytes: int, ms: float) -> float:
    """Bandwidth in GB/s (10^9 bytes per second).

    Parameters
    ----------
    nbytes : int
        Bytes moved (:func:`spmv_bytes`).
    ms : float
        Milliseconds taken.

    Returns
    -------
    float
        ``inf`` when ``ms`` is not positive.
    """
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("inf")
