"""Sphinx extension: the benchmarks page, drawn from the committed result files.

``.. sparsegpu-results:: benchmarks/results`` reads every ``*.json`` in that folder (relative
to the docs source) at build time and shows each as a table, with its plot where there is
one, under the sentence the directive's content gives for it (``FILE.json: what it shows``,
continuation lines indented):

* ``sparsegpu bench --json`` files: the results table and a GB/s bar plot (drawn here);
* ``sparsegpu probe --json`` files: the copy bandwidth and the offset/stride table and plot;
* ``sparsegpu autotune --json`` files: the winners table and the ``.png`` beside the file;
* any other JSON (a solver benchmark, say): the tables and text of the ``.md`` summary
  beside it, and the ``.png`` beside it. Raw JSON is never shown.

A folder with some or none of these files builds; a file that is not valid JSON, a bench or
probe file with the wrong shape, another file without a ``.md`` summary, or a file without
a sentence is a warning naming it (an error under ``-W``). Plots drawn here need
matplotlib; without it the page has the tables and the committed plots only.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from sparsegpu import bench
from sparsegpu.backends.policy import format_knobs
from sparsegpu.measure import probe

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
    if isinstance(data, list) and data and all(_is_autotune_report(r) for r in data):
        return "autotune", data
    return "other", data


def _is_autotune_report(report) -> bool:
    return isinstance(report, dict) and {"matrix", "row_class", "overall", "winners"} <= set(report)


def autotune_rows(reports: list[dict]) -> tuple[list[str], list[list]]:
    """Columns and rows of the winners of ``sparsegpu autotune --json`` reports: per matrix
    and dtype each backend's tuned policy, fastest first, the fastest overall starred."""
    columns = ["matrix", "rows", "dtype", "backend", "tuned policy", "µs", "GB/s"]
    columns += ["default µs", "gain"]
    rows = []
    for report in reports:
        for dtype, overall in report["overall"].items():
            winners = [w for w in report["winners"] if w["value_dtype"] == dtype]
            for w in sorted(winners, key=lambda w: w["best"]["time_ms"]):
                best, untuned = w["best"], w.get("untuned")
                star = "* " if w["backend"] == overall["backend"] else ""
                rows.append(
                    [
                        report["matrix"],
                        report["row_class"],
                        dtype,
                        star + w["backend"],
                        format_knobs(best.get("policy") or {}) or "-",
                        f"{best['time_ms'] * 1e3:.1f}",
                        f"{best['gb_per_s']:,.0f}",
                        f"{untuned['time_ms'] * 1e3:.1f}" if untuned else None,
                        f"{w['gain']:.2f}x" if w.get("gain") is not None else None,
                    ]
                )
    return columns, rows


def markdown_nodes(text: str) -> list:
    """Docutils nodes for a Markdown summary: ``#`` headings as rubrics, pipe tables as
    tables, other lines as paragraphs; inline code spans stay literal, nothing else is
    interpreted (so no cell can break the page)."""
    out, paragraph, lines = [], [], text.splitlines()

    def flush():
        if paragraph:
            out.append(inline_paragraph(" ".join(paragraph)))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("|"):
            flush()
            block = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                block.append(lines[i].strip())
                i += 1
            cells = [_pipe_cells(row) for row in block if not _PIPE_RULE.match(row)]
            width = len(cells[0])
            out.append(table_node(cells[0], [(r + [""] * width)[:width] for r in cells[1:]]))
            continue
        if line.startswith("#"):
            flush()
            out.append(nodes.rubric(text=line.lstrip("#").strip()))
        elif line:
            paragraph.append(line)
        else:
            flush()
        i += 1
    flush()
    return out


_PIPE_RULE = re.compile(r"^\|[\s:|-]+\|$")


def _pipe_cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def inline_paragraph(text: str) -> nodes.paragraph:
    """A paragraph of ``text`` with its Markdown code spans as literals."""
    paragraph = nodes.paragraph()
    for k, part in enumerate(text.split("`")):
        if part:
            paragraph += nodes.literal(text=part) if k % 2 else nodes.Text(part)
    return paragraph


def descriptions(lines) -> dict[str, str]:
    """``{file name: sentence}`` from the directive's content: ``NAME.json: sentence``,
    continuation lines indented or not."""
    out, current = {}, None
    for line in lines:
        head = re.match(r"^(\S+\.json):\s*(.*)$", line.strip())
        if head:
            current = head.group(1)
            out[current] = head.group(2)
        elif line.strip() and current is not None:
            out[current] += " " + line.strip()
    return out


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
    has_content = True

    def run(self):
        folder = Path(self.env.srcdir) / self.arguments[0]
        self.env.note_dependency(str(folder))
        files = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if not files:
            return [nodes.paragraph(text=f"No result files are committed in {self.arguments[0]}.")]
        self.sentences = descriptions(self.content)
        out = []
        for path in files:
            self.env.note_dependency(str(path))
            try:
                kind, data = classify(path)
            except ValueError as exc:
                self._warn(str(exc))
                continue
            out.extend(getattr(self, f"_{kind}")(path, data))
        return out

    def _warn(self, message: str) -> None:
        logger.warning(message, location=(self.env.docname, self.lineno))

    def _section(self, path: Path, title: str) -> list:
        out = [nodes.rubric(text=f"{title} ({path.name})")]
        sentence = self.sentences.get(path.name)
        if sentence:
            out.append(inline_paragraph(sentence))
        else:
            self._warn(f"{path.name}: say what it shows: '{path.name}: ...' in the directive")
        return out

    def _committed_plot(self, path: Path) -> list:
        plot = path.with_suffix(".png")
        if not plot.exists():
            return []
        uri = "/" + (Path(self.arguments[0]) / plot.name).as_posix()
        return [nodes.image(uri=uri, alt=f"plot of {path.name}")]

    def _image(self, path: Path, draw) -> list:
        """The committed ``.png`` beside ``path``, else a plot drawn now by ``draw``."""
        committed = self._committed_plot(path)
        if committed:
            return committed
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

    def _autotune(self, path: Path, reports: list) -> list:
        out = self._section(path, "sparsegpu autotune")
        out.append(table_node(*autotune_rows(reports)))
        out.extend(self._committed_plot(path))
        return out

    def _other(self, path: Path, data) -> list:
        """Another measurement: the tables and text of its Markdown summary, and its plot."""
        out = self._section(path, "result file")
        summary = path.with_suffix(".md")
        if summary.exists():
            self.env.note_dependency(str(summary))
            out.extend(markdown_nodes(summary.read_text()))
        else:
            self._warn(f"{path.name}: no {summary.name} summary beside it to show")
        out.extend(self._committed_plot(path))
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
