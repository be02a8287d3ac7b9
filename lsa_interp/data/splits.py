"""The problem-string split (80/10/10 by unique ``query>answer``) and the equal-size down-sampling."""

from __future__ import annotations

import numpy as np

from lsa_interp.data.problems import ProblemTable, Rows

SPLIT_NAMES: tuple[str, ...] = ("train", "val", "test")


def assign_problem_splits(
    table: ProblemTable, fractions: tuple[float, float, float], rng: np.random.Generator
) -> np.ndarray:
    """Split id (0 train, 1 val, 2 test) of every problem.

    Unique problem strings are shuffled and cut at the given fractions, so one string (which may occur in
    several alphabets) always lands in one split.
    """
    ids: dict[str, int] = {}
    uid = np.fromiter((ids.setdefault(k, len(ids)) for k in table.keys()), dtype=np.int64, count=len(table))
    n_unique = len(ids)
    rank = np.empty(n_unique, dtype=np.int64)
    rank[rng.permutation(n_unique)] = np.arange(n_unique)
    cut_train = round(fractions[0] * n_unique)
    cut_val = cut_train + round(fractions[1] * n_unique)
    split_of_unique = np.where(rank < cut_train, 0, np.where(rank < cut_val, 1, 2)).astype(np.int8)
    return split_of_unique[uid]


def split_row_indices(
    rows: Rows, table: ProblemTable, problem_split: np.ndarray, transformations: dict[str, tuple[str, ...]]
) -> dict[str, np.ndarray]:
    """Indices into ``rows`` of each split in ``SPLIT_NAMES``: the rows whose query problem lies in it and
    whose rule is allowed there (``transformations`` maps each split name to its rules; train: the seen ones)."""
    out = {}
    for split_id, name in enumerate(SPLIT_NAMES):
        allowed = np.isin(np.asarray(table.transformations), transformations[name])
        problem_ok = (problem_split == split_id) & allowed[table.transformation]
        out[name] = np.flatnonzero(problem_ok[rows.query])
    return out


def select_splits(
    rows: Rows, table: ProblemTable, problem_split: np.ndarray, transformations: dict[str, tuple[str, ...]]
) -> dict[str, Rows]:
    """The rows of each split in ``SPLIT_NAMES`` (`split_row_indices`)."""
    return {
        name: rows.take(index) for name, index in split_row_indices(rows, table, problem_split, transformations).items()
    }


def downsample_indices(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` of the indices ``0..n-1`` drawn at random, in order (all of them when there are not more)."""
    if n <= size:
        return np.arange(n)
    return np.sort(rng.choice(n, size=size, replace=False))


def downsample(rows: Rows, size: int, rng: np.random.Generator) -> Rows:
    """A random subset of ``size`` rows in their original order (all rows when there are not more)."""
    if len(rows) <= size:
        return rows
    return rows.take(downsample_indices(len(rows), size, rng))
