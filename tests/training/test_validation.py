"""End-of-epoch validation: the greedy exact match, the accuracy record's groups, the token-weighted loss."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lsa_interp.analysis.matching import matching_scores
from lsa_interp.data.loaders import tokenize_split
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import decode
from lsa_interp.data.vocab import EOS, PAD
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.training.validation import (
    ResidentSplit,
    accuracy_record,
    exact_match,
    loss_fn,
    matching_prompts,
    matching_score,
    sibling_hits,
    sibling_targets,
    validate_model,
)

ALPHABET = "abcdefghijklmnopqrstuvwxyz"
CPU = torch.device("cpu")


def _task(rule: str, copy: bool, query: str = "ghi", answer: str = "ghj") -> Task:
    example = (query, answer) if copy else ("abc", "abd")
    return Task(ALPHABET, (example,), query, answer, transformation=rule)


def test_exact_match_compares_whole_rows_whatever_their_widths():
    """A row matches when answer, EOS and the PAD after it agree; a longer or shorter output, or a wrong EOS, does not.
    The generated and target widths may differ either way."""
    target = torch.tensor([[3, 4, EOS], [3, EOS, PAD], [3, EOS, PAD], [5, 6, EOS]])
    generated = torch.tensor([[3, 4, EOS, PAD], [3, EOS, PAD, PAD], [3, 4, EOS, PAD], [5, 6, 7, EOS]])
    assert exact_match(generated, target).tolist() == [True, True, False, False]
    assert exact_match(target[:, :2], target).tolist() == [False, True, True, False]
    assert exact_match(target, target[:, :2]).tolist() == [False, True, True, False]


def test_accuracy_record_groups_rows_by_copy_seen_new_and_transformation():
    """Rates over all rows, copy rows, non-copy rows, non-copy rows of seen and of new transformations, and per
    transformation over its non-copy rows (NaN where a group is empty); the loss is passed through."""
    rows = [
        (_task("succ", True), 0),
        (_task("succ", False), 1),
        (_task("succ", False), 0),
        (_task("pred", False), 1),
        (_task("reverse", False), 0),
        (_task("reverse", False), 1),
        (_task("shift", True), 1),
        (_task("reverse", True), 1),
    ]
    split = tokenize_split([t for t, _ in rows])
    record = accuracy_record(torch.tensor([bool(h) for _, h in rows]), split, 0.25)
    assert record["val_loss"] == 0.25
    assert record["val_acc"] == pytest.approx(5 / 8)  # 0+1+0+1+0+1+1+1
    assert record["val_acc_copy"] == pytest.approx(2 / 3)
    assert record["val_acc_noncopy"] == pytest.approx(3 / 5)
    assert record["val_acc_seen_transformations"] == pytest.approx(2 / 3)
    assert record["val_acc_new_transformations"] == pytest.approx(1 / 2)
    by_rule = record["val_acc_by_transformation"]
    assert list(by_rule) == ["pred", "reverse", "shift", "succ"]
    assert by_rule["pred"] == 1.0 and by_rule["reverse"] == 0.5 and by_rule["succ"] == 0.5
    assert math.isnan(by_rule["shift"])  # only a copy row
    only_seen = accuracy_record(torch.tensor([True, False]), tokenize_split([r[0] for r in rows[1:3]]), 0.0)
    assert math.isnan(only_seen["val_acc_new_transformations"]) and math.isnan(only_seen["val_acc_copy"])


@pytest.fixture(scope="module")
def tiny_model() -> HookedEncoderDecoder:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_mlp=64, max_len=64)
    return HookedEncoderDecoder(cfg)


def test_validation_loss_is_token_weighted_and_accuracy_is_the_greedy_exact_match(tiny_model):
    """The loss is the mean cross-entropy over every non-PAD target token of the split (not a mean of row means);
    accuracy counts rows whose greedy answer is the task's answer; the model's train/eval mode is restored."""
    tasks = [_task("succ", False, "ghi", "ghj"), _task("pred", False, "mnopq", "mnopp"), _task("reverse", True)]
    val = ResidentSplit(tokenize_split(tasks), CPU)
    tiny_model.train()
    record = validate_model(tiny_model, val, contextlib.nullcontext)
    assert tiny_model.training
    tiny_model.eval()
    with torch.no_grad():
        logits = tiny_model.decode(val.tgt_in, tiny_model.encode(val.src), val.src == PAD)
    ce = F.cross_entropy(logits.flatten(0, 1), val.tgt_out.flatten(), ignore_index=PAD, reduction="sum")
    tokens = int((val.tgt_out != PAD).sum())
    assert tokens == 4 + 6 + 4
    assert record["val_loss"] == pytest.approx(float(ce) / tokens, rel=1e-5)
    loss = loss_fn(tiny_model, val.src, val.tgt_in, val.tgt_out).detach()
    assert float(loss) == pytest.approx(float(ce) / tokens, rel=1e-5)
    hits = [answer == task.answer for answer, task in zip(tiny_model.solve(tasks), tasks)]
    assert record["val_acc"] == pytest.approx(sum(hits) / 3)
    record = validate_model(tiny_model, val, contextlib.nullcontext)
    assert not tiny_model.training
    many = ResidentSplit(tokenize_split(tasks * 350), CPU)  # 1,050 rows: more than one chunk of 1,024
    again = validate_model(tiny_model, many, contextlib.nullcontext)
    assert again["val_acc"] == pytest.approx(record["val_acc"]) and again["val_loss"] == pytest.approx(
        record["val_loss"]
    )


def test_a_resident_split_limit_keeps_a_fixed_sorted_sample_and_batches_are_cut_to_their_longest_row():
    """``limit`` keeps that many rows, in split order, the same sample every time; a batch is cut to the longest
    source and target of its rows."""
    tasks = [_task("succ", False, "ab" + "c" * (i % 5), "ab" + "d" * (i % 5)) for i in range(30)]
    split = tokenize_split(tasks)
    kept = ResidentSplit(split, CPU, limit=12)
    again = ResidentSplit(split, CPU, limit=12)
    assert len(kept.src) == 12 and torch.equal(kept.src, again.src)
    sample = np.sort(np.random.default_rng(0).permutation(30)[:12])  # the seed-0 sample, in every run
    assert torch.equal(kept.src, split.tokens.src[torch.from_numpy(sample)][:, : kept.src.shape[1]])
    whole = ResidentSplit(split, CPU, limit=30)
    assert len(whole.src) == 30 and torch.equal(whole.src, ResidentSplit(split, CPU).src)
    assert kept.src_len.tolist() == (kept.src != PAD).sum(1).tolist()
    assert kept.tgt_len.tolist() == (kept.tgt_in != PAD).sum(1).tolist()
    rows = np.array([0, 3])
    src, tgt_in, tgt_out = kept.batch(rows)
    assert src.shape[1] == int(kept.src_len[rows].max()) and tgt_in.shape[1] == int(kept.tgt_len[rows].max())
    assert torch.equal(tgt_out, kept.tgt_out[rows][:, : tgt_in.shape[1]])


def test_matching_score_is_the_eval_mode_best_head_score_and_leaves_mode_and_rng_alone():
    """The per-epoch ``matching_score`` is `matching_scores(...).best()` of the model without dropout, on 16 fixed
    pred prompts; a model in training mode stays in it and draws no random numbers (resumed runs stay exact)."""
    torch.manual_seed(1)
    cfg = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=1, d_mlp=64, dropout=0.5)
    model = HookedEncoderDecoder(cfg).train()
    prompts = matching_prompts()
    assert len(prompts) == 16 and {t.transformation for t in prompts} == {"pred"}
    assert [t.query for t in prompts] == [t.query for t in matching_prompts()]
    # pinned: histories of runs trained by different versions stay comparable only on the same prompts
    assert (prompts[0].examples, prompts[0].query) == ((("rstuvw", "qstuvw"),), "hijklm")
    assert (prompts[8].alphabet, prompts[8].query) == ("abcdmfghijklwnoperstuvyxqz", "hijklw")
    rng = torch.get_rng_state()
    score = matching_score(model, prompts)
    assert model.training and torch.equal(torch.get_rng_state(), rng)
    expected = matching_scores(model.eval(), prompts).best()[1]
    assert score == expected and score == matching_score(model.train(), prompts)


def test_micro_batches_cover_the_rows_once_sorted_by_source_length_with_token_shares():
    """Parts are runs of the rows sorted by source length (ties keep their order), never empty, and weighted by
    their share of the batch's target tokens; one part is the batch itself."""
    tasks = [_task("succ", False, "ab" + "c" * (i % 4), "ab" + "d" * (i % 4)) for i in range(10)]
    split = ResidentSplit(tokenize_split(tasks), CPU)
    rows = np.array([9, 2, 5, 0, 7, 3])
    assert split.micro_batches(rows, 1) == [(rows, 1.0)]
    parts = split.micro_batches(rows, 4)
    order = np.concatenate([part for part, _ in parts])
    assert sorted(order.tolist()) == sorted(rows.tolist()) and [len(p) for p, _ in parts] == [2, 2, 1, 1]
    assert (np.diff(split.src_len[order]) >= 0).all() and order.tolist() == [0, 9, 5, 2, 7, 3]
    many = np.random.default_rng(0).permutation(10).repeat(4)  # 40 rows, ties kept in their order (stable)
    sorted_rows = np.concatenate([part for part, _ in split.micro_batches(many, 3)])
    assert sorted_rows.tolist() == sorted(many.tolist(), key=lambda row: split.src_len[row])
    shares = [share for _, share in parts]
    assert sum(shares) == pytest.approx(1.0)
    assert shares == pytest.approx([split.tgt_len[p].sum() / split.tgt_len[rows].sum() for p, _ in parts])
    assert len(split.micro_batches(rows[:2], 4)) == 2


PERM = "bacdefghijklmnopqrstuvwxzy"  # a <-> b and y <-> z swapped


def test_sibling_targets_are_the_tokenized_answers_of_each_rows_family_siblings():
    """In the row's own alphabet, in the family's rule order; PAD for copy rows, rules without a family and a
    sibling past the alphabet's end."""
    tasks = [
        Task(PERM, (("mno", "mnp"),), "acde", "acdf", "succ"),
        Task(PERM, (("mnno", "mno"),), "mnnop", "mnop", "remove_redundant"),
        Task(PERM, (("xzy", "wzy"),), "xzy", "wzy", "pred"),  # y ends PERM: no extend or succ answer
        Task(PERM, (("acde", "acdf"),), "acde", "acdf", "succ"),  # a copy row
        Task(PERM, (("abc", "cba"),), "fgh", "hgf", "reverse"),
        Task(PERM, (("mno", "mnop"),), "ghi", "ghij", "extend_sequence"),  # the first rule: index 0
    ]
    targets = sibling_targets(tokenize_split(tasks))
    assert targets.shape[:2] == (6, 2)
    answers = [[decode(row) if row[0] != PAD else None for row in rows.tolist()] for rows in targets]
    assert answers[:5] == [["acdef", "bcde"], ["mnoq", None], [None, None], [None, None], [None, None]]
    assert answers[5] == ["ghj", "fhi"]


def test_sibling_hits_compare_outputs_and_targets_of_any_widths():
    """An output narrower or wider than the targets is padded with PAD, so EOS then PAD matches whatever the
    widths; a row without siblings matches nothing."""
    targets = torch.tensor([[[3, 4, EOS, PAD, PAD], [PAD] * 5], [[PAD] * 5, [PAD] * 5]])
    assert sibling_hits(torch.tensor([[3, 4, EOS], [3, 4, EOS]]), targets).tolist() == [True, False]
    wide = torch.tensor([[3, 4, EOS, PAD, PAD, PAD, PAD], [PAD] * 7])
    assert sibling_hits(wide, targets).tolist() == [True, False]
    assert sibling_hits(torch.tensor([[3, 4, 5, EOS, PAD, PAD, PAD], [PAD] * 7]), targets).tolist() == [False, False]


def test_the_record_gives_each_familys_share_of_sibling_answers():
    tasks = [
        Task(ALPHABET, (("abc", "abd"),), "ghi", "ghj", "succ"),
        Task(ALPHABET, (("bcd", "acd"),), "ghi", "fhi", "pred"),
        Task(ALPHABET, (("abbc", "abc"),), "ghhi", "ghi", "remove_redundant"),
        Task(ALPHABET, (("ghi", "ghj"),), "ghi", "ghj", "succ"),  # a copy row: left out
        Task(ALPHABET, (("abc", "cba"),), "ghi", "ihg", "reverse"),
    ]
    split = tokenize_split(tasks)
    answers = ["fhi", "fhi", "ghj", "fhi", "ghi"]  # succ as pred; pred right; rr as rr_succ; copy row; reverse wrong
    generated = torch.full((5, 5), PAD)
    for i, answer in enumerate(answers):
        generated[i, : len(answer) + 1] = torch.tensor([ord(c) - 97 for c in answer] + [EOS])
    flags = sibling_hits(generated, sibling_targets(split))
    assert flags.tolist() == [True, False, True, False, False]
    hit = torch.tensor([a == t.answer for a, t in zip(answers, tasks)])
    record = accuracy_record(hit, split, 0.0, flags)
    assert record["val_sibling_by_family"] == {"window": 0.5, "doubled": 1.0}
    assert "val_sibling_by_family" not in accuracy_record(hit, split, 0.0)
    all_pad = torch.full((5, 3), PAD)  # a model that emits nothing matches no sibling
    assert not sibling_hits(all_pad, sibling_targets(split)).any()


def test_validation_records_sibling_answers_of_the_greedy_outputs(tiny_model):
    tasks = [Task(ALPHABET, (("abc", "abd"),), q, q[:-1] + chr(ord(q[-1]) + 1), "succ") for q in ("ghi", "mnop")]
    val = ResidentSplit(tokenize_split(tasks), CPU)
    record = validate_model(tiny_model, val, contextlib.nullcontext)
    outputs = tiny_model.solve(tasks)
    siblings = [{q + chr(ord(q[-1]) + 1), chr(ord(q[0]) - 1) + q[1:]} for q in ("ghi", "mnop")]
    expected = sum(out in sib for out, sib in zip(outputs, siblings)) / 2
    assert record["val_sibling_by_family"] == {"window": expected}
