"""Dropout whose mask comes from one uniform draw per element.

Same distribution as ``torch.nn.Dropout`` (keep with probability 1-p, scale by 1/(1-p)), drawn from the
same torch generator, but several times cheaper on CPU than ``bernoulli_``, which took a third of a
training step there.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor, nn


def dropout(x: Float[Tensor, "..."], p: float, training: bool) -> Float[Tensor, "..."]:
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``; identity unless training."""
    if not training or p == 0.0:
        return x
    keep = torch.empty_like(x).uniform_() >= p
    return torch.where(keep, x * (1.0 / (1.0 - p)), 0.0)


class Dropout(nn.Dropout):
    """`nn.Dropout` with the cheaper mask of `dropout` (same ``p`` attribute and state dict)."""

    def forward(self, x: Float[Tensor, "..."]) -> Float[Tensor, "..."]:
        return dropout(x, self.p, self.training)
