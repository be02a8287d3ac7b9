"""Exact-match metrics on hand-made predictions: the edge cases behind every Table 1 cell and the alternate-rule
table (prefixes, copy rows, the standard-alphabet rows, unknown rules, the ends of the alphabet)."""

from __future__ import annotations

import pytest

from lsa_interp.data import STANDARD_ALPHABET, Task
from lsa_interp.evaluation.metrics import (
    OUTCOMES,
    Accuracy,
    AlternateRuleCounts,
    accuracy,
    alternate_rule_errors,
    by_transformation,
    copy_split,
    exact_match,
    in_paper_order,
    other_rule_answer,
    standard_alphabet_answer,
    table1,
)

STD = STANDARD_ALPHABET
PERM = "bacdefghijklmnopqrstuvwxzy"  # a <-> b and y <-> z swapped
EXAMPLE = (("mno", "nop"),)


def task(query: str, answer: str | None, rule: str | None = "succ", alphabet: str = PERM, copy: bool = False) -> Task:
    """A one-shot task; a copy task's example is its own query problem."""
    examples = ((query, answer),) if copy else EXAMPLE
    return Task(alphabet, examples, query, answer, rule)


def test_exact_match_refuses_a_prediction_that_only_starts_with_the_answer_or_is_cut_short():
    tasks = [task("abc", "abd")] * 5
    assert exact_match(tasks, ["abd", "abde", "ab", "", "ABD"]) == [True, False, False, False, False]


def test_exact_match_refuses_mismatched_lengths_and_missing_answers():
    with pytest.raises(ValueError, match="1 predictions for 2 tasks"):
        exact_match([task("abc", "abd")] * 2, ["abd"])
    with pytest.raises(ValueError, match="2 predictions for 1 tasks"):
        exact_match([task("abc", "abd")], ["abd", "abd"])
    with pytest.raises(ValueError, match="has no answer"):
        exact_match([task("abc", "abd"), task("abc", None)], ["abd", "abd"])


def test_accuracy_counts_and_percent():
    assert accuracy([task("abc", "abd")] * 4, ["abd", "x", "abd", "abd"]) == Accuracy(3, 4)
    assert Accuracy(3, 4).percent == 75.0 and Accuracy(0, 5).percent == 0.0 and Accuracy(0, 0).percent is None
    assert Accuracy(1, 8).to_dict() == {"correct": 1, "total": 8, "percent": 12.5}


def test_copy_split_counts_copy_and_non_copy_rows_separately():
    tasks = [task("abc", "abd", copy=True), task("bcd", "bce", copy=True), task("cde", "cdf")]
    assert copy_split(tasks, ["abd", "x", "x"]) == {"copy": Accuracy(1, 2), "non_copy": Accuracy(0, 1)}
    assert copy_split(tasks, ["x", "x", "cdf"]) == {"copy": Accuracy(0, 2), "non_copy": Accuracy(1, 1)}


def test_by_transformation_skips_copy_rows_and_puts_unknown_rules_last_alphabetically():
    tasks = [
        task("abc", "abd", "zeta"),
        task("abc", "abd", "alpha"),
        task("abc", "abd", "reverse"),
        task("abc", "abd", "succ"),
        task("abc", "abd", "succ", copy=True),
        task("abc", "abd", "extend_sequence"),
    ]
    table = by_transformation(tasks, ["abd", "x", "abd", "x", "abd", "abd"])
    assert list(table) == ["extend_sequence", "succ", "reverse", "alpha", "zeta"]
    assert table["succ"] == Accuracy(0, 1) and table["zeta"] == Accuracy(1, 1) and table["alpha"] == Accuracy(0, 1)
    with pytest.raises(ValueError, match="no transformation label"):
        by_transformation([task("abc", "abd", "succ"), task("abc", "abd", None)], ["abd", "abd"])


def test_in_paper_order_is_distinct_and_stable():
    assert in_paper_order(["reverse", "succ", "succ", "b", "a"]) == ["succ", "reverse", "a", "b"]
    assert in_paper_order(["unreverse", "replicate"]) == ["replicate", "unreverse"]


def test_table1_with_standard_adds_only_the_standard_alphabet_non_copy_rows_of_the_seen_set():
    seen = [
        task("abc", "abd", "succ", STD),  # standard, seen rule, right
        task("abc", "cba", "reverse", STD),  # standard, new rule, right
        task("abc", "abd", "succ", STD, copy=True),  # copy row: never counted
        task("abc", "abd", "succ", PERM),  # permuted: not added to the new-alphabet cells
    ]
    new = [task("abc", "abd", "succ"), task("abc", "cba", "reverse"), task("abc", "cba", "reverse")]
    t = table1(seen, ["abd", "cba", "abd", "x"], new, ["x", "cba", "x"])
    assert t.seen_transformations_seen_alphabets == Accuracy(1, 2)
    assert t.new_transformations_seen_alphabets == Accuracy(1, 1)
    assert t.seen_transformations_new_alphabets == Accuracy(0, 1)
    assert t.new_transformations_new_alphabets == Accuracy(1, 2)
    assert t.seen_transformations_new_alphabets_with_standard == Accuracy(1, 2)
    assert t.new_transformations_new_alphabets_with_standard == Accuracy(2, 3)
    assert t.to_dict()["new_transformations_new_alphabets_with_standard"] == Accuracy(2, 3).to_dict()
    assert len(t.to_dict()) == 6


def test_table1_requires_labels_in_either_set_and_matching_lengths():
    labelled, unlabelled = task("abc", "abd", "succ"), task("abc", "abd", None)
    with pytest.raises(ValueError, match="no transformation label"):
        table1([labelled], ["abd"], [unlabelled], ["abd"])
    with pytest.raises(ValueError, match="predictions for"):
        table1([labelled], ["abd"], [labelled], [])


@pytest.mark.parametrize(
    ("alphabet", "query", "rule", "expected"),
    [
        (STD, "xyz", "pred", None),  # no letter after the last one of the alphabet
        (STD, "wxy", "pred", "wxz"),
        (PERM, "wxz", "pred", "wxy"),  # positions in the task's own alphabet
        (PERM, "xzy", "pred", None),
        (STD, "abc", "succ", None),  # no letter before the first one
        (STD, "bcd", "succ", "acd"),
        (PERM, "bcd", "succ", None),  # "b" opens PERM
        (PERM, "cde", "succ", "ade"),
        (STD, "abc", "reverse", None),  # neither pred nor succ
    ],
)
def test_other_rule_answer_at_the_ends_of_the_alphabet(alphabet, query, rule, expected):
    assert other_rule_answer(task(query, "zzz", rule, alphabet)) == expected


@pytest.mark.parametrize(
    ("alphabet", "query", "answer", "rule", "expected"),
    [
        (PERM, "bcd", "acd", "pred", None),  # b -> a in a..z is the task's answer too: not an error of that kind
        (PERM, "acd", "bcd", "pred", None),  # "a" has no predecessor in a..z
        (PERM, "cde", "ade", "pred", "bde"),  # c -> b in a..z, c -> a in PERM
        (PERM, "wxy", "wxz", "succ", None),  # y -> z in both alphabets
        (PERM, "wxz", "wxy", "succ", None),  # "z" has no successor in a..z
        (PERM, "vwx", "vwz", "succ", "vwy"),
        (PERM, "abc", "cba", "reverse", None),
    ],
)
def test_standard_alphabet_answer(alphabet, query, answer, rule, expected):
    assert standard_alphabet_answer(task(query, answer, rule, alphabet)) == expected


def test_alternate_rule_errors_classifies_in_order_and_skips_copy_and_other_rules():
    tasks = [
        task("cde", "ade", "pred"),  # correct
        task("cde", "ade", "pred"),  # other rule: succ -> cdf
        task("cde", "ade", "pred"),  # standard alphabet: bde
        task("cde", "ade", "pred"),  # other
        task("cde", "ade", "pred", copy=True),  # copy row: skipped
        task("vwx", "vwz", "succ"),  # other rule: pred -> uwx
        task("vwx", "vwz", "succ"),  # standard alphabet: vwy
        task("abc", "cba", "reverse"),  # neither pred nor succ: skipped
    ]
    counts = alternate_rule_errors(tasks, ["ade", "cdf", "bde", "q", "ade", "uwx", "vwy", "cba"])
    assert counts["pred"] == AlternateRuleCounts("pred", 1, 1, 1, 1)
    assert counts["succ"] == AlternateRuleCounts("succ", 0, 1, 1, 0)
    assert counts["pred"].total == 4 and counts["succ"].other_rule == "pred" and counts["pred"].other_rule == "succ"
    assert counts["succ"].percents() == {
        "correct": 0.0,
        "applied_other_rule": 50.0,
        "standard_alphabet": 50.0,
        "other": 0.0,
    }
    as_dict = counts["pred"].to_dict()
    assert (
        as_dict["rule"] == "pred"
        and as_dict["other_rule"] == "succ"
        and as_dict["total"] == 4
        and as_dict["percent"]["other"] == 25.0
    )
    assert [as_dict[o] for o in OUTCOMES] == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="predictions for"):
        alternate_rule_errors(tasks, [])


def test_alternate_rule_errors_on_an_empty_rule_gives_no_percentages():
    counts = alternate_rule_errors([task("cde", "ade", "pred")], ["ade"])
    assert counts["succ"].total == 0 and set(counts["succ"].percents().values()) == {None}
    assert counts["pred"].percents()["correct"] == 100.0
