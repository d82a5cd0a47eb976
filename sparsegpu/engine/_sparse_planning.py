"""Planning of sparse products (``A @ B``): an algorithm per pair of patterns, kept.

``estimate``, and the first product of a pair of patterns at any level: the engine's
rule (:meth:`~sparsegpu.backends.spgemm.SpgemmEngine.estimate`: on the GPU our hash
rows or cuSPARSE ALG1, by the products a row may have), falling back to the memory-lean
algorithms and to row blocks where its work space does not fit
(:func:`sparsegpu.backends.spgemm.multiply`). ``measure`` / ``exhaustive``: the second
product of the same pair of patterns (same shapes, nonzeros and sampled indices) times
every algorithm that fits (hash rows, ALG1, ALG2, ALG3) and, where the library has it,
``SpGEMMreuse`` (the result's structure made once,
the values redone each product), checks that they agree, and keeps the fastest for the
pair. A candidate whose buffers do not fit is left out, so the plan is memory-aware.
What was chosen and measured, and the device memory each took at most, is what
``sg.explain(A, B)`` shows (:class:`SpgemmPlan`). Sparse plans are per process, keyed
by the patterns, so a Newton or AMG loop that rebuilds ``A`` with the same pattern
keeps its plan. A kept ``SpGEMMreuse`` plan holds device memory (its buffers and the
result's structure): at most :data:`REUSE_PLANS` are kept, holding at most
:data:`REUSE_MEMORY_FRACTION` of the GPU's memory together, and all are dropped before
a product that would not fit otherwise.

The levels are vector planning's (:func:`sparsegpu.engine._planning.planning`); a
candidate over ``HOPELESS`` times the fastest is timed no further, as there.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from ..backends import spgemm
from ..backends.spgemm import Budget, DoesNotFit, Outcome, Refused
from ..device import _cuda
from ..device._mirror import DeviceMatrix, DeviceMemoryError
from ..measure import _timing
from ..measure._oracle import AnswerCheck, tolerance
from ._planning import HOPELESS

# Pairs of patterns remembered, and SpGEMMreuse plans kept, per process.
PAIRS = 64
REUSE_PLANS = 4
# ... and together they hold at most this fraction of the GPU's memory (one plan of the 3-D
# 27-point stencil 100^3 holds 6.6 GB: its value computation keeps large buffers)
REUSE_MEMORY_FRACTION = 0.25
REUSE = "reuse"


@dataclass(frozen=True)
class SpgemmMeasurement:
    """One candidate timed by planning: median milliseconds (None: it did not run), the
    device bytes it held at most, and whether its answer agreed with the first one's."""

    algorithm: str
    ms: float | None
    peak_bytes: int | None
    agreed: bool = True
    note: str = ""

    def __str__(self) -> str:
        timing = f"{self.ms:10.3f} ms" if self.ms is not None else "         --"
        peak = f"{self.peak_bytes / 2**20:10.1f} MiB" if self.peak_bytes is not None else ""
        flag = "" if self.agreed else "  (disagreed: left out)"
        note = f"  ({self.note})" if self.note else ""
        return f"{self.algorithm:<6} {timing} {peak}{flag}{note}"


@dataclass
class SpgemmPlan:
    """How ``A @ B`` runs for one pair of patterns (what ``sg.explain(A, B)`` returns).

    Attributes
    ----------
    algorithm : str
        ``"alg1"``, ``"alg2"``, ``"alg3"`` (cuSPARSE SpGEMM), ``"reuse"`` (cuSPARSE
        SpGEMMreuse) or ``"hash"`` (our hash rows); ``"scipy"`` when scipy computes it on
        the host.
    level : str
        The planning level that decided.
    reason : str
    measurements : tuple of SpgemmMeasurement
        What planning timed (empty when nothing was).
    last : Outcome or None
        The last product of this pair: the algorithm it ran, its row blocks (1: whole) and
        the device bytes it held at most (work buffers and result).
    held_bytes : int
        Device memory kept between products (a SpGEMMreuse plan's buffers and structure).
    """

    algorithm: str
    level: str
    reason: str
    measurements: tuple = ()
    last: Outcome | None = None
    held_bytes: int = 0
    shapes: tuple = field(default=())

    @property
    def peak_bytes(self) -> int | None:
        """Device bytes the last product held at most (None before any)."""
        return self.last.peak_bytes if self.last is not None else None

    def __str__(self) -> str:
        lines = [f"A @ B: {self.algorithm} ({self.level}): {self.reason}"]
        if self.shapes:
            (m, k), (_, n), nnz_a, nnz_b = self.shapes
            lines.append(
                f"  operands: ({m:,} x {k:,}, {nnz_a:,} nnz) @ ({k:,} x {n:,}, {nnz_b:,} nnz)"
            )
        if self.last is not None:
            blocks = "whole" if self.last.blocks == 1 else f"in {self.last.blocks} row blocks"
            lines.append(
                f"  last product: {self.last.algorithm}, {blocks}, peak device memory "
                f"{self.last.peak_bytes:,} bytes"
            )
        if self.held_bytes:
            lines.append(f"  kept between products: {self.held_bytes:,} bytes")
        if self.measurements:
            lines.append("  measured:")
            lines.extend(f"    {m}" for m in self.measurements)
        return "\n".join(lines)

    __repr__ = __str__


class _Pair:
    """What planning keeps for one pair of patterns."""

    def __init__(self):
        self.seen = 0
        self.plan: SpgemmPlan | None = None  # decided by measurement
        self.last: Outcome | None = None
        self.reuse = None
        self.lock = threading.Lock()  # held (never waited for) while measuring


_pairs: OrderedDict = OrderedDict()
_pairs_lock = threading.Lock()


def forget_sparse_plans() -> None:
    """Forget every planned pair (and free the SpGEMMreuse plans' device memory)."""
    with _pairs_lock:
        _pairs.clear()


def _pair(left: DeviceMatrix, right: DeviceMatrix) -> _Pair:
    key = (spgemm.pattern_key(left), spgemm.pattern_key(right), left.dtype)
    with _pairs_lock:
        pair = _pairs.get(key)
        if pair is None:
            pair = _pairs[key] = _Pair()
            while len(_pairs) > PAIRS:
                _pairs.popitem(last=False)
        _pairs.move_to_end(key)
        return pair


def _drop_reuse_plans(keep: int) -> int:
    """Drop SpGEMMreuse plans, oldest first, until at most ``keep`` are left and they hold
    at most :data:`REUSE_MEMORY_FRACTION` of the GPU's memory together; how many went."""
    cap = _reuse_memory_cap()
    with _pairs_lock:
        holding = [p for p in _pairs.values() if p.reuse is not None]
        held = sum(p.reuse.held_bytes for p in holding)
        dropped = 0
        for pair in holding:
            if len(holding) - dropped <= keep and (cap is None or held <= cap):
                break
            held -= pair.reuse.held_bytes
            pair.reuse = None
            dropped += 1
    return dropped


def _reuse_memory_cap() -> int | None:
    """Bytes the kept reuse plans may hold together (None without a GPU)."""
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        return None
    return int(REUSE_MEMORY_FRACTION * cupy.cuda.runtime.memGetInfo()[1])


def multiply_sparse(left, right, engine, *, level: str, algorithm=None, memory_limit=None):
    """``left @ right`` (CSR mirrors of one residence) as a canonical DeviceMatrix,
    planned (see the module docstring); ``algorithm`` skips planning."""
    if algorithm is not None:
        engine.check_algorithm(algorithm)
    left, right = spgemm.canonical(left), spgemm.canonical(right)
    try:
        return _multiply_sparse(left, right, engine, level, algorithm, memory_limit)
    except DeviceMemoryError:
        if not _drop_reuse_plans(0):
            raise
        return _multiply_sparse(left, right, engine, level, algorithm, memory_limit)


def _multiply_sparse(left, right, engine, level, algorithm, memory_limit):
    budget = Budget(left.xp, memory_limit)
    pair = None if spgemm.is_empty(left, right) else _pair(left, right)
    if pair is not None:
        pair.seen += 1
        if algorithm is None and level != "estimate":  # estimate: the rule, always
            algorithm = _pair_algorithm(pair, engine, left, right, level, memory_limit)
        if algorithm == REUSE:
            product = _reuse_product(pair, engine, left, right, budget)
            if product is not None:
                return _finished(product, left, right)
            algorithm, budget = None, Budget(left.xp, memory_limit)
    if algorithm is None:  # the first product of the pair, or planning level estimate
        algorithm = engine.rule(left, right)
    product, outcome = spgemm.multiply(engine, left, right, algorithm, budget)
    if pair is not None:
        pair.last = outcome
    return _finished(product, left, right)


def _pair_algorithm(pair: _Pair, engine, left, right, level, memory_limit) -> str | None:
    """The algorithm planning chose for the pair (measured now on its second product,
    unless another thread is measuring it), or None for the default."""
    if pair.plan is None and pair.seen >= 2 and pair.lock.acquire(blocking=False):
        try:
            if pair.plan is None:
                _measure_pair(pair, engine, left, right, level, memory_limit)
        finally:
            pair.lock.release()
    return pair.plan.algorithm if pair.plan is not None else None


def _reuse_product(pair: _Pair, engine, left, right, budget: Budget) -> DeviceMatrix | None:
    """The product through the pair's SpGEMMreuse plan (made again if it was dropped), or
    None when its patterns differ after all or it no longer fits."""
    try:
        if pair.reuse is None:
            pair.reuse = engine.reuse(left, right, budget)
            _drop_reuse_plans(REUSE_PLANS)
            left.settle()  # the plan's arrays complete before any stream's product reads them
        if pair.reuse is None or not pair.reuse.matches(left, right):
            return None
        product = pair.reuse.compute(left, right, budget)
    except DoesNotFit:
        pair.reuse = None  # made again by a later product, when memory allows
        return None
    except Refused as exc:  # not for these operands: the default from now on
        pair.reuse = None
        reason = f"SpGEMMreuse was measured fastest, then refused ({exc})"
        pair.plan = replace(pair.plan, algorithm=engine.default_algorithm, reason=reason)
        return None
    pair.last = Outcome(REUSE, 1, budget.peak)
    return product


def _finished(product: DeviceMatrix, left, right) -> DeviceMatrix:
    """The product returned without waiting for its last kernels: its first use as a
    mirror (or its host copy) waits for them, from any stream (``DeviceMatrix.queued``)."""
    return spgemm.describe_product(product.queued(), left, right)


def _measure_pair(pair: _Pair, engine, left, right, level, memory_limit) -> None:
    """Plan the pair by measurement (``pair.plan``): run each candidate once (does it fit,
    does its answer agree with the first one's, how much device memory it holds), time
    those that do with the one timing harness, keep the fastest.

    At most two results are alive at once: the first (the reference) and the one just
    made. A candidate is run about three times in all (the check, the harness's
    calibration sample and its timed sample); one much slower than the fastest so far
    (``HOPELESS``) is timed no further.
    """
    measured, runs = {}, {}
    reference = None

    def check(name, run) -> None:
        nonlocal reference
        budget = Budget(left.xp, memory_limit)
        try:
            product = run(budget)
        except (DoesNotFit, Refused) as exc:
            measured[name] = SpgemmMeasurement(name, None, None, note=_why_not(exc))
            return
        agreed = reference is None or _agree(reference, product)
        reference = product if reference is None else reference
        measured[name] = SpgemmMeasurement(name, None, budget.peak, agreed)
        if agreed:
            runs[name] = run

    for name in engine.algorithms():
        check(name, functools.partial(spgemm.run_once, engine, left, right, name))
    try:
        pair.reuse = engine.reuse(left, right, Budget(left.xp, memory_limit))
    except (DoesNotFit, Refused) as exc:
        measured[REUSE] = SpgemmMeasurement(REUSE, None, None, note=_why_not(exc))
    cap = _reuse_memory_cap()
    if pair.reuse is not None and cap is not None and pair.reuse.held_bytes > cap:
        share = f"{REUSE_MEMORY_FRACTION:.0%}"
        note = f"would keep {pair.reuse.held_bytes:,} bytes, over {share} of the GPU"
        measured[REUSE] = SpgemmMeasurement(REUSE, None, None, note=note)
        pair.reuse = None
    if pair.reuse is not None:
        check(REUSE, functools.partial(pair.reuse.compute, left, right))
        _drop_reuse_plans(REUSE_PLANS)
    reference = None
    on_host = left.xp is np
    timings = _timing.time_candidates(
        {
            name: functools.partial(_discard, run, left.xp, memory_limit)
            for name, run in runs.items()
        },
        on_host=on_host,
        warmup=0,
        repeat=1,
        hopeless=HOPELESS,
        timer=_timing.host_time if on_host else _timing.cuda_time,
    )
    for name, timing in timings.items():
        note = "timed once: hopeless next to the fastest" if timing.cut_short else ""
        measured[name] = replace(measured[name], ms=timing.median_ms, note=note)
    if not timings:
        return
    best = min(timings, key=lambda name: timings[name].median_ms)
    if best != REUSE:
        pair.reuse = None
    pair.plan = SpgemmPlan(
        best,
        level,
        f"measured fastest of {len(timings)} on the second product of these patterns",
        tuple(measured.values()),
    )


def _why_not(exc) -> str:
    return f"does not fit: {exc}" if isinstance(exc, DoesNotFit) else f"refused: {exc}"


def _discard(run, xp, memory_limit) -> None:
    """One product of a candidate, for the timing harness (its result is dropped)."""
    run(Budget(xp, memory_limit))


def _agree(reference: DeviceMatrix, other: DeviceMatrix) -> bool:
    """Same structure, and values within the dtype's tolerance of the reference's scale
    (the one answer check)."""
    xp = reference.xp
    if reference.nnz != other.nnz or reference.shape != other.shape:
        return False
    if not reference.nnz:
        return True
    same = xp.array_equal(reference.indptr, other.indptr) & xp.array_equal(
        reference.indices, other.indices
    )
    if not bool(same):
        return False
    scale = max(float(xp.abs(reference.data).max()), 1e-300)
    bound = tolerance(reference.dtype, 64) * scale
    return (
        AnswerCheck(reference.data, bound, source="the first candidate").error(other.data) is None
    )


def explain_sparse(left, right, engine, *, level: str) -> SpgemmPlan:
    """How ``left @ right`` runs now: the measured plan of its patterns, else the estimate
    (with the last product's outcome where there was one)."""
    left, right = spgemm.canonical(left), spgemm.canonical(right)
    shapes = (left.shape, right.shape, left.nnz, right.nnz)
    pair = _pair(left, right)
    if pair.plan is not None:
        plan = pair.plan
        plan.last, plan.shapes = pair.last, shapes
        plan.held_bytes = pair.reuse.held_bytes if pair.reuse is not None else 0
        return plan
    algorithm, rule = engine.estimate(left, right)
    if level == "estimate":
        reason = f"planning level 'estimate': {rule}; leaner where it does not fit"
    else:
        reason = (
            f"{rule}, until these patterns are multiplied a second time (then planning measures)"
        )
    return SpgemmPlan(algorithm, level, reason, last=pair.last, shapes=shapes)
