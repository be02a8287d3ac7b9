"""Attention-pattern patching: ground truth on the planted model, engine agreement, sweep = single runs."""

from __future__ import annotations

import json

import pytest
import torch

from lsa_interp.analysis.patching import (
    HookEngine,
    flip_matrix,
    pair_batch,
    patch_pairs,
    patch_sweep,
    patched_generate,
    patching_analysis,
    resolve_heads,
)
from lsa_interp.analysis.planted import PLANTED_HEAD, planted_answer, planted_model
from lsa_interp.analysis.prompts import MinimalPair, minimal_pairs, rule_tasks
from lsa_interp.analysis.steering import steering_matrix
from lsa_interp.analysis.types import Head, all_heads
from lsa_interp.data.tokenizer import decode_batch
from lsa_interp.data.vocab import ROLE_ID
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, load_model, save_model
from lsa_interp.model.attention import is_hooked

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def planted():
    return planted_model()


@pytest.fixture(scope="module")
def random_model():
    torch.manual_seed(3)
    cfg = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64, dropout=0.0, max_len=64)
    return HookedEncoderDecoder(cfg).eval()


@pytest.fixture(scope="module")
def pairs():
    return minimal_pairs("succ", "pred", 12, alphabets="permuted")


@pytest.fixture(scope="module")
def planted_pairs(pairs):
    """The pairs with the planted model's answers (the first example-output letter) as their answers."""
    relabel = lambda task: task.with_answer(planted_answer(task))
    return [MinimalPair(relabel(p.source), relabel(p.target)) for p in pairs]


def test_planted_model_answers_the_first_example_output_letter(planted, tmp_path):
    tasks = [
        t
        for rule in ("succ", "pred", "sort", "remove_redundant")
        for t in rule_tasks(rule, 4, alphabets="permuted") + rule_tasks(rule, 2)
    ]
    assert planted.solve(tasks) == [planted_answer(t) for t in tasks]
    reloaded = load_model(save_model(planted, tmp_path / "planted"))  # the hand-made position table is kept
    assert reloaded.solve(tasks) == [planted_answer(t) for t in tasks]


def test_only_the_planted_head_flips_and_it_flips_every_pair(planted, planted_pairs):
    results = patch_sweep(planted, planted_pairs)
    expected = torch.zeros(3, 4)
    expected[PLANTED_HEAD.layer, PLANTED_HEAD.head] = 1.0
    torch.testing.assert_close(flip_matrix(planted, results), expected)
    top = results[PLANTED_HEAD]
    assert top.clean_outcomes["target"] == 1.0 and top.patched == [p.source_answer for p in planted_pairs]
    assert (top.logit_diff_clean < 0).all() and (top.logit_diff_patched > 0).all()
    for head, result in results.items():
        if head != PLANTED_HEAD:
            assert result.outcomes == {"source": 0.0, "target": 1.0, "neither": 0.0}
            assert torch.equal(result.logit_diff_patched, result.logit_diff_clean)


@pytest.mark.parametrize("engine", ["hooks", "nnsight"])
def test_a_hand_made_pattern_sets_the_answer(planted, planted_pairs, engine):
    batch = pair_batch(planted_pairs).target
    pattern = HookEngine(planted, 32).patterns(batch, [1])[1][:, PLANTED_HEAD.head].clone()
    chosen = [(7 * row + 3) % 26 for row in range(len(batch))]
    for row, alphabet_position in enumerate(chosen):
        first_out = int((batch.roles[row] == ROLE_ID["example_out"]).nonzero()[0])
        pattern[row, first_out] = 0.0
        pattern[row, first_out, alphabet_position] = 1.0  # read the letter at this alphabet position
    tokens, _ = patched_generate(planted, batch, {PLANTED_HEAD: pattern}, engine)
    expected = [p.target.alphabet[k] for p, k in zip(planted_pairs, chosen)]
    assert decode_batch(tokens) == expected


@pytest.mark.parametrize("engine", ["hooks", "nnsight"])
def test_patching_a_head_with_its_own_pattern_changes_nothing(random_model, pairs, engine):
    batch = pair_batch(pairs).target
    clean_tokens, clean_logits = patched_generate(random_model, batch, {}, engine)
    own = HookEngine(random_model, 32).patterns(batch, [0, 1])
    patterns = {h: own[h.layer][:, h.head] for h in all_heads(random_model.cfg)}
    tokens, logits = patched_generate(random_model, batch, patterns, engine)
    assert torch.equal(tokens, clean_tokens) and torch.equal(logits, clean_logits)
    assert torch.equal(clean_tokens, random_model.generate(batch))


@pytest.mark.parametrize("model_name", ["planted", "random_model"])
def test_both_engines_give_identical_results(model_name, pairs, planted_pairs, request):
    model = request.getfixturevalue(model_name)
    chosen = planted_pairs if model_name == "planted" else pairs
    hooks, nnsight = (patch_sweep(model, chosen, engine=engine, max_new_tokens=8) for engine in ("hooks", "nnsight"))
    assert list(hooks) == list(nnsight) == all_heads(model.cfg)
    for head in hooks:
        assert hooks[head].patched == nnsight[head].patched and hooks[head].clean == nnsight[head].clean
        torch.testing.assert_close(
            hooks[head].logit_diff_patched, nnsight[head].logit_diff_patched, rtol=0, atol=0, equal_nan=True
        )


def test_nnsight_engine_leaves_the_model_on_its_fast_path(random_model, pairs):
    patch_pairs(random_model, pairs[:2], "1.1", engine="nnsight")
    assert not is_hooked(list(random_model.hook_points()))


def test_sweep_equals_single_head_runs(random_model, pairs):
    sweep = patch_sweep(random_model, pairs, max_new_tokens=8)
    source = HookEngine(random_model, 32).patterns(pair_batch(pairs).source, [0, 1])
    target = pair_batch(pairs).target
    for head in all_heads(random_model.cfg):
        single = patch_pairs(random_model, pairs, head, max_new_tokens=8)
        assert single.patched == sweep[head].patched and single.clean == sweep[head].clean
        torch.testing.assert_close(single.logit_diff_patched, sweep[head].logit_diff_patched, rtol=0, atol=0)
        tokens, _ = patched_generate(random_model, target, {head: source[head.layer][:, head.head]}, max_new_tokens=8)
        assert decode_batch(tokens) == sweep[head].patched


def test_heads_joined_by_plus_are_patched_together(random_model, pairs):
    together = patch_pairs(random_model, pairs, "1.1+2.3", max_new_tokens=8)
    assert together.label == "1.1+2.3" and together.summary()["head"] == "1.1+2.3"
    source = HookEngine(random_model, 32).patterns(pair_batch(pairs).source, [0, 1])
    both = {h: source[h.layer][:, h.head] for h in together.heads}
    tokens, _ = patched_generate(random_model, pair_batch(pairs).target, both, max_new_tokens=8)
    assert decode_batch(tokens) == together.patched
    assert resolve_heads(random_model, "1.1+2.3") == [Head("encoder", 0, 0), Head("encoder", 1, 2)]


def test_outcomes_and_logit_differences_of_a_result(random_model, pairs):
    result = patch_pairs(random_model, pairs, Head("encoder", 1, 2))
    outcomes = result.outcomes
    assert sum(outcomes.values()) == pytest.approx(1.0)
    assert outcomes["source"] == sum(a == p.source_answer for a, p in zip(result.patched, pairs)) / len(pairs)
    assert result.logit_diff_clean.shape == (len(pairs),)
    assert result.summary()["logit_diff_pairs"] == len(pairs)  # succ and pred answers start differently


def test_steering_matrix_measures_aligned_rule_pairs_and_records_the_rest(planted):
    matrix = steering_matrix(planted, PLANTED_HEAD, rules=("succ", "pred", "extend_sequence", "sort"), n_pairs=4)
    assert set(matrix.n_pairs) == {("succ", "pred"), ("pred", "succ")}
    assert "do not align" in matrix.missing["extend_sequence", "succ"]
    assert "never give the same example input" in matrix.missing["sort", "pred"]
    assert len(matrix.missing) == 10 and int((~torch.isnan(matrix.flip)).sum()) == 2
    assert matrix.flip[0, 1] == 0.0  # the planted model never gives a rule's answer


def test_patching_analysis_all_heads(planted, tmp_path):
    result = patching_analysis(planted, "planted", head="all", n_pairs=5)
    assert result.summary["pairs"] == 5 and result.summary["engine"] == "hooks"
    assert len(result.data["heads"]) == 12 and len(result.figures) == 2
    assert result.findings[0].holds is None  # the planted model never solves pred, so no verdict
    report = json.loads(result.write(tmp_path)["json"].read_text())
    assert len(report["data"]["flip_rate"]) == 3 and len(report["data"]["pairs"]) == 5


def test_auto_resolves_to_the_detected_matching_head(planted):
    assert resolve_heads(planted, "auto") == [PLANTED_HEAD]
    assert resolve_heads(planted, "2.3") == [PLANTED_HEAD] and len(resolve_heads(planted, "all")) == 12


@pytest.mark.parametrize(
    ("head", "message"),
    [
        ("3.9", "no head '3.9'"),
        ("x", "bad head 'x'"),
        (Head("decoder", 0, 0, "cross_attn"), "not an encoder self-attention head"),
        (Head("encoder", 5, 0), "no head 6.1"),
        ([], "non-empty list"),
    ],
)
def test_bad_heads_raise(planted, pairs, head, message):
    with pytest.raises(ValueError, match=message):
        patch_sweep(planted, pairs, head)


def test_bad_inputs_raise(planted, pairs):
    with pytest.raises(ValueError, match="no matching head"):
        patch_pairs(planted_model(matching=False), pairs, "auto")
    with pytest.raises(ValueError, match="do not align token for token"):
        pair_batch(minimal_pairs("extend_sequence", "succ", 2))
    with pytest.raises(ValueError, match="at least one minimal pair"):
        pair_batch([])
    same = MinimalPair(pairs[0].source, pairs[0].target.with_answer(pairs[0].source_answer))
    with pytest.raises(ValueError, match="answers are both"):
        pair_batch([same])
    with pytest.raises(ValueError, match="unknown engine 'foo'"):
        patch_pairs(planted, pairs, PLANTED_HEAD, engine="foo")
    with pytest.raises(ValueError, match="expected"):
        patched_generate(planted, pair_batch(pairs).target, {PLANTED_HEAD: torch.zeros(1, 3, 3)})
    with pytest.raises(ValueError, match="use patch_sweep for every head"):
        patch_pairs(planted, pairs, "all")
    with pytest.raises(ValueError, match="patches the heads it is given together"):
        steering_matrix(planted, "all", rules=("succ", "pred"), n_pairs=2)
    with pytest.raises(ValueError, match="unknown transformation 'foo'"):
        patching_analysis(planted, "planted", source="foo")
