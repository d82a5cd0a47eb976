"""``A @ X`` for k columns: sparsegpu ``auto`` against cuSPARSE SpMM, cupyx and torch.sparse.

Issue 34's measurement. For every matrix of ``--set``, value dtype, memory order of X (C,
Fortran) and k in ``--k``, the median time (CUDA events) of:

``cusparse_<algorithm>``
    cuSPARSE SpMM called directly (:class:`DirectSpMM`: the CSR, X and Y descriptors, the
    workspace and ``cusparseSpMM_preprocess`` where it helps made once, then one
    ``cusparseSpMM`` per product), X and Y in X's own order, each of CSR_ALG1/2/3 and the
    default; ``cusparse_best`` is the fastest that ran.
``cupyx``
    ``cupyx.scipy.sparse.csr_matrix @ X``, as CuPy's users call it (cuSPARSE's default
    algorithm; CuPy copies a C-order X to Fortran order first).
``torch``
    ``torch.sparse_csr_tensor @ X`` on the same device arrays (torch reads X through DLPack
    strides as they are).
``auto``
    a sparsegpu matrix planned on this X (``sparsegpu.choose(A, X)``: its choice, every
    candidate's time and the planning cost are recorded), then ``A @ X`` as users call
    it (no ``out=``: each result is dropped, and a small one is taken back).
``auto_plan``
    the plan ``auto`` chose, called directly into one Y (``plan.matmat(X, out=Y)``): not
    among the contenders; beside ``cusparse_<algorithm>`` of the same algorithm it tells
    the plan's own cost from the operator's and the result's.

"The best of the three" is the fastest of ``cusparse_best``, ``cupyx`` and ``torch``.
Every answer is checked against cupyx's first; then all columns of one (matrix, dtype,
order, k) are timed in alternation, one sample of each per round, each sample a loop of at
least ``MIN_CALLS`` products. Sets (fit on one, claim on another):

``fit``
    what the ``A @ X`` rules, the row-split kernel's shapes and the candidate lists were
    checked and chosen on: 2-D 5-point stencils of 60^2 (a product the host's time per call
    decides) and 1000^2, a 3-D 27-point stencil of 64^3, an R-MAT graph of scale 17.
``heldout``
    what the claims are made on: the issue's 2-D 5-point 2000^2, 3-D 27-point 100^3 and
    R-MAT scale 19 (4M nonzeros), a power-law matrix of 1M rows, and the SuiteSparse
    matrices bundled with sparsegpu of at least 1,000 rows.

Usage (on a GPU machine; ``--quick`` takes three ks and the small matrices; ``--only``
names the matrices to run, ``--real`` the Matrix Market ones beside the generated)::

    python -m benchmarks.spmm --set heldout --out spmm.json --md spmm.md
    python -m benchmarks.spmm --set heldout --only bcsstk13,cage10 --out small.json
    python -m benchmarks.spmm --from-json spmm.json --md spmm.md --plot spmm.png  # no GPU
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import time

import numpy as np

import sparsegpu as sg
from benchmarks import common
from benchmarks.common import DirectSpMM
from sparsegpu import measure
from sparsegpu.backends import _spmm
from sparsegpu.backends import cusparse as cusparse_backend
from sparsegpu.device import _cuda
from sparsegpu.engine import _registry

DEFAULT_MATRICES = common.BUNDLED
SETS = common.SPMM_SETS
KS = (2, 4, 8, 16, 32, 64, 128)
QUICK_KS = (2, 8, 32)
# the issue-34 bars: auto against the best of cuSPARSE (direct, best algorithm), cupyx and
# torch, on every matrix and k, and as a geometric mean
CLOSE = 0.97
GEOMEAN_BAR = 1.25
MIN_CALLS = 3
REPEAT = 9
# bundled SuiteSparse matrices with at least this many rows join the held-out set
MIN_REAL_ROWS = common.SPMM_MIN_REAL_ROWS
THE_THREE = ("cusparse_best", "cupyx", "torch")


synthetic_matrices = common.spmm_synthetic
matrices = common.spmm_set


def real_matrices(folder, names=None) -> dict:
    """``{name: build}`` of the Matrix Market files in ``folder`` with at least
    ``MIN_REAL_ROWS`` rows (only those of ``names``, when given)."""
    return common.real_matrices(folder, names, min_rows=MIN_REAL_ROWS)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def bench_one(name, A, Acx, X, cupy, torch, set_label) -> dict:
    """One (matrix, dtype, order, k): every contender checked, then timed in alternation."""
    dtype, k = X.dtype, X.shape[1]
    fortran = _spmm.is_fortran(X)
    mirror = A._sg_mirror(_registry.registered()["cusparse"].residence, dtype)
    reference = Acx @ X
    scale = max(float(cupy.abs(reference).max()), 1.0) if reference.size else 1.0
    tol = 64 * np.finfo(dtype).eps * math.sqrt(max(mirror.stats.max, 1)) * scale

    def check(Y, what):
        err = float(cupy.abs(cupy.asarray(Y) - reference).max()) if reference.size else 0.0
        if not err <= tol:
            raise AssertionError(f"{name} {dtype} k={k} {what}: error {err:.3e} > {tol:.3e}")

    fns, directs, refused = {}, [], {}
    Y = cupy.empty(reference.shape, dtype=dtype, order="F" if fortran else "C")
    for algorithm in cusparse_backend.SPMM_ALGORITHMS:
        try:
            direct = DirectSpMM(mirror, X, Y, algorithm)
            direct()
        except Exception as exc:  # an algorithm that does not take this order or dtype
            refused[algorithm] = f"{type(exc).__name__}: {exc}"
            continue
        directs.append(direct)
        check(Y, f"cusparse {algorithm}")
        fns[f"cusparse_{algorithm}"] = direct
    check(Acx @ X, "cupyx")
    fns["cupyx"] = lambda: Acx @ X
    if torch is not None:
        At = torch.sparse_csr_tensor(
            torch.as_tensor(Acx.indptr), torch.as_tensor(Acx.indices),
            torch.as_tensor(Acx.data), size=Acx.shape,
        )  # fmt: skip
        Xt = torch.as_tensor(X)
        check(At @ Xt, "torch")
        fns["torch"] = lambda: At @ Xt
    start = time.perf_counter()
    choice = sg.choose(A, X)
    planning_wall_ms = (time.perf_counter() - start) * 1e3
    check(A @ X, "auto")
    fns["auto"] = lambda: A @ X
    plan = sg.engine._planning.plan_for(A, dtype, x=X)
    Y_plan = cupy.empty(reference.shape, dtype=dtype, order="F" if fortran else "C")
    check(plan.matmat(X, out=Y_plan), "auto's plan")
    fns["auto_plan"] = lambda: plan.matmat(X, out=Y_plan)
    nbytes = measure.matrix_spmv_bytes(mirror) + (X.size + reference.size) * dtype.itemsize
    inner = max(MIN_CALLS, min(200, int(2e8 // max(nbytes, 1))))
    timings = measure.cuda_time_interleaved(fns, warmup=2, repeat=REPEAT, inner=inner)
    for direct in directs:
        direct.close()
    ms = {key: t.median_ms for key, t in timings.items()}
    algorithms = {key: v for key, v in ms.items() if key.startswith("cusparse_")}
    if algorithms:
        ms["cusparse_best"] = min(algorithms.values())
    three = {key: ms[key] for key in THE_THREE if key in ms}
    best = min(three, key=three.get)
    return {
        "matrix": name,
        "set": set_label,
        "dtype": dtype.name,
        "order": "F" if fortran else "C",
        "k": int(k),
        "n_rows": int(A.shape[0]),
        "n_cols": int(A.shape[1]),
        "nnz": int(mirror.nnz),
        "row_mean": float(mirror.stats.mean),
        "row_max": int(mirror.stats.max),
        "calls_per_sample": inner,
        "ms": ms,
        "cusparse_refused": refused,
        "best_of_three": best,
        "auto_vs_best": ms[best] / ms["auto"],
        "auto_vs": {key: value / ms["auto"] for key, value in three.items()},
        "auto_backend": choice.backend,
        "auto_policy": repr(choice.policy),
        "auto_level": choice.level,
        "planning_ms": None if choice.planning_ms is None else float(choice.planning_ms),
        "planning_wall_ms": planning_wall_ms,
        "planning_measurements": [
            {
                "backend": m.backend,
                "policy": repr(m.policy),
                "ms": None if m.ms is None else float(m.ms),
                "agreed": bool(m.agreed),
                "note": m.note,
            }
            for m in choice.measurements
        ],
    }


def _geomean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def summarize(rows) -> dict:
    """Per set: the geomean and the lowest of ``auto`` over the best of the three, the rows
    under ``CLOSE``, and the same per dtype and order."""
    out = {}
    for set_label in sorted({r["set"] for r in rows}):
        sel = [r for r in rows if r["set"] == set_label]
        worst = min(sel, key=lambda r: r["auto_vs_best"])
        parts = {}
        for dtype in sorted({r["dtype"] for r in sel}):
            for order in ("C", "F"):
                part = [r for r in sel if r["dtype"] == dtype and r["order"] == order]
                if part:
                    parts[f"{dtype} {order}"] = {
                        "rows": len(part),
                        "geomean_auto_vs_best": _geomean([r["auto_vs_best"] for r in part]),
                        "min_auto_vs_best": min(r["auto_vs_best"] for r in part),
                    }
        out[set_label] = {
            "rows": len(sel),
            "matrices": len({r["matrix"] for r in sel}),
            "geomean_auto_vs_best": _geomean([r["auto_vs_best"] for r in sel]),
            "min_auto_vs_best": worst["auto_vs_best"],
            "worst": f"{worst['matrix']} {worst['dtype']} {worst['order']} k={worst['k']}",
            "below_close": [
                f"{r['matrix']} {r['dtype']} {r['order']} k={r['k']}: {r['auto_vs_best']:.2f}x"
                for r in sel
                if r["auto_vs_best"] < CLOSE
            ],
            "geomean_auto_vs": {
                key: _geomean([r["auto_vs"].get(key) for r in sel]) for key in THE_THREE
            },
            "bars_met": {
                f"every row >= {CLOSE}x": worst["auto_vs_best"] >= CLOSE,
                f"geomean >= {GEOMEAN_BAR}x": (_geomean([r["auto_vs_best"] for r in sel]) or 0)
                >= GEOMEAN_BAR,
            },
            "by_dtype_and_order": parts,
        }
    return out


def markdown(result) -> str:
    rows = result["results"]
    summary = result.get("summary") or summarize(rows)
    ks = sorted({r["k"] for r in rows})
    lines = [
        f"# A @ X: auto against the best of cuSPARSE, cupyx and torch on {result['device']}",
        "",
        f"CuPy {result['versions'].get('cupy')}, CUDA {result['versions'].get('cuda_runtime')}, "
        f"torch {result.get('torch') or 'absent'}. Median of CUDA-event timings, the "
        "contenders of a row timed in alternation (one sample of each per round), each "
        f"sample a loop of at least {MIN_CALLS} products; every answer checked against "
        "cupyx's first. Each cell: the time of the best of cuSPARSE SpMM called directly "
        "(descriptors and workspace made once, the best of CSR ALG1/2/3 and the default), "
        "cupyx and torch.sparse, divided by `auto`'s (planned on that X first, then "
        "`A @ X` as users call it): above 1 `auto` is faster. Command: "
        f"`{result.get('command', 'python -m benchmarks.spmm')}`.",
        "",
        "Sets: `fit` is what the A @ X rules, the row-split kernel's shapes and the candidate "
        "lists were checked and chosen on; `heldout` took no part in that: the issue's "
        "stencils and R-MAT graph, a power-law matrix and the bundled SuiteSparse matrices.",
        "",
    ]
    for set_label, s in summary.items():
        lines += [
            f"## {set_label}: geomean {s['geomean_auto_vs_best']:.2f}x, lowest "
            f"{s['min_auto_vs_best']:.2f}x ({s['worst']}), {s['rows']} rows on "
            f"{s['matrices']} matrices",
            "",
            "Bars: "
            + ", ".join(
                f"{bar}: {'met' if met else 'NOT met'}" for bar, met in s["bars_met"].items()
            )
            + ". Geomean of auto over each: "
            + ", ".join(f"{key} {_x(value)}" for key, value in s["geomean_auto_vs"].items())
            + ".",
            "",
        ]
        if s["below_close"]:
            lines += [f"Under {CLOSE}x: " + "; ".join(s["below_close"]), ""]
        header = "| matrix | rows | nnz | dtype | order | " + " | ".join(f"k={k}" for k in ks)
        lines += [header + " | auto chose (largest k) |", "|" + "---|" * (len(ks) + 6)]
        sel = [r for r in rows if r["set"] == set_label]
        keys = sorted({(r["matrix"], r["dtype"], r["order"]) for r in sel})
        for matrix, dtype, order in keys:
            mine = {r["k"]: r for r in sel if (r["matrix"], r["dtype"], r["order"]) == (
                matrix, dtype, order)}  # fmt: skip
            last = mine[max(mine)]
            cells = [_x(mine[k]["auto_vs_best"]) if k in mine else "-" for k in ks]
            lines.append(
                f"| {matrix} | {last['n_rows']:,} | {last['nnz']:,} | {dtype} | {order} | "
                + " | ".join(cells)
                + f" | {last['auto_backend']} |"
            )
        lines.append("")
    return "\n".join(lines)


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def plot(result, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["results"] if r["set"] == "heldout"] or result["results"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, order in zip(axes, ("C", "F"), strict=True):
        keys = sorted({(r["matrix"], r["dtype"]) for r in rows if r["order"] == order})
        for matrix, dtype in keys:
            mine = [
                r for r in rows if (r["matrix"], r["dtype"], r["order"]) == (matrix, dtype, order)
            ]
            mine.sort(key=lambda r: r["k"])
            style = "-" if dtype == "float64" else "--"
            ax.plot([r["k"] for r in mine], [r["auto_vs_best"] for r in mine], style, marker="o")
        ax.axhline(CLOSE, color="red", linewidth=0.8)
        ax.axhline(1.0, color="grey", linewidth=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k (columns of X)")
        ax.set_title(f"X in {order} order (solid float64, dashed float32)")
    axes[0].set_ylabel("auto speed-up over the best of cuSPARSE, cupyx, torch")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_outputs(result, args) -> None:
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
    if args.md:
        pathlib.Path(args.md).write_text(markdown(result))
    if args.plot:
        plot(result, args.plot)


def run(args, cupy, after_each=None) -> dict:
    """Every row of the run; ``after_each(result)`` gets the result so far after each
    matrix (the outputs are written as the run goes)."""
    import cupyx.scipy.sparse as cupyx_sparse

    torch = _torch()
    device = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    result = {
        "device": device.decode() if isinstance(device, bytes) else device,
        "versions": _cuda.versions(),
        "torch": None if torch is None else torch.__version__,
        "command": "python -m benchmarks.spmm " + " ".join(sys.argv[1:]),
        "results": [],
    }
    ks = QUICK_KS if args.quick else tuple(int(k) for k in args.k.split(","))
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    orders = args.orders.split(",")
    rows = []
    for set_label in SETS if args.set == "both" else (args.set,):
        real = args.real.split(",") if args.real else None
        only = args.only.split(",") if args.only else None
        for name, build in matrices(set_label, args.quick, args.matrices, real, only).items():
            host = build().tocsr()
            host.sum_duplicates()
            for dtype in dtypes:
                Acx = cupyx_sparse.csr_matrix(host.astype(dtype))
                A = sg.csr_matrix(Acx)
                for order in orders:
                    for k in ks:
                        rng = np.random.default_rng(k)
                        X = cupy.asarray(
                            rng.uniform(-1, 1, (A.shape[1], k)).astype(dtype), order=order
                        )
                        row = bench_one(name, A, Acx, X, cupy, torch, set_label)
                        rows.append(row)
                        print(
                            f"{set_label:8} {name:22} {dtype.name:8} {order} k={k:<4} "
                            f"auto {row['ms']['auto']:.4f} ms ({row['auto_backend']}) "
                            f"best {row['best_of_three']} {row['ms'][row['best_of_three']]:.4f} ms "
                            f"-> {row['auto_vs_best']:.2f}x",
                            flush=True,
                        )
                        del X
                del A, Acx
                cupy.get_default_memory_pool().free_all_blocks()
                if torch is not None:
                    torch.cuda.empty_cache()
            result["results"], result["summary"] = rows, summarize(rows)
            if after_each is not None:
                after_each(result)
    return result


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments())
    parser.add_argument("--set", default="heldout", choices=[*SETS, "both"])
    parser.add_argument("--k", default=",".join(map(str, KS)), help="columns of X, comma-separated")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--orders", default="C,F")
    parser.add_argument("--matrices", default=str(DEFAULT_MATRICES), help="Matrix Market folder")
    parser.add_argument("--real", help="only these Matrix Market matrices (comma-separated)")
    parser.add_argument(
        "--only", help="only these matrices of the set, generated or not (comma-separated)"
    )
    parser.add_argument("--quick", action="store_true", help="three ks, no large matrices")
    args = parser.parse_args(argv)
    if args.from_json:
        write_outputs(json.loads(pathlib.Path(args.from_json).read_text()), args)
        return 0
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print(f"spmm: no GPU ({_cuda.unavailable_reason()})", file=sys.stderr)
        return 2
    result = run(args, cupy, after_each=lambda partial: write_outputs(partial, args))
    for set_label, s in result["summary"].items():
        print(
            f"{set_label}: geomean {s['geomean_auto_vs_best']:.2f}x, lowest "
            f"{s['min_auto_vs_best']:.2f}x ({s['worst']}); bars {s['bars_met']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
