"""Analysis tasks: rule tasks and minimal pairs are correct, distinct and reproducible."""

from __future__ import annotations

import hashlib

import pytest

from lsa_interp.analysis import prompts
from lsa_interp.analysis.prompts import (
    analysis_alphabets,
    changed_place_pairs,
    minimal_pairs,
    other_example_tasks,
    paper_prompts,
    rule_tasks,
)
from lsa_interp.data.alphabets import make_alphabets
from lsa_interp.data.task import STANDARD_ALPHABET, Task
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


def test_a_seed_draws_the_same_tasks_it_always_did():
    """The analyses' numbers are reproducible across versions only if the default seed's draws stay put."""
    assert [str(t) for t in rule_tasks("succ", 3)] == [
        f"{STANDARD_ALPHABET} | uvw > uvx | stu > stv",
        f"{STANDARD_ALPHABET} | fghij > fghik | uvwxy > uvwxz",
        f"{STANDARD_ALPHABET} | rstuv > rstuw | cdefg > cdefh",
    ]
    pairs = minimal_pairs("remove_redundant", "rr_succ", 2)  # rules whose problems draw from their own seed
    assert [(str(p.source), str(p.target)) for p in pairs] == [
        (
            f"{STANDARD_ALPHABET} | defgghi > defghi | stuvvwx > stuvwx",
            f"{STANDARD_ALPHABET} | defgghi > defghj | stuvvwx > stuvwy",
        ),
        (f"{STANDARD_ALPHABET} | rsttu > rstu | ffghi > fghi", f"{STANDARD_ALPHABET} | rsttu > rstv | ffghi > fghj"),
    ]
    assert [(p.source.transformation, p.target.transformation) for p in pairs] == [("remove_redundant", "rr_succ")] * 2
    assert [p.target.examples[0][1] for p in minimal_pairs("succ", "pred", 2)] == ["oqrstuv", "prstu"]
    many = "\n".join(f"{p.source} {p.target.examples[0][1]}" for p in minimal_pairs("succ", "pred", 60))
    assert hashlib.sha256(many.encode()).hexdigest()[:16] == "7a7cda1f6593b0c7"  # windows drawn past the first
    assert [t.examples[0][0] for t in paper_prompts("pred", 3)] == ["ghi", "hij", "klm"]
    assert [t.query for t in paper_prompts("pred", 2, fixed_query=False)] == ["bcd", "klm"]
    assert [(str(first), str(last)) for first, last in changed_place_pairs(2)] == [
        (f"{STANDARD_ALPHABET} | gde > cde | uwx > vwx", f"{STANDARD_ALPHABET} | cdg > cde | uwx > vwx"),
        (f"{STANDARD_ALPHABET} | ovw > uvw | jlm > klm", f"{STANDARD_ALPHABET} | uvo > uvw | jlm > klm"),
    ]


def test_permuted_alphabets_follow_the_seed():
    for seed in (0, 1):
        pool = set(analysis_alphabets("permuted", seed))
        assert {t.alphabet for t in rule_tasks("succ", 3, seed=seed, alphabets="permuted")} <= pool
        assert {p.source.alphabet for p in minimal_pairs("succ", "pred", 3, seed=seed, alphabets="permuted")} <= pool


_PAIR = [([0, 1, 2], [0, 1, 3]), ([5, 6, 7], [5, 6, 8]), ([0, 1, 2], [0, 0, 2]), ([5, 6, 7], [4, 6, 7])]
"""source example, source query, target example, target query: the same inputs, different outputs."""


def _counting(monkeypatch, answers):
    """Replace the problem builder by one that returns ``answers`` in turn and then None; returns its call log."""
    calls, queue = [], list(answers)
    monkeypatch.setattr(prompts, "_problem", lambda *args: calls.append(args) or (queue.pop(0) if queue else None))
    return calls


def test_the_draws_give_up_after_a_run_of_stale_tries(monkeypatch):
    monkeypatch.setattr(prompts, "_STALE_TRIES", 5)
    calls = _counting(monkeypatch, [])
    with pytest.raises(ValueError, match="only 0 distinct succ tasks"):
        rule_tasks("succ", 1)
    assert len(calls) == 2 * 5  # two problems a try
    calls = _counting(monkeypatch, _PAIR[:2])  # a task on the first try restarts the count
    with pytest.raises(ValueError, match="only 1 distinct succ tasks"):
        rule_tasks("succ", 2)
    assert len(calls) == 2 * (1 + 5)
    calls = _counting(monkeypatch, [])
    with pytest.raises(ValueError, match="never give the same example input"):
        minimal_pairs("succ", "pred", 1)
    assert len(calls) == 4 * 5  # two problems of each rule a try
    calls = _counting(monkeypatch, _PAIR)  # a pair on the first try restarts the count
    assert len(minimal_pairs("succ", "pred", 2, at_most=True)) == 1 and len(calls) == 4 * (1 + 5)


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({2: ([0, 1, 3], [0, 0, 2])}, id="the example inputs differ"),
        pytest.param({3: ([5, 6, 8], [4, 6, 7])}, id="the query inputs differ"),
        pytest.param({2: ([0, 1, 2], [0, 1, 3])}, id="the example outputs agree"),
        pytest.param({3: ([5, 6, 7], [5, 6, 8])}, id="the answers agree"),
        pytest.param({1: _PAIR[0], 3: _PAIR[2]}, id="the example is the query"),
    ],
)
def test_a_pair_needs_the_same_inputs_and_other_outputs(monkeypatch, changed):
    monkeypatch.setattr(prompts, "_STALE_TRIES", 1)
    _counting(monkeypatch, [changed.get(i, problem) for i, problem in enumerate(_PAIR)])
    with pytest.raises(ValueError, match="never give the same"):
        minimal_pairs("succ", "pred", 1)
    _counting(monkeypatch, _PAIR)
    assert minimal_pairs("succ", "pred", 1)[0].target.examples == (("abc", "aac"),)


def test_permuted_alphabets_come_in_fours_from_their_documented_seed():
    training = make_alphabets(400, seed=0)
    drawn = make_alphabets(20, seed=10_001, exclude=training, include_standard=False)
    assert analysis_alphabets("permuted", seed=1) == drawn != analysis_alphabets("permuted")
    assert analysis_alphabets("permuted") == analysis_alphabets("permuted", seed=0, n=20)
    assert len(analysis_alphabets("permuted", n=6)) == len(analysis_alphabets("permuted", n=3)) == 4
    assert analysis_alphabets((STANDARD_ALPHABET,)) == [STANDARD_ALPHABET]


def test_changed_place_pairs_differ_only_in_which_example_letter_is_wrong():
    pairs = changed_place_pairs(200, seed=3)
    assert len(set(pairs)) == 200 and changed_place_pairs(200, seed=3) == pairs
    assert changed_place_pairs(20, seed=4) != pairs[:20]
    for first, last in pairs:
        (first_in, window), (last_in, last_out) = first.examples[0], last.examples[0]
        assert first.alphabet == last.alphabet == STANDARD_ALPHABET and window == last_out and len(window) == 3
        assert STANDARD_ALPHABET.index(window[0]) + 2 == STANDARD_ALPHABET.index(window[2])  # a window, in order
        assert first_in[1:] == window[1:] and last_in[:-1] == window[:-1] and first_in[0] == last_in[-1]
        assert first_in[0] not in window  # the wrong letter is outside the window
        assert (first.query, first.answer) == (last.query, last.answer)
        assert first.transformation == last.transformation == "fix_alphabetic_seq"
        assert first.answer in solve(STANDARD_ALPHABET, "fix_alphabetic_seq", first.query)
        for task in (first, last):
            assert window in solve(STANDARD_ALPHABET, "fix_alphabetic_seq", task.examples[0][0])
        assert set(first_in + window) == set(last_in + window)  # the same letters in both prompts
        assert not set(first_in + window) & set(first.query + first.answer)


def test_changed_place_pairs_take_the_window_length_and_refuse_what_cannot_exist():
    pairs = changed_place_pairs(5, seed=0, length=5)
    assert all(len(first.query) == len(first.examples[0][1]) == 5 for first, _ in pairs)
    shortest = changed_place_pairs(3, seed=0, length=2)  # the shortest window allowed: ``lc > bc`` and ``bl > bc``
    assert [(len(first.examples[0][1]), len(last.answer)) for first, last in shortest] == [(2, 2)] * 3
    longest = changed_place_pairs(2, seed=0, length=12)  # 13 letters each for the example and the query: all 26
    assert all(
        set(f.examples[0][0] + f.examples[0][1] + f.query + f.answer) == set(STANDARD_ALPHABET) for f, _ in longest
    )
    with pytest.raises(ValueError, match=r"windows of 13 letters leave no room .*; use 2\.\.12$"):
        changed_place_pairs(1, length=13)
    with pytest.raises(ValueError, match="windows of 1 letters leave no room"):
        changed_place_pairs(1, length=1)
    with pytest.raises(ValueError, match=r"only \d+ distinct changed-place pairs of 12 letters exist, 10000 asked for"):
        changed_place_pairs(10_000, length=12)


def test_changed_place_pairs_draw_windows_up_to_the_alphabets_end():
    """Every window start is drawn for the example and for the query, the last (``xyz``) included."""
    pairs = changed_place_pairs(200, seed=3)
    starts = lambda windows: {STANDARD_ALPHABET.index(window[0]) for window in windows}
    every_start = set(range(len(STANDARD_ALPHABET) - 2))  # a 3-letter window starts at a..x
    assert starts(first.examples[0][1] for first, _ in pairs) == every_start
    assert starts(first.answer for first, _ in pairs) == every_start


def test_changed_place_pairs_give_up_after_a_run_of_stale_tries(monkeypatch):
    """A try whose query shares a letter with the example is stale (here a query of every letter); five in a row end
    the draws, and a new pair (here on the first try, with a query of no letters) restarts the count."""
    monkeypatch.setattr(prompts, "_STALE_TRIES", 5)
    every = (list(range(len(STANDARD_ALPHABET))), [])
    calls = []
    monkeypatch.setattr(prompts, "_problem", lambda *args: calls.append(args) or every)
    with pytest.raises(ValueError, match="only 0 distinct changed-place pairs"):
        changed_place_pairs(1)
    assert len(calls) == 5  # one query a try
    calls.clear()
    monkeypatch.setattr(
        prompts, "_problem", lambda *args: calls.append(args) or (every if len(calls) > 1 else ([], []))
    )
    with pytest.raises(ValueError, match="only 1 distinct changed-place pairs"):
        changed_place_pairs(2)
    assert len(calls) == 1 + 5


def test_other_example_tasks_keep_rule_and_query_and_share_no_letter():
    targets = [p.target for p in minimal_pairs("pred", "succ", 6, lengths=(3,), at_most=True)]
    donors = other_example_tasks(targets)
    for donor, target in zip(donors, targets, strict=True):
        assert (donor.alphabet, donor.query, donor.answer) == (target.alphabet, target.query, target.answer)
        assert donor.transformation == target.transformation == "succ"  # a label outside Task equality
        assert donor.examples != target.examples and donor.examples in [t.examples for t in targets]
        assert not (set(donor.query) | set(donor.answer)) & set("".join(donor.examples[0]))
    many = [p.target for p in minimal_pairs("pred", "succ", 100, lengths=(3,), at_most=True)]
    assert sum(t.examples == u.examples for t, u in zip(many, many[1:])) > 0  # neighbours that share an example
    assert all(d.examples != t.examples for d, t in zip(other_example_tasks(many), many, strict=True))
    lone = Task.parse("abcdefghijklmnopqrstuvwxyz | efg > efh | rst > rsu")
    clash = Task.parse("abcdefghijklmnopqrstuvwxyz | rst > rsu | efg > efh")  # each one's example is the other's query
    with pytest.raises(ValueError, match="no other example shares no letter"):
        other_example_tasks([lone, clash])


def test_other_example_tasks_take_the_next_fitting_example_cyclically():
    """Each target takes the example of the first target after it (wrapping round) whose example differs from its own
    and shares no letter with its query and answer: not the one before, and not the one after the next."""
    tasks = [
        Task.parse(f"{STANDARD_ALPHABET} | {example} | bcd > bce", transformation="succ")
        for example in ("ghi > ghj", "mno > mnp", "stu > stv", "wxy > wxz")
    ]
    assert [d.examples[0][0] for d in other_example_tasks(tasks)] == ["mno", "stu", "wxy", "ghi"]
    clashing = Task.parse(f"{STANDARD_ALPHABET} | cde > cdf | bcd > bce")  # shares c and d with every query
    shared = Task.parse(f"{STANDARD_ALPHABET} | ghi > ghj | stu > stv")  # the first target's example, stu's query
    targets = [tasks[0], clashing, shared, tasks[2], tasks[1]]
    assert [d.examples[0][0] for d in other_example_tasks(targets)[::2]] == ["stu", "mno", "ghi"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lengths": ()}, r"window lengths must be in 2\.\.24 .*got \[\]"),
        ({"lengths": (0,)}, r"window lengths must be in 2\.\.24 .*got \[0\]"),
        ({"lengths": (3, 25)}, r"window lengths must be in 2\.\.24 .*got \[3, 25\]"),
        ({"alphabets": []}, r"^no alphabet given; give alphabets of all 26 letters a\.\.z, each once$"),
        ({"alphabets": ["abc"]}, r"^'abc' is not a permutation of a\.\.z; give alphabets of all 26 letters"),
        ({"alphabets": [STANDARD_ALPHABET[:-1] + "a"]}, r"'abcdefghijklmnopqrstuvwxya' is not a permutation"),
    ],
)
def test_rule_tasks_and_minimal_pairs_refuse_bad_lengths_and_alphabets(options, message):
    with pytest.raises(ValueError, match=message):
        rule_tasks("succ", 2, **options)
    with pytest.raises(ValueError, match=message):
        minimal_pairs("succ", "pred", 2, **options)


@pytest.mark.parametrize("rule", ["sort", "fix_interleave", "rr_interleave", "fix_alphabetic_seq"])
def test_the_length_bounds_themselves_make_tasks(rule):
    """The rules that cannot build a problem of 1 or 25 letters build one of 2 and of 24."""
    assert len(rule_tasks(rule, 1, lengths=(2,))) == len(rule_tasks(rule, 1, lengths=(24,))) == 1


def test_paper_prompts_take_the_shortest_window():
    assert paper_prompts("pred", 3, length=2)[0].query == "bc"


@pytest.mark.parametrize("length", [0, -1, 25])
def test_paper_prompts_refuse_a_length_outside_the_bounds(length):
    with pytest.raises(ValueError, match=rf"window lengths must be in 2\.\.24 .*got \[{length}\]"):
        paper_prompts("pred", 3, length=length)
