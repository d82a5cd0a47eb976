"""Where a solve's vectors live: the vector space the Krylov steps run in.

The solvers' steps (``_krylov``, ``_gmres``, ``_lsqr``) are written once, over a *space*
that says how a system is set up, how a dot product becomes global, how the host reads a
device scalar, and whether iterations can be captured as CUDA graphs:

* :class:`VectorSpace`, the protocol, written down once: what a solver may ask of a
  space (set a system up, make a dot global, read a scalar on the host, capture or not,
  order the matrix, end the solve);
* :class:`ArraySpace`, whole vectors of one process (NumPy or CuPy): a dot is the
  local one, nothing to agree on;
* a distributed matrix brings its own (``A._solver_space()``, see
  ``sparsegpu.distributed._space``): vectors are its ranks' blocks, each local dot is
  followed by an allreduce (on the GPUs with NCCL), the host's reads have the distributed
  deadline, and a capture happens on every rank or none.

Like Ginkgo's and PETSc's solvers on distributed vectors: one algorithm, the reduction
supplied by the vector space.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..classes._matrix import _SparseGPUMixin
from . import _options as options
from ._operator import System


@runtime_checkable
class VectorSpace(Protocol):
    """Where a solve's vectors live: everything the Krylov steps ask of them.

    The solvers (``_krylov``, ``_gmres``, ``_lsqr``) are written once against this
    protocol; :class:`ArraySpace` (one process) and
    ``sparsegpu.distributed._space.DistributedSpace`` (a distributed matrix's ranks)
    implement it. A matrix brings its own space through ``A._solver_space()``
    (:func:`space_of`).
    """

    def system(self, name, A, b, x0, M, square, capturable):
        """The system ``A x = b`` set up where A computes.

        Parameters
        ----------
        name : str
            The solver's name, for error messages.
        A, M : operator or None
            The matrix and the preconditioner (None: none), as the caller gave them.
        b, x0 : vector or None
            The right-hand side and the initial guess (None: zeros).
        square : bool
            Whether the solver needs a square A (not LSQR).
        capturable : bool
            Whether products may be planned to go into a CUDA graph.

        Returns
        -------
        system
            ``_operator.System`` or its distributed twin: ``A``, ``M``, ``b``, ``x``,
            ``dtype``, ``xp`` where the solve computes, and ``space`` (this space).
        """
        ...

    def reduce(self, buffer) -> None:
        """Make local dot products global, in place.

        Parameters
        ----------
        buffer : 0-d or 1-d array
            Dot products of this process's parts of the vectors; on return, of the whole
            vectors.
        """
        ...

    def to_host(self, a):
        """A device array (or 0-d result) as NumPy: where a solve synchronises.

        Parameters
        ----------
        a : array
            A NumPy or CuPy array.

        Returns
        -------
        numpy.ndarray
        """
        ...

    def captures(self, operator) -> bool:
        """Whether products with ``operator`` can go into a CUDA graph.

        Parameters
        ----------
        operator : operator
            The matrix or the preconditioner.

        Returns
        -------
        bool
        """
        ...

    def capture_refusal(self, A) -> str | None:
        """Why A's products cannot be captured in this space.

        Parameters
        ----------
        A : operator

        Returns
        -------
        str or None
            The reason, or None where they can (backend permitting).
        """
        ...

    def agree(self, failure: str | None) -> str | None:
        """A capture's failure as every process sees it.

        Parameters
        ----------
        failure : str or None
            Why the capture failed here (None: it did not).

        Returns
        -------
        str or None
            Why it failed somewhere (None: it succeeded everywhere).
        """
        ...

    def agree_block(self, block: int) -> int:
        """The iterations a captured block holds, the same in every process.

        Parameters
        ----------
        block : int
            This process's choice (a multiple of the step's period).

        Returns
        -------
        int
            The block every process uses.
        """
        ...

    def ordering(self, name, A, reorder, info):
        """The matrix to solve with, and the ordering applied to it.

        Parameters
        ----------
        name : str
            The solver's name, for error messages.
        A : operator
        reorder : {None, "rcm", "auto"}
            The solver's ``reorder=`` option (``_options``).
        info : SolveInfo
            Where the reason for the ordering is written.

        Returns
        -------
        (operator, _options.Ordering)
        """
        ...

    def finish(self) -> None:
        """The end of a solve (a distributed space agrees on it)."""
        ...


class ArraySpace(VectorSpace):
    """Vectors as whole arrays of one process (NumPy or CuPy): a :class:`VectorSpace`."""

    def system(self, name, A, b, x0, M, square, capturable) -> System:
        """The system ``A x = b`` set up where A computes (``_operator.System``)."""
        system = System(name, A, b, x0, M, square=square, capturable=capturable)
        system.space = self
        return system

    def reduce(self, buffer) -> None:
        """Make a local dot product (or several, ``buffer``) global: nothing to do here."""

    def to_host(self, a):
        """A device array (or 0-d result) as NumPy: where a solve synchronises."""
        return a.get() if hasattr(a, "get") else np.asarray(a)

    def captures(self, operator) -> bool:
        """Whether products with ``operator`` can go into a graph (a sparsegpu matrix: its
        plan writes into a given ``out`` without allocating), or a preconditioner that
        says it can be (``_sg_capturable``: a multigrid cycle on the GPU)."""
        return isinstance(operator, _SparseGPUMixin) or bool(
            getattr(operator, "_sg_capturable", False)
        )

    def capture_refusal(self, A) -> str | None:
        """Why A's products cannot be captured (None: they can, backend permitting)."""
        if self.captures(A):
            return None
        return f"A is a {type(A).__name__}, not a sparsegpu matrix"

    def agree(self, failure: str | None) -> str | None:
        """A capture's failure as every process sees it (one process: its own)."""
        return failure

    def agree_block(self, block: int) -> int:
        """The iterations a captured block holds (one process: its own choice)."""
        return block

    def ordering(self, name, A, reorder, info):
        """(matrix to solve with, Ordering) for ``reorder`` (``_options``)."""
        return options.choose_ordering(name, A, reorder, info)

    def finish(self) -> None:
        """The end of a solve (a distributed space agrees on it)."""


ARRAYS = ArraySpace()


def space_of(A) -> VectorSpace:
    """The vector space of a solve with ``A``: a distributed matrix's own, else arrays."""
    hook = getattr(A, "_solver_space", None)
    return hook() if callable(hook) else ARRAYS
