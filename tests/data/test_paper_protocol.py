"""The paper's new-alphabet test split: 21 alphabets (the standard one added), split by problem string, the
test split down-sampled to train/8; several draws over one set of problems and pairings."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lsa_interp.data import PRESETS, STANDARD_ALPHABET, make_alphabets
from lsa_interp.data.paper_protocol import paper_new_alphabet_draws
from lsa_interp.data.problems import build_problems, pair_examples

CONFIG = PRESETS["copy-20"]
NEW = make_alphabets(20, 1_000_003, exclude=make_alphabets(20, 0), include_standard=False)


@pytest.fixture(scope="module")
def protocol():
    return paper_new_alphabet_draws(CONFIG, NEW, draws=3)


def _seen_rule_rows() -> int:
    """Rows of the seen rules in the whole 21-alphabet set (what the train split takes 80% of)."""
    table = build_problems([*NEW, STANDARD_ALPHABET], CONFIG.eval_transformations, CONFIG.window_lengths, "count")
    rows = pair_examples(table, CONFIG.new_alphabet_reshuffle, CONFIG.n_shots, np.random.default_rng(0))
    seen = np.isin(np.asarray(table.transformations), CONFIG.train_transformations)
    return int(seen[table.transformation[rows.query]].sum())


def test_a_draw_is_a_tenth_of_the_seen_rule_rows_with_every_rule_and_the_standard_alphabet(protocol):
    tenth = 0.1 * _seen_rule_rows()  # train (80% of them) / 8
    for index in protocol.draws:
        tasks = [protocol.tasks[i] for i in index]
        assert abs(len(tasks) / tenth - 1) < 0.05
        assert {t.transformation for t in tasks} == set(CONFIG.eval_transformations)
        alphabets = Counter(t.alphabet for t in tasks)
        assert set(alphabets) == {*NEW, STANDARD_ALPHABET}
        assert 0.02 < alphabets[STANDARD_ALPHABET] / len(tasks) < 0.08  # about one alphabet in 21
        assert not any(t.is_copy for t in tasks)


def test_draws_differ_and_index_the_union_once_each(protocol):
    assert len(protocol.draws) == 3
    assert all(len(set(index.tolist())) == len(index) for index in protocol.draws)
    union = set(np.concatenate(protocol.draws).tolist())
    assert union == set(range(len(protocol.tasks)))
    problems = [{protocol.tasks[i].query for i in index} for index in protocol.draws]
    assert problems[0] != problems[1] and problems[1] != problems[2]


def test_the_same_seed_gives_the_same_draws_and_another_seed_others(protocol):
    again = paper_new_alphabet_draws(CONFIG, NEW, draws=1)
    assert again.tasks == [protocol.tasks[i] for i in protocol.draws[0]]
    other = paper_new_alphabet_draws(CONFIG, NEW, draws=1, seed=1)
    assert other.tasks != again.tasks


@pytest.mark.parametrize(
    ("draws", "alphabets", "message"),
    [(0, NEW, "draws must be at least 1"), (1, [*NEW, STANDARD_ALPHABET], "must not hold the standard alphabet")],
)
def test_bad_arguments_are_refused(draws, alphabets, message):
    with pytest.raises(ValueError, match=message):
        paper_new_alphabet_draws(CONFIG, alphabets, draws)


def _query_of_each_answer(tasks) -> dict[tuple[str, str | None, str], str]:
    """(alphabet, rule, answer) -> query over every problem a set of tasks shows, its examples included."""
    return {
        (t.alphabet, t.transformation, answer): query
        for t in tasks
        for query, answer in (*t.examples, (t.query, t.answer))
    }


def test_the_seed_also_draws_the_random_parts_of_the_problems(protocol):
    """A sort problem's answer is its window; its query, the window with two letters swapped, is the random part."""
    zero = _query_of_each_answer(protocol.tasks)
    one = _query_of_each_answer(paper_new_alphabet_draws(CONFIG, NEW, draws=1, seed=1).tasks)
    shared = [key for key in zero.keys() & one.keys() if key[1] == "sort"]
    assert len(shared) > 100
    assert sum(zero[key] != one[key] for key in shared) > len(shared) / 2
