"""analyses/splice_controls.py: the unused-letter splice, its directions and controls, on the planted model (whose
decoder reads the memory at ``>`` only and whose alphabet states do not depend on the example)."""

from __future__ import annotations

import json

import pytest
import torch

from lsa_interp.analysis.memory_direction import by_layer, compare_mean_changes, direction_vectors, mean_change
from lsa_interp.analysis.planted import planted_model
from lsa_interp.analysis.prompts import changed_place_pairs, minimal_pairs
from lsa_interp.analysis.splice import encoder_memory, memory_change, unused_positions
from lsa_interp.data.task import Task
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.checkpoint import save_model
from tests.helpers import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("analyses/splice_controls.py")


def test_rows_count_outcomes_and_the_state_change(script, tmp_path, capsys):
    model_dir = tmp_path / "planted"
    save_model(planted_model(), model_dir, metadata={"preset": "copy-20", "seed": 0})
    out = tmp_path / "controls.json"
    assert script.main(["--model", str(model_dir), "--pairs", "4", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["pairs_asked"], result["seed"]) == (4, 0)
    table = result["models"][str(model_dir)]
    assert table["pairs"] == 4
    assert table["solved_succ"] == table["solved_pred"] == 0.0  # it answers one letter
    assert list(table["rows"]) == [
        "pred into succ",
        "succ into pred",
        "succ into succ, other example",
        "pred into succ, within 3 of the changed letter",
        "pred into succ, further than 3",
        "pred into succ, less the mean direction",
        "pred into succ, less the mean direction, at full length",
        "pred into succ, at 0.15 of its size",
        "pred into succ, at 0.5 of its size",
        "succ plus the mean pred - succ difference",
        "succ plus a random direction of that length",
    ]
    rows = table["rows"]
    for name, row in rows.items():
        assert row["pairs"] == 4 and row["unchanged"] == 1.0 and row["other"] == 1.0  # the decoder reads '>' only
        if name.startswith("succ plus"):
            assert row["vector_size"] < 1e-6 and row["positions_per_pair"] == 16.25
        elif "of its size" in name:
            assert row["factor"] in (0.15, 0.5) and row["positions_per_pair"] == 16.25
        elif "less the mean direction" in name:
            assert 0 <= row["change_kept"] <= 1 and row["positions_per_pair"] == 16.25
        else:
            assert row["state change"] < 1e-6 and row["change alignment"] == 0.0
    assert rows["pred into succ"]["positions_per_pair"] == 16.25  # 16, 16, 16 and 17 letters
    fix = table["fix, first vs last"]
    assert (fix["pairs"], fix["solved_first"], fix["solved_last"]) == (4, 0.0, 0.0)
    assert fix["positions_per_pair"] == 26 - 8  # a window, its wrong letter, a query's 3 letters and its answer's 1
    assert fix["state change"] < 1e-6 and fix["change alignment"] == 0.0  # nothing changes: no direction to share
    assert {"pred - succ cosine", "pred - succ length ratio", "pred - succ share along"} < set(fix)
    layers = table["pred vs succ by layer"]
    hooks = [f"encoder.{layer}.hook_resid_post" for layer in range(planted_model().cfg.n_encoder_layers)]
    assert list(layers) == [*hooks, "encoder.ln_final.hook_out"] and len(hooks) >= 1
    assert all(cell["state change"] < 1e-6 for cell in layers.values())  # its alphabet states ignore the example
    zeroed = table["pred vs succ, last-layer heads zeroed at the unused letters"]
    head = table["attention on the changed letter"]["succ"]["head"]
    assert list(zeroed) == [f"head {head}", "every other head"]
    assert all(cell["state change"] < 1e-6 for cell in zeroed.values())
    assert list(table["curves"]) == list(script.CURVES) and len(script.CURVES) == 6
    assert script.CURVES[2:] == (
        "succ prompts plus s x (pred - succ) along the fix direction",
        "succ prompts plus s x (pred - succ) less the fix direction",
        "pred prompts plus s x (succ - pred) along the fix direction",
        "pred prompts plus s x (succ - pred) less the fix direction",
    )
    for curve in table["curves"].values():
        assert list(curve) == ["0.5", "1.0", "1.5", "2.0", "3.0", "4.0"]
        assert all(cell["unchanged"] == 1.0 and cell["vector_size"] < 1e-6 for cell in curve.values())
    page = out.with_suffix(".html").read_text(encoding="utf-8")
    assert page.count("<h2>") == 6 and all(f"<h2>{curve}</h2>" in page for curve in script.CURVES)
    near, far = rows["pred into succ, within 3 of the changed letter"], rows["pred into succ, further than 3"]
    assert near["positions_per_pair"] + far["positions_per_pair"] == 16.25
    assert "succ into succ, other example" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pairs", "1"], "--pairs must be at least 2"),
        ([], "error:"),
        (["--out", "controls.html"], "--out must be a .json file"),
        (["--out", "missing/controls.json"], "cannot write missing/controls.json"),
        (["--out", "page.json"], "a folder there"),  # page.html is a folder
    ],
)
def test_bad_input_exits_2_and_writes_nothing(script, tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "page.html").mkdir()
    assert script.main(["--model", str(tmp_path / "missing"), "--out", "controls.json", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"] and not list((tmp_path / "page.html").iterdir())


def test_outcomes_put_each_answer_in_the_first_kind_that_fits(script):
    """Own, then the donor's, then the query copied, else other: the four shares sum to 1 even where kinds overlap."""
    target = Task.parse("abcdefghijklmnopqrstuvwxyz | efg > efh | rst > rsu")
    donor = Task.parse("abcdefghijklmnopqrstuvwxyz | efg > dfg | rst > qst")
    same = target.with_answer("rst")  # a target whose own answer is its query
    answers = ["rsu", "qst", "rst", "xyz", "rst"]
    shares = script.outcomes(answers, ["rsu", "rsu", "rsu", "xyz", "rst"], [donor] * 5, [target] * 4 + [same])
    assert shares == {"pairs": 5, "own": 0.4, "donor": 0.2, "query_copied": 0.2, "other": 0.2, "unchanged": 0.6}


ARROW_AT = 30
"""Position of ``>`` in a 3-letter prompt; the planted decoder answers the first example-output letter read there."""


def test_a_splice_row_counts_its_answers_and_measures_the_spliced_states(script):
    """Splicing ``>`` into the planted model: every answer becomes the donor's one letter (other, none unchanged),
    and the state change is `memory_change` over those positions."""
    model = planted_model()
    pairs = minimal_pairs("pred", "succ", 4, lengths=(3,), at_most=True)
    donors, targets = [p.source for p in pairs], [p.target for p in pairs]
    row = script.splice_row(model, donors, targets, lambda donor, target: (ARROW_AT,))
    assert (row["other"], row["unchanged"], row["positions_per_pair"]) == (1.0, 0.0, 1.0)
    mask = torch.zeros(4, 39, dtype=torch.bool)
    mask[:, ARROW_AT] = True
    expected = memory_change(encoder_memory(model, donors), encoder_memory(model, targets), mask)
    assert expected["state change"] > 0.01
    assert row["state change"] == expected["state change"]
    assert row["change alignment"] == expected["change alignment"]


def test_controls_give_each_row_its_donors_and_targets_and_zero_the_named_head(script, monkeypatch):
    """On a random model (its heads differ): pred into succ, succ into pred and the same-rule control splice the right
    prompts, the curves add the right way round, and the zeroed head is the one the attention names."""
    config = ModelConfig(d_model=16, n_heads=4, n_encoder_layers=2, n_decoder_layers=1, d_mlp=8, dropout=0.0)
    torch.manual_seed(0)
    model = HookedEncoderDecoder(config)
    pairs = minimal_pairs("pred", "succ", 4, lengths=(3,), at_most=True)
    preds, succs = [p.source for p in pairs], [p.target for p in pairs]
    spliced, added = [], []
    real_splice, real_added = script.splice_decode, script.added_direction_row

    def spy_splice(model, targets, donors, positions):
        spliced.append((list(targets), list(donors)))
        return real_splice(model, targets, donors, positions)

    def spy_added(model, donors, targets, random_seed=None, scale=1.0):
        added.append((list(donors), list(targets), random_seed, scale))
        return real_added(model, donors, targets, random_seed=random_seed, scale=scale)

    monkeypatch.setattr(script, "splice_decode", spy_splice)
    monkeypatch.setattr(script, "added_direction_row", spy_added)
    table = script.controls(model, 4, 0)
    assert spliced[0] == (succs, preds) and spliced[1] == (preds, succs)
    assert spliced[2][0] == succs and [d.answer for d in spliced[2][1]] == [t.answer for t in succs]
    assert added[0][:3] == (preds, succs, None) and added[1][:3] == (preds, succs, 0)
    curve_calls = added[2:]
    assert [(d, t, s) for d, t, _, s in curve_calls] == [
        *((preds, succs, scale) for scale in script.SCALES),
        *((succs, preds, scale) for scale in script.SCALES),
    ]
    attention = table["attention on the changed letter"]["succ"]
    unused = [unused_positions(p, s) for p, s in zip(preds, succs, strict=True)]
    zeroed = table["pred vs succ, last-layer heads zeroed at the unused letters"]
    head = zeroed[f"head {attention['head']}"]
    assert attention["head"] == f"2.{attention['index'] + 1}"
    expected = by_layer(model, preds, succs, unused, [attention["index"]])["encoder.ln_final.hook_out"]
    assert {key: head[key] for key in expected} == expected
    others = [h for h in range(4) if h != attention["index"]]
    assert zeroed["every other head"] == by_layer(model, preds, succs, unused, others)["encoder.ln_final.hook_out"]
    pred_attention = table["attention on the changed letter"]["pred"]["per_head"][attention["index"]]
    assert head["its attention on the changed letter in pred prompts"] == pred_attention
    assert by_layer(model, preds, succs, unused, [others[0]])["encoder.ln_final.hook_out"] != expected


def test_a_case_without_any_position_is_reported_not_an_error(script):
    model = planted_model()
    pairs = minimal_pairs("pred", "succ", 2, lengths=(3,), at_most=True)
    preds, succs = [p.source for p in pairs], [p.target for p in pairs]
    row = script.splice_row(model, preds, succs, lambda donor, target: ())
    assert row == {"pairs": 2, "positions_per_pair": 0.0, "note": "no pair has a position in this case"}


def test_rescaled_remainder_keeps_each_states_change_length(script):
    model = planted_model()
    pairs = minimal_pairs("pred", "succ", 4, lengths=(3,), at_most=True)
    preds, succs = [p.source for p in pairs], [p.target for p in pairs]
    row = script.splice_without_direction_row(model, preds, succs, rescaled=True)
    assert row["unchanged"] == 1.0 and row["positions_per_pair"] == 16.25


def test_the_splice_less_its_direction_is_orthogonal_to_it_and_rescaled_as_long_as_the_change(script, monkeypatch):
    """On a random model (its unused letters do change): what is spliced has no component along the pair's direction;
    plain it is shorter than the change, rescaled each state's splice is exactly as long as its change."""
    config = ModelConfig(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_mlp=8, dropout=0.0)
    torch.manual_seed(0)
    model = HookedEncoderDecoder(config)
    pairs = minimal_pairs("pred", "succ", 4, lengths=(3,), at_most=True)
    preds, succs = [p.source for p in pairs], [p.target for p in pairs]
    seen = []
    monkeypatch.setattr(
        script, "decode_with_changes", lambda model, targets, changes: seen.append(changes) or ["x"] * 4
    )
    plain = script.splice_without_direction_row(model, preds, succs)
    script.splice_without_direction_row(model, preds, succs, rescaled=True)
    donor_memory, target_memory = encoder_memory(model, preds), encoder_memory(model, succs)
    mask = torch.zeros(4, 39, dtype=torch.bool)
    for i, (p, s) in enumerate(zip(preds, succs, strict=True)):
        mask[i, list(unused_positions(p, s))] = True
    change = (donor_memory - target_memory) * mask[..., None]
    direction = direction_vectors(donor_memory, target_memory, mask)
    for spliced in seen:
        assert torch.allclose((spliced * direction[:, None, :]).sum(-1), torch.zeros(4, 39), atol=1e-6)
    assert 0 < plain["change_kept"] < 1
    assert torch.allclose(seen[1].norm(dim=-1)[mask], change.norm(dim=-1)[mask], rtol=1e-5)
    assert not bool((seen[1][~mask] != 0).any())  # nothing outside the unused letters


def test_a_scaled_splice_moves_each_state_that_share_of_the_way(script, monkeypatch):
    """The changes handed to the decoder are the factor times donor minus target at the unused letters, nowhere else."""
    model = planted_model()
    pairs = minimal_pairs("pred", "succ", 2, lengths=(3,), at_most=True)
    preds, succs = [p.source for p in pairs], [p.target for p in pairs]
    seen = []
    monkeypatch.setattr(
        script, "decode_with_changes", lambda model, targets, changes: seen.append(changes) or ["x", "y"]
    )
    row = script.scaled_splice_row(model, preds, succs, 0.5)
    change = encoder_memory(model, preds) - encoder_memory(model, succs)
    mask = torch.zeros(2, 39, dtype=torch.bool)
    for i, (p, s) in enumerate(zip(preds, succs, strict=True)):
        mask[i, list(unused_positions(p, s))] = True
    assert torch.allclose(seen[0], 0.5 * change * mask[..., None])
    assert (row["other"], row["factor"]) == (1.0, 0.5)


def _random_model() -> HookedEncoderDecoder:
    """A tiny model with random weights: its unused letters do change with the example."""
    config = ModelConfig(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_mlp=8, dropout=0.0)
    torch.manual_seed(0)
    return HookedEncoderDecoder(config)


def _unused_mask(donors: list[Task], targets: list[Task], width: int) -> torch.Tensor:
    mask = torch.zeros(len(targets), width, dtype=torch.bool)
    for i, (donor, target) in enumerate(zip(donors, targets, strict=True)):
        mask[i, list(unused_positions(donor, target))] = True
    return mask


def test_changed_place_compares_the_fix_prompts_with_pred_and_succ(script, monkeypatch):
    """The fix prompts' own change, solved shares from the model's answers to each set, and `compare_mean_changes`
    of their first-minus-last difference against pred - succ; the direction returned is that mean difference."""
    model = _random_model()
    pairs = minimal_pairs("pred", "succ", 4, lengths=(3,), at_most=True)
    preds, succs = [p.source for p in pairs], [p.target for p in pairs]
    firsts, lasts = (list(tasks) for tasks in zip(*changed_place_pairs(5, 0)))
    right = {firsts[0]: firsts[0].answer, lasts[1]: lasts[1].answer, lasts[2]: lasts[2].answer}
    monkeypatch.setattr(script, "_clean", lambda model, tasks: tuple(right.get(task, "x") for task in tasks))
    fix, direction = script.changed_place(model, preds, succs, 5, 0)
    first_memory, last_memory = encoder_memory(model, firsts), encoder_memory(model, lasts)
    fix_mask = _unused_mask(firsts, lasts, first_memory.shape[1])
    pred_memory, succ_memory = encoder_memory(model, preds), encoder_memory(model, succs)
    mask = _unused_mask(preds, succs, 39)
    assert (fix["pairs"], fix["solved_first"], fix["solved_last"]) == (5, 0.2, 0.4)
    assert fix["positions_per_pair"] == float(fix_mask.sum(1).float().mean()) == 18.0
    assert {key: fix[key] for key in ("state change", "change alignment")} == memory_change(
        first_memory, last_memory, fix_mask
    )
    compared = compare_mean_changes((first_memory, last_memory, fix_mask), (pred_memory, succ_memory, mask))
    assert {key: fix[f"pred - succ {key}"] for key in compared} == compared
    assert fix["state change"] > 0.01 and 0 < fix["pred - succ share along"] < 1
    assert torch.equal(direction, mean_change(first_memory, last_memory, fix_mask))


@pytest.mark.parametrize("part", ["along", "less"])
def test_added_part_row_adds_one_part_of_each_pairs_vector_at_its_own_length(script, monkeypatch, part):
    """The part along the direction is the vector's projection on it, the rest is orthogonal to it, and the two add up
    to the pair's leave-one-out vector times the scale; they are added to the targets at their unused letters."""
    model = _random_model()
    pairs = minimal_pairs("pred", "succ", 4, lengths=(3,), at_most=True)
    preds, succs = [p.source for p in pairs], [p.target for p in pairs]
    seen = []
    monkeypatch.setattr(
        script,
        "decode_with_added",
        lambda model, targets, mask, vectors: seen.append((list(targets), mask, vectors)) or [p.answer for p in preds],
    )
    direction = torch.randn(16, generator=torch.Generator().manual_seed(1))
    row = script.added_part_row(model, preds, succs, direction, part, scale=2.0)
    other = script.added_part_row(model, preds, succs, direction, "less" if part == "along" else "along", scale=2.0)
    (targets, mask, vectors), (_, _, other_vectors) = seen
    expected_mask = _unused_mask(preds, succs, 39)
    whole = 2.0 * direction_vectors(encoder_memory(model, preds), encoder_memory(model, succs), expected_mask)
    assert targets == succs and torch.equal(mask, expected_mask)
    assert torch.allclose(vectors + other_vectors, whole, atol=1e-6)
    unit = direction / direction.norm()
    along = vectors if part == "along" else other_vectors
    assert torch.allclose(along, (whole @ unit)[:, None] * unit, atol=1e-6)
    assert row["donor"] == other["donor"] == 1.0  # the donors are the pred prompts
    with pytest.raises(ValueError, match="unknown part 'all'; choose along or less"):
        script.added_part_row(model, preds, succs, direction, "all")
