"""How sparsegpu measures: CUDA-event timings (median of repeats after warm-up) and the
byte count of a product, so every tool (bench, autotune, asv, probe) counts the same way.

Bytes counted for ``y = A @ x``: values + column indices + row pointers + x + y, each
once. Speed is never asserted in unit tests.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from . import _cuda


@dataclass(frozen=True)
class Timing:
    """Per-call times in milliseconds of one timed function."""

    samples_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)


def host_time(fn, *, warmup: int = 3, repeat: int = 20, inner: int = 1) -> Timing:
    """Time ``fn()`` on the host with ``time.perf_counter`` (host backends, wall clock).

    Same parameters and result as :func:`cuda_time`.
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
        the sample's time divided by ``inner``.
    """
    return cuda_time_interleaved({"fn": fn}, warmup=warmup, repeat=repeat, inner=inner)["fn"]


def _interleaved(fns: dict, warmup: int, repeat: int, sample) -> dict:
    """``{name: Timing}``: warm-up calls of each, then ``repeat`` rounds of one
    ``sample(fn)`` (milliseconds a call) of each function, the order rotating a step every
    round."""
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    samples = {name: [] for name in names}
    for r in range(repeat):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            samples[name].append(sample(fns[name]))
    return {name: Timing(tuple(samples[name])) for name in names}


def cuda_time_interleaved(fns: dict, *, warmup: int = 3, repeat: int = 20, inner: int = 1) -> dict:
    """Time several functions with CUDA events, in alternation: one sample of each, then
    the next of each, the order rotating every round.

    A slow stretch of the host (its speed drifts by tens of percent over seconds on a
    shared machine) or a clock change of the GPU then falls on every function alike,
    where timing them one after another lets it fall on one of them only. Parameters as
    :func:`cuda_time`, for each function; returns ``{name: Timing}`` in ``fns``' order.
    """
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        raise RuntimeError(f"no GPU: {_cuda.unavailable_reason()}")
    stream = cupy.cuda.get_current_stream()

    def sample(fn):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
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
    return _interleaved(fns, 0, repeat, sample)


def host_time_interleaved(fns: dict, *, warmup: int = 3, repeat: int = 20, inner: int = 1) -> dict:
    """:func:`cuda_time_interleaved` with the host's clock (host backends)."""

    def sample(fn):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - start) * 1e3 / inner

    return _interleaved(fns, warmup, repeat, sample)


def spmv_bytes(n_rows: int, n_cols: int, nnz: int, value_itemsize: int, index_itemsize: int):
    """Bytes a product ``y = A @ x`` must move: values, indices, indptr, x, y once each."""
    return (
        nnz * (value_itemsize + index_itemsize)
        + (n_rows + 1) * index_itemsize
        + n_cols * value_itemsize
        + n_rows * value_itemsize
    )


def matrix_spmv_bytes(matrix) -> int:
    """:func:`spmv_bytes` for a mirror (:class:`~sparsegpu._mirror.DeviceMatrix`)."""
    n_rows, n_cols = matrix.shape
    return spmv_bytes(
        n_rows, n_cols, matrix.nnz, matrix.dtype.itemsize, matrix.index_dtype.itemsize
    )


def gb_per_s(nbytes: int, ms: float) -> float:
    """Bandwidth in GB/s (10^9 bytes per second)."""
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("inf")
