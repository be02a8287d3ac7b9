"""Evaluations and training fits read back from the JSON they were written as (`EvaluationResult.to_dict`,
`FitResult.to_dict`): what `lsa-interp ship` reuses where a sweep evaluated the model at the end of training, and
the full-split evaluation on a shipped checkpoint's card (`shipped_evaluation`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lsa_interp.evaluation.fit import FitResult
from lsa_interp.evaluation.metrics import OUTCOMES, Accuracy, AlternateRuleCounts, Table1
from lsa_interp.evaluation.result import NOTES, EvaluationResult
from lsa_interp.evaluation.rule_families import FamilyCounts
from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, available_models


def _accuracy(data: dict[str, Any]) -> Accuracy:
    return Accuracy(int(data["correct"]), int(data["total"]))


def _accuracies(table: dict[str, dict[str, Any]]) -> dict[str, dict[str, Accuracy]]:
    return {outer: {inner: _accuracy(cell) for inner, cell in row.items()} for outer, row in table.items()}


def _alternate(data: dict[str, Any]) -> AlternateRuleCounts:
    return AlternateRuleCounts(data["rule"], *(int(data[outcome]) for outcome in OUTCOMES))


def _family(rule: str, data: dict[str, Any]) -> FamilyCounts:
    as_rule = {sibling: int(count) for sibling, count in data["as_rule"].items()}
    return FamilyCounts(rule, int(data["correct"]), as_rule, int(data["other"]))


def evaluation_from_dict(data: dict[str, Any]) -> EvaluationResult:
    """The `EvaluationResult` whose ``to_dict()`` is ``data``. Raises ValueError naming the first missing field
    (evaluations written before a field existed lack it: evaluate again)."""
    try:
        return EvaluationResult(
            table1=Table1(**{name: _accuracy(cell) for name, cell in data["table1"].items()}),
            by_transformation=_accuracies(data["by_transformation"]),
            copy_vs_non_copy=_accuracies(data["copy_vs_non_copy"]),
            alternate_rule={s: {r: _alternate(c) for r, c in row.items()} for s, row in data["alternate_rule"].items()},
            rule_families={s: {r: _family(r, c) for r, c in row.items()} for s, row in data["rule_families"].items()},
            n_tasks={split: int(n) for split, n in data["n_tasks"].items()},
            seen_transformations=tuple(data["seen_transformations"]),
            model=data["model"],
            preset=data["preset"],
            training_preset=data["training_preset"],
            seed=data["seed"],
            limit=data["limit"],
            seconds=data["seconds"],
            notes=tuple(data.get("notes", NOTES)),
        )
    except KeyError as missing:
        raise ValueError(f"the evaluation lacks {missing}; evaluate the model again (lsa-interp evaluate)") from None


def fit_from_dict(data: dict[str, Any]) -> FitResult:
    """The `FitResult` whose ``to_dict()`` is ``data``. Raises ValueError naming the first missing field."""
    try:
        return FitResult(
            model=data["model"],
            preset=data["preset"],
            seed=data["seed"],
            rows=int(data["rows"]),
            overall={split: _accuracy(cell) for split, cell in data["overall"].items()},
            by_transformation=_accuracies(data["by_transformation"]),
            by_level={
                split: {int(level): _accuracy(cell) for level, cell in row.items()}
                for split, row in data["by_permutation_level"].items()
            },
        )
    except KeyError as missing:
        raise ValueError(f"the training fit lacks {missing}; measure it again (lsa-interp fit)") from None


def read_evaluation(path: str | os.PathLike) -> EvaluationResult:
    """`evaluation_from_dict` of the JSON file at ``path``; raises FileNotFoundError, or ValueError."""
    return evaluation_from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def read_fit(path: str | os.PathLike) -> FitResult:
    """`fit_from_dict` of the JSON file at ``path``; raises FileNotFoundError, or ValueError."""
    return fit_from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def shipped_evaluation(name_or_path: str | os.PathLike) -> EvaluationResult:
    """The full-split evaluation on a shipped checkpoint's card, by name (``copy-200``,
    ``replicates/copy-20-s1-bf16``) or checkpoint directory: its ``evaluation.json``. Raises FileNotFoundError
    (listing the shipped names) when there is none, ValueError when it lacks a field."""
    directory = Path(name_or_path)
    if not directory.is_dir():
        directory = CHECKPOINTS_DIR / directory
    path = directory / "evaluation.json"
    if not path.is_file():
        shipped = ", ".join(available_models()) or f"none in {CHECKPOINTS_DIR}"
        raise FileNotFoundError(f"no evaluation at {path}; shipped checkpoints: {shipped}")
    return read_evaluation(path)
