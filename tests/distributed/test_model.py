"""The cost model and the import without MPI (no mpiexec needed: runs in the main suite)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu.distributed as sgd
from sparsegpu.distributed import _partition, _transport_choice


def test_cost_model_is_the_documented_formula():
    common = dict(halo_bytes=4 * 10**6, neighbours=2, product_rate=1e11, bandwidth=1e10,
                  latency=1e-5, allreduce_latency=1e-6, overhead=2e-6)  # fmt: skip
    local, exchange = 10**9 / (4 * 1e11), 1e-5 + 4e6 / 1e10
    hidden = sgd.cost_model(10**9, 10**8, 4, **common)
    assert hidden.product_s == pytest.approx(max(local, exchange) + 2e-6)
    after = sgd.cost_model(10**9, 10**8, 4, overlap=False, **common)
    assert after.product_s == pytest.approx(local + exchange + 2e-6)
    vectors = 15 * 8 * 10**8 / (4 * 4e12)
    assert hidden.cg_iteration_s == pytest.approx(hidden.product_s + vectors + 2 * 2 * 1e-6)
    single = sgd.cost_model(10**9, 10**8, 1, halo_bytes=4 * 10**6, neighbours=2)
    assert single.communication_fraction == 0 and single.speedup == pytest.approx(1.0)


def test_past_a_node_the_halo_and_the_reductions_cross_the_network():
    inside = dict(halo_bytes=10**6, neighbours=2, bandwidth=1e11, latency=1e-6,
                  allreduce_latency=1e-6)  # fmt: skip
    network = dict(gpus_per_node=8, network_bandwidth=1e10, network_latency=5e-6,
                   network_allreduce_latency=1e-5)  # fmt: skip
    eight = sgd.cost_model(10**7, 10**6, 8, **inside, **network)
    assert eight.product_s == pytest.approx(max(10**7 / (8 * 3e11), 1e-6 + 1e-5))
    sixty_four = sgd.cost_model(10**7, 10**6, 64, **inside, **network)
    assert sixty_four.product_s == pytest.approx(max(10**7 / (64 * 3e11), 5e-6 + 1e-4))
    vectors = 15 * 8 * 10**6 / (64 * 4e12)
    reduce = 1e-6 * 3 + 1e-5 * 3
    assert sixty_four.cg_iteration_s == pytest.approx(sixty_four.product_s + vectors + 2 * reduce)
    with pytest.raises(ValueError, match="all four"):
        sgd.cost_model(1, 1, 2, halo_bytes=0, neighbours=0, gpus_per_node=8)


def test_more_ranks_never_predict_a_slower_product_for_a_fixed_halo():
    times = [
        sgd.cost_model(10**9, 10**8, p, halo_bytes=10**6, neighbours=2).product_s
        for p in (2, 8, 64, 1024)
    ]
    assert times == sorted(times, reverse=True)


def test_stencil_halo_switches_to_thin_blocks():
    assert sgd.stencil_halo(100, 1) == (0, 0)
    assert sgd.stencil_halo(100, 50) == (2 * 100 * 100 * 8, 2)
    assert sgd.stencil_halo(100, 1000)[1] == 6


def test_cost_model_refuses_zero_ranks():
    with pytest.raises(ValueError, match="ranks must be at least 1, got 0"):
        sgd.cost_model(1, 1, 0, halo_bytes=0, neighbours=0)


@pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is not None, reason="mpi4py is installed here"
)
def test_without_mpi4py_the_constructor_says_how_to_install_it():
    with pytest.raises(ImportError, match=r'pip install -e "\.\[mpi\]" from the clone'):
        sgd.csr_matrix(None)


ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "distributed.rst"
RESULT = ROOT / "docs" / "benchmarks" / "results" / "distributed_scaling_h100x2.json"


def _table_after(text: str, title: str) -> list[list[str]]:
    """The data rows of the first simple rst table after ``title``."""
    block = text.split(title, 1)[1].split("\n\n", 2)[1]
    return [line.split() for line in block.splitlines() if line[:1].isdigit()]


def _docs_fit(text: str) -> sgd.Fit:
    """The ``sgd.Fit(...)`` of the page's code block."""
    call = re.search(r"sgd\.Fit\((.*?)\)", text, re.DOTALL).group(1)
    return sgd.Fit(**{k: float(v) for k, v in re.findall(r"(\w+)=([-+.e\d]+)", call)})


@pytest.mark.skipif(not DOCS.exists(), reason="the docs are not part of this checkout")
def test_the_docs_fit_is_the_committed_runs():
    fitted = sgd.fit_cost_model(json.loads(RESULT.read_text()))
    shown = _docs_fit(DOCS.read_text())
    for name in ("product_rate", "vector_rate", "bandwidth", "latency", "overhead",
                 "allreduce_latency"):  # fmt: skip
        assert getattr(shown, name) == pytest.approx(getattr(fitted, name), rel=1e-3), name


@pytest.mark.skipif(not DOCS.exists(), reason="the docs are not part of this checkout")
def test_the_docs_prediction_tables_are_the_models_output():
    text = DOCS.read_text()
    fit = _docs_fit(text)
    for title, grid in (("strong scaling of the 256³ stencil", 256),
                        ("strong scaling of a matrix sized for 8 GPUs", 512)):  # fmt: skip
        rows = _table_after(text, title)
        assert rows, title
        for ranks, product, iteration, comm, speedup in rows:
            est = sgd.predict(fit, "strong", int(ranks), grid=grid)
            assert f"{est.product_s * 1e3:.3f}" == product, (title, ranks)
            assert f"{est.cg_iteration_s * 1e3:.3f}" == iteration, (title, ranks)
            assert f"{100 * est.communication_fraction:.1f}" == comm, (title, ranks)
            assert f"{est.speedup:.2f}" == speedup, (title, ranks)
    one = sgd.predict(fit, "weak", 1, weak_rows=4194304)
    rows = _table_after(text, "weak scaling, 4,194,304 rows a GPU")
    assert rows
    for ranks, grid, product, iteration, product_eff, cg_eff in rows:
        est = sgd.predict(fit, "weak", int(ranks), weak_rows=4194304)
        assert grid == f"{round((int(ranks) * 4194304) ** (1 / 3))}³", ranks
        assert f"{est.product_s * 1e3:.3f}" == product, ranks
        assert f"{est.cg_iteration_s * 1e3:.3f}" == iteration, ranks
        assert f"{one.product_s / est.product_s:.2f}" == product_eff, ranks
        assert f"{one.cg_iteration_s / est.cg_iteration_s:.2f}" == cg_eff, ranks


def test_the_fit_reproduces_the_runs_it_was_fitted_on():
    result = json.loads(RESULT.read_text())
    fit = sgd.fit_cost_model(result)
    strong = next(e for e in result["matrices"] if e["kind"] == "strong")
    two = next(r for r in strong["distributed"] if r["ranks"] == 2)
    est = sgd.predict(fit, "strong", 2, grid=strong["grid"])
    assert est.product_s * 1e3 == pytest.approx(two["product_ms"], rel=0.05)
    assert est.cg_iteration_s * 1e3 == pytest.approx(two["cg_iteration_ms"], rel=0.05)


# ------------------------------------------------------------- choosing a transport
def _table(*rows):
    """Rank records as choose() gathers them: (on device, NCCL, CUDA-aware, node, GPU)."""
    return np.array(rows, dtype=np.int64)


@pytest.mark.parametrize(
    ("rows", "nccl", "aware"),
    [
        pytest.param([(1, 1, 0, 7, 1), (1, 1, 0, 7, 2)], None, "not CUDA-aware on rank(s) [0, 1]",
                     id="one-gpu-a-rank"),
        pytest.param([(1, 1, 1, 7, 1), (1, 1, 1, 7, 1)], "ranks 0 and 1 share one GPU", None,
                     id="shared-gpu"),
        pytest.param([(1, 1, 1, 7, 1), (1, 1, 1, 8, 1)], None, None, id="same-bus-other-node"),
        pytest.param([(1, 0, 0, 7, 1), (1, 1, 0, 7, 2)], "no NCCL on rank(s) [0]",
                     "not CUDA-aware", id="no-nccl"),
        pytest.param([(0, 0, 0, 7, 0), (1, 1, 1, 7, 2)], "vectors live on the host on rank(s) [0]",
                     "vectors live on the host", id="host-vectors"),
    ],
)  # fmt: skip
def test_which_device_transports_can_run(rows, nccl, aware):
    refusals = _transport_choice._refusals(_table(*rows), {})
    for name, expected in (("nccl", nccl), ("cuda-aware-mpi", aware)):
        if expected is None:
            assert refusals[name] is None, name
        else:
            assert expected in refusals[name], name


def test_transport_names_come_from_the_argument_then_the_environment(monkeypatch):
    monkeypatch.delenv(sgd.ENV_TRANSPORT, raising=False)
    assert _transport_choice.resolve_name(None) == "auto"
    monkeypatch.setenv(sgd.ENV_TRANSPORT, "host")
    assert _transport_choice.resolve_name(None) == "host"
    assert _transport_choice.resolve_name("nccl") == "nccl"
    monkeypatch.setenv(sgd.ENV_TRANSPORT, "tcp")
    with pytest.raises(ValueError, match="SPARSEGPU_TRANSPORT must be one of 'auto', 'nccl'"):
        _transport_choice.resolve_name(None)


# ---------------------------------------------------------------- partitions
def test_a_permutation_renumbers_rows_and_columns_alike():
    S = sp.random(30, 30, density=0.2, random_state=1, format="csr") + sp.eye(30)
    order = np.random.default_rng(2).permutation(30)
    permuted = _partition.permute(sp.csr_matrix(S), order)
    np.testing.assert_array_equal(permuted.toarray(), S.toarray()[np.ix_(order, order)])
    assert permuted.has_sorted_indices


def test_a_graph_order_keeps_parts_contiguous_and_balanced():
    pytest.importorskip("pymetis")
    from sparsegpu.datasets.synthetic import permuted, stencil_2d

    S = permuted(stencil_2d(40), seed=3)
    order, offsets, note = _partition.graph_order(S, 4)
    assert sorted(order.tolist()) == list(range(S.shape[0]))
    assert offsets[0] == 0 and offsets[-1] == S.shape[0] and note.startswith("graph: METIS")
    assert np.diff(offsets).max() < 1.1 * S.shape[0] / 4
