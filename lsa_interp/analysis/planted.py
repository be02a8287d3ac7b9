"""A tiny encoder-decoder with hand-set weights and a known circuit, for testing the head analyses.

The model (`planted_model`) answers every 1-shot task with the first letter of its example output, read
through a planted matching head, so the effect of patching any head is known in advance:

- encoder layer 1: nothing (its heads are near-uniform and write nothing);
- encoder layer 2, head 3 (`PLANTED_HEAD`, the planted matching head): every letter attends to the same
  letter in the alphabet (the earliest occurrence of its letter) and writes that letter into a READ
  subspace; ``matching=False`` makes it a near-uniform head that writes nothing instead;
- encoder layer 3, head 1 (`READOUT_HEAD`): every position attends to the next position and copies its
  READ letter into an ANSWER subspace, so the ``>`` token holds what the planted head read at the first
  example-output letter;
- the decoder's first step attends to ``>`` and emits its ANSWER letter; the next step emits EOS.

So the clean answer is ``task.examples[0][1][0]`` (`planted_answer`), and if the planted head's pattern at
the first example-output position points at the alphabet position of letter ``x``, the answer is ``x``.
Every other head is near-uniform with zero value weights, so patching it changes nothing.

Features live in disjoint residual dimensions, each with a mirror dimension of opposite sign, so every
position's residual has mean 0 and the same norm and the post-LN LayerNorms are the same rescaling at
every position. Positions use a hand-made table (`position_table`) in place of the sinusoidal one:
a "clock" of four frequencies (shifting by one position is a rotation) and a slow angle that decreases
with position (to prefer the earliest occurrence).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.data.task import Task
from lsa_interp.data.vocab import ARROW, EOS, N_LETTERS, PAD, SEP, VOCAB_SIZE
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import HookedEncoderDecoder

PLANTED_CONFIG = ModelConfig(
    d_model=128, n_heads=4, n_encoder_layers=3, n_decoder_layers=1, d_mlp=8, dropout=0.0, max_len=64
)
"""Three encoder layers of four 32-wide heads (12 encoder heads), one decoder layer, 64 positions."""
PLANTED_HEAD = Head("encoder", 1, 2)
"""The planted matching head, ``"2.3"``."""
READOUT_HEAD = Head("encoder", 2, 0)
"""The next-position head that carries the planted head's read at the first example-output letter to ``>``."""

_TOK, _TOK_M = 0, 30
_CLOCK, _CLOCK_M = 31, 39
_SLOW, _SLOW_M = 47, 49
_READ, _READ_M = 51, 77
_ANSWER, _ANSWER_M = 78, 104
_GO, _STOP = 105, 106
_CLOCK_FREQS = (9, 10, 13, 15)
"""Clock frequencies (cycles per 64 positions): sum_f cos(w_f d) is at most 4 - 2.2 for any shift d != 0."""
_A_TOK, _A_POS = 8.0, 2.0
_SCALE = {"match": 9.0, "earliest": 860.0, "next": 45.0, "arrow": 30.0, "unembed": 1.0, "eos": 10.0}


def planted_answer(task: Task) -> str:
    """What `planted_model` answers: the first letter of the task's (first) example output."""
    return task.examples[0][1][0]


def position_table() -> Float[Tensor, "max_len d_model"]:
    """The planted model's position table (64 rows): clock cos/sin pairs and the slow angle, with mirrors."""
    max_len, d_model = PLANTED_CONFIG.max_len, PLANTED_CONFIG.d_model
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    omega = torch.tensor(_CLOCK_FREQS, dtype=torch.float64) * (2 * math.pi / max_len)
    clock = torch.stack([torch.cos(position * omega), torch.sin(position * omega)], dim=-1).flatten(1)
    slow = torch.cat([torch.cos(position * math.pi / max_len), torch.sin(position * math.pi / max_len)], dim=1)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, _CLOCK:_CLOCK_M], table[:, _CLOCK_M:_SLOW] = clock, -clock
    table[:, _SLOW:_SLOW_M], table[:, _SLOW_M:_READ] = slow, -slow
    return (_A_POS * table).float()


def planted_model(matching: bool = True, seed: int = 0) -> HookedEncoderDecoder:
    """Build the planted model (eval mode); ``matching=False`` leaves out the matching head.

    The heads that carry no circuit get small random query/key weights from ``seed`` (near-uniform
    patterns) and zero value weights.
    """
    cfg = PLANTED_CONFIG
    model = HookedEncoderDecoder(cfg, metadata={"planted": {"matching_head": PLANTED_HEAD.label if matching else None}})
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(
                torch.ones_like(param)
                if name.endswith(("ln1.weight", "ln2.weight", "ln3.weight", "ln_final.weight"))
                else torch.zeros_like(param)
            )
        model.pos_embedding.copy_(position_table())
        d = cfg.d_model
        for stack in (model.encoder, model.decoder):
            for layer in stack.layers():
                for attn in [layer.attn] + ([layer.cross_attn] if hasattr(layer, "cross_attn") else []):
                    attn.in_proj_weight[: 2 * d] = 0.02 * torch.randn(2 * d, d, generator=generator)
        _embeddings(model)
        if matching:
            _matching_head(model.encoder[PLANTED_HEAD.layer].attn, PLANTED_HEAD.head)
        _readout_head(model.encoder[READOUT_HEAD.layer].attn, READOUT_HEAD.head)
        _decoder(model)
    return model.eval()


def _embeddings(model: HookedEncoderDecoder) -> None:
    """Token one-hots with a shared mirror; the decoder embeds ``>`` as GO and every other token as STOP."""
    enc, dec = model.encoder.embed.weight, model.decoder.embed.weight
    for token in range(VOCAB_SIZE):
        enc[token, _TOK + token] = _A_TOK
        dec[token, _GO if token == ARROW else _STOP] = _A_TOK
    enc[:, _TOK_M] = dec[:, _TOK_M] = -_A_TOK


def _block(attn, index: int, head: int) -> Tensor:
    """The ``[d_head, d_model]`` rows of ``in_proj_weight`` of Q (0), K (1) or V (2) for one head."""
    d, dh = attn.d_model, attn.d_head
    return attn.in_proj_weight[index * d + head * dh : index * d + (head + 1) * dh]


def _bias(attn, index: int, head: int) -> Tensor:
    d, dh = attn.d_model, attn.d_head
    return attn.in_proj_bias[index * d + head * dh : index * d + (head + 1) * dh]


def _write(attn, head: int, first: int, count: int, mirror: int) -> None:
    """Route head dims ``0..count-1`` to residual dims ``first..`` and head dim ``count`` to ``mirror``."""
    cols = slice(head * attn.d_head, head * attn.d_head + count)
    attn.out_proj.weight[first : first + count, cols] = torch.eye(count)
    attn.out_proj.weight[mirror, head * attn.d_head + count] = 1.0


def _matching_head(attn, head: int) -> None:
    """Letters match letters (query = key = letter one-hot); the key's slow cosine favours earlier positions."""
    q, k, v = (_block(attn, i, head) for i in range(3))
    q.zero_(), k.zero_()
    eye = torch.eye(N_LETTERS)
    q[:N_LETTERS, _TOK : _TOK + N_LETTERS] = _SCALE["match"] * eye
    k[:N_LETTERS, _TOK : _TOK + N_LETTERS] = _SCALE["match"] * eye
    _bias(attn, 0, head)[N_LETTERS] = _SCALE["earliest"]
    k[N_LETTERS, _SLOW] = 1.0
    v[:N_LETTERS, _TOK : _TOK + N_LETTERS] = eye
    v[N_LETTERS, _TOK_M] = 1.0
    _write(attn, head, _READ, N_LETTERS, _READ_M)


def _readout_head(attn, head: int) -> None:
    """Query = the clock rotated one position ahead, key = the clock: attend to the next position."""
    q, k, v = (_block(attn, i, head) for i in range(3))
    q.zero_(), k.zero_()
    for f, cycles in enumerate(_CLOCK_FREQS):
        w = cycles * 2 * math.pi / PLANTED_CONFIG.max_len
        rows = slice(2 * f, 2 * f + 2)
        dims = slice(_CLOCK + 2 * f, _CLOCK + 2 * f + 2)
        q[rows, dims] = _SCALE["next"] * torch.tensor([[math.cos(w), -math.sin(w)], [math.sin(w), math.cos(w)]])
        k[rows, dims] = torch.eye(2)
    v[:N_LETTERS, _READ : _READ + N_LETTERS] = torch.eye(N_LETTERS)
    v[N_LETTERS, _READ_M] = 1.0
    _write(attn, head, _ANSWER, N_LETTERS, _ANSWER_M)


def _decoder(model: HookedEncoderDecoder) -> None:
    """Cross-attention head 1 reads ``>``'s ANSWER; the unembedding maps ANSWER to letters and STOP to EOS."""
    cross = model.decoder[0].cross_attn
    q, k, v = (_block(cross, i, 0) for i in range(3))
    q.zero_(), k.zero_()
    _bias(cross, 0, 0)[0] = _SCALE["arrow"]
    k[0, _TOK + ARROW] = 1.0
    v[:N_LETTERS, _ANSWER : _ANSWER + N_LETTERS] = torch.eye(N_LETTERS)
    v[N_LETTERS, _ANSWER_M] = 1.0
    _write(cross, 0, _ANSWER, N_LETTERS, _ANSWER_M)
    unembed = model.unembed
    unembed.weight[:N_LETTERS, _ANSWER : _ANSWER + N_LETTERS] = _SCALE["unembed"] * torch.eye(N_LETTERS)
    unembed.weight[EOS, _STOP] = _SCALE["eos"]
    unembed.bias[[SEP, PAD, ARROW]] = -1e3
