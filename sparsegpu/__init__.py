"""sparsegpu: scipy.sparse-compatible CSR matrices whose products run on NVIDIA GPUs.

>>> import numpy as np, scipy.sparse as sp, sparsegpu as sg
>>> A = sg.csr_matrix(sp.random(50, 50, density=0.1, random_state=0))
>>> bool(np.allclose(A @ np.ones(50), sp.csr_matrix(A) @ np.ones(50)))
True
"""

from . import datasets, io, linalg, suitesparse
from ._construct import block_diag, bmat, diags, eye, hstack, identity, kron, random, vstack
from ._matrix import csc_array, csc_matrix, csr_array, csr_matrix, matvec
from ._planning import choose, explain, plan, planning
from ._registry import (
    BackendStatus,
    BackendUnavailableError,
    backends,
    register_backend,
    unregister_backend,
)
from ._reorder import reorder
from ._select import use_backend
from ._version import __version__
from .tuning.autotune import AutotuneReport, autotune

__all__ = [
    "AutotuneReport",
    "BackendStatus",
    "BackendUnavailableError",
    "__version__",
    "autotune",
    "backends",
    "block_diag",
    "bmat",
    "choose",
    "csc_array",
    "csc_matrix",
    "csr_array",
    "csr_matrix",
    "datasets",
    "diags",
    "explain",
    "eye",
    "hstack",
    "identity",
    "io",
    "kron",
    "linalg",
    "matvec",
    "plan",
    "planning",
    "random",
    "register_backend",
    "reorder",
    "suitesparse",
    "unregister_backend",
    "use_backend",
    "vstack",
]
