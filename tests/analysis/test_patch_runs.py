"""Runs of minimal pairs with patches: exact for nothing and whole layers, measured where the answers part."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from lsa_interp.analysis import patch_runs
from lsa_interp.analysis.pair_batch import pair_batch
from lsa_interp.analysis.patch_runs import (
    MEMORY_HOOK,
    answer_outcomes,
    greedy_keeps_teacher,
    letter_outcomes,
    lowest_encoder_layer,
    measure_at_parting,
    pair_runs,
    parting_steps,
    patched_target,
    replace_at,
    run_patched,
    shared_position_labels,
)
from lsa_interp.analysis.planted import planted_model
from lsa_interp.analysis.prompts import MinimalPair, minimal_pairs
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.vocab import EOS, LETTERS, PAD, VOCAB_SIZE
from tests.analysis.patch_setup import pairs_parting_late, planted_pairs, succ_pred_runs

torch.set_num_threads(1)


@torch.no_grad()
def test_patching_nothing_gives_the_target_run_and_a_whole_layer_the_source_run_to_the_bit(small):
    _, batch, tgt, measure = succ_pred_runs()
    saved = run_patched(small, batch.source, tgt, {}, save=["encoder.1.hook_resid_pre", "encoder.ln_final.hook_out"])
    source = measure(saved["logits"])
    target = measure(run_patched(small, batch.target, tgt, {})["logits"])
    for hook in ("encoder.0.hook_resid_pre", "encoder.0.attn.hook_z", "decoder.1.cross_attn.hook_z"):
        identity = run_patched(small, batch.target, tgt, {hook: lambda t: t})["logits"]
        assert torch.equal(measure(identity), target), hook  # every run on the same (hooked) attention path
    assert not torch.equal(source, target)
    for name in ("encoder.1.hook_resid_pre", "encoder.ln_final.hook_out"):
        whole = run_patched(small, batch.target, tgt, {name: lambda t, donor=saved[name]: donor})["logits"]
        assert torch.equal(measure(whole), source)


@torch.no_grad()
def test_both_runs_of_pairs_parting_late_are_teacher_forced_on_the_target_answers(small):
    """On answers that part at the first, second and third letter, the source and the target run are both
    teacher-forced on the target answers (the pairs' batches carry no answers): their measures are those of whole
    runs on that decoder input, read at each pair's own parting step, and the source run's decoder activations span
    every step of it."""
    pairs = pairs_parting_late()
    batch, parting = pair_batch(pairs), parting_steps(pairs)
    hook = "decoder.0.hook_resid_post"
    runs = pair_runs(small, pairs, [hook], batch, parting)
    tgt = encode_tasks([p.target for p in pairs], with_answers=True).tgt_in
    assert parting[0].tolist() == [0, 1, 2] and torch.equal(runs.tgt, tgt)
    source = run_patched(small, batch.source, tgt, {}, save=[hook])
    assert runs.source_diff == float(runs.measure(source["logits"])) and torch.equal(runs.saved[hook], source[hook])
    assert runs.saved[hook].shape[:2] == tgt.shape
    assert runs.target_diff == float(runs.measure(run_patched(small, batch.target, tgt, {})["logits"]))
    assert runs.source_diff != runs.target_diff


@torch.no_grad()
def test_the_target_run_keeps_the_activations_asked_for_even_the_memory_and_the_streams_it_keeps_itself():
    """``save_target``'s hooks stay in ``target_saved`` where the runs also keep them as the target memory or the
    stream entering a layer (the same tensors); the memory and streams not asked for are kept apart from it."""
    planted, pairs = planted_model(), planted_pairs(3)
    batch = pair_batch(pairs)
    asked = ["encoder.0.attn.hook_z", "encoder.1.hook_resid_post", MEMORY_HOOK]
    runs = pair_runs(planted, pairs, [], batch, parting_steps(pairs), save_target=asked)
    entering = {layer: f"encoder.{layer - 1}.hook_resid_post" for layer in (1, 2, 3)}
    whole = run_patched(planted, batch.target, runs.tgt, {}, save=[*asked, *entering.values()])
    assert set(runs.target_saved) == set(asked)
    assert all(torch.equal(runs.target_saved[hook], whole[hook]) for hook in asked)
    assert torch.equal(runs.target_memory, whole[MEMORY_HOOK]) and sorted(runs.target_residual) == [1, 2, 3]
    assert all(torch.equal(runs.target_residual[layer], whole[hook]) for layer, hook in entering.items())


def test_the_measured_step_is_where_the_answers_part():
    def pair(source_answer: str, target_answer: str) -> MinimalPair:
        base = minimal_pairs("succ", "pred", 1, lengths=(3,))[0]
        return MinimalPair(
            dataclasses.replace(base.source, answer=source_answer),
            dataclasses.replace(base.target, answer=target_answer),
        )

    pairs = [pair("acd", "bce"), pair("bcf", "bce"), pair("bc", "bce")]
    logits = torch.zeros(3, 4, 30)
    logits[0, 0, 0], logits[1, 2, 5], logits[2, 2, 27] = 3.0, 5.0, 7.0  # a at step 0, f at step 2, EOS at step 2
    logits[0, 0, 1], logits[1, 2, 4] = 1.0, 6.0  # b, e: the target letters
    assert measure_at_parting(pairs)(logits) == pytest.approx((2.0 - 1.0 + 7.0) / 3)


@torch.no_grad()
def test_a_patched_target_run_is_measured_and_its_answers_counted_from_one_encoder_run():
    """The measure of the target run under the patches, and with the pairs' answers the outcomes of its greedy
    answers: the target's own answers unpatched; the source's where the whole memory is patched in. The encoder runs
    once for both."""
    planted, pairs = planted_model(), planted_pairs(3)
    batch = pair_batch(pairs)
    runs = pair_runs(planted, pairs, ["encoder.ln_final.hook_out"], batch, parting_steps(pairs))
    answers = (batch.source_answers, batch.target_answers)
    calls = []
    counted = {"encoder.0.hook_resid_pre": lambda t: calls.append(1) or t}
    diff, unpatched = patched_target(planted, runs, counted, answers)  # every target prompt keeps its own answer
    assert calls == [1] and diff == runs.target_diff and patched_target(planted, runs, {}) == (diff, None)
    assert (unpatched.source, unpatched.other) == (0, 0)
    assert unpatched.source_letters[0] == 0 and unpatched.other_letters[0] == 0
    assert len(unpatched.source_letters) == 2 and math.isnan(unpatched.source_letters[1])  # one letter; EOS alike
    memory = runs.saved["encoder.ln_final.hook_out"]
    diff, whole = patched_target(planted, runs, {"encoder.ln_final.hook_out": lambda t: memory}, answers)
    assert diff == runs.source_diff
    assert (whole.source, whole.other, whole.source_letters[0], whole.other_letters[0]) == (1, 0, 1, 0)
    own = batch.target_answers  # what the unpatched target prompts answer
    mixed = answer_outcomes(planted.generate(batch.target), [own[0], "zz", "zz"], ["y", own[1], "y"])
    assert (mixed.source, mixed.other) == (pytest.approx(1 / 3), pytest.approx(1 / 3)), "one of each kind"


def test_greedy_keeps_the_teacher_only_where_every_answer_step_picks_its_token_by_a_clear_margin():
    """Two rows (``bc`` + EOS, ``d`` + EOS + PAD): true where each answer step and EOS has the teacher's token on top by
    more than `TEACHER_MARGIN` of the top logit, whatever the PAD step holds; false for one step that picks another
    token, or leads by a gap within the margin (a gap clears a top logit of 10 and not one of 100; below 1 the margin
    is that of 1)."""
    tgt_out = torch.tensor([[1, 2, EOS], [3, EOS, PAD]])
    logits = torch.zeros(2, 3, VOCAB_SIZE)
    logits.scatter_(2, tgt_out.unsqueeze(-1), 10.0)
    logits[1, 2, PAD], logits[1, 2, 5] = 0.0, 50.0  # the PAD step holds anything
    assert greedy_keeps_teacher(logits, tgt_out)
    wrong = logits.clone()
    wrong[0, 1, 7] = 11.0
    assert not greedy_keeps_teacher(wrong, tgt_out)
    for top, gap, kept in [
        (10.0, 0.02, True),
        (10.0, 0.005, False),
        (100.0, 0.02, False),
        (100.0, 0.2, True),
        (0.5, 8e-4, False),
    ]:
        close = logits.clone()
        close[1, 1, EOS], close[1, 1, 4] = top, top - gap
        assert greedy_keeps_teacher(close, tgt_out) is kept, (top, gap)


def test_greedy_keeps_the_teacher_only_for_a_lead_beyond_the_margin_whose_floor_is_the_margin_of_1():
    """The edges of the margin: a lead of exactly `TEACHER_MARGIN` is not clear, it must exceed it (a top logit of
    1e-3 over a runner-up of 0 leads by float32's 1e-3, and the margin of a top logit below 1 is that of 1: the same
    number), twice it is; and the floor is the margin of a top logit of 1, not more: a lead of 1.5e-3 clears a top
    logit of 0.5 and 1.8e-3 one of 1.5, neither of which would clear a floor of 2 (a margin of 2e-3)."""
    tgt_out = torch.tensor([[1, EOS]])
    logits = torch.zeros(1, 2, VOCAB_SIZE)
    logits[0, 1, EOS] = 10.0
    margin = patch_runs.TEACHER_MARGIN
    for top, runner_up, kept in [
        (margin, 0.0, False),
        (2 * margin, 0.0, True),
        (0.5, 0.5 - 1.5e-3, True),
        (1.5, 1.5 - 1.8e-3, True),
    ]:
        close = logits.clone()
        close[0, 0, 1], close[0, 0, 4] = top, runner_up
        assert greedy_keeps_teacher(close, tgt_out) is kept, (top, runner_up)


@torch.no_grad()
def test_a_patched_target_run_decodes_greedily_only_where_its_teacher_forced_run_leaves_an_answer_in_doubt(
    monkeypatch,
):
    """On the planted model the unpatched target run, and a patch in a head that carries nothing, keep every target
    answer clearly: no greedy decode runs, and the outcomes are those of the decode. The matching head's output from
    the source, and the source memory in one row only, change answers: the batch is decoded, once. Outcomes equal
    those with every run decoded (a margin no run clears)."""
    planted, pairs = planted_model(), planted_pairs(3)
    batch = pair_batch(pairs)
    hooks = ["encoder.1.attn.hook_z", MEMORY_HOOK]
    runs = pair_runs(planted, pairs, hooks, batch, parting_steps(pairs))
    answers = (batch.source_answers, batch.target_answers)
    patches = {
        "nothing": ({}, 0),
        "a head carrying nothing": ({hooks[0]: lambda t: replace_at(t, runs.saved[hooks[0]], (slice(None), 0, 0))}, 0),
        "the matching head": (
            {hooks[0]: lambda t: replace_at(t, runs.saved[hooks[0]], (slice(None), slice(None), 2))},
            1,
        ),
        "one row's memory": ({MEMORY_HOOK: lambda t: replace_at(t, runs.saved[MEMORY_HOOK], (0,))}, 1),
    }
    decodes = []
    decode = planted.greedy_decode
    monkeypatch.setattr(planted, "greedy_decode", lambda *a, **k: decodes.append(1) or decode(*a, **k))
    skipping = {}
    for name, (patch, expected) in patches.items():
        decodes.clear()
        skipping[name] = patched_target(planted, runs, patch, answers)
        assert len(decodes) == expected, name
    assert skipping["nothing"][1].source == skipping["a head carrying nothing"][1].source == 0
    assert skipping["the matching head"][1].source == 1 and skipping["one row's memory"][1].source == pytest.approx(
        1 / 3
    )
    monkeypatch.setattr(patch_runs, "TEACHER_MARGIN", math.inf)
    for name, (patch, _) in patches.items():
        decodes.clear()
        assert patched_target(planted, runs, patch, answers) == skipping[name] and decodes == [1], name


@torch.no_grad()
def test_a_target_run_patched_in_the_decoder_only_reads_the_target_memory_without_running_the_encoder():
    """The decoder's whole final output from the source run gives the source's measure, to the bit, with no encoder run;
    the target memory kept for it is not among the activations asked for."""
    planted, pairs = planted_model(), planted_pairs(3)
    hook = "decoder.ln_final.hook_out"
    runs = pair_runs(planted, pairs, [hook], pair_batch(pairs), parting_steps(pairs))
    calls = []
    with torch.no_grad(), planted.hooks(fwd_hooks=[("encoder.0.hook_resid_pre", lambda t, hook: calls.append(1))]):
        diff, outcomes = patched_target(planted, runs, {hook: lambda t: runs.saved[hook]})
    assert calls == [] and outcomes is None and runs.target_saved == {}
    assert diff == runs.source_diff != runs.target_diff


@torch.no_grad()
def test_a_target_run_patched_in_a_later_encoder_layer_starts_the_encoder_there_with_the_same_results():
    """A patch in encoder layer 1 or 2, or in the memory, gives the measure and answers of the whole patched run to the
    bit, with no hook below that layer fired: the planted head's output (layer 1, head 2) switches the answers to the
    source's; the other two patches replace some positions only, so the rest of the stream is the target run's."""
    planted, pairs = planted_model(), planted_pairs(3)
    batch = pair_batch(pairs)
    where = {
        "encoder.1.attn.hook_z": (slice(None), slice(None), 2),
        "encoder.2.hook_resid_pre": (slice(None), slice(2, 9)),
        "encoder.ln_final.hook_out": (slice(None), slice(0, 30)),
    }
    runs = pair_runs(planted, pairs, list(where), batch, parting_steps(pairs))
    answers = (batch.source_answers, batch.target_answers)
    fired: list[str] = []
    watch = [(lambda name: name.startswith("encoder."), lambda t, hook: fired.append(hook.name))]
    for (hook, index), lowest in zip(where.items(), (1, 2, 3)):
        patch = {hook: lambda t, hook=hook, index=index: replace_at(t, runs.saved[hook], index)}
        fired.clear()
        with planted.hooks(fwd_hooks=watch):
            diff, outcomes = patched_target(planted, runs, patch, answers)
        assert {int(name.split(".")[1]) for name in fired if name.split(".")[1].isdigit()} == set(range(lowest, 3))
        assert "encoder.hook_embed" not in fired and fired[-1] == "encoder.ln_final.hook_out"
        whole = run_patched(planted, batch.target, runs.tgt, patch)["logits"]
        assert diff == float(runs.measure(whole)), hook
        if lowest == 1:
            assert diff == pytest.approx(runs.source_diff) and diff != pytest.approx(runs.target_diff)
            assert outcomes.source == 1
        with planted.hooks(fwd_hooks=[(hook, lambda t, hook, patch=patch[hook]: patch(t))]):
            generated = planted.generate(batch.target)
        assert outcomes == answer_outcomes(generated, *answers), hook


@torch.no_grad()
def test_a_patch_that_writes_into_the_stream_it_starts_from_leaves_the_kept_stream_as_it_was():
    """A patch that overwrites the activation it is handed (as TransformerLens hooks often do) at the layer a run
    starts from changes that run only: the target run's kept stream, and so the next run, stay the target's."""
    planted, pairs = planted_model(), planted_pairs(3)
    hook = "encoder.2.hook_resid_pre"
    runs = pair_runs(planted, pairs, [hook], pair_batch(pairs), parting_steps(pairs))
    kept = runs.target_residual[2].clone()

    def in_place(tensor: torch.Tensor) -> torch.Tensor:
        tensor[:] = runs.saved[hook]
        return tensor

    assert patched_target(planted, runs, {hook: in_place})[0] == pytest.approx(runs.source_diff)
    assert torch.equal(runs.target_residual[2], kept)
    assert patched_target(planted, runs, {hook: lambda t: t}) == (runs.target_diff, None)


def test_the_lowest_encoder_layer_of_some_hooks_counts_the_embedding_as_0_and_the_final_norm_as_the_last():
    assert lowest_encoder_layer([], 3) is None
    assert lowest_encoder_layer(["decoder.0.cross_attn.hook_k", "decoder.ln_final.hook_out"], 3) is None
    assert lowest_encoder_layer(["encoder.2.attn.hook_q", "encoder.1.hook_mlp_out", "decoder.0.hook_resid_pre"], 3) == 1
    assert lowest_encoder_layer(["encoder.ln_final.hook_out"], 3) == 3
    assert lowest_encoder_layer(["encoder.ln_final.hook_out", "encoder.hook_pos_embed"], 3) == 0
    assert lowest_encoder_layer({"encoder.hook_embed": None, "encoder.12.hook_resid_post": None}, 13) == 0
    assert lowest_encoder_layer(["encoder.12.hook_resid_post", "encoder.10.hook_resid_pre"], 13) == 10


def _generated(*answers: str) -> torch.Tensor:
    """Decoder tokens as `generate` returns them: each answer's letters, EOS (``.`` in ``answers``), PAD after it."""
    ids = [[EOS if c == "." else LETTERS.index(c) for c in answer] for answer in answers]
    width = max(map(len, ids))
    return torch.tensor([row + [PAD] * (width - len(row)) for row in ids])


def test_letter_outcomes_count_each_position_over_the_pairs_whose_answers_differ_there():
    # succ against pred: the answers differ at the first letter (b/a, g/f) and the last (e/d, j/i)
    made = _generated("bcd.", "zce.", "ghj.")  # first letter the source's, last the target's; first neither; both
    source, other = letter_outcomes(made, ["bce", "bce", "ghj"], ["acd", "acd", "fhi"])
    assert source[0] == pytest.approx(2 / 3) and source[2] == pytest.approx(2 / 3)
    assert other[0] == pytest.approx(1 / 3) and other[2] == 0
    assert len(source) == len(other) == 4 and all(math.isnan(v[i]) for v in (source, other) for i in (1, 3))


def test_letter_outcomes_compare_the_end_of_answers_of_different_lengths():
    # extend_sequence against succ: abcd / abd differ at positions 2 (c/d), 3 (d/EOS) and 4 (EOS/none)
    source, other = letter_outcomes(_generated("abd.", "abcd."), ["abcd"] * 2, ["abd"] * 2)
    assert source[2:] == (0.5, 0.5, 0.5) and other[2:] == (0, 0, 0) and math.isnan(source[0])
    stopped, _ = letter_outcomes(_generated("abc"), ["abcd"], ["abd"])  # no EOS within the decoded tokens
    assert stopped[2:] == (1, 0, 0)


def test_letter_outcomes_count_a_position_over_the_pairs_whose_answers_differ_there_only():
    source, other = letter_outcomes(_generated("bcd.", "xcd."), ["bce", "bcf"], ["acd", "bcd"])
    assert source[0] == 1 and other[0] == 0  # the second pair's answers share their first letter: not counted there
    assert source[2] == 0 and other[2] == 0  # both pairs differ at the last letter, and both keep the target's


def test_shared_positions_are_named_by_token_or_by_role_and_place_and_a_layout_apart_by_its_pair():
    texts = ["abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd", "bacdefghijklmnopqrstuvwxyz | ijk > ijl | cde"]
    tasks = [Task.parse(text) for text in texts]
    labels = shared_position_labels(encode_tasks(tasks[:1]), encode_tasks(tasks[1:]))
    assert labels[:3] == ("alphabet1·0", "alphabet2·1", "c·2") and labels[26] == "|·26"
    assert labels[27:34] == ("in1·27", "in2·28", "in3·29", ">·30", "out1·31", "out2·32", "out3·33")
    assert labels[35:38] == ("q1·35", "q2·36", "q3·37") and labels[-1] == "EOS·38"
    longer = Task.parse("abcdefghijklmnopqrstuvwxyz | ghij > ghik | bcde")
    with pytest.raises(ValueError, match="^pair 1 does not share the first pair's token layout"):
        shared_position_labels(encode_tasks([tasks[0], longer, longer]), encode_tasks([tasks[1], longer, longer]))


def test_replace_at_takes_the_donor_only_at_the_index():
    tensor, donor = torch.zeros(2, 5, 3, 4), torch.ones(2, 5, 3, 4)
    patched = replace_at(tensor, donor, (slice(None), [1, 3], 2))
    assert patched.sum() == 2 * 2 * 4 and patched[:, [1, 3], 2].eq(1).all() and tensor.eq(0).all()


@torch.no_grad()
def test_a_head_patched_by_hooks_is_the_head_patched_through_nnsight():
    """The same patch written the nnsight way (the source's ``hook_z`` saved in one trace, its head set in the next)
    gives the logits `run_patched` gives: the hooks engine is checked against an independent one."""
    pytest.importorskip("nnsight")  # a project dependency; the GPU machine's image lacks it
    from lsa_interp.model.tracing import traced

    planted, pairs = planted_model(), planted_pairs(4)
    batch, every = pair_batch(pairs), slice(None)
    tgt = encode_tasks([p.target for p in pairs], with_answers=True).tgt_in
    hook = "encoder.1.attn.hook_z"
    saved = run_patched(planted, batch.source, tgt, {}, save=[hook])
    patch = {hook: lambda z: replace_at(z, saved[hook], (every, every, 2))}
    by_hooks = run_patched(planted, batch.target, tgt, patch)["logits"]
    nn = traced(planted)
    with nn.trace(batch.source, tgt):
        z = nn.encoder[1].attn.hook_z.output.save()
    with nn.trace(batch.target, tgt):
        nn.encoder[1].attn.hook_z.output[:, :, 2] = z[:, :, 2]
        by_nnsight = nn.output.save()
    torch.testing.assert_close(by_nnsight, by_hooks, atol=1e-6, rtol=0)
    clean = run_patched(planted, batch.target, tgt, {})["logits"]
    assert (by_hooks - clean).abs().max() > 1  # the patch changes the answer's logits
