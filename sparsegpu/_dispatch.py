"""The backend registry and the one place where a backend is chosen (``auto`` included).

Precedence of a product's backend: an explicit ``backend=`` argument, then the matrix's
``A.backend``, then the innermost ``with sparsegpu.use_backend(...)`` of this thread (or
task), then the environment variable ``SPARSEGPU_BACKEND``, then ``"auto"``.
"""

from __future__ import annotations

import importlib
import os
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from . import _cuda
from ._mirror import SCATTERED_SPREAD, DeviceMemoryError, is_out_of_memory, memory_error
from .backends import BUILTIN_MODULES, canonical_name
from .backends.base import Backend, Plan

AUTO = "auto"
ENV_VAR = "SPARSEGPU_BACKEND"

_registry: dict[str, Backend] = {}
_registry_lock = threading.Lock()
_loaded = False
_scoped: ContextVar[str | None] = ContextVar("sparsegpu_backend", default=None)


# Bumped whenever what ``auto`` or a name resolves to may change (the registry changes, an
# auto lookup is plugged in), so cached per-matrix choices are re-made.
_generation = 0


def invalidate_choices() -> None:
    """Forget every cached backend/plan choice (the next product chooses again)."""
    global _generation
    _generation += 1


class BackendUnavailableError(RuntimeError):
    """A backend was asked for by name but cannot run on this machine."""


# ---------------------------------------------------------------------- registry
def _load_builtins() -> None:
    global _loaded
    with _registry_lock:
        if _loaded:
            return
        for module in BUILTIN_MODULES:
            mod = importlib.import_module(f".backends.{module}", __package__)
            for backend in mod.BACKENDS:
                _registry.setdefault(backend.name, backend)
        _loaded = True


def register_backend(backend: Backend, *, replace: bool = False) -> None:
    """Add a backend to the registry (plugins and tests).

    Raises
    ------
    ValueError
        If the name is taken (and ``replace`` is False) or is ``"auto"``.
    """
    _load_builtins()
    if not backend.name or backend.name == AUTO:
        raise ValueError(f"a backend cannot be named {backend.name!r}")
    global _generation
    with _registry_lock:
        if backend.name in _registry and not replace:
            raise ValueError(
                f"a backend named {backend.name!r} is already registered; pass replace=True"
            )
        _registry[backend.name] = backend
        _generation += 1


def unregister_backend(name: str) -> None:
    """Remove a backend added with :func:`register_backend`."""
    global _generation
    with _registry_lock:
        _registry.pop(name, None)
        _generation += 1


def registered() -> dict[str, Backend]:
    """Every registered backend by name, in registry order."""
    _load_builtins()
    return dict(_registry)


@dataclass(frozen=True)
class BackendStatus:
    """One row of :func:`backends`."""

    name: str
    available: bool
    reason: str | None
    description: str


def backends() -> list[BackendStatus]:
    """Every backend with whether it can run here and, if not, why.

    Examples
    --------
    >>> import sparsegpu as sg
    >>> [b.name for b in sg.backends() if b.available][:1]
    ['scipy']
    """
    out = []
    for name, backend in registered().items():
        reason = backend.unavailable_reason()
        out.append(BackendStatus(name, reason is None, reason, backend.description))
    return out


def _availability_summary() -> str:
    lines = []
    for status in backends():
        if status.available:
            lines.append(f"  {status.name}: available")
        else:
            lines.append(f"  {status.name}: unavailable ({status.reason})")
    return "\n".join(lines)


def get_backend(name: str) -> Backend:
    """The backend called ``name``, checked to be usable here.

    Raises
    ------
    ValueError
        For a name no backend has.
    BackendUnavailableError
        For a backend that cannot run here; the message says why and lists the others.
    """
    if not isinstance(name, str):
        raise TypeError(f"a backend name must be a str, got {type(name).__name__}")
    name = canonical_name(name)
    backend = registered().get(name)
    if backend is None:
        raise ValueError(
            f"unknown backend {name!r}; choose 'auto' or one of:\n{_availability_summary()}"
        )
    reason = backend.unavailable_reason()
    if reason is not None:
        raise BackendUnavailableError(
            f"backend {name!r} is not available here: {reason}\n{_availability_summary()}"
        )
    return backend


def check_name(name: str) -> str:
    """Validate a name for ``A.backend`` / ``use_backend``; ``"auto"`` is always valid."""
    name = canonical_name(name)
    if name != AUTO:
        get_backend(name)
    return name


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
    name = check_name(name)
    token = _scoped.set(name)
    try:
        yield name
    finally:
        _scoped.reset(token)


def _env_backend() -> str | None:
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

    def _env_backend() -> str | None:
        return os.environ.get(ENV_VAR)


def resolve_name(explicit: str | None, matrix_choice: str | None) -> str:
    """The backend name in force for one product (see the module docstring)."""
    return explicit or matrix_choice or _scoped.get() or _env_backend() or AUTO


# ------------------------------------------------------------------------ choosing
def _auto_candidates(value_dtype: np.dtype) -> list[Backend]:
    """Usable GPU backends that take this value dtype, in registry order."""
    if _cuda.unavailable_reason() is not None:
        return []
    return [
        b
        for b in registered().values()
        if b.residence.name == "cupy"
        and value_dtype in b.value_dtypes
        and b.unavailable_reason() is None
    ]


# Order of preference of ``auto`` on regular rows when no tuning entry decides: on the
# H200 the tuned shuffle kernel was within 3% of the best backend on every regular class
# and 1.4-2.1x cuSPARSE (autotune_h200.json: 5-point 3715 vs 2126 GB/s, 27-point 3535 vs
# 2600, 400 per row 3023 vs 1413); the merge-path kernel beat cuSPARSE there too; the
# texture path and the software cache trail, so they come last.
_AUTO_PREFERENCE = ("shuffle", "vector", "readonly", "merge_path", "cusparse", "texture", "swcache")

# Irregular rows go to the load-balanced kernel. The rule follows Ginkgo's CSR strategy
# choice ("load_balance" when the longest row is far above the mean): with max > 8 x mean
# a row-per-(sub)warp kernel leaves most threads of a warp idle while one row finishes,
# and one block per long row serializes it; below that the sub-warp kernels keep up.
IRREGULAR_IMBALANCE = 8.0
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
# Short or medium rows whose columns are scattered over x (RowLengthStats.row_class
# "scattered") are bound by one 32-byte L2 sector per gather whatever the kernel: on the
# H200 (knob_sweep_h200.jsonl, uniform 4M x 16) cuSPARSE and the merge-path kernel run
# within 1% of each other and 25% above a kernel that only gathers, while the tuned
# row-per-sub-warp kernel trails by 5% in float64. Without a tuning entry: merge path.
_AUTO_SCATTERED = ("merge_path", "cusparse")

# Plugged-in lookups (the tuning cache): fn(mirror, value_dtype, candidates) -> backend
# name or None; the first non-None answer naming a candidate wins over the heuristics.
_auto_lookups: list = []


def register_auto_lookup(lookup) -> None:
    """Let ``auto`` ask ``lookup(mirror, value_dtype, candidates)`` before its heuristics.

    ``lookup`` returns the name of the backend measured fastest for this mirror (a tuning
    cache), or None to defer. Choices made before are forgotten.
    """
    _auto_lookups.append(lookup)
    invalidate_choices()


@dataclass(frozen=True)
class AutoChoice:
    """What ``auto`` picks for one matrix and value dtype, and why (see :func:`explain`)."""

    backend: str
    policy: object
    reason: str
    stats: object
    value_dtype: np.dtype
    override: str | None = None

    def __str__(self) -> str:
        lines = [f"auto -> backend {self.backend!r} with {self.policy!r}", f"  why: {self.reason}"]
        s = self.stats
        if s is not None:
            lines.append(
                f"  rows: {s.n_rows:,} x {s.n_cols:,}, nnz {s.nnz:,}; row length mean "
                f"{s.mean:.1f}, std {s.std:.1f}, min {s.min}, max {s.max}, empty rows "
                f"{s.empty_rows:,}; imbalance (max/mean) {s.imbalance:.1f}, column spread "
                f"{s.column_spread:.3f}, class {s.row_class!r}"
            )
        lines.append(f"  value dtype: {self.value_dtype}")
        if self.override is not None:
            lines.append(f"  note: {self.override}")
        return "\n".join(lines)

    __repr__ = __str__


def _auto_decision(matrix_obj, value_dtype: np.dtype) -> tuple[Backend, str, object]:
    """(backend, reason, stats or None) of ``auto`` for this matrix and value dtype."""
    candidates = _auto_candidates(value_dtype)
    if not candidates:
        reason = (
            f"no GPU: {_cuda.unavailable_reason()}"
            if _cuda.unavailable_reason() is not None
            else f"no GPU backend computes in {value_dtype}"
        )
        return registered()["scipy"], reason + "; the scipy CPU reference computes", None
    by_name = {b.name: b for b in candidates}
    ordered = [by_name[n] for n in _AUTO_PREFERENCE if n in by_name]
    ordered += [b for b in candidates if b.name not in _AUTO_PREFERENCE]
    mirror = matrix_obj._sg_mirror(ordered[0].residence, value_dtype)
    usable = [b for b in ordered if b.supports(mirror)]
    if not usable:
        return registered()["scipy"], "no GPU backend accepts this matrix", None
    stats = mirror.stats
    usable_names = [b.name for b in usable]
    # Tuning entries are measured on large matrices (GB/s); a small product is
    # latency-bound and follows the small-matrix rule (H200, bundled float64 matrices:
    # the tuned shuffle kernel 12.6 us, the merge-path kernel 9.2; auto_vs_cusparse_h200).
    if stats.n_rows + stats.nnz > SMALL_ITEMS:
        for lookup in _auto_lookups:
            name = lookup(mirror, value_dtype, usable_names)
            if name in usable_names:
                return usable[usable_names.index(name)], "measured fastest (tuning cache)", stats
    name, reason = auto_rule(stats, usable_names)
    return usable[usable_names.index(name)], reason, stats


def auto_rule(stats, usable_names) -> tuple[str, str]:
    """The heuristic of ``auto``: (backend name, reason) from row-length statistics.

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
    irregular = stats.nnz > 0 and (
        (stats.imbalance > IRREGULAR_IMBALANCE and stats.std > stats.mean) or stats.max > LONG_ROW
    )
    if irregular:
        for name in _AUTO_IRREGULAR:
            if name in usable_names:
                return name, (
                    f"irregular rows (max {stats.max} > {IRREGULAR_IMBALANCE:g} x mean "
                    f"{stats.mean:.1f} with std > mean, or a row over {LONG_ROW:,}): "
                    "the load-balanced merge-path kernel keeps every thread busy"
                )
    if stats.row_class == "scattered":
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
        f"order {', '.join(_AUTO_PREFERENCE)}"
    )


def choose_auto(matrix_obj, value_dtype: np.dtype, index_dtype: np.dtype) -> Backend:
    """The backend ``auto`` uses for this matrix and value dtype.

    No GPU, or a value dtype no GPU backend takes: ``scipy``. Otherwise a plugged-in
    lookup (the tuning cache), then the row-length rules above, restricted to backends
    that accept the mirror's dtypes and size.
    """
    return _auto_decision(matrix_obj, np.dtype(value_dtype))[0]


def explain(A, x_dtype=None) -> AutoChoice:
    """Which backend and policy ``auto`` uses for ``A @ x`` (x of ``x_dtype``), and why.

    Parameters
    ----------
    A : sparsegpu matrix
    x_dtype : dtype, optional
        The dtype of x; default ``A.dtype``.

    Returns
    -------
    AutoChoice
        Printing it shows the backend, the policy, the reason, and the row-length
        statistics the rules looked at.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> print(sg.explain(sg.csr_matrix(sp.eye(4))).backend)  # doctest: +SKIP
    cusparse
    """
    if not hasattr(A, "_sg_mirror"):
        raise TypeError(
            f"A must be a sparsegpu matrix, got {type(A).__name__}; wrap it with "
            "sparsegpu.csr_matrix(A)"
        )
    value_dtype = result_dtype(A.dtype, x_dtype or A.dtype)
    backend, reason, stats = _auto_decision(A, value_dtype)
    policy = _policy_for(A, backend, value_dtype)
    override = None
    name = resolve_name(None, A._sg_backend)
    if name != AUTO:
        override = f"products of this matrix use {name!r} now (A.backend, use_backend or env)"
    return AutoChoice(backend.name, policy, reason, stats, value_dtype, override)


def choose(matrix_obj, name: str, value_dtype, index_dtype) -> Backend:
    """The backend object for one product, dtype-checked (TypeError when unsupported)."""
    if name == AUTO:
        return choose_auto(matrix_obj, np.dtype(value_dtype), np.dtype(index_dtype))
    backend = get_backend(name)
    backend.check_dtypes(value_dtype, index_dtype)
    return backend


# ---------------------------------------------------------------------- products
try:  # scipy's own result-dtype rule, so results have exactly scipy's dtype
    from scipy.sparse._sputils import upcast_char as _upcast_char
except ImportError:  # pragma: no cover - every supported scipy has it
    _upcast_char = None


def result_dtype(a_dtype, x_dtype) -> np.dtype:
    """The dtype scipy gives ``A @ x``."""
    if _upcast_char is not None:
        return np.dtype(_upcast_char(np.dtype(a_dtype).char, np.dtype(x_dtype).char))
    return np.result_type(a_dtype, x_dtype)


def _default_policy(matrix_obj, backend: Backend, mirror):
    chosen = matrix_obj._sg_policy
    if chosen is not None and isinstance(chosen, backend.policy_type):
        return chosen
    policy = mirror.plans.get((backend.name, "default"))
    if policy is None:
        from .tuning.cache import tuned_policy  # the tuned store, else the device's default

        policy = tuned_policy(backend, mirror) or backend.default_policy(mirror)
        mirror.plans[(backend.name, "default")] = policy
    return policy


def _policy_for(matrix_obj, backend: Backend, value_dtype):
    """The policy a product on ``backend`` without an explicit policy uses."""
    return _default_policy(
        matrix_obj, backend, matrix_obj._sg_mirror(backend.residence, value_dtype)
    )


def _plan_for(matrix_obj, backend: Backend, value_dtype, policy) -> Plan:
    mirror = matrix_obj._sg_mirror(backend.residence, value_dtype)
    if not backend.supports(mirror):
        reason = backend.refuse_reason(mirror) or (
            f"its dtypes ({mirror.dtype} values, {mirror.index_dtype} indices) are not among "
            f"those it supports ({', '.join(map(str, backend.value_dtypes))})"
        )
        raise ValueError(f"backend {backend.name!r} cannot take this matrix: {reason}")
    if policy is None:
        policy = _default_policy(matrix_obj, backend, mirror)
    elif not isinstance(policy, backend.policy_type):
        raise TypeError(
            f"backend {backend.name!r} takes a {backend.policy_type.__name__}, "
            f"got {type(policy).__name__}"
        )
    return mirror.get_plan((backend.name, policy), lambda: backend.plan(mirror, policy))


def _resolve(matrix_obj, name: str, x_dtype, policy):
    """(plan, value dtype, computes on host) for one product; the slow, cached part."""
    value_dtype = result_dtype(matrix_obj.dtype, x_dtype)
    chosen = choose(matrix_obj, name, value_dtype, matrix_obj._sg_index_dtype())
    plan = _plan_for(matrix_obj, chosen, value_dtype, policy)
    return plan, value_dtype, chosen.residence.name == "host"


def plan_for(matrix_obj, x_dtype=None, *, backend: str | None = None, policy=None) -> Plan:
    """The plan a product ``A @ x`` with an x of ``x_dtype`` would run (made if needed).

    Solvers and benchmarks call ``plan.matvec(x, out=...)`` on device arrays directly,
    skipping the per-call dispatch.
    """
    name = resolve_name(backend, matrix_obj._sg_backend)
    return _resolve(matrix_obj, name, np.dtype(x_dtype or matrix_obj.dtype), policy)[0]


def _to_residence(x, residence, dtype):
    """x moved (if needed) to where the backend computes, in ``dtype``, C-contiguous."""
    xp = residence.xp
    if xp is np:  # the scipy backend (and the test backends that copy on the host)
        if _cuda.is_cupy_array(x):
            x = x.get()
        return np.ascontiguousarray(x, dtype=dtype)
    if _cuda.is_cupy_array(x):
        if x.dtype != dtype:
            x = x.astype(dtype)
        return xp.ascontiguousarray(x)
    return residence.upload(np.ascontiguousarray(x, dtype=dtype))


def _from_residence(y, want_cupy: bool):
    if want_cupy:
        if not _cuda.is_cupy_array(y):
            return _cuda.cupy_or_none().asarray(y)
        return y
    if _cuda.is_cupy_array(y):
        return y.get()
    return y


def product(matrix_obj, x, *, backend: str | None = None, policy=None, out=None):
    """``A @ x`` for a 1-D or 2-D x (numpy or cupy) through the chosen backend.

    The result is in x's array module with scipy's dtype. Shapes are the caller's job
    (``_matrix`` checks them the way scipy does).

    The choice (backend, mirror, plan) is cached in the matrix's mirror dict under the
    name in force, x's dtype, the policy and the registry generation, so a repeated
    product costs a few dictionary lookups; the cache goes wherever the mirror goes.
    """
    try:
        return _product(matrix_obj, x, backend, policy, out)
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


def _product(matrix_obj, x, backend, policy, out):
    _cuda.ensure_context()
    name = backend or matrix_obj._sg_backend or _scoped.get() or _env_backend() or AUTO
    key = ("choice", name, x.dtype, policy, matrix_obj._sg_policy, _generation)
    cache = matrix_obj.__dict__.get("_sg_cache")
    entry = cache.get(key) if cache is not None else None
    if entry is None:
        # Into the dict that holds the mirrors this choice was made from: if another thread
        # drops them meanwhile (``A.data = new``), the choice goes with them.
        cache = matrix_obj._sg_cache_dict()
        entry = cache[key] = _resolve(matrix_obj, name, x.dtype, policy)
    plan, value_dtype, on_host = entry
    if out is None:
        if on_host:
            if type(x) is np.ndarray:  # the CPU path: scipy's kernel takes x as it is
                return plan.matvec(x)
        elif x.ndim == 1 and x.dtype == value_dtype and _cuda.is_cupy_array(x):
            # the GPU hot path: a device vector in the right dtype
            return plan.matvec(x if x.flags.c_contiguous else x.copy())
    want_cupy = _cuda.is_cupy_array(x)
    if out is not None:
        _check_out(out, x, matrix_obj.shape[0], value_dtype)
    residence = plan.matrix.residence
    xr = _to_residence(x, residence, value_dtype)
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
