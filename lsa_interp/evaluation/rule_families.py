"""Which rule did a model apply? The seen rules whose queries look alike, and a model's confusions between them.

Three families of seen rules pose queries of one form, so only the example says which rule a task asks for:

- ``window`` (a run of the alphabet, ``bcde``): extend_sequence (``bcdef``), succ (``bcdf``), pred (``acde``);
- ``doubled`` (a run with one letter doubled, ``bccde``): remove_redundant (``bcde``), rr_succ (``bcdf``);
- ``intruder`` (a run with one letter replaced, ``bcxe``): fix_alphabetic_seq (``bcde``), fix_extend (``bcdef``).

A model that reads the rule from the example answers with its task's rule; one that does not gives a sibling's
answer. extend_sequence and fix_extend examples are one letter longer than their siblings', so the length of
the example's output tells them apart; succ, pred, remove_redundant and rr_succ differ only in which letters
change from the example's input to its output, which takes the letter-by-letter comparison that the paper's
matching head makes. `family_confusion` counts, per rule, the answers that are correct, a sibling's, or other;
the paper's pred/succ analysis (`lsa_interp.evaluation.metrics.alternate_rule_errors`) is its ``window`` part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lsa_interp.data.task import Task

RULE_FAMILIES: dict[str, tuple[str, ...]] = {
    "window": ("extend_sequence", "succ", "pred"),
    "doubled": ("remove_redundant", "rr_succ"),
    "intruder": ("fix_alphabetic_seq", "fix_extend"),
}
"""Seen rules whose queries have the same form, by family."""
FAMILY_OF: dict[str, str] = {rule: family for family, rules in RULE_FAMILIES.items() for rule in rules}
"""The family of each rule that has one."""


def _next(alphabet: str, letter: str) -> str | None:
    index = alphabet.index(letter) + 1
    return alphabet[index] if index < len(alphabet) else None


def _previous(alphabet: str, letter: str) -> str | None:
    index = alphabet.index(letter) - 1
    return alphabet[index] if index >= 0 else None


def _undoubled(query: str) -> str | None:
    for i in range(len(query) - 1):
        if query[i] == query[i + 1]:
            return query[:i] + query[i + 1 :]
    return None


def family_answers(task: Task) -> dict[str, str]:
    """Every rule of ``task``'s family applied to its query, in its alphabet: ``{rule: answer}``.

    A rule whose answer needs a letter past an end of the alphabet is left out, as is every rule for a task whose
    rule has no family. The ``intruder`` rules fix the query as ``task.answer`` shows (the replaced letter is
    ambiguous at a window's ends otherwise), so an ``intruder`` task whose answer cannot be its rule's (not the
    query's length, plus one for fix_extend) gets none. Raises ValueError for an ``intruder`` task without an answer.
    """
    alphabet, query = task.alphabet, task.query
    family = FAMILY_OF.get(task.transformation)
    if family == "window":
        base, first, last = query, _previous(alphabet, query[0]), _next(alphabet, query[-1])
        answers = {
            "extend_sequence": last and base + last,
            "succ": last and base[:-1] + last,
            "pred": first and first + base[1:],
        }
    elif family == "doubled":
        base = _undoubled(query)
        last = base and _next(alphabet, base[-1])
        answers = {"remove_redundant": base, "rr_succ": last and base[:-1] + last}
    elif family == "intruder":
        if task.answer is None:
            raise ValueError(f"task {task.query!r} has no answer: the intruder rules need it")
        extended = task.transformation == "fix_extend"
        if len(task.answer) != len(query) + extended:
            return {}
        base = task.answer[:-1] if extended else task.answer
        last = _next(alphabet, base[-1])
        answers = {"fix_alphabetic_seq": base, "fix_extend": last and base + last}
    else:
        return {}
    return {rule: answer for rule, answer in answers.items() if answer}


@dataclass(frozen=True)
class FamilyCounts:
    """Answers to one rule's tasks: ``correct``, a sibling rule's answer (``as_rule``: sibling -> count), or
    ``other``."""

    rule: str
    correct: int
    as_rule: dict[str, int]
    other: int

    @property
    def total(self) -> int:
        """Tasks counted."""
        return self.correct + self.sibling + self.other

    @property
    def sibling(self) -> int:
        """Tasks answered with any sibling's answer."""
        return sum(self.as_rule.values())

    def to_dict(self) -> dict:
        """Counts and percentages of ``total`` (None when there are no tasks)."""
        total = self.total
        return {
            "correct": self.correct,
            "as_rule": dict(self.as_rule),
            "other": self.other,
            "total": total,
            "percent_correct": 100.0 * self.correct / total if total else None,
            "percent_sibling": 100.0 * self.sibling / total if total else None,
        }


def family_confusion(tasks: Sequence[Task], predictions: Sequence[str]) -> dict[str, FamilyCounts]:
    """Per rule of `RULE_FAMILIES` (in that order), how its non-copy tasks were answered: correct, with a
    sibling's answer (`family_answers`), or otherwise. Other rows are ignored. Raises ValueError when ``tasks`` and
    ``predictions`` differ in length or a task lacks its answer."""
    if len(tasks) != len(predictions):
        raise ValueError(f"{len(tasks)} tasks but {len(predictions)} predictions")
    counts = {rule: {"correct": 0, "other": 0} for rule in FAMILY_OF}
    siblings = {rule: dict.fromkeys((r for r in RULE_FAMILIES[FAMILY_OF[rule]] if r != rule), 0) for rule in FAMILY_OF}
    for task, prediction in zip(tasks, predictions, strict=True):
        if task.transformation not in FAMILY_OF or task.is_copy:
            continue
        if task.answer is None:
            raise ValueError(f"task {task.query!r} has no answer")
        if prediction == task.answer:
            counts[task.transformation]["correct"] += 1
            continue
        own = task.transformation
        matched = [rule for rule, answer in family_answers(task).items() if answer == prediction and rule != own]
        if matched:
            siblings[task.transformation][matched[0]] += 1
        else:
            counts[task.transformation]["other"] += 1
    return {
        rule: FamilyCounts(rule, counts[rule]["correct"], siblings[rule], counts[rule]["other"]) for rule in FAMILY_OF
    }
