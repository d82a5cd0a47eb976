"""Vector steps of the solvers, for NumPy and (fused, no host synchronisation) CuPy.

On CuPy every scalar a solver computes stays a 0-d device array: dot products are
sparsegpu's two-pass reduction kernel writing to device memory (a fixed order of
additions, capturable into a CUDA graph), and the updates of an iteration are one
fused elementwise kernel reading the scalars from device memory, so an iteration
launches kernels back to back and never waits for the GPU. Each step is named once: its
arithmetic is the device function of that name in ``kernels/solver_steps.cu``, its
parameters are ``STEPS[name]``, and its NumPy twin (plain expressions, what CI tests) is
the ``VectorOps`` method of that name.
"""

from __future__ import annotations

import functools
import re
import types

import numpy as np

from ..device._compile import (
    ElementwiseSource,
    KernelFamily,
    get_kernel,
    register_elementwise,
    register_family,
    source_text,
)
from ..device._launch import CXX_VALUE_TYPES, KernelLaunch, name_expression

DOT_FAMILY = register_family(
    KernelFamily(
        "dot.cu",
        tuple(
            name_expression(kernel, dtype)
            for kernel in ("dot_partial", "dot_final", "multi_dot_partial", "multi_dot_final")
            for dtype in CXX_VALUE_TYPES
        ),
    )
)
DOT_BLOCK = 256  # as in dot.cu
# Blocks of the first pass: enough to keep an H200's 132 SMs busy (8 blocks of 256 each),
# and a count that depends on n alone, so the order of additions does too.
DOT_MAX_BLOCKS = 1024


class _Dot:
    """``out = conj(a) . b`` with sparsegpu's two-pass kernel (``kernels/dot.cu``): a fixed
    order of additions, no allocation and no cuBLAS, so the same launches can be captured
    into a CUDA graph and replay bit-identical to the plain loop (cuBLAS may not be called
    during a capture)."""

    def __init__(self, xp, dtype):
        self.xp, self.dtype = xp, np.dtype(dtype)
        self.partial = xp.empty(DOT_MAX_BLOCKS, dtype=self.dtype)
        self._partial = KernelLaunch(
            get_kernel("dot.cu", name_expression("dot_partial", self.dtype)),
            DOT_BLOCK,
            ("a", "b", "n", self.partial),
        )
        self._final = KernelLaunch(
            get_kernel("dot.cu", name_expression("dot_final", self.dtype)),
            DOT_BLOCK,
            (self.partial, "count", "out"),
        )

    def __call__(self, a, b, out=None):
        if out is None:
            out = self.xp.empty((), dtype=self.dtype)
        n = int(a.shape[0])
        blocks = max(1, min(DOT_MAX_BLOCKS, -(-n // DOT_BLOCK)))
        self._partial(blocks, a=a, b=b, n=n)
        self._final(1, count=blocks, out=out)
        return out


# MINRES's scalar state (float64 0-d arrays, scipy's names), in the order its kernels take it
MINRES_ROTATE_STATE = (
    "oldb", "beta", "tnorm2", "dbar", "epsln", "cs", "sn", "phibar", "rhs1", "rhs2", "gmax",
    "gmin", "oldeps", "delta", "root", "gamma", "phi",
)  # fmt: skip

# LSQR's scalar state (float64 0-d arrays, scipy's names), in the order its kernel takes it
LSQR_STATE = (
    "alfa", "beta", "anorm", "rhobar", "phibar", "ddnorm", "res2", "xnorm", "xxnorm", "z",
    "cs2", "sn2", "acond", "rnorm", "r1norm", "r2norm", "arnorm", "t1", "t2", "rho",
)  # fmt: skip


def recurrence_state(xp, names, start: dict) -> dict:
    """A recurrence's state as float64 0-d arrays (``names``), each ``start[name]`` or 0."""
    return {name: xp.full((), start.get(name, 0.0), dtype=np.float64) for name in names}


def stop_flags(xp) -> tuple:
    """``istop`` (int32, 0), ``active`` (True) and ``itn`` (int64, 0): the 0-d stopping
    state of a solver whose tests run on the device (MINRES, LSQR)."""
    return xp.zeros((), dtype=np.int32), xp.ones((), dtype=bool), xp.zeros((), dtype=np.int64)


SOLVER_STEPS = "solver_steps.cu"
# C++ parameter types of the steps' device functions -> CuPy's ElementwiseKernel types
_CUPY_TYPES = {"T": "T", "V": "V", "double": "float64", "bool": "bool", "int": "int32",
               "long long": "int64"}  # fmt: skip
_STEP = re.compile(r"template <[^>]*>\s*__device__ void (\w+)\(([^)]*)\)")


def steps_of(text: str) -> dict[str, tuple[str, str]]:
    """Every step of ``solver_steps.cu``'s text (each templated ``__device__ void``
    function) by name: its ``(inputs, outputs)`` as ``cupy.ElementwiseKernel`` takes them,
    in the function's order. A parameter taken by reference is an output, and outputs come
    after the inputs."""
    steps = {}
    for name, parameters in _STEP.findall(text):
        inputs, outputs = [], []
        for parameter in parameters.split(","):
            declared, _, variable = parameter.strip().rpartition(" ")
            if declared.endswith("&"):
                outputs.append(f"{_CUPY_TYPES[declared[:-1]]} {variable}")
            elif outputs:
                raise ValueError(f"{SOLVER_STEPS}: {name} takes input {variable} after outputs")
            else:
                inputs.append(f"{_CUPY_TYPES[declared]} {variable}")
        steps[name] = ", ".join(inputs), ", ".join(outputs)
    return steps


# Every fused step by name, read from its device function in kernels/solver_steps.cu: its
# (inputs, outputs) as CuPy's ElementwiseKernel takes them. The VectorOps method of the
# same name holds its NumPy twin.
STEPS = steps_of(source_text(SOLVER_STEPS))


def parameter_names(params: str) -> list[str]:
    """The names of an ElementwiseKernel parameter list (``"T x, float64 a"``)."""
    return [part.split()[-1] for part in params.split(",")]


def step_sources(
    filename: str, namespace: str, prefix: str = "sparsegpu_"
) -> dict[str, ElementwiseSource]:
    """Every step of ``kernels/<filename>`` (device functions in ``namespace``) by name, as
    an elementwise kernel whose operation is one call of its device function (kernel name
    ``prefix + name``); the file is the kernel's preamble."""
    text = source_text(filename)
    sources = {}
    for name, (inputs, outputs) in steps_of(text).items():
        arguments = ", ".join(parameter_names(inputs) + parameter_names(outputs))
        operation = f"{namespace}::{name}({arguments})"
        sources[name] = ElementwiseSource(inputs, outputs, operation, prefix + name, text)
    return sources


STEP_SOURCES = step_sources(SOLVER_STEPS, "solver_steps")
# every value type (T real or complex); the CI compile check compiles them all
register_elementwise("fc", *STEP_SOURCES.values())


@functools.cache
def _device_steps() -> types.SimpleNamespace:
    """CuPy's kernel of every step, by name, made once (CuPy compiles one per dtype)."""
    return types.SimpleNamespace(**{name: s.kernel() for name, s in STEP_SOURCES.items()})


def _lsqr_sym_ortho(a, b):
    """scipy's _sym_ortho on host floats (the twin of the kernel's)."""
    if b == 0:
        return float(np.sign(a)), 0.0, abs(a)
    if a == 0:
        return 0.0, float(np.sign(b)), abs(b)
    if abs(b) > abs(a):
        tau = a / b
        s = np.sign(b) / np.sqrt(1 + tau * tau)
        return s * tau, s, b / s
    tau = b / a
    c = np.sign(a) / np.sqrt(1 + tau * tau)
    return c, c * tau, a / c


def _lsqr_recurrences(vv, ww, damp, dampsq, bnorm, atol, btol, ctol, eps, iter_lim, S, istop,
                      active, stepped, itn):  # fmt: skip
    """The host twin of ``solver_steps::lsqr_recurrences`` (``S``: the state as floats, updated)."""
    if active:
        itn += 1
        if S["beta"] > 0:
            S["alfa"] = np.sqrt(abs(complex(vv)))
        wnorm2 = abs(complex(ww))
        if damp > 0:
            rhobar1 = np.sqrt(S["rhobar"] * S["rhobar"] + dampsq)
            cs1, sn1 = S["rhobar"] / rhobar1, damp / rhobar1
            psi = sn1 * S["phibar"]
            S["phibar"] = cs1 * S["phibar"]
        else:
            rhobar1, psi = S["rhobar"], 0.0
        cs, sn, rho = _lsqr_sym_ortho(rhobar1, S["beta"])
        S["rho"] = rho
        theta = sn * S["alfa"]
        S["rhobar"] = -cs * S["alfa"]
        phi = cs * S["phibar"]
        S["phibar"] = sn * S["phibar"]
        tau = sn * phi
        S["t1"], S["t2"] = phi / rho, -theta / rho
        S["ddnorm"] += wnorm2 / (rho * rho)
        delta, gambar = S["sn2"] * rho, -S["cs2"] * rho
        rhs = phi - delta * S["z"]
        zbar = rhs / gambar
        S["xnorm"] = np.sqrt(S["xxnorm"] + zbar * zbar)
        gamma = np.sqrt(gambar * gambar + theta * theta)
        S["cs2"], S["sn2"] = gambar / gamma, theta / gamma
        S["z"] = rhs / gamma
        S["xxnorm"] += S["z"] * S["z"]
        S["acond"] = S["anorm"] * np.sqrt(S["ddnorm"])
        S["res2"] += psi * psi
        rnorm = S["rnorm"] = np.sqrt(S["phibar"] * S["phibar"] + S["res2"])
        S["arnorm"] = S["alfa"] * abs(tau)
        if damp > 0:
            r1sq = rnorm * rnorm - dampsq * S["xxnorm"]
            S["r1norm"] = np.sqrt(abs(r1sq)) * (-1 if r1sq < 0 else 1)
        else:
            S["r1norm"] = rnorm
        S["r2norm"] = rnorm
        anorm, xnorm = S["anorm"], S["xnorm"]
        test1 = rnorm / bnorm
        test2 = S["arnorm"] / (anorm * rnorm + eps)
        test3 = 1 / (S["acond"] + eps)
        tt1 = test1 / (1 + anorm * xnorm / bnorm)
        rtol = btol + atol * anorm * xnorm / bnorm
        for hit, code in ((itn >= iter_lim, 7), (1 + test3 <= 1, 6), (1 + test2 <= 1, 5),
                          (1 + tt1 <= 1, 4), (test3 <= ctol, 3), (test2 <= atol, 2),
                          (test1 <= rtol, 1)):  # fmt: skip
            if hit:
                istop[...] = code
    stepped[...] = bool(active)
    active[...] = bool(active) and istop == 0


class VectorOps:
    """The vector steps of the solvers in one array module and dtype, in a vector space
    (``_space``; None: whole arrays of one process)."""

    def __init__(self, xp, dtype, space=None):
        self.xp = xp
        self.dtype = np.dtype(dtype)
        self.on_device = xp is not np
        # the vector space (``_space``): how a local dot becomes global, how the host reads
        self.space = space
        if self.on_device:
            self._vdot = _Dot(xp, self.dtype)
            # the fused steps by name: self._step.cg_update is cg_update's kernel
            self._step = _device_steps()

    def vdot(self, a, b, out=None):
        """``conj(a) . b`` of two contiguous vectors as a 0-d array (on the device for CuPy:
        no synchronisation), written into the 0-d ``out`` of the vectors' dtype when given
        (no allocation: what a captured graph needs); global in a distributed space."""
        if self.on_device:
            out = self._vdot(a, b, out=out)
        elif out is None:
            out = np.asarray(np.vdot(a, b))
        else:
            out[...] = np.vdot(a, b)
        self.reduce(out)
        return out

    def reduce(self, out) -> None:
        """Local dot products in ``out`` made global (the space's reduction)."""
        if self.space is not None:
            self.space.reduce(out)

    def norm(self, a) -> float:
        """``||a||_2`` on the host (one scalar transfer)."""
        return float(np.sqrt(abs(complex(self.to_host(self.vdot(a, a))))))

    def to_host(self, a):
        """A device array (or 0-d result) as NumPy: the one place a solver synchronises."""
        if self.space is not None:
            return self.space.to_host(a)
        return a.get() if self.on_device else np.asarray(a)

    # --------------------------------------------------------------- CG steps
    def cg_check(self, rr, atol, active, converged):
        """Set ``active`` (this iteration runs) and ``converged`` from ``rr = r . r``."""
        if self.on_device:
            self._step.cg_check(rr, float(atol), active, converged)
            return
        now = bool(not converged and not (np.sqrt(abs(complex(rr))) < atol))
        converged[...] = not now
        active[...] = now

    def cg_direction(self, z, rho, rho_prev, active, first, p):
        """``p = z + (rho / rho_prev) p`` (``p = z`` first), where ``active``."""
        if self.on_device:
            self._step.cg_direction(z, rho, rho_prev, active, first, p)
        elif active:
            if first:
                p[...] = z
            else:
                p *= rho / rho_prev
                p += z

    def cg_update(self, p, q, rho, pq, active, x, r):
        """``x += alpha p``, ``r -= alpha q`` with ``alpha = rho / pq``, where ``active``."""
        if self.on_device:
            self._step.cg_update(p, q, rho, pq, active, x, r)
        elif active:
            alpha = rho / pq
            x += alpha * p
            r -= alpha * q

    def keep(self, rho, active, rho_prev, count):
        """``rho_prev = rho`` and ``count += 1`` where ``active``."""
        if self.on_device:
            self._step.keep(rho, active, rho_prev, count)
        elif active:
            rho_prev[...] = rho
            count += 1

    def masked_axpy(self, a, v, flag, subtract: bool, y):
        """``y -= a v`` (``subtract``) or ``y += a v``, where ``flag``."""
        if self.on_device:
            self._step.masked_axpy(a, v, flag, subtract, y)
        elif flag:
            if subtract:
                y -= a * v
            else:
                y += a * v

    # ---------------------------------------------------------- BiCGSTAB steps
    def bicg_check(self, rr, rho, omega, tol, rhotol, omegatol, first, status, active):
        """The top of a BiCGSTAB iteration: ``status`` (0 running, 1 converged, -10, -11)
        and ``active`` (this iteration runs)."""
        if self.on_device:
            self._step.bicg_check(
                rr, rho, omega, float(tol), float(rhotol), float(omegatol), first, status, active
            )
            return
        if status == 0:
            if np.sqrt(abs(complex(rr))) < tol:
                status[...] = 1
            elif abs(complex(rho)) < rhotol:
                status[...] = -10
            elif not first and abs(complex(omega)) < omegatol:
                status[...] = -11
        active[...] = status == 0

    def bicg_direction(self, r, v, rho, rho_prev, alpha, omega, active, first, p):
        """``p = r`` (first) or ``r + (rho / rho_prev) (alpha / omega) (p - omega v)``."""
        if self.on_device:
            self._step.bicg_direction(r, v, rho, rho_prev, alpha, omega, active, first, p)
        elif active:
            if first:
                p[...] = r
            else:
                p[...] = (p - omega * v) * ((rho / rho_prev) * (alpha / omega)) + r

    def bicg_alpha(self, rho, rv, active, alpha):
        """``alpha = rho / rv`` (rv = 0 read as 1: the breakdown is caught after)."""
        if self.on_device:
            self._step.bicg_alpha(rho, rv, active, alpha)
        elif active:
            alpha[...] = rho / (rv if rv != 0 else 1)

    def bicg_middle(self, rv, ss, tol, active, status, stepped, going):
        """After ``s = r - alpha v``: ``status`` -11 (rv was 0) or 1 (``||s|| < tol``);
        ``stepped`` (x takes ``alpha phat``), ``going`` (the second half runs)."""
        if self.on_device:
            self._step.bicg_middle(rv, ss, float(tol), active, status, stepped, going)
            return
        stepped[...] = bool(active) and rv != 0
        if active:
            if rv == 0:
                status[...] = -11
            elif np.sqrt(abs(complex(ss))) < tol:
                status[...] = 1
        going[...] = bool(active) and status == 0

    def bicg_omega(self, tr, tt, rho, going, stepped, omega, rho_prev, count):
        """``omega = tr / tt`` and ``rho_prev = rho`` where ``going``; ``count += 1`` where
        ``stepped``."""
        if self.on_device:
            self._step.bicg_omega(tr, tt, rho, going, stepped, omega, rho_prev, count)
            return
        if going:
            omega[...] = tr / tt
            rho_prev[...] = rho
        if stepped:
            count += 1

    # ------------------------------------------------------------ MINRES steps
    def minres_scale(self, y, beta, active, v):
        """``v = y / beta`` (as ``y * (1 / beta)``, scipy's), where ``active`` (as the next
        two: after the stop the Lanczos vectors are left as they are)."""
        if self.on_device:
            self._step.minres_scale(y, beta, active, v)
        elif active:
            v[...] = y * self.dtype.type(1.0 / float(beta))

    def minres_lanczos(self, v, r1, shift, beta, oldb, first, active, y):
        """``y -= shift v`` (shift nonzero), then ``y -= (beta / oldb) r1`` (not first)."""
        if self.on_device:
            self._step.minres_lanczos(v, r1, shift, beta, oldb, first, active, y)
            return
        if not active:
            return
        if shift != 0:
            y[...] = y - shift * v
        if not first:
            y[...] = y - self.dtype.type(float(beta) / float(oldb)) * r1

    def minres_orthogonalize(self, r2, vy, beta, active, y):
        """``y -= (alfa / beta) r2`` with ``alfa = Re(vy)``."""
        if self.on_device:
            self._step.minres_orthogonalize(r2, vy, beta, active, y)
        elif active:
            y[...] = y - self.dtype.type(float(np.real(vy)) / float(beta)) * r2

    def minres_rotate(self, vy, ry, eps, beta1, first, state, istop, active, error):
        """scipy's scalar recurrences of one MINRES iteration (``state``: the 0-d float64
        arrays of ``MINRES_ROTATE_STATE``), where ``active``; ``error`` (and not
        ``active``) when ``(r2, M r2)`` came out negative."""
        if self.on_device:
            self._step.minres_rotate(
                vy,
                ry,
                float(eps),
                float(beta1),
                first,
                *(state[name] for name in MINRES_ROTATE_STATE),
                istop,
                active,
                error,
            )
            return
        if not active:
            return
        s = {name: float(state[name]) for name in MINRES_ROTATE_STATE}
        alfa, beta2 = float(np.real(vy)), float(np.real(ry))
        if beta2 < 0:
            error[...], active[...] = True, False
            return
        s["oldb"] = s["beta"]
        s["beta"] = beta = np.sqrt(beta2)
        s["tnorm2"] += alfa * alfa + s["oldb"] * s["oldb"] + beta * beta
        if first and beta / beta1 <= 10 * eps:
            istop[...] = -1
        s["oldeps"] = s["epsln"]
        s["delta"] = s["cs"] * s["dbar"] + s["sn"] * alfa
        gbar = s["sn"] * s["dbar"] - s["cs"] * alfa
        s["epsln"] = s["sn"] * beta
        s["dbar"] = -s["cs"] * beta
        s["root"] = np.hypot(gbar, s["dbar"])
        s["gamma"] = gamma = max(np.hypot(gbar, beta), eps)
        s["cs"], s["sn"] = gbar / gamma, beta / gamma
        s["phi"] = s["cs"] * s["phibar"]
        s["phibar"] = s["sn"] * s["phibar"]
        s["gmax"], s["gmin"] = max(s["gmax"], gamma), min(s["gmin"], gamma)
        z = s["rhs1"] / gamma
        s["rhs1"] = s["rhs2"] - s["delta"] * z
        s["rhs2"] = -s["epsln"] * z
        for name, value in s.items():
            state[name][...] = value

    def minres_update(self, v, w1, w2, state, active, w, x):
        """``w = (v - oldeps w1 - delta w2) / gamma`` and ``x += phi w``, where ``active``."""
        oldeps, delta, gamma, phi = (state[k] for k in ("oldeps", "delta", "gamma", "phi"))
        if self.on_device:
            self._step.minres_update(v, w1, w2, oldeps, delta, gamma, phi, active, w, x)
        elif active:
            t = self.dtype.type
            w[...] = (v - t(float(oldeps)) * w1 - t(float(delta)) * w2) * t(1.0 / float(gamma))
            x += t(float(phi)) * w

    def minres_stop(self, xx, state, eps, beta1, rtol, maxiter, istop, active, itn):
        """scipy's stopping tests after an iteration (``xx = x . x``): ``istop`` and
        ``active``; ``itn += 1`` where the iteration ran."""
        tnorm2, phibar, root, gmax, gmin = (
            state[k] for k in ("tnorm2", "phibar", "root", "gmax", "gmin")
        )
        if self.on_device:
            self._step.minres_stop(
                xx,
                tnorm2,
                phibar,
                root,
                gmax,
                gmin,
                float(eps),
                float(beta1),
                float(rtol),
                int(maxiter),
                np.inf,
                istop,
                active,
                itn,
            )
            return
        if not active:
            return
        itn += 1
        anorm = np.sqrt(float(tnorm2))
        ynorm = np.sqrt(abs(complex(xx)))
        epsx = anorm * ynorm * eps
        rnorm = float(phibar)
        test1 = np.inf if ynorm == 0 or anorm == 0 else rnorm / (anorm * ynorm)
        test2 = np.inf if anorm == 0 else float(root) / anorm
        acond = float(gmax) / float(gmin)
        if istop == 0:
            for hit, code in ((1 + test2 <= 1, 2), (1 + test1 <= 1, 1), (itn >= maxiter, 6),
                              (acond >= 0.1 / eps, 4), (epsx >= beta1, 3), (test2 <= rtol, 2),
                              (test1 <= rtol, 1)):  # fmt: skip
                if hit:
                    istop[...] = code
        active[...] = istop == 0

    # -------------------------------------------------------------- LSQR steps
    def lsqr_bidiag(self, av, alfa, active, u):
        """``u = A v - alfa u``, where ``active``."""
        if self.on_device:
            self._step.lsqr_bidiag(av, alfa, active, u)
        elif active:
            u[...] = av - self.dtype.type(float(alfa)) * u

    def lsqr_scale(self, c, gate, flag, y):
        """``y *= 1 / c`` where ``flag``, ``gate > 0`` and ``c > 0``."""
        if self.on_device:
            self._step.lsqr_scale(c, gate, flag, y)
        elif flag and gate > 0 and c > 0:
            y *= self.dtype.type(1.0 / float(c))

    def lsqr_norm_u(self, uu, state, dampsq, active):
        """``beta = ||u||``, and ``anorm`` grown by it where ``beta > 0``."""
        beta, anorm, alfa = state["beta"], state["anorm"], state["alfa"]
        if self.on_device:
            self._step.lsqr_norm_u(uu, alfa, float(dampsq), active, beta, anorm)
        elif active:
            beta[...] = np.sqrt(abs(complex(uu)))
            if beta > 0:
                a, b = float(anorm), float(beta)
                anorm[...] = np.sqrt(a * a + float(alfa) ** 2 + b * b + dampsq)

    def lsqr_adjoint(self, atu, beta, active, v):
        """``v = A^H u - beta v`` where ``active`` and ``beta > 0``."""
        if self.on_device:
            self._step.lsqr_adjoint(atu, beta, active, v)
        elif active and beta > 0:
            v[...] = atu - self.dtype.type(float(beta)) * v

    def lsqr_recurrences(self, vv, ww, limits, state, istop, active, stepped, itn):
        """scipy's recurrences and stopping tests of one LSQR iteration (``limits``: damp,
        dampsq, bnorm, atol, btol, ctol, eps, iter_lim)."""
        if self.on_device:
            damp, dampsq, bnorm, atol, btol, ctol, eps, iter_lim = limits
            self._step.lsqr_recurrences(
                vv,
                ww,
                float(damp),
                float(dampsq),
                float(bnorm),
                float(atol),
                float(btol),
                float(ctol),
                float(eps),
                int(iter_lim),
                *(state[name] for name in LSQR_STATE),
                istop,
                active,
                stepped,
                itn,
            )
            return
        S = {name: float(state[name]) for name in LSQR_STATE}
        _lsqr_recurrences(vv, ww, *limits, S, istop, active, stepped, itn)
        for name, value in S.items():
            state[name][...] = value

    def lsqr_update(self, v, state, stepped, calc_var, w, x, var):
        """``var += |w / rho|^2`` (``calc_var``), ``x += t1 w``, ``w = v + t2 w``."""
        t1, t2, rho = state["t1"], state["t2"], state["rho"]
        if self.on_device:
            self._step.lsqr_update(v, t1, t2, rho, stepped, calc_var, w, x, var)
        elif stepped:
            t = self.dtype.type
            if calc_var:
                var += np.abs(w * t(1.0 / float(rho))) ** 2
            x += t(float(t1)) * w
            w[...] = v + t(float(t2)) * w
