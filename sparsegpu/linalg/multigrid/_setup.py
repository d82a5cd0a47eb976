"""Building a smoothed-aggregation hierarchy level by level, on the host or the GPU.

:func:`coarsen` makes one level's coarse operator from its matrix (strength, MIS-2
aggregates, tentative prolongator, Jacobi-smoothed prolongator, Galerkin product);
:func:`prepare_smoother` the level's smoother data; :func:`coarse_inverse` the dense
inverse at the bottom. The products are sparsegpu's: ``sg.spgemm`` and
``sg.galerkin_product``, which plan once per pair of patterns, so :func:`recompute` (new
values on the same pattern) runs the same products on kept plans.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...device._rows import row_ids
from . import _aggregation as agg
from ._bridge import (
    as_operator,
    csr_arrays,
    galerkin_product,
    matrix_from_arrays,
    reducible,
    spgemm,
    transpose,
    with_values,
)
from ._smoothing import chebyshev_coefficients, lanczos_start, spectral_radius

#: Largest coarsest level solved densely (its inverse is a dense n x n product).
MAX_DENSE = 8192
#: Largest coarsest level inverted on the host, where the device's factorisations and
#: checks took 1-2.5 ms of waits (a tenth of a re-set-up on the H200) and NumPy takes
#: microseconds. Kept small: LAPACK on the host may run its BLAS threaded, and with the
#: host's cores busy (other processes' BLAS threads: PyAMG's, in the benchmark) the
#: inverse of 144 and 163 rows took 0.54 and 0.66 s there, where 19 and 26 rows took
#: 0.6-0.8 ms (amg_inplace_h200).
HOST_DENSE = 32


@dataclass
class Level:
    """One level: its matrix, the transfers to the next, what re-set-up keeps.

    Attributes
    ----------
    A : sparsegpu CSR matrix
    P, R : sparsegpu CSR matrices or None
        Prolongation to this level from the next and restriction to it (None: coarsest).
    T : sparsegpu CSR matrix or None
        The tentative prolongator (kept: the aggregation re-set-up reuses).
    S : sparsegpu CSR matrix or None
        The Jacobi-smoothing matrix ``I - omega/rho D^-1 A`` of the last (re-)set-up (its
        pattern is A's: re-set-up gives it new values).
    aggregates : array or None
        Each node's aggregate (-1: none).
    B : array
        The near-null space on this level.
    blocksize : int
        Unknowns a node.
    rho : float
        The spectral-radius estimate of ``D^-1 A``.
    """

    A: Any
    B: Any = None
    blocksize: int = 1
    P: Any = None
    R: Any = None
    T: Any = None
    S: Any = None
    aggregates: Any = None
    rho: float = 0.0
    smoother_diagonal: Any = None
    jacobi_weight: float = 1.0
    chebyshev: list = field(default_factory=list)
    lanczos_start: Any = None  # the spectral-radius estimate's start vector, kept


class Clock:
    """Seconds per set-up phase (the device synchronised at each phase's end, so the
    time is the phase's own)."""

    def __init__(self, xp):
        self.xp = xp
        self.phases: dict[str, float] = {}

    def phase(self, name: str, started: float) -> float:
        if self.xp is not np:
            self.xp.cuda.get_current_stream().synchronize()
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - started
        return now


def check_values(data, xp, what: str) -> None:
    finite = xp.isfinite(data)
    if not bool(reducible(finite).all()):
        where = int(xp.argmin(finite))
        raise ValueError(
            f"amg: {what} has a non-finite value ({data[where].item()!r} at stored entry "
            f"{where}); multigrid needs finite values"
        )


def diagonal_of(A, xp):
    indptr, indices, data = csr_arrays(A, xp)
    d = agg.diagonal(indptr, indices, data, xp)
    zero = d == 0
    if bool(reducible(zero).any()):
        row = int(xp.argmax(zero))
        raise ValueError(
            f"amg: the matrix ({A.shape[0]} rows) has a zero (or missing) diagonal entry "
            f"at row {row}; smoothed aggregation needs a nonzero diagonal (drop empty rows "
            "and columns, or add a shift)"
        )
    return d


def estimate_rho(A, d, xp, seed: int, level: Level | None = None) -> float:
    """rho(D^-1 A) by Lanczos on A's plan (bound once: no dispatch, and no planning by
    measurement, for these few products); ``level``: where its start vector is kept (a
    re-set-up starts from the set-up's)."""
    product = as_operator(A, A.dtype, xp)
    d_inv_sqrt = 1 / xp.sqrt(xp.abs(d))
    dtype = np.result_type(d_inv_sqrt.dtype, A.dtype)
    start = None if level is None else level.lanczos_start
    if start is None or start.shape != (A.shape[0],) or start.dtype != dtype:
        start = lanczos_start(A.shape[0], dtype, xp, seed)
        if level is not None:
            level.lanczos_start = start
    return spectral_radius(
        product.matvec, A.shape[0], d_inv_sqrt, xp, seed=seed, dtype=A.dtype, start=start
    )


def smoothed_prolongator(level: Level, d, omega, xp):
    """``P = (I - omega / rho D^-1 A) T``, one SpGEMM with A's pattern. On re-set-up the
    smoothing matrix and P take the new values on the patterns kept from the set-up
    (:func:`with_values`), so planning finds them known."""
    A, T = level.A, level.T
    if omega is None:
        return T
    indptr, indices, data = csr_arrays(A, xp)
    values = agg.jacobi_smoothing(indptr, indices, data, d, omega / level.rho, xp)
    S = None if level.S is None else with_values(level.S, values, xp=xp)
    level.S = matrix_from_arrays(indptr, indices, values, A.shape, A) if S is None else S
    return _kept_pattern(level.P, spgemm(level.S, T), xp)


def _kept_pattern(previous, made, xp):
    """``made`` as a matrix of ``previous``'s pattern (re-set-up: what planning knows of
    it kept), or ``made`` itself on the first set-up or where the patterns differ."""
    kept = None if previous is None else with_values(previous, fresh=made, xp=xp)
    return made if kept is None else kept


def coarsen(level: Level, theta: float, omega, seed: int, clock: Clock, xp):
    """Strength, aggregates, T, P, R: ``(coarse level, this level's diagonal)``, or None
    when nothing coarsens."""
    started = time.perf_counter()
    A = level.A
    indptr, indices, data = csr_arrays(A, xp)
    graph = agg.symmetric_strength(indptr, indices, data, theta, level.blocksize, xp)
    started = clock.phase("strength", started)
    aggregates, count = agg.mis2_aggregate(*graph, xp, seed=seed)
    started = clock.phase("aggregation", started)
    k = level.B.shape[1]
    nodes = A.shape[0] // level.blocksize
    if count == 0 or count * k >= A.shape[0] or count >= nodes:
        return None
    t_arrays, t_shape, coarse_B = agg.tentative_prolongator(
        aggregates, count, level.B, level.blocksize, xp
    )
    T = matrix_from_arrays(*t_arrays, t_shape, A)
    level.T, level.aggregates = T, aggregates
    started = clock.phase("tentative", started)
    coarse = Level(A=None, B=coarse_B, blocksize=k)
    d = recompute(level, coarse, omega, seed, clock, xp, started)
    return coarse, d


def recompute(level: Level, coarse: Level, omega, seed: int, clock: Clock, xp, started=None):
    """The values of P, R and the coarse matrix from the level's matrix (T kept)."""
    started = started or time.perf_counter()
    d = diagonal_of(level.A, xp)
    level.rho = estimate_rho(level.A, d, xp, seed, level)
    started = clock.phase("spectral radius", started)
    if level.T is not None:
        level.P = smoothed_prolongator(level, d, omega, xp)
        level.R = transpose(level.P, previous=level.R, xp=xp)  # re-set-up: P's pattern kept
        started = clock.phase("prolongator", started)
    if level.R is not None and level.T is None:  # a PyAMG hierarchy's own P and R
        made = spgemm(level.R, spgemm(level.A, level.P))
    else:
        made = galerkin_product(level.A, level.P)
    coarse.A = _kept_pattern(coarse.A, made, xp)
    clock.phase("galerkin", started)
    return d


def prepare_smoother(level: Level, pre, post, d, xp) -> None:
    """The level's smoother diagonal and coefficients (from ``rho``)."""
    names = {pre[0], post[0]}
    if len(names) > 1 and "l1_jacobi" in names:
        raise ValueError("amg: l1_jacobi cannot be combined with another smoother")
    if "l1_jacobi" in names:
        indptr, indices, data = csr_arrays(level.A, xp)
        sums = xp.zeros(level.A.shape[0], dtype=xp.abs(data[:1]).dtype)
        xp.add.at(sums, row_ids(indptr, xp), xp.abs(data))
        level.smoother_diagonal = 1 / sums
        return
    level.smoother_diagonal = 1 / d
    for name, options in (pre, post):
        if name == "jacobi":
            level.jacobi_weight = options["omega"] / level.rho
        else:
            level.chebyshev = chebyshev_coefficients(
                options["degree"],
                options["lower_bound"] * level.rho,
                options["upper_bound"] * level.rho,
            )


def _dense(A, xp):
    indptr, indices, data = csr_arrays(A, xp)
    dense = xp.zeros(A.shape, dtype=data.dtype)
    dense[row_ids(indptr, xp), indices] = data
    return dense


def coarse_inverse(A, solver: str, xp, previous=None):
    """The coarsest matrix's inverse as a dense sparsegpu matrix (its product is the
    coarse solve: a plan like any other, so a graph can hold it): inverted on the host up
    to :data:`HOST_DENSE` rows. ``previous``: the inverse of an earlier set-up of this
    size, whose values it takes in place where it can (:func:`with_values`: its plan kept)."""
    n = A.shape[0]
    if n > MAX_DENSE:
        raise ValueError(
            f"amg: the coarsest level has {n} rows, too many for a dense solve (at most "
            f"{MAX_DENSE}); raise max_levels or lower max_coarse"
        )
    dense = _dense(A, xp)
    lapack = np if n <= HOST_DENSE else xp  # where the factorisations run
    if lapack is not xp:
        dense = xp.asnumpy(dense)
    inverse = None
    if solver in ("auto", "cholesky"):
        inverse = _cholesky_inverse(dense, lapack)
        if inverse is None and solver == "cholesky":
            raise ValueError(
                f"amg: the coarsest level ({n} rows) is not positive definite, so Cholesky "
                "fails; use coarse_solver='lu' (or 'auto') for an indefinite A"
            )
    if inverse is None and solver == "pinv":
        inverse = lapack.linalg.pinv(dense)
    elif inverse is None:
        try:
            inverse = lapack.linalg.inv(dense)
        except np.linalg.LinAlgError:
            inverse = None
    _check_inverse(dense, inverse, solver, lapack)
    values = xp.asarray(inverse.ravel())
    if previous is not None and previous.shape == (n, n) and previous.dtype == values.dtype:
        kept = with_values(previous, values=values, xp=xp)
        if kept is not None:
            return kept
    indptr = xp.arange(0, n * n + 1, n, dtype=np.int32 if n * n < 2**31 else np.int64)
    indices = xp.tile(xp.arange(n, dtype=indptr.dtype), n)
    return matrix_from_arrays(indptr, indices, values, (n, n), A)


def _cholesky_inverse(dense, xp):
    try:
        lower = xp.linalg.cholesky(dense)
    except np.linalg.LinAlgError:
        return None
    if not bool(reducible(xp.isfinite(lower)).all()):  # CuPy answers NaN instead of raising
        return None
    lower_inverse = xp.linalg.inv(lower)
    return lower_inverse.conj().T @ lower_inverse


def _check_inverse(dense, inverse, solver: str, xp) -> None:
    n = dense.shape[0]
    singular = inverse is None or not bool(reducible(xp.isfinite(inverse)).all())
    if not singular and solver != "pinv":
        norm_1 = float(reducible(xp.abs(dense).sum(axis=0)).max())
        inverse_1 = float(reducible(xp.abs(inverse).sum(axis=0)).max())
        singular = norm_1 * inverse_1 > 1e-2 / np.finfo(dense.dtype).eps
        condition = norm_1 * inverse_1
    if singular:
        estimate = (
            ""
            if inverse is None or not bool(reducible(xp.isfinite(inverse)).all())
            else (f" (condition number about {condition:.2g})")
        )
        raise ValueError(
            f"amg: the coarsest level ({n} rows) is singular{estimate}: A is likely "
            "singular itself (a pure Neumann problem?) or B misses its null space; pass "
            "coarse_solver='pinv' for a consistent singular system"
        )
