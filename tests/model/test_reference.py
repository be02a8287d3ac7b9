"""The reference nn.Transformer module: layout, size, and its decoding loop."""

from __future__ import annotations

import dataclasses

import torch

from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.vocab import EOS, PAD, VOCAB_SIZE
from lsa_interp.model.reference import ReferenceTransformer, reference_greedy_decode, save_reference_checkpoint


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


def test_a_reference_checkpoint_has_the_authors_layout(small_cfg, tmp_path):
    reference = ReferenceTransformer(dataclasses.replace(small_cfg, dropout=0.25))
    save_reference_checkpoint(reference, tmp_path / "ref.pt", val_acc_hist=[0.5])
    payload = torch.load(tmp_path / "ref.pt", weights_only=True)
    assert sorted(payload) == ["loss_hist", "mlc_config", "net_state_dict", "train_config", "val_acc_hist"]
    cfg = reference.cfg
    assert payload["mlc_config"] == {"emb_size": cfg.d_model, "nhead": cfg.n_heads, "dim_feedforward": cfg.d_mlp}
    assert payload["train_config"] == {"dropout": 0.25, "vocab_size": VOCAB_SIZE}
    assert payload["loss_hist"] == [] and payload["val_acc_hist"] == [0.5]
    assert payload["net_state_dict"].keys() == reference.state_dict().keys()


def test_the_reference_layer_norms_take_the_configured_epsilon(small_cfg):
    reference = ReferenceTransformer(dataclasses.replace(small_cfg, ln_eps=1e-3))
    norms = [m for m in reference.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) > 4 and {m.eps for m in norms} == {1e-3}
