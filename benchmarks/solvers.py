"""Solver benchmarks on the GPU: time to solution of CG, scipy's cg on a sparsegpu matrix,
transposed products and A @ X (issue 7).

Sections (each writes its part of the JSON as soon as it is done; an error in one is
recorded there and the others still run):

* ``cg``: CG to ``rtol`` on the 3-D 7-point Poisson matrix (``--grid``^3 rows) and on the
  SPD bundled matrices of ``sparsegpu.datasets`` (bcsstk13 with a Jacobi preconditioner,
  as unpreconditioned CG does not reach 1e-8 on it within 10 n iterations; LFAT5):
  ``sparsegpu.linalg.cg`` (per GPU backend, CuPy vectors) vs
  ``cupyx.scipy.sparse.linalg.cg`` on a cupyx matrix vs scipy on the CPU. Every answer's
  true residual is checked. scipy on the CPU is timed in full where that takes under
  ``--cpu-budget`` seconds, else over 10 iterations and scaled to the iteration count
  (marked ``estimated``). Also cupyx's cg driving a sparsegpu plan through a cupyx
  LinearOperator: the "adapt cupyx" alternative to our own solvers.
* ``scipy_cg``: ``scipy.sparse.linalg.cg`` with NumPy vectors on a sparsegpu matrix vs on
  scipy's own, ``--iterations`` iterations on a ~50-million-nonzero stencil.
* ``transpose``: ``A.T @ x`` against ``A @ x`` (plans on device vectors, CUDA events), the
  one-off cost of building the transpose, and ``A.conj().T @ x`` through the dispatcher.
* ``matmat``: ``A @ X`` for k = 1..64 (the backend's ``matmat``) against k separate
  products.

Usage: ``python -m benchmarks.solvers --json out.json --md out.md [--plot out.png]``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import sparsegpu as sg
from sparsegpu._console import console, progress
from sparsegpu.datasets.synthetic import power_law, stencil_3d
from sparsegpu.device import _cuda
from sparsegpu.engine import _planning, _registry
from sparsegpu.measure import cuda_time, gb_per_s, matrix_spmv_bytes

_CHOSEN_BACKENDS: list[str] = []


def gpu_backends() -> list[str]:
    """The GPU backends to measure: ``--backends``, else every available one."""
    available = [
        s.name
        for s in sg.backends()
        if s.available and _registry.registered()[s.name].residence.name == "cupy"
    ]
    return [b for b in available if b in _CHOSEN_BACKENDS] if _CHOSEN_BACKENDS else available


def wall(fn, cupy):
    """(seconds, result) of fn() with the device synchronised before and after."""
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    result = fn()
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - start, result


def best_of(fn, cupy, repeat):
    times, result = [], None
    for _ in range(repeat):
        seconds, result = wall(fn, cupy)
        times.append(seconds)
    return float(np.median(times)), result


def relative_residual(A_dev, x, b, cupy) -> float:
    return float(cupy.linalg.norm(b - A_dev @ x) / cupy.linalg.norm(b))


# ---------------------------------------------------------------------------- cg
def tolerance_keyword(solver) -> str:
    """scipy < 1.12 and older CuPy call the relative tolerance ``tol``."""
    return "rtol" if "rtol" in inspect.signature(solver).parameters else "tol"


def cg_problems(grid: int, cupy):
    problems = {f"poisson3d_{grid}": (lambda: stencil_3d(grid, 7, xp=cupy), False)}
    for name, jacobi in (("bcsstk13", True), ("LFAT5", False)):
        path = sg.datasets.path(name)
        problems[name] = (lambda p=path: sp.csr_matrix(scipy.io.mmread(p)), jacobi)
    return problems


def cg_one_backend(S, M_host, b, backend, args, cupy):
    """(seconds, x, iterations, info, first-call seconds) of sparsegpu.linalg.cg."""
    A = sg.csr_matrix(S)
    A.backend = backend
    M = None
    if M_host is not None:
        M = sg.csr_matrix(M_host)
        M.backend = backend
    count = []
    first, _ = wall(
        lambda: sg.linalg.cg(A, b, rtol=args.rtol, M=M, callback=lambda xk: count.append(1)),
        cupy,
    )
    seconds, (x, info) = best_of(lambda: sg.linalg.cg(A, b, rtol=args.rtol, M=M), cupy, args.repeat)
    return seconds, x, len(count), info, first


def cupyx_cg_on_plan(S, M_dev, b, backend, args, cupy):
    """cupyx's cg driving a sparsegpu plan: the alternative to writing our own solvers."""
    import cupyx.scipy.sparse.linalg as cuspl

    plan = _planning.plan_for(sg.csr_matrix(S), np.float64, backend=backend)
    operator = cuspl.LinearOperator(S.shape, matvec=plan.matvec, dtype=np.float64)
    tol = {tolerance_keyword(cuspl.cg): args.rtol}
    return best_of(lambda: cuspl.cg(operator, b, M=M_dev, **tol), cupy, args.repeat)


def cg_one_problem(S, use_jacobi, args, cupy, entry, save, advance):
    import cupyx.scipy.sparse as cusp
    import cupyx.scipy.sparse.linalg as cuspl

    n = S.shape[0]
    b_host = np.random.default_rng(0).uniform(-1, 1, n)
    b = cupy.asarray(b_host)
    A_dev = cusp.csr_matrix(S)
    M_host = M_dev = None
    if use_jacobi:
        entry["M"] = "jacobi"
        M_host = sp.diags(1.0 / S.diagonal()).tocsr()
        M_dev = cusp.csr_matrix(M_host)

    def record(key, seconds, x, iterations, info, **extra):
        residual = relative_residual(A_dev, cupy.asarray(x), b, cupy)
        entry["solvers"][key] = {
            "seconds": seconds,
            "iterations": iterations,
            "info": int(info),
            "relative_residual": residual,
            "estimated": False,
            **extra,
        }
        save()

    cupyx_tol = {tolerance_keyword(cuspl.cg): args.rtol}
    count = []
    cuspl.cg(A_dev, b, M=M_dev, callback=lambda xk: count.append(1), **cupyx_tol)
    seconds, (x, info) = best_of(
        lambda: cuspl.cg(A_dev, b, M=M_dev, **cupyx_tol), cupy, args.repeat
    )
    record("cupyx", seconds, x, len(count), info)
    cupyx_seconds = seconds
    advance()
    for backend in gpu_backends():
        seconds, (x, info) = cupyx_cg_on_plan(S, M_dev, b, backend, args, cupy)
        record(f"cupyx_cg_on_plan[{backend}]", seconds, x, len(count), info)
        seconds, x, iterations, info, first = cg_one_backend(S, M_host, b, backend, args, cupy)
        record(
            f"sparsegpu[{backend}]",
            seconds,
            x,
            iterations,
            info,
            speedup_vs_cupyx=cupyx_seconds / seconds,
            first_call_seconds_with_callback=first,
        )
        advance()
    iterations = entry["solvers"]["cupyx"]["iterations"]
    scipy_tol = {tolerance_keyword(spl.cg): args.rtol}
    sample, _ = wall(lambda: spl.cg(S, b_host, M=M_host, maxiter=10, **scipy_tol), cupy)
    if sample / 10 * max(iterations, 1) <= args.cpu_budget:
        seconds, (x, info) = wall(lambda: spl.cg(S, b_host, M=M_host, **scipy_tol), cupy)
        record("scipy_cpu", seconds, x, iterations, info)
    else:  # too slow to run in full here: 10 iterations, scaled to the iteration count
        entry["solvers"]["scipy_cpu"] = {
            "seconds": sample / 10 * iterations,
            "iterations": iterations,
            "info": None,
            "relative_residual": None,
            "estimated": True,
            "seconds_per_iteration": sample / 10,
        }
        save()
    advance()


def bench_cg(args, cupy, report, save):
    problems = cg_problems(args.grid, cupy)
    with progress() as bar:
        task = bar.add_task("cg", total=len(problems) * (len(gpu_backends()) + 2))
        for name, (make, use_jacobi) in problems.items():
            S = sp.csr_matrix(make())
            entry = {"n": S.shape[0], "nnz": int(S.nnz), "rtol": args.rtol, "M": None}
            entry["solvers"] = {}
            report["cg"][name] = entry
            cg_one_problem(S, use_jacobi, args, cupy, entry, save, lambda: bar.advance(task))


# ----------------------------------------------------------------- scipy's cg
def scipy_cg_one_backend(S, b, backend, args, cupy, entry, x_plain):
    tol = {tolerance_keyword(spl.cg): 1e-12}
    A = sg.csr_matrix(S)
    A.backend = backend
    mirror_seconds, _ = wall(lambda: A @ b, cupy)  # upload + validation, once
    seconds, (x, _) = wall(lambda: spl.cg(A, b, maxiter=args.iterations, **tol), cupy)
    plain_seconds = entry["runs"]["scipy_alone"]["seconds"]
    entry["runs"][f"sparsegpu[{backend}]"] = {
        "seconds": seconds,
        "first_product_seconds": mirror_seconds,
        "speedup_vs_scipy": plain_seconds / seconds,
        "relative_difference_from_scipy": float(
            np.linalg.norm(x - x_plain) / np.linalg.norm(x_plain)
        ),
    }


def bench_scipy_cg(args, cupy, report, save):
    S = sp.csr_matrix(stencil_3d(args.scipy_grid, 7, xp=cupy))
    b = np.random.default_rng(1).uniform(-1, 1, S.shape[0])
    tol = {tolerance_keyword(spl.cg): 1e-12}
    entry = {"n": S.shape[0], "nnz": int(S.nnz), "iterations": args.iterations, "runs": {}}
    report["scipy_cg"] = entry
    seconds, (x_plain, _) = wall(lambda: spl.cg(S, b, maxiter=args.iterations, **tol), cupy)
    entry["runs"]["scipy_alone"] = {"seconds": seconds}
    save()
    for backend in ["auto", *gpu_backends()]:
        scipy_cg_one_backend(S, b, backend, args, cupy, entry, x_plain)
        save()


# -------------------------------------------------------------------- transpose
def transpose_one_backend(S, backend, args, cupy):
    x = cupy.asarray(np.random.default_rng(2).uniform(-1, 1, S.shape[1]))
    xt = cupy.asarray(np.random.default_rng(3).uniform(-1, 1, S.shape[0]))
    want = cupy.asarray(S.T @ xt.get())
    A = sg.csr_matrix(S)
    A.backend = backend
    A @ x
    build_seconds, y = wall(lambda: A.T @ xt, cupy)  # builds the transpose once
    plan = _planning.plan_for(A, np.float64)
    plan_t = _planning.plan_for(A.T, np.float64)
    y_out = cupy.empty(S.shape[0])
    yt_out = cupy.empty(S.shape[1])
    forward = cuda_time(lambda: plan.matvec(x, out=y_out), repeat=args.kernel_repeat)
    backward = cuda_time(lambda: plan_t.matvec(xt, out=yt_out), repeat=args.kernel_repeat)
    through_t, _ = best_of(lambda: A.T @ xt, cupy, 5)
    through_h, _ = best_of(lambda: A.conj().T @ xt, cupy, 3)
    nbytes = matrix_spmv_bytes(plan.matrix)
    return {
        "A_x_ms": forward.median_ms,
        "AT_x_ms": backward.median_ms,
        "AT_over_A": backward.median_ms / forward.median_ms,
        "A_x_GBps": gb_per_s(nbytes, forward.median_ms),
        "AT_x_GBps": gb_per_s(nbytes, backward.median_ms),
        "first_AT_x_seconds_with_transpose_build": build_seconds,
        "AT_x_through_dispatch_ms": through_t * 1e3,
        "Aconj_T_x_through_dispatch_ms": through_h * 1e3,
        "AT_x_max_relative_error": float(cupy.abs(y - want).max() / cupy.abs(want).max()),
    }


def bench_transpose(args, cupy, report, save):
    matrices = {
        f"poisson3d_{args.grid}": lambda: stencil_3d(args.grid, 7, xp=cupy),
        "power_law_4M": lambda: power_law(4_000_000, seed=0, xp=cupy),
    }
    for name, make in matrices.items():
        S = sp.csr_matrix(make())
        entry = {"n_rows": S.shape[0], "nnz": int(S.nnz), "backends": {}}
        report["transpose"][name] = entry
        for backend in gpu_backends():
            entry["backends"][backend] = transpose_one_backend(S, backend, args, cupy)
            save()


# ---------------------------------------------------------------------- matmat
def matmat_one(plan, A_dev, k, args, cupy):
    n_rows, n_cols = plan.matrix.shape
    X = cupy.asarray(np.random.default_rng(k).uniform(-1, 1, (n_cols, k)))
    Y = cupy.empty((n_rows, k))
    plan.matmat(X, out=Y)
    want = A_dev @ X
    error = float(cupy.abs(Y - want).max() / cupy.abs(want).max())
    XT = cupy.ascontiguousarray(X.T)  # k contiguous columns, as k products want them
    YT = cupy.empty((k, n_rows))

    def separate():
        for j in range(k):
            plan.matvec(XT[j], out=YT[j])

    together = cuda_time(lambda: plan.matmat(X, out=Y), repeat=args.kernel_repeat)
    apart = cuda_time(separate, repeat=args.kernel_repeat)
    return {
        "matmat_ms": together.median_ms,
        "k_products_ms": apart.median_ms,
        "speedup": apart.median_ms / together.median_ms,
        "max_relative_error": error,
    }


def bench_matmat(args, cupy, report, save):
    import cupyx.scipy.sparse as cusp

    matrices = {
        f"poisson3d_{args.matmat_grid}": lambda: stencil_3d(args.matmat_grid, 7, xp=cupy),
        "power_law_1M": lambda: power_law(1_000_000, seed=1, xp=cupy),
    }
    for name, make in matrices.items():
        S = make()
        entry = {"n_rows": S.shape[0], "nnz": int(S.nnz), "backends": {}}
        report["matmat"][name] = entry
        A_dev = cusp.csr_matrix(sp.csr_matrix(S))
        for backend in gpu_backends():
            A = sg.csr_matrix(S)
            A.backend = backend
            plan = _planning.plan_for(A, np.float64)
            rows = entry["backends"][backend] = {}
            for k in (1, 2, 4, 8, 16, 32, 64):
                rows[k] = matmat_one(plan, A_dev, k, args, cupy)
                save()


# ----------------------------------------------------------------------- output
def _row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown(report) -> str:
    versions = report["versions"]
    lines = [f"# Solver benchmarks ({report['device']})", ""]
    lines.append(f"CuPy {versions.get('cupy')}, CUDA {versions.get('cuda_runtime')}.")
    for name, e in report["cg"].items():
        title = f"CG to rtol {e['rtol']:g}: {name} (n = {e['n']:,}, nnz = {e['nnz']:,})"
        lines += ["", f"## {title}, M = {e['M']}", ""]
        lines.append(_row("solver", "seconds", "iterations", "info", "residual", "vs cupyx"))
        lines.append("|---|---:|---:|---:|---:|---:|")
        for key, r in e["solvers"].items():
            seconds = f"{r['seconds']:.4f}" + (" (estimated)" if r.get("estimated") else "")
            res = r.get("relative_residual")
            speed = r.get("speedup_vs_cupyx")
            lines.append(
                _row(
                    key,
                    seconds,
                    r["iterations"],
                    r["info"],
                    "-" if res is None else f"{res:.2e}",
                    "-" if speed is None else f"{speed:.2f}x",
                )
            )
    if report.get("scipy_cg"):
        e = report["scipy_cg"]
        lines += ["", f"## scipy.sparse.linalg.cg with NumPy vectors, {e['iterations']} "]
        lines[-1] += f"iterations (n = {e['n']:,}, nnz = {e['nnz']:,})"
        lines += ["", _row("matrix", "seconds", "first product s", "vs scipy alone")]
        lines.append("|---|---:|---:|---:|")
        for key, r in e["runs"].items():
            first = r.get("first_product_seconds")
            speed = r.get("speedup_vs_scipy")
            lines.append(
                _row(
                    key,
                    f"{r['seconds']:.3f}",
                    "-" if first is None else f"{first:.3f}",
                    "-" if speed is None else f"{speed:.2f}x",
                )
            )
    for name, e in report["transpose"].items():
        lines += ["", f"## A.T @ x against A @ x: {name} (nnz = {e['nnz']:,})", ""]
        lines.append(
            _row(
                "backend",
                "A@x ms",
                "A.T@x ms",
                "ratio",
                "A.T@x GB/s",
                "first A.T@x s",
                "A.conj().T@x ms",
            )
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|")
        for b, r in e["backends"].items():
            lines.append(
                _row(
                    b,
                    f"{r['A_x_ms']:.3f}",
                    f"{r['AT_x_ms']:.3f}",
                    f"{r['AT_over_A']:.2f}",
                    f"{r['AT_x_GBps']:.0f}",
                    f"{r['first_AT_x_seconds_with_transpose_build']:.3f}",
                    f"{r['Aconj_T_x_through_dispatch_ms']:.1f}",
                )
            )
    for name, e in report["matmat"].items():
        lines += ["", f"## A @ X against k products: {name} (nnz = {e['nnz']:,})", ""]
        lines.append(_row("backend", "k", "A@X ms", "k products ms", "speedup"))
        lines.append("|---|---:|---:|---:|---:|")
        for b, rows in e["backends"].items():
            for k, r in rows.items():
                lines.append(
                    _row(
                        b,
                        k,
                        f"{r['matmat_ms']:.3f}",
                        f"{r['k_products_ms']:.3f}",
                        f"{r['speedup']:.2f}x",
                    )
                )
    if report["errors"]:
        lines += ["", "## Errors", ""]
        lines += [f"- {k}: {v.strip().splitlines()[-1]}" for k, v in report["errors"].items()]
    return "\n".join(lines) + "\n"


def plot(report, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, e in report["cg"].items():
        keys = [k for k in e["solvers"] if k != "scipy_cpu"]
        axes[0].bar([f"{name}\n{k}" for k in keys], [e["solvers"][k]["seconds"] for k in keys])
    axes[0].set_ylabel("seconds to solution")
    axes[0].tick_params(axis="x", rotation=90, labelsize=6)
    axes[0].set_title("CG time to solution on the GPU")
    for name, e in report["matmat"].items():
        for backend, rows in e["backends"].items():
            ks = list(rows)
            axes[1].plot(
                ks, [rows[k]["speedup"] for k in ks], marker="o", label=f"{name} {backend}"
            )
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("k columns")
    axes[1].set_ylabel("A @ X speedup over k products")
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True, help="result file (JSON)")
    parser.add_argument("--md", type=Path, help="result table (Markdown)")
    parser.add_argument("--plot", type=Path, help="draw the results into this image")
    parser.add_argument("--grid", type=int, default=200, help="Poisson grid side (default 200)")
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--repeat", type=int, default=3, help="timed solves per solver")
    parser.add_argument(
        "--cpu-budget", type=float, default=20.0, help="seconds for a full CPU solve"
    )
    parser.add_argument("--scipy-grid", type=int, default=193, help="193^3 x 7 = 50M nonzeros")
    parser.add_argument("--iterations", type=int, default=20, help="scipy cg iterations")
    parser.add_argument("--matmat-grid", type=int, default=128)
    parser.add_argument("--kernel-repeat", type=int, default=20)
    parser.add_argument(
        "--sections", default="cg,scipy_cg,transpose,matmat", help="comma-separated sections"
    )
    parser.add_argument("--backends", default="", help="comma-separated GPU backends (all)")
    args = parser.parse_args(argv)
    _CHOSEN_BACKENDS[:] = [b for b in args.backends.split(",") if b]
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print(f"solvers benchmark needs a GPU: {_cuda.unavailable_reason()}", file=sys.stderr)
        return 2
    info = _cuda.device_info()
    report = {
        "device": f"{info.name} ({info.arch}, {info.multiprocessors} SMs)",
        "versions": _cuda.versions(),
        "gpu_backends": gpu_backends(),
        "cg": {},
        "scipy_cg": {},
        "transpose": {},
        "matmat": {},
        "errors": {},
    }

    def save():
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
        if args.md:
            args.md.write_text(markdown(report))

    sections = {"cg": bench_cg, "scipy_cg": bench_scipy_cg, "transpose": bench_transpose,
                "matmat": bench_matmat}  # fmt: skip
    for name in args.sections.split(","):
        try:
            sections[name](args, cupy, report, save)
        except Exception:
            report["errors"][name] = traceback.format_exc()
            print(report["errors"][name], file=sys.stderr)
        save()
    if args.plot:
        plot(report, args.plot)
    console().print(markdown(report))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
