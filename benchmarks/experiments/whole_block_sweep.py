"""The whole-block kernel's knobs on 3 x 3 block meshes (issue 35's float64 bar).

Float64 natural-order 2-D 3 x 3 meshes ran at 1.24-1.247x the best CSR path where the bar
is 1.25x, while 3-D ones reach 96% of the layout's byte bound. This times every
combination of the whole-block kernel's knobs on the fit and dev matrices, to choose
what planning should time; nothing here is claimed:

- lanes per block row (1, 2, 4, 8, 16), threads per CUDA block (128, 256);
- blocks read evict-first (``__ldcs``) or through L1 (``cache_blocks``);
- the compiler's registers uncapped (the launch bound: 80 a thread for 3 x 3) or capped
  at 64 (more warps in flight, a few spills), or at most 384 bytes of block values and x
  entries in flight per lane in place of 256 (``SPARSEGPU_WHOLE_BYTES``; ``unroll`` 8, so
  the byte cap decides: 3 blocks of 3 x 3 in float64 in place of 2, 124 registers).

Each variant is screened alone (median of 7), then the 8 fastest, the untuned policy and
cuSPARSE CSR (ALG1, ALG2, called directly) are timed together in alternation (median of
21), every answer checked against cuSPARSE's.

Matrices (``blocks.py``'s names): ``fit`` mesh_b3_n30; ``dev`` mesh_b3_n50 and
mesh_b3_n44_random; ``dev2``, new in this run (2-D 3 x 3 meshes, the class of the bar):
mesh2d_b3_n680 (natural order) and mesh2d_b3_n640_random.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.whole_block_sweep --out sweep.json --md sweep.md
    python -m benchmarks.experiments.whole_block_sweep --from-json sweep.json --md sweep.md
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

import sparsegpu as sg
from benchmarks import common
from sparsegpu import measure
from sparsegpu.backends import block
from sparsegpu.device._mirror import CUPY, PlanKey

TOP = 8


@dataclasses.dataclass(frozen=True)
class SweepPolicy(block.BlockPolicy):
    """A block policy with the whole-block kernel's byte cap in flight as a knob."""

    in_flight_bytes: int = 256

    def compile_options(self) -> tuple[str, ...]:
        extra = (f"-DSPARSEGPU_WHOLE_BYTES={self.in_flight_bytes}",)
        return super().compile_options() + (extra if self.in_flight_bytes != 256 else ())


# blocks' 3 x 3 meshes the sweep ran on (fit, dev and dev2)
SWEPT = ("mesh_b3_n30", "mesh_b3_n50", "mesh_b3_n44_random", "mesh2d_b3_n680",
         "mesh2d_b3_n640_random")  # fmt: skip


def matrices() -> list:
    """``(set, name, builder)`` of :data:`SWEPT`, from ``common.block_meshes("full")``."""
    return [(s, name, make) for s, name, _, make in common.pick(common.block_meshes("full"), SWEPT)]


def variants(dtype) -> list:
    out = []
    for lanes in (1, 2, 4, 8, 16):
        for block_size in (128, 256):
            for cached in (False, True):
                for cap, nbytes in ((None, 256), (64, 256), (None, 384)):
                    out.append(
                            SweepPolicy(
                                block_size, lanes, 8, cap, whole_blocks=True,
                                cache_blocks=cached, in_flight_bytes=nbytes,
                            )
                        )  # fmt: skip
    return out


def bench_one(set_label, name, S, dtype, cupy) -> dict:
    S = S.astype(dtype)
    S.indices = S.indices.astype(np.int32)
    S.indptr = S.indptr.astype(np.int32)
    A = sg.csr_matrix(S)
    x = cupy.asarray(np.random.default_rng(1).standard_normal(S.shape[1]).astype(dtype))
    y = cupy.empty(S.shape[0], dtype=dtype)
    expected = cupy.empty_like(y)
    mirror = A._sg_mirror(CUPY, np.dtype(dtype))
    backend = block.BlockBackend()
    untuned = backend.default_policy(mirror)
    directs = [common.DirectSpMV(mirror, x, expected, a) for a in ("csr_alg1", "csr_alg2")]
    try:
        directs[0]()
        expected = expected.copy()
        scale = max(float(cupy.abs(expected).max()), 1.0)
        tol = 64 * np.finfo(dtype).eps * scale * int(mirror.stats.max)
        calls = {f"cusparse_csr {a}": d for a, d in zip(("alg1", "alg2"), directs, strict=True)}
        screen = {}
        for policy in [untuned, *variants(dtype)]:
            key = "untuned" if policy is untuned else repr(policy)
            plan = mirror.get_plan(
                PlanKey("block", policy), lambda p=policy: backend.plan(mirror, p)
            )
            y.fill(0)
            plan.matvec(x, out=y)
            error = float(cupy.abs(y - expected).max())
            if not error <= tol:
                raise AssertionError(f"{name} {dtype}: {key} is off by {error:.3e}")
            calls[key] = lambda plan=plan: plan.matvec(x, out=y)
            screen[key] = measure.cuda_time(calls[key], warmup=2, repeat=7).median_ms
        finalists = sorted(screen, key=screen.get)[:TOP]
        chosen = {k: calls[k] for k in dict.fromkeys(
            ["untuned", *finalists, "cusparse_csr alg1", "cusparse_csr alg2"])}  # fmt: skip
        final = measure.cuda_time_interleaved(chosen, warmup=3, repeat=21)
        final = {k: t.median_ms for k, t in final.items()}
    finally:
        for d in directs:
            d.close()
    cusparse = min(final["cusparse_csr alg1"], final["cusparse_csr alg2"])
    best = min((k for k in final if not k.startswith("cusparse")), key=final.get)
    return {
        "set": set_label, "matrix": name, "dtype": np.dtype(dtype).name, "nnz": int(S.nnz),
        "untuned": repr(untuned), "screen_ms": screen, "final_ms": final,
        "best": best, "untuned_over_cusparse": cusparse / final["untuned"],
        "best_over_cusparse": cusparse / final[best],
    }  # fmt: skip


def _short(key: str) -> str:
    """A variant's knobs in a few words (``untuned`` and cuSPARSE as they are)."""
    if not key.startswith("SweepPolicy"):
        return key
    knobs = dict(part.split("=", 1) for part in key[key.index("(") + 1 : -1].split(", "))
    words = [
        f"{knobs['threads_per_block_row']} lanes",
        f"{knobs['block_size']} threads",
        "L1" if knobs["cache_blocks"] == "True" else "evict-first",
    ]
    if knobs["max_registers"] != "None":
        words.append(f"{knobs['max_registers']} registers")
    if knobs["in_flight_bytes"] != "256":
        words.append(f"{knobs['in_flight_bytes']} bytes in flight")
    return ", ".join(words)


def markdown(result) -> str:
    lines = [
        f"# The whole-block kernel's knobs on 3 x 3 meshes — {result['device']}",
        "",
        "Median of 21 CUDA-event samples in alternation (us), the 8 fastest of 60 screened "
        "variants with the untuned policy and cuSPARSE CSR called directly; `vs untuned` is "
        "the untuned time over the variant's. An experiment: nothing here is claimed.",
        "",
        "| set | matrix | dtype | variant | us | vs untuned |",
        "|---|---|---|---|---:|---:|",
    ]
    for r in result["results"]:
        final = r["final_ms"]
        for key in sorted(final, key=final.get):
            lines.append(
                f"| {r['set']} | {r['matrix']} | {r['dtype']} | {_short(key)} | "
                f"{final[key] * 1e3:.1f} | {final['untuned'] / final[key]:.3f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False))
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--only", help="comma-separated substrings of matrix names")
    args = parser.parse_args(argv)
    cupy, status = common.begin(args, lambda rows: None, markdown, None)
    if cupy is None:
        return status
    result = common.gpu_header("full")
    for set_label, name, make in matrices():
        if args.only and not any(w in name for w in args.only.split(",")):
            continue
        S = make()
        for dtype in args.dtypes.split(","):
            print(f"{name} {dtype}", file=sys.stderr, flush=True)
            row = bench_one(set_label, name, S, np.dtype(dtype), cupy)
            result["results"].append(row)
            common.save_partial(result, args.out)
            cupy.get_default_memory_pool().free_all_blocks()
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
