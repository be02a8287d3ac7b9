"""Decoder lens: the last layer is the model itself, layer k is a model truncated to k encoder layers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lsa_interp.analysis import decoder_lens as decoder_lens_module
from lsa_interp.analysis.decoder_lens import (
    PAPER_EARLY_SHARE,
    PAPER_LENS,
    _findings,
    decoder_lens,
    lens_predict,
    lens_tasks,
    wilson_lower,
)
from lsa_interp.analysis.prompts import rule_tasks
from lsa_interp.analysis.rasp import seen_rule_tasks
from lsa_interp.data.presets import PRESETS, DatasetConfig
from lsa_interp.data.transformations import SEEN
from lsa_interp.evaluation import predict
from lsa_interp.evaluation.run import DEFAULT_BATCH_SIZE, evaluation_dataset
from lsa_interp.model import HookedEncoderDecoder, ModelConfig

torch.set_num_threads(1)


def small_model(n_encoder_layers: int = 2, seed: int = 0, metadata: dict | None = None) -> HookedEncoderDecoder:
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=n_encoder_layers, n_decoder_layers=2, d_mlp=64)
    return HookedEncoderDecoder(cfg, metadata=metadata).eval()


@pytest.fixture(scope="module")
def tasks():
    return [t for name in ("pred", "succ", "sort", "extend_sequence") for t in rule_tasks(name, 15, seed=1)]


def own_answers(model: HookedEncoderDecoder, tasks: list) -> list:
    """Half of the tasks relabelled with the model's own (letters-only, finished) greedy answer, so that the
    model's accuracy is far from 0 and an accuracy mismatch would show."""
    unlabelled = [dataclasses.replace(t, answer=None) for t in tasks]
    relabelled = []
    for i, (task, answer) in enumerate(zip(tasks, predict(model, unlabelled))):
        usable = i % 2 == 0 and answer.isalpha() and answer.islower() and len(answer) < 32
        relabelled.append(dataclasses.replace(task, answer=answer) if usable else task)
    return relabelled


def truncated(model: HookedEncoderDecoder, k: int) -> HookedEncoderDecoder:
    """The same weights with only the first ``k`` encoder layers (and the final encoder norm), built by hand."""
    short = HookedEncoderDecoder(dataclasses.replace(model.cfg, n_encoder_layers=k))
    state = {
        name: value
        for name, value in model.state_dict().items()
        if not (name.startswith("encoder.") and name.split(".")[1].isdigit() and int(name.split(".")[1]) >= k)
    }
    short.load_state_dict(state, strict=True)
    return short.eval()


def test_last_layer_lens_is_the_model(tasks):
    model = small_model()
    labelled = own_answers(model, tasks)
    plain = predict(model, labelled)
    plain_accuracy = 100.0 * sum(p == t.answer for t, p in zip(labelled, plain)) / len(labelled)
    assert 20.0 <= plain_accuracy <= 60.0  # the relabelling worked: a mismatch would change the accuracy

    assert lens_predict(model, labelled, 2) == plain
    result = decoder_lens(model, labelled, model_name="tiny")
    assert result.summary["layer_2_accuracy"] == result.summary["model_accuracy"] == plain_accuracy
    assert result.data["last_layer_reproduces_model"] is True
    assert result.summary["layer_1_accuracy"] < plain_accuracy  # layer 1 does not read the model's answers
    assert model.hook_dict["encoder.1.hook_resid_post"]._forward_hooks == {}  # hooks removed afterwards


@pytest.mark.parametrize("k", [1, 2])
def test_lens_at_layer_k_equals_a_truncated_model(tasks, k):
    model = small_model(n_encoder_layers=3, seed=4)
    lens = lens_predict(model, tasks, k)
    assert lens == predict(truncated(model, k), tasks)
    assert len(set(lens)) > 5  # not a degenerate model that answers the same to everything
    assert lens != predict(model, tasks)  # the lens changed what the decoder reads


def test_result_tables_figures_and_findings(tasks, tmp_path):
    model = small_model(seed=3)
    result = decoder_lens(model, tasks, model_name="tiny", source="rules")
    assert result.data["layers"] == [1, 2] and set(result.data["accuracy"]) == {1, 2}
    by_rule = result.data["by_transformation"]
    assert list(by_rule) == ["extend_sequence", "succ", "pred", "sort"]  # the paper's order
    assert all(row["n"] == 15 and set(row) == {"n", 1, 2} for row in by_rule.values())
    for layer in (1, 2):
        overall = sum(row[layer] * row["n"] for row in by_rule.values()) / len(tasks)
        assert overall == pytest.approx(result.data["accuracy"][layer])
    assert set(result.figures) == {"accuracy by encoder layer", "accuracy by transformation"}
    assert len(result.figures["accuracy by encoder layer"].data) == 1  # no paper bars for a 2-layer model
    bars = result.figures["accuracy by transformation"].data
    assert [bar.name for bar in bars] == ["layer 1", "layer 2"]
    assert list(bars[0].x) == [f"{rule} (n=15)" for rule in by_rule] and list(bars[1].customdata) == [15] * 4
    assert list(bars[1].y) == [row[2] for row in by_rule.values()]
    assert "60 tasks" in result.figures["accuracy by encoder layer"].layout.title.text
    assert [f.holds for f in result.findings][-1] is True and len(result.findings) == 3
    assert result.findings[1].holds is None and result.findings[1].value == result.summary["model_accuracy"]
    paths = result.write(tmp_path)
    assert paths["json"].exists() and paths["html"].exists()


def test_findings_compare_earlier_layers_with_the_last():
    assert [f.holds for f in _findings(dict(PAPER_LENS), PAPER_LENS[3], True, 1000)] == [True, None, True]
    early_too_high = _findings({1: 0.0, 2: 5.0, 3: 66.5}, 66.5, True, 1000)
    assert [f.holds for f in early_too_high] == [False, None, True]
    weaker_model = _findings({1: 0.0, 2: 1.0, 3: 35.0}, 35.0, False, 1000)  # 1.0 is within 2.9 % of 35 (1.0)
    assert [f.holds for f in weaker_model] == [True, None, False]
    assert weaker_model[0].value == pytest.approx(1.0 / 35.0)
    assert wilson_lower(0.0, 100) == 0.0 and 3.0 < wilson_lower(10.0, 100) < 10.0


def test_lens_tasks_sources(monkeypatch):
    model = small_model(metadata={"preset": "copy-20", "data_seed": 1})
    rules = lens_tasks(model, 25, seed=4, source="rules")
    assert len(rules) == 25 and {t.transformation for t in rules} == set(SEEN)
    assert rules == lens_tasks(model, 25, seed=4, source="rules")

    tiny = DatasetConfig(name="copy-20", n_alphabets=4, window_lengths=(3,), n_reshuffle=2, n_new_alphabets=4)
    monkeypatch.setitem(PRESETS, "copy-20", tiny)
    new = lens_tasks(model, 30, seed=0)
    assert len(new) == 30 and not any(t.is_copy for t in new)
    assert not {t.alphabet for t in new} & {t.alphabet for t in lens_tasks(model, 200, seed=0, source="val")}
    val = lens_tasks(model, 30, seed=0, source="val")
    assert len(val) == 30 and not any(t.is_copy for t in val) and all(t.answer for t in val)
    assert val == lens_tasks(model, 30, seed=0, source="val") and val != lens_tasks(model, 30, seed=1, source="val")


def test_bad_arguments():
    model = small_model()
    with pytest.raises(ValueError, match="unknown task source"):
        lens_tasks(model, 5, source="test")
    with pytest.raises(
        ValueError, match="records no training preset, so its dataset is not known; use source 'rules'$"
    ):
        lens_tasks(model, 5)
    assert len(lens_tasks(model, 5, source="rules")) == 5
    with pytest.raises(ValueError, match="not in 1..2"):
        lens_predict(model, rule_tasks("pred", 2), 3)
    with pytest.raises(ValueError, match="has no answer"):
        decoder_lens(model, [dataclasses.replace(rule_tasks("pred", 1)[0], answer=None)])


@pytest.mark.parametrize(
    ("percent", "n", "z", "expected"),
    [(50.0, 100, 1.96, 40.383), (10.0, 100, 1.96, 5.5229), (100.0, 10, 1.96, 72.246), (30.0, 10, 1.0, 17.882)],
)
def test_wilson_lower_bound_matches_the_textbook_values(percent, n, z, expected):
    """The Wilson score interval's lower end, e.g. 50/100 -> 40.38 %, 10/10 -> 72.25 % (z = 1.96)."""
    assert wilson_lower(percent, n, z) == pytest.approx(expected, abs=1e-3)


def test_wilson_lower_bound_is_the_accuracy_itself_without_spread_and_never_negative():
    assert wilson_lower(30.0, 10, z=0.0) == pytest.approx(30.0) and wilson_lower(0.0, 5) == 0.0


def test_earlier_layers_verdict_is_inclusive_and_reads_the_best_earlier_layer():
    """'Earlier layers decode nothing' holds when the best earlier layer's lower bound is <= the allowed share
    of the last layer (0 <= 0 holds, with no ratio), judged on the best, not the first, earlier layer."""
    zero = _findings({1: 0.0, 2: 0.0}, 0.0, True, 50)
    assert zero[0].holds is True and zero[0].value is None
    best = _findings({1: 10.0, 2: 0.0, 3: 60.0}, 60.0, True, 100)
    assert best[0].holds is False and best[0].value == pytest.approx(10.0 / 60.0)
    assert best[0].ours == "10.0 / 0.0 % vs 60.0 %"
    assert [f.name for f in best] == [
        "decoder lens: earlier encoder layers decode (almost) nothing",
        "decoder lens: the last encoder layer (the model's own accuracy)",
        "decoder lens: the last layer reproduces the model",
    ]
    assert best[1].ours == "layer 3: 60.0 %" and best[2].ours == "60.0 % vs 60.0 % plain greedy"
    lower = wilson_lower(1.0, 1000)
    assert _findings({1: 1.0, 2: (lower + 1e-9) / PAPER_EARLY_SHARE}, 50.0, True, 1000)[0].holds is True
    assert _findings({1: 1.0, 2: (lower - 1e-9) / PAPER_EARLY_SHARE}, 50.0, True, 1000)[0].holds is False


def test_a_one_layer_encoder_has_no_earlier_layer_finding():
    findings = _findings({1: 40.0}, 40.0, False, 10)
    assert [f.holds for f in findings] == [None, False] and findings[0].value == 40.0


def test_scores_per_layer_and_group_from_given_predictions(monkeypatch):
    """Exact match per layer, per transformation (copy rows and unlabelled tasks in their own groups), the plain
    accuracy and whether the last layer's predictions equal the plain ones."""
    pred = rule_tasks("pred", 2, seed=0)
    copy = dataclasses.replace(pred[0], examples=((pred[0].query, pred[0].answer),))
    unlabelled = dataclasses.replace(pred[1], transformation=None)
    tasks = [*pred, copy, unlabelled]
    assert copy.is_copy and not pred[0].is_copy
    answers = [t.answer for t in tasks]
    lens = {1: ["x", answers[1], "x", "x"], 2: [answers[0], answers[1], answers[2], "x"]}
    monkeypatch.setattr(decoder_lens_module, "lens_predict", lambda model, ts, layer, batch_size: lens[layer])
    monkeypatch.setattr(decoder_lens_module, "predict", lambda model, ts, batch_size: [*answers[:3], "y"])
    result = decoder_lens(small_model(), tasks, model_name="tiny", source="val")
    assert result.data["accuracy"] == {1: 25.0, 2: 75.0} and result.summary["model_accuracy"] == 75.0
    assert result.summary == {
        "tasks": 4,
        "source": "val",
        "layer_1_accuracy": 25.0,
        "layer_2_accuracy": 75.0,
        "model_accuracy": 75.0,
    }
    assert result.data["by_transformation"]["copy"] == {"n": 1, 1: 0.0, 2: 100.0}
    assert result.data["by_transformation"]["unlabelled"] == {"n": 1, 1: 0.0, 2: 0.0}
    assert result.data["by_transformation"]["pred"] == {"n": 2, 1: 50.0, 2: 100.0}
    assert result.data["last_layer_reproduces_model"] is False and result.findings[-1].holds is False
    assert result.data["paper"] == {1: 0.0, 2: 1.9, 3: 66.5} and result.name == "decoder_lens"
    assert "source" not in decoder_lens(small_model(), tasks).summary


def test_lens_predict_refuses_layer_zero_and_reads_layer_one():
    model = small_model(n_encoder_layers=1)
    tasks = rule_tasks("pred", 3)
    assert lens_predict(model, tasks, 1) == predict(model, tasks)
    with pytest.raises(ValueError, match="not in 1..1"):
        lens_predict(model, tasks, 0)


def test_lens_tasks_need_at_least_one():
    model = small_model()
    assert len(lens_tasks(model, 1, source="rules")) == 1
    with pytest.raises(ValueError, match="positive"):
        lens_tasks(model, 0, source="rules")


def test_findings_state_the_paper_numbers_ours_and_the_rule():
    """The findings table's texts: the paper's three numbers, ours, and the allowed share of the last layer."""
    early, last, same = _findings({1: 0.0, 2: 1.5, 3: 60.0}, 61.25, True, 100)
    assert (early.paper, early.ours) == ("layers 1/2: 0.0 / 1.9 % vs 66.5 % (layer 3)", "0.0 / 1.5 % vs 60.0 %")
    assert early.detail == (
        "holds when the best earlier layer (95 % lower bound) is at most 0.029 x the last layer = 1.7 %"
    )
    assert early.holds is True and early.value == pytest.approx(1.5 / 60.0)
    assert (last.paper, last.ours, last.value) == ("layer 3: 66.5 %", "layer 3: 60.0 %", 60.0)
    assert last.detail == "not a finding about the lens: the last layer's lens is the model"
    assert (same.paper, same.ours) == ("by construction", "60.0 % vs 61.2 % plain greedy")
    assert same.detail == "holds when every last-layer lens prediction equals the plain greedy prediction"


def test_the_batch_size_reaches_every_decoding_run(monkeypatch):
    """``batch_size`` (default `DEFAULT_BATCH_SIZE`) is passed to every lens run and to the plain run."""
    seen = []
    monkeypatch.setattr(decoder_lens_module, "predict", lambda model, ts, batch_size: seen.append(batch_size) or [""])
    model, tasks = small_model(), rule_tasks("pred", 1)
    decoder_lens(model, tasks, batch_size=7)
    assert seen == [7, 7, 7]
    seen.clear()
    result = decoder_lens(model, tasks)
    assert seen == [DEFAULT_BATCH_SIZE] * 3 and result.model == "" and "source" not in result.summary


def test_lens_tasks_default_to_the_new_alphabets_with_seed_zero(monkeypatch):
    model = small_model(metadata={"preset": "copy-20", "data_seed": 1})
    tiny = DatasetConfig(name="copy-20", n_alphabets=4, window_lengths=(3,), n_reshuffle=2, n_new_alphabets=4)
    monkeypatch.setitem(PRESETS, "copy-20", tiny)
    assert lens_tasks(model, 10) == lens_tasks(model, 10, seed=0, source="new")
    assert lens_tasks(model, 10, source="rules") == lens_tasks(model, 10, seed=0, source="rules")


def test_wilson_lower_bound_defaults_to_95_percent():
    assert wilson_lower(50.0, 100) == pytest.approx(40.383, abs=1e-3)


def test_lens_task_sources_draw_from_their_own_split_and_seed(monkeypatch):
    """``"new"`` draws from the new-alphabet test split, ``"val"`` from val, ``"rules"`` from `seen_rule_tasks`
    with the seed."""
    model = small_model(metadata={"preset": "copy-20", "data_seed": 1})
    tiny = DatasetConfig(name="copy-20", n_alphabets=4, window_lengths=(3,), n_reshuffle=2, n_new_alphabets=4)
    monkeypatch.setitem(PRESETS, "copy-20", tiny)
    splits = evaluation_dataset(model).splits
    new, val = lens_tasks(model, 20, source="new"), lens_tasks(model, 20, source="val")
    assert {t.alphabet for t in new} <= {t.alphabet for t in splits["test_new_alphabets"]}
    assert {t.alphabet for t in val} <= {t.alphabet for t in splits["val"]}
    assert lens_tasks(model, 6, seed=4, source="rules") == seen_rule_tasks(6, 4) != seen_rule_tasks(6, 0)


def test_the_last_layer_is_compared_with_the_plain_predictions(monkeypatch):
    """With three encoder layers, 'the last layer reproduces the model' compares layer 3's predictions (not
    layer 2's) with the plain ones; the overall figure names its bars after the model."""
    tasks = rule_tasks("pred", 2, seed=0)
    answers = [t.answer for t in tasks]
    lens = {1: ["x", "x"], 2: ["x", answers[1]], 3: answers}
    monkeypatch.setattr(decoder_lens_module, "lens_predict", lambda model, ts, layer, batch_size: lens[layer])
    monkeypatch.setattr(decoder_lens_module, "predict", lambda model, ts, batch_size: answers)
    result = decoder_lens(small_model(n_encoder_layers=3), tasks, model_name="tiny")
    assert result.data["last_layer_reproduces_model"] is True and result.data["model_accuracy"] == 100.0
    assert result.data["accuracy"] == {1: 0.0, 2: 50.0, 3: 100.0}
    overall = result.figures["accuracy by encoder layer"]
    assert overall.data[0].name == "tiny" and len(overall.data) == 2  # with the paper's three layers beside
