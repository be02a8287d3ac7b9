"""Rule families: every sibling's answer on a query, in the task's alphabet, and the confusion counts."""

from __future__ import annotations

import pytest

from lsa_interp.data import Task
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


def test_each_family_rules_answer_is_the_generated_answer_on_every_val_task(copy200):
    checked = dict.fromkeys(FAMILY_OF, 0)
    for item in copy200.splits["val"]:
        if item.transformation in FAMILY_OF and not item.is_copy:
            assert family_answers(item)[item.transformation] == item.answer, item
            checked[item.transformation] += 1
    assert min(checked.values()) > 100


def test_confusion_counts_correct_sibling_and_other_answers_and_skips_copy_rows():
    tasks = [
        task("acde", "acdf", "succ"),
        task("acde", "acdf", "succ"),
        task("acde", "acdf", "succ"),
        task("acde", "acdf", "succ"),
        task("mnnop", "mnop", "remove_redundant"),
        task("mnnop", "mnop", "remove_redundant", copy=True),
        task("fix", "xif", "reverse"),
    ]
    predictions = ["acdf", "bcde", "acdef", "acdd", "mnoq", "mnoq", "fix"]
    confusion = family_confusion(tasks, predictions)
    assert list(confusion) == [rule for rules in RULE_FAMILIES.values() for rule in rules]
    succ = confusion["succ"]
    assert (succ.correct, succ.as_rule, succ.other, succ.total) == (1, {"extend_sequence": 1, "pred": 1}, 1, 4)
    assert succ.to_dict()["percent_sibling"] == pytest.approx(50.0)
    assert confusion["remove_redundant"].as_rule == {"rr_succ": 1} and confusion["remove_redundant"].total == 1
    assert confusion["pred"].total == 0 and confusion["pred"].to_dict()["percent_correct"] is None
    with pytest.raises(ValueError, match="7 tasks but 6 predictions"):
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
