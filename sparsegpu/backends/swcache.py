"""The ``swcache`` backend: x read through a software-managed cache in shared memory.

Hirasawa, Shimoda, Ohshima and Honda's direct-mapped software cache ("A Software Cache
Implementation for GPU") in a CSR SpMV kernel
(``kernels/swcache.cu``): each warp keeps ``num_lines`` lines of ``line_size`` elements of
x in shared memory, with a tag per line; a miss fills the whole line cooperatively. The
knobs live in a :class:`SoftwareCachePolicy`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..device import _compile
from ..device import _occupancy as occupancy
from ..device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, name_expression
from ..device._mirror import DeviceMatrix
from .base import Backend
from .csr_vector import KernelPlan, nearby_threads_per_row
from .policy import THREADS_PER_ROW_CHOICES, RowGroupPolicy, check_int_choice

SOURCE = "swcache.cu"
TAG_BYTES = 8
WARP_SIZE = 32

# Untuned cache shape: 8 lines of 64 elements per warp keeps a block of 256 threads of
# float64 at 33 KiB of shared memory, so several blocks stay resident per SM (Hirasawa
# et al.: too much shared memory per block cuts resident blocks).
UNTUNED_LINE_SIZE = 64
UNTUNED_NUM_LINES = 8
# (line_size, num_lines) the autotuner sweeps: from one long line (the paper's best on its
# GPUs) to many short ones.
CANDIDATE_CACHE_SHAPES = ((256, 1), (128, 2), (128, 4), (64, 8), (32, 8), (32, 16), (16, 32))
CANDIDATE_BLOCK_SIZES = (128, 256, 512)


@dataclass(frozen=True)
class SoftwareCachePolicy(RowGroupPolicy):
    """The ``swcache`` kernel: a direct-mapped cache of x in shared memory.

    Attributes
    ----------
    line_size : int
        Elements of x per cache line (a power of two, 8..1024).
    num_lines : int
        Lines in the cache (a power of two, 1..1024). Each warp owns its own cache, so
        shared memory per block is ``block_size / 32 * num_lines * (line_size * itemsize + 8)``.
    """

    line_size: int = 128
    num_lines: int = 8

    def __post_init__(self):
        super().__post_init__()
        check_int_choice(self, "line_size", tuple(2**k for k in range(3, 11)))
        check_int_choice(self, "num_lines", tuple(2**k for k in range(0, 11)))


def kernel_name(value_dtype, index_dtype, threads_per_row) -> str:
    """The C++ name of one ``csr_swcache`` instantiation, e.g. ``csr_swcache<double, int, 8>``."""
    return name_expression("csr_swcache", value_dtype, index_dtype, threads_per_row)


def shared_bytes(block_size: int, line_size: int, num_lines: int, value_dtype) -> int:
    """Shared memory of one block: per warp, ``num_lines`` lines and their tags."""
    per_warp = num_lines * (line_size * np.dtype(value_dtype).itemsize + TAG_BYTES)
    return (block_size // WARP_SIZE) * per_warp


class SoftwareCachePlan(KernelPlan):
    """A compiled ``csr_swcache`` instantiation and its launch shape for one mirror."""

    values_by_reference = True  # its kernels are bound to the mirror's data array

    def __init__(self, matrix: DeviceMatrix, policy: SoftwareCachePolicy):
        super().__init__(matrix, policy)
        if not self.launches:
            return
        self.kernel = _compile.get_kernel(
            SOURCE,
            kernel_name(matrix.dtype, matrix.index_dtype, policy.threads_per_row),
            policy.compile_options(),
        )
        self.shared_bytes = shared_bytes(
            policy.block_size, policy.line_size, policy.num_lines, matrix.dtype
        )
        occupancy.allow_shared_memory(self.kernel, self.shared_bytes)
        self._bind(
            policy.block_size // policy.threads_per_row,
            (
                matrix.indptr,
                matrix.indices,
                matrix.data,
                "x",
                "y",
                matrix.shape[0],
                matrix.shape[1],
                policy.line_size.bit_length() - 1,
                policy.num_lines.bit_length() - 1,
            ),
        )


class SoftwareCacheBackend(Backend):
    name = "swcache"
    description = "CSR kernel, x through a direct-mapped software cache in shared memory"
    policy_type = SoftwareCachePolicy

    def _kernel(self, matrix: DeviceMatrix, threads_per_row: int):
        return _compile.get_kernel(
            SOURCE, kernel_name(matrix.dtype, matrix.index_dtype, threads_per_row)
        )

    def default_policy(self, matrix: DeviceMatrix) -> SoftwareCachePolicy:
        """Threads per row from the mean row length; block size from the occupancy API."""
        if matrix.shape[0] == 0 or matrix.nnz == 0:
            return SoftwareCachePolicy(source="default")
        threads_per_row = occupancy.threads_per_row_for(matrix.stats.mean)
        block_size = occupancy.occupancy_block_size(
            self._kernel(matrix, threads_per_row),
            lambda block: shared_bytes(block, UNTUNED_LINE_SIZE, UNTUNED_NUM_LINES, matrix.dtype),
        )
        return SoftwareCachePolicy(
            block_size,
            threads_per_row,
            line_size=UNTUNED_LINE_SIZE,
            num_lines=UNTUNED_NUM_LINES,
            source="occupancy",
        )

    def candidates(self, matrix: DeviceMatrix) -> list[SoftwareCachePolicy]:
        """Cache shapes x block sizes x threads per row near the untuned choice.

        Shapes whose shared memory a block cannot get on this device are left out.
        """
        from ..device import _cuda

        untuned = self.default_policy(matrix)
        limit = _cuda.device_info().shared_memory_per_block_optin
        out = [untuned]
        for threads_per_row in nearby_threads_per_row(untuned.threads_per_row):
            for block_size in CANDIDATE_BLOCK_SIZES:
                for line_size, num_lines in CANDIDATE_CACHE_SHAPES:
                    if shared_bytes(block_size, line_size, num_lines, matrix.dtype) > limit:
                        continue
                    policy = SoftwareCachePolicy(
                        block_size,
                        threads_per_row,
                        line_size=line_size,
                        num_lines=num_lines,
                        source="candidate",
                    )
                    if policy != untuned:
                        out.append(policy)
        return out

    def plan(self, matrix: DeviceMatrix, policy: SoftwareCachePolicy) -> SoftwareCachePlan:
        return SoftwareCachePlan(matrix, policy)


FAMILY = _compile.register_family(
    _compile.KernelFamily(
        SOURCE,
        tuple(
            kernel_name(value, index, threads_per_row)
            for value in CXX_VALUE_TYPES
            for index in CXX_INDEX_TYPES
            for threads_per_row in THREADS_PER_ROW_CHOICES
        ),
    )
)

BACKENDS = [SoftwareCacheBackend()]
