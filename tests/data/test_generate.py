"""The generated datasets against SPEC section 2: sizes, alphabets, splits, copy rows, determinism."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import pytest

import lsa_interp.data.generate as generate_module
from lsa_interp.data import (
    NEW,
    PAPER,
    PRESETS,
    SEEN,
    STANDARD_ALPHABET,
    DatasetConfig,
    Task,
    generate_dataset,
    permutation_level,
)
from lsa_interp.data.generate import split_sizes
from lsa_interp.data.problems import build_problems
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


SMALL = DatasetConfig(
    name="small", n_alphabets=4, window_lengths=(3,), n_reshuffle=2, n_new_alphabets=4, new_alphabet_reshuffle=1
)
# sha256 of each split of SMALL with seed 0 (`_digest`), taken on 2026-12-02. Every random stage draws from its own
# stream of the seed, so these change only when a stage changes what it draws: the shipped checkpoints' cards are
# re-checked on regenerated data, and a changed draw would move their numbers.
SMALL_DIGESTS = {
    "train": "7a9787a77c0c3f1ad49378b3b7eae0b936dd4df5b6c4a8593964fdef70383883",
    "val": "dc0c9719f2d50e38fb9d4110ccfb8cadefe178cbc6f107701ce1da2d5c66ea55",
    "test": "7a156ec14860e89d27beab1115f4f0dc50773aeb5b364464f8a01608075de778",
    "test_new_alphabets": "8a2235e0784e2d28616214c6b194fcfe805d8f19f7627c96779a50f5b5cb6ccf",
    "alphabets": "b0561276d771faaf3b34f4f6ef3d7b74efc9eace869f2d53c7a5fc1098a5ce19",
}


def _digest(items) -> str:
    rows = [[t.alphabet, t.examples, t.query, t.answer, t.transformation] if isinstance(t, Task) else t for t in items]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def _digests(data) -> dict[str, str]:
    return {**{name: _digest(tasks) for name, tasks in data.splits.items()},
            "alphabets": _digest([data.train_alphabets, data.new_alphabets])}  # fmt: skip


def test_a_seed_draws_the_same_data_it_always_did():
    data = generate_dataset(SMALL)  # the default seed is 0
    assert data.seed == 0 and _digests(data) == SMALL_DIGESTS


def test_configured_permutation_levels_make_both_alphabet_sets_and_the_new_ones_avoid_the_training_ones():
    """Only 325 alphabets swap exactly two letters: two independent draws of 40 share about five (40 x 40 / 325),
    so the new-alphabet set must be drawn around the training set's alphabets, not beside it."""
    config = DatasetConfig(name="swaps", n_alphabets=40, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=40,
                           new_alphabet_reshuffle=1, permutation_levels=(2,))  # fmt: skip
    data = generate_dataset(config, seed=0)
    permuted = [a for a in data.train_alphabets if a != STANDARD_ALPHABET]
    assert len(permuted) == len(data.new_alphabets) == 40
    assert {permutation_level(a) for a in permuted + data.new_alphabets} == {2}
    assert not set(data.new_alphabets) & set(data.train_alphabets)
    assert {t.alphabet for t in data.splits["test_new_alphabets"]} == set(data.new_alphabets)


def test_each_stage_reports_itself_once_in_order():
    """One message a stage, with its counts: a problem is paired twice (2 reshuffles; a pairing whose example is the
    query problem itself is dropped), and each pair is split with its copy row."""
    messages = []
    data = generate_dataset(SMALL, seed=0, progress=messages.append)
    problems = len(build_problems(data.train_alphabets, SMALL.eval_transformations, SMALL.window_lengths, "count"))
    assert messages[:2] == [
        f"building problems for 5 alphabets x {len(SMALL.eval_transformations)} rules",
        f"pairing {problems:,} problems with examples (2 reshuffles)",
    ]
    assert messages[3:] == ["building the new-alphabet test set (4 alphabets)", "building tasks"]
    rows = int(re.fullmatch(r"splitting ([\d,]+) rows by problem string", messages[2]).group(1).replace(",", ""))
    assert rows % 2 == 0 and 0.9 * 4 * problems < rows <= 4 * problems
    sized = []
    assert split_sizes(SMALL, 0, sized.append) == {k: v for k, v in data.sizes().items() if k != "test_new_alphabets"}
    assert sized == messages[:3]
    assert split_sizes(SMALL, 1) != split_sizes(SMALL, 0)


def test_a_dataset_matched_to_a_presets_size_takes_its_train_size_and_an_eighth_of_it_for_val_and_test(monkeypatch):
    monkeypatch.setitem(generate_module.PRESETS, "copy-20", SMALL)
    larger = DatasetConfig(**{**SMALL.to_dict(), "name": "larger", "n_alphabets": 8, "match_size_of": "copy-20"})
    messages = []
    data = generate_dataset(larger, seed=0, progress=messages.append)
    own = split_sizes(DatasetConfig(**{**larger.to_dict(), "match_size_of": None}), 0)["train"]
    target = split_sizes(SMALL, 0)["train"]
    assert own > target and data.sizes()["train"] == target
    assert data.sizes()["val"] == data.sizes()["test"] == target // 8
    assert f"down-sampling train from {own:,} to copy-20's {target:,} rows" in messages
    assert len({t.alphabet for t in data.splits["train"]}) == 9


def test_the_new_alphabet_set_pairs_each_problem_its_own_number_of_times_without_copies():
    for reshuffle in (1, 3):
        config = DatasetConfig(**{**SMALL.to_dict(), "new_alphabet_reshuffle": reshuffle})
        data = generate_dataset(config, seed=0)
        new = data.splits["test_new_alphabets"]
        assert len(data.new_alphabets) == 4 and STANDARD_ALPHABET not in data.new_alphabets
        assert not set(data.new_alphabets) & set(data.train_alphabets)
        problems = build_problems(data.new_alphabets, SMALL.eval_transformations, SMALL.window_lengths, "count")
        assert 0.9 * reshuffle * len(problems) < len(new) <= reshuffle * len(problems)
        assert not any(t.is_copy for t in new)
        per_problem = Counter((t.alphabet, t.query, t.answer) for t in new)
        assert max(per_problem.values()) == reshuffle


@pytest.mark.parametrize("seed", [1.5, "0", None])
def test_a_seed_that_is_not_an_integer_is_refused(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        generate_dataset(SMALL, seed=seed)
