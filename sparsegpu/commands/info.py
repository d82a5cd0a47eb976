"""``sparsegpu info``: versions, GPUs and backends of this machine; with arguments, what
each given matrix is (shape, nnz, field, symmetry, row-length statistics, block structure)."""

from __future__ import annotations

import platform

import numpy as np
import scipy

from .. import __version__
from .._console import console, group_by_reason, table
from ..cli import CommandError, add_matrix_arguments
from ..device import _cuda
from ..engine import _registry, _rules

_FIELDS = {"c": "complex", "i": "integer", "u": "integer", "b": "pattern"}

HELP = "show versions, GPUs and backends; or, given matrices, their shape and row lengths"


def add_arguments(parser) -> None:
    add_matrix_arguments(
        parser, "this machine's versions, GPUs and backends", synthetic=False, download=False
    )
    parser.add_argument("--data-dir", help="SuiteSparse cache directory (as for 'fetch')")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _open(target: str, data_dir):
    """(matrix, its Matrix Market file or None) for a file, a bundled dataset or a cached
    SuiteSparse name: :func:`sparsegpu.io.resolve_matrix`, never downloading."""
    from ..io import resolve_matrix

    source = resolve_matrix(target, data_dir=data_dir, download=False)
    return source.load(), source.path


def describe(target: str, data_dir=None) -> dict:
    """Shape, nnz, field, symmetry, row-length statistics and block structure (the b x b
    blocks, b = 2..8, whose layout reads the fewest bytes, and their fill) of one matrix,
    as plain data."""
    from ..backends.block import host_block_structure
    from ..device._mirror import RowLengthStats
    from ..io import mminfo

    try:
        matrix, header_path = _open(target, data_dir)
        header = mminfo(header_path) if header_path is not None else None
    except (ValueError, OSError) as exc:
        raise CommandError(str(exc), status=1) from None
    stats = RowLengthStats.from_indptr(matrix.indptr, matrix.shape[1], np, indices=matrix.indices)
    blocks = host_block_structure(matrix)
    collection = header.suitesparse if header is not None else None
    return {
        "matrix": target,
        "shape": list(matrix.shape),
        "nnz": int(matrix.nnz),
        "dtype": str(matrix.dtype),
        # a .npz file records neither: the field from the values, no symmetry
        "field": header.field if header is not None else _FIELDS.get(matrix.dtype.kind, "real"),
        "symmetry": header.symmetry if header is not None else None,
        "collection_name": collection.full_name if collection else None,
        "kind": collection.kind if collection else None,
        "row_lengths": {
            "mean": stats.mean,
            "std": stats.std,
            "min": stats.min,
            "max": stats.max,
            "empty_rows": stats.empty_rows,
            "imbalance": stats.imbalance,
            "column_spread": stats.column_spread,
            "row_class": _rules.row_class(stats),
        },
        "blocks": {
            "size": blocks.size,
            "fill": blocks.fill(blocks.size),
            "fill_by_size": {str(b): blocks.fill(b) for b in blocks.blocks},
            "byte_ratio": blocks.byte_ratio,
            "planning_refusal": blocks.refuse_reason(),
        },
    }


def _run_matrices(args) -> int:
    described = [describe(target, args.data_dir) for target in args.matrices]
    if args.json:
        import json

        print(json.dumps(described, indent=2))
        return 0
    out = console()
    for d in described:
        r, b = d["row_lengths"], d["blocks"]
        rows = [
            ["shape", "{} x {}".format(*d["shape"])],
            ["nnz", f"{d['nnz']:,}"],
            ["dtype", d["dtype"]],
            ["field", d["field"]],
            ["symmetry", d["symmetry"]],
            ["collection", d["collection_name"]],
            ["kind", d["kind"]],
            ["row length mean / std", f"{r['mean']:.2f} / {r['std']:.2f}"],
            ["row length min / max", f"{r['min']} / {r['max']}"],
            ["empty rows", r["empty_rows"]],
            ["imbalance (max / mean)", f"{r['imbalance']:.2f}"],
            ["row class", r["row_class"]],
            [
                "blocks (best b x b)",
                f"{b['size']}x{b['size']}, fill {b['fill']:.0%}, "
                f"{b['byte_ratio']:.0%} of CSR's bytes"
                + ("" if b["planning_refusal"] is None else " (auto does not time the layout)"),
            ],
        ]
        out.print(table(d["matrix"], ["property", "value"], rows))
    return 0


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
        for b in _registry.backends()
    ]
    return {
        "versions": versions,
        "gpus": gpus,
        "gpu_unavailable_reason": _cuda.unavailable_reason(),
        "backends": backends,
    }


def run(args) -> int:
    if getattr(args, "matrices", None):
        return _run_matrices(args)
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
        [b["name"], "yes" if b["available"] else "no", b["description"]] for b in data["backends"]
    ]
    out.print(table("Backends", ["name", "available", "what it is"], rows))
    unavailable = {b["name"]: b["reason"] for b in data["backends"] if not b["available"]}
    for names, reason in group_by_reason(unavailable):
        if reason == _cuda.backend_reason():
            reason = "no usable GPU, see above"
        out.print(f"{', '.join(names)}: unavailable ({reason})", soft_wrap=True)
    return 0
