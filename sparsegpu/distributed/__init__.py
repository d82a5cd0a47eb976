"""Past one GPU: CSR matrices split over the ranks of an MPI communicator.

PETSc's MPIAIJ layout on sparsegpu's local products: rows split into contiguous blocks
balanced by nonzeros (or the parts of a graph partition), each block split into the owned
columns and a compressed off-rank part, only the needed x entries exchanged with
neighbour messages overlapped with the owned-column product. Halos and reductions travel
device to device through NCCL where every rank has a GPU of its own (CUDA-aware MPI or
host staging otherwise: ``_transport``), ordered by CUDA events, never by host waits.
``sparsegpu.linalg``'s solvers take these matrices as they are. One GPU per rank
(device = local rank % device count) where CuPy finds one; the scipy backend elsewhere.
Errors on one rank reach every rank; waits have deadlines and collectives are guarded
(see ``_comm``), so nothing hangs.

Needs mpi4py (``pip install -e ".[mpi]"``); importing this module does not.

.. code-block:: python

   from mpi4py import MPI
   import sparsegpu as sg
   import sparsegpu.distributed as sgd
   A = sgd.csr_matrix(S, comm=MPI.COMM_WORLD)   # S on rank 0, None elsewhere
   b = A.scatter(b_global)                      # b_global on rank 0
   y = A @ b
   x, info = sg.linalg.cg(A, b, rtol=1e-8)
   x_global = x.gather(root=0)
   report = A.explain()                         # collective: on every rank
"""

from . import linalg
from ._comm import ENV_TIMEOUT, RankError
from ._exchange import HaloPlan
from ._io import load, mmread
from ._matrix import DistributedReport, RankReport, csr_matrix
from ._model import (
    NETWORK,
    CostEstimate,
    Fit,
    cost_model,
    fit_cost_model,
    predict,
    stencil_halo,
)
from ._partition import PARTITIONS, balanced_offsets
from ._transport_choice import ENV_TRANSPORT, TRANSPORTS
from ._vector import DistributedVector, Layout


def explain(A) -> DistributedReport:
    """``A.explain()``: how a distributed matrix is split and communicates (collective)."""
    if not isinstance(A, csr_matrix):
        raise TypeError(f"explain takes a sparsegpu.distributed.csr_matrix, got {type(A).__name__}")
    return A.explain()


__all__ = [
    "ENV_TIMEOUT",
    "ENV_TRANSPORT",
    "PARTITIONS",
    "TRANSPORTS",
    "NETWORK",
    "CostEstimate",
    "DistributedReport",
    "DistributedVector",
    "Fit",
    "HaloPlan",
    "Layout",
    "RankError",
    "RankReport",
    "balanced_offsets",
    "cost_model",
    "csr_matrix",
    "explain",
    "fit_cost_model",
    "linalg",
    "load",
    "mmread",
    "predict",
    "stencil_halo",
]
