"""Greedy decoding: incremental (key/value-cached) decoder steps, or a full decoder re-run per step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from jaxtyping import Int
from torch import Tensor

from lsa_interp.data.vocab import ARROW, EOS, PAD
from lsa_interp.model.inputs import key_mask

if TYPE_CHECKING:
    from lsa_interp.model.hooked import HookedEncoderDecoder

DEFAULT_MAX_NEW_TOKENS = 32
"""The longest answer of the task family is 24 letters (a 7-letter window extended and tripled) + EOS."""


@torch.no_grad()
def greedy_decode(
    model: HookedEncoderDecoder, src: Int[Tensor, "batch src_pos"], max_new_tokens: int, use_cache: bool = True
) -> Int[Tensor, "batch n"]:
    """Greedy-decode from ``>``; return ``[batch, n]`` tokens, EOS included and PAD after each row's EOS.

    Stops once every row has emitted EOS (``n`` <= ``max_new_tokens``). Finished rows keep being computed
    (their outputs are replaced by PAD), so every row sees exactly the inputs a full re-run would see.
    With ``use_cache=False`` the whole decoder is re-run on all tokens so far at every step. Raises
    ValueError when ``max_new_tokens`` is not positive or exceeds the position table.
    """
    if not 0 < max_new_tokens <= model.cfg.max_len:
        raise ValueError(f"max_new_tokens must be in 1..{model.cfg.max_len}, got {max_new_tokens}")
    src_pad = src == PAD
    memory = model.encode(src)
    batch = src.shape[0]
    fed = torch.full((batch, max_new_tokens), ARROW, dtype=torch.long, device=src.device)
    outputs = torch.full((batch, max_new_tokens), PAD, dtype=torch.long, device=src.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    if use_cache:
        cross_mask = key_mask(src_pad, memory.dtype)
        caches = model.new_decoder_caches(memory, max_new_tokens)
    for step in range(max_new_tokens):
        if use_cache:
            logits = model.decode_step(fed[:, step], step, cross_mask, caches)
        else:
            logits = model.decode(fed[:, : step + 1], memory, src_pad, mask_tgt_pad=False)[:, -1]
        token = logits.argmax(-1)
        outputs[:, step] = token.masked_fill(done, PAD)
        done |= token == EOS
        if step + 1 < max_new_tokens:
            fed[:, step + 1] = token
        if bool(done.all()):
            return outputs[:, : step + 1]
    return outputs
