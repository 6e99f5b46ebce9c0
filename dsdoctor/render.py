"""Renderers for a :class:`~dsdoctor.report.Report`: a rich table, JSON and Markdown.

Every row says PASS/INFO/WARN/FAIL in words, not only in colour (uv's STYLE.md); rich honours ``NO_COLOR``
and drops colour codes when stdout is not a terminal.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from dsdoctor.report import Report

STATUS = {"ok": "PASS", "info": "INFO", "warning": "WARN", "error": "FAIL"}
STYLE = {"ok": "green", "info": "cyan", "warning": "yellow", "error": "bold red"}


def _cell(key: str, value: Any) -> str:
    """One value as read by a person: bytes (keys ending in ``_bytes``) in GiB (2^30), the rest as is, with control
    characters escaped (a path or key from the user's files must not move the cursor or change colours)."""
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value / 2**30:.2f} GiB"
    from dsdoctor.cli import one_line

    return one_line(str(value))


def _scalar_items(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Top-level result values that read well in one cell (numbers, strings, short lists)."""
    rows = []
    for key, value in result.items():
        if value is None:  # not measured or not applicable: nothing to read in a table (the JSON keeps the key)
            continue
        if isinstance(value, (str, int, float, bool)):
            rows.append((key, _cell(key, value)))
        elif isinstance(value, list) and 0 < len(value) <= 8 and all(
                isinstance(v, (str, int, float, bool)) or v is None for v in value):
            rows.append((key, ", ".join(_cell(key, v) for v in value)))
        elif isinstance(value, dict) and 0 < len(value) <= 4 and all(
                isinstance(v, (str, int, float, bool)) or v is None for v in value.values()):
            # a dict under a *_bytes key (phases_bytes) holds bytes too, whatever its own keys are called
            rows.append((key, ", ".join(f"{k} {_cell(key if key.endswith('_bytes') else k, v)}"
                                        for k, v in value.items())))
    return rows


def render_json(report: Report) -> str:
    """The stable JSON interface (``Report.to_dict``), indented, UTF-8 kept readable."""
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False, default=str)


def render_markdown(report: Report) -> str:
    """A GitHub-flavoured Markdown table of findings, then the scalar result values."""
    def cell(text: str) -> str:  # a frame's `<module>` is text, not an HTML tag GitHub would swallow
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|") \
            .replace("\n", "<br>")

    lines = [f"## dsdoctor {report.command}"]
    if report.findings or not (report.tables or report.block):
        lines += ["", "| status | id | finding | evidence | fix |", "|---|---|---|---|---|"]
    for f in report.findings:
        lines.append(f"| {STATUS[f.severity]} | {f.id} | {cell(f.title)} | {cell(f.evidence)} | {cell(f.fix)} |")
    rows = _scalar_items(report.result)
    if rows:
        lines += ["", "| result | value |", "|---|---|"] + [f"| {k} | {cell(v)} |" for k, v in rows]
    for title, columns, body in report.tables:
        lines += ["", f"### {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in body]
    if report.block:
        lines += ["", f"### {report.block_title}", "", "```"] + report.block + ["```"]
    return "\n".join(lines) + "\n"


def render_table(report: Report, file: TextIO | None = None) -> None:
    """Print the findings as a rich table (and the scalar result values) to ``file`` (stdout)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich exits 1 here; the CLI decides (a closed pipe is no error)
            self.quiet = True
            raise BrokenPipeError

    console = _Console(file=file, soft_wrap=False)
    if not console.is_terminal:  # a log or a pipe: rich's 80 columns would fold every evidence cell
        console.width = max(console.width, 140)
    if report.findings or not (report.tables or report.block):
        table = Table(title=f"dsdoctor {report.command}", show_lines=True, expand=False)
        for name in ("status", "id", "finding", "evidence", "fix"):
            table.add_column(name, overflow="fold")
        for f in report.findings:
            # finding text is data (DeepSpeed messages, paths with [..]), never rich markup
            table.add_row(f"[{STYLE[f.severity]}]{STATUS[f.severity]}[/]", escape(f.id), escape(f.title),
                          escape(f.evidence), escape(f.fix))
        console.print(table)
    rows = _scalar_items(report.result)
    if rows:
        result = Table(show_header=True, box=None)
        result.add_column("result", style="bold")
        result.add_column("value", overflow="fold")
        for key, value in rows:
            result.add_row(escape(key), escape(value))
        console.print(result)
    for title, columns, body in report.tables:
        extra = Table(title=title, show_header=True, expand=False)
        for name in columns:
            extra.add_column(name, overflow="fold")
        for row in body:
            extra.add_row(*(escape(c) for c in row))
        console.print(extra)
    if report.block:
        console.print(escape(report.block_title), style="bold")
        for line in report.block:
            console.print(escape(line), highlight=False)
    if report.findings or not (report.tables or report.block):
        counts = {s: sum(f.severity == s for f in report.findings) for s in STATUS}
        console.print(", ".join(f"{n} {STATUS[s]}" for s, n in counts.items() if n) or "no findings")
