"""Multigrid on one GPU: time to solution of ``sparsegpu.linalg.amg`` as a CG preconditioner
against sparsegpu's plain and Jacobi CG and PyAMG's smoothed aggregation (issue 46).

For each problem: the wall-clock time of set-up + solve to ``rtol = 1e-8`` (a random,
seeded right-hand side) with

* ``cg``: ``sg.linalg.cg(A, b)``;
* ``jacobi_cg``: ``sg.linalg.cg(A, b, M=sg.diags(1 / A.diagonal()))``;
* ``amg_cg``: ``ml = sg.linalg.amg(A, B=...)`` then ``sg.linalg.cg(A, b, M=ml)``; also
  its re-set-up (``ml.update`` with new values on the same pattern, the new matrix on the
  device already as A was for the set-up: the first update, which measures the SpGEMM
  algorithms of each pattern pair once, and the second, as every later time step or
  Newton step runs), operator and grid complexity, the set-up's phases;
* ``pyamg``: PyAMG's ``smoothed_aggregation_solver(A, B=...)`` (default options) and its
  ``solve(b, tol=1e-8, accel="cg")`` on the CPU, one worker process per problem, run in
  parallel while the GPU measures (``--pyamg-maxiter`` caps its solve; problems above
  ``--pyamg-max-unknowns`` skip it).

Every answer's relative residual is computed again on the host with scipy. CG solves are
timed on their second run (plans made and kernels compiled by the first); the multigrid
set-up is timed on its first call for the matrix (kernels compiled by a warm-up problem),
its solve on the second. Problem sets (``--set``): ``heldout`` (default; the reported
instances, none used in choosing a default) and ``fit`` (smaller instances of each class,
what the defaults were checked on).

Usage: ``python -m benchmarks.amg --out amg.json --md amg.md --plot amg.png``
(``--from-json amg.json --md ... --plot ...`` redraws without a GPU).
"""

from __future__ import annotations

import json
import os
import sys
import time
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks import common

RTOL = 1e-8
# (class, size): size is the grid side (cells per side for elasticity)
SETS = {
    "heldout": [
        ("poisson3d", 128),
        ("poisson3d", 256),
        ("anisotropic2d", 1500),
        ("jumping3d", 112),
        # added in issue 47's fifth round, before any multigrid ran on it: the issue's own
        # instance as benchmarks/experiments/jumping_variants.py found it (its three columns
        # matched on the CPU at 96^3, seed 2); this draw and size are new
        ("jumping3d_wall", 112),
        ("elasticity3d", 32),
        # added in issue 46's sixth round, before any multigrid ran on it: a stand-in for
        # SuiteSparse's G3_circuit (1.59M rows, not reachable here), its size and its
        # rows' lengths, drawn anew
        ("circuit2d", 1260),
    ],
    "fit": [
        ("poisson3d", 64),
        ("anisotropic2d", 400),
        ("jumping3d", 64),
        ("jumping3d_wall", 64),
        ("elasticity3d", 16),
        ("circuit2d", 600),
    ],
    "smoke": [
        ("poisson3d", 24),
        ("anisotropic2d", 64),
        ("jumping3d", 24),
        ("elasticity3d", 6),
        ("circuit2d", 40),
    ],  # fmt: skip
}
# the 2-D classes (size: a grid side; the others' size is a side of a cube)
PLANAR = ("anisotropic2d", "circuit2d")
# the random cells of the jumping coefficients: another draw for the held-out instances
CELL_SEEDS = {"heldout": 2, "fit": 1, "smoke": 1}
# and of the one-wall instances (draws of their own)
WALL_SEEDS = {"heldout": 4, "fit": 3, "smoke": 3}
# and of the power grids' wires, opens and pads
CIRCUIT_SEEDS = {"heldout": 2, "fit": 1, "smoke": 1}


# ---------------------------------------------------------------------- problems
def poisson3d(n: int):
    """The 3-D 7-point Laplacian (Dirichlet), n^3 unknowns."""
    from sparsegpu.datasets.synthetic import stencil_3d

    return sp.csr_matrix(stencil_3d(n)), None


def anisotropic2d(n: int):
    """2-D diffusion, anisotropy 1e-3 rotated 30 degrees (PyAMG's gallery, FD), n^2."""
    from pyamg.gallery import diffusion_stencil_2d, stencil_grid

    stencil = diffusion_stencil_2d(epsilon=1e-3, theta=np.pi / 6, type="FD")
    return stencil_grid(stencil, (n, n), format="csr"), None


def block_coefficients(n: int, seed: int, high=0.5, grid8=False) -> np.ndarray:
    """k = 1 or 1e4 on n^3 cells, drawn per block of 8^3 cells (``grid8``: per block of an
    8 x 8 x 8 grid of blocks), a share ``high`` of the blocks at 1e4."""
    rng = np.random.default_rng(seed)
    cells = -(-n // 8) if grid8 else 8  # a block's cells a side
    blocks = 8 if grid8 else -(-n // 8)
    k_block = np.where(rng.random((blocks,) * 3) < 1 - high, 1.0, 1e4)
    return k_block.repeat(cells, 0).repeat(cells, 1).repeat(cells, 2)[:n, :n, :n]


def jumping3d(n: int, seed: int, high=0.5, mean="harmonic", grid8=False, walls="all"):
    """Cell-centred finite volumes of -div(k grad u) on n^3 cells, k = 1 or 1e4 at random in
    blocks of 8^3 cells, harmonic means on faces, Dirichlet walls (the benchmark's problem).

    The variants of ``benchmarks/experiments/jumping_variants.py``: ``high`` the share of
    blocks at 1e4, ``mean="arithmetic"`` on faces, ``grid8`` an 8 x 8 x 8 grid of blocks
    (each n/8 cells a side), ``walls="x0"`` Dirichlet on the wall x = 0 only."""
    k = block_coefficients(n, seed, high, grid8)
    index = np.arange(n**3).reshape(n, n, n)
    diagonal = np.zeros((n, n, n))
    rows, cols, vals = [], [], []
    for axis in range(3):
        low = [slice(None)] * 3
        upper = [slice(None)] * 3
        low[axis], upper[axis] = slice(0, n - 1), slice(1, n)
        k1, k2 = k[tuple(low)], k[tuple(upper)]
        face = 2 * k1 * k2 / (k1 + k2) if mean == "harmonic" else (k1 + k2) / 2
        diagonal[tuple(low)] += face
        diagonal[tuple(upper)] += face
        rows += [index[tuple(low)].ravel(), index[tuple(upper)].ravel()]
        cols += [index[tuple(upper)].ravel(), index[tuple(low)].ravel()]
        vals += [-face.ravel(), -face.ravel()]
        for wall in (0, n - 1):  # Dirichlet walls: a half cell to the boundary
            if walls != "all" and (axis, wall) != (0, 0):
                continue
            side = [slice(None)] * 3
            side[axis] = wall
            diagonal[tuple(side)] += 2 * k[tuple(side)]
    rows.append(index.ravel())
    cols.append(index.ravel())
    vals.append(diagonal.ravel())
    A = sp.coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n**3,) * 2
    )
    return A.tocsr(), None


def jumping3d_wall(n: int, seed: int):
    """The issue's jumping coefficients, as ``jumping_variants`` found them: a quarter of
    the 8^3-cell blocks at 1e4, Dirichlet on the wall x = 0 only (no flux through the
    others); about 5x the Jacobi-CG iterations of :func:`jumping3d`."""
    return jumping3d(n, seed, high=0.25, walls="x0")


def circuit2d(n: int, seed: int):
    """A power grid's resistor network, the class of SuiteSparse's G3_circuit (a
    stand-in: that matrix cannot be fetched here): n^2 nodes on a grid, each grid row
    and column one wire of its own width (conductance 10^U(0, 2)), each segment's
    conductance that times exp(1.5 N(0, 1)), a tenth of the segments open, a supply pad
    (conductance 1e3 to the fixed supply) every 32 nodes in each direction, and a leak to
    ground of 1e-6 times the mean diagonal at every node (no node floats where opens cut
    an island off). About 4.6 entries a row (G3_circuit 4.8). Chosen on the CPU at
    300^2 before any multigrid ran on it, by its Jacobi-CG, CG and PyAMG iterations
    (2,068, 17,183 and 72; G3_circuit's at its own size 3,374, 16,401 and 43)."""
    rng = np.random.default_rng(seed)
    index = np.arange(n * n).reshape(n, n)
    diagonal = np.zeros(n * n)
    rows, cols, vals = [], [], []
    widths = 10 ** rng.uniform(0, 2, (2, n))
    for along_rows, width in ((True, widths[0][:, None]), (False, widths[1][None, :])):
        a = index[:, :-1] if along_rows else index[:-1, :]
        b = index[:, 1:] if along_rows else index[1:, :]
        g = width * np.exp(1.5 * rng.standard_normal(a.shape))
        kept = rng.random(a.shape) >= 0.1
        a, b, g = a[kept], b[kept], g[kept]
        rows += [a, b]
        cols += [b, a]
        vals += [-g, -g]
        np.add.at(diagonal, a, g)
        np.add.at(diagonal, b, g)
    diagonal[index[16::32, 16::32].ravel()] += 1e3
    diagonal += 1e-6 * diagonal.mean()
    rows.append(index.ravel())
    cols.append(index.ravel())
    vals.append(diagonal)
    A = sp.coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n * n,) * 2
    )
    return A.tocsr(), None


def elasticity3d(n: int):
    """Linear elasticity (P1 tetrahedra, 6 a cube of an n^3 grid of the unit cube, E = 1e5,
    nu = 0.3: PyAMG's element matrices), clamped at x = 0; rigid-body modes as B."""
    from pyamg.gallery.elasticity import p13d_local

    lame = 1e5 * 0.3 / ((1 + 0.3) * (1 - 0.6))
    mu = 1e5 / (2 + 0.6)
    m = n + 1
    coords = np.stack(np.meshgrid(*(np.arange(m) / n,) * 3, indexing="ij"), -1).reshape(-1, 3)
    node = np.arange(m**3).reshape(m, m, m)
    corner = node[:-1, :-1, :-1].ravel()
    offsets = [node[a, b, c] for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    # the 6 tetrahedra of a cube around its main diagonal (corners 0 and 7)
    tets = [(0, 1, 3, 7), (0, 3, 2, 7), (0, 2, 6, 7), (0, 6, 4, 7), (0, 4, 5, 7), (0, 5, 1, 7)]
    rows, cols, vals = [], [], []
    for tet in tets:
        local = np.array([offsets[v] for v in tet])
        K = p13d_local(coords[local], lame, mu)  # the same for every cube of the grid
        K *= np.sign(np.trace(K))  # PyAMG's element matrix carries the orientation's sign
        nodes = corner[:, None] + local[None, :]  # (cubes, 4)
        dofs = (3 * nodes[:, :, None] + np.arange(3)).reshape(-1, 12)
        rows.append(np.repeat(dofs, 12, axis=1).ravel())
        cols.append(np.tile(dofs, (1, 12)).ravel())
        vals.append(np.broadcast_to(K.ravel(), (dofs.shape[0], 144)).ravel())
    size = 3 * m**3
    A = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(size, size)).tocsr()  # fmt: skip
    free_nodes = np.flatnonzero(coords[:, 0] > 0)
    free = (3 * free_nodes[:, None] + np.arange(3)).ravel()
    A = A[free][:, free].tocsr()
    x, y, z = coords[free_nodes].T
    B = np.zeros((free.shape[0], 6))
    B[0::3, 0] = B[1::3, 1] = B[2::3, 2] = 1
    B[0::3, 3], B[1::3, 3] = -y, x
    B[0::3, 4], B[2::3, 4] = -z, x
    B[1::3, 5], B[2::3, 5] = -z, y
    return A.tobsr(blocksize=(3, 3)), B


def make_problem(name: str, size: int, set_name: str):
    if name == "jumping3d":
        return jumping3d(size, CELL_SEEDS[set_name])
    if name == "jumping3d_wall":
        return jumping3d_wall(size, WALL_SEEDS[set_name])
    if name == "circuit2d":
        return circuit2d(size, CIRCUIT_SEEDS[set_name])
    return {"poisson3d": poisson3d, "anisotropic2d": anisotropic2d,
            "elasticity3d": elasticity3d}[name](size)  # fmt: skip


def right_hand_side(n: int):
    return np.random.default_rng(0).standard_normal(n)


def relative_residual(A, x, b) -> float:
    return float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))


# ---------------------------------------------------------------------- PyAMG (CPU)
def pyamg_run(name: str, size: int, set_name: str, maxiter: int) -> dict:
    """PyAMG's smoothed aggregation, default options, on the CPU (a worker process)."""
    import pyamg

    A, B = make_problem(name, size, set_name)
    b = right_hand_side(A.shape[0])
    started = time.perf_counter()
    ml = pyamg.smoothed_aggregation_solver(A, B=B)
    setup = time.perf_counter() - started
    residuals: list[float] = []
    started = time.perf_counter()
    x = ml.solve(b, tol=RTOL, accel="cg", maxiter=maxiter, residuals=residuals)
    solve = time.perf_counter() - started
    residual = relative_residual(A, x, b)
    return {"setup_s": setup, "solve_s": solve, "iterations": len(residuals) - 1,
            "converged": residual <= RTOL * 1.01, "relative_residual": residual,
            "operator_complexity": ml.operator_complexity(), "levels": len(ml.levels)}  # fmt: skip


# ---------------------------------------------------------------------- GPU
def _device():
    """CuPy, or NumPy where there is no GPU (a smoke run of the script on the host)."""
    from sparsegpu.device import _cuda

    return _cuda.cupy_or_none() or np


def _sync(xp) -> None:
    if xp is not np:
        xp.cuda.Device().synchronize()


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _timed(fn, xp):
    _sync(xp)
    started = time.perf_counter()
    out = fn()
    _sync(xp)
    return out, time.perf_counter() - started


def _new_values(A, seed: int = 3):
    """A with new values on its pattern: D A D, D a random diagonal in [0.8, 1.25]."""
    scale = np.random.default_rng(seed).uniform(0.8, 1.25, A.shape[0])
    A = A.tocsr().copy()
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    A.data *= scale[rows] * scale[A.indices]
    return A


def gpu_run(name: str, A_host, B, maxiter: int) -> dict:
    import sparsegpu as sg

    cupy = _device()

    A_csr = A_host.tocsr()
    A = sg.csr_matrix(A_csr)
    amg_input = sg.bsr_matrix(A_host) if A_host.format == "bsr" else A
    b_host = right_hand_side(A.shape[0])
    b = cupy.asarray(b_host)
    row = {"unknowns": int(A.shape[0]), "nonzeros": int(A.nnz)}
    for label, M in (("cg", None), ("jacobi_cg", sg.diags(1 / A_csr.diagonal()))):

        def solve(M=M):
            return sg.linalg.cg(A, b, rtol=RTOL, maxiter=maxiter, M=M)

        solve()
        (x, info), seconds = _timed(solve, cupy)
        used = sg.linalg.last_solve_info()
        residual = relative_residual(A_csr, _host(x), b_host)
        row[label] = {"seconds": seconds, "iterations": used.iterations,
                      "graphs": used.graphs, "converged": residual <= RTOL * 1.01,
                      "relative_residual": residual}  # fmt: skip
    ml, setup = _timed(lambda: sg.linalg.amg(amg_input, B=B), cupy)

    def amg_solve():
        return sg.linalg.cg(A, b, rtol=RTOL, maxiter=maxiter, M=ml)

    _, first_solve = _timed(amg_solve, cupy)
    (x, info), solve = _timed(amg_solve, cupy)
    used = sg.linalg.last_solve_info()
    residual = relative_residual(A_csr, _host(x), b_host)
    phases = dict(ml.setup_seconds)
    A_new = _new_values(A_host)
    A_new_input = (
        sg.bsr_matrix(A_new.tobsr(blocksize=A_host.blocksize))
        if A_host.format == "bsr"
        else sg.csr_matrix(A_new)
    )
    A_new_input @ b  # resident on the device before the clock starts, as A was for set-up
    _, update_first = _timed(lambda: ml.update(A_new_input), cupy)
    _, update = _timed(lambda: ml.update(A_new_input), cupy)
    b_new = cupy.asarray(b_host)
    (x_new, _), _ = _timed(
        lambda: sg.linalg.cg(sg.csr_matrix(A_new), b_new, rtol=RTOL, maxiter=maxiter, M=ml), cupy
    )
    row["amg_cg"] = {
        "setup_s": setup, "solve_s": solve, "first_solve_s": first_solve,
        "seconds": setup + solve, "iterations": used.iterations, "graphs": used.graphs,
        "graphs_reason": used.graphs_reason, "preconditioner": used.preconditioner,
        "converged": residual <= RTOL * 1.01, "relative_residual": residual,
        "update_first_s": update_first, "update_s": update,
        "updated_relative_residual": relative_residual(A_new, _host(x_new), b_host),
        "operator_complexity": ml.operator_complexity(),
        "grid_complexity": ml.grid_complexity(), "levels": len(ml.levels),
        "rows_per_level": [int(level.A.shape[0]) for level in ml.levels],
        "setup_phases_s": phases, "hierarchy": repr(ml),
    }  # fmt: skip
    return row


def warm_up() -> None:
    """Compile every kernel the measured runs use (the set-up's array code, the smoothers,
    the SpGEMM and SpMV instantiations of scalar and 3 x 3 / 6 x 6 block levels, update)
    on small problems, not timed: the first set-up of a process otherwise carries NVRTC's
    compilations (cached on disk by CuPy for later processes)."""
    import sparsegpu as sg
    from sparsegpu.datasets.synthetic import power_law

    cupy = _device()
    if cupy is not np:  # every hash-row kernel a rule's sample or a product may launch
        from sparsegpu.backends import _hash_kernels as hashed

        for lanes, whole in hashed.GROUPS:
            for name in (hashed._count_kernel(np.int32, lanes, whole),
                         hashed._sample_kernel(np.int32, lanes, whole),
                         hashed._fill_kernel(np.float64, np.int32, lanes, whole)):  # fmt: skip
                hashed._kernel(name, 0)
        for name in (hashed._dense_count_kernel(np.int32),
                     hashed._dense_fill_kernel(np.float64, np.int32)):  # fmt: skip
            hashed._kernel(name, 0)  # dense rows: the coarse levels' products may take them
    # hash rows' kernels, every table size (the problems below are too small for the rule
    # to take them; the measured ones take them on the elasticity levels)
    for mean in (3.0, 8.0, 30.0):  # short rows take groups of 8 or 16 lanes, long a warp
        M = sg.csr_matrix(power_law(200_000, mean=mean, seed=3))
        M.planning = "estimate"
        M @ M
        sg.spgemm(M, M, algorithm="hash")
    # the default coarsest size too: its dense solve's checks reduce on the device
    sg.linalg.amg(sg.csr_matrix(anisotropic2d(96)[0]))
    for A, B in (poisson3d(40), jumping3d(32, 9), anisotropic2d(96), elasticity3d(8)):
        ml = sg.linalg.amg(sg.bsr_matrix(A) if A.format == "bsr" else sg.csr_matrix(A), B=B,
                           max_coarse=10)  # fmt: skip
        # and the re-set-up's kernels (its planning's candidates, the in-place writes)
        ml.update(sg.bsr_matrix(A * 2.0) if A.format == "bsr" else sg.csr_matrix(A * 2.0))
        A_csr = sg.csr_matrix(A.tocsr())
        b = cupy.asarray(right_hand_side(A.shape[0]))
        sg.linalg.cg(A_csr, b, rtol=RTOL, M=ml)
        sg.linalg.cg(A_csr, b, rtol=RTOL, M=sg.diags(1 / A.diagonal()))
        sg.linalg.cg(A_csr, b, rtol=RTOL, maxiter=50)
        A_new = _new_values(A)
        ml.update(sg.bsr_matrix(A_new.tobsr(blocksize=A.blocksize)) if A.format == "bsr"
                  else sg.csr_matrix(A_new))  # fmt: skip


# ---------------------------------------------------------------------- report
def summarize(rows) -> dict:
    """The bars of issue 46 per row: speed-ups, iteration and set-up ratios."""
    out = {}
    for row in rows:
        if "error" in row:
            continue
        amg, jac, theirs = row["amg_cg"], row["jacobi_cg"], row.get("pyamg")
        entry = {
            "speedup_over_jacobi_cg": jac["seconds"] / amg["seconds"],
            "resetup_speedup": amg["setup_s"] / amg["update_s"],
            "operator_complexity": amg["operator_complexity"],
        }
        if theirs:
            entry["iterations_over_pyamg"] = amg["iterations"] / max(theirs["iterations"], 1)
            entry["setup_speedup_over_pyamg"] = theirs["setup_s"] / amg["setup_s"]
            entry["pyamg_converged"] = theirs["converged"]
        out[row["problem"]] = entry
    return out


def markdown(result) -> str:
    lines = [
        f"Multigrid on {result.get('device', '?')} ({result.get('set', '?')} set), rtol 1e-8, "
        "wall seconds (PyAMG on the host CPU)",
        "",
        "| problem | unknowns | cg its / s | Jacobi-cg its / s | AMG-cg its, set-up + solve = s "
        "| x Jacobi-cg | re-set-up s (first) | op. cx | PyAMG its, set-up s | its ratio "
        "| set-up x |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["results"]:
        if "error" in row:
            lines.append(f"| {row['problem']} | error: {row['error'][:80]} |")
            continue
        s = result["summary"][row["problem"]]
        cg, jac, amg = row["cg"], row["jacobi_cg"], row["amg_cg"]
        theirs = row.get("pyamg")
        pyamg_text = "not run"
        if theirs:
            flag = "" if theirs["converged"] else " (capped)"
            pyamg_text = f"{theirs['iterations']}{flag}, {theirs['setup_s']:.2f}"
        mark = lambda d: "" if d["converged"] else " !"  # noqa: E731
        lines.append(
            f"| {row['problem']} | {row['unknowns']:,} | {cg['iterations']}{mark(cg)} / "
            f"{cg['seconds']:.3f} | {jac['iterations']}{mark(jac)} / {jac['seconds']:.3f} | "
            f"{amg['iterations']}{mark(amg)}, {amg['setup_s']:.3f} + {amg['solve_s']:.3f} = "
            f"{amg['seconds']:.3f} | {s['speedup_over_jacobi_cg']:.2f}x | "
            f"{amg['update_s']:.3f} ({amg['update_first_s']:.3f}) | "
            f"{amg['operator_complexity']:.2f} | {pyamg_text} | "
            f"{s.get('iterations_over_pyamg', float('nan')):.2f} | "
            f"{s.get('setup_speedup_over_pyamg', float('nan')):.1f}x |"
        )
    lines.append("")
    lines.append("`!`: not converged to 1e-8 within maxiter (residual checked on the host).")
    return "\n".join(lines) + "\n"


def plot(result, path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"cg": "o", "jacobi_cg": "s", "amg_cg": "^", "pyamg": "x"}
    for method, marker in styles.items():
        points = []
        for row in result["results"]:
            if "error" in row or not row.get(method):
                continue
            entry = row[method]
            seconds = entry.get("seconds", entry.get("setup_s", 0) + entry.get("solve_s", 0))
            points.append((row["unknowns"], seconds, row["problem"]))
        if points:
            xs, ys, _ = zip(*points, strict=True)
            ax.scatter(xs, ys, marker=marker, label=method.replace("_", "-"))
    for row in result["results"]:
        if "error" not in row:
            ax.annotate(row["problem"], (row["unknowns"], row["amg_cg"]["seconds"]), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("unknowns")
    ax.set_ylabel("set-up + solve to rtol 1e-8 (s)")
    ax.set_title(f"Time to solution, {result.get('device', '')}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments())
    parser.add_argument("--set", choices=sorted(SETS), default="heldout")
    parser.add_argument("--problems", help="comma-separated classes to keep (default all)")
    parser.add_argument("--maxiter", type=int, default=20000, help="Krylov iteration cap")
    parser.add_argument("--pyamg-maxiter", type=int, default=400)
    parser.add_argument("--pyamg-max-unknowns", type=float, default=4e6)
    parser.add_argument("--no-pyamg", action="store_true", help="skip PyAMG")
    parser.add_argument(
        "--pyamg-seconds",
        type=float,
        default=160,
        help="wall seconds from the start after which PyAMG runs are cut",
    )
    args = parser.parse_args(argv)
    if args.from_json:
        common.redraw(args.from_json, args, summarize, markdown, plot)
        return 0
    problems = [p for p in SETS[args.set]
                if not args.problems or p[0] in args.problems.split(",")]  # fmt: skip
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core a PyAMG worker
    futures = {}
    pool = None
    if not args.no_pyamg:
        # a Pool, not an executor: workers still running at the deadline are terminated
        pool = get_context("spawn").Pool(processes=len(problems))
        for name, size in problems:
            if (size ** (2 if name in PLANAR else 3)) <= args.pyamg_max_unknowns:
                futures[(name, size)] = pool.apply_async(
                    pyamg_run, (name, size, args.set, args.pyamg_maxiter)
                )
    deadline = time.perf_counter() + args.pyamg_seconds
    import sparsegpu as sg

    on_gpu = _device() is not np
    result = common.gpu_header("issue 46 multigrid") if on_gpu else {"device": "host"}
    result.setdefault("results", [])
    result.update({"set": args.set, "rtol": RTOL, "command": " ".join(sys.argv)})
    warm_up()
    for name, size in problems:
        label = f"{name}_{size}"
        print(f"[amg] {label} ...", flush=True)
        A = B = None
        try:
            A, B = make_problem(name, size, args.set)
            row = {"problem": label, "class": name, "size": size, "set": args.set}
            row.update(gpu_run(name, A, B, args.maxiter))
        except Exception as exc:  # one problem's failure is recorded, the others still run
            import traceback

            traceback.print_exc()
            row = {"problem": label, "error": f"{type(exc).__name__}: {exc}"}
        result["results"].append(row)
        del A, B
        sg.linalg.last_solve_info()
        _partial(result, args)
    for row in result["results"]:
        future = futures.get((row.get("class"), row.get("size")))
        if future is not None and "error" not in row:
            try:
                row["pyamg"] = future.get(timeout=max(1.0, deadline - time.perf_counter()))
            except Exception as exc:  # a timeout (then it was still running) or an error
                row["pyamg_error"] = f"{type(exc).__name__}: {exc}"
    if pool is not None:
        pool.terminate()
    result["pyamg_note"] = (
        "PyAMG ran on the host CPU in parallel worker processes (one a problem, one "
        "thread each) while the GPU measured"
    )
    result["summary"] = summarize(result["results"])
    common.write_outputs(result, args, markdown, plot)
    return 0


def _partial(result, args) -> None:
    """The JSON so far (a run cut short keeps what it measured)."""
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
