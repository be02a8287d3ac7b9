"""The planted model itself: its position table, its circuit head by head, and the answers it gives.

The analyses' tests rely on it (a matching head at 2.3, a readout head at 3.1, every other head near-uniform and
silent); this pins the construction, so that a broken test model fails here rather than as a puzzling analysis."""

from __future__ import annotations

import math

import pytest
import torch

from lsa_interp.analysis.planted import (
    PLANTED_CONFIG,
    PLANTED_HEAD,
    READOUT_HEAD,
    planted_answer,
    planted_model,
    position_table,
)
from lsa_interp.data.task import Task
from lsa_interp.data.vocab import EOS, PAD, SEP

TASKS = [
    Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd"),
    Task.parse("zyxwvutsrqponmlkjihgfedcba | qpo > rpo | kji > lji"),
    Task.parse("abcdefghijklmnopqrstuvwxyz | mnop > mnopq | rst > rstu"),
]


@pytest.fixture
def planted():
    """Built per test (0.1 s): mutation testing credits what a shared fixture builds to its first test only."""
    return planted_model()


def test_the_position_table_is_a_clock_and_a_slow_angle_with_mirrors():
    table = position_table()
    assert table.shape == (64, 128) and table.dtype == torch.float32
    position = torch.arange(64, dtype=torch.float64)
    for f, cycles in enumerate((9, 10, 13, 15)):
        angle = position * cycles * 2 * math.pi / 64
        torch.testing.assert_close(table[:, 31 + 2 * f].double(), 2 * torch.cos(angle), atol=1e-6, rtol=0)
        torch.testing.assert_close(table[:, 32 + 2 * f].double(), 2 * torch.sin(angle), atol=1e-6, rtol=0)
    torch.testing.assert_close(table[:, 47].double(), 2 * torch.cos(position * math.pi / 64), atol=1e-6, rtol=0)
    torch.testing.assert_close(table[:, 48].double(), 2 * torch.sin(position * math.pi / 64), atol=1e-6, rtol=0)
    assert torch.equal(table[:, 39:47], -table[:, 31:39]) and torch.equal(table[:, 49:51], -table[:, 47:49])
    assert not table[:, :31].any() and not table[:, 51:].any()
    assert torch.allclose(table.norm(dim=1), torch.full((64,), math.sqrt(2 * 4 * 4 + 2 * 4)))  # 5 angles, mirrored
    assert (table[1:, 47] < table[:-1, 47]).all()  # the slow cosine decreases with position


def test_the_model_is_the_planted_config_in_eval_mode_with_its_head_in_the_metadata(planted):
    assert planted.cfg == PLANTED_CONFIG and not planted.training
    assert planted.metadata == {"planted": {"matching_head": "2.3"}}
    assert planted_model(matching=False).metadata == {"planted": {"matching_head": None}}
    assert torch.equal(planted.pos_embedding, position_table())
    for name, param in planted.named_parameters():
        if name.endswith(("ln1.weight", "ln2.weight", "ln3.weight", "ln_final.weight")):
            assert torch.equal(param, torch.ones_like(param)), name
        elif name.endswith(("ln1.bias", "ln2.bias", "ln3.bias", "ln_final.bias")):
            assert not param.any(), name


def test_it_answers_the_first_letter_of_the_example_output_then_stops(planted):
    assert [planted_answer(task) for task in TASKS] == ["f", "r", "m"]
    assert planted.solve(TASKS) == ["f", "r", "m"]
    plain = planted_model(matching=False).solve(TASKS)  # nothing read: no task's answer
    assert all(answer != planted_answer(task) for answer, task in zip(plain, TASKS, strict=True))
    assert planted_model(seed=3).solve(TASKS) == ["f", "r", "m"]  # the silent heads' draw does not matter


def _patterns(model, task):
    _, cache = model.run_with_cache([task])
    return cache, cache.inputs.src[0]


def test_the_matching_head_reads_each_letter_at_its_alphabet_position_and_the_readout_the_next(planted):
    for task in TASKS:
        cache, src = _patterns(planted, task)
        matching = cache[f"encoder.{PLANTED_HEAD.layer}.attn.hook_pattern"][0, PLANTED_HEAD.head]
        letters = [i for i, token in enumerate(src.tolist()) if token < 26]
        first = {}
        for i in letters:
            first.setdefault(src[i].item(), i)
        assert matching[letters].argmax(-1).tolist() == [first[src[i].item()] for i in letters]
        assert (matching[letters].max(-1).values > 0.99).all()
        readout = cache[f"encoder.{READOUT_HEAD.layer}.attn.hook_pattern"][0, READOUT_HEAD.head]
        assert readout[:-1].argmax(-1).tolist() == list(range(1, len(src)))
        assert (readout[:-1].max(-1).values > 0.99).all()
        cross = cache["decoder.0.cross_attn.hook_pattern"][0, 0]
        assert (cross.argmax(-1) == src.tolist().index(29)).all() and (cross.max(-1).values > 0.99).all()


def test_every_other_head_is_near_uniform_and_writes_nothing(planted):
    cache, src = _patterns(planted, TASKS[0])
    uniform = 1 / len(src)
    circuit = {("encoder", PLANTED_HEAD.layer, PLANTED_HEAD.head), ("encoder", READOUT_HEAD.layer, READOUT_HEAD.head)}
    for layer in range(3):
        patterns = cache[f"encoder.{layer}.attn.hook_pattern"][0]
        values = cache[f"encoder.{layer}.attn.hook_v"][0]
        for head in range(4):
            if ("encoder", layer, head) in circuit:
                continue
            assert patterns[head].max() < 1.3 * uniform and patterns[head].min() > 0.7 * uniform, (layer, head)
            assert not values[:, head].any(), (layer, head)
    for name in ("decoder.0.attn", "decoder.0.cross_attn"):
        patterns = cache[f"{name}.hook_pattern"][0, 1:]  # head 0 of the cross-attention reads ">"
        keys = patterns.shape[-1]
        assert patterns[:, -1].max() < 1.3 / keys and patterns[:, -1].min() > 0.7 / keys, name
    for name in ("encoder.0.attn", "decoder.0.attn", "decoder.0.cross_attn"):  # drawn, so not exactly uniform
        patterns = cache[f"{name}.hook_pattern"][0, 1:]
        assert (patterns[..., -1, :].amax(-1) > patterns[..., -1, :].amin(-1) + 1e-4).all(), name
    plain, _ = _patterns(planted_model(matching=False), TASKS[0])
    pattern = plain[f"encoder.{PLANTED_HEAD.layer}.attn.hook_pattern"][0, PLANTED_HEAD.head]
    assert pattern.max() < 1.3 * uniform and not plain[f"encoder.{PLANTED_HEAD.layer}.attn.hook_v"][0].any()


def test_every_residual_has_mean_zero_and_one_norm_at_every_position(planted):
    """Each feature has a mirror dimension of opposite sign, so the post-LN norms rescale every position alike."""
    cache, _ = _patterns(planted, TASKS[0])
    names = [
        n
        for n in planted.hook_names()
        if n.endswith(("hook_resid_pre", "hook_resid_mid", "hook_resid_mid_cross", "hook_resid_post"))
    ]
    names += [n for n in planted.hook_names() if n.endswith(("ln1.hook_in", "ln2.hook_in", "ln3.hook_in"))]
    assert len(names) == 3 * 5 + 7  # three encoder layers, one decoder layer
    for name in names:
        torch.testing.assert_close(cache[name].mean(-1), torch.zeros(cache[name].shape[:-1]), atol=1e-4, rtol=0)
    for embed in (planted.encoder.embed.weight, planted.decoder.embed.weight):
        assert not embed.sum(-1).any()
        assert torch.equal(embed.norm(dim=-1), torch.full((embed.shape[0],), 8 * math.sqrt(2)))


def test_the_seed_draws_the_silent_heads_query_and_key_weights(planted):
    other = planted_model(seed=1)
    weights = lambda model: model.encoder[0].attn.in_proj_weight
    assert torch.equal(weights(planted), weights(planted_model())) and not torch.equal(weights(planted), weights(other))
    assert weights(planted)[: 2 * 128].abs().max() < 0.1 and not weights(planted)[2 * 128 :].any()
    assert weights(planted)[: 2 * 128].std().item() == pytest.approx(0.02, rel=0.05)


def test_the_decoder_emits_the_answer_letter_and_then_eos_only(planted):
    _, cache = planted.run_with_cache(TASKS[:1])
    logits = planted.unembed(cache["decoder.ln_final.hook_out"])[0]
    assert logits.argmax(-1).tolist()[:2] == [5, EOS]  # "f", then EOS after it
    assert (logits[:, [SEP, PAD]] < -900).all()
