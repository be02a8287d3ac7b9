"""Attention: hook detection, the fused vs explicit paths, the key/value cache, per-head weight views."""

from __future__ import annotations

import pytest
import torch
from jaxtyping import TypeCheckError

from lsa_interp.model import ModelConfig
from lsa_interp.model.attention import Attention, KVCache, is_hooked
from lsa_interp.model.inputs import causal_mask, key_mask

CFG = ModelConfig(d_model=16, n_heads=4, d_mlp=32, dropout=0.0)


@pytest.fixture
def attn() -> Attention:
    torch.manual_seed(0)
    module = Attention(CFG)
    torch.nn.init.normal_(module.in_proj_weight)
    torch.nn.init.normal_(module.in_proj_bias)
    return module.eval()


def test_is_hooked_sees_every_kind_of_hook(attn):
    points = attn._hook_points
    assert not is_hooked(points)
    handle = attn.hook_z.register_forward_hook(lambda *args: None)
    assert is_hooked(points)
    handle.remove()
    attn.hook_pattern.add_hook(lambda tensor, hook: None)
    assert is_hooked(points)
    attn.hook_pattern.remove_hooks()
    attn.hook_q.__dict__["forward"] = lambda x: x  # what nnsight installs on wrapped modules
    assert is_hooked(points)
    del attn.hook_q.__dict__["forward"]
    global_handle = torch.nn.modules.module.register_module_forward_hook(lambda *args: None)
    assert is_hooked(points)
    global_handle.remove()
    assert not is_hooked(points)


@pytest.mark.parametrize("cross", [False, True])
def test_fused_and_explicit_paths_agree(cross):
    torch.manual_seed(1)
    module = Attention(CFG, cross=cross).eval()
    torch.nn.init.normal_(module.in_proj_bias)
    x, source = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    pad = torch.zeros(3, 7 if cross else 5, dtype=torch.bool)
    pad[0, -2:] = True
    mask = key_mask(pad, x.dtype) if cross else causal_mask(pad, x.dtype)
    fused = module(x, source if cross else None, mask)
    module.hook_z.add_hook(lambda tensor, hook: None)
    explicit = module(x, source if cross else None, mask)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=0)


def test_incremental_self_attention_matches_causal_attention(attn):
    x = torch.randn(2, 6, 16)
    full = attn(x, mask=causal_mask(torch.zeros(2, 6, dtype=torch.bool), x.dtype))
    cache = KVCache.empty(2, 4, 6, 4, like=x)
    steps = [attn(x[:, i : i + 1], cache=cache) for i in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert cache.length == 6
    with pytest.raises(IndexError, match="holds 6 positions"):
        cache.append(torch.zeros(2, 4, 1, 4), torch.zeros(2, 4, 1, 4))


def test_cross_attention_with_precomputed_keys(attn):
    torch.manual_seed(2)
    cross = Attention(CFG, cross=True).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 7, 16)
    mask = key_mask(torch.tensor([[False] * 7, [False] * 5 + [True] * 2]), x.dtype)
    cache = cross.precompute_kv(memory)
    torch.testing.assert_close(cross(x, None, mask, cache=cache), cross(x, memory, mask), atol=1e-6, rtol=0)
    kept = cache.select(torch.tensor([1]))
    assert kept.keys.shape == (1, 4, 7, 4) and torch.equal(kept.values[0], cache.values[1])


def test_per_head_weight_views_have_transformer_lens_shapes(attn):
    assert attn.W_Q.shape == attn.W_K.shape == attn.W_V.shape == (4, 16, 4)
    assert attn.W_O.shape == (4, 4, 16)
    x = torch.randn(1, 2, 16)
    q = attn._project(x, 0, 1)[:, :, 0]
    manual = torch.einsum("bpd,hde->bphe", x, attn.W_Q) + attn.in_proj_bias[:16].view(4, 4)
    torch.testing.assert_close(q, manual, atol=1e-5, rtol=0)


def test_shapes_are_checked_at_runtime(attn):
    """The test suite runs lsa_interp.model under jaxtyping + beartype: a wrong shape raises."""
    with pytest.raises(TypeCheckError):
        attn(torch.randn(2, 5, 16), mask=torch.zeros(3, 1, 1, 5))


@pytest.mark.parametrize(
    "register",
    [
        lambda hp: hp.register_forward_pre_hook(lambda *args: None),
        lambda hp: hp.register_full_backward_hook(lambda *args: None),
        lambda hp: hp.register_full_backward_pre_hook(lambda *args: None),
    ],
    ids=["forward_pre", "backward", "backward_pre"],
)
def test_is_hooked_sees_pre_and_backward_hooks_on_one_point(attn, register):
    """A forward-pre, backward or backward-pre hook on any single hook point marks the module as hooked."""
    points = attn._hook_points
    handle = register(attn.hook_v)
    assert is_hooked(points) and is_hooked([attn.hook_v]) and not is_hooked([attn.hook_q])
    handle.remove()
    assert not is_hooked(points)


@pytest.mark.parametrize(
    "register",
    [
        lambda: torch.nn.modules.module.register_module_forward_pre_hook(lambda *args: None),
        lambda: torch.nn.modules.module.register_module_full_backward_hook(lambda *args: None),
        lambda: torch.nn.modules.module.register_module_full_backward_pre_hook(lambda *args: None),
    ],
    ids=["forward_pre", "backward", "backward_pre"],
)
def test_is_hooked_sees_global_pre_and_backward_hooks(register):
    """Global module hooks of every kind (they run on every module) count as hooks, even with no hook points."""
    assert not is_hooked([])
    handle = register()
    try:
        assert is_hooked([])
    finally:
        handle.remove()
    assert not is_hooked([])


def test_new_attention_has_xavier_weights_and_zero_biases():
    """A fresh module is initialised as nn.MultiheadAttention: Xavier-uniform in_proj, zero in/out biases."""
    torch.manual_seed(3)
    module = Attention(ModelConfig(d_model=64, n_heads=4))
    bound = (6 / (64 + 3 * 64)) ** 0.5
    weight = module.in_proj_weight
    assert weight.abs().max() <= bound and weight.abs().max() > 0.95 * bound
    assert abs(weight.std().item() - bound / 3**0.5) < 0.05 * bound
    assert torch.equal(module.in_proj_bias, torch.zeros(3 * 64))
    assert torch.equal(module.out_proj.bias, torch.zeros(64))


def test_one_query_position_skips_the_fused_kernel_and_several_use_it(attn, monkeypatch):
    """Without hooks, a single query position (a decoding step) is computed explicitly; longer queries are fused."""
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional,
        "scaled_dot_product_attention",
        lambda *a, **k: calls.append(a[0].shape) or original(*a, **k),
    )
    one, two = torch.randn(2, 1, 16), torch.randn(2, 2, 16)
    with torch.no_grad():
        attn(one)
        assert calls == []
        attn(two)
        assert len(calls) == 1
        attn.train()
        attn(two)
    assert len(calls) == 1


def test_filled_and_selected_caches_report_their_length():
    """A cache filled from k/v holds all their positions; selecting rows keeps the length."""
    torch.manual_seed(4)
    cross = Attention(CFG, cross=True).eval()
    cache = cross.precompute_kv(torch.randn(3, 7, 16))
    assert cache.length == 7 and cache.keys.shape == (3, 4, 7, 4)
    assert cache.select(torch.tensor([True, False, True])).length == 7
    grown = KVCache.empty(2, 4, 5, 4, like=torch.zeros(1))
    grown.append(torch.zeros(2, 4, 2, 4), torch.zeros(2, 4, 2, 4))
    assert grown.select(torch.tensor([1])).length == 2


def _with_result_hook_and_random_biases() -> Attention:
    torch.manual_seed(5)
    module = Attention(ModelConfig(d_model=16, n_heads=4, d_mlp=32, dropout=0.0, use_hook_result=True)).eval()
    torch.nn.init.normal_(module.in_proj_bias)
    torch.nn.init.normal_(module.out_proj.bias)
    return module


def test_per_head_results_plus_the_output_bias_give_the_output():
    """With ``use_hook_result`` and a hook attached, hook_result summed over heads plus out_proj.bias is the output."""
    module = _with_result_hook_and_random_biases()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        plain = module(x)
        seen = {}
        module.hook_result.add_hook(lambda tensor, hook: seen.setdefault("result", tensor))
        hooked = module(x)
    assert seen["result"].shape == (2, 5, 4, 16)
    torch.testing.assert_close(hooked, plain, atol=1e-5, rtol=0)
    torch.testing.assert_close(seen["result"].sum(dim=2) + module.out_proj.bias, plain, atol=1e-5, rtol=0)


def test_use_hook_result_costs_nothing_without_hooks():
    """Without hooks, ``use_hook_result`` leaves the explicit path's output bit-identical (no per-head split)."""
    module = _with_result_hook_and_random_biases()
    plain = Attention(ModelConfig(d_model=16, n_heads=4, d_mlp=32, dropout=0.0)).eval()
    plain.load_state_dict(module.state_dict())
    one = torch.randn(3, 1, 16)
    with torch.no_grad():
        assert torch.equal(module(one), plain(one))


def test_attention_weights_are_dropped_in_training_only():
    """In training, dropout (cfg.dropout) applies to the attention pattern; in eval mode it does not."""
    torch.manual_seed(6)
    module = Attention(ModelConfig(d_model=16, n_heads=4, d_mlp=32, dropout=0.5))
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        evaluated = module.eval()(x)
        trained = module.train()(x)
        module.dropout_p = 0.0
        undropped = module(x)
    assert not torch.allclose(trained, evaluated, atol=1e-3)
    torch.testing.assert_close(undropped, evaluated, atol=1e-5, rtol=0)
