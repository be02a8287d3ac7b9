"""ActivationCache: stack-aware accessors, plain keys, errors, device moves."""

from __future__ import annotations

import pytest
import torch

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
