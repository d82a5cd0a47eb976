"""Vector steps of the solvers, for NumPy and (fused, no host synchronisation) CuPy.

On CuPy every scalar a solver computes stays a 0-d device array: dot products are
sparsegpu's two-pass reduction kernel writing to device memory (a fixed order of
additions, capturable into a CUDA graph), and the updates of an iteration are one
fused elementwise kernel reading the scalars from device memory, so an iteration
launches kernels back to back and never waits for the GPU. The same steps on NumPy are
plain expressions (what CI tests).
"""

from __future__ import annotations

import functools

import numpy as np

from ..device._compile import (
    ElementwiseSource,
    KernelFamily,
    get_kernel,
    register_elementwise,
    register_family,
)
from ..device._launch import CXX_VALUE_TYPES, KernelLaunch, name_expression


def _real_expression(kind: str, name: str) -> str:
    return f"{name}.real()" if kind == "c" else name


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


def _cg_sources(kind: str) -> tuple[ElementwiseSource, ...]:
    """CG's fused steps for real (``kind`` "f") or complex ("c") values."""

    rr = _real_expression(kind, "rr")
    # top of a CG iteration: converged (for good) once ||r|| < atol
    cg_check = ElementwiseSource(
        "T rr, float64 atol",
        "bool active, bool converged",
        f"active = !converged && !(sqrt((double){rr}) < atol); converged = !active;",
        "sparsegpu_cg_check",
    )
    # p = z + beta p with beta = rho / rho_prev (p = z on the first iteration)
    cg_direction = ElementwiseSource(
        "T z, T rho, T rho_prev, bool active, bool first",
        "T p",
        "if (active) p = first ? z : z + (rho / rho_prev) * p;",
        "sparsegpu_cg_direction",
    )
    # x += alpha p, r -= alpha q with alpha = rho / (p . q)
    cg_update = ElementwiseSource(
        "T p, T q, T rho, T pq, bool active",
        "T x, T r",
        "if (active) { T alpha = rho / pq; x += alpha * p; r -= alpha * q; }",
        "sparsegpu_cg_update",
    )
    # rho_prev = rho and one more iteration counted, where the iteration ran
    keep = ElementwiseSource(
        "T rho, bool active",
        "T rho_prev, int64 count",
        "if (active) { rho_prev = rho; count += 1; }",
        "sparsegpu_keep",
    )
    return cg_check, cg_direction, cg_update, keep


def _magnitude(kind: str, name: str) -> str:
    """``|name|`` as a double in CUDA."""
    return f"(double)abs({name})" if kind == "c" else f"fabs((double){name})"


def _bicgstab_sources(kind: str) -> tuple[ElementwiseSource, ...]:
    """BiCGSTAB's scalar steps (0-d arrays, one thread) and the masked axpy, for real
    (``kind`` "f") or complex ("c") values; ``_bicgstab_host`` is their NumPy twin."""

    mag = functools.partial(_magnitude, kind)
    # top: status 1 once ||r|| < tol, -10 when rho vanished, -11 when omega did
    check = ElementwiseSource(
        "T rr, T rho, T omega, float64 tol, float64 rhotol, float64 omegatol, bool first",
        "int32 status, bool active",
        f"""if (status == 0) {{
              if (sqrt({mag("rr")}) < tol) status = 1;
              else if ({mag("rho")} < rhotol) status = -10;
              else if (!first && {mag("omega")} < omegatol) status = -11;
            }}
            active = status == 0;""",
        "sparsegpu_bicg_check",
    )
    # p = r (first) or r + beta (p - omega v), beta = (rho / rho_prev) (alpha / omega)
    direction = ElementwiseSource(
        "T r, T v, T rho, T rho_prev, T alpha, T omega, bool active, bool first",
        "T p",
        "if (active) p = first ? r : (p - omega * v) * ((rho / rho_prev) * (alpha / omega)) + r;",
        "sparsegpu_bicg_direction",
    )
    alpha = ElementwiseSource(
        "T rho, T rv, bool active",
        "T alpha",
        "if (active) alpha = rho / (rv == (T)0 ? (T)1 : rv);",
        "sparsegpu_bicg_alpha",
    )
    # after s = r - alpha v: -11 when rv was 0, 1 when ||s|| < tol; stepped: x takes
    # alpha phat; going: the second half runs
    middle = ElementwiseSource(
        "T rv, T ss, float64 tol, bool active",
        "int32 status, bool stepped, bool going",
        f"""stepped = active && !(rv == (T)0);
            if (active) {{
              if (rv == (T)0) status = -11;
              else if (sqrt({mag("ss")}) < tol) status = 1;
            }}
            going = active && status == 0;""",
        "sparsegpu_bicg_middle",
    )
    omega = ElementwiseSource(
        "T tr, T tt, T rho, bool going, bool stepped",
        "T omega, T rho_prev, int64 count",
        "if (going) { omega = tr / tt; rho_prev = rho; } if (stepped) count += 1;",
        "sparsegpu_bicg_omega",
    )
    return check, direction, alpha, middle, omega


# MINRES's scalar state (float64 0-d arrays, scipy's names), in the order its kernels take it
MINRES_ROTATE_STATE = (
    "oldb", "beta", "tnorm2", "dbar", "epsln", "cs", "sn", "phibar", "rhs1", "rhs2", "gmax",
    "gmin", "oldeps", "delta", "root", "gamma", "phi",
)  # fmt: skip


def _minres_sources(kind: str) -> tuple[ElementwiseSource, ...]:
    """MINRES's steps for real (``kind`` "f") or complex ("c") vectors: the Lanczos vector
    updates and, on one thread, scipy's scalar recurrences and stopping tests (each
    ``VectorOps.minres_*`` method is the NumPy twin of one)."""

    real = functools.partial(_real_expression, kind)
    mag = functools.partial(_magnitude, kind)
    scale = ElementwiseSource(
        "T y, float64 beta, bool active",
        "T v",
        "if (active) v = y * (T)(1.0 / beta);",
        "sparsegpu_minres_scale",
    )
    # y = A v - shift v - (beta / oldb) r1 (the last term from the second iteration on)
    lanczos = ElementwiseSource(
        "T v, T r1, T shift, float64 beta, float64 oldb, bool first, bool active",
        "T y",
        """if (active && shift != (T)0) y = y - shift * v;
           if (active && !first) y = y - (T)(beta / oldb) * r1;""",
        "sparsegpu_minres_lanczos",
    )
    # y -= (alfa / beta) r2 with alfa = v . y
    orthogonalize = ElementwiseSource(
        "T r2, T vy, float64 beta, bool active",
        "T y",
        f"if (active) y = y - (T)((double){real('vy')} / beta) * r2;",
        "sparsegpu_minres_orthogonalize",
    )
    state = ", ".join(f"float64 {name}" for name in MINRES_ROTATE_STATE)
    rotate = ElementwiseSource(
        "T vy, T ry, float64 eps, float64 beta1, bool first",
        f"{state}, int32 istop, bool active, bool error",
        f"""if (active) {{
              double alfa = (double){real("vy")};
              double beta2 = (double){real("ry")};
              if (beta2 < 0) {{ error = true; active = false; }}
              else {{
                oldb = beta;
                beta = sqrt(beta2);
                tnorm2 += alfa * alfa + oldb * oldb + beta * beta;
                if (first && beta / beta1 <= 10 * eps) istop = -1;
                oldeps = epsln;
                delta = cs * dbar + sn * alfa;
                double gbar = sn * dbar - cs * alfa;
                epsln = sn * beta;
                dbar = -cs * beta;
                root = hypot(gbar, dbar);
                gamma = fmax(hypot(gbar, beta), eps);
                cs = gbar / gamma;
                sn = beta / gamma;
                phi = cs * phibar;
                phibar = sn * phibar;
                gmax = fmax(gmax, gamma);
                gmin = fmin(gmin, gamma);
                double z = rhs1 / gamma;
                rhs1 = rhs2 - delta * z;
                rhs2 = -epsln * z;
              }}
            }}""",
        "sparsegpu_minres_rotate",
    )
    # w = (v - oldeps w1 - delta w2) / gamma, x += phi w
    update = ElementwiseSource(
        "T v, T w1, T w2, float64 oldeps, float64 delta, float64 gamma, float64 phi, bool active",
        "T w, T x",
        """if (active) {
             w = (v - (T)oldeps * w1 - (T)delta * w2) * (T)(1.0 / gamma);
             x = x + (T)phi * w;
           }""",
        "sparsegpu_minres_update",
    )
    stop = ElementwiseSource(
        "T xx, float64 tnorm2, float64 phibar, float64 root, float64 gmax, float64 gmin, "
        "float64 eps, float64 beta1, float64 rtol, int64 maxiter, float64 inf",
        "int32 istop, bool active, int64 itn",
        f"""if (active) {{
              itn += 1;
              double anorm = sqrt(tnorm2);
              double ynorm = sqrt({mag("xx")});
              double epsx = anorm * ynorm * eps;
              double rnorm = phibar;
              double test1 = (ynorm == 0 || anorm == 0) ? inf : rnorm / (anorm * ynorm);
              double test2 = anorm == 0 ? inf : root / anorm;
              double acond = gmax / gmin;
              if (istop == 0) {{
                if (1 + test2 <= 1) istop = 2;
                if (1 + test1 <= 1) istop = 1;
                if (itn >= maxiter) istop = 6;
                if (acond >= 0.1 / eps) istop = 4;
                if (epsx >= beta1) istop = 3;
                if (test2 <= rtol) istop = 2;
                if (test1 <= rtol) istop = 1;
              }}
              active = istop == 0;
            }}""",
        "sparsegpu_minres_stop",
    )
    return scale, lanczos, orthogonalize, rotate, update, stop


# LSQR's scalar state (float64 0-d arrays, scipy's names), in the order its kernel takes it
LSQR_STATE = (
    "alfa", "beta", "anorm", "rhobar", "phibar", "ddnorm", "res2", "xnorm", "xxnorm", "z",
    "cs2", "sn2", "acond", "rnorm", "r1norm", "r2norm", "arnorm", "t1", "t2", "rho",
)  # fmt: skip

# scipy's LSQR iteration after the two products, on one thread (``_lsqr_recurrences`` is
# its host twin, line for line)
_LSQR_RECURRENCES = """
if (active) {
  itn += 1;
  if (beta > 0) alfa = sqrt(MAG(vv));
  double wnorm2 = MAG(ww);
  double rhobar1, psi;
  if (damp > 0) {
    rhobar1 = sqrt(rhobar * rhobar + dampsq);
    double cs1 = rhobar / rhobar1, sn1 = damp / rhobar1;
    psi = sn1 * phibar;
    phibar = cs1 * phibar;
  } else {
    rhobar1 = rhobar;
    psi = 0;
  }
  double cs, sn;
  sparsegpu_sym_ortho(rhobar1, beta, cs, sn, rho);
  double theta = sn * alfa;
  rhobar = -cs * alfa;
  double phi = cs * phibar;
  phibar = sn * phibar;
  double tau = sn * phi;
  t1 = phi / rho;
  t2 = -theta / rho;
  ddnorm += wnorm2 / (rho * rho);
  double delta = sn2 * rho, gambar = -cs2 * rho;
  double rhs = phi - delta * z;
  double zbar = rhs / gambar;
  xnorm = sqrt(xxnorm + zbar * zbar);
  double gamma = sqrt(gambar * gambar + theta * theta);
  cs2 = gambar / gamma;
  sn2 = theta / gamma;
  z = rhs / gamma;
  xxnorm += z * z;
  acond = anorm * sqrt(ddnorm);
  res2 += psi * psi;
  rnorm = sqrt(phibar * phibar + res2);
  arnorm = alfa * fabs(tau);
  if (damp > 0) {
    double r1sq = rnorm * rnorm - dampsq * xxnorm;
    r1norm = sqrt(fabs(r1sq)) * (r1sq < 0 ? -1 : 1);
  } else {
    r1norm = rnorm;
  }
  r2norm = rnorm;
  double test1 = rnorm / bnorm;
  double test2 = arnorm / (anorm * rnorm + eps);
  double test3 = 1 / (acond + eps);
  double tt1 = test1 / (1 + anorm * xnorm / bnorm);
  double rtol = btol + atol * anorm * xnorm / bnorm;
  if (itn >= iter_lim) istop = 7;
  if (1 + test3 <= 1) istop = 6;
  if (1 + test2 <= 1) istop = 5;
  if (1 + tt1 <= 1) istop = 4;
  if (test3 <= ctol) istop = 3;
  if (test2 <= atol) istop = 2;
  if (test1 <= rtol) istop = 1;
}
stepped = active;
active = active && istop == 0;
"""

_SYM_ORTHO = """
__device__ double sparsegpu_sign(double a) { return (a > 0) - (a < 0); }
// scipy's _sym_ortho: (c, s, r) with r = hypot(a, b)
__device__ void sparsegpu_sym_ortho(double a, double b, double& c, double& s, double& r) {
  if (b == 0) { c = sparsegpu_sign(a); s = 0; r = fabs(a); }
  else if (a == 0) { c = 0; s = sparsegpu_sign(b); r = fabs(b); }
  else if (fabs(b) > fabs(a)) {
    double tau = a / b;
    s = sparsegpu_sign(b) / sqrt(1 + tau * tau); c = s * tau; r = b / s;
  } else {
    double tau = b / a;
    c = sparsegpu_sign(a) / sqrt(1 + tau * tau); s = c * tau; r = a / c;
  }
}
"""


def _lsqr_sources(kind: str) -> tuple[ElementwiseSource, ...]:
    """LSQR's steps for real (``kind`` "f") or complex ("c") vectors (each
    ``VectorOps.lsqr_*`` method is the NumPy twin of one)."""

    mag = functools.partial(_magnitude, kind)
    # u = A v - alfa u
    bidiag = ElementwiseSource(
        "T av, float64 alfa, bool active",
        "T u",
        "if (active) u = av - (T)alfa * u;",
        "sparsegpu_lsqr_bidiag",
    )
    # y *= 1 / c where flag, gate > 0 and c > 0
    scale = ElementwiseSource(
        "float64 c, float64 gate, bool flag",
        "T y",
        "if (flag && gate > 0 && c > 0) y = y * (T)(1.0 / c);",
        "sparsegpu_lsqr_scale",
    )
    # beta = ||u||, and anorm with it where beta > 0
    norm_u = ElementwiseSource(
        "T uu, float64 alfa, float64 dampsq, bool active",
        "float64 beta, float64 anorm",
        f"""if (active) {{
              beta = sqrt({mag("uu")});
              if (beta > 0) anorm = sqrt(anorm * anorm + alfa * alfa + beta * beta + dampsq);
            }}""",
        "sparsegpu_lsqr_norm_u",
    )
    # v = A^H u - beta v where beta > 0
    adjoint = ElementwiseSource(
        "T atu, float64 beta, bool active",
        "T v",
        "if (active && beta > 0) v = atu - (T)beta * v;",
        "sparsegpu_lsqr_adjoint",
    )
    state = ", ".join(f"float64 {name}" for name in LSQR_STATE)
    recurrences = ElementwiseSource(
        "T vv, T ww, float64 damp, float64 dampsq, float64 bnorm, float64 atol, "
        "float64 btol, float64 ctol, float64 eps, int64 iter_lim",
        f"{state}, int32 istop, bool active, bool stepped, int64 itn",
        _LSQR_RECURRENCES.replace("MAG(vv)", mag("vv")).replace("MAG(ww)", mag("ww")),
        "sparsegpu_lsqr_recurrences",
        preamble=_SYM_ORTHO,
    )
    # var += |w / rho|^2 (calc_var), x += t1 w, w = v + t2 w
    update = ElementwiseSource(
        "T v, float64 t1, float64 t2, float64 rho, bool stepped, bool calc_var",
        "T w, T x, V var",
        f"""if (stepped) {{
              if (calc_var) {{
                T q = w * (T)(1.0 / rho);
                double a = {mag("q")};
                var += (V)(a * a);
              }}
              x = x + (T)t1 * w;
              w = v + (T)t2 * w;
            }}""",
        "sparsegpu_lsqr_update",
    )
    return bidiag, scale, norm_u, adjoint, recurrences, update


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
    """The host twin of ``_LSQR_RECURRENCES`` (``S``: the state as floats, updated)."""
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


def _masked_axpy_source() -> ElementwiseSource:
    """y +- a v where flag (every value dtype)."""
    return ElementwiseSource(
        "T a, T v, bool flag, bool subtract",
        "T y",
        "if (flag) y = subtract ? y - a * v : y + a * v;",
        "sparsegpu_masked_axpy",
    )


# the CI compile check compiles them all (tools/check_kernels.py)
for _build in (_cg_sources, _bicgstab_sources, _minres_sources, _lsqr_sources):
    for _kind in "fc":
        register_elementwise(_kind, *_build(_kind))
register_elementwise("fc", _masked_axpy_source())


@functools.cache
def _on_device(build, kind: str) -> tuple:
    """CuPy's kernels of ``build(kind)``'s sources, made once."""
    return tuple(source.kernel() for source in build(kind))


@functools.cache
def _masked_axpy_kernel():
    return _masked_axpy_source().kernel()


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
            kind = "c" if self.dtype.kind == "c" else "f"
            self._vdot = _Dot(xp, self.dtype)
            (
                self._cg_check,
                self._cg_direction,
                self._cg_update,
                self._keep,
            ) = _on_device(_cg_sources, kind)
            self._bicg = _on_device(_bicgstab_sources, kind)
            self._masked_axpy = _masked_axpy_kernel()
            self._minres = _on_device(_minres_sources, kind)
            self._lsqr = _on_device(_lsqr_sources, kind)

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
            self._cg_check(rr, float(atol), active, converged)
            return
        now = bool(not converged and not (np.sqrt(abs(complex(rr))) < atol))
        converged[...] = not now
        active[...] = now

    def cg_direction(self, z, rho, rho_prev, active, first, p):
        """``p = z + (rho / rho_prev) p`` (``p = z`` first), where ``active``."""
        if self.on_device:
            self._cg_direction(z, rho, rho_prev, active, first, p)
        elif active:
            if first:
                p[...] = z
            else:
                p *= rho / rho_prev
                p += z

    def cg_update(self, p, q, rho, pq, active, x, r):
        """``x += alpha p``, ``r -= alpha q`` with ``alpha = rho / pq``, where ``active``."""
        if self.on_device:
            self._cg_update(p, q, rho, pq, active, x, r)
        elif active:
            alpha = rho / pq
            x += alpha * p
            r -= alpha * q

    def keep(self, rho, active, rho_prev, count):
        """``rho_prev = rho`` and ``count += 1`` where ``active``."""
        if self.on_device:
            self._keep(rho, active, rho_prev, count)
        elif active:
            rho_prev[...] = rho
            count += 1

    def masked_axpy(self, a, v, flag, subtract: bool, y):
        """``y -= a v`` (``subtract``) or ``y += a v``, where ``flag``."""
        if self.on_device:
            self._masked_axpy(a, v, flag, subtract, y)
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
            self._bicg[0](rr, rho, omega, float(tol), float(rhotol), float(omegatol), first,
                          status, active)  # fmt: skip
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
            self._bicg[1](r, v, rho, rho_prev, alpha, omega, active, first, p)
        elif active:
            if first:
                p[...] = r
            else:
                p[...] = (p - omega * v) * ((rho / rho_prev) * (alpha / omega)) + r

    def bicg_alpha(self, rho, rv, active, alpha):
        """``alpha = rho / rv`` (rv = 0 read as 1: the breakdown is caught after)."""
        if self.on_device:
            self._bicg[2](rho, rv, active, alpha)
        elif active:
            alpha[...] = rho / (rv if rv != 0 else 1)

    def bicg_middle(self, rv, ss, tol, active, status, stepped, going):
        """After ``s = r - alpha v``: ``status`` -11 (rv was 0) or 1 (``||s|| < tol``);
        ``stepped`` (x takes ``alpha phat``), ``going`` (the second half runs)."""
        if self.on_device:
            self._bicg[3](rv, ss, float(tol), active, status, stepped, going)
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
            self._bicg[4](tr, tt, rho, going, stepped, omega, rho_prev, count)
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
            self._minres[0](y, beta, active, v)
        elif active:
            v[...] = y * self.dtype.type(1.0 / float(beta))

    def minres_lanczos(self, v, r1, shift, beta, oldb, first, active, y):
        """``y -= shift v`` (shift nonzero), then ``y -= (beta / oldb) r1`` (not first)."""
        if self.on_device:
            self._minres[1](v, r1, shift, beta, oldb, first, active, y)
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
            self._minres[2](r2, vy, beta, active, y)
        elif active:
            y[...] = y - self.dtype.type(float(np.real(vy)) / float(beta)) * r2

    def minres_rotate(self, vy, ry, eps, beta1, first, state, istop, active, error):
        """scipy's scalar recurrences of one MINRES iteration (``state``: the 0-d float64
        arrays of ``MINRES_ROTATE_STATE``), where ``active``; ``error`` (and not
        ``active``) when ``(r2, M r2)`` came out negative."""
        if self.on_device:
            self._minres[3](vy, ry, float(eps), float(beta1), first,
                            *(state[name] for name in MINRES_ROTATE_STATE), istop, active,
                            error)  # fmt: skip
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
            self._minres[4](v, w1, w2, oldeps, delta, gamma, phi, active, w, x)
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
            self._minres[5](xx, tnorm2, phibar, root, gmax, gmin, float(eps), float(beta1),
                            float(rtol), int(maxiter), np.inf, istop, active, itn)  # fmt: skip
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
            self._lsqr[0](av, alfa, active, u)
        elif active:
            u[...] = av - self.dtype.type(float(alfa)) * u

    def lsqr_scale(self, c, gate, flag, y):
        """``y *= 1 / c`` where ``flag``, ``gate > 0`` and ``c > 0``."""
        if self.on_device:
            self._lsqr[1](c, gate, flag, y)
        elif flag and gate > 0 and c > 0:
            y *= self.dtype.type(1.0 / float(c))

    def lsqr_norm_u(self, uu, state, dampsq, active):
        """``beta = ||u||``, and ``anorm`` grown by it where ``beta > 0``."""
        beta, anorm, alfa = state["beta"], state["anorm"], state["alfa"]
        if self.on_device:
            self._lsqr[2](uu, alfa, float(dampsq), active, beta, anorm)
        elif active:
            beta[...] = np.sqrt(abs(complex(uu)))
            if beta > 0:
                a, b = float(anorm), float(beta)
                anorm[...] = np.sqrt(a * a + float(alfa) ** 2 + b * b + dampsq)

    def lsqr_adjoint(self, atu, beta, active, v):
        """``v = A^H u - beta v`` where ``active`` and ``beta > 0``."""
        if self.on_device:
            self._lsqr[3](atu, beta, active, v)
        elif active and beta > 0:
            v[...] = atu - self.dtype.type(float(beta)) * v

    def lsqr_recurrences(self, vv, ww, limits, state, istop, active, stepped, itn):
        """scipy's recurrences and stopping tests of one LSQR iteration (``limits``: damp,
        dampsq, bnorm, atol, btol, ctol, eps, iter_lim)."""
        if self.on_device:
            damp, dampsq, bnorm, atol, btol, ctol, eps, iter_lim = limits
            self._lsqr[4](vv, ww, float(damp), float(dampsq), float(bnorm), float(atol),
                          float(btol), float(ctol), float(eps), int(iter_lim),
                          *(state[name] for name in LSQR_STATE), istop, active, stepped,
                          itn)  # fmt: skip
            return
        S = {name: float(state[name]) for name in LSQR_STATE}
        _lsqr_recurrences(vv, ww, *limits, S, istop, active, stepped, itn)
        for name, value in S.items():
            state[name][...] = value

    def lsqr_update(self, v, state, stepped, calc_var, w, x, var):
        """``var += |w / rho|^2`` (``calc_var``), ``x += t1 w``, ``w = v + t2 w``."""
        t1, t2, rho = state["t1"], state["t2"], state["rho"]
        if self.on_device:
            self._lsqr[5](v, t1, t2, rho, stepped, calc_var, w, x, var)
        elif stepped:
            t = self.dtype.type
            if calc_var:
                var += np.abs(w * t(1.0 / float(rho))) ** 2
            x += t(float(t1)) * w
            w[...] = v + t(float(t2)) * w
