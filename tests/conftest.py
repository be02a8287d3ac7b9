"""Shared fixtures: generated datasets are built once per test process."""

from __future__ import annotations

import locale
import os
import sys

import pytest
import torch

from lsa_interp.data import PRESETS, DatasetConfig, generate_dataset

# The suite runs in two xdist workers on two cores: one torch thread each avoids oversubscription, under
# which OpenMP-parallel small ops become tens of times slower.
torch.set_num_threads(1)

# Without a GPU, Triton kernels (the stack's own attention, where the triton package is installed) run under
# Triton's interpreter. It must be chosen before anything imports triton.language, whose own functions are
# kernels too: by the time a test module runs, earlier imports may have loaded it (seen with torch 2.11).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# A GPU session exports LSA_COMPILE_CACHE for its sweeps (scripts/gpu_train.sh), and its GPU checks run these tests
# beside them: their tiny stacks must neither load the session's compiled kernels nor add theirs to its cache.
os.environ.pop("LSA_COMPILE_CACHE", None)


@pytest.fixture(scope="session")
def copy20():
    return generate_dataset(PRESETS["copy-20"], seed=0)


@pytest.fixture(scope="session")
def nocopy20():
    return generate_dataset(PRESETS["nocopy-20"], seed=0)


@pytest.fixture(scope="session")
def copy200():
    return generate_dataset(PRESETS["copy-200"], seed=0)


@pytest.fixture(scope="session")
def tiny_config():
    """A small dataset (4 permuted alphabets, windows of 3 and 4 letters) for I/O and CLI tests."""
    return DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3, 4), n_reshuffle=2, n_new_alphabets=4)


@pytest.fixture(scope="session")
def tiny(tiny_config):
    return generate_dataset(tiny_config, seed=3)


@pytest.fixture
def ascii_locale():
    """ASCII as Python's default text encoding for the test: a machine whose locale is not UTF-8 (Windows' cp1252,
    a POSIX locale in Latin-1), where a file opened without ``encoding`` cannot hold plotly.js or a card's dash."""
    saved = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        if sys.flags.utf8_mode or locale.getencoding().upper().replace("-", "") == "UTF8":
            pytest.skip("Python's UTF-8 mode or a C locale in UTF-8: every default encoding here is UTF-8")
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
