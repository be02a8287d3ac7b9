"""ActivationCache: stack-aware accessors, plain keys, errors, device moves."""

from __future__ import annotations

import inspect

import pytest
import torch

from lsa_interp.data.tokenizer import TokenBatch
from lsa_interp.model import ActivationCache


@pytest.fixture(scope="module")
def cache(small_model, make_tasks) -> ActivationCache:
    with torch.no_grad():
        _, cache = small_model.run_with_cache(make_tasks(3, seed=0))
    return cache


def test_stack_aware_accessors_match_plain_keys(cache):
    assert cache.pattern("encoder", 1) is cache["encoder.1.attn.hook_pattern"]
    assert cache.pattern("decoder", 0, "cross_attn") is cache["decoder.0.cross_attn.hook_pattern"]
    assert cache.scores("decoder", -1) is cache["decoder.1.attn.hook_attn_scores"]
    assert cache.resid("encoder", 1, "post") is cache["encoder.1.hook_resid_post"]
    assert cache.resid("decoder", 0, "mid_cross") is cache["decoder.0.hook_resid_mid_cross"]
    assert cache.resid("encoder", -1) is cache["encoder.1.hook_resid_pre"]
    assert cache.hook_name("decoder", 1, "mlp.hook_post") == "decoder.1.mlp.hook_post"


def test_accumulated_resid_stacks_the_stream_between_sub_blocks_in_order(cache, small_model):
    encoder, labels = cache.accumulated_resid("encoder", return_labels=True)
    assert labels == ["embed", "0_post", "1_post"] and encoder.shape == (3, *cache["encoder.0.hook_resid_pre"].shape)
    for part, name in zip(
        encoder, ["encoder.0.hook_resid_pre", "encoder.0.hook_resid_post", "encoder.1.hook_resid_post"]
    ):
        assert torch.equal(part, cache[name])
    assert torch.equal(encoder[1], cache["encoder.1.hook_resid_pre"])  # a layer's output is the next one's input
    decoder, labels = cache.accumulated_resid("decoder", incl_mid=True, return_labels=True)
    assert labels == ["embed", "0_mid", "0_mid_cross", "0_post", "1_mid", "1_mid_cross", "1_post"]
    assert torch.equal(decoder[5], cache["decoder.1.hook_resid_mid_cross"]) and decoder.shape[0] == 7
    assert torch.equal(cache.accumulated_resid("decoder"), decoder[[0, 3, 6]])
    with torch.no_grad():
        _, partial = small_model.run_with_cache(small_model.to_tokens("abcdefghijklmnopqrstuvwxyz | ab > ac | cd"),
                                                names_filter=lambda name: name.endswith("resid_post"))  # fmt: skip
    with pytest.raises(KeyError, match="'encoder.0.hook_resid_pre' is not in the cache"):
        partial.accumulated_resid("encoder")
    with pytest.raises(ValueError, match="unknown stack 'enc'"):
        cache.accumulated_resid("enc")


def test_mapping_protocol(cache, small_model):
    assert len(cache) == len(small_model.hook_names())
    assert list(cache) == list(cache.keys()) == small_model.hook_names()
    assert "encoder.hook_embed" in cache and "encoder.9.hook_resid_pre" not in cache
    name, tensor = next(iter(cache.items()))
    assert tensor is cache[name]
    assert "ActivationCache(" in repr(cache) and "batch=3" in repr(cache)


@pytest.mark.parametrize(
    "call,error,message",
    [
        (lambda c: c.pattern("encoder", 0, "cross_attn"), ValueError, "unknown attention kind"),
        (lambda c: c.resid("encoder", 0, "mid_cross"), ValueError, "unknown residual kind"),
        (lambda c: c.resid("middle", 0), ValueError, "unknown stack"),
        (lambda c: c.pattern("encoder", 2), IndexError, "out of range"),
        (lambda c: c["encoder.0.attn.hook_result"], KeyError, "not in the cache"),
        (lambda c: c["pattern", 0], KeyError, "full hook names such as 'encoder.1.attn.hook_pattern'"),
    ],
)
def test_errors_are_clear(cache, call, error, message):
    with pytest.raises(error, match=message):
        call(cache)


def test_missing_hook_names_similar_cached_hooks(small_model, make_tasks):
    _, partial = small_model.run_with_cache(make_tasks(1), names_filter=lambda n: n.endswith("hook_pattern"))
    with pytest.raises(KeyError, match=r"not in the cache \(6 hooks cached\)"):
        partial["encoder.0.attn.hook_z"]
    with pytest.raises(KeyError, match="cached hooks ending in 'hook_pattern'"):
        partial["encoder.7.attn.hook_pattern"]


def test_to_returns_a_new_cache(cache):
    moved = cache.to("cpu")
    assert moved is not cache and moved.keys() == cache.keys()
    assert torch.equal(moved.inputs.src, cache.inputs.src)


def test_to_moves_every_tensor_and_the_inputs_and_keeps_the_config(cache):
    moved = cache.to("meta")
    assert all(tensor.device.type == "meta" for tensor in moved.values())
    assert moved.inputs.src.device.type == "meta" and moved.cfg is cache.cfg
    assert moved.pattern("encoder", 0).shape == cache.pattern("encoder", 0).shape
    bare = ActivationCache(dict(cache.items()), cache.cfg).to("meta")
    assert bare.inputs is None and "batch=None" in repr(bare)


def test_a_dtype_converts_the_activations_and_leaves_the_token_ids(cache):
    half = cache.to(torch.float16)
    assert all(tensor.dtype == torch.float16 for tensor in half.values())
    assert half.inputs is cache.inputs and half.inputs.src.dtype == torch.long
    torch.testing.assert_close(half.pattern("encoder", 0).float(), cache.pattern("encoder", 0), atol=1e-3, rtol=0)
    with pytest.raises(TypeError, match=r"^a TokenBatch holds token ids: move it to a device, not to torch.float16$"):
        inspect.unwrap(TokenBatch.to)(cache.inputs, torch.float16)


def test_negative_layers_reach_the_first_layer(cache):
    assert cache.hook_name("encoder", -2, "hook_resid_pre") == "encoder.0.hook_resid_pre"
    with pytest.raises(IndexError, match="out of range"):
        cache.hook_name("encoder", -3, "hook_resid_pre")


def test_the_hint_lists_six_similar_hooks_and_a_name_without_dots_is_a_key_error(cache):
    many = ActivationCache({f"encoder.{i}.hook_x": torch.zeros(1) for i in range(9)}, cache.cfg)
    with pytest.raises(KeyError) as error:
        many["decoder.0.hook_x"]
    assert str(error.value).count("hook_x'") == 2 + 6  # the name, the tail, six of the nine
    with pytest.raises(KeyError, match="'hook_x' is not in the cache"):
        many["hook_x"]
