"""Training a plain ``nn.Transformer`` (the reference architecture) with the same loop as the hooked model."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from lsa_interp import cli
from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.data.vocab import PAD
from lsa_interp.model import ModelConfig, convert_reference_state_dict
from lsa_interp.model.checkpoint import load_model
from lsa_interp.model.reference import ReferenceTransformer
from lsa_interp.training import TrainConfig, Trainer
from tests.helpers import assert_same_weights

SMALL = {"d_model": 32, "n_heads": 4, "d_mlp": 64, "n_encoder_layers": 2, "n_decoder_layers": 2}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """1,824 training rows: 29 steps an epoch at batch 64."""
    config = DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4)
    return save_dataset(generate_dataset(config, seed=3), tmp_path_factory.mktemp("data") / "tiny")


def test_reference_run_trains_an_nn_transformer_and_saves_the_same_function_as_a_hooked_checkpoint(data_dir, tmp_path):
    """The run's model is a plain ``nn.Transformer``; its epoch is validated and its checkpoint is the hooked
    model with the same weights (same teacher-forced logits)."""
    config = TrainConfig(
        data_dir=str(data_dir), epochs=1, batch_size=64, val_limit=64, architecture="reference", model=SMALL
    )
    trainer = Trainer.start(config, tmp_path / "run")
    assert isinstance(trainer.model, ReferenceTransformer) and isinstance(trainer.model.transformer, nn.Transformer)
    run_dir = trainer.run()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records if "val_acc" in r] == [1]
    saved = load_model(run_dir / "model")
    assert saved.metadata["train_config"]["architecture"] == "reference"
    src, tgt_in, _ = trainer.val.batch(torch.arange(16).numpy())
    with torch.no_grad():
        expected = trainer.model.eval()(src, tgt_in)
        torch.testing.assert_close(saved.decode(tgt_in, saved.encode(src), src == PAD), expected, atol=1e-5, rtol=0)


def test_the_loop_trains_both_architectures_alike_from_the_same_weights(data_dir, tmp_path):
    """Without dropout, a plain ``nn.Transformer`` and the hooked model started from the same weights end 12
    steps of the same batches as the same function with the same weights, except the attention key biases
    (see `assert_same_weights`)."""
    model = {**SMALL, "dropout": 0.0}
    runs = {}
    for architecture in ("reference", "hooked"):
        config = TrainConfig(
            data_dir=str(data_dir), batch_size=64, max_steps=12, architecture=architecture, model=model
        )
        runs[architecture] = Trainer.start(config, tmp_path / architecture)
    reference, hooked = runs["reference"].model, runs["hooked"].model
    cfg = ModelConfig(**model)
    hooked.load_state_dict(convert_reference_state_dict(reference.state_dict(), cfg))
    start = {name: value.clone() for name, value in hooked.state_dict().items()}
    for trainer in runs.values():
        trainer.run()
    assert runs["reference"].step == runs["hooked"].step == 12
    after = convert_reference_state_dict(reference.state_dict(), cfg)
    assert_same_weights(hooked.state_dict(), after, cfg.d_model)
    moved = (after["encoder.0.attn.in_proj_weight"] - start["encoder.0.attn.in_proj_weight"]).abs().max()
    assert moved > 1e-3, "12 steps should move the weights"
    src, tgt_in, _ = runs["hooked"].val.batch(torch.arange(32).numpy())
    with torch.no_grad():
        torch.testing.assert_close(
            hooked.eval().decode(tgt_in, hooked.encode(src), src == PAD),
            reference.eval()(src, tgt_in),
            atol=1e-4,
            rtol=0,
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"architecture": "gpt"}, "unknown architecture 'gpt'; choose one of: hooked, reference"),
        ({"architecture": "reference", "replicates": 2}, "trains one model at a time"),
    ],
)
def test_bad_architectures_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(data_dir="d", **overrides)


def test_cli_refuses_an_unknown_architecture_before_generating_data(tmp_path, capsys):
    """Exit 2 with one line naming the choices, and nothing written under ``--out``."""
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--out", str(tmp_path / "R"), "--architecture", "gpt"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "choose one of: hooked, reference" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "R").exists()
