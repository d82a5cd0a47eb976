"""Planning: what each product runs, decided by estimate or by measurement, and kept.

Dispatch asks here once per matrix, operation and request (:func:`decide`); planning asks
selection (:mod:`sparsegpu.engine._select`) for the estimate and the candidates, times the
candidates on the product's real operands with the one timing harness
(:func:`sparsegpu.measure._timing.time_candidates`), checks their answers with the one answer
check (:class:`sparsegpu.measure._oracle.AnswerCheck`, bounded by a
:class:`~sparsegpu.measure._oracle.ProductBound`) and keeps the fastest. Like FFTW's
``FFTW_ESTIMATE``/``FFTW_MEASURE`` and cuDNN's benchmark mode.

Operations (:class:`~sparsegpu.engine._choice.Operation`)
    ``A @ x`` (one vector; ``A @ X`` with one column is the same), ``A @ X`` per bucket of
    X's column count, X's memory order and the dtype, and the products of ``A.T`` (a CSC
    view whose mirror is the transpose, built once on the device: planned as products of
    that mirror). Each has its own choice.
    ``A @ B`` (sparse x sparse) is planned by :mod:`sparsegpu.engine._sparse_planning`: an
    algorithm per pair of patterns.
Levels
    ``estimate``: selection's rules. ``measure`` (the default): the first product of a
    matrix runs on the estimate; the second times a short list of candidates on its real
    operands with CUDA events (the estimate, cuSPARSE's algorithms, ``merge_path``'s tile
    shapes, the
    vector family's shape for the row class, ``delta16`` where the matrix's columns
    compress, the tuned entry), checks they agree, and keeps the fastest for this matrix
    and for matrices of the same fingerprint in this process. Backends that build a format
    of their own (``delta16``: ``Backend.estimated`` False) are reached only this way.
    ``exhaustive``: every usable backend with every candidate policy it has. The level
    comes from ``planning=`` (``sg.matvec``/:func:`choose`), ``A.planning``, the innermost
    ``with sparsegpu.planning(...)``, ``SPARSEGPU_PLANNING``, in that order.
"""

from __future__ import annotations

import functools
import threading
import time
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from .._version import REMOVED_IN
from ..backends.base import Plan, plan_on
from ..device import _cuda
from ..device._mirror import ChoiceKey
from ..device._staging import to_residence
from ..measure import _timing
from ..measure._oracle import ProductBound
from . import _registry, _select
from ._choice import VECTOR, Choice, Operand, Operation, Request, operation_of
from ._registry import AUTO
from ._select import (
    auto_estimate,
    mixed_storage,
    name_in_force,
    result_dtype,
    select,
    short_list,
)

PLANNING_ENV_VAR = "SPARSEGPU_PLANNING"
LEVELS = ("estimate", "measure", "exhaustive")
DEFAULT_LEVEL = "measure"

_scoped_level: ContextVar[str | None] = ContextVar("sparsegpu_planning", default=None)


# --------------------------------------------------------------------------- levels
@contextmanager
def planning(level: str):
    """Use planning level ``level`` for matrices planned inside this block (this thread).

    Parameters
    ----------
    level : {"estimate", "measure", "exhaustive"}

    Examples
    --------
    >>> import sparsegpu as sg
    >>> with sg.planning("estimate"):
    ...     pass
    """
    token = _scoped_level.set(check_level(level))
    try:
        yield level
    finally:
        _scoped_level.reset(token)


def check_level(level) -> str:
    """``level`` if it is a planning level, else a ValueError naming the choices."""
    if level not in LEVELS:
        raise ValueError(
            f"unknown planning level {level!r}; choose one of {', '.join(map(repr, LEVELS))}"
        )
    return level


def level_in_force(explicit: str | None, matrix_level: str | None) -> str:
    """The planning level in force: ``planning=``, ``A.planning``, the scope, the
    environment variable, then ``"measure"``."""
    level = explicit or matrix_level or _scoped_level.get() or _select.env_value(PLANNING_ENV_VAR)
    if level is None:
        return DEFAULT_LEVEL
    if level not in LEVELS:
        raise ValueError(
            f"{PLANNING_ENV_VAR}={level!r} is not a planning level; choose one of "
            f"{', '.join(LEVELS)} (or unset it)"
        )
    return level


# --------------------------------------------------------------------- measurements
# A candidate whose first timed sample is over this many times the fastest candidate so far
# is not timed again (its one sample is what planning records).
HOPELESS = 4
# A planning sample is a loop of products (at most SAMPLE_PRODUCTS) streaming at least
# SAMPLE_BYTES of matrix and vectors, about 100 us of the GPU's traffic, after one untimed
# lead product (sparsegpu.measure._timing). With a tenth of that and no lead product (one or two
# products a sample on 20-60 MB matrices), planning on the H100 timed two merge-path shapes
# at 37.3 and 37.2 us whose products took 25.8 and 24.3 us in a loop, and kept the slower
# (class_fit_h100_run2.json, 100k rows of ~25 with one of 6,000, float32); on matrices over
# SAMPLE_BYTES, whose samples are one product, the lead product is what keeps the first
# one's launch latency out (lead_call_h100.json).
SAMPLE_BYTES = 4e8
SAMPLE_PRODUCTS = 20


@dataclass(frozen=True)
class Measurement:
    """One candidate timed by planning: its median milliseconds (None when it could not
    run here) and whether its answer agreed with the estimate's."""

    backend: str
    policy: Any
    ms: float | None
    agreed: bool
    note: str = ""

    def __str__(self) -> str:
        timing = f"{self.ms * 1e3:9.1f} us" if self.ms is not None else "        --"
        flag = "" if self.agreed else "  (disagreed: left out)"
        note = f"  ({self.note})" if self.note else ""
        return f"{self.backend:<11} {timing}  {self.policy!r}{flag}{note}"


# (name asked for, operation, fingerprint) -> (backend name, policy) measured fastest in
# this process
_measured: dict[tuple, tuple[str, Any]] = {}
_measured_lock = threading.Lock()


def fingerprint(mirror) -> tuple:
    """What two matrices must share for one's measured plan to serve the other: shape,
    dtypes, every row statistic and a BSR mirror's block shape (a matrix with new values but
    the same pattern, as in Newton or time-stepping codes, has the same fingerprint)."""
    blocks = tuple(mirror.blocksize) if mirror.format == "bsr" else None
    return (mirror.shape, str(mirror.dtype), str(mirror.index_dtype), mirror.stats, blocks)


def remembered(requested: str, mirror, operation: Operation = VECTOR) -> tuple[str, Any] | None:
    """The (backend, policy) planning measured fastest for this fingerprint and operation
    when ``requested`` (``"auto"`` or a backend's name) was in force, or None."""
    return _measured.get((requested, operation, fingerprint(mirror)))


def forget_measurements() -> None:
    """Forget every plan measured in this process (the next matrices plan again)."""
    with _measured_lock:
        _measured.clear()


# ------------------------------------------------------------------------ measuring
def measure(operand: Operand, x, estimate: Choice, level: str, *, store=None, capturable=False):
    """Time the candidates of ``level`` for the estimate's product on ``x``: the fastest
    that agrees with the estimate's answer, and its plan (see the module docstring).

    Selection says what to time (:func:`~sparsegpu.engine._select.short_list`); what the
    answers' check reads of A and of ``x`` is read first, where ``x`` is
    (:class:`~sparsegpu.measure._oracle.ProductBound`); each candidate's plan is made once
    (kept on its mirror like any plan), then ``x`` (the product's right-hand side,
    anywhere: a vector for ``A @ x``, an (n_cols, k) array for ``A @ X``) is moved, once,
    to where the estimate computes, in its value dtype and the operation's memory order.
    Runs on the current stream and waits for it. The cost: per candidate, one checked
    product, then one calibration sample (a loop of products streaming ``SAMPLE_BYTES``, at
    most ``SAMPLE_PRODUCTS`` of them) and, unless it is over ``HOPELESS`` times the fastest
    so far, a warm-up product and five samples taken in alternation with the other
    candidates', so that the host's drift falls on all of them alike
    (:func:`sparsegpu.measure._timing.time_candidates`). A vector kernel on an arrow
    matrix's dense rows runs 200 times cuSPARSE: its repeats alone would cost hundreds of
    milliseconds.
    ``capturable``: only backends whose products a CUDA graph can hold (a solver about to
    capture its iterations).

    Returns ``(choice, plan)``: ``(estimate, None)`` where nothing ran here; None where the
    measurement ran out of memory (the estimate stays). A MemoryError moving ``x`` is the
    product's own, and goes up.
    """
    start = time.perf_counter()
    value_dtype, operation = estimate.value_dtype, estimate.operation
    storage = estimate.storage_dtype  # mixed precision: the values' dtype on the device
    vector_dtype = value_dtype if storage is not None else None
    memo = None  # (mixed-precision winners are not remembered across matrices)
    if storage is None:  # the fingerprint of the mirror every candidate computes on
        mirror = operand.mirror(estimate.implementation.residence, value_dtype)
        memo = (estimate.requested, operation, fingerprint(mirror))
    try:
        listed = short_list(operand, estimate, level, store, capturable)
        if not listed.pairs:
            return estimate, None
        # what the answers' check reads of A and of x, before x moves
        estimated = operand.mirror(estimate.implementation.residence, storage or value_dtype)
        bound = ProductBound.of_operands(estimated, x, value_dtype)
        made = []  # (mirror, plan) per pair, or (mirror, why it cannot run here)
        for backend, policy in listed.pairs:
            mirror = operand.mirror(backend.residence, storage or value_dtype)
            try:
                made.append((mirror, plan_on(mirror, backend, policy, vector_dtype)))
            except Exception as exc:  # a candidate that cannot run here is left out
                made.append((mirror, f"{type(exc).__name__}: {exc}"))
    except MemoryError:
        return None
    x = to_residence(x, estimate.implementation.residence, value_dtype, order=operation.order)
    try:
        check = None
        results: list[Measurement] = []
        groups: dict = {}  # on the host? -> {index in results: product}
        inner = 1
        for (backend, policy), (mirror, plan) in zip(listed.pairs, made, strict=True):
            failure = plan if isinstance(plan, str) else None
            if failure is None:
                try:
                    xp = mirror.xp
                    shape = (mirror.shape[0],) + x.shape[1:]
                    y = xp.empty(shape, dtype=value_dtype, order=operation.order)
                    product = functools.partial(
                        plan.matvec if x.ndim == 1 else plan.matmat, x, out=y
                    )
                    product()
                except Exception as exc:  # a candidate that cannot run here is left out
                    failure = f"{type(exc).__name__}: {exc}"
            if failure is not None:
                results.append(Measurement(backend.name, policy, None, False, failure))
                continue
            if check is None:
                check = bound.check(y, source="the estimate")
                streamed = mirror.nbytes + 2 * x.nbytes
                inner = max(1, min(SAMPLE_PRODUCTS, int(SAMPLE_BYTES // max(streamed, 1))))
            agreed = check.error(y) is None
            if agreed:
                groups.setdefault(xp is np, {})[len(results)] = product
            results.append(Measurement(backend.name, policy, None, agreed))
        for on_host, products in groups.items():
            timings = _timing.time_candidates(
                products, on_host=on_host, warmup=0, repeat=5, inner=inner, hopeless=HOPELESS
            )
            for i, timing in timings.items():
                note = (
                    f"one sample: over {HOPELESS}x the fastest so far" if timing.cut_short else ""
                )
                results[i] = replace(results[i], ms=timing.median_ms, note=note)
    except MemoryError:
        return None
    best = None
    for i, m in enumerate(results):
        if m.agreed and m.ms is not None and (best is None or m.ms < results[best].ms):
            best = i
    if best is None:  # nothing ran here: keep the estimate
        return estimate, None
    (backend, policy), (_, plan), ms = listed.pairs[best], made[best], results[best].ms
    planning_ms = (time.perf_counter() - start) * 1e3
    timed = sum(m.ms is not None for m in results)
    reason = (
        f"measured fastest of {timed} candidates on this matrix's operands "
        f"({ms * 1e3:.1f} us a product"
    )
    first = results[0]
    if first.backend == estimate.backend and first.policy == estimate.policy and first.ms:
        reason += f"; the estimate, {estimate.backend}, {first.ms * 1e3:.1f} us"
    reason += ")" + (" among capturable backends" if capturable else "")
    if memo is not None:
        with _measured_lock:
            _measured[memo] = (backend.name, policy)
    else:
        reason = f"mixed precision ({storage} values, {value_dtype} sums); {reason}"
    structure = listed.structure if storage is None and estimate.requested == AUTO else ()
    choice = Choice(
        backend.name, policy, reason, estimate.stats, value_dtype, estimate.requested,
        level=level, measurements=tuple(results), planning_ms=planning_ms,
        storage_dtype=storage, implementation=backend, operation=operation,
        structure=structure,
    )  # fmt: skip
    return choice, plan


def from_memory(operand: Operand, estimate: Choice) -> Choice | None:
    """The estimate replaced by the plan measured for a matrix of the same fingerprint in
    this process, or None."""
    backend = estimate.implementation
    if backend is None or backend.residence.name == "host" or estimate.storage_dtype is not None:
        return None
    mirror = operand.mirror(backend.residence, estimate.value_dtype)
    found = remembered(estimate.requested, mirror, estimate.operation)
    if found is None:
        return None
    name, policy = found
    if estimate.requested != AUTO:
        chosen = backend if name == backend.name else None
    else:
        candidates = _select.gpu_candidates(estimate.value_dtype)
        chosen = next((b for b in candidates if b.name == name), None)
    if chosen is None or not chosen.supports(mirror) or not chosen.policy_fits(mirror, policy):
        return None
    return Choice(
        name, policy, "measured on a matrix of the same fingerprint in this process",
        estimate.stats, estimate.value_dtype, estimate.requested, estimate.override,
        level="measure", implementation=chosen, operation=estimate.operation,
    )  # fmt: skip


# ------------------------------------------------------------------ planned products
class PlannedChoice(NamedTuple):
    """A product's choice with its plan: what a matrix keeps per :class:`ChoiceKey`.

    ``measure_next``: the choice is ``auto``'s estimate and the planning level asks for a
    measurement, made by the next product (a matrix multiplied once never pays for it).
    """

    plan: Plan
    value_dtype: np.dtype
    on_host: bool
    choice: Choice
    measure_next: bool = False


def with_plan(operand: Operand, choice: Choice, measure_next: bool = False) -> PlannedChoice:
    """``choice`` with its plan (made once, on its mirror)."""
    backend = choice.implementation
    mixed = choice.storage_dtype is not None  # values kept narrow, vectors in value_dtype
    mirror = operand.mirror(backend.residence, choice.storage_dtype or choice.value_dtype)
    if not backend.supports(mirror):
        reason = backend.refuse_reason(mirror) or (
            f"its dtypes ({mirror.dtype} values, {mirror.index_dtype} indices) are not among "
            f"those it supports ({', '.join(map(str, backend.value_dtypes))})"
        )
        raise ValueError(f"backend {backend.name!r} cannot take this matrix: {reason}")
    plan = plan_on(mirror, backend, choice.policy, choice.value_dtype if mixed else None)
    on_host = backend.residence.name == "host"
    return PlannedChoice(plan, choice.value_dtype, on_host, choice, measure_next)


def decide(
    operand: Operand, name: str, x_dtype, policy, planning=None, operation: Operation = VECTOR
) -> PlannedChoice:
    """The choice and plan of one product; the slow, cached part of dispatch: the
    estimate, or the plan measured on a matrix of the same fingerprint, or the estimate
    marked to be measured by the next product."""
    choice = select(operand, x_dtype, Request(name, policy, planning), operation=operation)
    if not _plans_by_measurement(operand, choice, policy, planning):
        return with_plan(operand, choice)
    found = from_memory(operand, choice)
    if found is not None:
        return with_plan(operand, found)
    return with_plan(operand, choice, measure_next=True)


def _plans_by_measurement(operand: Operand, choice: Choice, policy, planning) -> bool:
    """Whether the estimate is to be replaced by a measurement: at a level above
    ``estimate``, without a policy given, on the GPU: ``auto``'s choice of backend, or the
    policy of a named backend that has a short list (cuSPARSE's algorithm)."""
    if (
        choice.level != "estimate"
        or policy is not None
        or operand.policy is not None
        or choice.implementation.residence.name == "host"
        or level_in_force(planning, operand.planning) == "estimate"
    ):
        return False
    if choice.requested == AUTO:
        return True
    # a backend named without a policy: plan its policy when it has a short list to time
    backend = choice.implementation
    mirror = operand.mirror(backend.residence, choice.storage_dtype or choice.value_dtype)
    operation = choice.operation
    if operation.kind == "A @ X":
        return bool(backend.matmat_candidates(mirror, operation.columns, operation.order))
    return bool(backend.planning_candidates(mirror))


def measure_now(
    operand: Operand, cache, key, entry: PlannedChoice, x, level=None, capturable=False
) -> PlannedChoice:
    """Replace ``entry`` (an estimate, kept in ``cache`` under ``key``) by the plan
    measured on ``x`` (the product's right-hand side, anywhere), unless another thread is
    planning this matrix: then this product runs on the estimate (planning one matrix
    never blocks a product). A measurement that fails for memory keeps the estimate; an
    ``x`` without columns (``A @ X`` with k = 0) has nothing to measure on and leaves the
    measurement to the next product."""
    if x.ndim == 2 and x.shape[1] == 0:
        return entry
    if not cache.planning_lock.acquire(blocking=False):
        return entry
    try:
        current = cache.choices.get(key, entry)
        if current is not entry and not current.measure_next:
            return current  # measured by another thread meanwhile
        level = level or level_in_force(key[3], operand.planning)
        operation = entry.choice.operation
        if operation == VECTOR and x.ndim == 2:
            x = x[:, 0]
        found = measure(operand, x, entry.choice, level, capturable=capturable)
        if found is None:  # out of memory while measuring: the estimate stays
            new = entry._replace(measure_next=False)
        else:
            choice, plan = found
            on_host = choice.implementation.residence.name == "host"
            plan = entry.plan if plan is None else plan
            new = PlannedChoice(plan, entry.value_dtype, on_host, choice)
            if choice.requested == AUTO:  # what explain(A) shows
                key_dtype = entry.value_dtype
                if choice.storage_dtype is not None:
                    key_dtype = (choice.storage_dtype, entry.value_dtype)
                cache.measured[(key_dtype, operation)] = choice
        cache.choices[key] = new
        return new
    finally:
        cache.planning_lock.release()


def auto_key(operand: Operand, x_dtype, operation: Operation = VECTOR) -> ChoiceKey:
    """The key of ``auto``'s choice for products without per-call options."""
    return ChoiceKey(
        AUTO, np.dtype(x_dtype), None, None, operand.policy, operand.planning,
        _registry.generation, operation,
    )  # fmt: skip


# ------------------------------------------------------------------- public entries
def operand_of(A) -> Operand:
    """What selection and planning read of the sparsegpu matrix ``A``; a TypeError for
    anything else."""
    if not hasattr(A, "_sg_operand"):
        raise TypeError(
            f"A must be a sparsegpu matrix, got {type(A).__name__}; wrap it with "
            "sparsegpu.csr_matrix(A)"
        )
    return A._sg_operand()


def choose(A, x, *, level: str | None = None, capturable: bool = False) -> Choice:
    """Choose the backend and policy of ``A @ x`` now, by measurement on this ``x``, and
    keep the choice for ``A``.

    What ``auto`` does by itself on a matrix's second product, done at once (solvers and
    benchmarks call it before a loop of products).

    Parameters
    ----------
    A : sparsegpu matrix
    x : numpy.ndarray or cupy.ndarray
        A representative right-hand side: 1-D of length ``A.shape[1]`` plans ``A @ x``;
        2-D plans ``A @ X`` for X's bucket of k (the power of two at least k), memory order
        and dtype (one column is ``A @ x``; without a column, the estimate is kept and the
        next product with columns measures).
    level : {"estimate", "measure", "exhaustive"}, optional
        Default: ``A.planning``, ``sparsegpu.planning``, ``SPARSEGPU_PLANNING``, then
        ``"measure"``.
    capturable : bool
        Only backends whose products a CUDA graph can hold (what a solver that captures
        its iterations asks for; cuSPARSE is not among them).

    Returns
    -------
    Choice
        The decided backend and policy, with the times planning measured
        (``choice.measurements``) and what planning cost (``choice.planning_ms``). Without a
        GPU, or at level ``"estimate"``, the estimate.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.csr_matrix(sp.eye(4))
    >>> sg.choose(A, np.ones(4)).backend in [b.name for b in sg.backends()]
    True
    """
    operand = operand_of(A)
    if level is not None:
        check_level(level)
    if x.ndim not in (1, 2) or x.shape[0] != A.shape[1]:
        raise ValueError(
            f"dimension mismatch: A has shape {A.shape} but x has shape {x.shape}; "
            f"x needs {A.shape[1]} rows"
        )
    operation = operation_of(x)
    key = auto_key(operand, x.dtype, operation)
    cache = operand.cache()
    estimate = select(operand, x.dtype, Request(AUTO, None, level), operation=operation)
    if not _plans_by_measurement(operand, estimate, None, level):
        cache.choices[key] = with_plan(operand, estimate)
        return estimate
    entry = cache.choices[key] = with_plan(operand, estimate, measure_next=True)
    level = level_in_force(level, operand.planning)
    return measure_now(operand, cache, key, entry, x, level, capturable).choice


def plan(A, x, *, level: str | None = None, capturable: bool = False) -> Choice:
    """Deprecated name of :func:`choose` (it returns a :class:`Choice`, not a plan); warns
    with a DeprecationWarning and will be removed in sparsegpu 0.3 (2027-06-01)."""
    warnings.warn(
        "sparsegpu.plan(A, x) is now sparsegpu.choose(A, x): it returns a Choice, not a "
        f"Plan; the old name will be removed in {REMOVED_IN}",
        DeprecationWarning,
        stacklevel=2,
    )
    return choose(A, x, level=level, capturable=capturable)


def planned_choice(
    A, x_dtype=None, *, backend: str | None = None, policy=None, x=None, capturable=False
) -> PlannedChoice:
    """The choice and plan a product ``A @ x`` with an x of ``x_dtype`` would run (made if
    needed).

    Solvers and benchmarks call ``plan.matvec(x, out=...)`` on device arrays directly,
    skipping the per-call dispatch. Given a representative ``x`` (a solver's right-hand
    side) and ``auto`` in force, the matrix is planned by measurement first (:func:`choose`),
    since the plan is about to run many times; ``capturable`` keeps to backends a CUDA
    graph can hold. The choice (``.choice.implementation``: the backend) comes with the
    plan, for callers that must know what the plan runs on.
    """
    operand = operand_of(A)
    name = name_in_force(backend, operand.backend)
    dtype = np.dtype(x_dtype or operand.dtype)
    if x is not None and name == AUTO and policy is None and _cuda.is_cupy_array(x):
        key = auto_key(operand, dtype, operation_of(x))
        entry = operand.cache().choices.get(key)
        stale = capturable and entry is not None and not entry.choice.implementation.capturable
        if entry is None or entry.measure_next or stale:
            choose(A, x.astype(dtype, copy=False), capturable=capturable)
            entry = operand.cache().choices.get(key)
        if entry is not None:
            return entry
    return decide(operand, name, dtype, policy, operation=VECTOR if x is None else operation_of(x))


def plan_for(A, x_dtype=None, *, backend: str | None = None, policy=None, x=None, capturable=False):
    """The :class:`~sparsegpu.backends.base.Plan` a product ``A @ x`` with an x of
    ``x_dtype`` would run (made if needed): :func:`planned_choice`'s plan."""
    return planned_choice(
        A, x_dtype, backend=backend, policy=policy, x=x, capturable=capturable
    ).plan


def estimate(A, x_dtype=None) -> Choice:
    """What selection's rules give for ``A @ x`` with an x of ``x_dtype`` (default A's
    dtype) under the name in force, without planning."""
    operand = operand_of(A)
    return select(operand, np.dtype(x_dtype or operand.dtype))


def explain(A, x=None) -> Choice:
    """Which backend and policy ``auto`` uses for a product of ``A``, and why.

    Parameters
    ----------
    A : sparsegpu matrix
    x : dtype or array, optional
        The right-hand side of the product, or its dtype (default ``A.dtype``): a vector
        or a dtype asks about ``A @ x``, an (n, k) array about ``A @ X`` with its k and
        memory order.

    Returns
    -------
    Choice
        Printing it shows the backend, the policy, the reason, the row-length statistics
        the rules looked at and, once the product has been planned, what was measured.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> print(sg.explain(sg.csr_matrix(sp.eye(4))).backend)  # doctest: +SKIP
    merge_path
    """
    operand = operand_of(A)
    if isinstance(x, np.ndarray) or _cuda.is_cupy_array(x):
        x_dtype, operation = x.dtype, operation_of(x)
    else:
        x_dtype, operation = np.dtype(x or operand.dtype), VECTOR
    value_dtype = result_dtype(operand.dtype, x_dtype)
    storage = mixed_storage(operand, value_dtype)
    cache = operand.cache()
    if storage is not None:  # what planning measured for it, else the estimate
        measured = cache.measured.get(((storage, value_dtype), operation))
        if measured is not None:
            return measured
        return select(operand, x_dtype, operation=operation)
    override = None
    name = name_in_force(None, operand.backend)
    if name != AUTO:
        override = f"products of this matrix use {name!r} now (A.backend, use_backend or env)"
    measured = cache.measured.get((value_dtype, operation))
    if measured is not None:
        return replace(measured, override=override)
    found = auto_estimate(operand, value_dtype, override, operation)
    return from_memory(operand, found) or found


# ------------------------------------------------------------------ sparse products
# (A @ B: an algorithm per pair of patterns; see "Sparse products" in the module docstring)
