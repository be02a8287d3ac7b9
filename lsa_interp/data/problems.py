"""Problems (one per alphabet x transformation x window) and their pairing into task rows.

Problems live in a columnar `ProblemTable`; rows are integer arrays that point into it, so that splitting
and down-sampling millions of rows never builds a Python object per row.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lsa_interp.data.task import Task
from lsa_interp.data.transformations import get_transformation


@dataclass(frozen=True)
class ProblemTable:
    """Problems grouped by (alphabet, transformation); each group's problems are contiguous.

    ``query``/``answer`` hold letter strings; ``alphabet`` indexes ``alphabets``; ``transformation``
    indexes ``transformations``; ``group`` numbers the (alphabet, transformation) groups in order.
    """

    alphabets: list[str]
    transformations: tuple[str, ...]
    query: list[str]
    answer: list[str]
    alphabet: np.ndarray
    transformation: np.ndarray
    group: np.ndarray

    def __len__(self) -> int:
        return len(self.query)

    def keys(self) -> list[str]:
        """The problem string ``query>answer`` of every problem (the unit of the train/val/test split)."""
        return [f"{q}>{a}" for q, a in zip(self.query, self.answer, strict=True)]


@dataclass(frozen=True)
class Rows:
    """Task rows: the query problem, the example problems (``[rows, shots]``) and whether it is a copy row."""

    query: np.ndarray
    examples: np.ndarray
    is_copy: np.ndarray

    def __len__(self) -> int:
        return len(self.query)

    def take(self, index: np.ndarray) -> Rows:
        """The rows at ``index`` (an index array or boolean mask)."""
        return Rows(self.query[index], self.examples[index], self.is_copy[index])


def build_problems(
    alphabets: Sequence[str], transformations: Sequence[str], window_lengths: Sequence[int], stream: str
) -> ProblemTable:
    """Build every problem of every (alphabet, transformation), windows that a rule cannot handle skipped.

    Random choices are drawn once per window from a stream keyed by ``stream``, the alphabet and the
    transformation, so a problem does not depend on which other alphabets or rules are generated.
    """
    builders = [get_transformation(name).build for name in transformations]
    windows = [(start, length) for length in window_lengths for start in range(26 - length + 1)]
    query: list[str] = []
    answer: list[str] = []
    alphabet_ids: list[int] = []
    transformation_ids: list[int] = []
    for a_idx, alphabet in enumerate(alphabets):
        table = alphabet.encode("ascii").ljust(256, b"?")
        for t_idx, (name, build) in enumerate(zip(transformations, builders, strict=True)):
            rng = random.Random(f"{stream}/{alphabet}/{name}")
            before = len(query)
            for start, length in windows:
                problem = build(start, length, rng)
                if problem is not None:
                    query.append(bytes(problem[0]).translate(table).decode("ascii"))
                    answer.append(bytes(problem[1]).translate(table).decode("ascii"))
            added = len(query) - before
            alphabet_ids += [a_idx] * added
            transformation_ids += [t_idx] * added
    alphabet_arr = np.asarray(alphabet_ids, dtype=np.int32)
    transformation_arr = np.asarray(transformation_ids, dtype=np.int16)
    group = alphabet_arr.astype(np.int64) * len(transformations) + transformation_arr
    return ProblemTable(list(alphabets), tuple(transformations), query, answer, alphabet_arr, transformation_arr, group)


def pair_examples(table: ProblemTable, n_reshuffle: int, n_shots: int, rng: np.random.Generator) -> Rows:
    """Give every problem ``n_reshuffle`` times ``n_shots`` examples drawn from its own group.

    Each reshuffle and shot is an independent shuffle inside every group; rows in which an example equals
    the query problem, or two examples coincide, are dropped (the reference's rule for one shot).
    """
    n = len(table)
    own = np.arange(n, dtype=np.int64)
    queries, examples = [], []
    for _ in range(n_reshuffle):
        shots = np.stack([np.argsort(table.group + rng.random(n), kind="stable") for _ in range(n_shots)], axis=1)
        keep = (shots != own[:, None]).all(axis=1)
        for i in range(n_shots):
            for j in range(i + 1, n_shots):
                keep &= shots[:, i] != shots[:, j]
        queries.append(own[keep])
        examples.append(shots[keep])
    query = np.concatenate(queries)
    return Rows(query, np.concatenate(examples), np.zeros(len(query), dtype=bool))


def add_copy_rows(rows: Rows, rng: np.random.Generator) -> Rows:
    """Duplicate every row; in each duplicate one example (a random slot) is the row's own query problem."""
    n, shots = rows.examples.shape
    copies = rows.examples.copy()
    copies[np.arange(n), rng.integers(0, shots, size=n)] = rows.query
    order = np.stack([np.arange(n), np.arange(n) + n], axis=1).reshape(-1)
    return Rows(
        np.concatenate([rows.query, rows.query])[order],
        np.concatenate([rows.examples, copies])[order],
        np.concatenate([rows.is_copy, np.ones(n, dtype=bool)])[order],
    )


def materialize_tasks(table: ProblemTable, rows: Rows) -> list[Task]:
    """The `Task` objects of ``rows`` (their problems looked up in ``table``), in order."""
    pairs = list(zip(table.query, table.answer, strict=True))
    alphabet_of = [table.alphabets[i] for i in table.alphabet.tolist()]
    name_of = [table.transformations[i] for i in table.transformation.tolist()]
    query, answer = table.query, table.answer
    if rows.examples.shape[1] == 1:
        return [
            Task(alphabet_of[q], (pairs[e],), query[q], answer[q], name_of[q])
            for q, e in zip(rows.query.tolist(), rows.examples[:, 0].tolist(), strict=True)
        ]
    return [
        Task(alphabet_of[q], tuple(pairs[e] for e in ex), query[q], answer[q], name_of[q])
        for q, ex in zip(rows.query.tolist(), rows.examples.tolist(), strict=True)
    ]
