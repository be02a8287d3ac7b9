"""Elimination: EOS attention per token and the collapse measure, on forced patterns and set residuals."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from lsa_interp.analysis.activations import analysis_tasks, final_norm
from lsa_interp.analysis.elimination import (
    SINK_MIN,
    _findings as elimination_findings,
    _irrelevant,
    _mean,
    elimination,
    group_cosines,
    token_statistics,
)
from lsa_interp.analysis.prompts import paper_prompts
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import encode_tasks, source_text
from lsa_interp.data.transformations import SEEN
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


# Two tasks using the letters a-d only: the irrelevant letters are e..z (positions 4-25), the separators sit at
# 26 (|), 30 (>) and 34 (|), the relevant tokens at 0-3, 27-29, 31-33 and 35-37; EOS at 38.
ABCD = [
    Task.parse("abcdefghijklmnopqrstuvwxyz | abc > abd | bcd > bca", transformation="succ"),
    Task.parse("abcdefghijklmnopqrstuvwxyz | dcb > dca | abc > abd", transformation="pred"),
]
LETTERS, SEPARATORS, ABCD_TOKENS = list(range(4, 26)), [26, 30, 34], [*range(4), 27, 28, 29, 31, 32, 33, 35, 36, 37]
RELEVANT = [p for p in range(38) if p not in LETTERS + SEPARATORS]


def set_output(resid, hook):
    """Irrelevant letters 2 e0, separators e0 + e1, the a-d letters 4 e2, the other relevant tokens 3 e3."""
    out = torch.zeros_like(resid)
    out[:, LETTERS, 0] = 2.0
    out[:, SEPARATORS, 0] = out[:, SEPARATORS, 1] = 1.0
    out[:, [0, 1, 2, 3], 2] = 4.0
    out[:, [p for p in RELEVANT if p > 3], 3] = 3.0
    return out


def set_input(resid, hook):
    """Irrelevant letters alternate e0 / e1 (11 each); every other token is e5."""
    out = torch.zeros_like(resid)
    out[..., 5] = 1.0
    out[:, LETTERS] = 0.0
    out[:, LETTERS[0::2], 0] = 1.0
    out[:, LETTERS[1::2], 1] = 1.0
    return out


def set_pattern(pattern, hook):
    """Irrelevant tokens put 0.7 on the arrow (30) and 0.3 on EOS; the other tokens attend to themselves."""
    out = torch.zeros_like(pattern)
    rows = torch.tensor(LETTERS + SEPARATORS)
    out[:, :, rows, 30] = 0.7
    out[:, :, rows, 38] = 0.3
    out[:, :, RELEVANT, RELEVANT] = 1.0
    out[:, :, 38, 38] = 1.0
    return out


def test_irrelevant_tokens_are_the_separators_and_the_unused_alphabet_letters():
    """Irrelevant: separators and alphabet letters absent from the example, query and answer; nothing else."""
    task = Task.parse("badcfehgijklmnopqrstuvwxyz | ab > ac | ef > eg")
    roles = encode_tasks([task], with_answers=False).roles[0, :-1].tolist()
    flags = _irrelevant(task, roles)
    expected = [False, False, True, False, False, False, True, False] + [True] * 18  # d, h, i..z unused
    assert flags == expected + [True, False, False, True, False, False, True, False, False]
    assert _irrelevant(task.with_answer(None), roles)[7] is True  # g is used by the answer only


def test_statistics_of_constructed_patterns_and_residuals_are_exact(model):
    """Sink, EOS attention, norms and the within-task cosines of hand-set patterns and residuals, raw (not
    normed): the collapse group is the irrelevant letters, the second number adds the separators."""
    hooks = [
        ("encoder.1.attn.hook_pattern", set_pattern),
        ("encoder.1.hook_resid_pre", set_input),
        ("encoder.1.hook_resid_post", set_output),
    ]
    with model.hooks(fwd_hooks=hooks):
        result = elimination(model, ABCD, normed=False, model_name="tiny")
    s, data = result.summary, result.data
    half = 2**-0.5
    assert s["tasks"] == 2 and s["tokens"] == 76 and s["normed"] is False
    assert s["irrelevant_mean_eos_attention"] == pytest.approx(0.3) and s["relevant_mean_eos_attention"] == 0.0
    assert s["sink_mass"] == pytest.approx(0.7) and s["sink_role"] == "arrow" and s["sink_token"] == ">·30"
    assert s["sink_is_eos_share"] == 0.0 and data["sink_roles"] == {"arrow": 2}
    assert s["norm_irrelevant"] == pytest.approx((22 * 2 + 3 * 2**0.5) / 25)
    assert s["norm_other"] == pytest.approx((4 * 4 + 9 * 3) / 13)
    assert s["norm_ratio"] == pytest.approx(s["norm_irrelevant"] / s["norm_other"])
    assert s["cosine_out_irrelevant"] == pytest.approx(1.0)
    assert s["cosine_out_other"] == pytest.approx((6 + 36 + 3 + 3 * 13 * 0) / 120)
    assert s["cosine_out_between"] == pytest.approx(22 * 3 * half / (22 * 16))
    assert s["cosine_out_with_separators"] == pytest.approx((231 + 3 + 66 * half) / 300)
    assert s["cosine_in_irrelevant"] == pytest.approx(110 / 231)
    assert s["cosine_in_other"] == pytest.approx(1.0) and s["cosine_in_between"] == pytest.approx(0.0)
    alphabet = pytest.approx(0.3 * 22 / 26)
    assert data["by_role"]["alphabet"] == {"tokens": 52, "mean_eos_attention": alphabet, "eos_head_attention": alphabet}
    separator = {"tokens": 4, "mean_eos_attention": pytest.approx(0.3), "eos_head_attention": pytest.approx(0.3)}
    assert data["by_role"]["separator"] == separator
    assert data["by_role"]["query"]["mean_eos_attention"] == 0.0 and "eos" not in data["by_role"]
    assert s["eos_head"] == "2.1" and s["eos_head_irrelevant"] == pytest.approx(0.3) and s["eos_head_relevant"] == 0.0
    assert s["sink_head"] == "2.1" and s["sink_mass_head_mean"] == pytest.approx(0.7)
    assert s["sink_token_head_mean"] == ">·30"  # every head alike: the first is the strongest
    assert data["irrelevant_eos_attention_by_head"] == pytest.approx({f"2.{h}": 0.3 for h in range(1, 5)})
    assert data["sink_mass_by_head"] == pytest.approx({f"2.{h}": 0.7 for h in range(1, 5)})
    assert data["layer"] == 2 and data["transformations"] == ["pred", "succ"]
    assert data["prompts"] == [str(t) for t in ABCD]
    assert data["constants"] == {
        "paper_eos_range": (0.4, 0.59),
        "sink_min": 0.4,
        "paper_cosine": 0.98,
        "collapse_min": 0.975,
        "norm_ratio_min": 0.75,
    }
    assert [f.holds for f in result.findings] == [False, True, True, s["norm_ratio"] >= 0.75]


def test_normed_statistics_read_the_residuals_through_the_final_norm(model):
    """With ``normed`` the norms are those of ``ln_final`` of the residual (here: every token the same norm)."""
    with model.hooks(fwd_hooks=[("encoder.1.hook_resid_post", set_output)]):
        stats = token_statistics(model, ABCD[:1], layer=1, normed=True)
        raw = token_statistics(model, ABCD[:1], layer=-1, normed=False)
    expected = final_norm(model, torch.tensor([[4.0] + [0.0] * 31]))[0].norm()
    assert stats["norm_out"][0] == pytest.approx(float(expected), rel=1e-5) and raw["norm_out"][0] == pytest.approx(4.0)
    assert raw["norm_out"][LETTERS[0]] == pytest.approx(2.0)


def test_statistics_of_a_padded_batch_leave_out_padding_and_eos(model):
    """Tasks of different lengths in one batch: every non-PAD, non-EOS token once, per task the cosines."""
    tasks = analysis_tasks(["pred"], 6, seed=1, lengths=(3, 6))
    stats = token_statistics(model, tasks, layer=0)
    assert len(stats["role"]) == sum(len(source_text(t)) - 1 for t in tasks)
    assert not np.isin(stats["role"], [ROLE_ID["pad"], ROLE_ID["eos"]]).any()
    assert len(stats["sink_mass"]) == len(stats["cos_in_between"]) == 6


def test_group_cosines_of_a_lone_other_row_or_an_empty_group_are_nan():
    """Fewer than two rows on a side gives NaN for that side; an empty side gives NaN between."""
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    half = 2**-0.5
    lone_other = group_cosines(x, torch.tensor([True, True, False]))
    assert lone_other["irrelevant"] == pytest.approx(half) and math.isnan(lone_other["other"])
    assert lone_other["between"] == pytest.approx((0.0 + half) / 2)
    empty = group_cosines(x, torch.tensor([False, False, False]))
    assert math.isnan(empty["irrelevant"]) and math.isnan(empty["between"])
    assert empty["other"] == pytest.approx((half + 0.0 + half) / 3)


def summary(**overrides) -> dict:
    s = {
        "eos_head": "3.1",
        "eos_head_irrelevant": 0.5,
        "eos_head_relevant": 0.2,
        "irrelevant_mean_eos_attention": 0.1,
        "relevant_mean_eos_attention": 0.05,
        "sink_head": "3.2",
        "sink_mass": 0.5,
        "sink_token": "EOS·38",
        "sink_role": "eos",
        "sink_is_eos_share": 1.0,
        "sink_mass_head_mean": 0.25,
        "sink_token_head_mean": ">·30",
        "cosine_in_irrelevant": 0.5,
        "cosine_out_irrelevant": 0.99,
        "cosine_out_with_separators": 0.9,
        "cosine_out_other": 0.3,
        "norm_irrelevant": 5.0,
        "norm_other": 5.0,
        "norm_ratio": 1.0,
    }
    return s | overrides


@pytest.mark.parametrize(
    ("key", "threshold", "index"),
    [("eos_head_irrelevant", 0.4, 0), ("sink_mass", 0.4, 1), ("cosine_out_irrelevant", 0.975, 2)]
    + [("norm_ratio", 0.75, 3)],
)
def test_each_verdict_holds_from_its_threshold_on(key, threshold, index):
    """Each finding holds at exactly its threshold and not just below; its value is the measure it reads."""
    at = elimination_findings(summary(**{key: threshold}))
    below = elimination_findings(summary(**{key: threshold - 1e-9}))
    assert [f.holds for f in at] == [True] * 4
    assert [f.holds for f in below] == [i != index for i in range(4)]
    assert at[index].value == threshold
    assert [f.name for f in at] == [
        "irrelevant tokens attend to EOS in the last encoder layer",
        "irrelevant tokens attend to one sink token (any)",
        "irrelevant tokens collapse to one direction",
        "their norms do not shrink",
    ]


def test_default_prompts_are_succ_paper_prompts_with_the_query_varied_and_random_ones_follow_the_rules(model):
    """``prompts="paper"``: `paper_prompts("succ", n, seed, fixed_query=False)`; ``"random"``: `analysis_tasks`."""
    paper = elimination(model, n_tasks=4, seed=2)
    assert paper.data["prompts"] == [str(t) for t in paper_prompts("succ", 4, 2, fixed_query=False)]
    random = elimination(model, n_tasks=3, seed=1, prompts="random", transformations=["sort"], alphabets="permuted")
    assert random.data["prompts"] == [str(t) for t in analysis_tasks(["sort"], 3, 1, "permuted")]
    with pytest.raises(ValueError, match="unknown prompts"):
        elimination(model, prompts="mine")


def test_only_the_first_twenty_prompts_are_listed(model):
    result = elimination(model, n_tasks=21)
    assert len(result.data["prompts"]) == 20 and result.summary["tasks"] == 21


def test_findings_state_the_paper_claim_our_numbers_and_the_rule():
    """The findings table's texts: the paper's numbers, ours, and the threshold each is judged by."""
    texts = [(f.paper, f.ours, f.detail) for f in elimination_findings(summary())]
    assert texts == [
        (
            "most alphabet letters and separators put 0.4-0.59 of their attention on EOS",
            "head 3.1: irrelevant tokens 0.50, relevant tokens 0.20; head mean 0.10 (relevant 0.05)",
            "holds when their mean in the layer's strongest EOS head is >= 0.4 (the paper's lowest); the head mean "
            "is shown, not judged",
        ),
        (
            "EOS, 0.4-0.59",
            "head 3.2: mean 0.50 on their top key, most often EOS·38 (eos; EOS in 100% of tasks); head mean 0.25 on "
            ">·30",
            "holds when the mean mass on their top key in the layer's strongest sink head is >= 0.4; the sink is "
            "reported, not judged",
        ),
        (
            "pairwise cosine of their outputs ~0.98",
            "irrelevant letters: cosine 0.500 (layer input) -> 0.990 (output); with the separators 0.900; "
            "other tokens 0.300",
            "holds when the mean within-task cosine is >= 0.975 (rounds to the paper's 0.98)",
        ),
        (
            "norms stay 4.5-6.0",
            "norm 5.00 vs 5.00 for other tokens (ratio 1.00)",
            "holds when the ratio is >= 0.75 (4.5 / 6)",
        ),
    ]


def test_defaults_are_two_hundred_succ_paper_prompts_read_at_the_last_layer_through_the_norm(model):
    """By default: 200 succ paper prompts (seed 0, query varied), the last encoder layer, normed residuals."""
    result = elimination(model)
    assert result.model == "model" and result.summary["tasks"] == 200 and result.summary["normed"] is True
    assert result.data["prompts"] == [str(t) for t in paper_prompts("succ", 200, 0, fixed_query=False)[:20]]
    assert result.data["layer"] == 2 and result.data["transformations"] == ["succ"]
    random = elimination(model, n_tasks=4, prompts="random")
    assert random.data["prompts"] == [str(t) for t in analysis_tasks(SEEN, 4, 0, "both")]


def test_figures_show_the_paper_prompt_the_roles_and_the_group_cosines(model):
    """Three figures: EOS attention per token of the paper's prompt (at the layer read), EOS attention by role,
    and the within-task cosines of each group on the layer's input and output."""
    with model.hooks(fwd_hooks=[("encoder.0.attn.hook_pattern", eos_attention(0.5))]):
        result = elimination(model, ABCD, layer=0)
    assert list(result.figures) == [
        "EOS attention per token (the paper's prompt)",
        "EOS attention by role",
        "within-task cosine by group",
    ]
    per_token, by_role, cosines = result.figures.values()
    assert per_token.data[0].y[:27].tolist() == pytest.approx([0.5] * 27) and len(per_token.data[0].y) == 38
    assert per_token.data[0].x[0] == "a·0" and per_token.data[0].x[-1] == "d·37"
    assert [trace.name for trace in by_role.data] == [
        "alphabet",
        "separator",
        "example_in",
        "arrow",
        "example_out",
        "query",
    ]
    s = result.summary
    assert list(cosines.data[0].y) == [s["cosine_in_irrelevant"], s["cosine_in_other"], s["cosine_in_between"]]
    assert list(cosines.data[1].y) == [s["cosine_out_irrelevant"], s["cosine_out_other"], s["cosine_out_between"]]


def test_the_mean_of_nothing_is_nan_without_a_warning():
    """`_mean` of an empty selection is NaN, computed without numpy's empty-slice warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(_mean(np.array([1.0, 2.0]), np.array([False, False])))
    assert _mean(np.array([1.0, 2.0, 4.0]), np.array([True, False, True])) == 2.5


def test_a_task_using_every_letter_has_no_collapse_group(model):
    """When the example and query use all 26 letters there are no irrelevant letters: the collapse cosine is
    NaN (not judged as holding) and the separators still form the sink group."""
    task = Task.parse("abcdefghijklmnopqrstuvwxyz | abcdefghijkl > abcdefghijkm | nopqrstuvwxy > nopqrstuvwxz")
    result = elimination(model, [task])
    s = result.summary
    assert math.isnan(s["cosine_out_irrelevant"]) and math.isnan(s["cosine_in_between"])
    assert result.findings[2].holds is False and not math.isnan(s["cosine_out_with_separators"])
    assert result.data["transformations"] == ["?"] and result.data["by_role"]["alphabet"]["tokens"] == 26


def test_elimination_reads_the_residuals_through_the_final_norm_by_default(model):
    """Normed (the default), every hand-set vector has the final norm's length, so the norm ratio is 1; raw,
    the irrelevant tokens are shorter than the others."""
    with model.hooks(fwd_hooks=[("encoder.1.hook_resid_post", set_output)]):
        normed = elimination(model, ABCD).summary
        raw = elimination(model, ABCD, normed=False).summary
    assert normed["norm_ratio"] == pytest.approx(1.0, abs=1e-4)
    assert raw["norm_ratio"] == pytest.approx((22 * 2 + 3 * 2**0.5) / 25 / (43 / 13))


def test_the_role_figure_subsample_follows_the_seed(model):
    """Past 2,000 tokens of a role the role figure shows a subsample drawn from ``seed``: the same seed, the
    same figure."""
    tasks = paper_prompts("succ", 80, 0, fixed_query=False)
    first, again = (elimination(model, tasks, seed=3).figures["EOS attention by role"] for _ in range(2))
    alphabet = first.data[0].y
    assert first.data[0].name == "alphabet" and len(alphabet) == 2000
    assert list(alphabet) == list(again.data[0].y)


def test_token_statistics_read_normed_residuals_of_the_last_layer_by_default(model):
    """Defaults: the last encoder layer, residuals through the final norm; layers count 0-based or from the end."""
    with model.hooks(fwd_hooks=[("encoder.1.hook_resid_post", set_output)]):
        default = token_statistics(model, ABCD[:1])
        normed = token_statistics(model, ABCD[:1], layer=1, normed=True)
    assert np.allclose(default["norm_out"], normed["norm_out"]) and default["norm_out"][0] == pytest.approx(
        32**0.5, rel=1e-4
    )
    first = token_statistics(model, ABCD[:1], layer=-2)
    assert np.allclose(first["norm_in"], token_statistics(model, ABCD[:1], layer=0)["norm_in"])
    for layer in (2, -3):
        with pytest.raises(ValueError, match="outside"):
            token_statistics(model, ABCD[:1], layer=layer)


def one_head_sinks(pattern, hook):
    """Head 3 (0-based 2): the irrelevant tokens put 0.5 on EOS, the rest on themselves; head 1 (0-based 0): 0.9 on
    the arrow (30); heads 2 and 4 keep the model's own pattern."""
    out = pattern.clone()
    rows = torch.tensor(LETTERS + SEPARATORS)
    out[:, 2, rows] = 0.0
    out[:, 2, rows, 38] = 0.5
    out[:, 2, rows, rows] = 0.5
    out[:, 0, rows] = 0.0
    out[:, 0, rows, 30] = 0.9
    out[:, 0, rows, rows] += 0.1
    return out


def test_the_sink_is_judged_on_the_strongest_head_and_the_head_mean_reported_beside_it(model):
    """One head of four sinking on EOS at 0.5 holds (the paper's 0.4-0.59 read from one head), though the head mean
    is near 0.125; the strongest sink of any kind is another head's arrow. The figures show that head."""
    with model.hooks(fwd_hooks=[("encoder.1.attn.hook_pattern", one_head_sinks)]):
        result = elimination(model, ABCD)
    s, data = result.summary, result.data
    assert s["eos_head"] == "2.3" and s["eos_head_irrelevant"] == pytest.approx(0.5)
    assert s["eos_head_relevant"] < 0.2 and s["irrelevant_mean_eos_attention"] < 0.25
    arrow_mass = (24 * 0.9 + 1.0) / 25  # the arrow itself is one of the 25 irrelevant rows: 0.9 + 0.1 on itself
    assert s["sink_head"] == "2.1" and s["sink_mass"] == pytest.approx(arrow_mass) and s["sink_token"] == ">·30"
    assert s["sink_role"] == "arrow" and s["sink_is_eos_share"] == 0.0 and data["sink_roles"] == {"arrow": 2}
    assert data["irrelevant_eos_attention_by_head"]["2.3"] == pytest.approx(0.5)
    assert data["sink_mass_by_head"]["2.1"] == pytest.approx(arrow_mass) and data["sink_mass_by_head"]["2.3"] >= 0.5
    assert data["by_role"]["separator"]["eos_head_attention"] == pytest.approx(0.5)
    assert [f.holds for f in result.findings][:2] == [True, True]
    assert result.findings[0].value == pytest.approx(0.5) and result.findings[0].ours.startswith("head 2.3: ")
    per_token, by_role = (
        result.figures["EOS attention per token (the paper's prompt)"],
        result.figures["EOS attention by role"],
    )
    assert [t.name for t in per_token.data] == ["head 2.3", "head mean"]
    assert per_token.data[0].y[4:26].tolist() == pytest.approx([0.5] * 22)
    assert by_role.layout.yaxis.title.text == "attention on EOS (head 2.3)"


def test_token_statistics_give_the_head_means_sink_and_each_heads_own(model):
    """Per task, the top key of the irrelevant tokens' head-mean attention (``sink_*``) and of each head's
    (``sink_*_heads``, ``[tasks, heads]``): with one head on the arrow and another on EOS, each head names its own."""
    with model.hooks(fwd_hooks=[("encoder.1.attn.hook_pattern", set_pattern)]):
        alike = token_statistics(model, ABCD)
    assert alike["sink_role"].tolist() == [ROLE_ID["arrow"]] * 2 and alike["sink_token"].tolist() == [">·30"] * 2
    assert alike["sink_mass"] == pytest.approx([0.7, 0.7])
    with model.hooks(fwd_hooks=[("encoder.1.attn.hook_pattern", one_head_sinks)]):
        stats = token_statistics(model, ABCD)
    assert stats["sink_role_heads"].shape == (2, 4)
    assert stats["sink_role_heads"][:, 0].tolist() == [ROLE_ID["arrow"]] * 2
    assert stats["sink_role_heads"][:, 2].tolist() == [ROLE_ID["eos"]] * 2
    assert stats["sink_token_heads"][:, 2].tolist() == ["EOS·38"] * 2
    assert stats["sink_mass_heads"][:, 2] == pytest.approx([0.5, 0.5])


def test_the_token_figure_shows_the_head_mean_beside_the_strongest_head(model):
    """The per-token figure's second bar is the head mean of the paper's prompt, not the strongest head again."""
    from lsa_interp.analysis.elimination import PAPER_PROMPT

    with model.hooks(fwd_hooks=[("encoder.1.attn.hook_pattern", one_head_sinks)]):
        result = elimination(model, ABCD)
        mean = token_statistics(model, [PAPER_PROMPT])["eos_attention"]
    head, head_mean = result.figures["EOS attention per token (the paper's prompt)"].data
    assert list(head_mean.x) == list(head.x) and list(head_mean.y) == pytest.approx(mean.tolist())
    assert max(head_mean.y[4:26]) < 0.3 < min(head.y[4:26])
