"""The new-alphabet test set the way the paper measured it.

The authors built their new-alphabet set like a training dataset: the fresh alphabets plus the standard one,
split by problem string 80/10/10 (train keeping the seen rules), the test split down-sampled to train/8. They
scored that test split with the standard alphabet still in it (stored at permutation level 1, so their filter
``n_perm != 0`` kept it). This is about 11,500 rows, 6,289 of them seen-rule rows in the authors' table of
results. Which problem strings end up in the test split is a single random draw, and every run the paper scored
shares it. Our `test_new_alphabets` split is the whole set of fresh alphabets instead (SPEC section 2, deliberate
difference 4).

`paper_new_alphabet_draws` builds several such draws over one set of problems and pairings, so that an analysis
can decode their union once and score each draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lsa_interp.data.presets import DatasetConfig
from lsa_interp.data.problems import build_problems, materialize_tasks, pair_examples
from lsa_interp.data.splits import assign_problem_splits, downsample_indices, split_row_indices
from lsa_interp.data.task import STANDARD_ALPHABET, Task

_PAIRING, _SPLIT, _DOWNSAMPLE = range(1, 4)


@dataclass(frozen=True)
class ProtocolDraws:
    """The union of several draws' test rows (``tasks``), and for each draw the indices of its rows in it."""

    tasks: list[Task]
    draws: list[np.ndarray]


def paper_new_alphabet_draws(
    config: DatasetConfig, new_alphabets: Sequence[str], draws: int, seed: int = 0
) -> ProtocolDraws:
    """``draws`` test splits of the paper's new-alphabet set over ``new_alphabets`` plus the standard one.

    The problems and their pairings (``config.new_alphabet_reshuffle`` examples a problem, no copy rows) are
    the same for every draw. Each draw splits the problem strings anew (``config.split_fractions``, train
    keeping ``config.train_transformations``) and down-samples its test rows to train /
    ``config.eval_size_divisor``. Raises ValueError when ``draws`` is below 1 or ``new_alphabets`` holds the
    standard alphabet (it is added here).
    """
    if draws < 1:
        raise ValueError(f"draws must be at least 1, got {draws}")
    if STANDARD_ALPHABET in new_alphabets:
        raise ValueError("new_alphabets must not hold the standard alphabet: it is added as the 21st")
    table = build_problems(
        [*new_alphabets, STANDARD_ALPHABET], config.eval_transformations, config.window_lengths, f"paper-new/{seed}"
    )
    rows = pair_examples(table, config.new_alphabet_reshuffle, config.n_shots, np.random.default_rng([seed, _PAIRING]))
    evaluated = config.eval_transformations
    allowed = {"train": config.train_transformations, "val": evaluated, "test": evaluated}
    picked = []
    for draw in range(draws):
        split_rng, downsample_rng = (np.random.default_rng([seed, stage, draw]) for stage in (_SPLIT, _DOWNSAMPLE))
        splits = split_row_indices(
            rows, table, assign_problem_splits(table, config.split_fractions, split_rng), allowed
        )
        size = len(splits["train"]) // config.eval_size_divisor
        picked.append(splits["test"][downsample_indices(len(splits["test"]), size, downsample_rng)])
    union = np.unique(np.concatenate(picked))
    return ProtocolDraws(materialize_tasks(table, rows.take(union)), [np.searchsorted(union, p) for p in picked])
