"""What the SpMV benchmark scripts share: their output arguments, writing the files asked
for, the header of a GPU result, and cuSPARSE called directly.

The scripts are files, not a package: each puts this folder on ``sys.path`` before it
imports this module.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import sparsegpu as sg
from sparsegpu import _console
from sparsegpu.device import _cuda
from sparsegpu.measure import probe

HERE = pathlib.Path(__file__).resolve().parent


def add_output_arguments(parser) -> None:
    """``--out``, ``--md``, ``--plot`` and ``--from-json`` (redraw without a GPU)."""
    parser.add_argument("--out", help="JSON result file")
    parser.add_argument("--md", help="markdown table file")
    parser.add_argument("--plot", help="PNG plot file (needs matplotlib)")
    parser.add_argument("--from-json", help="redraw --md/--plot from an earlier result file")


def write_outputs(result, args, markdown, plot) -> None:
    """The JSON, markdown and plot files asked for, and the table on stdout."""
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    if args.md:
        pathlib.Path(args.md).write_text(text)
    if args.plot:
        plot(result, args.plot)
    _console.console().print(text)


def redraw(path, args, summarize, markdown, plot) -> None:
    """``--from-json``: the files asked for drawn again from an earlier result at ``path``
    (its summary recomputed by ``summarize(rows)``), no GPU needed."""
    result = json.loads(pathlib.Path(path).read_text())
    result["summary"] = summarize(result["results"])
    write_outputs(result, args, markdown, plot)


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


def sibling(filename: str, module_name: str):
    """The benchmark script ``filename`` beside this one, loaded as ``module_name`` (the
    scripts are files, not a package)."""
    spec = importlib.util.spec_from_file_location(module_name, HERE / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def direct_spmv():
    """``auto_vs_cusparse.DirectSpMV``: cuSPARSE's SpMV called directly, descriptors made
    once (that script's module is loaded on first use: it imports CuPy)."""
    return sibling("auto_vs_cusparse.py", "auto_vs_cusparse").DirectSpMV
