"""Damaged or mistyped inputs of the data, training and fit commands: one line on stderr naming the problem, exit
code 2, no traceback and nothing left behind (found by an audit of the CLI's bad input, 2026-12-05)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from lsa_interp import cli
from lsa_interp.data import generate_dataset, save_dataset
from lsa_interp.data.presets import DatasetConfig
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.checkpoint import save_model
from tests.helpers import SMALL_MODEL


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A saved dataset of 1,824 training rows."""
    config = DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4)
    return save_dataset(generate_dataset(config, seed=3), tmp_path_factory.mktemp("data") / "tiny")


def _refused(args: list[str], capsys) -> str:
    """The one stderr line of a command that exits 2."""
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_fit_checks_its_device_before_any_work(capsys):
    err = _refused(["fit", "--model", "copy-20", "--device", "gpu"], capsys)
    assert "unknown device 'gpu'; choose one of: cpu, cuda" in err


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ([], "is not an lsa-interp-dataset manifest"),
        ({"format": "lsa-interp-dataset", "format_version": 1, "preset": "tiny"}, "lacks or mistypes seed, "),
    ],
)
def test_a_damaged_manifest_is_named_in_one_line_by_every_command_that_reads_it(
    manifest, message, data_dir, tmp_path, capsys
):
    damaged = shutil.copytree(data_dir, tmp_path / "damaged")
    (damaged / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    for args in (
        ["data", "show", str(damaged)],
        ["evaluate", "--model", "copy-20", "--limit", "5", "--data", str(damaged)],
        ["train", "--data", str(damaged), "--out", str(tmp_path / "run"), "--max-steps", "1"],
    ):
        err = _refused(args, capsys)
        assert f"{damaged / 'manifest.json'} {message}" in err, (args, err)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["damaged"]  # no run folder left


def test_a_manifest_that_is_not_utf8_is_named(data_dir, tmp_path, capsys):
    damaged = shutil.copytree(data_dir, tmp_path / "damaged")
    (damaged / "manifest.json").write_bytes(b"\xff\xfe{}")
    err = _refused(["data", "show", str(damaged)], capsys)
    assert f"{damaged / 'manifest.json'} is not valid UTF-8 JSON" in err


def test_a_missing_split_file_is_named_as_missing(data_dir, tmp_path, capsys):
    damaged = shutil.copytree(data_dir, tmp_path / "damaged")
    (damaged / "test.parquet").unlink()
    assert f"{damaged / 'test.parquet'} is missing; regenerate the dataset" in _refused(
        ["data", "show", str(damaged)], capsys
    )


def test_train_refuses_a_batch_larger_than_the_training_rows_and_an_infinite_rate(data_dir, tmp_path, capsys):
    """A batch of the whole split would not fit in memory on a real dataset (10^8 was killed by the kernel)."""
    err = _refused(
        ["train", "--data", str(data_dir), "--out", str(tmp_path / "big"), "--batch-size", "100000000"], capsys
    )
    assert f"--batch-size 100,000,000 exceeds the 1,824 training rows of --data {data_dir}" in err
    err = _refused(["train", "--data", str(data_dir), "--out", str(tmp_path / "inf"), "--lr", "inf"], capsys)
    assert "lr must be a positive finite number, got inf" in err
    assert list(tmp_path.iterdir()) == []


def test_fit_refuses_a_dataset_the_model_was_not_trained_on(data_dir, capsys):
    """Its train rows would not be the model's training rows; the manifest says so before any rows are read."""
    err = _refused(["fit", "--model", "copy-20", "--rows", "5", "--data", str(data_dir)], capsys)
    assert (
        f"copy-20 was trained on copy-20 with dataset seed 0, but --data {data_dir} holds tiny with dataset seed 3: "
        "give the model's own" in err
    )


def _tiny_model(directory, **metadata):
    torch.manual_seed(0)
    return save_model(HookedEncoderDecoder(ModelConfig(**SMALL_MODEL)), directory, metadata=metadata)


@pytest.mark.parametrize(
    ("metadata", "accepted"),
    [
        ({"preset": "tiny", "seed": 5, "data_seed": 3}, True),  # a replicate: its own seed, the dataset's seed 3
        ({"preset": "tiny", "seed": 3}, True),  # no data seed recorded: not judged
        ({"preset": "tiny", "seed": 5}, True),  # nor by the model's own seed, which is no dataset's
        ({"preset": "tiny", "seed": 5, "data_seed": 4}, False),  # only the dataset seed differs
        ({"preset": "copy-20", "data_seed": 3}, False),  # only the preset differs
        ({"preset": "copy-20", "data_seed": 0, "train_config": "DATA"}, True),  # trained on this very folder
        ({}, True),  # a model that records neither is not judged
    ],
)
def test_fit_takes_the_models_own_dataset_by_preset_and_dataset_seed_or_by_folder(
    metadata, accepted, data_dir, tmp_path, capsys
):
    """Runs trained with --data before their preset was recorded say copy-20 whatever they read: the folder their
    training config names is theirs all the same."""
    if "train_config" in metadata:
        metadata = {**metadata, "train_config": {"data_dir": str(data_dir)}}
    model = _tiny_model(tmp_path / "model", **metadata)
    args = ["fit", "--model", str(model), "--rows", "3", "--data", str(data_dir)]
    if accepted:
        with pytest.raises(SystemExit) as info:
            cli.main(args)
        assert info.value.code == 0 and "train - val" in capsys.readouterr().out
    else:
        assert "give the model's own dataset" in _refused(args, capsys)


def _run_record(directory, *, epochs: bool = True, done: bool = False):
    """A training run's directory as a committed record keeps it: its config and metrics, no state.pt, no model."""
    directory.mkdir(parents=True)
    (directory / "train_config.json").write_text(json.dumps({"preset": "tiny", "epochs": 1}))
    records = [{"type": "step", "step": 1, "epoch": 0.5}] + [{"type": "epoch", "step": 2, "epoch": 1}] * epochs
    (directory / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    if done:
        (directory / "done").write_text("")
    return directory


def test_a_run_record_without_weights_is_named_as_such(tmp_path, capsys):
    """Committed records of runs (analyses/runs/) keep config and results, not weights: evaluate said
    'model.safetensors is missing' or 'has saved no state yet; wait for its first save'."""
    checkpoint = _tiny_model(tmp_path / "shipped", preset="tiny")
    (checkpoint / "model.safetensors").unlink()
    (checkpoint / "evaluation.json").write_text("{}")
    stack = _run_record(tmp_path / "stack", epochs=False, done=True)
    (stack / "replicate-0" / "model").mkdir(parents=True)
    cases = {
        checkpoint: "it holds config.json, evaluation.json; no model.safetensors",
        _run_record(tmp_path / "run"): "it holds metrics.jsonl, train_config.json; no state.pt or saved model weights",
        stack: "it holds done, metrics.jsonl, replicate-0/, train_config.json; no state.pt or saved model weights",
        stack / "replicate-0": "it holds model/; no state.pt or saved model weights",
    }
    for path, holds in cases.items():
        for command in ("evaluate", "fit"):
            err = _refused([command, "--model", str(path), "--device", "cpu", "--out", str(tmp_path / "o")], capsys)
            assert f"error: {path} is a run's record without its weights ({holds}): give a model with weights: " in err
            assert "a shipped checkpoint (checkpoints/: " in err and ", a training run's directory or its model/" in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run", "shipped", "stack"]


def test_a_run_before_its_first_save_is_still_told_to_wait_and_a_run_without_state_pointed_at_its_model(
    tmp_path, capsys
):
    early = _run_record(tmp_path / "early", epochs=False)
    err = _refused(["evaluate", "--model", str(early), "--device", "cpu"], capsys)
    assert f"{early} has saved no state yet (no state.pt); wait for its first save" in err
    finished = _run_record(tmp_path / "finished")
    _tiny_model(finished / "model", preset="tiny")
    err = _refused(["evaluate", "--model", str(finished), "--device", "cpu"], capsys)
    assert (
        f"{finished} holds no state.pt (its training state); its final model is {finished / 'model'}: give that" in err
    )


def test_a_finished_runs_model_folder_opens_and_a_damaged_metrics_file_is_still_read(tmp_path, monkeypatch):
    """The folder the refusal points at (RUN/model) is a model: only a replicate-I folder is read as its run's part.
    A metrics file with bytes that are not UTF-8 is read all the same (its epoch record found)."""
    from lsa_interp.commands.common import not_a_model
    from lsa_interp.model.checkpoint import available_models

    finished = _run_record(tmp_path / "finished")
    _tiny_model(finished / "model", preset="tiny")
    assert not_a_model(str(finished / "model")) is None
    assert not_a_model(str(finished)).endswith(f"its final model is {finished / 'model'}: give that")
    damaged = _run_record(tmp_path / "damaged")
    (damaged / "metrics.jsonl").write_bytes(b"\xff\xfe" + (damaged / "metrics.jsonl").read_bytes())
    assert "is a run's record without its weights" in not_a_model(str(damaged))
    named = _tiny_model(tmp_path / "named", preset="tiny")
    config = json.loads((named / "config.json").read_text())
    (named / "model.safetensors").rename(named / "other.safetensors")
    (named / "config.json").write_text(json.dumps({**config, "weights_file": "other.safetensors"}))
    assert not_a_model(str(named)) is None  # the weights file its config names is there
    (named / "other.safetensors").unlink()
    assert "; no other.safetensors): give a model" in not_a_model(str(named))
    del config["weights_file"]  # a config that names none: model.safetensors
    (named / "config.json").write_text(json.dumps(config))
    assert "; no model.safetensors): give a model" in not_a_model(str(named))
    for name in ("a", "b", "c", "d", "e"):
        (named / name).write_text("")
    assert "(it holds a, b, c, config.json, d, e; no model.safetensors)" in not_a_model(str(named))  # six: all
    (named / "f").write_text("")
    assert "(it holds a, b, c, config.json, d, e, ...; no model.safetensors)" in not_a_model(str(named))
    stack = _run_record(tmp_path / "stack", epochs=False, done=True)
    (stack / "replicate-1").mkdir()
    shipped = ", ".join(available_models(replicates=False))
    assert not_a_model(str(stack / "replicate-1")).endswith(
        "(it holds nothing; no state.pt or saved model weights): give a model with weights: a shipped checkpoint "
        f"(checkpoints/: {shipped}), a training run's directory or its model/"
    )
    monkeypatch.setattr("lsa_interp.model.checkpoint.available_models", lambda replicates: [])
    assert "a shipped checkpoint (checkpoints/: none here)," in not_a_model(str(stack / "replicate-1"))


def test_a_sweeps_directory_is_named_as_such_with_one_of_its_runs(tmp_path, capsys):
    """A sweep's directory (plan.json, stacks/) given as --model: evaluate said 'not a checkpoint directory:
    config.json is missing'; every command that opens a model now names it and one of its runs."""
    sweep = tmp_path / "sweep"
    (sweep / "stacks" / "stack-001" / "replicate-1").mkdir(parents=True)
    (sweep / "stacks" / "stack-000" / "replicate-0").mkdir(parents=True)
    (sweep / "plan.json").write_text("{}")
    run = sweep / "stacks" / "stack-000" / "replicate-0"
    for command in ("evaluate", "fit", "roles"):
        err = _refused([command, "--model", str(sweep), "--device", "cpu", "--out", str(tmp_path / "o")], capsys)
        assert err.strip().endswith(
            f"error: {sweep} is a sweep's directory, not a model: give one of its runs (STACK/replicate-I), e.g. {run}"
        )
    (sweep / "stacks").rename(tmp_path / "elsewhere")
    err = _refused(["evaluate", "--model", str(sweep), "--device", "cpu"], capsys)
    bare = f"{sweep} is a sweep's directory, not a model: give one of its runs (STACK/replicate-I)"
    assert err.strip().endswith(bare)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["elsewhere", "sweep"]
