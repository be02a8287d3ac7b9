"""Elimination: EOS attention per token and the collapse measure, on forced patterns and set residuals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lsa_interp.analysis.activations import analysis_tasks
from lsa_interp.analysis.elimination import SINK_MIN, elimination, group_cosines, token_statistics
from lsa_interp.data.tokenizer import source_text
from lsa_interp.data.vocab import ROLE_ID
from lsa_interp.model import HookedEncoderDecoder, ModelConfig

CFG = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64, max_len=128)
EOS_POS = 38  # 1-shot tasks with 3-letter windows: a..z | abc > abd | xyz EOS
IRRELEVANT = list(range(27)) + [30, 34]  # the alphabet and the separators


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return HookedEncoderDecoder(CFG).eval()


@pytest.fixture(scope="module")
def tasks():
    return analysis_tasks(["pred", "succ"], 8, seed=2, lengths=(3,))


def eos_attention(mass: float):
    """Tokens of IRRELEVANT put ``mass`` on EOS and the rest on themselves; other tokens are left alone."""

    def hook(pattern, hook):
        out = pattern.clone()
        rows = torch.tensor(IRRELEVANT)
        out[:, :, rows] = 0.0
        out[:, :, rows, EOS_POS] = mass
        out[:, :, rows, rows] = 1.0 - mass
        return out

    return hook


def collapse(resid, hook):
    """The IRRELEVANT tokens' outputs become one vector with the mean norm of the other tokens."""
    out = resid.clone()
    norm = resid[:, 35:38].norm(dim=-1).mean()
    direction = torch.randn(resid.shape[-1], generator=torch.Generator().manual_seed(0))
    out[:, IRRELEVANT] = norm * torch.nn.functional.normalize(direction, dim=0)
    return out


def test_group_cosines_on_constructed_vectors():
    x = torch.tensor([[1.0, 0, 0], [3.0, 0, 0], [0, 1.0, 0], [0, 0, 2.0]])
    cos = group_cosines(x, torch.tensor([True, True, False, False]))
    assert cos == pytest.approx({"irrelevant": 1.0, "other": 0.0, "between": 0.0})
    single = group_cosines(x, torch.tensor([True, False, False, False]))
    assert math.isnan(single["irrelevant"]) and single["other"] == pytest.approx(0.0)


def test_token_statistics_cover_every_token_but_eos(model, tasks):
    stats = token_statistics(model, tasks)
    n_tokens = sum(len(source_text(t)) - 1 for t in tasks)
    assert all(len(stats[k]) == n_tokens for k in ("eos_attention", "role", "irrelevant", "norm_out", "norm_in"))
    assert len(stats["cos_out_other"]) == len(tasks) and not (stats["role"] == ROLE_ID["eos"]).any()
    assert ((stats["eos_attention"] >= 0) & (stats["eos_attention"] <= 1)).all()
    separators = np.isin(stats["role"], [ROLE_ID["separator"], ROLE_ID["arrow"]])
    assert stats["irrelevant"][separators].all() and not stats["irrelevant"][stats["role"] == ROLE_ID["query"]].any()
    first = tasks[0]
    used = set(first.query + first.answer + first.examples[0][0] + first.examples[0][1])
    assert stats["irrelevant"][:26].tolist() == [ch not in used for ch in first.alphabet]


@pytest.mark.parametrize("mass", [SINK_MIN - 0.01, 0.5])
def test_forced_eos_attention_and_collapse_are_reported(model, tasks, mass):
    hooks = [("encoder.1.attn.hook_pattern", eos_attention(mass)), ("encoder.1.hook_resid_post", collapse)]
    with model.hooks(fwd_hooks=hooks):
        result = elimination(model, tasks, model_name="tiny")
    s, by_role = result.summary, result.data["by_role"]
    assert s["irrelevant_mean_eos_attention"] == pytest.approx(mass, abs=1e-5)
    assert by_role["alphabet"]["mean_eos_attention"] == pytest.approx(mass, abs=1e-5)
    assert s["sink_role"] == "eos" and s["sink_is_eos_share"] == 1.0 and s["sink_mass"] == pytest.approx(mass, abs=1e-5)
    assert s["cosine_out_irrelevant"] == pytest.approx(1.0, abs=1e-5)
    assert s["cosine_out_with_separators"] == pytest.approx(1.0, abs=1e-5)
    assert s["cosine_out_other"] < 0.99 and s["norm_ratio"] == pytest.approx(1.0, rel=0.05)
    eos, sink = mass >= SINK_MIN, mass >= SINK_MIN
    assert [f.holds for f in result.findings] == [eos, sink, True, True]


def another_sink(pattern, hook):
    """Irrelevant tokens put 0.9 on the query's first letter (position 35), nothing on EOS."""
    out = pattern.clone()
    rows = torch.tensor(IRRELEVANT)
    out[:, :, rows] = 0.0
    out[:, :, rows, 35] = 0.9
    out[:, :, rows, rows] = 0.1
    return out


def test_a_sink_other_than_eos_is_found_and_the_collapse_still_measured(model, tasks):
    hooks = [("encoder.1.attn.hook_pattern", another_sink), ("encoder.1.hook_resid_post", collapse)]
    with model.hooks(fwd_hooks=hooks):
        result = elimination(model, tasks)
    s = result.summary
    assert s["sink_role"] == "query" and s["sink_mass"] == pytest.approx(0.9, abs=1e-5) and s["sink_is_eos_share"] == 0
    assert [f.holds for f in result.findings] == [False, True, True, True]


def test_paper_prompts_by_default(model):
    result = elimination(model, n_tasks=5)
    assert result.data["prompts"][0] == "abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd > bce"
    assert all(len(p.split(" | ")[1].split(" > ")[0]) == 3 for p in result.data["prompts"])


def test_a_random_model_does_not_attend_to_eos(model, tasks):
    result = elimination(model, tasks)
    assert result.summary["irrelevant_mean_eos_attention"] < 0.2 and result.findings[0].holds is False
    assert {"EOS attention per token (the paper's prompt)", "EOS attention by role"} <= set(result.figures)


def test_layer_outside_the_encoder_raises(model, tasks):
    with pytest.raises(ValueError, match="outside"):
        elimination(model, tasks, layer=5)
