"""The autotuner: sweep each backend's candidate policies on a matrix, keep the fastest.

For every backend and value dtype, :func:`autotune` runs the backend's
:meth:`~sparsegpu.backends.base.Backend.candidates` (its untuned default first), checks
each candidate's answer against scipy (the oracle) before and after timing it, times the
correct ones (CUDA events for GPU backends: warm-up, then the median of repeats; the
block-size sweep of G-DEP's K20 tuning of the CSR vector kernel, "Kepler explained, part
2", G-DEP high-speed computing notes no. 25), and writes each backend's winner to the
tuning store (:mod:`sparsegpu.engine._tuning_store`). The autotuner only writes it: selection
(:func:`sparsegpu.engine._select.default_policy`, and ``auto``) consults it.
A wrong or failing candidate is reported and never cached.
"""

from __future__ import annotations

import math
import numbers
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp

from ..backends.base import FLOAT_AND_COMPLEX, INT32_AND_INT64
from ..backends.policy import Policy
from ..classes._matrix import _SparseGPUMixin, csr_matrix
from ..device import _cuda
from ..device._dtypes import HALF_DTYPES
from ..device._mirror import RowLengthStats
from ..engine import _registry, _rules, _select
from ..engine._tuning_store import (
    TunedEntry,
    TuningCache,
    TuningCacheError,
    TuningCacheWarning,
    current_context,
    default_cache,
    now_iso,
)
from ..measure._oracle import Oracle
from ..measure._timing import (
    cuda_time,
    gb_per_s,
    host_time,
    matrix_spmv_bytes,
    time_candidates,
)

ORACLE = "scipy"

OK, WRONG, ERROR, SKIPPED = "ok", "wrong", "error", "skipped"


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class CandidateResult:
    """What happened to one candidate policy.

    Attributes
    ----------
    backend : str
    value_dtype : str
    policy : Policy or None
        None when the backend was skipped before it had candidates.
    untuned : bool
        True for the backend's untuned default policy.
    status : str
        ``"ok"`` (correct and timed), ``"wrong"`` (answer differs from scipy),
        ``"error"`` (raised) or ``"skipped"`` (unsupported, or the budget ran out).
    time_ms, gb_per_s : float or None
        Median time of one product and the bandwidth it means (``"ok"`` only).
    message : str or None
        Why it is not ``"ok"``.
    """

    backend: str
    value_dtype: str
    policy: Policy | None
    untuned: bool
    status: str
    time_ms: float | None = None
    gb_per_s: float | None = None
    message: str | None = None

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "value_dtype": self.value_dtype,
            "policy_type": type(self.policy).__name__ if self.policy is not None else None,
            "policy": self.policy.knobs() if self.policy is not None else None,
            "untuned": self.untuned,
            "status": self.status,
            "time_ms": self.time_ms,
            "gb_per_s": self.gb_per_s,
            "message": self.message,
        }


@dataclass(frozen=True)
class BackendWinner:
    """A backend's fastest correct candidate for one value dtype, beside its untuned default.

    Attributes
    ----------
    best : CandidateResult
    untuned : CandidateResult or None
        The untuned default's result when it was timed.
    """

    best: CandidateResult
    untuned: CandidateResult | None

    @property
    def backend(self) -> str:
        return self.best.backend

    @property
    def value_dtype(self) -> str:
        return self.best.value_dtype

    @property
    def gain(self) -> float | None:
        """Untuned time over tuned time (1.0: the default was already the best)."""
        if self.untuned is None:
            return None
        return self.untuned.time_ms / self.best.time_ms

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "value_dtype": self.value_dtype,
            "best": self.best.to_dict(),
            "untuned": self.untuned.to_dict() if self.untuned is not None else None,
            "gain": self.gain,
        }


@dataclass
class AutotuneReport:
    """Everything one :func:`autotune` call measured.

    Attributes
    ----------
    matrix : str
        The matrix's name (or shape and nonzeros).
    shape : tuple of int
    nnz : int
    row_class : str
        Its row-length class (the cache key).
    index_dtype : str
    results : list of CandidateResult
        Every candidate, in the order they ran (skipped ones last).
    winners : list of BackendWinner
        Per backend and value dtype, the fastest correct candidate, re-checked and
        re-timed back to back with the untuned default (so the gain is not the luck of
        the fastest of many noisy samples).
    elapsed_s : float
    budget_s : float or None
    budget_exhausted : bool
        True when the budget stopped the sweep before every candidate ran.
    cache_path : str or None
        Where the winners were saved (None when not saved).
    cache_error : str or None
        Why saving failed.
    """

    matrix: str
    shape: tuple
    nnz: int
    row_class: str
    index_dtype: str
    results: list = field(default_factory=list)
    winners: list = field(default_factory=list)
    elapsed_s: float = 0.0
    budget_s: float | None = None
    budget_exhausted: bool = False
    cache_path: str | None = None
    cache_error: str | None = None

    @property
    def dtypes(self) -> list[str]:
        """The value dtypes tuned, in order."""
        return list(dict.fromkeys(r.value_dtype for r in self.results))

    def winner(self, value_dtype=None) -> BackendWinner | None:
        """The fastest backend overall for ``value_dtype`` (optional with one dtype)."""
        if value_dtype is None:
            if len(self.dtypes) > 1:
                raise ValueError(
                    f"this report tuned several value dtypes {self.dtypes}; pass one of them"
                )
            value_dtype = self.dtypes[0] if self.dtypes else None
        wanted = str(np.dtype(value_dtype)) if value_dtype is not None else None
        ranked = [w for w in self.winners if w.value_dtype == wanted]
        return min(ranked, key=lambda w: w.best.time_ms) if ranked else None

    def problems(self) -> list[CandidateResult]:
        """Candidates that gave a wrong answer or raised."""
        return [r for r in self.results if r.status in (WRONG, ERROR)]

    def to_dict(self) -> dict:
        return {
            "matrix": self.matrix,
            "shape": list(self.shape),
            "nnz": self.nnz,
            "row_class": self.row_class,
            "index_dtype": self.index_dtype,
            "elapsed_s": self.elapsed_s,
            "budget_s": self.budget_s,
            "budget_exhausted": self.budget_exhausted,
            "cache_path": self.cache_path,
            "cache_error": self.cache_error,
            "winners": [w.to_dict() for w in self.winners],
            "overall": {
                d: (w.to_dict() if (w := self.winner(d)) is not None else None) for d in self.dtypes
            },
            "results": [r.to_dict() for r in self.results],
        }


# ------------------------------------------------------------------------- timing
def _default_timer(backend) -> Callable:
    """CUDA events for device-resident backends, ``perf_counter`` for host ones."""
    return host_time if backend.residence.get_xp() is np else cuda_time


# ----------------------------------------------------------------------- arguments
def default_backends() -> list:
    """Every available backend of CSR matrices but the scipy oracle, in registry order.

    Raises
    ------
    sparsegpu.BackendUnavailableError
        When there is none (no GPU here), saying why.
    """
    found = [
        b
        for name, b in _registry.registered().items()
        if name != ORACLE and "csr" in b.formats and b.unavailable_reason() is None
    ]
    if not found:
        reason = _cuda.unavailable_reason() or "no GPU backend is registered"
        raise _registry.BackendUnavailableError(f"no GPU to tune on: {reason}")
    return found


def _backends(names) -> list:
    if names is None:
        return default_backends()
    if isinstance(names, str):
        names = [names]
    out = []
    for name in dict.fromkeys(names):
        if name == _registry.AUTO:
            raise ValueError(
                "'auto' is not a backend to tune: it picks among the tuned backends; "
                "name real backends or leave backends=None for all of them"
            )
        if name == ORACLE:
            raise ValueError(
                f"the {ORACLE!r} backend is the oracle every candidate is checked against; "
                "it has nothing to tune"
            )
        out.append(_registry.get_backend(name))
    if not out:
        raise ValueError("backends is empty; name at least one backend or pass None for all")
    return out


def _dtypes(dtypes, matrix) -> list[np.dtype]:
    if dtypes is None:
        dtype = np.dtype(matrix.dtype)
        return [dtype if dtype in FLOAT_AND_COMPLEX else np.dtype(np.float64)]
    if isinstance(dtypes, (str, np.dtype, type)):
        dtypes = [dtypes]
    out = []
    tunable = FLOAT_AND_COMPLEX + HALF_DTYPES
    for d in dtypes:
        try:
            dtype = np.dtype(d)
            known = d is not None and dtype in tunable
        except TypeError:
            known = False
        if not known:
            raise ValueError(
                f"cannot tune value dtype {d!r}; choose from {', '.join(str(t) for t in tunable)}"
            )
        out.append(dtype)
    if not out:
        raise ValueError("dtypes is empty; give at least one value dtype or None")
    return list(dict.fromkeys(out))


def _check_count(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name}={value!r} must be an int >= {least}")
    return int(value)


def _check_budget(budget) -> float | None:
    if budget is None:
        return None
    if (
        isinstance(budget, bool)
        or not isinstance(budget, numbers.Real)
        or math.isnan(budget)
        or budget < 0
    ):
        raise ValueError(f"budget={budget!r} must be a number of seconds >= 0, or None")
    return None if math.isinf(budget) else float(budget)


def _as_matrix(A, index_dtype):
    """A sparsegpu CSR/CSC matrix for ``A`` in ``index_dtype`` (A itself when it is one)."""
    if not sp.issparse(A) and not _cuda.is_cupy_array(getattr(A, "data", None)):
        raise TypeError(
            f"A must be a sparse matrix (scipy.sparse, sparsegpu or cupyx), got "
            f"{type(A).__name__}; wrap a dense array with scipy.sparse.csr_matrix first"
        )
    if not isinstance(A, _SparseGPUMixin) or A.format not in ("csr", "csc"):
        A = csr_matrix(A)
    current = np.dtype(A._sg_index_dtype())
    if index_dtype is None or np.dtype(index_dtype) == current:
        return A
    index_dtype = np.dtype(index_dtype)
    if index_dtype not in INT32_AND_INT64:
        raise ValueError(f"index_dtype={index_dtype} is not allowed; use int32 or int64")
    if index_dtype == np.int32 and max(A.nnz, *A.shape) >= 2**31:
        raise ValueError(
            f"this matrix ({A.shape}, {A.nnz} nonzeros) needs int64 indices; "
            "it cannot be tuned with index_dtype=int32"
        )
    csr = A.tocsr()
    out = csr_matrix((csr.data, csr.indices, csr.indptr), shape=csr.shape, copy=True)
    # scipy narrows index arrays where it can; put back the dtype asked for
    out.indices = out.indices.astype(index_dtype)
    out.indptr = out.indptr.astype(index_dtype)
    return out


# ------------------------------------------------------------------------ the sweep
@dataclass
class _Sweep:
    """One backend x value dtype: its mirror, inputs and candidates."""

    backend: object
    dtype: np.dtype
    mirror: object
    oracle: Oracle
    candidates: list
    untuned: Policy
    timer: Callable
    x: object = None
    y: object = None


def _prepare(backend, dtype, matrix, oracle, timer) -> _Sweep | CandidateResult:
    """The sweep of one backend and dtype, or a skipped result saying why not."""
    name, dtype_name = backend.name, str(dtype)
    try:
        backend.check_dtypes(dtype, matrix._sg_index_dtype())
    except TypeError as exc:
        return CandidateResult(name, dtype_name, None, False, SKIPPED, message=str(exc))
    mirror = matrix._sg_mirror(backend.residence, dtype)
    if not backend.supports(mirror):
        reason = backend.refuse_reason(mirror) or "unsupported"
        return CandidateResult(name, dtype_name, None, False, SKIPPED, message=reason)
    untuned = backend.default_policy(mirror)
    candidates = [untuned] + [p for p in backend.candidates(mirror) if p != untuned]
    candidates = list(dict.fromkeys(candidates))
    xp = mirror.xp
    x = oracle.x if xp is np else xp.asarray(oracle.x)
    y = xp.empty(mirror.shape[0], dtype=dtype)
    return _Sweep(backend, dtype, mirror, oracle, candidates, untuned, timer, x, y)


def _run_candidate(sweep: _Sweep, policy: Policy, warmup: int, repeat: int) -> CandidateResult:
    name, dtype_name = sweep.backend.name, str(sweep.dtype)
    untuned = policy == sweep.untuned

    def result(status, **kw):
        return CandidateResult(name, dtype_name, policy, untuned, status, **kw)

    try:
        plan = sweep.backend.plan(sweep.mirror, policy)
        sweep.y.fill(np.nan)  # rows a kernel forgets to write show up as NaN
        returned = plan.matvec(sweep.x, out=sweep.y)
        problem = sweep.oracle.error(returned)
        if problem is None and returned is not sweep.y:
            problem = sweep.oracle.error(sweep.y)
            problem = problem and f"the out= array was not filled: {problem}"
        if problem is not None:
            return result(WRONG, message=problem)

        def call():
            plan.matvec(sweep.x, out=sweep.y)

        # the one harness: warm-up, a calibration sample that sets the loop's length,
        # then the samples (candidates one at a time, so the budget is checked between them)
        timing = time_candidates({policy: call}, warmup=warmup, repeat=repeat, timer=sweep.timer)
        ms = timing[policy].median_ms
        # every answer is checked: the last timed call's too (races show up here)
        problem = sweep.oracle.error(sweep.y)
        if problem is not None:
            return result(WRONG, message=f"after timing: {problem}")
    except Exception as exc:  # a candidate that cannot run is reported, not fatal
        return result(ERROR, message=f"{type(exc).__name__}: {exc}")
    return result(OK, time_ms=ms, gb_per_s=gb_per_s(matrix_spmv_bytes(sweep.mirror), ms))


def _interleaved(sweeps: list[_Sweep]):
    """(sweep, policy) pairs, round-robin: every untuned default first, then the rest.

    A budget that runs out then still leaves every backend with some measurements.
    """
    longest = max((len(s.candidates) for s in sweeps), default=0)
    for i in range(longest):
        for s in sweeps:
            if i < len(s.candidates):
                yield s, s.candidates[i]


def _winners(results: list[CandidateResult]) -> list[BackendWinner]:
    groups: dict = {}
    for r in results:
        if r.status == OK:
            groups.setdefault((r.backend, r.value_dtype), []).append(r)
    out = []
    for ok in groups.values():
        best = min(ok, key=lambda r: r.time_ms)
        untuned = next((r for r in ok if r.untuned), None)
        out.append(BackendWinner(best, untuned))
    return out


def _confirmed(
    winners: list[BackendWinner], sweeps: list[_Sweep], results: list, warmup: int, repeat: int
) -> list[BackendWinner]:
    """Each winner re-checked and re-timed back to back with its untuned default.

    The fastest of many noisy medians is biased low (the winner's curse); timing the
    two again side by side gives an honest gain, and a second correctness check. A
    winner that is no longer faster yields to the default; one that now fails is
    reported in ``results`` and never kept.
    """
    by_key = {(s.backend.name, str(s.dtype)): s for s in sweeps}
    out = []
    for w in winners:
        if w.untuned is None or w.best.policy == w.untuned.policy:
            out.append(w)
            continue
        sweep = by_key[(w.backend, w.value_dtype)]
        best = _run_candidate(sweep, w.best.policy, warmup, repeat)
        untuned = _run_candidate(sweep, w.untuned.policy, warmup, repeat)
        for again in (best, untuned):
            if again.status != OK:
                results.append(replace(again, message=f"on re-timing: {again.message}"))
        if untuned.status != OK:
            continue
        if best.status != OK or best.time_ms >= untuned.time_ms:
            out.append(BackendWinner(untuned, untuned))
        else:
            out.append(BackendWinner(best, untuned))
    return out


def _progress_callback(progress):
    """A ``(done, total, label)`` callback and a closer, from autotune's ``progress``."""
    if progress is None or progress is False:
        return (lambda done, total, label: None), (lambda: None)
    if callable(progress):
        return progress, (lambda: None)
    if progress is True:
        from .._console import progress as rich_progress

        bar = rich_progress(transient=True)
        bar.start()
        task = bar.add_task("autotune", total=None)

        def update(done, total, label):
            bar.update(task, completed=done, total=total, description=label)

        return update, bar.stop
    raise TypeError(f"progress must be a bool or a callable(done, total, label), got {progress!r}")


def autotune(
    A,
    backends: Iterable[str] | str | None = None,
    dtypes=None,
    budget: float | None = None,
    *,
    index_dtype=None,
    repeat: int = 20,
    warmup: int = 3,
    progress=None,
    timer: Callable | None = None,
    cache: TuningCache | None = None,
    save: bool = True,
    name: str | None = None,
    seed: int = 0,
) -> AutotuneReport:
    """Find each backend's fastest policy for matrix ``A`` and remember it.

    For every backend and value dtype, the backend's candidate policies (its untuned
    default first) are each checked against scipy, then timed: warm-up, then the median
    of ``repeat`` samples (CUDA events for GPU backends), then checked again. The
    fastest correct candidate of each backend is re-checked and re-timed back to back
    with the untuned default (it must still win), then written to the tuning cache,
    keyed by device, dtypes and the matrix's row-length class; from then on it is that
    backend's default policy (and ``auto`` prefers the backend measured fastest) for
    matrices of that class.

    Parameters
    ----------
    A : sparse matrix
        scipy.sparse, sparsegpu or cupyx sparse matrix, with at least one stored entry.
        A sparsegpu CSR/CSC matrix is tuned in place: its mirrors are reused and its
        remembered default policies refreshed.
    backends : str or list of str, optional
        Backend names; default every available backend but ``scipy``.
    dtypes : dtype or list of dtypes, optional
        Value dtypes to tune (float32, float64, complex64, complex128, float16, bfloat16);
        default A's dtype (float64 for an integer or boolean A).
    budget : float, optional
        Seconds for the whole call. When it runs out the sweep stops after the candidate
        in progress; candidates run round-robin over backends, untuned defaults first, so
        every backend keeps some measurements. Default: no limit.
    index_dtype : {None, "int32", "int64"}
        Tune with this index dtype (default A's).
    repeat, warmup : int
        Timed samples per candidate (median taken) and untimed calls before them.
    progress : bool or callable, optional
        True: a progress bar on stderr; a callable gets ``(done, total, label)`` after
        each candidate.
    timer : callable, optional
        ``timer(fn, warmup=, repeat=, inner=) -> Timing`` in milliseconds; default CUDA
        events (:func:`sparsegpu.measure._timing.cuda_time`) for GPU backends and
        :func:`sparsegpu.measure._timing.host_time` for host ones.
    cache : TuningCache, optional
        Where winners go; default the user's cache (``SPARSEGPU_CACHE_DIR`` overrides).
    save : bool
        Write the winners to the cache (default True).
    name : str, optional
        A label for the matrix in the report and the cache.
    seed : int
        Seed of the random x the candidates multiply.

    Returns
    -------
    AutotuneReport
        Every candidate's time and GB/s, the winner per backend, the winner overall
        (:meth:`AutotuneReport.winner`) and each winner's gain over the untuned default.

    Raises
    ------
    TypeError
        When A is not a sparse matrix.
    ValueError
        For bad arguments (unknown backend, dtype, budget), or an A with no nonzeros.
    sparsegpu.BackendUnavailableError
        When a named backend, or by default any GPU, is not available here.

    Examples
    --------
    >>> import sparsegpu as sg
    >>> from sparsegpu.datasets import stencil_2d
    >>> report = sg.autotune(stencil_2d(1024), budget=30)  # doctest: +SKIP
    >>> best = report.winner()  # doctest: +SKIP
    >>> best.backend, best.best.policy, best.best.gb_per_s, best.gain  # doctest: +SKIP
    """
    start = time.monotonic()
    matrix = _as_matrix(A, index_dtype)
    if matrix.nnz == 0 or 0 in matrix.shape:
        raise ValueError(
            f"A ({matrix.shape[0]}x{matrix.shape[1]}) has no stored entries; there is "
            "nothing to time (matrices without nonzeros always use the untuned policy)"
        )
    chosen = _backends(backends)
    value_dtypes = _dtypes(dtypes, matrix)
    budget = _check_budget(budget)
    repeat = _check_count("repeat", repeat, 1)
    warmup = _check_count("warmup", warmup, 0)
    notify, close = _progress_callback(progress)
    label = name or f"{matrix.shape[0]}x{matrix.shape[1]}, {matrix.nnz:,} nnz"

    host_csr = sp.csr_matrix(matrix)
    row_class = _rules.row_class(
        RowLengthStats.from_indptr(host_csr.indptr, matrix.shape[1], np, indices=host_csr.indices)
    )
    results: list[CandidateResult] = []
    sweeps: list[_Sweep] = []
    for dtype in value_dtypes:
        oracle = Oracle(host_csr, dtype, seed=seed)
        for backend in chosen:
            prepared = _prepare(backend, dtype, matrix, oracle, timer or _default_timer(backend))
            if isinstance(prepared, CandidateResult):
                results.append(prepared)
            else:
                sweeps.append(prepared)

    total = sum(len(s.candidates) for s in sweeps)
    exhausted = False
    done = 0
    try:
        for sweep, policy in _interleaved(sweeps):
            if budget is not None and time.monotonic() - start >= budget:
                exhausted = True
                results.append(
                    CandidateResult(
                        sweep.backend.name,
                        str(sweep.dtype),
                        policy,
                        policy == sweep.untuned,
                        SKIPPED,
                        message=f"the budget of {budget:g} s ran out",
                    )
                )
                continue
            notify(done, total, f"{label}: {sweep.backend.name} {sweep.dtype}")
            results.append(_run_candidate(sweep, policy, warmup, repeat))
            done += 1
        notify(done, total, f"{label}: done")
    finally:
        close()

    report = AutotuneReport(
        matrix=label,
        shape=tuple(matrix.shape),
        nnz=int(matrix.nnz),
        row_class=row_class,
        index_dtype=str(np.dtype(matrix._sg_index_dtype())),
        results=results,
        winners=_confirmed(_winners(results), sweeps, results, warmup, repeat),
        budget_s=budget,
        budget_exhausted=exhausted,
    )
    if save and report.winners:
        _save(report, sweeps, cache)
    for sweep in sweeps:
        _select.forget_tuned(sweep.mirror, [sweep.backend.name])
    _registry.invalidate_choices()
    report.elapsed_s = time.monotonic() - start
    return report


def _save(report: AutotuneReport, sweeps: list[_Sweep], cache: TuningCache | None) -> None:
    """Write each winner to the cache, grouped by context; failures become a warning."""
    residence_of = {s.backend.name: s.backend.residence for s in sweeps}
    by_context: dict = {}
    stamp = now_iso()
    for w in report.winners:
        context = current_context(residence_of[w.backend])
        if context is None:
            continue
        entry = TunedEntry(
            backend=w.backend,
            value_dtype=w.value_dtype,
            index_dtype=report.index_dtype,
            row_class=report.row_class,
            policy_type=type(w.best.policy).__name__,
            knobs=w.best.policy.knobs(),
            time_ms=w.best.time_ms,
            gb_per_s=w.best.gb_per_s,
            untuned_time_ms=w.untuned.time_ms if w.untuned is not None else None,
            matrix=f"{report.matrix} ({report.shape[0]}x{report.shape[1]}, {report.nnz} nnz)",
            tuned_at=stamp,
        )
        by_context.setdefault(context, []).append(entry)
    try:
        cache = cache or default_cache()
        for context, entries in by_context.items():
            report.cache_path = str(cache.record(context, entries))
    except TuningCacheError as exc:
        report.cache_path = None
        report.cache_error = str(exc)
        warnings.warn(str(exc), TuningCacheWarning, stacklevel=3)
