"""LSQR (Paige and Saunders) for least squares ``min ||A x - b||``, on the GPU for CuPy.

scipy's algorithm, arguments and 10-tuple result. Each iteration of the Golub-Kahan
bidiagonalisation needs two norms on the host (they drive the scalar recurrences and the
stopping tests): two scalar transfers per iteration, the vectors stay on the device.
"""

from __future__ import annotations

import numpy as np

from . import _options as options
from ._krylov import _check_iterations, _not_captured, _reordered, _scalar
from ._operator import System
from ._vector import VectorOps


def _sym_ortho(a, b):
    """Stable Givens rotation (c, s, r) with r = hypot(a, b) (scipy's _sym_ortho)."""
    if b == 0:
        return np.sign(a), 0, abs(a)
    if a == 0:
        return 0, np.sign(b), abs(b)
    if abs(b) > abs(a):
        tau = a / b
        s = np.sign(b) / np.sqrt(1 + tau * tau)
        return s * tau, s, b / s
    tau = b / a
    c = np.sign(a) / np.sqrt(1 + tau * tau)
    return c, c * tau, a / c


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
        As :func:`cg`: accepted; the iterations are not captured yet (two norms a
        iteration drive host-side recurrences), and ``reorder`` applies to square A only
        (``last_solve_info()`` says what was done).

    Returns
    -------
    tuple
        ``(x, istop, itn, r1norm, r2norm, anorm, acond, arnorm, xnorm, var)`` as scipy
        returns them, with x and var in b's array module.
    """
    info_out = options.SolveInfo("lsqr")
    options.check_graphs("lsqr", graphs)
    info_out.graphs_reason = _not_captured("lsqr", graphs, "recurrences on the host")
    A, b, x0, _, _, ordering = _reordered("lsqr", A, b, x0, None, None, reorder, info_out)
    options.record(info_out)
    result = _lsqr(System("lsqr", A, b, x0, square=False), damp, atol, btol, conlim,
                   iter_lim, calc_var)  # fmt: skip
    return (ordering.back(result[0]), *result[1:-1], ordering.back(result[-1]))


def _lsqr(system, damp, atol, btol, conlim, iter_lim, calc_var):
    ops = VectorOps(system.xp, system.dtype)
    xp, dtype = system.xp, system.dtype
    m, n = system.A.shape
    iter_lim = _check_iterations("lsqr", iter_lim, 2 * n)
    real = np.dtype(dtype.char.lower())
    var = xp.zeros(n, dtype=real)
    eps = np.finfo(dtype).eps
    itn = istop = 0
    ctol = 1 / conlim if conlim > 0 else 0
    anorm = acond = ddnorm = res2 = xnorm = xxnorm = z = 0.0
    dampsq = damp**2
    cs2, sn2 = -1.0, 0.0
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
    w = v.copy()
    rhobar, phibar = alfa, beta
    rnorm = r1norm = r2norm = beta
    arnorm = alfa * beta
    if arnorm == 0:
        return (system.result(x), istop, itn, r1norm, r2norm, anorm, acond, arnorm, xnorm,
                system.result(var))  # fmt: skip
    while itn < iter_lim:
        itn += 1
        u = system.A.matvec(v) - _scalar(alfa, dtype) * u
        beta = ops.norm(u)
        wnorm2 = None
        if beta > 0:
            u *= _scalar(1 / beta, dtype)
            anorm = np.sqrt(anorm**2 + alfa**2 + beta**2 + dampsq)
            v = system.A.rmatvec(u) - _scalar(beta, dtype) * v
            # one transfer for both norms: ||v|| and ||w|| (the latter for ||dk||)
            norms = ops.to_host(xp.stack([ops.vdot(v, v), ops.vdot(w, w)]))
            alfa = float(np.sqrt(abs(norms[0])))
            wnorm2 = float(abs(norms[1]))
            if alfa > 0:
                v *= _scalar(1 / alfa, dtype)
        if damp > 0:
            rhobar1 = np.sqrt(rhobar**2 + dampsq)
            cs1, sn1 = rhobar / rhobar1, damp / rhobar1
            psi = sn1 * phibar
            phibar = cs1 * phibar
        else:
            rhobar1, psi = rhobar, 0.0
        cs, sn, rho = _sym_ortho(rhobar1, beta)
        theta = sn * alfa
        rhobar = -cs * alfa
        phi = cs * phibar
        phibar = sn * phibar
        tau = sn * phi
        t1, t2 = phi / rho, -theta / rho
        if wnorm2 is None:
            wnorm2 = ops.norm(w) ** 2
        ddnorm += wnorm2 / rho**2
        if calc_var:
            var += xp.abs(w * _scalar(1 / rho, dtype)) ** 2
        x += _scalar(t1, dtype) * w
        w = v + _scalar(t2, dtype) * w
        delta = sn2 * rho
        gambar = -cs2 * rho
        rhs = phi - delta * z
        zbar = rhs / gambar
        xnorm = np.sqrt(xxnorm + zbar**2)
        gamma = np.sqrt(gambar**2 + theta**2)
        cs2, sn2 = gambar / gamma, theta / gamma
        z = rhs / gamma
        xxnorm += z**2
        acond = anorm * np.sqrt(ddnorm)
        res2 += psi**2
        rnorm = np.sqrt(phibar**2 + res2)
        arnorm = alfa * abs(tau)
        if damp > 0:
            r1sq = rnorm**2 - dampsq * xxnorm
            r1norm = np.sqrt(abs(r1sq)) * (-1 if r1sq < 0 else 1)
        else:
            r1norm = rnorm
        r2norm = rnorm
        test1 = rnorm / bnorm
        test2 = arnorm / (anorm * rnorm + eps)
        test3 = 1 / (acond + eps)
        t1 = test1 / (1 + anorm * xnorm / bnorm)
        rtol = btol + atol * anorm * xnorm / bnorm
        if itn >= iter_lim:
            istop = 7
        if 1 + test3 <= 1:
            istop = 6
        if 1 + test2 <= 1:
            istop = 5
        if 1 + t1 <= 1:
            istop = 4
        if test3 <= ctol:
            istop = 3
        if test2 <= atol:
            istop = 2
        if test1 <= rtol:
            istop = 1
        if istop != 0:
            break
    return (system.result(x), istop, itn, r1norm, r2norm, anorm, acond, arnorm, xnorm,
            system.result(var))  # fmt: skip
