"""Where the hash rows' first product spends its time, kernel by kernel (issue 47).

For the fit matrices of ``spgemm_first --mode calls`` (``--only`` to choose): one forced
``hash`` product of a new pattern in a warm process, each launch of the hash rows
(``backends/_hash_kernels.py``'s ``_launch``, which every pass calls) bracketed by CUDA
events and each host synchronisation (``_classes``) and scan timed on the host, beside
the wall clock of the whole product, of ``alg1`` and of cupyx's product. ``--lean-probe``
adds the time of one slotted short-rows fill over every row, with no listing before it
(:func:`lean_probe`), and the matrices include an instance of the P1 mesh's class (another
size and seed than the held-out one).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_hash_kernels --out FILE.json [--only NAME,...]
        [--variants "NAME=VALUE,...;..."] [--rounds N] [--md FILE.md]
    python -m benchmarks.experiments.spgemm_hash_kernels --from-json FILE.json --md FILE.md
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import common, spgemm_first
from sparsegpu.backends import _hash_kernels, _hash_rows, hash_spgemm
from sparsegpu.device import _cuda

FIRST = spgemm_first


def traced_product(A, cupy) -> tuple[float, list]:
    """Wall milliseconds of one forced hash product of ``A @ A`` and its launches'
    ``(what, milliseconds)``."""
    records = []
    original_launch = _hash_kernels._launch
    original_classes = _hash_kernels._classes

    def launch(name, grid, block, arguments, shared_bytes=0, source=_hash_kernels.SOURCE):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        original_launch(name, grid, block, arguments, shared_bytes, source)
        end.record()
        records.append((f"{name} grid={grid} block={block} shared={shared_bytes}", start, end))

    def classes(counts):
        begin = time.perf_counter()
        out = original_classes(counts)
        records.append((f"_classes (host wait) {out}", (time.perf_counter() - begin) * 1e3))
        return out

    _hash_kernels._launch, _hash_kernels._classes = launch, classes
    try:
        cupy.cuda.Device().synchronize()
        begin = time.perf_counter()
        sg.spgemm(A, A, algorithm="hash")
        cupy.cuda.Device().synchronize()
        wall = (time.perf_counter() - begin) * 1e3
    finally:
        _hash_kernels._launch, _hash_kernels._classes = original_launch, original_classes
    out = []
    for record in records:
        if len(record) == 2:
            out.append(record)
        else:
            out.append((record[0], cupy.cuda.get_elapsed_time(record[1], record[2])))
    return wall, out


def set_variant(variant: str) -> None:
    """Set the hash rows' constants as ``NAME=VALUE,NAME=VALUE`` says (each in the module of
    ``hash_spgemm`` and its passes that holds it); ``SHORT_GROUPS.S=L`` runs the short rows
    of up to ``S`` products with ``L`` lanes a row."""
    for setting in filter(None, variant.split(",")):
        key, value = setting.split("=")
        if key.startswith("SHORT_GROUPS."):
            slots = int(key.split(".")[1])
            _hash_kernels.SHORT_GROUPS[slots] = (int(value), slots)
        else:
            setattr(hash_spgemm.module_of(key), key, int(value))


def profile_first(name, build, dtype, cupy, cupyx_sparse) -> None:
    """cProfile of one first ``A @ A`` (the rule's choice) beside cupyx's wall clock."""
    import cProfile
    import io
    import pstats

    S = sp.csr_matrix(build())
    S.sum_duplicates()
    _, base, identity, Acx = FIRST.call_operands("", name, S, dtype, cupyx_sparse)
    A = FIRST.fresh_sg(base, identity)
    A @ A
    FIRST.fresh_cupyx(Acx, cupyx_sparse) @ FIRST.fresh_cupyx(Acx, cupyx_sparse)
    ours, theirs = [], []
    for _ in range(3):
        A = FIRST.fresh_sg(base, identity)
        ours.append(FIRST.wall_ms(lambda A=A: A @ A, cupy)[0])
        B = FIRST.fresh_cupyx(Acx, cupyx_sparse)
        theirs.append(FIRST.wall_ms(lambda B=B: B @ B, cupy)[0])
    print(f"{name}: first {np.median(ours):.2f} ms, cupyx {np.median(theirs):.2f} ms")
    for label, make in (
        ("ours", lambda: FIRST.fresh_sg(base, identity)),
        ("cupyx", lambda: FIRST.fresh_cupyx(Acx, cupyx_sparse)),
    ):
        M = make()
        profiler = cProfile.Profile()
        cupy.cuda.Device().synchronize()
        profiler.enable()
        M @ M
        cupy.cuda.Device().synchronize()
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(14)
        print(label, out.getvalue()[-2800:])
    cupy.get_default_memory_pool().free_all_blocks()


def lean_probe(A, cupy, repeat: int = 5) -> dict:
    """CUDA-event medians (ms) of one slotted short-rows fill over *every* row of ``A @ A``
    with no listing before it, for each short class (16 lanes and 64 slots, 32 and 128,
    32 and 256): what a pipeline without the symbolic listing would pay for its first
    kernel. A timing probe only: rows of more products than the class keeps their first
    ones (the kernel's guard), and the slots are thrown away."""
    from sparsegpu.backends import spgemm
    from sparsegpu.engine import _sparse_dispatch

    engine, residence, value_dtype, _ = _sparse_dispatch.where(A, A)
    left, right = _sparse_dispatch.operands(A, A, residence, value_dtype)
    left, right = spgemm.canonical(left), spgemm.canonical(right)
    m = left.shape[0]
    rows = cupy.arange(m, dtype=left.index_dtype)
    sizes = cupy.empty(m, dtype=left.index_dtype)
    device = _cuda.device_info()
    out = {}
    for slots in (64, 128, 256):
        indices = cupy.empty(m * slots, dtype=left.index_dtype)
        data = cupy.empty(m * slots, dtype=left.dtype)
        outputs = (0, indices, data, sizes)
        samples = []
        for _ in range(repeat + 1):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            _hash_rows._short_fill_launch(left, right, rows, m, slots, outputs, True, device)
            end.record()
            end.synchronize()
            samples.append(cupy.cuda.get_elapsed_time(start, end))
        out[f"all rows, {slots} slots"] = float(np.median(samples[1:]))
        del indices, data
    return out


def summary(result: dict) -> str:
    """A result file's Markdown: each matrix's wall clock by variant (and ALG1's and
    cupyx's), then each variant's launches of over 0.01 ms."""
    rows = result["rows"]
    # the wall clocks (not --lean-probe's dict of kernel times)
    walls = [k[:-3] for k, v in rows[0].items() if k.endswith("_ms") and isinstance(v, float)]
    lines = [
        "# The hash rows kernel by kernel (issue 47)",
        "",
        f"Device: {result['device']}. Command: `{result['command']}`. Wall clock of a first "
        "product of a new pattern, medians over the rounds (the variants in turn each "
        "round), and the launches of one traced product (CUDA events; host waits timed on "
        "the host).",
        "",
        "| set | matrix | nnz | " + " | ".join(f"{w} (ms)" for w in walls) + " |",
        "|---|---|---|" + "---|" * len(walls),
    ]
    for row in rows:
        cells = " | ".join(f"{row[w + '_ms']:.3f}" for w in walls)
        lines.append(f"| {row['set']} | {row['matrix']} | {row['nnz']:,} | {cells} |")
    for row in rows:
        for variant, trace in row.get("trace", {}).items():
            lines += ["", f"{row['matrix']}, {variant}: launches and host waits (ms)", ""]
            lines += [f"- {ms:.3f} {what}" for what, ms in trace if ms > 0.01]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--only", default="stencil3d7_120,powerlaw_1500k,blocks3_3d_36")
    parser.add_argument("--dtype", default="float64")
    parser.add_argument(
        "--variants",
        default="SLOTS_PER_LANE=4",
        help="';'-separated settings of hash_spgemm's constants, each 'NAME=VALUE,...'",
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed products a variant")
    parser.add_argument("--md", type=pathlib.Path, help="the summary in Markdown")
    parser.add_argument("--from-json", type=pathlib.Path, help="only write --md from this file")
    parser.add_argument("--profile", default="", help="names whose first A @ A is profiled")
    parser.add_argument(
        "--lean-probe", action="store_true", help="time short-rows fills over every row"
    )
    args = parser.parse_args(argv)
    if args.from_json:  # no GPU needed
        return common.markdown_again(args.from_json, args.md, summary)
    cupy = common.require_gpu()
    if cupy is None:
        return 2
    header = common.experiment_header("benchmarks.experiments.spgemm_hash_kernels")
    import cupyx.scipy.sparse as cupyx_sparse

    dtype = np.dtype(args.dtype)
    rows = []
    # the P1 mesh's class on another size and seed than the held-out one (to see the path)
    p1 = ("fit", "fem_p1_250k_random_seed11", lambda: common.fem_p1(250_000, "random", seed=11))
    for group, name, build in [*FIRST.call_matrices(cupy), p1]:
        if name in args.profile.split(","):
            profile_first(name, build, dtype, cupy, cupyx_sparse)
        if name not in args.only.split(","):
            continue
        S = sp.csr_matrix(build())
        S.sum_duplicates()
        row, base, identity, Acx = FIRST.call_operands(group, name, S, dtype, cupyx_sparse)
        reference = FIRST.fresh_cupyx(Acx, cupyx_sparse) @ FIRST.fresh_cupyx(Acx, cupyx_sparse)
        variants = args.variants.split(";")
        walls = {"alg1": [], "cupyx": [], **{f"hash{v}": [] for v in variants}}
        traces = {}
        for variant in variants:
            set_variant(variant)
            A = FIRST.fresh_sg(base, identity)
            C = sg.spgemm(A, A, algorithm="hash").tocsr()  # compiles; checked
            same = C.nnz == reference.nnz and bool(
                (cupy.asarray(C.indices) == reference.indices).all()
            )
            error = float(abs(cupy.asarray(C.data) - reference.data).max()) if same else None
            print(
                f"{name} spl={variant}: nnz {C.nnz} vs {reference.nnz}, same pattern {same}, "
                f"max |diff| {error}"
            )
            row[f"check{variant}"] = [same, error]
            del C
        sg.spgemm(FIRST.fresh_sg(base, identity), FIRST.fresh_sg(base, identity), algorithm="alg1")
        for _ in range(args.rounds):
            for variant in variants:
                set_variant(variant)
                A = FIRST.fresh_sg(base, identity)
                traces[variant] = traced_product(A, cupy)[1]
                A = FIRST.fresh_sg(base, identity)
                walls[f"hash{variant}"].append(
                    FIRST.wall_ms(lambda A=A: sg.spgemm(A, A, algorithm="hash"), cupy)[0]
                )
            A = FIRST.fresh_sg(base, identity)
            walls["alg1"].append(
                FIRST.wall_ms(lambda A=A: sg.spgemm(A, A, algorithm="alg1"), cupy)[0]
            )
            B = FIRST.fresh_cupyx(Acx, cupyx_sparse)
            walls["cupyx"].append(FIRST.wall_ms(lambda B=B: B @ B, cupy)[0])
        set_variant(variants[0])
        if args.lean_probe:
            row["lean_probe_ms"] = lean_probe(FIRST.fresh_sg(base, identity), cupy)
            print(f"{name}: lean probe {row['lean_probe_ms']}")
        row.update(common.medians(walls, "_ms"))
        row["trace"] = {str(k): v for k, v in traces.items()}
        rows.append(row)
        print(f"{name} {dtype}: " + ", ".join(f"{k} {row[k + '_ms']:.2f}" for k in walls))
        for variant, trace in traces.items():
            print(f"  {variant}:")
            for what, ms in trace:
                if ms > 0.01:
                    print(f"   {ms:8.3f}  {what}")
        cupy.get_default_memory_pool().free_all_blocks()
        if args.out:
            args.out.write_text(json.dumps({**header, "rows": rows}, indent=1, default=str))
    if args.md and rows:
        args.md.write_text(summary({**header, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
