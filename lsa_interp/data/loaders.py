"""Tokenized splits, cached next to the dataset so that training never re-tokenizes.

``load_tokenized(DIR, "train")`` tokenizes ``DIR/train.parquet`` once and stores the result in
``DIR/tokens/train.pt`` together with the Parquet file's checksum; later calls read the cache, and a
changed Parquet file invalidates it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from jaxtyping import Bool, Int
from torch import Tensor

from lsa_interp.data.dataset import load_dataset, read_manifest
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import TokenBatch, encode_tasks
from lsa_interp.data.transformations import TRANSFORMATIONS
from lsa_interp.utils import atomic_write

CACHE_DIR = "tokens"
_CACHE_VERSION = 1


@dataclass(frozen=True)
class TokenizedSplit:
    """A whole split as padded token tensors plus per-row labels.

    ``transformation`` indexes ``transformation_names``; ``alphabet`` indexes ``alphabets``.
    """

    tokens: TokenBatch
    transformation: Int[Tensor, " n"]
    alphabet: Int[Tensor, " n"]
    is_copy: Bool[Tensor, " n"]
    transformation_names: tuple[str, ...]
    alphabets: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.tokens)

    def select(self, rows: np.ndarray) -> TokenizedSplit:
        """The rows ``rows`` (an index array) of every tensor."""
        index = torch.as_tensor(rows, dtype=torch.long)
        return TokenizedSplit(
            self.tokens.select(index),
            self.transformation[index],
            self.alphabet[index],
            self.is_copy[index],
            self.transformation_names,
            self.alphabets,
        )


def tokenize_split(tasks: list[Task]) -> TokenizedSplit:
    """Tokenize a list of tasks (with answers) into a `TokenizedSplit`."""
    names = tuple(TRANSFORMATIONS)
    alphabets = tuple(dict.fromkeys(t.alphabet for t in tasks))
    alphabet_id = {a: i for i, a in enumerate(alphabets)}
    name_id = {n: i for i, n in enumerate(names)}
    return TokenizedSplit(
        tokens=encode_tasks(tasks, with_answers=True),
        transformation=torch.tensor([name_id.get(t.transformation, -1) for t in tasks], dtype=torch.long),
        alphabet=torch.tensor([alphabet_id[t.alphabet] for t in tasks], dtype=torch.long),
        is_copy=torch.tensor([t.is_copy for t in tasks], dtype=torch.bool),
        transformation_names=names,
        alphabets=alphabets,
    )


def _to_disk(split: TokenizedSplit, sha256: str) -> dict:
    small = lambda t: t.to(torch.uint8)
    tokens = split.tokens
    return {
        "version": _CACHE_VERSION,
        "sha256": sha256,
        "src": small(tokens.src),
        "roles": small(tokens.roles),
        "tgt_in": small(tokens.tgt_in),
        "tgt_out": small(tokens.tgt_out),
        "transformation": split.transformation,
        "alphabet": split.alphabet,
        "is_copy": split.is_copy,
        "transformation_names": split.transformation_names,
        "alphabets": split.alphabets,
    }


def _from_disk(data: dict) -> TokenizedSplit:
    wide = lambda t: t.to(torch.long)
    tokens = TokenBatch(wide(data["src"]), wide(data["roles"]), wide(data["tgt_in"]), wide(data["tgt_out"]))
    return TokenizedSplit(
        tokens,
        data["transformation"],
        data["alphabet"],
        data["is_copy"],
        tuple(data["transformation_names"]),
        tuple(data["alphabets"]),
    )


def load_tokenized(data_dir: str | os.PathLike, split: str) -> TokenizedSplit:
    """The tokenized ``split`` of the dataset in ``data_dir``, from the cache when it is current.

    Raises what `load_dataset` raises for a missing or corrupted dataset or an unknown split.
    """
    manifest = read_manifest(data_dir)
    if split not in manifest["files"]:
        raise ValueError(f"unknown split {split!r}; this dataset has: {', '.join(manifest['files'])}")
    sha256 = manifest["files"][split]["sha256"]
    cache = Path(data_dir) / CACHE_DIR / f"{split}.pt"
    if cache.is_file():
        try:
            data = torch.load(cache, weights_only=True)
            if data.get("version") == _CACHE_VERSION and data.get("sha256") == sha256:
                return _from_disk(data)
        except Exception:
            pass
    tokenized = tokenize_split(load_dataset(data_dir, splits=(split,)).splits[split])
    try:
        _write_cache(tokenized, sha256, cache)
    except OSError:
        pass  # a read-only dataset directory still loads, only without the cache
    return tokenized


def _write_cache(tokenized: TokenizedSplit, sha256: str, cache: Path) -> None:
    cache.parent.mkdir(exist_ok=True)
    atomic_write(cache, lambda tmp: torch.save(_to_disk(tokenized, sha256), tmp))
