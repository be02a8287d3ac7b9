"""Every transformation checked against the independent solver, on random permuted alphabets."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

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


MARGINS = {  # letters a rule needs before and after its window (the others need none)
    "extend_sequence": (0, 1),
    "succ": (0, 1),
    "pred": (1, 0),
    "rr_succ": (0, 1),
    "fix_extend": (0, 1),
    "extend_pred": (1, 1),
    "extend_group": (0, 1),
    "extend_extend_succ": (0, 3),
    "fix_pred_succ": (1, 1),
}


@pytest.mark.parametrize("name", list(TRANSFORMATIONS))
def test_exact_windows_per_rule_and_length(name):
    """A rule builds a problem for exactly the windows with room for its margins (shift: n letters after)."""
    build = get_transformation(name).build
    for length in range(3, 8):
        before, after = (0, length) if name == "shift" else MARGINS.get(name, (0, 0))
        starts = [s for s in range(27 - length) if build(s, length, random.Random(s)) is not None]
        assert starts == list(range(before, 27 - length - after)), (name, length)


def test_group_sizes_of_extend_group_are_two_or_three():
    rng = random.Random(1)
    sizes = set()
    for _ in range(100):
        query, answer = get_transformation("extend_group").build(4, 3, rng)
        k = len(query) // 3
        assert answer == [p for p in range(4, 8) for _ in range(k)]
        sizes.add(k)
    assert sizes == {2, 3}


def test_fix_interleave_never_replaces_a_letter_by_the_filler():
    """The misplaced letter differs from the filler, so the query keeps one filler between letters."""
    rng = random.Random(2)
    offsets = set()
    for _ in range(500):
        query, answer = get_transformation("fix_interleave").build(10, 3, rng)
        filler = answer[1]
        assert query[1::2] == [filler, filler] and filler not in query[0::2]
        assert sum(a != b for a, b in zip(query, answer)) == 1
        (misplaced,) = [q for q, a in zip(query, answer) if q != a]
        assert not 10 <= misplaced < 13
        offsets.add(misplaced - filler)
    assert {-1, 1} <= offsets  # the filler's neighbours can be drawn: only the filler itself is excluded


def test_unknown_rule_is_named():
    with pytest.raises(ValueError, match="unknown transformation 'frob'"):
        get_transformation("frob")
