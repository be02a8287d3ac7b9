"""The learning-rate schedule: per-step warm-up over the first epoch, then a per-epoch linear decay to ``final``."""

from __future__ import annotations

import pytest

from lsa_interp.training.schedule import lr_factor


def test_warm_up_starts_at_warmup_start_and_rises_linearly_per_step():
    assert lr_factor(0, 10, 5) == pytest.approx(1e-4)
    assert lr_factor(1, 10, 5) == pytest.approx(1e-4 + (1 - 1e-4) * 0.1)
    assert lr_factor(9, 10, 5) == pytest.approx(1e-4 + (1 - 1e-4) * 0.9)
    assert lr_factor(0, 10, 5, warmup_start=0.2) == pytest.approx(0.2)
    assert lr_factor(5, 10, 5, warmup_start=0.2) == pytest.approx(0.6)


def test_decay_is_constant_within_an_epoch_and_reaches_final_in_the_last_epoch():
    # epochs 1..4 of 5: 1 - 0.95 * epoch / 4
    assert [lr_factor(10 * e, 10, 5) for e in range(1, 5)] == pytest.approx([1 - 0.95 * e / 4 for e in range(1, 5)])
    assert lr_factor(19, 10, 5) == lr_factor(10, 10, 5)
    assert lr_factor(49, 10, 5) == pytest.approx(0.05)
    assert lr_factor(49, 10, 5, final=0.5) == pytest.approx(0.5)
    assert lr_factor(20, 10, 5, final=0.5) == pytest.approx(1 - 0.5 * 2 / 4)


def test_two_epochs_decay_straight_to_final_and_one_epoch_never_divides_by_zero():
    assert lr_factor(10, 10, 2) == pytest.approx(0.05)
    assert lr_factor(19, 10, 2, final=0.3) == pytest.approx(0.3)
    assert lr_factor(9, 10, 1) == pytest.approx(1e-4 + (1 - 1e-4) * 0.9)
    assert lr_factor(10, 10, 1) == pytest.approx(0.05)  # a step past the only epoch: the final factor
