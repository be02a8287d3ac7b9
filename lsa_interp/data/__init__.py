"""Datasets of the paper: alphabets, transformations, tasks, splits, tokenizer and on-disk format."""

from lsa_interp.utils import lazy_exports

_EXPORTS = {  # each public name -> the module that defines it, imported on first use
    "make_alphabets": "alphabets",
    "permutation_level": "alphabets",
    "permute_alphabet": "alphabets",
    "Dataset": "dataset",
    "load_dataset": "dataset",
    "read_manifest": "dataset",
    "save_dataset": "dataset",
    "generate_dataset": "generate",
    "split_sizes": "generate",
    "PRESETS": "presets",
    "DatasetConfig": "presets",
    "get_preset": "presets",
    "STANDARD_ALPHABET": "task",
    "Task": "task",
    "COMPOSITIONAL": "transformations",
    "NEW": "transformations",
    "NOVEL": "transformations",
    "PAPER": "transformations",
    "SEEN": "transformations",
    "TRANSFORMATIONS": "transformations",
    "get_transformation": "transformations",
    "TokenBatch": "tokenizer",
    "decode": "tokenizer",
    "decode_batch": "tokenizer",
    "encode_tasks": "tokenizer",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
