"""`EvaluationResult` and `score_predictions`: every evaluation number from given predictions."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from lsa_interp.data.task import Task
from lsa_interp.data.transformations import SEEN
from lsa_interp.evaluation.metrics import (
    Accuracy,
    AlternateRuleCounts,
    Table1,
    accuracy,
    alternate_rule_errors,
    by_transformation,
    copy_split,
    table1,
)
from lsa_interp.evaluation.rule_families import FamilyCounts, family_confusion

SEEN_ALPHABETS = "seen_alphabets"
NEW_ALPHABETS = "new_alphabets"
SPLIT_OF = {SEEN_ALPHABETS: "val", NEW_ALPHABETS: "test_new_alphabets"}
"""The dataset split each alphabet set is read from."""

NOTES = (
    "Exact match of the greedy answer (decoded from '>' until EOS or past the longest target of the batch).",
    "Seen-alphabet numbers: the val split of the training dataset; Table 1 and per-transformation numbers use "
    "its non-copy rows only.",
    "New-alphabet numbers: the test_new_alphabets split (fresh alphabets disjoint from the training ones; it "
    "has no standard-alphabet rows and no copy rows).",
    "'new alphabets + standard': our new-alphabet rows plus the val split's non-copy rows in the standard "
    "alphabet (one alphabet of the val split's 21 or 201: at most about 1% of the rows). The paper's set counted "
    "the standard alphabet as one of 21 (about 5% of its rows) and the paper scored one test split of that set; "
    "analyses/new_alphabet_protocol.py scores a model that way.",
    "Alternate-rule analysis (paper appendix): on non-copy pred/succ rows, 'applied other rule' means the answer "
    "equals what succ gives on a pred task (last letter -> next letter of the task's alphabet), or pred on a "
    "succ task (first letter -> previous letter). 'Rule in standard alphabet' means the answer is the task's own "
    "rule applied with the neighbours of a..z instead of the task's permuted alphabet (the example was read, "
    "the alphabet was not); rows where both alphabets give the same answer count as correct or other.",
    "Rule families: seen rules whose queries look alike (window: extend_sequence, succ, pred; doubled: "
    "remove_redundant, rr_succ; intruder: fix_alphabetic_seq, fix_extend), so that only the example names the "
    "rule. 'as_rule' counts non-copy tasks answered with a sibling rule's answer on the same query, in the "
    "task's alphabet: the example was not read (lsa_interp.evaluation.rule_families).",
)


@dataclass(frozen=True)
class EvaluationResult:
    """All evaluation numbers of one model on one dataset (see `NOTES`).

    ``by_transformation``, ``copy_vs_non_copy``, ``alternate_rule`` and ``rule_families`` are keyed by alphabet set
    (`SEEN_ALPHABETS`, `NEW_ALPHABETS`); ``n_tasks`` counts the rows evaluated per alphabet set.
    """

    table1: Table1
    by_transformation: dict[str, dict[str, Accuracy]]
    copy_vs_non_copy: dict[str, dict[str, Accuracy]]
    alternate_rule: dict[str, dict[str, AlternateRuleCounts]]
    rule_families: dict[str, dict[str, FamilyCounts]]
    n_tasks: dict[str, int]
    seen_transformations: tuple[str, ...]
    model: str = ""
    preset: str | None = None
    training_preset: str | None = None
    seed: int | None = None
    limit: int | None = None
    seconds: float | None = None
    notes: tuple[str, ...] = field(default=NOTES)

    @property
    def overall(self) -> dict[str, Accuracy]:
        """Accuracy over every evaluated row (copy and non-copy) per alphabet set."""
        return {
            key: Accuracy(sum(a.correct for a in split.values()), sum(a.total for a in split.values()))
            for key, split in self.copy_vs_non_copy.items()
        }

    def to_dict(self) -> dict:
        """A JSON-ready dict of everything (accuracies as ``{"correct", "total", "percent"}``)."""
        return {
            "model": self.model,
            "preset": self.preset,
            "training_preset": self.training_preset,
            "seed": self.seed,
            "limit": self.limit,
            "seconds": self.seconds,
            "n_tasks": self.n_tasks,
            "splits": SPLIT_OF,
            "seen_transformations": list(self.seen_transformations),
            "table1": self.table1.to_dict(),
            "overall": {key: acc.to_dict() for key, acc in self.overall.items()},
            "copy_vs_non_copy": _nested(self.copy_vs_non_copy),
            "by_transformation": _nested(self.by_transformation),
            "alternate_rule": _nested(self.alternate_rule),
            "rule_families": _nested(self.rule_families),
            "notes": list(self.notes),
        }


def _nested(table: dict[str, dict]) -> dict[str, dict]:
    return {outer: {inner: value.to_dict() for inner, value in row.items()} for outer, row in table.items()}


def score_predictions(
    seen_tasks: Sequence[Task],
    seen_predictions: Sequence[str],
    new_tasks: Sequence[Task],
    new_predictions: Sequence[str],
    seen_transformations: Collection[str] = SEEN,
) -> EvaluationResult:
    """Score predictions on the seen-alphabet (val) and new-alphabet tasks; return an `EvaluationResult`.

    Metadata fields (model, preset, ...) are left empty: set them with ``dataclasses.replace``. Raises
    ValueError when tasks and predictions differ in length or a task lacks an answer or a transformation.
    """
    sets = {SEEN_ALPHABETS: (seen_tasks, seen_predictions), NEW_ALPHABETS: (new_tasks, new_predictions)}
    return EvaluationResult(
        table1=table1(seen_tasks, seen_predictions, new_tasks, new_predictions, seen_transformations),
        by_transformation={key: by_transformation(*pair) for key, pair in sets.items()},
        copy_vs_non_copy={key: copy_split(*pair) for key, pair in sets.items()},
        alternate_rule={key: alternate_rule_errors(*pair) for key, pair in sets.items()},
        rule_families={key: family_confusion(*pair) for key, pair in sets.items()},
        n_tasks={key: accuracy(*pair).total for key, pair in sets.items()},
        seen_transformations=tuple(seen_transformations),
    )
