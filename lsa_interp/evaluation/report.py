"""Reports of an `EvaluationResult`: tables (markdown and rich), the per-transformation bar chart, files."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
from rich.table import Table

from lsa_interp.data.transformations import TRANSFORMATIONS
from lsa_interp.evaluation.metrics import OUTCOMES, Accuracy, in_paper_order
from lsa_interp.evaluation.paper_tables import PAPER_TABLE1
from lsa_interp.evaluation.result import NEW_ALPHABETS, SEEN_ALPHABETS, EvaluationResult
from lsa_interp.utils import atomic_write

REPORT_FILES = {"json": "evaluation.json", "markdown": "evaluation.md", "html": "accuracy_by_transformation.html"}
ALPHABET_LABELS = {SEEN_ALPHABETS: "seen alphabets", NEW_ALPHABETS: "new alphabets"}
CATEGORY_COLOURS = {"seen": "#1f77b4", "compositional": "#9467bd", "novel": "#ff7f0e", "extra": "#7f7f7f"}


@dataclass(frozen=True)
class Section:
    """One table of a report: a title, column headers, rows of cell strings and an optional caption."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""


def _cell(acc: Accuracy) -> str:
    return "–" if acc.percent is None else f"{acc.percent:.1f} ({acc.correct}/{acc.total})"


def _paper(value: float) -> str:
    return f"{value:.1f}"


def paper_preset(result: EvaluationResult) -> str | None:
    """The preset whose paper Table 1 row compares with ``result`` (training preset, else dataset preset)."""
    preset = result.training_preset or result.preset
    return preset if preset in PAPER_TABLE1 else None


def table1_section(result: EvaluationResult) -> Section:
    """Table 1 (% exact match, non-copy rows), with the paper's numbers when `paper_preset` has them."""
    t = result.table1
    paper = PAPER_TABLE1.get(paper_preset(result) or "")
    headers = ("transformations", "seen alphabets", "new alphabets", "new alphabets + standard")
    rows = [
        [
            "seen",
            _cell(t.seen_transformations_seen_alphabets),
            _cell(t.seen_transformations_new_alphabets),
            _cell(t.seen_transformations_new_alphabets_with_standard),
        ],
        [
            "new",
            _cell(t.new_transformations_seen_alphabets),
            _cell(t.new_transformations_new_alphabets),
            _cell(t.new_transformations_new_alphabets_with_standard),
        ],
    ]
    if paper is None:
        caption = "The paper reports Table 1 for nocopy-20, copy-20 and copy-200 models only."
    else:
        headers += ("paper: seen alphabets", "paper: new alphabets")
        rows[0] += [_paper(paper[0]), _paper(paper[1])]
        rows[1] += [_paper(paper[2]), _paper(paper[3])]
        caption = f"Paper: Table 1, {paper_preset(result)} (mean over runs; new alphabets include the standard one)."
    return Section("Table 1: exact match % (correct/total), non-copy rows", headers, tuple(map(tuple, rows)), caption)


def report_sections(result: EvaluationResult) -> list[Section]:
    """Every table of the report: Table 1, copy vs non-copy, by transformation, alternate-rule errors, rule
    families."""
    keys = (SEEN_ALPHABETS, NEW_ALPHABETS)
    copy_rows = tuple(
        (
            ALPHABET_LABELS[k],
            _cell(result.copy_vs_non_copy[k]["copy"]),
            _cell(result.copy_vs_non_copy[k]["non_copy"]),
            _cell(result.overall[k]),
        )
        for k in keys
    )
    names = in_paper_order(name for k in keys for name in result.by_transformation[k])
    empty = Accuracy(0, 0)
    transformation_rows = tuple(
        (name, _category(name), *(_cell(result.by_transformation[k].get(name, empty)) for k in keys)) for name in names
    )
    alternate_rows = tuple(
        (
            ALPHABET_LABELS[k],
            rule,
            *(_share(counts.percents()[o]) for o in OUTCOMES),
            counts.other_rule,
            str(counts.total),
        )
        for k in keys
        for rule, counts in result.alternate_rule[k].items()
    )
    family_rows = tuple(
        (
            ALPHABET_LABELS[k],
            rule,
            _share(_percent_of(counts.correct, counts.total)),
            ", ".join(f"{sibling} {_share(_percent_of(n, counts.total))}" for sibling, n in counts.as_rule.items()),
            _share(_percent_of(counts.other, counts.total)),
            str(counts.total),
        )
        for k in keys
        for rule, counts in result.rule_families[k].items()
    )
    return [
        table1_section(result),
        Section("Copy vs non-copy tasks: exact match %", ("alphabets", "copy", "non-copy", "all"), copy_rows),
        Section(
            "Accuracy by transformation (non-copy rows)",
            ("transformation", "category", "seen alphabets", "new alphabets"),
            transformation_rows,
        ),
        Section(
            "Alternate-rule errors on pred/succ tasks (non-copy rows), % of tasks",
            (
                "alphabets",
                "transformation",
                "correct",
                "applied other rule",
                "rule in standard alphabet",
                "other",
                "other rule",
                "tasks",
            ),
            alternate_rows,
        ),
        Section(
            "Which rule was applied: rules whose queries look alike (non-copy rows), % of tasks",
            ("alphabets", "transformation", "correct", "a sibling rule's answer", "other", "tasks"),
            family_rows,
            "Only the example tells these rules apart; a sibling's answer means the example was not read.",
        ),
    ]


def _percent_of(count: int, total: int) -> float | None:
    return 100.0 * count / total if total else None


def _share(percent: float | None) -> str:
    return "–" if percent is None else f"{percent:.1f}"


def _category(name: str) -> str:
    return TRANSFORMATIONS[name].category if name in TRANSFORMATIONS else "other"


def _describe(result: EvaluationResult) -> list[str]:
    lines = [
        f"model: {result.model or '(unnamed)'}; training preset: {result.training_preset or 'not recorded'}",
        f"dataset: {result.preset} (seed {result.seed}); tasks evaluated: "
        + ", ".join(f"{ALPHABET_LABELS[k]} {n:,}" for k, n in result.n_tasks.items()),
    ]
    if result.limit is not None:
        lines.append(f"limit: a deterministic random subset of at most {result.limit:,} rows per split")
    if result.seconds is not None:
        lines.append(f"decoding and scoring took {result.seconds:.1f} s")
    return lines


def markdown_report(result: EvaluationResult) -> str:
    """Return the report as markdown: description, every `Section` as a table, and the notes."""
    out = ["# Evaluation", "", *(f"- {line}" for line in _describe(result))]
    for section in report_sections(result):
        out += [
            "",
            f"## {section.title}",
            "",
            "| " + " | ".join(section.headers) + " |",
            "|" + "---|" * len(section.headers),
        ]
        out += ["| " + " | ".join(row) + " |" for row in section.rows]
        if section.caption:
            out += ["", section.caption]
    out += ["", "## Notes", "", *(f"- {note}" for note in result.notes)]
    return "\n".join(out) + "\n"


def rich_tables(result: EvaluationResult) -> list[Table]:
    """Return every `Section` as a rich `Table` (description and caption included) for printing."""
    tables = []
    for i, section in enumerate(report_sections(result)):
        caption = "\n".join(([*_describe(result)] if i == 0 else []) + ([section.caption] if section.caption else []))
        table = Table(title=section.title, caption=caption or None)
        for j, header in enumerate(section.headers):
            table.add_column(header, justify="left" if j < 2 else "right", no_wrap=True)
        for row in section.rows:
            table.add_row(*row)
        tables.append(table)
    return tables


def transformation_figure(result: EvaluationResult) -> go.Figure:
    """Return a grouped bar chart of accuracy by transformation: seen vs new alphabets, coloured by category."""
    fig = go.Figure()
    patterns = {SEEN_ALPHABETS: "", NEW_ALPHABETS: "/"}
    for key, pattern in patterns.items():
        by_name = result.by_transformation[key]
        for category, colour in (*CATEGORY_COLOURS.items(), ("other", "#bcbd22")):
            names = [name for name in by_name if _category(name) == category]
            if not names:
                continue
            fig.add_bar(
                x=names,
                y=[by_name[n].percent for n in names],
                offsetgroup=key,
                name=f"{category}, {ALPHABET_LABELS[key]}",
                legendgroup=category,
                marker={"color": colour, "pattern": {"shape": pattern}},
                customdata=[[by_name[n].correct, by_name[n].total] for n in names],
                hovertemplate="%{x}<br>%{y:.1f}% (%{customdata[0]}/%{customdata[1]})<extra>%{fullData.name}</extra>",
            )
    order = in_paper_order(n for key in patterns for n in result.by_transformation[key])
    fig.update_layout(
        title=f"Exact match by transformation, non-copy rows ({result.model or 'model'} on {result.preset})",
        barmode="group",
        yaxis={"title": "accuracy (%)", "range": [0, 100]},
        xaxis={"categoryorder": "array", "categoryarray": order, "tickangle": -40},
        legend={"title": "category, alphabets (hatched: new)"},
    )
    return fig


def write_report(result: EvaluationResult, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write ``evaluation.json``, ``evaluation.md`` and the offline bar chart into ``out_dir``, atomically.

    Returns the paths keyed ``json``, ``markdown``, ``html``. Raises OSError when a file cannot be written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / name for kind, name in REPORT_FILES.items()}
    atomic_write(paths["json"], lambda p: p.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8"))
    atomic_write(paths["markdown"], lambda p: p.write_text(markdown_report(result), encoding="utf-8"))
    figure = transformation_figure(result)
    atomic_write(paths["html"], lambda p: figure.write_html(p, include_plotlyjs=True))
    return paths
