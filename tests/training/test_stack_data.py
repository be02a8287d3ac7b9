"""A stack's data: distinct datasets concatenated once, and per-replicate step windows (rows, rates, on/off)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.data.batching import batch_keys, epoch_batches
from lsa_interp.data.loaders import load_tokenized
from lsa_interp.data.transformations import SEEN
from lsa_interp.data.vocab import PAD
from lsa_interp.training import RunSpec
from lsa_interp.training.schedule import lr_factor
from lsa_interp.training.stack_data import StackPlan, StackSplit
from lsa_interp.training.validation import ResidentSplit

CPU = torch.device("cpu")


def _dataset(tmp_path_factory, name, window, seed):
    config = DatasetConfig(
        name=name, n_alphabets=4, window_lengths=(window,), n_reshuffle=1, n_new_alphabets=4,
        train_transformations=SEEN[:3],
    )  # fmt: skip
    return str(save_dataset(generate_dataset(config, seed=seed), tmp_path_factory.mktemp("data") / name))


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """Two datasets of different widths: windows of 3 letters and of 4."""
    return _dataset(tmp_path_factory, "three", 3, 3), _dataset(tmp_path_factory, "four", 4, 4)


def test_a_stack_split_holds_each_distinct_dataset_once_padded_to_the_widest(dirs):
    """Replicates of the same dataset share its rows; narrower splits are padded with PAD; ``offset``/``size``
    locate each replicate's rows; ``limit`` caps every split."""
    three, four = dirs
    split = StackSplit([three, four, three], "train", CPU)
    a, b = (ResidentSplit(load_tokenized(d, "train"), CPU) for d in (three, four))
    n_a, n_b = len(a.src), len(b.src)
    assert split.offset.tolist() == [0, n_a, 0] and split.size.tolist() == [n_a, n_b, n_a]
    assert split.offset.dtype == np.int64 and split.size.dtype == np.int64
    assert split.parts[0] is split.parts[2] and len(split.parts[1].src) == n_b
    for name in ("src", "tgt_in", "tgt_out"):
        whole, first, second = getattr(split, name), getattr(a, name), getattr(b, name)
        assert whole.shape == (n_a + n_b, max(first.shape[1], second.shape[1]))
        assert torch.equal(whole[n_a:, : second.shape[1]], second) and torch.equal(whole[:n_a, : first.shape[1]], first)
        assert (whole[:n_a, first.shape[1] :] == PAD).all() and (whole[n_a:, second.shape[1] :] == PAD).all()
    assert first.shape[1] < second.shape[1]  # the windows of 4 letters are the wider split
    assert split.src_len.tolist() == a.src_len.tolist() + b.src_len.tolist()
    assert split.tgt_len.tolist() == a.tgt_len.tolist() + b.tgt_len.tolist()
    limited = StackSplit([three, four], "val", CPU, limit=10)
    assert limited.size.tolist() == [10, 10] and len(limited.src) == 20


@pytest.fixture(scope="module")
def plan(dirs):
    """Replicate 0: windows of 3, random batches, seed 5, 2 epochs; replicate 1: windows of 4, alphabet batches,
    seed 6, 1 epoch. Batches of 64."""
    three, four = dirs
    runs = (RunSpec(three, seed=5, batching="random", epochs=2), RunSpec(four, seed=6, batching="alphabet", epochs=1))
    return StackPlan(runs, StackSplit([three, four], "train", CPU), 64, False, 3e-3, 1e-4, 0.05)


def _own_plan(plan, replicate, epoch, lengths=None):
    """The batches a single run of that replicate draws in ``epoch``."""
    part = plan.train.parts[replicate]
    run = plan.runs[replicate]
    keys = batch_keys(run.batching, part.split.alphabet.numpy(), part.split.transformation.numpy())
    return epoch_batches(keys, lengths, 64, run.seed, epoch)


def test_each_replicate_follows_its_own_epoch_plan_steps_and_schedule(plan):
    """Steps per epoch and total steps come from each replicate's own plan and epochs; a window over an epoch
    boundary holds each replicate's batches (offset into the stack), valid flags, rates and on/off flags."""
    spe = [len(_own_plan(plan, r, 0)) for r in (0, 1)]
    assert plan.steps_per_epoch.tolist() == spe and spe[0] != spe[1]
    assert plan.total_steps.tolist() == [2 * spe[0], spe[1]]
    start, count = spe[0] - 2, 4 + spe[1] - spe[0]
    window = plan.window(start, count)
    assert window.start == start and window.count == count
    assert window.rows.dtype == np.int64 and window.valid.dtype == bool  # the dtypes of the device buffers
    assert window.lr.dtype == np.float32 and window.active.dtype == np.float32
    assert window.rows.shape == window.valid.shape == (count, 2, 64) and window.lr.shape == (count, 2)
    for r in (0, 1):
        for i, step in enumerate(range(start, start + count)):
            if step >= plan.total_steps[r]:
                assert window.active[i, r] == 0 and window.lr[i, r] == 0 and not window.valid[i, r].any()
                continue
            epoch, offset = divmod(step, spe[r])
            batch = _own_plan(plan, r, epoch)[offset]
            n = len(batch)
            assert window.rows[i, r, :n].tolist() == (batch + plan.train.offset[r]).tolist()
            assert (window.rows[i, r, n:] == batch[0] + plan.train.offset[r]).all()
            assert window.valid[i, r].tolist() == [True] * n + [False] * (64 - n)
            assert window.active[i, r] == 1
            warmup = int(plan.train.size[r]) // 64
            expected = 3e-3 * lr_factor(step, spe[r], plan.runs[r].epochs, 1e-4, 0.05, warmup)
            assert window.lr[i, r] == pytest.approx(expected, rel=1e-6)


def test_a_windows_rows_do_not_depend_on_which_windows_came_before(plan):
    """Plans are pure functions of (run, epoch): a window drawn after windows of other epochs equals the same
    window drawn first."""
    later = plan.window(3, 5)
    fresh = StackPlan(plan.runs, plan.train, 64, False, 3e-3, 1e-4, 0.05)
    for earlier in (fresh.window(10, 3), fresh.window(0, 2), fresh.window(12, 1)):
        assert earlier.count >= 1
    again = fresh.window(3, 5)
    assert np.array_equal(again.rows, later.rows) and np.array_equal(again.valid, later.valid)


@pytest.mark.parametrize("batching", ["transformation", "transformation_alphabet"])
def test_a_replicate_batched_by_transformation_draws_batches_of_one_transformation(dirs, batching):
    """The transformation batching methods key each replicate's rows by its own rows' transformations."""
    three, four = dirs
    runs = (RunSpec(three, seed=5, batching=batching, epochs=1), RunSpec(four, seed=6, epochs=1))
    plan = StackPlan(runs, StackSplit([three, four], "train", CPU), 64, False, 3e-3, 1e-4, 0.05)
    part = plan.train.parts[0].split
    batches = plan.epoch_plan(0, 0)
    assert len({int(t) for t in part.transformation}) == 3
    assert all(len(set(part.transformation[batch].tolist())) == 1 for batch in batches)
    if batching == "transformation_alphabet":
        assert all(len(set(part.alphabet[batch].tolist())) == 1 for batch in batches)


def test_each_epoch_after_the_second_steps_down_to_the_final_rate(dirs):
    """Four epochs with a final factor of 0.4: epoch 2 at the full rate, epoch 3 at 0.7 of it, epoch 4 at 0.4."""
    three, _ = dirs
    plan = StackPlan((RunSpec(three, seed=5, epochs=4),), StackSplit([three], "train", CPU), 64, False, 3e-3, 1e-4, 0.4)
    spe = int(plan.steps_per_epoch[0])
    window = plan.window(spe, 3 * spe)
    assert window.lr[[0, spe, 2 * spe, 3 * spe - 1], 0] == pytest.approx([3e-3, 3e-3 * 0.7, 3e-3 * 0.4, 3e-3 * 0.4])


def test_length_bucketing_reaches_every_replicates_plan(dirs):
    """With ``length_bucketing`` each replicate's batches are cut from length-sorted windows of its own rows."""
    three, four = dirs
    runs = (RunSpec(three, seed=5, epochs=1), RunSpec(four, seed=6, epochs=1))
    bucketed = StackPlan(runs, StackSplit([three, four], "train", CPU), 64, True, 3e-3, 1e-4, 0.05)
    for r in (0, 1):
        own = _own_plan(bucketed, r, 0, bucketed.train.parts[r].src_len)
        assert all(np.array_equal(a, b) for a, b in zip(bucketed.epoch_plan(r, 0), own, strict=True))
