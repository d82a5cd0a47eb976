"""What the benchmark scripts share: their arguments and output files, cuSPARSE called
directly (the baselines), and the matrix sets.

Arguments and outputs
    :func:`output_arguments` (``--out``, ``--md``, ``--plot``, ``--from-json``) and
    :func:`scale_arguments` (``--scale``, ``--dtypes``, ``--only``) as argparse parents;
    :func:`require_gpu`, :func:`keep_matching`, :func:`save_partial`,
    :func:`write_outputs`, :func:`redraw` and :func:`gpu_header` (a result's opening).
Baselines
    :class:`DirectSpMV`, :class:`DirectSpMM` and :class:`DirectSpGEMM`: cuSPARSE's
    products as a C program calls them, descriptors made once (the floor any wrapper of
    cuSPARSE can reach from Python). They import CuPy when made, not when this module is
    imported, so every script's ``--help`` runs without a GPU.
Matrix sets
    The named sets the scripts run on; each builder is seeded, so a result file's
    matrices are built again as they were: :func:`spmv_set` (``auto_vs_cusparse``),
    :func:`block_meshes` (``blocks``, and the experiments that pick from it with
    :func:`pick`), :func:`stencils` (``half_precision``, ``compressed_indices``),
    :func:`spmm_set` (``spmm``), :func:`spgemm_matrices` and :func:`galerkin_matrices`
    (``spgemm``), :func:`real_matrices` (a folder of Matrix Market files), and the
    builders they use (:func:`fem_p1`, :func:`replicated`).
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import pathlib
import sys

import numpy as np
import scipy.io
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu import _console, datasets
from sparsegpu.backends import _spmm, cusparse_spgemm
from sparsegpu.backends import cusparse as cusparse_backend
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.device._mirror import PlanKey
from sparsegpu.measure import probe

# the SuiteSparse matrices bundled with sparsegpu (sparsegpu.datasets)
BUNDLED = importlib.resources.files("sparsegpu.datasets") / "data"
SPMV_SETS = ("heldout", "tuning", "both", "classes-fit", "classes-heldout", "classes-heldout-long")
SPMM_SETS = ("fit", "heldout")
# bundled SuiteSparse matrices with at least this many rows join spmm's held-out set
SPMM_MIN_REAL_ROWS = 1000
# the Galerkin form, P.T @ A @ P (a suffix says which aggregation P is)
GALERKIN = "P.T@A@P"


# ------------------------------------------------------------------ arguments, outputs
def output_arguments(plot: bool = True, paths: bool = False) -> argparse.ArgumentParser:
    """An argparse parent: ``--out``, ``--md``, ``--plot`` (where the script draws one)
    and ``--from-json`` (redraw without a GPU); as :class:`pathlib.Path` with ``paths``,
    else as given."""
    parser = argparse.ArgumentParser(add_help=False)
    kind = pathlib.Path if paths else str
    parser.add_argument("--out", type=kind, help="JSON result file")
    parser.add_argument("--md", type=kind, help="markdown table file")
    if plot:
        parser.add_argument("--plot", type=kind, help="PNG plot file (needs matplotlib)")
    parser.add_argument(
        "--from-json", type=kind, help="redraw --md/--plot from an earlier result (no GPU needed)"
    )
    return parser


def scale_arguments(dtypes: str | None = "float64,float32") -> argparse.ArgumentParser:
    """An argparse parent: ``--scale`` (``full``, or ``small`` for a quick check),
    ``--dtypes`` (comma-separated, default ``dtypes``; left out where None) and ``--only``
    (substrings of the matrix names to run)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--scale", choices=("full", "small"), default="full")
    if dtypes is not None:
        parser.add_argument("--dtypes", default=dtypes)
    parser.add_argument("--only", help="comma-separated substrings of matrix names to run")
    return parser


def parser(doc: str, *parents) -> argparse.ArgumentParser:
    """A script's parser: its docstring's first line, the given parents' arguments."""
    return argparse.ArgumentParser(description=doc.split("\n")[0], parents=list(parents))


def require_gpu():
    """CuPy, or None after saying on stderr why there is no usable GPU."""
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print(f"no GPU: {_cuda.unavailable_reason()}", file=sys.stderr)
    return cupy


def begin(args, summarize, markdown, plot):
    """A result script's opening: ``(cupy, None)`` to go on and measure, or ``(None, exit
    status)`` to stop: 0 once ``--from-json`` drew the files again (:func:`redraw`), 2
    without a usable GPU."""
    if args.from_json:
        redraw(args.from_json, args, summarize, markdown, plot)
        return None, 0
    cupy = require_gpu()
    return (cupy, None) if cupy is not None else (None, 2)


def measure_each(todo, dtypes, result, out, cupy, bench, prepare=None, name_at: int = 1):
    """Every matrix of ``todo`` in every dtype, its rows appended to ``result["results"]``.

    For each entry, ``host = prepare(entry)`` (default: its last item, the builder,
    called) is made once; then for each dtype ``bench(entry, host, dtype)`` gives the
    row, the memory pool is emptied and the result saved to ``out``
    (:func:`save_partial`). A progress bar names each step (the entry's name is at
    ``name_at``).
    """
    prepare = prepare or (lambda entry: entry[-1]())
    with _console.progress() as bar:
        task = bar.add_task("benchmark", total=len(todo) * len(dtypes))
        for entry in todo:
            host = prepare(entry)
            for dtype in dtypes:
                bar.update(task, description=f"{entry[name_at]} {np.dtype(dtype).name}")
                result["results"].append(bench(entry, host, dtype))
                cupy.get_default_memory_pool().free_all_blocks()
                save_partial(result, out)
                bar.advance(task)
            del host


def dtypes_of(args) -> list:
    """``--dtypes`` as numpy dtypes."""
    return [np.dtype(d) for d in args.dtypes.split(",")]


def keep_matching(todo: list, only: str | None, position: int = 1) -> list:
    """The entries of ``todo`` whose name (at ``position``) contains one of the
    comma-separated substrings of ``only`` (all of them when ``only`` is empty)."""
    if not only:
        return todo
    wanted = only.split(",")
    return [t for t in todo if any(w in t[position] for w in wanted)]


def medians(samples: dict, suffix: str = "") -> dict:
    """``{key + suffix: median}`` of ``{key: [samples]}`` (floats, for JSON)."""
    return {f"{key}{suffix}": float(np.median(values)) for key, values in samples.items()}


def save_partial(result, path) -> None:
    """``result`` as JSON at ``path`` (if given): after every matrix, so that an
    interrupted run keeps what it measured."""
    if path:
        pathlib.Path(path).write_text(json.dumps(result, indent=1) + "\n")


def write_outputs(result, args, markdown, plot) -> None:
    """The JSON, markdown and plot files asked for, and the table on stdout."""
    save_partial(result, args.out)
    text = markdown(result)
    if args.md:
        pathlib.Path(args.md).write_text(text)
    if getattr(args, "plot", None):
        plot(result, args.plot)
    _console.console().print(text)


def finish(result, args, summarize, markdown, plot) -> int:
    """A result script's close: the summary of its rows, the files asked for; exit 0."""
    result["summary"] = summarize(result["results"])
    write_outputs(result, args, markdown, plot)
    return 0


def redraw(path, args, summarize, markdown, plot) -> None:
    """``--from-json``: the files asked for drawn again from an earlier result at ``path``
    (its summary recomputed by ``summarize(rows)``), no GPU needed."""
    result = json.loads(pathlib.Path(path).read_text())
    result["summary"] = summarize(result["results"])
    write_outputs(result, args, markdown, plot)


def markdown_again(path, md, markdown) -> int:
    """``--from-json`` of a script whose result has no summary to recompute (an
    experiment's): ``markdown(result)`` of the earlier result at ``path``, written to ``md``
    (where given) and printed; exit status 0, no GPU needed."""
    text = markdown(json.loads(pathlib.Path(path).read_text()))
    if md:
        pathlib.Path(md).write_text(text)
    print(text)
    return 0


def table_md(path, doc: str, header: dict, note: str, lines: list) -> None:
    """Print a Markdown table (``lines``) and, where ``path`` is given, write it there
    under the experiment's title (the first line of ``doc``), its header and ``note``."""
    text = "\n".join(lines)
    print(text)
    if path:
        title = doc.splitlines()[0]
        pathlib.Path(path).write_text(f"# {title}\n\n{header}\n\n{note}\n\n{text}\n")


def experiment_parser(doc: str, only=None, repeat: int | None = None):
    """An experiment's arguments: ``--out``, ``--md``, ``--from-json`` (see
    :func:`markdown_again`), and, given defaults, ``--only`` (comma-separated names) and
    ``--repeat``; its description the first line of ``doc``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--md")
    parser.add_argument("--from-json")
    if only is not None:
        parser.add_argument("--only", default=",".join(only))
    if repeat is not None:
        parser.add_argument("--repeat", type=int, default=repeat)
    return parser


def doc_paragraph(doc: str, index: int) -> str:
    """Paragraph ``index`` of a docstring on one line (a result's description)."""
    return " ".join(doc.split("\n\n")[index].split())


def launch(mirror, backend, policy, x, y):
    """``(plan, None)``: ``backend``'s plan at ``policy`` (kept in the mirror's plans)
    after ``y = A @ x`` ran once; or ``(None, why)`` where it cannot launch here."""
    try:
        plan = mirror.get_plan(PlanKey(backend.name, policy), lambda: backend.plan(mirror, policy))
        plan.matvec(x, out=y)
    except Exception as exc:  # a policy that cannot launch here
        return None, f"{type(exc).__name__}: {exc}"
    return plan, None


def spmv_operands(host, dtype, cupy):
    """``(S, A, x, y)`` of ``blocks`` and ``compressed_indices``: ``host`` in ``dtype``
    with int32 indices, its sparsegpu matrix, a seeded normal x and an empty y (on the
    GPU)."""
    S = host.astype(dtype)
    S.indices = S.indices.astype(np.int32)
    S.indptr = S.indptr.astype(np.int32)
    A = sg.csr_matrix(S)
    rng = np.random.default_rng(1)
    x = cupy.asarray(rng.standard_normal(S.shape[1]).astype(dtype))
    y = cupy.empty(S.shape[0], dtype=dtype)
    return S, A, x, y


def experiment_header(module: str) -> dict:
    """An experiment's result file's opening: the device, the versions and the command
    (``python3 -m module`` and this process's arguments)."""
    return {
        "device": _cuda.device_info().name,
        "versions": _cuda.versions(),
        "command": " ".join([f"python3 -m {module}", *sys.argv[1:]]),
    }


def gpu_header(scale: str) -> dict:
    """A result's opening fields: the device, the versions, the copy bandwidth measured
    now (what the byte bounds are read against), the scale; its rows come after."""
    return {
        "device": _cuda.device_info().name,
        "versions": _cuda.versions(),
        "sparsegpu": sg.__version__,
        "copy_gb_per_s": probe.measure_copy()[2],
        "scale": scale,
        "results": [],
    }


# ----------------------------------------------------------- cuSPARSE called directly


class _DirectProduct:
    """What :class:`DirectSpMV` and :class:`DirectSpMM` share: a cuSPARSE handle on the
    current stream, the CSR descriptor of the mirror, one bound call a product, closing.

    The descriptors hold raw pointers: the operands stay alive with this object (a y
    freed by its caller would be cuSPARSE's output while the pool lends it out).
    """

    _destroy_dense = ""  # the bindings' function that destroys x's and y's descriptors

    def _open(self, mirror, operands):
        """The bindings and the values' CUDA type, after the handle and CSR descriptor."""
        cupy = _cuda.cupy_or_none()
        self._operands = operands
        lib = self._lib = cusparse_backend._bindings()
        self._handle = lib.create()
        lib.setStream(self._handle, cupy.cuda.get_current_stream().ptr)
        cuda_type = cusparse_backend.CUDA_DATA_TYPE[mirror.dtype]
        index_type = cusparse_backend.INDEX_TYPE[mirror.index_dtype]
        n_rows, n_cols = mirror.shape
        self._mat = lib.createCsr(
            n_rows, n_cols, mirror.nnz, mirror.indptr.data.ptr, mirror.indices.data.ptr,
            mirror.data.data.ptr, index_type, index_type, 0, cuda_type,
        )  # fmt: skip
        return lib, cuda_type

    def __call__(self):
        self._call(*self._args)

    def close(self):
        lib = self._lib
        _cuda.cupy_or_none().cuda.get_current_stream().synchronize()
        destroy = getattr(lib, self._destroy_dense)
        destroy(self._x)
        destroy(self._y)
        lib.destroySpMat(self._mat)
        lib.destroy(self._handle)
        self._operands = None


class DirectSpMV(_DirectProduct):
    """cuSPARSE called directly: ``y = A @ x`` as a C program does it.

    The CSR descriptor, dense-vector descriptors bound to this ``x`` and ``y``, and the
    workspace are made once and the handle's stream set once (to the current stream); each
    call is one ``cusparseSpMV`` through CuPy's bindings and nothing else. The floor any
    wrapper of cuSPARSE can reach from Python.
    """

    _destroy_dense = "destroyDnVec"

    def __init__(self, mirror, x, y, algorithm: str):
        lib, cuda_type = self._open(mirror, (mirror, x, y))
        n_rows, n_cols = mirror.shape
        self._x = lib.createDnVec(n_cols, x.data.ptr, cuda_type)
        self._y = lib.createDnVec(n_rows, y.data.ptr, cuda_type)
        # 16-bit values compute in float32 (alpha and beta too)
        compute = cusparse_backend.COMPUTE_DTYPE.get(mirror.dtype, mirror.dtype)
        compute_type = cusparse_backend.CUDA_DATA_TYPE[compute]
        self._alpha = np.ones(1, dtype=compute)
        self._beta = np.zeros(1, dtype=compute)
        self._algorithm = cusparse_backend.SPMV_ALGORITHM[algorithm]
        self._cuda_type = cuda_type
        size = lib.spMV_bufferSize(
            self._handle, 0, self._alpha.ctypes.data, self._mat, self._x,
            self._beta.ctypes.data, self._y, compute_type, self._algorithm,
        )  # fmt: skip
        self._workspace = _cuda.cupy_or_none().empty(max(int(size), 1), dtype=np.int8)
        self._args = (
            self._handle, 0, self._alpha.ctypes.data, self._mat, self._x,
            self._beta.ctypes.data, self._y, compute_type, self._algorithm,
            self._workspace.data.ptr,
        )  # fmt: skip
        self._call = lib.spMV


class DirectSpMM(_DirectProduct):
    """cuSPARSE SpMM called directly: ``Y = A @ X`` as a C program does it.

    The CSR descriptor, dense-matrix descriptors bound to this X and Y (row-major for a
    C-order X, column-major for a Fortran one: nothing is copied), the workspace and, for
    ALG1 and ALG3 where the bindings have it, ``cusparseSpMM_preprocess`` are made once;
    each call is one ``cusparseSpMM``.
    """

    _destroy_dense = "destroyDnMat"

    def __init__(self, mirror, X, Y, algorithm: str):
        lib, cuda_type = self._open(mirror, (mirror, X, Y))
        (n_rows, n_cols), k = mirror.shape, X.shape[1]
        if _spmm.is_fortran(X):
            order, ld_x, ld_y = cusparse_backend.ORDER_COL, n_cols, n_rows
        else:
            order, ld_x, ld_y = cusparse_backend.ORDER_ROW, k, k
        self._x = lib.createDnMat(n_cols, k, ld_x, X.data.ptr, cuda_type, order)
        self._y = lib.createDnMat(n_rows, k, ld_y, Y.data.ptr, cuda_type, order)
        self._alpha = np.ones(1, dtype=mirror.dtype)
        self._beta = np.zeros(1, dtype=mirror.dtype)
        algorithm = cusparse_backend.SPMM_ALGORITHM[algorithm]
        args = (
            self._handle, 0, 0, self._alpha.ctypes.data, self._mat, self._x,
            self._beta.ctypes.data, self._y, cuda_type, algorithm,
        )  # fmt: skip
        size = lib.spMM_bufferSize(*args)
        self._workspace = _cuda.cupy_or_none().empty(max(int(size), 1), dtype=np.int8)
        self._args = (*args, self._workspace.data.ptr)
        if algorithm in cusparse_backend.SPMM_PREPROCESSED and cusparse_backend.has_preprocess(
            "spMM"
        ):
            lib.spMM_preprocess(*self._args)
        self._call = lib.spMM


class DirectSpGEMM:
    """cuSPARSE SpGEMM ALG1 called directly: the operands' descriptors made once; each
    call makes C's descriptor and the SpGEMM descriptor, estimates, computes and copies,
    as NVIDIA's sample does."""

    def __init__(self, left, right):
        cupy = _cuda.cupy_or_none()
        self._cupy = cupy
        self._operands = (left, right)
        lib = self._lib = cusparse_backend._bindings()
        self._handle = lib.create()
        lib.setStream(self._handle, cupy.cuda.get_current_stream().ptr)
        self._a = cusparse_spgemm._operand(lib, left)
        self._b = cusparse_spgemm._operand(lib, right)
        self._dtype = left.dtype
        self._index = left.index_dtype
        self._shape = (left.shape[0], right.shape[1])
        self._alpha = np.ones(1, left.dtype)
        self._beta = np.zeros(1, left.dtype)

    def __call__(self):
        cupy, lib = self._cupy, self._lib
        index_type = cusparse_backend.INDEX_TYPE[self._index]
        cuda_type = cusparse_backend.CUDA_DATA_TYPE[self._dtype]
        indptr = cupy.empty(self._shape[0] + 1, self._index)
        mat_c = lib.createCsr(
            *self._shape, 0, indptr.data.ptr, 0, 0, index_type, index_type, 0, cuda_type
        )
        descr = lib.spGEMM_createDescr()
        args = (
            self._handle, 0, 0, self._alpha.ctypes.data, self._a.handle, self._b.handle,
            self._beta.ctypes.data, mat_c, cuda_type, cusparse_spgemm.ALGORITHM["alg1"], descr,
        )  # fmt: skip
        try:
            size1 = lib.spGEMM_workEstimation(*args, 0, 0)
            buffer1 = cupy.empty(size1, np.int8)
            lib.spGEMM_workEstimation(*args, size1, buffer1.data.ptr)
            size2 = lib.spGEMM_compute(*args, 0, 0)
            buffer2 = cupy.empty(size2, np.int8)
            lib.spGEMM_compute(*args, size2, buffer2.data.ptr)
            sizes = np.zeros(3, np.int64)
            lib.spMatGetSize(
                mat_c, sizes.ctypes.data, sizes.ctypes.data + 8, sizes.ctypes.data + 16
            )
            nnz = int(sizes[2])
            indices = cupy.empty(nnz, self._index)
            data = cupy.empty(nnz, self._dtype)
            lib.csrSetPointers(mat_c, indptr.data.ptr, indices.data.ptr, data.data.ptr)
            lib.spGEMM_copy(*args)
        finally:
            lib.spGEMM_destroyDescr(descr)
            lib.destroySpMat(mat_c)
        del buffer1, buffer2
        return indptr, indices, data


# ------------------------------------------------------------------------ matrix sets
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
    return sp.block_diag([A] * -(-min_nnz // A.nnz), format="csr")


def pick(todo: list, names, position: int = 1) -> list:
    """The entries of ``todo`` named in ``names`` (name at ``position``), in ``names``'
    order (a name ``todo`` lacks is a KeyError)."""
    by_name = {t[position]: t for t in todo}
    return [by_name[name] for name in names]


def real_matrices(folder, names=None, min_rows: int = 0) -> dict:
    """``{name: build}`` of the Matrix Market files in ``folder`` with at least
    ``min_rows`` rows (only those of ``names``, when given)."""
    out = {}
    for path in sorted(pathlib.Path(str(folder)).glob("*.mtx*")):
        name = path.name.split(".mtx")[0]
        if names is not None and name not in names:
            continue
        A = scipy.io.mmread(str(path)).tocsr()
        if A.shape[0] >= min_rows:
            out[name] = lambda A=A: A
    return out


def stencils(scale: str) -> list:
    """``(name, builder)`` of the four stencils of ``half_precision`` and
    ``compressed_indices``; ``scale="small"`` for a quick check."""
    big = scale == "full"
    n2, n9, n3, n27 = (3000, 2000, 180, 120) if big else (300, 200, 30, 20)
    return [
        (f"stencil2d_5pt_{n2}", lambda: synthetic.stencil_2d(n2)),
        (f"stencil2d_9pt_{n9}", lambda: synthetic.stencil_2d(n9, points=9)),
        (f"stencil3d_7pt_{n3}", lambda: synthetic.stencil_3d(n3)),
        (f"stencil3d_27pt_{n27}", lambda: synthetic.stencil_3d(n27, points=27)),
    ]


def spmv_set(which: str, scale: str, folder: pathlib.Path, cupy) -> list:
    """``auto_vs_cusparse``'s sets: ``[(set label, name, make, per_dtype)]`` for
    ``--set which`` (one of :data:`SPMV_SETS`).

    ``make(dtype)`` builds the host matrix; where ``per_dtype`` is False it ignores the
    dtype (a float64 build, cast by ``auto_vs_cusparse.canonical``), so the benchmark builds it once
    for all dtypes. The held-out classes are built on the host (numpy), the tuning suite
    on the GPU as before.
    """
    if which not in SPMV_SETS:
        raise ValueError(f"set={which!r}; use one of {SPMV_SETS}")
    out = []
    if which in ("tuning", "both"):
        for name in synthetic.suite(scale):
            out.append(
                (
                    "tuning",
                    name,
                    lambda dtype, name=name: synthetic.suite(scale, dtype=dtype, xp=cupy)[name](),
                    True,
                )
            )
    if which in ("heldout", "both"):
        for name, build in synthetic.heldout_suite(scale).items():
            out.append(("heldout-generated", name, lambda dtype, build=build: build(), False))
        for name, build in (real_matrices(folder) if folder.is_dir() else {}).items():
            out.append(("heldout-real", name, lambda dtype, build=build: build(), False))
    if which.startswith("classes-"):
        part = which.removeprefix("classes-")
        for name, build in synthetic.class_check_suite(part).items():
            out.append((which, name, lambda dtype, build=build: build(), False))
    return out


def spmm_synthetic(which: str, quick: bool) -> dict:
    """``{name: build() -> scipy CSR}`` of the generated matrices of a set."""
    if which == "fit":
        out = {
            "stencil2d5_60": lambda: synthetic.stencil_2d(60),
            "stencil2d5_1000": lambda: synthetic.stencil_2d(1000),
            "stencil3d27_64": lambda: synthetic.stencil_3d(64, points=27),
            "rmat_s17_e8": lambda: synthetic.rmat(17, 8),
        }
        return {} if quick else out
    out = {
        "stencil2d5_2000": lambda: synthetic.stencil_2d(2000),
        "stencil3d27_100": lambda: synthetic.stencil_3d(100, points=27),
        "rmat_s19_e8": lambda: synthetic.rmat(19, 8),
        "powerlaw_1M_e2.2": lambda: synthetic.power_law(
            1_000_000, mean=12.0, max_row=20_000, exponent=2.2, seed=6
        ),
    }
    return {} if quick else out


def spmm_set(which: str, quick: bool, folder, real=None, only=None) -> dict:
    """``spmm``'s sets: ``{name: build}`` of a set (one of :data:`SPMM_SETS`), its generated
    matrices and, held out, the Matrix Market ones of at least
    :data:`SPMM_MIN_REAL_ROWS` rows (those of ``real``, when given); with ``only``, just
    the matrices so named."""
    if which not in SPMM_SETS:
        raise ValueError(f"set={which!r}; use one of {SPMM_SETS}")
    out = spmm_synthetic(which, quick)
    if which == "heldout":
        names = only if only is not None else real
        out.update(real_matrices(folder, names, min_rows=SPMM_MIN_REAL_ROWS))
    if only is not None:
        out = {name: build for name, build in out.items() if name in only}
    return out


def block_meshes(scale: str) -> list:
    """``blocks``' set: ``(set, name, unknowns or 0, builder)`` of every matrix (3-D and
    2-D block meshes by set, and the negative cases); ``"small"`` for a quick check."""
    mesh = synthetic.block_mesh
    if scale == "small":
        return [
            ("fit", "mesh_b3_n6", 3, lambda: mesh(6, 3)),
            ("dev", "mesh_b2_n8_random", 2, lambda: mesh(8, 2, seed=11, node_order="random")),
            ("dev", "mesh_b6_n5", 6, lambda: mesh(5, 6, seed=13)),
            ("negative", "mesh_b3_n6_unknowns_random", 0,
             lambda: synthetic.permuted(mesh(6, 3), seed=5)),
        ]  # fmt: skip
    return [
        ("fit", "mesh_b2_n40", 2, lambda: mesh(40, 2)),
        ("fit", "mesh_b3_n30", 3, lambda: mesh(30, 3)),
        ("fit", "mesh_b6_n20", 6, lambda: mesh(20, 6)),
        ("dev", "mesh_b2_n64", 2, lambda: mesh(64, 2, seed=11)),
        ("dev", "mesh_b2_n56_random", 2, lambda: mesh(56, 2, seed=11, node_order="random")),
        ("dev", "mesh_b3_n50", 3, lambda: mesh(50, 3, seed=12)),
        ("dev", "mesh_b3_n44_random", 3, lambda: mesh(44, 3, seed=12, node_order="random")),
        ("dev", "mesh_b6_n32", 6, lambda: mesh(32, 6, seed=13)),
        ("dev", "mesh_b6_n28_random", 6, lambda: mesh(28, 6, seed=13, node_order="random")),
        ("heldout", "mesh_b3_n46", 3, lambda: mesh(46, 3, seed=21)),
        ("heldout", "mesh_b3_n40_random", 3, lambda: mesh(40, 3, seed=22, node_order="random")),
        ("heldout", "mesh_b6_n26", 6, lambda: mesh(26, 6, seed=23)),
        ("heldout", "mesh_b6_n30_random", 6, lambda: mesh(30, 6, seed=24, node_order="random")),
        ("heldout", "mesh_b2_n60_random", 2, lambda: mesh(60, 2, seed=25, node_order="random")),
        ("heldout", "mesh2d_b2_n800", 2, lambda: mesh(800, 2, dimensions=2, seed=26)),
        ("heldout", "mesh2d_b3_n600_random", 3,
         lambda: mesh(600, 3, dimensions=2, seed=27, node_order="random")),
        ("heldout", "mesh2d_b6_n300", 6, lambda: mesh(300, 6, dimensions=2, seed=28)),
        ("heldout2", "mesh_b2_n52_random", 2, lambda: mesh(52, 2, seed=31, node_order="random")),
        ("heldout2", "mesh_b2_n62", 2, lambda: mesh(62, 2, seed=32)),
        ("heldout2", "mesh2d_b2_n900_random", 2,
         lambda: mesh(900, 2, dimensions=2, seed=33, node_order="random")),
        ("heldout2", "mesh2d_b3_n650", 3, lambda: mesh(650, 3, dimensions=2, seed=34)),
        ("heldout2", "mesh_b3_n42_random", 3, lambda: mesh(42, 3, seed=35, node_order="random")),
        ("heldout2", "mesh2d_b6_n320_random", 6,
         lambda: mesh(320, 6, dimensions=2, seed=36, node_order="random")),
        ("heldout3", "mesh2d_b3_n700", 3, lambda: mesh(700, 3, dimensions=2, seed=41)),
        ("heldout3", "mesh2d_b3_n560_random", 3,
         lambda: mesh(560, 3, dimensions=2, seed=42, node_order="random")),
        ("heldout3", "mesh_b3_n48", 3, lambda: mesh(48, 3, seed=43)),
        ("heldout3", "mesh_b3_n38_random", 3, lambda: mesh(38, 3, seed=44, node_order="random")),
        ("heldout4", "mesh2d_b3_n750", 3, lambda: mesh(750, 3, dimensions=2, seed=51)),
        ("heldout4", "mesh2d_b3_n620_random", 3,
         lambda: mesh(620, 3, dimensions=2, seed=52, node_order="random")),
        ("heldout4", "mesh_b2_n58", 2, lambda: mesh(58, 2, seed=53)),
        ("heldout4", "mesh_b3_n52_random", 3, lambda: mesh(52, 3, seed=54, node_order="random")),
        ("dev2", "mesh2d_b3_n680", 3, lambda: mesh(680, 3, dimensions=2, seed=61)),
        ("dev2", "mesh2d_b3_n640_random", 3,
         lambda: mesh(640, 3, dimensions=2, seed=62, node_order="random")),
        ("heldout5", "mesh2d_b3_n660", 3, lambda: mesh(660, 3, dimensions=2, seed=71)),
        ("heldout5", "mesh2d_b3_n720", 3, lambda: mesh(720, 3, dimensions=2, seed=72)),
        ("heldout5", "mesh2d_b3_n780", 3, lambda: mesh(780, 3, dimensions=2, seed=73)),
        ("heldout5", "mesh2d_b3_n580_random", 3,
         lambda: mesh(580, 3, dimensions=2, seed=74, node_order="random")),
        ("heldout5", "mesh_b3_n42", 3, lambda: mesh(42, 3, seed=75)),
        ("heldout5", "mesh2d_b2_n850", 2, lambda: mesh(850, 2, dimensions=2, seed=76)),
        ("negative", "mesh_b3_n30_unknowns_random", 0,
         lambda: synthetic.permuted(mesh(30, 3, seed=14), seed=5)),
        ("negative", "stencil3d_27pt_100", 0, lambda: synthetic.stencil_3d(100, points=27)),
        ("negative", "bcsstk13_blockdiag", 0, lambda: replicated("bcsstk13", 5_000_000)),
    ]  # fmt: skip


def spgemm_matrices(scale: str, xp) -> list:
    """``(name, form, builder)``: ``builder()`` -> host scipy CSR; ``form`` ``"A@A"`` or
    ``"A.T@A"`` or ``"P.T@A@P"`` (with the aggregation of 2 x 2 grid points)."""
    big = scale == "full"
    n2, n3, s_rmat = (2000, 100, 16) if big else (200, 20, 10)
    points, tall = (300_000, (400_000, 40_000)) if big else (5_000, (4_000, 400))
    rmat_kw = {"a": 0.45, "b": 0.55 / 3, "c": 0.55 / 3}
    return [
        (f"stencil2d5_{n2}", "A@A", lambda: synthetic.stencil_2d(n2, xp=xp)),
        (f"stencil3d27_{n3}", "A@A", lambda: synthetic.stencil_3d(n3, points=27, xp=xp)),
        (f"rmat_s{s_rmat}_e16", "A@A", lambda: synthetic.rmat(s_rmat, 16, xp=xp, **rmat_kw)),
        (f"fem_p1_{points // 1000}k_random", "A@A", lambda: fem_p1(points, "random")),
        (
            f"tall_{tall[0] // 1000}k_x8_{tall[1] // 1000}k",
            "A.T@A",
            lambda: synthetic.uniform_random(tall[0], 8, n_cols=tall[1], seed=3, xp=xp),
        ),
        (f"galerkin_stencil2d5_{n2}", "P.T@A@P", lambda: synthetic.stencil_2d(n2, xp=xp)),
    ]


def galerkin_matrices(scale: str, xp) -> list:
    """``(name, form, builder)`` of Galerkin products beyond the 2-D one of
    :func:`spgemm_matrices`, added after the 2-D one was studied (so held out from that work):
    the 3-D 27-point stencil with 2 x 2 x 2 aggregates, and a P1 mesh in random order
    with random aggregates of about 4 points (no geometry to follow)."""
    big = scale == "full"
    n3, points = (100, 300_000) if big else (12, 3_000)
    return [
        (
            f"galerkin_stencil3d27_{n3}",
            GALERKIN + " 3-D",
            lambda: synthetic.stencil_3d(n3, points=27, xp=xp),
        ),
        (
            f"galerkin_fem_p1_{points // 1000}k_random",
            GALERKIN + " random",
            lambda: fem_p1(points, "random"),
        ),
    ]
