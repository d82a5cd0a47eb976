"""Two arrays compared where they are, reduced to one count (``kernels/compare.cu``).

CuPy's ``(a == b).all()`` and ``cupy.array_equal`` compile a block reduction for each new
size class of their operand: 1-2.5 s of NVRTC each on the H200's host, so the first
re-set-up of every new multigrid problem size spent 3.5-4.8 s compiling the answer checks
of its planning (``benchmarks/experiments/first_call_compiles``). These kernels compile
once per type, whatever the size; their count is exact (integers added by atomics), and
one scalar comes back to the host.
"""

from __future__ import annotations

import numpy as np

from . import _cuda
from ._compile import KernelFamily, get_kernel, register_family
from ._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES

COMPARE = "compare.cu"
_EQUAL_TYPES = {**CXX_VALUE_TYPES, **CXX_INDEX_TYPES}
register_family(
    KernelFamily(
        COMPARE,
        tuple(f"count_unequal<{cxx}>" for cxx in _EQUAL_TYPES.values())
        + tuple(f"count_outside<{cxx}>" for cxx in CXX_VALUE_TYPES.values()),
    )
)
BLOCK = 256
MAX_BLOCKS = 1024  # a grid-strided share each beyond that


def _count(name: str, arguments, n: int) -> int:
    cupy = _cuda.cupy_or_none()
    count = cupy.zeros(1, dtype=np.uint64)
    blocks = max(1, min(-(-n // BLOCK), MAX_BLOCKS))
    get_kernel(COMPARE, name)((blocks,), (BLOCK,), (*arguments, np.int64(n), count))
    return int(count.get()[0])


def arrays_equal(a, b) -> bool:
    """Whether ``a`` and ``b`` have the same shape and entries (NumPy's ``array_equal``),
    on the GPU for two CuPy arrays of one type without a size-dependent compilation; the
    same array object is equal to itself without a launch (NaN aside: a pattern's index
    arrays, which is what the callers compare)."""
    if a is b and np.dtype(a.dtype).kind in "iu":
        return True
    if a.shape != b.shape:
        return False
    cupy = _cuda.cupy_or_none()
    if not (_cuda.is_cupy_array(a) and _cuda.is_cupy_array(b)):
        return bool(np.array_equal(_cuda.to_host(a), _cuda.to_host(b)))
    cxx = _EQUAL_TYPES.get(np.dtype(a.dtype))
    if a.dtype != b.dtype or cxx is None:
        return bool(cupy.array_equal(a, b))
    if a.size == 0:
        return True
    a, b = cupy.ascontiguousarray(a).ravel(), cupy.ascontiguousarray(b).ravel()
    return _count(f"count_unequal<{cxx}>", (a, b), a.size) == 0


def count_outside(y, reference, bound) -> int | None:
    """How many entries have ``not |y - reference| <= bound`` (NaN counts), for CuPy
    arrays ``y`` and ``reference`` of one shape and value type and a ``bound`` that is a
    number or an array of their shape; None where this kernel does not apply (the caller
    compares as it did)."""
    cxx = CXX_VALUE_TYPES.get(np.dtype(y.dtype))
    if (
        cxx is None
        or y.dtype != reference.dtype
        or y.shape != reference.shape
        or not (_cuda.is_cupy_array(y) and _cuda.is_cupy_array(reference))
    ):
        return None
    cupy = _cuda.cupy_or_none()
    if np.ndim(bound) == 0:
        bounds, step = cupy.full(1, float(bound), dtype=np.float64), 0
    elif np.shape(bound) == y.shape:
        bounds, step = cupy.ascontiguousarray(cupy.asarray(bound, dtype=np.float64)).ravel(), 1
    else:
        return None
    if y.size == 0:
        return 0
    y, reference = cupy.ascontiguousarray(y).ravel(), cupy.ascontiguousarray(reference).ravel()
    return _count(f"count_outside<{cxx}>", (y, reference, bounds, np.int64(step)), y.size)
