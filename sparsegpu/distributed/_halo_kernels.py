"""The halo's elementwise steps where the vectors live: gather, add to distinct rows, add at
repeated indices (NumPy, or CuPy's kernels made once)."""

from __future__ import annotations

import numpy as np

from ..device import _cuda


def _gather_kernel():
    cupy = _cuda.cupy_or_none()
    return cupy.ElementwiseKernel(
        "raw T x, I index", "T out", "out = x[index]", "sparsegpu_halo_gather"
    )


def _add_rows_kernel():
    cupy = _cuda.cupy_or_none()
    # rows are distinct: no two threads write one entry
    return cupy.ElementwiseKernel(
        "T value, I row", "raw T y", "y[row] = y[row] + value", "sparsegpu_add_rows"
    )


_KERNELS = {}


def kernel(name: str):
    """The halo's elementwise kernels (made once): ``gather`` ``out = x[index]``,
    ``add_rows`` ``y[row] += value`` for distinct rows."""
    if name not in _KERNELS:
        _KERNELS[name] = {"gather": _gather_kernel, "add_rows": _add_rows_kernel}[name]()
    return _KERNELS[name]


def gather(x, index, out) -> None:
    """``out[:] = x[index]`` where x lives."""
    if not index.size:
        return
    if isinstance(x, np.ndarray):
        np.take(x, index, out=out)
    else:
        kernel("gather")(x, index, out)


def add_rows(y, rows, values) -> None:
    """``y[rows] += values`` (rows distinct) where y lives."""
    if not rows.size:
        return
    if isinstance(y, np.ndarray):
        y[rows] += values
    else:
        kernel("add_rows")(values, rows, y)


def add_at(y, index, values) -> None:
    """``y[index] += values`` with repeated indices summed (the reverse halo)."""
    if not index.size:
        return
    if isinstance(y, np.ndarray):
        np.add.at(y, index, values)
        return
    cupy = _cuda.cupy_or_none()
    if y.dtype.kind != "c":
        cupy.add.at(y, index, values)
        return
    # CuPy's add.at takes real values only: a complex y is two interleaved real vectors
    parts = y.view(y.real.dtype).reshape(-1, 2)
    cupy.add.at(parts[:, 0], index, values.real)
    cupy.add.at(parts[:, 1], index, values.imag)
