"""benchmarks/train_throughput.py's stacking mode: what it times, skips and survives."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
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


def _recorded_stack_configs(monkeypatch) -> list:
    """The configs the benchmark's stacks are started with, recorded by a stand-in `StackTrainer`."""
    configs = []

    class FakeStackTrainer:
        @staticmethod
        def start(config, run_dir, force=False):
            configs.append(config)
            return SimpleNamespace(train_step=lambda: 0)

    monkeypatch.setattr(train_throughput, "StackTrainer", FakeStackTrainer)
    return configs


def test_a_stack_of_the_flash_attention_is_built_with_it_and_packing(monkeypatch):
    configs = _recorded_stack_configs(monkeypatch)
    for stacking in ("native-compile-flash-packed", "native-triton", "native-compile-packed"):
        train_throughput.stack_stepper("d", torch.device("cpu"), stacking, 2, "bf16")
    assert [(c.attention, c.packing, c.compile) for c in configs] == [
        ("flash", True, True), ("triton", False, False), ("sdpa", True, True)
    ]  # fmt: skip


def test_every_eager_stacking_runs_without_the_cuda_graph_and_a_misspelt_one_is_refused(monkeypatch, capsys):
    """``native-eager-packed`` is eager too (it ran graphed, as any name but ``native-eager`` did), and a name the
    benchmark does not know is an error rather than the plain graphed stack under that name."""
    configs = _recorded_stack_configs(monkeypatch)
    for stacking in ("native-eager", "native-eager-packed", "native-packed", "native-compile"):
        train_throughput.stack_stepper("d", torch.device("cpu"), stacking, 2, "fp32")
    assert [c.cuda_graph for c in configs] == [False, False, True, True]
    monkeypatch.setattr("sys.argv", ["train_throughput", "--device", "cpu", "--stacking", "native,nativ-compile"])
    with pytest.raises(SystemExit) as exit_info:
        train_throughput.main()
    assert exit_info.value.code == 2 and "unknown stacking nativ-compile; choose from: vmap" in capsys.readouterr().err


def test_the_baseline_is_built_before_the_first_configuration_and_compiled_code_is_forgotten_between_them(
    monkeypatch,
):
    """The single model's graph and optimizer state exist before any configuration is measured (the first one's peak
    memory used to include them), and each configuration starts after Dynamo's compiled entries are dropped (past
    its recompile limit a "compiled" stack ran eagerly)."""
    events = []
    monkeypatch.setattr(train_throughput, "our_stepper", lambda data_dir, device: lambda: events.append("baseline"))
    monkeypatch.setattr(train_throughput.torch._dynamo, "reset", lambda: events.append("reset"))

    def stack_stepper(data_dir, device, stacking, replicates, precision):
        events.append(f"build R={replicates}")
        return lambda: 32 * replicates

    monkeypatch.setattr(train_throughput, "stack_stepper", stack_stepper)
    args = SimpleNamespace(stacking="native-compile", replicates="1,2", precision="bf16", steps=1, budget_minutes=5.0)
    train_throughput.stacking_matrix(args, "unused", torch.device("cpu"))
    assert events[:2] == ["baseline", "baseline"] and events[2] == "reset" and events[3] == "build R=1"
    assert events.count("reset") == 2 and events.index("build R=2") - 1 == events.index("reset", 4)
