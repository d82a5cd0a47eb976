"""The A @ X host-path experiments (benchmarks/experiments/spmm_host_path.py and
spmm_host_parts.py) on the CPU: their tables read the results they are given."""

from __future__ import annotations

import pytest

from benchmarks.experiments import spmm_host_parts, spmm_host_path


@pytest.fixture(scope="module")
def path_script():
    return spmm_host_path


@pytest.fixture(scope="module")
def parts_script():
    return spmm_host_parts


def test_the_path_table_puts_each_contender_in_its_column(path_script):
    row = {
        "matrix": "m", "dtype": "float64", "order": "F", "k": 8, "auto": "shuffle P(x=1)",
        "host_us": {"A @ X": 14.0, "plan(out=Y)": 10.0, "plan._matmat": 8.0,
                    "cusparse csr_alg1": 9.0, "cusparse csr_alg3": 6.0},
        "loop_us": {"A @ X": 14.5, "plan(out=Y)": 10.5, "plan._matmat": 8.5,
                    "cusparse csr_alg1": 9.5, "cusparse csr_alg3": 6.5},
        "gpu_us": {"plan(out=Y)": 2.5, "cusparse csr_alg1": None, "cusparse csr_alg3": 3.0},
    }  # fmt: skip
    text = path_script.markdown({"device": "GPU", "results": [row]})
    assert (
        "| m | float64 | F | 8 | shuffle P | 14.0 / 14.5 | 10.0 / 10.5 / 2.5 | 8.0 | "
        "6.0 / 6.5 / 3.0 csr_alg3 |" in text
    )


def test_the_parts_table_keeps_the_steps_in_order(parts_script):
    result = {
        "device": "GPU", "matrix": "m float64 C", "k": 8,
        "parts_us": {"driver.launchKernel": [5.5, 6.0], "A @ X": [14.0, 14.5]},
    }  # fmt: skip
    lines = [line for line in parts_script.markdown(result).splitlines() if line.startswith("| `")]
    assert lines == ["| `driver.launchKernel` | 5.50 | 6.00 |", "| `A @ X` | 14.00 | 14.50 |"]
