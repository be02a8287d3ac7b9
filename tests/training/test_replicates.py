"""Replicates in one process: each replicate trains exactly like a single run with its seed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.model.checkpoint import load_model
from lsa_interp.training import TrainConfig, resume_run, start_run
from lsa_interp.training.replicates import ReplicateTrainer

SMALL_MODEL = {"d_model": 32, "n_heads": 4, "d_mlp": 64, "n_encoder_layers": 2, "n_decoder_layers": 2}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    config = DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4)
    return save_dataset(generate_dataset(config, seed=3), tmp_path_factory.mktemp("data") / "tiny")


def _config(data_dir, **overrides):
    base = dict(
        data_dir=str(data_dir),
        preset="tiny",
        seed=5,
        epochs=2,
        batch_size=64,
        lr=3e-3,
        log_every=4,
        val_limit=50,
        batching="alphabet",
        model=SMALL_MODEL,
    )
    return TrainConfig(**{**base, **overrides})


def _weights(path):
    return load_file(path / "model.safetensors")


def test_each_replicate_matches_a_single_run_with_its_seed(data_dir, tmp_path):
    no_dropout = {**SMALL_MODEL, "dropout": 0.0}
    trainer = start_run(_config(data_dir, replicates=2, max_steps=12, model=no_dropout), tmp_path / "both")
    assert isinstance(trainer, ReplicateTrainer)
    plan = trainer.epoch_plan(0)
    assert len({len(rows) for step in plan for rows in step}) > 1, "uneven batches must be padded"
    trainer.run()
    for index, seed in enumerate((5, 6)):
        start_run(_config(data_dir, seed=seed, max_steps=12, model=no_dropout), tmp_path / f"s{seed}").run()
        single = _weights(tmp_path / f"s{seed}" / "model")
        stacked = _weights(tmp_path / "both" / f"replicate-{index}" / "model")
        assert single.keys() == stacked.keys()
        for name in single:
            a, b = stacked[name], single[name]
            if name.endswith("in_proj_bias"):  # key biases get a zero gradient up to rounding, which AdamW
                d = SMALL_MODEL["d_model"]  # scales into full-size random steps; they cannot change outputs
                a, b = torch.cat([a[:d], a[2 * d :]]), torch.cat([b[:d], b[2 * d :]])
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
        meta = load_model(tmp_path / "both" / f"replicate-{index}" / "model").metadata
        assert meta["seed"] == seed and meta["replicate"] == index and meta["steps"] == 12
    first, second = (_weights(tmp_path / "both" / f"replicate-{i}" / "model") for i in (0, 1))
    assert not torch.equal(first["unembed.weight"], second["unembed.weight"])


def test_replicate_run_logs_every_replicate_and_resumes_exactly(data_dir, tmp_path):
    probe = start_run(_config(data_dir), tmp_path / "probe")
    end = probe.steps_per_epoch + 4
    whole = start_run(_config(data_dir, replicates=3, max_steps=end), tmp_path / "whole")
    whole.run()
    records = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in records if r["type"] == "epoch"]
    assert [(r["epoch"], r["replicate"]) for r in epochs] == [(1, i) for i in range(3)]
    steps = [r for r in records if r["type"] == "step"]
    assert all(len(r["train_loss_by_replicate"]) == 3 for r in steps)
    assert len({round(x, 6) for x in steps[-1]["train_loss_by_replicate"]}) == 3
    assert whole.tasks_in(whole.epoch_plan(0)[0]) == sum(len(rows) for rows in whole.epoch_plan(0)[0])

    start_run(_config(data_dir, replicates=3, max_steps=end - 6), tmp_path / "cut").run()
    resume_run(tmp_path / "cut", max_steps=end).run()
    for index in range(3):
        a = _weights(tmp_path / "whole" / f"replicate-{index}" / "model")
        b = _weights(tmp_path / "cut" / f"replicate-{index}" / "model")
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_stacked_batch_pads_rows_without_targets(data_dir, tmp_path):
    trainer = start_run(_config(data_dir, replicates=2), tmp_path / "run")
    rows = (np.array([0, 1, 2]), np.array([5]))
    src, tgt_in, tgt_out = trainer.stacked_batch(rows)
    assert src.shape[:2] == tgt_in.shape[:2] == tgt_out.shape[:2] == (2, 3)
    assert (tgt_out[1, 1:] == 28).all() and (tgt_out[1, 0] != 28).any() and (tgt_out[0] != 28).any(dim=1).all()
    single_src, _, _ = trainer.train.batch(np.array([5]))
    assert torch.equal(src[1, 0, : single_src.shape[1]], single_src[0])


def test_replicates_must_be_positive(data_dir):
    with pytest.raises(ValueError, match="replicates must be at least 1"):
        _config(data_dir, replicates=0)


def test_cli_trains_replicates(data_dir, tmp_path, capsys):
    from lsa_interp import cli

    args = [
        "train",
        "--data",
        str(data_dir),
        "--out",
        str(tmp_path / "run"),
        "--preset",
        "tiny",
        "--replicates",
        "2",
        "--max-steps",
        "3",
        "--batch-size",
        "64",
        "--val-limit",
        "20",
        "--model-config",
        json.dumps(SMALL_MODEL),
    ]
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 0
    assert "model written" in capsys.readouterr().out
    seeds = [load_model(tmp_path / "run" / f"replicate-{i}" / "model").metadata["seed"] for i in (0, 1)]
    assert seeds == [0, 1]
