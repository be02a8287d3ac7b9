"""Exact-match metrics on given predictions: Table 1 cells, accuracy by transformation, copy split, and
the paper's alternate-rule error analysis of predecessor/successor tasks (with one more outcome: the rule
applied in the standard alphabet instead of the task's). Pure Python, no model needed.

Every function takes ``tasks`` (with answers) and ``predictions`` (one string per task, same order) and
raises ValueError when their lengths differ or a task has no answer.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from lsa_interp.data.task import STANDARD_ALPHABET, Task
from lsa_interp.data.transformations import SEEN, TRANSFORMATIONS
from lsa_interp.evaluation.rule_families import family_answers

ALTERNATE_RULES: dict[str, str] = {"pred": "succ", "succ": "pred"}
"""For each rule of the alternate-rule analysis, the rule a model that ignores the example may apply instead."""


@dataclass(frozen=True)
class Accuracy:
    """``correct`` of ``total`` exact matches; ``percent`` is None when ``total`` is 0."""

    correct: int
    total: int

    @property
    def percent(self) -> float | None:
        """Accuracy in percent, or None for an empty set."""
        return 100.0 * self.correct / self.total if self.total else None

    def to_dict(self) -> dict:
        """``{"correct", "total", "percent"}``."""
        return {"correct": self.correct, "total": self.total, "percent": self.percent}


OUTCOMES = ("correct", "applied_other_rule", "standard_alphabet", "other")
"""Outcomes of the alternate-rule analysis, in the order they are tested (the first that applies counts)."""


@dataclass(frozen=True)
class AlternateRuleCounts:
    """Outcomes on one rule's tasks: correct, the other rule's answer (`ALTERNATE_RULES`), the rule's answer
    in the standard alphabet instead of the task's (`standard_alphabet_answer`), anything else."""

    rule: str
    correct: int
    applied_other_rule: int
    standard_alphabet: int
    other: int

    @property
    def total(self) -> int:
        """Number of tasks counted."""
        return sum(getattr(self, outcome) for outcome in OUTCOMES)

    @property
    def other_rule(self) -> str:
        """The name of the rule counted as ``applied_other_rule``."""
        return ALTERNATE_RULES[self.rule]

    def percents(self) -> dict[str, float | None]:
        """Each outcome in percent of ``total`` (None for an empty set)."""
        return {key: (100.0 * getattr(self, key) / self.total if self.total else None) for key in OUTCOMES}

    def to_dict(self) -> dict:
        """Counts, total, the other rule's name and the percentages."""
        counts = {outcome: getattr(self, outcome) for outcome in OUTCOMES}
        return {
            "rule": self.rule,
            "other_rule": self.other_rule,
            "total": self.total,
            **counts,
            "percent": self.percents(),
        }


@dataclass(frozen=True)
class Table1:
    """The paper's Table 1 on non-copy rows: (seen / new transformations) x (seen / new alphabets).

    ``*_new_alphabets_with_standard`` adds the seen-alphabet set's standard-alphabet rows to the new-alphabet
    rows (the paper's new-alphabet numbers included the standard alphabet, with more weight:
    `lsa_interp.data.paper_protocol`).
    """

    seen_transformations_seen_alphabets: Accuracy
    seen_transformations_new_alphabets: Accuracy
    new_transformations_seen_alphabets: Accuracy
    new_transformations_new_alphabets: Accuracy
    seen_transformations_new_alphabets_with_standard: Accuracy
    new_transformations_new_alphabets_with_standard: Accuracy

    def paper_order(self) -> tuple[Accuracy, Accuracy, Accuracy, Accuracy]:
        """The four cells in the paper's column order: seenT/seenA, seenT/newA, newT/seenA, newT/newA."""
        return (
            self.seen_transformations_seen_alphabets,
            self.seen_transformations_new_alphabets,
            self.new_transformations_seen_alphabets,
            self.new_transformations_new_alphabets,
        )

    def to_dict(self) -> dict:
        """Every cell by field name, as `Accuracy.to_dict`."""
        return {name: getattr(self, name).to_dict() for name in self.__dataclass_fields__}


def _check(tasks: Sequence[Task], predictions: Sequence[str]) -> None:
    if len(tasks) != len(predictions):
        raise ValueError(f"got {len(predictions)} predictions for {len(tasks)} tasks")
    missing = next((t for t in tasks if t.answer is None), None)
    if missing is not None:
        raise ValueError(f"task {missing} has no answer to score against")


def exact_match(tasks: Sequence[Task], predictions: Sequence[str]) -> list[bool]:
    """Return, per task, whether the prediction equals the answer exactly."""
    _check(tasks, predictions)
    return [p == t.answer for t, p in zip(tasks, predictions)]


def accuracy(tasks: Sequence[Task], predictions: Sequence[str]) -> Accuracy:
    """Return the exact-match `Accuracy` of ``predictions``."""
    hits = exact_match(tasks, predictions)
    return Accuracy(sum(hits), len(hits))


def _where(tasks: Sequence[Task], predictions: Sequence[str], keep) -> tuple[list[Task], list[str]]:
    _check(tasks, predictions)
    pairs = [(t, p) for t, p in zip(tasks, predictions) if keep(t)]
    return [t for t, _ in pairs], [p for _, p in pairs]


def copy_split(tasks: Sequence[Task], predictions: Sequence[str]) -> dict[str, Accuracy]:
    """Return ``{"copy": ..., "non_copy": ...}`` accuracies (`Task.is_copy`)."""
    return {
        name: accuracy(*_where(tasks, predictions, lambda t, c=is_copy: t.is_copy == c))
        for name, is_copy in (("copy", True), ("non_copy", False))
    }


def by_transformation(tasks: Sequence[Task], predictions: Sequence[str]) -> dict[str, Accuracy]:
    """Return the accuracy per transformation on non-copy rows, in the paper's order (unknown names last).

    Raises ValueError when a task has no transformation label.
    """
    rows, preds = _where(tasks, predictions, lambda t: not t.is_copy)
    _require_labels(rows)
    names = in_paper_order(t.transformation for t in rows)
    return {name: accuracy(*_where(rows, preds, lambda t, n=name: t.transformation == n)) for name in names}


def in_paper_order(names: Iterable[str]) -> list[str]:
    """Return the distinct transformation names in the paper's order (unknown names last, alphabetically)."""
    rank = {name: i for i, name in enumerate(TRANSFORMATIONS)}
    return sorted(set(names), key=lambda n: (rank.get(n, len(rank)), n))


def _require_labels(tasks: Sequence[Task]) -> None:
    unlabelled = next((t for t in tasks if t.transformation is None), None)
    if unlabelled is not None:
        raise ValueError(f"task {unlabelled} has no transformation label")


def table1(
    seen_tasks: Sequence[Task],
    seen_predictions: Sequence[str],
    new_tasks: Sequence[Task],
    new_predictions: Sequence[str],
    seen_transformations: Collection[str] = SEEN,
) -> Table1:
    """Return the paper's Table 1 cells on non-copy rows.

    ``seen_*``: tasks in training alphabets (the val split); ``new_*``: tasks in new alphabets. A
    transformation is "seen" when it is in ``seen_transformations`` (the training transformations), "new"
    otherwise. The ``*_with_standard`` cells add ``seen_tasks``' standard-alphabet rows to the new-alphabet
    rows. Raises ValueError when a task has no transformation label.
    """
    seen_rows = _where(seen_tasks, seen_predictions, lambda t: not t.is_copy)
    new_rows = _where(new_tasks, new_predictions, lambda t: not t.is_copy)
    standard = _where(*seen_rows, lambda t: t.alphabet == STANDARD_ALPHABET)
    with_standard = (new_rows[0] + standard[0], new_rows[1] + standard[1])
    _require_labels(seen_rows[0] + new_rows[0])
    trained = set(seen_transformations)

    def cell(rows: tuple[list[Task], list[str]], seen: bool) -> Accuracy:
        return accuracy(*_where(*rows, lambda t: (t.transformation in trained) == seen))

    return Table1(
        seen_transformations_seen_alphabets=cell(seen_rows, True),
        seen_transformations_new_alphabets=cell(new_rows, True),
        new_transformations_seen_alphabets=cell(seen_rows, False),
        new_transformations_new_alphabets=cell(new_rows, False),
        seen_transformations_new_alphabets_with_standard=cell(with_standard, True),
        new_transformations_new_alphabets_with_standard=cell(with_standard, False),
    )


def other_rule_answer(task: Task) -> str | None:
    """Return what the other rule of `ALTERNATE_RULES` gives on ``task``'s query, in ``task``'s alphabet.

    On a ``pred`` task: the query with its last letter replaced by the next letter (succ); on a ``succ``
    task: the first letter replaced by the previous one (pred). None when the letter does not exist (end of
    the alphabet) or the task is neither pred nor succ.
    """
    other = ALTERNATE_RULES.get(task.transformation)
    return None if other is None else family_answers(task).get(other)


def standard_alphabet_answer(task: Task) -> str | None:
    """Return ``task``'s own rule applied to its query in the standard alphabet ``a..z`` instead of ``task``'s.

    On a ``pred`` task: the first letter replaced by the letter before it in ``a..z``; on a ``succ`` task: the
    last letter replaced by the letter after it. This is the answer of a model that reads the rule from the
    example but not the order from the task's (permuted) alphabet. None when that letter does not exist, when
    it is the task's answer anyway (the changed letter's neighbour is the same in both alphabets), or when the
    task is neither pred nor succ.
    """
    if task.transformation == "pred" and task.query[0] != STANDARD_ALPHABET[0]:
        answer = chr(ord(task.query[0]) - 1) + task.query[1:]
    elif task.transformation == "succ" and task.query[-1] != STANDARD_ALPHABET[-1]:
        answer = task.query[:-1] + chr(ord(task.query[-1]) + 1)
    else:
        return None
    return None if answer == task.answer else answer


def alternate_rule_errors(tasks: Sequence[Task], predictions: Sequence[str]) -> dict[str, AlternateRuleCounts]:
    """Classify predictions on non-copy ``pred`` and ``succ`` rows (the paper's appendix table).

    Returns ``{"pred": ..., "succ": ...}``: correct, applied the other rule (the prediction equals
    `other_rule_answer`), the rule in the standard alphabet (`standard_alphabet_answer`), or other. Rows of
    other transformations are ignored.
    """
    _check(tasks, predictions)
    outcomes = {rule: dict.fromkeys(OUTCOMES, 0) for rule in ALTERNATE_RULES}
    for task, prediction in zip(tasks, predictions):
        if task.transformation not in ALTERNATE_RULES or task.is_copy:
            continue
        if prediction == task.answer:
            outcome = "correct"
        elif prediction == other_rule_answer(task):
            outcome = "applied_other_rule"
        elif prediction == standard_alphabet_answer(task):
            outcome = "standard_alphabet"
        else:
            outcome = "other"
        outcomes[task.transformation][outcome] += 1
    return {rule: AlternateRuleCounts(rule, **counts) for rule, counts in outcomes.items()}
