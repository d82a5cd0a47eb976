"""The V-cycle: one application of a multigrid hierarchy as a preconditioner.

A :class:`Cycle` is made per (dtype, capturable) from a hierarchy: each level's products
bound once (``linalg._operator.as_operator``: the planned products the solvers use, among
the backends a CUDA graph can hold when ``capturable``) and every vector it needs
allocated, so that :meth:`Cycle.apply` launches products and fused elementwise steps on the
current stream and nothing else: no allocation, no host read, no branch on a device value.
A Krylov solver that captures its iterations captures the cycle with them.
"""

from __future__ import annotations

import numpy as np

from ._bridge import Operator, as_operator
from ._smoothing import Steps


class _LevelWork:
    """One level's bound products and buffers."""

    def __init__(self, level, dtype, xp, capturable, coarsest_inverse=None):
        n = level.A.shape[0]
        self.level = level
        self.A = as_operator(level.A, dtype, xp, capturable=capturable)
        self.P = self.R = None
        if level.P is not None:
            self.P = as_operator(level.P, dtype, xp, capturable=capturable)
            self.R = as_operator(level.R, dtype, xp, capturable=capturable)
        self.inverse = None
        if coarsest_inverse is not None:
            self.inverse = as_operator(coarsest_inverse, dtype, xp, capturable=capturable)
        self.b = xp.zeros(n, dtype=dtype)
        self.x = xp.zeros(n, dtype=dtype)
        self.ax = xp.zeros(n, dtype=dtype)
        self.d = xp.zeros(n, dtype=dtype)
        self.dinv = (
            xp.asarray(level.smoother_diagonal, dtype=dtype) if level.P is not None else None
        )

    def operators(self):
        return [op for op in (self.A, self.P, self.R, self.inverse) if op is not None]


class Cycle:
    """``x = V b``: one V-cycle from a zero guess (a fixed linear operator, symmetric when
    the pre- and post-smoothers are the same)."""

    def __init__(self, hierarchy, dtype, capturable: bool):
        xp = hierarchy.xp
        self.xp, self.dtype = xp, np.dtype(dtype)
        self.hierarchy = hierarchy
        levels = hierarchy.levels
        self.work = [
            _LevelWork(level, self.dtype, xp, capturable,
                       hierarchy.coarse_inverse if i == len(levels) - 1 else None)
            for i, level in enumerate(levels)
        ]  # fmt: skip
        self.steps = Steps(xp)
        # the first level product a graph cannot hold (its backend), or None
        self.refusal = next(
            (op.backend for work in self.work for op in work.operators()
             if op.backend is not None and not op.capturable),
            None,
        )  # fmt: skip
        self.capturable = capturable and xp is not np and self.refusal is None

    def apply(self, b, out):
        """``out = V b`` (``out`` and ``b`` contiguous vectors of the cycle's dtype)."""
        top = self.work[0]
        top_b, top_x = top.b, top.x
        top.b, top.x = b, out
        try:
            self._level(0)
        finally:
            top.b, top.x = top_b, top_x
        return out

    def _level(self, i: int) -> None:
        work = self.work[i]
        if work.inverse is not None:
            work.inverse.matvec(work.b, out=work.x)
            return
        self._smooth(work, self.hierarchy.presmoother, zero_start=True)
        work.A.matvec(work.x, out=work.ax)
        self.steps.residual(work.b, work.ax, work.d)
        below = self.work[i + 1]
        work.R.matvec(work.d, out=below.b)
        self._level(i + 1)
        work.P.matvec(below.x, out=work.ax)
        self.steps.add(work.ax, work.x)
        self._smooth(work, self.hierarchy.postsmoother, zero_start=False)

    def _smooth(self, work, smoother, zero_start: bool) -> None:
        name, options = smoother
        steps, level = self.steps, work.level
        if name in ("jacobi", "l1_jacobi"):
            weight = level.jacobi_weight if name == "jacobi" else 1.0
            for k in range(options["iterations"]):
                if zero_start and k == 0:
                    steps.scaled(work.b, work.dinv, weight, work.x)
                    continue
                work.A.matvec(work.x, out=work.ax)
                steps.jacobi(work.b, work.ax, work.dinv, weight, work.x)
            return
        for k, (a, c) in enumerate(level.chebyshev):
            if zero_start and k == 0:
                steps.chebyshev_start(work.b, work.dinv, c, work.d, work.x)
                continue
            work.A.matvec(work.x, out=work.ax)
            steps.chebyshev(work.b, work.ax, work.dinv, a, c, work.d, work.x)


class CycleOperator(Operator):
    """The solvers' operator of a hierarchy (``linalg._operator.Operator``): ``matvec`` runs
    one V-cycle on arrays of the hierarchy's module; ``describe`` says what a solve did
    with it (``SolveInfo.preconditioner``)."""

    def __init__(self, hierarchy, cycle: Cycle):
        def matvec(x, out):
            if out is None:
                out = cycle.xp.empty(hierarchy.shape[0], dtype=cycle.dtype)
            if x.dtype != cycle.dtype or not x.flags.c_contiguous:
                x = cycle.xp.ascontiguousarray(x, dtype=cycle.dtype)
            return cycle.apply(x, out)

        # a level planned on a backend a graph cannot hold is named as the solvers name
        # their own (``_options.backend_refusal``)
        super().__init__(hierarchy.shape, cycle.dtype, cycle.xp, matvec, matvec,
                         backend=cycle.refusal, capturable=cycle.capturable)  # fmt: skip
        self.hierarchy, self.cycle = hierarchy, cycle

    def describe(self, captured: bool) -> str:
        where = (
            "its V-cycle ran inside the solver's CUDA graphs"
            if captured
            else "its V-cycle ran uncaptured"
            + (f" (backend {self.cycle.refusal!r} of a level)" if self.cycle.refusal else "")
        )
        return f"{self.hierarchy.summary()}; {where}"
