"""The explorer's model arithmetic against the library's own analyses, on the planted model and a tiny one."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.analysis.decoder_lens import lens_predict
from lsa_interp.analysis.patching import patch_pairs
from lsa_interp.analysis.planted import PLANTED_HEAD, READOUT_HEAD, planted_answer, planted_model
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.vocab import display_token
from lsa_interp.explorer.compute import (
    CellBox,
    Interventions,
    Prediction,
    StepChange,
    ablate_cells,
    ablate_heads,
    compare,
    intervention_hooks,
    lens_top_k,
    patch_heads_from,
    prediction,
    reference_means,
    run_task,
)
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.heads import Head
from lsa_interp.model.inputs import decoder_input_from_generated

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
    assert data.probs.shape == (2, 30) and torch.equal(data.probs.topk(5).values, data.top_probs)
    given = prediction(data)
    assert [given.probability(step, token) for step, ranked in enumerate(given.steps) for token, _ in ranked] == [
        p for ranked in given.steps for _, p in ranked
    ]
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
    own = ablate_heads(tiny, TASK, [])  # the model itself: nothing changed
    assert lens_top_k(tiny, TASK, 2) == own and lens_top_k(tiny, TASK, 1) != own  # the last layer's lens is the model
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
        (Interventions(cells=(CellBox(0, (0, 39), (0, 1)),)), "cell positions 0-39 are outside 0..38"),
        (Interventions(cells=(CellBox(0, (0, 1), (0, 32)),)), "cell dims 0-32 are outside 0..31"),
        (Interventions(cells=(CellBox(2, (0, 1), (0, 1)),)), "cells in encoder layer 3"),
        (Interventions(ablated_heads=(Head("encoder", 0, 4),)), "no head 1.5"),
        (Interventions(cells=(CellBox(0, (0, 1), (0, 1), "half"),)), "unknown ablation mode"),
        (Interventions(patched_heads=(Head("encoder", 0, 0),)), "needs a source task"),
        (Interventions(patched_heads=(Head("decoder", 0, 0),), source=TASK), "not an encoder self-attention"),
        (Interventions(patched_heads=(Head("encoder", 0, 0),), source=SHORT), "does not align"),
    ],
)
def test_bad_interventions_are_named(tiny, interventions, message):
    with pytest.raises(ValueError, match=message):
        run_task(tiny, TASK, interventions)


def test_a_task_longer_than_the_position_table_is_named_with_both_lengths(tiny):
    """It used to fail inside the encoder with "position 590 exceeds the position table (512 rows)"."""
    long = Task.parse("abcdefghijklmnopqrstuvwxyz | " + " | ".join(["abc > abd"] * 70) + " | xyz")
    n_pos = encode_tasks([long], with_answers=False).src.shape[1]
    assert n_pos == 591 > tiny.cfg.max_len
    with pytest.raises(ValueError, match=r"^the task is 591 tokens long and this model reads at most 512 "):
        run_task(tiny, long)
    fits = Task.parse("abcdefghijklmnopqrstuvwxyz | " + " | ".join(["abc > abd"] * 60) + " | wxyz")
    assert encode_tasks([fits], with_answers=False).src.shape[1] == tiny.cfg.max_len  # the longest it reads
    assert run_task(tiny, fits, max_new_tokens=2).resid.shape[1] == tiny.cfg.max_len


def test_compare_marks_changed_steps():
    clean = Prediction("ab", ((("a", 0.9),), (("b", 0.8),), (("EOS", 0.7),)), ())
    changed = Prediction("a", ((("a", 0.6),), (("EOS", 0.5),)), ())
    rows = compare(clean, changed)
    assert [r.differs for r in rows] == [False, True, True]
    assert rows[2].changed == "" and rows[0].changed_prob == 0.6


def test_the_clean_run_of_an_intervention_keeps_its_lens():
    box = CellBox(0, (0, 0), (0, 0))
    ivs = Interventions(lens_layer=1, cells=(box,), ablated_heads=(Head("encoder", 0, 0),))
    assert ivs.active and ivs.without_changes() == Interventions(lens_layer=1)
    assert not ivs.without_changes().active


@pytest.fixture(scope="module")
def normed():
    """A tiny model whose layer norms have weights and biases far from 1 and 0, and a large epsilon: a lens
    that skipped any of them would read other numbers."""
    torch.manual_seed(1)
    cfg = ModelConfig(d_model=32, n_heads=4, d_mlp=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, ln_eps=0.5)
    model = HookedEncoderDecoder(cfg).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "ln" in name:
                parameter.copy_(torch.randn_like(parameter))
    return model


def _encode_recording(model, names: list[str], interventions: Interventions | None = None) -> dict:
    """Encode ``TASK`` under ``interventions`` and return what each hook point in ``names`` gave, as the
    intervention left it (the recording hooks come after the intervention's)."""
    seen = {}
    record = [(name, lambda x, hook: seen.setdefault(hook.name, x.clone())) for name in names]
    with model.hooks(fwd_hooks=intervention_hooks(model, interventions or Interventions()) + record):
        model.encode(encode_tasks([TASK], with_answers=False).src)
    return seen


def test_the_lens_reads_a_layer_through_the_final_norm_with_its_weights(normed):
    names = ["encoder.0.hook_resid_post", "encoder.ln_final.hook_out"]
    seen = _encode_recording(normed, names, Interventions(lens_layer=0))
    torch.testing.assert_close(seen[names[1]], normed.encoder.ln_final(seen[names[0]]))
    assert normed.encoder.ln_final.eps == 0.5


def test_ablating_a_head_zeroes_its_output_and_no_other(tiny):
    name = Head("encoder", 1, 2).hook("z")
    clean = _encode_recording(tiny, [name])[name]
    ablated = _encode_recording(tiny, [name], Interventions(ablated_heads=(Head("encoder", 1, 2),)))[name]
    assert torch.count_nonzero(ablated[:, :, 2]) == 0 and torch.count_nonzero(clean[:, :, 2]) > 0
    keep = [0, 1, 3]
    torch.testing.assert_close(ablated[:, :, keep], clean[:, :, keep])


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_cell_ablation_changes_its_box_and_nothing_outside_it(tiny, mode):
    means = reference_means(tiny, n=8)
    box = CellBox(0, (3, 5), (2, 9), mode)
    clean = _encode_recording(tiny, ["encoder.0.hook_resid_post"])["encoder.0.hook_resid_post"][0]
    changed = run_task(tiny, TASK, Interventions(cells=(box,)), means=means).resid[0]
    inside = torch.zeros_like(clean, dtype=torch.bool)
    inside[3:6, 2:10] = True
    expected = torch.zeros(3, 8) if mode == "zero" else means[0, 2:10].expand(3, 8)
    torch.testing.assert_close(changed[3:6, 2:10], expected)
    torch.testing.assert_close(changed[~inside], clean[~inside])


def test_mean_ablation_without_means_takes_the_model_s_reference_means(tiny):
    box = CellBox(1, (0, 4), (0, 31), "mean")
    given = ablate_cells(tiny, TASK, [box], means=reference_means(tiny))
    assert ablate_cells(tiny, TASK, [box]) == given
    assert given != ablate_cells(tiny, TASK, [CellBox(1, (0, 4), (0, 31), "zero")])
    assert ablate_cells(tiny, TASK, [box], means=torch.zeros(2, 32)) == ablate_cells(
        tiny, TASK, [CellBox(1, (0, 4), (0, 31), "zero")]
    ), "given means are used as they are"


def test_one_step_runs_record_their_single_decoder_row(tiny):
    data = run_task(tiny, TASK, max_new_tokens=1)
    assert data.decoder_attn.shape == (2, 4, 1, 1) and torch.allclose(data.decoder_attn, torch.ones(2, 4, 1, 1))
    assert data.top_probs.shape == (1, 5)


def test_each_helper_returns_k_tokens_per_step(tiny, planted):
    pair = minimal_pairs("succ", "pred", 1)[0]
    cases = [
        lambda **k: lens_top_k(tiny, TASK, 1, **k),
        lambda **k: ablate_cells(tiny, TASK, [CellBox(0, (0, 0), (0, 0))], **k),
        lambda **k: ablate_heads(tiny, TASK, [Head("encoder", 0, 0)], **k),
        lambda **k: patch_heads_from(planted, pair.target, pair.source, [PLANTED_HEAD], **k),
    ]
    for case in cases:
        assert {len(step) for step in case().steps} == {5}
        assert {len(step) for step in case(k=2).steps} == {2}


def test_compare_numbers_steps_from_1_and_fills_the_shorter_run():
    clean = Prediction("ab", ((("a", 0.9),), (("b", 0.8),), (("EOS", 0.7),)), ())
    changed = Prediction("a", ((("a", 0.6),), (("EOS", 0.5),)), ())
    assert compare(clean, changed) == [
        StepChange(1, "a", "a", 0.9, 0.6),
        StepChange(2, "b", "EOS", 0.8, 0.5),
        StepChange(3, "EOS", "", 0.7, 0.0),
    ]
    assert compare(changed, clean)[2] == StepChange(3, "", "EOS", 0.0, 0.7)
    assert compare(Prediction("", (), ()), Prediction("", (), ())) == []
