from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, strategies as st

from lsa_interp.data import STANDARD_ALPHABET, make_alphabets, permutation_level, permute_alphabet
from lsa_interp.data.alphabets import PERMUTATION_LEVELS, alphabets_at_level, most_permuted


@given(level=st.integers(2, 26), seed=st.integers(0, 10**6))
def test_exactly_level_letters_moved(level, seed):
    alphabet = permute_alphabet(level, random.Random(seed))
    assert sorted(alphabet) == sorted(STANDARD_ALPHABET)
    assert permutation_level(alphabet) == level


def test_levels_out_of_range():
    with pytest.raises(ValueError, match="between 2 and 26"):
        permute_alphabet(1, random.Random(0))


def test_make_alphabets_shares_and_prefix_property():
    twenty = make_alphabets(20, seed=0)
    assert len(twenty) == 21 and twenty[-1] == STANDARD_ALPHABET and len(set(twenty)) == 21
    assert sorted(permutation_level(a) for a in twenty[:-1]) == [2] * 5 + [5] * 5 + [10] * 5 + [20] * 5
    forty = make_alphabets(40, seed=0)
    for level_index in range(4):
        assert twenty[level_index * 5 : level_index * 5 + 5] == forty[level_index * 10 : level_index * 10 + 5]
    assert make_alphabets(20, seed=1) != twenty


def test_exclusion_and_bad_counts():
    used = make_alphabets(20, seed=0)
    fresh = make_alphabets(20, seed=0, exclude=used, include_standard=False)
    assert not set(fresh) & set(used) and STANDARD_ALPHABET not in fresh
    with pytest.raises(ValueError, match="multiple of 4"):
        make_alphabets(10, seed=0)


def test_the_alphabets_of_a_seed_never_change():
    """Datasets are rebuilt from (preset, seed): seed 0's alphabets are fixed across versions."""
    assert make_alphabets(4, seed=0) == [
        "abcdefghijklrnopqmstuvwxyz",
        "abcdefghijklonvpqxstumwryz",
        "obcdyfghitklmnzaqrsjxvweup",
        "ujeprlzyiakngvotqfsdhcmxbw",
        STANDARD_ALPHABET,
    ]
    assert [permutation_level(a) for a in make_alphabets(4, seed=0)] == [2, 5, 10, 20, 0]


def test_no_permuted_alphabet_and_custom_levels():
    assert make_alphabets(0, seed=0) == [STANDARD_ALPHABET] and make_alphabets(0, seed=0, include_standard=False) == []
    three = make_alphabets(6, seed=0, levels=(3, 26), include_standard=False)
    assert [permutation_level(a) for a in three] == [3, 3, 3, 26, 26, 26]
    with pytest.raises(ValueError, match="multiple of 4"):
        make_alphabets(-4, seed=0)


def test_every_letter_of_a_full_permutation_moves():
    for seed in range(20):
        alphabet = permute_alphabet(26, random.Random(seed))
        assert all(a != b for a, b in zip(alphabet, STANDARD_ALPHABET))
        assert sorted(alphabet) == sorted(STANDARD_ALPHABET)
    with pytest.raises(ValueError, match="between 2 and 26"):
        permute_alphabet(27, random.Random(0))


def test_permutation_level_refuses_an_alphabet_of_another_length():
    assert permutation_level("bacdefghijklmnopqrstuvwxyz") == 2
    with pytest.raises(ValueError):
        permutation_level("bac")


def test_alphabets_are_never_repeated():
    """There are 325 alphabets with two letters swapped: asking for all of them gives each exactly once."""
    every_swap = make_alphabets(325, seed=0, levels=(2,), include_standard=False)
    assert len(every_swap) == len(set(every_swap)) == 325


def test_the_alphabets_of_each_level_are_counted_exactly():
    """C(26, k) choices of the moved letters times their derangements; 26 letters have !26 full derangements."""
    assert [alphabets_at_level(level) for level in (2, 3, 4, 5)] == [325, 5200, 134550, 2894320]
    assert alphabets_at_level(26) == 148362637348470135821287825
    assert alphabets_at_level(1) == alphabets_at_level(27) == 0
    assert most_permuted(PERMUTATION_LEVELS) == 1300 and most_permuted((2, 2)) == 324 and most_permuted((3,)) == 5200


def test_the_most_alphabets_the_levels_hold_are_drawn_and_one_share_more_is_refused_up_front():
    """326 two-letter swaps were asked for by drawing forever (only 325 exist); no levels divided by zero."""
    assert len(set(make_alphabets(324, seed=0, levels=(2, 2), include_standard=False))) == 324
    with pytest.raises(
        ValueError,
        match=r"^cannot draw 326 distinct alphabets with 2 letters moved for n_permuted 326 over levels \(2,\): "
        r"only 325 exist$",
    ):
        make_alphabets(326, seed=0, levels=(2,))
    with pytest.raises(ValueError, match=r"^cannot draw 326 .* over levels \(2, 2\): only 325 exist$"):
        make_alphabets(326, seed=0, levels=(2, 2))
    for levels in ((), (1, 2), (2, 27)):
        message = f"levels must be one or more permutation levels in 2..26, got {levels}"
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            make_alphabets(0, seed=0, levels=levels)
        with pytest.raises(ValueError, match="levels must be one or more"):
            most_permuted(levels)


def test_alphabets_in_exclude_are_not_counted_as_available():
    used = make_alphabets(300, seed=0, levels=(2,))  # with the standard alphabet, which takes no level-2 place
    fresh = make_alphabets(25, seed=1, levels=(2,), exclude=[*used, "not an alphabet"], include_standard=False)
    assert len(set(fresh)) == 25 and not set(fresh) & set(used)
    with pytest.raises(ValueError, match="^cannot draw 28 .*: only 25 exist outside exclude$"):
        make_alphabets(28, seed=1, levels=(2,), exclude=used)
