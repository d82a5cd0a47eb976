"""Planning of sparse products (``A @ B``): an algorithm per pair of patterns, kept.

``estimate``, and the first product of a pair of patterns at any level: the engine's
rule (:meth:`~sparsegpu.backends.spgemm.SpgemmEngine.estimate`: on the GPU our hash
rows or cuSPARSE ALG1, by the products a row may have), falling back to the memory-lean
algorithms and to row blocks where its work space does not fit
(:func:`sparsegpu.backends.spgemm.multiply`).

``measure`` plans only with time the pair's products have already cost (ski rental, as a
user renting the rule's algorithm until the rent paid would buy planning): every product
of the pair after the first is timed as it runs (a
:class:`~sparsegpu.measure._timing.Stopwatch`, read later, never waited for; the first,
which most pairs never follow, is counted at the median of the timed ones), and a later
product of the pair times a candidate beside the user's own product (the rule's, which
is the reference its answer is checked against) only while what planning has cost, with
that candidate, stays within what the products of the pair have cost so far
(:data:`PAYBACK` times). A candidate is counted at :data:`CANDIDATE_COST` products until
it has run; it runs once (checked and timed) and, unless it is over ``HOPELESS`` times
the fastest so far, once more (timed warm). The candidates: ``SpGEMMreuse`` (the
result's structure made once, the values redone each product) where the library has it,
then the engine's other fast algorithm
(:meth:`~sparsegpu.backends.spgemm.SpgemmEngine.planning_algorithms`: hash rows or
ALG1), none after one that takes under half the rule's time (:data:`CLEAR_WIN`). Then
the fastest (the rule's own products included, timed as they ran) is kept for the pair.
So a pattern multiplied a few times never pays for planning, and no product costs much
more than the products before it have cost in all. A caller that knows its patterns will
be multiplied again with new values (multigrid's re-set-up, a Newton loop's Jacobian
products) says so with :func:`repeating`: inside it, the pair's second product times its
candidates at once, as ``exhaustive`` would but among ``measure``'s candidates, so the
products after it run on the plan (the cost of planning is then the caller's bet, not
the products' rent).
``exhaustive`` times every algorithm (ALG2 and ALG3 too) on the second product, whatever
it costs. A candidate whose buffers do not fit is left out, so the plan is memory-aware.

What was chosen and measured, the device memory each took at most, and what planning
has cost beside what the products have cost is what ``sg.explain(A, B)`` shows
(:class:`SpgemmPlan`). Sparse plans are per process, keyed by the patterns, so a Newton
or AMG loop that rebuilds ``A`` with the same pattern keeps its plan. A kept
``SpGEMMreuse`` plan holds device memory (its buffers and the result's structure): at
most :data:`REUSE_PLANS` are kept, holding at most :data:`REUSE_MEMORY_FRACTION` of the
GPU's memory together, and all are dropped before a product that would not fit otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from ..backends import spgemm
from ..backends.spgemm import Budget, DoesNotFit, Outcome, Refused
from ..device import _cuda
from ..device._compare import arrays_equal
from ..device._mirror import DeviceMatrix, DeviceMemoryError
from ..measure import _timing
from ..measure._oracle import AnswerCheck, tolerance
from ._planning import HOPELESS

# Pairs of patterns remembered, and SpGEMMreuse plans kept, per process.
PAIRS = 64
# (a multigrid hierarchy's re-set-up multiplies three pairs a level, every one again at the
# next update: fewer plans than that were dropped and made again in turn, each making
# costing several products)
REUSE_PLANS = 32
# ... and together they hold at most this fraction of the GPU's memory (one plan of the 3-D
# 27-point stencil 100^3 holds 6.6 GB: its value computation keeps large buffers)
REUSE_MEMORY_FRACTION = 0.25
REUSE = "reuse"
# Planning (level measure) may cost at most PAYBACK times what the products of the pair
# have cost so far, and a candidate may cost up to CANDIDATE_COST of the rule's products
# before it is known (H200, spgemm_first_calls_run1_h200.json: making the
# SpGEMMreuse plan of the 3 x 3 block matrices took 7 of the rule's hash products; one run
# of hash rows on R-MAT, 6.6 of ALG1's), so a candidate starts only when the products have
# paid for that much.
PAYBACK = 1.0
CANDIDATE_COST = 8
# Once a candidate runs in under 1 / CLEAR_WIN of the rule's time, the others are not
# timed (level measure): they would have to beat the rule's own choice by more than that.
CLEAR_WIN = 2.0


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
    planning_ms : float
        What planning has cost so far (its candidates' runs), in milliseconds.
    products_ms : float
        What the products of this pair have cost so far (timed as they ran; those still
        running when last read are left out; the first, not timed, at ``product_ms``).
    product_ms : float or None
        One product with the rule's algorithm (the median of those timed).
    """

    algorithm: str
    level: str
    reason: str
    measurements: tuple = ()
    last: Outcome | None = None
    held_bytes: int = 0
    shapes: tuple = field(default=())
    planning_ms: float = 0.0
    products_ms: float = 0.0
    product_ms: float | None = None

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
        if self.product_ms is not None:
            lines.append(
                f"  cost: planning {self.planning_ms:.3f} ms; the products by the rule "
                f"{self.products_ms:.3f} ms in all, {self.product_ms:.3f} ms each"
            )
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
        self.watches: list = []  # the rule's products not read yet (Stopwatch)
        self.product_times: list[float] = []  # the rule's products, read
        self.untimed = 0  # the rule's products not timed (the first: see _multiply_sparse)
        self.planning_ms = 0.0
        self.pending: list[str] | None = None  # candidates not timed yet (None: not begun)
        self.measured: dict[str, SpgemmMeasurement] = {}

    @property
    def products_ms(self) -> float:
        """The rule's products' cost: those timed, and those not at the median of those."""
        if not self.product_times:
            return 0.0
        return float(sum(self.product_times)) + self.untimed * self.product_ms

    @property
    def product_ms(self) -> float | None:
        # statistics' median of a few floats: NumPy's took 14 us a call, read three times
        # by every product of a pair that planning has not yet paid for
        return float(statistics.median(self.product_times)) if self.product_times else None

    def read_times(self, wait: bool) -> None:
        """Read the stopwatches of the pair's products (those finished, unless ``wait``)."""
        unread = []
        for watch in self.watches:
            ms = watch.ms(wait=wait)
            if ms is None:
                unread.append(watch)
            else:
                self.product_times.append(ms)
        self.watches = unread


_pairs: OrderedDict = OrderedDict()
_pairs_lock = threading.Lock()
_repeats = threading.local()


@contextlib.contextmanager
def repeating():
    """Products in this block (this thread's) are of patterns the caller will multiply
    again with new values: a pair's second product at level ``measure`` times the
    candidates at once instead of when the products have paid for them (see the module
    docstring). Nests; level ``estimate`` and an explicit algorithm are unchanged."""
    depth = getattr(_repeats, "depth", 0)
    _repeats.depth = depth + 1
    try:
        yield
    finally:
        _repeats.depth = depth


def _repeats_expected() -> bool:
    return getattr(_repeats, "depth", 0) > 0


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
    if pair is None or algorithm is not None or level == "estimate":  # the rule, always
        if algorithm is None:
            counted = None if pair is None else engine.products_ahead(left, right)
            product, outcome = _rule_product(engine, left, right, budget, counted)
        else:
            product, outcome = spgemm.multiply(engine, left, right, algorithm, budget)
        if pair is not None:
            pair.last = outcome
        return _finished(product, left, right)
    pair.seen += 1
    if pair.plan is not None:
        algorithm = pair.plan.algorithm
        if algorithm == REUSE:
            product = _reuse_product(pair, engine, left, right, budget)
            if product is not None:
                return _finished(product, left, right)
            algorithm, budget = engine.rule(left, right), Budget(left.xp, memory_limit)
        product, outcome = spgemm.multiply(engine, left, right, algorithm, budget)
        pair.last = outcome
        return _finished(product, left, right)
    counted = engine.products_ahead(left, right)  # counting while the host plans
    if pair.seen == 1:
        # The first product is not timed (counted at the median of the timed ones, so a
        # first product slowed by a cold start counts as the later ones do): most pairs
        # are multiplied once, and its two events cost a first ALG1 product of power-law
        # rows about 30 us of 1.4 ms (H200, spgemm_alg1_overhead --layers, "host watch"),
        # the device idle while the host made and recorded them.
        product, outcome = _rule_product(engine, left, right, budget, counted)
        pair.untimed += 1
        pair.last = outcome
        return _finished(product, left, right)
    pair.read_times(wait=False)  # the products before this one that have finished
    watch = _timing.Stopwatch(on_host=left.xp is np)
    product, outcome = _rule_product(engine, left, right, budget, counted)
    pair.watches.append(watch.stop())
    pair.last = outcome
    if pair.lock.acquire(blocking=False):  # never waits for another's
        try:
            if pair.plan is None:
                _plan_step(pair, engine, left, right, product, level, memory_limit)
        finally:
            pair.lock.release()
    return _finished(product, left, right)


def _rule_product(engine, left, right, budget: Budget, counted):
    """``(C, Outcome)`` with the rule's algorithm; ``counted``: the products being counted
    (:meth:`~sparsegpu.backends.spgemm.SpgemmEngine.products_ahead`, or None), on which
    the rule and the index dtype assume their usual answer until the product's first
    launch, and decide again where the count says otherwise."""
    algorithm, products = engine.rule_and_products(left, right, counted)
    try:
        return spgemm.multiply(engine, left, right, algorithm, budget, products)
    except spgemm.Reconsider:  # nothing was launched for it: decided on the count now
        pass  # (the retry outside the handler: its errors are not chained to this)
    algorithm, products = engine.rule_and_products(left, right, counted.value())
    return spgemm.multiply(engine, left, right, algorithm, budget, products)


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


def _plan_step(pair: _Pair, engine, left, right, product, level, memory_limit) -> None:
    """Time the pair's candidates that what its products have cost so far pays for (all of
    them for ``exhaustive``), beside ``product`` (the rule's answer: the reference); keep
    the fastest once every candidate is timed (see the module docstring)."""
    on_host = left.xp is np
    if pair.pending is None:
        default = pair.last.algorithm
        names = engine.algorithms() if level == "exhaustive" else engine.planning_algorithms()
        pair.pending = [REUSE] + [name for name in names if name != default]
    now = level == "exhaustive" or _repeats_expected()  # planning's cost not rented
    if pair.product_ms is None and now:
        # this product's time (a second product: the first is not timed), which the
        # candidates are judged hopeless against; they synchronize anyway
        pair.read_times(wait=True)
    if pair.product_ms is None and not now:
        return  # no product of the pair has been timed yet
    allowance = float("inf") if now else PAYBACK * pair.products_ms
    while pair.pending:
        fastest = min(
            [m.ms for m in pair.measured.values() if m.ms is not None and m.agreed]
            + [pair.product_ms or float("inf")]
        )
        expected = CANDIDATE_COST * (pair.product_ms or 0.0)
        if pair.planning_ms + expected > allowance:
            return  # a later product of the pair, when its products have paid for it
        name = pair.pending.pop(0)
        measured = _time_candidate(
            pair, engine, left, right, name, product, fastest, memory_limit, on_host
        )
        pair.measured[name] = measured
        won = measured.ms is not None and measured.agreed
        clear = won and measured.ms * CLEAR_WIN <= (pair.product_ms or 0.0)
        if clear and level != "exhaustive":
            pair.pending.clear()
    _decide(pair, engine, level)


def _time_candidate(pair, engine, left, right, name, reference, fastest, memory_limit, on_host):
    """One candidate run (checked against ``reference``, timed) and, unless hopeless next
    to ``fastest``, a second timed run; its cost is added to the pair's planning cost."""
    if name == REUSE:
        try:
            budget = Budget(left.xp, memory_limit)
            plan, ms = _run_timed("reuse plan", lambda: engine.reuse(left, right, budget), on_host)
            pair.planning_ms += ms
        except (DoesNotFit, Refused) as exc:
            return SpgemmMeasurement(REUSE, None, None, note=_why_not(exc))
        if plan is None:
            return SpgemmMeasurement(REUSE, None, None, note="this engine has none here")
        cap = _reuse_memory_cap()
        if cap is not None and plan.held_bytes > cap:
            share = f"{REUSE_MEMORY_FRACTION:.0%}"
            note = f"would keep {plan.held_bytes:,} bytes, over {share} of the GPU"
            return SpgemmMeasurement(REUSE, None, None, note=note)
        pair.reuse = plan
        _drop_reuse_plans(REUSE_PLANS)
        run = functools.partial(plan.compute, left, right)
    else:
        run = functools.partial(spgemm.run_once, engine, left, right, name)
    budget = Budget(left.xp, memory_limit)
    try:
        candidate, ms = _run_timed(name, lambda: run(budget), on_host)
    except (DoesNotFit, Refused) as exc:
        return SpgemmMeasurement(name, None, None, note=_why_not(exc))
    pair.planning_ms += ms
    agreed = _agree(reference, candidate)
    del candidate
    note = ""
    if agreed and ms <= HOPELESS * fastest:
        _, warm = _run_timed(name, lambda: run(Budget(left.xp, memory_limit)), on_host)
        pair.planning_ms += warm
        ms = min(ms, warm)
    elif agreed:
        note = "timed once: hopeless next to the fastest"
    return SpgemmMeasurement(name, ms, budget.peak, agreed, note)


def _run_timed(name: str, fn, on_host: bool):
    """``(fn(), milliseconds)`` of one run of candidate ``name`` (or of making the reuse
    plan), with the one timing harness."""
    return _timing.timed_call(fn, on_host=on_host)


def _decide(pair: _Pair, engine, level) -> None:
    """Keep the fastest of the timed candidates and the rule's own products."""
    pair.read_times(wait=True)
    default = pair.last.algorithm
    own = SpgemmMeasurement(
        default, pair.product_ms, pair.last.peak_bytes, note="the rule's, on the products asked for"
    )
    measured = {default: own, **pair.measured}
    timed = {n: m for n, m in measured.items() if m.ms is not None and m.agreed}
    best = min(timed, key=lambda n: timed[n].ms)
    if best != REUSE:
        pair.reuse = None
    reason = (
        f"measured fastest of {len(timed)} on the products of these patterns (planning "
        f"cost {pair.planning_ms:.3f} ms, the products before it {pair.products_ms:.3f} ms)"
    )
    pair.plan = SpgemmPlan(best, level, reason, tuple(measured.values()))


def _why_not(exc) -> str:
    return f"does not fit: {exc}" if isinstance(exc, DoesNotFit) else f"refused: {exc}"


def _agree(reference: DeviceMatrix, other: DeviceMatrix) -> bool:
    """Same structure, and values within the dtype's tolerance of the reference's scale
    (the one answer check)."""
    xp = reference.xp
    if reference.nnz != other.nnz or reference.shape != other.shape:
        return False
    if not reference.nnz:
        return True
    if not (
        arrays_equal(reference.indptr, other.indptr)
        and arrays_equal(reference.indices, other.indices)
    ):
        return False
    scale = max(float(xp.abs(reference.data).max()), 1e-300)
    bound = tolerance(reference.dtype, 64) * scale
    return (
        AnswerCheck(reference.data, bound, source="the first candidate").error(other.data) is None
    )


def explain_sparse(left, right, engine, *, level: str) -> SpgemmPlan:
    """How ``left @ right`` runs now: the measured plan of its patterns, else the estimate
    (with what planning has timed so far, and the last product's outcome where there was
    one)."""
    left, right = spgemm.canonical(left), spgemm.canonical(right)
    shapes = (left.shape, right.shape, left.nnz, right.nnz)
    pair = _pair(left, right)
    pair.read_times(wait=False)
    costs = {
        "planning_ms": pair.planning_ms,
        "products_ms": pair.products_ms,
        "product_ms": pair.product_ms,
    }
    if pair.plan is not None:
        plan = replace(pair.plan, last=pair.last, shapes=shapes, **costs)
        plan.held_bytes = pair.reuse.held_bytes if pair.reuse is not None else 0
        return plan
    algorithm, rule = engine.estimate(left, right)
    if level == "estimate":
        reason = f"planning level 'estimate': {rule}; leaner where it does not fit"
    else:
        reason = (
            f"{rule}, until the products of these patterns have paid for planning (then "
            "planning times its candidates beside them)"
        )
    measured = tuple(pair.measured.values())
    return SpgemmPlan(algorithm, level, reason, measured, last=pair.last, shapes=shapes, **costs)
