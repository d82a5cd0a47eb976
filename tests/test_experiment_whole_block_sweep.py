"""The whole-block sweep (benchmarks/experiments/whole_block_sweep.py) on the CPU: its
variants compile with the knobs they name, and its table reads them back."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.experiments import whole_block_sweep


@pytest.fixture(scope="module")
def script():
    return whole_block_sweep


def test_each_variant_compiles_with_the_knobs_it_names(script):
    variants = script.variants(np.float64)
    assert len(variants) == len(set(variants)) == 60
    assert all(v.whole_blocks and v.unroll == 8 for v in variants)
    wide = [v for v in variants if v.in_flight_bytes == 384]
    assert wide and all("-DSPARSEGPU_WHOLE_BYTES=384" in v.compile_options() for v in wide)
    plain = [v for v in variants if v.in_flight_bytes == 256]
    assert not any(
        o.startswith("-DSPARSEGPU_WHOLE_BYTES") for v in plain for o in v.compile_options()
    )
    cached = [v for v in variants if v.cache_blocks]
    assert len(cached) == 30 and all(
        "-DSPARSEGPU_BLOCK_CACHED" in v.compile_options() for v in cached
    )


def test_the_table_names_each_variant_and_orders_them(script):
    policy = script.SweepPolicy(
        128, 8, 8, 64, whole_blocks=True, cache_blocks=True, in_flight_bytes=384
    )
    row = {
        "set": "dev2", "matrix": "m", "dtype": "float64",
        "final_ms": {"untuned": 0.2, repr(policy): 0.1, "cusparse_csr alg1": 0.4},
    }  # fmt: skip
    text = script.markdown({"device": "GPU", "results": [row]})
    lines = [line for line in text.splitlines() if line.startswith("| dev2")]
    assert lines == [
        "| dev2 | m | float64 | 8 lanes, 128 threads, L1, 64 registers, 384 bytes in flight "
        "| 100.0 | 2.000 |",
        "| dev2 | m | float64 | untuned | 200.0 | 1.000 |",
        "| dev2 | m | float64 | cusparse_csr alg1 | 400.0 | 0.500 |",
    ]
