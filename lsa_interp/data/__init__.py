"""Datasets of the paper: alphabets, transformations, tasks, splits, tokenizer and on-disk format."""

from lsa_interp.data.alphabets import make_alphabets, permutation_level, permute_alphabet
from lsa_interp.data.dataset import Dataset, load_dataset, read_manifest, save_dataset
from lsa_interp.data.generate import generate_dataset, split_sizes
from lsa_interp.data.presets import PRESETS, DatasetConfig, get_preset
from lsa_interp.data.task import STANDARD_ALPHABET, Task
from lsa_interp.data.transformations import (
    COMPOSITIONAL,
    NEW,
    NOVEL,
    PAPER,
    SEEN,
    TRANSFORMATIONS,
    get_transformation,
)

_TOKENIZER_NAMES = ("TokenBatch", "decode", "decode_batch", "encode_tasks")


def __getattr__(name: str):
    """Import the tokenizer (and with it torch) only when one of its names is asked for."""
    if name in _TOKENIZER_NAMES:
        from lsa_interp.data import tokenizer

        return getattr(tokenizer, name)
    raise AttributeError(f"module 'lsa_interp.data' has no attribute {name!r}")


__all__ = [
    "COMPOSITIONAL",
    "NEW",
    "NOVEL",
    "PAPER",
    "PRESETS",
    "SEEN",
    "STANDARD_ALPHABET",
    "TRANSFORMATIONS",
    "Dataset",
    "DatasetConfig",
    "Task",
    "TokenBatch",
    "decode",
    "decode_batch",
    "encode_tasks",
    "generate_dataset",
    "get_preset",
    "get_transformation",
    "load_dataset",
    "make_alphabets",
    "permutation_level",
    "permute_alphabet",
    "read_manifest",
    "save_dataset",
    "split_sizes",
]
