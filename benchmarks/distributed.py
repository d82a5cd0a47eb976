"""The distributed product and CG iteration against the single-GPU product.

Run under ``mpiexec -n P`` (P = 1 is the comparison the distributed layer must not lose:
its one-rank product against ``sparsegpu.csr_matrix @ x`` on the same GPU). The matrix
is the 7-point Poisson stencil on an ``n^3`` grid (default n = 190: 6.9 M rows, 48 M
nonzeros) or a SuiteSparse matrix (``--matrix``), built or read on rank 0 and
distributed. Reported (JSON at ``--out``, written by rank 0; a summary on stdout):

* ``single_gpu_ms``: median time of ``A @ x`` for the undistributed sparsegpu matrix
  (CUDA events; P = 1 only, measured before the distributed matrix exists);
* ``product_ms``: median time of the distributed ``A @ x`` (the slowest rank's median);
* ``halo_ms``: median time of the halo exchange alone (pack, send, receive, unpack);
* ``cg_iteration_ms``: a fixed number of CG iterations (``rtol=0``), divided;
* ``halo_bytes`` per product, ``comm_fraction`` = halo_ms / product_ms, and ``explain``.

Timings use CUDA events on each rank's current stream with a barrier before every
sample; on a machine without a GPU they fall back to ``time.perf_counter`` (the JSON
says which). Usage::

    mpiexec -n 1 python -m benchmarks.distributed --out dist_1.json
    mpiexec --allow-run-as-root --oversubscribe -n 4 \\
        python -m benchmarks.distributed --out dist_4.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import sparsegpu as sg
import sparsegpu.distributed as sgd
from sparsegpu.datasets.synthetic import stencil_3d
from sparsegpu.device import _cuda
from sparsegpu.distributed import _bench


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file written by rank 0")
    parser.add_argument("--n", type=int, default=190, help="stencil grid edge (default 190)")
    parser.add_argument("--matrix", help="a SuiteSparse or bundled matrix instead")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--cg-iterations", type=int, default=50)
    args = parser.parse_args(argv)
    from mpi4py import MPI  # after the arguments: --help needs no MPI (the mpi extra)

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dtype = np.dtype(args.dtype)
    result = {"ranks": size, "dtype": dtype.name, "clock": _bench.clock()}

    S = None
    if rank == 0:
        if args.matrix:
            S = sg.datasets.load(args.matrix) if args.matrix in sg.datasets.names() else (
                sg.io.suitesparse.load(args.matrix, progress=False)
            )  # fmt: skip
            name = args.matrix
        else:
            S = stencil_3d(args.n)
            name = f"stencil_3d({args.n})"
        S = sg.csr_matrix(S.astype(dtype))
        result["matrix"] = {"name": name, "shape": list(S.shape), "nnz": int(S.nnz)}
    if size == 1:
        cupy = _cuda.cupy_or_none()
        x_single = np.ones(S.shape[1], dtype=dtype)
        if cupy is not None:
            x_single = cupy.asarray(x_single)
        single = S
        result["single_gpu_ms"] = _bench.time_ms(lambda: single @ x_single, comm, args.repeat)
        single._sg_drop()  # free the single-GPU mirror before distributing
        del single, x_single
    comm.Barrier()

    A = sgd.csr_matrix(S, comm)
    S = None  # rank 0 keeps only its rows
    result.update(_bench.measure(A, args.repeat, args.cg_iterations))
    report = A.explain()
    result["explain"] = str(report)
    if "single_gpu_ms" in result:
        result["distributed_over_single"] = result["product_ms"] / result["single_gpu_ms"]
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(report)
        for key in ("single_gpu_ms", "product_ms", "halo_ms", "cg_iteration_ms",
                    "comm_fraction", "distributed_over_single"):  # fmt: skip
            if key in result:
                print(f"{key:>24}: {result[key]:.4g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
