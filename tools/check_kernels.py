"""Compile every instantiation of every registered kernel family with nvcc; fail on spills.

For each family (``sparsegpu._compile.FAMILIES``, filled as the backend modules import), a
generated translation unit includes the family's ``.cu`` file and takes the address of
every instantiation, so nvcc compiles exactly what sparsegpu may launch. ``-Xptxas -v``
reports registers and spills per kernel; this prints a table and exits 1 on a compile error
or on any spill. Families compile in parallel chunks (``--jobs``).

Usage: ``python3 tools/check_kernels.py [--arch sm_90] [--jobs N] [--nvcc PATH]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENTRY = re.compile(r"Compiling entry function '(\S+)' for")
SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
REGISTERS = re.compile(r"Used (\d+) registers")


def families():
    """Every registered KernelFamily: importing every sparsegpu module registers them all."""
    import importlib
    import pkgutil

    import sparsegpu
    from sparsegpu import _compile

    for module in pkgutil.walk_packages(sparsegpu.__path__, "sparsegpu."):
        if not module.name.endswith("__main__"):  # that one runs the command line
            importlib.import_module(module.name)
    return list(_compile.FAMILIES)


def translation_unit(source: Path, instantiations) -> str:
    pointers = ",\n".join(f"    (void*)&{name}" for name in instantiations)
    return f'#include "{source}"\n\nvoid* sparsegpu_instantiations[] = {{\n{pointers}\n}};\n'


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> readable names (c++filt when present, else unchanged)."""
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True)
    readable = out.stdout.splitlines()
    if out.returncode != 0 or len(readable) != len(names):
        return {n: n for n in names}
    return dict(zip(names, (r.split("(")[0] for r in readable), strict=True))


def parse_ptxas(log: str) -> list[tuple[str, int, int, int]]:
    """(mangled name, registers, spill store bytes, spill load bytes) per entry function."""
    rows = []
    name, spills = None, (0, 0)
    for line in log.splitlines():
        if m := ENTRY.search(line):
            name, spills = m.group(1), (0, 0)
        elif (m := SPILLS.search(line)) and name:
            spills = (int(m.group(1)), int(m.group(2)))
        elif (m := REGISTERS.search(line)) and name:
            rows.append((name, int(m.group(1)), *spills))
            name = None
    return rows


def compile_chunk(nvcc: str, arch: str, source: Path, chunk, workdir: Path, tag: str):
    unit = workdir / f"{tag}.cu"
    unit.write_text(translation_unit(source, chunk))
    cmd = [nvcc, f"-arch={arch}", "-std=c++17", "-Xptxas", "-v", "-c", str(unit)]
    cmd += ["-o", str(workdir / f"{tag}.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr, len(chunk)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    args = parser.parse_args(argv)
    if not shutil.which(args.nvcc):
        print(f"check_kernels: nvcc not found ({args.nvcc!r}); install the CUDA toolkit")
        return 1
    kernel_dir = ROOT / "sparsegpu" / "kernels"
    jobs = []
    for family in families():
        names = family.instantiations
        n_chunks = max(1, min(args.jobs, len(names) // 24 or 1))
        for i in range(n_chunks):
            jobs.append((kernel_dir / family.source, names[i::n_chunks]))
    failed = False
    rows = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        futures = [
            pool.submit(compile_chunk, args.nvcc, args.arch, src, chunk, Path(tmp), f"unit{i}")
            for i, (src, chunk) in enumerate(jobs)
        ]
        for (src, _), future in zip(jobs, futures, strict=True):
            rc, log, count = future.result()
            if rc != 0:
                print(f"check_kernels: nvcc failed on {src.name} ({count} instantiations):")
                print(log)
                failed = True
                continue
            found = parse_ptxas(log)
            if len(found) != count:
                print(
                    f"check_kernels: expected {count} kernels from {src.name}, "
                    f"ptxas saw {len(found)}"
                )
                failed = True
            rows += [(src.name, *row) for row in found]
    readable = demangle([r[1] for r in rows])
    spilled = 0
    print(f"{'family':<14} {'regs':>4} {'spill st/ld':>11}  instantiation")
    for source, name, registers, stores, loads in sorted(
        rows, key=lambda r: (r[0], readable[r[1]])
    ):
        flag = "  <-- SPILL" if stores or loads else ""
        spilled += bool(flag)
        print(f"{source:<14} {registers:>4} {f'{stores}/{loads}':>11}  {readable[name]}{flag}")
    print(f"\n{len(rows)} instantiations compiled for {args.arch}; {spilled} spill")
    if spilled or failed:
        print("check_kernels: FAILED")
        return 1
    print("check_kernels: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
