"""sparsegpu: scipy.sparse-compatible CSR matrices whose products run on NVIDIA GPUs.

Matrices
    ``csr_matrix`` and ``csr_array`` (and ``csc_matrix``/``csc_array``, what ``A.T``
    gives), ``bsr_matrix`` and ``bsr_array`` (blocks) are scipy's classes with the
    products moved: ``A @ x``, ``A.T @ x``, ``A @ X`` run on a backend, on the GPU for a
    GPU backend. ``help(sparsegpu.csr_matrix)`` shows
    one (with everything it inherits from scipy: not repeated here).
Backends
    ``backends()`` lists them with why each cannot run here; ``use_backend``,
    ``A.backend`` and ``matvec(..., backend=)`` choose one; ``explain(A)`` says what
    ``auto`` chose and why; ``choose(A, x)`` chooses by measurement now; ``planning`` sets
    how much ``auto`` measures; ``autotune`` tunes the policies of this device.
Submodules
    ``io`` (Matrix Market), ``suitesparse`` (the SuiteSparse collection), ``datasets``
    (bundled and synthetic matrices), ``linalg`` (GPU-resident solvers), ``tuning``,
    ``distributed`` (MPI).
Command line
    ``sparsegpu info | bench | autotune | fetch | probe``.

>>> import numpy as np, scipy.sparse as sp, sparsegpu as sg
>>> A = sg.csr_matrix(sp.random(50, 50, density=0.1, random_state=0))
>>> bool(np.allclose(A @ np.ones(50), sp.csr_matrix(A) @ np.ones(50)))
True
"""

from . import datasets, io, linalg
from ._lazy import lazy_names
from ._version import __version__
from .classes._class_loss import ScipyClassResultWarning
from .classes._construct import (
    as_sparsegpu,
    block_diag,
    bmat,
    diags,
    eye,
    hstack,
    identity,
    kron,
    random,
    vstack,
)
from .classes._matrix import bsr_array as bsr_array  # public; kept out of __all__ (see there)
from .classes._matrix import bsr_matrix as bsr_matrix
from .classes._matrix import csc_array as csc_array
from .classes._matrix import csc_matrix as csc_matrix
from .classes._matrix import csr_array as csr_array
from .classes._matrix import csr_matrix as csr_matrix
from .classes._products import explain, galerkin_product, matvec, spgemm
from .classes._reorder import reorder
from .engine._planning import choose, plan, planning
from .engine._registry import (
    BackendStatus,
    BackendUnavailableError,
    backends,
    register_backend,
    unregister_backend,
)
from .engine._select import use_backend
from .io import suitesparse

# The autotuner is imported when first asked for: it was a tenth of `import sparsegpu`.
# (``sparsegpu.tuning`` too, as the docstring's submodules: before, ``sg.tuning`` raised
# AttributeError unless something had imported it.)
__getattr__ = lazy_names(
    __name__,
    globals(),
    {"AutotuneReport": ".tuning.autotune", "autotune": ".tuning.autotune", "tuning": None},
)


# What help(sparsegpu) documents in full: not the six matrix classes, whose help repeats
# ~1,000 lines of scipy's each (help(sparsegpu) was 5,000 lines); the docstring names them.
__all__ = [
    "AutotuneReport",
    "BackendStatus",
    "BackendUnavailableError",
    "ScipyClassResultWarning",
    "__version__",
    "as_sparsegpu",
    "autotune",
    "backends",
    "block_diag",
    "bmat",
    "choose",
    "datasets",
    "diags",
    "explain",
    "eye",
    "galerkin_product",
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
    "spgemm",
    "suitesparse",
    "unregister_backend",
    "use_backend",
    "vstack",
]
