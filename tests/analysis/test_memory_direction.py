"""memory_direction: the direction spliced states share, found per pair from the others, added to chosen memory
states, taken away; where it forms and what the letters attend to (the planted model reads its answer at ``>``)."""

from __future__ import annotations

import jaxtyping
import pytest
import torch

from lsa_interp.analysis.memory_direction import (
    by_layer,
    changed_letter_attention,
    changed_letter_position,
    compare_mean_changes,
    decode_with_added,
    decode_with_changes,
    direction_vectors,
    mean_change,
    mean_of_others,
    random_directions,
    share_along,
    split_along,
    without_component,
)
from lsa_interp.analysis.planted import planted_answer, planted_model
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.analysis.splice import encoder_memory, memory_change, unused_positions
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.model import HookedEncoderDecoder, ModelConfig

ARROW_AT = 30
"""Position of ``>`` in a 3-letter prompt; the planted decoder answers the first example-output letter read there."""


def _prompts(n: int) -> tuple[list[Task], list[Task], list[tuple[int, ...]]]:
    """The first ``n`` pred / succ minimal pairs (3-letter windows) and each pair's unused letters."""
    pairs = minimal_pairs("pred", "succ", n, lengths=(3,), at_most=True)
    preds, succs = [p.source for p in pairs], [p.target for p in pairs]
    return preds, succs, [unused_positions(p, s) for p, s in zip(preds, succs, strict=True)]


def test_mean_of_others_leaves_each_pair_out():
    sums = torch.tensor([[2.0, 0.0], [0.0, 4.0], [6.0, 6.0]])  # pair sums over 1, 2 and 3 states
    counts = torch.tensor([1, 2, 3])
    expected = torch.tensor([[6 / 5, 10 / 5], [8 / 4, 6 / 4], [2 / 3, 4 / 3]])
    assert torch.allclose(mean_of_others(sums, counts), expected)
    lonely = mean_of_others(torch.tensor([[1.0, 1.0], [0.0, 0.0]]), torch.tensor([3, 0]))
    assert torch.allclose(lonely, torch.tensor([[0.0, 0.0], [1 / 3, 1 / 3]]))  # the first pair's others hold none
    single = mean_of_others(torch.tensor([[2.0, 4.0], [0.0, 0.0]]), torch.tensor([1, 0]))
    assert torch.allclose(single, torch.tensor([[0.0, 0.0], [2.0, 4.0]]))  # one other state: its own vector


def test_random_directions_keep_each_length_and_are_seeded():
    vectors = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0], [1.0, 1.0, 1.0]])
    drawn = random_directions(vectors, 0)
    assert torch.allclose(drawn.norm(dim=1), vectors.norm(dim=1))
    assert torch.equal(drawn, random_directions(vectors, 0))
    assert not torch.allclose(drawn, random_directions(vectors, 1))
    cosines = torch.nn.functional.cosine_similarity(drawn, vectors, dim=1)
    assert (cosines.abs() < 0.999).all()  # not the vectors' own directions


def test_random_directions_keep_the_vectors_dtype():
    """The noise is drawn in the vectors' dtype: float64 lengths hold to float64 precision, bfloat16 stays bfloat16."""
    vectors = torch.tensor([[3.0, 4.0, 0.0], [0.1, 0.2, 0.3]], dtype=torch.float64)
    drawn = random_directions(vectors, 0)
    assert drawn.dtype == torch.float64
    assert torch.allclose(drawn.norm(dim=1), vectors.norm(dim=1), rtol=1e-12, atol=0)
    assert random_directions(vectors.to(torch.bfloat16), 0).dtype == torch.bfloat16


def test_an_added_vector_reaches_the_decoder_only_where_the_mask_is_set():
    """The planted decoder reads ``>``: adding the donor-minus-target state there gives the donor's answer, scaled
    by 0 or added elsewhere it changes nothing; the model's training mode is restored."""
    model = planted_model()
    pairs = minimal_pairs("pred", "succ", 4, lengths=(3,), at_most=True)
    donors, targets = [p.source for p in pairs], [p.target for p in pairs]
    change = (encoder_memory(model, donors) - encoder_memory(model, targets))[:, ARROW_AT]
    at_arrow = torch.zeros(4, 39, dtype=torch.bool)
    at_arrow[:, ARROW_AT] = True
    elsewhere = torch.zeros(4, 39, dtype=torch.bool)
    elsewhere[:, 10:26] = True
    model.train()
    assert decode_with_added(model, targets, at_arrow, change) == [planted_answer(d) for d in donors]
    assert model.training
    model.eval()
    own = [planted_answer(t) for t in targets]
    assert own != [planted_answer(d) for d in donors]
    assert decode_with_added(model, targets, at_arrow, 0 * change) == own
    assert decode_with_added(model, targets, elsewhere, change) == own


def test_direction_vectors_are_the_scaled_mean_of_the_other_pairs_changes():
    """Pair i gets scale x the mean change over the other pairs' masked states; random ones keep those lengths."""
    target = torch.zeros(3, 5, 2)
    donor = torch.zeros(3, 6, 2)  # a wider donor memory: only the mask's first 4 positions count
    donor[0, 1] = torch.tensor([2.0, 0.0])
    donor[1, 2] = torch.tensor([0.0, 4.0])
    donor[2, 3] = torch.tensor([6.0, 6.0])
    donor[:, 4] = 100.0  # outside the mask
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[0, 1] = mask[1, 2] = mask[2, 3] = True
    mask[2, 0] = True  # an unchanged state of pair 2 counts in its mean
    expected = torch.tensor([[6 / 3, 10 / 3], [8 / 3, 6 / 3], [1.0, 2.0]])
    assert torch.allclose(direction_vectors(donor, target, mask), expected)
    assert torch.allclose(direction_vectors(donor, target, mask, scale=2.0), 2 * expected)
    drawn = direction_vectors(donor, target, mask, scale=2.0, random_seed=0)
    assert torch.allclose(drawn.norm(dim=1), 2 * expected.norm(dim=1)) and not torch.allclose(drawn, 2 * expected)


def test_direction_vectors_take_donor_minus_target():
    """The change is the donor's state less the target's: equal offsets in both memories cancel."""
    target = torch.full((2, 3, 2), 5.0)
    donor = target.clone()
    donor[0, 1] += torch.tensor([3.0, -6.0])
    mask = torch.ones(2, 3, dtype=torch.bool)
    expected = torch.tensor([[0.0, 0.0], [1.0, -2.0]])  # pair 1: pair 0's change over its 3 states
    assert torch.allclose(direction_vectors(donor, target, mask), expected)


def test_without_component_removes_only_the_pairs_direction():
    changes = torch.tensor([[[3.0, 4.0], [1.0, 0.0]], [[3.0, 4.0], [0.0, 2.0]]])
    directions = torch.tensor([[10.0, 0.0], [0.0, 0.0]])  # pair 0 along x (any length), pair 1 none
    rest = without_component(changes, directions)
    assert torch.allclose(rest, torch.tensor([[[0.0, 4.0], [0.0, 0.0]], [[3.0, 4.0], [0.0, 2.0]]]))


def test_without_component_normalises_each_pairs_direction_of_any_length():
    """Directions shorter than 1, longer, and oblique, one per pair (3 pairs of 2-d states): each pair's changes lose
    their whole component along its own direction, whatever its length."""
    changes = torch.tensor([[3.0, 4.0], [1.0, 1.0]]).expand(3, 2, 2)
    directions = torch.tensor([[0.5, 0.0], [0.0, 3.0], [0.6, 0.8]])
    rest = without_component(changes, directions)
    expected = torch.tensor(
        [[[0.0, 4.0], [0.0, 1.0]], [[3.0, 0.0], [1.0, 0.0]], [[0.0, 0.0], [1 - 1.4 * 0.6, 1 - 1.4 * 0.8]]]
    )
    assert torch.allclose(rest, expected, atol=1e-6)


def test_changes_apply_per_state():
    """A change at ``>`` of pair 0 alone turns pair 0's answer into its donor's; pair 1 keeps its own."""
    model = planted_model()
    pairs = minimal_pairs("pred", "succ", 2, lengths=(3,), at_most=True)
    donors, targets = [p.source for p in pairs], [p.target for p in pairs]
    changes = torch.zeros(2, 39, 128)
    changes[0, ARROW_AT] = (encoder_memory(model, donors[:1]) - encoder_memory(model, targets[:1]))[0, ARROW_AT]
    assert decode_with_changes(model, targets, changes) == [planted_answer(donors[0]), planted_answer(targets[1])]


def test_changes_narrower_than_the_memory_cover_its_first_positions():
    """Changes up to ``>`` only (31 of 39 positions) of prompts without answers: pair 0 gives its donor's answer."""
    model = planted_model()
    pairs = minimal_pairs("pred", "succ", 2, lengths=(3,), at_most=True)
    donors, targets = [p.source for p in pairs], [p.target.with_answer(None) for p in pairs]
    changes = torch.zeros(2, ARROW_AT + 1, 128)
    changes[0, ARROW_AT] = (encoder_memory(model, donors[:1]) - encoder_memory(model, targets[:1]))[0, ARROW_AT]
    assert decode_with_changes(model, targets, changes) == [planted_answer(donors[0]), planted_answer(targets[1])]


def test_changed_letter_position_counts_alphabet_separator_input_and_arrow():
    assert changed_letter_position(Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd")) == 31
    assert changed_letter_position(Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd")) == 33
    assert changed_letter_position(Task.parse("abcdefghijklmnopqrstuvwxyz | efgh > efgi | bcde")) == 35
    with pytest.raises(ValueError, match="one-example tasks, got 2"):
        changed_letter_position(Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghj | efg > efh | bcd"))
    with pytest.raises(ValueError, match="changes no letter in place"):
        changed_letter_position(Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghi | bcd"))


def _tiny(layers: int = 2) -> HookedEncoderDecoder:
    config = ModelConfig(d_model=16, n_heads=2, n_encoder_layers=layers, n_decoder_layers=1, d_mlp=8, dropout=0.0)
    torch.manual_seed(0)
    return HookedEncoderDecoder(config)


def test_changed_letter_attention_reads_each_tasks_changed_key_from_its_given_queries(monkeypatch):
    """A stand-in pattern: head 2 of the last layer puts all of each unused letter's attention on that task's changed
    letter, head 1 spreads it evenly; the first layer's pattern is never read."""
    model = _tiny()
    preds, succs, positions = _prompts(3)
    pattern = torch.full((3, 2, 39, 39), 1 / 39)
    pattern[:, 1] = 0.0
    for i, task in enumerate(preds):
        pattern[i, 1, positions[i], changed_letter_position(task)] = 1.0  # other queries look elsewhere
    asked = []

    def fake_cache(batch, names_filter):
        asked.append(names_filter)
        return None, {"encoder.1.attn.hook_pattern": pattern}

    monkeypatch.setattr(model, "run_with_cache", fake_cache)
    model.train()
    result = changed_letter_attention(model, preds, positions)
    assert asked == [["encoder.1.attn.hook_pattern"]] and model.training
    assert (result["head"], result["index"]) == ("2.2", 1) and result["share"] == pytest.approx(1.0)
    assert result["per_head"] == pytest.approx([1 / 39, 1.0])
    assert result["head_mean"] == pytest.approx((1 + 1 / 39) / 2)


def test_by_layer_compares_every_encoder_layer_and_the_memory():
    """One entry per encoder layer and one for the memory, which is `memory_change` of `encoder_memory`."""
    model = _tiny(layers=2)
    preds, succs, positions = _prompts(4)
    layers = by_layer(model, preds, succs, positions)
    assert list(layers) == ["encoder.0.hook_resid_post", "encoder.1.hook_resid_post", "encoder.ln_final.hook_out"]
    mask = torch.zeros(4, 39, dtype=torch.bool)
    for i, row in enumerate(positions):
        mask[i, list(row)] = True
    expected = memory_change(encoder_memory(model, preds), encoder_memory(model, succs), mask)
    assert layers["encoder.ln_final.hook_out"] == pytest.approx(expected)
    assert all(cell["state change"] > 0 for cell in layers.values())  # a random model's letters see the example


def test_changed_letter_attention_of_a_real_pattern_for_prompts_without_answers():
    """The tiny model's own last-layer pattern, prompts without answers; a task with one query position weighs its
    one attention whole."""
    model = _tiny()
    pairs = minimal_pairs("pred", "succ", 3, lengths=(3,), at_most=True)
    preds = [p.source.with_answer(None) for p in pairs]
    positions = [unused_positions(p, s) for p, s in zip(preds, [p.target for p in pairs], strict=True)]
    positions[0] = positions[0][:1]
    name = "encoder.1.attn.hook_pattern"
    pattern = model.run_with_cache(encode_tasks(preds, with_answers=False), names_filter=[name])[1][name]
    per_head = torch.stack(
        [
            pattern[i, :, list(rows), changed_letter_position(task)].mean(-1)
            for i, (task, rows) in enumerate(zip(preds, positions, strict=True))
        ]
    ).mean(0)
    result = changed_letter_attention(model, preds, positions)
    head = int(per_head.argmax())
    assert (result["index"], result["head"]) == (head, f"2.{head + 1}")
    assert result["per_head"] == pytest.approx([float(share) for share in per_head])
    assert (result["share"], result["head_mean"]) == pytest.approx((float(per_head[head]), float(per_head.mean())))
    with_empty = changed_letter_attention(model, [*preds, preds[1]], [*positions, ()])  # a task without positions
    assert with_empty["per_head"] == pytest.approx(result["per_head"])  # does not count


def test_by_layer_of_prompts_without_answers():
    """Prompts need no answers: every layer's comparison is that of the same tasks with answers."""
    model = _tiny(layers=2)
    preds, succs, positions = _prompts(4)
    bare = by_layer(model, [t.with_answer(None) for t in preds], [t.with_answer(None) for t in succs], positions)
    assert bare == by_layer(model, preds, succs, positions)


def test_by_layer_can_zero_last_layer_heads_at_the_positions():
    """Zeroing the last layer's heads changes the comparison from that layer on, never before; no heads, no change."""
    model = _tiny(layers=2)
    preds, succs, positions = _prompts(4)
    plain = by_layer(model, preds, succs, positions)
    assert by_layer(model, preds, succs, positions, []) == plain
    one, both = (by_layer(model, preds, succs, positions, heads) for heads in ([1], [0, 1]))
    for zeroed in (one, both):
        assert zeroed["encoder.0.hook_resid_post"] == plain["encoder.0.hook_resid_post"]
        assert zeroed["encoder.1.hook_resid_post"] != plain["encoder.1.hook_resid_post"]
    assert one["encoder.1.hook_resid_post"] != both["encoder.1.hook_resid_post"]


def test_by_layer_sets_the_zeroed_heads_output_to_zero():
    """by_layer with ``zeroed_heads=[1]`` compares every layer as the model does with head 2 of its last layer set
    to exactly 0 by hand at each pair's unused letters (head 1 kept)."""
    model = _tiny(layers=2)
    preds, succs, positions = _prompts(4)
    mask = torch.zeros(4, 39, dtype=torch.bool)
    for i, row in enumerate(positions):
        mask[i, list(row)] = True

    def zero_head_2(z, hook):
        z = z.clone()
        z[:, :, 1][mask] = 0.0
        return z

    names = ["encoder.0.hook_resid_post", "encoder.1.hook_resid_post", "encoder.ln_final.hook_out"]
    model.eval()
    with torch.no_grad(), model.hooks(fwd_hooks=[("encoder.1.attn.hook_z", zero_head_2)]):
        pred_cache, succ_cache = (
            model.run_with_cache(encode_tasks(tasks, with_answers=False), names_filter=names)[1]
            for tasks in (preds, succs)
        )
    zeroed = by_layer(model, preds, succs, positions, [1])
    assert list(zeroed) == names
    for name in names:
        assert zeroed[name] == pytest.approx(memory_change(pred_cache[name], succ_cache[name], mask))


@pytest.mark.parametrize("heads", [[-1], [2], [0, 5]])
def test_by_layer_refuses_heads_outside_the_layer(heads):
    model = _tiny()  # 2 heads
    preds, succs, positions = _prompts(2)
    with pytest.raises(ValueError, match=r"zeroed heads must lie in 0..1 \(0-based\), got"):
        by_layer(model, preds, succs, positions, heads)


def test_direction_vectors_refuse_a_mask_wider_than_the_memories_or_empty():
    memory = torch.zeros(2, 5, 3)
    with pytest.raises(ValueError, match="the mask is 6 positions wide, the memories 5 and 5"):
        direction_vectors(memory, memory, torch.ones(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="marks no state"):
        direction_vectors(memory, memory, torch.zeros(2, 5, dtype=torch.bool))
    assert direction_vectors(memory, memory, torch.ones(2, 5, dtype=torch.bool), scale=2).shape == (2, 3)  # int scale


def test_mean_change_averages_donor_minus_target_over_every_marked_state():
    """Over all pairs' marked states at once (not per pair): an unchanged marked state counts, unmarked ones do not,
    and a wider donor memory is read at the mask's first positions only."""
    target = torch.full((2, 3, 2), 1.0)
    donor = torch.full((2, 4, 2), 1.0)
    donor[0, 0] += torch.tensor([3.0, 0.0])
    donor[1, 2] += torch.tensor([0.0, 6.0])
    donor[1, 1] += 50.0  # not marked
    donor[:, 3] += 100.0  # past the mask
    mask = torch.tensor([[True, True, False], [False, False, True]])  # pair 0's second state is unchanged
    assert torch.allclose(mean_change(donor, target, mask), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="marks no state"):
        mean_change(donor, target, torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="the mask is 4 positions wide, the memories 4 and 3"):
        mean_change(donor, target, torch.ones(2, 4, dtype=torch.bool))


def test_share_along_is_the_squared_length_share_of_the_marked_changes_along_a_direction():
    target = torch.zeros(1, 3, 2)
    donor = torch.tensor([[[3.0, 4.0], [0.0, 2.0], [9.0, 9.0]]])
    mask = torch.tensor([[True, True, False]])  # changes (3, 4) and (0, 2): 29 in all, 9 of it along x
    assert share_along(donor, target, mask, torch.tensor([5.0, 0.0])) == pytest.approx(9 / 29)
    assert share_along(donor, target, mask, torch.tensor([0.0, -0.1])) == pytest.approx(20 / 29)  # any length, sign
    assert share_along(donor, target, mask, torch.tensor([3.0, 4.0])) == pytest.approx((25 + 1.6**2) / 29)
    assert share_along(donor, target, mask, torch.zeros(2)) == 0.0  # a zero direction holds nothing
    assert share_along(target, target, mask, torch.tensor([1.0, 0.0])) == 0.0  # nothing changed
    with pytest.raises(ValueError, match="marks no state"):
        share_along(donor, target, torch.zeros(1, 3, dtype=torch.bool), torch.tensor([1.0, 0.0]))


def test_split_along_gives_each_vectors_projection_and_the_rest():
    vectors = torch.tensor([[3.0, 4.0], [0.0, -2.0], [1.0, 1.0]])
    along, rest = split_along(vectors, torch.tensor([-0.5, 0.0]))  # any length and sign: the x axis
    assert torch.allclose(along, torch.tensor([[3.0, 0.0], [0.0, 0.0], [1.0, 0.0]]))
    assert torch.allclose(rest, torch.tensor([[0.0, 4.0], [0.0, -2.0], [0.0, 1.0]]))
    oblique_along, oblique_rest = split_along(vectors, torch.tensor([3.0, 4.0]))
    assert torch.allclose(oblique_along[2], torch.tensor([0.84, 1.12])) and torch.allclose(
        oblique_rest[0], torch.zeros(2)
    )
    zero_along, zero_rest = split_along(vectors, torch.zeros(2))
    assert torch.equal(zero_along, torch.zeros(3, 2)) and torch.equal(zero_rest, vectors)


def test_compare_mean_changes_lines_up_one_sets_mean_difference_with_anothers():
    """The reference's mean difference along x (length 2); the other's along (3, 4) (length 5): cosine 0.6, length
    ratio 2.5, and the other's differences' squared length along x as `share_along` gives it."""
    reference = (torch.tensor([[[2.0, 0.0], [9.0, 9.0]]]), torch.zeros(1, 2, 2), torch.tensor([[True, False]]))
    other_donor = torch.tensor([[[6.0, 8.0], [0.0, 0.0]]])
    other = (other_donor, torch.zeros(1, 2, 2), torch.tensor([[True, True]]))  # mean (3, 4) over two states
    compared = compare_mean_changes(reference, other)
    assert compared == pytest.approx({"cosine": 0.6, "length ratio": 2.5, "share along": 36 / 100})
    assert compare_mean_changes(other, reference) == pytest.approx(
        {"cosine": 0.6, "length ratio": 0.4, "share along": 0.36}
    )
    still = (torch.zeros(1, 2, 2), torch.zeros(1, 2, 2), torch.tensor([[True, True]]))
    assert compare_mean_changes(still, other) == {"cosine": 0.0, "length ratio": 0.0, "share along": 0.0}
    with pytest.raises(ValueError, match="marks no state"):
        compare_mean_changes(reference, (other_donor, torch.zeros(1, 2, 2), torch.zeros(1, 2, dtype=torch.bool)))


def test_share_along_of_small_changes_is_their_share_too():
    """Changes whose squared lengths sum to less than 1 keep their share: the guard against a zero sum acts only at
    zero, whatever the scale of the states."""
    target = torch.zeros(1, 2, 2)
    donor = torch.tensor([[[0.03, 0.04], [0.0, 0.02]]])  # squared lengths 0.0029 in all, 0.0009 of it along x
    mask = torch.ones(1, 2, dtype=torch.bool)
    assert share_along(donor, target, mask, torch.tensor([1.0, 0.0])) == pytest.approx(9 / 29)


def test_unequal_pair_counts_are_refused_naming_each(monkeypatch):
    """Each entry point names the counts that differ, before any torch broadcasting error. Run without the test
    session's runtime type checker, which would refuse these calls first, as a user's Python does not."""
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)
    model = _tiny()
    preds, succs, positions = _prompts(3)
    mask, unequal = torch.ones(3, 39, dtype=torch.bool), "^unequal numbers of pairs: "
    with pytest.raises(ValueError, match=unequal + "2 donor memories, 2 target memories, 3 mask rows; give one"):
        direction_vectors(torch.randn(2, 5, 4), torch.randn(2, 5, 4), mask[:, :5])
    with pytest.raises(ValueError, match=unequal + "2 donors, 3 targets; give one of each per pair$"):
        by_layer(model, preds[:2], succs, positions)
    with pytest.raises(ValueError, match=unequal + "3 targets, 2 mask rows, 3 vectors; give one"):
        decode_with_added(model, succs, mask[:2], torch.zeros(3, 16))
    with pytest.raises(ValueError, match=unequal + "3 targets, 2 changes; give one"):
        decode_with_changes(model, succs, torch.zeros(2, 39, 16))
    with pytest.raises(ValueError, match=unequal + "3 changes, 2 directions; give one"):
        without_component(torch.zeros(3, 5, 4), torch.ones(2, 4))
    with pytest.raises(ValueError, match=unequal + "3 sums, 2 counts; give one"):
        mean_of_others(torch.zeros(3, 4), torch.ones(2, dtype=torch.long))
