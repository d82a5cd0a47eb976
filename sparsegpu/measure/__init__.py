"""Measurement: how every tool of sparsegpu times and checks a product.

The one timing harness (CUDA events, host clocks, candidates timed in alternation, the
bytes a product moves), the one answer check, and :mod:`~sparsegpu.measure.probe` (the
device's copy bandwidth). Planning, the autotuner, ``sparsegpu bench``, the benchmarks in
``benchmarks/`` and the tests all measure through here; it stands on
:mod:`sparsegpu.device` only.

Timing
    :func:`cuda_time`, :func:`host_time` (one function), :func:`cuda_time_interleaved`,
    :func:`host_time_interleaved` (several, in alternation), :func:`time_candidates`
    (calibration, hopeless cut-off, samples in alternation), each returning
    :class:`Timing`; :func:`spmv_bytes`, :func:`matrix_spmv_bytes` and :func:`gb_per_s`
    count what a product moves.
Checking
    :class:`AnswerCheck` (a reference and a bound per entry), :class:`Oracle` (scipy's
    product, the bound per row from :func:`tolerance`), :func:`random_vector` (seeded x).

These names are an internal API for the benchmarks and tests: documented and kept
stable with them, not part of the scipy-compatible surface.
"""

from ._oracle import AnswerCheck, Oracle, random_vector, tolerance
from ._timing import (
    Timing,
    cuda_time,
    cuda_time_interleaved,
    gb_per_s,
    host_time,
    host_time_interleaved,
    matrix_spmv_bytes,
    spmv_bytes,
    time_candidates,
)

__all__ = [
    "AnswerCheck",
    "Oracle",
    "Timing",
    "cuda_time",
    "cuda_time_interleaved",
    "gb_per_s",
    "host_time",
    "host_time_interleaved",
    "matrix_spmv_bytes",
    "random_vector",
    "spmv_bytes",
    "time_candidates",
    "tolerance",
]
