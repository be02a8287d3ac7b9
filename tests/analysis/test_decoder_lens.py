"""Decoder lens: the last layer is the model itself, layer k is a model truncated to k encoder layers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lsa_interp.analysis.decoder_lens import (
    PAPER_LENS,
    _findings,
    decoder_lens,
    lens_predict,
    lens_tasks,
    wilson_lower,
)
from lsa_interp.analysis.prompts import rule_tasks
from lsa_interp.data.presets import PRESETS, DatasetConfig
from lsa_interp.data.transformations import SEEN
from lsa_interp.evaluation import predict
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
    with pytest.raises(ValueError, match="records no training preset"):
        lens_tasks(model, 5)
    with pytest.raises(ValueError, match="not in 1..2"):
        lens_predict(model, rule_tasks("pred", 2), 3)
    with pytest.raises(ValueError, match="has no answer"):
        decoder_lens(model, [dataclasses.replace(rule_tasks("pred", 1)[0], answer=None)])
