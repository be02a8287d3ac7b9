"""The reference's learning-rate schedule."""

from __future__ import annotations


def lr_factor(
    step: int,
    steps_per_epoch: int,
    epochs: int,
    warmup_start: float = 1e-4,
    final: float = 0.05,
    warmup_steps: int | None = None,
) -> float:
    """The factor of the base learning rate at ``step`` (0-based) of the reference's schedule.

    Epoch 1: a per-step linear warm-up from ``warmup_start`` to 1 over ``warmup_steps`` steps (default the whole
    epoch; the reference's is ``floor(train rows / batch size)``, which random batching's last, partial batch
    already runs at 1), then 1 to the epoch's end. Epoch 2 runs at 1; each later epoch steps down linearly, so
    that the last epoch runs at ``final``: 1 - (1 - final) * (e - 2) / (epochs - 2) in epoch e (1-based; with
    2 epochs, epoch 2 runs at 1, as in the reference). A step past the last epoch gets ``final``.
    """
    epoch = step // steps_per_epoch
    if epoch == 0:
        ramp = max(1, min(warmup_steps or steps_per_epoch, steps_per_epoch))
        return warmup_start + (1.0 - warmup_start) * min(step, ramp) / ramp
    if epoch >= epochs:
        return final
    return 1.0 - (1.0 - final) * (epoch - 1) / max(epochs - 2, 1)


def reference_warmup_steps(train_rows: int, batch_size: int) -> int:
    """The reference's warm-up length: the whole batches of the train split, ``floor(train_rows / batch_size)``."""
    return train_rows // batch_size
