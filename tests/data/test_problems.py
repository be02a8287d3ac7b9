"""Problems and task rows: exact window counts per rule and length, letters read from the task's alphabet,
group numbering, example pairing inside a group, and the copy slot of copy rows."""

from __future__ import annotations

import numpy as np
import pytest

from lsa_interp.data import STANDARD_ALPHABET
from lsa_interp.data.problems import Rows, add_copy_rows, build_problems, pair_examples

PERM = "zyxwvutsrqponmlkjihgfedcba"

WINDOWS = {  # windows of length L a rule can handle (26 - L + 1 fit in the alphabet)
    "remove_redundant": lambda n: 27 - n,
    "reverse": lambda n: 27 - n,
    "succ": lambda n: 26 - n,  # one letter after the window
    "pred": lambda n: 26 - n,  # one letter before
    "extend_pred": lambda n: 25 - n,  # one before and one after
    "fix_pred_succ": lambda n: 25 - n,
    "extend_extend_succ": lambda n: 24 - n,  # three after
    "shift": lambda n: 27 - 2 * n,  # n after
}


@pytest.mark.parametrize("length", [3, 4, 7])
def test_exact_window_counts_per_rule_and_length(length):
    table = build_problems([STANDARD_ALPHABET], tuple(WINDOWS), (length,), "s")
    counts = np.bincount(table.transformation, minlength=len(WINDOWS)).tolist()
    assert counts == [count(length) for count in WINDOWS.values()]


def test_every_length_is_built_and_problems_read_letters_from_their_alphabet():
    table = build_problems([STANDARD_ALPHABET, PERM], ("succ", "reverse"), (3, 5), "s")
    per_alphabet = (26 - 3) + (26 - 5) + (27 - 3) + (27 - 5)
    assert len(table) == 2 * per_alphabet and len(table.keys()) == len(table)
    assert table.query[0] == "abc" and table.answer[0] == "abd" and table.keys()[0] == "abc>abd"
    assert table.query[per_alphabet] == "zyx" and table.answer[per_alphabet] == "zyw"
    assert {len(q) for q in table.query} == {3, 5}
    # the groups (alphabet, rule) are numbered in order and contiguous
    assert table.group.tolist() == sorted(table.group.tolist())
    assert np.unique(table.group).tolist() == [0, 1, 2, 3]
    assert (table.group == table.alphabet * 2 + table.transformation).all()
    assert table.alphabets == [STANDARD_ALPHABET, PERM] and table.transformations == ("succ", "reverse")


def test_problems_do_not_depend_on_the_other_alphabets_or_rules_generated():
    alone = build_problems([PERM], ("sort",), (4,), "s")
    together = build_problems([STANDARD_ALPHABET, PERM], ("succ", "sort"), (4,), "s")
    mask = (together.alphabet == 1) & (together.transformation == 1)
    assert [q for q, m in zip(together.query, mask) if m] == alone.query
    other_stream = build_problems([PERM], ("sort",), (4,), "t")
    assert other_stream.query != alone.query and other_stream.answer == alone.answer


def test_the_problems_of_a_stream_never_change():
    """Datasets are rebuilt from (preset, seed): the random choices of a stream are fixed across versions."""
    table = build_problems([PERM], ("sort", "rr_interleave"), (4,), "problems/0")
    assert table.query[:3] == ["yzxw", "yvwx", "xwuv"] and table.answer[:3] == ["zyxw", "yxwv", "xwvu"]
    first_rr = int((table.transformation == 1).argmax())
    assert table.query[first_rr] == "zryrxrwrw" and table.answer[first_rr] == "zryrxrw"


def _table():
    return build_problems([STANDARD_ALPHABET, PERM], ("succ", "sort", "reverse"), (3, 4), "s")


@pytest.mark.parametrize("shots", [1, 2, 3])
def test_examples_come_from_the_querys_group_and_never_repeat_a_problem(shots):
    table = _table()
    rows = pair_examples(table, 3, shots, np.random.default_rng(0))
    assert rows.examples.shape == (len(rows), shots) and rows.is_copy.dtype == bool and not rows.is_copy.any()
    assert (table.group[rows.examples] == table.group[rows.query][:, None]).all()
    assert (rows.examples != rows.query[:, None]).all()
    for i in range(shots):
        for j in range(i + 1, shots):
            assert (rows.examples[:, i] != rows.examples[:, j]).all()
    # three reshuffles: every problem is a query about three times, minus the dropped rows
    assert 2.5 * len(table) < len(rows) <= 3 * len(table)
    assert set(rows.query.tolist()) == set(range(len(table)))


def test_one_shot_pairing_drops_only_self_pairs():
    table = _table()
    rows = pair_examples(table, 1, 1, np.random.default_rng(4))
    group_sizes = np.bincount(table.group)
    # each group is a random permutation: about one self pair per group is dropped, never many
    assert len(table) - len(group_sizes) * 4 < len(rows) < len(table)
    # the examples are one permutation of the problems: the kept rows' examples and the dropped queries (their own
    # examples) are every problem exactly once, so only rows whose example was their own query are dropped
    dropped = np.setdiff1d(np.arange(len(table)), rows.query)
    assert len(np.unique(rows.query)) == len(rows) and (rows.examples[:, 0] != rows.query).all()
    assert np.sort(np.concatenate([rows.examples[:, 0], dropped])).tolist() == list(range(len(table)))


@pytest.mark.parametrize("shots", [1, 2, 3])
def test_copy_rows_follow_their_row_and_put_the_query_in_a_random_slot(shots):
    rng = np.random.default_rng(0)
    n = 300
    rows = Rows(np.arange(n) + 1000, rng.integers(0, 999, (n, shots)), np.zeros(n, dtype=bool))
    out = add_copy_rows(rows, np.random.default_rng(1))
    assert len(out) == 2 * n and out.is_copy.tolist() == [False, True] * n
    assert (out.query[0::2] == rows.query).all() and (out.query[1::2] == rows.query).all()
    assert (out.examples[0::2] == rows.examples).all()
    copies, originals = out.examples[1::2], rows.examples
    slot = (copies == rows.query[:, None]).argmax(axis=1)
    assert ((copies == rows.query[:, None]).sum(axis=1) == 1).all()  # exactly one slot holds the query
    assert np.bincount(slot, minlength=shots).min() > n / shots / 2  # every slot is used, about equally
    others = np.ones_like(copies, dtype=bool)
    others[np.arange(n), slot] = False
    assert (copies[others] == originals[others]).all()  # the other examples are kept


def test_the_pairing_of_a_seed_never_changes():
    """Datasets are rebuilt from (preset, seed), and evaluation re-derives the val split: pairing is fixed."""
    table = build_problems([STANDARD_ALPHABET], ("succ", "reverse"), (3,), "s")
    rows = pair_examples(table, 1, 2, np.random.default_rng(0))
    assert rows.query[:4].tolist() == [0, 1, 2, 3] and rows.examples[:4].tolist() == [
        [11, 12],
        [3, 6],
        [20, 1],
        [13, 15],
    ]
    copies = add_copy_rows(rows, np.random.default_rng(0))
    assert copies.examples[:6].tolist() == [[11, 12], [11, 0], [3, 6], [3, 1], [20, 1], [20, 2]]
    assert copies.is_copy.dtype == bool and copies.query.dtype == rows.query.dtype


def test_rows_take_and_len():
    rows = Rows(np.array([5, 6, 7]), np.array([[1], [2], [3]]), np.array([False, True, False]))
    picked = rows.take(np.array([2, 0]))
    assert len(picked) == 2 and picked.query.tolist() == [7, 5] and picked.examples.tolist() == [[3], [1]]
    assert rows.take(rows.is_copy).query.tolist() == [6]
