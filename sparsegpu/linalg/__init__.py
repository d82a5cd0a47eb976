"""GPU-resident Krylov solvers with scipy's signatures, built on sparsegpu's plans.

``cg``, ``bicgstab``, ``gmres``, ``minres`` and ``lsqr`` take a sparsegpu matrix (its
plan is chosen once per solve; every product is ``plan.matvec`` on device arrays), a
LinearOperator, or any matrix with ``@``, and right-hand sides as CuPy arrays (solved on
the GPU, result on the GPU) or NumPy arrays (solved where the matrix's backend computes;
the result comes back as NumPy). See each solver for how often it synchronises.
``amg`` builds a smoothed-aggregation multigrid hierarchy that every solver takes as
``M=`` (``sparsegpu.linalg.multigrid``).

>>> import numpy as np, sparsegpu as sg
>>> from sparsegpu.datasets.synthetic import stencil_3d
>>> A = stencil_3d(8)
>>> x, info = sg.linalg.cg(A, np.ones(A.shape[0]), rtol=1e-8)
>>> info
0
"""

from .._lazy import lazy_names
from ._gmres import gmres
from ._krylov import bicgstab, cg, minres
from ._lsqr import lsqr
from ._options import SolveInfo, last_solve_info

# Multigrid is imported when first asked for: its hierarchy is a scipy LinearOperator,
# and scipy.sparse.linalg (with scipy.linalg) was a third of `import sparsegpu`.
__getattr__ = lazy_names(__name__, globals(), {"AMGHierarchy": ".multigrid", "amg": ".multigrid"})


__all__ = [
    "AMGHierarchy",
    "SolveInfo",
    "amg",
    "bicgstab",
    "cg",
    "gmres",
    "last_solve_info",
    "lsqr",
    "minres",
]
