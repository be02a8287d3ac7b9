"""Path patching: the planted circuit's one path found where it is, identities that hold to the bit, the frozen heads,
senders and receivers at some positions, and the analysis wrapped around it (parsing and reach:
test_path_ends.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from lsa_interp.analysis import activation_patching, path_patching as pp
from lsa_interp.analysis.path_patching_analysis import path_patching_analysis, path_request
from lsa_interp.analysis.planted import PLANTED_HEAD, READOUT_HEAD, planted_model
from lsa_interp.model.heads import Head, all_heads
from tests.analysis.patch_setup import pairs_parting_late, planted_pairs, succ_pred_runs

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def planted():
    return planted_model()


def _receiver(text, model):
    return pp.parse_receiver(text, model.cfg)


def test_the_planted_heads_path_runs_into_the_readouts_values_and_nowhere_else(planted):
    pairs = planted_pairs(6)
    whole = pp.sender_effect(planted, pairs, [PLANTED_HEAD])
    into_values = pp.patch_path(planted, pairs, [PLANTED_HEAD], [_receiver("3.1/v", planted)])
    assert whole.normalized == pytest.approx(1, abs=1e-4) and whole.source_answers == 1
    assert into_values.normalized == pytest.approx(1, abs=1e-4) and into_values.source_answers == 1
    for elsewhere in ("3.1/q", "3.1/k", "3.2", "memory", "cross:1.1/kv"):
        path = pp.patch_path(planted, pairs, [PLANTED_HEAD], [_receiver(elsewhere, planted)])
        assert path.normalized == pytest.approx(0, abs=1e-4) and path.source_answers == 0, elsewhere


def test_the_sweep_from_the_planted_head_lights_one_cell_and_the_module_it_is_in(planted):
    sweep = pp.paths_from(planted, planted_pairs(6), [PLANTED_HEAD])
    grid = sweep.grid
    assert grid.site == "paths from 2.3"
    assert grid.rows == (
        "encoder 3 self-attention: q",
        "encoder 3 self-attention: k",
        "encoder 3 self-attention: v",
        "encoder 3 self-attention: q,k,v",
        "decoder 1 cross-attention: k",
        "decoder 1 cross-attention: v",
        "decoder 1 cross-attention: k,v",
    )
    assert grid.columns == ("head 1", "head 2", "head 3", "head 4", "all heads")
    assert grid.hooks[2] == "encoder.2.attn.hook_v" and grid.hooks[3] == "encoder.2.attn.hook_{q,k,v}"
    lit = sweep.normalized.abs() > 0.5
    assert lit.nonzero().tolist() == [[2, READOUT_HEAD.head], [2, 4], [3, READOUT_HEAD.head], [3, 4]]
    assert float(sweep.normalized.abs().masked_fill(lit, 0).max()) < 1e-4
    assert sweep.memory is not None and sweep.memory.normalized == pytest.approx(0, abs=1e-4)


def test_the_sweep_into_the_readouts_values_finds_the_planted_head_alone(planted):
    sweep = pp.paths_into(planted, planted_pairs(6), [_receiver("3.1/v", planted)])
    normalized = sweep.normalized
    assert sweep.grid.rows[:3] == ("encoder 1 self-attention", "encoder 2 self-attention", "encoder 3 self-attention")
    assert normalized[1, PLANTED_HEAD.head] == pytest.approx(1, abs=1e-4)
    upstream = normalized[:2].clone()
    upstream[1, PLANTED_HEAD.head] = 0
    assert float(upstream.abs().max()) < 1e-4
    assert bool(normalized[2:].isnan().all()), "no head from layer 3 on reaches layer 3's values"
    assert float(sweep.grid.source_answers[1, PLANTED_HEAD.head]) == 1, "its answers decoded: the source's"
    assert float(sweep.grid.source_answers[0, 0]) == 0 and sweep.grid.source_letters is not None


def test_the_sweep_into_the_readouts_values_from_some_positions_finds_the_planted_head_at_its_letter_only(planted):
    pairs, readout = planted_pairs(6), [_receiver("3.1/v", planted)]
    at_letter = pp.paths_into(planted, pairs, readout, positions=(31,))
    assert at_letter.normalized[1, PLANTED_HEAD.head] == pytest.approx(1, abs=1e-4)
    assert at_letter.grid.site == "paths into 3.1/v from @31"
    elsewhere = pp.paths_into(planted, pairs, readout, positions=(30, 32))
    assert float(elsewhere.normalized[:2].abs().max()) < 1e-4 and elsewhere.normalized[2:].isnan().all()
    alone = pp.patch_path(planted, pairs, [pp.Sender(Head("encoder", 0, 1), (30, 32))], readout)
    assert float(elsewhere.grid.logit_diff[0, 1]) == alone.logit_diff  # each cell is that sender's path, to the bit


def test_receivers_in_any_order_get_the_same_path(small, small_pairs):
    """The memory listed first does not end the receivers' patches: a decoder head after it is patched as well."""
    senders = [Head("encoder", 0, 0), Head("decoder", 0, 0, "cross_attn")]
    first, second = pp.MEMORY, _receiver("dec:2.2/v", small)  # (a query at step 0 has one key)
    one = pp.patch_path(small, small_pairs, senders, [first, second], answers=False)
    other = pp.patch_path(small, small_pairs, senders, [second, first], answers=False)
    memory_only = pp.patch_path(small, small_pairs, senders, [first], answers=False)
    assert one.logit_diff == pytest.approx(other.logit_diff, abs=1e-6)
    assert abs(one.logit_diff - memory_only.logit_diff) > 1e-4, "the decoder head's values add to the memory's path"


def test_a_sweep_from_several_senders_names_them_all(small, small_pairs):
    sweep = pp.paths_from(small, small_pairs, [Head("encoder", 0, 0), Head("encoder", 0, 2)], answers=False)
    assert sweep.grid.site == "paths from 1.1, 1.3"
    receivers = [_receiver("2.2/kv", small), _receiver("2.3/v", small)]
    into = pp.paths_into(small, small_pairs, receivers, positions=(31, 33), answers=False)
    assert into.grid.site == "paths into 2.2/kv, 2.3/v from @31,33"


def test_a_sweep_from_steps_into_a_decoder_heads_values_takes_the_earlier_decoder_heads_there(small, small_pairs):
    """Into a decoder head, the senders are the earlier decoder heads and their positions are decoder steps: from step
    0, where these pairs' answers part, each cell is the sweep's from every step, to the bit; from later steps nothing
    reaches step 0 (causal attention)."""
    receiver = [_receiver("dec:2.2/v", small)]
    every = pp.paths_into(small, small_pairs, receiver, answers=False)
    at_parting = pp.paths_into(small, small_pairs, receiver, positions=(0,), answers=False)
    later = pp.paths_into(small, small_pairs, receiver, positions=(1, 2), answers=False)
    assert at_parting.grid.site == "paths into dec:2.2/v from @0"
    assert torch.equal(at_parting.grid.logit_diff.nan_to_num(9), every.grid.logit_diff.nan_to_num(9))
    assert float((every.grid.logit_diff - every.target_logit_diff).abs().nan_to_num(0).max()) > 1e-3
    assert bool(((later.grid.logit_diff - later.target_logit_diff).nan_to_num(0) == 0).all())


def test_a_sweep_from_positions_no_receiver_reads_is_refused(small, small_pairs):
    with pytest.raises(ValueError, match="reads none of the positions its senders write"):
        pp.paths_into(small, small_pairs, [_receiver("2.2/kv@31", small)], positions=(30,))
    with pytest.raises(ValueError, match="has 39 positions"):
        pp.paths_into(small, small_pairs, [_receiver("2.2/kv", small)], positions=(39,))


def test_a_last_layer_senders_path_into_the_memory_is_its_whole_effect_to_the_bit(small, small_pairs):
    for head in range(small.cfg.n_heads):
        sender = Head("encoder", 1, head)
        path = pp.patch_path(small, small_pairs, [sender], [pp.MEMORY])
        assert path == pp.sender_effect(small, small_pairs, [sender])


def test_a_path_into_the_memory_is_one_into_every_cross_attentions_keys_and_values_to_the_bit(small, small_pairs):
    sender = [Head("encoder", 0, 1)]
    every_cross = [_receiver(f"cross:{layer}.{head}/kv", small) for layer in (1, 2) for head in (1, 2, 3, 4)]
    assert pp.patch_path(small, small_pairs, sender, [pp.MEMORY]) == pp.patch_path(
        small, small_pairs, sender, every_cross
    )


def test_the_other_heads_are_frozen_so_a_first_layer_path_is_not_its_whole_effect(small, small_pairs):
    sender = [Head("encoder", 0, 1)]
    path = pp.patch_path(small, small_pairs, sender, [pp.MEMORY])
    assert abs(path.normalized - pp.sender_effect(small, small_pairs, sender).normalized) > 0.01


def test_each_sweep_cell_is_the_path_patched_on_its_own(small, small_pairs):
    sender = [Head("encoder", 0, 2)]
    sweep = pp.paths_from(small, small_pairs, sender)
    rows = sweep.grid.rows
    cells = [
        (rows.index("encoder 2 self-attention: v"), 1, [_receiver("2.2/v", small)]),
        (rows.index("encoder 2 self-attention: q,k,v"), 4, [_receiver(f"2.{h}", small) for h in (1, 2, 3, 4)]),
        (rows.index("decoder 2 cross-attention: k"), 3, [_receiver("cross:2.4/k", small)]),
    ]
    for row, column, receivers in cells:
        alone = pp.patch_path(small, small_pairs, sender, receivers)
        assert float(sweep.grid.logit_diff[row, column]) == alone.logit_diff
        assert float(sweep.grid.source_answers[row, column]) == alone.source_answers
        letters = torch.tensor([alone.source_letters, alone.other_letters])
        torch.testing.assert_close(sweep.grid.source_letters[:, row, column], letters[0], equal_nan=True)
        torch.testing.assert_close(sweep.grid.other_letters[:, row, column], letters[1], equal_nan=True)
    assert not sweep.grid.source_letters[:, rows.index("encoder 2 self-attention: v")].isnan().all()
    assert sweep.memory == pp.patch_path(small, small_pairs, sender, [pp.MEMORY])
    into = pp.paths_into(small, small_pairs, [_receiver("2.2/v", small)])
    assert float(into.grid.logit_diff[0, 2]) == float(
        sweep.grid.logit_diff[rows.index("encoder 2 self-attention: v"), 1]
    )
    assert into.grid.source_letters is not None
    for quiet in (
        pp.paths_from(small, small_pairs, sender, answers=False),
        pp.paths_into(small, small_pairs, [_receiver("2.2/v", small)], answers=False),
    ):
        assert quiet.grid.source_letters is None and quiet.grid.source_answers.isnan().all()  # nothing decoded


def test_a_decoder_sender_reaches_later_decoder_heads_and_their_answers_are_not_decoded(small, small_pairs):
    sweep = pp.paths_from(small, small_pairs, [pp.parse_receiver("cross:1.2", small.cfg).head])
    assert sweep.grid.rows == (
        "decoder 2 self-attention: q",
        "decoder 2 self-attention: k",
        "decoder 2 self-attention: v",
        "decoder 2 self-attention: q,k,v",
        "decoder 2 cross-attention: q",
    )
    assert sweep.memory is None and bool(sweep.grid.source_answers.isnan().all())
    changed = (sweep.grid.logit_diff - sweep.target_logit_diff).abs()
    assert float(changed[2:].min()) > 1e-5, "the values and the cross-attention's queries carry the path"
    assert bool((changed[:2] == 0).all()), "where the answers part (step 0) a causal self-attention has one key"


def test_a_first_decoder_self_attention_reads_the_same_teacher_forced_input_in_both_runs(small, small_pairs):
    sweep = pp.paths_from(small, small_pairs, [pp.parse_receiver("dec:1.2", small.cfg).head])
    assert sweep.grid.rows[0] == "decoder 1 cross-attention: q"
    assert bool((sweep.grid.logit_diff == sweep.target_logit_diff).all())


def test_on_pairs_parting_late_a_first_decoder_self_attention_still_sends_nothing_directly_or_through_a_hop(small):
    """Every run is teacher-forced on the target answers, so the first decoder self-attention's outputs are the same
    in the source and target runs at every step, and its paths change nothing, to the bit, where the answers part at
    the second and third letter as well: run 2 and a hop's run are teacher-forced on those answers too (the start
    token alone would give every step its step-0 inputs)."""
    pairs, sender = pairs_parting_late(), [pp.parse_receiver("dec:1.2", small.cfg).head]
    sweep = pp.paths_from(small, pairs, sender, answers=False)
    assert bool((sweep.grid.logit_diff == sweep.target_logit_diff).all())
    receiver = [_receiver("cross:2.1/q", small)]
    for through in ([], [_hop("dec:2.*/v", small)]):
        path = pp.patch_path(small, pairs, sender, receiver, through=through, answers=False)
        assert path.logit_diff == sweep.target_logit_diff and path.normalized == 0, through


@pytest.mark.parametrize(
    ("senders", "receivers", "message"),
    [
        ([], ["2.1"], "path patching needs at least one sender head"),
        (["1.1", "1.1"], ["2.1"], "senders repeat a head: 1.1, 1.1"),
        (["2.1"], ["1.3/v"], "receiver 1.3/v: no sender reaches its v along a path through no other head"),
        (
            ["1.1"],
            ["cross:1.1/q"],
            "receiver cross:1.1/q: no sender reaches its q along a path through no other head (it reads kv of 1.1)",
        ),
        (["dec:1.1"], ["memory"], "the memory receives only from encoder heads"),
        (["1.1"], ["2.2/v", "memory"], "the memory cannot receive beside encoder heads"),
    ],
)
def test_paths_that_cannot_run_are_refused(small, small_pairs, senders, receivers, message):
    cfg = small.cfg
    heads = [pp.parse_receiver(s, cfg).head for s in senders]
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pp.patch_path(small, small_pairs, heads, [_receiver(r, small) for r in receivers])


def test_sweeps_refuse_what_nothing_can_fill(small, small_pairs):
    with pytest.raises(ValueError, match="no head reaches every input of 1.2/qkv; each needs a head before it"):
        pp.paths_into(small, small_pairs, [_receiver("1.2", small)])
    with pytest.raises(ValueError, match="needs at least one receiver"):
        pp.paths_into(small, small_pairs, [])
    with pytest.raises(ValueError, match="needs at least one receiver"):
        pp.patch_path(small, small_pairs, [Head("encoder", 0, 0)], [])


def test_progress_counts_every_patched_cell(small, small_pairs):
    seen = []
    pp.paths_from(small, small_pairs, [Head("encoder", 0, 0)], lambda done, total: seen.append((done, total)))
    cells = (4 + 3 + 3) * (small.cfg.n_heads + 1) + 1
    assert seen == [(done, cells) for done in range(1, cells + 1)]
    seen.clear()
    pp.paths_into(small, small_pairs, [_receiver("cross:2.1/q", small)], lambda done, total: seen.append(done))
    assert seen == list(range(1, 13)), "decoder 1 self- and cross-attention, decoder 2 self-attention"


NOT_IN_PAPER = "not in the paper (path patching, as in Wang et al.'s IOI circuit)"


@pytest.fixture()
def planted_offers(monkeypatch):
    monkeypatch.setattr(activation_patching, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))


def test_the_analysis_of_one_path_reports_it_beside_the_senders_whole_effect(planted, planted_offers):
    result = path_patching_analysis(planted, "planted", ["2.3"], ["3.1/v"], "pred", "succ", n_pairs=4)
    assert result.summary["path"] == "2.3 -> 3.1/v" and result.summary["pairs solved (both prompts)"] == 4
    assert result.summary["path: normalised"] == pytest.approx(1, abs=1e-4)
    assert result.summary["path: source's answers"] == 1
    assert [f.name for f in result.findings] == ["Path 2.3 -> 3.1/v", "Whole effect of 2.3"]
    assert all(f.holds is None for f in result.findings), "not the paper's finding: reported, not judged"
    path = result.to_dict()["data"]["path"]
    assert set(path) == {
        "normalized",
        "logit_diff",
        "source_answers",
        "other_answers",
        "source_letters",
        "other_letters",
    }
    assert path["source_letters"] == [1, None] and path["other_letters"] == [0, None]  # one letter; EOS alike
    assert result.summary["path: source's token at answer position 1"] == 1
    assert "answer position 2" not in str(result.summary), "no pair's answers differ there"
    assert result.findings[0].ours.endswith("the source's token where the answers differ: #1 100%")
    bars = result.figures["path"].data[0]
    assert list(bars.x) == ["path 2.3 -> 3.1/v", "senders' whole effect"] and list(bars.y) == pytest.approx(
        [1, 1], abs=1e-4
    )
    assert (
        bars.customdata[0]
        == "answers: 100% the source's, 0% neither; the source's token where the answers differ: #1 100%"
    )


def test_the_analysis_of_a_senders_sweep_names_the_largest_path_and_draws_it(planted, planted_offers, tmp_path):
    result = path_patching_analysis(planted, "planted", senders=["2.3"], source="pred", target="succ", n_pairs=4)
    assert result.summary["paths from 2.3: largest"].startswith("encoder 3 self-attention: v, head 1: 1.0")
    assert result.summary["path into the memory: normalised"] == pytest.approx(0, abs=1e-4)
    names = [f.name for f in result.findings]
    assert names == ["Largest paths from 2.3", "Whole effect of 2.3", "Path 2.3 -> memory"]
    assert [f.value for f in result.findings] == pytest.approx([1, 1, 0], abs=1e-4)
    assert list(result.figures) == ["paths from 2.3"]
    result.write(tmp_path)
    data = result.to_dict()["data"]
    assert data["grid"]["columns"][-1] == "all heads" and math.isnan(data["grid"]["normalized"][-1][0]) is False
    assert (tmp_path / "path_patching.html").stat().st_size > 10_000


def test_the_analysis_of_a_receivers_sweep_finds_its_sender(planted, planted_offers):
    result = path_patching_analysis(planted, "planted", receivers=["3.1/v"], source="pred", target="succ", n_pairs=4)
    assert result.summary["paths into 3.1/v: largest"].startswith("encoder 2 self-attention, head 3: 1.0")
    assert "senders' whole effect: normalised" not in result.summary
    options = {"receivers": ["3.1/v"], "source": "pred", "target": "succ", "n_pairs": 4}
    at = path_patching_analysis(planted, "p", **options, sender_positions="31")
    assert at.summary["paths into 3.1/v from @31: largest"].startswith("encoder 2 self-attention, head 3: 1.0")


def test_the_analysis_sweeps_from_decoder_steps_into_a_cross_attentions_queries(planted, planted_offers):
    """The first decoder self-attention at step 0 reads the start token alone, in both runs: every path is 0."""
    options = {"receivers": ["cross:1.1/q"], "source": "pred", "target": "succ", "n_pairs": 4}
    result = path_patching_analysis(planted, "planted", **options, sender_positions="0")
    assert result.summary["paths into cross:1.1/q from @0: largest"] == "decoder 1 self-attention, head 1: 0.000"


def test_the_largest_path_is_read_among_the_cells_a_path_runs_through_where_all_move_away(
    planted, planted_offers, monkeypatch
):
    """Every cell moved two source-target differences away from the source: the planted head's path (-1) is still the
    largest, not one of the cells no path runs through (NaN)."""
    real = pp.PathPatcher.paths_into

    def away(self, *args, **kwargs):
        sweep = real(self, *args, **kwargs)
        moved = sweep.grid.logit_diff - 2 * (sweep.source_logit_diff - sweep.target_logit_diff)
        return dataclasses.replace(sweep, grid=dataclasses.replace(sweep.grid, logit_diff=moved))

    monkeypatch.setattr(pp.PathPatcher, "paths_into", away)
    result = path_patching_analysis(planted, "planted", receivers=["3.1/v"], source="pred", target="succ", n_pairs=4)
    assert result.summary["paths into 3.1/v: largest"] == "encoder 2 self-attention, head 3: -1.000"


def test_the_analysis_of_one_path_with_heads_frozen_writes_every_measure_under_its_name(planted, planted_offers):
    """The whole record of one path with the readout's layer frozen: the summary, the findings' words, the data."""
    senders = ["1.1", "2.3"]  # 1.1 sends nothing the readout reads
    result = path_patching_analysis(planted, "planted", senders, ["3.1/v"], "pred", "succ", n_pairs=3, frozen=["3.*"])
    assert result.name == "path_patching" and result.model == "planted"
    rows = {key: value for key, value in result.summary.items() if "normalised" not in key}
    assert rows == {
        "source rule (patched in)": "pred",
        "target rule (run)": "succ",
        "pairs offered": 3,
        "pairs solved (both prompts)": 3,
        "path": "1.1, 2.3 -> 3.1/v",
        "path: source's answers": 1.0,
        "path: neither answer": 0.0,
        "path: source's token at answer position 1": 1.0,
        "senders' whole effect: source's answers": 1.0,
        "senders' whole effect: neither answer": 0.0,
        "senders' whole effect: source's token at answer position 1": 1.0,
        "senders' effect with 3.* frozen: source's answers": 0.0,
        "senders' effect with 3.* frozen: neither answer": 0.0,
        "senders' effect with 3.* frozen: source's token at answer position 1": 0.0,
    }
    names = ["Path 1.1, 2.3 -> 3.1/v", "Whole effect of 1.1, 2.3", "Effect of 1.1, 2.3 with 3.* frozen"]
    assert [f.name for f in result.findings] == names
    assert [f.paper for f in result.findings] == [NOT_IN_PAPER] * 3
    assert result.findings[2].ours.startswith("0.00 of the logit difference, answers: 0% the source's, 0% neither")
    assert [f.value for f in result.findings] == pytest.approx([1, 1, 0], abs=1e-4)
    data = result.to_dict()["data"]
    assert (data["senders"], data["through"], data["receivers"], data["direct"]) == (senders, [], ["3.1/v"], False)
    assert data["frozen"] == [f"3.{head}" for head in range(1, 5)] and data["frozen_effect"]["source_answers"] == 0


def test_the_analysis_of_a_sweep_writes_its_record_and_hands_on_the_defaults_and_the_progress(planted, monkeypatch):
    asked = []
    drawn = lambda source, target, n, **options: asked.append((n, options)) or planted_pairs(min(n, 2))
    monkeypatch.setattr(activation_patching, "minimal_pairs", drawn)
    ticks = []
    result = path_patching_analysis(planted, senders=["2.3"], progress=lambda done, total: ticks.append((done, total)))
    assert asked == [(100, {"seed": 0, "alphabets": "standard", "lengths": (3,), "at_most": True})]
    assert result.model == "model" and ticks and ticks[-1][0] == ticks[-1][1] == len(ticks)
    summary = result.summary
    rules = summary["source rule (patched in)"], summary["target rule (run)"]
    assert rules == ("succ", "pred") and summary["pairs offered"] == 2
    assert summary["logit diff, source run"] == pytest.approx(-summary["logit diff, target run"])  # f and g swapped
    assert [f.paper for f in result.findings] == [NOT_IN_PAPER] * 3
    assert result.findings[-1].ours.startswith("0.00 of the logit difference, answers: 0% the source's, 0% neither")
    assert result.findings[0].ours.startswith("encoder 3 self-attention: v, head 1: 1.00 of the logit difference")
    data = result.to_dict()["data"]
    assert data["grid"]["site"] == "paths from 2.3" and data["memory"]["source_answers"] == 0
    assert result.figures["paths from 2.3"].layout.title.text == "paths from 2.3: patched from succ into pred"
    ticks.clear()
    into = path_patching_analysis(planted, "p", receivers=["3.1/v"], n_pairs=1, progress=lambda *t: ticks.append(t))
    assert into.summary["pairs solved (both prompts)"] == 1 and asked[-1][0] == 1
    assert ticks[-1] == (8, 8), "every head of layers 1 and 2"
    assert "memory" not in into.to_dict()["data"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "give senders (heads such as '1.3'), receivers ('2.3/v', 'memory') or both"),
        ({"senders": ["2.3"], "n_pairs": 0}, "n_pairs must be at least 1"),
        ({"senders": ["3.1"], "receivers": ["2.3"]}, "receiver 2.3/qkv: no sender reaches"),
        ({"senders": ["4.1"]}, "no head '4.1' in this model"),
        ({"receivers": ["1.2/v"]}, "no head reaches every input of 1.2/v"),
        ({"senders": ["2.3"], "sender_positions": "31"}, "sender positions apply to the sweep of every head into"),
        ({"senders": ["2.3"], "receivers": ["3.1"], "sender_positions": "31"}, "sender positions apply to the sweep"),
        ({"receivers": ["3.1"], "direct": True}, "a direct path joins a chain's: give sender heads, through hops"),
        ({"senders": ["2.3"], "receivers": ["memory"], "direct": True}, "a direct path joins a chain's: give through"),
        ({"receivers": ["3.1/v"], "sender_positions": "3x"}, "bad positions '3x': give 0-based positions separated"),
        ({"receivers": ["3.1/v@31"], "sender_positions": "30"}, "its v reads none of the positions its senders write"),
    ],
)
def test_the_analysis_refuses_bad_options_before_it_decodes(planted, monkeypatch, options, message):
    monkeypatch.setattr(activation_patching, "minimal_pairs", lambda *a, **k: pytest.fail("decoded before refusing"))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        path_patching_analysis(planted, "planted", **options)


def test_a_request_is_parsed_once_for_the_analysis_and_the_command(planted):
    asked = path_request(planted.cfg, receivers=["3.*/v"], sender_positions="33, 31,31")
    assert asked.sender_positions == (31, 33) and asked.senders == [] and len(asked.receivers) == planted.cfg.n_heads
    chain = path_request(planted.cfg, ["2.3@31"], ["memory"], frozen=["1.*"], through=["3.1/v"])
    assert pp.labels(chain.senders) == ["2.3@31"] and chain.receivers == [pp.MEMORY] and len(chain.frozen) == 4
    assert [pp.labels(hop) for hop in chain.through] == [["3.1/v"]] and chain.sender_positions is None


def test_the_analysis_refuses_a_model_that_solves_no_pair(small):
    with pytest.raises(ValueError, match="the model answers both prompts of none of the 3 succ/pred minimal pairs"):
        path_patching_analysis(small, "small", senders=["1.1"], n_pairs=3)


@torch.no_grad()
def test_a_path_patched_by_hooks_is_the_path_patched_through_nnsight():
    """The three runs written the nnsight way (outputs saved in the source and target traces; the sender set, layer
    2 frozen at the target's and the receiver's values saved in a third; those values set in a fourth) give the
    measure `patch_path` gives, and freezing layer 2 matters: the hooks engine checked against an independent one."""
    pytest.importorskip("nnsight")  # a project dependency; the GPU machine's image lacks it
    from lsa_interp.model.config import ModelConfig
    from lsa_interp.model.hooked import HookedEncoderDecoder
    from lsa_interp.model.tracing import traced

    torch.manual_seed(1)
    cfg = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=3, n_decoder_layers=1, d_mlp=64)
    model = HookedEncoderDecoder(cfg).eval()
    pairs, batch, tgt, measure = succ_pred_runs(5)
    by_hooks = pp.patch_path(model, pairs, [Head("encoder", 0, 1)], [_receiver("3.3/v", model)], answers=False)
    nn = traced(model)
    with nn.trace(batch.source, tgt):
        sent = nn.encoder[0].attn.hook_z.output.save()
    with nn.trace(batch.target, tgt):
        second = nn.encoder[1].attn.hook_z.output.save()
    with nn.trace(batch.target, tgt):
        nn.encoder[0].attn.hook_z.output[:, :, 1] = sent[:, :, 1]
        nn.encoder[1].attn.hook_z.output[:] = second
        values = nn.encoder[2].attn.hook_v.output.save()
    with nn.trace(batch.target, tgt):
        nn.encoder[2].attn.hook_v.output[:, :, 2] = values[:, :, 2]
        logits = nn.output.save()
    assert float(measure(logits)) == pytest.approx(by_hooks.logit_diff, abs=1e-5)
    with nn.trace(batch.target, tgt):
        nn.encoder[0].attn.hook_z.output[:, :, 1] = sent[:, :, 1]
        unfrozen = nn.encoder[2].attn.hook_v.output.save()
    assert float((unfrozen - values).abs().max()) > 1e-4, "layer 2 relays the sender when it is not frozen"


def test_the_planted_path_enters_the_readouts_values_at_the_first_output_letter_only(planted):
    """The readout head at ``>`` (30) reads the next position, the first example-output letter (31): the planted head's
    path runs into its values there and nowhere else."""
    pairs = planted_pairs(4)
    at = {
        place: pp.patch_path(planted, pairs, [PLANTED_HEAD], [_receiver(f"3.1/v@{place}", planted)])
        for place in (30, 31, 32)
    }
    assert at[31].normalized == pytest.approx(1, abs=1e-4) and at[31].source_answers == 1
    assert at[30].normalized == pytest.approx(0, abs=1e-4) and at[32].normalized == pytest.approx(0, abs=1e-4)


def test_receivers_at_every_position_together_are_the_receiver_at_all_positions_to_the_bit(small, small_pairs):
    sender, length = [Head("encoder", 0, 1)], 39
    halves = [_receiver("2.3/v@" + ",".join(map(str, part)), small) for part in (range(0, 20), range(20, length))]
    whole = pp.patch_path(small, small_pairs, sender, [_receiver("2.3/v", small)])
    assert pp.patch_path(small, small_pairs, sender, halves) == whole
    assert pp.patch_path(small, small_pairs, sender, halves[:1]) != whole


def test_a_receiver_position_past_the_prompts_is_refused(small, small_pairs):
    with pytest.raises(ValueError, match=r"receiver 2.3/v@39: its inputs have 39 positions \(0..38\) in these prompts"):
        pp.patch_path(small, small_pairs, [Head("encoder", 0, 1)], [_receiver("2.3/v@39", small)])


def _sender(text, model):
    (sender,) = pp.parse_senders(text, model.cfg)
    return sender


def test_a_sender_at_every_position_is_the_sender_at_all_positions_to_the_bit(small, small_pairs):
    every, receivers = _sender("1.2@" + ",".join(map(str, range(39))), small), [_receiver("2.3/v", small)]
    assert pp.patch_path(small, small_pairs, [every], receivers) == pp.patch_path(
        small, small_pairs, [Head("encoder", 0, 1)], receivers
    )
    assert pp.sender_effect(small, small_pairs, [every]) == pp.sender_effect(
        small, small_pairs, [Head("encoder", 0, 1)]
    )
    some = pp.patch_path(small, small_pairs, [_sender("1.2@31,33", small)], receivers)
    assert some != pp.patch_path(small, small_pairs, [every], receivers)


@pytest.mark.parametrize("receiver", ["2.3/v", "cross:1.1/kv", "cross:2.4/k"])
def test_a_sender_at_one_position_reaches_a_receiver_there_only_to_the_bit(small, small_pairs, receiver):
    """MLPs and norms act on each position alone, so the receiver at all positions gets what it gets at the sender's."""
    sender = [_sender("1.2@33", small)]
    at_all = pp.patch_path(small, small_pairs, sender, [_receiver(receiver, small)])
    assert pp.patch_path(small, small_pairs, sender, [_receiver(f"{receiver}@33", small)]) == at_all
    assert at_all.normalized != 0


def test_a_senders_whole_effect_at_some_positions_is_activation_patching_of_them(small, small_pairs):
    every = slice(None)
    cells = [("encoder.0.attn.hook_z", (every, [31, 33], 1)), ("encoder.1.attn.hook_z", (every, [32], 3))]
    joint = activation_patching.patch_together(small, small_pairs, cells)
    effect = pp.sender_effect(small, small_pairs, [_sender("1.2@31,33", small), _sender("2.4@32", small)])
    assert (effect.normalized, effect.logit_diff) == (joint.normalized, joint.logit_diff)
    assert (effect.source_answers, effect.other_answers) == (joint.source_answers, joint.other_answers)


def test_the_planted_heads_path_leaves_from_the_first_output_letter_only(planted):
    """The planted head writes the rule at the first example-output letter (31), where the readout reads it."""
    pairs, receiver = planted_pairs(4), [_receiver("3.1/v", planted)]
    at = {place: pp.patch_path(planted, pairs, [_sender(f"2.3@{place}", planted)], receiver) for place in (30, 31, 32)}
    assert at[31].normalized == pytest.approx(1, abs=1e-4) and at[31].source_answers == 1
    assert at[30].normalized == pytest.approx(0, abs=1e-4) and at[32].normalized == pytest.approx(0, abs=1e-4)


def test_a_sender_position_past_the_prompts_is_refused(small, small_pairs):
    with pytest.raises(ValueError, match=r"sender 1.2@39: its output has 39 positions \(0..38\) in these prompts"):
        pp.patch_path(small, small_pairs, [_sender("1.2@39", small)], [_receiver("2.3/v", small)])
    with pytest.raises(ValueError, match=r"sender 1.2@40,41: its output has 39 positions"):
        pp.sender_effect(small, small_pairs, [_sender("1.2@40,41", small)])


def test_freezing_the_readout_cuts_the_planted_heads_effect_and_freezing_another_head_does_not(planted):
    pairs = planted_pairs(4)
    whole = pp.sender_effect(planted, pairs, [PLANTED_HEAD])
    assert pp.sender_effect(planted, pairs, [PLANTED_HEAD], []) == whole
    cut = pp.sender_effect(planted, pairs, [PLANTED_HEAD], [READOUT_HEAD])
    spared = pp.sender_effect(planted, pairs, [PLANTED_HEAD], [Head("encoder", 2, 1), Head("encoder", 1, 0)])
    assert whole.normalized == pytest.approx(1, abs=1e-4) and whole.source_answers == 1
    assert cut.normalized == pytest.approx(0, abs=1e-4) and cut.source_answers == 0
    assert spared.normalized == pytest.approx(1, abs=1e-4) and spared.source_answers == 1


def test_a_first_layer_senders_effect_with_the_encoders_other_heads_frozen_is_its_path_into_the_memory(
    small, small_pairs
):
    """Both move the memory by the sender's output through the encoder's MLPs and norms alone, with the decoder free."""
    sender = [_sender("1.2@31,33", small)]
    others = [head for head in all_heads(small.cfg) if head != sender[0].head]
    assert pp.sender_effect(small, small_pairs, sender, others) == pp.patch_path(
        small, small_pairs, sender, [pp.MEMORY]
    )
    whole = pp.sender_effect(small, small_pairs, sender)
    assert pp.sender_effect(small, small_pairs, sender, [Head("encoder", 0, 0)]) == whole, "a head beside it reads none"
    assert pp.sender_effect(small, small_pairs, sender, [Head("encoder", 1, 0)]) != whole


def test_a_last_layer_sender_reaches_the_decoder_through_its_cross_attentions_only(small, small_pairs):
    sender = [Head("encoder", 1, 2)]
    cross = all_heads(small.cfg, "decoder", "cross_attn")
    encoder = [head for head in all_heads(small.cfg) if head != sender[0]]
    frozen = pp.sender_effect(small, small_pairs, sender, cross)
    assert frozen.logit_diff == pp.sender_effect(small, small_pairs, [Head("encoder", 1, 3)], cross).logit_diff
    assert frozen.normalized == pytest.approx(0, abs=1e-6) and math.isnan(frozen.source_answers)
    assert pp.sender_effect(small, small_pairs, sender, encoder) == pp.sender_effect(small, small_pairs, sender)


@pytest.mark.parametrize(
    ("frozen", "message"),
    [(["1.2", "2.1"], r"1.2: a head cannot both send and be frozen"), (["2.1", "2.1"], "frozen heads repeat a head")],
)
def test_frozen_heads_that_send_or_repeat_are_refused(small, small_pairs, frozen, message):
    heads = [pp.parse_receiver(text, small.cfg).head for text in frozen]
    with pytest.raises(ValueError, match=message):
        pp.sender_effect(small, small_pairs, [_sender("1.2@31", small)], heads)


def _hop(text, model):
    return pp.parse_receivers(text, model.cfg)


def test_the_planted_chain_runs_through_the_readout_into_the_memory_and_through_no_other_head(planted):
    pairs = planted_pairs(4)
    readout = pp.patch_path(planted, pairs, [PLANTED_HEAD], [pp.MEMORY], through=[_hop("3.1/v", planted)])
    other = pp.patch_path(planted, pairs, [PLANTED_HEAD], [pp.MEMORY], through=[_hop("3.2", planted)])
    assert readout.normalized == pytest.approx(1, abs=1e-4) and readout.source_answers == 1
    assert other.normalized == pytest.approx(0, abs=1e-6) and other.source_answers == 0


def test_a_chain_through_the_last_encoder_layer_into_the_memory_is_the_path_into_that_layer_to_the_bit(
    small, small_pairs
):
    sender, last = [_sender("1.2@31,33", small)], _hop("2.*", small)
    chain = pp.patch_path(small, small_pairs, sender, [pp.MEMORY], through=[last])
    assert chain == pp.patch_path(small, small_pairs, sender, last)
    assert chain != pp.patch_path(small, small_pairs, sender, [pp.MEMORY], through=[_hop("2.1", small)])


def test_a_chain_with_its_direct_path_through_a_whole_layer_is_the_senders_effect_with_their_layer_frozen(
    small, small_pairs
):
    """Senders in layer 1, every layer-2 head as the hop, the memory received: with the direct path the hop run is the
    target with the senders' output and every other layer-1 head frozen, so the memory it records is that of the
    senders' whole effect with their layer's other heads frozen, to the bit; the chain alone cuts the senders' direct
    way into the memory (through the residual stream), so it is not."""
    sender, layer2 = [_sender("1.2@31,33", small)], _hop("2.*", small)
    both = pp.patch_path(small, small_pairs, sender, [pp.MEMORY], through=[layer2], direct=True)
    others = [Head("encoder", 0, head) for head in (0, 2, 3)]
    assert both == pp.sender_effect(small, small_pairs, sender, others)
    chain = pp.patch_path(small, small_pairs, sender, [pp.MEMORY], through=[layer2])
    assert chain.logit_diff != both.logit_diff and chain == pp.patch_path(small, small_pairs, sender, layer2)


def test_the_planted_head_reaches_the_memory_through_the_readouts_queries_only_with_its_direct_path(planted):
    pairs, sender, queries = planted_pairs(4), [PLANTED_HEAD], _hop("3.1/q", planted)
    alone = pp.patch_path(planted, pairs, sender, [pp.MEMORY], through=[queries])
    both = pp.patch_path(planted, pairs, sender, [pp.MEMORY], through=[queries], direct=True)
    assert alone.normalized == pytest.approx(0, abs=1e-4) and both.normalized == pytest.approx(1, abs=1e-4)
    assert (alone.source_answers, both.source_answers) == (0, 1)  # the readout's values read the planted head


@pytest.mark.parametrize(
    ("senders", "through", "message"),
    [
        (["1.2"], [], "a direct path joins a chain's: give through hops as well"),
        (["1.2", "2.1"], ["2.*"], "2.1: a head cannot both send and relay in a hop of the same chain"),
    ],
)
def test_a_direct_path_without_a_chain_or_with_a_sender_in_a_hop_is_refused(
    small, small_pairs, senders, through, message
):
    hops = [_hop(text, small) for text in through]
    with pytest.raises(ValueError, match=message):
        pp.patch_path(small, small_pairs, [_sender(x, small) for x in senders], [pp.MEMORY], through=hops, direct=True)


def test_a_hop_passes_on_only_what_it_received(small, small_pairs):
    """Through a cross-attention's keys and values into a later decoder head's values (at the first step, where the
    answers part here, a causal head's query and key carry nothing): the hop's heads pass on what the sender sent
    them; without the hop the receiver cannot read the encoder sender."""
    sender, hop, receiver = [Head("encoder", 0, 1)], _hop("cross:1.*/kv", small), _hop("dec:2.1/v", small)
    chain = pp.patch_path(small, small_pairs, sender, receiver, through=[hop])
    assert chain.normalized != 0 and math.isnan(chain.source_answers)
    with pytest.raises(ValueError, match="receiver dec:2.1/v: no sender reaches its v"):
        pp.patch_path(small, small_pairs, sender, receiver)
