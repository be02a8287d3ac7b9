"""The reference nn.Transformer module: layout, size, and its decoding loop."""

from __future__ import annotations

import torch

from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.vocab import EOS, PAD
from lsa_interp.model.reference import ReferenceTransformer, reference_greedy_decode


def test_reference_has_the_papers_size_and_names():
    reference = ReferenceTransformer()
    assert sum(p.numel() for p in reference.parameters()) == 1_400_606
    state = reference.state_dict()
    assert state["positional_encoding.pos_embedding"].shape == (1, 512, 128)
    assert "transformer.decoder.layers.2.multihead_attn.in_proj_weight" in state
    assert "out.bias" in state and "transformer.encoder.norm.weight" in state


def test_reference_decoding_pads_after_eos(small_cfg, make_tasks):
    torch.manual_seed(0)
    reference = ReferenceTransformer(small_cfg).eval()
    with torch.no_grad():
        reference.out.bias[EOS] += 0.3
    tokens = reference_greedy_decode(reference, encode_tasks(make_tasks(40)).src, n_steps=12)
    assert tokens.shape == (40, 12) and (tokens == EOS).any()
    for row in tokens.tolist():
        if EOS in row:
            assert all(token == PAD for token in row[row.index(EOS) + 1 :])
