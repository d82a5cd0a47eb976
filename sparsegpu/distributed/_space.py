"""The distributed vector space of ``sparsegpu.linalg``'s solvers.

``sg.linalg.cg(A, b)`` with a distributed ``A`` runs the same Krylov steps as on one GPU,
on each rank's blocks: products are the distributed matrix's (halo exchange and local
plans), each local dot is followed by an allreduce through the matrix's transport (on
the GPUs with NCCL, so an iteration never waits on the host), the host's reads of the
convergence flag have the distributed deadline and look for other ranks' errors, a CUDA
graph is captured on every rank or none, and the start (naming a rank that never calls
the solver) and the end of a solve are guarded collectives.
"""

from __future__ import annotations

import numpy as np

from ..linalg import _options as options
from ..linalg._operator import SystemBase, _work_dtype
from ..linalg._space import VectorSpace
from ._comm import mpi
from ._vector import DistributedVector

_ORDERED_WHEN_BUILT = (
    "distributed: a distributed matrix is ordered when it is built (csr_matrix(..., "
    "partition='graph') renumbers rows by parts); not reordered per solve"
)


def _distributed(operator) -> bool:
    """Whether ``operator`` is a distributed matrix (it brings its vector space)."""
    return callable(getattr(operator, "_solver_space", None))


class _Operator:
    """A distributed matrix's products on this rank's blocks, as the solvers call them,
    planned on ``probe`` (a block of A's columns; None: a seeded random one, made only
    when A's products in this dtype are not planned yet: not on every solve)."""

    def __init__(self, A, dtype, capturable, probe=None):
        self.matrix = A
        self.shape = A.shape
        self.dtype = np.dtype(dtype)
        self.xp = A.row_layout.xp
        self._capturable = capturable
        if probe is None and not A._planned(self.dtype, capturable):
            probe = _probe(A.col_layout, self.dtype)
        if probe is not None:
            probe = probe.astype(self.dtype, copy=False)
        work = A._work_for(self.dtype, probe, capturable)
        self.backend = work.backend
        self.capturable = work.capturable

    def matvec(self, x, out=None):
        if out is None:
            out = self.xp.empty(self.matrix.row_layout.n_local, dtype=self.dtype)
        return self.matrix._product(x, out, self._capturable)

    def rmatvec(self, x, out=None):
        if out is None:
            out = self.xp.empty(self.matrix.col_layout.n_local, dtype=self.dtype)
        return self.matrix._rproduct(x, out)

    def adjoint(self):
        """(backend, capturable) of the transposed products: the reverse halo adds up
        repeated entries with scatter-adds, which a graph does not hold."""
        return self.backend, False


class _Callable:
    """A preconditioner given as a function of DistributedVectors."""

    backend = None
    capturable = False

    def __init__(self, function, layout, dtype):
        self.function, self.layout = function, layout
        self.shape = (layout.n, layout.n)
        self.dtype = np.dtype(dtype)
        self.xp = layout.xp

    def matvec(self, r, out=None):
        result = self.function(DistributedVector(r, self.layout))
        if not isinstance(result, DistributedVector):
            raise TypeError(
                f"the preconditioner M must return a DistributedVector, got {type(result).__name__}"
            )
        if out is None:
            return result.local.astype(self.dtype, copy=False)
        out[...] = result.local
        return out


class DistributedSystem(SystemBase):
    """``A x = b`` on this rank's blocks (what ``_operator.System`` is for arrays)."""

    def __init__(self, space, name, A, b, x0, M, square, capturable):
        self.space = space
        rows, cols = A.row_layout, A.col_layout
        self._check_square(name, A.shape, square)
        for label, vector, layout in (("b", b, rows), ("x0", x0, cols)):
            if vector is None and label == "x0":
                continue
            if not isinstance(vector, DistributedVector):
                raise TypeError(
                    f"{name}: with a distributed A, {label} must be a DistributedVector (make "
                    f"it with A.scatter), got {type(vector).__name__}"
                )
            if not layout.same_as(vector.layout):
                side = "rows" if layout is rows else "columns"
                raise ValueError(
                    f"{name}: {label} is not split like A's {side} ("
                    f"{vector.layout.offsets.tolist()} vs {layout.offsets.tolist()}); make it "
                    "with A.scatter"
                )
        if _distributed(M):
            if not (M.row_layout.same_as(cols) and M.col_layout.same_as(rows)):
                raise ValueError(
                    f"{name}: the preconditioner M is split as {M.row_layout.offsets.tolist()}"
                    f", A as {rows.offsets.tolist()}; build M with the same row split"
                )
        elif M is not None and not callable(M):
            raise TypeError(
                f"{name}: with a distributed A, M must be a distributed csr_matrix or a "
                f"function of DistributedVectors, got {type(M).__name__}"
            )
        self.dtype = _work_dtype(A.dtype, b.dtype)
        self.xp = self.out_xp = rows.xp
        self.rows, self.cols = rows.n_local, cols.n_local
        self._layouts = rows, cols
        self.A = _Operator(A, self.dtype, capturable, None if x0 is None else x0.local)
        self.b = b.local.astype(self.dtype)
        self.x0_given = x0 is not None
        if x0 is None:
            self.x = self.xp.zeros(self.cols, dtype=self.dtype)
        else:
            self.x = x0.local.astype(self.dtype, copy=True)
        self.M = None
        if _distributed(M):
            self.M = _Operator(M, self.dtype, capturable, self.b)
        elif callable(M):
            self.M = _Callable(M, rows, self.dtype)

    def result(self, x):
        """x as a DistributedVector of A's columns."""
        layout = self._layouts[1] if x.shape[0] == self.cols else self._layouts[0]
        return DistributedVector(x, layout)


def _probe(layout, dtype):
    """A seeded random vector of ``layout``'s block (planning by measurement times on it)."""
    from ..measure._oracle import random_vector

    return random_vector(layout.n_local, dtype, seed=layout.rank, xp=layout.xp)


class DistributedSpace(VectorSpace):
    """The vector space of solves with distributed matrix ``A``: a
    ``linalg._space.VectorSpace`` whose vectors are this rank's blocks."""

    def __init__(self, A):
        self.matrix = A
        self.ctx = A._ctx
        self.transport = A._transport
        self.layout = A.row_layout

    def system(self, name, A, b, x0, M, square, capturable) -> DistributedSystem:
        """The system on this rank's blocks, after a roll call (a rank that never calls
        the solver is named in the TimeoutError of the others); bad arguments on any rank
        raise the same RankError on every rank (one agreement per solve)."""
        self.ctx.enter("a solve", name)
        system = error = None
        try:
            system = DistributedSystem(self, name, A, b, x0, M, square, capturable)
        except Exception as exc:
            error = exc
        self.ctx.agree(error, name)
        return system

    def reduce(self, buffer) -> None:
        self.transport.allreduce(buffer)

    def to_host(self, a):
        return self.layout.to_host(a)

    def captures(self, operator) -> bool:
        return _distributed(operator)

    def capture_refusal(self, A) -> str | None:
        if self.transport.capturable:
            return None
        return (
            f"the {self.transport.name} transport has the host wait for every message; "
            "graphs need NCCL (transport='nccl')"
        )

    def agree(self, failure: str | None) -> str | None:
        """Capture on every rank or none: one flag summed on the host."""
        flag = np.array([0 if failure is None else 1], dtype=np.int64)
        failed = self.ctx.allreduce(flag, "agreeing on a graph capture")[0]
        if failure is None and failed:
            return "the capture failed on another rank"
        return failure

    def agree_block(self, block: int) -> int:
        """The smallest block any rank chose (every rank then reads its flags, and joins
        their reductions, at the same iterations)."""
        return int(self.ctx.allreduce(np.array([block], dtype=np.int64),
                                      "agreeing on a graph block", op=mpi().MIN)[0])  # fmt: skip

    def ordering(self, name, A, reorder, info):
        if reorder not in options.REORDERS:
            raise ValueError(f"{name}: reorder must be 'rcm', 'auto' or None, got {reorder!r}")
        if reorder is not None:
            info.reorder_reason = _ORDERED_WHEN_BUILT
        return A, options.Ordering(None)

    def finish(self) -> None:
        self.ctx.enter("the end of a solve")
