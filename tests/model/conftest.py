"""Fixtures of the model tests: random tasks, small random models, reference/hooked model pairs.

jaxtyping's pytest hook (``--jaxtyping-packages`` in pyproject.toml) checks every annotated shape of
``lsa_interp.model`` at run time (beartype); ``test_attention`` checks that it does.
"""

from __future__ import annotations

import random
import string

import pytest
import torch

from lsa_interp.data.task import Task
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.convert import convert_reference_state_dict
from lsa_interp.model.reference import ReferenceTransformer

torch.set_num_threads(1)  # tiny tensors: one thread is fastest, and avoids oversubscription under pytest -n 2

SMALL = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64, max_len=64)
"""A small config for the slow tests (decoding 1,000 tasks); the equivalence tests use the paper's config."""


def random_tasks(n: int, seed: int = 0, answer_len: tuple[int, int] | None = (3, 7), shots: int = 1) -> list[Task]:
    """``n`` tasks with random alphabets and random letter strings; answers of ``answer_len`` letters, or none."""
    rng = random.Random(seed)
    letters = string.ascii_lowercase

    def word(lo: int = 3, hi: int = 7) -> str:
        return "".join(rng.choice(letters) for _ in range(rng.randint(lo, hi)))

    tasks = []
    for _ in range(n):
        examples = tuple((word(), word()) for _ in range(shots))
        answer = None if answer_len is None else word(*answer_len)
        tasks.append(Task("".join(rng.sample(letters, 26)), examples, word(), answer))
    return tasks


def reference_pair(cfg: ModelConfig, seed: int = 0) -> tuple[ReferenceTransformer, HookedEncoderDecoder]:
    """A randomly initialised reference module and the hooked model converted from its weights (eval mode)."""
    torch.manual_seed(seed)
    reference = ReferenceTransformer(cfg).eval()
    model = HookedEncoderDecoder(cfg)
    model.load_state_dict(convert_reference_state_dict(reference.state_dict(), cfg), strict=True)
    return reference, model.eval()


@pytest.fixture(scope="session")
def make_tasks():
    """The `random_tasks` factory."""
    return random_tasks


@pytest.fixture(scope="session")
def make_pair():
    """The `reference_pair` factory."""
    return reference_pair


@pytest.fixture(scope="session")
def small_cfg() -> ModelConfig:
    """`SMALL`."""
    return SMALL


@pytest.fixture(scope="session")
def paper_pair() -> tuple[ReferenceTransformer, HookedEncoderDecoder]:
    """The paper's architecture (default config, dropout off), reference and hooked, same random weights."""
    return reference_pair(ModelConfig(dropout=0.0))


@pytest.fixture(scope="session")
def small_model() -> HookedEncoderDecoder:
    """A small random hooked model (eval mode)."""
    torch.manual_seed(1)
    return HookedEncoderDecoder(SMALL).eval()
