"""The generated datasets against SPEC section 2: sizes, alphabets, splits, copy rows, determinism."""

from __future__ import annotations

import pytest

from lsa_interp.data import NEW, PAPER, PRESETS, SEEN, STANDARD_ALPHABET, generate_dataset, permutation_level
from lsa_interp.data.vocab import LETTERS
from tests.data.solver import solve

REFERENCE_TRAIN, REFERENCE_EVAL = 367_211, 45_901


def _problems(tasks):
    return {f"{t.query}>{t.answer}" for t in tasks}


def test_thirteen_presets():
    assert len(PRESETS) == 13
    assert {p.n_alphabets for p in PRESETS.values()} == {20, 40, 60, 80, 100, 140, 200, 400}
    assert [PRESETS[f"copy-20-{k}shot"].n_shots for k in (2, 3, 4, 5)] == [2, 3, 4, 5]


def test_copy20_sizes_match_the_reference(copy20):
    sizes = copy20.sizes()
    assert sizes["train"] == pytest.approx(REFERENCE_TRAIN, rel=0.03)
    assert sizes["val"] == sizes["test"] == sizes["train"] // 8
    assert sizes["val"] == pytest.approx(REFERENCE_EVAL, rel=0.03)
    assert len(copy20.train_alphabets) == 21 and STANDARD_ALPHABET in copy20.train_alphabets
    assert sum(t.is_copy for t in copy20.splits["train"]) * 2 == sizes["train"]


def test_nocopy20_has_copy20_sizes_and_no_copy_rows(copy20, nocopy20):
    assert nocopy20.sizes()["train"] == pytest.approx(copy20.sizes()["train"], rel=0.001)
    assert nocopy20.sizes()["val"] == pytest.approx(copy20.sizes()["val"], rel=0.001)
    assert not any(t.is_copy for split in ("train", "val", "test") for t in nocopy20.splits[split])
    assert nocopy20.train_alphabets == copy20.train_alphabets


@pytest.mark.slow
def test_copy200_has_201_alphabets_at_copy20_sizes(copy20, copy200):
    assert len(copy200.train_alphabets) == 201
    assert {t.alphabet for t in copy200.splits["train"]} == set(copy200.train_alphabets)
    for split in ("train", "val", "test"):
        assert copy200.sizes()[split] == copy20.sizes()[split]
    assert sum(permutation_level(a) == 20 for a in copy200.train_alphabets) == 50


def test_new_alphabet_test_set_shares_no_alphabet_with_training(copy20):
    new = copy20.splits["test_new_alphabets"]
    assert {t.alphabet for t in new} == set(copy20.new_alphabets)
    assert len(copy20.new_alphabets) == 20 and not set(copy20.new_alphabets) & set(copy20.train_alphabets)
    assert {t.transformation for t in new} == set(PAPER)
    assert not any(t.is_copy for t in new)


def test_splits_are_disjoint_by_problem_string(copy20):
    train, val, test = (_problems(copy20.splits[s]) for s in ("train", "val", "test"))
    assert not train & val and not train & test and not val & test


def test_train_keeps_seen_rules_and_eval_keeps_all(copy20):
    assert {t.transformation for t in copy20.splits["train"]} == set(SEEN)
    for split in ("val", "test"):
        assert {t.transformation for t in copy20.splits[split]} == set(PAPER)
        assert any(t.transformation in NEW for t in copy20.splits[split])


def test_examples_share_the_rule_and_alphabet_and_copies_are_exact(copy20):
    by_key = {}
    for t in copy20.splits["val"] + copy20.splits["train"][:50_000]:
        by_key.setdefault((t.alphabet, t.transformation), set()).add((t.query, t.answer))
    for t in copy20.splits["train"][:50_000]:
        ((ex_in, ex_out),) = t.examples
        if t.is_copy:
            assert (ex_in, ex_out) == (t.query, t.answer)
        else:
            assert (ex_in, ex_out) != (t.query, t.answer)
        assert ex_out in solve(t.alphabet, t.transformation, ex_in)


@pytest.mark.parametrize("split", ["train", "val", "test", "test_new_alphabets"])
def test_every_answer_rederived_by_the_independent_solver(copy20, split):
    tasks = copy20.splits[split]
    wrong = [t for t in tasks if t.answer not in solve(t.alphabet, t.transformation, t.query)]
    assert not wrong, f"{len(wrong)} wrong answers, e.g. {wrong[:3]}"


def test_same_seed_same_data_other_seed_other_data(copy20):
    again = generate_dataset(PRESETS["copy-20"], seed=0)
    for split, tasks in copy20.splits.items():
        assert again.splits[split] == tasks
        assert [t.transformation for t in again.splits[split][:1000]] == [t.transformation for t in tasks[:1000]]
    other = generate_dataset(PRESETS["copy-20"], seed=1)
    assert other.train_alphabets != copy20.train_alphabets


@pytest.mark.parametrize("shots", [2, 5])
def test_few_shot_presets(shots):
    config = PRESETS[f"copy-20-{shots}shot"]
    small = type(config)(**{**config.to_dict(), "window_lengths": (3, 4), "n_new_alphabets": 4})
    data = generate_dataset(small, seed=0)
    train = data.splits["train"]
    assert all(t.n_shots == shots for t in train)
    assert all(len({ex for ex in t.examples}) == shots for t in train)
    copies = [t for t in train if t.is_copy]
    assert len(copies) * 2 == len(train)
    assert all(sum(ex == (t.query, t.answer) for ex in t.examples) == 1 for t in copies)
    assert all((t.query, t.answer) not in t.examples for t in train if not t.is_copy)


def test_bad_seed():
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        generate_dataset(PRESETS["copy-20"], seed=-1)


def test_answers_use_the_tasks_alphabet(copy20):
    permuted = next(
        t
        for t in copy20.splits["val"]
        if t.alphabet != LETTERS
        and t.transformation == "succ"
        and t.alphabet.index(t.query[-1]) + 1 != LETTERS.index(t.query[-1]) + 1
    )
    assert permuted.answer[-1] == permuted.alphabet[permuted.alphabet.index(permuted.query[-1]) + 1]
