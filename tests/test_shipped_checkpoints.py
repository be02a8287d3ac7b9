"""The shipped checkpoints load by name and re-produce their answer checks and cards on a sample (CPU).

Each check is skipped while its checkpoint is not in ``checkpoints/`` (the skip reason names it); every
replicate under ``checkpoints/replicates/`` is checked against its own card the same way: the right answers on
the sample of val rows recorded in ``check.json`` are counted again (`lsa_interp.evaluation.answer_check`).
"""

from __future__ import annotations

import json
import math

import pytest

from lsa_interp.analysis.matching import control_head, matching_scores
from lsa_interp.analysis.patching import patch_pairs
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.evaluation.answer_check import check_problems, count_answers, read_answer_check
from lsa_interp.evaluation.card import CARD_FILE, EVALUATION_FILE
from lsa_interp.evaluation.report import markdown_report
from lsa_interp.evaluation.runs_table import CHECKPOINT_MATCHING_FILE, matching_record
from lsa_interp.evaluation.stored import read_evaluation
from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, available_models, load_model

DATASETS = {"copy-200": "copy200", "copy-20": "copy20", "nocopy-20": "nocopy20"}
"""Preset -> the session fixture with its dataset (seed 0)."""

REPLICATES = sorted(path.parent for path in (CHECKPOINTS_DIR / "replicates").glob("*/config.json"))


def _needs(name: str):
    return pytest.mark.skipif(
        name not in available_models(), reason=f"checkpoint {name} missing from {CHECKPOINTS_DIR}"
    )


@pytest.mark.parametrize(("name", "dataset"), list(DATASETS.items()))
def test_checkpoint_reproduces_its_card_on_a_val_subset(name, dataset, request):
    if name not in available_models():
        pytest.skip(f"checkpoint {name} missing from {CHECKPOINTS_DIR}")
    model = load_model(name)
    assert model.metadata["preset"] == name
    _reproduces_its_card(CHECKPOINTS_DIR / name, model, request.getfixturevalue(dataset))


@pytest.mark.parametrize("path", REPLICATES, ids=[path.name for path in REPLICATES])
def test_a_replicate_reproduces_its_card_on_a_val_subset(path, request):
    model = load_model(path)
    _reproduces_its_card(path, model, request.getfixturevalue(DATASETS[model.metadata["preset"]]))


def _reproduces_its_card(path, model, dataset) -> None:
    """The evaluation is this checkpoint's (its name), of the full splits of its own dataset; the card shows exactly
    that evaluation; and the answers on the recorded sample are counted again (a card moved to other weights of the
    same preset would still pass that count alone: copy-20's six runs all score 60-64% on val)."""
    card = json.loads((path / EVALUATION_FILE).read_text())
    assert card["model"] == str(path.relative_to(CHECKPOINTS_DIR)), f"{path}'s evaluation is of {card['model']}"
    assert card["limit"] is None, f"{path} was shipped with --limit {card['limit']}: ship it again without --limit"
    assert (card["preset"], card["seed"]) == (model.metadata["preset"], model.metadata.get("data_seed", 0))
    shown = (path / CARD_FILE).read_text(encoding="utf-8").partition("## Evaluation")
    assert shown[1] + shown[2] == markdown_report(read_evaluation(path / EVALUATION_FILE)).replace(
        "# Evaluation", "## Evaluation", 1
    )
    recorded = read_answer_check(path)
    assert recorded.data_seed == dataset.seed, f"{path.name} was checked on dataset seed {recorded.data_seed}"
    recount = count_answers(model, dataset.splits["val"], dataset.seed, recorded.rows, recorded.seed)
    seen = card["overall"]["seen_alphabets"]
    assert check_problems(recorded, recount, seen["percent"], seen["total"]) == []


SHIPPED = sorted(path.parent for path in CHECKPOINTS_DIR.glob("**/config.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=[str(path.relative_to(CHECKPOINTS_DIR)) for path in SHIPPED])
def test_every_checkpoint_carries_the_matching_head_analysis_of_its_own_weights(path):
    analysis = json.loads((path / CHECKPOINT_MATCHING_FILE).read_text())
    assert analysis["model"] == str(path.relative_to(CHECKPOINTS_DIR))
    assert matching_record(path)["matching_head"] == (analysis["summary"]["matching_heads"] != "none")


@_needs("copy-200")
def test_copy200_is_fully_trained():
    assert load_model("copy-200").metadata["epochs_completed"] == 20


@_needs("copy-200")
def test_copy200_matching_heads_carry_the_rule_and_control_heads_do_not():
    """The paper's causal claim on the shipped model: patching the detected matching heads (together) with
    successor patterns turns predecessor answers into successor answers; the least-matching heads of the same
    layers do not (docs/findings.md: 100% and 0% of 100 pairs)."""
    model = load_model("copy-200")
    scores = matching_scores(model)
    heads = scores.heads()
    controls = [c for c in dict.fromkeys(control_head(scores.score, h) for h in heads) if c not in heads]
    pairs = minimal_pairs("succ", "pred", 40, seed=1, alphabets="standard")
    assert heads and controls
    recorded = json.loads((CHECKPOINTS_DIR / "copy-200" / CHECKPOINT_MATCHING_FILE).read_text())["summary"]
    assert recorded["matching_heads"] == ", ".join(head.label for head in heads)
    assert recorded["best_score"] == pytest.approx(scores.best()[1], abs=1e-5)
    assert patch_pairs(model, pairs, heads).flip_rate >= 0.8
    assert patch_pairs(model, pairs, controls).flip_rate <= 0.2


@_needs("copy-20")
def test_copy20_matching_heads_outputs_carry_the_rule_together_and_not_alone():
    """Activation patching on the shipped copy-20 (docs/matching_and_patching.md): its two matching heads' outputs
    patched together from succ into pred prompts move the logit difference all the way and every answer, each head
    alone only part of it."""
    from lsa_interp.analysis.activation_patching import patch_together, solved_pairs

    model = load_model("copy-20")
    pairs = solved_pairs(model, minimal_pairs("succ", "pred", 30, lengths=(3,)))
    every, heads = slice(None), {"1.3": 2, "1.6": 5}
    cell = {label: ("encoder.0.attn.hook_z", (every, every, index)) for label, index in heads.items()}
    together = patch_together(model, pairs, list(cell.values()))
    assert len(pairs) == 30 and together.normalized > 0.95 and together.source_answers == 1
    for label in heads:
        alone = patch_together(model, pairs, [cell[label]])
        assert 0.3 < alone.normalized < 0.95 and alone.source_answers < 0.6, label


@_needs("copy-20")
def test_copy20_layer_3_needs_the_matching_heads_directly_and_through_layer_2_together():
    """Path patching on the shipped copy-20 (docs/matching_and_patching.md): its matching heads' direct path into
    layer 3 and their chain through layer 2's heads into layer 3 each move about a fifth of the difference, the two
    together nearly all of it and every answer."""
    from lsa_interp.analysis.activation_patching import solved_pairs
    from lsa_interp.analysis.path_patching import PathPatcher, parse_receivers, parse_senders

    model = load_model("copy-20")
    patcher = PathPatcher(model, solved_pairs(model, minimal_pairs("succ", "pred", 30, lengths=(3,))))
    matching = parse_senders("1.6", model.cfg) + parse_senders("1.3", model.cfg)
    layer2, layer3 = parse_receivers("2.*", model.cfg), parse_receivers("3.*", model.cfg)
    direct, chain = patcher.patch_path(matching, layer3), patcher.patch_path(matching, layer3, through=[layer2])
    both = patcher.patch_path(matching, layer3, through=[layer2], direct=True)
    assert 0.1 < direct.normalized < 0.4 and 0.1 < chain.normalized < 0.4
    assert both.normalized > 0.9 and both.source_answers == 1


@_needs("copy-20")
def test_copy20_patched_first_example_letter_moves_the_parting_step_but_only_the_first_answer_letter():
    """The first example-output letter from succ prompts in pred ones (``ghi > ghi``, an identity example) makes the
    shipped copy-20 copy the query: the logit difference where the answers part reads beyond 1, no answer becomes
    succ's, and letter by letter succ's first letter is given and its last not (docs/matching_and_patching.md)."""
    from lsa_interp.analysis.activation_patching import patch_together, solved_pairs

    model = load_model("copy-20")
    pairs = solved_pairs(model, minimal_pairs("succ", "pred", 30, lengths=(3,)))
    first = patch_together(model, pairs, [("encoder.0.hook_resid_pre", (slice(None), 31))])
    assert first.normalized > 0.9 and first.source_answers == 0
    assert first.source_letters[0] == 1 and first.source_letters[2] == 0 and math.isnan(first.source_letters[1])


@_needs("copy-200")
def test_copy200_matching_head_reaches_the_answer_through_layer_3s_heads_together_not_the_memory():
    """Path patching on the shipped copy-200 (docs/matching_and_patching.md): head 1.3's output reaches the answer
    through the queries, keys and values of layer 3's heads together, hardly through any one of them, and not
    through the memory directly."""
    from lsa_interp.analysis.activation_patching import solved_pairs
    from lsa_interp.analysis.path_patching import MEMORY, Receiver, patch_path
    from lsa_interp.model.heads import Head

    model = load_model("copy-200")
    pairs = solved_pairs(model, minimal_pairs("succ", "pred", 30, lengths=(3,)))
    sender, layer3 = [Head("encoder", 0, 2)], [Receiver(Head("encoder", 2, head)) for head in range(8)]
    together = patch_path(model, pairs, sender, layer3)
    assert len(pairs) == 30 and together.normalized > 0.75 and together.source_answers > 0.8
    assert abs(patch_path(model, pairs, sender, [MEMORY]).normalized) < 0.05
    assert max(patch_path(model, pairs, sender, [receiver]).normalized for receiver in layer3) < 0.15


@_needs("copy-200")
def test_copy200_matching_head_writes_the_rule_at_the_changed_letters_and_it_must_cross_layer_3():
    """docs/matching_and_patching.md, path patching: 1.3's output at the two changed example-output letters carries
    nearly all of its effect, layer 3 reads it there through its keys and values, and with layer 3's heads frozen
    nothing is left, with layer 2's nearly all."""
    from lsa_interp.analysis.activation_patching import solved_pairs
    from lsa_interp.analysis.path_patching import parse_receivers, parse_senders, patch_path, sender_effect
    from lsa_interp.model.heads import parse_heads

    model = load_model("copy-200")
    pairs = solved_pairs(model, minimal_pairs("succ", "pred", 30, lengths=(3,)))
    at_changed, matching = parse_senders("1.3@31,33", model.cfg), parse_senders("1.3", model.cfg)
    assert sender_effect(model, pairs, at_changed).normalized > 0.9
    assert patch_path(model, pairs, at_changed, parse_receivers("3.*/kv@31,33", model.cfg)).normalized > 0.75
    assert abs(sender_effect(model, pairs, matching, parse_heads("3.*", model.cfg)).normalized) < 0.05
    assert sender_effect(model, pairs, matching, parse_heads("2.*", model.cfg)).normalized > 0.8
