"""benchmarks/blocks.py on the CPU: its matrices, summary (the issue-35 bars) and markdown,
on fake rows shaped like a real run's."""

from __future__ import annotations

import pytest

from benchmarks import blocks
from sparsegpu.backends.block import host_block_structure


@pytest.fixture(scope="module")
def script():
    return blocks


def fake_row(
    script, matrix, set_label, dtype, unknowns, csr, block, auto, choice="block", bound=60.0
):
    """A result row with the fields bench_one writes; times in ms."""
    best = {"candidate": "block BlockPolicy()", "ms": block}
    return {
        "set": set_label, "matrix": matrix, "unknowns": unknowns, "dtype": dtype,
        "n_rows": 300, "nnz": 8100, "block_size": max(unknowns, 2), "fill": 1.0,
        "byte_ratio": 0.7, "planning_refusal": None,
        "csr_best": {"candidate": "shuffle CsrVectorPolicy()", "ms": csr},
        "ours_csr_best": {"candidate": "shuffle CsrVectorPolicy()", "ms": csr},
        "delta16": None, "cusparse_bsr": {"candidate": "cusparse_bsr default", "ms": block * 1.5},
        "block_default": best, "block_best": best,
        "auto": {"candidate": f"auto -> {choice}", "ms": auto}, "auto_choice": choice,
        "ratio_default": csr / block, "ratio_best": csr / block, "ratio_auto": csr / auto,
        "block_default_pct_bound": 60.0, "block_best_pct_bound": 60.0, "auto_pct_bound": bound,
    }  # fmt: skip


def test_small_matrices_are_what_their_names_say(script):
    for set_label, name, unknowns, make in script.matrices("small"):
        structure = host_block_structure(make())
        if set_label == "negative":
            assert structure.refuse_reason() is not None, name
        else:
            assert (structure.size, structure.fill(structure.size)) == (unknowns, 1.0), name


def test_summary_applies_the_bars_per_dtype_and_block_size(script):
    rows = [
        fake_row(script, "b3", "heldout", "float64", 3, csr=1.3, block=1.0, auto=1.0, bound=91),
        fake_row(script, "b2", "heldout", "float64", 2, csr=1.1, block=1.0, auto=1.0),
        fake_row(script, "b3", "heldout", "float32", 3, csr=1.1, block=1.0, auto=1.0),
        fake_row(script, "neg", "negative", "float64", 0, 1.0, 2.0, 1.0, choice="shuffle"),
        fake_row(script, "fit", "fit", "float64", 3, csr=0.5, block=1.0, auto=1.0),
    ]
    summary = script.summarize(rows)
    assert summary["heldout float64"]["meets_bar_auto"] == ["b3"]  # 2x2 not held to it
    assert summary["heldout float32"]["misses_bar_auto"] == ["b3"]
    # the byte bound: auto's where it picks the layout (91%), the untuned policy's beside it
    assert summary["heldout float64"]["bound_bar_met"]
    assert summary["heldout float64"]["best_pct_bound_auto"] == 91
    assert summary["heldout float64"]["best_pct_bound"] == 60.0
    assert not summary["heldout float32"]["bound_bar_met"]
    assert "dev float64" not in summary
    assert summary["auto_picks_block_where_it_wins"]
    # the fit row: auto picked a block layout twice as slow as CSR
    assert not summary["auto_never_picks_block_where_it_loses"]
    text = script.markdown({"device": "X", "copy_gb_per_s": 3000.0, "results": rows,
                            "summary": summary})  # fmt: skip
    assert "| heldout | b3 | float64 | 8,100 | 3 | 100% | shuffle | 1300.0 |" in text
    assert "| block | 1000.0 | 1.30 | 91% |" in text and "| shuffle | 1000.0 | 1.00 | — |" in text


def test_planning_times_are_each_backends_fastest(script):
    class M:
        def __init__(self, backend, ms):
            self.backend, self.ms = backend, ms

    measured = [M("block", 0.12), M("block", 0.10), M("block", 0.15), M("shuffle", None)]
    assert script._fastest_by_backend(measured + [M("shuffle", 0.2)]) == {
        "block": 0.10, "shuffle": 0.2,
    }  # fmt: skip


def test_a_faster_path_than_the_layout_is_no_missed_win(script):
    # the layout beats CSR by 1.3x; auto picked delta16, faster still (a policy other than
    # the screened one): not a miss. Had it picked a slower path, it would be one.
    faster = fake_row(script, "b2", "fit", "float32", 2, 1.3, 1.0, 0.9, choice="delta16")
    slower = fake_row(script, "b2", "fit", "float32", 2, 1.3, 1.0, 1.2, choice="shuffle")
    assert script.summarize([faster])["auto_picks_block_where_it_wins"]
    assert not script.summarize([faster, slower])["auto_picks_block_where_it_wins"]
