"""Test-only host backends with several candidate policies, and a scripted timer.

They let CPU tests drive the autotuner's sweep: which candidate wins (the scripted
timer says how long each policy takes), wrong answers, failures, and answers that go
wrong only after repeated calls. Nothing here measures real speed.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsegpu.backends.base import FLOAT_AND_COMPLEX, Backend, Plan
from sparsegpu.measure._timing import Timing
from sparsegpu.testing import HOST_COPY
from sparsegpu.tuning import CsrVectorPolicy

UNTUNED = CsrVectorPolicy(block_size=256, threads_per_row=32, source="default")
CANDIDATES = tuple(
    CsrVectorPolicy(block_size=b, threads_per_row=t) for b in (64, 128, 256, 512) for t in (4, 32)
)


class SweepPlan(Plan):
    """scipy's product, distorted on purpose for the policies the backend says."""

    def __init__(self, backend, matrix, policy):
        super().__init__(matrix, policy)
        self.backend = backend
        self.csr = sp.csr_matrix((matrix.data, matrix.indices, matrix.indptr), shape=matrix.shape)
        self.calls = 0

    def matvec(self, x, out=None):
        self.calls += 1
        self.backend.last_policy = self.policy
        y = self.csr @ x
        if self.policy in self.backend.wrong or (
            self.policy in self.backend.flaky and self.backend.plans_made[self.policy] > 1
        ):
            y = y * 1.5
        if self.policy in self.backend.wrong_later and self.calls > 1:
            y = y.copy()
            y[0] += 1.0
        if out is None or self.policy in self.backend.ignores_out:
            return y
        if self.policy in self.backend.skips_last_row:
            out[:-1] = y[:-1]
        else:
            out[...] = y
        return out


class SweepBackend(Backend):
    """A host backend whose candidates are :data:`CANDIDATES`; some can be made faulty.

    Parameters
    ----------
    name : str
    wrong : set of policies giving a wrong answer
    wrong_later : set of policies right on the first call, wrong afterwards
    skips_last_row : set of policies that leave the last row of ``out`` unwritten
    ignores_out : set of policies that return a new array and leave ``out`` alone
    flaky : set of policies whose second plan gives wrong answers
    failing : set of policies whose plan raises
    """

    description = "test-only: scipy under CsrVectorPolicy candidates"
    residence = HOST_COPY
    value_dtypes = FLOAT_AND_COMPLEX
    policy_type = CsrVectorPolicy

    def __init__(
        self,
        name="sweep",
        wrong=(),
        wrong_later=(),
        skips_last_row=(),
        ignores_out=(),
        failing=(),
        flaky=(),
    ):
        self.name = name
        self.flaky = set(flaky)
        self.plans_made: dict = {}
        self.ignores_out = set(ignores_out)
        self.wrong = set(wrong)
        self.wrong_later = set(wrong_later)
        self.skips_last_row = set(skips_last_row)
        self.failing = set(failing)
        self.last_policy = None

    def unavailable_reason(self):
        return None

    def default_policy(self, matrix):
        return UNTUNED

    def candidates(self, matrix):
        return list(CANDIDATES)

    def plan(self, matrix, policy):
        if policy in self.failing:
            raise RuntimeError(f"cannot launch {policy}")
        self.plans_made[policy] = self.plans_made.get(policy, 0) + 1
        return SweepPlan(self, matrix, policy)


class Float64OnlyBackend(SweepBackend):
    """Refuses every value dtype but float64 (the sweep must skip the others)."""

    value_dtypes = (np.dtype(np.float64),)


def speed(policy) -> float:
    """A made-up time in ms: smaller blocks and fewer threads per row are "faster"."""
    return policy.block_size / 100.0 + policy.threads_per_row / 1000.0


class ScriptedTimer:
    """A timer that calls ``fn`` once and reports the scripted time of the policy it ran.

    ``times`` maps (backend name, policy) or policy to milliseconds (or to a callable
    returning them, for times that change); by default :func:`speed`. ``calls`` counts
    timings (for budget tests).
    """

    def __init__(self, backends, times=None, clock=None, step_s=0.0):
        self.backends = list(backends)
        self.times = times or {}
        self.calls = 0
        self.clock = clock
        self.step_s = step_s

    def __call__(self, fn, *, warmup=0, repeat=1, inner=1):
        for backend in self.backends:
            backend.last_policy = None
        fn()
        self.calls += 1
        if self.clock is not None:
            self.clock.advance(self.step_s)
        ran = next((b for b in self.backends if b.last_policy is not None), None)
        policy = ran.last_policy
        ms = self.times.get((ran.name, policy), self.times.get(policy, speed(policy)))
        if callable(ms):
            ms = ms()
        return Timing((ms,) * repeat)


class FakeClock:
    """A monotonic clock the tests advance by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds
