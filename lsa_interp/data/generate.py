"""`generate_dataset`: alphabets -> problems -> paired rows -> split -> down-sampled `Task` lists.

Every random stage draws from its own stream derived from the seed, so the same preset and seed give the
same data, and one stage's change never shifts another's draws.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lsa_interp.data.alphabets import make_alphabets
from lsa_interp.data.dataset import Dataset
from lsa_interp.data.presets import PRESETS, DatasetConfig
from lsa_interp.data.problems import ProblemTable, Rows, add_copy_rows, build_problems, materialize_tasks, pair_examples
from lsa_interp.data.splits import assign_problem_splits, downsample, select_splits
from lsa_interp.utils import no_cyclic_gc

_PAIRING, _COPY, _SPLIT, _DOWNSAMPLE, _NEW_PAIRING = range(1, 6)
Progress = Callable[[str], None]


def _rng(seed: int, stage: int) -> np.random.Generator:
    return np.random.default_rng([seed, stage])


@dataclass(frozen=True)
class _IndexedSplits:
    table: ProblemTable
    splits: dict[str, Rows]


def _split_rows(config: DatasetConfig, seed: int, progress: Progress) -> _IndexedSplits:
    """Train/val/test rows of the training alphabets, before any down-sampling."""
    alphabets = make_alphabets(config.n_alphabets, seed, config.permutation_levels)
    progress(f"building problems for {len(alphabets)} alphabets x {len(config.eval_transformations)} rules")
    table = build_problems(alphabets, config.eval_transformations, config.window_lengths, f"problems/{seed}")
    progress(f"pairing {len(table):,} problems with examples ({config.n_reshuffle} reshuffles)")
    rows = pair_examples(table, config.n_reshuffle, config.n_shots, _rng(seed, _PAIRING))
    progress(f"splitting {len(rows) * (1 + config.copy):,} rows by problem string")
    problem_split = assign_problem_splits(table, config.split_fractions, _rng(seed, _SPLIT))
    allowed = {
        "train": config.train_transformations,
        "val": config.eval_transformations,
        "test": config.eval_transformations,
    }
    splits = select_splits(rows, table, problem_split, allowed)
    if config.copy:
        copy_rng = _rng(seed, _COPY)
        splits = {name: add_copy_rows(split, copy_rng) for name, split in splits.items()}
    return _IndexedSplits(table, splits)


def split_sizes(config: DatasetConfig, seed: int, progress: Progress | None = None) -> dict[str, int]:
    """Final train/val/test sizes of ``config`` with ``seed`` (computed on row indices, no tasks built)."""
    progress = progress or (lambda _msg: None)
    return {name: len(rows) for name, rows in _final_rows(config, seed, progress).splits.items()}


def _final_rows(config: DatasetConfig, seed: int, progress: Progress) -> _IndexedSplits:
    indexed = _split_rows(config, seed, progress)
    rng = _rng(seed, _DOWNSAMPLE)
    train = indexed.splits["train"]
    if config.match_size_of is not None:
        target = split_sizes(PRESETS[config.match_size_of], seed)["train"]
        progress(f"down-sampling train from {len(train):,} to {config.match_size_of}'s {target:,} rows")
        train = downsample(train, target, rng)
    eval_size = len(train) // config.eval_size_divisor
    splits = {"train": train}
    for name in ("val", "test"):
        splits[name] = downsample(indexed.splits[name], eval_size, rng)
    return _IndexedSplits(indexed.table, splits)


def generate_dataset(config: DatasetConfig, seed: int = 0, progress: Progress | None = None) -> Dataset:
    """Generate ``config``'s splits ``train``/``val``/``test`` and the new-alphabet test set.

    ``progress`` (optional) receives one message per stage. The new-alphabet test set uses
    ``config.n_new_alphabets`` fresh alphabets disjoint from the training ones, all evaluation
    transformations, ``config.new_alphabet_reshuffle`` pairings and no copy rows.
    """
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    progress = progress or (lambda _msg: None)
    with no_cyclic_gc():
        final = _final_rows(config, seed, progress)
        new_alphabets = make_alphabets(
            config.n_new_alphabets,
            seed + 1_000_003,
            config.permutation_levels,
            exclude=final.table.alphabets,
            include_standard=False,
        )
        progress(f"building the new-alphabet test set ({len(new_alphabets)} alphabets)")
        new_table = build_problems(new_alphabets, config.eval_transformations, config.window_lengths, f"new/{seed}")
        new_rows = pair_examples(new_table, config.new_alphabet_reshuffle, config.n_shots, _rng(seed, _NEW_PAIRING))
        progress("building tasks")
        splits = {name: materialize_tasks(final.table, rows) for name, rows in final.splits.items()}
        splits["test_new_alphabets"] = materialize_tasks(new_table, new_rows)
    return Dataset(config, seed, splits, list(final.table.alphabets), new_alphabets)
