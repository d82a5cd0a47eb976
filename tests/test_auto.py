"""``auto``: the row-length rules, plugged-in lookups, refusals, ``explain``, cached choices.

The rules run on CPU through fake GPU backends (host-copy backends under GPU names).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.device._mirror import RowLengthStats
from sparsegpu.engine import _registry, _rules, _select
from sparsegpu.testing import (
    CountingBackend,
    HostCopyBackend,
    assert_product_close,
    awkward_matrices,
    random_vector,
)


def _stats(mean, std, lo, hi, n_rows=1000, empty=0):
    return RowLengthStats(n_rows, n_rows, int(mean * n_rows), mean, std, lo, hi, empty)


REGULAR = _stats(5.0, 0.5, 3, 5, n_rows=1_000_000)
POWER_LAW = _stats(15.0, 80.0, 0, 90_000, n_rows=1_000_000)
ONE_LONG_ROW = _stats(200.0, 150.0, 100, 70_000, n_rows=100_000)
SMALL_REGULAR = _stats(5.0, 0.5, 3, 5, n_rows=1000)
EMPTY = RowLengthStats(10, 10, 0, 0.0, 0.0, 0, 0, 10)


@pytest.mark.parametrize(
    ("stats", "usable", "expected"),
    [
        (REGULAR, ["cusparse", "merge_path"], "cusparse"),
        (POWER_LAW, ["cusparse", "merge_path"], "merge_path"),
        (ONE_LONG_ROW, ["cusparse", "merge_path"], "merge_path"),
        (POWER_LAW, ["cusparse"], "cusparse"),
        (EMPTY, ["cusparse", "merge_path"], "merge_path"),
        (SMALL_REGULAR, ["cusparse", "merge_path"], "merge_path"),
        (SMALL_REGULAR, ["cusparse"], "cusparse"),
    ],
    ids=[
        "regular",
        "power_law",
        "long_row_over_limit",
        "merge_path_unusable",
        "empty_is_small",
        "small",
        "small_merge_path_unusable",
    ],
)
def test_rule_picks_by_row_lengths(stats, usable, expected):
    name, reason = _rules.auto_rule(stats, usable)
    assert name == expected
    assert reason


SCATTERED = RowLengthStats(1_000_000, 1_000_000, 16_000_000, 16.0, 0.0, 16, 16, 0, 0.33)


@pytest.mark.parametrize(
    ("usable", "expected"),
    [(["shuffle", "merge_path", "cusparse"], "merge_path"), (["shuffle", "cusparse"], "cusparse")],
)
def test_scattered_columns_go_to_the_gather_friendly_kernels(usable, expected):
    name, reason = _rules.auto_rule(SCATTERED, usable)
    assert name == expected
    assert "scattered columns (mean distance from the diagonal 0.33" in reason


def _column_stats(A):
    return RowLengthStats.from_indptr(A.indptr, A.shape[1], np, indices=A.indices)


def test_column_spread_tells_a_stencil_from_random_columns():
    from sparsegpu.datasets import synthetic

    stencil = _column_stats(synthetic.stencil_3d(20, points=27))
    # rows reach n^2 + n + 1 = 421 columns either side of the diagonal of 8,000
    assert stencil.column_spread <= 421 / 8000 and _rules.row_class(stencil) == "medium"
    random_rows = _column_stats(synthetic.uniform_random(20_000, 16, seed=1))
    # the first and last of 16 uniform columns: E|u - 1/17| + E|u - 16/17| over 2, about 0.44
    assert random_rows.column_spread == pytest.approx(0.44, abs=0.03)
    assert _rules.row_class(random_rows) == "scattered"
    # long rows keep their class: a row-per-warp kernel hides its gathers behind the row
    long_rows = _column_stats(synthetic.uniform_random(500, 2000, n_cols=4000, seed=1))
    assert long_rows.column_spread > 0.1 and _rules.row_class(long_rows) == "long"


@pytest.mark.parametrize("name", list(awkward_matrices()))
def test_column_spread_of_awkward_matrices(name):
    A = awkward_matrices(np.float64, np.int64, seed=2)[name]
    spread = _column_stats(A).column_spread
    assert 0.0 <= spread <= 1.0
    if A.nnz == 0:
        assert spread == 0.0
    # without the indices there is no spread to measure
    assert RowLengthStats.from_indptr(A.indptr, A.shape[1], np).column_spread == 0.0


@pytest.mark.parametrize("name", list(awkward_matrices()))
def test_row_stats_are_the_stats_without_the_spread(name):
    """What sparse products read (row_stats) is the row part of what SpMV planning reads
    (stats), and becomes stats itself once stats is known."""
    from dataclasses import replace

    from sparsegpu.device._mirror import HOST, DeviceMatrix

    A = awkward_matrices(np.float64, np.int32, seed=3)[name]
    fresh = DeviceMatrix.from_host(A.data, A.indices, A.indptr, A.shape, HOST)
    stats = _column_stats(A)
    assert fresh.row_stats == replace(stats, column_spread=0.0)
    lengths = np.diff(A.indptr)
    if lengths.size:
        assert stats.std == pytest.approx(lengths.std(), rel=1e-12, abs=1e-12)
        assert (stats.mean, stats.max, stats.min) == (lengths.mean(), lengths.max(), lengths.min())
    assert fresh.stats == stats and fresh.row_stats == stats


def test_imbalance_threshold_is_strict():
    at_threshold = _stats(10.0, 20.0, 0, 80, n_rows=1_000_000)  # max exactly 8 x mean
    assert _rules.auto_rule(at_threshold, ["cusparse", "merge_path"])[0] == "cusparse"


class _FakeGpu(HostCopyBackend):
    """A host-copy backend registered under a GPU backend's name, for auto's rules."""

    def __init__(self, name, refuse=None):
        self.name = name
        self.description = f"test-only stand-in for {name}"
        self.refuse = refuse

    def refuse_reason(self, matrix):
        return self.refuse


@pytest.fixture
def fake_gpu(monkeypatch):
    """Pretend the GPU has the given stand-in backends; yields a setter."""

    def install(*backends):
        monkeypatch.setattr(
            _select,
            "gpu_candidates",
            lambda value_dtype, policy_type=None, storage=None: list(backends),
        )
        # the awkward matrices are all small; the row-length rules are what is tested here
        monkeypatch.setattr(_rules, "SMALL_ITEMS", 0)
        monkeypatch.setenv("SPARSEGPU_PLANNING", "estimate")  # the rules, not measurements
        _registry.invalidate_choices()
        return backends

    yield install
    _registry.invalidate_choices()


def _awkward(name):
    return sg.csr_matrix(awkward_matrices(np.float64, np.int32, seed=3)[name])


@pytest.mark.parametrize(
    ("matrix", "expected"),
    [("power_law", "merge_path"), ("one_long_row", "merge_path"), ("random_200x150", "merge_path")],
)
def test_auto_chooses_from_the_mirror_statistics(fake_gpu, matrix, expected):
    fake_gpu(_FakeGpu("merge_path"), _FakeGpu("cusparse"))
    A = _awkward(matrix)
    assert sg.explain(A, np.float64).backend == expected


def test_auto_never_picks_a_backend_that_refuses_the_matrix(fake_gpu):
    fake_gpu(_FakeGpu("merge_path", refuse="too large"), _FakeGpu("cusparse"))
    A = _awkward("power_law")
    assert sg.explain(A, np.float64).backend == "cusparse"


def test_auto_falls_back_to_scipy_when_every_gpu_backend_refuses(fake_gpu):
    fake_gpu(_FakeGpu("merge_path", refuse="no"), _FakeGpu("cusparse", refuse="no"))
    A = _awkward("power_law")
    assert sg.explain(A, np.float64).backend == "scipy"


def _store_says(monkeypatch, name):
    """The tuning store measured ``name`` fastest for every matrix (when it is a candidate)."""
    monkeypatch.setattr(
        _select, "tuned_winner", lambda mirror, dtype, names, store: name if name in names else None
    )


def test_tuning_store_winner_beats_the_rules(fake_gpu, monkeypatch):
    fake_gpu(_FakeGpu("merge_path"), _FakeGpu("cusparse"))
    _store_says(monkeypatch, "cusparse")
    A = _awkward("power_law")
    choice = sg.explain(A)
    assert choice.backend == "cusparse"
    assert "tuning cache" in choice.reason


def test_store_winner_that_is_not_a_candidate_is_ignored(fake_gpu, monkeypatch):
    fake_gpu(_FakeGpu("merge_path"), _FakeGpu("cusparse"))
    _store_says(monkeypatch, "shuffle")
    assert sg.explain(_awkward("power_law")).backend == "merge_path"


def test_explain_shows_backend_policy_reason_and_statistics(fake_gpu):
    fake_gpu(_FakeGpu("merge_path"), _FakeGpu("cusparse"))
    text = str(sg.explain(_awkward("power_law")))
    assert "auto -> backend 'merge_path'" in text
    assert "NoPolicy" in text
    assert "irregular rows" in text
    assert "imbalance (max/mean)" in text
    assert "column spread 0." in text


def test_explain_notes_an_override(fake_gpu):
    fake_gpu(_FakeGpu("merge_path"), _FakeGpu("cusparse"))
    A = _awkward("power_law")
    A.backend = "scipy"
    assert "use 'scipy'" in str(sg.explain(A))


def test_explain_without_gpu_says_scipy_and_why(monkeypatch):
    monkeypatch.setattr(_select, "gpu_candidates", lambda dtype, family=None, storage=None: [])
    choice = sg.explain(_awkward("random_200x150"))
    assert choice.backend == "scipy"
    assert choice.stats is None


def test_explain_of_a_plain_scipy_matrix_is_a_type_error():
    with pytest.raises(TypeError, match="sparsegpu.csr_matrix"):
        sg.explain(sp.eye(3, format="csr"))


def test_auto_products_reach_the_chosen_backend(fake_gpu):
    counting = CountingBackend(HostCopyBackend(), name="merge_path")
    fake_gpu(counting, _FakeGpu("cusparse"))
    A = _awkward("power_law")
    x = random_vector(A.shape[1], np.float64, seed=1)
    for _ in range(3):
        y = A @ x
    assert counting.matvecs == 3
    assert_product_close(y, sp.csr_matrix(A) @ x, np.float64, 2000)


@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")
def test_cached_choice_is_dropped_when_the_matrix_changes(fake_gpu):
    fake_gpu(_FakeGpu("merge_path"), _FakeGpu("cusparse"))
    A = _awkward("random_200x150")
    x = random_vector(A.shape[1], np.float64, seed=2)
    before = A @ x
    A.data = A.data * 2
    assert_product_close(A @ x, 2 * before, np.float64, 20)
    A.sort_indices()
    A[0, 0] = 5.0
    assert_product_close(A @ x, sp.csr_matrix(A) @ x, np.float64, 20)


def test_cached_choice_follows_use_backend_and_policy(fake_gpu):
    counting = CountingBackend(HostCopyBackend(), name="merge_path")
    fake_gpu(counting, _FakeGpu("cusparse"))
    sg.register_backend(CountingBackend(HostCopyBackend(), name="counting-test"))
    try:
        A = _awkward("random_200x150")
        x = random_vector(A.shape[1], np.float64, seed=3)
        A @ x
        with sg.use_backend("counting-test"):
            A @ x
        A @ x
        assert counting.matvecs == 2
    finally:
        sg.unregister_backend("counting-test")


def test_tuning_lookups_do_not_decide_small_latency_bound_products(fake_gpu, monkeypatch):
    fake_gpu(_FakeGpu("merge_path"), _FakeGpu("cusparse"))
    _store_says(monkeypatch, "cusparse")
    A = _awkward("random_200x150")
    monkeypatch.setattr(_rules, "SMALL_ITEMS", 10**9)  # A is small: the rule decides
    assert sg.explain(A, np.float64).backend == "merge_path"
    monkeypatch.setattr(_rules, "SMALL_ITEMS", 0)  # A is large: the lookup decides
    _registry.invalidate_choices()
    B = _awkward("random_200x150")
    assert sg.explain(B, np.float64).backend == "cusparse"
