"""The ``adaptive`` backend: merge-path SpMV, balanced for any row-length distribution.

The kernel (``kernels/adaptive.cu``, after Merrill & Garland, SC'16) splits the merge of
row ends and nonzeros into equal tiles, so a matrix whose rows follow a power law, with
one row holding most nonzeros or with many empty rows, keeps every thread equally busy.
Tile start coordinates are computed once per plan on the device (one ``searchsorted``);
each product is one kernel launch (up to ``FUSED_FIXUP_MAX_TILES`` tiles the last block to
finish adds the carried partial sums) or two (a fix-up launch adds them). Sums run in a
fixed order whatever the scheduling: results are bitwise reproducible.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import _compile, _cuda
from .._mirror import DeviceMatrix
from ..tuning.policy import ADAPTIVE_SHAPES, AdaptivePolicy
from .base import Backend, Plan

SOURCE = "adaptive.cu"
VALUE_CTYPE = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.complex64): "complex64_t",
    np.dtype(np.complex128): "complex128_t",
}
INDEX_CTYPE = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}
FIXUP_BLOCK = 256
# Up to this many tiles the last block adds the carries itself (a few strided passes over
# the carries, cheaper than a second launch); beyond it a separate fix-up kernel does,
# so that one block's serial tail never shows on large matrices.
FUSED_FIXUP_MAX_TILES = 1024


def spmv_name(value_dtype, index_dtype, block_size: int, nnz_per_thread: int) -> str:
    """C++ name expression of the main kernel for one instantiation."""
    value, index = VALUE_CTYPE[np.dtype(value_dtype)], INDEX_CTYPE[np.dtype(index_dtype)]
    return f"adaptive_spmv<{value}, {index}, {block_size}, {nnz_per_thread}>"


def fixup_name(value_dtype, index_dtype) -> str:
    """C++ name expression of the carry fix-up kernel."""
    value, index = VALUE_CTYPE[np.dtype(value_dtype)], INDEX_CTYPE[np.dtype(index_dtype)]
    return f"adaptive_spmv_fixup<{value}, {index}>"


FAMILY = _compile.register_family(
    _compile.KernelFamily(
        SOURCE,
        tuple(
            spmv_name(v, i, block, items)
            for v in VALUE_CTYPE
            for i in INDEX_CTYPE
            for block, items in ADAPTIVE_SHAPES
        )
        + tuple(fixup_name(v, i) for v in VALUE_CTYPE for i in INDEX_CTYPE),
    )
)


def tile_coordinates(indptr, nnz: int, tile_items: int, xp):
    """Start (row, nonzero) of every tile of the merge path, plus the end: two arrays.

    Tile ``t`` starts on diagonal ``d = t * tile_items`` of the merge of the row ends
    ``indptr[1:]`` with the nonzero indices; its start row is the number of rows ``p``
    whose end item comes before ``d``: ``indptr[p + 1] + p + 1 <= d``.
    """
    n_rows = int(indptr.shape[0]) - 1
    n_items = n_rows + nnz
    n_tiles = max(-(-n_items // tile_items), 1)
    diagonals = xp.minimum(xp.arange(n_tiles + 1, dtype=np.int64) * tile_items, n_items)
    keys = indptr[1:].astype(np.int64) + xp.arange(1, n_rows + 1, dtype=np.int64)
    rows = xp.searchsorted(keys, diagonals, side="right").astype(np.int64)
    return rows.astype(indptr.dtype), (diagonals - rows).astype(indptr.dtype)


class _KernelLauncher:
    """Launches one compiled kernel through ``cuLaunchKernel`` from a packed argument buffer.

    CuPy's generic launch converts every argument on every call (several microseconds for
    eleven arguments, more than a whole small product); here each argument has a fixed
    8-byte slot (pointers and integers, little-endian, so an ``int`` reads its low four
    bytes) and a call only rewrites the slots that change.
    """

    def __init__(self, kernel, n_args: int):
        from cupy_backends.cuda.api import driver

        self._launch = driver.launchKernel
        self._function = kernel.kernel.ptr
        self.args = np.zeros(n_args, dtype=np.uint64)
        self._params = self.args.ctypes.data + 8 * np.arange(n_args, dtype=np.uint64)
        self._params_ptr = self._params.ctypes.data

    def __call__(self, grid: int, block: int, stream_ptr: int) -> None:
        self._launch(self._function, grid, 1, 1, block, 1, 1, 0, stream_ptr, self._params_ptr, 0)


class AdaptivePlan(Plan):
    """Compiled merge-path kernels, tile coordinates and per-stream carry buffers."""

    def __init__(self, matrix: DeviceMatrix, policy: AdaptivePolicy):
        super().__init__(matrix, policy)
        cupy = _cuda.cupy_or_none()
        self._cupy = cupy
        n_rows = matrix.shape[0]
        self._n_rows = n_rows
        self._block = policy.block_size
        tile_items = policy.block_size * policy.nnz_per_thread
        self._tile_row, self._tile_nz = tile_coordinates(
            matrix.indptr, matrix.nnz, tile_items, cupy
        )
        self.n_tiles = int(self._tile_row.shape[0]) - 1
        self._spmv = _compile.get_kernel(
            SOURCE,
            spmv_name(matrix.dtype, matrix.index_dtype, policy.block_size, policy.nnz_per_thread),
        )
        self._fixup = _compile.get_kernel(SOURCE, fixup_name(matrix.dtype, matrix.index_dtype))
        self._fixup_grid = (-(-self.n_tiles // FIXUP_BLOCK),)
        self._n_rows_arg = matrix.index_dtype.type(n_rows)
        self._n_tiles_arg = np.int32(self.n_tiles)
        self.fused_fixup = 1 < self.n_tiles <= FUSED_FIXUP_MAX_TILES
        self._carries: dict = {}
        # argument slots of adaptive_spmv; x, y and the per-stream scratch change per call
        self._launcher = _KernelLauncher(self._spmv, 11)
        args = self._launcher.args
        args[0], args[1], args[2] = (
            a.data.ptr for a in (matrix.indptr, matrix.indices, matrix.data)
        )
        args[5], args[6] = self._tile_row.data.ptr, self._tile_nz.data.ptr
        args[9] = n_rows
        self._launch_lock = threading.Lock()

    def _carry_buffers(self, stream_ptr: int):
        """(carry rows, carry values, finished-tile counter or a null pointer) for one
        stream: scratch written by every product."""
        buffers = self._carries.get(stream_ptr)
        if buffers is None:
            cupy = self._cupy
            counter = cupy.zeros(1, dtype=np.uint32) if self.fused_fixup else None
            carry_row = cupy.empty(self.n_tiles, dtype=self.matrix.index_dtype)
            carry_value = cupy.empty(self.n_tiles, dtype=self._dtype)
            pointers = (
                carry_row.data.ptr,
                carry_value.data.ptr,
                0 if counter is None else counter.data.ptr,  # null: no fused fix-up
            )
            buffers = (carry_row, carry_value, counter, pointers)
            self._carries[stream_ptr] = buffers
        return buffers

    def _matvec(self, x, y):
        cupy = self._cupy
        if self._n_rows == 0:
            return y
        stream_ptr = cupy.cuda.get_current_stream().ptr
        carry_row, carry_value, _, pointers = self._carry_buffers(stream_ptr)
        with self._launch_lock:  # the argument slots are shared; the launch copies them
            args = self._launcher.args
            args[3] = x.data.ptr
            args[4] = y.data.ptr
            args[7], args[8], args[10] = pointers
            self._launcher(self.n_tiles, self._block, stream_ptr)
        if self.n_tiles > FUSED_FIXUP_MAX_TILES:
            self._fixup(
                self._fixup_grid,
                (FIXUP_BLOCK,),
                (carry_row, carry_value, self._n_tiles_arg, self._n_rows_arg, y),
            )
        return y


class AdaptiveBackend(Backend):
    """Merge-path SpMV: equal work per thread whatever the row lengths; deterministic."""

    name = "adaptive"
    description = "load-balanced merge-path SpMV for irregular rows (deterministic, no atomics)"
    policy_type = AdaptivePolicy

    def untuned_policy(self, matrix):
        return AdaptivePolicy(source="default")

    def candidates(self, matrix):
        return [
            AdaptivePolicy(block_size=block, nnz_per_thread=items, source="candidate")
            for block, items in ADAPTIVE_SHAPES
        ]

    def plan(self, matrix, policy):
        return AdaptivePlan(matrix, policy)


BACKENDS = [AdaptiveBackend()]
