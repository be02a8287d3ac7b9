"""The explorer's model arithmetic against the library's own analyses, on the planted model and a tiny one."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.analysis.decoder_lens import lens_predict
from lsa_interp.analysis.patching import patch_pairs
from lsa_interp.analysis.planted import PLANTED_HEAD, READOUT_HEAD, planted_answer, planted_model
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.data.task import Task
from lsa_interp.explorer.compute import (
    CellBox,
    Interventions,
    Prediction,
    ablate_cells,
    ablate_heads,
    compare,
    intervention_hooks,
    lens_top_k,
    patch_heads_from,
    reference_means,
    run_task,
)
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.heads import Head
from lsa_interp.model.inputs import decoder_input_from_generated
from lsa_interp.viz.attention_data import display_token

TASK = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd")
SHORT = Task.parse("abcdefghijklmnopqrstuvwxyz | ab > ac | bcd")


@pytest.fixture(scope="module")
def planted():
    return planted_model()


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_heads=4, d_mlp=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)
    return HookedEncoderDecoder(cfg).eval()


def test_clean_run_is_the_models_answer_with_top_k(planted):
    data = run_task(planted, TASK)
    assert data.answer == planted.solve(TASK) == planted_answer(TASK) == "f"
    assert data.top_probs.shape == (2, 5) and torch.all(data.top_probs[:, :-1] >= data.top_probs[:, 1:])
    assert data.encoder_attn.shape == (3, 4, 39, 39) and data.cross_attn.shape == (1, 4, 2, 39)


def test_one_pass_reads_what_a_teacher_forced_run_of_the_answer_reads(tiny):
    ivs = Interventions(lens_layer=0, ablated_heads=(Head("decoder", 1, 2, "cross_attn"), Head("encoder", 1, 0)))
    data = run_task(tiny, TASK, ivs, top_k=3, max_new_tokens=6)
    assert data.decoder_attn.shape[-1] == 6  # no EOS in 6 steps: every step is recorded
    with tiny.hooks(fwd_hooks=intervention_hooks(tiny, ivs)):
        tgt = decoder_input_from_generated(tiny.generate(TASK, max_new_tokens=6))
        logits, cache = tiny.run_with_cache(TASK, tgt)
    expected = {
        "encoder_attn": torch.stack([cache.pattern("encoder", layer, "attn")[0] for layer in range(2)]),
        "decoder_attn": torch.stack([cache.pattern("decoder", layer, "attn")[0] for layer in range(2)]),
        "cross_attn": torch.stack([cache.pattern("decoder", layer, "cross_attn")[0] for layer in range(2)]),
        "resid": torch.stack([cache.resid("encoder", layer, "post")[0] for layer in range(2)]),
        "top_probs": torch.softmax(logits[0], -1).topk(3, -1).values,
    }
    for name, tensor in expected.items():
        torch.testing.assert_close(getattr(data, name), tensor, atol=1e-5, rtol=1e-4, msg=name)
    assert tuple(data.tgt_tokens) == tuple(display_token(t) for t in tgt[0].tolist())


def test_patching_matches_the_patching_api(planted):
    pairs = minimal_pairs("succ", "pred", 4, lengths=(3, 4))
    expected = patch_pairs(planted, pairs, [PLANTED_HEAD])
    got = [patch_heads_from(planted, p.target, p.source, [PLANTED_HEAD]).answer for p in pairs]
    assert got == expected.patched and got != expected.clean


def test_patching_an_empty_head_changes_nothing(planted):
    pair = minimal_pairs("succ", "pred", 1)[0]
    other = Head("encoder", 0, 1)
    assert patch_heads_from(planted, pair.target, pair.source, [other]).answer == pair.target.examples[0][1][0]


def test_lens_matches_the_decoder_lens_analysis(tiny):
    for layer in (1, 2):
        assert lens_top_k(tiny, TASK, layer).answer == lens_predict(tiny, [TASK], layer)[0]
    assert lens_top_k(tiny, TASK, 2) == lens_top_k(tiny, TASK, 2)
    with pytest.raises(ValueError, match="lens layer 3 is not in 1..2"):
        lens_top_k(tiny, TASK, 3)


def test_ablating_the_readout_head_or_its_cells_changes_the_answer(planted):
    assert ablate_heads(planted, TASK, [READOUT_HEAD]).answer != "f"
    assert ablate_heads(planted, TASK, [Head("encoder", 0, 0)]).answer == "f"
    arrow = 30  # the readout head copies what the first example-out letter read into '>'
    assert ablate_cells(planted, TASK, [CellBox(2, (arrow, arrow), (0, 127))]).answer != "f"
    assert ablate_cells(planted, TASK, [CellBox(0, (0, 0), (0, 0))]).answer == "f"


def test_mean_ablation_fills_the_reference_mean(tiny):
    means = reference_means(tiny, n=8)
    assert means.shape == (2, 32)
    box = CellBox(0, (3, 5), (2, 9), "mean")
    seen = {}
    tiny.add_hook("encoder.0.hook_resid_post", lambda x, hook: seen.setdefault("x", x.clone()), dir="fwd")
    try:
        run_task(tiny, TASK, Interventions(cells=(box,)), means=means)
    finally:
        tiny.reset_hooks()
    data = run_task(tiny, TASK, Interventions(cells=(box,)), means=means)
    assert torch.allclose(data.resid[0, 3:6, 2:10], means[0, 2:10].expand(3, 8))
    assert not torch.allclose(seen["x"][0, 3:6, 2:10], means[0, 2:10].expand(3, 8))
    with pytest.raises(ValueError, match="reference means"):
        run_task(tiny, TASK, Interventions(cells=(box,)))


@pytest.mark.parametrize(
    ("interventions", "message"),
    [
        (Interventions(ablated_heads=(Head("decoder", 2, 0),)), "no head dec:3.1"),
        (Interventions(cells=(CellBox(0, (0, 39), (0, 1)),)), "outside 0..38"),
        (Interventions(cells=(CellBox(0, (0, 1), (0, 1), "half"),)), "unknown ablation mode"),
        (Interventions(patched_heads=(Head("encoder", 0, 0),)), "needs a source task"),
        (Interventions(patched_heads=(Head("decoder", 0, 0),), source=TASK), "not an encoder self-attention"),
        (Interventions(patched_heads=(Head("encoder", 0, 0),), source=SHORT), "does not align"),
    ],
)
def test_bad_interventions_are_named(tiny, interventions, message):
    with pytest.raises(ValueError, match=message):
        run_task(tiny, TASK, interventions)


def test_compare_marks_changed_steps():
    clean = Prediction("ab", ((("a", 0.9),), (("b", 0.8),), (("EOS", 0.7),)))
    changed = Prediction("a", ((("a", 0.6),), (("EOS", 0.5),)))
    rows = compare(clean, changed)
    assert [r.differs for r in rows] == [False, True, True]
    assert rows[2].changed == "" and rows[0].changed_prob == 0.6
