"""The solvers of distributed matrices: :mod:`sparsegpu.linalg`'s, unchanged.

``sparsegpu.linalg.cg`` (and ``bicgstab``, ``gmres``, ``minres``, ``lsqr``) solve with a
distributed matrix as they do with one on a single GPU: the same Krylov steps run on each
rank's blocks of :class:`~sparsegpu.distributed.DistributedVector` right-hand sides, every
dot product is a local one followed by an allreduce through the matrix's transport, and
``last_solve_info()``, CUDA graphs (with NCCL) and preconditioners come along. Every rank
calls the solver and gets the same ``info``; ``x`` comes back distributed like ``b``.
The names are re-exported here for convenience.
"""

from ..linalg import bicgstab, cg, gmres, lsqr, minres

__all__ = ["bicgstab", "cg", "gmres", "lsqr", "minres"]
