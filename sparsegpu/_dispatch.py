"""Dispatch: one product moved to where its backend computes, and run there.

:func:`product` takes ``A @ x`` from the scipy classes, asks :mod:`sparsegpu._select` once
per matrix, x dtype and request which backend and policy to use, makes (once) the plan on
the matrix's mirror, moves x there and the result back into x's array module. Nothing
here chooses: the choice and its reasons are selection's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _cuda, _registry, _staging
from ._mirror import ChoiceKey, DeviceMemoryError, PlanKey, is_out_of_memory, memory_error
from ._select import (
    AUTO,
    Choice,
    Request,
    check_level,
    env_backend,
    from_memory,
    measure,
    resolve_level,
    resolve_name,
    scoped_backend,
    select,
)
from .backends.base import Plan


class Resolved(NamedTuple):
    """A product's choice with its plan: what the matrix keeps per :class:`ChoiceKey`.

    ``measure_next``: the choice is ``auto``'s estimate and the planning level asks for a
    measurement, made by the next product (a matrix multiplied once never pays for it).
    """

    plan: Plan
    value_dtype: np.dtype
    on_host: bool
    choice: Choice
    measure_next: bool = False


def _resolved(matrix_obj, choice: Choice, measure_next: bool = False) -> Resolved:
    """The plan of ``choice`` (made once, on its mirror)."""
    backend = choice.implementation
    mixed = choice.storage_dtype is not None  # values kept narrow, vectors in value_dtype
    mirror = matrix_obj._sg_mirror(backend.residence, choice.storage_dtype or choice.value_dtype)
    if not backend.supports(mirror):
        reason = backend.refuse_reason(mirror) or (
            f"its dtypes ({mirror.dtype} values, {mirror.index_dtype} indices) are not among "
            f"those it supports ({', '.join(map(str, backend.value_dtypes))})"
        )
        raise ValueError(f"backend {backend.name!r} cannot take this matrix: {reason}")
    if mixed:
        plan = mirror.get_plan(
            PlanKey(backend.name, choice.policy, choice.value_dtype),
            lambda: backend.plan(mirror, choice.policy, vector_dtype=choice.value_dtype),
        )
    else:
        plan = mirror.get_plan(
            PlanKey(backend.name, choice.policy), lambda: backend.plan(mirror, choice.policy)
        )
    on_host = backend.residence.name == "host"
    return Resolved(plan, choice.value_dtype, on_host, choice, measure_next)


def _resolve(matrix_obj, name: str, x_dtype, policy, planning=None) -> Resolved:
    """The choice and plan for one product; the slow, cached part."""
    choice = select(matrix_obj, x_dtype, Request(name, policy, planning))
    if not _plans_by_measurement(matrix_obj, choice, policy, planning):
        return _resolved(matrix_obj, choice)
    remembered = from_memory(matrix_obj, choice)
    if remembered is not None:
        return _resolved(matrix_obj, remembered)
    return _resolved(matrix_obj, choice, measure_next=True)


def _plans_by_measurement(matrix_obj, choice: Choice, policy, planning) -> bool:
    """Whether the estimate is to be replaced by a measurement: at a level above
    ``estimate``, without a policy given, on the GPU: ``auto``'s choice of backend, or the
    policy of a named backend that has a short list (cuSPARSE's algorithm)."""
    if (
        choice.level != "estimate"
        or policy is not None
        or matrix_obj._sg_policy is not None
        or choice.implementation.residence.name == "host"
        or resolve_level(planning, matrix_obj._sg_planning) == "estimate"
    ):
        return False
    if choice.requested == AUTO:
        return True
    # a backend named without a policy: plan its policy when it has a short list to time
    backend = choice.implementation
    mirror = matrix_obj._sg_mirror(backend.residence, choice.storage_dtype or choice.value_dtype)
    return bool(backend.planning_candidates(mirror))


def _measure_now(
    matrix_obj, cache, key, entry: Resolved, x, level=None, capturable=False
) -> Resolved:
    """Replace ``entry`` (an estimate) by the plan measured on ``x``, unless another thread
    is planning this matrix: then this product runs on the estimate (planning one matrix
    never blocks a product). A measurement that fails keeps the estimate; an ``x`` without
    columns (``A @ X`` with k = 0) has nothing to measure on and leaves the measurement to
    the next product."""
    if x.ndim == 2 and x.shape[1] == 0:
        return entry
    if not cache.planning_lock.acquire(blocking=False):
        return entry
    try:
        current = cache.choices.get(key, entry)
        if current is not entry and not current.measure_next:
            return current  # measured by another thread meanwhile
        level = level or resolve_level(key[3], matrix_obj._sg_planning)
        xd = _to_residence(x if x.ndim == 1 else x[:, 0], entry.plan.matrix.residence,
                           entry.value_dtype)  # fmt: skip
        try:
            choice = measure(matrix_obj, xd, entry.choice, level, capturable=capturable)
        except MemoryError:
            new = entry._replace(measure_next=False)
        else:
            new = _resolved(matrix_obj, choice)
            if choice.requested == AUTO:  # what explain(A) shows
                key_dtype = entry.value_dtype
                if choice.storage_dtype is not None:
                    key_dtype = (choice.storage_dtype, entry.value_dtype)
                cache.measured[key_dtype] = choice
        cache.choices[key] = new
        return new
    finally:
        cache.planning_lock.release()


def plan(A, x, *, level: str | None = None, capturable: bool = False) -> Choice:
    """Plan ``A @ x`` now, by measurement on this ``x``, and keep the winner for ``A``.

    What ``auto`` does by itself on a matrix's second product, done at once (solvers and
    benchmarks call it before a loop of products).

    Parameters
    ----------
    A : sparsegpu matrix
    x : numpy.ndarray or cupy.ndarray
        A representative right-hand side (1-D of length ``A.shape[1]``, or 2-D: its first
        column is used; without a column, the estimate is kept and the next product with a
        column measures).
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
    >>> sg.plan(A, np.ones(4)).backend in [b.name for b in sg.backends()]
    True
    """
    if not hasattr(A, "_sg_mirror"):
        raise TypeError(
            f"A must be a sparsegpu matrix, got {type(A).__name__}; wrap it with "
            "sparsegpu.csr_matrix(A)"
        )
    if level is not None:
        check_level(level)
    if x.ndim not in (1, 2) or x.shape[0] != A.shape[1]:
        raise ValueError(
            f"dimension mismatch: A has shape {A.shape} but x has shape {x.shape}; "
            f"x needs {A.shape[1]} rows"
        )
    key = _auto_key(A, x.dtype)
    cache = A._sg_cache_dict()
    estimate = select(A, x.dtype, Request(AUTO, None, level))
    if not _plans_by_measurement(A, estimate, None, level):
        cache.choices[key] = _resolved(A, estimate)
        return estimate
    entry = cache.choices[key] = _resolved(A, estimate, measure_next=True)
    level = resolve_level(level, A._sg_planning)
    return _measure_now(A, cache, key, entry, x, level, capturable).choice


def _auto_key(A, x_dtype) -> ChoiceKey:
    """The key of ``auto``'s choice for products ``A @ x`` without per-call options."""
    return ChoiceKey(
        AUTO, np.dtype(x_dtype), None, None, A._sg_policy, A._sg_planning, _registry.generation
    )


def plan_for(
    matrix_obj, x_dtype=None, *, backend: str | None = None, policy=None, x=None, capturable=False
) -> Plan:
    """The plan a product ``A @ x`` with an x of ``x_dtype`` would run (made if needed);
    :func:`resolved_for`'s plan."""
    return resolved_for(
        matrix_obj, x_dtype, backend=backend, policy=policy, x=x, capturable=capturable
    ).plan


def resolved_for(
    matrix_obj, x_dtype=None, *, backend: str | None = None, policy=None, x=None, capturable=False
) -> Resolved:
    """The plan a product ``A @ x`` with an x of ``x_dtype`` would run (made if needed).

    Solvers and benchmarks call ``plan.matvec(x, out=...)`` on device arrays directly,
    skipping the per-call dispatch. Given a representative ``x`` (a solver's right-hand
    side) and ``auto`` in force, the matrix is planned by measurement first (:func:`plan`),
    since the plan is about to run many times; ``capturable`` keeps to backends a CUDA
    graph can hold. The choice (``.choice.implementation``: the backend) comes with the
    plan, for callers that must know what the plan runs on.
    """
    name = resolve_name(backend, matrix_obj._sg_backend)
    dtype = np.dtype(x_dtype or matrix_obj.dtype)
    if x is not None and name == AUTO and policy is None and _cuda.is_cupy_array(x):
        key = _auto_key(matrix_obj, dtype)
        entry = matrix_obj._sg_cache_dict().choices.get(key)
        stale = capturable and entry is not None and not entry.choice.implementation.capturable
        if entry is None or entry.measure_next or stale:
            plan(matrix_obj, x.astype(dtype, copy=False), capturable=capturable)
            entry = matrix_obj._sg_cache_dict().choices.get(key)
        if entry is not None:
            return entry
    return _resolve(matrix_obj, name, dtype, policy)


def _to_residence(x, residence, dtype, owner=None):
    """x moved (if needed) to where the backend computes, in ``dtype``, C-contiguous (a
    NumPy x through ``owner``'s pinned staging buffer, when an owner is given)."""
    xp = residence.xp
    if xp is np:  # the scipy backend (and the test backends that copy on the host)
        if _cuda.is_cupy_array(x):
            x = x.get()
        return np.ascontiguousarray(x, dtype=dtype)
    if _cuda.is_cupy_array(x):
        if x.dtype != dtype:
            x = x.astype(dtype)
        return xp.ascontiguousarray(x)
    if owner is not None and residence.name == "cupy":
        return _staging.upload(x, dtype, owner)
    return residence.upload(np.ascontiguousarray(x, dtype=dtype))


def _from_residence(y, want_cupy: bool):
    if want_cupy:
        if not _cuda.is_cupy_array(y):
            return _cuda.cupy_or_none().asarray(y)
        return y
    if _cuda.is_cupy_array(y):
        return _staging.download(y)
    return y


def product(matrix_obj, x, *, backend: str | None = None, policy=None, out=None, planning=None):
    """``A @ x`` for a 1-D or 2-D x (numpy or cupy) through the chosen backend.

    The result is in x's array module with scipy's dtype. Shapes are the caller's job
    (``_matrix`` checks them the way scipy does).

    The choice (backend, mirror, plan) is cached in the matrix's mirror dict under the
    name in force, x's dtype, the policy and the registry generation, so a repeated
    product costs a few dictionary lookups; the cache goes wherever the mirror goes.
    """
    try:
        return _product(matrix_obj, x, backend, policy, out, planning)
    except DeviceMemoryError:
        raise
    except MemoryError as exc:  # CuPy's OutOfMemoryError is one; say what it needed
        if not is_out_of_memory(exc) or type(exc) is MemoryError:
            raise MemoryError(
                f"the product with this {matrix_obj.shape} matrix ran out of host memory "
                f"({exc or 'numpy could not allocate'}); free memory, or multiply fewer "
                "columns at a time"
            ) from exc
        nbytes = sum(a.nbytes for a in (matrix_obj.data, matrix_obj.indices, matrix_obj.indptr))
        nbytes += x.nbytes + matrix_obj.shape[0] * x.itemsize * (x.shape[1] if x.ndim == 2 else 1)
        raise memory_error(nbytes, f"the product with this {matrix_obj.shape} matrix") from exc


def _product(matrix_obj, x, backend, policy, out, planning=None):
    _cuda.ensure_context()
    name = backend or matrix_obj._sg_backend or scoped_backend() or env_backend() or AUTO
    # A plain tuple finds the ChoiceKey it equals (same hash): cheaper per call to build.
    key = (
        name,
        x.dtype,
        policy,
        planning,
        matrix_obj._sg_policy,
        matrix_obj._sg_planning,
        _registry.generation,
    )
    cache = matrix_obj.__dict__.get("_sg_cache")
    entry = cache.choices.get(key) if cache is not None else None
    if entry is None:
        # Into the cache that holds the mirrors this choice was made from: if another
        # thread drops them meanwhile (``A.data = new``), the choice goes with them.
        cache = matrix_obj._sg_cache_dict()
        entry = _resolve(matrix_obj, name, x.dtype, policy, planning)
        cache.choices[ChoiceKey(*key)] = entry
    elif entry.measure_next:  # auto's second product of this matrix: plan by measurement
        entry = _measure_now(matrix_obj, cache, ChoiceKey(*key), entry, x)
    plan, value_dtype, on_host, _, _ = entry
    if on_host:
        if out is None and type(x) is np.ndarray:  # the CPU path: scipy's kernel takes x
            return plan.matvec(x)
    elif plan._on_device and type(x) is plan._array_type and x.dtype == value_dtype and x.ndim == 1:
        # the GPU hot path: a device vector in the right dtype (Plan.matvec checks the rest)
        if not x._c_contiguous:
            x = x.copy()
        if out is None:
            return plan.matvec(x)
        if plan.takes_out(x, out):  # a device buffer the result can go into as it is
            return plan.matvec(x, out=out)
    want_cupy = _cuda.is_cupy_array(x)
    if out is not None:
        _check_out(out, x, matrix_obj.shape[0], value_dtype)
    residence = plan.matrix.residence
    xr = _to_residence(x, residence, value_dtype, plan.matrix)
    target = None
    if out is not None and (
        _cuda.is_cupy_array(out) != (residence.xp is not np)
        or out.dtype != value_dtype
        or not out.flags.c_contiguous
        or _shares_memory(out, xr)
    ):
        target, out = out, None  # the caller's buffer can't be written directly; copy below
    y = plan.matvec(xr, out=out) if xr.ndim == 1 else plan.matmat(xr, out=out)
    y = _from_residence(y, want_cupy)
    if target is not None:
        target[...] = _from_residence(y, _cuda.is_cupy_array(target))
        return target
    return y


def _check_out(out, x, n_rows: int, value_dtype: np.dtype) -> None:
    """Refuse an ``out`` the result cannot go into, before anything is computed.

    Like numpy's ``out=``: the shape must be the result's exactly (no broadcasting), and
    the result's dtype must cast to out's under ``same_kind`` (no float into int).
    """
    if not (isinstance(out, np.ndarray) or _cuda.is_cupy_array(out)):
        raise TypeError(f"out must be a numpy or cupy array, got {type(out).__name__}")
    want = (n_rows,) if x.ndim == 1 else (n_rows, x.shape[1])
    if out.shape != want:
        raise ValueError(f"out has shape {out.shape} but the product has shape {want}")
    if not np.can_cast(value_dtype, out.dtype, "same_kind"):
        raise TypeError(
            f"cannot write the {value_dtype} product into an out of dtype {out.dtype} "
            "(casting rule 'same_kind'); pass an out of dtype "
            f"{value_dtype}"
        )


def _shares_memory(a, b) -> bool:
    """True when ``a`` and ``b`` (numpy or cupy) may share memory."""
    if _cuda.is_cupy_array(a) != _cuda.is_cupy_array(b):
        return False
    xp = np if isinstance(a, np.ndarray) else _cuda.cupy_or_none()
    return bool(xp.may_share_memory(a, b))
