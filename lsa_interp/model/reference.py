"""The reference architecture as a plain `nn.Transformer` module, with the reference's module names.

This is the layout of the authors' checkpoints (``net_state_dict`` keys ``input_embedding.weight``,
``output_embedding.weight``, ``positional_encoding.pos_embedding``, ``transformer.*``, ``out.*``). It is
used to check the hooked model against ``torch.nn.Transformer``, to benchmark it, and to write
reference-format checkpoints for tests. The positional table is stored as a ``[1, max_len, d_model]``
buffer (batch-first); the converter also accepts ``[max_len, 1, d_model]`` and ``[max_len, d_model]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from lsa_interp.data.vocab import ARROW, EOS, PAD, VOCAB_SIZE
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.layers import sinusoidal_table


class ReferencePositionalEncoding(nn.Module):
    """Adds the sinusoidal table (buffer ``pos_embedding`` of shape ``[1, max_len, d_model]``), then dropout."""

    def __init__(self, d_model: int, max_len: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", sinusoidal_table(max_len, d_model)[None])

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        return self.dropout(x + self.pos_embedding[:, : x.shape[1]])


class ReferenceTransformer(nn.Module):
    """The paper's model built from ``torch.nn.Transformer``, with the reference's module names."""

    def __init__(self, cfg: ModelConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or ModelConfig()
        self.cfg = cfg
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.output_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positional_encoding = ReferencePositionalEncoding(cfg.d_model, cfg.max_len, cfg.dropout)
        self.transformer = nn.Transformer(
            d_model=cfg.d_model,
            nhead=cfg.n_heads,
            num_encoder_layers=cfg.n_encoder_layers,
            num_decoder_layers=cfg.n_decoder_layers,
            dim_feedforward=cfg.d_mlp,
            dropout=cfg.dropout,
            activation="gelu",
            layer_norm_eps=cfg.ln_eps,
            batch_first=True,
        )
        self.out = nn.Linear(cfg.d_model, cfg.vocab_size)

    def encode(self, src: Int[Tensor, "batch src_pos"]) -> Float[Tensor, "batch src_pos d_model"]:
        """Return the encoder output (after the final encoder norm)."""
        x = self.positional_encoding(self.input_embedding(src))
        return self.transformer.encoder(x, src_key_padding_mask=src == PAD)

    def decode(
        self,
        tgt: Int[Tensor, "batch tgt_pos"],
        memory: Float[Tensor, "batch src_pos d_model"],
        src_pad: Bool[Tensor, "batch src_pos"],
        mask_tgt_pad: bool = True,
    ) -> Float[Tensor, "batch tgt_pos vocab"]:
        """Return the decoder logits for decoder input ``tgt`` (causal; PAD keys masked if ``mask_tgt_pad``)."""
        y = self.positional_encoding(self.output_embedding(tgt))
        n = tgt.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=tgt.device).triu_(1)
        out = self.transformer.decoder(
            y,
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=(tgt == PAD) if mask_tgt_pad else None,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return self.out(out)

    def forward(
        self, src: Int[Tensor, "batch src_pos"], tgt: Int[Tensor, "batch tgt_pos"]
    ) -> Float[Tensor, "batch tgt_pos vocab"]:
        """Return teacher-forced logits."""
        return self.decode(tgt, self.encode(src), src == PAD)


@torch.no_grad()
def reference_greedy_decode(
    model: ReferenceTransformer, src: Int[Tensor, "batch src_pos"], n_steps: int
) -> Int[Tensor, "batch n_steps"]:
    """The reference's decoding loop: re-run the whole decoder on ``>`` + the tokens so far, ``n_steps`` times.

    Returns the generated tokens with everything after each row's first EOS set to PAD.
    """
    memory = model.encode(src)
    tgt = torch.full((src.shape[0], 1), ARROW, dtype=torch.long, device=src.device)
    for _ in range(n_steps):
        next_token = model.decode(tgt, memory, src == PAD, mask_tgt_pad=False)[:, -1].argmax(-1)
        tgt = torch.cat([tgt, next_token[:, None]], dim=1)
    out = tgt[:, 1:]
    after_eos = (out == EOS).long().cumsum(1) - (out == EOS).long() > 0
    return out.masked_fill(after_eos, PAD)


def save_reference_checkpoint(model: ReferenceTransformer, path: str | Path, **extra: Any) -> None:
    """Write ``model`` in the reference checkpoint layout (``net_state_dict`` plus configs and histories)."""
    cfg = model.cfg
    payload = {
        "net_state_dict": model.state_dict(),
        "mlc_config": {"emb_size": cfg.d_model, "nhead": cfg.n_heads, "dim_feedforward": cfg.d_mlp},
        "train_config": {"dropout": cfg.dropout, "vocab_size": VOCAB_SIZE},
        "loss_hist": [],
        "val_acc_hist": [],
        **extra,
    }
    torch.save(payload, Path(path))
