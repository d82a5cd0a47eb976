"""The options of :func:`sparsegpu.linalg.amg`, checked once, named as PyAMG names them."""

from __future__ import annotations

import numpy as np

from ._smoothing import normalise_smoother

COARSE_SOLVERS = ("auto", "cholesky", "lu", "splu", "pinv")
# PyAMG options that mean something else here or are not offered, and what to do instead
NOT_OFFERED = {
    "aggregate": "aggregation is always the parallel MIS-2 kind (no sequential 'standard')",
    "improve_candidates": "B is used as given",
    "symmetry": "A is taken as Hermitian (smoothed aggregation's assumption)",
    "keep": "the hierarchy keeps T and the aggregates anyway (for update())",
    "diagonal_dominance": "no level is treated as diagonally dominant",
    "BH": "left preconditioning with a separate left near-null space is not offered",
}


def integer(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"amg: {name} must be an integer >= {least}, got {value!r}")
    return int(value)


def strength_theta(strength) -> float:
    """theta of ``strength``: ``'symmetric'``, ``('symmetric', {'theta': t})`` or None."""
    if strength is None or strength == "symmetric":
        return 0.0
    if (
        isinstance(strength, tuple)
        and len(strength) == 2
        and strength[0] == "symmetric"
        and isinstance(strength[1], dict)
    ):
        unknown = set(strength[1]) - {"theta"}
        if unknown:
            raise ValueError(
                f"amg: strength 'symmetric' takes only 'theta', got options {sorted(unknown)}"
            )
        theta = strength[1].get("theta", 0.0)
        if not (np.isscalar(theta) and np.isfinite(theta) and 0 <= theta < 1):
            raise ValueError(f"amg: strength theta must be in [0, 1), got {theta!r}")
        return float(theta)
    raise ValueError(
        f"amg: strength must be 'symmetric', ('symmetric', {{'theta': t}}) or None, got "
        f"{strength!r}; PyAMG's 'classical', 'evolution' and 'affinity' are not offered"
    )


def smoothing_omega(smooth) -> float | None:
    """The prolongation smoother's omega (``('jacobi', {'omega': w})``), None: unsmoothed."""
    if smooth is None:
        return None
    if smooth == "jacobi":
        return 4.0 / 3.0
    if isinstance(smooth, tuple) and len(smooth) == 2 and smooth[0] == "jacobi":
        unknown = set(smooth[1]) - {"omega"}
        if unknown:
            raise ValueError(f"amg: smooth 'jacobi' takes only 'omega', got {sorted(unknown)}")
        omega = smooth[1].get("omega", 4.0 / 3.0)
        if not (np.isscalar(omega) and np.isfinite(omega) and 0 < omega < 2):
            raise ValueError(f"amg: smooth omega must be in (0, 2), got {omega!r}")
        return float(omega)
    raise ValueError(
        f"amg: smooth must be 'jacobi', ('jacobi', {{'omega': w}}) or None, got {smooth!r}"
    )


def coarse_solver(value) -> str:
    if value not in COARSE_SOLVERS:
        raise ValueError(f"amg: coarse_solver must be one of {COARSE_SOLVERS}, got {value!r}")
    return "lu" if value == "splu" else value


def refuse_pyamg_only(options: dict) -> None:
    for name in options:
        why = NOT_OFFERED.get(name)
        if why is None:
            raise TypeError(f"amg() got an unexpected keyword argument {name!r}")
        raise ValueError(f"amg: PyAMG's option {name!r} is not offered here: {why}")


def smoothers(presmoother, postsmoother):
    pre = normalise_smoother("presmoother", presmoother)
    post = normalise_smoother("postsmoother", postsmoother)
    return pre, post
