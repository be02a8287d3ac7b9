"""benchmarks/cpu_precision.py: its bf16-matmul mode reaches the trainer's steps and is undone after them."""

from __future__ import annotations

import pytest
import torch

import lsa_interp.training.trainer as trainer_module
from benchmarks import cpu_precision


def test_the_trainer_sets_medium_precision_inside_the_block_and_its_own_after_it():
    original = trainer_module.set_matmul_precision
    with cpu_precision.onednn_bf16_matmuls():
        trainer_module.set_matmul_precision("fp32")
        assert torch.get_float32_matmul_precision() == "medium"
    assert trainer_module.set_matmul_precision is original
    assert torch.get_float32_matmul_precision() == "highest"
    trainer_module.set_matmul_precision("tf32")
    assert torch.get_float32_matmul_precision() == "high"
    trainer_module.set_matmul_precision("fp32")


def test_the_block_is_undone_when_a_step_raises():
    original = trainer_module.set_matmul_precision
    with pytest.raises(RuntimeError), cpu_precision.onednn_bf16_matmuls():
        trainer_module.set_matmul_precision("fp32")
        raise RuntimeError("a step failed")
    assert trainer_module.set_matmul_precision is original
    assert torch.get_float32_matmul_precision() == "highest"


def test_matmul_rate_counts_two_flops_per_multiply_add(monkeypatch):
    """Over a fake clock of one second for 5 products, the rate is 5 x 2 x 400 x 128 x 512 FLOP per second."""
    clock = iter([10.0, 11.0])
    monkeypatch.setattr(cpu_precision.time, "perf_counter", lambda: next(clock))
    assert cpu_precision.matmul_gflops(torch.float32, repeats=5) == pytest.approx(5 * 2 * 400 * 128 * 512 / 1e9)
