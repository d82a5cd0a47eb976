"""The V-cycle profile (benchmarks/experiments/amg_cycle_profile.py) on the CPU: it
runs on the smoke instances, counts each level's launches as the cycle makes them, and
its level times add up (the numbers themselves mean something only on a GPU)."""

from __future__ import annotations

import json

import pytest

from benchmarks.experiments import amg_cycle_profile as profile

# the problems come from PyAMG's gallery, and the warm-up builds one (benchmarks/amg.py)
pytest.importorskip("pyamg", reason="the profile's problems are PyAMG's (the amg extra)")


def test_the_profile_counts_each_levels_launches(tmp_path):
    out, md = tmp_path / "p.json", tmp_path / "p.md"
    code = profile.main(
        ["--set", "smoke", "--problems", "circuit2d,poisson3d", "--repeat", "2", "--blocks",
         "--setups", "1", "--variants", "max_coarse 100", "--out", str(out), "--md", str(md)]
    )  # fmt: skip
    assert code == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["problem"] for r in rows] == ["poisson3d_24", "circuit2d_40"]
    for row in rows:
        levels = row["levels"]
        assert row["relative_residual"] <= 1e-8 and row["iterations"] > 0
        # a smoothed level (Chebyshev of degree 3 before and after): 5 launches to
        # pre-smooth from zero, A x and the residual, R, P and the add, 6 to post-smooth
        assert [lv["launches"] for lv in levels] == [16] * (len(levels) - 1) + [1]
        assert "spmv_ms" not in levels[-1] and all("spmv_ms" in lv for lv in levels[:-1])
        for upper, lower in zip(levels, levels[1:], strict=False):
            assert upper["inclusive_ms"] >= lower["inclusive_ms"]
            assert abs(upper["own_ms"] - (upper["inclusive_ms"] - lower["inclusive_ms"])) < 1e-9
        # each preconditioner's solve under each blocking, the same iterations
        blocked = row["blockings"]
        assert [(r["M"], r["blocking"]) for r in blocked] == [
            (m, b) for m in ("amg", "jacobi") for b in profile.BLOCKINGS
        ]
        assert len({r["iterations"] for r in blocked if r["M"] == "amg"}) == 1
        assert [v["variant"] for v in row["variants"]] == ["default", "max_coarse 100"]
        assert (
            len(row["setups"]["seconds"]) == 1
            and "function calls" in row["setups"]["slowest_profile"]
        )
    text = md.read_text()
    assert "| level | rows |" in text and "| M | blocking |" in text and "| variant |" in text


def test_the_profile_refuses_the_held_out_set():
    import pytest

    with pytest.raises(SystemExit):
        profile.main(["--set", "heldout"])
