"""Evaluations and training fits read back from the JSON they were written as (`EvaluationResult.to_dict`,
`FitResult.to_dict`): what `lsa-interp ship` reuses where a sweep evaluated the model at the end of training, and
the full-split evaluation on a shipped checkpoint's card (`shipped_evaluation`).

Every field is checked on reading: one missing or of the wrong type (a count that is not a whole number >= 0, more
right answers than rows) raises a one-line ValueError naming it, and the file where one was read."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from lsa_interp.evaluation.fit import FIT_SPLITS, FitResult
from lsa_interp.evaluation.metrics import ALTERNATE_RULES, OUTCOMES, Accuracy, AlternateRuleCounts, Table1
from lsa_interp.evaluation.result import NOTES, EvaluationResult
from lsa_interp.evaluation.rule_families import FamilyCounts
from lsa_interp.evaluation.runs_table import EVALUATION_FILE, EXPECTED, FIT_FILE
from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, available_models
from lsa_interp.utils import NUMBER, JsonObject, read_json_object

T = TypeVar("T")
NULL = type(None)


def _count(doc: JsonObject, keys: str) -> int:
    count = doc.get(keys, int)
    if count < 0:
        raise doc.error(f"'{keys}' is {count}, not a count >= 0")
    return count


def _accuracy(doc: JsonObject, keys: str) -> Accuracy:
    doc.get(keys, dict)  # names a cell that is missing, not its first count
    correct, total = _count(doc, f"{keys}.correct"), _count(doc, f"{keys}.total")
    if correct > total:
        raise doc.error(f"'{keys}' counts {correct} right answers of {total}")
    return Accuracy(correct, total)


def _table(doc: JsonObject, keys: str, read: Callable[[JsonObject, str], T]) -> dict[str, T]:
    """``read`` of each entry of the object at ``keys``, by its name."""
    return {name: read(doc, f"{keys}.{name}") for name in doc.get(keys, dict)}


def _tables(doc: JsonObject, keys: str, read: Callable[[JsonObject, str], T]) -> dict[str, dict[str, T]]:
    """`_table` of each entry of the object at ``keys``: a table by alphabet set or split."""
    return _table(doc, keys, lambda doc, row: _table(doc, row, read))


def _strings(doc: JsonObject, keys: str) -> tuple[str, ...]:
    return tuple(doc.get(f"{keys}.{index}", str) for index in range(len(doc.get(keys, list))))


def _alternate(doc: JsonObject, keys: str) -> AlternateRuleCounts:
    rule = doc.get(f"{keys}.rule", str)
    if rule not in ALTERNATE_RULES:
        raise doc.error(f"'{keys}.rule' is {rule!r}, not one of {', '.join(ALTERNATE_RULES)}")
    return AlternateRuleCounts(rule, *(_count(doc, f"{keys}.{outcome}") for outcome in OUTCOMES))


def _family(doc: JsonObject, keys: str) -> FamilyCounts:
    rule = keys.rsplit(".", 1)[1]  # the entry's name
    correct, other = _count(doc, f"{keys}.correct"), _count(doc, f"{keys}.other")
    return FamilyCounts(rule, correct, _table(doc, f"{keys}.as_rule", _count), other)


def _level(doc: JsonObject, keys: str) -> int:
    level = keys.rsplit(".", 1)[1]
    if not level.isdecimal():
        raise doc.error(f"'{keys}' is not a permutation level (a whole number >= 0)")
    return int(level)


def _table1(doc: JsonObject) -> Table1:
    doc.get("table1", dict)  # names a table that is missing, not its first cell
    return Table1(**{cell.name: _accuracy(doc, f"table1.{cell.name}") for cell in fields(Table1)})


def _evaluation(doc: JsonObject) -> EvaluationResult:
    return EvaluationResult(
        table1=_table1(doc),
        by_transformation=_tables(doc, "by_transformation", _accuracy),
        copy_vs_non_copy=_tables(doc, "copy_vs_non_copy", _accuracy),
        alternate_rule=_tables(doc, "alternate_rule", _alternate),
        rule_families=_tables(doc, "rule_families", _family),
        n_tasks=_table(doc, "n_tasks", _count),
        seen_transformations=_strings(doc, "seen_transformations"),
        model=doc.get("model", str),
        preset=doc.get("preset", (str, NULL)),
        training_preset=doc.get("training_preset", (str, NULL)),
        seed=doc.get("seed", (int, NULL)),
        limit=doc.get("limit", (int, NULL)),
        seconds=doc.get("seconds", (*NUMBER, NULL)),
        notes=_strings(doc, "notes") if "notes" in doc.data else NOTES,
    )


def _fit(doc: JsonObject) -> FitResult:
    rows = doc.get("rows", int)
    if rows < 1:
        raise doc.error(f"'rows' is {rows}, not a positive count")
    overall = _table(doc, "overall", _accuracy)
    for split in FIT_SPLITS:
        if not _accuracy(doc, f"overall.{split}").total:
            raise doc.error(f"'overall.{split}' counts no rows (a fit decodes rows of {' and '.join(FIT_SPLITS)})")
    return FitResult(
        model=doc.get("model", str),
        preset=doc.get("preset", str),
        seed=doc.get("seed", int),
        rows=rows,
        overall=overall,
        by_transformation=_tables(doc, "by_transformation", _accuracy),
        by_level={
            split: {_level(doc, f"by_permutation_level.{split}.{level}"): acc for level, acc in row.items()}
            for split, row in _tables(doc, "by_permutation_level", _accuracy).items()
        },
    )


def evaluation_from_dict(data: dict[str, Any]) -> EvaluationResult:
    """The `EvaluationResult` whose ``to_dict()`` is ``data``. Raises a one-line ValueError naming the first field
    that is missing (evaluations written before a field existed lack it: evaluate again) or damaged."""
    return _evaluation(JsonObject(data, "the evaluation", EXPECTED[EVALUATION_FILE]))


def fit_from_dict(data: dict[str, Any]) -> FitResult:
    """The `FitResult` whose ``to_dict()`` is ``data``. Raises a one-line ValueError naming the first field that is
    missing or damaged (``overall`` needs a train and a val count of at least one row)."""
    return _fit(JsonObject(data, "the training fit", EXPECTED[FIT_FILE]))


def read_evaluation(path: str | os.PathLike) -> EvaluationResult:
    """`evaluation_from_dict` of the JSON file at ``path``; raises FileNotFoundError, or ValueError naming the file
    (not a JSON object, or a field missing or damaged)."""
    return _evaluation(read_json_object(path, EXPECTED[EVALUATION_FILE]))


def read_fit(path: str | os.PathLike) -> FitResult:
    """`fit_from_dict` of the JSON file at ``path``; raises FileNotFoundError, or ValueError naming the file (not a
    JSON object, or a field missing or damaged)."""
    return _fit(read_json_object(path, EXPECTED[FIT_FILE]))


def shipped_evaluation(name_or_path: str | os.PathLike) -> EvaluationResult:
    """The full-split evaluation on a shipped checkpoint's card, by name (``copy-200``,
    ``replicates/copy-20-s1-bf16``) or checkpoint directory: its ``evaluation.json``. Raises FileNotFoundError
    (listing the shipped names) when there is none, ValueError naming the file and the field when a field is
    missing or damaged."""
    directory = Path(name_or_path)
    if not directory.is_dir():
        directory = CHECKPOINTS_DIR / directory
    path = directory / "evaluation.json"
    if not path.is_file():
        shipped = ", ".join(available_models()) or f"none in {CHECKPOINTS_DIR}"
        raise FileNotFoundError(f"no evaluation at {path}; shipped checkpoints: {shipped}")
    return read_evaluation(path)
