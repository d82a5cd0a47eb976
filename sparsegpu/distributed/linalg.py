"""Krylov solvers on distributed matrices: ``cg``, ``bicgstab``, ``gmres``.

scipy's signatures and ``info`` meaning (0 converged; the iteration limit when not;
``bicgstab``'s -10/-11 breakdowns), on :class:`~sparsegpu.distributed.DistributedVector`
right-hand sides (from ``A.scatter``); ``x`` comes back distributed the same way. Every
rank calls the solver; all of them get the same ``info``.

Communication per iteration (besides the products, each a halo exchange and one small
allreduce agreeing on errors): ``cg`` two allreduces (``r.r`` and ``p.Ap``; three with
a preconditioner), ``bicgstab`` four, ``gmres`` three per inner iteration (two
Gram-Schmidt passes and a norm, each one allreduce of up to ``restart + 1`` numbers).
"""

from __future__ import annotations

import numpy as np

from ..linalg._gmres import rotate_column
from ._matrix import csr_matrix
from ._vector import DistributedVector, _to_host


def _check(name, A, b, x0, rtol, atol, maxiter, default_maxiter):
    if not isinstance(A, csr_matrix):
        raise TypeError(
            f"{name}: A must be a sparsegpu.distributed.csr_matrix, got {type(A).__name__}"
        )
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} needs a square matrix, got shape {A.shape}")
    for label, vector in (("b", b), ("x0", x0)):
        if vector is None and label == "x0":
            continue
        if not isinstance(vector, DistributedVector):
            raise TypeError(
                f"{name}: {label} must be a DistributedVector (make it with A.scatter), got "
                f"{type(vector).__name__}"
            )
        if not A.row_layout.same_as(vector.layout):
            raise ValueError(f"{name}: {label} is not split like A's rows; use A.scatter")
    for label, value in (("rtol", rtol), ("atol", atol)):
        if not np.isscalar(value) or not np.isfinite(value) or value < 0:
            raise ValueError(f"{name}: {label} must be a finite number >= 0, got {value!r}")
    if maxiter is None:
        maxiter = default_maxiter
    if isinstance(maxiter, bool) or not isinstance(maxiter, (int, np.integer)) or maxiter < 0:
        raise ValueError(f"{name}: maxiter must be a non-negative integer, got {maxiter!r}")
    dtype = np.result_type(A.dtype, b.dtype)
    if dtype.kind not in "fc":
        dtype = np.dtype(np.float64)
    b = b.astype(dtype)
    x = A.zeros(dtype) if x0 is None else x0.astype(dtype)
    return b, x, int(maxiter), dtype


def _preconditioner(M):
    """``r -> M r`` for None, a distributed matrix, or a callable on DistributedVectors."""
    if M is None:
        return None
    if isinstance(M, csr_matrix):
        return M.matvec
    if callable(M):
        return M
    raise TypeError(
        f"M must be a distributed csr_matrix or a callable on DistributedVectors, got "
        f"{type(M).__name__}"
    )


def _dots(pairs):
    """Several ``vdot`` s in one allreduce: ``[conj(a) . b for a, b in pairs]``."""
    layout = pairs[0][0].layout
    xp = layout.xp
    return layout.reduce(
        len(pairs), lambda: np.array([_to_host(xp.vdot(a.local, b.local)) for a, b in pairs]),
        "vdot",
    )  # fmt: skip


def _as(value, dtype):
    return np.dtype(dtype).type(value if np.dtype(dtype).kind == "c" else np.real(value))


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """Conjugate gradients for a Hermitian positive definite distributed ``A``.

    Parameters
    ----------
    A : sparsegpu.distributed.csr_matrix
    b : DistributedVector
        Right-hand side in A's row layout (``A.scatter(b_global)``).
    x0 : DistributedVector, optional
        Starting guess (default zeros).
    rtol, atol : float
        Stop when ``||b - A x|| < max(atol, rtol * ||b||)``.
    maxiter : int, optional
        Iteration limit (default ``10 * n``).
    M : distributed csr_matrix or callable, optional
        Preconditioner approximating ``inv(A)``: ``M @ r`` or ``M(r)``.
    callback : callable, optional
        ``callback(xk)`` after every iteration (on every rank).

    Returns
    -------
    x : DistributedVector
    info : int
        0 when converged, else the iteration limit (scipy's convention).
    """
    b, x, maxiter, dtype = _check("cg", A, b, x0, rtol, atol, maxiter, 10 * A.shape[0])
    precondition = _preconditioner(M)
    bnorm = b.norm()
    if bnorm == 0:
        return b.copy(), 0
    tolerance = max(float(atol), float(rtol) * bnorm)
    r = b - A @ x if x0 is not None else b.copy()
    p = rho_prev = None
    for iteration in range(maxiter):
        if precondition is None:
            z = r
            rr = rho = _dots([(r, r)])[0]
        else:
            z = precondition(r)
            rr, rho = _dots([(r, r), (r, z)])
        if np.sqrt(abs(rr)) < tolerance:
            return x, 0
        if iteration == 0:
            p = z.copy()
        else:
            p *= _as(rho / rho_prev, dtype)
            p += z
        q = A @ p
        alpha = _as(rho / p.vdot(q), dtype)
        x += alpha * p
        r -= alpha * q
        rho_prev = rho
        if callback is not None:
            callback(x)
    return x, maxiter


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """BiCGSTAB for a general square distributed ``A`` (scipy's algorithm).

    Parameters and returns as :func:`cg`; ``info`` is 0 when converged, the iteration
    limit when not, -10 or -11 on a breakdown (``rho`` or ``omega`` vanished), as scipy
    reports them.
    """
    b, x, maxiter, dtype = _check("bicgstab", A, b, x0, rtol, atol, maxiter, 10 * A.shape[0])
    precondition = _preconditioner(M) or (lambda v: v)
    bnorm = b.norm()
    if bnorm == 0:
        return b.copy(), 0
    tolerance = max(float(atol), float(rtol) * bnorm)
    breakdown = np.finfo(dtype).eps ** 2
    r = b - A @ x if x0 is not None else b.copy()
    rtilde = r.copy()
    p = v = alpha = omega = rho_prev = None
    for iteration in range(maxiter):
        rr, rho = _dots([(r, r), (rtilde, r)])
        if np.sqrt(abs(rr)) < tolerance:
            return x, 0
        if abs(rho) < breakdown:
            return x, -10
        if iteration > 0:
            if abs(omega) < breakdown:
                return x, -11
            beta = (rho / rho_prev) * (alpha / omega)
            p -= _as(omega, dtype) * v
            p *= _as(beta, dtype)
            p += r
        else:
            p = r.copy()
        phat = precondition(p)
        v = A @ phat
        rv = rtilde.vdot(v)
        if rv == 0:
            return x, -11
        alpha = rho / rv
        r -= _as(alpha, dtype) * v
        if r.norm() < tolerance:
            x += _as(alpha, dtype) * phat
            return x, 0
        shat = precondition(r)
        t = A @ shat
        tr, tt = _dots([(t, r), (t, t)])
        omega = tr / tt
        x += _as(alpha, dtype) * phat
        x += _as(omega, dtype) * shat
        r -= _as(omega, dtype) * t
        rho_prev = rho
        if callback is not None:
            callback(x)
    return x, maxiter


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None, M=None,
          callback=None):  # fmt: skip
    """Restarted GMRES for a general square distributed ``A`` (right preconditioning).

    Parameters
    ----------
    A, b, x0, rtol, atol, M
        As :func:`cg`; convergence is on the true residual ``||b - A x||``.
    restart : int, optional
        Krylov vectors per cycle (default 20, at most n).
    maxiter : int, optional
        Restart cycles (default ``10 * n``), scipy's meaning.
    callback : callable, optional
        ``callback(x)`` after every cycle.

    Returns
    -------
    x : DistributedVector
    info : int
        0 when converged, else the number of cycles run.

    Notes
    -----
    Classical Gram-Schmidt done twice; the basis is a (restart + 1, local rows) array on
    each rank, and each pass is one local matrix-vector product and one allreduce.
    """
    b, x, maxiter, dtype = _check("gmres", A, b, x0, rtol, atol, maxiter, 10 * A.shape[0])
    n = A.shape[0]
    restart = min(20 if restart is None else int(restart), max(n, 1))
    if restart < 1:
        raise ValueError(f"gmres: restart must be a positive integer, got {restart!r}")
    precondition = _preconditioner(M) or (lambda v: v)
    bnorm = b.norm()
    if bnorm == 0:
        return b.copy(), 0
    tolerance = max(float(atol), float(rtol) * bnorm)
    layout = A.row_layout
    xp = layout.xp
    r = b - A @ x if x0 is not None else b.copy()
    beta = r.norm()
    basis = xp.empty((restart + 1, layout.n_local), dtype=dtype)

    def project(w, j):
        coefficients = layout.reduce(j + 1, lambda: _to_host(basis[: j + 1].conj() @ w.local),
                                     "gmres orthogonalisation")  # fmt: skip
        if dtype.kind != "c":
            coefficients = coefficients.real
        coefficients = coefficients.astype(dtype)
        w.local -= basis[: j + 1].T @ xp.asarray(coefficients)
        return coefficients

    for _cycle in range(maxiter):
        if beta < tolerance:
            return x, 0
        basis[0] = r.local / _as(beta, dtype)
        hessenberg = np.zeros((restart + 1, restart), dtype=dtype)
        givens = np.zeros((restart, 2), dtype=dtype)
        g = np.zeros(restart + 1, dtype=dtype)
        g[0] = beta
        used = 0
        for j in range(restart):
            w = A @ precondition(DistributedVector(basis[j].copy(), layout))
            column = project(w, j) + project(w, j)
            h_next = w.norm()
            hessenberg[: j + 1, j] = column
            hessenberg[j + 1, j] = h_next
            rotate_column(hessenberg, givens, g, j)
            used = j + 1
            if abs(g[j + 1]) < tolerance or h_next == 0:
                break
            basis[j + 1] = w.local / _as(h_next, dtype)
        y = np.linalg.solve(np.triu(hessenberg[:used, :used]), g[:used])
        update = DistributedVector(basis[:used].T @ xp.asarray(y), layout)
        x += precondition(update)
        r = b - A @ x
        beta = r.norm()
        if callback is not None:
            callback(x)
        if beta < tolerance:
            return x, 0
    return x, maxiter


__all__ = ["bicgstab", "cg", "gmres"]
