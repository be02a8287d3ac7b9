"""The explorer's catalogue: which directories give which models under which names, and what it loads once."""

from __future__ import annotations

import pytest

from lsa_interp.analysis.planted import planted_model
from lsa_interp.explorer import catalogue as catalogue_module
from lsa_interp.explorer.catalogue import ModelCatalogue, ModelEntry, discover_models, entries_for_path
from lsa_interp.model import checkpoint, save_model
from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, available_models, shipped_replicates
from lsa_interp.model.reference import ReferenceTransformer, save_reference_checkpoint


@pytest.fixture(scope="module")
def model():
    return planted_model()


def test_a_sweep_lists_its_runs_by_stack_then_replicate_number(tmp_path, model):
    sweep = tmp_path / "sweep"
    written = [("stack-001", 0)] + [("stack-000", i) for i in (11, 3, 0, 7, 10, 2, 5)]
    for stack, replicate in written:
        save_model(model, sweep / "stacks" / stack / f"replicate-{replicate}" / "model")
    (sweep / "stacks" / "stack-000" / "replicate-4" / "model").mkdir(parents=True)  # not yet written
    found = entries_for_path(sweep)
    expected = [("stack-000", i) for i in (0, 2, 3, 5, 7, 10, 11)] + [("stack-001", 0)]
    assert [e.name for e in found] == [f"sweep/{stack}/replicate-{i}" for stack, i in expected]
    assert [(e.run_dir.name, e.replicate) for e in found] == expected
    assert found[5].path == sweep / "stacks" / "stack-000" / "replicate-10" / "model"


def test_a_stack_lists_its_replicates_in_order_and_skips_other_directories(tmp_path, model):
    stack = tmp_path / "stack"
    for name in ("replicate-10", "replicate-2", "replicate-x", "replicas-1"):
        save_model(model, stack / name / "model")
    found = entries_for_path(stack)
    assert [(e.name, e.replicate, e.run_dir) for e in found] == [
        ("stack/replicate-2", 2, stack), ("stack/replicate-10", 10, stack),
    ]  # fmt: skip


def test_a_model_directory_outside_a_stack_is_its_run_s_model(tmp_path, model):
    for name in ("run", "replicate-x"):
        save_model(model, tmp_path / name / "model")
        (entry,) = entries_for_path(tmp_path / name / "model")
        assert entry == ModelEntry(name, tmp_path / name / "model", tmp_path / name, None)


def test_a_directory_of_checkpoints_lists_each_by_folder_and_name(tmp_path, model):
    shelf = tmp_path / "shelf"
    for name in ("b", "a"):
        save_model(model, shelf / name)
    (shelf / "notes").mkdir()
    (shelf / "readme.txt").write_text("")
    found = entries_for_path(shelf)
    assert found == [ModelEntry("shelf/a", shelf / "a"), ModelEntry("shelf/b", shelf / "b")]
    (shelf / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no model"):
        entries_for_path(shelf / "empty")
    with pytest.raises(FileNotFoundError, match="holds no model"):
        entries_for_path(tmp_path / "missing")


def test_the_same_name_from_two_places_is_numbered_and_the_same_place_listed_once(tmp_path, model):
    for parent in ("x", "y", "z"):
        save_model(model, tmp_path / parent / "ckpt")
    items = [tmp_path / "x" / "ckpt", tmp_path / "y" / "ckpt", tmp_path / "x" / "ckpt", tmp_path / "z" / "ckpt"]
    found = discover_models(items, shipped=False)
    assert [(e.name, e.path.parent.name) for e in found] == [("ckpt", "x"), ("ckpt#2", "y"), ("ckpt#3", "z")]


def test_shipped_names_and_checkpoints_come_after_the_given_items(tmp_path, model, monkeypatch):
    shipped = available_models(replicates=False)
    assert "copy-200" in shipped and available_models() == shipped + shipped_replicates()
    found = discover_models(["copy-200"])
    expected = ["copy-200"] + [n for n in shipped if n != "copy-200"] + list(shipped_replicates())
    assert [e.name for e in found] == expected
    assert all(e.path == CHECKPOINTS_DIR / e.name for e in found)
    monkeypatch.chdir(tmp_path)
    save_model(model, tmp_path / "copy-200")
    (local,) = discover_models(["copy-200"], shipped=False)
    assert local.path == (tmp_path / "copy-200").resolve(), "a directory of that name here is read as a path"


def test_the_catalogue_loads_each_model_once_and_keeps_memos_but_not_errors(tmp_path, model, monkeypatch):
    save_model(model, tmp_path / "ckpt")
    loads = []
    load = catalogue_module.load_model
    monkeypatch.setattr(catalogue_module, "load_model", lambda path: loads.append(path) or load(path))
    catalogue = ModelCatalogue(entries_for_path(tmp_path / "ckpt"))
    first = catalogue.model("ckpt")
    assert catalogue.model("ckpt") is first and loads == [tmp_path / "ckpt"] and not first.training
    calls = []

    def fails(m):
        calls.append(m)
        raise RuntimeError("no heads")

    for _ in range(2):
        with pytest.raises(RuntimeError, match="no heads"):
            catalogue.memo("ckpt", "matching", fails)
    assert len(calls) == 2, "a failed result is computed again next time"
    assert catalogue.memo("ckpt", "matching", lambda m: 1) == 1 and catalogue.memo("ckpt", "means", lambda m: 2) == 2
    assert catalogue.memo("ckpt", "model", lambda m: m) is first, "the memo is made from the model"


def test_in_memory_models_take_precedence_and_a_catalogue_needs_one(tmp_path, model):
    save_model(model, tmp_path / "mem")
    memory = planted_model().train()
    catalogue = ModelCatalogue(entries_for_path(tmp_path / "mem") + [ModelEntry("other")], {"mem": memory})
    assert catalogue.names == ["mem", "other"] and catalogue.entry("mem") == ModelEntry("mem")
    assert catalogue.model("mem") is memory and not memory.training
    with pytest.raises(ValueError, match="needs at least one model"):
        ModelCatalogue()


def test_a_shipped_replicate_and_a_shipped_reference_file_are_opened_by_their_names(tmp_path, model, monkeypatch):
    """``--model replicates/NAME`` is a shipped name as ``load_model`` reads it (it was taken for a path here and
    refused), and a ``.pt`` under ``checkpoints/`` is the file itself (it was listed as a directory of its stem that
    does not exist)."""
    monkeypatch.setattr(checkpoint, "CHECKPOINTS_DIR", tmp_path / "checkpoints")
    save_model(model, tmp_path / "checkpoints" / "replicates" / "copy-20-s1")
    save_reference_checkpoint(ReferenceTransformer(model.cfg), tmp_path / "checkpoints" / "ref.pt")
    monkeypatch.chdir(tmp_path)
    found = discover_models(["replicates/copy-20-s1"])
    assert [(e.name, e.path) for e in found] == [
        ("replicates/copy-20-s1", tmp_path / "checkpoints" / "replicates" / "copy-20-s1"),
        ("ref", tmp_path / "checkpoints" / "ref.pt"),
    ]
    catalogue = ModelCatalogue(found)
    assert catalogue.model("ref").cfg == model.cfg and catalogue.model("replicates/copy-20-s1").cfg == model.cfg


def test_the_given_models_are_loaded_once_at_discovery_and_the_shipped_ones_are_trusted(tmp_path, model, monkeypatch):
    save_model(model, tmp_path / "run" / "model")
    loads = []
    load = catalogue_module.load_model
    monkeypatch.setattr(catalogue_module, "load_model", lambda path: loads.append(path) or load(path))
    found = discover_models([tmp_path / "run"])
    assert loads == [tmp_path / "run" / "model"] and len(found) > 1  # the shipped ones listed, not opened
    (tmp_path / "run" / "model" / "model.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(checkpoint.CheckpointError, match="corrupted or truncated"):
        discover_models([tmp_path / "run"])
