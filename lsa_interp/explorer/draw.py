"""Tasks drawn from a model's test sets, filtered by transformation, alphabet and the model's outcome.

Outcomes: ``correct`` (the greedy answer is the task's answer), ``wrong`` (anything else) and ``other rule``
(the answer is what the other rule of succ/pred gives: `lsa_interp.evaluation.other_rule_answer`, e.g.
succ applied to a pred task). Copy rows are left out: the example would give the answer away.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from lsa_interp.data.task import STANDARD_ALPHABET, Task
from lsa_interp.evaluation import other_rule_answer, predict
from lsa_interp.model.hooked import HookedEncoderDecoder

TEST_SPLITS: dict[str, str] = {"test": "seen alphabets (test split)", "test_new_alphabets": "new alphabets"}
"""Dataset splits a task may be drawn from, with their labels."""
ALPHABET_KINDS: tuple[str, ...] = ("any", "standard", "permuted")
OUTCOMES: tuple[str, ...] = ("any", "correct", "wrong", "other rule")
SCAN_TASKS = 2048
"""The most tasks one draw decodes: a rare outcome (copy-200's "other rule" on new alphabets) used to scan the whole
split, 10409 tasks in 303 s."""
SCAN_SECONDS = 15.0
"""A draw stops decoding after the chunk that passes this many seconds."""
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


@dataclass(frozen=True)
class Draw:
    """The tasks found (with the model's answers), how many of the ``total`` candidates were decoded to find them,
    and the outcome asked for."""

    found: list[tuple[Task, str]]
    searched: int
    total: int
    outcome: str = "any"

    def message(self) -> str:
        """One line for the page: how many were found in how many searched, or plainly that none was."""
        if not self.total:
            return "there are no such tasks: no non-copy task of this transformation and alphabet in this test set"
        if self.found:
            return f"{len(self.found)} of {self.total} matching tasks drawn (searched {self.searched}); pick one"
        if self.searched < self.total:
            return (
                f"none found: searched {self.searched} of {self.total} matching tasks (a draw searches at most"
                f" {SCAN_TASKS} or {SCAN_SECONDS:g} s), none with outcome {self.outcome!r}; draw again to search others"
            )
        return f"none found: none of the {self.total} matching tasks has outcome {self.outcome!r}"


def draw_tasks(
    model: HookedEncoderDecoder,
    tasks: Sequence[Task],
    outcome: str = "any",
    n: int = 20,
    seed: int = 0,
    lock: AbstractContextManager | None = None,
    max_tasks: int = SCAN_TASKS,
    max_seconds: float = SCAN_SECONDS,
) -> Draw:
    """Up to ``n`` of ``tasks`` (shuffled with ``seed``) whose model outcome is ``outcome``, with the model's
    answers, as a `Draw`. Tasks are decoded a chunk at a time, each under ``lock`` if given (released between
    chunks, so that other views run meanwhile), until ``n`` are found, ``max_tasks`` were decoded or
    ``max_seconds`` have passed (checked after each chunk). Raises ValueError for an unknown outcome."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; choose one of {', '.join(OUTCOMES)}")
    order = list(tasks)
    random.Random(seed).shuffle(order)
    found: list[tuple[Task, str]] = []
    searched, deadline = 0, time.monotonic() + max_seconds
    while searched < min(len(order), max_tasks) and len(found) < n:
        chunk = order[searched : min(searched + _CHUNK, max_tasks)]
        # without their answers, so that decoding is not cut at the chunk's longest answer: the list shows the
        # model's whole answer, the one the explorer shows when the task is opened
        with lock or nullcontext():
            answers = predict(model, [t.with_answer(None) for t in chunk], batch_size=_CHUNK)
        found += [(t, a) for t, a in zip(chunk, answers) if outcome in ("any", outcome_of(t, a))]
        searched += len(chunk)
        if time.monotonic() >= deadline:
            break
    return Draw(found[:n], searched, len(order), outcome)
