"""The learning-rate schedule: the reference's per-step warm-up in epoch 1, epoch 2 at the full rate, then a
per-epoch linear decay reaching ``final`` in the last epoch."""

from __future__ import annotations

import pytest

from lsa_interp.training.schedule import lr_factor


def test_warm_up_starts_at_warmup_start_and_rises_linearly_per_step():
    assert lr_factor(0, 10, 5) == pytest.approx(1e-4)
    assert lr_factor(1, 10, 5) == pytest.approx(1e-4 + (1 - 1e-4) * 0.1)
    assert lr_factor(9, 10, 5) == pytest.approx(1e-4 + (1 - 1e-4) * 0.9)
    assert lr_factor(0, 10, 5, warmup_start=0.2) == pytest.approx(0.2)
    assert lr_factor(5, 10, 5, warmup_start=0.2) == pytest.approx(0.6)


def test_a_shorter_warm_up_reaches_the_full_rate_and_holds_it_to_the_epoch_end():
    # the reference ramps over floor(rows / batch) steps: 9 of an epoch of 10 batches (its last one partial)
    assert lr_factor(3, 10, 5, warmup_steps=9) == pytest.approx(1e-4 + (1 - 1e-4) * 3 / 9)
    assert lr_factor(9, 10, 5, warmup_steps=9) == pytest.approx(1.0)
    assert lr_factor(7, 10, 5, warmup_steps=4) == lr_factor(4, 10, 5, warmup_steps=4) == pytest.approx(1.0)
    assert lr_factor(5, 10, 5, warmup_steps=50) == lr_factor(5, 10, 5)  # never longer than the epoch
    assert lr_factor(0, 10, 5, warmup_steps=0) == pytest.approx(1e-4)  # never divides by zero
    assert lr_factor(0, 10, 5, warmup_steps=1) == pytest.approx(1e-4) and lr_factor(1, 10, 5, warmup_steps=1) == 1.0


def test_epoch_2_runs_at_the_full_rate_and_the_decay_reaches_final_in_the_last_epoch():
    # 20 epochs as in the paper: epoch e (1-based) >= 2 at 1 - 0.95 * (e - 2) / 18
    factors = [lr_factor(100 * (e - 1), 100, 20) for e in range(2, 21)]
    assert factors == pytest.approx([1 - 0.95 * (e - 2) / 18 for e in range(2, 21)])
    assert factors[0] == 1.0 and factors[1] == pytest.approx(0.94722, abs=1e-5) and factors[-1] == pytest.approx(0.05)
    assert lr_factor(199, 100, 20) == lr_factor(100, 100, 20)  # constant within an epoch
    assert lr_factor(49, 10, 5, final=0.5) == pytest.approx(0.5)
    assert lr_factor(30, 10, 5, final=0.5) == pytest.approx(1 - 0.5 * 2 / 3)


def test_short_runs_and_steps_past_the_last_epoch():
    assert lr_factor(10, 10, 2) == 1.0  # two epochs: the second at the full rate, as in the reference
    assert lr_factor(20, 10, 3) == pytest.approx(0.05)
    assert lr_factor(9, 10, 1) == pytest.approx(1e-4 + (1 - 1e-4) * 0.9)
    assert lr_factor(10, 10, 1) == pytest.approx(0.05)  # a step past the only epoch: the final factor
    assert lr_factor(50, 10, 5, final=0.3) == pytest.approx(0.3)
