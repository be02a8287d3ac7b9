"""Shared fixtures: generated datasets are built once per test process."""

from __future__ import annotations

from jaxtyping import install_import_hook

# Check the jaxtyping shapes of the tensor-facing modules at run time (must precede importing lsa_interp).
# The pure-Python data pipeline is left out: checking its hot loops would slow generation tenfold.
TENSOR_MODULES = [
    "lsa_interp.data.tokenizer",
    "lsa_interp.data.loaders",
    "lsa_interp.model",
    "lsa_interp.evaluation",
    "lsa_interp.training",
    "lsa_interp.analysis",
    "lsa_interp.viz",
    "lsa_interp.explorer",
]
install_import_hook(TENSOR_MODULES, "beartype.beartype")

import pytest  # noqa: E402
import torch  # noqa: E402

# The suite runs in two xdist workers on two cores: one torch thread each avoids oversubscription, under
# which OpenMP-parallel small ops become tens of times slower.
torch.set_num_threads(1)

from lsa_interp.data import PRESETS, DatasetConfig, generate_dataset  # noqa: E402


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
