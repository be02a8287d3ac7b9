"""Mapping invariance: cosines, the position read, and the verdicts on constructed residual streams."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.analysis.activations import analysis_tasks, final_norm, off_diagonal, pairwise_cosine
from lsa_interp.analysis.invariance import (
    CONTROL_MARGIN,
    _findings,
    _pair_cosines,
    cosine_summary,
    first_token_vectors,
    mapping_invariance,
)
from lsa_interp.analysis.prompts import paper_prompts
from lsa_interp.data.tokenizer import source_text
from lsa_interp.data.transformations import SEEN
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


def test_cosine_summary_gives_min_mean_max_and_the_count():
    """The summary of a set of cosines is its exact min, mean, max and size."""
    summary = cosine_summary(torch.tensor([0.25, -0.5, 1.0, 0.75]))
    assert summary == {"min": -0.5, "mean": 0.375, "max": 1.0, "pairs": 4}


def test_pair_cosines_between_two_sets_pair_every_row_of_the_first_with_every_row_of_the_second():
    """Between two sets, the cosines are row-major over (row of a, row of b); within one set, each pair once."""
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    b = torch.tensor([[3.0, 0.0], [1.0, 1.0], [0.0, -1.0]])
    half = 2**-0.5
    assert _pair_cosines(a, b).tolist() == pytest.approx([1.0, half, 0.0, 0.0, half, -1.0])
    assert _pair_cosines(b, b, same=True).tolist() == pytest.approx([half, 0.0, -half])


def within(low: float, mean: float = 0.99) -> dict[str, float]:
    return {"min": low, "mean": mean, "max": 1.0, "pairs": 45}


def controls(*means: float) -> dict[str, dict[str, float]]:
    return {f"control {i}": {"min": m, "mean": m, "max": m, "pairs": 10} for i, m in enumerate(means)}


@pytest.mark.parametrize(("low", "holds"), [(0.958, True), (0.9579, False), (0.5, False), (0.997, True)])
def test_invariance_verdict_reads_the_smallest_cosine_against_the_paper_minimum(low, holds):
    """'Invariant' holds exactly when the smallest cosine is >= 0.958, however high the mean is."""
    invariant = _findings("pred", within(low, mean=0.999), controls(0.1))[0]
    assert invariant.holds is holds and invariant.value == low
    assert invariant.name == "the first example-out residual is invariant to the letters"


def test_specificity_verdict_needs_the_margin_over_the_highest_control():
    """'Specific' holds when the within mean exceeds the highest control mean by >= 0.02 (exactly 0.02 holds)."""
    mean = 0.021
    top = mean - CONTROL_MARGIN
    assert mean - top == CONTROL_MARGIN
    exact = _findings("pred", within(0.99, mean), controls(0.0, top, -0.5))[1]
    assert exact.holds is True and exact.value == pytest.approx(CONTROL_MARGIN)
    assert exact.name == "the invariance is specific (not a property of every token)"
    below = _findings("pred", within(0.99, mean), controls(top + 1e-6, 0.0))[1]
    assert below.holds is False and below.value == pytest.approx(CONTROL_MARGIN - 1e-6)
    assert "(control 1) 0.001" in exact.ours and "(control 0)" in below.ours


def orthogonal_example_in(resid, hook):
    """Every token e0, except the first example-out token (position 31) e1 and the first example-in token
    (position 27) of task b the vector e(2 + b)."""
    out = torch.zeros_like(resid)
    out[..., 0] = 1.0
    out[:, 31] = 0.0
    out[:, 31, 1] = 1.0
    out[:, 27] = 0.0
    out[torch.arange(len(resid)), 27, 2 + torch.arange(len(resid))] = 1.0
    return out


def test_controls_and_summary_on_a_constructed_stream(model):
    """Controls: cosines of the first example-in tokens (here all orthogonal: 0) and of any two tokens (the share
    of token pairs holding the same vector); the summary repeats each control's mean under its own key."""
    n, tokens = 5, 39
    with model.hooks(fwd_hooks=[(LAST, orthogonal_example_in)]):
        result = mapping_invariance(model, "pred", n_prompts=n, compare=[], normed=False, prompts="random", seed=1)
    c, s = result.data["controls"], result.summary
    assert set(c) == {"first example_in token", "first query token", "any two tokens"}
    assert c["first example_in token"] == {"min": 0.0, "mean": 0.0, "max": 0.0, "pairs": 10}
    assert c["first query token"]["mean"] == pytest.approx(1.0)
    total, same = n * tokens, (n * (tokens - 2)) * (n * (tokens - 2) - 1) // 2 + n * (n - 1) // 2
    assert c["any two tokens"]["pairs"] == total * (total - 1) // 2
    assert c["any two tokens"]["mean"] == pytest.approx(same / (total * (total - 1) / 2))
    assert s["control_first_example_in_token_mean"] == 0.0
    assert s["control_first_query_token_mean"] == pytest.approx(1.0)
    assert s["control_any_two_tokens_mean"] == pytest.approx(c["any two tokens"]["mean"])
    assert s["hook"] == LAST and s["prompts_kind"] == "random" and s["prompts"] == n and s["pairs"] == 10
    assert (s["cosine_min"], s["cosine_mean"], s["cosine_max"]) == pytest.approx((1.0, 1.0, 1.0))
    assert result.data["constants"] == {"paper_range": (0.958, 0.997), "cosine_tolerance": 0.0, "control_margin": 0.02}
    assert [f.holds for f in result.findings] == [True, False]


def test_between_rules_diagonal_is_the_within_rule_mean_and_the_rest_the_cross_rule_mean(model):
    """The between-rules table is symmetric, its diagonal is each rule's within mean and its off-diagonal the
    'other rules, same token' control (one other rule); a rule repeated in ``compare`` is counted once."""
    result = mapping_invariance(model, "pred", n_prompts=4, compare=["pred", "succ"])
    between, by_rule = result.data["between_transformations"], result.data["by_transformation"]
    assert between["rules"] == ["pred", "succ"]
    table = between["mean_cosine"]
    assert table[0, 0] == pytest.approx(by_rule["pred"]["mean"]) and table[1, 1] == pytest.approx(
        by_rule["succ"]["mean"]
    )
    other = result.data["controls"]["other rules, same token"]
    assert table[0, 1] == pytest.approx(table[1, 0]) and table[0, 1] == pytest.approx(other["mean"])
    assert other["pairs"] == 16 and by_rule["pred"]["pairs"] == 6
    assert result.summary["control_other_rules_same_token_mean"] == pytest.approx(other["mean"])
    assert result.summary["cosine_mean"] == pytest.approx(by_rule["pred"]["mean"])
    pairs = off_diagonal(result.data["cosines"])
    assert result.data["cosines"].shape == (4, 4) and float(pairs.min()) == pytest.approx(by_rule["pred"]["min"])


def test_rules_without_enough_paper_prompts_are_left_out_and_listed(model):
    """A compared rule with fewer paper prompts than asked (fix_extend has 10) is skipped and named."""
    result = mapping_invariance(model, "pred", n_prompts=12, compare=["fix_extend"])
    assert result.data["rules_without_enough_prompts"] == ["fix_extend"]
    assert (
        list(result.data["by_transformation"]) == ["pred"] and "other rules, same token" not in result.data["controls"]
    )


def test_prompts_follow_the_seed_kind_alphabets_and_lengths(model):
    """Paper prompts are `paper_prompts(rule, n, seed)`; random ones `analysis_tasks` with the alphabets and lengths."""
    paper = mapping_invariance(model, "pred", n_prompts=3, seed=3, compare=[])
    assert paper.data["prompts"] == [str(t) for t in paper_prompts("pred", 3, 3)]
    random = mapping_invariance(
        model, "succ", n_prompts=3, seed=2, compare=[], prompts="random", alphabets="permuted", lengths=(4,)
    )
    assert random.data["prompts"] == [str(t) for t in analysis_tasks(["succ"], 3, 2, "permuted", (4,))]
    assert random.data["transformation"] == "succ"


def test_the_layer_is_read_zero_based_and_from_the_end(model):
    """``layer`` 0 reads encoder.0, -2 is the first of two layers too, -3 and 2 are outside."""
    for layer in (0, -2):
        result = mapping_invariance(model, "pred", n_prompts=2, compare=[], layer=layer)
        assert result.summary["hook"] == "encoder.ln_final(encoder.0.hook_resid_post)"
    for layer in (-3, 2):
        with pytest.raises(ValueError, match="outside"):
            mapping_invariance(model, "pred", n_prompts=2, compare=[], layer=layer)
    assert mapping_invariance(model, "pred", n_prompts=2, compare=[], layer=-1).summary["pairs"] == 1


def test_an_unknown_prompt_kind_raises(model):
    with pytest.raises(ValueError, match="unknown prompts"):
        mapping_invariance(model, "pred", prompts="mine")


def test_defaults_are_ten_paper_predecessor_prompts_compared_with_every_seen_rule(model):
    """By default: 10 paper prompts of pred (seed 0) against the seen rules, through the final norm."""
    result = mapping_invariance(model)
    assert result.model == "model" and result.data["transformation"] == "pred"
    assert result.data["prompts"] == [str(t) for t in paper_prompts("pred", 10, 0)]
    assert result.summary["pairs"] == 45 and result.data["between_transformations"]["rules"][0] == "pred"
    assert set(result.data["by_transformation"]) == set(SEEN) and result.data["rules_without_enough_prompts"] == []
    random = mapping_invariance(model, compare=[], prompts="random")
    assert random.data["prompts"] == [str(t) for t in analysis_tasks(["pred"], 10, 0, "standard", (3,))]


def test_cosines_are_read_through_the_final_norm_unless_raw(model):
    """``normed`` (the default) takes the cosines of ``ln_final`` of the residual; ``normed=False`` of the raw one."""
    tasks = paper_prompts("pred", 4, 0)
    shift = [(LAST, lambda resid, hook: resid + 2.0)]  # a shared offset: raises raw cosines, not normed ones
    with model.hooks(fwd_hooks=shift):
        raw = first_token_vectors(model, tasks, LAST)["example_out"]
        normed = mapping_invariance(model, "pred", n_prompts=4, compare=[])
        unnormed = mapping_invariance(model, "pred", n_prompts=4, compare=[], normed=False)
    assert torch.allclose(normed.data["cosines"], pairwise_cosine(final_norm(model, raw)), atol=1e-5)
    assert torch.allclose(unnormed.data["cosines"], pairwise_cosine(raw), atol=1e-5)
    assert not torch.allclose(normed.data["cosines"], unnormed.data["cosines"], atol=1e-3)


def test_findings_state_the_paper_claim_our_numbers_and_the_rule():
    """The findings table's texts: the paper's claim, our range and mean, and the threshold it is judged by."""
    invariant, specific = _findings("succ", within(0.9604, mean=0.97), controls(0.5, 0.25))
    assert invariant.paper == "pred: 45 pairwise cosines (10 prompts) all in 0.958..0.997"
    assert invariant.ours == "succ: 45 cosines in 0.960..1.000 (mean 0.970)"
    assert invariant.detail == "holds when the smallest cosine is >= 0.958 (the paper's minimum)"
    assert specific.paper == "not reported; implied by the mapping being stored at this token"
    assert specific.ours == "within-rule mean 0.970 vs highest control (control 0) 0.500"
    assert specific.detail == "holds when the within-rule mean exceeds every control mean by >= 0.02"


def test_figures_plot_the_cosine_tables_and_name_the_rule_and_hook(model):
    """Three figures: the pairwise matrix (titled with the hook read), the between-rules table over the rules,
    and the within-rule and control summaries; the findings name the rule judged."""
    result = mapping_invariance(model, "succ", n_prompts=3, compare=["pred"])
    assert list(result.figures) == [
        "cosines at the first example-out token (succ)",
        "mean cosine within and between transformations",
        "within-rule cosines and controls",
    ]
    matrix, between, summary = result.figures.values()
    assert "encoder.ln_final(encoder.1.hook_resid_post)" in matrix.layout.title.text
    assert between.data[0].z.tolist() == result.data["between_transformations"]["mean_cosine"].tolist()
    assert list(between.data[0].x) == ["succ", "pred"]
    assert list(summary.data[0].x) == ["succ", "pred"] and "any two tokens" in summary.data[1].x
    assert result.findings[0].ours.startswith("succ: 3 cosines in ")
