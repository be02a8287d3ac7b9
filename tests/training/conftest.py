"""Fixtures of the training tests: three tiny saved datasets, built once per test process."""

from __future__ import annotations

import pytest

from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.data.transformations import SEEN


def _tiny_dataset(tmp_path_factory, name, window, seed, n_alphabets=4):
    config = DatasetConfig(
        name=name, n_alphabets=n_alphabets, window_lengths=(window,), n_reshuffle=1, n_new_alphabets=4,
        train_transformations=SEEN[:3],
    )  # fmt: skip
    return save_dataset(generate_dataset(config, seed=seed), tmp_path_factory.mktemp("data") / name)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """536 training rows (windows of 3 letters, three transformations): 9 random batches of 64."""
    return _tiny_dataset(tmp_path_factory, "tiny", 3, seed=3)


@pytest.fixture(scope="session")
def other_dir(tmp_path_factory):
    """Another dataset: other alphabets, windows of 4 letters (longer rows)."""
    return _tiny_dataset(tmp_path_factory, "tiny4", 4, seed=4)


@pytest.fixture(scope="session")
def large_dir(tmp_path_factory):
    """A larger dataset: eight alphabets, so a val split of more rows than the others'."""
    return _tiny_dataset(tmp_path_factory, "tiny8", 3, seed=5, n_alphabets=8)
