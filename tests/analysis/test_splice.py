"""Memory splicing on the planted model (the answer is read from the memory at ``>``) and the case verdicts."""

from __future__ import annotations

import jaxtyping
import pytest
import torch

from lsa_interp.analysis import splice
from lsa_interp.analysis.planted import planted_answer, planted_model
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.analysis.splice import (
    CASES,
    MAJORITY,
    UNUSED,
    check_pair_counts,
    encoder_memory,
    masked_change,
    memory_change,
    splice_analysis,
    splice_decode,
    splice_mask,
    unused_positions,
)
from lsa_interp.data.task import Task
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.hooked import HookedEncoderDecoder

torch.set_num_threads(1)

ARROW_AT = 30
"""Position of ``>`` in a 3-letter prompt (alphabet 0-25, | 26, example input 27-29); the planted decoder reads
its answer (the first example-output letter) from the memory there."""


@pytest.fixture(scope="module")
def planted():
    return planted_model()


@pytest.fixture(scope="module")
def pairs():
    found = minimal_pairs("pred", "succ", 4, lengths=(3,), at_most=True)
    return [p.source for p in found], [p.target for p in found]


def test_splicing_the_arrow_position_gives_the_donors_answer(planted, pairs):
    """The spliced positions come from the donor at the same index; other positions stay the target's own."""
    donors, targets = pairs
    assert splice_decode(planted, targets, donors, [ARROW_AT]) == [planted_answer(d) for d in donors]
    assert splice_decode(planted, targets, donors, range(0, 32)) == [planted_answer(d) for d in donors]
    own = [planted_answer(t) for t in targets]
    assert splice_decode(planted, targets, donors, range(8, 26)) == own
    assert splice_decode(planted, targets, donors, [ARROW_AT + 1, 38]) == own  # 38: the last position (EOS)
    assert own != [planted_answer(d) for d in donors]


def test_prompts_without_answers_can_be_spliced(planted):
    """Targets and donors need no answers: they are encoded as prompts."""
    target = Task.parse("abcdefghijklmnopqrstuvwxyz | efg > efh | rst")
    donor = Task.parse("abcdefghijklmnopqrstuvwxyz | efg > dfg | rst")
    assert target.answer is None and donor.answer is None
    assert splice_decode(planted, [target], [donor], [ARROW_AT]) == ["d"]


def test_splicing_restores_the_training_mode(planted, pairs):
    """The model comes back in the mode (train or eval) it was in."""
    donors, targets = pairs
    planted.train()
    try:
        splice_decode(planted, targets[:1], donors[:1], [ARROW_AT])
        assert planted.training is True
    finally:
        planted.eval()
    splice_decode(planted, targets[:1], donors[:1], [ARROW_AT])
    assert planted.training is False


def test_positions_must_lie_in_every_prompt(planted, pairs):
    """Positions outside 0..width-1, none at all, or on padding of a target or a donor are refused."""
    donors, targets = pairs
    for positions in ([39], [-1], [], [0, 39]):
        with pytest.raises(ValueError, match=r"(must lie in|at least one splice position in) 0..38"):
            splice_decode(planted, targets, donors, positions)
    with pytest.raises(ValueError, match=r"must lie in 0..38 \(the prompts' positions\), got 0..9999$"):
        splice_decode(planted, targets, donors, range(10000))  # one short line, not ten thousand numbers
    longer = Task.parse("abcdefghijklmnopqrstuvwxyz | efgh > dfgh | rstu > qstu")  # 42 positions
    with pytest.raises(ValueError, match="padding"):
        splice_decode(planted, [targets[0], longer], [donors[0], longer], [40])
    with pytest.raises(ValueError, match="padding"):
        splice_decode(planted, [longer, targets[0]], [longer, donors[0]], [40])
    assert splice_decode(planted, [longer], [longer], [41]) == [planted_answer(longer)]  # width 42: 41 is inside
    with pytest.raises(ValueError, match="padding"):  # padding in the targets only
        splice_decode(planted, [targets[0], longer], [longer, longer], [40])
    with pytest.raises(ValueError, match="padding"):  # padding in the donors only
        splice_decode(planted, [longer, longer], [donors[0], longer], [40])
    with pytest.raises(ValueError, match="must lie in 0..38"):  # the narrower batch sets the range
        splice_decode(planted, targets[:2], [donors[0], longer], [40])
    with pytest.raises(ValueError, match="must lie in 0..38"):
        splice_decode(planted, [targets[0], longer], donors[:2], [40])
    with pytest.raises(ValueError, match="as many donors as targets"):
        splice_decode(planted, targets, donors[:-1], [ARROW_AT])
    with pytest.raises(ValueError, match="as many donors as targets"):
        splice_decode(planted, [], [], [ARROW_AT])


def test_analysis_counts_outcomes_per_case(planted):
    """With the planted model's own answers, the alphabet case leaves every output unchanged (its finding holds)
    and splicing 0-31 changes every one (neither the tasks' answers: its finding fails)."""
    result = splice_analysis(planted, n_pairs=4, cases={**CASES, "arrow only": (ARROW_AT,)})
    assert result.name == "splice" and result.model == "model"  # the default name
    (figure,) = result.figures.values()
    assert list(result.figures) == ["outcomes per splice"]
    assert [bar.name for bar in figure.data] == ["pred answer (donor)", "succ answer (own)", "neither"]
    cases = result.data["cases"]
    assert cases["alphabet 8-25"]["unchanged"] == 1.0 and cases["positions 0-31"]["unchanged"] == 0.0
    assert cases["positions 0-31"]["positions"] == "0-31" and cases["arrow only"]["positions"] == "30-30"
    assert cases["positions 0-31"]["neither"] == 1.0  # the planted answers are one letter, the tasks' three
    assert cases[UNUSED]["unchanged"] == 1.0  # the planted decoder reads the memory at '>' only
    assert cases[UNUSED]["positions"] == "per pair, 16.2 on average"  # 16, 16, 16 and 17 letters neither task uses
    assert cases[UNUSED]["state change"] > 0 and cases["alphabet 8-25"]["query copied"] == 0.0
    verdicts = {f.name: (f.holds, f.value) for f in result.findings}  # it solves none of the tasks: no verdict
    assert verdicts == {
        "memory splicing, positions 0-31": (None, 0.0),
        "memory splicing, alphabet 8-25": (None, 0.0),
        "memory splicing, unused letters": (None, 0.0),
    }
    assert result.summary["pairs"] == 4 and result.summary["clean_own_answer"] == 0.0
    assert result.summary["unused letters: unchanged"] == 1.0 and result.summary["unused letters: query copied"] == 0.0
    assert result.summary["positions 0-31: change alignment"] == cases["positions 0-31"]["change alignment"]
    assert result.data["donor_rule"] == "pred" and result.data["target_rule"] == "succ"
    row = result.data["pairs"][0]
    assert row["clean"] == planted_answer(Task.parse(row["target"])) == row["alphabet 8-25"]
    assert row["arrow only"] == planted_answer(Task.parse(row["donor"]))
    spliced, alphabet, unused = result.findings
    assert unused.paper == (
        "(not in the paper: the analogue of alphabet 8-25) succ prompt decoded from unused letters of the pred prompt: "
        "no change"
    )
    assert spliced.paper == (
        "succ prompt decoded from positions 0-31 of the pred prompt: the output becomes the donor's answer (acd)"
    )
    assert alphabet.paper == "succ prompt decoded from alphabet 8-25 of the pred prompt: no change"
    assert alphabet.ours == (
        "donor's answer 0%, own answer 0%, neither 100% (the query copied 0%); unchanged 100%; of the solved pairs, "
        "0% the own answer; spliced states 0.00 of their size from the own, alignment 0.00"
    )  # the planted encoder's alphabet states do not depend on the example
    assert "more than 50% of the pairs the model solves" in alphabet.detail
    assert alphabet.detail.endswith("no verdict: the model solves at most 50% of the succ prompts")


@pytest.mark.parametrize(("hits", "holds"), [(3, True), (2, True), (1, False)])
def test_a_case_holds_when_more_than_half_the_solved_pairs_give_the_papers_outcome(planted, monkeypatch, hits, holds):
    """Of 4 pairs the model solves the first 3: the 0-31 case counts donor answers among those 3, the alphabet case
    own (unchanged) answers among them; pairs it does not solve do not count, whatever their outcome."""
    calls = []

    def fake(model, targets, donors, positions):
        calls.append(tuple(positions))
        if tuple(positions) == CASES["positions 0-31"]:
            return [d.answer for d in donors[:hits]] + [t.answer for t in targets[hits:3]] + [donors[3].answer]
        return [t.answer for t in targets[:hits]] + ["yy"] * (3 - hits) + [targets[3].answer]

    monkeypatch.setattr(splice, "splice_decode", fake)
    monkeypatch.setattr(planted, "solve", lambda targets: [t.answer for t in targets[:3]] + ["zz"] * (len(targets) - 3))
    result = splice_analysis(planted, n_pairs=4, model_name="planted")
    assert result.model == "planted" and result.summary["clean_own_answer"] == 0.75
    pairs = minimal_pairs("pred", "succ", 4, lengths=(3,), at_most=True)
    per_pair = tuple(unused_positions(p.source, p.target) for p in pairs)
    assert calls == [CASES["positions 0-31"], CASES["alphabet 8-25"], per_pair]
    spliced, alphabet, unused = result.findings
    assert (spliced.holds, spliced.value) == (holds, hits / 3) and (alphabet.holds, alphabet.value) == (holds, hits / 3)
    assert (unused.holds, unused.value) == (holds, hits / 3)
    row = result.data["cases"]["positions 0-31"]
    assert (row["donor"], row["own"], row["neither"]) == ((hits + 1) / 4, (3 - hits) / 4, 0.0)  # every pair
    assert (row["donor of solved"], row["own of solved"]) == (hits / 3, (3 - hits) / 3)
    assert result.data["cases"]["alphabet 8-25"]["own"] == (hits + 1) / 4 and MAJORITY == 0.5


@pytest.mark.parametrize(("solved", "verdict"), [(2, False), (3, True)])
def test_no_verdict_unless_the_model_solves_more_than_half_the_prompts(planted, monkeypatch, solved, verdict):
    """A model that answers the succ prompts with pred's answer already (nocopy-20 does, 65 of 100) would give the
    donor's answer after any splice: with at most half the prompts solved, neither case gets a verdict."""
    monkeypatch.setattr(splice, "splice_decode", lambda model, targets, donors, positions: [d.answer for d in donors])
    answers = lambda targets: [t.answer for t in targets[:solved]] + ["zz"] * (len(targets) - solved)
    monkeypatch.setattr(planted, "solve", answers)
    spliced, alphabet, unused = splice_analysis(planted, n_pairs=4).findings
    assert (
        (spliced.holds is not None, alphabet.holds is not None) == (verdict, verdict) == (unused.holds is not None,) * 2
    )
    assert spliced.value == 1.0 and alphabet.value == 0.0


def test_analysis_defaults_are_100_pred_into_succ_pairs_of_3_letters_seed_0(planted, monkeypatch):
    """By default 100 pred (donor) / succ (target) minimal pairs of 3-letter windows, seed 0, are spliced."""
    calls = []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return minimal_pairs("pred", "succ", 2, lengths=(3,), at_most=True)

    monkeypatch.setattr(splice, "minimal_pairs", spy)
    splice_analysis(planted)
    assert calls == [(("pred", "succ", 100), {"seed": 0, "lengths": (3,), "at_most": True})]
    splice_analysis(planted, "succ", "pred", n_pairs=7, seed=3)
    assert calls[1] == (("succ", "pred", 7), {"seed": 3, "lengths": (3,), "at_most": True})


def test_unused_positions_are_the_alphabet_letters_neither_task_uses():
    """The authors' pair leaves k..z (10-25) unused: 16 of their 18 positions 8-25; answers count as used."""
    pred = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd")
    succ = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd > bce")
    assert unused_positions(pred, succ) == tuple(range(10, 26)) == unused_positions(succ, pred)
    assert unused_positions(pred.with_answer(None), succ.with_answer(None)) == (0, 4, *range(10, 26))
    shuffled = Task.parse("zyxwvutsrqponmlkjihgfedcba | ghi > fhi | bcd > acd")  # a..i sit at 25..17, e unused
    assert unused_positions(shuffled, shuffled) == (*range(17), 21)


def test_splice_mask_takes_one_list_for_all_pairs_or_one_per_pair():
    """A flat list marks the same positions in every row; a list of lists one row each (rows may be empty)."""
    same = splice_mask(range(2, 4), 3, 6)
    assert same.tolist() == [[False, False, True, True, False, False]] * 3
    per_pair = splice_mask([(0,), (), (5, 1)], 3, 6)
    assert per_pair.tolist() == [
        [True, False, False, False, False, False],
        [False] * 6,
        [False, True, False, False, False, True],
    ]
    with pytest.raises(ValueError, match=r"one list of splice positions per pair \(3\), got 2"):
        splice_mask([(0,), (1,)], 3, 6)
    with pytest.raises(ValueError, match="at least one splice position in 0..5"):
        splice_mask([(), (), ()], 3, 6)
    with pytest.raises(ValueError, match=r"must lie in 0..5 \(the prompts' positions\), got 0..6"):
        splice_mask([(0,), (6,), ()], 3, 6)


def test_each_pair_can_splice_its_own_positions(planted, pairs):
    """Per-pair positions: the pair given the arrow's position answers the donor's answer, the others their own."""
    donors, targets = pairs
    rows = [(ARROW_AT,), tuple(range(8, 26)), unused_positions(donors[2], targets[2]), (ARROW_AT, 0)]
    expected = [
        planted_answer(donors[0]),
        planted_answer(targets[1]),
        planted_answer(targets[2]),
        planted_answer(donors[3]),
    ]
    assert splice_decode(planted, targets, donors, rows) == expected


def test_memory_change_measures_size_and_shared_direction():
    """Differences all along one direction align at 1, opposite pairs at -1/3 over 4 states; size is relative."""
    target = torch.ones(2, 3, 4)
    mask = torch.tensor([[True, True, False], [True, True, False]])
    donor = target.clone()
    donor[..., 0] += 2.0  # every spliced state moves by (2, 0, 0, 0): |change| / |state| = 2 / 2
    assert memory_change(donor, target, mask) == pytest.approx({"state change": 1.0, "change alignment": 1.0})
    donor[1, :, 0] -= 4.0  # the second pair's states move the other way
    change = memory_change(donor, target, mask)
    assert change["change alignment"] == pytest.approx(-1 / 3) and change["state change"] == pytest.approx(1.0)
    donor[0, 2] += 100.0  # a position outside the mask does not count
    assert memory_change(donor, target, mask) == pytest.approx(change)
    single = torch.tensor([[True, False, False], [False, False, False]])
    assert memory_change(donor, target, single)["change alignment"] == 0.0
    donor[1] = target[1] + 1e-9  # states that hardly changed have no direction: pair 0's two are left
    assert memory_change(donor, target, mask)["change alignment"] == pytest.approx(1.0)  # (1, 1, 1, 1) would lower it


def test_a_case_does_not_hold_at_exactly_half_the_solved_pairs(planted, monkeypatch):
    """Of 4 solved pairs, 2 give the paper's outcome: half is not more than half. A case with a verdict says so
    without the no-verdict note."""

    def fake(model, targets, donors, positions):
        return [d.answer for d in donors[:2]] + [t.answer for t in targets[2:]]

    monkeypatch.setattr(splice, "splice_decode", fake)
    monkeypatch.setattr(planted, "solve", lambda targets: [t.answer for t in targets])
    spliced, alphabet, unused = splice_analysis(planted, n_pairs=4).findings
    assert [(f.holds, f.value) for f in (spliced, alphabet, unused)] == [(False, 0.5)] * 3
    assert spliced.detail == "holds when more than 50% of the pairs the model solves give the paper's outcome"


def test_answers_that_copy_the_query_are_counted(planted, monkeypatch):
    """An answer equal to the target's query is neither task's answer, and counts as the query copied."""

    def fake(model, targets, donors, positions):
        return [targets[0].query] + [t.answer for t in targets[1:]]

    monkeypatch.setattr(splice, "splice_decode", fake)
    result = splice_analysis(planted, n_pairs=4)
    row = result.data["cases"]["alphabet 8-25"]
    assert (row["query copied"], row["neither"], row["own"]) == (0.25, 0.25, 0.75)
    assert result.summary["unused letters: query copied"] == 0.25
    assert "(the query copied 25%)" in result.findings[1].ours


def test_a_model_narrower_than_its_prompts_splices_every_position():
    """The spliced width is the prompts' (39 positions), not the model's width (here 16)."""
    config = ModelConfig(
        d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_mlp=8, dropout=0.0, max_len=64
    )
    torch.manual_seed(0)
    narrow = HookedEncoderDecoder(config).eval()
    result = splice_analysis(narrow, n_pairs=2, cases={"positions 0-31": CASES["positions 0-31"]})
    row = result.data["cases"]["positions 0-31"]
    assert row["positions"] == "0-31" and row["state change"] > 0


def test_unused_positions_need_the_letter_unused_in_both_alphabets():
    """Prompts on different alphabets: a position is unused only where neither alphabet's letter is used."""
    pred = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd")  # a..j used: positions 0-9
    succ = Task.parse("zyxwvutsrqponmlkjihgfedcba | ghi > ghj | bcd > bce")  # a..j at positions 25-16
    assert unused_positions(pred, succ) == tuple(range(10, 16)) == unused_positions(succ, pred)


def test_encoder_memory_of_prompts_without_answers(planted, pairs):
    """Prompts need no answers: their memory is that of the same tasks with answers, fp32 on the CPU."""
    _, targets = pairs
    memory = encoder_memory(planted, [t.with_answer(None) for t in targets])
    assert memory.shape == (4, 39, 128) and memory.dtype == torch.float32 and memory.device.type == "cpu"
    assert torch.equal(memory, encoder_memory(planted, targets))


def test_memory_change_needs_a_change_of_more_than_1e_6_of_the_states_size():
    """States moved by exactly 1e-6 of their size have no direction; at 2e-6 they do."""
    target = torch.zeros(1, 2, 4, dtype=torch.float64)
    target[..., 3] = 1.0
    mask = torch.tensor([[True, True]])
    for step, alignment in ((1e-6, 0.0), (2e-6, 1.0)):
        donor = target.clone()
        donor[..., 0] = step
        change = memory_change(donor, target, mask)
        assert change["change alignment"] == pytest.approx(alignment) and change["state change"] == pytest.approx(step)


def test_memory_change_compares_memories_of_different_widths_over_the_mask_and_refuses_bad_masks():
    """Memories of 39 and 40 positions compare over the mask's first 39; a wider or empty mask is refused."""
    target = torch.ones(2, 40, 4)
    donor = torch.ones(2, 39, 4)
    donor[:, :, 1] += 1.0
    mask = torch.zeros(2, 39, dtype=torch.bool)
    mask[:, 3] = True
    assert memory_change(donor, target, mask) == pytest.approx({"state change": 0.5, "change alignment": 1.0})
    with pytest.raises(ValueError, match="the mask is 40 positions wide, the memories 39 and 40"):
        memory_change(donor, target, torch.ones(2, 40, dtype=torch.bool))
    with pytest.raises(ValueError, match="marks no state"):
        memory_change(donor, target, torch.zeros(2, 39, dtype=torch.bool))


def test_padding_is_refused_only_where_a_pair_splices_it(planted, pairs):
    """In a batch of a 39- and a 42-position prompt, the longer pair may splice position 39; the shorter may not."""
    donors, targets = pairs
    longer = Task.parse("abcdefghijklmnopqrstuvwxyz | efgh > dfgh | rstu > qstu")  # 42 positions
    assert splice_decode(planted, [targets[0], longer], [donors[0], longer], [(), (39,)]) == [
        planted_answer(targets[0]),
        planted_answer(longer),
    ]
    with pytest.raises(ValueError, match="padding"):
        splice_decode(planted, [targets[0], longer], [donors[0], longer], [(39,), ()])


def test_encoder_memory_is_read_without_dropout_and_keeps_the_training_mode(pairs):
    """A model in training mode, dropout 0.5: the memory is the eval-mode one, and the model stays in training mode."""
    config = ModelConfig(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_mlp=8, dropout=0.5)
    torch.manual_seed(0)
    model = HookedEncoderDecoder(config)
    _, targets = pairs
    expected = encoder_memory(model.eval(), targets)
    model.train()
    assert torch.equal(encoder_memory(model, targets), expected) and model.training


def test_only_the_authors_pair_of_rules_is_judged_and_credited_to_the_paper(planted, monkeypatch):
    """The paper spliced pred memory into succ prompts only: succ into pred was judged against a claim the paper
    never made ("the output becomes the donor's answer", does not hold). Now any other pair is reported, no verdict,
    and its paper column says it is not in the paper; the authors' pair, on the same outputs, is judged."""
    monkeypatch.setattr(splice, "splice_decode", lambda model, targets, donors, positions: [d.answer for d in donors])
    monkeypatch.setattr(planted, "solve", lambda targets: [t.answer for t in targets])  # solves every prompt
    swapped = splice_analysis(planted, "succ", "pred", n_pairs=4)
    assert swapped.summary["clean_own_answer"] == 1.0
    assert [(f.name, f.holds, f.value) for f in swapped.findings] == [
        ("memory splicing, positions 0-31", None, 1.0),
        ("memory splicing, alphabet 8-25", None, 0.0),
        ("memory splicing, unused letters", None, 0.0),
    ]
    spliced, alphabet, unused = swapped.findings
    assert spliced.paper == (
        "not in the paper (it decoded succ prompts from pred memory only): pred prompt decoded from positions 0-31 "
        "of the succ prompt"
    )
    assert unused.paper.startswith("not in the paper") and "acd" not in spliced.paper + alphabet.paper
    assert all("donor's answer" not in f.paper and "no change" not in f.paper for f in swapped.findings)
    assert alphabet.detail == (
        "no verdict: the paper spliced only pred (donor) into succ (target) prompts; the value is the share of the "
        "pairs the model solves that give the own answer"
    )
    authors = splice_analysis(planted, "pred", "succ", n_pairs=4).findings
    assert [f.holds for f in authors] == [True, False, False]
    assert authors[0].paper.endswith("the output becomes the donor's answer (acd)")


def test_near_and_far_split_the_unused_letters_at_the_changed_answer_letter():
    pred = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd")
    succ = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd > bce")
    assert splice.changed_letter_place(succ) == 4 and splice.changed_letter_place(pred) == 0
    assert splice.changed_letter_place(succ.with_answer("bcd")) is None
    near, far = splice.near_changed(True)(pred, succ), splice.near_changed(False)(pred, succ)
    assert near == () and far == tuple(range(10, 26)) == unused_positions(pred, succ)  # e (4) is used: 10 is 6 away
    assert (
        splice.near_changed(True)(succ, pred) == () and splice.near_changed(False)(pred, succ.with_answer("bcd")) == ()
    )
    late = Task.parse("abcdefghijklmnopqrstuvwxyz | efg > efh | rst > rsu")
    late_pred = Task.parse("abcdefghijklmnopqrstuvwxyz | efg > dfg | rst > qst")
    assert splice.near_changed(True)(late_pred, late) == (21, 22, 23)  # v, w, x: within 3 of u (20)


def test_a_target_without_an_answer_has_no_changed_letter_and_no_letters_near_or_far():
    """A prompt whose answer is not given has no changed answer letter, so neither side of the split holds a letter
    (rather than an error)."""
    pred = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd")
    bare = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd")
    assert splice.changed_letter_place(bare) is None
    assert splice.near_changed(True)(pred, bare) == splice.near_changed(False)(pred, bare) == ()


@pytest.mark.parametrize(
    ("shapes", "counts"),
    [
        (((2, 5, 4), (2, 5, 4), (3, 5)), "2 donor memories, 2 target memories, 3 mask rows"),
        (((3, 5, 4), (2, 5, 4), (3, 5)), "3 donor memories, 2 target memories, 3 mask rows"),
    ],
)
def test_memories_and_a_mask_of_unequal_pair_counts_are_refused_naming_each(monkeypatch, shapes, counts):
    """What a user's Python sees: the test session's runtime type checker would refuse these calls first."""
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)
    donor, target, (rows, width) = torch.randn(shapes[0]), torch.randn(shapes[1]), shapes[2]
    message = f"^unequal numbers of pairs: {counts}; give one of each per pair$"
    for compare in (masked_change, memory_change):
        with pytest.raises(ValueError, match=message):
            compare(donor, target, torch.ones(rows, width, dtype=torch.bool))


def test_equal_pair_counts_pass():
    check_pair_counts({"donors": 3, "targets": 3, "mask rows": 3})
    with pytest.raises(ValueError, match="^unequal numbers of pairs: 3 donors, 1 targets; give one of each per pair$"):
        check_pair_counts({"donors": 3, "targets": 1})
