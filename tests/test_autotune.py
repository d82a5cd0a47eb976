"""The autotuner's sweep, driven on the CPU by host backends and a scripted timer.

Which candidate "wins" is decided by the scripted times, never by measured speed. The
last test tunes the real GPU backends and skips without a GPU.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.engine import _planning, _registry
from sparsegpu.engine._tuning_store import (
    TuningCache,
    TuningCacheError,
    TuningCacheWarning,
    host_context,
)
from sparsegpu.measure._timing import host_time
from sparsegpu.testing import HOST_COPY
from sparsegpu.tuning import CsrVectorPolicy
from sparsegpu.tuning import autotune as autotune_mod
from tests.tuning_backends import (
    CANDIDATES,
    UNTUNED,
    FakeClock,
    Float64OnlyBackend,
    ScriptedTimer,
    SweepBackend,
    speed,
)

FASTEST = CsrVectorPolicy(block_size=64, threads_per_row=4)  # smallest speed()


def matrix(row_length=10, n=60, dtype=np.float64, index_dtype=np.int32, seed=0):
    """A sparsegpu matrix with ``row_length`` entries in every row, in a band about the
    diagonal (so its row class follows the row length, not ``scattered``)."""
    rng = np.random.default_rng(seed)
    first = np.clip(np.arange(n) - row_length // 2, 0, n - row_length)
    indices = (first[:, None] + np.arange(row_length)).ravel()
    indptr = np.arange(n + 1) * row_length
    data = rng.uniform(1, 2, n * row_length).astype(dtype)
    A = sp.csr_matrix((data, indices.astype(index_dtype), indptr.astype(index_dtype)), shape=(n, n))
    return sg.csr_matrix(A)


@pytest.fixture
def register():
    """Register test backends for one test; unregistered afterwards."""
    added = []

    def add(backend):
        sg.register_backend(backend, replace=True)
        added.append(backend.name)
        return backend

    yield add
    for name in added:
        sg.unregister_backend(name)


def tune(A, backends, **kw):
    timer = kw.pop("timer", None) or ScriptedTimer(backends)
    return sg.autotune(A, [b.name for b in backends], timer=timer, repeat=3, warmup=1, **kw)


# --------------------------------------------------------------------------- winners
def test_winner_is_the_fastest_correct_candidate(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend])
    [winner] = report.winners
    assert winner.backend == "sweep-a"
    assert winner.best.policy == FASTEST
    assert winner.gain == pytest.approx(speed(UNTUNED) / speed(FASTEST))


def test_every_candidate_is_reported_with_time_and_bandwidth(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend])
    assert {r.policy for r in report.results} == set(CANDIDATES)
    for r in report.results:
        assert r.status == "ok"
        assert r.time_ms == pytest.approx(speed(r.policy))
        assert r.gb_per_s > 0


def test_untuned_default_runs_first_and_is_marked(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend])
    assert report.results[0].untuned and report.results[0].policy == UNTUNED
    assert sum(r.untuned for r in report.results) == 1


def test_overall_winner_is_the_fastest_backend(register):
    slow = register(SweepBackend("sweep-slow"))
    fast = register(SweepBackend("sweep-fast"))
    times = {("sweep-slow", p): 10 * speed(p) for p in CANDIDATES}
    report = tune(matrix(), [slow, fast], timer=ScriptedTimer([slow, fast], times))
    assert report.winner().backend == "sweep-fast"
    assert {w.backend for w in report.winners} == {"sweep-slow", "sweep-fast"}


def test_winner_per_dtype(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend], dtypes=["float32", "complex128"])
    assert report.dtypes == ["float32", "complex128"]
    assert report.winner("float32").value_dtype == "float32"
    assert report.winner(np.complex128).value_dtype == "complex128"
    with pytest.raises(ValueError, match="several value dtypes"):
        report.winner()


def test_a_dtype_the_backend_refuses_is_skipped_with_the_reason(register):
    backend = register(Float64OnlyBackend("sweep-f64"))
    report = tune(matrix(), [backend], dtypes=["float32", "float64"])
    skipped = [r for r in report.results if r.status == "skipped"]
    assert len(skipped) == 1 and "does not support value dtype float32" in skipped[0].message
    assert [w.value_dtype for w in report.winners] == ["float64"]


# -------------------------------------------------------------------- wrong and failing
def test_wrong_candidate_is_reported_excluded_and_never_cached(register):
    backend = register(SweepBackend("sweep-wrong", wrong={FASTEST}))
    report = tune(matrix(), [backend])
    [bad] = [r for r in report.results if r.policy == FASTEST]
    assert bad.status == "wrong" and "scipy gives" in bad.message
    assert bad.time_ms is None
    assert report.winners[0].best.policy != FASTEST
    assert bad in report.problems()
    entries = TuningCache().entries()
    assert [e.knobs for _, e in entries] == [report.winners[0].best.policy.knobs()]


def test_answer_that_goes_wrong_after_repeated_calls_is_caught(register):
    backend = register(SweepBackend("sweep-race", wrong_later={FASTEST}))
    report = tune(matrix(), [backend])
    [bad] = [r for r in report.results if r.policy == FASTEST]
    assert bad.status == "wrong" and bad.message.startswith("after timing")


def test_rows_left_unwritten_are_caught(register):
    backend = register(SweepBackend("sweep-nan", skips_last_row={FASTEST}))
    report = tune(matrix(), [backend])
    [bad] = [r for r in report.results if r.policy == FASTEST]
    assert bad.status == "wrong" and "not written" in bad.message


def test_out_array_left_alone_is_caught(register):
    backend = register(SweepBackend("sweep-noout", ignores_out={FASTEST}))
    report = tune(matrix(), [backend])
    [bad] = [r for r in report.results if r.policy == FASTEST]
    assert bad.status == "wrong" and "out= array was not filled" in bad.message


def test_failing_candidate_is_reported_and_the_sweep_goes_on(register):
    backend = register(SweepBackend("sweep-fail", failing={FASTEST}))
    report = tune(matrix(), [backend])
    [bad] = [r for r in report.results if r.policy == FASTEST]
    assert bad.status == "error" and "RuntimeError: cannot launch" in bad.message
    assert sum(r.status == "ok" for r in report.results) == len(CANDIDATES) - 1


def test_backend_with_only_wrong_candidates_has_no_winner(register):
    backend = register(SweepBackend("sweep-allwrong", wrong=set(CANDIDATES)))
    report = tune(matrix(), [backend])
    assert report.winners == [] and report.winner() is None
    assert TuningCache().entries() == []


def test_winner_that_fails_on_re_timing_is_dropped_and_never_cached(register):
    backend = register(SweepBackend("sweep-flaky", flaky={FASTEST}))
    report = tune(matrix(), [backend])
    [again] = [r for r in report.problems() if r.policy == FASTEST]
    assert again.status == "wrong" and again.message.startswith("on re-timing")
    [winner] = report.winners
    assert winner.best.policy == UNTUNED and winner.gain == pytest.approx(1.0)
    [(_, e)] = TuningCache().entries()
    assert e.knobs == UNTUNED.knobs()


def test_winner_no_faster_than_the_default_on_re_timing_yields_to_it(register):
    backend = register(SweepBackend("sweep-lucky"))
    calls = []

    def lucky_then_slow():
        calls.append(1)
        return 0.01 if len(calls) <= 2 else 100.0  # 2 timings per candidate run

    timer = ScriptedTimer([backend], {FASTEST: lucky_then_slow})
    report = tune(matrix(), [backend], timer=timer)
    [winner] = report.winners
    assert winner.best.policy == UNTUNED and winner.gain == pytest.approx(1.0)


def test_gain_comes_from_the_back_to_back_re_timing(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend])
    [winner] = report.winners
    sweep_times = {r.policy: r for r in report.results}
    assert winner.best is not sweep_times[FASTEST]  # a fresh measurement
    assert winner.best.time_ms == pytest.approx(speed(FASTEST))


# ----------------------------------------------------------------------------- budget
def test_zero_budget_times_nothing_and_saves_nothing(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend], budget=0)
    assert report.budget_exhausted
    assert all(r.status == "skipped" and "budget" in r.message for r in report.results)
    assert report.winners == [] and TuningCache().entries() == []


def test_budget_stops_the_sweep_gracefully_round_robin(register, monkeypatch):
    a = register(SweepBackend("sweep-a"))
    b = register(SweepBackend("sweep-b"))
    clock = FakeClock()
    monkeypatch.setattr(autotune_mod.time, "monotonic", clock)
    # each candidate costs two timer calls (calibration, then samples): 1 s of fake time
    timer = ScriptedTimer([a, b], clock=clock, step_s=0.5)
    report = tune(matrix(), [a, b], budget=3.5, timer=timer)
    ran = [r for r in report.results if r.status == "ok"]
    assert len(ran) == 4
    assert [r.backend for r in ran] == ["sweep-a", "sweep-b", "sweep-a", "sweep-b"]
    assert [r.untuned for r in ran] == [True, True, False, False]
    assert report.budget_exhausted
    assert {w.backend for w in report.winners} == {"sweep-a", "sweep-b"}


def test_generous_budget_runs_everything(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend], budget=3600)
    assert not report.budget_exhausted
    assert all(r.status == "ok" for r in report.results)


# ------------------------------------------------------------------------------ cache
def test_winners_are_written_with_their_scores(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend])
    [(context, e)] = TuningCache().entries()
    assert context == host_context()
    assert (e.backend, e.value_dtype, e.index_dtype, e.row_class) == (
        "sweep-a",
        "float64",
        "int32",
        "medium",
    )
    assert e.knobs == FASTEST.knobs()
    assert e.time_ms == pytest.approx(speed(FASTEST))
    assert e.gb_per_s == pytest.approx(report.winners[0].best.gb_per_s)
    assert e.untuned_time_ms == pytest.approx(speed(UNTUNED))
    assert report.cache_path == str(TuningCache().path)


def test_tuned_policy_becomes_the_default_policy(register):
    backend = register(SweepBackend("sweep-a"))
    tune(matrix(seed=1), [backend])
    other = matrix(seed=2)  # another matrix of the same row class
    policy = _planning.plan_for(other, backend="sweep-a").policy
    assert policy == FASTEST and policy.source == "tuned"


def test_tuning_refreshes_a_matrix_s_remembered_default(register):
    backend = register(SweepBackend("sweep-a"))
    A = matrix()
    assert _planning.plan_for(A, backend="sweep-a").policy == UNTUNED
    tune(A, [backend])
    assert _planning.plan_for(A, backend="sweep-a").policy == FASTEST


def test_products_of_a_tuned_matrix_switch_to_the_tuned_policy(register):
    backend = register(SweepBackend("sweep-a"))
    A = matrix()
    A.backend = "sweep-a"
    x = np.ones(A.shape[1])
    A @ x
    assert backend.last_policy == UNTUNED
    tune(A, [backend])
    y = A @ x
    assert backend.last_policy == FASTEST
    np.testing.assert_allclose(y, sp.csr_matrix(A) @ x)


def test_tuning_one_row_class_leaves_another_alone(register):
    backend = register(SweepBackend("sweep-a"))
    tune(matrix(row_length=10), [backend])  # medium
    short = matrix(row_length=3)
    assert _planning.plan_for(short, backend="sweep-a").policy == UNTUNED


def test_index_dtype_is_part_of_the_key(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend], index_dtype="int64")
    assert report.index_dtype == "int64"
    [(_, e)] = TuningCache().entries()
    assert e.index_dtype == "int64"
    assert _planning.plan_for(matrix(), backend="sweep-a").policy == UNTUNED


def test_save_false_writes_nothing(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(), [backend], save=False)
    assert report.winners and report.cache_path is None
    assert TuningCache().entries() == []


def test_explicit_cache_is_used(register, tmp_path):
    backend = register(SweepBackend("sweep-a"))
    cache = TuningCache(tmp_path / "elsewhere")
    tune(matrix(), [backend], cache=cache)
    assert len(cache.entries()) == 1 and TuningCache().entries() == []


def test_cache_failure_is_a_warning_and_the_report_survives(register):
    class Unwritable(TuningCache):
        def record(self, context, entries):
            raise TuningCacheError("disk full")

    backend = register(SweepBackend("sweep-a"))
    with pytest.warns(TuningCacheWarning, match="disk full"):
        report = tune(matrix(), [backend], cache=Unwritable())
    assert report.winners and report.cache_path is None and report.cache_error == "disk full"


# -------------------------------------------------------------------------- the report
def test_report_describes_the_matrix(register):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(n=60, row_length=10), [backend], name="my matrix")
    assert (report.matrix, report.shape, report.nnz) == ("my matrix", (60, 60), 600)
    assert report.row_class == "medium" and report.index_dtype == "int32"
    assert report.elapsed_s > 0


def test_report_is_json_serializable(register):
    backend = register(SweepBackend("sweep-wrong", wrong={FASTEST}))
    data = json.loads(json.dumps(tune(matrix(), [backend]).to_dict()))
    assert data["overall"]["float64"]["backend"] == "sweep-wrong"
    assert {r["status"] for r in data["results"]} == {"ok", "wrong"}
    assert data["winners"][0]["best"]["policy"]["block_size"] == 64


def test_progress_callback_sees_every_candidate(register):
    backend = register(SweepBackend("sweep-a"))
    seen = []
    tune(matrix(), [backend], progress=lambda done, total, label: seen.append((done, total)))
    assert seen[-1] == (len(CANDIDATES), len(CANDIDATES))
    assert [d for d, _ in seen] == list(range(len(CANDIDATES) + 1))


def test_progress_bar_runs(register):
    backend = register(SweepBackend("sweep-a"))
    assert tune(matrix(), [backend], progress=True).winners


# ------------------------------------------------------------------------ input forms
def test_csc_and_plain_scipy_inputs_are_tuned_as_csr(register):
    backend = register(SweepBackend("sweep-a"))
    A = sp.csc_matrix(matrix())
    report = tune(A, [backend])
    assert all(r.status == "ok" for r in report.results)
    report = tune(sg.csc_matrix(A), [backend])
    assert all(r.status == "ok" for r in report.results)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=["float32", "complex64"])
def test_default_dtype_is_the_matrix_s(register, dtype):
    backend = register(SweepBackend("sweep-a"))
    report = tune(matrix(dtype=dtype), [backend])
    assert report.dtypes == [np.dtype(dtype).name]


def test_integer_matrix_is_tuned_in_float64(register):
    backend = register(SweepBackend("sweep-a"))
    A = sg.csr_matrix(sp.random(40, 40, density=0.3, random_state=0, format="csr").astype(np.int64))
    assert tune(A, [backend]).dtypes == ["float64"]


def test_perf_counter_timer_gives_every_sample():
    timing = host_time(lambda: None, warmup=1, repeat=5, inner=2)
    assert len(timing.samples_ms) == 5 and timing.median_ms >= 0


def test_default_timer_for_host_backends_is_perf_counter(register):
    register(SweepBackend("sweep-a"))
    report = sg.autotune(matrix(), "sweep-a", repeat=2, warmup=0, save=False)
    assert all(r.status == "ok" and r.time_ms >= 0 for r in report.results)


# ---------------------------------------------------------------------- bad arguments
BAD_ARGUMENTS = {
    "auto": (dict(backends="auto"), ValueError, "'auto' is not a backend to tune"),
    "oracle": (dict(backends=["scipy"]), ValueError, "oracle"),
    "unknown_backend": (dict(backends=["nosuch"]), ValueError, "unknown backend 'nosuch'"),
    "no_backends": (dict(backends=[]), ValueError, "backends is empty"),
    "int_dtype": (dict(dtypes="int32"), ValueError, "cannot tune value dtype 'int32'"),
    "longdouble": (dict(dtypes=[np.longdouble]), ValueError, "cannot tune value dtype"),
    "nonsense_dtype": (dict(dtypes=["fast"]), ValueError, "cannot tune value dtype 'fast'"),
    "none_dtype": (dict(dtypes=[None]), ValueError, "cannot tune value dtype None"),
    "no_dtypes": (dict(dtypes=[]), ValueError, "dtypes is empty"),
    "negative_budget": (dict(budget=-1), ValueError, "budget=-1"),
    "nan_budget": (dict(budget=float("nan")), ValueError, "budget=nan"),
    "string_budget": (dict(budget="10"), ValueError, "budget='10'"),
    "zero_repeat": (dict(repeat=0), ValueError, "repeat=0 must be an int >= 1"),
    "float_warmup": (dict(warmup=1.5), ValueError, "warmup=1.5"),
    "index_int16": (dict(index_dtype="int16"), ValueError, "index_dtype=int16"),
    "progress_str": (dict(progress="yes"), TypeError, "progress must be"),
}


@pytest.mark.parametrize("kwargs,error,message", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_bad_arguments_are_clear_errors(register, kwargs, error, message):
    register(SweepBackend("sweep-a"))
    kwargs = {"backends": "sweep-a", **kwargs}
    with pytest.raises(error, match=message):
        sg.autotune(matrix(), **kwargs)


def test_dense_input_is_refused():
    with pytest.raises(TypeError, match="must be a sparse matrix"):
        sg.autotune(np.eye(3))


def test_matrix_without_nonzeros_is_refused(register):
    register(SweepBackend("sweep-a"))
    with pytest.raises(ValueError, match="no stored entries"):
        sg.autotune(sg.csr_matrix((5, 5)), "sweep-a")


def test_unavailable_backend_is_refused_with_the_reason(register):
    class Unavailable(SweepBackend):
        def unavailable_reason(self):
            return "needs a GPU"

    register(Unavailable("sweep-off"))
    with pytest.raises(sg.BackendUnavailableError, match="needs a GPU"):
        sg.autotune(matrix(), "sweep-off")


def test_no_gpu_and_no_backend_says_so(monkeypatch):
    monkeypatch.setattr(_registry, "registered", lambda: {"scipy": _registry._registry["scipy"]})
    with pytest.raises(sg.BackendUnavailableError, match="no GPU to tune on"):
        sg.autotune(matrix())


def test_default_backends_leave_out_the_oracle():
    names = [b.name for b in autotune_mod.default_backends()]
    assert "scipy" not in names and "host-copy" in names


def test_host_residence_of_the_test_backend_is_host_copy():
    assert SweepBackend().residence is HOST_COPY


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
def test_gpu_backend_tunes_and_remembers(gpu_backend_name):
    from sparsegpu.datasets import stencil_2d

    A = stencil_2d(64)
    report = sg.autotune(A, gpu_backend_name, budget=15, repeat=3, warmup=1)
    assert [r for r in report.results if r.status == "wrong"] == []
    [winner] = report.winners
    policy = _planning.plan_for(A, backend=gpu_backend_name).policy
    if type(policy).knob_names():
        assert policy == winner.best.policy and policy.source == "tuned"
