"""Timing distributed operations (the benchmark script and ``sparsegpu mpibench``)."""

from __future__ import annotations

import statistics
import time

import numpy as np

from .. import _cuda
from . import _comm


def time_ms(fn, comm, repeat: int, warmup: int = 3) -> float:
    """Median milliseconds of ``fn()`` over ``repeat`` samples, the slowest rank's.

    Each sample starts after a barrier; CUDA events on the current stream time it where
    there is a GPU, ``time.perf_counter`` elsewhere.
    """
    cupy = _cuda.cupy_or_none()
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        if cupy is not None:
            cupy.cuda.get_current_stream().synchronize()
        comm.Barrier()
        if cupy is not None:
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            samples.append(cupy.cuda.get_elapsed_time(start, stop))
        else:
            began = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - began) * 1e3)
    return comm.allreduce(statistics.median(samples), op=_comm.mpi().MAX)


def clock() -> str:
    """What :func:`time_ms` measures with here."""
    return "cuda events" if _cuda.cupy_or_none() is not None else "perf_counter (no GPU)"


def measure(A, repeat: int = 20, cg_iterations: int = 50) -> dict:
    """Times of one product, its halo exchange alone, and one CG iteration (collective).

    Returns a dict: ``product_ms``, ``halo_ms``, ``cg_iteration_ms`` (``cg_iterations``
    iterations at ``rtol=0``, divided), ``halo_bytes`` (all ranks, one product) and
    ``comm_fraction`` (``halo_ms / product_ms``).
    """
    from . import linalg

    comm = A._comm
    root = comm.Get_rank() == 0
    dtype = np.dtype(A.dtype)
    x = A.scatter(np.ones(A.shape[1], dtype=dtype) if root else None)
    product = time_ms(lambda: A @ x, comm, repeat)
    transport = A._transport(dtype)

    def exchange():
        requests, peers, error = transport.start(x.local)
        transport.finish(requests, peers)
        if error is not None:
            raise error

    halo = time_ms(exchange, comm, repeat)
    b = A.scatter(np.ones(A.shape[0], dtype=dtype) if root else None)
    solve = time_ms(
        lambda: linalg.cg(A, b, rtol=0.0, maxiter=cg_iterations), comm, max(repeat // 5, 3), 1
    )
    return {
        "product_ms": product,
        "halo_ms": halo,
        "cg_iteration_ms": solve / cg_iterations,
        "halo_bytes": A.explain().halo_bytes,
        "comm_fraction": halo / product,
    }
