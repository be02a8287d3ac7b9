"""The units of a sweep that failed: each recorded with its traceback, so that the other units go on.

A sweep of a hundred runs should not stop at the first analysis that raises: the runners catch a unit's
exception, write its traceback to ``DIR/failures/{kind}-{name}.txt`` and carry on with every unit that does
not need it (a stack that fails leaves its runs unevaluated; an evaluation that fails does not stop the run's
analyses). The folder holds the failures of the last invocation only: it is emptied when a sweep starts, and
running the same command again retries every failed unit, since none of them wrote its output.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from lsa_interp.utils import atomic_write

FAILURES_DIR = "failures"


@dataclass(frozen=True)
class Failure:
    """One unit that raised: ``kind`` (train, evaluate, analyse NAME), the stack or run ``name``, the error's
    first line and the file holding its traceback."""

    kind: str
    name: str
    message: str
    log: Path

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.message} (traceback: {self.log})"


def first_line(error: BaseException) -> str:
    """``error``'s message as one line: its own first line for the one-line errors (ValueError, OSError), else
    led by its type."""
    text = next(iter(str(error).strip().splitlines()), "")
    if isinstance(error, ValueError | OSError) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class FailureLog:
    """The failures of one invocation in the sweep directory ``out``; creating it empties ``out/failures``."""

    def __init__(self, out: Path) -> None:
        self.directory = out / FAILURES_DIR
        shutil.rmtree(self.directory, ignore_errors=True)
        self.failures: list[Failure] = []

    def record(self, kind: str, name: str, error: BaseException, traceback_text: str) -> Failure:
        """Write ``traceback_text`` to the unit's file and keep the failure; returns it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{kind.replace(' ', '-')}-{name}.txt"
        atomic_write(path, lambda tmp: tmp.write_text(traceback_text, encoding="utf-8"))
        failure = Failure(kind, name, first_line(error), path)
        self.failures.append(failure)
        return failure
