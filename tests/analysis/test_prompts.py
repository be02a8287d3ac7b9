"""Analysis tasks: rule tasks and minimal pairs are correct, distinct and reproducible."""

from __future__ import annotations

import pytest

from lsa_interp.analysis.prompts import analysis_alphabets, minimal_pairs, rule_tasks
from lsa_interp.data.alphabets import make_alphabets
from lsa_interp.data.task import STANDARD_ALPHABET
from lsa_interp.data.transformations import PAPER
from tests.data.solver import solve


@pytest.mark.parametrize("rule", PAPER)
def test_rule_tasks_are_correct_distinct_and_not_copies(rule):
    tasks = rule_tasks(rule, 30, seed=1, alphabets="permuted")
    assert len(set(tasks)) == 30 and all(t.transformation == rule for t in tasks)
    for task in tasks:
        assert not task.is_copy
        assert task.answer in solve(task.alphabet, rule, task.query)
        assert task.examples[0][1] in solve(task.alphabet, rule, task.examples[0][0])
    assert rule_tasks(rule, 30, seed=1, alphabets="permuted") == tasks


def test_minimal_pairs_share_everything_but_the_example_output():
    pairs = minimal_pairs("succ", "pred", 200, seed=2)
    assert len(set(pairs)) == 200
    for pair in pairs:
        src, tgt = pair.source, pair.target
        assert (src.alphabet, src.examples[0][0], src.query) == (tgt.alphabet, tgt.examples[0][0], tgt.query)
        assert src.examples[0][1] != tgt.examples[0][1] and pair.source_answer != pair.target_answer
        assert pair.source_answer in solve(src.alphabet, "succ", src.query)
        assert pair.target_answer in solve(tgt.alphabet, "pred", tgt.query)
    first = pairs[0].target
    assert first.alphabet == STANDARD_ALPHABET and len(str(first)) == len(str(pairs[0].source))


def test_pairs_that_cannot_exist_raise():
    with pytest.raises(ValueError, match="never give the same example input"):
        minimal_pairs("sort", "pred", 5)
    with pytest.raises(ValueError, match="both 'pred'"):
        minimal_pairs("pred", "pred", 5)
    with pytest.raises(ValueError, match="unknown transformation 'nope'"):
        minimal_pairs("nope", "pred", 5)
    with pytest.raises(ValueError, match="only"):
        rule_tasks("pred", 1000, lengths=(3,))
    # 22 three-letter windows suit both rules; the query window is any of the 21 others
    with pytest.raises(ValueError, match="only 462 distinct succ/pred minimal pairs"):
        minimal_pairs("succ", "pred", 1000, lengths=(3,))
    few = minimal_pairs("succ", "pred", 1000, lengths=(3,), at_most=True)
    assert len(set(few)) == len(few) == 462


def test_permuted_analysis_alphabets_are_fresh(copy200):
    fresh = analysis_alphabets("permuted", n=20)
    assert len(set(fresh)) == 20 and not set(fresh) & set(copy200.train_alphabets)
    assert not set(fresh) & set(make_alphabets(400, seed=0))
    with pytest.raises(ValueError, match="unknown alphabets"):
        analysis_alphabets("weird")
