from __future__ import annotations

import pytest
import torch

from lsa_interp.data import Task, read_manifest, save_dataset
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


def test_the_cache_stores_small_tokens_and_the_parquet_checksum_and_reads_back_every_tensor(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    first = load_tokenized(out, "val")
    stored = torch.load(out / CACHE_DIR / "val.pt", weights_only=True)
    assert stored["sha256"] == read_manifest(out)["files"]["val"]["sha256"]
    assert {stored[k].dtype for k in ("src", "roles", "tgt_in", "tgt_out")} == {torch.uint8}
    again = load_tokenized(out, "val")
    for name in ("src", "roles", "tgt_in", "tgt_out"):
        assert torch.equal(getattr(again.tokens, name), getattr(first.tokens, name))
    load_tokenized(out, "train")
    assert (out / CACHE_DIR / "train.pt").is_file()  # a second split cached beside the first


def test_a_cache_of_other_rows_is_rebuilt(tiny, tmp_path):
    """Same cache version, another checksum: the stale tokens are not used, and the cache is written again."""
    out = save_dataset(tiny, tmp_path / "ds")
    first = load_tokenized(out, "val")
    cache = out / CACHE_DIR / "val.pt"
    stale = torch.load(cache, weights_only=True)
    right = stale["sha256"]
    stale.update(sha256="0" * 64, src=torch.zeros_like(stale["src"]))
    torch.save(stale, cache)
    assert torch.equal(load_tokenized(out, "val").tokens.src, first.tokens.src)
    assert torch.load(cache, weights_only=True)["sha256"] == right


def test_rows_of_a_rule_outside_the_table_get_minus_one_and_answers_are_required(tiny):
    tasks = list(tiny.splits["val"][:3])
    tasks[1] = Task(tasks[1].alphabet, tasks[1].examples, tasks[1].query, tasks[1].answer, "made-up")
    assert tokenize_split(tasks).transformation[1].item() == -1
    with pytest.raises(ValueError):
        tokenize_split([t.with_answer(None) for t in tasks])
