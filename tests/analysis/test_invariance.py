"""Mapping invariance: cosines, the position read, and the verdicts on constructed residual streams."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.analysis.activations import analysis_tasks, final_norm, off_diagonal, pairwise_cosine
from lsa_interp.analysis.invariance import first_token_vectors, mapping_invariance
from lsa_interp.data.tokenizer import source_text
from lsa_interp.model import HookedEncoderDecoder, ModelConfig

CFG = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64, max_len=128)
LAST = "encoder.1.hook_resid_post"


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return HookedEncoderDecoder(CFG).eval()


def test_pairwise_cosine_of_identical_and_orthogonal_rows():
    x = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, -1.0]])
    cos = pairwise_cosine(x)
    assert cos[0, 1] == pytest.approx(1.0) and cos[0, 2] == pytest.approx(0.0) and cos[2, 3] == pytest.approx(0.0)
    assert off_diagonal(cos).tolist() == pytest.approx([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])


def write_positions(resid, hook):
    """Replace the residual by its position index in dimension 0 (zeros elsewhere)."""
    out = torch.zeros_like(resid)
    out[..., 0] = torch.arange(resid.shape[1], dtype=resid.dtype)
    return out


def test_first_token_vectors_read_the_first_token_of_each_role(model):
    tasks = analysis_tasks(["pred", "extend_sequence"], 6, lengths=(3, 5))
    with model.hooks(fwd_hooks=[(LAST, write_positions)]):
        vectors = first_token_vectors(model, tasks, LAST, ("example_out", "query", "example_in"))
    ex_in_len = [len(t.examples[0][0]) for t in tasks]
    assert vectors["example_in"][:, 0].tolist() == [27] * len(tasks)
    assert vectors["example_out"][:, 0].tolist() == [28 + n for n in ex_in_len]
    expected_query = [29 + len(t.examples[0][0]) + len(t.examples[0][1]) for t in tasks]
    assert vectors["query"][:, 0].tolist() == expected_query
    assert vectors["all"].shape == (sum(len(source_text(t)) for t in tasks), CFG.d_model)


def test_normed_vectors_are_the_raw_ones_through_the_final_encoder_norm(model):
    tasks = analysis_tasks(["pred"], 4, lengths=(3,))
    with model.hooks(fwd_hooks=[(LAST, lambda resid, hook: 3.0 * resid + 1.0)]):
        raw = first_token_vectors(model, tasks, LAST)["example_out"]
        normed = first_token_vectors(model, tasks, LAST, normed=True)["example_out"]
    assert torch.allclose(normed, final_norm(model, raw)) and not torch.allclose(normed, raw)


def test_paper_prompts_fix_the_query_and_drop_its_control(model):
    result = mapping_invariance(model, "pred", n_prompts=10, compare=["succ", "remove_redundant"])
    prompts = result.data["prompts"]
    assert all(p.endswith("| bcd > acd") for p in prompts) and prompts[0].endswith("ghi > fhi | bcd > acd")
    assert "first query token" not in result.data["controls"] and "first example_in token" in result.data["controls"]
    assert result.summary["hook"] == f"encoder.ln_final({LAST})"
    random = mapping_invariance(model, "pred", n_prompts=10, compare=[], prompts="random")
    assert "first query token" in random.data["controls"]


def constant_stream(resid, hook):
    return torch.ones_like(resid)


def shared_example_out_vector(resid, hook):
    """Random vectors everywhere except the first example-out token (position 31 for 3-letter windows)."""
    out = torch.randn(resid.shape, generator=torch.Generator().manual_seed(0)).to(resid)
    out[:, 31] = torch.randn(resid.shape[-1], generator=torch.Generator().manual_seed(1)).to(resid)
    return out


def test_identical_residuals_are_invariant_but_not_specific(model):
    with model.hooks(fwd_hooks=[(LAST, constant_stream)]):
        result = mapping_invariance(model, "pred", n_prompts=5, compare=["succ"], model_name="tiny", normed=False)
    assert result.summary["cosine_min"] == pytest.approx(1.0) and result.summary["pairs"] == 10
    invariant, specific = result.findings
    assert invariant.holds is True and specific.holds is False
    assert result.data["between_transformations"]["rules"] == ["pred", "succ"]


def test_a_shared_vector_at_the_token_only_is_invariant_and_specific(model):
    with model.hooks(fwd_hooks=[(LAST, shared_example_out_vector)]):
        result = mapping_invariance(model, "pred", n_prompts=6, compare=[], model_name="tiny")
    assert [f.holds for f in result.findings] == [True, True]
    assert abs(result.data["controls"]["any two tokens"]["mean"]) < 0.1
    assert result.data["cosines"].shape == (6, 6) and len(result.data["prompts"]) == 6


def test_a_random_model_is_not_invariant(model):
    result = mapping_invariance(model, "pred", n_prompts=6, compare=["succ", "sort"])
    assert result.findings[0].holds is False
    assert set(result.data["by_transformation"]) == {"pred", "succ", "sort"}
    assert result.summary["cosine_min"] <= result.summary["cosine_mean"] <= result.summary["cosine_max"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"n_prompts": 1}, "at least 2 prompts"), ({"layer": 2}, "outside"), ({"compare": ["nope"]}, "unknown")],
)
def test_bad_arguments_raise(model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        mapping_invariance(model, "pred", **kwargs)
