"""Post-LN encoder and decoder layers and stacks with TransformerLens hook points.

Post-LN as in ``nn.Transformer``: each sub-block computes ``norm(x + dropout(sublayer(x)))``. The norm's
input (the un-normalised sum) passes through ``ln*.hook_in``; its output is the next residual hook
(``hook_resid_mid``, ``hook_resid_mid_cross`` in the decoder, ``hook_resid_post``).
"""

from __future__ import annotations

import math
from typing import no_type_check

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from lsa_interp.model.attention import Attention, KVCache
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.dropout import Dropout


def sinusoidal_table(max_len: int, d_model: int) -> Float[Tensor, "max_len d_model"]:
    """Return the standard sinusoidal position table (base 10000; sin on even dims, cos on odd dims)."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table.float()


class Norm(nn.Module):
    """LayerNorm with a hook on its input (``hook_in``) or on its output (``hook_out``)."""

    def __init__(self, cfg: ModelConfig, hook_in: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(cfg.d_model))
        self.bias = nn.Parameter(torch.zeros(cfg.d_model))
        self.eps = cfg.ln_eps
        self.hooks_input = hook_in
        if hook_in:
            self.hook_in = HookPoint()
        else:
            self.hook_out = HookPoint()

    @no_type_check  # hot, called two or three times a layer: the tests check its callers (docs/testing.md)
    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        """Return the layer-normalised ``x``."""
        if self.hooks_input:
            return F.layer_norm(self.hook_in(x), x.shape[-1:], self.weight, self.bias, self.eps)
        return self.hook_out(F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps))


class MLP(nn.Module):
    """``fc_out(dropout(gelu(fc_in(x))))`` with hooks on the pre- and post-activation."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc_in = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()
        self.dropout = Dropout(cfg.dropout)
        self.fc_out = nn.Linear(cfg.d_mlp, cfg.d_model)

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        """Return the MLP output (before the layer's residual dropout)."""
        return self.fc_out(self.dropout(self.hook_post(F.gelu(self.hook_pre(self.fc_in(x))))))


class EncoderLayer(nn.Module):
    """One post-LN encoder layer: self-attention then MLP."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.hook_resid_pre = HookPoint()
        self.attn = Attention(cfg)
        self.dropout_attn = Dropout(cfg.dropout)
        self.hook_attn_out = HookPoint()
        self.ln1 = Norm(cfg)
        self.hook_resid_mid = HookPoint()
        self.mlp = MLP(cfg)
        self.dropout_mlp = Dropout(cfg.dropout)
        self.hook_mlp_out = HookPoint()
        self.ln2 = Norm(cfg)
        self.hook_resid_post = HookPoint()

    def forward(
        self, x: Float[Tensor, "batch pos d_model"], mask: Float[Tensor, "batch 1 1 pos"]
    ) -> Float[Tensor, "batch pos d_model"]:
        """Return the layer output (``hook_resid_post``); ``mask`` is the additive key-padding mask."""
        x = self.hook_resid_pre(x)
        attn_out = self.hook_attn_out(self.dropout_attn(self.attn(x, mask=mask)))
        x = self.hook_resid_mid(self.ln1(x + attn_out))
        mlp_out = self.hook_mlp_out(self.dropout_mlp(self.mlp(x)))
        return self.hook_resid_post(self.ln2(x + mlp_out))


class DecoderLayer(nn.Module):
    """One post-LN decoder layer: causal self-attention, cross-attention to the encoder output, MLP."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.hook_resid_pre = HookPoint()
        self.attn = Attention(cfg)
        self.dropout_attn = Dropout(cfg.dropout)
        self.hook_attn_out = HookPoint()
        self.ln1 = Norm(cfg)
        self.hook_resid_mid = HookPoint()
        self.cross_attn = Attention(cfg, cross=True)
        self.dropout_cross = Dropout(cfg.dropout)
        self.hook_cross_attn_out = HookPoint()
        self.ln2 = Norm(cfg)
        self.hook_resid_mid_cross = HookPoint()
        self.mlp = MLP(cfg)
        self.dropout_mlp = Dropout(cfg.dropout)
        self.hook_mlp_out = HookPoint()
        self.ln3 = Norm(cfg)
        self.hook_resid_post = HookPoint()

    def forward(
        self,
        x: Float[Tensor, "batch pos d_model"],
        memory: Float[Tensor, "batch src_pos d_model"] | None,
        self_mask: Float[Tensor, "batch 1 pos pos"] | None,
        cross_mask: Float[Tensor, "batch 1 1 src_pos"],
        caches: tuple[KVCache, KVCache] | None = None,
    ) -> Float[Tensor, "batch pos d_model"]:
        """Return the layer output.

        ``caches`` (self-attention, cross-attention) switch to incremental decoding of the new positions ``x``
        (then ``memory`` and ``self_mask`` are unused: keys and values come from the caches).
        """
        self_cache, cross_cache = caches if caches is not None else (None, None)
        x = self.hook_resid_pre(x)
        attn_out = self.hook_attn_out(self.dropout_attn(self.attn(x, mask=self_mask, cache=self_cache)))
        x = self.hook_resid_mid(self.ln1(x + attn_out))
        cross = self.cross_attn(x, memory, mask=cross_mask, cache=cross_cache)
        x = self.hook_resid_mid_cross(self.ln2(x + self.hook_cross_attn_out(self.dropout_cross(cross))))
        mlp_out = self.hook_mlp_out(self.dropout_mlp(self.mlp(x)))
        return self.hook_resid_post(self.ln3(x + mlp_out))


class Stack(nn.Module):
    """Embedding, position table, layers ``"0"``, ``"1"``, ... and the final norm of one stack.

    Layers are children named by their index, so hook names read ``encoder.1.attn.hook_pattern``;
    ``stack[i]`` and ``len(stack)`` give the layers.
    """

    def __init__(self, cfg: ModelConfig, decoder: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.hook_embed = HookPoint()
        self.hook_pos_embed = HookPoint()
        self.dropout = Dropout(cfg.dropout)
        layer_cls = DecoderLayer if decoder else EncoderLayer
        self.n_layers = cfg.n_decoder_layers if decoder else cfg.n_encoder_layers
        for index in range(self.n_layers):
            self.add_module(str(index), layer_cls(cfg))
        self.ln_final = Norm(cfg, hook_in=False)

    def __getitem__(self, index: int) -> nn.Module:
        """Return layer ``index`` (negative indices count from the end); raises IndexError."""
        if not -self.n_layers <= index < self.n_layers:
            raise IndexError(f"layer {index} out of range for a stack of {self.n_layers} layers")
        return self._modules[str(index % self.n_layers)]

    def __len__(self) -> int:
        return self.n_layers

    def layers(self) -> list[nn.Module]:
        """Return the layers in order."""
        return [self[i] for i in range(self.n_layers)]

    def embed_tokens(
        self, tokens: Int[Tensor, "batch pos"], pos_table: Float[Tensor, "max_len d_model"], start: int = 0
    ) -> Float[Tensor, "batch pos d_model"]:
        """Return ``dropout(embed(tokens) + pos_table[start:start + pos])`` through the embedding hooks."""
        n_pos = tokens.shape[1]
        if start + n_pos > pos_table.shape[0]:
            raise ValueError(f"position {start + n_pos - 1} exceeds the position table ({pos_table.shape[0]} rows)")
        embed = self.hook_embed(self.embed(tokens))
        # A copy, never a view of the table (`.contiguous()` would return the view itself for a batch of one).
        pos = (
            pos_table[start : start + n_pos]
            .expand(tokens.shape[0], n_pos, -1)
            .clone(memory_format=torch.contiguous_format)
        )
        pos = self.hook_pos_embed(pos)
        return self.dropout(embed + pos)
