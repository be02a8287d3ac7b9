"""The nnsight engine of attention-pattern patching: nnsight 0.8 traces the hooked model (as the paper did).

nnsight wraps every module of the model it is given, and for good, which would switch the attention of
the caller's model off its fused path; so the engine traces a deep copy (`lsa_interp.model.tracing.traced`).
Inside a trace, modules are requested in execution order (encoder layers first, then the encoder output,
then the result), as nnsight 0.8 requires. Only the encoder is patched, which runs once per ``generate``, so
no decoder step is addressed and no ``tracer.iter`` range is needed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.analysis.pattern_patches import LayerPatches, replace_heads
from lsa_interp.data.tokenizer import TokenBatch
from lsa_interp.model.hooked import HookedEncoderDecoder


class NNsightEngine:
    """Patching with nnsight on a copy of ``model`` (see `lsa_interp.analysis.pattern_patches.Engine`)."""

    def __init__(self, model: HookedEncoderDecoder, max_new_tokens: int) -> None:
        from lsa_interp.model.tracing import traced

        self.wrapped = traced(model)
        self.max_new_tokens = max_new_tokens

    def _pattern(self, layer: int):
        return getattr(self.wrapped.encoder, str(layer)).attn.hook_pattern

    def patterns(self, batch: TokenBatch, layers: Sequence[int]) -> dict[int, Float[Tensor, "batch head q_pos k_pos"]]:
        """The encoder attention patterns of ``layers`` on ``batch``, read through the nnsight trace."""
        saved: dict[int, Tensor] = {}
        with torch.no_grad(), self.wrapped.trace(batch):
            for layer in sorted(layers):
                saved[layer] = self._pattern(layer).output.save()
        return saved

    def generate(
        self, batch: TokenBatch, patches: LayerPatches
    ) -> tuple[Int[Tensor, "batch n"], Float[Tensor, "batch src_pos d_model"]]:
        """Greedy tokens and the encoder output of ``batch`` with the ``patches`` set on the traced pattern hooks."""
        with torch.no_grad(), self.wrapped.trace(batch, fn="generate", max_new_tokens=self.max_new_tokens) as tracer:
            for layer in sorted(patches):
                envoy = self._pattern(layer)
                envoy.output = replace_heads(envoy.output, patches[layer])
            memory = self.wrapped.encoder.ln_final.hook_out.output.save()
            tokens = tracer.result.save()
        return tokens, memory
