"""Matrices and helpers shared by the asv suites.

Nothing here touches CUDA at import time: asv imports the suites in its launcher process,
and a CUDA context made before a fork is unusable in the child.
"""

from __future__ import annotations

import numpy as np

import sparsegpu
from sparsegpu import bench
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda

# Registered backends, auto's choice, and CuPy's own product: the reference every backend
# is held to.
CONTENDERS = [
    *sparsegpu.engine._registry.registered(),
    sparsegpu.engine._registry.AUTO,
    bench.REFERENCE_NAME,
]
DTYPES = ["float32", "float64"]

# One matrix per row-length class. GPU sizes: 5-8 million nonzeros, 80-100 MB a product
# in float64 (above the H200's 60 MB L2 cache, so still the bandwidth regime), small enough
# that a whole `asv run --quick` (every suite, about 110 benchmark processes) fits in one
# 8-minute device call. `sparsegpu bench` and the docs' results use matrices 10x larger.
# CPU sizes keep a quick run short.
GPU_MATRICES = {
    "stencil2d": lambda dtype, xp: synthetic.stencil_2d(1024, dtype=dtype, xp=xp),
    "stencil3d27": lambda dtype, xp: synthetic.stencil_3d(64, points=27, dtype=dtype, xp=xp),
    "uniform_x16": lambda dtype, xp: synthetic.uniform_random(500_000, 16, dtype=dtype, xp=xp),
    "powerlaw": lambda dtype, xp: synthetic.power_law(500_000, dtype=dtype, xp=xp),
}
CPU_MATRICES = {
    "stencil2d": lambda dtype, xp: synthetic.stencil_2d(64, dtype=dtype),
    "stencil3d27": lambda dtype, xp: synthetic.stencil_3d(12, points=27, dtype=dtype),
    "uniform_x16": lambda dtype, xp: synthetic.uniform_random(20_000, 16, dtype=dtype),
    "powerlaw": lambda dtype, xp: synthetic.power_law(20_000, max_row=5_000, dtype=dtype),
}
MATRICES = list(GPU_MATRICES)


def gpu_available() -> bool:
    return _cuda.unavailable_reason() is None


def require_gpu() -> None:
    """Skip (asv: NotImplementedError in setup) without a usable GPU."""
    reason = _cuda.unavailable_reason()
    if reason is not None:
        raise NotImplementedError(f"no GPU: {reason}")


def matrix(name: str, dtype):
    """The named benchmark matrix, at GPU size when a GPU is usable."""
    if gpu_available():
        return GPU_MATRICES[name](np.dtype(dtype), _cuda.cupy_or_none())
    return CPU_MATRICES[name](np.dtype(dtype), np)


def prepared_contender(name: str, A, dtype):
    """A contender ready to run on ``A``, its answer checked against the scipy oracle."""
    try:
        contender = bench.contender(name)
    except bench.BenchError as exc:
        raise NotImplementedError(str(exc)) from None
    try:
        prepared = contender.prepare(A, dtype, seed=0)
    except TypeError as exc:  # a dtype this backend does not take
        raise NotImplementedError(str(exc)) from None
    bench.check(prepared, A, dtype)
    return prepared


def synchronize() -> None:
    """Wait for the current CuPy stream (a no-op without a GPU)."""
    cupy = _cuda.cupy_or_none()
    if cupy is not None:
        cupy.cuda.get_current_stream().synchronize()
