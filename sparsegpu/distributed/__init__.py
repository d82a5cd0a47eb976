"""Past one GPU: CSR matrices split over the ranks of an MPI communicator.

PETSc's MPIAIJ layout on sparsegpu's local products: rows split into contiguous blocks
balanced by nonzeros, each block split into the owned columns and a compressed off-rank
part, only the needed x entries exchanged with neighbour messages overlapped with the
owned-column product, dot products by allreduce. One GPU per rank (device = local rank
% device count) where CuPy finds one; the scipy backend elsewhere. Errors on one rank
reach every rank; waits have deadlines (see ``_comm``), so nothing hangs.

Needs mpi4py (``pip install 'sparsegpu[mpi]'``); importing this module does not.

.. code-block:: python

   from mpi4py import MPI
   import sparsegpu.distributed as sgd
   A = sgd.csr_matrix(S, comm=MPI.COMM_WORLD)   # S on rank 0, None elsewhere
   b = A.scatter(b_global)                      # b_global on rank 0
   y = A @ b
   x, info = sgd.linalg.cg(A, b, rtol=1e-8)
   x_global = x.gather(root=0)
   print(A.explain())
"""

from . import linalg
from ._comm import ENV_TIMEOUT, RankError
from ._exchange import HaloPlan, HostStaged
from ._io import load, mmread
from ._matrix import DistributedReport, RankReport, csr_matrix
from ._model import CostEstimate, cost_model, stencil_halo
from ._partition import balanced_offsets
from ._vector import DistributedVector, Layout


def explain(A) -> DistributedReport:
    """``A.explain()``: how a distributed matrix is split and communicates (collective)."""
    if not isinstance(A, csr_matrix):
        raise TypeError(f"explain takes a sparsegpu.distributed.csr_matrix, got {type(A).__name__}")
    return A.explain()


__all__ = [
    "ENV_TIMEOUT",
    "CostEstimate",
    "DistributedReport",
    "DistributedVector",
    "HaloPlan",
    "HostStaged",
    "Layout",
    "RankError",
    "RankReport",
    "balanced_offsets",
    "cost_model",
    "csr_matrix",
    "explain",
    "linalg",
    "load",
    "mmread",
    "stencil_halo",
]
