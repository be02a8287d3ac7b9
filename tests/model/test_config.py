"""ModelConfig: defaults, validation, round trip."""

from __future__ import annotations

import re

import jaxtyping
import pytest

from lsa_interp.data.vocab import VOCAB_SIZE
from lsa_interp.model import ModelConfig
from lsa_interp.model.config import MAX_LEN_LIMIT


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
        ({"n_heads": 0}, "n_heads must be positive, got 0"),  # before the divisibility check divides by it
        ({"ln_eps": -1.0}, "ln_eps must be a positive number"),  # trained to a NaN loss
        ({"ln_eps": 0.0}, "ln_eps must be a positive number"),
        ({"ln_eps": float("nan")}, "ln_eps must be a positive number"),
        ({"ln_eps": float("inf")}, "ln_eps must be a positive number"),
        ({"vocab_size": 29}, "vocab_size must be at least 30"),
        ({"vocab_size": 5}, "vocab_size must be at least 30 \\(the tokenizer's tokens\\), got 5"),  # an IndexError
        ({"max_len": 100_000_000}, "max_len must be at most 65,536 .* got 100,000,000"),  # allocated 25.6 GB
    ],
)
def test_invalid_configs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**kwargs)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"d_model": "x"}, "d_model must be a number (int), got 'x'"),
        ({"dropout": "a"}, "dropout must be a number (float), got 'a'"),
        ({"d_mlp": 512.0}, "d_mlp must be a number (int), got 512.0"),
        ({"use_hook_result": 1}, "use_hook_result must be true or false, got 1"),
    ],
)
def test_values_of_the_wrong_type_are_refused_by_name(monkeypatch, options, message):
    """A --model-config or grid value of the wrong type (JSON and TOML carry no types) is a one-line ValueError, not
    a TypeError from the divisibility check. Run without the test session's runtime type checker, which would
    refuse these calls first, as a user's Python does not."""
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        ModelConfig(**options)


def test_the_bounds_themselves_are_allowed():
    cfg = ModelConfig(vocab_size=VOCAB_SIZE, max_len=MAX_LEN_LIMIT, ln_eps=1e-12)
    assert (cfg.vocab_size, cfg.max_len) == (30, 65_536)


def test_an_integer_is_a_number_for_a_float_field(monkeypatch):
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)
    cfg = ModelConfig(dropout=0, ln_eps=1)
    assert (cfg.dropout, cfg.ln_eps) == (0, 1)
