"""A training run's last saved state opened as a model: single runs, the plain nn.Transformer, stacks, the CLI."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from lsa_interp import cli
from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.data.loaders import load_tokenized
from lsa_interp.data.vocab import PAD
from lsa_interp.training import TrainConfig, Trainer
from lsa_interp.training.run_dir import METRICS_FILE
from lsa_interp.training.snapshot import _epochs, load_run_or_model, run_snapshot
from lsa_interp.training.stack_config import RunSpec, StackConfig
from lsa_interp.training.stack_trainer import StackTrainer
from tests.helpers import SMALL_MODEL

STEPS_PER_EPOCH = 29  # 1,824 training rows at batch 64


def assert_same_weights(first, second) -> None:
    one, two = first.state_dict(), second.state_dict()
    assert one.keys() == two.keys() and all(torch.equal(one[k], two[k].to(one[k].device)) for k in one)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    config = DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4)
    return save_dataset(generate_dataset(config, seed=3), tmp_path_factory.mktemp("data") / "tiny")


def _config(data_dir, **overrides) -> TrainConfig:
    base = {"data_dir": str(data_dir), "preset": "tiny", "epochs": 3, "batch_size": 64, "log_every": 5}
    return TrainConfig(**{**base, "model": SMALL_MODEL, "seed": 2, **overrides})


def test_an_unfinished_run_opens_at_its_saved_step_with_its_metadata(data_dir, tmp_path):
    trainer = Trainer.start(_config(data_dir, max_steps=35), tmp_path / "run")
    trainer.run()
    snapshot = run_snapshot(tmp_path / "run")
    assert not snapshot.training
    assert_same_weights(snapshot, trainer.model)
    meta = snapshot.metadata
    assert (meta["preset"], meta["seed"], meta["data_seed"], meta["batching"]) == ("tiny", 2, 3, "random")
    assert meta["steps"] == 35 and meta["snapshot"] and meta["train_config"]["max_steps"] == 35
    assert meta["epochs_completed"] == pytest.approx(35 / STEPS_PER_EPOCH)
    assert load_run_or_model(tmp_path / "run").metadata["steps"] == 35
    with pytest.raises(ValueError, match="replicate 1 out of range"):
        run_snapshot(tmp_path / "run", replicate=1)
    state = torch.load(tmp_path / "run" / "state.pt", weights_only=False)
    assert meta["train_seconds"] == round(state["elapsed"], 1) and "run" not in meta
    on_meta = load_run_or_model(tmp_path / "run", device="meta")
    assert {p.device.type for p in on_meta.parameters()} == {"meta"}


def test_a_run_without_a_preset_takes_its_dataset_s_and_its_finished_model_loads_as_a_checkpoint(data_dir, tmp_path):
    Trainer.start(_config(data_dir, preset=None, max_steps=4, epochs=1), tmp_path / "run").run()
    assert run_snapshot(tmp_path / "run").metadata["preset"] == "tiny"  # from the dataset's manifest
    model = load_run_or_model(tmp_path / "run" / "model", device="meta")  # a checkpoint inside a run directory
    assert "snapshot" not in model.metadata and {p.device.type for p in model.parameters()} == {"meta"}


def test_a_run_on_the_plain_transformer_opens_as_the_same_function(data_dir, tmp_path):
    trainer = Trainer.start(_config(data_dir, max_steps=6, architecture="reference"), tmp_path / "run")
    trainer.run()
    snapshot = run_snapshot(tmp_path / "run")
    split = load_tokenized(data_dir, "val")
    src, tgt_in = split.tokens.src[:16], split.tokens.tgt_in[:16]
    trainer.model.eval()
    with torch.no_grad():
        expected = trainer.model.decode(tgt_in, trainer.model.encode(src), src == PAD)
        got = snapshot.decode(tgt_in, snapshot.encode(src), src == PAD)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_each_run_of_a_stack_opens_as_its_replicate(data_dir, tmp_path):
    runs = (RunSpec(str(data_dir), 0, "random", 3, "tiny", "a"), RunSpec(str(data_dir), 1, "alphabet", 2, "tiny", "b"))
    config = StackConfig(runs=runs, batch_size=64, model=SMALL_MODEL, max_steps=40, log_every=5)
    trainer = StackTrainer.start(config, tmp_path / "stack")
    trainer.run()
    second = load_run_or_model(tmp_path / "stack" / "replicate-1")
    assert_same_weights(second, trainer.model.replicate_model(1))
    meta = second.metadata
    assert (meta["run"], meta["seed"], meta["batching"], meta["steps"]) == ("b", 1, "alphabet", 40)
    assert 1 < meta["epochs_completed"] <= 2
    records = [json.loads(line) for line in (tmp_path / "stack" / METRICS_FILE).read_text().splitlines()]
    b_epoch = next(r for r in records if r.get("type") == "epoch" and r.get("run") == "b")
    assert meta["epochs_completed"] == pytest.approx(40 * b_epoch["epoch"] / b_epoch["step"])  # b's epochs, not a's
    assert {p.device.type for p in load_run_or_model(tmp_path / "stack" / "replicate-1", "meta").parameters()} == {
        "meta"
    }
    assert run_snapshot(tmp_path / "stack").metadata["run"] == "a"
    with pytest.raises(ValueError, match=r"is a stack of 2 runs; open one of them as .*replicate-I \(I from 0 to 1\)"):
        load_run_or_model(tmp_path / "stack")  # which run is meant: it used to open replicate 0 silently
    with pytest.raises(ValueError, match="replicate 2 out of range: the stack has 2 runs"):
        run_snapshot(tmp_path / "stack", replicate=2)


def test_a_directory_without_a_run_or_a_state_is_refused(data_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a training run"):
        run_snapshot(tmp_path)
    Trainer.start(_config(data_dir), tmp_path / "fresh")
    with pytest.raises(FileNotFoundError, match="has saved no state yet"):
        run_snapshot(tmp_path / "fresh")


def test_evaluate_takes_a_run_directory(data_dir, tmp_path, capsys):
    Trainer.start(_config(data_dir, max_steps=5), tmp_path / "run").run()
    args = ["evaluate", "--model", str(tmp_path / "run"), "--data", str(data_dir), "--limit", "40"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 0
    assert "Which rule was applied" in capsys.readouterr().out


def test_epochs_come_from_the_records_before_the_state_s_offset(tmp_path):
    """A single run's epochs from its last step record before the offset; a stack's replicate from its own first
    epoch record, capped at its planned epochs. Records past the offset (another ratio) are not read."""
    assert _epochs(tmp_path, {"metrics_offset": 0, "step": 1}, None, 3) is None  # no metrics yet
    before = [
        {"type": "step", "step": 5, "epoch": 0.1, "run": "a"},
        {"type": "step", "step": 10, "epoch": 0.5},
        {"type": "epoch", "run": "a", "step": 40, "epoch": 1},
    ]
    after = [{"type": "step", "step": 30, "epoch": 3.0}, {"type": "epoch", "run": "b", "step": 1, "epoch": 1}]
    text = "".join(json.dumps(r) + "\n" for r in before)
    (tmp_path / METRICS_FILE).write_text(text + "".join(json.dumps(r) + "\n" for r in after))
    state = {"metrics_offset": len(text.encode()), "step": 15}
    assert _epochs(tmp_path, state, None, 3) == pytest.approx(0.75)
    assert _epochs(tmp_path, state, "a", 3) == pytest.approx(0.375)
    assert _epochs(tmp_path, {**state, "step": 400}, "a", 3) == 3
    assert _epochs(tmp_path, state, "b", 3) is None
    epochs_only = tmp_path / "epochs-only"
    epochs_only.mkdir()
    (epochs_only / METRICS_FILE).write_text(json.dumps(before[2]) + "\n")
    assert _epochs(epochs_only, {"metrics_offset": 10**6, "step": 15}, None, 3) is None  # no step record yet


def test_a_run_whose_dataset_is_gone_still_opens(data_dir, tmp_path):
    moved = shutil.copytree(data_dir, tmp_path / "data")
    Trainer.start(_config(moved, max_steps=2, epochs=1), tmp_path / "run").run()
    shutil.rmtree(moved)
    meta = run_snapshot(tmp_path / "run").metadata
    assert (meta["preset"], meta["data_seed"], meta["steps"]) == ("tiny", None, 2)
