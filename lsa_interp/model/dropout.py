"""Dropout whose masks cost a quarter of a random draw per element.

Same distribution as ``torch.nn.Dropout`` up to 2^-15 (keep with probability 1-p, scale by 1/(1-p)),
drawn from the same torch generator, but several times cheaper on CPU than ``bernoulli_`` (a third of a
training step there): one 64-bit random word gives the 15-bit uniform numbers of four elements. The words
are drawn in a tensor shaped like ``x`` (last dimension a quarter), so that under ``torch.func.vmap`` with
``randomness="different"`` every member of a vmapped batch gets its own mask.
"""

from __future__ import annotations

from typing import no_type_check

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn


@no_type_check  # hot, called several times a layer: the tests check its callers (docs/testing.md)
def dropout(x: Float[Tensor, ...], p: float, training: bool) -> Float[Tensor, ...]:
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``; identity unless training."""
    if not training or p == 0.0:
        return x
    last = x.shape[-1]
    words = torch.empty_like(x[..., : (last + 3) // 4], dtype=torch.int64, memory_format=torch.contiguous_format)
    words.random_()
    uniform15 = _fields15(words)[..., :last]
    if torch._C._functorch.is_batchedtensor(uniform15):  # vmap has no `out=`
        keep = (uniform15 >= round(p * 32768)).to(x.dtype)
    else:  # the comparison written as floats: a quarter of the time of a boolean mask and its conversion (CPU)
        keep = torch.ge(uniform15, round(p * 32768), out=torch.empty(uniform15.shape, dtype=x.dtype, device=x.device))
    return x * keep.mul_(1.0 / (1.0 - p))  # a float multiplier: on CPU, mul (and its backward) costs a third of where


def _fields15(words: Int[Tensor, "*batch words"]) -> Int[Tensor, "*batch fields"]:
    """The four 16-bit fields of each word, from the low bits, with their low 15 bits (``random_`` leaves a
    word's top bit 0): a free int16 view, or under ``torch.func.vmap`` the same fields shifted out (torch 2.11,
    the GPU machine's, has no vmap rule for a dtype view; 2.13 has)."""
    if torch._C._functorch.is_batchedtensor(words):
        shifts = torch.arange(0, 64, 16, device=words.device)
        return ((words.unsqueeze(-1) >> shifts) & 0x7FFF).flatten(-2)
    return words.view(torch.int16) & 0x7FFF


class Dropout(nn.Dropout):
    """`nn.Dropout` with the cheaper mask of `dropout` (same ``p`` attribute and state dict)."""

    @no_type_check  # hot, called once or twice a layer: the tests check its callers (docs/testing.md)
    def forward(self, x: Float[Tensor, ...]) -> Float[Tensor, ...]:
        return dropout(x, self.p, self.training)
