"""Sphinx extension: the benchmarks page, drawn from the committed result files.

``.. sparsegpu-results:: benchmarks/results`` reads every ``*.json`` in that folder (relative
to the docs source) at build time:

* ``sparsegpu bench --json`` files become a table and a bar plot (GB/s per backend);
* ``sparsegpu probe --json`` files become the copy bandwidth and the offset/stride plot;
* any other JSON (a solver benchmark, say) is shown through the ``.png`` and ``.md`` of the
  same name beside it, or as it is.

A folder with some or none of these files builds; a file that is not valid JSON, or a bench
or probe file with the wrong shape, is a warning naming it (an error under ``-W``).
Plots need matplotlib; without it the page has the tables only.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from sparsegpu import bench, probe

logger = logging.getLogger(__name__)
PLOT_FOLDER = "_generated"


def classify(path: Path) -> tuple[str, object]:
    """("bench", data), ("probe", ProbeResult) or ("other", data) for one result file.

    Raises
    ------
    ValueError
        For a file that is not JSON, or a bench/probe file of the wrong shape.
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read a JSON document ({exc})") from exc
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == bench.SCHEMA:
        return "bench", bench.load_results(path)
    if schema == probe.SCHEMA:
        return "probe", probe.ProbeResult.from_json(data)
    return "other", data


def table_node(columns: list[str], rows: list[list]) -> nodes.table:
    """A docutils table of plain-text cells (no markup is interpreted in them)."""
    table = nodes.table(classes=["sparsegpu-results"])
    group = nodes.tgroup(cols=len(columns))
    table += group
    group.extend(nodes.colspec(colwidth=1) for _ in columns)

    def row_node(cells):
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph(text="-" if cell is None else str(cell))
            row += entry
        return row

    head = nodes.thead()
    head += row_node(columns)
    body = nodes.tbody()
    body.extend(row_node(r) for r in rows)
    group += head
    group += body
    return table


def _machine_line(data: dict) -> str:
    machine = data.get("machine") or {}
    gpu = machine.get("gpu") or {}
    where = gpu.get("name") or f"CPU ({machine.get('processor', '?')})"
    peak = data.get("peak_gb_per_s")
    parts = [
        f"{where}, {data.get('created', '?')}",
        f"sparsegpu {data.get('sparsegpu', '?')}, CuPy {machine.get('cupy', '-')}, "
        f"CUDA {machine.get('cuda_runtime', '-')}",
    ]
    if peak:
        parts.append(f"100% of peak = {peak:,.0f} GB/s (measured copy bandwidth)")
    if data.get("baseline"):
        parts.append(f"speed-ups are over {data['baseline']} measured in the same run")
    return "; ".join(parts) + "."


class ResultsDirective(SphinxDirective):
    """``.. sparsegpu-results:: FOLDER``: every result file in FOLDER, drawn."""

    required_arguments = 1

    def run(self):
        folder = Path(self.env.srcdir) / self.arguments[0]
        self.env.note_dependency(str(folder))
        files = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if not files:
            return [nodes.paragraph(text=f"No result files are committed in {self.arguments[0]}.")]
        out = []
        for path in files:
            self.env.note_dependency(str(path))
            try:
                kind, data = classify(path)
            except ValueError as exc:
                logger.warning(str(exc), location=(self.env.docname, self.lineno))
                continue
            out.extend(getattr(self, f"_{kind}")(path, data))
        return out

    def _section(self, path: Path, title: str) -> list:
        return [nodes.rubric(text=f"{title} ({path.name})")]

    def _image(self, path: Path, draw) -> list:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return []
        # beside the results folder, not in it: the folder holds committed files only
        relative = Path(self.arguments[0]).parent / PLOT_FOLDER / f"{path.stem}.png"
        target = Path(self.env.srcdir) / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        draw(target)
        return [nodes.image(uri="/" + relative.as_posix(), alt=f"plot of {path.name}")]

    def _bench(self, path: Path, data: dict) -> list:
        out = self._section(path, "sparsegpu bench")
        out.append(nodes.paragraph(text=_machine_line(data)))
        columns, rows = bench.results_table(data)
        out.append(table_node(columns, rows))
        for name, reason in {**data.get("unavailable", {}), **data.get("skipped", {})}.items():
            out.append(nodes.paragraph(text=f"{name}: not timed ({reason})"))
        out.extend(self._image(path, lambda target: bench.plot(data, target)))
        return out

    def _probe(self, path: Path, result: probe.ProbeResult) -> list:
        out = self._section(path, "sparsegpu probe")
        out.append(
            nodes.paragraph(
                text=f"{result.device.get('name', '?')}: copy {result.copy_gb_per_s:,.0f} GB/s "
                f"(bytes read + written, {result.created})."
            )
        )
        rows = [
            [p.parameter, f"{p.gb_per_s:,.0f}", f"{100 * p.gb_per_s / result.copy_gb_per_s:.0f}%"]
            for p in result.offset[::4] + result.stride[:8]
        ]
        if rows:
            labels = ["offset"] * len(result.offset[::4]) + ["stride"] * len(result.stride[:8])
            rows = [[label, *row] for label, row in zip(labels, rows, strict=True)]
            out.append(table_node(["experiment", "elements", "GB/s", "% of copy"], rows))
            out.extend(self._image(path, lambda target: probe.plot(result, target)))
        return out

    def _other(self, path: Path, data) -> list:
        """Another measurement: its own plot and Markdown summary when they sit beside it."""
        out = self._section(path, "other result file")
        plot = path.with_suffix(".png")
        if plot.exists():
            uri = "/" + (Path(self.arguments[0]) / plot.name).as_posix()
            out.append(nodes.image(uri=uri, alt=f"plot of {path.name}"))
        summary = path.with_suffix(".md")
        if summary.exists():
            self.env.note_dependency(str(summary))
            text, language = summary.read_text(), "markdown"
        else:
            text, language = json.dumps(data, indent=2), "json"
        out.append(nodes.literal_block(text, text, language=language))
        return out


class OptionalModulesDirective(SphinxDirective):
    """``.. sparsegpu-optional-modules::`` then one module name per line: an ``automodule``
    for each module this build has (solvers, I/O, tuning arrive as separate pieces), a
    line saying so for each it has not."""

    has_content = True

    def run(self):
        lines = []
        for name in (line.strip() for line in self.content if line.strip()):
            lines.append(f".. rubric:: {name}")
            lines.append("")
            if _module_present(name):
                lines += [f".. automodule:: {name}", "   :members:", ""]
            else:
                lines.append(f"``{name}`` is not part of this build.")
            lines.append("")
        container = nodes.container()
        self.state.nested_parse(
            StringList(lines, source="sparsegpu-optional-modules"), 0, container
        )
        return container.children


def _module_present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is missing too
        return False


def setup(app):
    app.add_directive("sparsegpu-results", ResultsDirective)
    app.add_directive("sparsegpu-optional-modules", OptionalModulesDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
