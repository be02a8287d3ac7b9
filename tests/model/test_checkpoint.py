"""Our checkpoint format: atomic save, integrity checks, name resolution, format detection."""

from __future__ import annotations

import copy
import json
import os
import re
import stat
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import lsa_interp.model.checkpoint as checkpoint
from lsa_interp.model import CheckpointError, HookedEncoderDecoder, available_models, load_model, save_model
from lsa_interp.model.reference import ReferenceTransformer, save_reference_checkpoint
from lsa_interp.utils import sha256_file


@pytest.fixture
def saved(small_model, tmp_path):
    return save_model(small_model, tmp_path / "run", metadata={"epochs": 2, "loss": torch.tensor([1.5, 0.5])})


def test_round_trip(small_model, saved):
    loaded = load_model(saved)
    assert isinstance(loaded, HookedEncoderDecoder) and loaded.cfg == small_model.cfg and not loaded.training
    for key, value in small_model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    assert loaded.metadata == {"epochs": 2, "loss": [1.5, 0.5]}
    config = json.loads((saved / "config.json").read_text())
    assert config["format"] == "lsa-interp" and config["format_version"] == 1 and len(config["weights_sha256"]) == 64
    assert load_model(saved / "config.json").cfg == load_model(saved / "model.safetensors").cfg


def test_every_file_of_a_checkpoint_gets_the_usual_permissions(small_model, tmp_path):
    """safetensors creates its file 0600: the weights were owner-only beside a 0644 config.json."""
    old = os.umask(0o022)
    try:
        directory = save_model(small_model, tmp_path / "run")
        save_model(small_model, directory, overwrite=True)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}
    assert modes == {"config.json": 0o644, "model.safetensors": 0o644}
    assert stat.S_IMODE(directory.stat().st_mode) == 0o755


def test_save_is_atomic_and_refuses_to_overwrite(small_model, saved):
    with pytest.raises(FileExistsError):
        save_model(small_model, saved)
    save_model(small_model, saved, metadata={"epochs": 3}, overwrite=True)
    assert load_model(saved).metadata["epochs"] == 3
    assert sorted(p.name for p in saved.parent.iterdir()) == ["run"]


def test_overwriting_clears_a_previous_saves_leftover_and_an_interrupted_one_puts_the_old_model_back(
    small_model, saved, monkeypatch
):
    """A save killed between its two renames leaves ``.run.old``: the next save is not blocked by it. One interrupted
    there (Ctrl-C) puts the model it was replacing back under its name."""
    leftover = saved.with_name(".run.old")
    leftover.mkdir()
    (leftover / "stale").write_text("x")
    save_model(small_model, saved, metadata={"epochs": 3}, overwrite=True)
    assert load_model(saved).metadata["epochs"] == 3 and sorted(p.name for p in saved.parent.iterdir()) == ["run"]
    rename, calls = Path.rename, []

    def interrupted(self, target):
        calls.append(Path(target).name)
        if len(calls) == 2:  # the staged model into place
            raise KeyboardInterrupt
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_model(small_model, saved, metadata={"epochs": 4}, overwrite=True)
    monkeypatch.setattr(Path, "rename", rename)
    assert calls[:2] == [".run.old", "run"] and load_model(saved).metadata["epochs"] == 3
    assert sorted(p.name for p in saved.parent.iterdir()) == ["run"]


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupted_or_truncated_weights_fail_clearly(saved, damage):
    weights = saved / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[: len(data) // 2]
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted or truncated"):
        load_model(saved)


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda text: text[: len(text) // 2], "not valid JSON"),
        (lambda text: text.replace('"format_version": 1', '"format_version": 99'), "format version 99"),
        (
            lambda text: text.replace('"d_mlp": 64', '"d_mlp": 65'),
            r"^cannot load .*: model\.safetensors does not fit config\.json's model: (de|en)coder\.0\.mlp\.[\w.]+ has "
            r"shape \[\d+(, \d+)?\], the config makes \[\d+(, \d+)?\]$",
        ),
        (  # it said "'NoneType' object is not iterable"
            lambda text: re.sub(r'"model_config": \{[^}]*\}', '"model_config": null', text),
            r"config\.json: model_config is None, not an object of the model's hyper-parameters$",
        ),
        (lambda text: text.replace('"lsa-interp"', '"other"'), "not an lsa-interp checkpoint"),
        (  # a TypeError (a path joined with an int)
            lambda text: text.replace('"weights_file": "model.safetensors"', '"weights_file": 5'),
            r"config\.json: weights_file is 5, not a file name of the checkpoint's folder$",
        ),
        (
            lambda text: text.replace('"weights_file": "model.safetensors"', '"weights_file": "../model.safetensors"'),
            "weights_file is '../model.safetensors', not a file name",
        ),
        (lambda text: re.sub(r'"weights_sha256": "\w+"', '"weights_sha256": null', text), "weights_sha256 is None"),
    ],
)
def test_bad_configs_fail_clearly(saved, edit, message):
    config = saved / "config.json"
    config.write_text(edit(config.read_text()))
    with pytest.raises(CheckpointError, match=message):
        load_model(saved)


def test_missing_files_fail_clearly(saved, tmp_path):
    (saved / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing"):
        load_model(saved)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="config.json is missing"):
        load_model(tmp_path / "empty")


def test_shipped_names_resolve_and_unknown_names_list_them(small_model, small_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "CHECKPOINTS_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"available names: none \(no checkpoints in [^)]*\)$"):
        load_model("copy-200")
    monkeypatch.setattr(checkpoint, "CHECKPOINTS_DIR", tmp_path / "site-packages" / "checkpoints")
    with pytest.raises(FileNotFoundError, match="checkpoints/: install it from a clone with pip install -e$"):
        load_model("copy-200")
    monkeypatch.setattr(checkpoint, "CHECKPOINTS_DIR", tmp_path)
    save_model(small_model, tmp_path / "copy-20")
    save_reference_checkpoint(ReferenceTransformer(small_cfg), tmp_path / "nocopy-20.pt")
    assert available_models() == ["copy-20", "nocopy-20"]
    assert load_model("copy-20").cfg == small_cfg
    assert load_model("nocopy-20").metadata["source"] == "reference checkpoint"
    with pytest.raises(FileNotFoundError, match="available names: copy-20, nocopy-20"):
        load_model("copy-200")


def test_checkpoints_dir_is_at_the_repository_root():
    assert checkpoint.CHECKPOINTS_DIR.name == "checkpoints"
    assert (checkpoint.CHECKPOINTS_DIR.parent / "lsa_interp" / "__init__.py").is_file()


@pytest.mark.parametrize("storage", ["fp16", "bf16"])
def test_reduced_precision_storage_halves_the_file_and_loads_as_fp32(small_model, tmp_path, storage):
    full = save_model(small_model, tmp_path / "fp32")
    half = save_model(small_model, tmp_path / storage, storage=storage)
    assert (half / "model.safetensors").stat().st_size < 0.6 * (full / "model.safetensors").stat().st_size
    loaded = load_model(half)
    assert json.loads((half / "config.json").read_text())["weights_dtype"] == storage
    dtype = checkpoint.STORAGE_DTYPES[storage]
    for key, value in small_model.state_dict().items():
        got = loaded.state_dict()[key]
        assert got.dtype == torch.float32
        expected = value.to(dtype).float() if key in dict(small_model.named_parameters()) else value
        assert torch.equal(got, expected), key
    with pytest.raises(ValueError, match="unknown storage dtype 'int8'"):
        save_model(small_model, tmp_path / "bad", storage="int8")


def test_a_model_cast_to_bf16_stores_its_buffers_in_fp32(small_model, tmp_path):
    """save_model's promise: parameters in the storage dtype, floating buffers (the position table) in fp32."""
    cast = copy.deepcopy(small_model).to(torch.bfloat16)
    stored = load_file(save_model(cast, tmp_path / "cast") / "model.safetensors")
    buffers = {name for name, _ in cast.named_buffers()}
    assert buffers and {stored[name].dtype for name in buffers} == {torch.float32}
    assert {stored[name].dtype for name, _ in cast.named_parameters()} == {torch.float32}


def test_metadata_sets_and_objects_are_written_readably(small_model, tmp_path):
    metadata = {"rules": {"succ", "pred"}, "mixed": frozenset({2, "a"}), "where": Path("runs/x")}
    directory = save_model(small_model, tmp_path / "nested" / "deeper" / "run", metadata=metadata)
    text = (directory / "config.json").read_text()
    assert text.startswith('{\n  "format": "lsa-interp",\n') and text.endswith("}\n")  # indented, one key a line
    written = json.loads(text)["metadata"]
    assert written["rules"] == ["pred", "succ"] and written["mixed"] == [2, "a"] and written["where"] == "runs/x"
    assert checkpoint.load_checkpoint_dir(directory).metadata["rules"] == ["pred", "succ"]  # default device: CPU


def test_a_failed_save_leaves_no_staging_directory(small_model, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "save_file", fail)
    with pytest.raises(OSError, match="disk full"):
        save_model(small_model, tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_a_save_whose_old_model_cannot_be_removed_raises_that_error_with_the_new_model_in_place(
    small_model, saved, monkeypatch
):
    """The staged model is already in place when removing the replaced one fails: that failure is what the caller
    sees (the clean-up finds no staging directory, and says nothing of it)."""
    rmtree = checkpoint.shutil.rmtree

    def stuck(path, ignore_errors=False, **kwargs):
        if Path(path).name == ".run.old" and not ignore_errors:
            raise OSError("device busy")
        return rmtree(path, ignore_errors=ignore_errors, **kwargs)

    monkeypatch.setattr(checkpoint.shutil, "rmtree", stuck)
    with pytest.raises(OSError, match="device busy"):
        save_model(small_model, saved, metadata={"epochs": 3}, overwrite=True)
    monkeypatch.undo()
    assert load_model(saved).metadata["epochs"] == 3


def test_replicates_load_by_their_shipped_name_and_paths_stay_inside(small_model, tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "CHECKPOINTS_DIR", tmp_path / "checkpoints")
    save_model(small_model, tmp_path / "checkpoints" / "replicates" / "copy-20-s1")
    save_model(small_model, tmp_path / "outside")
    assert load_model("replicates/copy-20-s1").cfg == small_model.cfg
    assert available_models() == ["replicates/copy-20-s1"] and available_models(replicates=False) == []
    for elsewhere in ("../outside", "replicates/../../outside", "sub/replicates/copy-20-s1"):
        with pytest.raises(FileNotFoundError, match=r"available names: replicates/copy-20-s1$"):
            load_model(elsewhere)
    with pytest.raises(FileNotFoundError, match="no checkpoint named or at 'replicates/copy-20-s9'"):
        load_model("replicates/copy-20-s9")


def test_a_checkpoint_is_named_by_its_place_under_checkpoints_whether_given_by_name_or_path(
    small_model, tmp_path, monkeypatch
):
    root = tmp_path / "checkpoints"
    monkeypatch.setattr(checkpoint, "CHECKPOINTS_DIR", root)
    for name in ("copy-20", "replicates/copy-20-s1", "replicates/nested/copy-20-s2"):
        save_model(small_model, root / name)
    save_model(small_model, tmp_path / "outside")
    monkeypatch.chdir(tmp_path)
    assert checkpoint.checkpoint_name("copy-20") == "copy-20"
    assert checkpoint.checkpoint_name(root / "copy-20") == "copy-20"
    assert checkpoint.checkpoint_name("checkpoints/copy-20") == "copy-20"  # relative to where it is run
    assert checkpoint.checkpoint_name("replicates/copy-20-s1") == "replicates/copy-20-s1"
    assert checkpoint.checkpoint_name(root / "replicates" / "copy-20-s1") == "replicates/copy-20-s1"
    for other in (
        "outside",
        tmp_path / "outside",
        root / "replicates",
        root,
        "copy-20-s9",
        root / "replicates" / "nested" / "copy-20-s2",
    ):
        assert checkpoint.checkpoint_name(other) is None, other


def test_only_directories_with_a_config_are_shipped_models(small_model, tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "CHECKPOINTS_DIR", tmp_path)
    save_model(small_model, tmp_path / "copy-20")
    (tmp_path / "notes").mkdir()
    (tmp_path / "README.md").write_text("x")
    assert available_models() == ["copy-20"]


def test_models_load_onto_the_device_asked_for(small_model, small_cfg, saved, tmp_path):
    assert next(load_model(saved, device="meta").parameters()).device.type == "meta"
    assert next(load_model(saved / "config.json", device="meta").parameters()).device.type == "meta"
    save_reference_checkpoint(ReferenceTransformer(small_cfg), tmp_path / "ref.pt")
    assert next(load_model(tmp_path / "ref.pt", device="meta").parameters()).device.type == "meta"


def test_weights_that_do_not_fit_the_config_are_refused(small_model, saved):
    state = load_file(saved / "model.safetensors")
    state.pop(sorted(state)[0])
    save_file(state, str(saved / "model.safetensors"))
    config = json.loads((saved / "config.json").read_text())
    config["weights_sha256"] = sha256_file(saved / "model.safetensors")
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"does not fit config\.json's model: 1 weight\(s\) missing \(\['\S+'\]\), 0 "
    ):
        load_model(saved)


def test_the_first_weight_that_does_not_fit_is_named_with_both_shapes():
    fit = checkpoint._check_weights_fit
    expected = {"a": torch.zeros(2, 3), "b": torch.zeros(4)}
    fit({"a": torch.ones(2, 3), "b": torch.ones(4)}, expected, "w.safetensors")
    with pytest.raises(
        ValueError, match=r"^w\.safetensors does not fit config\.json's model: a has shape \[2, 4\], the "
    ):
        fit({"a": torch.ones(2, 4), "b": torch.ones(4)}, expected, "w.safetensors")
    with pytest.raises(ValueError, match=r"0 weight\(s\) missing \(\[\]\), 1 unexpected \(\['c'\]\)$"):
        fit({**expected, "c": torch.ones(1)}, expected, "w.safetensors")


def test_a_path_with_a_separator_is_never_looked_up_among_shipped_names(small_model, tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "CHECKPOINTS_DIR", tmp_path)
    save_model(small_model, tmp_path / "sub" / "copy-20")
    save_model(small_model, tmp_path / "a\\b")
    for name in ("sub/copy-20", "a\\b"):
        with pytest.raises(FileNotFoundError, match="no checkpoint named or at"):
            load_model(name)


def test_a_config_is_read_as_utf_8_whatever_the_locale(saved, ascii_locale):
    """Metadata outside ASCII in a config.json written without escapes (by hand, or by another tool) loads on a
    machine whose locale's encoding is not UTF-8."""
    config = json.loads((saved / "config.json").read_text(encoding="utf-8"))
    config["metadata"]["notes"] = "entraîné deux époques"
    (saved / "config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    assert load_model(saved).metadata["notes"] == "entraîné deux époques"
