"""``merge_path`` kernel sources against each other and cuSPARSE called directly (an A/B).

For a kernel change: give the kernel source before it (``git show REV:sparsegpu/kernels/
merge_path.cu > old.cu``) and after it as ``--variant NAME=FILE``; each variant is compiled
by NVRTC as the backend compiles its own source, and run with every compiled shape
(``MERGE_PATH_SHAPES``) through :class:`MergePathPlan` (``plan.matvec(x, out=y)``: no
dispatcher, so the kernels and their launches are what differs). Where the change moved
the kernel's arguments too, give a checkout instead, ``--variant NAME=DIR`` (``git
worktree add DIR REV``): its kernel source runs with its own ``backends/merge_path.py``
(loaded beside this tree's, which provides everything else). In the same process:
cuSPARSE called directly (``DirectSpMV`` of ``auto_vs_cusparse.py``: descriptors made
once, one ``cusparseSpMV`` a product), ALG1 and ALG2. Every variant's answer is checked
against the first variant's (relative 1e-4 of the largest entry: the sum orders may
differ). Median of CUDA-event timings; everything a matrix runs is timed in alternation
(one sample of each per round), each sample a loop of ``MIN_CALLS`` products (results
before the eleventh session's run 3: one after another, one product a sample).

Matrices: the large held-out ones (``synthetic.heldout_suite("full")``) whose rows or
columns are irregular (arrow-like, random columns, power law, R-MAT, a randomly numbered
3-D mesh), float64, and float32 for two of them.

Usage (on a GPU machine)::

    git show 12b41db:sparsegpu/kernels/merge_path.cu > /tmp/before.cu
    python -m benchmarks.merge_path_variants --variant before=/tmp/before.cu \\
        --variant after=sparsegpu/kernels/merge_path.cu --out FILE.json --md FILE.md
    git worktree add /tmp/before 2b5b385  # a change that moved the kernel's arguments
    python -m benchmarks.merge_path_variants --variant before=/tmp/before \\
        --variant after=. --out FILE.json --md FILE.md
    python -m benchmarks.merge_path_variants --from-json FILE.json --md FILE.md  # no GPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import sys

import numpy as np

import sparsegpu as sg
from benchmarks import common
from benchmarks.auto_vs_cusparse import MIN_CALLS
from benchmarks.common import DirectSpMV
from sparsegpu import _console, measure
from sparsegpu.backends import merge_path
from sparsegpu.datasets import synthetic
from sparsegpu.device import _compile, _cuda
from sparsegpu.engine import _registry

# (matrix, dtypes): held-out matrices with rows or columns merge_path exists for
MATRICES = (
    ("arrow_2M_x8_16x1M", ("float64", "float32")),
    ("arrow_3M_x6_48x400k", ("float64",)),
    ("uniform_1500k_x24", ("float64", "float32")),
    ("powerlaw_3M_e2.2", ("float64",)),
    ("rmat_s21_e16", ("float64",)),
    ("stencil3d7_150_permuted", ("float64",)),
)
REPEAT = 15


KERNEL = pathlib.Path("sparsegpu/kernels/merge_path.cu")
PLAN = pathlib.Path("sparsegpu/backends/merge_path.py")


def parse_variant(text: str) -> tuple[str, pathlib.Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--variant wants NAME=FILE or NAME=DIR, got {text!r}")
    path = pathlib.Path(path)
    if path.is_dir():
        missing = [str(path / p) for p in (KERNEL, PLAN) if not (path / p).is_file()]
        if missing:
            raise argparse.ArgumentTypeError(
                f"--variant {name}: {path} is not a sparsegpu checkout (no {', '.join(missing)})"
            )
    elif not path.is_file():
        raise argparse.ArgumentTypeError(f"--variant {name}: no file or directory {str(path)!r}")
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"--variant {name!r}: the name must be an identifier")
    return name, path


def plan_module(name: str, tree: pathlib.Path):
    """A checkout's ``backends/merge_path.py``, loaded as a module of this package (its
    relative imports find this tree's modules, which the plan only builds on)."""
    module_name = f"sparsegpu.backends._merge_path_variant_{name}"
    spec = importlib.util.spec_from_file_location(module_name, tree / PLAN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def install(variants) -> dict:
    """Copy each variant's kernel next to the kernel sources (NVRTC inlines the headers from
    there) under a name of its own; ``{variant: (source name, plan module)}``: the module
    is this tree's ``merge_path`` for a FILE, the checkout's for a DIR."""
    installed = {}
    for name, path in variants:
        target = f"merge_path_variant_{name}.cu"
        source = path / KERNEL if path.is_dir() else path
        (_compile.kernel_dir() / target).write_text(source.read_text())
        installed[name] = (target, plan_module(name, path) if path.is_dir() else merge_path)
    return installed


def bench_one(name, dtype, sources, cupy) -> dict:
    import scipy.sparse as sp

    S = sp.csr_matrix(synthetic.heldout_suite("full", dtype=dtype)[name]())
    S.sum_duplicates()
    A = sg.csr_matrix(S)
    x = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, A.shape[1]).astype(dtype))
    y = cupy.empty(A.shape[0], dtype=dtype)
    mirror = A._sg_mirror(_registry.registered()["merge_path"].residence, np.dtype(dtype))

    row = {"matrix": name, "dtype": np.dtype(dtype).name, "nnz": int(A.nnz), "raw_us": {}}
    # every variant's every shape and cuSPARSE's two algorithms, checked first, then timed
    # in alternation (one sample of each per round), each sample a loop of MIN_CALLS
    # products: the host's drift and the GPU's warming fall on all of them alike
    fns = {}
    directs = []
    for algorithm in ("csr_alg1", "csr_alg2"):
        direct = DirectSpMV(mirror, x, y, algorithm)
        direct()
        directs.append(direct)
        fns[("raw", algorithm)] = direct
    reference = None
    originals = {id(module): (module, module.SOURCE) for _, module in sources.values()}
    try:
        for variant, (source, module) in sources.items():
            module.SOURCE = source  # what its MergePathPlan compiles
            for policy in module.MergePathBackend().candidates(mirror):
                plan = module.MergePathPlan(mirror, policy)
                plan.matvec(x, out=y)
                if reference is None:
                    reference = y.copy()
                scale = float(cupy.abs(reference).max()) or 1.0
                error = float(cupy.abs(y - reference).max()) / scale
                if not error < 1e-4:
                    raise AssertionError(f"{name} {dtype} {variant} {policy}: error {error:.2e}")
                key = f"{policy.block_size}x{policy.nnz_per_thread}"
                fns[(variant, key)] = lambda plan=plan: plan.matvec(x, out=y)
    finally:
        for module, source in originals.values():
            module.SOURCE = source
    timings = measure.cuda_time_interleaved(fns, repeat=REPEAT, inner=MIN_CALLS)
    for direct in directs:
        direct.close()
    row["variants_us"] = {variant: {} for variant in sources}
    for (what, key), timing in timings.items():
        target = row["raw_us"] if what == "raw" else row["variants_us"][what]
        target[key] = timing.median_ms * 1e3
    row["calls_per_sample"] = MIN_CALLS
    return row


def summarize(row) -> dict:
    raw = min(row["raw_us"].values())
    out = {"raw_best_us": raw}
    for variant, shapes in row["variants_us"].items():
        shape = min(shapes, key=shapes.get)
        out[variant] = {"best_us": shapes[shape], "shape": shape, "vs_raw": raw / shapes[shape]}
    return out


def _method_text(result) -> str:
    """How the rows were timed, where the result says (older ones: one after another, one
    product a sample)."""
    calls = {r.get("calls_per_sample") for r in result["results"]}
    if not calls or None in calls:
        return ""
    return (
        f" (all of a matrix's in alternation, one sample of each per round, each a loop of "
        f"{max(calls)} products)"
    )


def markdown(result) -> str:
    variants = result["variants"]
    lines = [
        f"# merge_path kernel variants against cuSPARSE called directly — {result['device']}",
        "",
        f"Median CUDA-event times (µs) of `plan.matvec(x, out=y)`{_method_text(result)}, "
        "best of the compiled shapes per variant; raw = cuSPARSE called directly, best of "
        "ALG1/ALG2; ratios are speed-ups over raw (higher is better). Variants: "
        + ", ".join(f"`{v}` ({result['variant_files'][v]})" for v in variants)
        + ".",
        "",
        "| matrix | dtype | nnz | raw µs | "
        + " | ".join(f"{v} µs (shape) | {v} vs raw" for v in variants)
        + " |",
        "|---|---|---:|---:|" + "---:|---:|" * len(variants),
    ]
    for row in result["results"]:
        s = summarize(row)
        cells = [
            f"{s[v]['best_us']:.1f} ({s[v]['shape']}) | {s[v]['vs_raw']:.3f}x" for v in variants
        ]
        lines.append(
            f"| {row['matrix']} | {row['dtype']} | {row['nnz']:,} | {s['raw_best_us']:.1f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def run(args, sources, cupy) -> dict:
    result = {
        "device": _cuda.device_info().name,
        "versions": _cuda.versions(),
        "variants": list(sources),
        "variant_files": {name: str(path) for name, path in args.variant},
        "results": [],
    }
    todo = [(name, dtype) for name, dtypes in MATRICES for dtype in dtypes]
    with _console.progress() as bar:
        task = bar.add_task("variants", total=len(todo))
        for name, dtype in todo:
            bar.update(task, description=f"{name} {dtype}")
            result["results"].append(bench_one(name, dtype, sources, cupy))
            cupy.get_default_memory_pool().free_all_blocks()
            if args.out:
                pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
            bar.advance(task)
    return result


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False))
    parser.add_argument("--variant", action="append", type=parse_variant, default=[])
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(pathlib.Path(args.from_json).read_text())
    else:
        if not args.variant:
            parser.error("give at least one --variant NAME=FILE or NAME=DIR")
        cupy = _cuda.cupy_or_none()
        if cupy is None:
            print(f"no GPU: {_cuda.unavailable_reason()}", file=sys.stderr)
            return 2
        sources = install(args.variant)
        try:
            result = run(args, sources, cupy)
        finally:  # the copies are for this run only
            for source, _ in sources.values():
                (_compile.kernel_dir() / source).unlink(missing_ok=True)
    if args.out and not args.from_json:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    if args.md:
        pathlib.Path(args.md).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
