"""Figure 5's number (head-averaged attention from example-output letters to the same example-input letter, in
the stronger of encoder layers 1 and 2) on hand-made attention patterns."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.analysis import copy_attention, population
from lsa_interp.analysis.copy_attention import copy_attention_analysis, example_match_attention, example_match_by_layer
from lsa_interp.analysis.prompts import rule_tasks
from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.vocab import ROLE_ID
from lsa_interp.model import HookedEncoderDecoder, ModelConfig

torch.set_num_threads(1)


def _model(n_encoder_layers: int = 2) -> HookedEncoderDecoder:
    cfg = ModelConfig(d_model=16, n_heads=2, n_encoder_layers=n_encoder_layers, n_decoder_layers=1, d_mlp=16)
    return HookedEncoderDecoder(cfg)


LAYER_1 = {"weight": 0.1}
"""The uniform weight of every head of encoder layer 1 in `fake_patterns` (a test may raise it)."""


@pytest.fixture
def fake_patterns(monkeypatch):
    """Encoder patterns made by hand, three layers of three heads: layer 1 puts ``LAYER_1["weight"]`` everywhere
    (default 0.1); in layer 2, head 1 puts 1 on every (example-output row, example-input key) entry, head 2 puts
    0.25 everywhere, head 3 nothing: head-averaged, each example-input key of an example-output row gets 1.25 / 3;
    layer 3 is all ones (never read). Records the model's mode and the tasks of each call."""
    calls = []

    def fake(model, tasks):
        calls.append((model.training, list(tasks)))
        batch = encode_tasks(list(tasks), with_answers=False)
        roles = batch.roles
        n, pos = batch.src.shape
        patterns = torch.zeros(n, 3, 3, pos, pos)
        patterns[:, 0] = LAYER_1["weight"]
        patterns[:, 1, 0] = (
            (roles == ROLE_ID["example_out"])[:, :, None] & (roles == ROLE_ID["example_in"])[:, None, :]
        ).float()
        patterns[:, 1, 1] = 0.25
        patterns[:, 2] = 1.0
        return patterns, batch.src

    monkeypatch.setattr(copy_attention, "encoder_patterns", fake)
    yield calls
    LAYER_1["weight"] = 0.1


def test_mass_on_the_same_letter_averaged_over_heads_and_letters_with_a_partner(fake_patterns):
    """Each example-output letter with the same letter in the example input (one, in successor windows) gets the
    head-averaged weight on it, per layer; letters without such a partner are left out of the mean. The number is
    the stronger of layers 1 and 2 (here 2), never layer 3."""
    model = _model()
    assert example_match_by_layer(model, n_tasks=6, seed=3) == pytest.approx([0.1, 1.25 / 3, 1.0])
    assert example_match_attention(model, n_tasks=6, seed=3) == pytest.approx(1.25 / 3)
    (_, tasks), (_, again) = fake_patterns
    assert tasks == again == rule_tasks("succ", 6, seed=3, alphabets="standard")
    assert any(t.examples[0][1][-1] not in t.examples[0][0] for t in tasks)  # some letters have no partner


def test_patterns_are_read_in_eval_mode_and_the_mode_is_restored(fake_patterns):
    """The model is put in eval mode while its patterns are read and returned to its previous mode."""
    model = _model().train()
    example_match_attention(model, n_tasks=2)
    assert fake_patterns[0][0] is False and model.training is True
    model.eval()
    example_match_attention(model, n_tasks=2)
    assert fake_patterns[1][0] is False and model.training is False


def test_a_model_needs_a_second_encoder_layer(fake_patterns):
    """Figure 5 reads encoder layers 1 and 2: a one-layer encoder is refused, two layers are enough."""
    with pytest.raises(ValueError, match="encoder layers 1 and 2"):
        example_match_attention(_model(1), n_tasks=2)
    with pytest.raises(ValueError, match="encoder layers 1 and 2"):
        copy_attention_analysis(_model(1))
    assert example_match_attention(_model(2), n_tasks=2) == pytest.approx(1.25 / 3)


def test_a_matching_pattern_in_layer_1_is_read_there(fake_patterns):
    """Where layer 1 attends more to the partner letter than layer 2 (our models' matching heads often sit in layer
    1), the number is layer 1's and the finding names it."""
    LAYER_1["weight"] = 0.6
    assert example_match_attention(_model(), n_tasks=4) == pytest.approx(0.6)
    result = copy_attention_analysis(_model(), "tiny")
    assert result.summary["layer"] == 1 and result.summary["attention"] == pytest.approx(0.6)
    assert result.findings[0].ours == "0.600 (layer 1; layer 1 0.600, layer 2 0.417, layer 3 1.000)"


def test_the_population_counts_the_finding_by_its_name():
    """`analysis.population` finds Figure 5's finding among a model's findings by this name."""
    assert population.FIGURE5 == copy_attention.NAME


def test_analysis_reports_the_number_without_a_verdict(fake_patterns):
    """One finding whose value is the measured attention and whose verdict is left to the population."""
    result = copy_attention_analysis(_model(), "tiny", seed=5)
    assert result.name == "copy_attention" and result.model == "tiny"
    assert result.summary == {
        "attention": pytest.approx(1.25 / 3),
        "layer": 2,
        "by_layer": pytest.approx([0.1, 1.25 / 3, 1.0]),
    }
    assert result.data == result.summary
    (finding,) = result.findings
    assert finding.holds is None and finding.value == pytest.approx(1.25 / 3)
    assert finding.ours == "0.417 (layer 2; layer 1 0.100, layer 2 0.417, layer 3 1.000)"
    assert finding.name == "Figure 5: attention example-out -> same example-in letter (stronger of encoder layers 1-2)"
    ((_, tasks),) = fake_patterns
    assert tasks == rule_tasks("succ", 50, seed=5, alphabets="standard")


def test_defaults_are_50_succ_tasks_on_the_standard_alphabet_seed_0(fake_patterns):
    """Without arguments: 50 successor tasks on the standard alphabet, seed 0; the result is named "model"."""
    model = _model()
    example_match_attention(model)
    result = copy_attention_analysis(model)
    expected = rule_tasks("succ", 50, seed=0, alphabets="standard")
    assert fake_patterns[0][1] == expected and fake_patterns[1][1] == expected
    assert result.model == "model"
    (finding,) = result.findings
    assert finding.paper == (
        "~0.23 with copy tasks, ~0.015 without (head average of layer 2, where the authors' matching head was; succ, "
        "standard alphabet)"
    )
    assert finding.detail == "compared across models by `lsa-interp report --models`"


def test_by_layer_defaults_to_50_succ_tasks_seed_0(fake_patterns):
    """`example_match_by_layer` on its own reads the same tasks as Figure 5's number: 50, seed 0."""
    assert example_match_by_layer(_model()) == pytest.approx([0.1, 1.25 / 3, 1.0])
    ((_, tasks),) = fake_patterns
    assert tasks == rule_tasks("succ", 50, seed=0, alphabets="standard")
