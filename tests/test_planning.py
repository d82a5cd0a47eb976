"""Planning by measurement (issue 13): when ``auto`` measures, what it keeps, and that it
never changes an answer nor blocks a product. On the CPU the GPU backends are played by
host-copy stand-ins, one of them slow, so that a measurement has a clear winner."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.engine import _choice, _planning, _select
from sparsegpu.testing import (
    CountingBackend,
    HostCopyBackend,
    assert_product_close,
    random_vector,
)
from sparsegpu.tuning import CsrVectorPolicy, NoPolicy


class _Stand(HostCopyBackend):
    """A host-copy backend under a GPU backend's name; ``delay_s`` slows each product,
    ``wrong`` makes its answers wrong (a candidate planning must leave out) and ``log``, a
    list, gets the name for each product."""

    def __init__(self, name, delay_s=0.0, wrong=False, log=None):
        self.name, self.delay_s, self.wrong, self.log = name, delay_s, wrong, log
        self.description = f"test-only stand-in for {name}"

    def planning_candidates(self, matrix):
        # as the real cuSPARSE backend, a short list of its own (one policy here)
        return [NoPolicy(source="candidate")] if self.name == "cusparse" else []

    def matmat_candidates(self, matrix, columns, order):
        # as the real cuSPARSE backend, SpMM algorithms of its own (one policy here)
        return [NoPolicy(source="candidate")] if self.name == "cusparse" else []

    def plan(self, matrix, policy):
        inner = super().plan(matrix, policy)
        stand = self

        class _Plan(type(inner)):
            def matvec(self, x, out=None):
                if stand.log is not None:
                    stand.log.append(stand.name)
                if stand.delay_s:
                    time.sleep(stand.delay_s)
                y = inner.matvec(x, out=out)
                if stand.wrong:
                    y += 1.0
                return y

            matmat = matvec

        plan = _Plan.__new__(_Plan)
        plan.__dict__.update(inner.__dict__)
        return plan


@pytest.fixture
def gpu(monkeypatch):
    """Install stand-ins as the GPU backends (merge_path slow, so the rules' pick of
    merge_path for small matrices loses the measurement)."""

    def install(*backends):
        monkeypatch.setattr(
            _select,
            "gpu_candidates",
            lambda value_dtype, policy_type=None, storage=None: list(backends),
        )
        monkeypatch.delenv("SPARSEGPU_PLANNING", raising=False)
        sg.engine._registry.invalidate_choices()
        return backends

    return install


def _matrix(seed=0, n=300):
    return sg.csr_matrix(sp.random(n, n, density=0.05, random_state=seed, format="csr"))


def _counted(name, delay_s=0.0, wrong=False, log=None):
    return CountingBackend(_Stand(name, delay_s, wrong, log), name=name)


def test_the_first_product_runs_on_the_estimate_and_the_second_measures(gpu):
    slow, fast = _counted("merge_path", delay_s=2e-3), _counted("cusparse")
    gpu(slow, fast)
    A = _matrix()
    x = random_vector(A.shape[1], np.float64, seed=1)
    A @ x
    assert (slow.matvecs, fast.matvecs) == (1, 0)  # used once: never pays for planning
    assert sg.explain(A).level == "estimate"
    A @ x
    choice = sg.explain(A)
    assert choice.level == "measure" and choice.backend == "cusparse"
    assert {m.backend for m in choice.measurements} == {"merge_path", "cusparse"}
    assert choice.planning_ms > 0 and "measured fastest of 2 candidates" in choice.reason
    before = fast.matvecs
    y = A @ x
    assert fast.matvecs == before + 1  # planned once; the products run on the winner
    assert_product_close(y, sp.csr_matrix(A) @ x, np.float64, 50)


@pytest.mark.parametrize("how", ["matrix", "scope", "env", "call"])
def test_estimate_level_never_measures(gpu, monkeypatch, how):
    slow, fast = _counted("merge_path", delay_s=1e-3), _counted("cusparse")
    gpu(slow, fast)
    A = _matrix()
    x = random_vector(A.shape[1], np.float64, seed=2)

    def product():
        if how == "call":
            return sg.matvec(A, x, planning="estimate")
        if how == "scope":
            with sg.planning("estimate"):
                return A @ x
        return A @ x

    if how == "matrix":
        A.planning = "estimate"
    if how == "env":
        monkeypatch.setenv("SPARSEGPU_PLANNING", "estimate")
    for _ in range(4):
        product()
    assert (slow.matvecs, fast.matvecs) == (4, 0)


def test_unknown_levels_are_refused_with_the_choices(gpu, monkeypatch):
    A = _matrix()
    with pytest.raises(ValueError, match="unknown planning level 'fast'.*'measure'"):
        A.planning = "fast"
    with pytest.raises(ValueError, match="unknown planning level"):
        with sg.planning("fast"):
            pass
    with pytest.raises(ValueError, match="unknown planning level"):
        sg.matvec(A, np.ones(A.shape[1]), planning="fast")
    gpu(_counted("merge_path"))
    monkeypatch.setenv("SPARSEGPU_PLANNING", "fast")
    with pytest.raises(ValueError, match="SPARSEGPU_PLANNING='fast' is not a planning level"):
        A @ np.ones(A.shape[1])


def test_a_candidate_that_disagrees_is_left_out(gpu):
    wrong = _counted("cusparse", wrong=True)  # fastest, and wrong
    gpu(_counted("merge_path", delay_s=1e-3), wrong)
    A = _matrix(seed=3)
    x = random_vector(A.shape[1], np.float64, seed=3)
    choice = sg.choose(A, x)
    assert choice.backend == "merge_path"
    assert [m.agreed for m in choice.measurements] == [True, False]
    assert "disagreed" in str(choice)
    assert_product_close(A @ x, sp.csr_matrix(A) @ x, np.float64, 50)


def test_a_hopeless_candidate_is_timed_once(gpu):
    # planning's cost stays a handful of products even where one candidate is hundreds of
    # times slower (a vector kernel on an arrow matrix's dense rows)
    fast, slow = _counted("merge_path"), _counted("cusparse", delay_s=5e-3)
    gpu(fast, slow)
    A = _matrix(seed=5)
    x = random_vector(A.shape[1], np.float64, seed=5)
    choice = sg.choose(A, x)
    assert choice.backend == "merge_path"
    first, hopeless = choice.measurements
    assert first.backend == "merge_path" and first.note == ""
    assert hopeless.backend == "cusparse" and hopeless.ms > _planning.HOPELESS * first.ms
    assert f"over {_planning.HOPELESS}x the fastest so far" in hopeless.note
    assert "one sample" in str(choice)
    # a checked product and one sample, against a checked product, one sample, a warm-up
    # and five samples
    assert 3 * slow.matvecs < fast.matvecs


def test_candidates_are_timed_in_alternation(gpu, monkeypatch):
    # every candidate's answer is checked first, then each gets a calibration sample in
    # turn, and the rest of the samples go round the candidates, so a slow stretch of the
    # host falls on all of them alike (no cut-off here: a busy host could make one of two
    # equal stand-ins look hopeless)
    monkeypatch.setattr(_planning, "HOPELESS", float("inf"))
    log = []
    gpu(_counted("merge_path", log=log), _counted("cusparse", log=log))
    A = _matrix(seed=6)
    x = random_vector(A.shape[1], np.float64, seed=6)
    sg.choose(A, x)
    # per candidate: a checked product, a sample of `inner` products, one warm-up product
    # and five samples
    inner = (len(log) - 4) // 12
    mp, cs = ["merge_path"] * inner, ["cusparse"] * inner
    expected = ["merge_path", "cusparse"]  # each answer checked
    expected += mp + cs  # the calibration samples, in turn
    expected += ["merge_path", "cusparse"]  # the warm-ups
    expected += mp + cs + cs + mp + mp + cs + cs + mp + mp + cs  # five rounds, rotating
    assert log == expected


def test_a_matrix_of_the_same_fingerprint_reuses_the_measurement(gpu):
    slow, fast = _counted("merge_path", delay_s=2e-3), _counted("cusparse")
    gpu(slow, fast)
    A = _matrix(seed=4)
    x = random_vector(A.shape[1], np.float64, seed=4)
    sg.choose(A, x)
    B = sg.csr_matrix(A.copy() * 3.0)  # new values, same pattern: same fingerprint
    slow_before = slow.matvecs
    B @ x
    B @ x
    assert slow.matvecs == slow_before  # B never ran (nor measured) the slow backend
    assert sg.explain(B).reason == "measured on a matrix of the same fingerprint in this process"


def test_a_product_never_waits_for_another_threads_planning(gpu):
    gpu(_counted("merge_path", delay_s=1e-3), _counted("cusparse"))
    A = _matrix(seed=5)
    x = random_vector(A.shape[1], np.float64, seed=5)
    A @ x  # the estimate, and the planning lock exists
    cache = A._sg_cache_dict()
    assert cache.planning_lock.acquire()  # "another thread is planning A"
    try:
        done = []
        worker = threading.Thread(target=lambda: done.append(A @ x))
        worker.start()
        worker.join(10)
        assert done, "the product waited for the planning lock"
        assert sg.explain(A).level == "estimate"  # it ran on the estimate, unplanned
        assert_product_close(done[0], sp.csr_matrix(A) @ x, np.float64, 50)
    finally:
        cache.planning_lock.release()
    A @ x
    assert sg.explain(A).level == "measure"


@pytest.mark.parametrize("shape", [(0, 0), (0, 6), (6, 0), (300, 300)], ids=str)
def test_products_with_nothing_in_them_go_through_planning(gpu, shape):
    """k = 0 columns leave the measurement to the next product with a column; zero rows,
    zero columns and zero nonzeros plan like any other matrix (issue 33)."""
    gpu(_counted("merge_path", delay_s=1e-3), _counted("cusparse"))
    density = 0.05 if 0 not in shape else 0.0
    A = sg.csr_matrix(sp.random(*shape, density=density, random_state=8, format="csr"))
    no_columns = np.ones((shape[1], 0))
    for _ in range(3):
        assert (A @ no_columns).shape == (shape[0], 0)
    assert sg.choose(A, no_columns).level == "estimate"
    assert sg.explain(A).level == "estimate"
    X = random_vector(shape[1] * 2, np.float64, seed=8).reshape(shape[1], 2)
    for _ in range(2):
        assert_product_close(A @ X, sp.csr_matrix(A) @ X, np.float64, 50)
    assert sg.explain(A, X).level == "measure"  # A @ X is planned as A @ X


def test_a_policy_given_means_no_measurement(gpu):
    slow = _counted("merge_path", delay_s=1e-3)
    gpu(slow, _counted("cusparse"))
    A = _matrix(seed=6)
    A.policy = sg.tuning.NoPolicy()
    x = random_vector(A.shape[1], np.float64, seed=6)
    for _ in range(3):
        A @ x
    assert sg.explain(A).level == "estimate"


def test_plan_without_a_gpu_returns_the_estimate():
    if sg.device._cuda.unavailable_reason() is None:
        pytest.skip("a GPU is usable here")
    choice = sg.choose(_matrix(seed=7), np.ones(300))
    assert choice.backend == "scipy" and choice.level == "estimate"
    assert choice.measurements == () and choice.planning_ms is None


def test_plan_checks_its_arguments():
    with pytest.raises(TypeError, match="sparsegpu matrix"):
        sg.choose(sp.eye(3, format="csr"), np.ones(3))
    with pytest.raises(ValueError, match="x needs 3 rows"):
        sg.choose(sg.csr_matrix(sp.eye(3)), np.ones(4))
    with pytest.raises(ValueError, match="unknown planning level"):
        sg.choose(sg.csr_matrix(sp.eye(3)), np.ones(3), level="slow")


class _OneFastPolicy(HostCopyBackend):
    """A host-copy backend with CsrVectorPolicy knobs whose products are slow (2 ms) at
    every policy but the ones :meth:`fast` accepts."""

    policy_type = CsrVectorPolicy

    def fast(self, policy) -> bool:
        raise NotImplementedError

    def plan(self, matrix, policy):
        inner = super().plan(matrix, NoPolicy())
        delay = 0.0 if self.fast(policy) else 2e-3

        class _Plan(type(inner)):
            def matvec(self, x, out=None):
                time.sleep(delay)
                return inner.matvec(x, out=out)

        plan = _Plan.__new__(_Plan)
        plan.__dict__.update(inner.__dict__)
        plan.policy = policy
        return plan


class _Knobbed(_OneFastPolicy):
    """A named backend with a short list of policies (as cuSPARSE has its algorithms):
    every block size but 128 is slow."""

    name = "knobbed"
    description = "test-only: a backend whose policy planning picks"

    def default_policy(self, matrix):
        return CsrVectorPolicy(block_size=256, threads_per_row=1, source="default")

    def planning_candidates(self, matrix):
        return [CsrVectorPolicy(block_size=b, threads_per_row=1) for b in (64, 128, 256)]

    def fast(self, policy) -> bool:
        return policy.block_size == 128


@pytest.fixture
def knobbed():
    sg.register_backend(_Knobbed(), replace=True)
    yield
    sg.unregister_backend("knobbed")


def test_a_named_backend_gets_its_policy_planned(knobbed, monkeypatch):
    monkeypatch.delenv("SPARSEGPU_PLANNING", raising=False)
    A = _matrix(seed=8)
    A.backend = "knobbed"
    x = random_vector(A.shape[1], np.float64, seed=8)
    A @ x
    A @ x  # the second product times the short list
    entry = next(iter(A._sg_cache_dict().choices.values()))
    assert entry.choice.level == "measure" and entry.plan.policy.block_size == 128
    assert sg.explain(A).requested == "auto"  # explain describes auto, not the named plan
    B = sg.csr_matrix(A.copy() * 2.0)  # same fingerprint under another name: auto's own
    assert sg.explain(B).reason != "measured on a matrix of the same fingerprint in this process"
    assert_product_close(A @ x, sp.csr_matrix(A) @ x, np.float64, 50)


def test_a_named_backend_with_a_policy_given_is_not_planned(knobbed):
    A = _matrix(seed=9)
    A.backend = "knobbed"
    A.policy = CsrVectorPolicy(block_size=64, threads_per_row=1)
    x = random_vector(A.shape[1], np.float64, seed=9)
    for _ in range(3):
        A @ x
    entry = next(iter(A._sg_cache_dict().choices.values()))
    assert entry.choice.level == "estimate" and entry.plan.policy.block_size == 64


class _Planned(_OneFastPolicy):
    """A ``planned`` backend (as shuffle and delta16 are) whose untuned policy, 4 threads a
    row, is fast and every other policy slow."""

    name = "shuffle"
    description = "test-only: a planned backend with a tuned and an untuned policy"
    planned = True

    def default_policy(self, matrix):
        return CsrVectorPolicy(threads_per_row=4, source="occupancy")

    def fast(self, policy) -> bool:
        return policy.threads_per_row == 4


@pytest.mark.parametrize("tuned", [True, False], ids=["tuned", "untuned_only"])
def test_planning_times_the_tuned_and_the_untuned_policy(gpu, monkeypatch, tuned):
    # a tuned policy is one matrix's winner applied to a whole row class: planning also
    # times the policy made from this matrix's own row lengths, and keeps the faster
    slow_tuned = CsrVectorPolicy(threads_per_row=1, source="tuned")
    monkeypatch.setattr(
        _select, "tuned_policy", lambda backend, mirror, store=None: slow_tuned if tuned else None
    )
    gpu(_Planned())
    A = _matrix(seed=10)
    x = random_vector(A.shape[1], np.float64, seed=10)
    choice = sg.choose(A, x)
    timed = [m.policy.threads_per_row for m in choice.measurements if m.ms is not None]
    assert timed == ([1, 4] if tuned else [4])
    assert choice.policy.threads_per_row == 4
    assert_product_close(A @ x, sp.csr_matrix(A) @ x, np.float64, 50)


class _PlannedShapes(_Planned):
    """A ``planned`` backend (as merge_path is) whose tuned and untuned policies are slow
    and one of its :meth:`planned_policies` fast."""

    def default_policy(self, matrix):
        return CsrVectorPolicy(threads_per_row=2, source="occupancy")

    def planned_policies(self, matrix):
        return [CsrVectorPolicy(threads_per_row=t, source="candidate") for t in (8, 4)]


def test_planning_times_a_planned_backends_other_policies(gpu, monkeypatch):
    # merge_path's best tile shape differs by matrix: planning times each beside the tuned
    # and the untuned one, and keeps the fastest
    slow_tuned = CsrVectorPolicy(threads_per_row=1, source="tuned")
    monkeypatch.setattr(_select, "tuned_policy", lambda backend, mirror, store=None: slow_tuned)
    gpu(_PlannedShapes())
    A = _matrix(seed=13)
    x = random_vector(A.shape[1], np.float64, seed=13)
    choice = sg.choose(A, x)
    timed = [m.policy.threads_per_row for m in choice.measurements if m.ms is not None]
    assert timed == [1, 2, 8, 4]
    assert choice.policy.threads_per_row == 4
    assert_product_close(A @ x, sp.csr_matrix(A) @ x, np.float64, 50)


def test_merge_path_has_every_tile_shape_planned():
    from sparsegpu.backends import merge_path

    backend = sg.engine._registry.registered()["merge_path"]
    shapes = [(p.block_size, p.nnz_per_thread) for p in backend.planned_policies(None)]
    assert shapes == list(merge_path.MERGE_PATH_SHAPES)


def test_plan_is_the_deprecated_name_of_choose():
    A = _matrix(seed=11)
    x = random_vector(A.shape[1], np.float64, seed=11)
    with pytest.warns(DeprecationWarning, match="sparsegpu.choose"):
        choice = sg.plan(A, x)
    assert (choice.backend, choice.policy) == (sg.explain(A).backend, sg.explain(A).policy)


def test_a_at_X_is_planned_per_k_bucket_and_order(gpu):
    # A @ X has a plan of its own for each bucket of k (a power of two) and memory order;
    # one column is A @ x
    slow, fast = _counted("merge_path", delay_s=2e-3), _counted("cusparse")
    gpu(slow, fast)
    A = _matrix(seed=12)
    S = sp.csr_matrix(A)
    X = np.random.default_rng(12).uniform(-1, 1, (A.shape[1], 8))
    for _ in range(2):
        assert_product_close(A @ X, S @ X, np.float64, 50)
    choice = sg.explain(A, X)
    assert choice.level == "measure" and choice.backend == "cusparse"
    assert choice.operation == _choice.Operation("A @ X", 8, "C")
    assert "A @ X (k = 5..8, C order)" in str(choice)
    assert sg.explain(A, X[:, :7]).level == "measure"  # the same bucket
    assert sg.explain(A, X[:, :3].copy()).level == "estimate"  # k = 3..4: not yet
    assert sg.explain(A, np.asfortranarray(X)).level == "estimate"  # the other order
    assert sg.explain(A).level == "estimate"  # A @ x: not yet
    before = fast.matmats
    assert_product_close(A @ X[:, :6].copy(), S @ X[:, :6], np.float64, 50)
    assert fast.matmats == before + 1  # k = 6 runs the plan measured for k = 8
    for _ in range(2):
        assert_product_close(A @ X[:, :1], S @ X[:, :1], np.float64, 50)
    assert sg.explain(A).level == "measure"  # one column planned A @ x


def test_choose_plans_a_at_X_on_the_X_given(gpu):
    gpu(_counted("merge_path", delay_s=2e-3), _counted("cusparse"))
    A = _matrix(seed=13)
    X = np.asfortranarray(np.random.default_rng(13).uniform(-1, 1, (A.shape[1], 16)))
    choice = sg.choose(A, X)
    assert choice.operation == _choice.Operation("A @ X", 16, "F")
    assert sg.explain(A, X) == choice and sg.explain(A).level == "estimate"


def test_a_bsr_fingerprint_holds_its_block_shape():
    """A plan measured on blocks of one shape must not serve blocks of another (a policy
    reading 2 x 2 blocks whole cannot read 1 x 1 ones): same shape, dtypes and row
    statistics, other blocks, other fingerprint."""

    class Mirror:
        def __init__(self, fmt, blocksize=None):
            self.shape, self.dtype, self.index_dtype = (8, 8), np.float64, np.int32
            self.stats, self.format = ("the same row statistics",), fmt
            if blocksize is not None:
                self.blocksize = blocksize

    two, one = Mirror("bsr", (2, 2)), Mirror("bsr", (1, 1))
    assert _planning.fingerprint(two) != _planning.fingerprint(one)
    assert _planning.fingerprint(two) == _planning.fingerprint(Mirror("bsr", (2, 2)))
    assert _planning.fingerprint(Mirror("csr"))[-1] is None
