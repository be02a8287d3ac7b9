"""Every transformation checked against the independent solver, on random permuted alphabets."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsa_interp.data import COMPOSITIONAL, NOVEL, PAPER, SEEN, TRANSFORMATIONS, get_transformation
from lsa_interp.data.vocab import LETTERS
from tests.data.solver import solve


def _letters(alphabet: str, positions: list[int]) -> str:
    return "".join(alphabet[p] for p in positions)


def test_the_papers_nineteen_rules_in_three_groups():
    assert len(SEEN) == 10 and len(COMPOSITIONAL) == 6 and len(NOVEL) == 3
    assert len(PAPER) == 19 and set(PAPER) | {"unreverse"} == set(TRANSFORMATIONS)


@pytest.mark.parametrize("name", list(TRANSFORMATIONS))
def test_paper_example_on_the_standard_alphabet(name):
    """The table's example (standard alphabet) is solved by the solver the same way."""
    query, answer = (part.strip() for part in TRANSFORMATIONS[name].example.split(">"))
    assert answer in solve(LETTERS, name, query)


@settings(max_examples=400, deadline=None)
@given(
    alphabet=st.permutations(LETTERS).map("".join),
    name=st.sampled_from(list(TRANSFORMATIONS)),
    length=st.integers(3, 7),
    start=st.integers(0, 23),
    seed=st.integers(0, 2**32 - 1),
)
def test_generated_answer_matches_the_solver(alphabet, name, length, start, seed):
    start = min(start, 26 - length)
    problem = get_transformation(name).build(start, length, random.Random(seed))
    if problem is None:
        return
    query, answer = _letters(alphabet, problem[0]), _letters(alphabet, problem[1])
    assert answer in solve(alphabet, name, query)


@pytest.mark.parametrize("name", list(TRANSFORMATIONS))
def test_every_window_is_handled_or_skipped_for_a_reason(name):
    """Rules skip exactly the windows that would run off the alphabet."""
    build = get_transformation(name).build
    for length in range(3, 8):
        for start in range(26 - length + 1):
            problem = build(start, length, random.Random(0))
            if problem is None:
                continue
            assert all(0 <= p < 26 for p in problem[0] + problem[1])
    assert get_transformation("succ").build(26 - 3, 3, random.Random(0)) is None
    assert get_transformation("pred").build(0, 3, random.Random(0)) is None


def test_random_choices_cover_their_range():
    """Duplicated position, swap pair and group size all vary across draws."""
    rng = random.Random(0)
    dups = {tuple(get_transformation("remove_redundant").build(5, 4, rng)[0]) for _ in range(200)}
    groups = {len(get_transformation("sort_group").build(5, 3, rng)[0]) for _ in range(200)}
    swaps = {tuple(get_transformation("sort").build(5, 4, rng)[0]) for _ in range(300)}
    assert len(dups) == 4 and groups == {6, 9} and len(swaps) == 6


def test_unknown_rule_is_named():
    with pytest.raises(ValueError, match="unknown transformation 'frob'"):
        get_transformation("frob")
