"""Which first calls of a multigrid user's session compile a kernel, and for how long.

A kernel CuPy or sparsegpu compiles (NVRTC) is cached on disk, so a user meets each
compilation once per machine; but the held-out multigrid run of issue 46 met a first
``ml.update`` of 3.57 s (amg_blocks_h200, anisotropic 1500^2) where its set-up took
0.06 s, after a warm-up that had run updates. This runs a user's session on the fit
instances of ``benchmarks.amg`` (set-up, solve, update twice, solve) from an empty kernel
cache (``CUPY_CACHE_DIR`` pointed at a new folder before CuPy loads), each step under
cProfile: its NVRTC compilations (calls of ``compileProgram``, and their seconds) are
counted from the profile, and a step over :data:`SLOW` seconds keeps the profile's text
(by own time: who asked for the compilations).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.first_call_compiles --out FILE.json --md FILE.md
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

DEFAULT_PROBLEMS = ("poisson3d", "anisotropic2d", "circuit2d")
SLOW = 0.5  # seconds: a step this slow keeps its host profile (cProfile)


def nvrtc_compiles(stats) -> tuple[int, float]:
    """``(calls, seconds)`` of NVRTC's ``compileProgram`` in a cProfile ``pstats.Stats``
    (CuPy's own kernels and sparsegpu's reach NVRTC through it)."""
    calls, seconds = 0, 0.0
    for (_, _, name), (_, count, own, _, _) in stats.stats.items():
        if "nvrtc" in name and "compileProgram" in name:
            calls, seconds = calls + count, seconds + own
    return calls, seconds


def session(name: str, size: int, compiles: list, sg, xp) -> list:
    """A user's session on one instance, each step's wall seconds and compilations (a
    step that compiled is added to ``compiles``)."""
    from benchmarks import amg
    from benchmarks.experiments.amg_cycle_profile import profile_text, profiled

    A_host, B = amg.make_problem(name, size, "fit")
    A_in = sg.bsr_matrix(A_host) if A_host.format == "bsr" else sg.csr_matrix(A_host)
    A = sg.csr_matrix(A_host.tocsr())
    b = xp.asarray(amg.right_hand_side(A.shape[0]))
    A_new = amg._new_values(A_host)
    state = {}
    steps = [
        ("set-up", lambda: state.setdefault("ml", sg.linalg.amg(A_in, B=B))),
        ("solve", lambda: sg.linalg.cg(A, b, rtol=amg.RTOL, M=state["ml"])),
        ("update", lambda: state["ml"].update(sg.csr_matrix(A_new))),
        ("update again", lambda: state["ml"].update(sg.csr_matrix(A_new))),
        ("solve again", lambda: sg.linalg.cg(A, b, rtol=amg.RTOL, M=state["ml"])),
    ]
    rows = []
    for step, fn in steps:
        label = f"{name}_{size} {step}"
        (_, stats), seconds = amg._timed(lambda fn=fn: profiled(fn), xp)
        calls, compiling = nvrtc_compiles(stats)
        if calls:
            compiles.append({"step": label, "calls": calls, "seconds": compiling})
        profile = profile_text(stats, top=12) if seconds > SLOW else None
        rows.append({"step": label, "seconds": seconds, "compiles": calls,
                     "compile_s": compiling, "profile": profile})  # fmt: skip
    return rows


def markdown(result: dict) -> str:
    lines = ["| step | seconds | compilations | compiling s |", "|---|---:|---:|---:|"]
    for row in result["steps"]:
        counted = "— | —"  # not counted (a run of the first version of this probe)
        if row["compiles"] is not None:
            counted = f"{row['compiles']} | {row['compile_s']:.3f}"
        lines.append(f"| {row['step']} | {row['seconds']:.4f} | {counted} |")
    for row in result["steps"]:
        if row.get("profile"):
            lines += ["", f"{row['step']} ({row['seconds']:.2f} s), host profile:", "", "```",
                      row["profile"].strip(), "```"]  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=",".join(DEFAULT_PROBLEMS))
    parser.add_argument("--set", default="fit", choices=["fit", "smoke"],
                        help="instances (never the held-out ones)")  # fmt: skip
    parser.add_argument("--out", help="JSON result file")
    parser.add_argument("--md", help="markdown file")
    args = parser.parse_args(argv)
    if "cupy" not in sys.modules:  # an empty kernel cache, before CuPy reads where it is
        os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupy-cache-")
    import sparsegpu as sg
    from benchmarks import amg, common

    compiles: list = []
    xp = amg._device()
    if xp is np:
        print("no GPU: nothing compiles (the steps run on the scipy backend)")
    wanted = args.problems.split(",")
    result = {"set": args.set, "steps": [], "compiles": compiles}
    for name, size in amg.SETS[args.set]:
        if name in wanted:
            result["steps"] += session(name, size, compiles, sg, xp)
            common.save_partial(result, args.out)
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
