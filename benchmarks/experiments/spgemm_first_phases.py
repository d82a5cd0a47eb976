"""Where a first product of a new pattern spends its time, and what the next calls cost
(issue 47).

In one warm process (every kernel compiled on a throw-away first product of each class),
for each matrix class: the first ``A @ A`` of a *new* pattern (fresh operands made by an
earlier product, sparse plans forgotten) against cupyx's first product on fresh operands
made by a cupyx product, wall clock from the call to a synchronized result; the same with
``hash`` and ``alg1`` forced; the time of each phase (the functions of the path, each
wrapped with a device synchronisation before and after); a cProfile of one first call; the
first ten calls of one pattern; the first ``sg.galerkin_product`` against cupyx's ``P.T @ A
@ P``.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_first_phases --out FILE.json [--only NAME,...]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pathlib
import pstats
import sys
import time

import numpy as np
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import common, spgemm_first
from sparsegpu.backends import _hash_rows, cusparse_spgemm, hash_spgemm, spgemm
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.device._mirror import CUPY, DeviceMatrix
from sparsegpu.engine import _sparse_dispatch, _sparse_planning

FIRST = spgemm_first
fresh_sg, fresh_cupyx = FIRST.fresh_sg, FIRST.fresh_cupyx


def classes(xp) -> dict:
    """``{name: (set, builder)}``: the issue's classes (``spgemm_first.call_matrices``),
    and R-MAT scale 18 (whose square cupyx gets wrong: an empty matrix)."""
    out = {name: (group, build) for group, name, build in FIRST.call_matrices(xp)}
    out["rmat_s18"] = ("heldout", lambda: synthetic.rmat(18, 16, seed=3, xp=xp))
    return out


def sync(cupy):
    cupy.cuda.Device().synchronize()


def wall_ms(fn, cupy):
    return FIRST.wall_ms(fn, cupy)


PHASES = [
    (spgemm, "canonical"),
    (spgemm, "pattern_key"),
    (spgemm, "compute_operands"),
    (spgemm, "is_canonical"),
    (hash_spgemm.GpuSpgemm, "total_products"),
    (DeviceMatrix, "transpose"),
    (_sparse_planning, "multiply_sparse"),
    (_sparse_planning, "_plan_step"),
    (spgemm, "describe_product"),
    (hash_spgemm, "sampled_compression"),
    (_hash_rows, "_symbolic"),
    (_hash_rows, "_numeric"),
    (cusparse_spgemm.CusparseSpgemm, "_compute"),
    (cusparse_spgemm, "_nnz"),
    (hash_spgemm.GpuSpgemm, "_rule"),
    (spgemm, "multiply"),
]


def phase_times(fn, cupy) -> dict:
    """Milliseconds in each of PHASES during ``fn()`` (each call synchronised)."""
    totals = {}
    saved = []
    for owner, name in PHASES:
        original = owner.__dict__[name]
        target = original.__func__ if isinstance(original, staticmethod) else original

        def wrapped(*a, _target=target, _name=name, **k):
            sync(cupy)
            start = time.perf_counter()
            try:
                return _target(*a, **k)
            finally:
                sync(cupy)
                totals[_name] = totals.get(_name, 0.0) + (time.perf_counter() - start) * 1e3

        functools.update_wrapper(wrapped, target)
        setattr(
            owner, name, staticmethod(wrapped) if isinstance(original, staticmethod) else wrapped
        )
        saved.append((owner, name, original))
    try:
        total, _ = wall_ms(fn, cupy)
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
    totals["total"] = total
    return totals


def profile_text(fn, cupy) -> str:
    profiler = cProfile.Profile()
    sync(cupy)
    profiler.enable()
    fn()
    sync(cupy)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
    return out.getvalue()[-3500:]


def _products(base, identity, Acx, dtype, cupy, cupyx_sparse) -> dict:
    """First products, their phases and profile, and the first ten calls of one pattern."""
    row = {}
    # warm-up: every kernel of this class compiled (a cold compile is once per process)
    for algorithm in (None, "hash", "alg1"):
        A = fresh_sg(base, identity)
        sg.spgemm(A, A, algorithm=algorithm)
        sync(cupy)
    fresh_cupyx(Acx, cupyx_sparse) @ fresh_cupyx(Acx, cupyx_sparse)
    sync(cupy)
    # first products of new patterns, alternating with cupyx's
    columns = {"first": [], "cupyx": [], "hash": [], "alg1": []}
    for _ in range(3):
        for key in columns:
            if key == "cupyx":
                B = fresh_cupyx(Acx, cupyx_sparse)
                ms, C = wall_ms(lambda B=B: B @ B, cupy)
                row["result_nnz"] = int(C.nnz)
            else:
                A = fresh_sg(base, identity)
                algorithm = None if key == "first" else key
                ms, C = wall_ms(lambda A=A, a=algorithm: sg.spgemm(A, A, algorithm=a), cupy)
                if key == "first":
                    row["ran"] = sg.explain(A, A).last.algorithm
            columns[key].append(ms)
            del C
    for key, samples in columns.items():
        row[f"{key}_ms"] = float(np.median(samples))
    A = fresh_sg(base, identity)
    left = spgemm.canonical(A._sg_mirror(CUPY, np.dtype(dtype)))
    row["rule"] = _sparse_dispatch.engine_for(left.residence).estimate(left, left)[1]
    A = fresh_sg(base, identity)
    row["phases_ms"] = phase_times(lambda A=A: A @ A, cupy)
    A = fresh_sg(base, identity)
    row["profile"] = profile_text(lambda A=A: A @ A, cupy)
    # the first ten calls of one pattern
    A = fresh_sg(base, identity)
    row["calls_ms"] = [wall_ms(lambda A=A: A @ A, cupy)[0] for _ in range(10)]
    row["explain"] = str(sg.explain(A, A))
    return row


def run_class(name, group, build, dtype, cupy, cupyx_sparse, log, galerkin_only=False) -> dict:
    S = sp.csr_matrix(build())
    S.sum_duplicates()
    row, base, identity, Acx = FIRST.call_operands(group, name, S, dtype, cupyx_sparse)
    if not galerkin_only:
        row.update(_products(base, identity, Acx, dtype, cupy, cupyx_sparse))
    # the first Galerkin product, phase by phase, and its pieces beside cupyx's
    P = FIRST.aggregates_of_8(name, S.shape[0], dtype)
    pieces = {}
    for _ in range(3):
        A = fresh_sg(base, identity)
        Psg = sg.csr_matrix(P)
        Psg._sg_mirror(CUPY, np.dtype(dtype))
        sample = {"sg": wall_ms(lambda A=A, P=Psg: sg.galerkin_product(A, P), cupy)[0]}
        A = fresh_sg(base, identity)
        Psg = sg.csr_matrix(P)
        sample["sg_left_assoc"] = wall_ms(lambda A=A, P=Psg: (P.T @ A) @ P, cupy)[0]
        B, Pcx = fresh_cupyx(Acx, cupyx_sparse), cupyx_sparse.csr_matrix(P)
        sample["cupyx"] = wall_ms(lambda B=B, P=Pcx: P.T @ B @ P, cupy)[0]
        Pcx = cupyx_sparse.csr_matrix(P)
        ms, PT = wall_ms(lambda P=Pcx: P.T.tocsr(), cupy)
        sample["cupyx_PT_csr"] = ms
        ms, PTA = wall_ms(lambda B=B, PT=PT: PT @ B, cupy)
        sample["cupyx_PT_A"] = ms
        sample["cupyx_PTA_P"] = wall_ms(lambda M=PTA, P=Pcx: M @ P, cupy)[0]
        sample["cupyx_A_P"] = wall_ms(lambda B=B, P=Pcx: B @ P, cupy)[0]
        for key, ms in sample.items():
            pieces.setdefault(key, []).append(ms)
    row["galerkin_ms"] = common.medians(pieces)
    row["galerkin_first_ms"] = row["galerkin_ms"]["sg"]
    row["galerkin_cupyx_ms"] = row["galerkin_ms"]["cupyx"]
    A = fresh_sg(base, identity)
    Psg = sg.csr_matrix(P)
    Psg._sg_mirror(CUPY, np.dtype(dtype))
    row["galerkin_phases_ms"] = phase_times(lambda A=A, P=Psg: sg.galerkin_product(A, P), cupy)
    if not galerkin_only:
        log(
            f"{name} {row['dtype']}: first {row['first_ms']:.2f} ({row['ran']}), cupyx "
            f"{row['cupyx_ms']:.2f}, hash {row['hash_ms']:.2f}, alg1 {row['alg1_ms']:.2f}; calls "
            + " ".join(f"{c:.1f}" for c in row["calls_ms"])
            + f"; galerkin {row['galerkin_first_ms']:.2f} vs {row['galerkin_cupyx_ms']:.2f}"
        )
        log("  phases " + ", ".join(f"{k} {v:.2f}" for k, v in row["phases_ms"].items()))
    log("  galerkin " + ", ".join(f"{k} {v:.2f}" for k, v in row["galerkin_ms"].items()))
    log(
        "  galerkin phases "
        + ", ".join(f"{k} {v:.2f}" for k, v in row["galerkin_phases_ms"].items())
    )
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--only")
    parser.add_argument("--dtypes", default="float64")
    parser.add_argument("--galerkin", action="store_true", help="the Galerkin product only")
    args = parser.parse_args(argv)
    reason = _cuda.unavailable_reason()
    if reason is not None:
        print(f"needs a GPU ({reason})", file=sys.stderr)
        return 2
    cupy = _cuda.cupy_or_none()
    import cupyx.scipy.sparse as cupyx_sparse

    rows = []
    chosen = classes(cupy)
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    for name, (group, build) in chosen.items():
        for dtype in args.dtypes.split(","):
            try:
                rows.append(
                    run_class(
                        name,
                        group,
                        build,
                        np.dtype(dtype),
                        cupy,
                        cupyx_sparse,
                        print,
                        args.galerkin,
                    )
                )
            except Exception as exc:  # report and go on: one class must not cost the run
                print(f"{name} {dtype}: {type(exc).__name__}: {exc}")
                rows.append(
                    {"matrix": name, "dtype": dtype, "error": f"{type(exc).__name__}: {exc}"}
                )
            cupy.get_default_memory_pool().free_all_blocks()
            if args.out:
                args.out.write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
