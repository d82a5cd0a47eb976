"""The protocol every backend implements: declared once here, implemented per module.

A backend is a small object: its name, where its mirror lives, which dtypes it takes,
whether it is usable here, its default policy, and ``plan``, which turns a validated
:class:`~sparsegpu._mirror.DeviceMatrix` and a policy into an immutable :class:`Plan`.
Selection among backends lives in :mod:`sparsegpu._dispatch` only.
"""

from __future__ import annotations

import numpy as np

from .._mirror import CUPY, DeviceMatrix, Residence
from .._spmm import csr_spmm
from ..tuning.policy import Policy

FLOAT_AND_COMPLEX = tuple(
    np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128)
)
INT32_AND_INT64 = (np.dtype(np.int32), np.dtype(np.int64))


# From this many columns the one-pass SpMM kernel beats k matvecs (H200, 3-D Poisson 128^3,
# float64: 0.6x at k = 1..8, 1.05x at 16, 2.5x at 32, 3.1x at 64; solvers_h200.json).
SPMM_MIN_COLUMNS = 16


class Plan:
    """A ready-to-run product ``y = A @ x`` for one mirror and one policy.

    Immutable once made: compiled kernels, launch shape, descriptors, workspaces.
    Subclasses implement :meth:`matvec`; :meth:`matmat` defaults to one matvec per column.
    """

    def __init__(self, matrix: DeviceMatrix, policy: Policy):
        self.matrix = matrix
        self.policy = policy

    def matvec(self, x, out=None):
        """``A @ x`` for a 1-D x of length n_cols in the mirror's dtype, on the current stream.

        ``out``, when given, is a 1-D array of length n_rows and the mirror's dtype.
        """
        raise NotImplementedError

    def matmat(self, X, out=None):
        """``A @ X`` for a 2-D C-contiguous X of shape (n_cols, k).

        Default: on the GPU, from ``SPMM_MIN_COLUMNS`` columns on, one CSR kernel that
        reads A once for all k columns (:mod:`sparsegpu._spmm`); below that, and on the
        host, one matvec per column.
        """
        if self.matrix.residence.name == CUPY.name and X.shape[1] >= SPMM_MIN_COLUMNS:
            return csr_spmm(self.matrix, X, out)
        xp = self.matrix.xp
        n_rows = self.matrix.shape[0]
        if out is None:
            out = xp.empty((n_rows, X.shape[1]), dtype=self.matrix.dtype)
        for j in range(X.shape[1]):
            out[:, j] = self.matvec(xp.ascontiguousarray(X[:, j]))
        return out


class Backend:
    """Base class of the backends; subclasses set the class attributes and ``plan``.

    Attributes
    ----------
    name : str
        What users pass to ``A.backend`` / ``use_backend``.
    description : str
        One line for ``sparsegpu.backends()`` and ``sparsegpu info``.
    residence : Residence
        Where the mirror this backend reads lives.
    value_dtypes, index_dtypes : tuple of numpy.dtype
        What it computes with; anything else is refused with a TypeError.
    policy_type : type
        The policy dataclass of its kernel family.
    """

    name: str = ""
    description: str = ""
    residence: Residence = CUPY
    value_dtypes: tuple = FLOAT_AND_COMPLEX
    index_dtypes: tuple = INT32_AND_INT64
    policy_type: type = Policy

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run here (no GPU, no library), or None."""
        from .. import _cuda

        return _cuda.unavailable_reason()

    def refuse_reason(self, matrix: DeviceMatrix) -> str | None:
        """Why this backend cannot take this particular matrix (a size limit), or None."""
        return None

    def check_dtypes(self, value_dtype, index_dtype) -> None:
        """Raise TypeError naming what is supported when a dtype is not."""
        if np.dtype(value_dtype) not in self.value_dtypes:
            raise TypeError(
                f"backend {self.name!r} does not support value dtype {np.dtype(value_dtype)}; "
                f"it supports {', '.join(str(d) for d in self.value_dtypes)}"
            )
        if np.dtype(index_dtype) not in self.index_dtypes:
            raise TypeError(
                f"backend {self.name!r} does not support index dtype {np.dtype(index_dtype)}; "
                f"it supports {', '.join(str(d) for d in self.index_dtypes)}"
            )

    def supports(self, matrix: DeviceMatrix) -> bool:
        """True when this backend can compute with this mirror (dtypes and limits)."""
        return (
            matrix.dtype in self.value_dtypes
            and matrix.index_dtype in self.index_dtypes
            and self.refuse_reason(matrix) is None
        )

    def default_policy(self, matrix: DeviceMatrix) -> Policy:
        """The policy used when none is given (cached per mirror by the dispatcher).

        The tuning cache's entry for this device, dtypes and row-length class, else the
        defaults shipped with sparsegpu, else :meth:`untuned_policy`.
        """
        from ..tuning.cache import tuned_policy

        tuned = tuned_policy(self, matrix)
        return tuned if tuned is not None else self.untuned_policy(matrix)

    def untuned_policy(self, matrix: DeviceMatrix) -> Policy:
        """The policy derived from the device and the matrix alone (occupancy, row lengths)."""
        return self.policy_type(source="default")

    def candidates(self, matrix: DeviceMatrix) -> list[Policy]:
        """The policies the autotuner sweeps for this matrix (the untuned one included)."""
        return [self.untuned_policy(matrix)]

    def plan(self, matrix: DeviceMatrix, policy: Policy) -> Plan:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<sparsegpu backend {self.name!r}>"
