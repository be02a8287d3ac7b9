"""Layers: the position table, norms, stacks and their indexing."""

from __future__ import annotations

import math

import pytest
import torch

from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.layers import Norm, Stack, sinusoidal_table


def test_sinusoidal_table_has_sin_on_even_and_cos_on_odd_dims():
    table = sinusoidal_table(50, 8)
    assert table.shape == (50, 8)
    pos, i = 7, 2
    freq = 1.0 / 10000 ** (2 * i / 8)
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(pos * freq), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos * freq), abs=1e-6)
    assert torch.equal(table[0, 1::2], torch.ones(4))


def test_norm_hooks_its_input_or_its_output():
    cfg = ModelConfig(d_model=8, n_heads=2)
    x = torch.randn(2, 3, 8) * 5 + 2
    seen = {}
    inner, final = Norm(cfg), Norm(cfg, hook_in=False)
    inner.hook_in.add_hook(lambda t, hook: seen.setdefault("in", t))
    final.hook_out.add_hook(lambda t, hook: seen.setdefault("out", t))
    expected = torch.nn.functional.layer_norm(x, (8,), eps=1e-5)
    torch.testing.assert_close(inner(x), expected)
    torch.testing.assert_close(final(x), expected)
    assert torch.equal(seen["in"], x) and torch.equal(seen["out"], expected)
    assert not hasattr(inner, "hook_out") and not hasattr(final, "hook_in")


def test_stack_indexing_and_layer_names():
    model = HookedEncoderDecoder(ModelConfig(d_model=16, n_heads=2, n_encoder_layers=2, n_decoder_layers=3, d_mlp=8))
    assert len(model.encoder) == 2 and len(model.decoder) == 3
    assert model.decoder[-1] is model.decoder[2] is model.mod_dict["decoder.2"]
    assert model.encoder.layers() == [model.encoder[0], model.encoder[1]]
    with pytest.raises(IndexError, match="out of range"):
        model.encoder[2]


def test_embedding_beyond_the_position_table_raises():
    cfg = ModelConfig(d_model=16, n_heads=2, d_mlp=8, max_len=10)
    stack = Stack(cfg, decoder=False)
    table = sinusoidal_table(cfg.max_len, cfg.d_model)
    assert stack.embed_tokens(torch.zeros(1, 10, dtype=torch.long), table).shape == (1, 10, 16)
    with pytest.raises(ValueError, match="exceeds the position table"):
        stack.embed_tokens(torch.zeros(1, 3, dtype=torch.long), table, start=8)


def test_negative_layer_indices_count_from_the_end_down_to_minus_n():
    """``stack[-n]`` is the first layer; ``stack[-n - 1]`` raises IndexError."""
    stack = Stack(ModelConfig(d_model=16, n_heads=2, n_encoder_layers=3, d_mlp=8), decoder=False)
    assert stack[-3] is stack[0] and stack[-2] is stack[1]
    with pytest.raises(IndexError, match="out of range"):
        stack[-4]


@pytest.mark.parametrize("batch", [1, 2])
def test_a_hook_editing_the_position_embedding_in_place_leaves_the_table_alone(batch):
    """``hook_pos_embed`` gets a fresh tensor: editing it in place changes neither the table nor other rows."""
    cfg = ModelConfig(d_model=16, n_heads=2, d_mlp=8, max_len=10)
    stack = Stack(cfg, decoder=False).eval()
    table = sinusoidal_table(cfg.max_len, cfg.d_model)
    original = table.clone()

    def zero(tensor, hook):
        tensor[0].zero_()
        return tensor

    stack.hook_pos_embed.add_hook(zero)
    with torch.no_grad():
        out = stack.embed_tokens(torch.zeros(batch, 4, dtype=torch.long), table, start=2)
    assert torch.equal(table, original)
    torch.testing.assert_close(out[0], stack.embed.weight[0].expand(4, -1))
    if batch > 1:
        torch.testing.assert_close(out[1], stack.embed.weight[0] + table[2:6])


def test_sinusoidal_table_is_the_double_precision_formula_rounded_to_float32():
    """Every entry is sin/cos(pos / 10000^(2i/d)) computed in float64, then rounded once to float32."""
    table = sinusoidal_table(64, 128)
    assert table.dtype == torch.float32
    expected = torch.zeros(64, 128, dtype=torch.float64)
    for pos in range(64):
        for i in range(64):
            angle = pos * math.exp(2 * i * -math.log(10000.0) / 128)
            expected[pos, 2 * i], expected[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    assert torch.equal(table, expected.float())


def test_norm_uses_the_configured_epsilon():
    """``cfg.ln_eps`` is the LayerNorm epsilon, for input-hooked and output-hooked norms alike."""
    cfg = ModelConfig(d_model=8, n_heads=2, ln_eps=1.0)
    x = torch.randn(2, 3, 8) * 0.1
    expected = torch.nn.functional.layer_norm(x, (8,), eps=1.0)
    torch.testing.assert_close(Norm(cfg)(x), expected)
    torch.testing.assert_close(Norm(cfg, hook_in=False)(x), expected)
