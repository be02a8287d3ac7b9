"""Datasets of the paper: alphabets, transformations, tasks, splits, tokenizer and on-disk format."""

from typing import TYPE_CHECKING

from lsa_interp.utils import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors read; at run time `_EXPORTS` imports each name on first use
    from lsa_interp.data.alphabets import (
        make_alphabets as make_alphabets,
        permutation_level as permutation_level,
        permute_alphabet as permute_alphabet,
    )
    from lsa_interp.data.dataset import (
        Dataset as Dataset,
        load_dataset as load_dataset,
        read_manifest as read_manifest,
        save_dataset as save_dataset,
    )
    from lsa_interp.data.generate import generate_dataset as generate_dataset, split_sizes as split_sizes
    from lsa_interp.data.presets import PRESETS as PRESETS, DatasetConfig as DatasetConfig, get_preset as get_preset
    from lsa_interp.data.task import STANDARD_ALPHABET as STANDARD_ALPHABET, Task as Task
    from lsa_interp.data.tokenizer import (
        TokenBatch as TokenBatch,
        decode as decode,
        decode_batch as decode_batch,
        encode_tasks as encode_tasks,
    )
    from lsa_interp.data.transformations import (
        COMPOSITIONAL as COMPOSITIONAL,
        NEW as NEW,
        NOVEL as NOVEL,
        PAPER as PAPER,
        SEEN as SEEN,
        TRANSFORMATIONS as TRANSFORMATIONS,
        get_transformation as get_transformation,
    )


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
