"""The count-ahead experiment (benchmarks/experiments/spgemm_count_ahead.py) on the CPU:
its table and the switch that turns the count ahead off and back on."""

from __future__ import annotations

from benchmarks.experiments import spgemm_count_ahead
from sparsegpu.backends.hash_spgemm import GpuSpgemm


def test_the_table_reads_each_side_against_cupyx():
    row = {"matrix": "powerlaw", "ran": "alg1", "ahead_ms": 1.5, "waited_ms": 1.6, "cupyx_ms": 1.2}
    result = {"device": "GPU", "command": "cmd", "rows": [row], "note": "Reading: fit only."}
    text = spgemm_count_ahead.markdown(result)
    assert "| powerlaw | alg1 | 1.500 | 1.600 | 1.200 | 0.800x | 0.750x |" in text
    assert text.rstrip().endswith("Reading: fit only.")


def test_the_switch_restores_the_engine():
    real = GpuSpgemm.products_ahead
    with spgemm_count_ahead._count_ahead(False):
        assert GpuSpgemm().products_ahead(None, None) is None
    assert GpuSpgemm.products_ahead is real
    with spgemm_count_ahead._count_ahead(True):
        assert GpuSpgemm.products_ahead is real
