"""A shipped checkpoint's answer check: how many of a fixed sample of val rows it answers right.

`lsa-interp ship` counts it on the stored weights and writes it beside the card (``check.json``); CI counts it
again (tests/test_shipped_checkpoints.py). Two comparisons follow:
- the recount against the recorded count, within `ANSWER_TOLERANCE` answers: exact enough to catch any change
  in the weights, the loader, the decoder or the data that changes a few answers, with room for the last-bit
  rounding of another CPU build of torch;
- the recorded count against the card's full-split accuracy, within `SAMPLING_SDS` standard deviations of a
  sample of that size drawn from that split: a card that belongs to other weights fails it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from lsa_interp.data.task import Task
from lsa_interp.evaluation.metrics import accuracy
from lsa_interp.evaluation.run import predict, subsample
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.utils import atomic_write, read_json_object

CHECK_FILE = "check.json"
CHECK_EXPECTED = "the answer check lsa-interp ship writes (ship it again to count one)"
"""What ``check.json`` should be (ends the errors of a malformed one)."""
CHECK_ROWS = 1000
"""Val rows in the sample (`subsample` with seed `CHECK_SEED`): about 10 s of greedy decoding on one CPU core."""
CHECK_SEED = 0
ANSWER_TOLERANCE = 2
"""Answers of the sample a recount may differ by from the recorded count."""
SAMPLING_SDS = 4.0
"""How far, in standard deviations of the sample's accuracy, the recorded count may sit from the card's."""


@dataclass(frozen=True)
class AnswerCheck:
    """``correct`` of the ``rows`` val rows drawn with ``seed`` from the val split of dataset seed ``data_seed``."""

    split: str
    rows: int
    seed: int
    data_seed: int
    correct: int

    @property
    def percent(self) -> float:
        """The right answers as a percentage of the rows."""
        return 100.0 * self.correct / self.rows


def count_answers(
    model: HookedEncoderDecoder, val: Sequence[Task], data_seed: int, rows: int = CHECK_ROWS, seed: int = CHECK_SEED
) -> AnswerCheck:
    """Greedy-decode the sample of ``val`` (the val split of dataset seed ``data_seed``) and count the right
    answers. Returns the `AnswerCheck`; raises ValueError when ``val`` is empty or ``rows`` is not positive."""
    if not val:
        raise ValueError("the val split has no tasks to sample the answer check from; it needs at least one")
    tasks = subsample(val, rows, seed)
    result = accuracy(tasks, predict(model, tasks))
    return AnswerCheck("val", len(tasks), seed, data_seed, result.correct)


def write_answer_check(check: AnswerCheck, directory: str | Path) -> Path:
    """Write ``check`` to ``directory/check.json`` (atomically); returns the path."""
    path = Path(directory) / CHECK_FILE
    atomic_write(path, lambda p: p.write_text(json.dumps(asdict(check), indent=2) + "\n", encoding="utf-8"))
    return path


def read_answer_check(directory: str | Path) -> AnswerCheck:
    """The check recorded in ``directory``. Raises FileNotFoundError when there is none, a one-line ValueError naming
    the file and the field when it is malformed: a field missing or not of its type (split a string, the others
    whole numbers), no rows, or more right answers than rows or fewer than none."""
    path = Path(directory) / CHECK_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no {CHECK_FILE}; ship it again (lsa-interp ship) to count one")
    doc = read_json_object(path, CHECK_EXPECTED)
    counts = {name: doc.get(name, int) for name in ("rows", "seed", "data_seed", "correct")}
    check = AnswerCheck(split=doc.get("split", str), **counts)
    if check.rows < 1:
        raise doc.error(f"'rows' is {check.rows}, not a positive count")
    if not 0 <= check.correct <= check.rows:
        raise doc.error(f"{check.correct} right answers of {check.rows} rows")
    return check


def sampling_sd(percent: float, rows: int, population: int) -> float:
    """Standard deviation, in points, of the accuracy of ``rows`` rows drawn without replacement from
    ``population`` rows of which ``percent`` are answered right."""
    p = percent / 100.0
    finite = (population - rows) / (population - 1) if population > 1 else 0.0
    return 100.0 * math.sqrt(max(p * (1 - p), 0.0) / rows * max(finite, 0.0))


def check_problems(recorded: AnswerCheck, recount: AnswerCheck, card_percent: float, population: int) -> list[str]:
    """What disagrees, one line each (empty when the checkpoint passes): the recount against the recorded
    count, and the recorded count against the card's ``card_percent`` of ``population`` val rows."""
    problems = []
    if (recount.rows, recount.seed, recount.data_seed) != (recorded.rows, recorded.seed, recorded.data_seed):
        problems.append(f"the recount drew another sample: {recount} against the recorded {recorded}")
    elif abs(recount.correct - recorded.correct) > ANSWER_TOLERANCE:
        problems.append(
            f"{recount.correct} of {recount.rows} val answers right; {recorded.correct} when it was shipped "
            f"(tolerance {ANSWER_TOLERANCE})"
        )
    allowed = SAMPLING_SDS * sampling_sd(card_percent, recorded.rows, population) + 50.0 / recorded.rows
    if abs(recorded.percent - card_percent) > allowed:
        problems.append(
            f"the recorded {recorded.percent:.2f}% of {recorded.rows} val rows is "
            f"{abs(recorded.percent - card_percent):.2f} points from the card's {card_percent:.2f}% of "
            f"{population:,} (allowed {allowed:.2f})"
        )
    return problems
