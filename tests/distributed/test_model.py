"""The cost model and the import without MPI (no mpiexec needed: runs in the main suite)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import sparsegpu.distributed as sgd


def test_cost_model_is_the_documented_formula():
    est = sgd.cost_model(
        10**9, 10**8, 4, halo_bytes=4 * 10**6, neighbours=2, product_rate=1e11,
        bandwidth=1e10, latency=1e-5, allreduce_latency=1e-6,
    )  # fmt: skip
    assert est.product_s == pytest.approx(10**9 / (4 * 1e11) + 4e6 / 1e10 + 2e-5)
    single = sgd.cost_model(10**9, 10**8, 1, halo_bytes=4 * 10**6, neighbours=2)
    assert single.communication_fraction == 0 and single.speedup == pytest.approx(1.0)


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
    with pytest.raises(ImportError, match=r"pip install 'sparsegpu\[mpi\]'"):
        sgd.csr_matrix(None)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "distributed.rst"


def _table_after(text: str, title: str) -> list[list[str]]:
    """The data rows of the first simple rst table after ``title``."""
    block = text.split(title, 1)[1].split("\n\n", 2)[1]
    return [line.split() for line in block.splitlines() if line[:1].isdigit()]


@pytest.mark.skipif(not DOCS.exists(), reason="the docs are not part of this checkout")
def test_the_docs_scaling_tables_are_the_models_output():
    text = DOCS.read_text()
    n = 512
    for ranks, product, iteration, comm, speedup in _table_after(text, "Strong scaling"):
        halo, neighbours = sgd.stencil_halo(n, int(ranks))
        est = sgd.cost_model(7 * n**3, n**3, int(ranks), halo_bytes=halo, neighbours=neighbours)
        assert f"{est.product_s * 1e3:.3f}" == product, ranks
        assert f"{est.cg_iteration_s * 1e3:.3f}" == iteration, ranks
        assert f"{100 * est.communication_fraction:.1f}" == comm, ranks
        assert f"{est.speedup:.1f}" == speedup, ranks
    for ranks, grid, product, iteration, comm in _table_after(text, "Weak scaling"):
        rows = int(ranks) * 2**24
        n = round(rows ** (1 / 3))
        assert grid == f"{n}³"
        halo, neighbours = sgd.stencil_halo(n, int(ranks))
        est = sgd.cost_model(7 * rows, rows, int(ranks), halo_bytes=halo, neighbours=neighbours)
        assert f"{est.product_s * 1e3:.3f}" == product, ranks
        assert f"{est.cg_iteration_s * 1e3:.3f}" == iteration, ranks
        assert f"{100 * est.communication_fraction:.1f}" == comm, ranks
