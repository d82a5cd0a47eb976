"""Restarted GMRES whose whole restart cycle runs on the device, captured as a CUDA graph.

A cycle is ``restart`` inner iterations (a product, classical Gram-Schmidt done twice, a
norm, the Givens rotations of the Hessenberg least-squares problem) and its end (the back
substitution, the update of x, the true residual). On CuPy every step is a kernel of
``kernels/gmres.cu`` or ``kernels/dot.cu`` reading and writing device memory, the
Hessenberg matrix, the rotations and the flags included, so a cycle launches without
reading anything back: the host reads one small state array per cycle (or every
``CHECK_EVERY`` inner iterations, to end a cycle early, without graphs). Iterations after
the cycle stopped (the residual estimate below tolerance, or the Krylov space exhausted)
change nothing, so replaying whole cycles from a graph gives the answer, ``info`` and the
iteration count of the plain loop. :class:`HostSteps` is the NumPy twin of each kernel
(what CI runs).
"""

from __future__ import annotations

import math

import numpy as np

from ..device._compile import KernelFamily, get_kernel, register_family
from ..device._launch import CXX_VALUE_TYPES, KernelLaunch, name_expression
from . import _graphs
from . import _options as options
from ._krylov import (
    CHECK_EVERY,
    _check_iterations,
    _finish,
    _graph_refusal,
    _scalar,
    _start,
    _zero_rhs,
)
from ._vector import DOT_BLOCK, DOT_MAX_BLOCKS

GMRES_KERNELS = (
    "gs_subtract", "gmres_combine", "gmres_scale", "gmres_add", "gmres_residual",
    "arnoldi_rotate", "back_substitute", "cycle_end",
)  # fmt: skip
GMRES_FAMILY = register_family(
    KernelFamily(
        "gmres.cu",
        tuple(
            name_expression(kernel, dtype) for kernel in GMRES_KERNELS for dtype in CXX_VALUE_TYPES
        ),
    )
)
GMRES_BLOCK = 256  # as in gmres.cu
VECTOR_MAX_BLOCKS = 4096  # the vector kernels grid-stride beyond this

# the state array's entries (gmres.cu's GmresState)
ACTIVE, USED, CONVERGED, CYCLES, ITERATIONS = range(5)
# basis rows start on 512-byte boundaries (texture reads of a row need an aligned start)
ROW_ALIGNMENT_BYTES = 512


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None, M=None,
          callback=None, callback_type=None, graphs="auto", reorder=None):  # fmt: skip
    """Restarted GMRES for a general square ``A`` (right preconditioning).

    Parameters
    ----------
    A, b, x0, rtol, atol, M
        As :func:`cg`; convergence is on the true residual ``||b - A x||``, checked at the
        end of every restart cycle.
    restart : int, optional
        Krylov vectors per cycle (default 20, at most n).
    maxiter : int, optional
        Restart cycles (default ``10 * n``), scipy's meaning.
    callback : callable, optional
        Called after every inner iteration with the relative residual estimate
        (``callback_type`` "pr_norm" or "legacy", the default: the iterations then run
        one at a time) or after every cycle with x (``callback_type`` "x": cycles are
        still captured).
    graphs : True, False or "auto"
        Capture a whole restart cycle as one CUDA graph and replay it (default "auto": on a
        GPU, A and M sparsegpu matrices on backends a graph can hold, no per-iteration
        callback). Same kernels, same answer, same iteration count.
    reorder
        As :func:`cg`.

    Returns
    -------
    x : array
    info : int
        0 when converged, else the number of cycles run (``maxiter``).

    Notes
    -----
    Orthogonalisation is classical Gram-Schmidt done twice; the Hessenberg least-squares
    problem is solved by Givens rotations as the cycle goes, on the device for CuPy
    operands. ``last_solve_info().iterations`` counts inner iterations. A cycle captured as
    a graph runs all ``restart`` of its inner iterations' kernels even when it converges
    earlier (those after the stop change nothing); without graphs the host ends a cycle
    at the first flag read after it stopped.
    """
    info_out = options.SolveInfo("gmres")
    options.check_graphs("gmres", graphs)
    if callback_type not in (None, "legacy", "pr_norm", "x"):
        raise ValueError(
            f"gmres: callback_type must be 'legacy', 'pr_norm' or 'x', got {callback_type!r}"
        )
    per_x = callback_type == "x"
    per_iteration = None if per_x else callback
    wanted = graphs is not False and per_iteration is None
    set_up, bnorm, tolerance, r = _start(
        "gmres", A, b, x0, M, callback if per_x else None, reorder, info_out, rtol, atol, wanted
    )
    system, ops, A, M, callback_x, ordering = set_up
    n = system.A.shape[0]
    maxiter = _check_iterations("gmres", maxiter, 10 * n)
    if restart is not None and (
        isinstance(restart, bool) or not isinstance(restart, (int, np.integer)) or restart < 1
    ):
        raise ValueError(f"gmres: restart must be a positive integer, got {restart!r}")
    restart = min(20 if restart is None else int(restart), max(n, 1))
    refusal = _graph_refusal(graphs, system, ops, per_iteration, A, M)
    info_out.graphs_reason = refusal or ""
    if bnorm == 0:
        return _zero_rhs(system, ordering, info_out)
    cycle = GmresCycle(system, ops, r, tolerance, restart)
    progress = None
    if per_iteration is not None:
        progress = lambda estimate: per_iteration(estimate / bnorm)  # noqa: E731
    _run(cycle, maxiter, progress, system.wrap_callback(callback_x), refusal, graphs, info_out)
    state = ops.to_host(cycle.state)
    info_out.iterations = int(state[ITERATIONS])
    converged = bool(state[CONVERGED])
    return _finish(system, ordering, info_out, system.x, 0 if converged else maxiter)


def _run(cycle, maxiter, progress, callback_x, refusal, graphs, info_out) -> None:
    """Up to ``maxiter`` cycles: replayed from a graph when ``refusal`` is None (the first
    one plain: it warms the plans and compiles the kernels), else launched kernel by
    kernel; the state read after every cycle."""
    cycle.start()
    if maxiter == 0 or cycle.converged():
        return
    if refusal is None:
        with _graphs.private_stream() as stream:
            done = _replayed(cycle, maxiter, callback_x, stream, graphs, info_out)
            if done is not None:
                _plain(cycle, done, maxiter, None, callback_x)
    else:
        _plain(cycle, 0, maxiter, progress, callback_x)


def _plain(cycle, start, maxiter, progress, callback_x) -> None:
    """Cycles ``start`` to ``maxiter``, kernel by kernel; with ``progress`` the state is read
    after every inner iteration (it is called with the residual estimate), else every
    ``CHECK_EVERY``, and a cycle that stopped ends there."""
    for _ in range(start, maxiter):
        _plain_cycle(cycle, progress)
        if callback_x is not None:
            callback_x(cycle.system.x)
        if cycle.converged():
            return


def _plain_cycle(cycle, progress=None) -> None:
    """One cycle kernel by kernel, ended at the first state read after it stopped."""
    for j in range(cycle.restart):
        cycle.inner(j)
        if progress is not None:
            active, estimate = cycle.progress()
            progress(estimate)
            if not active:
                break
        elif (j + 1) % CHECK_EVERY == 0 and not cycle.active():
            break
    cycle.end()


def _replayed(cycle, maxiter, callback_x, stream, graphs, info_out):
    """Cycle 0 plain (ended early where it converged), then each cycle one replay of a
    captured cycle. Returns None when done, else the cycle the plain loop goes on from (the
    capture failed, or ``graphs`` "auto" and cycle 0's convergence rate says too few cycles
    are left to pay for one)."""
    before = cycle.residual_norm()
    _plain_cycle(cycle)  # warms the plans and kernels on this stream: nothing to capture yet
    if callback_x is not None:
        callback_x(cycle.system.x)
    if cycle.converged() or maxiter == 1:
        info_out.graphs_reason = (
            "the first cycle (plain: a capture's warm-up) was the last one: nothing to replay"
        )
        return None
    left = cycles_left(before, cycle.residual_norm(), cycle.tolerance)
    if graphs == "auto" and left < CAPTURE_PAYS_AFTER:
        info_out.graphs_reason = (
            f"graphs auto: the first cycle's convergence rate predicts {left} more cycle(s), "
            f"fewer than the {CAPTURE_PAYS_AFTER} a capture pays for itself in; pass "
            "graphs=True to capture anyway"
        )
        return 1
    captured = _graphs.Block(cycle.full, 1, stream)
    failure = cycle.system.space.agree(captured.failure)
    if failure is not None:
        info_out.graphs_reason = failure
        return 1
    info_out.graphs, info_out.block = True, cycle.restart
    info_out.graphs_reason = f"captured a restart cycle ({cycle.restart} iterations) a block"
    for _ in range(1, maxiter):
        captured.launch()
        if callback_x is not None:
            callback_x(cycle.system.x)
        if cycle.converged():
            return None
    return None


# A capture costs about what a cycle launched kernel by kernel does plus the graph's
# instantiation (H100, 20-iteration cycles on 0.1M nonzeros: about 2.7 ms against 2.4 ms a
# plain cycle and 0.75 ms a replay), so it pays from the second cycle replayed.
CAPTURE_PAYS_AFTER = 2


def cycles_left(before: float, after: float, tolerance: float) -> int | float:
    """Cycles still needed at the rate one cycle took the residual from ``before`` to
    ``after`` (inf where it did not shrink)."""
    if after < tolerance:
        return 0
    if not 0 < after < before:
        return math.inf
    return math.ceil(math.log(tolerance / after) / math.log(after / before))


class GmresCycle:
    """One GMRES restart cycle on preallocated buffers: :meth:`inner` ``(j)`` for
    ``j < restart``, then :meth:`end`; :meth:`start` once before the first. The state (a
    5-entry int64 array: active, used, converged, cycles, iterations) and every scalar stay
    where the vectors live; ``steps`` are the kernels (CuPy) or their NumPy twins."""

    def __init__(self, system, ops, r, tolerance, restart):
        xp, dtype, n = system.xp, system.dtype, system.rows
        self.system, self.ops, self.dtype, self.n = system, ops, dtype, n
        self.restart, self.tolerance = restart, float(tolerance)
        align = max(1, ROW_ALIGNMENT_BYTES // dtype.itemsize)
        self.ld = -(-n // align) * align
        self.basis = xp.zeros((restart + 1, self.ld), dtype=dtype)
        self.rows = [self.basis[k, :n] for k in range(restart + 1)]
        self.r = r
        self.w = xp.empty(n, dtype=dtype)
        self.z = None if system.M is None else xp.empty(n, dtype=dtype)
        self.update = xp.empty(n, dtype=dtype)
        self.first = xp.zeros(restart + 1, dtype=dtype)
        self.second = xp.zeros(restart + 1, dtype=dtype)
        self.ht = xp.zeros((restart, restart + 1), dtype=dtype)  # the Hessenberg, by columns
        self.givens = xp.zeros((restart, 2), dtype=dtype)  # (c, s) per rotation
        self.g = xp.zeros(restart + 1, dtype=dtype)
        self.y = xp.zeros(restart, dtype=dtype)
        self.ww = xp.zeros((), dtype=dtype)
        self.rr = xp.zeros((), dtype=dtype)
        self.tol = xp.full((), tolerance, dtype=np.float64)
        self.hnext = xp.zeros((), dtype=np.float64)
        self.beta = xp.zeros((), dtype=np.float64)
        self.estimate = xp.zeros((), dtype=np.float64)
        self.state = xp.zeros(5, dtype=np.int64)
        self.steps = DeviceSteps(self) if ops.on_device else HostSteps(self)

    def _precondition(self, v, out):
        system = self.system
        if system.M.xp is system.xp:
            system.M.matvec(v, out=out)
        else:
            out[...] = system.precondition(v)

    def start(self) -> None:
        """From the starting residual r: converged already, or the first cycle set up."""
        self.ops.vdot(self.r, self.r, out=self.rr)
        self.steps.end(count=False)
        self.steps.scale(self.r, self.beta, CONVERGED, False, self.rows[0])

    def inner(self, j: int) -> None:
        """Inner iteration ``j``: ``w = A M v_j``, orthogonalised against ``v_0..v_j``
        (twice), Hessenberg column ``j`` rotated, ``v_{j+1} = w / ||w||`` where the cycle
        goes on."""
        A, steps = self.system.A, self.steps
        if self.z is None:
            A.matvec(self.rows[j], out=self.w)
        else:
            self._precondition(self.rows[j], self.z)
            A.matvec(self.z, out=self.w)
        steps.project(j + 1, self.first)
        steps.project(j + 1, self.second)
        self.ops.vdot(self.w, self.w, out=self.ww)
        steps.rotate(j)
        steps.scale(self.w, self.hnext, ACTIVE, True, self.rows[j + 1])

    def end(self) -> None:
        """The cycle's update ``x += M V y``, the true residual, and the next cycle set up
        (or converged)."""
        steps, system = self.steps, self.system
        steps.back_substitute()
        steps.combine()
        if self.z is None:
            steps.add(self.update)
        else:
            self._precondition(self.update, self.z)
            steps.add(self.z)
        system.A.matvec(system.x, out=self.r)
        steps.residual()
        self.ops.vdot(self.r, self.r, out=self.rr)
        steps.end(count=True)
        steps.scale(self.r, self.beta, CONVERGED, False, self.rows[0])

    def full(self) -> None:
        """A whole cycle (what a graph holds)."""
        for j in range(self.restart):
            self.inner(j)
        self.end()

    # the host's reads (each one synchronisation)
    def converged(self) -> bool:
        return bool(self.ops.to_host(self.state[CONVERGED]))

    def residual_norm(self) -> float:
        """``||b - A x||`` at the last cycle's end (or the start)."""
        return float(self.ops.to_host(self.beta))

    def active(self) -> bool:
        return bool(self.ops.to_host(self.state[ACTIVE]))

    def progress(self) -> tuple[bool, float]:
        """(whether the cycle goes on, the residual estimate after the last iteration)."""
        state, estimate = self.ops.to_host(self.state), self.ops.to_host(self.estimate)
        return bool(state[ACTIVE]), float(estimate)


class DeviceSteps:
    """A cycle's steps as the kernels of ``gmres.cu`` and ``dot.cu``, bound to its buffers
    (launched on CuPy's current stream; nothing allocates, nothing reads back)."""

    def __init__(self, cycle):
        xp, dtype, n = cycle.system.xp, cycle.dtype, cycle.n
        self.ops = cycle.ops
        self.dot_blocks = max(1, min(DOT_MAX_BLOCKS, -(-n // DOT_BLOCK)))
        self.grid = max(1, min(VECTOR_MAX_BLOCKS, -(-n // GMRES_BLOCK)))
        self.partial = xp.empty((cycle.restart + 1) * self.dot_blocks, dtype=dtype)
        ldh = cycle.restart + 1

        c = cycle
        arguments = {  # kernel: (source, block, its parameters; a str is set per call)
            "multi_dot_partial": ("dot.cu", DOT_BLOCK, (c.basis, c.ld, c.w, n, self.dot_blocks,
                                                        self.partial)),
            "multi_dot_final": ("dot.cu", DOT_BLOCK, (self.partial, self.dot_blocks, "out")),
            "gs_subtract": ("gmres.cu", GMRES_BLOCK, (c.basis, c.ld, "m", "coef", c.w, n)),
            "arnoldi_rotate": ("gmres.cu", 1, (c.first, c.second, c.ww, "j", ldh, c.ht,
                                               c.givens, c.g, c.tol, c.hnext, c.estimate,
                                               c.state)),
            "gmres_scale": ("gmres.cu", GMRES_BLOCK, ("w", "h", c.state, "flag", "when", "out",
                                                      n)),
            "back_substitute": ("gmres.cu", 1, (c.ht, ldh, c.g, c.state, c.y)),
            "gmres_combine": ("gmres.cu", GMRES_BLOCK, (c.basis, c.ld, c.y, c.state, c.update,
                                                        n)),
            "gmres_add": ("gmres.cu", GMRES_BLOCK, ("v", c.state, c.system.x, n)),
            "gmres_residual": ("gmres.cu", GMRES_BLOCK, (c.system.b, c.r, n)),
            "cycle_end": ("gmres.cu", 1, (c.rr, c.tol, "count", c.g, c.beta, c.state)),
        }  # fmt: skip
        self._launch = {
            kernel: KernelLaunch(get_kernel(source, name_expression(kernel, dtype)), block, args)
            for kernel, (source, block, args) in arguments.items()
        }

    def project(self, m, out):
        """``out[:m] = conj(V_m) . w`` (global in a distributed space), then
        ``w -= V_m out[:m]``."""
        self._launch["multi_dot_partial"](m * self.dot_blocks)
        self._launch["multi_dot_final"](m, out=out)
        self.ops.reduce(out[:m])
        self._launch["gs_subtract"](self.grid, m=m, coef=out)

    def rotate(self, j):
        self._launch["arnoldi_rotate"](1, j=j)

    def scale(self, w, h, flag, when, out):
        self._launch["gmres_scale"](self.grid, w=w, h=h, flag=flag, when=int(when), out=out)

    def back_substitute(self):
        self._launch["back_substitute"](1)

    def combine(self):
        self._launch["gmres_combine"](self.grid)

    def add(self, v):
        self._launch["gmres_add"](self.grid, v=v)

    def residual(self):
        self._launch["gmres_residual"](self.grid)

    def end(self, count):
        self._launch["cycle_end"](1, count=int(count))


class HostSteps:
    """The NumPy twin of each :class:`DeviceSteps` kernel, line for line with ``gmres.cu``
    (BLAS products where the kernels sum in a fixed order)."""

    def __init__(self, cycle):
        self.c = cycle

    def project(self, m, out):
        c = self.c
        V = c.basis[:m, : c.n]
        out[:m] = V.conj() @ c.w
        c.ops.reduce(out[:m])
        c.w -= V.T @ out[:m]

    def rotate(self, j):
        c = self.c
        state = c.state
        if not state[ACTIVE]:
            return
        h = c.ht[j]
        h[: j + 1] = c.first[: j + 1] + c.second[: j + 1]
        following = float(np.sqrt(abs(complex(c.ww))))
        h[j + 1] = following
        rotate_column(c.ht.T, c.givens, c.g, j)
        state[USED] = j + 1
        state[ITERATIONS] += 1
        residual = float(abs(complex(c.g[j + 1])))
        c.estimate[...] = residual
        c.hnext[...] = following
        if residual < c.tol or following == 0:
            state[ACTIVE] = 0

    def scale(self, w, h, flag, when, out):
        if bool(self.c.state[flag]) == bool(when):
            out[...] = w / _scalar(float(h), self.c.dtype)

    def back_substitute(self):
        c = self.c
        if c.state[CONVERGED]:
            return
        H, g, y = c.ht.T, c.g, c.y
        used = int(c.state[USED])
        for k in range(used - 1, -1, -1):
            acc = g[k] - H[k, k + 1 : used] @ y[k + 1 : used]
            y[k] = 0 if H[k, k] == 0 else acc / H[k, k]

    def combine(self):
        c = self.c
        if not c.state[CONVERGED]:
            used = int(c.state[USED])
            c.update[...] = c.basis[:used, : c.n].T @ c.y[:used]

    def add(self, v):
        if not self.c.state[CONVERGED]:
            self.c.system.x += v

    def residual(self):
        c = self.c
        np.subtract(c.system.b, c.r, out=c.r)

    def end(self, count):
        c = self.c
        state = c.state
        if state[CONVERGED]:
            return
        if count:
            state[CYCLES] += 1
        norm = float(np.sqrt(abs(complex(c.rr))))
        c.beta[...] = norm
        if norm < c.tol:
            state[CONVERGED], state[ACTIVE] = 1, 0
        else:
            c.g[0] = norm
            state[ACTIVE], state[USED] = 1, 0


def rotate_column(hessenberg, givens, g, j: int) -> None:
    """GMRES's least-squares update for Hessenberg column ``j``, in place: apply the
    earlier Givens rotations to it, make rotation ``j`` that zeroes its subdiagonal, and
    rotate the right-hand side ``g`` (whose entry ``j + 1`` is then the residual norm)."""
    for i in range(j):
        c, s = givens[i]
        upper, lower = hessenberg[i, j], hessenberg[i + 1, j]
        hessenberg[i, j] = c * upper + s * lower
        hessenberg[i + 1, j] = -np.conj(s) * upper + c * lower
    c, s, rho = _givens(hessenberg[j, j], hessenberg[j + 1, j])
    givens[j] = (c, s)
    hessenberg[j, j], hessenberg[j + 1, j] = rho, 0
    g[j + 1] = -np.conj(s) * g[j]
    g[j] = c * g[j]


def _givens(a, b):
    """(c, s, rho), c real, with [[c, s], [-conj(s), c]] @ [a, b] = [rho, 0]."""
    if b == 0:
        return 1.0, 0.0, a
    if a == 0:
        return 0.0, 1.0, b
    scale = np.hypot(abs(a), abs(b))
    phase = a / abs(a)
    return abs(a) / scale, phase * np.conj(b) / scale, phase * scale
