"""Cross-attention targets: position categories, and the counts under a forced cross-attention pattern."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from lsa_interp.analysis.activations import RUNNING_EXAMPLE, analysis_tasks
from lsa_interp.analysis.cross_attention import CAT, CATEGORIES, cross_attention_targets, position_categories
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
    assert all(f.holds is None for f in cross_attention_targets(model, tasks=tasks).findings)  # solves none
    monkeypatch.setattr(model, "solve", lambda ts: [t.answer if i % 2 else "" for i, t in enumerate(ts)])
    result = cross_attention_targets(model, tasks=tasks)
    assert result.summary["solved"] == 5 and result.summary["judged_tasks"] == 5
    assert all(f.holds is False for f in result.findings)


def test_paper_prompts_by_default(model):
    result = cross_attention_targets(model, n_tasks=6, solved_only=False)
    assert result.summary["tasks"] == 6 and result.data["transformations"] == ["pred"]
