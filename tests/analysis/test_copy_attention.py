"""Figure 5's number (layer-2 attention from example-output letters to the same example-input letter) on
hand-made attention patterns."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.analysis import copy_attention
from lsa_interp.analysis.copy_attention import copy_attention_analysis, example_match_attention
from lsa_interp.analysis.prompts import rule_tasks
from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.vocab import ROLE_ID
from lsa_interp.model import HookedEncoderDecoder, ModelConfig

torch.set_num_threads(1)


def _model(n_encoder_layers: int = 2) -> HookedEncoderDecoder:
    cfg = ModelConfig(d_model=16, n_heads=2, n_encoder_layers=n_encoder_layers, n_decoder_layers=1, d_mlp=16)
    return HookedEncoderDecoder(cfg)


@pytest.fixture
def fake_patterns(monkeypatch):
    """Encoder patterns made by hand: layer 1 is all ones; in layer 2, head 1 puts 1 on every (example-output
    row, example-input key) entry, head 2 puts 0.25 everywhere, head 3 nothing. Head-averaged, each example-input
    key of an example-output row gets 1.25 / 3. Records the model's mode and the tasks of each call."""
    calls = []

    def fake(model, tasks):
        calls.append((model.training, list(tasks)))
        batch = encode_tasks(list(tasks), with_answers=False)
        roles = batch.roles
        n, pos = batch.src.shape
        patterns = torch.zeros(n, 2, 3, pos, pos)
        patterns[:, 0] = 1.0
        patterns[:, 1, 0] = (
            (roles == ROLE_ID["example_out"])[:, :, None] & (roles == ROLE_ID["example_in"])[:, None, :]
        ).float()
        patterns[:, 1, 1] = 0.25
        return patterns, batch.src

    monkeypatch.setattr(copy_attention, "encoder_patterns", fake)
    return calls


def test_mass_on_the_same_letter_averaged_over_heads_and_letters_with_a_partner(fake_patterns):
    """Each example-output letter with the same letter in the example input (one, in successor windows) gets the
    head-averaged layer-2 weight on it; letters without such a partner are left out of the mean."""
    model = _model()
    assert example_match_attention(model, n_tasks=6, seed=3) == pytest.approx(1.25 / 3)
    ((_, tasks),) = fake_patterns
    assert tasks == rule_tasks("succ", 6, seed=3, alphabets="standard")
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
    """Figure 5 reads encoder layer 2: a one-layer encoder is refused, two layers are enough."""
    with pytest.raises(ValueError, match="encoder layer 2"):
        example_match_attention(_model(1), n_tasks=2)
    assert example_match_attention(_model(2), n_tasks=2) == pytest.approx(1.25 / 3)


def test_analysis_reports_the_number_without_a_verdict(fake_patterns):
    """One finding whose value is the measured attention and whose verdict is left to the population."""
    result = copy_attention_analysis(_model(), "tiny", seed=5)
    assert result.name == "copy_attention" and result.model == "tiny"
    assert result.summary == {"attention": pytest.approx(1.25 / 3)} and result.data == result.summary
    (finding,) = result.findings
    assert finding.holds is None and finding.value == pytest.approx(1.25 / 3) and finding.ours == "0.417"
    assert finding.name == "Figure 5: layer-2 attention example-out -> same example-in letter"
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
    assert finding.paper == "~0.23 with copy tasks, ~0.015 without (head average, succ, standard alphabet)"
    assert finding.detail == "compared across models by `lsa-interp report --models`"
