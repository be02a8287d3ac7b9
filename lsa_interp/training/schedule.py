"""The reference's learning-rate schedule."""

from __future__ import annotations


def lr_factor(step: int, steps_per_epoch: int, epochs: int, warmup_start: float = 1e-4, final: float = 0.05) -> float:
    """The reference schedule: linear warm-up from ``warmup_start`` over epoch 1 (per step), then a
    per-epoch linear decay reaching ``final`` in the last epoch."""
    epoch = step // steps_per_epoch
    if epoch == 0:
        return warmup_start + (1.0 - warmup_start) * step / steps_per_epoch
    return 1.0 - (1.0 - final) * epoch / max(epochs - 1, 1)
