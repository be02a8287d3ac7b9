"""ModelConfig: defaults, validation, round trip."""

from __future__ import annotations

import pytest

from lsa_interp.model import ModelConfig


def test_defaults_are_the_papers_model():
    cfg = ModelConfig()
    assert (cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_mlp) == (128, 8, 3, 3, 512)
    assert (cfg.dropout, cfg.vocab_size, cfg.ln_eps, cfg.d_head) == (0.1, 30, 1e-5, 16)
    assert cfg.n_layers("encoder") == 3
    with pytest.raises(ValueError, match="unknown stack"):
        cfg.n_layers("middle")


def test_round_trip_and_unknown_keys():
    cfg = ModelConfig(d_model=64, n_heads=4, use_hook_result=True)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown model config key"):
        ModelConfig.from_dict({**cfg.to_dict(), "n_layers": 2})


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"d_model": 100, "n_heads": 8}, "not divisible"),
        ({"max_len": 0}, "max_len must be positive"),
        ({"n_decoder_layers": 0}, "at least one"),
        ({"dropout": 1.0}, "dropout"),
        ({"d_model": 15, "n_heads": 3}, "d_model must be even"),  # sinusoidal positions pair the dimensions
    ],
)
def test_invalid_configs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**kwargs)
