"""The recipe one run and a stack share, and how a run's config picks its trainer."""

from __future__ import annotations

import re
from dataclasses import asdict, fields

import jaxtyping
import pytest
import torch

from lsa_interp.training import Recipe, RunSpec, StackConfig, StackTrainer, TrainConfig, start_run
from lsa_interp.training.stack_trainer import run_train_config

CHANGED_RECIPE = {
    "batch_size": 7,
    "lr": 0.5,
    "betas": (0.8, 0.9),
    "weight_decay": 0.2,
    "warmup_start": 0.3,
    "final_lr_factor": 0.4,
    "precision": "bf16",
    "device": "cpu",
    "max_steps": 9,
    "max_minutes": 1.5,
    "checkpoint_every": 11,
    "log_every": 13,
    "val_limit": 17,
    "cuda_graph": False,
    "compile": True,
    "attention": "triton",
    "packing": True,
    "length_bucketing": True,
    "model": {"d_model": 32},
}


def test_the_changed_recipe_sets_every_recipe_field_to_a_non_default():
    defaults = Recipe()
    assert set(CHANGED_RECIPE) == {f.name for f in fields(Recipe)}
    assert all(getattr(defaults, name) != value for name, value in CHANGED_RECIPE.items())


def test_a_stack_of_a_train_config_and_its_runs_carry_every_recipe_field():
    own = dict(data_dir="d", preset="p", seed=4, epochs=3, batching="alphabet", replicates=2)
    config = TrainConfig(**own, **CHANGED_RECIPE)
    stack = StackConfig.from_train_config(config)
    runs = [(run.seed, run.epochs, run.batching, run.preset) for run in stack.runs]
    assert runs == [(4, 3, "alphabet", "p"), (5, 3, "alphabet", "p")]
    assert {name: getattr(stack, name) for name in CHANGED_RECIPE} == CHANGED_RECIPE
    per_run = run_train_config(stack, stack.runs[1])
    assert {name: getattr(per_run, name) for name in CHANGED_RECIPE} == CHANGED_RECIPE
    assert (per_run.seed, per_run.replicates, per_run.data_dir) == (5, 1, "d")


def test_recipe_values_are_checked_for_a_run_and_for_a_stack():
    for make in (lambda **kw: TrainConfig(data_dir="d", **kw), lambda **kw: StackConfig(runs=(RunSpec("d"),), **kw)):
        with pytest.raises(ValueError, match="unknown precision 'fp8'"):
            make(precision="fp8")
        with pytest.raises(ValueError, match="batch size must be positive, got 0"):
            make(batch_size=0)
        with pytest.raises(ValueError, match="max steps must be positive, got 0"):
            make(max_steps=0)
        with pytest.raises(ValueError, match="unknown attention 'flex'; choose one of: sdpa, triton, flash"):
            make(attention="flex")
        for bad in ({}, {"packing": True}, {"precision": "bf16"}, {"packing": True, "precision": "tf32"}):
            with pytest.raises(ValueError, match="the flash attention runs on packed rows in bf16: use packing and"):
                make(attention="flash", **bad)
        assert make(attention="flash", packing=True, precision="bf16").attention == "flash"
        for bad, message in (
            ({"lr": 0.0}, "lr must be a positive finite number, got 0.0"),
            ({"lr": float("nan")}, "lr must be a positive finite number, got nan"),
            ({"lr": float("inf")}, "lr must be a positive finite number, got inf"),
            ({"device": "gpu"}, "unknown device 'gpu'; choose one of: auto, cpu, cuda, cuda:N"),
            ({"betas": (0.9, 1.0)}, r"betas must be two numbers in \[0, 1\), got \(0.9, 1.0\)"),
            ({"betas": (-0.1, 0.9)}, "betas must be two numbers"),
            ({"weight_decay": -0.01}, "weight_decay must be at least 0, got -0.01"),
            ({"warmup_start": -1e-4}, "warmup_start must be at least 0"),
            ({"final_lr_factor": float("nan")}, "final_lr_factor must be at least 0, got nan"),
            ({"log_every": 0}, "log_every must be at least 1, got 0"),  # each was a ZeroDivisionError at step 1
            ({"checkpoint_every": 0}, "checkpoint_every must be at least 1, got 0"),
            ({"val_limit": 0}, "val_limit must be at least 1, got 0"),
            ({"max_minutes": -1.0}, "max minutes must be a positive finite number, got -1.0"),
            ({"max_minutes": float("nan")}, "max minutes must be a positive finite number, got nan"),
        ):
            with pytest.raises(ValueError, match=message):
                make(**bad)
        assert [make(device=device).device for device in ("auto", "cpu", "cuda", "cuda:1")] == [
            "auto",
            "cpu",
            "cuda",
            "cuda:1",
        ]  # pick_device finds out later whether the GPU is there
        with pytest.raises(ValueError, match="unknown device 'cuda:'"):
            make(device="cuda:")
        edges = {"betas": (0.0, 0.999), "weight_decay": 0.0, "warmup_start": 0.0, "final_lr_factor": 0.0}
        assert make(**edges, lr=1e-9).weight_decay == 0.0  # no decay and a schedule that starts or ends at 0
    with pytest.raises(ValueError, match="epochs must be positive, got 0"):
        TrainConfig(data_dir="d", epochs=0)
    with pytest.raises(ValueError, match="one model at a time: use replicates 1, no compile"):
        TrainConfig(data_dir="d", architecture="reference", compile=True)
    with pytest.raises(ValueError, match="sdpa attention, no packing"):
        TrainConfig(data_dir="d", architecture="reference", packing=True)
    with pytest.raises(ValueError, match="micro-batches split one model's eager step: .* no packing"):
        TrainConfig(data_dir="d", micro_batches=2, packing=True)


def test_a_run_of_a_stack_is_named_by_its_preset_batching_and_seed_unless_named():
    assert RunSpec("d", seed=3, batching="alphabet", preset="copy-20").name == "copy-20-alphabet-s3"
    assert RunSpec("d", seed=3).name == "data-random-s3"  # no preset: the data
    assert RunSpec("d", name="mine").name == "mine"
    for bad, message in (
        ({"seed": -1}, "seed must be in 0..2,147,483,647, got -1"),
        ({"seed": 2**32}, "seed must be in 0..2,147,483,647, got 4,294,967,296"),  # an OverflowError in the stack
        ({"epochs": 0}, "epochs must be positive"),
    ):
        with pytest.raises(ValueError, match=message):
            RunSpec("d", **bad)
    with pytest.raises(ValueError, match="unknown batching 'none'"):
        RunSpec("d", batching="none")
    assert TrainConfig(data_dir="d", seed=2**31 - 2, replicates=2).seed == 2_147_483_646
    last = r"^seed must be in 0\.\.2,147,483,646 \(the last replicate's at most 2,147,483,647\), got 2,147,483,647$"
    with pytest.raises(ValueError, match=last):
        TrainConfig(data_dir="d", seed=2**31 - 1, replicates=2)


def test_a_compiled_run_of_one_model_trains_as_a_stack_of_one(tmp_path):
    from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
    from lsa_interp.data.transformations import SEEN

    data = DatasetConfig(name="t", n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4,
                         train_transformations=SEEN[:2])  # fmt: skip
    data_dir = save_dataset(generate_dataset(data, seed=1), tmp_path / "data")
    small = {"d_model": 16, "n_heads": 2, "d_mlp": 32, "n_encoder_layers": 1, "n_decoder_layers": 1}
    trainer = start_run(TrainConfig(data_dir=str(data_dir), compile=True, device="cpu", model=small), tmp_path / "run")
    assert isinstance(trainer, StackTrainer)
    assert trainer.config.replicates == 1 and trainer.config.compile
    plain = start_run(TrainConfig(data_dir=str(data_dir), device="cpu", model=small), tmp_path / "plain")
    assert not isinstance(plain, StackTrainer)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_a_run_with_the_triton_attention_is_a_stack_that_needs_a_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    config = TrainConfig(data_dir=str(tmp_path), device="cpu", attention="triton")
    assert config.stacked and not TrainConfig(data_dir="d").stacked
    with pytest.raises(ValueError, match="the triton attention needs a CUDA device"):
        start_run(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="one model at a time: use replicates 1, no compile, sdpa attention"):
        TrainConfig(data_dir="d", architecture="reference", attention="triton")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_a_run_with_the_flash_attention_is_a_stack_that_needs_a_gpu(tmp_path):
    config = TrainConfig(data_dir=str(tmp_path), device="cpu", attention="flash", packing=True, precision="bf16")
    assert config.stacked
    with pytest.raises(ValueError, match="the flash attention needs a CUDA device"):
        start_run(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_train_command_passes_compile_to_the_run(tmp_path, monkeypatch):
    import lsa_interp.training
    from lsa_interp import cli

    seen = []

    def fake_start_run(config, run_dir, force=False):
        seen.append(config)
        raise ValueError("stopped by the test")

    monkeypatch.setattr(lsa_interp.training, "start_run", fake_start_run)
    for flag in ("--compile", "--no-compile"):
        with pytest.raises(SystemExit) as info:
            cli.main(["train", "--data", str(tmp_path), "--out", str(tmp_path / flag), flag])
        assert info.value.code == 2
    assert [config.compile for config in seen] == [True, False]
    for attention in ("triton", "sdpa"):
        with pytest.raises(SystemExit):
            cli.main(["train", "--data", str(tmp_path), "--out", str(tmp_path / attention), "--attention", attention])
    assert [config.attention for config in seen[2:]] == ["triton", "sdpa"]
    with pytest.raises(SystemExit):
        cli.main(["train", "--data", str(tmp_path), "--out", str(tmp_path / "packed"), "--packing"])
    assert seen[-1].packing and seen[-1].stacked and not seen[-2].packing


def test_micro_batches_may_go_down_to_one_row_each():
    assert TrainConfig(data_dir="d", batch_size=8, micro_batches=8).micro_batches == 8
    with pytest.raises(ValueError, match="between 1 and the batch size 8, got 9"):
        TrainConfig(data_dir="d", batch_size=8, micro_batches=9)


def test_a_damaged_or_foreign_config_names_its_missing_and_unknown_keys():
    """`train --resume` on a train_config.json that lost keys failed with a KeyError traceback; an older config that
    lacks a newer field with a default still loads."""
    config = asdict(TrainConfig(data_dir="d"))
    assert TrainConfig.from_dict(config) == TrainConfig(data_dir="d")
    older = {key: value for key, value in config.items() if key not in ("attention", "packing", "length_bucketing")}
    assert TrainConfig.from_dict(older).data_dir == "d"
    with pytest.raises(ValueError, match="^not a training config: missing 'betas'; missing 'data_dir'$"):
        TrainConfig.from_dict({})
    with pytest.raises(ValueError, match="^not a training config: unknown key 'zzz'$"):
        TrainConfig.from_dict({**config, "zzz": 1})
    stack = StackConfig.from_train_config(TrainConfig(data_dir="d", replicates=2)).to_dict()
    assert StackConfig.from_dict(stack).runs[1].seed == 1
    with pytest.raises(ValueError, match="^not a stack config: missing 'runs'$"):
        StackConfig.from_dict({k: v for k, v in stack.items() if k != "runs"})
    with pytest.raises(ValueError, match="^not a stack config's run: missing 'data_dir'$"):
        StackConfig.from_dict({**stack, "runs": [{"seed": 0}]})


@pytest.mark.parametrize(
    ("changed", "problem"),
    [
        ({"lr": "fast"}, "lr must be a number, got 'fast'"),
        ({"betas": 5}, "betas must be a list of two numbers, got 5"),
        ({"betas": [0.9]}, "betas must be a list of two numbers, got [0.9]"),
        ({"micro_batches": "x"}, "micro_batches must be an integer, got 'x'"),
        ({"seed": None}, "seed must be an integer, got None"),
        ({"seed": True}, "seed must be an integer, got True"),
        ({"data_dir": 5}, "data_dir must be a string, got 5"),
        ({"model": "big"}, "model must be an object of model config keys, got 'big'"),
        ({"compile": "yes"}, "compile must be true or false, got 'yes'"),
        ({"compile": 1}, "compile must be true or false, got 1"),
        ({"max_steps": 1.5}, "max_steps must be an integer or null, got 1.5"),
        ({"lr": "fast", "seed": None}, "lr must be a number, got 'fast'; seed must be an integer, got None"),
    ],
)
def test_a_saved_value_of_the_wrong_type_is_named(changed, problem):
    """`train --resume` of a train_config.json with a value of the wrong type ended in a TypeError traceback (a
    comparison of str and int) or trained with it; JSON carries no types, so loading checks each field's."""
    config = {**asdict(TrainConfig(data_dir="d")), **changed}
    with pytest.raises(ValueError, match="^" + re.escape(f"not a training config: {problem}") + "$"):
        TrainConfig.from_dict(config)
    assert TrainConfig.from_dict({**config, **asdict(TrainConfig(data_dir="d"))}) == TrainConfig(data_dir="d")


def test_a_stack_config_checks_its_runs_types_too():
    stack = StackConfig.from_train_config(TrainConfig(data_dir="d", replicates=2)).to_dict()
    assert StackConfig.from_dict({**stack, "max_minutes": None, "val_limit": 5}).val_limit == 5
    with pytest.raises(ValueError, match="^not a stack config: runs must be a list of run objects, got 3$"):
        StackConfig.from_dict({**stack, "runs": 3})
    with pytest.raises(ValueError, match=r"^not a stack config: runs must be a list of run objects, got \[3\]$"):
        StackConfig.from_dict({**stack, "runs": [3]})
    with pytest.raises(ValueError, match=r"^not a stack config's run: seed must be an integer, got '1'$"):
        StackConfig.from_dict({**stack, "runs": [{**stack["runs"][0], "seed": "1"}]})
    with pytest.raises(ValueError, match=r"^not a stack config's run: preset must be a string or null, got 20$"):
        StackConfig.from_dict({**stack, "runs": [{**stack["runs"][0], "preset": 20}]})


def test_a_model_key_that_is_not_a_model_config_field_is_refused_with_the_recipe():
    """A model override `{"d_modle": 3}` reached `ModelConfig(**model)` as a TypeError traceback at training time."""
    for make in (lambda **kw: TrainConfig(data_dir="d", **kw), lambda **kw: StackConfig(runs=(RunSpec("d"),), **kw)):
        with pytest.raises(ValueError, match=r"^model must map model config keys \(d_model, n_heads, .*'d_modle': 3"):
            make(model={"d_modle": 3})
        assert make(model={"d_model": 64}).model == {"d_model": 64}


def test_one_beta_is_refused_where_no_type_checker_runs(monkeypatch):
    """A user's Python does not check `tuple[float, float]`: `betas=(0.9,)` was accepted."""
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)
    with pytest.raises(ValueError, match=r"^betas must be two numbers in \[0, 1\), got \(0.9,\)$"):
        TrainConfig(data_dir="d", betas=(0.9,))
