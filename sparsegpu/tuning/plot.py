"""Time of one product versus block size, one line per backend: the figure of G-DEP's K20
tuning of the CSR vector kernel ("Kepler explained, part 2", G-DEP high-speed computing
notes no. 25).

Backends whose policies have a ``block_size`` knob are drawn as lines (at each block size
the best time over their other knobs); backends without one (cuSPARSE) as a dashed
horizontal line at their best time, the bar to beat. matplotlib is imported only here,
and only when a figure is drawn.
"""

from __future__ import annotations

from .autotune import OK, AutotuneReport


def block_size_series(report: AutotuneReport, value_dtype: str) -> dict[str, list]:
    """``{backend: [(block_size, best ms, untuned ms or None), ...]}`` sorted by block size.

    Only correct, timed candidates with a ``block_size`` knob count.
    """
    best: dict[str, dict[int, float]] = {}
    untuned: dict[str, tuple[int, float]] = {}
    for r in report.results:
        if r.status != OK or r.value_dtype != value_dtype:
            continue
        block_size = r.policy.knobs().get("block_size")
        if block_size is None:
            continue
        sizes = best.setdefault(r.backend, {})
        sizes[block_size] = min(sizes.get(block_size, r.time_ms), r.time_ms)
        if r.untuned:
            untuned[r.backend] = (block_size, r.time_ms)
    out = {}
    for backend, sizes in best.items():
        default = untuned.get(backend)
        out[backend] = [
            (b, sizes[b], default[1] if default is not None and default[0] == b else None)
            for b in sorted(sizes)
        ]
    return out


def reference_lines(report: AutotuneReport, value_dtype: str) -> dict[str, float]:
    """``{backend: best ms}`` for backends whose policies have no block size."""
    out: dict[str, float] = {}
    for r in report.results:
        if r.status != OK or r.value_dtype != value_dtype:
            continue
        if "block_size" in r.policy.knobs():
            continue
        out[r.backend] = min(out.get(r.backend, r.time_ms), r.time_ms)
    return out


def require_matplotlib() -> None:
    """Raise ImportError saying how to install matplotlib when it is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"drawing the plot needs matplotlib ({exc}); pip install matplotlib"
        ) from None


def plot_block_size_sweep(reports: list[AutotuneReport], path) -> None:
    """Draw every report (one panel per matrix and value dtype) into the image ``path``."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [(r, d) for r in reports for d in r.dtypes]
    columns = min(2, max(len(panels), 1))
    rows = max(1, -(-len(panels) // columns))
    figure = Figure(figsize=(6.4 * columns, 4.2 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    for i, (report, dtype) in enumerate(panels):
        axes = figure.add_subplot(rows, columns, i + 1)
        for backend, points in block_size_series(report, dtype).items():
            sizes = [p[0] for p in points]
            micros = [p[1] * 1e3 for p in points]
            (line,) = axes.plot(sizes, micros, marker=".", label=backend)
            fastest = min(points, key=lambda p: p[1])
            axes.plot(fastest[0], fastest[1] * 1e3, marker="*", ms=12, color=line.get_color())
            for size, _, default_ms in points:
                if default_ms is not None:
                    axes.plot(
                        size, default_ms * 1e3, marker="o", ms=8, mfc="none", color=line.get_color()
                    )
        for backend, ms in reference_lines(report, dtype).items():
            axes.axhline(ms * 1e3, linestyle="--", color="0.4", label=f"{backend} (best)")
        axes.set_title(f"{report.matrix} ({report.row_class} rows, {dtype})", fontsize=10)
        axes.set_xlabel("block size (threads)")
        axes.set_ylabel("time per product (µs)")
        axes.set_xticks([32, 128, 256, 384, 512, 640, 768, 896, 1024])
        axes.set_xlim(0, 1056)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8, title="* fastest, o untuned", title_fontsize=8)
    figure.savefig(path, dpi=120)
