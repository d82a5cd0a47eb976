"""Measure Matrix Market reading and the SuiteSparse cache (CPU).

1. ``sparsegpu.io.mmread`` against ``scipy.io.mmread`` and ``scipy.io.mmread(...).tocsr()``
   (the same CSR result as ours) on generated coordinate files of at least 100 MB: real,
   integer and complex, general and symmetric. Same process, the three readers in
   alternation, best of ``--repeat`` wall times each; sparsegpu's result is checked equal
   to scipy's. Peak memory: each of ``scipy.io.mmread(...).tocsr()`` and
   ``sparsegpu.io.mmread`` alone in a fresh process, its peak resident set (``VmHWM``)
   less the resident set just before the read.
2. With ``--cache``: ``sparsegpu.io.suitesparse.load`` of a matrix served as a collection
   archive from a local HTTP server: the first load (download, extract, parse, write the
   binary copy) against the second (the binary copy only).

Usage::

    python tools/bench_io.py [--repeat 3] [--json FILE] [--md FILE] [--cache] [--case NAME ...]
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import platform
import shlex
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.io
import scipy.sparse as sp

import sparsegpu as sg

# name: (value dtype, symmetry, stored entries); about 135 MB of text each
CASES = {
    "real general": (np.float64, "general", 4_000_000),
    "real symmetric": (np.float64, "symmetric", 4_000_000),
    "integer general": (np.int64, "general", 5_000_000),
    "complex general": (np.complex128, "general", 2_500_000),
    "complex symmetric": (np.complex128, "symmetric", 2_500_000),
}
ROWS = 400_000


def best_of(repeat: int, fn) -> float:
    """Least wall time of ``repeat`` calls, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def write_case(path: Path, dtype, symmetry: str, entries: int, seed: int = 0) -> None:
    """A random coordinate file: ``entries`` stored entries (the lower triangle when
    symmetric), values from a normal distribution."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, ROWS, entries)
    cols = rng.integers(0, ROWS, entries)
    if symmetry != "general":
        rows, cols = np.maximum(rows, cols), np.minimum(rows, cols)
    values = rng.standard_normal(entries)
    if np.dtype(dtype).kind == "i":
        values = rng.integers(-(10**6), 10**6, entries)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(entries)
    A = sp.coo_matrix((values.astype(dtype), (rows, cols)), shape=(ROWS, ROWS))
    scipy.io.mmwrite(str(path), A, symmetry=symmetry)


def time_readers(path: Path, repeat: int) -> dict:
    """Best wall times of the three readers, taken in alternation, and the answer check."""
    readers = {
        "scipy_mmread_s": lambda: scipy.io.mmread(str(path)),
        "scipy_mmread_tocsr_s": lambda: scipy.io.mmread(str(path)).tocsr(),
        "sparsegpu_mmread_s": lambda: sg.io.mmread(path),
    }
    best = dict.fromkeys(readers, float("inf"))
    for _ in range(repeat):
        for name, read in readers.items():
            best[name] = min(best[name], best_of(1, read))
    ours, theirs = sg.io.mmread(path), scipy.io.mmread(str(path)).tocsr()
    if ours.shape != theirs.shape or (sp.csr_matrix(ours) != theirs).nnz:
        raise AssertionError(f"{path.name}: sparsegpu's matrix differs from scipy's")
    return best


# Run alone in a fresh process: the read's peak resident set over the one before it, in MB.
# (VmHWM, the process's own high-water mark: ru_maxrss would carry the parent's over fork.)
_PEAK = """
import sys
import scipy.io
import sparsegpu as sg

def status_kb(key):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(key))

before = status_kb("VmRSS")
if sys.argv[1] == "scipy":
    scipy.io.mmread(sys.argv[2]).tocsr()
else:
    sg.io.mmread(sys.argv[2])
print((status_kb("VmHWM") - before) / 1024)
"""


def peak_mb(reader: str, path: Path) -> float:
    """The peak resident memory one read adds, in MB, in a fresh process (Linux)."""
    env = dict(os.environ, PYTHONPATH=str(Path(sg.__file__).parents[1]))
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, reader, str(path)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return float(out.stdout.strip().splitlines()[-1])


def measure_reading(work: Path, repeat: int, cases) -> list[dict]:
    rows = []
    for name in cases:
        dtype, symmetry, entries = CASES[name]
        path = work / (name.replace(" ", "_") + ".mtx")
        write_case(path, dtype, symmetry, entries)
        # the new file's pages written back now: the kernel flushes dirty pages 30 s on,
        # in the middle of some reader's timing otherwise
        if hasattr(os, "sync"):
            os.sync()
        times = time_readers(path, repeat)
        ours = times["sparsegpu_mmread_s"]
        memory = {
            "scipy_mmread_tocsr_peak_mb": min(peak_mb("scipy", path) for _ in range(repeat)),
            "sparsegpu_mmread_peak_mb": min(peak_mb("sparsegpu", path) for _ in range(repeat)),
        }
        rows.append(
            {
                "case": name,
                "file_mb": round(path.stat().st_size / 1e6, 1),
                "entries": entries,
                **{k: round(v, 3) for k, v in times.items()},
                "ratio_to_mmread": round(ours / times["scipy_mmread_s"], 2),
                "ratio_to_mmread_tocsr": round(ours / times["scipy_mmread_tocsr_s"], 2),
                **{k: round(v, 1) for k, v in memory.items()},
                "peak_ratio_to_mmread_tocsr": round(
                    memory["sparsegpu_mmread_peak_mb"] / memory["scipy_mmread_tocsr_peak_mb"], 2
                ),
            }
        )
        print(rows[-1], flush=True)
        path.unlink()
    return rows


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(folder: Path):
    handler = functools.partial(_QuietHandler, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def measure_cache(work: Path, repeat: int) -> dict:
    mtx = work / "bench.mtx"
    write_case(mtx, np.float64, "general", 2_800_000)
    A = scipy.io.mmread(str(mtx)).tocsr()
    site = work / "site" / "MM" / "Bench"
    site.mkdir(parents=True)
    with tarfile.open(site / "bench.tar.gz", "w:gz", compresslevel=1) as tar:
        tar.add(mtx, arcname="bench/bench.mtx")
    httpd = serve(work / "site")
    os.environ[sg.io.suitesparse.URL_ENV] = f"http://127.0.0.1:{httpd.server_address[1]}"
    cache = work / "cache"
    start = time.perf_counter()
    sg.io.suitesparse.fetch("Bench/bench", data_dir=cache, progress=False)
    fetch_s = time.perf_counter() - start
    start = time.perf_counter()
    first = sg.io.suitesparse.load("Bench/bench", data_dir=cache)
    first_load_s = time.perf_counter() - start
    cached_s = best_of(repeat, lambda: sg.io.suitesparse.load("Bench/bench", data_dir=cache))
    httpd.shutdown()
    if first.nnz != A.nnz:
        raise AssertionError("the cached load lost entries")
    return {
        "fetch_s": round(fetch_s, 3),
        "first_load_s": round(first_load_s, 3),
        "cached_load_s": round(cached_s, 4),
        "cached_over_first_load": round(cached_s / first_load_s, 4),
    }


def machine() -> dict:
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "sparsegpu": sg.__version__,
    }


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        "# Matrix Market reading on the CPU (`tools/bench_io.py`)",
        "",
        f"{m['cpu']}, {m['cores']} cores; Python {m['python']}, numpy {m['numpy']}, "
        f"scipy {m['scipy']}. Best of {result['repeat']} wall times, the three readers in "
        "alternation in one process; load average "
        f"{result['load_before']} before and {result['load_after']} after. Peak memory: "
        "the least of the same number of fresh processes, each reading once, its peak "
        "resident set over the one before the read.",
        "",
        f"Command: `{result['command']}`",
        "",
        "| file | MB | entries | scipy `mmread` | scipy `mmread().tocsr()` | `sg.io.mmread` "
        "| vs `mmread` | vs `mmread().tocsr()` | peak MB, scipy `.tocsr()` | peak MB, "
        "`sg.io.mmread` | peak vs `.tocsr()` |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["reading"]:
        lines.append(
            f"| {row['case']} | {row['file_mb']} | {row['entries']:,} | "
            f"{row['scipy_mmread_s']:.3f} s | {row['scipy_mmread_tocsr_s']:.3f} s | "
            f"{row['sparsegpu_mmread_s']:.3f} s | {row['ratio_to_mmread']:.2f}x | "
            f"{row['ratio_to_mmread_tocsr']:.2f}x | {row['scipy_mmread_tocsr_peak_mb']:.0f} | "
            f"{row['sparsegpu_mmread_peak_mb']:.0f} | {row['peak_ratio_to_mmread_tocsr']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--md", help="write a markdown table here")
    parser.add_argument("--cache", action="store_true", help="also time the SuiteSparse cache")
    parser.add_argument(
        "--case", action="append", choices=list(CASES), help="only these files (repeatable)"
    )
    args = parser.parse_args()

    result = {
        "machine": machine(),
        "repeat": args.repeat,
        "command": shlex.join(["python", "tools/bench_io.py", *sys.argv[1:]]),
        "load_before": os.getloadavg()[0],
    }
    with tempfile.TemporaryDirectory() as work:
        result["reading"] = measure_reading(Path(work), args.repeat, args.case or list(CASES))
        if args.cache:
            result["cache"] = measure_cache(Path(work), args.repeat)
    result["load_after"] = round(os.getloadavg()[0], 2)
    result["load_before"] = round(result["load_before"], 2)
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if args.md:
        Path(args.md).write_text(markdown(result))


if __name__ == "__main__":
    main()
