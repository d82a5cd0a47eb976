"""Untuned launch shapes from the device itself: the CUDA occupancy API through CuPy.

G-DEP's tuning of the CSR vector kernel for the K20 ("Kepler explained, part 2", G-DEP
high-speed computing notes no. 25) reads occupancy off tables (registers and shared memory
per block against the SM's limits); here the driver computes it for the compiled kernel
(``cuOccupancyMaxActiveBlocksPerMultiprocessor``), so the numbers are right for every
device, register count and shared-memory size.
"""

from __future__ import annotations

from collections.abc import Callable

from . import _cuda
from ._launch import kernel_handle

BLOCK_SIZES = (64, 128, 256, 512, 1024)
# Among block sizes with equal occupancy, prefer the one nearest this: the block-size sweeps
# of that K20 tuning peak between 128 and 512, and smaller blocks balance a grid's tail better.
PREFERRED_BLOCK_SIZE = 256
# Default (non-opt-in) dynamic shared memory per block; beyond it a kernel must opt in.
DEFAULT_DYNAMIC_SHARED_LIMIT = 48 * 1024


def allow_shared_memory(kernel, shared_bytes: int) -> None:
    """Let ``kernel`` launch with ``shared_bytes`` of dynamic shared memory (opt-in above 48 KiB).

    Raises
    ------
    ValueError
        When the device cannot give that much shared memory to one block.
    """
    if shared_bytes <= DEFAULT_DYNAMIC_SHARED_LIMIT:
        return
    limit = _cuda.device_info().shared_memory_per_block_optin
    if shared_bytes > limit:
        raise ValueError(
            f"this launch needs {shared_bytes:,} bytes of shared memory per block but the "
            f"device allows {limit:,}; use a smaller block_size, line_size or num_lines"
        )
    driver = _cuda.cupy_or_none().cuda.driver
    attribute = driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = kernel_handle(kernel)
    if driver.funcGetAttribute(attribute, handle) < shared_bytes:
        driver.funcSetAttribute(handle, attribute, limit)


def active_blocks_per_sm(kernel, block_size: int, shared_bytes: int = 0) -> int:
    """Blocks of ``block_size`` threads one SM can hold for this kernel (0: cannot launch)."""
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        raise RuntimeError(f"no GPU: {_cuda.unavailable_reason()}")
    try:
        allow_shared_memory(kernel, shared_bytes)
    except ValueError:
        return 0
    return int(
        cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            kernel_handle(kernel), int(block_size), int(shared_bytes)
        )
    )


def resident_blocks(kernel, block_size: int, shared_bytes: int = 0) -> int:
    """Blocks the whole device holds at once: active blocks per SM times the SM count."""
    per_sm = active_blocks_per_sm(kernel, block_size, shared_bytes)
    return per_sm * _cuda.device_info().multiprocessors


def occupancy_block_size(
    kernel,
    shared_bytes: Callable[[int], int] = lambda block_size: 0,
    block_sizes=BLOCK_SIZES,
) -> int:
    """The block size that keeps the most threads resident per SM.

    Parameters
    ----------
    kernel : cupy.RawKernel
        The compiled instantiation.
    shared_bytes : callable
        Dynamic shared memory a block of the given size needs.
    block_sizes : sequence of int
        The sizes to consider.

    Returns
    -------
    int
        The best size; ties go to the one nearest :data:`PREFERRED_BLOCK_SIZE`.

    Raises
    ------
    ValueError
        When no block size can launch at all (too much shared memory).
    """
    resident = {b: active_blocks_per_sm(kernel, b, shared_bytes(b)) * b for b in block_sizes}
    best = max(resident.values())
    if best == 0:
        raise ValueError(
            f"no block size in {list(block_sizes)} can launch: the kernel needs too much "
            "shared memory per block; lower line_size or num_lines"
        )
    tied = [b for b, threads in resident.items() if threads == best]
    return min(tied, key=lambda b: (abs(b - PREFERRED_BLOCK_SIZE), b))


def threads_per_row_for(mean_row_length: float, limit: int = 32) -> int:
    """The largest power of two <= half the mean row length, in 1..``limit``.

    Fewer threads than nonzeros per row keeps more rows, hence more independent loads, in
    flight per warp. On the H200 the autotuner's winners sat at about half the mean
    (5-point stencil, mean 5: 2 threads, 2.5x faster than 8; 27-point, mean 26: 8, 2.4x
    faster than 32; docs/benchmarks/results/autotune_h200.json), where CUSP's rule of the
    power of two above the mean lost. The SpMM kernel splits a row over what its column
    lanes leave of a warp (``limit``) by the same rule.
    """
    threads = 1
    while threads * 2 <= mean_row_length / 2 and threads * 2 <= limit:
        threads *= 2
    return threads
