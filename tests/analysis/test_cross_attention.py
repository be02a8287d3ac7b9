"""Cross-attention targets: position categories, and the counts under a forced cross-attention pattern."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import torch

from lsa_interp.analysis.activations import RUNNING_EXAMPLE, analysis_tasks
from lsa_interp.analysis.cross_attention import (
    CAT,
    CATEGORIES,
    _finding,
    category_matrix,
    cross_attention_targets,
    first_step_attention,
    position_categories,
    shares,
)
from lsa_interp.analysis.planted import planted_answer, planted_model
from lsa_interp.analysis.prompts import paper_prompts
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import source_text
from lsa_interp.model import HookedEncoderDecoder, ModelConfig

CFG = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64, max_len=128)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return HookedEncoderDecoder(CFG).eval()


def test_categories_of_the_running_example():
    cats = [CATEGORIES[c] for c in position_categories(RUNNING_EXAMPLE)]  # a..z | ghi > fhi | bcd EOS, answer acd
    assert len(cats) == len(source_text(RUNNING_EXAMPLE)) == 39
    assert cats[0] == "answer_in_alphabet" and set(cats[1:26]) == {"other_alphabet"}
    assert [cats[i] for i in (26, 30, 34)] == ["separator"] * 3 and cats[38] == "eos"
    assert cats[27:30] == ["example_in"] * 3
    assert cats[31:34] == ["changed_example_out", "other_example_out", "other_example_out"]
    assert cats[35:38] == ["first_query", "other_query", "other_query"]


def test_categories_line_up_with_the_tokens_for_two_shots_and_longer_outputs():
    task = Task.parse("zyxwvutsrqponmlkjihgfedcba | abc > abcd | ghij > ghijk | rst > rstu", "extend_sequence")
    text, cats = source_text(task), position_categories(task)
    assert len(cats) == len(text)
    assert [i for i, c in enumerate(cats) if c == CAT["separator"]] == [i for i, ch in enumerate(text) if ch in "|>"]
    assert [text[i] for i, c in enumerate(cats) if c == CAT["changed_example_out"]] == ["d", "k"]
    assert text[cats.index(CAT["answer_in_alphabet"])] == "r" and cats.index(CAT["answer_in_alphabet"]) == 8
    with pytest.raises(ValueError, match="answers"):
        position_categories(task.with_answer(None))


def forcing(targets: dict[int, torch.Tensor]):
    """Hooks putting all of decoder layer l's cross-attention on position ``targets[l][row]`` of each row."""

    def make(positions):
        def hook(pattern, hook):
            forced = torch.zeros_like(pattern)
            forced[torch.arange(pattern.shape[0]), :, :, positions] = 1.0
            return forced

        return hook

    return [(f"decoder.{layer}.cross_attn.hook_pattern", make(pos)) for layer, pos in targets.items()]


def test_forced_attention_is_counted_in_the_right_category(model):
    tasks = analysis_tasks(["pred"], 10, seed=3)
    where = lambda name: torch.tensor([position_categories(t).index(CAT[name]) for t in tasks])
    hooks = forcing({0: where("first_query"), 1: where("changed_example_out")})
    with model.hooks(fwd_hooks=hooks):
        result = cross_attention_targets(model, tasks=tasks, model_name="tiny", solved_only=False)
    table = {(row["layer"], row["category"]): row for row in result.data["table"]}
    assert table[1, "first_query"]["argmax_share"] == 1.0 and table[1, "first_query"]["mean_mass"] == pytest.approx(1.0)
    assert table[2, "changed_example_out"]["argmax_share"] == 1.0
    assert table[2, "first_query"]["argmax_share"] == 0.0
    assert result.summary["layer 1 argmax"] == "first_query"
    assert result.summary["layer 2 argmax"] == "changed_example_out"
    assert [f.holds for f in result.findings] == [True, True]  # two decoder layers: two of the paper's three rows
    layer1 = [row for row in result.data["heads"] if row["head"].startswith("cross:1.")]
    assert len(layer1) == CFG.n_heads and all(row["first_query_share"] == 1.0 for row in layer1)


def test_random_model_spreads_attention(model):
    result = cross_attention_targets(model, "succ", n_tasks=12, seed=1, solved_only=False)
    table = result.data["table"]
    for layer in (1, 2):
        rows = [row for row in table if row["layer"] == layer]
        assert sum(r["argmax_share"] for r in rows) == pytest.approx(1.0)
        assert sum(r["mean_mass"] for r in rows) == pytest.approx(1.0, abs=1e-5)
        assert sum(r["uniform_mass"] for r in rows) == pytest.approx(1.0, abs=1e-5)
    assert 0.0 <= result.summary["first_letter_accuracy"] <= 1.0
    assert not any(f.holds for f in result.findings)


def test_first_letter_accuracy_reads_the_greedy_first_letter():
    tasks = analysis_tasks(["pred"], 20, seed=0, alphabets="standard")
    letter, count = Counter(t.answer[0] for t in tasks).most_common(1)[0]
    assert 0 < count < len(tasks)
    torch.manual_seed(0)
    constant = HookedEncoderDecoder(CFG).eval()  # always predicts `letter`
    with torch.no_grad():
        constant.unembed.weight.zero_()
        constant.unembed.bias.copy_(torch.nn.functional.one_hot(torch.tensor(ord(letter) - 97), CFG.vocab_size))
    result = cross_attention_targets(constant, tasks=tasks, solved_only=False)
    assert result.summary["first_letter_accuracy"] == pytest.approx(count / len(tasks))


def test_only_solved_tasks_are_judged_and_none_solved_gives_no_verdict(model, monkeypatch):
    tasks = analysis_tasks(["pred"], 10, seed=3)
    unsolved = cross_attention_targets(model, tasks=tasks)
    assert all(f.holds is None for f in unsolved.findings)  # solves none
    titles = lambda result: [figure.layout.title.text for figure in result.figures.values()]
    assert all(
        title.endswith("all 10 tasks: none was solved") or "(over all 10 tasks" in title for title in titles(unsolved)
    )
    monkeypatch.setattr(model, "solve", lambda ts: [t.answer if i % 2 else "" for i, t in enumerate(ts)])
    result = cross_attention_targets(model, tasks=tasks)
    assert result.summary["solved"] == 5 and result.summary["judged_tasks"] == 5
    assert all(f.holds is False for f in result.findings)
    assert all("5 solved tasks" in title for title in titles(result))
    assert all(
        "over 10 tasks" in title for title in titles(cross_attention_targets(model, tasks=tasks, solved_only=False))
    )


def test_paper_prompts_by_default(model):
    result = cross_attention_targets(model, n_tasks=6, solved_only=False)
    assert result.summary["tasks"] == 6 and result.data["transformations"] == ["pred"]


def test_shares_count_the_tasks_per_category_along_the_last_axis():
    """The share of tasks (last axis) whose argmax falls in each of the nine categories."""
    out = shares(torch.tensor([[0, 0, 2, 8], [1, 1, 1, 1]]))
    assert out.shape == (2, len(CATEGORIES))
    assert out[0].tolist() == [0.5, 0.0, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25]
    assert out[1].tolist() == [0.0, 1.0] + [0.0] * 7


SHORT = Task.parse("abcdefghijklmnopqrstuvwxyz | bc > ab | de > cd", "pred")  # 36 positions
LONG = Task.parse("abcdefghijklmnopqrstuvwxyz | bcdef > abdef | hij > gij", "pred")  # 43 positions


def test_category_matrix_pads_each_row_with_minus_one():
    """Each row holds the task's categories, then -1 up to the width."""
    matrix = category_matrix([SHORT, LONG], 45)
    assert matrix.shape == (2, 45) and matrix.dtype == torch.long
    assert matrix[0, :36].tolist() == position_categories(SHORT) and matrix[0, 36:].tolist() == [-1] * 9
    assert matrix[1, :43].tolist() == position_categories(LONG) and matrix[1, 43:].tolist() == [-1, -1]
    short = [CATEGORIES[c] for c in position_categories(SHORT)]
    assert short[2] == "answer_in_alphabet" and short[33:36] == ["first_query", "other_query", "eos"]
    assert short[30:32] == ["changed_example_out", "changed_example_out"]


def split_heads(first_query: torch.Tensor, example_in: torch.Tensor):
    """Decoder layer 1: head 1 attends to the first query letter, heads 2-4 to the first example-in letter."""

    def hook(pattern, hook):
        forced = torch.zeros_like(pattern)
        rows = torch.arange(pattern.shape[0])
        forced[rows, 0, :, first_query] = 1.0
        for h in range(1, pattern.shape[1]):
            forced[rows, h, :, example_in] = 1.0
        return forced

    return [("decoder.0.cross_attn.hook_pattern", hook)]


def test_one_head_on_the_target_is_shown_but_the_head_mean_decides(model):
    """Per-head argmax shares and masses are kept apart from the head mean's; the verdict is the head mean's.
    On a padded batch the uniform mass of a category is its share of each task's own positions."""
    tasks = [SHORT, LONG]
    hooks = split_heads(torch.tensor([33, 39]), torch.tensor([27, 27]))
    with model.hooks(fwd_hooks=hooks):
        result = cross_attention_targets(model, tasks=tasks, solved_only=False)
    table = {(row["layer"], row["category"]): row for row in result.data["table"]}
    assert table[1, "example_in"]["argmax_share"] == 1.0 and table[1, "first_query"]["argmax_share"] == 0.0
    assert table[1, "example_in"]["mean_mass"] == pytest.approx(0.75)
    assert table[1, "first_query"]["mean_mass"] == pytest.approx(0.25)
    assert table[1, "first_query"]["uniform_mass"] == pytest.approx((1 / 36 + 1 / 43) / 2)
    assert table[1, "example_in"]["uniform_mass"] == pytest.approx((2 / 36 + 5 / 43) / 2)
    heads = {row["head"]: row for row in result.data["heads"]}
    assert heads["cross:1.1"]["first_query_share"] == 1.0 and heads["cross:1.1"]["first_query_mass"] == 1.0
    assert heads["cross:1.2"]["example_in_share"] == 1.0 and heads["cross:1.2"]["first_query_mass"] == 0.0
    first = result.findings[0]
    assert (
        first.holds is False and first.value == 0.0 and "0% of tasks (head mean), 100% for head cross:1.1" in first.ours
    )
    assert result.summary["layer 1 argmax"] == "example_in"
    assert result.summary["layer 1 first_query share"] == 0.0
    assert result.summary["solved"] is None and result.summary["judged_tasks"] == 2 and result.summary["tasks"] == 2


def part_on_padding(pattern, hook):
    """Decoder layer 2: the short task (row 0) puts 0.6 on its first query letter and 0.4 on a PAD position,
    the long one everything on its first query letter."""
    forced = torch.zeros_like(pattern)
    forced[0, :, :, 33], forced[0, :, :, 40], forced[1, :, :, 39] = 0.6, 0.4, 1.0
    return forced


def test_attention_on_padding_counts_in_no_category(model):
    """Mass a pattern puts on a PAD position (category -1) is counted in no category."""
    with model.hooks(fwd_hooks=[("decoder.1.cross_attn.hook_pattern", part_on_padding)]):
        result = cross_attention_targets(model, tasks=[SHORT, LONG], solved_only=False)
    layer2 = {row["category"]: row["mean_mass"] for row in result.data["table"] if row["layer"] == 2}
    assert layer2["first_query"] == pytest.approx(0.8) and sum(layer2.values()) == pytest.approx(0.8)


def shares_of(value: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer shares and head shares (2 layers, 3 heads) with ``value`` on layer 2's target for the head mean."""
    layer_share = torch.zeros(2, len(CATEGORIES))
    layer_share[1, CAT["changed_example_out"]] = value
    return layer_share, torch.zeros(2, 3, len(CATEGORIES))


@pytest.mark.parametrize(("value", "holds"), [(0.5, True), (0.49, False), (1.0, True)])
def test_a_layer_holds_from_half_the_tasks_on(value, holds):
    """A layer holds when the head mean (the paper's head-averaged measure) has its argmax on the target in >= 50 %
    of the tasks; one head there is shown, not counted."""
    layer_share, head_share = shares_of(value)
    finding = _finding(1, layer_share, head_share)
    assert finding.holds is holds and finding.value == pytest.approx(value)
    assert finding.name == "decoder layer 2 attends to the changed example-out letter"
    head_share[1, 2, CAT["changed_example_out"]] = 1.0
    one_head = _finding(1, *shares_of(0.0)[:1], head_share)
    assert one_head.holds is False and one_head.value == 0.0 and "100% for head cross:2.3" in one_head.ours
    assert _finding(1, layer_share, head_share, verdict=False).holds is None


def test_a_model_with_more_decoder_layers_has_one_finding_per_paper_layer():
    """Decoder layers beyond the paper's three get a table row and an argmax, but no finding."""
    torch.manual_seed(0)
    deep = HookedEncoderDecoder(
        ModelConfig(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=4, d_mlp=16, max_len=64)
    ).eval()
    result = cross_attention_targets(deep, tasks=[SHORT], solved_only=False)
    assert [f.name for f in result.findings] == [
        "decoder layer 1 attends to the first query letter",
        "decoder layer 2 attends to the changed example-out letter",
        "decoder layer 3 attends to the answer letter in the alphabet",
    ]
    assert "layer 4 argmax" in result.summary and "layer 3 answer_in_alphabet share" in result.summary
    assert not any(key.startswith("layer 4 ") and key.endswith(" share") for key in result.summary)
    assert len(result.data["table"]) == 4 * len(CATEGORIES) and len(result.data["heads"]) == 8


def test_prompts_follow_the_kind_and_seed(model):
    """Paper prompts are `paper_prompts(rule, n, seed)` with the query varied too; random ones `analysis_tasks`
    of the rule over ``alphabets`` (the same tasks give the same table)."""
    table = lambda **kw: cross_attention_targets(model, solved_only=False, **kw).data["table"]
    paper = table(transformation="succ", n_tasks=3, seed=2)
    assert paper == table(tasks=paper_prompts("succ", 3, 2, fixed_query=False))
    assert paper != table(tasks=paper_prompts("succ", 3, 2)) and paper != table(tasks=paper_prompts("succ", 3, 0))
    random = table(transformation="sort", n_tasks=3, seed=1, prompts="random", alphabets="permuted")
    assert random == table(tasks=analysis_tasks(["sort"], 3, 1, "permuted"))
    with pytest.raises(ValueError, match="unknown prompts"):
        cross_attention_targets(model, prompts="mine")


def test_solved_tasks_are_those_whose_solution_equals_the_answer(model, monkeypatch):
    """A task counts as solved when the model's output is exactly its answer."""
    tasks = [SHORT, LONG]
    monkeypatch.setattr(model, "solve", lambda ts: [ts[0].answer, ts[1].answer + "x"])
    result = cross_attention_targets(model, tasks=tasks)
    assert result.summary["solved"] == 1 and result.summary["judged_tasks"] == 1 and result.summary["tasks"] == 2
    assert all(f.holds is not None for f in result.findings)


def test_defaults_are_two_hundred_pred_paper_prompts_judged_on_the_solved_ones(model):
    """By default: 200 pred paper prompts (seed 0, query varied), solved tasks only (none here: all judged,
    no verdict)."""
    result = cross_attention_targets(model)
    assert result.model == "model" and result.data["transformations"] == ["pred"]
    assert result.summary["tasks"] == 200 and result.summary["solved"] == 0 and result.summary["judged_tasks"] == 200
    expected = cross_attention_targets(model, tasks=paper_prompts("pred", 200, 0, fixed_query=False), solved_only=False)
    assert result.data["table"] == expected.data["table"] and all(f.holds is None for f in result.findings)
    random = cross_attention_targets(model, n_tasks=5, prompts="random", solved_only=False)
    assert (
        random.data["table"]
        == cross_attention_targets(model, tasks=analysis_tasks(["pred"], 5, 0, "both"), solved_only=False).data["table"]
    )


def test_findings_state_the_paper_claim_our_shares_and_the_rule():
    """The findings table's texts: the paper's target, the head-mean and best head's shares, the threshold, and
    why there is no verdict when nothing is solved."""
    layer_share, head_share = torch.zeros(3, len(CATEGORIES)), torch.zeros(3, 2, len(CATEGORIES))
    layer_share[2, CAT["answer_in_alphabet"]], head_share[2, 1, CAT["answer_in_alphabet"]] = 0.25, 0.75
    finding = _finding(2, layer_share, head_share)
    assert finding.name == "decoder layer 3 attends to the answer letter in the alphabet"
    assert finding.paper == "layer 3 -> answer letter in the alphabet (predecessor, first decoding step)"
    assert finding.ours == "argmax there in 25% of tasks (head mean), 75% for head cross:3.2"
    rule = (
        "holds when the head-mean attention (the paper's measure) has its argmax there in >= 50% of the solved "
        "tasks; the best single head is shown beside it"
    )
    assert finding.detail == rule and finding.value == 0.25 and finding.holds is False
    unjudged = _finding(2, layer_share, head_share, verdict=False)
    assert unjudged.detail == rule + "; no verdict: the model solves none of the tasks" and unjudged.value == 0.25


def test_figures_plot_the_argmax_shares_the_masses_and_the_heads(model):
    """Three figures: per-layer argmax shares, per-layer masses with the uniform baseline, per-head shares."""
    tasks = [SHORT, LONG]
    with model.hooks(fwd_hooks=split_heads(torch.tensor([33, 39]), torch.tensor([27, 27]))):
        result = cross_attention_targets(model, tasks=tasks, solved_only=False)
    assert list(result.figures) == [
        "argmax category of the head-mean cross-attention (first step)",
        "mean cross-attention mass per category (first step)",
        "argmax category per head",
    ]
    shares_fig, mass_fig, heads_fig = result.figures.values()
    rows = {(r["layer"], r["category"]): r for r in result.data["table"]}
    assert list(shares_fig.data[0].y) == [rows[1, c]["argmax_share"] for c in CATEGORIES]
    assert shares_fig.layout.yaxis.title.text == "share of tasks" and len(shares_fig.data) == 2
    assert list(mass_fig.data[0].y) == pytest.approx([rows[1, c]["mean_mass"] for c in CATEGORIES])
    assert list(mass_fig.data[-1].y) == pytest.approx([rows[1, c]["uniform_mass"] for c in CATEGORIES])
    assert mass_fig.layout.yaxis.title.text == "mean attention mass"
    assert heads_fig.data[0].z[0].tolist() == [result.data["heads"][0][f"{c}_share"] for c in CATEGORIES]


def test_data_lists_the_categories_the_threshold_and_unlabelled_tasks():
    """The JSON data names the categories, the verdict's threshold and '?' for a task without a rule."""
    torch.manual_seed(0)
    model = HookedEncoderDecoder(CFG).eval()
    unlabelled = Task.parse("abcdefghijklmnopqrstuvwxyz | bc > ab | de > cd")
    result = cross_attention_targets(model, tasks=[unlabelled, SHORT], solved_only=False)
    assert result.data["categories"] == CATEGORIES and result.data["min_argmax_share"] == 0.5
    assert result.data["transformations"] == ["?", "pred"]


def test_first_letter_accuracy_scores_each_task_by_its_own_first_letter():
    """The planted model answers each task with its example output's first letter: the first-letter accuracy is
    the share of tasks whose answer starts with that letter."""
    prompts = paper_prompts("pred", 200, 0, fixed_query=False)[::16][:12]  # example and query share no letter
    tasks = [replace(t, answer=planted_answer(t) + t.answer[1:]) if i % 3 == 0 else t for i, t in enumerate(prompts)]
    expected = 4 / 12
    assert sum(planted_answer(t) == t.answer[0] for t in tasks) == 4 and len({planted_answer(t) for t in tasks}) > 3
    result = cross_attention_targets(planted_model(), tasks=tasks, solved_only=False)
    assert result.summary["first_letter_accuracy"] == pytest.approx(expected)


def test_more_tasks_than_one_batch_are_joined_along_the_task_axis():
    """Past one batch of 256 tasks, the per-task results of the batches are concatenated along the task axis."""
    torch.manual_seed(0)
    model = HookedEncoderDecoder(CFG).eval()
    tasks = [SHORT, LONG] * 129
    mass, head_cat, mean_cat, uniform, correct = first_step_attention(model, tasks)
    assert mass.shape == (2, 258, 4, len(CATEGORIES)) and head_cat.shape == (2, 258, 4) and mean_cat.shape == (2, 258)
    assert uniform.shape == (258, len(CATEGORIES)) and correct.shape == (258,)
    pair = first_step_attention(model, [SHORT, LONG])
    assert torch.allclose(mass[:, -2:], pair[0], atol=1e-6) and torch.equal(mean_cat[:, -2:], pair[2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_first_step_attention_of_a_model_on_the_gpu_matches_the_cpu():
    """The cached decoder output (on the CPU) is moved to the model's device before the unembedding."""
    torch.manual_seed(0)
    model = HookedEncoderDecoder(CFG).eval()
    cpu = first_step_attention(model, [SHORT, LONG])
    gpu = first_step_attention(model.to("cuda"), [SHORT, LONG])
    assert all(torch.allclose(a.float(), b.float(), atol=1e-5) for a, b in zip(cpu, gpu))
