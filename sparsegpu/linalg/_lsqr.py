"""LSQR (Paige and Saunders) for least squares ``min ||A x - b||``, on the GPU for CuPy.

scipy's algorithm, arguments and 10-tuple result. The Golub-Kahan products run into
preallocated buffers (``A^H u`` on the transpose planned once), and scipy's scalar
recurrences and stopping tests run on the device (one thread, float64), so the host reads
the stop flag every 8 iterations, or between blocks of up to 16 replayed as CUDA graphs
(``graphs``), like :func:`sparsegpu.linalg.cg`; iterations after the stop change nothing.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from . import _options as options
from ._krylov import (
    CHECK_EVERY,
    GRAPH_BLOCK,
    _check_iterations,
    _graph_refusal,
    _iterate,
    _scalar,
    _set_up,
)
from ._vector import LSQR_STATE, recurrence_state, stop_flags


def lsqr(A, b, damp=0.0, atol=1e-6, btol=1e-6, conlim=1e8, iter_lim=None, show=False,
         calc_var=False, x0=None, *, graphs="auto", reorder=None):  # fmt: skip
    """Least squares ``min ||A x - b||^2 + damp^2 ||x - x0||^2`` by LSQR.

    Parameters
    ----------
    A : sparsegpu matrix, LinearOperator with rmatvec, or a matrix
        (m, n), any shape. A sparsegpu matrix's adjoint products run on the transpose
        built once on the device (``A.T``; complex: ``conj(A.T @ conj(u))``).
    b : numpy.ndarray or cupy.ndarray
        Shape (m,) or (m, 1).
    damp, atol, btol, conlim, iter_lim, calc_var, x0
        As ``scipy.sparse.linalg.lsqr`` (``iter_lim`` defaults to ``2 * n``).
    show : bool
        Accepted for scipy compatibility; nothing is printed.
    graphs, reorder
        As :func:`cg` (graphs also need the transpose on a backend a graph can hold);
        ``reorder`` applies to square A only (``last_solve_info()`` says what was done).

    Returns
    -------
    tuple
        ``(x, istop, itn, r1norm, r2norm, anorm, acond, arnorm, xnorm, var)`` as scipy
        returns them, with x and var in b's array module.
    """
    info_out = options.SolveInfo("lsqr")
    options.check_graphs("lsqr", graphs)
    set_up = _set_up(
        "lsqr", A, b, x0, None, None, reorder, info_out, graphs is not False, square=False
    )
    system, ops, A, _, _, ordering = set_up
    refusal = _graph_refusal(graphs, system, ops, None, A, None)
    if refusal is None:
        name, capturable = system.A.adjoint()
        adjoint = SimpleNamespace(backend=name, capturable=capturable)
        refusal = options.backend_refusal((("the transpose's ", adjoint),))
    info_out.graphs_reason = refusal or ""
    result = _lsqr(system, ops, damp, atol, btol, conlim, iter_lim, calc_var, refusal,
                   info_out)  # fmt: skip
    info_out.iterations = result[2]
    options.record(info_out)
    system.space.finish()
    return (ordering.back(result[0]), *result[1:-1], ordering.back(result[-1]))


def _lsqr(system, ops, damp, atol, btol, conlim, iter_lim, calc_var, refusal, info_out):
    xp, dtype = system.xp, system.dtype
    n = system.cols
    iter_lim = _check_iterations("lsqr", iter_lim, 2 * system.A.shape[1])
    real = np.dtype(dtype.char.lower())
    var = xp.zeros(n, dtype=real)
    eps = np.finfo(dtype).eps
    ctol = 1 / conlim if conlim > 0 else 0
    x = system.x
    bnorm = ops.norm(system.b)
    u = system.b - system.A.matvec(x) if system.x0_given else system.b.copy()
    beta = ops.norm(u) if system.x0_given else bnorm
    if beta > 0:
        u *= _scalar(1 / beta, dtype)
        v = system.A.rmatvec(u)
        alfa = ops.norm(v)
    else:
        v = x.copy()
        alfa = 0.0
    if alfa > 0:
        v *= _scalar(1 / alfa, dtype)
    if alfa * beta == 0:
        return (system.result(x), 0, 0, beta, beta, 0.0, 0.0, alfa * beta, 0.0,
                system.result(var))  # fmt: skip
    start = {"alfa": alfa, "beta": beta, "rhobar": alfa, "phibar": beta, "rnorm": beta,
             "r1norm": beta, "r2norm": beta, "arnorm": alfa * beta, "cs2": -1.0}  # fmt: skip
    limits = (float(damp), float(damp) ** 2, bnorm, float(atol), float(btol), float(ctol),
              float(eps), iter_lim)  # fmt: skip
    step = _LSQRStep(system, ops, u, v, var, start, limits, bool(calc_var))
    _iterate(step, iter_lim, CHECK_EVERY, GRAPH_BLOCK, None, refusal, info_out)
    state = {name: float(ops.to_host(a)) for name, a in step.state.items()}
    istop, itn = int(ops.to_host(step.istop)), int(ops.to_host(step.itn))
    return (system.result(x), istop, itn, state["r1norm"], state["r2norm"], state["anorm"],
            state["acond"], state["arnorm"], state["xnorm"], system.result(var))  # fmt: skip


class _LSQRStep:
    """One LSQR iteration (scipy's) on preallocated device buffers: the two products into
    buffers, scipy's recurrences and stopping tests on one thread (float64 0-d state),
    masked vector updates; ``active`` whether the next iteration runs. The same kernels
    with or without graphs."""

    def __init__(self, system, ops, u, v, var, start, limits, calc_var):
        xp, dtype = system.xp, system.dtype
        m, n = system.rows, system.cols
        self.system, self.ops, self.u, self.v, self.var = system, ops, u, v, var
        self.w = v.copy()
        self.av = xp.empty(m, dtype=dtype)
        self.atu = xp.empty(n, dtype=dtype)
        self.limits, self.calc_var = limits, calc_var
        self.state = recurrence_state(xp, LSQR_STATE, start)
        # the dots u . u, v . v and w . w (0-d arrays of the vectors' dtype)
        self.uu, self.vv, self.ww = (xp.zeros((), dtype=dtype) for _ in range(3))
        self.istop, self.active, self.itn = stop_flags(xp)
        self.stepped = xp.zeros((), dtype=bool)

    def full(self, first: bool):
        ops, A, S, active = self.ops, self.system.A, self.state, self.active
        u, v, w = self.u, self.v, self.w
        A.matvec(v, out=self.av)
        ops.lsqr_bidiag(self.av, S["alfa"], active, u)
        ops.vdot(u, u, out=self.uu)
        ops.lsqr_norm_u(self.uu, S, self.limits[1], active)
        ops.lsqr_scale(S["beta"], S["beta"], active, u)
        A.rmatvec(u, out=self.atu)
        ops.lsqr_adjoint(self.atu, S["beta"], active, v)
        ops.vdot(v, v, out=self.vv)
        ops.vdot(w, w, out=self.ww)
        ops.lsqr_recurrences(self.vv, self.ww, self.limits, S, self.istop, active,
                             self.stepped, self.itn)  # fmt: skip
        ops.lsqr_scale(S["alfa"], S["beta"], self.stepped, v)
        ops.lsqr_update(v, S, self.stepped, self.calc_var, w, self.system.x, self.var)

    def done(self) -> bool:
        return not bool(self.ops.to_host(self.active))
