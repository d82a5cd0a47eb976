"""Timing distributed operations (the benchmark script and ``sparsegpu mpibench``)."""

from __future__ import annotations

import numpy as np

from ..device import _cuda
from ..measure import cuda_time_interleaved, host_time_interleaved
from . import _comm


def time_ms(fn, comm, repeat: int, warmup: int = 3, inner: int = 1) -> float:
    """Median milliseconds of ``fn()`` over ``repeat`` samples, the slowest rank's.

    Each sample starts after the stream's work is done and a barrier, and runs ``fn``
    ``inner`` times (the sample's time divided), without the lead call of a
    single-GPU sample (the barrier must be the last thing before the clock starts); timed
    by the one harness, :mod:`sparsegpu.measure`: CUDA events on the current stream where
    there is a GPU, ``time.perf_counter`` elsewhere.
    """
    cupy = _cuda.cupy_or_none()

    def barrier():
        if cupy is not None:
            cupy.cuda.get_current_stream().synchronize()
        comm.Barrier()

    if cupy is not None:
        timings = cuda_time_interleaved(
            {"fn": fn}, warmup=warmup, repeat=repeat, inner=inner, lead=False,
            before_sample=barrier,
        )  # fmt: skip
    else:
        timings = host_time_interleaved(
            {"fn": fn}, warmup=warmup, repeat=repeat, inner=inner, before_sample=barrier
        )
    return comm.allreduce(timings["fn"].median_ms, op=_comm.mpi().MAX)


def clock() -> str:
    """What :func:`time_ms` measures with here."""
    return "cuda events" if _cuda.cupy_or_none() is not None else "perf_counter (no GPU)"


def cg_iteration_ms(solve, comm, repeat: int, short: int, long: int) -> float:
    """Milliseconds per CG iteration: ``solve(maxiter)`` at ``rtol=0`` timed for ``long`` and
    ``short`` iterations, the difference divided (the set-up, the first norm and the
    closing agreement cancel out)."""
    first = time_ms(lambda: solve(short), comm, repeat, 1)
    second = time_ms(lambda: solve(long), comm, repeat, 1)
    return (second - first) / (long - short)


def measure(A, repeat: int = 20, cg_iterations: int = 50) -> dict:
    """Times of one product, its halo exchange alone, and one CG iteration (collective).

    Returns a dict: ``product_ms``, ``halo_ms``, ``cg_iteration_ms`` (the difference of
    CG runs of ``cg_iterations`` and ``cg_iterations // 5`` iterations at ``rtol=0``,
    divided), ``halo_bytes`` (all ranks, one product) and ``comm_fraction``
    (``halo_ms / product_ms``).
    """
    from ..linalg import cg

    comm = A.comm
    root = comm.Get_rank() == 0
    dtype = np.dtype(A.dtype)
    x = A.scatter(np.ones(A.shape[1], dtype=dtype) if root else None)
    product = time_ms(lambda: A @ x, comm, repeat)
    halo = A._work_for(dtype, x.local).halo

    def exchange():
        halo.start(x.local)
        halo.finish()

    exchange_ms = time_ms(exchange, comm, repeat)
    b = A.scatter(np.ones(A.shape[0], dtype=dtype) if root else None)
    short = max(cg_iterations // 5, 1)
    iteration = cg_iteration_ms(
        lambda k: cg(A, b, rtol=0.0, maxiter=k), comm, max(repeat // 5, 3), short,
        max(cg_iterations, short + 1),
    )  # fmt: skip
    return {
        "product_ms": product,
        "halo_ms": exchange_ms,
        "cg_iteration_ms": iteration,
        "halo_bytes": A.explain().halo_bytes,
        "comm_fraction": exchange_ms / product,
    }
