"""Self-contained HTML pages of plotly figures: plotly.js is inlined once, nothing is fetched."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table.findings { border-collapse: collapse; margin: 1rem 0; }
table.findings td, table.findings th { border: 1px solid #ccc; padding: 0.3rem 0.6rem; text-align: left; }
td.holds { color: #1a7f37; font-weight: 600; } td.fails { color: #cf222e; font-weight: 600; }
"""


def findings_table(findings: Iterable[Any]) -> str:
    """An HTML table of `Finding` rows (name, paper, ours, holds)."""
    rows = []
    for f in findings:
        verdict, css = {True: ("holds", "holds"), False: ("does not hold", "fails")}.get(f.holds, ("n/a", ""))
        cells = [html.escape(str(x)) for x in (f.name, f.paper, f.ours)]
        rows.append(
            f"<tr><td>{cells[0]}</td><td>{cells[1]}</td><td>{cells[2]}</td><td class='{css}'>{verdict}</td></tr>"
        )
    if not rows:
        return ""
    head = "<tr><th>finding</th><th>paper</th><th>ours</th><th>verdict</th></tr>"
    return f"<table class='findings'>{head}{''.join(rows)}</table>"


def figures_page(title: str, figures: Mapping[str, Any], findings: Iterable[Any] = (), intro: str = "") -> str:
    """One HTML document (returned as text) with ``intro``, a findings table and every plotly figure under its own
    heading. plotly.js (about 4.5 MB) is inlined once, and only where there is a figure to draw."""
    from plotly.offline import get_plotlyjs

    parts = [f"<h1>{html.escape(title)}</h1>", intro, findings_table(findings)]
    for name, figure in figures.items():
        parts.append(f"<h2>{html.escape(name)}</h2>")
        parts.append(figure.to_html(full_html=False, include_plotlyjs=False))
    script = f"<script type='text/javascript'>{get_plotlyjs()}</script>" if figures else ""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>{script}</head><body>"
        + "\n".join(parts)
        + "</body></html>"
    )
