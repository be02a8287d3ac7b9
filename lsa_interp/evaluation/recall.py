"""Training recall: answers that repeat what the train split answered for the same alphabet and query.

The split is by problem string (``query > answer``), so a val row's query can be in the train split under
another rule, with another answer, in the same alphabet: pred's ``bcde > acde`` in val and succ's
``bcde > bcdf`` in train. A model that does not read the rule from the example can still give the trained answer
for a query it has seen. `training_recall` separates such rows (``trained``: the query was trained in this
alphabet with another answer) from the rest (``untrained``) and counts each row's answer as:

- ``correct``: the row's own answer;
- ``recalled``: an answer the train split gave this alphabet and query (``recalled_from`` names its rule);
- ``seen_rule``: a seen rule's answer on the query that was never trained for this alphabet and query
  (`seen_rule_answers`): a look-alike sibling's answer, or for a new rule on a run of the alphabet the answer of
  extend_sequence, succ or pred; a rule applied to the query, not a recalled row;
- ``other``: anything else.

On alphabets the model never trained on (the new-alphabet test set) nothing can be recalled: every row is
``untrained``, and a ``seen_rule`` answer there is a seen rule applied to the query, never a recalled row (an
unfamiliar alphabet lowers that share as well).

A row whose own answer was trained for its alphabet and query would be a leak between the splits; the split by
problem string rules it out, and `RecallCounts.leaked` counts such rows (expected 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lsa_interp.data.task import Task
from lsa_interp.data.transformations import SEEN
from lsa_interp.evaluation.metrics import in_paper_order
from lsa_interp.evaluation.rule_families import FAMILY_OF, RULE_FAMILIES, family_answers

TrainedAnswers = Mapping[tuple[str, str], Mapping[str, str]]
"""``(alphabet, query) -> {answer: rule}``: every answer the train split gives a query in an alphabet."""
OUTCOMES: tuple[str, ...] = ("correct", "recalled", "seen_rule", "other")
"""How a row was answered, in the order counted (the first that applies)."""
ROW_KINDS: tuple[str, ...] = ("trained", "untrained")
"""Rows whose alphabet and query the train split holds with another answer, and the rest."""
WINDOW_RULE = RULE_FAMILIES["window"][0]
"""A rule of the family whose queries are runs of the alphabet (its `family_answers` give all three answers)."""


def trained_answers(train: Iterable[Task]) -> dict[tuple[str, str], dict[str, str]]:
    """Index the train split: ``{(alphabet, query): {answer: rule}}`` over every row (copy rows repeat a
    non-copy row's query and answer, so they add nothing). Raises ValueError for a row without its answer or rule."""
    index: dict[tuple[str, str], dict[str, str]] = {}
    for task in train:
        if task.answer is None or task.transformation is None:
            raise ValueError(f"train task {task} needs its answer and rule")
        index.setdefault((task.alphabet, task.query), {}).setdefault(task.answer, task.transformation)
    return index


def _empty() -> dict[str, int]:
    return dict.fromkeys(OUTCOMES, 0)


@dataclass
class RecallCounts:
    """One rule's non-copy rows: ``counts[kind][outcome]`` for kind in `ROW_KINDS` and outcome in `OUTCOMES`;
    ``trained_by[rule]``: ``trained`` rows whose query the train split holds under ``rule`` (a row may count under
    several rules); ``recalled_from[rule]``: recalled answers by the rule of the training row they repeat, so
    ``recalled_from[r] / trained_by[r]`` is how often a query trained under ``r`` gets that answer (when only one
    other rule trained it); ``leaked``: rows whose own answer was trained for their alphabet and query (counted as
    ``untrained`` unless another answer was trained too)."""

    rule: str
    counts: dict[str, dict[str, int]] = field(default_factory=lambda: {kind: _empty() for kind in ROW_KINDS})
    trained_by: dict[str, int] = field(default_factory=dict)
    recalled_from: dict[str, int] = field(default_factory=dict)
    leaked: int = 0

    def rows(self, kind: str) -> int:
        """Rows of ``kind`` counted."""
        return sum(self.counts[kind].values())

    def percent(self, kind: str, outcome: str) -> float | None:
        """``outcome``'s share of the rows of ``kind``, in percent (None without rows)."""
        rows = self.rows(kind)
        return 100.0 * self.counts[kind][outcome] / rows if rows else None

    def add(self, other: RecallCounts) -> None:
        """Add ``other``'s counts to these."""
        for kind in ROW_KINDS:
            for outcome in OUTCOMES:
                self.counts[kind][outcome] += other.counts[kind][outcome]
        for mine, theirs in ((self.trained_by, other.trained_by), (self.recalled_from, other.recalled_from)):
            for rule, n in theirs.items():
                mine[rule] = mine.get(rule, 0) + n
        self.leaked += other.leaked

    def to_dict(self) -> dict:
        """Counts and percentages per row kind, the training rules, the recalled rules and the leak count."""
        return {
            kind: {
                **self.counts[kind],
                "rows": self.rows(kind),
                **{f"percent_{outcome}": self.percent(kind, outcome) for outcome in OUTCOMES},
            }
            for kind in ROW_KINDS
        } | {
            "trained_by": dict(sorted(self.trained_by.items())),
            "recalled_from": dict(sorted(self.recalled_from.items())),
            "leaked": self.leaked,
        }


def seen_rule_answers(task: Task) -> dict[str, str]:
    """The answers other seen rules give ``task``'s query in its alphabet: ``{rule: answer}``. For a rule of a
    look-alike family, its siblings' (`family_answers`); for any other rule whose query is a run of the alphabet,
    extend_sequence's, succ's and pred's; else none."""
    if task.transformation in FAMILY_OF:
        return {rule: answer for rule, answer in family_answers(task).items() if rule != task.transformation}
    if task.query in task.alphabet:
        return family_answers(Task(task.alphabet, (), task.query, None, WINDOW_RULE))
    return {}


def _outcome(task: Task, prediction: str, trained: Mapping[str, str]) -> str:
    if prediction == task.answer:
        return "correct"
    if prediction in trained:
        return "recalled"
    if prediction in seen_rule_answers(task).values():
        return "seen_rule"
    return "other"


def training_recall(
    tasks: Sequence[Task], predictions: Sequence[str], trained: TrainedAnswers
) -> dict[str, RecallCounts]:
    """Per rule (paper order), how its non-copy ``tasks`` were answered by ``predictions``, split into rows whose
    alphabet and query ``trained`` holds with another answer and the rest. Copy rows are skipped. Raises
    ValueError when ``tasks`` and ``predictions`` differ in length or a task lacks its answer or rule."""
    if len(tasks) != len(predictions):
        raise ValueError(f"{len(tasks)} tasks but {len(predictions)} predictions")
    result: dict[str, RecallCounts] = {}
    for task, prediction in zip(tasks, predictions):
        if task.answer is None or task.transformation is None:
            raise ValueError(f"task {task} needs its answer and rule")
        if task.is_copy:
            continue
        answers = trained.get((task.alphabet, task.query), {})
        counts = result.setdefault(task.transformation, RecallCounts(task.transformation))
        if task.answer in answers:
            counts.leaked += 1
        others = {rule for answer, rule in answers.items() if answer != task.answer}
        kind = "trained" if others else "untrained"
        for rule in others:
            counts.trained_by[rule] = counts.trained_by.get(rule, 0) + 1
        outcome = _outcome(task, prediction, answers)
        counts.counts[kind][outcome] += 1
        if outcome == "recalled":
            counts.recalled_from[answers[prediction]] = counts.recalled_from.get(answers[prediction], 0) + 1
    return {rule: result[rule] for rule in in_paper_order(result)}


def recall_totals(per_rule: Mapping[str, RecallCounts]) -> dict[str, RecallCounts]:
    """``per_rule`` summed over the seen rules and over the new ones: ``{"seen": ..., "new": ...}``."""
    totals = {"seen": RecallCounts("seen"), "new": RecallCounts("new")}
    for rule, counts in per_rule.items():
        totals["seen" if rule in SEEN else "new"].add(counts)
    return totals


OUTCOME_COLOURS = {"correct": "#2a9d8f", "recalled": "#e76f51", "seen_rule": "#f4a261", "other": "#adb5bd"}


def recall_figure(
    models: Mapping[str, Mapping[str, RecallCounts]], title: str, kinds: Sequence[str] = ROW_KINDS
) -> go.Figure:
    """Stacked bars of the outcomes' shares, one panel per group (``{model: {group: RecallCounts}}``, groups such
    as single rules or `recall_totals`', in order of first appearance) with a bar per model and row kind of
    ``kinds`` (the panels share the x axis); hover shows the counts. Raises ValueError for an unknown kind or no
    groups."""
    unknown = set(kinds) - set(ROW_KINDS)
    if unknown:
        raise ValueError(f"unknown row kind(s) {sorted(unknown)}; allowed: {list(ROW_KINDS)}")
    groups = list(dict.fromkeys(group for per_group in models.values() for group in per_group))
    if not groups:
        raise ValueError("no groups to draw")
    return _panels(models, groups, title, kinds)


def _panels(
    models: Mapping[str, Mapping[str, RecallCounts]], groups: list[str], title: str, kinds: Sequence[str]
) -> go.Figure:  # pragma: no mutate block
    figure = make_subplots(
        rows=len(groups), cols=1, subplot_titles=groups, shared_xaxes=True, vertical_spacing=0.25 / len(groups)
    )
    for row, group in enumerate(groups, start=1):
        bars = [(model, kind, per[group]) for model, per in models.items() if group in per for kind in kinds]
        for outcome in OUTCOMES:
            figure.add_trace(
                go.Bar(
                    name=outcome,
                    legendgroup=outcome,
                    showlegend=row == 1,
                    x=[[model for model, _, _ in bars], [kind for _, kind, _ in bars]],
                    y=[counts.percent(kind, outcome) for _, kind, counts in bars],
                    customdata=[(counts.counts[kind][outcome], counts.rows(kind)) for _, kind, counts in bars],
                    marker_color=OUTCOME_COLOURS[outcome],
                    hovertemplate=f"{group}, {outcome}: %{{y:.1f}}% (%{{customdata[0]}} of %{{customdata[1]}} rows)"
                    "<extra></extra>",
                ),
                row=row,
                col=1,
            )
        figure.update_yaxes(title_text="% of rows", range=[0, 100], row=row, col=1)
    figure.update_layout(barmode="stack", title=title, legend_title="answer", height=200 + 260 * len(groups))
    return figure
