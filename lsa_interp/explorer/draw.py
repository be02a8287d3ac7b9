"""Tasks drawn from a model's test sets, filtered by transformation, alphabet and the model's outcome.

Outcomes: ``correct`` (the greedy answer is the task's answer), ``wrong`` (anything else) and ``other rule``
(the answer is what the other rule of succ/pred gives: `lsa_interp.evaluation.other_rule_answer`, e.g.
succ applied to a pred task). Copy rows are left out: the example would give the answer away.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from lsa_interp.data.task import STANDARD_ALPHABET, Task
from lsa_interp.evaluation import other_rule_answer, predict
from lsa_interp.model.hooked import HookedEncoderDecoder

TEST_SPLITS: dict[str, str] = {"test": "seen alphabets (test split)", "test_new_alphabets": "new alphabets"}
"""Dataset splits a task may be drawn from, with their labels."""
ALPHABET_KINDS: tuple[str, ...] = ("any", "standard", "permuted")
OUTCOMES: tuple[str, ...] = ("any", "correct", "wrong", "other rule")
_CHUNK = 64


def filter_tasks(tasks: Sequence[Task], transformation: str = "any", alphabet: str = "any") -> list[Task]:
    """The non-copy tasks of ``transformation`` ("any" for all) in the ``alphabet`` kind ("any", "standard"
    or "permuted"). Raises ValueError for an unknown alphabet kind."""
    if alphabet not in ALPHABET_KINDS:
        raise ValueError(f"unknown alphabet kind {alphabet!r}; choose one of {', '.join(ALPHABET_KINDS)}")
    return [
        task
        for task in tasks
        if not task.is_copy
        and transformation in ("any", task.transformation)
        and (alphabet == "any" or (task.alphabet == STANDARD_ALPHABET) == (alphabet == "standard"))
    ]


def outcome_of(task: Task, answer: str) -> str:
    """``"correct"``, ``"other rule"`` or ``"wrong"`` for the model's ``answer`` to ``task``."""
    if answer == task.answer:
        return "correct"
    other = other_rule_answer(task)
    return "other rule" if other is not None and answer == other else "wrong"


def draw_tasks(
    model: HookedEncoderDecoder, tasks: Sequence[Task], outcome: str = "any", n: int = 20, seed: int = 0
) -> list[tuple[Task, str]]:
    """Up to ``n`` of ``tasks`` (shuffled with ``seed``) whose model outcome is ``outcome``, with the model's
    answers. Tasks are decoded a chunk at a time until ``n`` are found. Raises ValueError for an unknown
    outcome."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; choose one of {', '.join(OUTCOMES)}")
    order = list(tasks)
    random.Random(seed).shuffle(order)
    found: list[tuple[Task, str]] = []
    for start in range(0, len(order), _CHUNK):
        chunk = order[start : start + _CHUNK]
        # without their answers, so that decoding is not cut at the chunk's longest answer: the list shows the
        # model's whole answer, the one the explorer shows when the task is opened
        answers = predict(model, [t.with_answer(None) for t in chunk], batch_size=_CHUNK)
        found += [(t, a) for t, a in zip(chunk, answers) if outcome in ("any", outcome_of(t, a))]
        if len(found) >= n:
            break
    return found[:n]
