"""Selection: the one place where a product's backend and policy are chosen, and why.

:func:`select` answers for one matrix (an :class:`Operand`, handed down by dispatch or
planning with its mirrors), x dtype and :class:`Operation` with a :class:`Choice`
(backend, policy, reason, row statistics). In order:

Precedence of the backend name
    an explicit ``backend=`` (``sg.matvec``), then the matrix's ``A.backend``, then the
    innermost ``with sparsegpu.use_backend(...)`` of this thread (or task), then the
    environment variable ``SPARSEGPU_BACKEND``, then ``"auto"``.
``auto``
    no GPU, or no GPU backend for the dtype: ``scipy``. Otherwise the rules below on the
    row-length statistics of the mirror (:func:`row_class`, :func:`auto_rule`), after the
    tuning store's measured winner for the matrix's class where it has one.
Policy
    an explicit ``policy=``, then ``A.policy``, then the tuning store's entry for the
    device, dtypes and row class (user cache, then shipped defaults), then the backend's
    own default (occupancy, row lengths). A policy of another family than the backend's
    is a TypeError; under ``auto`` a policy restricts the choice to its family.

What :func:`select` gives is the *estimate*. Planning (:mod:`sparsegpu.engine._planning`) sits
above: it asks here for the estimate, then, to measure, one question more
(:func:`short_list`: what to time, and what the backends found in the matrix's structure),
times the pairs, and keeps the fastest; selection never imports planning.

The tuning store (:mod:`sparsegpu.engine._tuning_store`) is plain data passed in here; nothing
registers itself into selection.
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..backends.base import Backend
from ..device import _cuda
from ..device._dtypes import MIXED_PARTNERS, half_result_dtype, is_half
from . import _registry, _rules, _tuning_store
from ._choice import VECTOR, Choice, Operand, Operation, Request, Shortlist
from ._registry import AUTO, get_backend, registered
from ._rules import AUTO_PREFERENCE, LONG_ROW, auto_rule, matmat_rule, row_class
from ._tuning_store import (
    ROW_CLASSES,
    TuningCache,
    TuningCacheError,
    TuningCacheWarning,
    current_context,
)

ENV_VAR = "SPARSEGPU_BACKEND"

_scoped: ContextVar[str | None] = ContextVar("sparsegpu_backend", default=None)


# --------------------------------------------------------------------- precedence
@contextmanager
def use_backend(name: str):
    """Use backend ``name`` for products inside this block, in this thread (or task).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.csr_matrix(sp.eye(3))
    >>> with sg.use_backend("scipy"):
    ...     y = A @ np.ones(3)
    """
    name = _registry.check_name(name)
    token = _scoped.set(name)
    try:
        yield name
    finally:
        _scoped.reset(token)


def scoped_backend() -> str | None:
    """The innermost :func:`use_backend` name of this thread (or task), or None."""
    return _scoped.get()


def env_backend() -> str | None:
    """``SPARSEGPU_BACKEND``, read on every product (a user may set it at any time)."""
    return env_value(ENV_VAR)


def env_value(name: str) -> str | None:
    """The environment variable ``name``, read on every product (a user may set it at any
    time).

    ``os.environ.get`` encodes the key and decodes the value on each call (1-3 us, more
    than the rest of a product's dispatch); this reads the mapping behind it, which
    ``os.environ`` keeps current, and decodes only a value that is set.
    """
    key = _ENV_KEYS.get(name)
    if key is None:
        key = _ENV_KEYS[name] = os.environ.encodekey(name)
    value = _ENVIRON_DATA.get(key)
    return None if value is None else os.environ.decodevalue(value)


_ENV_KEYS: dict = {}
try:  # CPython's os.environ is a mapping over an encoded dict it keeps in step
    _ENVIRON_DATA = os.environ._data
    os.environ.encodekey, os.environ.decodevalue  # noqa: B018 - both there, or the plain read
except AttributeError:  # pragma: no cover - another Python: the plain, slower read

    def env_value(name: str) -> str | None:
        return os.environ.get(name)


def name_in_force(explicit: str | None, matrix_choice: str | None) -> str:
    """The backend name in force for one product (see the module docstring)."""
    return explicit or matrix_choice or _scoped.get() or env_backend() or AUTO


try:  # scipy's own result-dtype rule, so results have exactly scipy's dtype
    from scipy.sparse._sputils import upcast_char as _upcast_char
except ImportError:  # pragma: no cover - every supported scipy has it
    _upcast_char = None


def result_dtype(a_dtype, x_dtype) -> np.dtype:
    """The dtype scipy gives ``A @ x``; with a float16 or bfloat16 operand (which scipy
    does not compute in), numpy's: float16 @ float16 is float16, float16 @ float32 float32.
    """
    if is_half(a_dtype) or is_half(x_dtype):
        return half_result_dtype(a_dtype, x_dtype)
    if _upcast_char is not None:
        return np.dtype(_upcast_char(np.dtype(a_dtype).char, np.dtype(x_dtype).char))
    return np.result_type(a_dtype, x_dtype)


_NO_REQUEST = Request()


def gpu_candidates(value_dtype: np.dtype, policy_type=None, storage=None) -> list[Backend]:
    """Usable GPU backends that compute in this value dtype (with ``storage``: that keep
    ``storage`` values and compute in ``value_dtype``, mixed precision), of this policy
    family where one is given, in order of preference."""
    if _cuda.unavailable_reason() is not None:
        return []
    found = [
        b
        for b in registered().values()
        if b.residence.name == "cupy"
        and (
            value_dtype in b.value_dtypes
            if storage is None
            else (storage, value_dtype) in b.mixed_pairs
        )
        and (policy_type is None or b.policy_type is policy_type)
        and b.unavailable_reason() is None
    ]
    rank = {name: i for i, name in enumerate(AUTO_PREFERENCE)}
    return sorted(found, key=lambda b: rank.get(b.name, len(rank)))


def _auto(
    operand: Operand,
    value_dtype: np.dtype,
    policy,
    store,
    operation: Operation = VECTOR,
    storage: np.dtype | None = None,
) -> tuple[Backend, str, Any]:
    """(backend, reason, stats or None) of ``auto`` for this matrix, value dtype and
    operation (``storage``: the dtype its values stay in, mixed precision)."""
    candidates = gpu_candidates(value_dtype, type(policy) if policy is not None else None, storage)
    if policy is None:  # a backend that only planning picks (unless its policy is given)
        candidates = [b for b in candidates if b.estimated]
    mirror = operand.mirror(candidates[0].residence, storage or value_dtype) if candidates else None
    usable = [b for b in candidates if b.supports(mirror)]
    if storage is not None:
        return _mixed_rule(usable, mirror, storage, value_dtype, policy)
    if not candidates:
        if policy is not None and _cuda.unavailable_reason() is None:
            raise TypeError(
                f"no usable GPU backend takes a {type(policy).__name__} for {value_dtype} "
                "values; pass a policy of another family, or name the backend"
            )
        reason = (
            f"no GPU: {_cuda.unavailable_reason()}"
            if _cuda.unavailable_reason() is not None
            else f"no GPU backend computes in {value_dtype}"
        )
        return registered()["scipy"], reason + "; the scipy CPU reference computes", None
    if not usable:
        return registered()["scipy"], "no GPU backend accepts this matrix", None
    stats = mirror.stats
    names = [b.name for b in usable]
    if operation.kind == "A @ X":  # the tuning store's entries are the vector product's
        name, reason = matmat_rule(stats, names, operation)
        return usable[names.index(name)], reason, stats
    # Tuning entries are measured on large matrices (GB/s); a small product is
    # latency-bound and follows the small-matrix rule (H200, bundled float64 matrices:
    # the tuned shuffle kernel 12.6 us, the merge-path kernel 9.2; auto_vs_cusparse_h200).
    if stats.n_rows + stats.nnz > _rules.SMALL_ITEMS:
        name = tuned_winner(mirror, value_dtype, names, store)
        if name is not None:
            return usable[names.index(name)], "measured fastest (tuning cache)", stats
    name, reason = auto_rule(stats, names)
    return usable[names.index(name)], reason, stats


def _mixed_rule(usable, mirror, storage, value_dtype, policy) -> tuple[Backend, str, Any]:
    """``auto``'s backend for a mixed-precision product among the GPU backends that
    compute the pair (``A.mixed_precision``): the rules, but cuSPARSE for irregular rows
    (merge_path has no mixed precision)."""
    if not usable:
        raise TypeError(
            f"A.mixed_precision is set but no usable GPU backend computes {storage} "
            f"values with {value_dtype} vectors"
            + (f" under a {type(policy).__name__}" if policy is not None else "")
            + "; set A.mixed_precision = False"
        )
    names = [b.name for b in usable]
    stats = mirror.stats
    if (row_class(stats) == "irregular" or stats.max > LONG_ROW) and "cusparse" in names:
        picked, rule = "cusparse", "irregular rows: cuSPARSE (merge_path has no mixed precision)"
    else:
        picked, rule = auto_rule(stats, names)
    reason = f"mixed precision ({storage} values, {value_dtype} sums); {rule}"
    return usable[names.index(picked)], reason, stats


def select(
    operand: Operand,
    x_dtype,
    request: Request | None = None,
    *,
    store=None,
    operation: Operation = VECTOR,
) -> Choice:
    """The backend and policy of a product of ``A`` with an x of ``x_dtype``: the estimate.

    Parameters
    ----------
    operand : Operand
        The matrix, as dispatch hands it down.
    x_dtype : dtype
    request : Request, optional
        The caller's explicit backend name and policy (``sg.matvec(..., backend=,
        policy=)``); unset fields fall through the precedence of the module docstring.
    store : TuningCache, optional
        The tuning store to consult; default the user's cache and the shipped defaults.
    operation : Operation
        The product (``A @ x`` by default; ``A @ X`` has rules of its own).

    Raises
    ------
    ValueError, BackendUnavailableError
        For an unknown name, or a backend that cannot run here.
    TypeError
        For a dtype the named backend does not take, or a policy of another family.
    """
    request = request or _NO_REQUEST
    value_dtype = result_dtype(operand.dtype, x_dtype)
    name = name_in_force(request.backend, operand.backend)
    policy = request.policy if request.policy is not None else operand.policy
    storage = _mixing(operand, name, value_dtype)
    if name == AUTO:
        backend, reason, stats = _auto(operand, value_dtype, policy, store, operation, storage)
        if policy is not None and backend.residence.name == "host":
            reason += f"; the {type(policy).__name__} has no effect there"
            policy = None
    else:
        backend = get_backend(name)
        _check_format(backend, operand)
        reason, stats = f"asked for by name ({_named_by(request, operand)})", None
        if storage is not None:
            _check_mixed_pair(backend, storage, value_dtype)
            reason += ", mixed precision"
        backend.check_dtypes(storage or value_dtype, operand.index_dtype)
    _check_policy_type(backend, policy, request)
    if policy is None:
        mirror = operand.mirror(backend.residence, storage or value_dtype)
        policy = default_policy(backend, mirror, store)
    return Choice(
        backend.name, policy, reason, stats, value_dtype, name,
        storage_dtype=storage, implementation=backend, operation=operation,
    )  # fmt: skip


def auto_estimate(
    operand: Operand, value_dtype, override: str | None = None, operation: Operation = VECTOR
) -> Choice:
    """What ``auto``'s rules give for this matrix, value dtype and operation, whatever name
    is in force (``explain``'s answer before planning has measured; ``override`` notes the
    name)."""
    backend, reason, stats = _auto(operand, value_dtype, operand.policy, None, operation)
    policy = operand.policy
    if policy is None or not isinstance(policy, backend.policy_type):
        policy = default_policy(backend, operand.mirror(backend.residence, value_dtype), None)
    return Choice(
        backend.name, policy, reason, stats, value_dtype, AUTO, override,
        implementation=backend, operation=operation,
    )  # fmt: skip


def _check_format(backend, operand: Operand) -> None:
    """Refuse a backend named for a matrix whose format its plans do not read (a CSR
    kernel for a ``bsr_matrix``)."""
    if operand.format not in backend.formats:
        takers = [b.name for b in registered().values() if operand.format in b.formats]
        raise TypeError(
            f"backend {backend.name!r} computes "
            f"{' and '.join(f.upper() for f in backend.formats)} matrices, not this "
            f"{operand.format.upper()} one; use {', '.join(repr(t) for t in takers)} or "
            f"'auto', or convert the matrix (A.tocsr())"
        )


def _check_policy_type(backend, policy, request) -> None:
    """Refuse a policy of another backend's kind (a ``CsrVectorPolicy`` for cuSPARSE)."""
    if policy is not None and not isinstance(policy, backend.policy_type):
        raise TypeError(
            f"backend {backend.name!r} takes a {backend.policy_type.__name__}, "
            f"got {type(policy).__name__} (from {_policy_from(request)})"
        )


def _policy_from(request: Request) -> str:
    return "policy=" if request.policy is not None else "A.policy"


def _named_by(request: Request, operand: Operand) -> str:
    if request.backend:
        return "backend="
    if operand.backend:
        return "A.backend"
    return "use_backend" if _scoped.get() else f"${ENV_VAR}"


def mixed_storage(operand: Operand, value_dtype) -> np.dtype | None:
    """The dtype the values stay in for a mixed-precision product (``A.mixed_precision``
    and a product computed in the wide partner of A's dtype), else None."""
    if not operand.mixed:
        return None
    storage = np.dtype(operand.dtype)
    return storage if MIXED_PARTNERS.get(storage) == value_dtype else None


def _mixing(operand: Operand, name: str, value_dtype) -> np.dtype | None:
    """The dtype the values stay in if this product mixes precisions, else None: with
    ``A.mixed_precision`` set and a product in the wide partner of A's dtype, unless
    nothing can mix (no GPU under ``auto``, or the host backend named: scipy widens the
    values itself)."""
    storage = mixed_storage(operand, value_dtype)
    if storage is None:
        return None
    if name == AUTO:
        return None if _cuda.unavailable_reason() is not None else storage
    return None if get_backend(name).residence.name == "host" else storage


def _check_mixed_pair(backend, storage, value_dtype) -> None:
    """Refuse a backend named for a mixed-precision product it does not compute."""
    if (storage, value_dtype) not in backend.mixed_pairs:
        takers = [b.name for b in registered().values() if (storage, value_dtype) in b.mixed_pairs]
        raise TypeError(
            f"backend {backend.name!r} does not compute {storage} values with "
            f"{value_dtype} vectors (A.mixed_precision is set); use "
            f"{' or '.join(repr(t) for t in takers) or 'another backend'} or 'auto', "
            "or set A.mixed_precision = False"
        )


# ---------------------------------------------------------------- the short list
def short_list(
    operand: Operand, estimate: Choice, level: str, store=None, capturable: bool = False
) -> Shortlist:
    """What planning times for ``estimate``'s product at ``level``, in one answer.

    The pairs: the estimate's first (unless ``capturable`` and its backend cannot be
    captured), then, without repeats of a (backend name, policy):

    - ``A @ X``: each usable GPU backend's :meth:`~Backend.matmat_candidates` for X's
      column bucket and order (cuSPARSE's SpMM algorithms, the row-split kernel's shapes,
      the merge-path SpMM's runs); only the named backend's when one was named;
    - ``A @ x`` with a backend named: its :meth:`~Backend.planning_candidates` (cuSPARSE's
      algorithms);
    - ``A @ x`` under ``auto``: the pairs of :func:`_planned_pairs` for each usable GPU
      backend (of ``A.policy``'s family, where one is set);
    - mixed precision (``A.mixed_precision``): the same for each backend that computes
      the pair (only the estimate's when one was named).

    ``structure``, for ``auto``'s product without mixed precision: what each usable GPU
    backend found in the matrix's structure (``block``: its block size and fill, and why
    it was not timed).
    """
    value_dtype, storage = estimate.value_dtype, estimate.storage_dtype
    named = estimate.requested != AUTO
    structure = ()
    if storage is None and not named:
        structure = _structure_notes(operand, value_dtype)
    backend = estimate.implementation
    first = [] if capturable and not backend.capturable else [(backend, estimate.policy)]
    if storage is None and named and estimate.operation.kind != "A @ X":
        mirror = operand.mirror(backend.residence, value_dtype)
        candidates = backend.planning_candidates(mirror)
        return Shortlist(first + [(backend, p) for p in candidates if p != estimate.policy])
    pairs = {(b.name, p): (b, p) for b, p in first}  # first seen first, no repeats
    family = type(operand.policy) if operand.policy else None
    if storage is not None:
        backends = [backend] if named else _mixing_backends(storage, value_dtype)
        _planned_pairs(pairs, operand, backends, storage, level, store, capturable, named)
    elif estimate.operation.kind == "A @ X":
        operation = estimate.operation
        for b in [backend] if named else gpu_candidates(value_dtype, family):
            mirror = operand.mirror(b.residence, value_dtype)
            if b.supports(mirror) and (b.capturable or not capturable):
                for p in b.matmat_candidates(mirror, operation.columns, operation.order):
                    pairs.setdefault((b.name, p), (b, p))
    else:
        backends = gpu_candidates(value_dtype, family)
        _planned_pairs(pairs, operand, backends, value_dtype, level, store, capturable)
    return Shortlist(list(pairs.values()), structure)


def _mixing_backends(storage, value_dtype) -> list[Backend]:
    """Usable backends that compute ``storage`` values with ``value_dtype`` vectors."""
    return [
        b
        for b in registered().values()
        if (storage, value_dtype) in b.mixed_pairs and b.unavailable_reason() is None
    ]


def _structure_notes(operand: Operand, mirror_dtype) -> tuple[str, ...]:
    """``"backend: note"`` for each usable GPU backend that found something in the
    matrix's structure (``block``: its block size and fill, and why it was not timed)."""
    notes = []
    for backend in gpu_candidates(np.dtype(mirror_dtype)):
        mirror = operand.mirror(backend.residence, mirror_dtype)
        note = backend.structure_note(mirror) if backend.supports(mirror) else None
        if note:
            notes.append(f"{backend.name}: {note}")
    return tuple(notes)


def _planned_pairs(pairs, operand, backends, mirror_dtype, level, store, capturable, named=False):
    """Add to ``pairs`` (``{(backend name, policy): (backend, policy)}``) those planning
    times for each of ``backends`` that takes the mirror of ``mirror_dtype`` (and can be
    captured, when ``capturable``): every candidate for ``exhaustive``, else its planning
    candidates (cuSPARSE's algorithms), else, where it is ``planned`` and no backend was
    ``named``, its untuned policy and its tuned one (the tuning store's entry) and its
    :meth:`~Backend.planned_policies`.

    Both, because a tuned policy is one matrix's winner applied to its whole row class:
    the shipped ones were fitted on two stencils, and on matrices that took no part in
    that the untuned policy (from the matrix's own mean row length) can be much faster
    (H200, ``compressed_indices_h200_run2``, 2-D 9-point stencil in float64: planning
    timed shuffle's and delta16's tuned short-row policies at 169 and 180 us a product,
    where the best of each one's sweep took 140 and 129 us). Where no policy is tuned the
    two are one.
    """
    for backend in backends:
        mirror = operand.mirror(backend.residence, mirror_dtype)
        if not backend.supports(mirror) or (capturable and not backend.capturable):
            continue
        if level == "exhaustive":
            policies = backend.candidates(mirror)
        elif not named and backend.planning_refuse_reason(mirror) is not None:
            continue
        elif backend.planning_candidates(mirror):
            policies = backend.planning_candidates(mirror)
        elif backend.planned and not named:
            untuned = backend.default_policy(mirror)
            policies = [default_policy(backend, mirror, store), untuned]
            policies += backend.planned_policies(mirror)
        else:
            continue
        for policy in policies:
            pairs.setdefault((backend.name, policy), (backend, policy))


# -------------------------------------------------------------- the tuning store
def default_policy(backend: Backend, mirror, store=None):
    """The policy ``backend`` uses on ``mirror`` when none is given (kept on the mirror).

    The tuning store's entry for this device, dtypes and row class (user cache, then the
    defaults shipped with sparsegpu), else the backend's own default.
    """
    policy = mirror.default_policies.get(backend.name)
    if policy is None:
        policy = tuned_policy(backend, mirror, store)
        if policy is None:
            policy = backend.default_policy(mirror)
        mirror.default_policies[backend.name] = policy
    return policy


def tuned_policy(backend: Backend, mirror, store: TuningCache | None = None):
    """The store's policy of ``backend`` for ``mirror``, or None.

    Never raises for cache trouble: an unreadable cache or an unusable entry gives a
    warning and None, so a product always runs (on the untuned policy at worst).
    """
    if not backend.policy_type.knob_names():
        return None
    cls = row_class(mirror.stats)
    if cls not in ROW_CLASSES:
        return None
    context = current_context(backend.residence)
    if context is None:
        return None
    try:
        store = store or _tuning_store.default_cache()
        entry = store.lookup(context, backend.name, mirror.dtype, mirror.index_dtype, cls)
        if entry is None:
            return None
        return entry.policy(backend.policy_type)
    except (OSError, TuningCacheError) as exc:
        warnings.warn(
            f"the tuning cache could not be read ({exc}); using the untuned policy",
            TuningCacheWarning,
            stacklevel=3,
        )
    except (TypeError, ValueError) as exc:
        warnings.warn(
            f"a tuning-cache entry for backend {backend.name!r} is unusable ({exc}); using "
            "the untuned policy (re-run `sparsegpu autotune` to refresh it)",
            TuningCacheWarning,
            stacklevel=3,
        )
    return None


def tuned_winner(mirror, value_dtype, candidates, store: TuningCache | None = None):
    """The backend among ``candidates`` the store measured fastest (GB/s) for this mirror.

    Entries of the mirror's device, value dtype, index dtype and row class, user cache
    first, then the shipped defaults; None when no candidate has one. The scores are kept
    on the mirror (:func:`forget_tuned` drops them).
    """
    scores = mirror.tuned_scores
    if scores is None:
        scores = {}
        context = current_context(mirror.residence)
        cls = row_class(mirror.stats)
        if context is not None and cls in ROW_CLASSES:
            try:
                store = store or _tuning_store.default_cache()
                for name in candidates:
                    entry = store.lookup(context, name, value_dtype, mirror.index_dtype, cls)
                    if entry is not None:
                        scores[name] = entry.gb_per_s
            except (OSError, TuningCacheError):  # tuned_policy reports it; auto still works
                scores = {}
        mirror.tuned_scores = scores
    measured = [name for name in candidates if name in scores]
    return max(measured, key=lambda name: scores[name]) if measured else None


def forget_tuned(mirror, backend_names) -> None:
    """Drop the default policies and store scores kept on a mirror (the store changed)."""
    for name in backend_names:
        mirror.default_policies.pop(name, None)
    mirror.tuned_scores = None
