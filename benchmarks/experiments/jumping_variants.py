"""How hard the jumping-coefficient problem is for Jacobi-CG, by discretisation (issue 46).

Issue 46 reports, for "3-D, conductivity 1 or 1e4 in random 8^3 cells, 96^3", 8,469
Jacobi-CG iterations to 1e-8 (and plain CG not converged in 20,000); its "3x Jacobi-cg"
bar for multigrid was set on that instance. ``benchmarks.amg.jumping3d`` (cell-centred
finite volumes, harmonic means on faces, half of the 8^3 blocks at 1e4, Dirichlet walls)
needs far fewer. This counts scipy's Jacobi-CG iterations (``rtol=1e-8``, the benchmark's
right-hand side) on variants of that description at one size, on the host (no GPU):

* ``fv-harmonic``: ``benchmarks.amg.jumping3d`` itself;
* ``fv-harmonic-high=F``: the same with a share ``F`` of the blocks at 1e4 (the rest 1);
* ``fv-arithmetic``: arithmetic means on faces;
* ``fv-grid8``: an 8 x 8 x 8 grid of coefficient cells (each n/8 a side) instead of cells of
  8^3 grid cells;
* ``vertex``: unknowns at the n^3 interior nodes of (n+1)^3 unit cells, an edge's
  coefficient the mean of its four cells (the usual vertex-centred scheme);
* ``fv-harmonic-one-wall`` (and ``...-high=F``): Dirichlet on the wall x = 0 only, no flux
  through the others (a pressure problem's usual boundary).

With ``--plain`` and ``--pyamg``, also CG without a preconditioner and PyAMG's smoothed
aggregation (default options) as CG's preconditioner, the issue's other two columns.

It says which discretisations reach the issue's count; none is chosen from it for a
benchmark (a class fixed after seeing multigrid's ratio on it would be fitted).

Usage::

    python -m benchmarks.experiments.jumping_variants --size 96 --out FILE.json --md FILE.md
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from benchmarks import amg, common

ISSUE = {
    "size": 96,
    "jacobi_cg_iterations": 8469,
    "plain_cg": "not converged in 20,000",
    "pyamg_iterations": 150,
}
VARIANTS = (
    "fv-harmonic",
    "fv-harmonic-high=0.1",
    "fv-harmonic-high=0.25",
    "fv-harmonic-high=0.3",
    "fv-harmonic-high=0.8",
    "fv-arithmetic",
    "fv-grid8",
    "vertex",
    "fv-harmonic-one-wall",
    "fv-harmonic-one-wall-high=0.25",
)


def vertex_centred(n: int, seed: int, high=0.5):
    """n^3 interior nodes of (n+1)^3 unit cells; an edge's coefficient the mean of the four
    cells around it; Dirichlet boundary nodes eliminated."""
    k = amg.block_coefficients(n + 1, seed, high)
    index = np.arange(n**3).reshape(n, n, n)
    diagonal = np.zeros((n, n, n))
    rows, cols, vals = [], [], []
    for axis in range(3):
        others = [a for a in range(3) if a != axis]
        edge = 0.0
        for d1 in (0, 1):
            for d2 in (0, 1):
                s = [slice(None)] * 3
                s[axis] = slice(0, n + 1)
                s[others[0]], s[others[1]] = slice(d1, d1 + n), slice(d2, d2 + n)
                edge = edge + k[tuple(s)] / 4  # edge m joins nodes m - 1 and m
        below, above, inner = [slice(None)] * 3, [slice(None)] * 3, [slice(None)] * 3
        below[axis], above[axis], inner[axis] = slice(0, n), slice(1, n + 1), slice(1, n)
        diagonal += edge[tuple(below)] + edge[tuple(above)]
        a, b = [slice(None)] * 3, [slice(None)] * 3
        a[axis], b[axis] = slice(0, n - 1), slice(1, n)
        w = edge[tuple(inner)].ravel()
        rows += [index[tuple(a)].ravel(), index[tuple(b)].ravel()]
        cols += [index[tuple(b)].ravel(), index[tuple(a)].ravel()]
        vals += [-w, -w]
    rows.append(index.ravel())
    cols.append(index.ravel())
    vals.append(diagonal.ravel())
    shape = (n**3,) * 2
    return sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=shape).tocsr()  # fmt: skip


def build(variant: str, n: int, seed: int):
    """The matrix of ``variant`` (see the module docstring) at ``n``^3 unknowns."""
    if variant == "vertex":
        return vertex_centred(n, seed)
    high = float(variant.split("=")[1]) if "-high=" in variant else 0.5
    options = {
        "fv-harmonic": {},
        "fv-arithmetic": {"mean": "arithmetic"},
        "fv-grid8": {"grid8": True},
        "fv-harmonic-one-wall": {"walls": "x0"},
    }
    found = options.get(variant.split("-high=")[0])
    if found is None:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    return amg.jumping3d(n, seed, high=high, **found)[0]


def jacobi_cg(A, maxiter: int) -> dict:
    b = amg.right_hand_side(A.shape[0])
    count = [0]
    started = time.perf_counter()
    x, info = spla.cg(A, b, rtol=amg.RTOL, maxiter=maxiter, M=sp.diags(1 / A.diagonal()),
                      callback=lambda _: count.__setitem__(0, count[0] + 1))  # fmt: skip
    return {
        "iterations": count[0],
        "converged": info == 0,
        "relative_residual": amg.relative_residual(A, x, b),
        "seconds": time.perf_counter() - started,
    }


def plain_cg(A, maxiter: int) -> dict:
    """CG without a preconditioner (the issue's first column)."""
    b = amg.right_hand_side(A.shape[0])
    count = [0]
    x, info = spla.cg(A, b, rtol=amg.RTOL, maxiter=maxiter,
                      callback=lambda _: count.__setitem__(0, count[0] + 1))  # fmt: skip
    return {"iterations": count[0], "converged": info == 0,
            "relative_residual": amg.relative_residual(A, x, b)}  # fmt: skip


def pyamg_sa_cg(A) -> dict:
    """PyAMG's smoothed aggregation (default options) as CG's preconditioner, as
    ``benchmarks.amg`` runs it."""
    import pyamg

    b = amg.right_hand_side(A.shape[0])
    started = time.perf_counter()
    ml = pyamg.smoothed_aggregation_solver(A)
    setup = time.perf_counter() - started
    residuals: list = []
    x = ml.solve(b, tol=amg.RTOL, accel="cg", residuals=residuals, maxiter=400)
    return {"iterations": len(residuals) - 1, "setup_s": setup,
            "solve_s": time.perf_counter() - started - setup,
            "relative_residual": amg.relative_residual(A, x, b),
            "operator_complexity": float(ml.operator_complexity())}  # fmt: skip


def markdown(result: dict) -> str:
    lines = [
        "# Jacobi-CG iterations on variants of the jumping-coefficient problem (issue 46)",
        "",
        f"{result['size']}^3, cell seed {result['seed']}, rtol 1e-8, scipy on the host. The "
        f"issue's instance: {ISSUE['jacobi_cg_iterations']:,} iterations at "
        f"{ISSUE['size']}^3.",
        "",
        "| variant | unknowns | Jacobi-CG iterations | x the issue's | CG iterations | "
        "PyAMG SA-CG iterations |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        ratio = row["iterations"] / ISSUE["jacobi_cg_iterations"]
        flag = "" if row["converged"] else " (not converged)"
        plain = row.get("plain_cg")
        plain_text = (
            "—"
            if plain is None
            else (f"{plain['iterations']:,}" + ("" if plain["converged"] else " (not converged)"))
        )
        sa = row.get("pyamg")
        sa_text = "—" if sa is None else f"{sa['iterations']:,}"
        lines.append(f"| {row['variant']} | {row['unknowns']:,} | {row['iterations']:,}{flag} | "
                     f"{ratio:.2f} | {plain_text} | {sa_text} |")  # fmt: skip
    lines += ["", f"The issue's instance: CG {ISSUE['plain_cg']}, PyAMG SA-CG "
              f"{ISSUE['pyamg_iterations']} iterations."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=ISSUE["size"])
    parser.add_argument("--seed", type=int, default=amg.CELL_SEEDS["heldout"])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--maxiter", type=int, default=20_000)
    parser.add_argument("--plain", action="store_true", help="also CG without a preconditioner")
    parser.add_argument("--pyamg", action="store_true", help="also PyAMG's SA-CG (the amg extra)")
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--md", type=pathlib.Path)
    args = parser.parse_args(argv)
    result = {"size": args.size, "seed": args.seed, "command": " ".join(sys.argv), "rows": []}
    for variant in args.variants.split(","):
        A = build(variant, args.size, args.seed)
        row = {"variant": variant, "unknowns": A.shape[0], **jacobi_cg(A, args.maxiter)}
        if args.plain:
            row["plain_cg"] = plain_cg(A, args.maxiter)
        if args.pyamg:
            row["pyamg"] = pyamg_sa_cg(A)
        result["rows"].append(row)
        print(f"{variant}: {row['iterations']} iterations ({row['seconds']:.0f} s)", flush=True)
        common.save_partial(result, args.out)
    common.write_outputs(result, args, markdown, plot=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
