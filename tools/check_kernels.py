"""Compile every CUDA source sparsegpu may run with nvcc; fail on errors and spills.

For each kernel family (``sparsegpu.device._compile.FAMILIES``, filled as the backend modules
import), a generated translation unit includes the family's ``.cu`` file and takes the
address of every instantiation, so nvcc compiles exactly what sparsegpu may launch. The
solvers' fused elementwise kernels (``sparsegpu.device._compile.ELEMENTWISE``: what
``cupy.ElementwiseKernel`` takes) are compiled the way CuPy compiles them, one kernel per
value type they run on (``T`` float and double, or their complex types from thrust, of
which CuPy's are a copy), in a kernel of our own around the operation. ``-Xptxas -v``
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
    from sparsegpu.device import _compile

    for module in pkgutil.walk_packages(sparsegpu.__path__, "sparsegpu."):
        if not module.name.endswith("__main__"):  # that one runs the command line
            importlib.import_module(module.name)
    return list(_compile.FAMILIES)


def elementwise_sources() -> list:
    """Every registered elementwise source with its value kinds ("f", "c", "fc")."""
    from sparsegpu.device import _compile

    families()  # imports every module: they register their sources too
    return list(_compile.ELEMENTWISE)


# CuPy's type names in an ElementwiseKernel's parameters, as C++ (T and V are typedefs)
_CXX = {"float64": "double", "float32": "float", "int64": "long long", "int32": "int",
        "bool": "bool", "T": "T", "V": "V"}  # fmt: skip
# value type -> (T, V) for each kind
_ELEMENTWISE_TYPES = {
    "f": (("float", "float"), ("double", "double")),
    "c": (("thrust::complex<float>", "float"), ("thrust::complex<double>", "double")),
}


def _parameters(text: str) -> list[tuple[str, str]]:
    """``[(C++ type, name)]`` of an ElementwiseKernel parameter list ("T x, float64 a")."""
    pairs = [part.split() for part in text.split(",")]
    return [(_CXX[kind], name) for kind, name in pairs]


def elementwise_unit(sources, value_type: str, real_type: str) -> str:
    """One translation unit: each source as a kernel whose inputs are loaded into locals
    and whose outputs are references, ``T`` = ``value_type``, ``V`` = ``real_type``."""
    lines = [
        "#include <thrust/complex.h>",
        "using thrust::complex;  // as CuPy's complex.cuh has it",
    ]
    lines += [f"typedef {value_type} T;", f"typedef {real_type} V;"]
    preambles = dict.fromkeys(source.preamble for source in sources if source.preamble)
    lines += list(preambles)
    for source in sources:
        inputs, outputs = _parameters(source.in_params), _parameters(source.out_params)
        arguments = [f"const {cxx}* {name}_" for cxx, name in inputs]
        arguments += [f"{cxx}* {name}_" for cxx, name in outputs] + ["long long n"]
        body = [f"const {cxx} {name} = {name}_[i];" for cxx, name in inputs]
        body += [f"{cxx}& {name} = {name}_[i];" for cxx, name in outputs]
        lines += [
            f'extern "C" __global__ void {source.name}({", ".join(arguments)}) {{',
            "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
            "  if (i >= n) return;",
            *(f"  {line}" for line in body),
            f"  {source.operation};",
            "}",
        ]
    return "\n".join(lines) + "\n"


def compile_unit(nvcc: str, arch: str, text: str, workdir: Path, tag: str):
    unit = workdir / f"{tag}.cu"
    unit.write_text(text)
    cmd = [nvcc, f"-arch={arch}", "-std=c++17", "-Xptxas", "-v", "-c", str(unit)]
    cmd += ["-o", str(workdir / f"{tag}.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


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
    rc, log = compile_unit(nvcc, arch, translation_unit(source, chunk), workdir, tag)
    return rc, log, len(chunk)


def compile_elementwise(nvcc: str, arch: str, text: str, count: int, workdir: Path, i: int):
    rc, log = compile_unit(nvcc, arch, text, workdir, f"elementwise{i}")
    return rc, log, count


def elementwise_jobs() -> list[tuple[str, str, int]]:
    """``(label, translation unit, kernels)``: the elementwise sources for each value type."""
    jobs = []
    registered = elementwise_sources()
    for kind, types in _ELEMENTWISE_TYPES.items():
        sources = [source for kinds, source in registered if kind in kinds]
        for value_type, real_type in types:
            label = f"elementwise<{value_type}>"
            jobs.append((label, elementwise_unit(sources, value_type, real_type), len(sources)))
    return jobs


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
        labels = [src.name for src, _ in jobs]
        for i, (label, text, count) in enumerate(elementwise_jobs()):
            futures.append(
                pool.submit(compile_elementwise, args.nvcc, args.arch, text, count, Path(tmp), i)
            )
            labels.append(label)
        for label, future in zip(labels, futures, strict=True):
            rc, log, count = future.result()
            if rc != 0:
                print(f"check_kernels: nvcc failed on {label} ({count} kernels):")
                print(log)
                failed = True
                continue
            found = parse_ptxas(log)
            if len(found) != count:
                print(f"check_kernels: {label}: {count} kernels expected, ptxas saw {len(found)}")
                failed = True
            rows += [(label, *row) for row in found]
    readable = demangle([r[1] for r in rows])
    spilled = 0
    width = max([len("family"), *(len(row[0]) for row in rows)])
    print(f"{'family':<{width}} {'regs':>4} {'spill st/ld':>11}  instantiation")
    for source, name, registers, stores, loads in sorted(
        rows, key=lambda r: (r[0], readable[r[1]])
    ):
        flag = "  <-- SPILL" if stores or loads else ""
        spilled += bool(flag)
        print(f"{source:<{width}} {registers:>4} {f'{stores}/{loads}':>11}  {readable[name]}{flag}")
    print(f"\n{len(rows)} instantiations compiled for {args.arch}; {spilled} spill")
    if spilled or failed:
        print("check_kernels: FAILED")
        return 1
    print("check_kernels: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
