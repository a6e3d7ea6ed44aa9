"""A report as data (sections of text, tables and plots) rendered to HTML and markdown.

`write_document` writes, into one output directory:

    report.html     self-contained: CSS inline, every PNG embedded as a base64 data URI
    summary.md      the same text and tables for terminals and CI logs, linking the PNGs
    figures/*.png   each plot as a file
    report.json     the numbers behind the tables (when given)

Everything is written into a temporary directory beside the target and moved into place at the
end, so a failure leaves nothing behind.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.figure import Plot

FIGURE_DIR = "figures"
HTML_NAME = "report.html"
MARKDOWN_NAME = "summary.md"
JSON_NAME = "report.json"
_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; }
.note { font-size: 0.85em; color: #555; }
"""


@dataclass(frozen=True)
class Table:
    title: str
    frame: pd.DataFrame
    note: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    text: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    plots: tuple[Plot, ...] = ()


@dataclass(frozen=True)
class Document:
    title: str
    sections: tuple[Section, ...]
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def plots(self) -> tuple[Plot, ...]:
        return tuple(p for s in self.sections for p in s.plots)


def format_cell(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}"
    return str(value)


def _rows(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    if not isinstance(frame.index, pd.RangeIndex):
        frame = frame.reset_index()
    header = [str(c) for c in frame.columns]
    body = [[format_cell(v) for v in row] for row in frame.itertuples(index=False)]
    return header, body


def table_html(table: Table) -> str:
    header, body = _rows(table.frame)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body
    )
    note = f'<p class="note">{html.escape(table.note)}</p>' if table.note else ""
    return f"<h3>{html.escape(table.title)}</h3><table><tr>{head}</tr>{rows}</table>{note}"


def table_markdown(table: Table) -> str:
    header, body = _rows(table.frame)
    lines = [f"**{table.title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    if table.note:
        lines += ["", f"_{table.note}_"]
    return "\n".join(lines)


def plot_html(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    caption = html.escape(plot.title + (f" - {plot.caption}" if plot.caption else ""))
    return (
        f'<figure id="{html.escape(plot.name)}"><img alt="{html.escape(plot.title)}" '
        f'src="data:image/png;base64,{data}"><figcaption>{caption}</figcaption></figure>'
    )


def render_html(doc: Document) -> str:
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(doc.title)}</title>",
        f"<style>{_CSS}</style></head><body><h1>{html.escape(doc.title)}</h1>",
    ]
    for section in doc.sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts += [f"<p>{html.escape(t)}</p>" for t in section.text]
        parts += [table_html(t) for t in section.tables]
        parts += [plot_html(p) for p in section.plots]
    parts.append("</body></html>")
    return "\n".join(parts)


def render_markdown(doc: Document) -> str:
    parts = [f"# {doc.title}"]
    for section in doc.sections:
        parts.append(f"## {section.title}")
        parts += list(section.text)
        parts += [table_markdown(t) for t in section.tables]
        parts += [
            f"![{p.title}]({FIGURE_DIR}/{p.name}.png)" + (f"\n_{p.caption}_" if p.caption else "")
            for p in section.plots
        ]
    return "\n\n".join(parts) + "\n"


def write_document(doc: Document, out_dir: Path | str) -> Path:
    """Write the report files into `out_dir` (created or updated); return the HTML path."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    tmp.chmod(0o755)
    try:
        (tmp / FIGURE_DIR).mkdir()
        for plot in doc.plots:
            (tmp / FIGURE_DIR / f"{plot.name}.png").write_bytes(plot.png)
        (tmp / HTML_NAME).write_text(render_html(doc), encoding="utf-8")
        (tmp / MARKDOWN_NAME).write_text(render_markdown(doc), encoding="utf-8")
        if doc.data:
            (tmp / JSON_NAME).write_text(json.dumps(plain(doc.data), indent=2))
        _publish(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir / HTML_NAME


def _publish(tmp: Path, out_dir: Path) -> None:
    """Move the finished files into place (a rename when out_dir does not exist yet)."""
    if not out_dir.exists():
        tmp.rename(out_dir)
        return
    for path in sorted(tmp.rglob("*")):
        if path.is_file():
            target = out_dir / path.relative_to(tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)


def plain(value: Any) -> Any:
    """JSON-ready copy: frames as records, numpy scalars as Python, NaN/inf as None."""
    if isinstance(value, pd.DataFrame):
        frame = value if isinstance(value.index, pd.RangeIndex) else value.reset_index()
        return plain(frame.to_dict(orient="records"))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value
