from __future__ import annotations

import torch

from lsa_interp.data import save_dataset
from lsa_interp.data.loaders import CACHE_DIR, load_tokenized, tokenize_split
from lsa_interp.data.tokenizer import encode_tasks


def test_tokenized_split_matches_the_tokenizer(tiny):
    tasks = tiny.splits["val"]
    split = tokenize_split(tasks)
    direct = encode_tasks(tasks)
    assert torch.equal(split.tokens.src, direct.src) and torch.equal(split.tokens.tgt_out, direct.tgt_out)
    assert [split.transformation_names[i] for i in split.transformation.tolist()] == [t.transformation for t in tasks]
    assert [split.alphabets[i] for i in split.alphabet.tolist()] == [t.alphabet for t in tasks]
    assert split.is_copy.tolist() == [t.is_copy for t in tasks]


def test_cache_is_written_reused_and_invalidated(tiny, tmp_path, monkeypatch):
    out = save_dataset(tiny, tmp_path / "ds")
    first = load_tokenized(out, "train")
    cache = out / CACHE_DIR / "train.pt"
    assert cache.is_file() and not [p for p in cache.parent.iterdir() if p.name.startswith(".")]

    import lsa_interp.data.loaders as loaders

    def no_tokenizing(_tasks):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(loaders, "tokenize_split", no_tokenizing)
    second = load_tokenized(out, "train")
    assert torch.equal(first.tokens.src, second.tokens.src) and second.tokens.src.dtype == torch.long
    monkeypatch.undo()

    save_dataset(
        tiny.__class__(
            tiny.config,
            tiny.seed,
            {**tiny.splits, "train": tiny.splits["train"][:10]},
            tiny.train_alphabets,
            tiny.new_alphabets,
        ),
        out,
        force=True,
    )
    assert len(load_tokenized(out, "train")) == 10


def test_unreadable_cache_is_rebuilt(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    (out / CACHE_DIR).mkdir()
    (out / CACHE_DIR / "val.pt").write_bytes(b"garbage")
    assert len(load_tokenized(out, "val")) == len(tiny.splits["val"])
