"""``sparsegpu probe``: the device's memory bandwidth (copy, offset, stride)."""

from __future__ import annotations

import json

from .._console import console, progress, table
from ..cli import CommandError, positive_int, require_matplotlib
from ..measure import probe

HELP = "measure the GPU's memory bandwidth (copy, misaligned offset, stride); cached per device"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--plot", metavar="FILE", help="draw the offset and stride curves")
    parser.add_argument(
        "--dtype",
        choices=probe.DTYPES,
        default="float32",
        help="element type of the offset and stride kernels (default: float32)",
    )
    parser.add_argument(
        "--repeat", type=positive_int, default=20, help="timed samples per point (median kept)"
    )
    parser.add_argument(
        "--cached",
        action="store_true",
        help="show the cached result for this device instead of measuring again",
    )


def _measure(args) -> probe.ProbeResult:
    if args.cached:
        result = probe.load_cached()
        if result is None:
            raise CommandError("no cached probe for this device; run `sparsegpu probe` first")
        return result
    with progress(transient=True) as bar:
        task = bar.add_task("probe", total=len(probe.EXPERIMENTS))

        def step(name):
            bar.update(task, description=f"probe: {name}", completed=probe.EXPERIMENTS.index(name))

        result = probe.measure(dtype=args.dtype, repeat=args.repeat, progress=step)
        bar.update(task, completed=len(probe.EXPERIMENTS))
    probe.save(result)
    return result


def _print_tables(result: probe.ProbeResult) -> None:
    out = console()
    device = result.device
    out.print(
        f"{device.get('name')} (cc {device.get('compute_capability')}, "
        f"{device.get('multiprocessors')} SMs): copy {result.copy_gb_per_s:,.0f} GB/s "
        f"(read + write, {2 * result.copy_bytes / 1e9:.2f} GB moved in {result.copy_ms:.3f} ms)"
    )
    for title, points in (("offset", result.offset), ("stride", result.stride)):
        if not points:
            continue
        rows = [
            [
                p.parameter,
                f"{p.median_ms:.4f}",
                f"{p.gb_per_s:,.0f}",
                f"{100 * p.gb_per_s / result.copy_gb_per_s:.0f}%",
            ]
            for p in points
        ]
        out.print(
            table(
                f"{title} experiment ({result.dtype}; bytes read + written)",
                [title, "ms", "GB/s", "% of copy"],
                rows,
                {title, "ms", "GB/s", "% of copy"},
            )
        )


def run(args) -> int:
    if args.plot:
        require_matplotlib()
    try:
        result = _measure(args)
    except probe.NoGPUError as exc:
        raise CommandError(f"{exc}; the probe measures a CUDA GPU", status=1) from None
    if args.plot:
        probe.plot(result, args.plot)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        _print_tables(result)
        if args.plot:
            console().print(f"plot written to {args.plot}")
    return 0
