"""Head labels (1-based, the paper's) against 0-based heads, hook names and the order of a sweep."""

from __future__ import annotations

import pytest

from lsa_interp.model import ModelConfig
from lsa_interp.model.heads import Head, all_heads, parse_head, parse_heads

CFG = ModelConfig()


@pytest.mark.parametrize(
    ("text", "head"),
    [
        ("2.7", Head("encoder", 1, 6)),
        ("enc:1.1", Head("encoder", 0, 0)),
        ("dec:3.8", Head("decoder", 2, 7)),
        ("cross:1.2", Head("decoder", 0, 1, "cross_attn")),
        (" 3.8 ", Head("encoder", 2, 7)),
    ],
)
def test_labels_parse_to_zero_based_heads_and_back(text, head):
    assert parse_head(text, CFG) == head
    assert parse_head(head.label, CFG) == head


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3.9", "no head '3.9'"),
        ("4.1", "no head '4.1'"),
        ("0.1", "no head"),
        ("x", "bad head 'x'"),
        ("2", "bad head"),
        ("2.x", "bad head"),
        ("２.７", "bad head '２.７'"),  # full-width digits, which str.isdigit and int both take
        ("foo:1.1", "prefix must be one of"),
    ],
)
def test_bad_labels_name_the_allowed_range(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_head(text, CFG)
    assert "\n" not in str(info.value)


def test_hook_names_and_sweep_order():
    assert Head("encoder", 1, 6).hook() == "encoder.1.attn.hook_pattern"
    assert Head("decoder", 2, 0, "cross_attn").hook("z") == "decoder.2.cross_attn.hook_z"
    heads = all_heads(CFG)
    assert len(heads) == 24 and heads[0].label == "1.1" and heads[-1].label == "3.8" and heads == sorted(heads)
    cross = all_heads(CFG, "decoder", "cross_attn")
    assert len(cross) == 24 and {h.attn for h in cross} == {"cross_attn"} and cross[-1].label == "cross:3.8"


@pytest.mark.parametrize(
    ("text", "heads"),
    [
        ("2.7", [Head("encoder", 1, 6)]),
        (" 2.* ", [Head("encoder", 1, h) for h in range(8)]),
        ("cross:3.*", [Head("decoder", 2, h, "cross_attn") for h in range(8)]),
    ],
)
def test_a_layers_heads_are_named_with_a_star(text, heads):
    assert parse_heads(text, CFG) == heads


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4.*", "bad heads '4.*': no head '4.1' in this model: encoder has layers 1..3"),
        ("2.**", "bad head '2.**'"),
        ("2.", "bad head '2.'"),
        ("*.1", "bad head '*.1'"),
    ],
)
def test_a_star_for_a_layer_the_model_lacks_is_refused(text, message):
    with pytest.raises(ValueError, match=message.replace("*", r"\*")):
        parse_heads(text, CFG)
