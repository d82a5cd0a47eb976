"""The solvers' ``graphs=`` and ``reorder=`` options, and what a solve did with them.

Every solver records a :class:`SolveInfo` for its last call in this thread, read with
:func:`last_solve_info` (scipy returns ``x, info`` and nothing more, so the diagnostics
live beside the result, the way ``numpy.seterr`` state does): whether iterations ran as
CUDA graphs and if not why, which ordering was used and why, the iteration count.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..classes import _reorder
from ..classes._matrix import _SparseGPUMixin
from ..device import _cuda
from ..device._mirror import RowLengthStats
from ..engine._rules import SCATTERED_SPREAD

REORDERS = ("rcm", None, "auto")


@dataclass
class SolveInfo:
    """What the last solve in this thread did.

    Attributes
    ----------
    solver : str
    graphs : bool
        True when blocks of iterations were captured as CUDA graphs and replayed.
    graphs_reason : str
        Why (or why not): "captured 16 iterations a block", "callback given: ...".
    block : int
        Iterations per replayed graph (0 without graphs).
    reorder : str or None
        The ordering the system was solved in ("rcm") or None.
    reorder_reason : str
    iterations : int or None
        Iterations that changed x (scipy's count), where the solver counts them.
    unordered_s : float or None
        ``reorder="auto"`` on scattered columns: seconds already spent solving this
        matrix unordered before this solve (what the rule weighs).
    ordering_estimate_s : float or None
        ``reorder="auto"`` on scattered columns: the ordering's estimated cost
        (:func:`ordering_estimate_s`).
    preconditioner : str
        What the preconditioner was, where it says (a multigrid hierarchy: its levels,
        complexities, set-up time and whether its cycle ran inside the graphs); "" else.
    """

    solver: str
    graphs: bool = False
    graphs_reason: str = ""
    block: int = 0
    reorder: str | None = None
    reorder_reason: str = "not asked (reorder=None)"
    iterations: int | None = None
    unordered_s: float | None = None
    ordering_estimate_s: float | None = None
    preconditioner: str = ""
    # (the matrix's cache, the solve's start): this solve's time counts as spent unordered
    _rent: Any = field(default=None, init=False, repr=False, compare=False)


_last = threading.local()


def last_solve_info() -> SolveInfo | None:
    """The :class:`SolveInfo` of the last ``sparsegpu.linalg`` solve in this thread.

    >>> import numpy as np, sparsegpu as sg
    >>> from sparsegpu.datasets.synthetic import stencil_2d
    >>> x, info = sg.linalg.cg(stencil_2d(8), np.ones(64), graphs=True)
    >>> used = sg.linalg.last_solve_info()
    >>> used.solver, used.iterations
    ('cg', 10)
    """
    return getattr(_last, "info", None)


def record(info: SolveInfo) -> SolveInfo:
    """Keep ``info`` as the last solve's (the solve ended); charge its time to the matrix
    when it ran unordered under ``reorder="auto"``."""
    if info._rent is not None:
        cache, started = info._rent
        cache.unordered_s += time.perf_counter() - started
    _last.info = info
    return info


def check_graphs(name: str, graphs) -> None:
    if not (graphs is True or graphs is False or graphs == "auto"):
        raise ValueError(f"{name}: graphs must be True, False or 'auto', got {graphs!r}")


def graph_refusal(graphs, on_device: bool, callback, M_capturable: bool) -> str | None:
    """Why iterations of this solve are not captured (None: capture them)."""
    if graphs is False:
        return "graphs=False"
    if not on_device:
        return (
            f"graphs {'asked for' if graphs is True else 'auto'}, but the solve runs on the "
            "host (numpy operands on the scipy backend): nothing to capture"
        )
    if _cuda.cupy_or_none() is None:
        return f"no GPU: {_cuda.unavailable_reason()}"
    if callback is not None:
        return "callback given: iterations run one at a time so that it sees every x"
    if not M_capturable:
        return (
            "the preconditioner M is not a sparsegpu matrix or multigrid hierarchy on the GPU "
            "(its products may allocate, which a graph cannot hold); pass M as a sparsegpu "
            "matrix (e.g. sg.diags(1 / d)) or sg.linalg.amg(A) to capture it"
        )
    return None


# why a built-in backend cannot be captured (measured on the H200, CuPy 14)
_WHY = {
    "cusparse": " (CuPy refuses cuSPARSE calls during stream capture)",
    "texture": " (a texture object per x buffer; waiting for the one it replaces is not "
    "allowed while capturing)",
}


def backend_refusal(operators) -> str | None:
    """Why the products of these operators (A, then M; None entries skipped) cannot go into
    a graph: a sparsegpu matrix planned on a backend that does not allow capture."""
    for what, operator in operators:
        if operator is None or operator.backend is None or operator.capturable:
            continue
        return f"{what}backend {operator.backend!r} cannot be captured" + _WHY.get(
            operator.backend, ""
        )
    return None


# ------------------------------------------------------------------ reordering
class Ordering:
    """A problem moved into a reordered space (or left as it is when ``perm`` is None)."""

    def __init__(self, perm):
        self.perm = perm
        self.inverse = None
        if perm is not None:
            self.inverse = np.empty_like(perm)
            self.inverse[perm] = np.arange(perm.shape[0])
        self._on_device = {}

    def forward(self, v):
        """``v[perm]``: a vector of the original numbering in the solved one."""
        if self.perm is None or v is None:
            return v
        on_device = _cuda.is_cupy_array(v)
        if not (on_device or isinstance(v, np.ndarray)):
            v = np.asarray(v)
        return v.ravel()[self._index("perm", on_device)].reshape(v.shape)

    def back(self, x):
        """x of the solved numbering in the original one (``out[perm] = x``)."""
        if self.perm is None:
            return x
        return x[self._index("inverse", _cuda.is_cupy_array(x))]

    def _index(self, which: str, on_device: bool):
        """``perm`` or ``inverse`` (``which``), a device copy of it (made once) for a vector
        on the device."""
        index = getattr(self, which)
        if not on_device:
            return index
        if which not in self._on_device:
            self._on_device[which] = _cuda.cupy_or_none().asarray(index)
        return self._on_device[which]

    def callback(self, callback):
        """The user's callback seeing x in the original numbering."""
        if callback is None or self.perm is None:
            return callback
        return lambda x: callback(self.back(x))

    def operator(self, M):
        """The preconditioner ``P M P^T`` in the solved numbering."""
        if self.perm is None or M is None:
            return M
        if isinstance(M, _SparseGPUMixin) or sp.issparse(M):
            return _reorder.permute(M, self.perm)
        import scipy.sparse.linalg as spl  # here: it imports scipy.linalg (0.1 s)

        M = spl.aslinearoperator(M)
        return spl.LinearOperator(
            M.shape, matvec=lambda v: self.forward(M.matvec(self.back(v.ravel()))), dtype=M.dtype
        )


def spread(A) -> float:
    """The column-spread statistic ``explain`` uses (``RowLengthStats``), computed from A's
    host arrays: no device mirror is made for it (a solve in another dtype would make a
    second one). Kept on the matrix (dropped when it changes): one pass over the indices a
    matrix, not one a solve."""
    cache = A._sg_cache_dict()
    if cache.column_spread is None:
        stats = RowLengthStats.from_indptr(A.indptr, A.shape[1], np, indices=A.indices)
        cache.column_spread = float(stats.column_spread)
    return cache.column_spread


def choose_ordering(name: str, A, reorder, info: SolveInfo):
    """(matrix to solve with, Ordering), recording the choice in ``info``."""
    if reorder not in REORDERS:
        raise ValueError(f"{name}: reorder must be 'rcm', 'auto' or None, got {reorder!r}")
    if reorder is None:
        return A, Ordering(None)
    if not isinstance(A, _SparseGPUMixin):
        if reorder == "rcm":
            raise TypeError(
                f"{name}: reorder='rcm' needs A as a sparsegpu matrix (its pattern is "
                f"permuted), got {type(A).__name__}; pass sg.csr_matrix(A) or reorder=None"
            )
        info.reorder_reason = f"auto: A is a {type(A).__name__}, not a sparsegpu matrix"
        return A, Ordering(None)
    if A.shape[0] != A.shape[1]:
        info.reorder_reason = f"{reorder}: A is not square {A.shape}; left as it is"
        return A, Ordering(None)
    if reorder == "auto":
        column_spread = spread(A)
        if column_spread <= SCATTERED_SPREAD:
            info.reorder_reason = (
                f"auto: column spread {column_spread:.3f} <= {SCATTERED_SPREAD:g} (x reads "
                "are already near the diagonal); not reordered"
            )
            return A, Ordering(None)
        if not _rents_long_enough(A, column_spread, info):
            return A, Ordering(None)
    else:
        info.reorder_reason = "rcm asked for"
    B, ordering = cached_rcm(A, symmetric=name in HERMITIAN_SOLVERS)
    info.reorder = "rcm"
    return B, ordering


#: The ordering's estimated cost in seconds per nonzero of A: reverse Cuthill-McKee on the
#: host and the permutation (on the GPU from 1M nonzeros). Fitted (least squares through
#: the origin) on an H100 machine's host (16 cores; the ordering is one), on randomly
#: numbered 3-D 7-point meshes of 60^3, 100^3 and 140^3 (1.5-19M nonzeros:
#: benchmarks/solver_graphs.py --sections reorder_rule, solver_graphs_reorder_rule_h100);
#: held out, a 200^3 mesh in another random order (56M nonzeros): 4.55 s estimated, 4.63 s
#: measured.
ORDERING_S_PER_NONZERO = 8.2e-8


def ordering_estimate_s(A) -> float:
    """The estimated cost of reordering ``A`` (:data:`ORDERING_S_PER_NONZERO`)."""
    return ORDERING_S_PER_NONZERO * A.nnz


def _rents_long_enough(A, column_spread: float, info: SolveInfo) -> bool:
    """``reorder="auto"``'s rule on a matrix whose columns are scattered (ski rental):
    reorder once the time already spent solving it unordered reaches the ordering's
    estimated cost; until then solve unordered and count this solve's time. Never more
    than about twice what the better choice in hindsight costs: a matrix solved once
    pays no ordering, a matrix solved many times pays it early."""
    cache = A._sg_cache_dict()
    spent, estimate = cache.unordered_s, ordering_estimate_s(A)
    info.unordered_s, info.ordering_estimate_s = spent, estimate
    scattered = (
        f"auto: column spread {column_spread:.3f} > {SCATTERED_SPREAD:g} (x reads are gathers)"
    )
    if ("rcm", A.backend) in cache.reorderings:
        info.reorder_reason = f"{scattered}; the ordering of an earlier solve is kept"
        return True
    if spent < estimate:
        info.reorder_reason = (
            f"{scattered}, but {spent:.3g} s spent solving A unordered < the ordering's "
            f"estimated {estimate:.3g} s: not reordered yet (reordered once the time "
            "spent unordered reaches the ordering's cost)"
        )
        info._rent = (cache, time.perf_counter())
        return False
    info.reorder_reason = (
        f"{scattered}, and {spent:.3g} s spent solving A unordered >= the ordering's "
        f"estimated {estimate:.3g} s: reordered by reverse Cuthill-McKee"
    )
    return True


#: Solvers whose A must be Hermitian: its pattern is symmetric, so the ordering need not
#: symmetrize it.
HERMITIAN_SOLVERS = ("cg", "minres")


def cached_rcm(A, symmetric: bool = False):
    """(B, :class:`Ordering`) of ``sg.reorder(A)``, kept beside A's mirrors (dropped with
    them when A changes), so that solves with several right-hand sides permute the matrix
    once. The Ordering is kept too: its inverse permutation and the device copies of both
    cost 0.35 s a solve on a 15.6M-row mesh when rebuilt (a third of the reordered solve,
    measured on the H200)."""
    kept = A._sg_cache_dict().reorderings
    entry = kept.get(("rcm", A.backend))
    if entry is None:
        B, perm = _reorder.reorder(A, "rcm", symmetric=symmetric)
        entry = kept[("rcm", A.backend)] = (B, Ordering(perm))
    return entry
