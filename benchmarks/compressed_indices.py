"""Fewer bytes per nonzero (issue 18): ``delta16`` against the best plain CSR backend.

For each matrix and dtype, in one run, median CUDA-event times of ``A @ x`` (``out=``
given, so every side does the same work):

``plain``
    the best of: the ``shuffle`` backend with every policy of its autotuner sweep
    (``CsrVectorBackend.candidates``: threads per row x block size, register caps, load
    shapes), the ``vector`` and ``readonly`` defaults, ``merge_path`` in each compiled
    shape, and cuSPARSE called directly (``DirectSpMV`` from ``auto_vs_cusparse.py``: CSR
    ALG1 and ALG2).
``delta16``
    the ``delta16`` backend with every policy of its own sweep
    (``Delta16Backend.candidates``), and its default policy alone.
``auto``
    what ``sparsegpu.choose(A, x)`` (planning ``measure``, default policies) picks, and its
    time: the check that planning picks ``delta16`` where it wins and not where it loses.

Every candidate is first screened alone (median of 15, one candidate after another); then
the ``FINALISTS`` fastest of each side and ``auto`` are timed again together, one sample of
each in turn (``cuda_time_interleaved``, median of 21), and those are the times reported. A
slow stretch of the machine or a clock change then falls on both sides alike: timed one
after another, the same code's ratio moved by up to 0.2 between runs on the small matrices.

Every candidate's answer is checked against cuSPARSE's before it is timed. "ratio" is
plain / delta16 (> 1: delta16 faster). The matrices, and which set each belongs to:

``generated``
    2-D 5- and 9-point and 3-D 7- and 27-point stencils in natural order.
``fem-generated``
    the P1 (linear triangle) finite-element stiffness matrix of a Delaunay triangulation
    of uniformly random points in the unit square, assembled here (scipy.spatial), in
    reverse Cuthill-McKee order (as a mesh generator or partitioner would hand it over)
    and in random order (where 16-bit offsets cannot apply: delta16 is refused).
``real-replicated``
    bcsstk13 (HB, a structural FEM stiffness matrix bundled with sparsegpu) repeated on
    the diagonal of a block-diagonal matrix to pass 5M nonzeros. No SuiteSparse matrix of
    5M nonzeros or more can be downloaded on the benchmark machine.

None of these matrices took part in choosing the kernel's knobs or the refusal threshold.

Usage (on a GPU machine)::

    python benchmarks/compressed_indices.py --out r.json --md r.md --plot r.png
    python benchmarks/compressed_indices.py --from-json r.json --md r.md   # no GPU
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import numpy as np
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu import _console, datasets
from sparsegpu.backends import delta16
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.device._mirror import CUPY, PlanKey
from sparsegpu.engine import _registry
from sparsegpu.measure import _timing

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _outputs  # noqa: E402

# the issue-18 bars: delta16 over the best plain backend
BAR = {"float64": 1.12, "float32": 1.2}
PLAIN_DEFAULTS = ("vector", "readonly")
# the screen's fastest candidates of each side that are timed again, in alternation
FINALISTS = 3
FINAL = {"warmup": 3, "repeat": 21}


def fem_p1(n_points: int, order: str, seed: int = 0) -> sp.csr_matrix:
    """The P1 stiffness matrix of a Delaunay triangulation of ``n_points`` uniformly random
    points in the unit square (about 7 nonzeros a row), in ``order`` "rcm" or "random"."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee
    from scipy.spatial import Delaunay

    rng = np.random.default_rng(seed)
    points = rng.random((n_points, 2))
    triangles = Delaunay(points).simplices
    corners = points[triangles]  # (t, 3, 2)
    # gradients of the three barycentric basis functions, and each triangle's area
    edges = np.stack(
        [
            corners[:, 2] - corners[:, 1],
            corners[:, 0] - corners[:, 2],
            corners[:, 1] - corners[:, 0],
        ],
        axis=1,
    )
    area = 0.5 * np.abs(edges[:, 0, 0] * edges[:, 1, 1] - edges[:, 0, 1] * edges[:, 1, 0])
    local = np.einsum("tik,tjk->tij", edges, edges) / (4.0 * area)[:, None, None]
    rows = np.repeat(triangles, 3, axis=1).ravel()
    cols = np.tile(triangles, (1, 3)).ravel()
    A = sp.csr_matrix((local.ravel(), (rows, cols)), shape=(n_points, n_points))
    A.sum_duplicates()
    if order == "rcm":
        perm = reverse_cuthill_mckee(A, symmetric_mode=True)
    elif order == "random":
        perm = rng.permutation(n_points)
    else:
        raise ValueError(f"order must be 'rcm' or 'random', got {order!r}")
    return A[perm][:, perm].tocsr()


def replicated(name: str, min_nnz: int) -> sp.csr_matrix:
    """A bundled real matrix repeated on the diagonal until it has ``min_nnz`` nonzeros."""
    A = datasets.load(name).tocsr()
    copies = -(-min_nnz // A.nnz)
    return sp.block_diag([A] * copies, format="csr")


def matrices(scale: str) -> list:
    """(set, name, builder) of every matrix; ``scale="small"`` for a quick check."""
    big = scale == "full"
    n2, n9, n3, n27 = (3000, 2000, 180, 120) if big else (300, 200, 30, 20)
    points = 1_000_000 if big else 20_000
    nnz = 5_000_000 if big else 200_000
    return [
        ("generated", f"stencil2d_5pt_{n2}", lambda: synthetic.stencil_2d(n2)),
        ("generated", f"stencil2d_9pt_{n9}", lambda: synthetic.stencil_2d(n9, points=9)),
        ("generated", f"stencil3d_7pt_{n3}", lambda: synthetic.stencil_3d(n3)),
        ("generated", f"stencil3d_27pt_{n27}", lambda: synthetic.stencil_3d(n27, points=27)),
        ("fem-generated", f"fem_p1_delaunay_{points}_rcm", lambda: fem_p1(points, "rcm")),
        ("fem-generated", f"fem_p1_delaunay_{points}_random", lambda: fem_p1(points, "random")),
        ("real-replicated", "bcsstk13_blockdiag", lambda: replicated("bcsstk13", nnz)),
    ]


def _time(fn) -> float:
    return _timing.cuda_time(fn, warmup=3, repeat=15).median_ms


def _candidates(A, dtype, cupy):
    """(label, backend, policy) of every sparsegpu candidate; delta16 only where it takes A."""
    registry = _registry.registered()
    mirror = A._sg_mirror(CUPY, dtype)
    shuffle = registry["shuffle"]
    out = [("plain", shuffle, p) for p in shuffle.candidates(mirror)]
    out += [("plain", registry[n], registry[n].default_policy(mirror)) for n in PLAIN_DEFAULTS]
    merge_path = registry["merge_path"]
    out += [("plain", merge_path, p) for p in merge_path.candidates(mirror)]
    backend = registry["delta16"]
    if backend.supports(mirror):
        out += [("delta16", backend, p) for p in backend.candidates(mirror)]
    return mirror, out


def bench_one(set_label, name, host, dtype, cupy, copy_gbs, DirectSpMV) -> dict:
    S = host.astype(dtype)
    S.indices = S.indices.astype(np.int32)
    S.indptr = S.indptr.astype(np.int32)
    A = sg.csr_matrix(S)
    rng = np.random.default_rng(1)
    x = cupy.asarray(rng.standard_normal(S.shape[1]).astype(dtype))
    y = cupy.empty(S.shape[0], dtype=dtype)
    mirror, candidates = _candidates(A, dtype, cupy)
    row = {
        "set": set_label, "matrix": name, "dtype": np.dtype(dtype).name,
        "n_rows": S.shape[0], "n_cols": S.shape[1], "nnz": S.nnz,
        "plain_bytes": _timing.matrix_spmv_bytes(mirror),
    }  # fmt: skip
    table = delta16.chunk_table(mirror)
    row["compressed_fraction"] = table.fraction
    row["delta16_supported"] = _registry.registered()["delta16"].supports(mirror)
    # cuSPARSE called directly: the reference answer, and two plain candidates
    reference = cupy.empty_like(y)
    times, calls, directs = {}, {}, []
    try:
        for algorithm in ("csr_alg1", "csr_alg2"):
            direct = DirectSpMV(mirror, x, reference, algorithm)
            directs.append(direct)
            direct()
            times[f"cusparse_{algorithm}"] = ("plain", _time(direct))
            calls[f"cusparse_{algorithm}"] = direct
        expected = reference.copy()
        row.update(
            _screen_and_final(name, S, mirror, candidates, x, y, expected, times, calls, cupy)
        )
        _finish(row, mirror, times, copy_gbs)
    finally:
        for direct in directs:
            direct.close()
    return row


def _screen_and_final(name, S, mirror, candidates, x, y, expected, times, calls, cupy) -> dict:
    """Check and screen every candidate (``_time``, one after another), then time the
    ``FINALISTS`` fastest of each side and planning's pick together, in alternation."""
    dtype = mirror.dtype
    scale = float(cupy.abs(expected).max()) if expected.size else 1.0
    tol = 64 * np.finfo(dtype).eps * max(scale, 1.0) * max(int(mirror.stats.max), 1)
    for label, backend, policy in candidates:
        key = f"{backend.name} {policy!r}"
        try:
            plan = mirror.get_plan(
                PlanKey(backend.name, policy), lambda b=backend, p=policy: b.plan(mirror, p)
            )
            plan.matvec(x, out=y)
        except Exception as exc:  # a policy that cannot launch here
            times[key] = (label, None, f"{type(exc).__name__}: {exc}")
            continue
        error = float(cupy.abs(y - expected).max()) if y.size else 0.0
        if not error <= tol:
            raise AssertionError(f"{name} {dtype}: {key} is off by {error:.3e} (> {tol:.3e})")
        calls[key] = lambda plan=plan: plan.matvec(x, out=y)
        times[key] = (label, _time(calls[key]))
    timed = {k: v for k, v in times.items() if v[1] is not None}
    row = {"candidates_timed": len(timed), "screen": {}}
    finals = {}
    for label in ("plain", "delta16"):
        mine = {k: v[1] for k, v in timed.items() if v[0] == label}
        if mine:
            key = min(mine, key=mine.get)
            row["screen"][label] = {"candidate": key, "ms": mine[key]}
            finals.update({k: calls[k] for k in sorted(mine, key=mine.get)[:FINALISTS]})
    # what planning by measurement picks, on a fresh matrix, with default policies
    fresh = sg.csr_matrix(S)
    choice = sg.choose(fresh, x)
    row["auto_choice"] = choice.backend
    row["auto_planning_ms"] = choice.planning_ms
    row["auto_measured"] = {m.backend: m.ms for m in choice.measurements if m.ms is not None}
    finals["auto"] = lambda: fresh.dot(x)
    final = {k: t.median_ms for k, t in _timing.cuda_time_interleaved(finals, **FINAL).items()}
    row["auto_ms"] = final.pop("auto")
    row["finals"] = final
    for label in ("plain", "delta16"):
        mine = {k: ms for k, ms in final.items() if timed[k][0] == label}
        best = min(mine, key=mine.get) if mine else None
        row[label] = {"candidate": best, "ms": mine[best]} if mine else None
    if row["delta16"] is not None:
        default = _registry.registered()["delta16"].default_policy(mirror)
        row["delta16_default"] = {
            "candidate": f"delta16 {default!r}",
            "ms": timed[f"delta16 {default!r}"][1],
        }
        row["ratio"] = row["plain"]["ms"] / row["delta16"]["ms"]
    return row


def _finish(row, mirror, times, copy_gbs) -> None:
    """Bytes and bandwidths of the winners."""
    if row["delta16"] is not None:
        columns = delta16.compressed_columns(mirror)
        row["delta16_bytes"] = row["plain_bytes"] - mirror.indices.nbytes + columns.column_bytes()
        row["delta16_pct_copy"] = (
            100 * _timing.gb_per_s(row["delta16_bytes"], row["delta16"]["ms"]) / copy_gbs
        )
    row["plain_pct_copy"] = (
        100 * _timing.gb_per_s(row["plain_bytes"], row["plain"]["ms"]) / copy_gbs
    )
    row["cusparse_best_ms"] = min(times["cusparse_csr_alg1"][1], times["cusparse_csr_alg2"][1])


def summarize(rows) -> dict:
    out = {}
    for dtype in ("float64", "float32"):
        mine = [r for r in rows if r["dtype"] == dtype and r.get("ratio")]
        if not mine:
            continue
        ratios = [r["ratio"] for r in mine]
        out[dtype] = {
            "geomean_ratio": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "min_ratio": min(ratios),
            "meets_bar": [r["matrix"] for r in mine if r["ratio"] >= BAR[dtype]],
            "misses_bar": [r["matrix"] for r in mine if r["ratio"] < BAR[dtype]],
            "auto_picks_delta16_where_it_wins": all(
                r["auto_choice"] == "delta16" for r in mine if r["ratio"] >= 1.03
            ),
        }
    losers = [r for r in rows if not r.get("ratio") or r["ratio"] < 1.0]
    out["auto_never_picks_delta16_where_it_loses"] = all(
        r["auto_choice"] != "delta16" for r in losers
    )
    return out


def markdown(result) -> str:
    lines = [
        f"# delta16 against the best plain CSR backend — {result['device']}",
        "",
        f"Copy bandwidth {result['copy_gb_per_s']:.0f} GB/s. Median CUDA-event times, `out=` "
        "given; plain = best of the shuffle sweep, vector/readonly defaults, merge_path "
        "shapes and cuSPARSE called directly (ALG1/ALG2)."
        + (
            f" Every candidate screened one after another; the {FINALISTS} fastest of each "
            "side and planning's pick timed again in alternation (the times shown)."
            if any("finals" in r for r in result["results"])
            else ""
        ),
        "",
        "| set | matrix | dtype | nnz | compressed | plain best | µs | delta16 best | µs "
        "| ratio | bar | delta16 % copy | auto picks | auto µs |",
        "|---|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in result["results"]:
        d = r.get("delta16")
        cells = [
            r["set"], r["matrix"], r["dtype"], f"{r['nnz']:,}",
            f"{100 * r['compressed_fraction']:.0f}%",
            r["plain"]["candidate"].split(" ")[0], f"{1e3 * r['plain']['ms']:.1f}",
        ]  # fmt: skip
        if d:
            cells += [
                d["candidate"].split(" ", 1)[1], f"{1e3 * d['ms']:.1f}", f"{r['ratio']:.3f}",
                str(BAR[r["dtype"]]), f"{r['delta16_pct_copy']:.0f}%",
            ]  # fmt: skip
        else:
            cells += ["refused", "—", "—", "—", "—"]
        cells += [r["auto_choice"], f"{1e3 * r['auto_ms']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Summary:", "", "```", json.dumps(result["summary"], indent=1), "```", ""]
    return "\n".join(lines)


def plot(result, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["results"] if r.get("ratio")]
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{r['matrix']}\n{r['dtype']}" for r in rows]
    ax.bar(range(len(rows)), [r["ratio"] for r in rows], color="tab:blue")
    for dtype, bar in BAR.items():
        ax.axhline(bar, ls="--", lw=1, color="tab:red" if dtype == "float32" else "tab:orange")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("best plain CSR / best delta16 (time)")
    ax.set_title(f"delta16 against the best plain CSR backend ({result['device']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=("full", "small"), default="full")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--only", help="comma-separated substrings of matrix names to run")
    _outputs.add_output_arguments(parser)
    args = parser.parse_args(argv)
    if args.from_json:
        _outputs.redraw(args.from_json, args, summarize, markdown, plot)
        return 0
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print(f"no GPU: {_cuda.unavailable_reason()}", file=sys.stderr)
        return 2
    DirectSpMV = _outputs.direct_spmv()
    result = _outputs.gpu_header(args.scale)
    todo = matrices(args.scale)
    if args.only:
        wanted = args.only.split(",")
        todo = [t for t in todo if any(w in t[1] for w in wanted)]
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    with _console.progress() as bar:
        task = bar.add_task("benchmark", total=len(todo) * len(dtypes))
        for set_label, name, make in todo:
            host = make()
            for dtype in dtypes:
                bar.update(task, description=f"{name} {dtype.name}")
                result["results"].append(
                    bench_one(set_label, name, host, dtype, cupy,
                              result["copy_gb_per_s"], DirectSpMV)
                )  # fmt: skip
                cupy.get_default_memory_pool().free_all_blocks()
                if args.out:
                    pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
                bar.advance(task)
    result["summary"] = summarize(result["results"])
    _outputs.write_outputs(result, args, markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
