"""SpMV on rectangular matrices with a few very long rows among short ones (linear
programs' constraint matrices; issue 47): ``auto``, every merge-path tile shape and the
cusparse backend against cuSPARSE called directly (best of ALG1/ALG2), float64 and
float32.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spmv_rectangular --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

import sparsegpu as sg
from benchmarks.common import DirectSpMV
from sparsegpu import measure
from sparsegpu.backends.merge_path import MERGE_PATH_SHAPES, MergePathPolicy
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.device._mirror import CUPY


def instances() -> dict:
    """``{name: (set, builder)}``: about 21k x 10k, 0.5M nonzeros, a few long rows."""
    mix = synthetic.long_row_mix
    return {
        "lp_21k_x24_10k_4x5000": ("fit", lambda: mix(21_000, 10_000, 24, 0.8, 5_000, 4, seed=31)),
        "lp_18k_x28_12k_6x8000": ("fit", lambda: mix(18_000, 12_000, 28, 0.9, 8_000, 6, seed=32)),
        "lp_24k_x20_9k_3x9000": ("heldout", lambda: mix(24_000, 9_000, 20, 0.9, 9_000, 3, seed=41)),
        "lp_21k_x23_10k_8x4000": (
            "heldout",
            lambda: mix(21_000, 10_500, 23, 0.7, 4_000, 8, seed=42),
        ),
        "lp_30k_x16_15k_5x12000": (
            "heldout",
            lambda: mix(30_000, 15_000, 16, 1.0, 12_000, 5, seed=43),
        ),
    }


def run(name, group, build, dtype, cupy, cupyx_sparse) -> dict:
    Acx = cupyx_sparse.csr_matrix(build().astype(dtype))
    Acx.sum_duplicates()
    A = sg.csr_matrix(Acx)
    x = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, A.shape[1]).astype(dtype))
    reference = Acx @ x
    mirror = A._sg_mirror(CUPY, np.dtype(dtype))
    fns, directs = {}, []
    for algorithm in ("csr_alg1", "csr_alg2"):
        y = cupy.empty(A.shape[0], dtype=dtype)
        direct = DirectSpMV(mirror, x, y, algorithm)
        directs.append(direct)
        fns[f"raw_{algorithm}"] = direct
    for block, items in MERGE_PATH_SHAPES:
        policy = MergePathPolicy(block, items)
        fns[f"mp_{block}x{items}"] = lambda p=policy: sg.matvec(
            A, x, backend="merge_path", policy=p
        )
    fns["merge_path"] = lambda: sg.matvec(A, x, backend="merge_path")
    fns["cusparse"] = lambda: sg.matvec(A, x, backend="cusparse")
    planned = sg.csr_matrix(Acx)
    choice = sg.choose(planned, x)
    fns["auto"] = lambda: planned @ x
    scale = float(cupy.abs(reference).max())
    for key, fn in fns.items():
        out = fn()
        if out is not None:
            err = float(cupy.abs(out - reference).max())
            bound = (1e-3 if dtype == np.float32 else 1e-10) * scale
            assert err <= bound, (key, err)
    timings = measure.cuda_time_interleaved(fns, inner=20, repeat=15)
    for direct in directs:
        direct.close()
    ms = {k: t.median_ms for k, t in timings.items()}
    raw = min(ms["raw_csr_alg1"], ms["raw_csr_alg2"])
    stats = mirror.stats
    return {
        "set": group, "matrix": name, "dtype": np.dtype(dtype).name, "shape": list(A.shape),
        "nnz": int(A.nnz), "row_mean": stats.mean, "row_max": stats.max,
        "auto": f"{choice.backend} {choice.policy!r}", "auto_reason": choice.reason,
        "ms": ms, "vs_raw_best": {k: raw / v for k, v in ms.items()},
    }  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args(argv)
    if _cuda.unavailable_reason() is not None:
        print("needs a GPU", file=sys.stderr)
        return 2
    cupy = _cuda.cupy_or_none()
    import cupyx.scipy.sparse as cupyx_sparse

    rows = []
    for name, (group, build) in instances().items():
        for dtype in (np.float64, np.float32):
            row = run(name, group, build, np.dtype(dtype), cupy, cupyx_sparse)
            rows.append(row)
            ratios = row["vs_raw_best"]
            best = max((k for k in ratios if k.startswith("mp_")), key=ratios.get)
            print(
                f"{group} {name} {row['dtype']}: auto {ratios['auto']:.3f} ({row['auto']}), "
                f"merge_path default {ratios['merge_path']:.3f}, best shape {best} "
                f"{ratios[best]:.3f}, cusparse backend {ratios['cusparse']:.3f}"
            )
    if args.out:
        args.out.write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
