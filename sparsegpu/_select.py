"""Selection: the one place where a product's backend and policy are chosen, and why.

:func:`select` answers for one matrix and x dtype with a :class:`Choice` (backend, policy,
reason, row statistics). In order:

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

Planning (:func:`plan`, like FFTW's ``FFTW_ESTIMATE``/``FFTW_MEASURE`` and cuDNN's
benchmark mode)
    ``estimate``: the rules above. ``measure`` (the default): the first product of a
    matrix runs on the estimate; the second times a short list of candidates on its real
    operands with CUDA events (the estimate, cuSPARSE ALG1 and ALG2, ``merge_path``, the
    vector family's shape for the row class, ``delta16`` where the matrix's columns
    compress, the tuned entry), checks they agree, and keeps the fastest for this matrix
    and for matrices of the same fingerprint in this process. Backends that build a format
    of their own (``delta16``: ``Backend.estimated`` False) are reached only this way.
    ``exhaustive``: every usable backend with every candidate policy it has. The level
    comes from ``planning=`` (``sg.matvec``/:func:`plan`), ``A.planning``, the innermost
    ``with sparsegpu.planning(...)``, ``SPARSEGPU_PLANNING``, in that order.

The tuning store (:mod:`sparsegpu._tuning_store`) is plain data passed in here; nothing
registers itself into selection.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from . import _cuda, _registry, _timing, _tuning_store
from ._dtypes import MIXED_PARTNERS, half_result_dtype, is_half
from ._oracle import tolerance
from ._registry import AUTO, get_backend, registered
from ._tuning_store import (
    ROW_CLASSES,
    TuningCache,
    TuningCacheError,
    TuningCacheWarning,
    current_context,
)
from .backends.base import Backend

ENV_VAR = "SPARSEGPU_BACKEND"
PLANNING_ENV_VAR = "SPARSEGPU_PLANNING"
LEVELS = ("estimate", "measure", "exhaustive")
DEFAULT_LEVEL = "measure"

_scoped: ContextVar[str | None] = ContextVar("sparsegpu_backend", default=None)
_scoped_level: ContextVar[str | None] = ContextVar("sparsegpu_planning", default=None)


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
    """``SPARSEGPU_BACKEND``, read on every product (a user may set it at any time).

    ``os.environ.get`` encodes the key and decodes the value on each call (1-3 us, more
    than the rest of a product's dispatch); this reads the mapping behind it, which
    ``os.environ`` keeps current, and decodes only a value that is set.
    """
    value = _ENVIRON_DATA.get(_ENV_KEY)
    return None if value is None else os.environ.decodevalue(value)


try:  # CPython's os.environ is a mapping over an encoded dict it keeps in step
    _ENVIRON_DATA = os.environ._data
    _ENV_KEY = os.environ.encodekey(ENV_VAR)
except AttributeError:  # pragma: no cover - another Python: the plain, slower read
    _ENVIRON_DATA, _ENV_KEY = None, None

    def env_backend() -> str | None:
        return os.environ.get(ENV_VAR)


def resolve_name(explicit: str | None, matrix_choice: str | None) -> str:
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


# ---------------------------------------------------------------------- row classes
# Irregular rows: the rule follows Ginkgo's CSR strategy choice ("load_balance" when the
# longest row is far above the mean): with max > 8 x mean (and std > mean) a row-per-
# (sub)warp kernel leaves most threads of a warp idle while one row finishes.
IRREGULAR_IMBALANCE = 8.0
# Column spread above which rows of short or medium length count as ``scattered``: their
# x reads are gathers from all over x (a random graph), not neighbours of the diagonal (a
# mesh or stencil): uniform random 16 per row, spread 0.44; 3-D 27-point stencil 150^3, 0.007.
SCATTERED_SPREAD = 0.1
# Mean row lengths that separate short, medium and long rows (the sub-warp sizes that fit:
# under 8 a row is a few lanes' work, from 64 on a whole warp per row).
SHORT_ROWS = 8
LONG_ROWS = 64


def row_class(stats) -> str:
    """The row class of a matrix: the tuning store's key and the rules' first question.

    ``empty`` (no nonzeros), ``irregular`` (max row more than ``IRREGULAR_IMBALANCE`` x the
    mean and std above the mean: power-law-like), ``scattered`` (mean below ``LONG_ROWS``
    and a column spread above ``SCATTERED_SPREAD``: the x reads are random gathers), else by
    mean row length: ``short`` (< ``SHORT_ROWS``), ``medium`` (< ``LONG_ROWS``) or ``long``.

    Parameters
    ----------
    stats : RowLengthStats
    """
    if stats.nnz == 0:
        return "empty"
    if stats.imbalance > IRREGULAR_IMBALANCE and stats.std > stats.mean:
        return "irregular"
    if stats.mean < LONG_ROWS and stats.column_spread > SCATTERED_SPREAD:
        return "scattered"
    if stats.mean < SHORT_ROWS:
        return "short"
    if stats.mean < LONG_ROWS:
        return "medium"
    return "long"


# --------------------------------------------------------------------------- rules
# Order of preference of ``auto`` on regular rows when no tuning entry decides: on the
# H200 the tuned shuffle kernel was within 3% of the best backend on every regular class
# and 1.4-2.1x cuSPARSE (autotune_h200.json: 5-point 3715 vs 2126 GB/s, 27-point 3535 vs
# 2600, 400 per row 3023 vs 1413); the merge-path kernel beat cuSPARSE there too; the
# texture path and the software cache trail, so they come last.
AUTO_PREFERENCE = ("shuffle", "vector", "readonly", "merge_path", "cusparse", "texture", "swcache")
# A single row longer than this is split across blocks by the merge-path kernel even when
# the mean is high enough to hide it (one row-per-block kernel would run it on one SM).
LONG_ROW = 1 << 16
_AUTO_IRREGULAR = ("merge_path",)
# Up to this many merge items (rows + nonzeros) a product is latency-bound: the merge-path
# kernel is then one launch (its last block adds the carries), cheaper on host and device
# than cuSPARSE's SpMV call (H200, bundled SuiteSparse matrices: 11-16 us a product against
# 15-27 us for raw cuSPARSE with descriptors reused; auto_vs_cusparse_h200.json).
SMALL_ITEMS = 1_000_000
_AUTO_SMALL = ("merge_path",)
# Short or medium rows whose columns are scattered over x are bound by one 32-byte L2
# sector per gather whatever the kernel: on the H200 (knob_sweep_h200.jsonl, uniform
# 4M x 16) cuSPARSE and the merge-path kernel run within 1% of each other and 25% above a
# kernel that only gathers, while the tuned row-per-sub-warp kernel trails by 5% in
# float64. Without a tuning entry: merge path.
_AUTO_SCATTERED = ("merge_path", "cusparse")


def auto_rule(stats, usable_names) -> tuple[str, str]:
    """The rules of ``auto``: (backend name, reason) from row-length statistics.

    Parameters
    ----------
    stats : RowLengthStats
        Of the matrix (computed once per mirror, on the device).
    usable_names : list of str
        Backends that take this matrix and dtype, in preference order (not empty).
    """
    if stats.n_rows + stats.nnz <= SMALL_ITEMS:
        for name in _AUTO_SMALL:
            if name in usable_names:
                return name, (
                    f"small ({stats.n_rows + stats.nnz:,} rows + nonzeros <= {SMALL_ITEMS:,}): "
                    "latency-bound, and the merge-path kernel is a single launch"
                )
    cls = row_class(stats)
    if cls == "irregular" or (stats.nnz > 0 and stats.max > LONG_ROW):
        for name in _AUTO_IRREGULAR:
            if name in usable_names:
                return name, (
                    f"irregular rows (max {stats.max} > {IRREGULAR_IMBALANCE:g} x mean "
                    f"{stats.mean:.1f} with std > mean, or a row over {LONG_ROW:,}): "
                    "the load-balanced merge-path kernel keeps every thread busy"
                )
    if cls == "scattered":
        for name in _AUTO_SCATTERED:
            if name in usable_names:
                return name, (
                    f"scattered columns (mean distance from the diagonal "
                    f"{stats.column_spread:.2f} of the columns, over {SCATTERED_SPREAD:g}) on "
                    f"rows of {stats.mean:.1f} on average: x reads are random gathers, and the "
                    "merge-path kernel keeps the most of them in flight"
                )
    return usable_names[0], (
        f"regular rows (max/mean {stats.imbalance:.1f}): first usable of the preference "
        f"order {', '.join(AUTO_PREFERENCE)}"
    )


# -------------------------------------------------------------------------- choices
class Request(NamedTuple):
    """What the caller asked of one product: a backend name and a policy, either unset."""

    backend: str | None = None
    policy: Any = None
    planning: str | None = None


_NO_REQUEST = Request()


@dataclass(frozen=True)
class Choice:
    """The backend and policy of one product, and why (what :func:`explain` shows).

    Attributes
    ----------
    backend : str
        The backend's name.
    policy : Policy
        Its launch policy.
    reason : str
        Why this backend: the name asked for, or the rule or measurement of ``auto``.
    stats : RowLengthStats or None
        The row statistics the rules looked at (None where no rule ran).
    value_dtype : numpy.dtype
        The dtype the product computes in.
    requested : str
        The backend name in force (``"auto"`` or a backend's).
    override : str or None
        For :func:`explain`: a note when products of the matrix use another name now.
    level : str
        The planning level that decided: ``"estimate"`` (rules, a tuned entry, or the name
        asked for), ``"measure"`` or ``"exhaustive"`` (timed on the real operands).
    measurements : tuple of Measurement
        What planning timed (empty for an estimate).
    planning_ms : float or None
        Wall milliseconds the planning took (None for an estimate).
    storage_dtype : numpy.dtype or None
        The dtype the matrix's values stay in on the device when it is not
        ``value_dtype`` (mixed precision, ``A.mixed_precision``); None otherwise.
    implementation : Backend
        The backend object itself (what dispatch makes the plan with).
    """

    backend: str
    policy: Any
    reason: str
    stats: Any
    value_dtype: np.dtype
    requested: str = AUTO
    override: str | None = None
    level: str = "estimate"
    measurements: tuple = ()
    planning_ms: float | None = None
    storage_dtype: np.dtype | None = None
    implementation: Any = field(default=None, repr=False, compare=False)

    @property
    def row_class(self) -> str | None:
        return None if self.stats is None else row_class(self.stats)

    def __str__(self) -> str:
        lines = [
            f"{self.requested} -> backend {self.backend!r} with {self.policy!r}",
            f"  why: {self.reason}",
        ]
        s = self.stats
        if s is not None:
            lines.append(
                f"  rows: {s.n_rows:,} x {s.n_cols:,}, nnz {s.nnz:,}; row length mean "
                f"{s.mean:.1f}, std {s.std:.1f}, min {s.min}, max {s.max}, empty rows "
                f"{s.empty_rows:,}; imbalance (max/mean) {s.imbalance:.1f}, column spread "
                f"{s.column_spread:.3f}, class {row_class(s)!r}"
            )
        lines.append(f"  value dtype: {self.value_dtype}")
        if self.storage_dtype is not None:
            lines.append(
                f"  mixed precision: the values stay {self.storage_dtype} on the device "
                f"(A.mixed_precision), x, y and the sums are {self.value_dtype}"
            )
        lines.append(
            f"  planning: {self.level}"
            + (
                f" ({self.planning_ms:.1f} ms, {len(self.measurements)} candidates timed on the "
                "real operands)"
                if self.planning_ms is not None
                else ""
            )
        )
        for m in self.measurements:
            lines.append(f"    {m}")
        if self.override is not None:
            lines.append(f"  note: {self.override}")
        return "\n".join(lines)

    __repr__ = __str__


def _gpu_candidates(value_dtype: np.dtype, policy_type=None) -> list[Backend]:
    """Usable GPU backends that take this value dtype (and policy family), in order of
    preference."""
    if _cuda.unavailable_reason() is not None:
        return []
    found = [
        b
        for b in registered().values()
        if b.residence.name == "cupy"
        and value_dtype in b.value_dtypes
        and (policy_type is None or b.policy_type is policy_type)
        and b.unavailable_reason() is None
    ]
    rank = {name: i for i, name in enumerate(AUTO_PREFERENCE)}
    return sorted(found, key=lambda b: rank.get(b.name, len(rank)))


def _auto(matrix, value_dtype: np.dtype, policy, store) -> tuple[Backend, str, Any]:
    """(backend, reason, stats or None) of ``auto`` for this matrix and value dtype."""
    candidates = _gpu_candidates(value_dtype, type(policy) if policy is not None else None)
    if policy is None:  # a backend that only planning picks (unless its policy is given)
        candidates = [b for b in candidates if b.estimated]
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
    mirror = matrix._sg_mirror(candidates[0].residence, value_dtype)
    usable = [b for b in candidates if b.supports(mirror)]
    if not usable:
        return registered()["scipy"], "no GPU backend accepts this matrix", None
    stats = mirror.stats
    names = [b.name for b in usable]
    # Tuning entries are measured on large matrices (GB/s); a small product is
    # latency-bound and follows the small-matrix rule (H200, bundled float64 matrices:
    # the tuned shuffle kernel 12.6 us, the merge-path kernel 9.2; auto_vs_cusparse_h200).
    if stats.n_rows + stats.nnz > SMALL_ITEMS:
        name = tuned_winner(mirror, value_dtype, names, store)
        if name is not None:
            return usable[names.index(name)], "measured fastest (tuning cache)", stats
    name, reason = auto_rule(stats, names)
    return usable[names.index(name)], reason, stats


def select(matrix, x_dtype, request: Request | None = None, *, store=None) -> Choice:
    """The backend and policy of ``matrix @ x`` for an x of ``x_dtype``.

    Parameters
    ----------
    matrix : sparsegpu matrix
    x_dtype : dtype
    request : Request, optional
        The caller's explicit backend name and policy (``sg.matvec(..., backend=,
        policy=)``); unset fields fall through the precedence of the module docstring.
    store : TuningCache, optional
        The tuning store to consult; default the user's cache and the shipped defaults.

    Raises
    ------
    ValueError, BackendUnavailableError
        For an unknown name, or a backend that cannot run here.
    TypeError
        For a dtype the named backend does not take, or a policy of another family.
    """
    request = request or _NO_REQUEST
    value_dtype = result_dtype(matrix.dtype, x_dtype)
    name = resolve_name(request.backend, matrix._sg_backend)
    policy = request.policy if request.policy is not None else matrix._sg_policy
    storage = mixed_storage(matrix, value_dtype)
    if storage is not None:
        mixed = _select_mixed(matrix, name, storage, value_dtype, policy, request, store)
        if mixed is not None:
            return mixed
    if name == AUTO:
        backend, reason, stats = _auto(matrix, value_dtype, policy, store)
        if policy is not None and backend.residence.name == "host":
            reason += f"; the {type(policy).__name__} has no effect there"
            policy = None
    else:
        backend = get_backend(name)
        backend.check_dtypes(value_dtype, matrix._sg_index_dtype())
        reason, stats = f"asked for by name ({_named_by(request, matrix)})", None
    _check_policy_type(backend, policy, request)
    if policy is None:
        policy = default_policy(backend, matrix._sg_mirror(backend.residence, value_dtype), store)
    return Choice(backend.name, policy, reason, stats, value_dtype, name, implementation=backend)


def _check_policy_type(backend, policy, request) -> None:
    """Refuse a policy of another backend's kind (a ``CsrVectorPolicy`` for cuSPARSE)."""
    if policy is not None and not isinstance(policy, backend.policy_type):
        raise TypeError(
            f"backend {backend.name!r} takes a {backend.policy_type.__name__}, "
            f"got {type(policy).__name__} (from {_policy_from(request)})"
        )


def _policy_from(request: Request) -> str:
    return "policy=" if request.policy is not None else "A.policy"


def _named_by(request: Request, matrix) -> str:
    if request.backend:
        return "backend="
    if matrix._sg_backend:
        return "A.backend"
    return "use_backend" if _scoped.get() else f"${ENV_VAR}"


def explain(A, x_dtype=None) -> Choice:
    """Which backend and policy ``auto`` uses for ``A @ x`` (x of ``x_dtype``), and why.

    Parameters
    ----------
    A : sparsegpu matrix
    x_dtype : dtype, optional
        The dtype of x; default ``A.dtype``.

    Returns
    -------
    Choice
        Printing it shows the backend, the policy, the reason, and the row-length
        statistics the rules looked at.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> print(sg.explain(sg.csr_matrix(sp.eye(4))).backend)  # doctest: +SKIP
    merge_path
    """
    if not hasattr(A, "_sg_mirror"):
        raise TypeError(
            f"A must be a sparsegpu matrix, got {type(A).__name__}; wrap it with "
            "sparsegpu.csr_matrix(A)"
        )
    x_dtype = np.dtype(x_dtype or A.dtype)
    value_dtype = result_dtype(A.dtype, x_dtype)
    storage = mixed_storage(A, value_dtype)
    if storage is not None:  # what planning measured for it, else the estimate
        cache = A.__dict__.get("_sg_cache")
        measured = cache.measured.get((storage, value_dtype)) if cache is not None else None
        return measured if measured is not None else select(A, x_dtype)
    override = None
    name = resolve_name(None, A._sg_backend)
    if name != AUTO:
        override = f"products of this matrix use {name!r} now (A.backend, use_backend or env)"
    cache = A.__dict__.get("_sg_cache")
    measured = cache.measured.get(value_dtype) if cache is not None else None
    if measured is not None:
        return replace(measured, override=override)
    backend, reason, stats = _auto(A, value_dtype, A._sg_policy, None)
    policy = A._sg_policy
    if policy is None or not isinstance(policy, backend.policy_type):
        policy = default_policy(backend, A._sg_mirror(backend.residence, value_dtype), None)
    estimate = Choice(
        backend.name, policy, reason, stats, value_dtype, AUTO, override, implementation=backend
    )
    return from_memory(A, estimate) or estimate


def mixed_storage(matrix, value_dtype) -> np.dtype | None:
    """The dtype the values stay in for a mixed-precision product (``A.mixed_precision``
    and a product computed in the wide partner of A's dtype), else None."""
    if not getattr(matrix, "_sg_mixed", False):
        return None
    storage = np.dtype(matrix.dtype)
    return storage if MIXED_PARTNERS.get(storage) == value_dtype else None


def _select_mixed(matrix, name, storage, value_dtype, policy, request, store) -> Choice | None:
    """The choice of a mixed-precision product: a GPU backend that computes the pair, or
    None where there is nothing to mix (no GPU, the host backend named: scipy widens the
    values itself)."""
    pair = (storage, value_dtype)
    stats = None
    if name == AUTO:
        if _cuda.unavailable_reason() is not None:
            return None
        rank = {n: i for i, n in enumerate(AUTO_PREFERENCE)}
        found = sorted(
            (
                b
                for b in registered().values()
                if pair in b.mixed_pairs
                and b.unavailable_reason() is None
                and (b.estimated if policy is None else isinstance(policy, b.policy_type))
            ),
            key=lambda b: rank.get(b.name, len(rank)),
        )
        mirror = matrix._sg_mirror(found[0].residence, storage) if found else None
        usable = [b for b in found if b.supports(mirror)]
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
            picked, rule = (
                "cusparse",
                "irregular rows: cuSPARSE (merge_path has no mixed precision)",
            )
        else:
            picked, rule = auto_rule(stats, names)
        backend = usable[names.index(picked)]
        reason = f"mixed precision ({storage} values, {value_dtype} sums); {rule}"
    else:
        backend = get_backend(name)
        if backend.residence.name == "host":
            return None
        if pair not in backend.mixed_pairs:
            takers = [b.name for b in registered().values() if pair in b.mixed_pairs]
            raise TypeError(
                f"backend {backend.name!r} does not compute {storage} values with "
                f"{value_dtype} vectors (A.mixed_precision is set); use "
                f"{' or '.join(repr(t) for t in takers) or 'another backend'} or 'auto', "
                "or set A.mixed_precision = False"
            )
        backend.check_dtypes(storage, matrix._sg_index_dtype())
        reason = f"asked for by name ({_named_by(request, matrix)}), mixed precision"
    _check_policy_type(backend, policy, request)
    if policy is None:
        policy = default_policy(backend, matrix._sg_mirror(backend.residence, storage), store)
    return Choice(
        backend.name, policy, reason, stats, value_dtype, name,
        storage_dtype=storage, implementation=backend,
    )  # fmt: skip


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


# ------------------------------------------------------------------------- planning
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


def resolve_level(explicit: str | None, matrix_level: str | None) -> str:
    """The planning level in force: ``planning=``, ``A.planning``, the scope, the
    environment variable, then ``"measure"``."""
    level = explicit or matrix_level or _scoped_level.get() or os.environ.get(PLANNING_ENV_VAR)
    if level is None:
        return DEFAULT_LEVEL
    if level not in LEVELS:
        raise ValueError(
            f"{PLANNING_ENV_VAR}={level!r} is not a planning level; choose one of "
            f"{', '.join(LEVELS)} (or unset it)"
        )
    return level


# A candidate whose first timed sample is over this many times the fastest candidate so far
# is not timed again (its one sample is what planning records).
HOPELESS = 4


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


# (name asked for, fingerprint) -> (backend name, policy) measured fastest in this process
_measured: dict[tuple, tuple[str, Any]] = {}
_measured_lock = threading.Lock()


def fingerprint(mirror) -> tuple:
    """What two matrices must share for one's measured plan to serve the other: shape,
    dtypes and every row statistic (a matrix with new values but the same pattern, as in
    Newton or time-stepping codes, has the same fingerprint)."""
    return (mirror.shape, str(mirror.dtype), str(mirror.index_dtype), mirror.stats)


def remembered(requested: str, mirror) -> tuple[str, Any] | None:
    """The (backend, policy) planning measured fastest for this fingerprint when
    ``requested`` (``"auto"`` or a backend's name) was in force, or None."""
    return _measured.get((requested, fingerprint(mirror)))


def forget_measurements() -> None:
    """Forget every plan measured in this process (the next matrices plan again)."""
    with _measured_lock:
        _measured.clear()


def _short_list(matrix, estimate: Choice, value_dtype, level: str, store, capturable) -> list:
    """(backend, policy) pairs planning times: the estimate first, then, for ``measure``,
    each backend's :meth:`~Backend.planning_candidates` (cuSPARSE's algorithms) and the
    tuned and untuned policies of the ``planned`` backends (merge_path, shuffle, delta16)
    that take the matrix (:func:`_planned_pairs`); for ``exhaustive``, every usable backend
    with every candidate it has."""
    pairs = [(estimate.implementation, estimate.policy)]
    if capturable and not estimate.implementation.capturable:
        pairs = []
    if estimate.requested != AUTO:  # a backend named: plan its policy only
        backend = estimate.implementation
        mirror = matrix._sg_mirror(backend.residence, value_dtype)
        return pairs + [
            (backend, p) for p in backend.planning_candidates(mirror) if p != estimate.policy
        ]
    candidates = _gpu_candidates(
        value_dtype, type(matrix._sg_policy) if matrix._sg_policy else None
    )
    pairs += _planned_pairs(matrix, candidates, value_dtype, level, store, capturable)
    return _unique(pairs)


def _planned_pairs(matrix, backends, mirror_dtype, level, store, capturable, named=False):
    """The (backend, policy) pairs planning times for each of ``backends`` that takes the
    mirror of ``mirror_dtype`` (and can be captured, when ``capturable``): every candidate
    for ``exhaustive``, else its planning candidates (cuSPARSE's algorithms), else, where it
    is ``planned`` and no backend was ``named``, its tuned policy and its untuned one.

    Both, because a tuned policy is one matrix's winner applied to its whole row class:
    the shipped ones were fitted on two stencils, and on matrices that took no part in
    that the untuned policy (from the matrix's own mean row length) can be much faster
    (H200, ``compressed_indices_h200_run2``, 2-D 9-point stencil in float64: planning
    timed shuffle's and delta16's tuned short-row policies at 169 and 180 us a product,
    where the best of each one's sweep took 140 and 129 us). Where no policy is tuned the
    two are one.
    """
    pairs = []
    for backend in backends:
        mirror = matrix._sg_mirror(backend.residence, mirror_dtype)
        if not backend.supports(mirror) or (capturable and not backend.capturable):
            continue
        if level == "exhaustive":
            policies = backend.candidates(mirror)
        elif backend.planning_candidates(mirror):
            policies = backend.planning_candidates(mirror)
        elif backend.planned and not named:
            policies = [default_policy(backend, mirror, store), backend.default_policy(mirror)]
        else:
            continue
        pairs += [(backend, policy) for policy in policies]
    return pairs


def _unique(pairs) -> list:
    """``pairs`` without repeats of a (backend name, policy), in first-seen order."""
    seen, unique = set(), []
    for backend, policy in pairs:
        if (backend.name, policy) not in seen:
            seen.add((backend.name, policy))
            unique.append((backend, policy))
    return unique


def measure(matrix, x, estimate: Choice, level: str, *, store=None, capturable=False) -> Choice:
    """Time the candidates of ``level`` for ``matrix @ x`` on ``x`` and return the fastest
    that agrees with the estimate's answer (see the module docstring).

    ``x`` is a device vector of the estimate's value dtype. Runs on the current stream and
    waits for it; each candidate's plan is made once (kept on the mirror like any plan).
    The cost: per candidate, one checked product and 1 + 1 + 5 timed ones (a sample, then
    a warm-up and five samples taken in alternation with the other candidates', so that the
    host's drift falls on all of them alike; several products a sample for products under
    about 20 us); a
    candidate whose first sample is over ``HOPELESS`` times the fastest so far stops there
    (a vector kernel on an arrow matrix's dense rows runs 200 times cuSPARSE: its repeats
    alone cost hundreds of milliseconds). ``capturable``: only backends whose products a
    CUDA graph can hold (a solver about to capture its iterations).
    """
    from ._mirror import PlanKey

    start = time.perf_counter()
    value_dtype = estimate.value_dtype
    storage = estimate.storage_dtype  # mixed precision: the values' dtype on the device
    if storage is None:
        pairs = _short_list(matrix, estimate, value_dtype, level, store, capturable)
    else:
        pairs = _short_list_mixed(matrix, estimate, level, store, capturable)
    if not pairs:
        return estimate
    reference = None
    best = None
    results = []
    contenders: dict = {}  # inner -> {index in results: product}
    for backend, policy in pairs:
        mirror = matrix._sg_mirror(backend.residence, storage or value_dtype)
        try:
            if storage is None:
                plan = mirror.get_plan(
                    PlanKey(backend.name, policy),
                    lambda b=backend, m=mirror, p=policy: b.plan(m, p),
                )
            else:
                plan = mirror.get_plan(
                    PlanKey(backend.name, policy, value_dtype),
                    lambda b=backend, m=mirror, p=policy: b.plan(m, p, vector_dtype=value_dtype),
                )
            xp = mirror.xp
            y = xp.empty(mirror.shape[0], dtype=value_dtype)
            plan.matvec(x, out=y)
        except Exception as exc:  # a candidate that cannot run here is left out
            results.append(
                Measurement(backend.name, policy, None, False, f"{type(exc).__name__}: {exc}")
            )
            continue
        if reference is None:
            reference = y
            scale = _agreement_scale(mirror, x, y)
            agreed = True
        else:
            agreed = bool((xp.abs(y - reference) <= scale).all()) if y.size else True
        inner = max(1, min(20, int(4e7 // max(mirror.nbytes + 16 * x.size, 1))))
        product = lambda plan=plan, y=y: plan.matvec(x, out=y)  # noqa: E731
        on_host = xp is np
        timer = _timing.host_time if on_host else _timing.cuda_time
        ms = timer(product, warmup=0, repeat=1, inner=inner).median_ms
        note = ""
        if best is not None and ms > HOPELESS * best[2]:
            note = f"one sample: over {HOPELESS}x the fastest so far"
        else:  # timed below, in alternation with the others
            contenders.setdefault((on_host, inner), {})[len(results)] = product
        results.append(Measurement(backend.name, policy, ms, agreed, note))
        if agreed and (best is None or ms < best[2]):
            best = (backend, policy, ms)
    # The candidates that were not hopeless, timed in alternation (one sample of each per
    # round): the host's speed drifts over seconds, which timed one after another would
    # fall on some candidates only and decide between near-ties by it.
    for (on_host, inner), products in contenders.items():
        timer = _timing.host_time_interleaved if on_host else _timing.cuda_time_interleaved
        for i, timing in timer(products, warmup=1, repeat=5, inner=inner).items():
            results[i] = replace(results[i], ms=timing.median_ms)
    best = None
    for (backend, policy), m in zip(pairs, results, strict=True):
        if m.agreed and m.ms is not None and (best is None or m.ms < best[2]):
            best = (backend, policy, m.ms)
    if best is None:  # nothing ran here: keep the estimate
        return estimate
    backend, policy, ms = best
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
    if storage is None:  # (mixed-precision winners are not remembered across matrices)
        mirror = matrix._sg_mirror(backend.residence, value_dtype)
        with _measured_lock:
            _measured[(estimate.requested, fingerprint(mirror))] = (backend.name, policy)
    else:
        reason = f"mixed precision ({storage} values, {value_dtype} sums); {reason}"
    return Choice(
        backend.name, policy, reason, estimate.stats, value_dtype, estimate.requested,
        level=level, measurements=tuple(results), planning_ms=planning_ms,
        storage_dtype=storage, implementation=backend,
    )  # fmt: skip


def _short_list_mixed(matrix, estimate: Choice, level: str, store, capturable) -> list:
    """:func:`_short_list` for a mixed-precision product: the estimate, then each backend
    that computes the pair, with its planning candidates (cuSPARSE's algorithms), its
    tuned and untuned policies where it is ``planned`` (shuffle, delta16), or every candidate
    (``exhaustive``); only the estimate's backend when one was named."""
    storage, value_dtype = estimate.storage_dtype, estimate.value_dtype
    pairs = [(estimate.implementation, estimate.policy)]
    if capturable and not estimate.implementation.capturable:
        pairs = []
    named = estimate.requested != AUTO
    if named:
        backends = [estimate.implementation]
    else:
        backends = [
            b
            for b in registered().values()
            if (storage, value_dtype) in b.mixed_pairs and b.unavailable_reason() is None
        ]
    pairs += _planned_pairs(matrix, backends, storage, level, store, capturable, named)
    return _unique(pairs)


def _agreement_scale(mirror, x, y) -> Any:
    """How far a candidate's answer may be from the estimate's: the dtype's tolerance for
    the longest row times a bound of the row sums' size (|y|, or |A|max |x|max x mean row
    length when the rows cancel)."""
    xp = mirror.xp
    tol = tolerance(mirror.dtype, max(mirror.stats.max, 1))
    size = float(xp.abs(y).max()) if y.size else 0.0
    if mirror.nnz and x.size:
        typical = (
            float(xp.abs(mirror.data).max()) * float(xp.abs(x).max()) * max(mirror.stats.mean, 1.0)
        )
        size = max(size, typical)
    return 4 * tol * max(size, 1.0)


def from_memory(matrix, estimate: Choice) -> Choice | None:
    """The estimate replaced by the plan measured for a matrix of the same fingerprint in
    this process, or None."""
    backend = estimate.implementation
    if backend is None or backend.residence.name == "host" or estimate.storage_dtype is not None:
        return None
    mirror = matrix._sg_mirror(backend.residence, estimate.value_dtype)
    found = remembered(estimate.requested, mirror)
    if found is None:
        return None
    name, policy = found
    if estimate.requested != AUTO:
        chosen = backend if name == backend.name else None
    else:
        chosen = next((b for b in _gpu_candidates(estimate.value_dtype) if b.name == name), None)
    if chosen is None or not chosen.supports(mirror):
        return None
    return Choice(
        name, policy, "measured on a matrix of the same fingerprint in this process",
        estimate.stats, estimate.value_dtype, estimate.requested, estimate.override,
        level="measure", implementation=chosen,
    )  # fmt: skip
