"""`lsa_interp.training.compile_cache`: which folders, what is loaded and skipped, what is saved and named, and the
stack trainer's ``startup`` record that uses it."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from lsa_interp.training import RunSpec, StackConfig, StackTrainer, stack_trainer
from lsa_interp.training.compile_cache import cache_folders, load_compile_caches, save_compile_cache


def _info(**artifacts):
    return SimpleNamespace(artifacts=defaultdict(list, artifacts))


def test_the_folders_come_from_the_environment_in_order(monkeypatch, tmp_path):
    monkeypatch.delenv("LSA_COMPILE_CACHE", raising=False)
    assert cache_folders() == []
    monkeypatch.setenv("LSA_COMPILE_CACHE", f"{tmp_path / 'new'}{os.pathsep}{os.pathsep}{tmp_path / 'kept'}")
    assert cache_folders() == [tmp_path / "new", tmp_path / "kept"]


def test_every_file_of_every_folder_is_loaded_and_an_unreadable_one_only_warns(monkeypatch, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "2.bin").write_bytes(b"two")
    (tmp_path / "a" / "1.bin").write_bytes(b"bad")
    (tmp_path / "b" / "3.bin").write_bytes(b"three")
    (tmp_path / "b" / "3.json").write_text("{}")
    seen = []

    def load(data):
        seen.append(data)
        if data == b"bad":
            raise RuntimeError("not a cache of this torch")
        return _info(inductor=["x", "y"], aot_autograd=["z"]) if data == b"two" else None

    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", load)
    with pytest.warns(UserWarning, match=r"compile cache .*1\.bin not loaded: RuntimeError: not a cache"):
        loaded = load_compile_caches([tmp_path / "a", tmp_path / "b", tmp_path / "missing"])
    assert loaded == 3 and seen == [b"bad", b"two", b"three"]


def test_new_kernels_are_saved_by_the_hash_of_their_keys_once(monkeypatch, tmp_path):
    saved = [None, (b"kernels", _info(inductor=[], aot_autograd=[])), (b"kernels", _info(inductor=["k2", "k1"]))]
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: saved.pop(0) if len(saved) > 1 else saved[0])
    new, kept = tmp_path / "new", tmp_path / "kept"
    assert save_compile_cache([new, kept]) is None  # nothing compiled
    assert save_compile_cache([new, kept]) is None and not new.exists()  # no artifact keys
    path = save_compile_cache([new, kept])
    assert path is not None and path.parent == new and path.read_bytes() == b"kernels"
    about = json.loads(path.with_suffix(".json").read_text())
    assert (
        about["artifacts"] == {"inductor": ["k1", "k2"]} and about["bytes"] == 7 and about["torch"] == torch.__version__
    )
    kept.mkdir()
    path.rename(kept / path.name)
    assert save_compile_cache([new, kept]) is None and not (new / path.name).exists()  # already kept: not again
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"other", _info(inductor=["k1", "k2", "k3"])))
    assert save_compile_cache([new, kept]).name != path.name


def test_a_real_compile_round_trips_through_the_files(tmp_path):
    """torch's own artifacts (a tiny compiled function on this CPU): saved, named, and loaded back."""
    torch.compile(lambda x: torch.sin(x) * 2 + 1, dynamic=False)(torch.randn(8))
    path = save_compile_cache([tmp_path])
    assert path is not None and path.stat().st_size > 0
    assert json.loads(path.with_suffix(".json").read_text())["artifacts"]["inductor"]
    assert load_compile_caches([tmp_path]) >= 1


def _stack(data_dir, **overrides):
    runs = (RunSpec(str(data_dir), seed=1, preset="tiny"), RunSpec(str(data_dir), seed=2, preset="tiny"))
    model = {"d_model": 16, "n_heads": 2, "d_mlp": 32, "n_encoder_layers": 1, "n_decoder_layers": 1, "dropout": 0.0}
    base = dict(runs=runs, batch_size=64, max_steps=3, log_every=1, val_limit=8, model=model, device="cpu")
    return StackConfig(**{**base, **overrides})


@pytest.mark.parametrize("compile", [False, True], ids=["plain", "compiled"])
def test_the_first_step_logs_the_start_up_and_a_compiled_stack_loads_and_keeps_its_kernels(
    data_dir, tmp_path, monkeypatch, compile
):
    """On this CPU the stack does not compile (only a graphed step does): torch's cache functions are stand-ins
    that record when they are called."""
    calls = []

    def save(folders):
        calls.append(("save", folders))
        return folders[0] / "abc.bin"

    monkeypatch.setattr(stack_trainer, "load_compile_caches", lambda folders: calls.append(("load", folders)) or 5)
    monkeypatch.setattr(stack_trainer, "save_compile_cache", save)
    monkeypatch.setenv("LSA_COMPILE_CACHE", str(tmp_path / "cache"))
    trainer = StackTrainer.start(_stack(data_dir, compile=compile), tmp_path / "run")
    trainer.run()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    startup = [r for r in records if r["type"] == "startup"]
    assert len(startup) == 1 and startup[0]["step"] == 1 and startup[0]["seconds"] > 0
    assert records.index(startup[0]) < next(i for i, r in enumerate(records) if r["type"] == "step")
    if compile:
        assert calls == [("load", [tmp_path / "cache"]), ("save", [tmp_path / "cache"])]
        assert startup[0]["compile_cache"] == {"loaded": 5, "saved": "abc.bin"}
    else:
        assert calls == [] and "compile_cache" not in startup[0]
