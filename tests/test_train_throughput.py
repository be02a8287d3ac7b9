"""benchmarks/train_throughput.py's stacking mode: what it times, skips and survives."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from benchmarks import train_throughput


def test_a_failing_configuration_is_recorded_and_the_rest_are_still_timed(monkeypatch):
    """A configuration that raises (a kernel never run on that machine) costs the others nothing, and the flash
    attention is asked for in bf16 only. Fake steps stand in for the models."""
    built = []

    def stack_stepper(data_dir, device, stacking, replicates, precision):
        built.append((stacking, replicates, precision))
        if stacking == "native-compile-flash-packed":
            raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.\nmore lines")
        return lambda: 32 * replicates

    monkeypatch.setattr(train_throughput, "stack_stepper", stack_stepper)
    monkeypatch.setattr(train_throughput, "our_stepper", lambda data_dir, device: lambda: None)
    args = SimpleNamespace(
        stacking="native-compile-flash-packed,native", replicates="2", precision="bf16,fp32", steps=2,
        budget_minutes=5.0,
    )  # fmt: skip
    report = train_throughput.stacking_matrix(args, "unused", torch.device("cpu"))
    assert built == [("native-compile-flash-packed", 2, "bf16"), ("native", 2, "bf16"), ("native", 2, "fp32")]
    assert [(r["stacking"], r["precision"]) for r in report["results"]] == [("native", "bf16"), ("native", "fp32")]
    assert [(s["stacking"], s["precision"], s["why"]) for s in report["skipped"]] == [
        ("native-compile-flash-packed", "bf16", "RuntimeError: FlashAttention only supports Ampere GPUs or newer."),
        ("native-compile-flash-packed", "fp32", "the flash attention runs in bf16 only"),
    ]


def test_a_stack_of_the_flash_attention_is_built_with_it_and_packing(monkeypatch):
    configs = []

    class FakeStackTrainer:
        @staticmethod
        def start(config, run_dir, force=False):
            configs.append(config)
            return SimpleNamespace(train_step=lambda: 0)

    monkeypatch.setattr(train_throughput, "StackTrainer", FakeStackTrainer)
    for stacking in ("native-compile-flash-packed", "native-triton", "native-compile-packed"):
        train_throughput.stack_stepper("d", torch.device("cpu"), stacking, 2, "bf16")
    assert [(c.attention, c.packing, c.compile) for c in configs] == [
        ("flash", True, True), ("triton", False, False), ("sdpa", True, True)
    ]  # fmt: skip
