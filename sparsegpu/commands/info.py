"""``sparsegpu info``: versions, GPUs and backends of this machine."""

from __future__ import annotations

import platform

import numpy as np
import scipy

from .. import __version__, _cuda, _dispatch
from .._console import console, table

HELP = "show versions, GPUs and which backends can run here"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def collect() -> dict:
    """Everything ``sparsegpu info`` prints, as plain data."""
    versions = {
        "sparsegpu": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        **_cuda.versions(),
    }
    gpus = []
    cupy = _cuda.cupy_or_none()
    if cupy is not None:
        for index in range(cupy.cuda.runtime.getDeviceCount()):
            info = _cuda.device_info(index)
            gpus.append(
                {
                    "index": index,
                    "name": info.name,
                    "compute_capability": "{}.{}".format(*info.compute_capability),
                    "multiprocessors": info.multiprocessors,
                    "memory_bytes": info.total_memory,
                    "l2_bytes": info.l2_cache_bytes,
                }
            )
    backends = [
        {"name": b.name, "available": b.available, "reason": b.reason, "description": b.description}
        for b in _dispatch.backends()
    ]
    return {
        "versions": versions,
        "gpus": gpus,
        "gpu_unavailable_reason": _cuda.unavailable_reason(),
        "backends": backends,
    }


def run(args) -> int:
    data = collect()
    if args.json:
        import json

        print(json.dumps(data, indent=2))
        return 0
    out = console()
    out.print(
        table("Versions", ["package", "version"], [list(kv) for kv in data["versions"].items()])
    )
    if data["gpus"]:
        rows = [
            [
                g["index"],
                g["name"],
                g["compute_capability"],
                g["multiprocessors"],
                f"{g['memory_bytes'] / 2**30:.1f} GiB",
                f"{g['l2_bytes'] / 2**20:.0f} MiB",
            ]
            for g in data["gpus"]
        ]
        out.print(
            table("GPUs", ["#", "name", "cc", "SMs", "memory", "L2"], rows, {"SMs", "memory", "L2"})
        )
    else:
        out.print(f"GPUs: none usable ({data['gpu_unavailable_reason']}); products run on 'scipy'")
    rows = [
        [b["name"], "yes" if b["available"] else "no", b["reason"] or b["description"]]
        for b in data["backends"]
    ]
    out.print(table("Backends", ["name", "available", "what / why not"], rows))
    return 0
