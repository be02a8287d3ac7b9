"""`StackStep` on its own: what it captures and compiles by default, the width an eager step trains at, and the
loss per replicate it accumulates over a window in which a replicate stops."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

from lsa_interp.training import RunSpec, StackConfig, StackTrainer
from lsa_interp.training.stack_step import StackStep
from lsa_interp.training.stacked_model import StackedEncoderDecoder
from tests.helpers import SMALL_MODEL

NO_DROPOUT = {**SMALL_MODEL, "dropout": 0.0}


def _trainer(data_dir, other_dir, tmp_path) -> StackTrainer:
    """Replicate 0: the longer rows (windows of 4 letters), alphabet batching, 1 epoch of 10 steps; replicate 1:
    windows of 3 letters, random batching, 2 epochs of 9 steps. Past step 9 only replicate 1's rows train."""
    runs = (
        RunSpec(str(other_dir), seed=2, batching="alphabet", epochs=1, preset="tiny4"),
        RunSpec(str(data_dir), seed=1, batching="random", epochs=2, preset="tiny"),
    )
    config = StackConfig(runs=runs, batch_size=64, lr=3e-3, val_limit=40, model=NO_DROPOUT)
    return StackTrainer(config, tmp_path / "stack")


def _stepper(trainer: StackTrainer, window: int, calls: list, **options) -> StackStep:
    """A step over ``trainer``'s model, optimizer and split whose loss function appends (source width, target
    width, the replicates' losses) to ``calls``."""
    model = trainer.model

    def losses(src, tgt_in, tgt_out, shortest):
        result = StackedEncoderDecoder.losses(model, src, tgt_in, tgt_out, shortest)
        calls.append((src.shape[-1], tgt_in.shape[-1], result.detach().clone()))
        return result

    model.losses = losses
    return StackStep(model, trainer.optimizer, trainer.train, window, 64, contextlib.nullcontext, **options)


def test_by_default_a_step_runs_eagerly_compiles_nothing_and_warns_nothing(data_dir, other_dir, tmp_path, monkeypatch):
    trainer = _trainer(data_dir, other_dir, tmp_path)
    monkeypatch.setattr(torch, "compile", lambda *args, **kwargs: pytest.fail("torch.compile called"))
    stepper = _stepper(trainer, 3, calls := [])
    before = trainer.model.flat.detach().clone()
    stepper.load_window(trainer.plan.window(0, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for index in range(3):
            stepper.run(index)
    assert stepper.graph is None and len(calls) == 3
    assert not torch.equal(trainer.model.flat, before) and int(stepper.cursor) == 3


def test_an_eager_step_trains_at_the_width_of_the_longest_row_it_holds(data_dir, other_dir, tmp_path):
    trainer = _trainer(data_dir, other_dir, tmp_path)
    total, train = int(trainer.plan.total_steps.max()), trainer.train
    window = trainer.plan.window(0, total)
    stepper = _stepper(trainer, total, calls := [])
    stepper.load_window(window)
    for index in range(total):
        stepper.run(index)
    held = [window.rows[index][window.valid[index]] for index in range(total)]
    expected = [(int(train.src_len[rows].max()), int(train.tgt_len[rows].max())) for rows in held]
    assert [call[:2] for call in calls] == expected
    assert expected[0][0] == train.src.shape[-1] > expected[-1][0]  # past replicate 0's run, the rows are shorter


def test_a_replicate_that_stops_inside_a_window_reports_the_mean_loss_of_its_own_steps_then_nan(
    data_dir, other_dir, tmp_path
):
    trainer = _trainer(data_dir, other_dir, tmp_path)
    stepper = _stepper(trainer, 4, calls := [])
    window = trainer.plan.window(8, 4)
    active = torch.from_numpy(window.active).float()
    assert active[:, 0].tolist() == [1, 1, 0, 0] and active[:, 1].tolist() == [1, 1, 1, 1]
    stepper.load_window(window)
    for index in range(4):
        stepper.run(index)
    losses = torch.stack([call[2] for call in calls])
    expected = (losses * active).sum(0) / active.sum(0)
    assert torch.allclose(stepper.take_losses(), expected) and torch.isfinite(expected).all()
    assert stepper.take_losses().isnan().all()  # nothing trained since the last call
    stepper.load_window(trainer.plan.window(12, 2))
    for index in range(2):
        stepper.run(index)
    after = stepper.take_losses()
    assert after[0].isnan() and torch.allclose(after[1], torch.stack([call[2][1] for call in calls[4:]]).mean())
