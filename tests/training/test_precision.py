"""A run's precision: TF32 matmuls for ``tf32`` runs only, applied at every step and validation, so that runs
sharing a process (a sweep's stacks one after another, a benchmark's alternating steps) each keep their own."""

from __future__ import annotations

import warnings

import pytest
import torch

from lsa_interp.training import RunSpec, StackConfig, StackTrainer, TrainConfig, Trainer
from lsa_interp.training.precision import precision_autocast, set_matmul_precision
from lsa_interp.training.vmap_replicates import VmapReplicateTrainer
from tests.helpers import SMALL_MODEL

EXPECTED = {"tf32": "high", "fp32": "highest", "bf16": "highest"}


@pytest.fixture(autouse=True)
def _restore_matmul_precision():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_only_tf32_lets_fp32_matmuls_use_tf32(precision):
    set_matmul_precision("tf32")
    assert torch.get_float32_matmul_precision() == "high"
    set_matmul_precision(precision)
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("graphed", [False, True])
def test_the_forward_pass_autocasts_to_bf16_for_bf16_runs_only_and_caches_off_a_graph(precision, graphed):
    with precision_autocast(precision, "cpu", graphed):
        assert torch.is_autocast_enabled("cpu") == (precision == "bf16")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert torch.is_autocast_cache_enabled() == (not graphed)
        assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == (
            torch.bfloat16 if precision == "bf16" else torch.float32
        )
    assert not torch.is_autocast_enabled("cpu")


def test_the_autocast_is_for_the_given_device_and_bf16_there_too():
    """On CUDA autocast's own default is float16, so the bf16 dtype must be asked for (checked on the context,
    which a machine without CUDA builds disabled)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available"
        context = precision_autocast("bf16", "cuda", False)
    assert context.device == "cuda" and context.fast_dtype == torch.bfloat16


def _record(trainer, parameter) -> list[str]:
    """The matmul precision in effect at each forward pass (its autocast context) and backward pass of
    ``trainer``: wraps the autocast callables its step and validation call, and hooks ``parameter``'s gradient."""
    seen: list[str] = []

    def wrap(autocast):
        def recording():
            seen.append(torch.get_float32_matmul_precision())
            return autocast()

        return recording

    trainer._autocast = wrap(trainer._autocast)
    if isinstance(trainer, StackTrainer):
        trainer.stepper.autocast = wrap(trainer.stepper.autocast)
    parameter.register_hook(lambda grad: seen.append(torch.get_float32_matmul_precision()))
    return seen


def _single(data_dir, tmp_path, precision, kind):
    config = TrainConfig(
        data_dir=str(data_dir), preset="tiny", batch_size=32, max_steps=4, val_limit=8, model=SMALL_MODEL,
        precision=precision, replicates=1 if kind is Trainer else 2,
    )  # fmt: skip
    trainer = kind.start(config, tmp_path / precision)
    return trainer, _record(trainer, next(iter(trainer.trainable_parameters())))


@pytest.mark.parametrize("kind", [Trainer, VmapReplicateTrainer])
def test_alternating_single_runs_keep_their_own_matmul_precision(data_dir, tmp_path, kind):
    """A tf32 run built first used to leave TF32 on for an fp32 run built after it in the same process (the
    vmap stack is the benchmark's baseline)."""
    runs = {precision: _single(data_dir, tmp_path, precision, kind) for precision in ("tf32", "fp32")}
    plan = runs["tf32"][0].epoch_plan(0)
    for step in range(2):
        for trainer, _ in runs.values():
            trainer.train_step(plan[step])
    for trainer, _ in reversed(runs.values()):
        trainer.validate()
    for precision, (_, seen) in runs.items():
        assert len(seen) >= 5  # two forward and two backward passes, then validation's forward
        assert set(seen) == {EXPECTED[precision]}, precision


def _stack(data_dir, tmp_path, precision):
    config = StackConfig(
        runs=(RunSpec(data_dir=str(data_dir), seed=0),), batch_size=32, max_steps=4, val_limit=8, model=SMALL_MODEL,
        precision=precision,
    )  # fmt: skip
    trainer = StackTrainer.start(config, tmp_path / f"stack-{precision}")
    return trainer, _record(trainer, trainer.model.flat)


def test_alternating_stacks_keep_their_own_matmul_precision(data_dir, tmp_path):
    stacks = {precision: _stack(data_dir, tmp_path, precision) for precision in ("tf32", "fp32")}
    for _ in range(2):
        for trainer, _ in stacks.values():
            trainer.train_step()
    for trainer, _ in reversed(stacks.values()):
        trainer.epoch_records()
    for precision, (_, seen) in stacks.items():
        assert len(seen) >= 5
        assert set(seen) == {EXPECTED[precision]}, precision
