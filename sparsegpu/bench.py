"""``sparsegpu bench``: every backend at its best known policy, and cuSPARSE, in one run.

For each matrix and value dtype, every usable backend makes its plan with its default
policy (the tuning cache's winner once tuned) and ``auto`` the plan it would pick; each
answer is checked against the scipy oracle (computed in double precision), and only then
timed: CUDA events on the GPU, ``time.perf_counter`` on the host, the median of the
repeats. Each row reports the median time, GB/s of the bytes a product must move
(:func:`sparsegpu.measure._timing.spmv_bytes`), the percentage of the device's copy bandwidth
(:func:`sparsegpu.measure.probe.copy_bandwidth`) and the speed-up over cuSPARSE measured in the
same run (the ``cusparse`` backend when it is registered, else CuPy's
``cupyx.scipy.sparse`` product, reported as ``cupyx``).

Matrices are given by synthetic suite name, or as every command takes them
(:func:`sparsegpu.io.resolve_matrix`: a file path, ``.mtx``, ``.mtx.gz``, ``.mtx.bz2``,
``.npz`` or an archive; a bundled name; a SuiteSparse ``Group/Name``); by default the synthetic
``suite("full")`` on a GPU, and the bundled real matrices on a CPU-only machine.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.resources
import json
import platform
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as sp

from . import io
from ._files import save_figure
from ._version import __version__
from .backends.policy import format_knobs
from .datasets import synthetic
from .device import _cuda
from .device._dtypes import HALF_DTYPES, is_half
from .engine import _planning, _registry
from .io import suitesparse
from .measure._oracle import Oracle, random_vector
from .measure._timing import gb_per_s, spmv_bytes, time_candidates

SCHEMA = "sparsegpu-bench/1"
# the 16-bit floats too (sums in float32); bfloat16 where ml_dtypes is installed
DTYPE_CHOICES = ("float32", "float64", "complex64", "complex128") + tuple(
    str(d) for d in HALF_DTYPES
)
REFERENCE_NAME = "cupyx"
# The bar every backend is compared with: cuSPARSE through our backend when registered,
# else cuSPARSE through CuPy's own sparse product.
BASELINE_PREFERENCE = ("cusparse", REFERENCE_NAME)
STATUSES = ("ok", "wrong", "refused", "error")


class BenchError(ValueError):
    """A bad request to the benchmark (unknown matrix, backend or dtype)."""


# --------------------------------------------------------------------------- matrices
@dataclass(frozen=True)
class MatrixSource:
    """A matrix to benchmark: its name, where it comes from, and how to build it
    (``load()`` raises BenchError for a matrix that cannot be read)."""

    name: str
    origin: str
    load: Callable[[], sp.spmatrix]

    def open(self) -> sp.spmatrix:
        """The matrix.

        Raises
        ------
        BenchError
            When the matrix cannot be loaded (a SuiteSparse matrix not cached, without a
            network, and not shipped with sparsegpu; a bad file).
        """
        try:
            return self.load()
        except BenchError:
            raise
        except (OSError, ValueError, suitesparse.DownloadError) as exc:
            raise BenchError(f"{self.name}: {exc}") from None


def bundled_files() -> dict[str, object]:
    """The real matrices shipped in ``sparsegpu/datasets/data`` by name (may be empty)."""
    try:
        folder = importlib.resources.files("sparsegpu.datasets") / "data"
        entries = list(folder.iterdir()) if folder.is_dir() else []
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return {
        entry.name[: -len(".mtx.gz")]: entry
        for entry in sorted(entries, key=lambda e: e.name)
        if entry.name.endswith(".mtx.gz")
    }


def _synthetic_sources(gpu: bool) -> dict[str, MatrixSource]:
    cupy = _cuda.cupy_or_none() if gpu else None
    xp = cupy if cupy is not None else np
    out = {}
    for scale in ("full", "small"):
        for name, build in synthetic.suite(scale, xp=xp).items():
            out[name] = MatrixSource(name, f"synthetic ({scale} suite)", build)
    return out


def _opened(source: io.MatrixSource) -> MatrixSource:
    """Bench's source of a matrix resolved by :func:`sparsegpu.io.resolve_matrix`: its
    errors become BenchError, the name said once (a file's error already starts with it)."""

    def load():
        try:
            return source.load()
        except (OSError, ValueError, suitesparse.DownloadError) as exc:
            text = str(exc)
            named = source.name in text.split(":", 1)[0]
            raise BenchError(text if named else f"{source.name}: {text}") from None

    return MatrixSource(source.name, source.origin, load)


def resolve_matrices(specs, gpu: bool) -> list[MatrixSource]:
    """Turn command-line matrix specs into sources; none given: the default suite.

    A synthetic suite name is the synthetic matrix; anything else is resolved as every
    command resolves a matrix (:func:`sparsegpu.io.resolve_matrix`: a file path, a bundled
    name, a SuiteSparse ``Group/Name``).
    """
    synthetic_sources = _synthetic_sources(gpu)
    if not specs:
        if gpu:
            return [s for s in synthetic_sources.values() if s.origin.endswith("(full suite)")]
        bundled = bundled_files()
        if bundled:
            return [_opened(io.resolve_matrix(name)) for name in bundled]
        return [s for s in synthetic_sources.values() if s.origin.endswith("(small suite)")]
    sources = []
    for spec in specs:
        if spec in synthetic_sources:
            sources.append(synthetic_sources[spec])
            continue
        try:
            sources.append(_opened(io.resolve_matrix(spec)))
        except FileNotFoundError as exc:
            raise BenchError(str(exc)) from None
        except ValueError as exc:
            raise BenchError(
                f"{exc}, or a synthetic name ({', '.join(sorted(synthetic_sources))})"
            ) from None
    return sources


# -------------------------------------------------------------------------- contenders
@dataclass
class Prepared:
    """One contender ready to run on one matrix: ``call()`` launches a product."""

    call: Callable[[], object]
    x: object
    index_dtype: np.dtype
    policy: dict | None
    timer: str
    planning_ms: float | None = None  # what choosing the plan by measurement cost


class BackendContender:
    """A registered backend at its default (best known) policy."""

    kind = "backend"

    def __init__(self, backend):
        self.backend = backend
        self.name = backend.name
        self.on_gpu = backend.residence.name == "cupy"

    def prepare(self, A, dtype, seed: int) -> Prepared:
        import sparsegpu

        matrix = sparsegpu.csr_matrix(A, dtype=dtype)  # scipy's astype refuses float16
        plan = _planning.plan_for(matrix, dtype, backend=self.name)
        xp = plan.matrix.xp
        x = random_vector(A.shape[1], dtype, seed=seed, xp=xp)
        out = xp.empty(A.shape[0], dtype=plan.matrix.dtype)
        policy = {"type": type(plan.policy).__name__, "source": plan.policy.source}
        policy.update(plan.policy.knobs())
        return Prepared(
            call=lambda: plan.matvec(x, out=out),
            x=x,
            index_dtype=plan.matrix.index_dtype,
            policy=policy,
            timer="cuda-events" if self.on_gpu else "wall-clock",
        )


class AutoContender:
    """``auto`` as users get it: planned by measurement (``sparsegpu.choose``), what a
    matrix's second product does by itself; what planning cost is reported apart."""

    kind = "auto"
    name = _registry.AUTO
    on_gpu = True

    def prepare(self, A, dtype, seed: int) -> Prepared:
        import sparsegpu

        matrix = sparsegpu.csr_matrix(A, dtype=dtype)
        cupy = _cuda.cupy_or_none()
        x = random_vector(A.shape[1], dtype, seed=seed, xp=cupy if cupy is not None else np)
        choice = sparsegpu.choose(matrix, x)  # the estimate where nothing is measured
        plan = _planning.plan_for(matrix, dtype, backend=_registry.AUTO, x=x)
        xp = plan.matrix.xp
        x = _to_host(x) if xp is np else x
        out = xp.empty(A.shape[0], dtype=plan.matrix.dtype)
        policy = {"type": type(plan.policy).__name__, "source": plan.policy.source}
        policy.update(chosen=choice.backend, level=choice.level, **plan.policy.knobs())
        on_gpu = plan.matrix.residence.name == "cupy"
        return Prepared(
            call=lambda: plan.matvec(x, out=out),
            x=x,
            index_dtype=plan.matrix.index_dtype,
            policy=policy,
            timer="cuda-events" if on_gpu else "wall-clock",
            planning_ms=choice.planning_ms,
        )


class CupyxContender:
    """CuPy's own ``cupyx.scipy.sparse.csr_matrix @ x`` (cuSPARSE), the reference."""

    kind = "reference"
    name = REFERENCE_NAME
    on_gpu = True

    @staticmethod
    def unavailable_reason() -> str | None:
        return _cuda.backend_reason()

    def prepare(self, A, dtype, seed: int) -> Prepared:
        cupy = _cuda.cupy_or_none()
        import cupyx.scipy.sparse as csp

        if np.dtype(dtype) not in (np.float32, np.float64, np.complex64, np.complex128):
            raise TypeError(f"cupyx does not take {np.dtype(dtype)}")
        host = A.astype(dtype)
        matrix = csp.csr_matrix(
            (cupy.asarray(host.data), cupy.asarray(host.indices), cupy.asarray(host.indptr)),
            shape=host.shape,
        )
        x = random_vector(A.shape[1], dtype, seed=seed, xp=cupy)
        return Prepared(
            call=lambda: matrix @ x,
            x=x,
            index_dtype=matrix.indices.dtype,
            policy=None,
            timer="cuda-events",
        )


def contender(name: str):
    """The contender called ``name`` (a registered backend or ``cupyx``), usable here.

    Raises
    ------
    BenchError
        For an unknown name, or one that cannot run here (the message says why).
    """
    contenders, unavailable, skipped = _contenders([name], gpu=False)
    if unavailable:
        raise BenchError(f"{name!r} cannot run here: {unavailable[name]}")
    if skipped:
        raise BenchError(f"{name!r} is not a contender of a CSR product: {skipped[name]}")
    return contenders[0]


def _contenders(requested, gpu: bool):
    """(contenders to run, unavailable {name: reason}, skipped {name: reason})."""
    registry = _registry.registered()
    known = [*registry, _registry.AUTO, REFERENCE_NAME]
    if requested:
        unknown = [name for name in requested if name not in known]
        if unknown:
            raise BenchError(
                f"unknown backend(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}"
            )
    wanted = requested or known
    contenders, unavailable, skipped = [], {}, {}
    for name in wanted:
        if name == REFERENCE_NAME:
            reason = CupyxContender.unavailable_reason()
            contender = CupyxContender()
        elif name == _registry.AUTO:
            reason, contender = None, AutoContender()
            if not gpu and not requested:
                skipped[name] = "without a GPU, auto is the scipy backend"
                continue
        else:
            reason = registry[name].unavailable_reason()
            contender = BackendContender(registry[name])
            if "csr" not in registry[name].formats:
                skipped[name] = "reads the BSR classes' blocks, not CSR matrices"
                continue
        if reason is not None:
            unavailable[name] = reason
        elif gpu and not contender.on_gpu and not requested:
            skipped[name] = (
                "a CPU backend, not timed on GPU runs by default; name it in --backends to time it"
            )
        else:
            contenders.append(contender)
    return contenders, unavailable, skipped


# ------------------------------------------------------------------------------ timing
def measure(prepared: Prepared, repeat: int) -> list[float]:
    """Per-call milliseconds of ``prepared.call``, one product a sample (as a user's call
    takes it): CUDA events on the GPU, else wall clock, through the one timing harness."""
    on_host = prepared.timer != "cuda-events"
    timing = time_candidates(
        {"call": prepared.call}, on_host=on_host, warmup=3, repeat=repeat, inner=1
    )
    return list(timing["call"].samples_ms)


def check(prepared: Prepared, A, dtype, oracle: Oracle | None = None) -> None:
    """Raise AssertionError unless one product of ``prepared`` matches the scipy oracle."""
    if oracle is None:
        oracle = Oracle(A, dtype, x=_to_host(prepared.x))
    problem = oracle.error(_to_host(prepared.call()))
    if problem is not None:
        raise AssertionError(problem)


def _to_host(a):
    return a.get() if _cuda.is_cupy_array(a) else np.asarray(a)


# ------------------------------------------------------------------------------ report
@dataclass
class BenchResult:
    """One row: one contender on one matrix in one value dtype."""

    matrix: str
    origin: str
    shape: tuple
    nnz: int
    dtype: str
    backend: str
    kind: str
    status: str
    message: str = ""
    index_dtype: str | None = None
    policy: dict | None = None
    timer: str | None = None
    repeat: int = 0
    median_ms: float | None = None
    min_ms: float | None = None
    bytes: int | None = None
    gb_per_s: float | None = None
    percent_of_peak: float | None = None
    speedup_vs_baseline: float | None = None
    planning_ms: float | None = None


@dataclass
class BenchReport:
    """A whole run: the machine, the peak, the baseline, every result row."""

    results: list = field(default_factory=list)
    unavailable: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    peak_gb_per_s: float | None = None
    peak_source: str | None = None
    baseline: str | None = None
    machine: dict = field(default_factory=dict)
    created: str = ""
    sparsegpu: str = __version__

    @property
    def failed(self) -> list:
        """Rows whose answer was wrong or that raised."""
        return [r for r in self.results if r.status in ("wrong", "error")]

    def to_json(self) -> dict:
        return {"schema": SCHEMA, **asdict(self)}


def _machine(gpu: bool) -> dict:
    machine = {
        "host": platform.node(),
        "processor": platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        **_cuda.versions(),
        "gpu": None,
    }
    if gpu:
        from .measure.probe import device_record

        machine["gpu"] = device_record()
    return machine


def _peak(gpu: bool) -> tuple[float | None, str | None]:
    if not gpu:
        return None, None
    from .measure import probe

    return probe.copy_bandwidth(), "sparsegpu probe: device-to-device copy (read + write)"


def _run_one(contender, name, origin, A, dtype, repeat, seed, oracle_cache) -> BenchResult:
    row = BenchResult(
        matrix=name,
        origin=origin,
        shape=tuple(int(s) for s in A.shape),
        nnz=int(A.nnz),
        dtype=str(np.dtype(dtype)),
        backend=contender.name,
        kind=contender.kind,
        status="ok",
    )
    overflow = _overflow("values", A.data, dtype)
    if overflow is not None:
        row.status, row.message = "refused", overflow
        return row
    try:
        prepared = contender.prepare(A, dtype, seed)
    except (TypeError, ValueError, MemoryError) as exc:  # a dtype or size it does not take
        row.status, row.message = "refused", f"{type(exc).__name__}: {exc}"
        return row
    except Exception as exc:  # a broken backend must not stop the other rows
        row.status, row.message = "error", f"{type(exc).__name__}: {exc}"
        return row
    row.policy, row.timer, row.planning_ms = prepared.policy, prepared.timer, prepared.planning_ms
    row.index_dtype = str(np.dtype(prepared.index_dtype))
    x_host = _to_host(prepared.x)
    key = (name, row.dtype)
    if key not in oracle_cache:
        oracle_cache[key] = Oracle(A, dtype, x=x_host)
    overflow = _overflow("product with x", oracle_cache[key].y, dtype)
    if overflow is not None:
        row.status, row.message = "refused", overflow
        return row
    try:
        check(prepared, A, dtype, oracle_cache[key])
        samples = measure(prepared, repeat)
    except AssertionError as exc:
        row.status, row.message = "wrong", f"answer differs from the scipy oracle: {exc}"
        return row
    except Exception as exc:
        row.status, row.message = "error", f"{type(exc).__name__}: {exc}"
        return row
    row.repeat = repeat
    row.median_ms = statistics.median(samples)
    row.min_ms = min(samples)
    row.bytes = spmv_bytes(
        A.shape[0], A.shape[1], A.nnz, np.dtype(dtype).itemsize, np.dtype(row.index_dtype).itemsize
    )
    row.gb_per_s = gb_per_s(row.bytes, row.median_ms)
    return row


def _overflow(what: str, values, dtype) -> str | None:
    """Why a 16-bit ``dtype`` cannot hold ``values`` (the matrix's, or its product's), or
    None (float16 tops out at 65504: bcsstk13's values do not fit)."""
    if not is_half(dtype):
        return None
    with np.errstate(over="ignore"):
        rounded = np.asarray(values).astype(dtype).astype(np.float32)
    if np.isfinite(rounded).all():
        return None
    return f"the matrix's {what} overflow {np.dtype(dtype)}; bench it in float32"


def _finish_ratios(report: BenchReport) -> None:
    ok = [r for r in report.results if r.status == "ok"]
    present = {r.backend for r in ok}
    report.baseline = next((name for name in BASELINE_PREFERENCE if name in present), None)
    base_ms = {(r.matrix, r.dtype): r.median_ms for r in ok if r.backend == report.baseline}
    for r in ok:
        if report.peak_gb_per_s:
            r.percent_of_peak = 100.0 * r.gb_per_s / report.peak_gb_per_s
        if (r.matrix, r.dtype) in base_ms and r.median_ms > 0:
            r.speedup_vs_baseline = base_ms[(r.matrix, r.dtype)] / r.median_ms


def run(
    matrices=None,
    *,
    dtypes=("float64",),
    backends=None,
    repeat: int = 20,
    seed: int = 0,
    progress=None,
) -> BenchReport:
    """Benchmark every usable backend (or those named) on the given matrices.

    Parameters
    ----------
    matrices : list of str, optional
        File paths, bundled or synthetic names, SuiteSparse ``Group/Name``; default: the
        synthetic full suite on a GPU, the bundled matrices on a CPU-only machine.
    dtypes : sequence of str
        Value dtypes to run (each of :data:`DTYPE_CHOICES`: ``float32``, ``float64``,
        ``complex64``, ``complex128``, ``float16``, and ``bfloat16`` with ml_dtypes).
    backends : list of str, optional
        Backend names (``cupyx`` for CuPy's own product); default: every usable one.
    repeat : int
        Timed samples per row (the median is reported).
    seed : int
        Seed of the random x.
    progress : rich.progress.Progress, optional
        Shows one step per (matrix, dtype, backend).

    Returns
    -------
    BenchReport

    Raises
    ------
    BenchError
        For an unknown matrix, backend or dtype, or when nothing requested can run here.
    """
    dtypes = [str(d) for d in dtypes]
    bad = [d for d in dtypes if d not in DTYPE_CHOICES]
    if bad or not dtypes:
        raise BenchError(f"dtype(s) {bad or dtypes} not benchmarked; choose from {DTYPE_CHOICES}")
    if not isinstance(repeat, int) or repeat < 1:
        raise BenchError(f"repeat={repeat!r} must be a positive integer")
    gpu = _cuda.unavailable_reason() is None
    sources = resolve_matrices(matrices, gpu)
    contenders, unavailable, skipped = _contenders(backends, gpu)
    if not contenders:
        why = "; ".join(f"{name}: {reason}" for name, reason in {**unavailable, **skipped}.items())
        raise BenchError(f"none of the requested backends can run here ({why})")
    peak, peak_source = _peak(gpu and any(c.on_gpu for c in contenders))
    report = BenchReport(
        unavailable=unavailable,
        skipped=skipped,
        peak_gb_per_s=peak,
        peak_source=peak_source,
        machine=_machine(gpu),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    task = None
    if progress is not None:
        task = progress.add_task("bench", total=len(sources) * len(dtypes) * len(contenders))
    for source in sources:
        if progress is not None:
            progress.update(task, description=f"loading {source.name}")
        A = sp.csr_matrix(source.open())
        origin = source.origin
        oracle_cache: dict = {}
        for dtype in dtypes:
            for contender in contenders:
                if progress is not None:
                    progress.update(task, description=f"{source.name} {dtype} {contender.name}")
                report.results.append(
                    _run_one(contender, source.name, origin, A, dtype, repeat, seed, oracle_cache)
                )
                if progress is not None:
                    progress.advance(task)
        del A, oracle_cache
        _release_device_memory()
    _finish_ratios(report)
    return report


def _release_device_memory() -> None:
    cupy = _cuda.cupy_or_none()
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()


# ------------------------------------------------------------------- files and output
REQUIRED_KEYS = ("results", "machine", "created")
REQUIRED_ROW_KEYS = ("matrix", "dtype", "backend", "status")


def load_results(path) -> dict:
    """Read a ``sparsegpu bench --json`` file and check its shape.

    Raises
    ------
    ValueError
        Naming the file and what is wrong (not JSON, another schema, missing keys).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read a JSON document ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: not a {SCHEMA} file (schema {found!r})")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise ValueError(f"{path}: missing key(s) {missing}")
    for i, row in enumerate(data["results"]):
        lacking = [k for k in REQUIRED_ROW_KEYS if k not in row]
        if lacking or row.get("status") not in STATUSES:
            raise ValueError(
                f"{path}: result {i} lacks {lacking} or has status {row.get('status')!r}"
            )
    return data


def _fmt(value, spec: str, suffix: str = "") -> str | None:
    return None if value is None else f"{value:{spec}}{suffix}"


def _policy_note(policy: dict | None) -> str:
    if not policy:
        return ""
    knobs = format_knobs({k: v for k, v in policy.items() if k not in ("type", "source")})
    return f"{knobs} ({policy.get('source')})" if knobs else f"{policy.get('source')} policy"


def results_table(data: dict) -> tuple[list[str], list[list]]:
    """Columns and rows of the results table of a report's JSON form, one row per result.

    Columns that are empty in every row (no peak or no baseline on a CPU run) are left out.
    """
    baseline = data.get("baseline") or "baseline"
    columns = ["matrix", "dtype", "backend", "ms", "GB/s", "% peak", f"vs {baseline}"]
    columns += ["planning ms", "note"]
    rows = []
    for r in data["results"]:
        if r["status"] == "ok":
            note = _policy_note(r.get("policy"))
        else:
            note = f"{r['status'].upper()}: {r.get('message') or ''}"
        rows.append(
            [
                r["matrix"],
                r["dtype"],
                r["backend"],
                _fmt(r.get("median_ms"), ".4f"),
                _fmt(r.get("gb_per_s"), ",.1f"),
                _fmt(r.get("percent_of_peak"), ".0f", "%"),
                _fmt(r.get("speedup_vs_baseline"), ".2f", "x"),
                _fmt(r.get("planning_ms"), ".1f"),
                note,
            ]
        )
    keep = [i for i in range(len(columns)) if i < 3 or any(row[i] for row in rows)]
    return [columns[i] for i in keep], [[row[i] for i in keep] for row in rows]


def plot(data: dict, path) -> Path:
    """Bars of GB/s per backend per matrix, one panel per dtype; the peak as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in data["results"] if r["status"] == "ok"]
    dtypes = sorted({r["dtype"] for r in ok}) or ["-"]
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(11, 3.6 * len(dtypes)), squeeze=False)
    for ax, dtype in zip(axes[:, 0], dtypes, strict=True):
        rows = [r for r in ok if r["dtype"] == dtype]
        matrices = list(dict.fromkeys(r["matrix"] for r in rows))
        names = list(dict.fromkeys(r["backend"] for r in rows))
        width = 0.8 / max(len(names), 1)
        for k, name in enumerate(names):
            speed = {r["matrix"]: r["gb_per_s"] for r in rows if r["backend"] == name}
            xs = [i + k * width for i, m in enumerate(matrices) if m in speed]
            ax.bar(xs, [speed[m] for m in matrices if m in speed], width, label=name)
        if data.get("peak_gb_per_s"):
            ax.axhline(data["peak_gb_per_s"], color="grey", ls="--", label="copy bandwidth")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(matrices))])
        ax.set_xticklabels(matrices, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(f"GB/s ({dtype})")
        ax.grid(axis="y", alpha=0.3)
        if names:
            ax.legend(fontsize=8, ncol=min(len(names) + 1, 5))
    gpu = (data.get("machine") or {}).get("gpu") or {}
    fig.suptitle(f"sparsegpu bench: {gpu.get('name') or 'CPU'} ({data.get('created', '')})")
    return save_figure(fig, path)
