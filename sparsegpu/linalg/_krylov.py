"""Krylov solvers for square systems: ``cg``, ``bicgstab``, ``gmres``, ``minres``.

scipy's signatures and conventions (``x, info``; ``rtol``, ``atol``: stop when
``||b - A x|| <= max(atol, rtol ||b||)``; ``x0``; ``maxiter``; ``M`` approximating
``inv(A)``; ``callback(xk)``), computed in the array module of the operator: CuPy arrays
in, CuPy arrays out, and the iteration never leaves the GPU.

Host synchronisation (the choice, per solver)
---------------------------------------------
* ``cg``, ``bicgstab`` and ``minres`` keep every scalar on the device (fused kernels and
  the two-pass dot, see ``_vector``): the convergence, breakdown and stopping tests set a
  device flag every iteration, and the host reads it (one scalar transfer) every
  ``check_every`` iterations (cg: default 8; the others 8; 1 with a callback), or between
  blocks of iterations replayed as CUDA graphs (``graphs``, ``_graphs``). An iteration
  that finds the solve stopped changes nothing (masked updates), so the answer, ``info``
  and the iteration count are those of scipy's iteration, with or without graphs.
* ``gmres`` (``_gmres``) keeps its Hessenberg least-squares problem on the device too and
  reads its state once per restart cycle; a whole cycle is captured as one graph.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np

from . import _graphs
from . import _options as options
from ._space import space_of
from ._vector import MINRES_ROTATE_STATE, VectorOps, recurrence_state, stop_flags


def _check_iterations(name: str, maxiter, default: int) -> int:
    if maxiter is None:
        return default
    if isinstance(maxiter, bool) or not isinstance(maxiter, (int, np.integer)) or maxiter < 0:
        raise ValueError(f"{name}: maxiter must be a non-negative integer, got {maxiter!r}")
    return int(maxiter)


def _check_tolerances(name: str, rtol, atol) -> None:
    for label, value in (("rtol", rtol), ("atol", atol)):
        if not np.isscalar(value) or not np.isfinite(value) or value < 0:
            raise ValueError(f"{name}: {label} must be a finite number >= 0, got {value!r}")


def _zero_rhs(system, ordering, info_out):
    """``(x, 0)`` for ``b = 0``: x = 0 (b itself, in its module), no iteration."""
    info_out.iterations = 0
    return _finish(system, ordering, info_out, system.b, 0)


def _finish(system, ordering, info_out, x, info):
    """``(x, info)`` in the caller's numbering and module, the solve recorded (and, in a
    distributed space, its end agreed on by every rank)."""
    describe = getattr(system.M, "describe", None)
    if callable(describe):  # a multigrid hierarchy says what it was and how it ran
        info_out.preconditioner = describe(info_out.graphs)
    options.record(info_out)
    system.space.finish()
    return ordering.back(system.result(x)), info


class SetUp(NamedTuple):
    """What a solve starts from (:func:`_set_up`): its system in the ordering asked for."""

    system: Any  # A x = b in A's vector space (``_space``)
    ops: VectorOps  # its vector steps
    A: Any  # A and M as reordered: what a graph capture is asked of
    M: Any
    callback: Any  # the user's callback, seeing x in the original numbering
    ordering: options.Ordering  # ``ordering.back`` brings the answer home


def _set_up(name, A, b, x0, M, callback, reorder, info_out, capturable, square=True) -> SetUp:
    """The solve's system in the ordering ``reorder`` asks for, in A's vector space, with
    its vector steps: b goes down once, reordered, into the space's system."""
    A, ordering = space_of(A).ordering(name, A, reorder, info_out)
    b, x0 = ordering.forward(b), ordering.forward(x0)
    M, callback = ordering.operator(M), ordering.callback(callback)
    system = space_of(A).system(name, A, b, x0, M, square, capturable)
    ops = VectorOps(system.xp, system.dtype, system.space)
    return SetUp(system, ops, A, M, callback, ordering)


def _start(name, A, b, x0, M, callback, reorder, info_out, rtol, atol, capturable=False):
    """``(set_up, ||b||, tolerance, r)``: the tolerances checked, the :func:`_set_up`, the
    stopping tolerance and the first residual."""
    _check_tolerances(name, rtol, atol)
    set_up = _set_up(name, A, b, x0, M, callback, reorder, info_out, capturable)
    system, ops = set_up.system, set_up.ops
    bnorm = ops.norm(system.b)
    if system.x0_given:
        r = system.b - system.A.matvec(system.x)
    else:
        r = system.b.copy()
    return set_up, bnorm, max(float(atol), float(rtol) * bnorm), r


def _begin(name, A, b, x0, M, callback, reorder, rtol, atol, graphs, maxiter):
    """What ``cg`` and ``bicgstab`` begin with: ``(info_out, set_up, ||b||, tolerance, r,
    maxiter)``, the ``graphs`` option checked, :func:`_start` asked for a system a graph
    may capture (no callback), the iteration limit checked (default ``10 n``)."""
    info_out = options.SolveInfo(name)
    options.check_graphs(name, graphs)
    wanted = graphs is not False and callback is None
    set_up, bnorm, tolerance, r = _start(
        name, A, b, x0, M, callback, reorder, info_out, rtol, atol, wanted
    )
    maxiter = _check_iterations(name, maxiter, 10 * set_up.system.A.shape[0])
    return info_out, set_up, bnorm, tolerance, r, maxiter


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
       check_every=None, graphs="auto", reorder=None):  # fmt: skip
    """Conjugate gradients for a Hermitian positive definite ``A``, on the GPU for CuPy.

    Parameters
    ----------
    A : sparsegpu matrix, LinearOperator, or anything with ``matvec`` or ``@``
        The (n, n) matrix. A sparsegpu matrix runs on the plan the dispatcher picks
        (``A.backend``, ``use_backend``, ...), chosen once per call.
    b : numpy.ndarray or cupy.ndarray
        Right-hand side, shape (n,) or (n, 1).
    x0 : array, optional
        Starting guess (default zeros).
    rtol, atol : float
        Stop when ``||b - A x|| < max(atol, rtol * ||b||)``.
    maxiter : int, optional
        Iteration limit (default ``10 * n``).
    M : matrix or operator, optional
        Preconditioner approximating ``inv(A)`` (Hermitian positive definite).
    callback : callable, optional
        ``callback(xk)`` after every iteration (forces a convergence check each iteration).
    check_every : int, optional
        Read the device-side convergence flag every this many iterations (default 8, or
        1 with a callback; with graphs, the iterations a captured block holds, default up
        to 16, fewer where an iteration is long: see ``docs/solvers.rst``). Larger values
        synchronise less; the answer does not change.
    graphs : True, False or "auto"
        Capture blocks of iterations as CUDA graphs and replay them (default "auto": on a
        GPU, A and M sparsegpu matrices, no callback). Same kernels, same answer, same
        iteration count; ``last_solve_info()`` says whether it happened and why not.
    reorder : "rcm", "auto" or None
        Solve in a reverse Cuthill-McKee ordering of A (``"auto"``: when A's column
        spread says its x reads are gathers); b, x0 and M are permuted alike and x comes
        back in the original numbering. Default None.

    Returns
    -------
    x : array
        The solution, shape (n,), in b's array module.
    info : int
        0 when converged, else the iteration limit reached (scipy's convention).

    Examples
    --------
    >>> import numpy as np, sparsegpu as sg
    >>> from sparsegpu.datasets.synthetic import stencil_2d
    >>> A = stencil_2d(20)
    >>> b = np.ones(A.shape[0])
    >>> x, info = sg.linalg.cg(A, b, rtol=1e-10)
    >>> info, bool(np.linalg.norm(A @ x - b) <= 1e-10 * np.linalg.norm(b))
    (0, True)
    """
    info_out, set_up, bnorm, tolerance, r, maxiter = _begin(
        "cg", A, b, x0, M, callback, reorder, rtol, atol, graphs, maxiter
    )
    system, ops, A, M, callback, ordering = set_up
    every = 1 if callback is not None else 8
    if check_every is not None:
        if isinstance(check_every, bool) or not isinstance(check_every, (int, np.integer)):
            raise ValueError(f"cg: check_every must be a positive integer, got {check_every!r}")
        if check_every < 1:
            raise ValueError(f"cg: check_every must be a positive integer, got {check_every!r}")
        every = int(check_every)
    refusal = _graph_refusal(graphs, system, ops, callback, A, M)
    info_out.graphs_reason = refusal or ""
    if bnorm == 0:
        return _zero_rhs(system, ordering, info_out)
    step = _CGStep(system, ops, r, tolerance)
    callback = system.wrap_callback(callback)
    if refusal is None:
        with _graphs.private_stream() as stream:
            k = _blocks(step, maxiter, every if check_every is not None else GRAPH_BLOCK,
                        stream, info_out, adapt=check_every is None)  # fmt: skip
            if k is not None:
                _cg_plain(step, k, maxiter, every, callback)
    else:
        _cg_plain(step, 0, maxiter, every, callback)
    converged, count = ops.to_host(step.converged), ops.to_host(step.count)
    info_out.iterations = int(count)
    return _finish(system, ordering, info_out, system.x, 0 if bool(converged) else maxiter)


def _graph_refusal(graphs, system, ops, callback, A, M) -> str | None:
    """Why this solve's iterations are not captured (None: capture them): the options, A
    and M not matrices of the space (sparsegpu's), the space's own reason (a distributed
    transport that waits on the host), or a backend a graph cannot hold (cuSPARSE)."""
    space = system.space
    M_captures = system.M is None or (space.captures(M) and system.M.xp is system.xp)
    return (
        options.graph_refusal(graphs, ops.on_device, callback, M_captures)
        or space.capture_refusal(A)
        or options.backend_refusal((("", system.A), ("the preconditioner's ", system.M)))
    )


class _CGStep:
    """One CG iteration on preallocated device buffers: ``top`` (r.r and the convergence
    flag), then ``rest`` (direction, product, update); the same kernels with or without
    graphs, so the arithmetic and the iteration count are the same."""

    def __init__(self, system, ops, r, tolerance):
        xp, dtype, n = system.xp, system.dtype, system.rows
        self.system, self.ops, self.r, self.tolerance = system, ops, r, tolerance
        self.p = xp.zeros(n, dtype=dtype)
        self.q = xp.empty(n, dtype=dtype)
        self.z = r if system.M is None else xp.empty(n, dtype=dtype)
        self.rr = xp.zeros((), dtype=dtype)
        self.rho = self.rr if system.M is None else xp.zeros((), dtype=dtype)
        self.pq = xp.zeros((), dtype=dtype)
        self.rho_prev = xp.zeros((), dtype=dtype)
        self.active = xp.zeros((), dtype=bool)
        self.converged = xp.zeros((), dtype=bool)
        self.count = xp.zeros((), dtype=np.int64)

    def top(self):
        self.ops.vdot(self.r, self.r, out=self.rr)
        self.ops.cg_check(self.rr, self.tolerance, self.active, self.converged)

    def rest(self, first: bool):
        ops, system = self.ops, self.system
        if system.M is not None:
            if system.M.xp is system.xp:
                system.M.matvec(self.r, out=self.z)
            else:
                self.z[...] = system.precondition(self.r)
            ops.vdot(self.r, self.z, out=self.rho)
        ops.cg_direction(self.z, self.rho, self.rho_prev, self.active, first, self.p)
        system.A.matvec(self.p, out=self.q)
        ops.vdot(self.p, self.q, out=self.pq)
        ops.cg_update(self.p, self.q, self.rho, self.pq, self.active, system.x, self.r)
        ops.keep(self.rho, self.active, self.rho_prev, self.count)

    def full(self, first: bool = False):
        self.top()
        self.rest(first)

    def done(self) -> bool:
        return bool(self.ops.to_host(self.converged))


def _cg_plain(step, start, maxiter, every, callback) -> None:
    """Iterations ``start`` to ``maxiter``, launched one by one; the flag read every
    ``every``."""
    for k in range(start, maxiter):
        step.top()
        if k % every == 0 and step.done():
            return
        step.rest(k == 0)
        if callback is not None:
            callback(step.system.x)


def _iterate(step, maxiter, every, block, callback, refusal, info_out) -> None:
    """Run ``step.full(first)`` up to ``maxiter`` times, stopping once ``step.done()``:
    blocks of ``block`` iterations replayed as CUDA graphs when ``refusal`` is None (the
    reason recorded either way), else launched one by one with the flag read every
    ``every`` iterations (every iteration with a callback, called after each iteration
    that did not stop the solve, and after the one that did where the step's
    ``calls_back_last()`` says so: minres). A step's iterations after it stopped change
    nothing."""
    info_out.graphs_reason = refusal or ""
    if refusal is None:
        with _graphs.private_stream() as stream:
            k = _blocks(step, maxiter, block, stream, info_out)
            if k is not None:
                _plain(step, k, maxiter, every, None)
    else:
        _plain(step, 0, maxiter, every, callback)


def _plain(step, start, maxiter, every, callback) -> None:
    last = getattr(step, "calls_back_last", lambda: False)
    for k in range(start, maxiter):
        step.full(k == 0)
        stop = (callback is not None or (k + 1) % every == 0) and step.done()
        if callback is not None and (not stop or last()):
            callback(step.system.x)
        if stop:
            return


def _blocks(step, maxiter, block, stream, info_out, adapt: bool = True):
    """Iteration 0 plain (it warms the plans and compiles the kernels on ``stream``), then
    blocks of ``block`` iterations replayed as one graph, the flag read between blocks.
    With ``adapt``, iteration 1 runs plain too and its time sets the block
    (:func:`block_size`: fewer iterations a block when each is long). Returns None when
    done, else the iteration the plain loop goes on from (a capture failed, or fewer than
    ``block`` iterations are left)."""
    if maxiter == 0:
        return None
    step.full(True)
    if step.done():
        return None
    k = 1
    period = getattr(step, "period", 1)
    if adapt and maxiter - 2 >= period:  # a block still fits after the timed iteration
        started = time.perf_counter()
        step.full(False)
        if step.done():  # a host read: the iteration's time is all in
            return None
        k = 2
        seconds = time.perf_counter() - started
        block = step.system.space.agree_block(block_size(seconds, block, period))
    block = min(block, maxiter - k)
    block -= block % period
    if block < 1:
        info_out.graphs_reason = f"maxiter={maxiter}: too few iterations to capture"
        return k
    turn = getattr(step, "turn", None)
    captured = _graphs.Block(lambda: step.full(False), block, stream)
    if turn is not None:  # the capture ran no iteration: the buffers are where they were
        step.turn = turn
    failure = step.system.space.agree(captured.failure)
    if failure is not None:
        info_out.graphs_reason = failure
        return k
    info_out.graphs, info_out.block = True, block
    info_out.graphs_reason = f"captured {block} iterations a block"
    while maxiter - k >= block:
        captured.launch()
        k += block
        if step.done():
            return None
    return k


GRAPH_BLOCK = 16  # iterations a captured block holds at most (cg's default too)
CHECK_EVERY = 8  # iterations between flag reads without graphs
#: Host seconds of plain iterations a captured block is sized to: a block's capture costs
#: its iterations' host time once a solve, and a solve runs on up to a block's iterations
#: past its stop. With a multigrid cycle as M (0.75 ms of host time an iteration at 1.6M
#: unknowns) 16 iterations a block were 12 ms of capture and 8 iterations, about 5 ms,
#: past the stop on average, a quarter of the solve (benchmarks.experiments.
#: amg_cycle_profile); iterations of 0.125 ms or less keep all 16, where the flag read
#: between blocks (tens of microseconds) would otherwise show.
BLOCK_SECONDS = 2e-3


def block_size(seconds: float, most: int = GRAPH_BLOCK, period: int = 1) -> int:
    """Iterations a captured block holds, given one plain iteration's ``seconds``: about
    :data:`BLOCK_SECONDS` of them, at least ``period`` (a multiple of it) and at most
    ``most``."""
    fit = most if seconds * most <= BLOCK_SECONDS else int(BLOCK_SECONDS / seconds)
    fit = max(period, min(most, fit))
    return fit - fit % period


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
             graphs="auto", reorder=None):  # fmt: skip
    """BiCGSTAB for a general square ``A`` (scipy's algorithm and breakdown codes).

    Parameters and returns as :func:`cg` (without ``check_every``); ``info`` is 0 when
    converged, the iteration limit when not, -10 or -11 on a breakdown (``rho`` or
    ``omega`` vanished), as scipy reports them. Every scalar stays on the device (the
    breakdown and convergence tests set a device status that the host reads every 8
    iterations, or between captured blocks of up to 16 with ``graphs``; iterations after the
    solve stopped change nothing), so ``graphs`` captures it as it does :func:`cg`.
    """
    info_out, set_up, bnorm, tolerance, r, maxiter = _begin(
        "bicgstab", A, b, x0, M, callback, reorder, rtol, atol, graphs, maxiter
    )
    system, ops, A, M, callback, ordering = set_up
    refusal = _graph_refusal(graphs, system, ops, callback, A, M)
    info_out.graphs_reason = refusal or ""
    if bnorm == 0:
        return _zero_rhs(system, ordering, info_out)
    step = _BiCGStabStep(system, ops, r, tolerance)
    _iterate(step, maxiter, 1 if callback is not None else CHECK_EVERY, GRAPH_BLOCK,
             system.wrap_callback(callback), refusal, info_out)  # fmt: skip
    status, count = ops.to_host(step.status), ops.to_host(step.count)
    info_out.iterations = int(count)
    status = int(status)
    info = 0 if status == 1 else (maxiter if status == 0 else status)
    return _finish(system, ordering, info_out, system.x, info)


class _BiCGStabStep:
    """One BiCGSTAB iteration (scipy's) on preallocated device buffers, every scalar a 0-d
    array: ``status`` is 0 while running, 1 converged, -10 or -11 on a breakdown (then no
    later iteration changes x or r). The same kernels with or without graphs."""

    def __init__(self, system, ops, r, tolerance):
        xp, dtype, n = system.xp, system.dtype, system.rows
        self.system, self.ops, self.r, self.tolerance = system, ops, r, tolerance
        eps = float(np.finfo(dtype).eps)
        self.rhotol = self.omegatol = eps**2
        self.rtilde = r.copy()
        self.p = xp.zeros(n, dtype=dtype)
        self.v = xp.zeros(n, dtype=dtype)
        self.t = xp.zeros(n, dtype=dtype)
        self.phat = self.p if system.M is None else xp.zeros(n, dtype=dtype)
        self.shat = r if system.M is None else xp.zeros(n, dtype=dtype)
        for name in ("rho", "rr", "rho_prev", "alpha", "omega", "rv", "ss", "tr", "tt"):
            setattr(self, name, xp.zeros((), dtype=dtype))
        self.status = xp.zeros((), dtype=np.int32)
        self.active = xp.zeros((), dtype=bool)
        self.stepped = xp.zeros((), dtype=bool)
        self.going = xp.zeros((), dtype=bool)
        self.count = xp.zeros((), dtype=np.int64)

    def _precondition(self, v, out):
        system = self.system
        if out is v:  # no preconditioner: phat is p, shat is r
            return
        if system.M.xp is system.xp:
            system.M.matvec(v, out=out)
        else:
            out[...] = system.precondition(v)

    def full(self, first: bool):
        ops, A, r, x = self.ops, self.system.A, self.r, self.system.x
        ops.vdot(self.rtilde, r, out=self.rho)
        ops.vdot(r, r, out=self.rr)
        ops.bicg_check(self.rr, self.rho, self.omega, self.tolerance, self.rhotol,
                       self.omegatol, first, self.status, self.active)  # fmt: skip
        ops.bicg_direction(r, self.v, self.rho, self.rho_prev, self.alpha, self.omega,
                           self.active, first, self.p)  # fmt: skip
        self._precondition(self.p, self.phat)
        A.matvec(self.phat, out=self.v)
        ops.vdot(self.rtilde, self.v, out=self.rv)
        ops.bicg_alpha(self.rho, self.rv, self.active, self.alpha)
        ops.masked_axpy(self.alpha, self.v, self.active, True, r)  # s = r - alpha v
        ops.vdot(r, r, out=self.ss)
        ops.bicg_middle(self.rv, self.ss, self.tolerance, self.active, self.status,
                        self.stepped, self.going)  # fmt: skip
        ops.masked_axpy(self.alpha, self.phat, self.stepped, False, x)
        self._precondition(r, self.shat)
        A.matvec(self.shat, out=self.t)
        ops.vdot(self.t, r, out=self.tr)
        ops.vdot(self.t, self.t, out=self.tt)
        ops.bicg_omega(self.tr, self.tt, self.rho, self.going, self.stepped, self.omega,
                       self.rho_prev, self.count)  # fmt: skip
        ops.masked_axpy(self.omega, self.shat, self.going, False, x)
        ops.masked_axpy(self.omega, self.t, self.going, True, r)

    def done(self) -> bool:
        return bool(self.ops.to_host(self.status) != 0)


def _scalar(value, dtype):
    """A host scalar in the solver's dtype (real part only for real dtypes)."""
    dtype = np.dtype(dtype)
    return dtype.type(value if dtype.kind == "c" else complex(value).real)


def minres(A, b, x0=None, *, shift=0.0, rtol=1e-5, maxiter=None, M=None, callback=None,
           graphs="auto", reorder=None):  # fmt: skip
    """MINRES for a Hermitian (possibly indefinite) ``A`` (scipy's algorithm).

    Solves ``(A - shift I) x = b``. Parameters as :func:`cg` (``M`` Hermitian positive
    definite); ``maxiter`` defaults to ``5 * n``. Returns ``x, info`` with scipy's
    ``info``: 0 converged, the iteration limit when it was reached.

    scipy's scalar recurrences and stopping tests run on the device (one thread), so the
    host reads the stop flag every 8 iterations, or between captured blocks of 15 with
    ``graphs`` (as :func:`cg`); iterations after the stop change nothing. ``reorder`` as
    :func:`cg`.
    """
    info_out = options.SolveInfo("minres")
    options.check_graphs("minres", graphs)
    _check_tolerances("minres", rtol, 0.0)
    wanted = graphs is not False and callback is None
    set_up = _set_up("minres", A, b, x0, M, callback, reorder, info_out, wanted)
    system, ops, A, M, callback, ordering = set_up
    maxiter = _check_iterations("minres", maxiter, 5 * system.A.shape[0])
    info_out.graphs_reason = _graph_refusal(graphs, system, ops, callback, A, M) or ""
    x, info = _minres(system, ops, shift, rtol, maxiter, system.wrap_callback(callback),
                      info_out)  # fmt: skip
    return _finish(system, ordering, info_out, x, info)


def _minres(system, ops, shift, rtol, maxiter, callback, info_out):
    x = system.x
    r1 = system.b - system.A.matvec(x) if system.x0_given else system.b.copy()
    y = system.precondition(r1)
    beta1 = float(ops.to_host(ops.vdot(r1, y)).real)
    if beta1 < 0:
        raise ValueError("minres: the preconditioner M is not positive definite")
    info_out.iterations = 0
    if beta1 == 0:
        return x, 0
    bnorm = ops.norm(system.b)
    if bnorm == 0:
        return system.b, 0
    step = _MinresStep(system, ops, r1, y, np.sqrt(beta1), shift, rtol, maxiter)
    refusal = info_out.graphs_reason or None
    _iterate(step, maxiter, 1 if callback is not None else CHECK_EVERY, GRAPH_BLOCK, callback,
             refusal, info_out)  # fmt: skip
    istop, error, itn = (ops.to_host(a) for a in (step.istop, step.error, step.itn))
    if bool(error):
        raise ValueError("minres: A (or M) does not define a Hermitian matrix")
    info_out.iterations = int(itn)
    return x, maxiter if int(istop) == 6 else 0


class _MinresStep:
    """One MINRES iteration (scipy's) on preallocated device buffers: the Lanczos vectors
    r1, r2 and the next one rotate through three buffers, as do w, w1 and w2 (``turn``
    counts iterations; a captured block holds a multiple of ``period`` of them, so every
    replay starts in the layout its capture did); the scalars are float64 0-d arrays
    updated on the device, ``istop`` scipy's stop code and ``active`` whether the next
    iteration runs."""

    period = 3

    def __init__(self, system, ops, r, y, beta1, shift, rtol, maxiter):
        xp, dtype, n = system.xp, system.dtype, system.rows
        self.system, self.ops = system, ops
        self.eps = float(np.finfo(dtype).eps)
        self.beta1, self.rtol, self.maxiter = float(beta1), float(rtol), int(maxiter)
        self.shift = _scalar(shift, dtype)
        self.turn = 0
        # r1 (its content unused by the first iteration), r2 = r, the next
        self.r = [xp.zeros(n, dtype=dtype), r, xp.empty(n, dtype=dtype)]
        self.y = None if system.M is None else xp.asarray(y, dtype=dtype).copy()
        self.w = [xp.zeros(n, dtype=dtype) for _ in range(3)]
        self.v = xp.empty(n, dtype=dtype)
        start = {"beta": beta1, "phibar": beta1, "rhs1": beta1, "cs": -1.0,
                 "gmin": float(np.finfo(dtype).max)}  # fmt: skip
        self.state = recurrence_state(xp, MINRES_ROTATE_STATE, start)
        # the dots v . y, r . y and x . x (0-d arrays of the vectors' dtype)
        self.vy, self.ry, self.xx = (xp.zeros((), dtype=dtype) for _ in range(3))
        self.istop, self.active, self.itn = stop_flags(xp)
        self.error = xp.zeros((), dtype=bool)

    def full(self, first: bool):
        ops, system, state, t = self.ops, self.system, self.state, self.turn
        r1, r2, nxt = self.r[t % 3], self.r[(t + 1) % 3], self.r[(t + 2) % 3]
        y = r2 if self.y is None else self.y
        ops.minres_scale(y, state["beta"], self.active, self.v)
        system.A.matvec(self.v, out=nxt)
        ops.minres_lanczos(self.v, r1, self.shift, state["beta"], state["oldb"], first,
                           self.active, nxt)  # fmt: skip
        ops.vdot(self.v, nxt, out=self.vy)
        ops.minres_orthogonalize(r2, self.vy, state["beta"], self.active, nxt)
        # r1, r2 = r2, next; y = M r2
        if self.y is None:
            y = nxt
        elif system.M.xp is system.xp:
            system.M.matvec(nxt, out=self.y)
        else:
            self.y[...] = system.precondition(nxt)
        ops.vdot(nxt, y, out=self.ry)
        ops.minres_rotate(self.vy, self.ry, self.eps, self.beta1, first, state, self.istop,
                          self.active, self.error)  # fmt: skip
        # w1, w2 = w2, w; w = (v - oldeps w1 - delta w2) / gamma
        w1, w2, w = self.w[(t + 2) % 3], self.w[t % 3], self.w[(t + 1) % 3]
        ops.minres_update(self.v, w1, w2, state, self.active, w, system.x)
        ops.vdot(system.x, system.x, out=self.xx)
        ops.minres_stop(self.xx, state, self.eps, self.beta1, self.rtol, self.maxiter,
                        self.istop, self.active, self.itn)  # fmt: skip
        self.turn = t + 1

    def done(self) -> bool:
        return not bool(self.ops.to_host(self.active))

    def calls_back_last(self) -> bool:
        """scipy calls back after the iteration that stops MINRES (not after an error)."""
        return not bool(self.ops.to_host(self.error))
