"""The evaluation report: its markdown tables line by line, the shipped cards' evaluation parts, the rich tables
and the bar chart of accuracy by transformation."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from rich.console import Console

from lsa_interp.data import STANDARD_ALPHABET
from lsa_interp.evaluation import markdown_report, rich_tables, score_predictions, transformation_figure, write_report
from lsa_interp.evaluation.report import paper_preset
from lsa_interp.evaluation.stored import read_evaluation
from lsa_interp.model.checkpoint import CHECKPOINTS_DIR
from tests.helpers import answered_rows, joined_rows


@pytest.fixture(scope="module")
def result():
    """A scored evaluation: succ and pred only in some splits, a novel rule, copy rows on seen alphabets only."""
    seen = joined_rows(
        answered_rows(2, 1, "succ"), answered_rows(1, 1, "pred", STANDARD_ALPHABET), answered_rows(0, 2, "reverse")
    )
    seen = joined_rows(seen, answered_rows(2, 0, "succ", copy=True))
    new = joined_rows(answered_rows(1, 3, "sort"), answered_rows(1, 0, "succ", STANDARD_ALPHABET))
    scored = score_predictions(*seen, *new)
    return replace(scored, training_preset=None, preset="tiny", model="m", seed=3, limit=40, seconds=1.25)


def test_the_markdown_report_line_by_line(result):
    lines = markdown_report(result).splitlines()
    assert lines[:38] == [
        "# Evaluation",
        "",
        "- model: m; training preset: not recorded",
        "- dataset: tiny (seed 3); tasks evaluated: seen alphabets 9, new alphabets 5",
        "- limit: a deterministic random subset of at most 40 rows per split",
        "- decoding and scoring took 1.2 s",
        "",
        "## Table 1: exact match % (correct/total), non-copy rows",
        "",
        "| transformations | seen alphabets | new alphabets | new alphabets + standard |",
        "|---|---|---|---|",
        "| seen | 60.0 (3/5) | 40.0 (2/5) | 42.9 (3/7) |",
        "| new | 0.0 (0/2) | – | – |",
        "",
        "The paper reports Table 1 for nocopy-20, copy-20 and copy-200 models only.",
        "",
        "## Copy vs non-copy tasks: exact match %",
        "",
        "| alphabets | copy | non-copy | all |",
        "|---|---|---|---|",
        "| seen alphabets | 100.0 (2/2) | 42.9 (3/7) | 55.6 (5/9) |",
        "| new alphabets | – | 40.0 (2/5) | 40.0 (2/5) |",
        "",
        "## Accuracy by transformation (non-copy rows)",
        "",
        "| transformation | category | seen alphabets | new alphabets |",
        "|---|---|---|---|",
        "| succ | seen | 66.7 (2/3) | 100.0 (1/1) |",
        "| pred | seen | 50.0 (1/2) | – |",
        "| sort | seen | – | 25.0 (1/4) |",
        "| reverse | novel | 0.0 (0/2) | – |",
        "",
        "## Alternate-rule errors on pred/succ tasks (non-copy rows), % of tasks",
        "",
        "| alphabets | transformation | correct | applied other rule | rule in standard alphabet | other | other rule "
        "| tasks |",
        "|---|---|---|---|---|---|---|---|",
        "| seen alphabets | pred | 50.0 | 0.0 | 0.0 | 50.0 | succ | 2 |",
        "| seen alphabets | succ | 66.7 | 0.0 | 0.0 | 33.3 | pred | 3 |",
    ]
    families = lines.index("## Which rule was applied: rules whose queries look alike (non-copy rows), % of tasks")
    assert lines[38:families] == [
        "| new alphabets | pred | – | – | – | – | succ | 0 |",
        "| new alphabets | succ | 100.0 | 0.0 | 0.0 | 0.0 | pred | 1 |",
        "",
    ]
    assert lines[families + 1 : families + 6] == [
        "",
        "| alphabets | transformation | correct | a sibling rule's answer | other | tasks |",
        "|---|---|---|---|---|---|",
        "| seen alphabets | extend_sequence | – | succ –, pred – | – | 0 |",
        "| seen alphabets | succ | 66.7 | extend_sequence 0.0, pred 0.0 | 33.3 | 3 |",
    ]
    notes = lines.index("## Notes")
    assert lines[notes - 3 : notes] == [
        "",
        "Only the example tells these rules apart; a sibling's answer means the example was not read.",
        "",
    ]
    assert lines[notes + 1 :] == ["", *(f"- {note}" for note in result.notes)] and len(result.notes) > 3
    assert markdown_report(result).endswith(".\n")


def test_a_report_without_limit_or_time_and_a_paper_preset(result):
    plain = replace(result, limit=None, seconds=None, model="", training_preset="copy-20", preset="copy-200")
    lines = markdown_report(plain).splitlines()
    assert lines[2:4] == [
        "- model: (unnamed); training preset: copy-20",
        "- dataset: copy-200 (seed 3); tasks evaluated: seen alphabets 9, new alphabets 5",
    ]
    assert lines[4:11] == [
        "",
        "## Table 1: exact match % (correct/total), non-copy rows",
        "",
        "| transformations | seen alphabets | new alphabets | new alphabets + standard | paper: seen alphabets | "
        "paper: new alphabets |",
        "|---|---|---|---|---|---|",
        "| seen | 60.0 (3/5) | 40.0 (2/5) | 42.9 (3/7) | 91.0 | 33.1 |",
        "| new | 0.0 (0/2) | – | – | 10.2 | 3.9 |",
    ]
    assert lines[12] == "Paper: Table 1, copy-20 (mean over runs; new alphabets include the standard one)."


def test_the_paper_row_is_the_training_preset_s_else_the_dataset_s(result):
    assert paper_preset(replace(result, training_preset="copy-200", preset="copy-20")) == "copy-200"
    assert paper_preset(replace(result, training_preset=None, preset="nocopy-20")) == "nocopy-20"
    assert paper_preset(replace(result, training_preset="tiny", preset="copy-20")) is None
    assert paper_preset(replace(result, training_preset=None, preset="tiny")) is None


@pytest.mark.parametrize("card", sorted(CHECKPOINTS_DIR.glob("**/card.md")), ids=lambda p: p.parent.name)
def test_each_shipped_card_s_evaluation_part_is_the_report_of_its_evaluation(card):
    report = markdown_report(read_evaluation(card.parent / "evaluation.json"))
    assert card.read_text().partition("## Evaluation")[1:] == ("## Evaluation", report.partition("# Evaluation")[2])


def test_the_rich_tables_carry_the_description_first_and_each_caption(result):
    tables = rich_tables(result)
    assert [t.title for t in tables] == [
        "Table 1: exact match % (correct/total), non-copy rows",
        "Copy vs non-copy tasks: exact match %",
        "Accuracy by transformation (non-copy rows)",
        "Alternate-rule errors on pred/succ tasks (non-copy rows), % of tasks",
        "Which rule was applied: rules whose queries look alike (non-copy rows), % of tasks",
    ]
    assert tables[0].caption == "\n".join(markdown_report(result).splitlines()[2:6]).replace("- ", "") + (
        "\nThe paper reports Table 1 for nocopy-20, copy-20 and copy-200 models only."
    )
    assert [t.caption for t in tables[1:]] == [None, None, None, tables[4].caption] and tables[4].caption
    assert tables[4].caption.startswith("Only the example tells")
    assert [c.header for c in tables[2].columns] == ["transformation", "category", "seen alphabets", "new alphabets"]
    assert [c.justify for c in tables[2].columns] == ["left", "left", "right", "right"]
    assert all(c.no_wrap for t in tables for c in t.columns)
    assert list(tables[2].columns[0].cells) == ["succ", "pred", "sort", "reverse"]
    assert list(tables[2].columns[3].cells) == ["100.0 (1/1)", "–", "25.0 (1/4)", "–"]
    console = Console(record=True, width=200)
    console.print(tables[0])
    assert "seen alphabets 9, new alphabets 5" in console.export_text()


def test_the_bar_chart_groups_each_alphabet_set_s_rules_by_category(result):
    figure = transformation_figure(result)
    bars = [
        (b.name, b.offsetgroup, b.legendgroup, b.marker.color, b.marker.pattern.shape, tuple(b.x), tuple(b.y))
        for b in figure.data
    ]
    assert bars == [
        ("seen, seen alphabets", "seen_alphabets", "seen", "#1f77b4", "", ("succ", "pred"), (200 / 3, 50.0)),
        ("novel, seen alphabets", "seen_alphabets", "novel", "#ff7f0e", "", ("reverse",), (0.0,)),
        ("seen, new alphabets", "new_alphabets", "seen", "#1f77b4", "/", ("succ", "sort"), (100.0, 25.0)),
    ]
    assert [list(map(list, b.customdata)) for b in figure.data] == [[[2, 3], [1, 2]], [[0, 2]], [[1, 1], [1, 4]]]
    assert figure.data[0].hovertemplate == (
        "%{x}<br>%{y:.1f}% (%{customdata[0]}/%{customdata[1]})<extra>%{fullData.name}</extra>"
    )
    layout = figure.layout
    assert layout.title.text == "Exact match by transformation, non-copy rows (m on tiny)"
    assert layout.barmode == "group" and layout.yaxis.title.text == "accuracy (%)" and layout.yaxis.range == (0, 100)
    assert layout.xaxis.categoryorder == "array" and layout.xaxis.tickangle == -40
    assert layout.xaxis.categoryarray == ("succ", "pred", "sort", "reverse")
    assert layout.legend.title.text == "category, alphabets (hatched: new)"
    unknown = replace(
        result,
        model="",
        by_transformation={k: {"mystery": v["succ"]} for k, v in result.by_transformation.items() if "succ" in v},
    )
    other = transformation_figure(unknown)
    assert [(b.name, b.marker.color) for b in other.data] == [
        ("other, seen alphabets", "#bcbd22"),
        ("other, new alphabets", "#bcbd22"),
    ]
    assert other.layout.title.text.endswith("(model on tiny)")


def test_write_report_writes_the_json_the_markdown_and_the_chart(result, tmp_path, ascii_locale):
    paths = write_report(result, tmp_path / "new" / "eval")
    assert paths == {
        "json": tmp_path / "new" / "eval" / "evaluation.json",
        "markdown": tmp_path / "new" / "eval" / "evaluation.md",
        "html": tmp_path / "new" / "eval" / "accuracy_by_transformation.html",
    }
    text = paths["json"].read_text(encoding="utf-8")
    assert text == json.dumps(result.to_dict(), indent=2) + "\n"
    assert paths["markdown"].read_text(encoding="utf-8") == markdown_report(result)
    page = paths["html"].read_text(encoding="utf-8")
    assert "Exact match by transformation" in page and "<script src=" not in page
