"""Epoch batch plans: group keys of the paper's batching methods, exact batch counts and sizes, one key per
batch, every row once, determinism per (seed, epoch), and length bucketing inside windows of 50 batches."""

from __future__ import annotations

import numpy as np
import pytest

from lsa_interp.data.batching import BATCHING_METHODS, batch_keys, epoch_batches

ALPHABET = np.array([0, 0, 1, 1, 2, 2, 0, 1], dtype=np.int32)
RULE = np.array([0, 1, 0, 1, 0, 1, 1, 0], dtype=np.int16)


def test_batch_keys_group_rows_by_the_methods_attribute():
    assert (batch_keys("random", ALPHABET, RULE) == 0).all() and len(batch_keys("random", ALPHABET, RULE)) == 8
    assert batch_keys("alphabet", ALPHABET, RULE).tolist() == ALPHABET.tolist()
    assert batch_keys("transformation", ALPHABET, RULE).tolist() == RULE.tolist()
    assert all(batch_keys(m, ALPHABET, RULE).dtype == np.int64 for m in BATCHING_METHODS)
    with pytest.raises(ValueError, match="unknown batching method 'nope'"):
        batch_keys("nope", ALPHABET, RULE)


def test_transformation_alphabet_keys_are_equal_exactly_when_both_attributes_are():
    rng = np.random.default_rng(0)
    alphabet, rule = rng.integers(0, 7, 500).astype(np.int32), rng.integers(0, 19, 500).astype(np.int16)
    keys = batch_keys("transformation_alphabet", alphabet, rule)
    same_key = keys[:, None] == keys[None, :]
    same_pair = (alphabet[:, None] == alphabet[None, :]) & (rule[:, None] == rule[None, :])
    assert (same_key == same_pair).all()
    empty = batch_keys("transformation_alphabet", np.zeros(0, np.int32), np.zeros(0, np.int16))
    assert empty.shape == (0,)  # a split without rows has no keys (and no error)
    # large ids do not overflow the int16 rule column
    keys = batch_keys("transformation_alphabet", np.array([400, 401], np.int32), np.array([300, 0], np.int16))
    assert keys[0] != keys[1] and (keys >= 0).all()


@pytest.mark.parametrize("bucketing", [False, True])
def test_each_group_is_cut_into_full_batches_and_one_remainder(bucketing):
    sizes = {0: 10, 1: 7, 2: 3, 5: 8}  # batch size 4: 3 + 2 + 1 + 2 batches
    keys = np.concatenate([np.full(n, k) for k, n in sizes.items()])
    keys = keys[np.random.default_rng(1).permutation(len(keys))]
    lengths = np.random.default_rng(2).integers(5, 40, len(keys)) if bucketing else None
    plan = epoch_batches(keys, lengths, 4, seed=0, epoch=0)
    assert len(plan) == 8
    assert np.sort(np.concatenate(plan)).tolist() == list(range(len(keys)))
    per_key: dict[int, list[int]] = {}
    for batch in plan:
        assert len(set(keys[batch].tolist())) == 1
        per_key.setdefault(int(keys[batch[0]]), []).append(len(batch))
    assert {k: sorted(v) for k, v in per_key.items()} == {0: [2, 4, 4], 1: [3, 4], 2: [3], 5: [4, 4]}


def test_plans_are_a_pure_function_of_seed_and_epoch_and_differ_otherwise():
    keys = np.zeros(64, dtype=np.int64)
    plan = epoch_batches(keys, None, 8, seed=3, epoch=1)
    same = epoch_batches(keys, None, 8, seed=3, epoch=1)
    assert all((a == b).all() for a, b in zip(plan, same, strict=True))
    for other in (epoch_batches(keys, None, 8, seed=4, epoch=1), epoch_batches(keys, None, 8, seed=3, epoch=2)):
        assert not all((a == b).all() for a, b in zip(plan, other, strict=True))


def test_rows_and_batches_are_shuffled_not_left_in_key_order():
    keys = np.repeat(np.arange(8), 8)
    plan = epoch_batches(keys, None, 8, seed=0, epoch=0)
    assert [int(keys[b[0]]) for b in plan] != list(range(8))  # batch order shuffled
    assert any(b.tolist() != sorted(b.tolist()) for b in plan)  # rows shuffled inside a group
    assert [sorted(b.tolist()) for b in sorted(plan, key=lambda b: keys[b[0]])] == [
        list(range(8 * k, 8 * k + 8)) for k in range(8)
    ]


def test_length_bucketing_sorts_rows_by_length_within_a_window_of_50_batches():
    lengths = np.random.default_rng(5).permutation(101)  # distinct lengths
    keys = np.zeros(101, dtype=np.int64)
    plan = epoch_batches(keys, lengths, 2, seed=0, epoch=0)
    pairs = sorted((b for b in plan if len(b) == 2), key=lambda b: lengths[b].min())
    assert len(pairs) == 50
    ranges = [(lengths[b].min(), lengths[b].max()) for b in pairs]
    assert all(hi < lo for (_, hi), (lo, _) in zip(ranges, ranges[1:]))  # the window's batches do not overlap
    # the 101st row opens the next window: it is not sorted among the first 100 rows
    (single,) = [b for b in plan if len(b) == 1]
    assert 0 < lengths[single[0]] < 100
    unbucketed = epoch_batches(keys, None, 2, seed=0, epoch=0)
    assert sum(np.ptp(lengths[b]) for b in unbucketed) > 10 * sum(np.ptp(lengths[b]) for b in plan)


def test_bucketing_windows_restart_in_every_group():
    """Windows of 50 batches (100 rows at batch size 2) count from each group's first row: group 1 (150 rows, after
    130 of group 0) has windows of its rows 0-99 and 100-149 in the epoch's shuffled order, each sorted by length into
    batches whose length ranges do not overlap (windows counted over the whole epoch would cut it at its row 70)."""
    keys = np.repeat([0, 1], [130, 150])
    lengths = np.random.default_rng(6).permutation(len(keys))
    plan = epoch_batches(keys, lengths, 2, seed=2, epoch=0)
    perm = np.random.default_rng([2, 0]).permutation(len(keys))  # the epoch's shuffle, as epoch_batches draws it
    shuffled = perm[np.argsort(keys[perm], kind="stable")]
    for key, size in ((0, 130), (1, 150)):
        members = shuffled[keys[shuffled] == key]
        windows = [set(members[start : start + 100].tolist()) for start in range(0, size, 100)]
        batches = [b for b in plan if keys[b[0]] == key]
        assert sum(len(b) for b in batches) == size
        for window in windows:
            inside = sorted((b for b in batches if set(b.tolist()) <= window), key=lambda b: lengths[b].min())
            assert sum(len(b) for b in inside) == len(window), (key, len(window))
            ranges = [(lengths[b].min(), lengths[b].max()) for b in inside]
            assert all(hi < lo for (_, hi), (lo, _) in zip(ranges, ranges[1:]))


def test_batch_size_must_be_between_one_and_the_rows():
    """A batch of more rows than there are would be the whole split at once (and out of memory on a real one)."""
    with pytest.raises(ValueError, match="batch size must be between 1 and the 4 rows to batch, got 0"):
        epoch_batches(np.zeros(4, dtype=np.int64), None, 0, seed=0, epoch=0)
    with pytest.raises(ValueError, match="batch size must be between 1 and the 3 rows to batch, got 4"):
        epoch_batches(np.zeros(3, dtype=np.int64), None, 4, seed=0, epoch=0)
    assert [len(b) for b in epoch_batches(np.zeros(3, dtype=np.int64), None, 1, seed=0, epoch=0)] == [1, 1, 1]
    assert [len(b) for b in epoch_batches(np.zeros(3, dtype=np.int64), None, 3, seed=0, epoch=0)] == [3]
