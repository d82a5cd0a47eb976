"""Smoothers and spectral-radius estimates of a multigrid level, on the host or the GPU.

A smoother step is a product with the level's matrix (its plan, into a buffer made at
set-up) and one fused elementwise kernel reading the scalars it needs from its arguments:
nothing allocates and nothing reads back to the host, so a V-cycle of them can be captured
into the solver's CUDA graph. The kernels' arithmetic is ``kernels/multigrid_steps.cu``, one
device function a step, read and registered for the CI compile check like the solvers'
own (``kernels/solver_steps.cu``); on NumPy the same steps are plain expressions.

* weighted Jacobi, ``x += omega / rho * D^-1 (b - A x)`` with ``omega = 4/3`` and ``rho``
  the spectral radius of ``D^-1 A`` (PyAMG's ``('jacobi', {'omega': 4/3})`` with its
  ``withrho`` scaling);
* l1-Jacobi, ``D_l1 = diag(|a_ii| + sum_j!=i |a_ij|)``, weight 1 (no estimate needed:
  convergent for any symmetric positive definite A, Baker, Falgout, Kolev, Yang 2011);
* Chebyshev of ``degree`` in ``D^-1 A`` on ``[lower * rho, upper * rho]`` (PyAMG's names:
  ``lower_bound``, ``upper_bound``), the three-term recurrence of Saad's
  "Iterative methods for sparse linear systems", algorithm 12.1.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.linalg

from ._bridge import (
    CXX_VALUE_TYPES,
    KernelFamily,
    KernelLaunch,
    cupy_or_none,
    get_kernel,
    name_expression,
    register_elementwise,
    register_family,
    step_sources,
)

# the cycle's steps, read from kernels/multigrid_steps.cu (every value type, real or
# complex: the CI compile check compiles them all)
_SOURCES = step_sources("multigrid_steps.cu", "multigrid_steps", prefix="sparsegpu_amg_")
register_elementwise("fc", *_SOURCES.values())


# the Lanczos steps with their own reductions (kernels/lanczos.cu)
LANCZOS = "lanczos.cu"
_LANCZOS_KERNELS = ("lanczos_alpha", "lanczos_recurrence", "lanczos_advance")
register_family(
    KernelFamily(
        LANCZOS,
        tuple(name_expression(k, value) for k in _LANCZOS_KERNELS for value in CXX_VALUE_TYPES),
    )
)
LANCZOS_BLOCK = 256
LANCZOS_MAX_PARTS = 1024  # blocks of a Lanczos step (each later block sums their parts)


@functools.cache
def _kernels():
    return {name: source.kernel() for name, source in _SOURCES.items()}


class Steps:
    """The elementwise steps of a cycle in one array module (fused kernels on CuPy)."""

    def __init__(self, xp):
        self.xp = xp
        self._k = _kernels() if xp is not np else None

    def scaled(self, b, dinv, c, x):
        if self._k:
            return self._k["scaled"](b, dinv, float(c), x)
        np.multiply(dinv, b, out=x)
        x *= c

    def jacobi(self, b, ax, dinv, c, x):
        if self._k:
            return self._k["jacobi"](b, ax, dinv, float(c), x)
        x += c * dinv * (b - ax)

    def residual(self, b, ax, r):
        if self._k:
            return self._k["residual"](b, ax, r)
        np.subtract(b, ax, out=r)

    def add(self, y, x):
        if self._k:
            return self._k["add"](y, x)
        x += y

    def chebyshev_start(self, b, dinv, c, d, x):
        if self._k:
            return self._k["chebyshev_start"](b, dinv, float(c), d, x)
        np.multiply(dinv, b, out=d)
        d *= c
        x[...] = d

    def chebyshev(self, b, ax, dinv, a, c, d, x):
        if self._k:
            return self._k["chebyshev"](b, ax, dinv, float(a), float(c), d, x)
        d *= a
        d += c * dinv * (b - ax)
        x += d


SMOOTHERS = ("jacobi", "l1_jacobi", "chebyshev")
DEFAULTS = {
    "jacobi": {"omega": 4.0 / 3.0, "iterations": 1},
    "l1_jacobi": {"iterations": 1},
    "chebyshev": {"degree": 3, "lower_bound": 0.1, "upper_bound": 1.1},
}


def normalise_smoother(what: str, value):
    """``(name, options)`` of a smoother given as a name or PyAMG's ``(name, {...})``."""
    name, given = (value, {}) if isinstance(value, str) else (None, None)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
        name, given = value
    if name not in SMOOTHERS:
        raise ValueError(
            f"{what} must be one of {SMOOTHERS} or (name, {{options}}), got {value!r}; "
            "Gauss-Seidel and its block forms are sequential and not offered on the GPU"
        )
    unknown = set(given) - set(DEFAULTS[name])
    if unknown:
        raise ValueError(
            f"{what} {name!r}: unknown options {sorted(unknown)}; it takes {sorted(DEFAULTS[name])}"
        )
    options = {**DEFAULTS[name], **given}
    for key, number in options.items():
        if key in ("iterations", "degree"):
            if isinstance(number, bool) or not isinstance(number, (int, np.integer)) or number < 1:
                raise ValueError(f"{what} {name!r}: {key} must be an integer >= 1, got {number!r}")
        elif not (np.isscalar(number) and np.isfinite(number) and number > 0):
            raise ValueError(f"{what} {name!r}: {key} must be a finite number > 0, got {number!r}")
    if name == "chebyshev" and options["lower_bound"] >= options["upper_bound"]:
        raise ValueError(
            f"{what} 'chebyshev': lower_bound {options['lower_bound']} must be below "
            f"upper_bound {options['upper_bound']}"
        )
    return name, options


def lanczos_start(n: int, dtype, xp, seed: int):
    """The Lanczos start vector of :func:`spectral_radius`: unit, random from ``seed``
    (kept by a level, so a re-set-up draws nothing: 0.2-0.5 ms a level on the H200)."""
    v = xp.random.RandomState(seed).standard_normal(n).astype(dtype)
    v /= xp.linalg.norm(v)
    return v


def spectral_radius(
    matvec, n: int, d_inv_sqrt, xp, steps: int = 15, seed: int = 0, dtype=None, start=None
) -> float:
    """The largest eigenvalue of ``D^-1 A`` for a Hermitian A (``matvec``: its product,
    of ``dtype``, A's) with a positive diagonal: ``steps`` Lanczos steps on
    ``D^-1/2 A D^-1/2`` kept on the device, then the largest Ritz value (the one host
    read). Ritz values approach the extremes from inside, so this is a slight
    under-estimate, as PyAMG's.

    On the GPU a step is the product and three kernels (``kernels/lanczos.cu``: alpha's
    inner product, the recurrence with the new vector's norm, the advance), each reducing
    in its blocks and summing the blocks' parts in the next, in one fixed order: nothing
    waits for the host until the coefficients are read at the end, and a step costs four
    launches (it was the product, cuBLAS's dot and norm and two elementwise steps, about
    0.18 ms of host time a step). The scaling ``u = D^-1/2 v`` rides in the advance, and
    ``alpha = v^H D^-1/2 A u`` is ``u^H A u``. ``start``: the unit start vector of ``n``
    entries in that dtype (:func:`lanczos_start` of ``seed``), where the caller kept it."""
    steps = max(1, min(steps, n))
    dtype = np.result_type(d_inv_sqrt.dtype, dtype or d_inv_sqrt.dtype)
    # the Lanczos loop takes its start vector over: a kept one is copied
    v = lanczos_start(n, dtype, xp, seed) if start is None else start.copy()
    lanczos = _lanczos_host if xp is np else _lanczos_device
    return _ritz_top(*lanczos(matvec, v, d_inv_sqrt, steps), steps)


def _lanczos_device(matvec, v, d_inv_sqrt, steps: int):
    """The Lanczos coefficients ``(alphas, betas)`` on the GPU (``v`` a unit start
    vector, taken over): a step is the product and three kernels of
    ``kernels/lanczos.cu``, which reduce their inner products themselves; one read of the
    coefficients at the end."""
    xp = cupy_or_none()
    n = v.shape[0]
    real = np.empty(0, dtype=v.dtype).real.dtype  # the coefficients' and d's type
    d_inv_sqrt = xp.ascontiguousarray(d_inv_sqrt, dtype=real)
    grid = max(1, min(-(-n // LANCZOS_BLOCK), LANCZOS_MAX_PARTS))
    p, w, u = xp.zeros_like(v), xp.empty_like(v), d_inv_sqrt * v
    alpha_parts, norm_parts = xp.empty(grid, dtype=real), xp.empty(grid, dtype=real)
    alphas = xp.zeros(steps, dtype=real)
    betas = xp.zeros(steps + 1, dtype=real)  # betas[0]: none before the first step
    alpha = _launch("lanczos_alpha", v.dtype, [u, "y", n, alpha_parts])
    recurrence = _launch(
        "lanczos_recurrence", v.dtype,
        ["y", d_inv_sqrt, v, p, alpha_parts, alphas, betas, "k", n, w, norm_parts],
    )  # fmt: skip
    advance = _launch(
        "lanczos_advance", v.dtype, [w, d_inv_sqrt, norm_parts, betas, "k", n, p, v, u]
    )
    for k in range(steps):
        y = xp.ascontiguousarray(matvec(u), dtype=v.dtype)
        alpha(grid, y=y)
        recurrence(grid, y=y, k=k)
        advance(grid, k=k)
    return np.asarray(alphas.get(), np.float64), np.asarray(betas[1:].get(), np.float64)


def _launch(name: str, dtype, arguments) -> KernelLaunch:
    """A launch of ``name<T>`` (T: ``dtype``'s C++ type) of kernels/lanczos.cu on these
    arguments (strings: the slots each call fills)."""
    kernel = get_kernel(LANCZOS, name_expression(name, dtype))
    return KernelLaunch(kernel, LANCZOS_BLOCK, arguments)


def _lanczos_host(matvec, v, d_inv_sqrt, steps: int):
    """The Lanczos coefficients ``(alphas, betas)`` with NumPy (the device loop's twin)."""
    previous = np.zeros_like(v)
    beta = 0.0
    alphas, betas = [], []
    for _ in range(steps):
        w = d_inv_sqrt * matvec(d_inv_sqrt * v)
        alpha = float(np.real(np.vdot(v, w)))
        w = w - alpha * v - beta * previous
        beta = float(np.linalg.norm(w))
        alphas.append(alpha)
        betas.append(beta)
        previous = v
        v = w / beta if beta > 0 else w
    return np.array(alphas), np.array(betas)


def _ritz_top(alphas, betas, steps: int) -> float:
    """The largest Ritz value of the Lanczos tridiagonal (alphas, betas)."""
    # a zero beta ends the Krylov space: the Ritz values so far are exact
    ended = betas <= 1e-14 * max(1.0, float(np.abs(alphas).max()))
    stop = int(np.argmax(ended)) + 1 if ended.any() else steps
    ritz = scipy.linalg.eigvalsh_tridiagonal(alphas[:stop], betas[: stop - 1])
    return float(ritz.max())


def chebyshev_coefficients(degree: int, low: float, high: float):
    """``[(a_k, c_k)]`` of the recurrence ``d = a_k d + c_k D^-1 r``, ``x += d``: Chebyshev
    iteration on the interval ``[low, high]`` of ``D^-1 A``'s spectrum; the first step's
    ``a`` is 0."""
    theta, delta = (high + low) / 2, (high - low) / 2
    sigma = theta / delta
    rho = 1 / sigma
    steps = [(0.0, 1 / theta)]
    for _ in range(degree - 1):
        rho_next = 1 / (2 * sigma - rho)
        steps.append((rho_next * rho, 2 * rho_next / delta))
        rho = rho_next
    return steps
