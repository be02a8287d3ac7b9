"""`PathPatcher`: many paths on one set of pairs from one pair of source and target runs, equal to the module's
functions to the bit, refusing bad paths before it runs anything, leaving the model's mode as it found it."""

from __future__ import annotations

import math

import pytest
import torch

from lsa_interp.analysis import path_patching as pp, path_runs
from lsa_interp.model.heads import Head
from tests.analysis.patch_setup import small_model

torch.set_num_threads(1)


@pytest.fixture()
def counted(monkeypatch):
    """How many times the source and target runs (run 1) are made."""
    made = []
    original = path_runs.pair_runs
    monkeypatch.setattr(path_runs, "pair_runs", lambda *args, **kw: made.append(1) or original(*args, **kw))
    return made


def _same(a: pp.PatchEffect, b: pp.PatchEffect) -> bool:
    """Equal to the bit, NaN equal to NaN."""
    left, right = (
        torch.tensor([a.normalized, a.logit_diff, a.source_answers, a.other_answers]),
        torch.tensor([b.normalized, b.logit_diff, b.source_answers, b.other_answers]),
    )
    letters = torch.tensor([*a.source_letters, *a.other_letters]), torch.tensor([*b.source_letters, *b.other_letters])
    return torch.equal(left.nan_to_num(-7), right.nan_to_num(-7)) and torch.equal(*(t.nan_to_num(-7) for t in letters))


def test_one_patcher_gives_what_each_function_gives_to_the_bit_from_one_pair_of_runs(small, small_pairs, counted):
    cfg = small.cfg
    sender, frozen = pp.parse_senders("1.3@31,33", cfg), [Head("encoder", 1, 0)]
    receivers, hop = pp.parse_receivers("2.*/kv", cfg), pp.parse_receivers("2.2", cfg)
    patcher = pp.PathPatcher(small, small_pairs)
    assert counted == [], "nothing runs until a path is asked for"
    mine = [
        patcher.sender_effect(sender),
        patcher.patch_path(sender, receivers),
        patcher.sender_effect(sender, frozen),
        patcher.patch_path(pp.parse_senders("1.1", cfg), [pp.MEMORY], through=[hop]),
        patcher.patch_path(sender, receivers, answers=False),
    ]
    from_sweep, into = patcher.paths_from(sender), patcher.paths_into(pp.parse_receivers("cross:2.1/v", cfg))
    assert len(counted) == 1
    theirs = [
        pp.sender_effect(small, small_pairs, sender),
        pp.patch_path(small, small_pairs, sender, receivers),
        pp.sender_effect(small, small_pairs, sender, frozen),
        pp.patch_path(small, small_pairs, pp.parse_senders("1.1", cfg), [pp.MEMORY], through=[hop]),
        pp.patch_path(small, small_pairs, sender, receivers, answers=False),
    ]
    assert len(counted) == 6, "each function makes its own"
    assert all(_same(a, b) for a, b in zip(mine, theirs, strict=True))
    assert math.isnan(mine[-1].source_answers) and not math.isnan(mine[1].source_answers)
    for sweep, again in (
        (from_sweep, pp.paths_from(small, small_pairs, sender)),
        (into, pp.paths_into(small, small_pairs, pp.parse_receivers("cross:2.1/v", cfg))),
    ):
        assert torch.equal(sweep.grid.logit_diff.nan_to_num(-7), again.grid.logit_diff.nan_to_num(-7))
        assert torch.equal(sweep.grid.source_letters.nan_to_num(-7), again.grid.source_letters.nan_to_num(-7))
        assert sweep.memory == again.memory or _same(sweep.memory, again.memory)


def test_a_patcher_refuses_a_bad_path_before_it_runs_anything(small, small_pairs, counted):
    patcher = pp.PathPatcher(small, small_pairs)
    with pytest.raises(ValueError, match="at least one receiver"):
        patcher.patch_path(pp.parse_senders("1.1", small.cfg), [])
    with pytest.raises(ValueError, match="cannot both send and be frozen"):
        patcher.sender_effect([Head("encoder", 0, 0)], [Head("encoder", 0, 0)])
    assert counted == []


def test_a_patcher_measures_in_eval_mode_and_leaves_the_model_as_it_was(small_pairs):
    model = small_model().train()
    sender = pp.parse_senders("1.2", model.cfg)
    patcher = pp.PathPatcher(model, small_pairs)
    first = patcher.sender_effect(sender)
    assert model.training, "train mode is restored"
    assert _same(first, patcher.sender_effect(sender)), "no dropout: the same result twice"
    assert _same(first, pp.sender_effect(small_model(), small_pairs, sender))
