"""Epoch batch plans: the paper's batching methods, optionally with length bucketing inside each batch group.

A plan is a list of row-index arrays. It is a pure function of (rows' keys and lengths, seed, epoch), so a
resumed run rebuilds exactly the batches it would have seen.
"""

from __future__ import annotations

import numpy as np

BATCHING_METHODS: tuple[str, ...] = ("random", "alphabet", "transformation", "transformation_alphabet")
_BUCKET_BATCHES = 50
"""With bucketing, rows are sorted by length within windows of this many batches (less padding, but batches
hold rows of similar length, which are often of the same transformation: not the reference's batches)."""


def batch_keys(method: str, alphabet: np.ndarray, transformation: np.ndarray) -> np.ndarray:
    """The group key of every row: rows of one batch share it (all zero for random batching).

    Raises ValueError for an unknown method.
    """
    if method == "random":
        return np.zeros(len(alphabet), dtype=np.int64)
    if method == "alphabet":
        return alphabet.astype(np.int64)
    if method == "transformation":
        return transformation.astype(np.int64)
    if method == "transformation_alphabet":
        return alphabet.astype(np.int64) * (int(transformation.max(initial=0)) + 1) + transformation
    raise ValueError(f"unknown batching method {method!r}; choose one of: {', '.join(BATCHING_METHODS)}")


def epoch_batches(
    keys: np.ndarray, lengths: np.ndarray | None, batch_size: int, seed: int, epoch: int
) -> list[np.ndarray]:
    """Batches of row indices for one epoch, in training order.

    Rows are shuffled, grouped by ``keys``, cut into batches of ``batch_size`` (a group's last batch may be
    smaller), and the batches shuffled: the reference's batches. With ``lengths`` (length bucketing), rows are
    first sorted by length within windows of 50 batches of a group. Raises ValueError for a batch size < 1 or larger
    than the rows (a batch of a whole split would not fit in memory).
    """
    n = len(keys)
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch size must be between 1 and the {n:,} rows to batch, got {batch_size:,}")
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(n)
    grouped = perm[np.argsort(keys[perm], kind="stable")]
    group_keys = keys[grouped]
    starts = np.flatnonzero(np.r_[True, group_keys[1:] != group_keys[:-1]])
    rank_in_group = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    if lengths is None:
        ordered = grouped
    else:
        window = rank_in_group // (batch_size * _BUCKET_BATCHES)
        ordered = grouped[np.lexsort((lengths[grouped], window, group_keys))]
    # Sorting inside windows keeps every group on the same positions, so ranks still mark batch starts.
    cuts = np.flatnonzero(rank_in_group % batch_size == 0)
    batches = np.split(ordered, cuts[1:])
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]
