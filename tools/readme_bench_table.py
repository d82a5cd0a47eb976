"""Print the README's headline table from a ``sparsegpu bench --json`` file.

One row per matrix of the default GPU suite, float64 / float32 side by side: ``auto``'s
GB/s, its share of the device's copy bandwidth, its speed-up over the baseline (cuSPARSE
through sparsegpu's backend, descriptors reused) and over cupyx's ``A @ x``, and what
planning it by measurement cost. Paste the output over the README's table.

Usage::

    sparsegpu bench --dtypes float64,float32 --json docs/benchmarks/results/bench_h200.json \\
        --plot docs/benchmarks/results/bench_h200.png
    python tools/readme_bench_table.py docs/benchmarks/results/bench_h200.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# suite name -> the README's words for it, in the README's order
MATRICES = {
    "stencil2d_4096": "2-D 5-point stencil, 4096²",
    "stencil3d27_150": "3-D 27-point stencil, 150³",
    "long_20k_x2000": "20k rows x 2,000 per row",
    "l2_100k_x20": "100k x 20 (fits in L2)",
    "powerlaw_4M": "power-law rows, 4M rows",
    "uniform_4M_x16": "uniform random, 4M x 16",
}
DTYPES = ("float64", "float32")


def _pair(values, spec: str, suffix: str = "") -> str:
    return " / ".join("-" if v is None else f"{v:{spec}}{suffix}" for v in values)


def table(data: dict) -> str:
    ok = [r for r in data["results"] if r["status"] == "ok"]
    ms = {(r["matrix"], r["dtype"], r["backend"]): r for r in ok}
    lines = [
        "| matrix | sparsegpu `auto` | % of copy bandwidth | vs cuSPARSE (descriptors reused) "
        "| vs cupyx `A @ x` | planning (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, words in MATRICES.items():
        auto = [ms.get((name, dtype, "auto")) for dtype in DTYPES]
        if not any(auto):
            continue
        cupyx = [ms.get((name, dtype, "cupyx")) for dtype in DTYPES]
        vs_cupyx = [
            c["median_ms"] / a["median_ms"] if a and c else None
            for a, c in zip(auto, cupyx, strict=True)
        ]
        lines.append(
            f"| {words} | {_pair([a and a['gb_per_s'] for a in auto], ',.0f')} GB/s | "
            f"{_pair([a and a.get('percent_of_peak') for a in auto], '.0f', '%')} | "
            f"{_pair([a and a.get('speedup_vs_baseline') for a in auto], '.2f', 'x')} | "
            f"{_pair(vs_cupyx, '.2f', 'x')} | "
            f"{_pair([a and a.get('planning_ms') for a in auto], '.1f')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="a sparsegpu bench --json file")
    args = parser.parse_args(argv)
    print(table(json.loads(args.json.read_text())), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
