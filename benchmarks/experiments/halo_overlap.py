"""How a distributed product overlaps its halo with its local part (NCCL transport).

Times one product of a 7-point 3-D stencil split in row blocks, each rank's slowest
median, four ways in the same run (CUDA events, interleaved rounds):

* ``as built``: the library's order (gather, the local product queued, then NCCL's calls
  on the channel's high-priority stream);
* ``send first``: NCCL's calls before the local product is queued (the order before);
* ``default priority``: the library's order on a stream of default priority;
* each again captured as a CUDA graph of 16 products and replayed (no host in the loop).

Usage (one rank a GPU)::

    mpiexec -n 2 python benchmarks/experiments/halo_overlap.py --n 203 --out F.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

import sparsegpu.distributed as sgd
from sparsegpu import _cuda
from sparsegpu.datasets import synthetic
from sparsegpu.distributed import _transport
from sparsegpu.linalg import _graphs

GRAPH_CALLS = 16


def _send_first(A, work, x_local, out):
    error = work.halo.start(x_local)
    work.halo.send()
    work.diag.matvec(x_local, out=out)
    ghosts = work.halo.finish()
    if error is None and work.offd is not None:
        work.offd.matvec(ghosts, out=work.sums)
        _transport.add_rows(out, work.rows, work.sums)


def _timed(ways, comm, rounds, inner):
    cupy = _cuda.cupy_or_none()
    samples = {name: [] for name in ways}
    for _ in range(rounds):
        for name, fn in ways.items():
            cupy.cuda.get_current_stream().synchronize()
            comm.Barrier()
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            for _ in range(inner):
                fn()
            stop.record()
            stop.synchronize()
            samples[name].append(cupy.cuda.get_elapsed_time(start, stop) / inner)
    return {name: comm.allreduce(statistics.median(s), op=max) for name, s in samples.items()}


def main(argv=None) -> int:
    from mpi4py import MPI

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=203, help="grid points a side")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", help="JSON file (rank 0 writes it)")
    args = parser.parse_args(argv)
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print("halo_overlap: needs a GPU a rank", file=sys.stderr)
        return 2
    comm = MPI.COMM_WORLD
    root = comm.Get_rank() == 0
    S = synthetic.stencil_3d(args.n, dtype=np.float64) if root else None
    A = sgd.csr_matrix(S, comm)
    x = A.scatter(np.random.default_rng(1).random(A.shape[1]) if root else None)
    out = cupy.empty(A.row_layout.n_local)
    work = A._work_for(np.dtype(np.float64), x.local, True)
    transport = A._transport
    high = transport.stream
    low = cupy.cuda.Stream(non_blocking=True)

    def with_stream(stream, fn):
        def run():
            transport.stream = stream
            try:
                fn()
            finally:
                transport.stream = high

        return run

    built = lambda: A._product(x.local, out, True)  # noqa: E731
    first = lambda: _send_first(A, work, x.local, out)  # noqa: E731
    ways = {
        "as built": built,
        "send first": first,
        "default priority": with_stream(low, built),
    }
    reference = cupy.array(A._product(x.local, cupy.empty_like(out), True))
    for name, fn in ways.items():
        fn()
        if not bool(cupy.allclose(out, reference, rtol=1e-14, atol=0)):
            raise AssertionError(f"{name} disagrees with the product")
    blocks = {}
    with _graphs.private_stream() as stream:
        for name, fn in list(ways.items()):
            block = _graphs.Block(fn, GRAPH_CALLS, stream)
            if block.failure is None:
                blocks[f"{name}, graph"] = block
            elif root:
                print(f"{name}: no graph ({block.failure})", flush=True)
        ways.update({name: block.launch for name, block in blocks.items()})
        ms = _timed(ways, comm, args.rounds, 10)
    for name in blocks:
        ms[name] /= GRAPH_CALLS
    if root:
        report = A.explain()
        result = {
            "n": args.n,
            "ranks": comm.Get_size(),
            "device": _cuda.device_info().name,
            "transport": report.transport,
            "halo_bytes": report.halo_bytes,
            "ms": ms,
        }
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
        print(f"{comm.Get_size()} ranks, {args.n}^3, {report.transport}:")
        for name, value in ms.items():
            print(f"  {name:<26} {value:.4f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
