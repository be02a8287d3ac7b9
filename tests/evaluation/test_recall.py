"""Training recall: the train split's answers per alphabet and query, and how val answers are counted against them."""

from __future__ import annotations

import pytest

from lsa_interp.data import Task
from lsa_interp.evaluation.recall import (
    OUTCOME_COLOURS,
    OUTCOMES,
    ROW_KINDS,
    RecallCounts,
    recall_figure,
    recall_totals,
    seen_rule_answers,
    trained_answers,
    training_recall,
)

PERM = "bacdefghijklmnopqrstuvwxzy"


def task(query: str, answer: str, rule: str, alphabet: str = PERM, copy: bool = False) -> Task:
    examples = ((query, answer),) if copy else (("mno", "mnop"),)
    return Task(alphabet, examples, query, answer, rule)


TRAIN = [
    task("cdef", "cdeg", "succ"),
    task("cdef", "cdefg", "extend_sequence"),
    task("cdef", "cdeg", "succ", copy=True),  # a copy row repeats a non-copy row's answer
    task("mnnop", "mnop", "remove_redundant"),
    task("cdef", "bdef", "pred", alphabet="abcdefghijklmnopqrstuvwxyz"),  # another alphabet: not this one's
]


def test_the_index_holds_every_answer_per_alphabet_and_query_with_its_rule():
    index = trained_answers(TRAIN)
    assert index[(PERM, "cdef")] == {"cdeg": "succ", "cdefg": "extend_sequence"}
    assert index[(PERM, "mnnop")] == {"mnop": "remove_redundant"}
    assert index[("abcdefghijklmnopqrstuvwxyz", "cdef")] == {"bdef": "pred"}
    with pytest.raises(ValueError, match="needs its answer and rule"):
        trained_answers([Task(PERM, (("abc", "abd"),), "cde", transformation="succ")])
    with pytest.raises(ValueError, match="needs its answer and rule"):
        trained_answers([Task(PERM, (("abc", "abd"),), "cde", "cdf")])


def test_rows_are_split_by_trained_queries_and_answers_counted_in_order():
    pred = task("cdef", "adef", "pred")  # succ and extend_sequence trained this query in PERM
    fresh = task("ghij", "fhij", "pred")  # never trained in PERM
    rows = [
        (pred, "adef"),
        (pred, "cdeg"),
        (pred, "cdeg"),
        (pred, "cdefg"),
        (pred, "cdex"),
        (fresh, "fhij"),
        (fresh, "ghik"),  # succ's answer, never trained: a seen rule's
        (fresh, "ghix"),
        (task("cdef", "adef", "pred", copy=True), "cdeg"),  # copy rows are skipped
        (task("mnnop", "mnoq", "rr_succ"), "mnop"),
        (task("cdef", "fedc", "reverse"), "cdeg"),  # a new rule on a trained query
    ]
    tasks, predictions = [t for t, _ in rows], [p for _, p in rows]
    result = training_recall(tasks, predictions, trained_answers(TRAIN))
    assert list(result) == ["pred", "rr_succ", "reverse"]  # the paper's order
    assert [counts.rule for counts in result.values()] == list(result)
    counts = result["pred"]
    assert counts.counts == {
        "trained": {"correct": 1, "recalled": 3, "seen_rule": 0, "other": 1},
        "untrained": {"correct": 1, "recalled": 0, "seen_rule": 1, "other": 1},
    }
    assert counts.recalled_from == {"succ": 2, "extend_sequence": 1}
    assert counts.trained_by == {"succ": 5, "extend_sequence": 5}
    assert counts.percent("trained", "recalled") == 60.0
    assert counts.leaked == 0
    assert result["rr_succ"].recalled_from == {"remove_redundant": 1}
    totals = recall_totals(result)
    assert [(group, counts.rule) for group, counts in totals.items()] == [("seen", "seen"), ("new", "new")]
    assert totals["seen"].rows("trained") == 6 and totals["seen"].counts["trained"]["recalled"] == 4
    assert totals["new"].counts["trained"]["recalled"] == 1
    assert totals["new"].recalled_from == {"succ": 1}
    assert totals["seen"].trained_by == {"succ": 5, "extend_sequence": 5, "remove_redundant": 1}
    as_dict = counts.to_dict()
    assert as_dict["trained"]["rows"] == 5 and as_dict["trained"]["percent_other"] == 20.0
    assert as_dict["trained_by"] == {"extend_sequence": 5, "succ": 5} and as_dict["leaked"] == 0
    assert as_dict["untrained"]["percent_seen_rule"] == pytest.approx(100 / 3)


def test_seen_rule_answers_are_a_familys_siblings_or_the_window_rules_on_a_run_of_the_alphabet():
    assert seen_rule_answers(task("cdef", "adef", "pred")) == {"extend_sequence": "cdefg", "succ": "cdeg"}
    assert seen_rule_answers(task("cdef", "fghi", "shift")) == {
        "extend_sequence": "cdefg",
        "succ": "cdeg",
        "pred": "adef",  # before c comes a in PERM
    }
    assert seen_rule_answers(task("bac", "cab", "reverse")) == {
        "extend_sequence": "bacd",
        "succ": "bad",
    }  # b starts PERM
    assert seen_rule_answers(task("cdfe", "cdef", "sort")) == {}  # not a run of the alphabet
    assert seen_rule_answers(task("ccddee", "ccddeeff", "extend_group")) == {}


def test_a_new_rule_answered_with_an_untrained_window_rules_answer_is_a_seen_rule():
    shift = task("ghij", "klmn", "shift")
    result = training_recall([shift, shift, shift], ["ghik", "fhij", "ghij"], {})
    assert result["shift"].counts["untrained"] == {"correct": 0, "recalled": 0, "seen_rule": 2, "other": 1}


def test_a_row_whose_own_answer_was_trained_is_a_leak_not_a_trained_query():
    leak = task("cdef", "cdeg", "succ")
    result = training_recall([leak, leak], ["cdeg", "cdeg"], trained_answers(TRAIN[:1]))
    assert result["succ"].leaked == 2
    assert result["succ"].counts["untrained"]["correct"] == 2
    assert result["succ"].trained_by == {}
    both = training_recall([leak], ["cdeg"], trained_answers(TRAIN[:2]))  # extend_sequence trained the query too
    assert both["succ"].leaked == 1 and both["succ"].rows("trained") == 1
    assert recall_totals(result | {"pred": both["succ"]})["seen"].leaked == 3


def test_counts_add_up_rule_by_rule():
    first, second = RecallCounts("a"), RecallCounts("b")
    first.counts["trained"]["recalled"], second.counts["trained"]["recalled"] = 2, 3
    first.trained_by, second.trained_by = {"succ": 2}, {"succ": 3, "pred": 1}
    first.recalled_from, second.recalled_from = {"succ": 2}, {"succ": 1}
    first.leaked, second.leaked = 1, 2
    first.add(second)
    assert first.counts["trained"]["recalled"] == 5 and first.rule == "a"
    assert first.trained_by == {"succ": 5, "pred": 1} and first.recalled_from == {"succ": 3}
    assert first.leaked == 3
    assert first.to_dict()["recalled_from"] == {"succ": 3} and first.to_dict()["trained_by"] == {"pred": 1, "succ": 5}


def test_bad_input_raises():
    with pytest.raises(ValueError, match="2 tasks but 1 predictions"):
        training_recall([task("cdef", "adef", "pred")] * 2, ["adef"], {})
    with pytest.raises(ValueError, match="needs its answer and rule"):
        training_recall([Task(PERM, (("abc", "abd"),), "cde", "cdf")], ["cdf"], {})


def test_the_split_by_problem_string_never_leaks_and_shares_queries_between_rules(tiny):
    index = trained_answers(tiny.splits["train"])
    val = [t for t in tiny.splits["val"] if not t.is_copy]
    result = training_recall(val, [t.answer for t in val], index)
    assert sum(counts.leaked for counts in result.values()) == 0
    assert sum(counts.rows("trained") for counts in result.values()) > 0  # queries do recur under other rules
    assert all(counts.percent(kind, "correct") in (None, 100.0) for counts in result.values() for kind in ROW_KINDS)


def test_the_figure_has_a_panel_per_group_with_a_bar_per_model_and_row_kind():
    result = training_recall([task("cdef", "adef", "pred")], ["cdeg"], trained_answers(TRAIN))
    figure = recall_figure({"m1": recall_totals(result), "m2": result}, "t")
    assert [a.text for a in figure.layout.annotations] == ["seen", "new", "pred"]  # panels, first appearance
    assert [bar.name for bar in figure.data] == list(OUTCOMES) * 3
    assert [bar.showlegend for bar in figure.data] == [True] * 4 + [False] * 8  # one legend entry per outcome
    seen_recalled, pred_recalled = figure.data[OUTCOMES.index("recalled")], figure.data[8 + OUTCOMES.index("recalled")]
    assert list(seen_recalled.x[0]) == ["m1", "m1"]
    assert list(seen_recalled.x[1]) == ["trained", "untrained"]
    assert list(seen_recalled.y) == [100.0, None]
    assert [list(pair) for pair in seen_recalled.customdata] == [[1, 1], [0, 0]]  # (rows with the outcome, rows)
    assert list(pred_recalled.x[0]) == ["m2", "m2"]  # only the models that have the group
    layout = figure.layout
    assert layout.barmode == "stack" and layout.title.text == "t" and layout.legend.title.text == "answer"
    assert [layout[f"yaxis{i}"].range for i in ("", 2, 3)] == [(0, 100)] * 3
    assert [layout[f"yaxis{i}"].title.text for i in ("", 2, 3)] == ["% of rows"] * 3
    assert (layout.xaxis.matches, layout.xaxis2.matches, layout.xaxis.domain) == ("x3", "x3", (0.0, 1.0))  # shared
    for bar in figure.data:
        assert bar.marker.color == OUTCOME_COLOURS[bar.name] and bar.legendgroup == bar.name
        assert bar.hovertemplate.endswith(
            f"{bar.name}: %{{y:.1f}}% (%{{customdata[0]}} of %{{customdata[1]}} rows)<extra></extra>"
        )
    assert recall_figure({"m1": result}, "t").layout.height < layout.height  # taller with more panels


def test_the_figure_draws_the_kinds_asked_for_and_refuses_others():
    result = training_recall([task("cdef", "adef", "pred")], ["cdeg"], trained_answers(TRAIN))
    figure = recall_figure({"m": result}, "t", kinds=("trained",))
    assert list(figure.data[0].x[1]) == ["trained"]
    with pytest.raises(ValueError, match=r"unknown row kind\(s\) \['seen'\]; allowed: \['trained', 'untrained'\]"):
        recall_figure({"m": result}, "t", kinds=("seen",))
    with pytest.raises(ValueError, match="no groups to draw"):
        recall_figure({"m": {}}, "t")
