"""Activation patching: exact for nothing and whole layers, and the planted model's known circuit found where it is."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
import torch

from lsa_interp.analysis import activation_patching as ap
from lsa_interp.analysis.pair_batch import pair_batch
from lsa_interp.analysis.patch_runs import measure_at_parting, parting_steps, run_patched
from lsa_interp.analysis.planted import PLANTED_HEAD, READOUT_HEAD, planted_model
from lsa_interp.analysis.prompts import MinimalPair, minimal_pairs
from lsa_interp.data.tokenizer import encode_tasks
from tests.analysis.patch_setup import pairs_parting_late, planted_pairs, succ_pred_runs

torch.set_num_threads(1)

OUT1, OUT3, ARROW_AT = 31, 33, 30
"""Positions in a 3-letter prompt: the first and last example-output letters, and ``>`` before them."""


@pytest.fixture(scope="module")
def planted():
    return planted_model()


@pytest.fixture(scope="module")
def planted_result(planted):
    return ap.patch_activations(planted, planted_pairs(6))


def test_the_planted_model_answers_the_source_letter_only_where_its_circuit_runs(planted, planted_result):
    result = planted_result
    assert result.source_logit_diff > 1 and result.target_logit_diff < -1
    resid = result.normalized(ap.RESID)
    assert resid[0, OUT1] == pytest.approx(1, abs=1e-3)  # the planted head reads the first output letter
    assert resid[-1, ARROW_AT] == pytest.approx(1, abs=1e-3)  # the decoder reads its answer from the memory at >
    assert resid[0, OUT3].abs() < 1e-3 and resid[-1, OUT1].abs() < 1e-3
    heads = result.normalized(ap.HEADS)
    circuit = {(PLANTED_HEAD.layer, PLANTED_HEAD.head), (READOUT_HEAD.layer, READOUT_HEAD.head), (4, 0)}
    for row in range(heads.shape[0]):
        for head in range(heads.shape[1]):
            expected = 1.0 if (row, head) in circuit else 0.0  # row 4: the decoder's cross-attention
            assert heads[row, head] == pytest.approx(expected, abs=1e-3), (result.grids[ap.HEADS].rows[row], head)
    grid = result.grids[ap.HEADS]
    assert grid.source_answers[PLANTED_HEAD.layer, PLANTED_HEAD.head] == 1 and grid.other_answers[1, 2] == 0
    assert grid.source_answers[0].eq(0).all() and grid.source_answers[3:].isnan().all()  # decoder rows: not decoded
    assert result.grids[ap.RESID].source_answers[0, OUT1] == 1 and result.grids[ap.RESID].source_answers[0, OUT3] == 0
    assert grid.source_letters.shape == (2, *grid.logit_diff.shape)  # one answer letter, then the EOS
    torch.testing.assert_close(grid.source_letters[0], grid.source_answers, equal_nan=True)  # a letter is the answer
    assert grid.source_letters[1].isnan().all() and grid.other_letters[0, 1, 2] == 0  # no pair's EOS differs
    assert grid.letters_at(PLANTED_HEAD.layer, PLANTED_HEAD.head)[0] == 1 and grid.letters_at(0, 0)[0] == 0


def test_each_head_at_each_position_finds_where_the_planted_circuit_reads(planted):
    result = ap.patch_activations(planted, planted_pairs(4), [ap.HEAD_POSITIONS])
    grid, normalized = result.grids[ap.HEAD_POSITIONS], result.normalized(ap.HEAD_POSITIONS)
    assert (
        grid.rows[:5] == ("head 1.1", "head 1.2", "head 1.3", "head 1.4", "head 2.1")
        and grid.columns[OUT1] == "out1·31"
    )
    assert grid.hooks[PLANTED_HEAD.layer * 4 + PLANTED_HEAD.head] == "encoder.1.attn.hook_z"
    expected = torch.zeros_like(normalized)
    expected[PLANTED_HEAD.layer * 4 + PLANTED_HEAD.head, OUT1] = 1  # it reads the first example-output letter there
    expected[READOUT_HEAD.layer * 4 + READOUT_HEAD.head, ARROW_AT] = 1  # and the readout head copies it to >
    assert torch.allclose(normalized, expected, atol=1e-3)


def test_the_decoder_residual_at_the_parting_step_takes_the_difference_at_the_cross_attention(planted):
    result = ap.patch_activations(planted, planted_pairs(4), [ap.DECODER_RESID])
    grid = result.grids[ap.DECODER_RESID]
    assert grid.rows == (
        "before layer 1",
        "after the self-attention of layer 1",
        "after the cross-attention of layer 1",
        "after layer 1",
    )
    assert grid.hooks[2] == "decoder.0.hook_resid_mid_cross" and grid.columns == ("parting step",)
    expected = torch.tensor([[0.0], [0.0], [1.0], [1.0]])  # the planted decoder reads its answer from the memory
    assert torch.allclose(result.normalized(ap.DECODER_RESID), expected, atol=1e-3)
    assert grid.source_answers.isnan().all()  # a decoder activation: answers not counted


def test_grids_are_labelled_by_hook_layer_position_and_head(planted_result):
    resid = planted_result.grids[ap.RESID]
    assert resid.hooks == (
        "encoder.0.hook_resid_pre",
        "encoder.1.hook_resid_pre",
        "encoder.2.hook_resid_pre",
        "encoder.ln_final.hook_out",
    )
    assert resid.rows == ("embeddings", "after layer 1", "after layer 2", "memory")
    positions = planted_result.positions
    assert positions[:3] == ("a·0", "b·1", "c·2") and positions[26] == "|·26" and positions[ARROW_AT] == ">·30"
    assert positions[OUT1] == "out1·31" and positions[27] == "in1·27" and positions[-1] == "EOS·38"
    assert resid.columns == positions and resid.logit_diff.shape == (4, 39)
    heads = planted_result.grids[ap.HEADS]
    assert heads.rows[2:5] == ("encoder 3 self-attention", "decoder 1 self-attention", "decoder 1 cross-attention")
    assert heads.columns == ("head 1", "head 2", "head 3", "head 4") and heads.hooks[4] == "decoder.0.cross_attn.hook_z"
    assert planted_result.grids[ap.MLP_OUT].hooks[1] == "encoder.1.hook_mlp_out"
    attn = planted_result.grids[ap.ATTN_OUT]
    assert attn.hooks[0] == "encoder.0.hook_attn_out" and attn.rows == ("layer 1", "layer 2", "layer 3")


@torch.no_grad()
def test_positions_both_prompts_share_leave_the_target_run_to_the_bit(small):
    pairs, batch, tgt, measure = succ_pred_runs()
    source = measure(run_patched(small, batch.source, tgt, {})["logits"])
    target = measure(run_patched(small, batch.target, tgt, {})["logits"])
    result = ap.patch_activations(small, pairs, [ap.RESID])
    assert result.source_logit_diff == float(source) and result.target_logit_diff == float(target)
    same_token = (batch.source.src == batch.target.src).all(0)  # every pair's prompts agree here
    assert int(same_token.sum()) == 37  # all but the first and last example-output letters (out2 agrees)
    assert (result.grids[ap.RESID].logit_diff[0, same_token] == result.target_logit_diff).all()
    assert (result.grids[ap.RESID].logit_diff[0, ~same_token] != result.target_logit_diff).all()


def test_prompts_of_different_layouts_are_refused(planted):
    pairs = minimal_pairs("succ", "pred", 2, lengths=(3,)) + minimal_pairs("succ", "pred", 1, seed=1, lengths=(4,))
    with pytest.raises(ValueError, match="pair 2 does not share the first pair's token layout.*one window length"):
        ap.patch_activations(planted, pairs)


def test_unknown_sites_are_refused_and_unpatched_sites_named(planted, planted_result):
    with pytest.raises(ValueError, match=r"unknown sites \['resid'\]; choose from: encoder residual"):
        ap.patch_activations(planted, planted_pairs(2), ["resid"])
    with pytest.raises(ValueError, match="^no sites given; choose from: encoder residual"):
        ap.patch_activations(planted, planted_pairs(2), [])
    only = ap.patch_activations(planted, planted_pairs(2), [ap.HEADS], answers=False)
    assert only.grids[ap.HEADS].source_answers.isnan().all() and only.grids[ap.HEADS].other_answers.isnan().all()
    assert only.grids[ap.HEADS].source_letters is None and only.grids[ap.HEADS].letters_at(0, 0) == ()
    with pytest.raises(KeyError, match="site 'encoder residual' was not patched; patched: heads"):
        only.normalized(ap.RESID)


def test_progress_counts_every_patched_run(planted):
    calls = []
    ap.patch_activations(
        planted, planted_pairs(2), [ap.HEADS, ap.ATTN_OUT], lambda done, total: calls.append((done, total))
    )
    assert calls == [(i, 5 * 4 + 3 * 39) for i in range(1, 5 * 4 + 3 * 39 + 1)]


def test_solved_pairs_keeps_the_pairs_answered_right_on_both_sides(planted):
    pairs = planted_pairs(3)
    assert ap.solved_pairs(planted, pairs) == pairs
    assert ap.solved_pairs(planted, minimal_pairs("pred", "succ", 3, lengths=(3,))) == []
    one_side = [MinimalPair(pair.source, dataclasses.replace(pair.target, answer="zz")) for pair in pairs]
    assert ap.solved_pairs(planted, one_side) == []  # the source prompts answered right, the target ones not
    other_side = [MinimalPair(dataclasses.replace(pair.source, answer="zz"), pair.target) for pair in pairs]
    assert ap.solved_pairs(planted, other_side) == []


def test_heads_patched_together_in_one_run(planted):
    pairs, every = planted_pairs(4), slice(None)
    z = "encoder.1.attn.hook_z"
    alone = ap.patch_together(planted, pairs, [(z, (every, every, PLANTED_HEAD.head))])
    assert alone.normalized == pytest.approx(1, abs=1e-3) and (alone.source_answers, alone.other_answers) == (1, 0)
    both = ap.patch_together(
        planted, pairs, [(z, (every, OUT3, PLANTED_HEAD.head)), (z, (every, OUT1, PLANTED_HEAD.head))]
    )
    assert both.normalized == pytest.approx(1, abs=1e-3)  # head 2.3 at the first output letter is what counts
    elsewhere = ap.patch_together(planted, pairs, [(z, (every, [OUT3, ARROW_AT], PLANTED_HEAD.head))])
    assert abs(elsewhere.normalized) < 1e-3 and elsewhere.source_answers == 0
    assert (alone.source_letters[0], elsewhere.source_letters[0], elsewhere.other_letters[0]) == (1, 0, 0)
    decoder = ap.patch_together(planted, pairs, [("decoder.0.cross_attn.hook_z", (every, every, 0))])
    assert decoder.normalized == pytest.approx(1, abs=1e-3) and math.isnan(decoder.source_answers)
    assert decoder.source_letters == decoder.other_letters == ()  # not decoded
    mixed = ap.patch_together(
        planted, pairs, [(z, (every, every, 0)), ("decoder.0.cross_attn.hook_z", (every, every, 0))]
    )
    assert mixed.normalized == pytest.approx(1, abs=1e-3) and math.isnan(mixed.other_answers)  # one decoder hook
    with pytest.raises(ValueError, match="at least one"):
        ap.patch_together(planted, pairs, [])
    with pytest.raises(ValueError, match="encoder.9.attn.hook_z"):
        ap.patch_together(planted, pairs, [("encoder.9.attn.hook_z", (every,))])
    bad = (
        "cell ('encoder.1.attn.hook_z', (slice(None, None, None), slice(None, None, None), 4)) does not index "
        "encoder.1.attn.hook_z's activation of shape [4, 39, 4, 32]: index 4 is out of bounds"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(bad)}"):
        ap.patch_together(planted, pairs, [(z, (every, OUT1, 0)), (z, (every, every, 4))])  # 4 heads: 0..3


def test_the_analysis_writes_grids_heat_maps_and_unjudged_findings(planted, monkeypatch, tmp_path):
    monkeypatch.setattr(ap, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    result = ap.activation_patching_analysis(planted, "planted", source="pred", target="succ", n_pairs=4)
    assert result.summary["pairs solved (both prompts)"] == 4 and result.summary["pairs offered"] == 4
    assert [f.holds for f in result.findings] == [None] * 4 and list(result.figures) == list(ap.DEFAULT_SITES)
    assert result.findings[-1].value == pytest.approx(1, abs=1e-3)
    paths = result.write(tmp_path)
    written = json.loads(paths["json"].read_text())
    grid = written["data"]["grids"][ap.HEADS]
    assert grid["rows"][1] == "encoder 2 self-attention" and grid["normalized"][1][2] == pytest.approx(1, abs=1e-3)
    assert grid["source_letters"][0][1][2] == 1 and grid["source_letters"][1][1][2] is None  # [letter][row][column]
    assert grid["other_letters"][0][1][2] == 0 and grid["other_letters"][0][4][0] is None  # decoder row: not decoded
    assert "normalised" in paths["html"].read_text()
    assert result.findings[-1].ours.endswith("the source's token where the answers differ: #1 100%")
    hover = result.figures[ap.HEADS].data[0]
    assert hover.customdata[1][2][3] == "the source's token where the answers differ: #1 100%"
    assert hover.customdata[4][0][3] == "" and "%{customdata[3]}" in hover.hovertemplate  # the decoder's row


def test_the_analysis_names_its_rules_method_and_sites_and_asks_for_its_defaults(planted, monkeypatch):
    """The summary's and findings' words, the figures' titles, the data's positions and the model's name; the pairs
    drawn by default (100, seed 0, standard alphabet, 3 letters); one pair is enough; progress handed on."""
    asked = []
    drawn = lambda source, target, n, **options: asked.append((n, options)) or planted_pairs(min(n, 2))
    monkeypatch.setattr(ap, "minimal_pairs", drawn)
    ticks = []
    result = ap.activation_patching_analysis(planted, sites=[ap.HEADS], progress=lambda done, total: ticks.append(done))
    assert asked == [(100, {"seed": 0, "alphabets": "standard", "lengths": (3,), "at_most": True})]
    assert result.name == "activation_patching" and result.model == "model" and ticks[-1] == len(ticks) > 0
    reference = ap.patch_activations(planted, planted_pairs(2), [ap.HEADS], answers=False)
    assert result.summary == {
        "method": "activation patching",
        "source rule (patched in)": "succ",
        "target rule (run)": "pred",
        "pairs offered": 2,
        "pairs solved (both prompts)": 2,
        "logit diff, source run": pytest.approx(reference.source_logit_diff),
        "logit diff, target run": pytest.approx(reference.target_logit_diff),
        "heads: largest": "encoder 2 self-attention, head 3: 1.000",  # the planted head
    }
    (finding,) = result.findings
    assert finding.name == "Largest effect: heads"
    assert finding.paper == "not in the paper (activation patching, as TransformerLens's patching module)"
    assert result.figures[ap.HEADS].layout.title.text == "heads: patched from succ into pred"
    assert result.data["positions"] == list(reference.positions)
    one = ap.activation_patching_analysis(planted, "planted", n_pairs=1, sites=[ap.HEADS])
    assert one.summary["pairs solved (both prompts)"] == 1 and asked[-1][0] == 1


def test_why_no_pair_is_solved_counts_each_sides_right_answers(planted, monkeypatch):
    pairs = minimal_pairs("succ", "pred", 3, lengths=(3,))
    right_sources = [pairs[0].source_answer, pairs[1].source_answer, "xyz"]
    monkeypatch.setattr(ap, "_greedy_answers", lambda model, offered: (right_sources, ["xyz"] * 3))
    message = (
        "the model answers both prompts of none of the 3 succ/pred minimal pairs (right: 2 succ and 0 pred prompts; "
        "the same answer to both prompts of 1 pairs); activation patching needs pairs it solves"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ap.offered_and_solved(planted, "succ", "pred", 3, 0, "standard", 3)
    monkeypatch.setattr(ap, "_greedy_answers", lambda model, offered: (["xyz"], ["xyz"]))
    with pytest.raises(ValueError, match=re.escape("none of the 1 succ/pred minimal pairs (right: 0 succ and 0 pred")):
        ap.offered_and_solved(planted, "succ", "pred", 1, 0, "standard", 3)


def test_a_grids_record_names_every_measure_and_the_texts_are_empty_where_nothing_was_counted():
    nan = torch.full((1, 2), math.nan)
    grid = ap.PatchingGrid(ap.HEADS, ("h",), ("row",), ("a", "b"), torch.zeros(1, 2), nan, nan)
    assert list(ap.grid_data(grid, torch.ones(1, 2))) == [
        "hooks",
        "rows",
        "columns",
        "normalized",
        "logit_diff",
        "source_answers",
        "other_answers",
    ]
    assert ap.answers_text(torch.tensor(math.nan), torch.tensor(0.0)) == ""
    assert ap.letters_text([0.5, math.nan, 0.25]) == "; the source's token where the answers differ: #1 50%, #3 25%"


def test_the_analysis_refuses_a_model_that_solves_no_pair(planted):
    message = (
        "the model answers both prompts of none of the 3 succ/pred minimal pairs (right: 0 succ and 0 pred prompts; "
        "the same answer to both prompts of 0 pairs); activation patching needs pairs it solves"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ap.activation_patching_analysis(planted, n_pairs=3)
    plain = planted_model(matching=False)  # it reads no example letter, so it answers both prompts alike
    with pytest.raises(ValueError, match=r"the same answer to both prompts of 3 pairs\)"):
        ap.activation_patching_analysis(plain, n_pairs=3)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_pairs": 0}, "n_pairs must be at least 1 (minimal pairs offered), got 0"),
        ({"sites": ["x"]}, "unknown sites ['x']; choose from: encoder residual"),  # before any pair is decoded
    ],
)
def test_the_analysis_refuses_bad_options_before_it_decodes(planted, options, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        ap.activation_patching_analysis(planted, **options)


@torch.no_grad()
def test_the_decoder_residual_is_patched_at_each_pairs_own_parting_step(small):
    """The logits at a step read only the last residual there (the final norm and unembedding act per position), so
    patching the last `hook_resid_post` at each pair's parting step gives the source run's measure exactly, whichever
    step that is (pairs here part at steps 0, 1 and 2)."""
    pairs = pairs_parting_late()
    result = ap.patch_activations(small, pairs, [ap.DECODER_RESID], answers=False)
    assert result.grids[ap.DECODER_RESID].rows[-1] == "after layer 2"
    assert result.normalized(ap.DECODER_RESID)[-1, 0] == pytest.approx(1, abs=1e-5)
    assert result.normalized(ap.DECODER_RESID)[0, 0] == 0  # the decoder's input embeddings: the same in both runs
    assert (result.source_rule, result.target_rule, result.pairs) == ("succ", "pred", 3)
    assert result.grids[ap.DECODER_RESID].site == ap.DECODER_RESID
    # the first layer's cross-attention output, patched at each pair's parting step only (not at every step)
    hook, (step, _, _) = "decoder.0.hook_resid_mid_cross", parting_steps(pairs)
    tgt = encode_tasks([p.target for p in pairs], with_answers=True).tgt_in
    batch = pair_batch(pairs)
    donor = run_patched(small, batch.source, tgt, {}, save=[hook])[hook]
    rows = torch.arange(3)

    def at_parting(value, hook=None):
        value = value.clone()
        value[rows, step] = donor[rows, step]
        return value

    with small.hooks(fwd_hooks=[(hook, at_parting)]):
        expected = float(measure_at_parting(pairs)(small(batch.target, tgt)))
    row = result.grids[ap.DECODER_RESID].hooks.index(hook)
    assert float(result.grids[ap.DECODER_RESID].logit_diff[row, 0]) == pytest.approx(expected, abs=1e-5)
