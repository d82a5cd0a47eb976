"""Which first calls of a multigrid user's session compile a kernel, and for how long.

A kernel CuPy or sparsegpu compiles (NVRTC) is cached on disk, so a user meets each
compilation once per machine; but the held-out multigrid run of issue 46 met a first
``ml.update`` of 3.57 s (amg_blocks_h200, anisotropic 1500^2) where its set-up took
0.06 s, after a warm-up that had run updates. This runs a user's session on the fit
instances of ``benchmarks.amg`` (set-up, solve, update twice, solve) from an empty kernel
cache (``CUPY_CACHE_DIR`` pointed at a new folder before CuPy loads) and records every
NVRTC compilation: the step it fell in, its seconds, the CuPy or sparsegpu function
that asked for it (the innermost frames of sparsegpu and of CuPy) and the kernel's name;
a step over :data:`SLOW` seconds keeps its host profile (cProfile, by own time).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.first_call_compiles --out FILE.json --md FILE.md
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback

import numpy as np

DEFAULT_PROBLEMS = ("poisson3d", "anisotropic2d", "circuit2d")
SLOW = 0.5  # seconds: a step this slow keeps its host profile (cProfile)


class Compiles:
    """NVRTC compilations recorded while installed (``cupy.cuda.compiler``'s
    ``compile_using_nvrtc`` wrapped), each with the step it fell in."""

    def __init__(self):
        self.step = "import"
        self.events: list[dict] = []

    def install(self) -> bool:
        try:
            from cupy.cuda import compiler
        except ImportError:
            return False
        original = compiler.compile_using_nvrtc

        def recorded(source, *args, **kwargs):
            started = time.perf_counter()
            try:
                return original(source, *args, **kwargs)
            finally:
                self.events.append(self._event(source, time.perf_counter() - started))

        compiler.compile_using_nvrtc = recorded
        return True

    def _event(self, source: str, seconds: float) -> dict:
        frames = traceback.extract_stack()[:-2]
        ours = [f for f in frames if f"{os.sep}sparsegpu{os.sep}" in f.filename]
        theirs = [f for f in frames if f"{os.sep}cupy{os.sep}" in f.filename]
        where = lambda f: f"{f.filename.rsplit(os.sep, 2)[-2:]}:{f.lineno} {f.name}"  # noqa: E731
        names = [line.split("(")[0].split()[-1] for line in source.splitlines()
                 if "__global__" in line][:3]  # fmt: skip
        return {"step": self.step, "seconds": seconds,
                "sparsegpu": [where(f) for f in ours[-3:]],
                "cupy": where(theirs[0]) if theirs else "", "kernels": names}  # fmt: skip


def session(name: str, size: int, compiles: Compiles, sg, xp) -> list:
    """A user's session on one instance, each step's wall seconds."""
    from benchmarks import amg
    from benchmarks.experiments.amg_cycle_profile import host_profile

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
        compiles.step = f"{name}_{size} {step}"
        before = len(compiles.events)
        (_, profile), seconds = amg._timed(lambda fn=fn: host_profile(fn, top=12), xp)
        compiled = compiles.events[before:]
        rows.append({"step": compiles.step, "seconds": seconds, "compiles": len(compiled),
                     "compile_s": sum(e["seconds"] for e in compiled),
                     "profile": profile if seconds > SLOW else None})  # fmt: skip
    return rows


def markdown(result: dict) -> str:
    lines = ["| step | seconds | compilations | compiling s |", "|---|---:|---:|---:|"]
    for row in result["steps"]:
        lines.append(f"| {row['step']} | {row['seconds']:.4f} | {row['compiles']} "
                     f"| {row['compile_s']:.3f} |")  # fmt: skip
    lines += ["", "| step | s | asked by (sparsegpu) | CuPy | kernels |",
              "|---|---:|---|---|---|"]  # fmt: skip
    for e in sorted(result["compiles"], key=lambda e: -e["seconds"]):
        lines.append(f"| {e['step']} | {e['seconds']:.3f} | {' < '.join(reversed(e['sparsegpu']))} "
                     f"| {e['cupy']} | {', '.join(e['kernels'])} |")  # fmt: skip
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

    compiles = Compiles()
    xp = amg._device()
    if xp is np or not compiles.install():
        print("no GPU: nothing compiles (the steps run on the scipy backend)")
    wanted = args.problems.split(",")
    result = {"set": args.set, "steps": [], "compiles": compiles.events}
    for name, size in amg.SETS[args.set]:
        if name in wanted:
            result["steps"] += session(name, size, compiles, sg, xp)
            common.save_partial(result, args.out)
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
