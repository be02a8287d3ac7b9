from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, strategies as st

from lsa_interp import Task
from lsa_interp.data.vocab import LETTERS

PAPER = "a b c d e f g h i j k l m n o p q r s t u v w x y z | g h i > f h i | b c d"


def test_parse_paper_notation_with_and_without_spaces():
    spaced, compact = Task.parse(PAPER), Task.parse(PAPER.replace(" ", ""))
    assert spaced == compact
    assert spaced.alphabet == LETTERS and spaced.examples == (("ghi", "fhi"),)
    assert spaced.query == "bcd" and spaced.answer is None and spaced.transformation is None
    assert not spaced.is_copy


def test_answer_after_the_query_and_several_examples():
    t = Task.parse(f"{LETTERS} | abc > abd | ijk > ijl | bcd > bce", transformation="succ")
    assert t.examples == (("abc", "abd"), ("ijk", "ijl")) and t.answer == "bce" and t.n_shots == 2
    assert t.transformation == "succ"


def test_with_answer_takes_letters_spaced_or_not_and_refuses_anything_else():
    task = Task.parse(PAPER, transformation="pred")
    assert task.with_answer("a c d") == task.with_answer("acd") == Task.parse(f"{PAPER} > acd")
    assert task.with_answer("acd").transformation == "pred" and task.with_answer(None) == task
    for bad, found in (("ACD", "symbol(s) 'A' 'C' 'D'"), ("a1c", "symbol(s) '1'"), ("a>c", "symbol(s) '>'"),
                       ("", "no letter"), (" ", "no letter")):  # fmt: skip
        with pytest.raises(ValueError, match=rf"^answer '.*' has {re.escape(found)}; an answer is letters a-z"):
            task.with_answer(bad)


def test_task_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Task.parse(PAPER).query = "xyz"


def test_is_copy_needs_the_whole_problem():
    assert Task.parse(f"{LETTERS} | bcd > acd | bcd > acd").is_copy
    assert not Task.parse(f"{LETTERS} | bcd > bce | bcd > acd").is_copy
    assert Task.parse(f"{LETTERS} | bcd > acd | bcd").is_copy


def test_str_is_paper_notation_and_spaced_adds_spaces():
    t = Task.parse(PAPER + " > a c d")
    assert str(t) == f"{LETTERS} | ghi > fhi | bcd > acd"
    assert t.spaced() == PAPER + " > a c d"


word = st.text(alphabet=LETTERS, min_size=1, max_size=9)


@given(
    alphabet=st.permutations(LETTERS).map("".join),
    examples=st.lists(st.tuples(word, word), min_size=1, max_size=5).map(tuple),
    query=word,
    answer=st.none() | word,
)
def test_round_trip(alphabet, examples, query, answer):
    t = Task(alphabet, examples, query, answer, transformation="sort")
    assert Task.parse(str(t)) == t
    assert Task.parse(t.spaced()) == t


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{LETTERS} | ghi > fhi | bc1", r"unknown symbol\(s\) '1'"),
        (f"{LETTERS} | GHI > fhi | bcd", r"unknown symbol\(s\) 'G' 'H' 'I'"),
        (f"{LETTERS} | ghi fhi | bcd", "must have exactly one '>'"),
        (f"{LETTERS} | ghi > | bcd", "has an empty side"),
        (f"{LETTERS} | ghi > fhi | ", "the query is empty"),
        (f"{LETTERS} | ghi > fhi | bcd >", "but no answer"),
        (f"{LETTERS[:-1]} | ghi > fhi | bcd", "not a permutation .*missing 'z'"),
        (f"{LETTERS[:-1]}a | ghi > fhi | bcd", "not a permutation .*missing 'z'"),
        (f"{LETTERS} | ghi > fhi | bcd > acd > x", r"query 'bcd>acd>x' has more than one '>'"),
        (f"{LETTERS} | ghi > fhi | abc def | bcd", r"example 2 'abcdef' must have exactly one '>'"),
        (f"{LETTERS[:-2]} | ghi > fhi | bcd", r"not a permutation .*\(missing 'yz'\)"),
        (f"{LETTERS}a | ghi > fhi | bcd", r"not a permutation .*\(27 letters\)"),
        (f"{LETTERS} | bcd", "a task needs"),
        ("", "a task needs"),
    ],
)
def test_malformed_text_names_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        Task.parse(text)
