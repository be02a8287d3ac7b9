"""Findings over a population of models: every report step on every checkpoint, in parallel processes.

`run_population` runs `report.run_report` on each checkpoint in a process pool (one torch thread per
worker, ``workers`` processes, default the CPU count) and collects, per model, each finding's headline
measure (`Finding.value`) and verdict. `Population` then counts in how many models each finding holds
(k/N), groups the models by their training condition (metadata preset and batching) for the paper's
population claims: the matching head's occurrence (paper: copy 20/20, no-copy 5/20) and Figure 5's
attention between matching example letters (~0.23 with copy tasks, ~0.015 without), and draws
the per-model distributions as an offline plotly page.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from lsa_interp.utils import atomic_write

MATCHING = "matching head"
DEFAULT_STEPS: tuple[str, ...] | None = None
"""Report steps run on each model when ``steps`` is not given (None: all of them)."""
FIGURE5 = "Figure 5: attention example-out -> same example-in letter (stronger of encoder layers 1-2)"


def condition(metadata: dict[str, Any]) -> str:
    """A model's training condition, ``"PRESET / BATCHING"`` from its metadata (``"unknown"`` parts if absent)."""
    train = metadata.get("train_config") or {}
    return f"{metadata.get('preset') or train.get('preset') or 'unknown'} / {train.get('batching') or 'unknown'}"


def _report_one(path: str, seed: int, steps: Sequence[str] | None) -> dict[str, Any]:
    """Worker: load one checkpoint, run the report on one thread, return its findings as plain data."""
    import torch

    from lsa_interp.analysis.report import run_report
    from lsa_interp.model import load_model

    torch.set_num_threads(1)
    model = load_model(path)
    report = run_report(model, path, seed, steps=steps)
    return {
        "model": path,
        "condition": condition(model.metadata),
        "findings": [f.to_dict() for f in report.findings],
        "seconds": sum(report.seconds.values()),
    }


def _find(row: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The finding called ``name`` in one model's row, or None."""
    return next((f for f in row["findings"] if f["name"] == name), None)


def holds_text(row: dict[str, Any]) -> str:
    """How often the finding of a `Population.table` row holds: ``holds in k/J of N`` (J models with a verdict of
    N), or, for a finding no model gave a verdict on (a measure the paper reports without a threshold), says so."""
    if row["judged"] == 0:
        return f"a measure, no verdict (in {row['models']} models)"
    return f"holds in {row['holds']}/{row['judged']} of {row['models']}"


@dataclass
class Population:
    """Per-model findings (``rows``, one dict per model as `_report_one` returns) and their summaries."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def finding_names(self) -> list[str]:
        """Every finding name, in first-seen order."""
        return list(dict.fromkeys(f["name"] for row in self.rows for f in row["findings"]))

    def table(self) -> list[dict[str, Any]]:
        """One row per finding: its measure in each model, and in how many models it holds (``holds`` k,
        ``judged`` models with a verdict, ``models`` N)."""
        out = []
        for name in self.finding_names():
            per_model = {row["model"]: _find(row, name) for row in self.rows}
            verdicts = [f["holds"] for f in per_model.values() if f is not None and f["holds"] is not None]
            out.append(
                {
                    "finding": name,
                    "paper": next(f["paper"] for f in per_model.values() if f is not None),
                    "values": {model: (f or {}).get("value") for model, f in per_model.items()},
                    "holds": sum(verdicts),
                    "judged": len(verdicts),
                    "models": len(self.rows),
                }
            )
        return out

    def by_condition(self) -> dict[str, dict[str, Any]]:
        """Per training condition: models, matching-head occurrence (``"k/N"``) and mean Figure-5 attention."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in self.rows:
            groups.setdefault(row["condition"], []).append(row)
        out = {}
        for name, rows in groups.items():
            found = [f for row in rows for f in row["findings"] if f["name"] == MATCHING]
            attention = [f["value"] for row in rows for f in row["findings"] if f["name"] == FIGURE5]
            out[name] = {
                "models": len(rows),
                "matching_head": f"{sum(bool(f['holds']) for f in found)}/{len(found)}" if found else "-",
                "figure5_attention": sum(attention) / len(attention) if attention else None,
            }
        return out

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``population.json`` and the offline ``population.html`` atomically; return their paths."""
        from lsa_interp.viz.html import figures_page

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "population.json", "html": out / "population.html"}
        doc = {"models": self.rows, "table": self.table(), "conditions": self.by_condition()}
        text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
        atomic_write(paths["json"], lambda p: p.write_text(text, encoding="utf-8"))
        page = figures_page(f"lsa-interp report over {len(self.rows)} models", self._figures(), [], self._intro())
        atomic_write(paths["html"], lambda p: p.write_text(page, encoding="utf-8"))
        return paths

    def _intro(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(r['finding'])}</td><td>{html.escape(r['paper'])}</td>"
            f"<td>{html.escape(holds_text(r))}</td></tr>"
            for r in self.table()
        )
        conditions = "".join(
            f"<tr><td>{html.escape(name)}</td><td>{c['models']}</td><td>{c['matching_head']}</td>"
            f"<td>{'-' if c['figure5_attention'] is None else format(c['figure5_attention'], '.3f')}</td></tr>"
            for name, c in self.by_condition().items()
        )
        return (
            "<table class='findings'><tr><th>finding</th><th>paper</th><th>ours</th></tr>"
            f"{rows}</table><h2>by condition</h2><table class='findings'><tr><th>preset / batching</th><th>models</th>"
            f"<th>matching head (paper: copy 20/20, no-copy 5/20)</th><th>Figure 5 attention (paper: ~0.23 / "
            f"~0.015)</th></tr>{conditions}</table><h2>per model</h2>{self._per_model()}"
        )

    def _per_model(self) -> str:
        """A table of every finding (rows) in every model (columns): its measure and verdict, as the report has it."""
        verdict = {True: "holds", False: "no", None: "-"}
        head = "".join(
            f"<th>{html.escape(Path(row['model']).name)}<br>{html.escape(row['condition'])}</th>" for row in self.rows
        )
        body = ""
        for name in self.finding_names():
            found = [_find(row, name) for row in self.rows]
            cells = "".join(
                "<td></td>" if f is None else f"<td>{html.escape(f['ours'])} (<b>{verdict[f['holds']]}</b>)</td>"
                for f in found
            )
            body += f"<tr><td>{html.escape(name)}</td>{cells}</tr>"
        return f"<table class='findings'><tr><th>finding</th>{head}</tr>{body}</table>"

    def _figures(self) -> dict[str, Any]:  # pragma: no mutate block
        import plotly.graph_objects as go

        figures = {}
        groups = {r["model"]: r["condition"] for r in self.rows}
        for row in self.table():
            values = [(model, v) for model, v in row["values"].items() if v is not None]
            if not values:
                continue
            ours = {r["model"]: (_find(r, row["finding"]) or {}).get("ours", "") for r in self.rows}
            fig = go.Figure(
                go.Box(
                    x=[groups[m] for m, _ in values],
                    y=[v for _, v in values],
                    text=[f"{Path(m).name}: {ours[m]}" for m, _ in values],
                    hovertemplate="%{text}<extra></extra>",
                    boxpoints="all",
                    pointpos=0,
                )
            )
            fig.update_layout(
                title=f"{row['finding']} (holds in {row['holds']}/{row['judged']}; paper: {row['paper']})",
                height=380,
                yaxis_title="the finding's measure (each point's hover: its value with units)",
                xaxis_title="preset / batching",
            )
            figures[row["finding"]] = fig
        return figures


def run_population(
    paths: Sequence[str | Path],
    seed: int = 0,
    workers: int | None = None,
    steps: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Population:
    """Run the report (all steps, or ``steps``) on every checkpoint of ``paths`` with ``workers`` processes
    (default: the CPU count, at most one per model); ``progress(model)`` after each. Returns the
    `Population` in the order of ``paths``. Raises ValueError for no paths or ``workers < 1``; a checkpoint
    that fails to load raises its error."""
    if not paths:
        raise ValueError("give at least one checkpoint")
    workers = workers if workers is not None else os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    names = [str(p) for p in paths]
    rows: dict[str, dict[str, Any]] = {}
    with ProcessPoolExecutor(min(workers, len(names)), mp_context=get_context("spawn")) as pool:
        chosen = steps if steps is not None else DEFAULT_STEPS
        futures = {pool.submit(_report_one, name, seed, chosen): name for name in names}
        for future in as_completed(futures):
            rows[futures[future]] = future.result()
            if progress:
                progress(futures[future])
    return Population([rows[name] for name in names])
