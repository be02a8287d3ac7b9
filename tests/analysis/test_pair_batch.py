"""Minimal pairs tokenized for patching: prompts without answers, and pairs refused with the reason."""

from __future__ import annotations

import pytest

from lsa_interp.analysis.pair_batch import pair_batch
from lsa_interp.analysis.prompts import MinimalPair, minimal_pairs
from lsa_interp.data.task import STANDARD_ALPHABET, Task

ALIGNED = minimal_pairs("succ", "pred", 3)


def _pair(source_out: str, target_out: str, source_answer: str | None = "abd", target_answer: str | None = "abb"):
    task = lambda out, answer: Task(STANDARD_ALPHABET, (("ijk", out),), "abc", answer)
    return MinimalPair(task(source_out, source_answer), task(target_out, target_answer))


def test_the_prompts_are_encoded_without_their_answers():
    batch = pair_batch(ALIGNED)
    assert batch.source.tgt_in is None and batch.target.tgt_in is None  # the answers stay out of the prompts
    assert batch.source_answers == [p.source_answer for p in ALIGNED]
    assert batch.target_answers == [p.target_answer for p in ALIGNED]


def test_the_changed_positions_are_where_any_pair_differs():
    """``ijk > ijl`` against ``ijk > ijj`` differs at the last example-output letter (33), ``ijk > hjk`` at the first
    (31): together both, each once and in order."""
    assert pair_batch([_pair("ijl", "ijj")]).changed_positions() == (33,)
    assert pair_batch([_pair("ijl", "ijj"), _pair("hjk", "ijk")]).changed_positions() == (31, 33)


def test_a_pair_missing_either_answer_is_refused():
    for source_answer, target_answer in (("abd", None), (None, "abb")):
        with pytest.raises(ValueError, match="pair 0 lacks an answer"):
            pair_batch([_pair("ijl", "ijj", source_answer, target_answer)])


def test_the_first_pair_out_of_layout_is_named_with_its_example_outputs():
    pairs = [_pair("ijl", "ijj"), _pair("ijkl", "ijl"), _pair("ijl", "ijj")]
    with pytest.raises(ValueError) as error:
        pair_batch(pairs)
    assert str(error.value).startswith(
        "pair 1: the source and target prompts do not align token for token (example outputs 'ijkl' vs 'ijl'); "
    )
