"""`DatasetConfig`: the paper's 13 presets, every check of a config, and its dict form."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from lsa_interp.data.presets import DEFAULT_DATA_SEED, PRESETS, DatasetConfig, get_preset, trained_data_seed
from lsa_interp.data.transformations import PAPER, SEEN

FRACTIONS = "split_fractions must each lie between 0 and 1 (exclusive) and sum to 1"


def test_the_papers_thirteen_presets():
    assert list(PRESETS) == [
        "nocopy-20", "copy-20", "copy-40", "copy-60", "copy-80", "copy-100", "copy-140", "copy-200", "copy-400",
        "copy-20-2shot", "copy-20-3shot", "copy-20-4shot", "copy-20-5shot",
    ]  # fmt: skip
    base = PRESETS["copy-20"]
    assert (base.n_alphabets, base.copy, base.n_shots, base.n_reshuffle, base.match_size_of) == (20, True, 1, 10, None)
    assert (base.train_transformations, base.eval_transformations) == (SEEN, PAPER)
    nocopy = PRESETS["nocopy-20"]
    assert (nocopy.copy, nocopy.n_reshuffle, nocopy.match_size_of) == (False, 20, "copy-20")
    for n in (40, 60, 80, 100, 140, 200, 400):
        assert (PRESETS[f"copy-{n}"].n_alphabets, PRESETS[f"copy-{n}"].match_size_of) == (n, "copy-20")
    for k in (2, 3, 4, 5):
        shots = PRESETS[f"copy-20-{k}shot"]
        assert (shots.n_shots, shots.n_alphabets, shots.match_size_of) == (k, 20, None)
    assert all(config.name == name for name, config in PRESETS.items())
    assert get_preset("copy-200") is PRESETS["copy-200"]


def test_an_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="unknown preset 'copy-21'; choose one of: nocopy-20, copy-20, copy-40"):
        get_preset("copy-21")


def test_a_models_data_seed_is_the_recorded_one_else_the_trainers_default_never_its_own_seed():
    assert DEFAULT_DATA_SEED == 0
    assert trained_data_seed({"seed": 3, "data_seed": 5}) == 5
    assert trained_data_seed({"seed": 3, "data_seed": 0}) == 0
    assert trained_data_seed({"seed": 3}) == 0  # a stack's replicate 3 trains on the data seed 0 all the same
    assert trained_data_seed({"seed": 3, "data_seed": None}) == 0  # a snapshot whose dataset is gone
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match=rf"^the model's metadata records data_seed {re.escape(repr(bad))}; a "):
            trained_data_seed({"data_seed": bad})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_alphabets": 21}, "n_alphabets must be a multiple of 4"),
        (
            {"n_alphabets": 8, "permutation_levels": (2, 5, 10)},
            "n_alphabets must be a multiple of 3 (one share per level), got 8",
        ),
        ({"n_shots": 0}, "n_shots must be between 1 and 5, got 0"),
        ({"n_shots": 6}, "n_shots must be between 1 and 5, got 6"),
        ({"n_reshuffle": 0}, "n_reshuffle and new_alphabet_reshuffle must be at least 1"),
        ({"new_alphabet_reshuffle": 0}, "n_reshuffle and new_alphabet_reshuffle must be at least 1"),
        ({"train_transformations": ("succ", "nope")}, "unknown transformation(s) ['nope']"),
        ({"eval_transformations": ("nope",)}, "unknown transformation(s) ['nope']"),
        (
            {"train_transformations": (*SEEN, PAPER[-1]), "eval_transformations": SEEN},
            "train_transformations must be a subset of eval_transformations",
        ),
        ({"window_lengths": (2, 3)}, "window lengths must lie in 3..13, got (2, 3)"),
        ({"window_lengths": (3, 14)}, "window lengths must lie in 3..13, got (3, 14)"),
        ({"split_fractions": (0.8, 0.1, 0.2)}, f"{FRACTIONS}, got (0.8, 0.1, 0.2)"),
        ({"split_fractions": (1.0, 0.0, 0.0)}, f"{FRACTIONS}, got (1.0, 0.0, 0.0)"),
        ({"split_fractions": (1.1, -0.05, -0.05)}, f"{FRACTIONS}, got (1.1, -0.05, -0.05)"),
        ({"split_fractions": (float("nan"), 0.5, 0.5)}, f"{FRACTIONS}, got (nan, 0.5, 0.5)"),  # NaN passed
        ({"split_fractions": (0.5, 0.5, float("nan"))}, f"{FRACTIONS}, got (0.5, 0.5, nan)"),
        ({"split_fractions": (float("inf"), -float("inf"), 1.0)}, f"{FRACTIONS}, got (inf, -inf, 1.0)"),
        ({"split_fractions": (10**400, 0.5, 0.5)}, f"{FRACTIONS}, got (1000"),  # too large for a float
        (
            {"n_alphabets": 1304, "window_lengths": (3,), "n_reshuffle": 1},  # generating it drew alphabets forever
            "n_alphabets + n_new_alphabets must be at most 1300, the distinct alphabets permutation_levels "
            "(2, 5, 10, 20) can supply, got 1304 + 20",
        ),
        ({"n_alphabets": 1284}, "n_alphabets + n_new_alphabets must be at most 1300, "),
        ({"n_new_alphabets": 1284}, "n_alphabets + n_new_alphabets must be at most 1300, "),
        (
            {"n_alphabets": 8, "n_new_alphabets": 318, "permutation_levels": (2, 2)},
            "n_alphabets + n_new_alphabets must be at most 324, the distinct alphabets permutation_levels (2, 2) can "
            "supply, got 8 + 318",
        ),
        ({"n_new_alphabets": 21}, "n_new_alphabets must be a multiple of 4 (one share per level), got 21"),
        ({"match_size_of": "copy-21"}, "match_size_of must name a preset, got 'copy-21'"),
        ({"n_alphabets": -4}, "n_alphabets must be 0 or more (0: the standard alphabet only), got -4"),
        ({"eval_size_divisor": 0}, "eval_size_divisor must be at least 1, got 0"),
        ({"permutation_levels": (99, 100)}, "permutation_levels must lie in 2..26 (letters moved), got (99, 100)"),
        ({"permutation_levels": (2, 27)}, "permutation_levels must lie in 2..26 (letters moved), got (2, 27)"),
        ({"permutation_levels": (1, 26)}, "permutation_levels must lie in 2..26 (letters moved), got (1, 26)"),
    ],
)
def test_a_bad_config_is_refused_with_what_is_allowed(options, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        DatasetConfig(name="mine", **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": 3}, "name must be a string, got 3"),
        ({"copy": 1}, "copy must be true or false, got 1"),
        ({"match_size_of": 20}, "match_size_of must be a preset name, got 20"),
        ({"notes": None}, "notes must be a string, got None"),
        ({"train_transformations": "succ"}, "train_transformations must be a list of rule names, got 'succ'"),
        ({"train_transformations": ()}, "train_transformations must be a list of rule names, got ()"),
        ({"eval_transformations": ("succ", 1)}, "eval_transformations must be a list of rule names, got ('succ', 1)"),
        ({"window_lengths": "345"}, "window_lengths must be a list of integers, got '345'"),
        ({"window_lengths": (3, "4")}, "window_lengths must be a list of integers, got (3, '4')"),
        ({"permutation_levels": [2.0]}, "permutation_levels must be a list of integers, got [2.0]"),
        ({"split_fractions": (0.8, 0.2)}, "split_fractions must be three numbers, got (0.8, 0.2)"),
        ({"split_fractions": (0.8, "0.1", 0.1)}, "split_fractions must be three numbers, got (0.8, '0.1', 0.1)"),
        ({"n_alphabets": "a"}, "n_alphabets must be an integer, got 'a'"),
        ({"n_shots": True}, "n_shots must be an integer, got True"),
        ({"n_reshuffle": 1.5}, "n_reshuffle must be an integer, got 1.5"),
        ({"eval_size_divisor": "8"}, "eval_size_divisor must be an integer, got '8'"),
        ({"n_new_alphabets": None}, "n_new_alphabets must be an integer, got None"),
        ({"new_alphabet_reshuffle": 2.0}, "new_alphabet_reshuffle must be an integer, got 2.0"),
    ],
)
def test_values_of_the_wrong_type_are_refused_by_name(options, message):
    """A grid file's or manifest's values carry no types: each wrong one is named in a ValueError before a check of
    its value meets it (``n_alphabets = "a"`` failed as a TypeError of the arithmetic; ``n_shots = true`` passed as
    1). `lsa_interp.data.presets` is not under the test session's runtime type checker, so these calls reach it."""
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        DatasetConfig(**{"name": "mine", **options})


def test_the_edges_a_config_accepts():
    for options in (
        {"n_shots": 1},
        {"n_shots": 5},
        {"n_reshuffle": 1, "new_alphabet_reshuffle": 1},
        {"window_lengths": (3, 13)},
        {"split_fractions": (0.7, 0.2, 0.1)},  # sums to 1 only up to rounding
        {"train_transformations": PAPER},
        {"n_alphabets": 0},
        {"eval_size_divisor": 1, "n_new_alphabets": 1, "permutation_levels": (2,)},
        {"permutation_levels": (2, 26)},
        {"window_lengths": [3]},  # a list, as read from JSON or TOML, of one length
        {"match_size_of": "copy-200"},
        {"n_alphabets": 1280},  # with the 20 new alphabets, every alphabet with 2 letters moved
        {"n_alphabets": 300, "n_new_alphabets": 24, "permutation_levels": (2, 2)},
        {"split_fractions": (0.98, 0.01, 0.01)},
    ):
        DatasetConfig(name="mine", **options)


def test_the_dict_form_round_trips_through_json_and_refuses_unknown_keys():
    config = DatasetConfig(name="mine", n_alphabets=8, window_lengths=(3, 4), notes="for a test")
    data = json.loads(json.dumps(config.to_dict()))
    assert data["window_lengths"] == [3, 4] and data["name"] == "mine"
    again = DatasetConfig.from_dict(data)
    assert again == config and again.window_lengths == (3, 4) and again.notes == "for a test"
    known = re.escape(f"; known: {sorted(f.name for f in dataclasses.fields(DatasetConfig))}")
    with pytest.raises(ValueError, match=re.escape("unknown dataset config key(s): ['n_alphabet', 'shots']") + known):
        DatasetConfig.from_dict({"name": "mine", "n_alphabet": 8, "shots": 2})
    with pytest.raises(ValueError, match="^the dataset config lacks name$"):
        DatasetConfig.from_dict({"n_alphabets": 8})  # every other field has a default
    assert DatasetConfig.from_dict({"name": "mine"}) == DatasetConfig(name="mine")


def test_a_json_nan_fraction_is_refused_by_from_dict():
    """Python's JSON reads NaN: such a config (a grid file's, a manifest's) passed and generation then failed in
    numpy ("cannot convert float NaN to integer")."""
    data = json.loads('{"name": "mine", "split_fractions": [NaN, 0.5, 0.5]}')
    with pytest.raises(ValueError, match="^" + re.escape(f"{FRACTIONS}, got (nan, 0.5, 0.5)") + "$"):
        DatasetConfig.from_dict(data)
