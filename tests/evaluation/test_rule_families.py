"""Rule families: every sibling's answer on a query, in the task's alphabet, and the confusion counts."""

from __future__ import annotations

import pytest

from lsa_interp.data import Task
from lsa_interp.data.task import STANDARD_ALPHABET
from lsa_interp.evaluation.report import markdown_report
from lsa_interp.evaluation.result import score_predictions
from lsa_interp.evaluation.rule_families import FAMILY_OF, RULE_FAMILIES, family_answers, family_confusion

PERM = "bacdefghijklmnopqrstuvwxzy"  # a <-> b and y <-> z swapped


def task(query: str, answer: str, rule: str, alphabet: str = PERM, copy: bool = False) -> Task:
    examples = ((query, answer),) if copy else (("mno", "mnop"),)
    return Task(alphabet, examples, query, answer, rule)


def test_window_rules_read_their_neighbours_from_the_tasks_alphabet():
    assert family_answers(task("acde", "acdf", "succ")) == {
        "extend_sequence": "acdef",
        "succ": "acdf",
        "pred": "bcde",  # before a comes b in PERM
    }
    assert family_answers(task("wxz", "wxzy", "extend_sequence")) == {
        "extend_sequence": "wxzy",
        "succ": "wxy",
        "pred": "vxz",
    }
    assert family_answers(task("xzy", "wzy", "pred")) == {"pred": "wzy"}  # y ends PERM: no successor
    assert family_answers(task("bacd", "bace", "succ")) == {"extend_sequence": "bacde", "succ": "bace"}  # b starts it


def test_doubled_and_intruder_rules():
    assert family_answers(task("mnnop", "mnop", "remove_redundant")) == {"remove_redundant": "mnop", "rr_succ": "mnoq"}
    assert family_answers(task("mnnop", "mnoq", "rr_succ")) == {"remove_redundant": "mnop", "rr_succ": "mnoq"}
    assert family_answers(task("mxop", "mnop", "fix_alphabetic_seq")) == {
        "fix_alphabetic_seq": "mnop",
        "fix_extend": "mnopq",
    }
    assert family_answers(task("mxop", "mnopq", "fix_extend")) == {"fix_alphabetic_seq": "mnop", "fix_extend": "mnopq"}
    assert family_answers(task("fix", "xif", "reverse")) == {}


@pytest.mark.parametrize(
    ("answer", "rule"),
    [("x", "fix_extend"), ("ijk", "fix_extend"), ("ij", "fix_alphabetic_seq"), ("ijkl", "fix_alphabetic_seq")],
)
def test_an_intruder_task_whose_answer_cannot_be_its_rules_gets_no_family_answers(answer, rule):
    """The intruder rules read the fixed query off the answer: an answer of another length than the rule gives (the
    query's, plus one for fix_extend) says nothing, so a wrong prediction counts as other."""
    odd = Task.parse(f"{STANDARD_ALPHABET} | abc > abd | ijk > {answer}", transformation=rule)
    assert family_answers(odd) == {}
    counts = family_confusion([odd, odd], ["abc", answer])[rule]
    assert (counts.correct, counts.sibling, counts.other) == (1, 0, 1)
    scored = score_predictions([odd], ["abc"], [odd], [answer]).rule_families
    assert (scored["seen_alphabets"][rule].other, scored["new_alphabets"][rule].correct) == (1, 1)


def test_each_family_rules_answer_is_the_generated_answer_on_every_val_task(copy200):
    checked = dict.fromkeys(FAMILY_OF, 0)
    for item in copy200.splits["val"]:
        if item.transformation in FAMILY_OF and not item.is_copy:
            assert family_answers(item)[item.transformation] == item.answer, item
            checked[item.transformation] += 1
    assert min(checked.values()) > 100


def test_confusion_counts_correct_sibling_and_other_answers_and_skips_copy_rows():
    succ, rr = task("acde", "acdf", "succ"), task("mnnop", "mnop", "remove_redundant")
    rows = [  # rows that do not count come first: they are skipped, not the end of the count
        (task("fix", "xif", "reverse"), "fix"),
        (task("mnnop", "mnop", "remove_redundant", copy=True), "mnoq"),
        *[(succ, "acdf")] * 2,
        *[(succ, "bcde")] * 3,
        (succ, "acdef"),
        *[(succ, "acdd")] * 2,
        *[(rr, "mnoq")] * 2,
    ]
    tasks, predictions = [t for t, _ in rows], [p for _, p in rows]
    confusion = family_confusion(tasks, predictions)
    assert list(confusion) == [rule for rules in RULE_FAMILIES.values() for rule in rules]
    assert all(counts.rule == rule for rule, counts in confusion.items())
    assert confusion["succ"].to_dict() == {
        "correct": 2,
        "as_rule": {"extend_sequence": 1, "pred": 3},
        "other": 2,
        "total": 8,
        "percent_correct": 25.0,
        "percent_sibling": 50.0,
    }
    assert confusion["succ"].sibling == 4
    assert confusion["remove_redundant"].to_dict()["as_rule"] == {"rr_succ": 2}
    assert confusion["remove_redundant"].total == 2  # the copy row is left out
    assert confusion["pred"].to_dict() == {
        "correct": 0,
        "as_rule": {"extend_sequence": 0, "succ": 0},
        "other": 0,
        "total": 0,
        "percent_correct": None,
        "percent_sibling": None,
    }
    with pytest.raises(ValueError, match=f"{len(tasks)} tasks but {len(tasks) - 1} predictions"):
        family_confusion(tasks, predictions[:-1])


def test_the_evaluation_reports_the_families():
    tasks = [task("acde", "acdf", "succ"), task("mnnop", "mnop", "remove_redundant")]
    result = score_predictions(tasks, ["bcde", "mnop"], tasks, ["acdf", "mnoq"])
    families = result.to_dict()["rule_families"]
    assert families["seen_alphabets"]["succ"]["as_rule"] == {"extend_sequence": 0, "pred": 1}
    assert families["new_alphabets"]["remove_redundant"]["as_rule"] == {"rr_succ": 1}
    report = markdown_report(result)
    assert (
        "Which rule was applied" in report
        and "| seen alphabets | succ | 0.0 | extend_sequence 0.0, pred 100.0 | 0.0 | 1 |" in report
    )
