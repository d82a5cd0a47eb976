"""``sparsegpu.linalg.amg``: a smoothed-aggregation hierarchy and its V-cycle."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from .. import _gmres, _krylov
from .. import _options as solve_options
from . import _options as options
from ._bridge import (
    canonical,
    csr_arrays,
    cupy_or_none,
    is_device_array,
    reducible,
    repeating,
    where_computes,
)
from ._cycle import Cycle, CycleOperator
from ._setup import (
    Clock,
    Level,
    check_values,
    coarse_inverse,
    coarsen,
    diagonal_of,
    estimate_rho,
    prepare_smoother,
    recompute,
)

DEFAULT_SMOOTHER = ("chebyshev", {"degree": 3, "lower_bound": 0.1})
ACCELERATORS = {
    "cg": _krylov.cg,
    "bicgstab": _krylov.bicgstab,
    "minres": _krylov.minres,
    "gmres": _gmres.gmres,
}


def _near_null_space(B, n: int, blocksize: int, xp, dtype):
    if B is None:
        if blocksize == 1:
            return xp.ones((n, 1), dtype=dtype)
        return xp.asarray(np.kron(np.ones((n // blocksize, 1)), np.eye(blocksize)), dtype=dtype)
    B = B.get() if is_device_array(B) else np.asarray(B)
    if B.ndim == 1:
        B = B.reshape(-1, 1)
    if B.ndim != 2 or B.shape[0] != n or not 1 <= B.shape[1] <= 64:
        raise ValueError(
            f"amg: B must have shape ({n}, k) with 1 <= k <= 64 (one row per unknown of A, "
            f"one column per near-null vector), got shape {B.shape}"
        )
    if not np.isfinite(B).all():
        raise ValueError("amg: B has non-finite values")
    if not np.abs(B).any(axis=0).all():
        raise ValueError(f"amg: B has a zero column ({int(np.argmin(np.abs(B).any(axis=0)))})")
    return xp.asarray(B, dtype=np.result_type(B.dtype, dtype))


def _square_input(A):
    blocksize = 1
    if sp.issparse(A) and A.format == "bsr":
        r, c = A.blocksize
        blocksize = r if r == c else 1
    if not sp.issparse(A):
        raise TypeError(
            f"amg: A must be a sparse matrix (sparsegpu or scipy) or a PyAMG "
            f"MultilevelSolver, got {type(A).__name__}"
        )
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"amg: A must be square, got shape {A.shape}")
    if A.shape[0] == 0:
        raise ValueError("amg: A is empty (0 x 0)")
    dtype = np.dtype(A.dtype)
    if dtype.kind not in "fc":
        dtype = np.dtype(np.float64)
    A = canonical(A.astype(dtype) if A.dtype != dtype else A)
    return A, blocksize


def amg(A, B=None, *, strength=("symmetric", {"theta": 0.0}), max_levels=10, max_coarse=1000,
        presmoother=DEFAULT_SMOOTHER, postsmoother=DEFAULT_SMOOTHER,
        smooth=("jacobi", {"omega": 4.0 / 3.0}), coarse_solver="auto", seed=0,
        **pyamg_options):  # fmt: skip
    """A smoothed-aggregation multigrid hierarchy of ``A``, set up where A computes.

    The set-up runs on the GPU for a sparsegpu matrix whose products run there (on the
    host with the scipy backend, where CI tests it): symmetric strength of connection,
    aggregates around a parallel distance-2 maximal independent set, a tentative
    prolongator from the near-null space ``B``, Jacobi-smoothed prolongation with a
    Lanczos estimate of ``rho(D^-1 A)``, Galerkin coarse operators through sparsegpu's
    SpGEMM, a dense inverse at the bottom. Options are PyAMG's
    (``pyamg.smoothed_aggregation_solver``) where the idea is the same.

    Parameters
    ----------
    A : sparsegpu or scipy sparse matrix, or pyamg.multilevel.MultilevelSolver
        Square, Hermitian positive definite for ``cg`` (smoothed aggregation's home). A
        BSR matrix with square blocks says how many unknowns a node has (elasticity: 2 or
        3), as in PyAMG. A PyAMG hierarchy is taken as it is: its A, P and R per level
        are moved onto sparsegpu matrices (the smoothers are this function's).
    B : array of shape (n, k), optional
        Near-null space (default: constant, or one constant per unknown of a block);
        rigid-body modes for elasticity.
    strength : 'symmetric', ('symmetric', {'theta': float}) or None
        Strength of connection (PyAMG's default ``theta = 0``: every entry is strong).
    max_levels : int
        At most this many levels (10).
    max_coarse : int
        Stop coarsening at this many rows (1000; PyAMG's is 10, but on a GPU a level of a
        few hundred rows costs its 16 launches a cycle, not arithmetic, and the dense solve
        is one product of n^2 entries: 8 MB at 1000 rows. On the fit instances of
        ``benchmarks.amg`` (H200) 1000 in place of 500 took the 600-650-row levels of the
        circuit and anisotropic problems as the coarsest, with the iterations unchanged
        and the solve 10-24% faster).
    presmoother, postsmoother : str or (str, dict)
        ``'chebyshev'`` (default, ``{'degree': 3, 'lower_bound': 0.1, 'upper_bound':
        1.1}`` of ``rho(D^-1 A)``; fitted on 2-D Poisson and rotated anisotropic diffusion
        of 200^2 against PyAMG's iterations), ``'jacobi'`` (``{'omega': 4/3, 'iterations': 1}``,
        weight ``omega / rho``) or ``'l1_jacobi'`` (``{'iterations': 1}``). PyAMG's
        default, symmetric Gauss-Seidel, is sequential and not offered.
    smooth : 'jacobi', ('jacobi', {'omega': float}) or None
        Prolongation smoothing, ``P = (I - omega / rho D^-1 A) T``; None keeps ``P = T``.
    coarse_solver : {'auto', 'cholesky', 'lu', 'splu', 'pinv'}
        The coarsest level's dense factorization (``'auto'``: Cholesky, LU if A is not
        positive definite; a singular level is an error unless ``'pinv'``).
    seed : int
        Seed of the aggregation's random priorities and the Lanczos start vector.

    Returns
    -------
    AMGHierarchy

    Raises
    ------
    ValueError
        A not square, B of the wrong shape, non-finite values, a zero diagonal entry, a
        singular coarsest level, an unknown option value (each message says which).

    Examples
    --------
    >>> import numpy as np, sparsegpu as sg
    >>> from sparsegpu.datasets.synthetic import stencil_2d
    >>> A = stencil_2d(64)
    >>> ml = sg.linalg.amg(A, max_coarse=50)
    >>> x, info = sg.linalg.cg(A, np.ones(A.shape[0]), rtol=1e-8, M=ml)
    >>> info, sg.linalg.last_solve_info().iterations < 20
    (0, True)
    """
    if type(A).__module__.startswith("pyamg") and hasattr(A, "levels"):
        from ._pyamg import levels_of

        if B is not None:
            raise ValueError("amg: B is not used with a PyAMG hierarchy (its P is kept)")
        options.refuse_pyamg_only(pyamg_options)
        return AMGHierarchy._from_levels(
            levels_of(A), options.smoothers(presmoother, postsmoother),
            options.coarse_solver(coarse_solver), seed,
        )  # fmt: skip
    options.refuse_pyamg_only(pyamg_options)
    settings = {
        "theta": options.strength_theta(strength),
        "max_levels": options.integer("max_levels", max_levels, 1),
        "max_coarse": options.integer("max_coarse", max_coarse, 1),
        "smoothers": options.smoothers(presmoother, postsmoother),
        "omega": options.smoothing_omega(smooth),
        "coarse_solver": options.coarse_solver(coarse_solver),
        "seed": options.integer("seed", seed, 0),
    }
    A, blocksize = _square_input(A)
    return AMGHierarchy._build(A, B, blocksize, settings)


class AMGHierarchy(spl.LinearOperator):
    """A multigrid hierarchy: a preconditioner (one V-cycle) and a solver.

    Made by :func:`amg`. ``ml @ r`` (``matvec``) applies one V-cycle from a zero guess,
    on NumPy or CuPy vectors; it is a ``scipy.sparse.linalg.LinearOperator``, so scipy's
    solvers take it as ``M=``, and sparsegpu's solvers (``cg``, ``gmres``, ``bicgstab``,
    ``minres``) run its cycle on the device, captured in their CUDA graphs.

    Attributes
    ----------
    levels : list of Level
        Finest first: ``A``, and ``P``, ``R`` to the next (sparsegpu matrices).
    setup_seconds : dict of str to float
        Seconds of the last set-up (or :meth:`update`) per phase.
    presmoother, postsmoother : (str, dict)
    """

    def __init__(self, levels, smoothers, coarse, xp, settings):
        self.levels = levels
        self.presmoother, self.postsmoother = smoothers
        self.coarse_inverse = coarse
        self.xp = xp
        self.settings = settings
        self.setup_seconds: dict[str, float] = {}
        self._cycles: dict = {}
        A = levels[0].A
        super().__init__(np.dtype(A.dtype), A.shape)

    # ------------------------------------------------------------------ set-up
    @classmethod
    def _build(cls, A, B, blocksize, settings):
        xp = where_computes(A)
        clock = Clock(xp)
        started = time.perf_counter()
        indptr, indices, data = csr_arrays(A, xp)
        check_values(data, xp, "A")
        level = Level(A=A, B=_near_null_space(B, A.shape[0], blocksize, xp, A.dtype),
                      blocksize=blocksize)  # fmt: skip
        if blocksize > 1 and A.shape[0] % blocksize:
            raise ValueError(f"amg: {A.shape[0]} rows are not a whole number of {blocksize}-blocks")
        levels = [level]
        diagonals = []
        seed = settings["seed"]
        while len(levels) < settings["max_levels"] and level.A.shape[0] > settings["max_coarse"]:
            made = coarsen(level, settings["theta"], settings["omega"], seed + len(levels),
                           clock, xp)  # fmt: skip
            if made is None:
                break
            coarse, d = made
            diagonals.append(d)
            levels.append(coarse)
            level = coarse
        hierarchy = cls(levels, settings["smoothers"], None, xp, settings)
        hierarchy._pattern = (indptr.copy(), indices.copy())
        hierarchy._finish(diagonals, clock, started)
        return hierarchy

    @classmethod
    def _from_levels(cls, levels, smoothers, solver, seed):
        A = levels[0].A
        xp = where_computes(A)
        clock = Clock(xp)
        started = time.perf_counter()
        settings = {"coarse_solver": solver, "seed": seed, "omega": None, "pyamg": True}
        hierarchy = cls(levels, smoothers, None, xp, settings)
        indptr, indices, _ = csr_arrays(A, xp)
        hierarchy._pattern = (indptr.copy(), indices.copy())
        diagonals = []
        for i, level in enumerate(levels[:-1]):
            d = diagonal_of(level.A, xp)
            level.rho = estimate_rho(level.A, d, xp, seed + i, level)
            diagonals.append(d)
        hierarchy._finish(diagonals, clock, started)
        return hierarchy

    def _finish(self, diagonals, clock, started) -> None:
        """Smoothers and the coarse solve; the set-up time recorded."""
        moment = time.perf_counter()
        for level, d in zip(self.levels[:-1], diagonals, strict=True):
            prepare_smoother(level, self.presmoother, self.postsmoother, d, self.xp)
        moment = clock.phase("smoothers", moment)
        self.coarse_inverse = coarse_inverse(
            self.levels[-1].A, self.settings["coarse_solver"], self.xp, self.coarse_inverse
        )
        clock.phase("coarse solve", moment)
        clock.phases["total"] = time.perf_counter() - started
        self.setup_seconds = clock.phases
        self._cycles.clear()

    def update(self, A):
        """Re-set-up for new values of A on the same sparsity pattern.

        Keeps the aggregates, the tentative prolongators (so P's pattern) and the
        products' plans; recomputes the spectral-radius estimates, P's values, the
        Galerkin operators, the smoothers and the coarse inverse (PETSc's
        ``PCSetReusePreconditioner`` off, ``SAME_NONZERO_PATTERN``). For a hierarchy
        taken from PyAMG, P and R are kept as they are and the coarse operators
        recomputed.

        The first update also plans its sparse products (cuSPARSE's value-only
        ``SpGEMMreuse`` timed against the rule's algorithm once for each pair of patterns),
        so it costs about a set-up; later ones compute values only. On the GPU the new
        values are written into the hierarchy's own matrices in place (``levels[i].P``,
        ``R`` and the coarse ``A``), keeping their products' plans; a matrix of the
        hierarchy whose host arrays you have read is replaced by a new one instead, so
        arrays you hold never change under you. Do not call it while a solve with this
        hierarchy runs in another thread.

        Parameters
        ----------
        A : sparse matrix
            The new matrix: same shape, same stored pattern as the set-up's.

        Returns
        -------
        self
        """
        A, _ = _square_input(A)
        clock = Clock(self.xp)
        started = time.perf_counter()
        self._check_pattern(A)
        self.levels[0].A = A
        diagonals = []
        with repeating():  # the products' patterns come again at every update: plan them now
            for i, (level, coarse) in enumerate(
                zip(self.levels[:-1], self.levels[1:], strict=False)
            ):
                seed = self.settings["seed"] + i + 1
                diagonals.append(
                    recompute(level, coarse, self.settings["omega"], seed, clock, self.xp)
                )
        self._finish(diagonals, clock, started)
        return self

    def _check_pattern(self, A) -> None:
        xp = self.xp
        shape = self.levels[0].A.shape
        if A.shape != shape:
            raise ValueError(
                f"update: A has shape {A.shape}, the hierarchy was set up for {shape}; make "
                "a new hierarchy with sparsegpu.linalg.amg(A) for another matrix"
            )
        indptr, indices, data = csr_arrays(A, xp)
        kept_indptr, kept_indices = self._pattern
        same = indices.shape == kept_indices.shape and bool(
            reducible(indptr == kept_indptr).all() and reducible(indices == kept_indices).all()
        )
        if not same:
            raise ValueError(
                f"update: A's sparsity pattern differs from the set-up's ({A.nnz} stored "
                f"entries, the set-up had {kept_indices.shape[0]}); update() keeps the "
                "aggregation and the products' plans and needs the same pattern: make a new "
                "hierarchy with sparsegpu.linalg.amg(A)"
            )
        check_values(data, xp, "A")

    # ------------------------------------------------------------------ cycle
    def _cycle(self, dtype, capturable: bool) -> Cycle:
        key = (np.dtype(dtype), bool(capturable))
        cycle = self._cycles.get(key)
        if cycle is None:
            cycle = self._cycles[key] = Cycle(self, dtype, capturable)
        return cycle

    def _solver_operator(self, b_dtype, b_xp, capturable: bool) -> CycleOperator:
        """The operator a sparsegpu solver applies as ``M`` (``linalg._operator``)."""
        dtype = np.result_type(self.dtype, b_dtype)
        return CycleOperator(self, self._cycle(dtype, capturable))

    @property
    def _sg_capturable(self) -> bool:
        """Whether a solver may capture the cycle into its graphs (it runs on the GPU)."""
        return self.xp is not np

    def matvec(self, x):
        """One V-cycle applied to ``x`` (NumPy or CuPy, shape (n,) or (n, 1)); the result
        in x's module and shape."""
        n = self.shape[0]
        if x.shape not in ((n,), (n, 1)):
            raise ValueError(f"the hierarchy is {n} x {n}; x has shape {x.shape}")
        cycle = self._cycle(np.result_type(self.dtype, x.dtype), False)
        xp = cycle.xp
        device = is_device_array(x)
        v = x.ravel()
        if xp is np and device:
            v = v.get()
        v = xp.ascontiguousarray(xp.asarray(v), dtype=cycle.dtype)
        y = cycle.apply(v, xp.empty(n, dtype=cycle.dtype))
        if device and xp is np:
            y = cupy_or_none().asarray(y)
        elif not device and xp is not np:
            y = y.get()
        return y.reshape(x.shape)

    _matvec = matvec
    rmatvec = _rmatvec = matvec  # the cycle is symmetric with symmetric smoothing

    def __matmul__(self, x):
        if hasattr(x, "shape") and len(x.shape) in (1, 2) and not sp.issparse(x):
            return self.matvec(x)
        return super().__matmul__(x)

    dot = __matmul__

    def aspreconditioner(self, cycle: str = "V"):
        """This hierarchy as a preconditioner (PyAMG's name); only the V-cycle."""
        if cycle != "V":
            raise ValueError(f"only cycle='V' is offered, got {cycle!r}")
        return self

    # ------------------------------------------------------------------ solve
    def solve(self, b, x0=None, rtol=1e-8, maxiter=None, accel="cg", residuals=None,
              callback=None, tol=None, graphs="auto"):  # fmt: skip
        """Solve ``A x = b`` preconditioned by this hierarchy (PyAMG's ``solve``).

        Parameters
        ----------
        b : array (NumPy or CuPy)
        x0 : array, optional
        rtol : float
            Stop at ``||b - A x|| <= rtol ||b||`` (``tol``: PyAMG's name, wins if given).
        maxiter : int, optional
            Iterations (Krylov) or cycles (``accel=None``, default 100).
        accel : {'cg', 'gmres', 'bicgstab', 'minres'} or None
            The Krylov method (sparsegpu's); None: stationary V-cycles.
        residuals : list, optional
            Filled with the residual norm of every iteration (the first is x0's). Asking
            for it computes a product per iteration and keeps the solver from capturing.
        callback : callable, optional
            ``callback(xk)`` after each iteration.
        graphs : True, False or "auto"
            Passed to the Krylov solver.

        Returns
        -------
        x : array
            In b's module. ``last_solve_info()`` (or ``self.last_solve_info``) says how.
        """
        rtol = rtol if tol is None else tol
        A = self.levels[0].A
        history = _History(A, b, residuals, callback)
        start = history.b_norm if x0 is None else float(_norm(b - A @ x0.reshape(b.shape)))
        history.record_norm(start)  # the first entry, x0's (the callback sees iterates only)
        if accel is None:
            return self._stationary(A, b, x0, rtol, maxiter, history)
        solver = ACCELERATORS.get(accel)
        if solver is None:
            raise ValueError(
                f"solve: accel must be one of {sorted(ACCELERATORS)} or None, got {accel!r}"
            )
        x, _ = solver(A, b, x0=x0, rtol=rtol, maxiter=maxiter, M=self,
                      callback=history.callback(), graphs=graphs)  # fmt: skip
        self.last_solve_info = solve_options.last_solve_info()
        return x

    def _stationary(self, A, b, x0, rtol, maxiter, history):
        xp = cupy_or_none() if is_device_array(b) else np
        x = (
            xp.zeros(b.shape, dtype=np.result_type(self.dtype, b.dtype))
            if x0 is None
            else x0.copy()
        )
        bound = rtol * history.b_norm
        for _ in range(100 if maxiter is None else maxiter):
            r = b - A @ x
            if float(xp.linalg.norm(r)) <= bound:
                break
            x += self.matvec(r)
            history.record(x)
        return x

    # ------------------------------------------------------------------ report
    def operator_complexity(self) -> float:
        """Stored entries of every level's matrix over the finest's (PyAMG's)."""
        return sum(level.A.nnz for level in self.levels) / self.levels[0].A.nnz

    def grid_complexity(self) -> float:
        """Rows of every level over the finest's (PyAMG's)."""
        return sum(level.A.shape[0] for level in self.levels) / self.levels[0].A.shape[0]

    def summary(self) -> str:
        """One line: levels, sizes, complexities, set-up time."""
        rows = [level.A.shape[0] for level in self.levels]
        return (
            f"AMGHierarchy: {len(rows)} levels, {rows[0]:,} -> {rows[-1]:,} rows, operator "
            f"complexity {self.operator_complexity():.3f}, grid complexity "
            f"{self.grid_complexity():.3f}, set-up {self.setup_seconds.get('total', 0):.3g} s"
        )

    def __repr__(self) -> str:
        total = sum(level.A.nnz for level in self.levels)
        where = "GPU" if self.xp is not np else "host"
        lines = [
            "AMGHierarchy (smoothed aggregation, sparsegpu)",
            f"Number of Levels:     {len(self.levels)}",
            f"Operator Complexity: {self.operator_complexity():6.3f}",
            f"Grid Complexity:     {self.grid_complexity():6.3f}",
            f"Coarse Solver:        '{self.settings['coarse_solver']}' (dense, on the {where})",
            f"Smoothers:            {self.presmoother[0]} / {self.postsmoother[0]}",
            "  level   unknowns     nonzeros",
        ]
        for i, level in enumerate(self.levels):
            share = 100 * level.A.nnz / total
            lines.append(f"{i:>7} {level.A.shape[0]:>10} {level.A.nnz:>12} [{share:.2f}%]")
        phases = ", ".join(f"{name} {s:.3g}" for name, s in self.setup_seconds.items())
        lines.append(f"Set-up seconds: {phases}")
        return "\n".join(lines) + "\n"

    __str__ = __repr__


class _History:
    """Residual norms of a solve (PyAMG's ``residuals=`` list)."""

    def __init__(self, A, b, residuals, callback):
        self.A, self.b, self.residuals, self.user = A, b, residuals, callback
        self.b_norm = float(_norm(b))

    def record_norm(self, value: float) -> None:
        if self.residuals is not None:
            self.residuals.append(value)

    def record(self, x) -> None:
        if self.residuals is not None:
            self.residuals.append(float(_norm(self.b - self.A @ x.reshape(self.b.shape))))
        if self.user is not None:
            self.user(x)

    def callback(self):
        if self.residuals is None and self.user is None:
            return None
        return self.record


def _norm(v):
    return cupy_or_none().linalg.norm(v) if is_device_array(v) else np.linalg.norm(v)


__all__ = ["AMGHierarchy", "amg"]
