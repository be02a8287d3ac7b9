"""The vmap stack (the benchmark's baseline): each replicate trains exactly like a single run with its seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.model.checkpoint import load_model
from lsa_interp.training import TrainConfig, start_run
from lsa_interp.training.vmap_replicates import VmapReplicateTrainer
from tests.helpers import SMALL_MODEL


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


@pytest.mark.slow
def test_each_replicate_matches_a_single_run_with_its_seed(data_dir, tmp_path):
    no_dropout = {**SMALL_MODEL, "dropout": 0.0}
    trainer = VmapReplicateTrainer.start(
        _config(data_dir, replicates=2, max_steps=12, model=no_dropout), tmp_path / "both"
    )
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


def test_stacked_batch_pads_rows_without_targets(data_dir, tmp_path):
    trainer = VmapReplicateTrainer.start(_config(data_dir, replicates=2), tmp_path / "run")
    rows = (np.array([0, 1, 2]), np.array([5]))
    src, tgt_in, tgt_out = trainer.stacked_batch(rows)
    assert src.shape[:2] == tgt_in.shape[:2] == tgt_out.shape[:2] == (2, 3)
    assert (tgt_out[1, 1:] == 28).all() and (tgt_out[1, 0] != 28).any() and (tgt_out[0] != 28).any(dim=1).all()
    single_src, _, _ = trainer.train.batch(np.array([5]))
    assert torch.equal(src[1, 0, : single_src.shape[1]], single_src[0])


def test_replicates_must_be_positive(data_dir):
    with pytest.raises(ValueError, match="replicates must be at least 1"):
        _config(data_dir, replicates=0)
