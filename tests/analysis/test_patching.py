"""Attention-pattern patching: ground truth on the planted model, engine agreement, sweep = single runs."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lsa_interp.analysis import matching, patching
from lsa_interp.analysis.pair_batch import PairBatch
from lsa_interp.analysis.patching import (
    HookEngine,
    PatchResult,
    _logit_diff,
    check_heads,
    flip_matrix,
    make_engine,
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
from lsa_interp.data.tokenizer import decode_batch
from lsa_interp.data.vocab import LETTERS, ROLE_ID, VOCAB_SIZE
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, load_model, save_model
from lsa_interp.model.attention import is_hooked
from lsa_interp.model.heads import Head, all_heads

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
    message = r"^head 1.1 named more than once; name each head once \(e.g. 1.3\+2.3\)$"
    with pytest.raises(ValueError, match=message):
        resolve_heads(random_model, "1.1+2.3+1.1")
    with pytest.raises(ValueError, match=message):
        resolve_heads(random_model, [Head("encoder", 0, 0), Head("encoder", 0, 0)])


def test_outcomes_and_logit_differences_of_a_result(random_model, pairs):
    result = patch_pairs(random_model, pairs, Head("encoder", 1, 2))
    outcomes = result.outcomes
    assert sum(outcomes.values()) == pytest.approx(1.0)
    assert outcomes["source"] == sum(a == p.source_answer for a, p in zip(result.patched, pairs)) / len(pairs)
    assert result.logit_diff_clean.shape == (len(pairs),)
    assert result.summary()["logit_diff_pairs"] == len(pairs)  # succ and pred answers start differently


def test_steering_matrix_draws_its_pairs_from_the_given_alphabets_and_window_lengths(planted, monkeypatch):
    import lsa_interp.analysis.steering as steering

    real, seen = steering.minimal_pairs, []

    def spy(*args, **kwargs):
        pairs = real(*args, **kwargs)
        seen.extend((kwargs["alphabets"], len(pair.target.query)) for pair in pairs)
        return pairs

    monkeypatch.setattr(steering, "minimal_pairs", spy)
    matrix = steering_matrix(
        planted, PLANTED_HEAD, rules=("succ", "pred"), n_pairs=6, alphabets="permuted", lengths=(5,)
    )
    assert matrix.n_pairs == {("succ", "pred"): 6, ("pred", "succ"): 6}
    assert set(seen) == {("permuted", 5)}


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


def _result(flips: int, stays: int, n: int, clean_target: int | None = None, heads=(PLANTED_HEAD,)) -> PatchResult:
    """``n`` pairs: ``flips`` patched answers are the source's, ``stays`` the target's, the rest neither;
    ``clean_target`` clean answers are the target's (default all), the rest the source's."""
    clean_target = n if clean_target is None else clean_target
    source, target = ["s"] * n, ["t"] * n
    patched = ["s"] * flips + ["t"] * stays + ["x"] * (n - flips - stays)
    clean = ["t"] * clean_target + ["s"] * (n - clean_target)
    diff = torch.zeros(n)
    return PatchResult(tuple(heads), source, target, clean, patched, diff, diff)


def test_outcome_fractions_count_source_then_target_then_neither():
    """An answer equal to the source answer is a flip (even if it also equals the target's), then target, else
    neither; fractions are over all pairs."""
    fractions = PatchResult._fractions(["a", "b", "c", "a"], ["a", "x", "x", "a"], ["b", "b", "y", "a"])
    assert fractions == {"source": 0.5, "target": 0.25, "neither": 0.25}
    result = _result(flips=3, stays=4, n=10, clean_target=8)
    assert result.outcomes == {"source": 0.3, "target": 0.4, "neither": pytest.approx(0.3)}
    assert result.clean_outcomes == {"source": pytest.approx(0.2), "target": 0.8, "neither": 0.0}
    assert (result.solved, result.switched, result.flip_rate) == (8, 3, 3 / 8)  # of the pairs solved clean


def test_only_a_solved_pair_that_becomes_the_source_answer_switches():
    """A pair whose clean answer was the source's already did not switch, whatever patching left it at; with no
    pair solved the flip rate is 0."""
    result = _result(flips=10, stays=0, n=10, clean_target=6)  # every patched answer is the source's
    assert (result.solved, result.switched, result.flip_rate) == (6, 6, 1.0) and result.outcomes["source"] == 1.0
    already = PatchResult((PLANTED_HEAD,), ["s"] * 2, ["t"] * 2, ["s", "s"], ["s", "s"], torch.zeros(2), torch.zeros(2))
    assert (already.solved, already.switched, already.flip_rate) == (0, 0, 0.0)


def test_summary_averages_logit_differences_over_pairs_with_different_first_letters():
    """The headline rates, and mean logit differences over the non-NaN pairs only (NaN if there are none)."""
    nan = float("nan")
    result = PatchResult(
        (Head("encoder", 0, 0), Head("encoder", 1, 2)),
        ["s"] * 3,
        ["t"] * 3,
        ["t", "t", "s"],
        ["s", "x", "t"],
        torch.tensor([1.0, nan, 3.0]),
        torch.tensor([2.0, nan, -4.0]),
    )
    summary = result.summary()
    assert summary["logit_diff_clean"] == 2.0 and summary["logit_diff_patched"] == -1.0
    assert summary["logit_diff_pairs"] == 2 and summary["pairs"] == 3 and summary["head"] == "1.1+2.3"
    assert summary["clean_target_accuracy"] == pytest.approx(2 / 3) and summary["clean_source_rate"] == pytest.approx(
        1 / 3
    )
    assert summary["stay_rate"] == summary["neither_rate"] == summary["patched_source_rate"] == pytest.approx(1 / 3)
    assert (summary["flip_rate"], summary["switched"], summary["solved"]) == (0.5, 1, 2)  # pair 0 of the 2 solved
    undefined = PatchResult((PLANTED_HEAD,), ["s"], ["t"], ["t"], ["t"], torch.tensor([nan]), torch.tensor([nan]))
    summary = undefined.summary()
    assert math.isnan(summary["logit_diff_clean"]) and math.isnan(summary["logit_diff_patched"])
    assert summary["logit_diff_pairs"] == 0


def test_logit_difference_is_source_first_letter_minus_target_first_letter():
    """logit(source answer's first letter) - logit(target answer's first letter); NaN when they are the same."""
    logits = torch.zeros(2, VOCAB_SIZE)
    logits[0, LETTERS.index("b")], logits[0, LETTERS.index("a")] = 5.0, 1.5
    logits[1, LETTERS.index("x")] = 2.0
    batch = pair_batch(minimal_pairs("succ", "pred", 2))
    diff = _logit_diff(logits, PairBatch(batch.source, batch.target, ["bcd", "xyz"], ["abc", "xab"]))
    assert diff[0] == 3.5 and math.isnan(diff[1])


def test_flip_matrix_is_nan_for_heads_not_patched(planted):
    """The [layer, head] grid holds each patched head's flip rate and NaN elsewhere."""
    grid = flip_matrix(planted, {Head("encoder", 2, 3): _result(1, 3, 4), Head("encoder", 0, 1): _result(2, 2, 4)})
    assert grid.shape == (3, 4) and grid[2, 3] == 0.25 and grid[0, 1] == 0.5
    assert int(torch.isnan(grid).sum()) == 10


def test_only_heads_inside_the_model_can_be_patched(planted):
    """Layers 0..n_layers-1 and heads 0..n_heads-1 are accepted; one past either end or negative is refused."""
    check_heads(planted, [Head("encoder", 0, 0), Head("encoder", 2, 3)])
    for bad in (Head("encoder", 3, 0), Head("encoder", 0, 4), Head("encoder", -1, 0), Head("encoder", 0, -1)):
        with pytest.raises(ValueError, match="no head"):
            check_heads(planted, [bad])
    with pytest.raises(ValueError, match="not an encoder self-attention head"):
        check_heads(planted, [Head("decoder", 0, 0, "cross_attn")])
    with pytest.raises(ValueError, match="not an encoder self-attention head"):
        check_heads(planted, [Head("decoder", 0, 0)])


def test_head_specs_ignore_case_and_surrounding_spaces(planted):
    """The spec " All " (any case, spaces around) names every head; a Head or a list of Heads names those."""
    assert len(resolve_heads(planted, " All ")) == 12
    assert resolve_heads(planted, PLANTED_HEAD) == [PLANTED_HEAD]
    assert resolve_heads(planted, [PLANTED_HEAD, Head("encoder", 0, 0)]) == [PLANTED_HEAD, Head("encoder", 0, 0)]
    with pytest.raises(ValueError, match="use patch_sweep"):
        patch_pairs(planted, [], " ALL")


@pytest.mark.parametrize(
    ("flips", "clean_target", "holds"),
    [
        (742, 1000, True),  # 0.742 >= 0.05 ** (1/10) = 0.7411
        (741, 1000, False),  # 0.741 just below
        (500, 500, True),  # clean target accuracy exactly 0.5 still gets a verdict
        (370, 500, False),  # 0.74 of the solved
        (499, 499, None),  # the model fails the target rule: no verdict
    ],
)
def test_patching_verdict_at_the_flip_threshold(planted, monkeypatch, flips, clean_target, holds):
    """The finding holds from a flip rate (of the solved pairs) of 0.05 ** (1/10) on, and has no verdict below 50 %
    clean accuracy."""
    result = _result(flips, 1000 - flips, 1000, clean_target)
    seen = {}

    def fake(model, pairs, head, engine):
        seen.update(head=head, engine=engine, pairs=len(pairs))
        return result

    monkeypatch.setattr(patching, "patch_pairs", fake)
    analysis = patching_analysis(planted, "planted", head="2.3", n_pairs=3, engine="nnsight")
    finding = analysis.findings[0]
    assert finding.holds is holds and finding.value == flips / clean_target
    assert finding.name == "attention-pattern patching"
    assert seen == {"head": "2.3", "engine": "nnsight", "pairs": 3}
    assert analysis.summary["source"] == "succ" and analysis.summary["target"] == "pred"
    assert analysis.summary["engine"] == "nnsight" and analysis.summary["flip_rate"] == flips / clean_target
    assert "best_head" not in analysis.summary and "flip_rate" not in analysis.data


def test_sweep_verdict_is_on_the_head_with_the_highest_flip_rate(planted, monkeypatch):
    """With "all" the finding and summary describe the head that flips most (not the last or highest-numbered
    one); the grid holds every head."""
    results = {
        Head("encoder", 0, 0): _result(2, 8, 10, heads=[Head("encoder", 0, 0)]),
        Head("encoder", 1, 3): _result(8, 2, 10, heads=[Head("encoder", 1, 3)]),
        Head("encoder", 2, 1): _result(5, 5, 10, heads=[Head("encoder", 2, 1)]),
    }
    monkeypatch.setattr(patching, "patch_sweep", lambda model, pairs, head, engine: results)
    analysis = patching_analysis(planted, "planted", head=" all", n_pairs=2)
    finding = analysis.findings[0]
    assert finding.holds is True and finding.value == 0.8 and finding.name.endswith("(best single head)")
    assert analysis.summary["best_head"] == "2.4" and analysis.summary["head"] == "2.4"
    assert analysis.data["flip_rate"][1, 3] == 0.8 and analysis.data["flip_rate"][2, 1] == 0.5
    assert set(analysis.data["heads"]) == {"1.1", "3.2", "2.4"}
    assert len(analysis.figures) == 2


def test_analysis_defaults_are_200_standard_3_letter_pairs_and_the_matching_head(planted, monkeypatch):
    """By default: 200 succ -> pred minimal pairs of 3-letter windows on the standard alphabet, seed 0, the
    detected matching head, the hooks engine; the outcome figure names both rules' answers."""
    calls = []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return minimal_pairs("succ", "pred", 2, lengths=(3,))

    seen = {}
    monkeypatch.setattr(patching, "minimal_pairs", spy)
    monkeypatch.setattr(
        patching, "patch_pairs", lambda model, pairs, head, engine: seen.update(head=head) or _result(1, 1, 2)
    )
    analysis = patching_analysis(planted, "planted")
    assert calls == [(("succ", "pred", 200), {"seed": 0, "alphabets": "standard", "lengths": (3,)})]
    assert seen == {"head": "auto"} and analysis.summary["engine"] == "hooks"
    patching_analysis(planted, "planted", "pred", "succ", n_pairs=5, seed=2, alphabets="permuted", lengths=(4,))
    assert calls[1] == (("pred", "succ", 5), {"seed": 2, "alphabets": "permuted", "lengths": (4,)})
    (figure,) = analysis.figures.values()
    assert list(figure.data[0].x) == ["succ answer", "pred answer", "neither"]


def test_analysis_records_each_pair_with_its_answers_and_logit_differences(planted):
    """data["pairs"] lists each minimal pair's prompts, clean and patched answers and logit differences."""
    analysis = patching_analysis(planted, "planted", head="2.3", n_pairs=3, seed=1)
    pairs = minimal_pairs("succ", "pred", 3, seed=1, lengths=(3,))
    rows = analysis.data["pairs"]
    assert [(r["source"], r["target"]) for r in rows] == [(str(p.source), str(p.target)) for p in pairs]
    assert all(r["clean"] == planted_answer(p.target) for r, p in zip(rows, pairs))
    assert analysis.summary["pairs"] == 3 and analysis.summary["head"] == "2.3" and analysis.model == "planted"
    result = patch_pairs(planted, pairs, PLANTED_HEAD)
    assert [r["patched"] for r in rows] == result.patched
    assert [r["logit_diff_clean"] for r in rows] == result.logit_diff_clean.tolist()
    assert [r["logit_diff_patched"] for r in rows] == result.logit_diff_patched.tolist()


def test_finding_text_states_the_rate_the_heads_and_the_clean_accuracy(planted, monkeypatch):
    """The finding's own line gives the flip rate of the pairs, the head (or heads) and the clean accuracy."""
    pair_of_heads = (Head("encoder", 0, 0), Head("encoder", 1, 2))
    for heads, named in (((PLANTED_HEAD,), "head 2.3;"), (pair_of_heads, "heads 1.1+2.3;")):
        result = _result(1, 1, 4, clean_target=2, heads=heads)
        monkeypatch.setattr(patching, "patch_pairs", lambda *args, result=result: result)
        finding = patching_analysis(planted, "planted", head="2.3", n_pairs=4).findings[0]
        expected = f"50% of 2 solved pred prompts switch to the succ answer ({named} clean pred accuracy 50% of 4)"
        assert finding.ours == expected
        assert "10/10" in finding.paper and "74% of the solved prompts" in finding.detail


def test_a_tokenized_pair_batch_is_accepted_as_is(planted, planted_pairs):
    """patch_sweep and patch_pairs take a PairBatch as well as the pairs it was made from, with the same result."""
    batch = pair_batch(planted_pairs[:4])
    swept = patch_sweep(planted, batch, PLANTED_HEAD)[PLANTED_HEAD]
    together = patch_pairs(planted, batch, PLANTED_HEAD)
    expected = [p.source_answer for p in planted_pairs[:4]]
    assert swept.patched == together.patched == expected
    assert patch_pairs(planted, planted_pairs[:4], PLANTED_HEAD).patched == expected


def test_patch_pairs_patches_the_detected_matching_head_by_default(planted, planted_pairs, monkeypatch):
    """Without a head, patch_pairs patches every detected matching head (here the planted one)."""
    monkeypatch.setattr(matching, "matching_tasks", lambda: [planted_pairs[0].target])  # a quick detection
    result = patch_pairs(planted, planted_pairs[:2])
    assert result.heads == (PLANTED_HEAD,) and result.patched == [p.source_answer for p in planted_pairs[:2]]


def test_make_engine_builds_the_named_engine(random_model):
    """ "hooks" gives the hook engine and "nnsight" the nnsight engine, each with the token limit it is given."""
    from lsa_interp.analysis.nnsight_engine import NNsightEngine

    hooks, nnsight = make_engine(random_model, "hooks", 7), make_engine(random_model, "nnsight", 9)
    assert type(hooks) is HookEngine and hooks.max_new_tokens == 7
    assert type(nnsight) is NNsightEngine and nnsight.max_new_tokens == 9
