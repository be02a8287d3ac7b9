"""The problem-string split (80/10/10 of unique problems, one string in one split) and down-sampling."""

from __future__ import annotations

import numpy as np
import pytest

from lsa_interp.data import STANDARD_ALPHABET
from lsa_interp.data.problems import Rows, build_problems, pair_examples
from lsa_interp.data.splits import (
    SPLIT_NAMES,
    assign_problem_splits,
    downsample,
    downsample_indices,
    select_splits,
    split_row_indices,
)

SWAP_YZ = STANDARD_ALPHABET[:24] + "zy"  # shares every problem string of a..w with the standard alphabet


@pytest.fixture(scope="module")
def table():
    return build_problems([STANDARD_ALPHABET, SWAP_YZ], ("succ", "reverse", "sort"), (3, 4), "s")


def test_unique_problem_strings_are_cut_at_the_fractions(table):
    split = assign_problem_splits(table, (0.8, 0.1, 0.1), np.random.default_rng(0))
    keys = table.keys()
    unique = {k: s for k, s in zip(keys, split.tolist())}
    assert all(unique[k] == s for k, s in zip(keys, split.tolist()))  # one string, one split
    n = len(unique)
    counts = np.bincount(list(unique.values()), minlength=3).tolist()
    assert counts == [round(0.8 * n), round(0.8 * n) + round(0.1 * n) - round(0.8 * n), n - counts[0] - counts[1]]
    assert counts[1] == round(0.1 * n)
    assert split.dtype == np.int8 and len(split) == len(table)


def test_other_fractions_and_seeds(table):
    n = len(set(table.keys()))
    half = assign_problem_splits(table, (0.5, 0.25, 0.25), np.random.default_rng(0))
    unique = dict(zip(table.keys(), half.tolist()))
    assert np.bincount(list(unique.values()), minlength=3).tolist()[:2] == [round(0.5 * n), round(0.25 * n)]
    other = assign_problem_splits(table, (0.5, 0.25, 0.25), np.random.default_rng(1))
    assert (other != half).any()
    everything_train = assign_problem_splits(table, (1.0, 0.0, 0.0), np.random.default_rng(0))
    assert (everything_train == 0).all()
    nothing_train = assign_problem_splits(table, (0.0, 0.0, 1.0), np.random.default_rng(0))
    assert (nothing_train == 2).all()


def test_select_splits_keeps_rows_whose_query_is_in_the_split_and_whose_rule_is_allowed(table):
    problem_split = assign_problem_splits(table, (0.6, 0.2, 0.2), np.random.default_rng(0))
    rows = pair_examples(table, 1, 1, np.random.default_rng(0))
    allowed = {"train": ("succ",), "val": ("succ", "reverse"), "test": ("sort", "succ", "reverse")}
    out = select_splits(rows, table, problem_split, allowed)
    assert list(out) == list(SPLIT_NAMES)
    for split_id, name in enumerate(SPLIT_NAMES):
        rules = {table.transformations[t] for t in table.transformation[out[name].query]}
        assert rules == set(allowed[name])
        assert (problem_split[out[name].query] == split_id).all()
        expected = [
            q
            for q in rows.query
            if problem_split[q] == split_id and table.transformations[table.transformation[q]] in allowed[name]
        ]
        assert out[name].query.tolist() == expected


def test_downsample_keeps_order_and_all_rows_when_not_more():
    rows = Rows(np.arange(10) * 3, np.arange(10)[:, None], np.zeros(10, dtype=bool))
    assert downsample(rows, 10, np.random.default_rng(0)) is rows
    assert downsample(rows, 50, np.random.default_rng(0)) is rows
    small = downsample(rows, 4, np.random.default_rng(0))
    assert len(small) == 4 and small.query.tolist() == sorted(small.query.tolist())
    assert len(set(small.query.tolist())) == 4 and set(small.query.tolist()) <= set(rows.query.tolist())
    picks = {tuple(downsample(rows, 9, np.random.default_rng(s)).query.tolist()) for s in range(20)}
    assert len(picks) > 3  # a random subset, not always the first rows
    assert all(len(set(p)) == 9 for p in picks)  # drawn without replacement: no row twice


def test_split_row_indices_point_at_the_rows_select_splits_returns(table):
    problem_split = assign_problem_splits(table, (0.6, 0.2, 0.2), np.random.default_rng(3))
    rows = pair_examples(table, 2, 1, np.random.default_rng(3))
    allowed = {"train": ("succ",), "val": ("succ", "reverse"), "test": ("sort", "reverse")}
    index = split_row_indices(rows, table, problem_split, allowed)
    selected = select_splits(rows, table, problem_split, allowed)
    for split_id, name in enumerate(SPLIT_NAMES):
        expected = [
            i
            for i, q in enumerate(rows.query.tolist())
            if problem_split[q] == split_id and table.transformations[table.transformation[q]] in allowed[name]
        ]
        assert expected and index[name].tolist() == expected  # positions in rows (a query recurs across reshuffles)
        assert (rows.examples[index[name]] == selected[name].examples).all()
        assert (rows.query[index[name]] == selected[name].query).all()


def test_downsample_indices_draw_what_downsample_keeps():
    rows = Rows(np.arange(30) * 7, np.arange(30)[:, None], np.zeros(30, dtype=bool))
    picked = downsample_indices(30, 11, np.random.default_rng(5))
    assert (downsample(rows, 11, np.random.default_rng(5)).query == rows.query[picked]).all()
    assert downsample_indices(4, 11, np.random.default_rng(5)).tolist() == [0, 1, 2, 3]
    draws = [downsample_indices(30, 11, np.random.default_rng(seed)).tolist() for seed in range(20)]
    assert all(draw == sorted(set(draw)) and len(draw) == 11 and 0 <= draw[0] and draw[-1] < 30 for draw in draws)
    assert len({tuple(draw) for draw in draws}) > 10
