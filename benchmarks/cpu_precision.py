"""Whether a CPU's bf16 units speed up training: matrix products and whole training steps, fp32 against bf16.

Some CPUs multiply bf16 matrices several times faster than fp32 (AVX-512 BF16, AMX tiles, reached through
oneDNN). This script measures, on the machine it runs on:

- one matrix product of the paper's shapes (a micro-batch of 400 tokens of width 128 against 512) in fp32 and
  bf16, in GFLOP/s;
- the training step (copy-20, the reference's batches in ``--micro-batches`` parts, the paper's model) in three
  modes: fp32 (the recipe), ``bf16`` autocast (``lsa-interp train --precision bf16``), and fp32 tensors whose
  matrix products oneDNN may compute in bf16 (``torch.set_float32_matmul_precision("medium")``; not a precision
  the trainer offers: the trainer sets fp32's "highest" at every step, so this mode replaces that call for its
  own steps only).

oneDNN builds a kernel for each new matrix shape, and micro-batches change shape from step to step, so each mode
first trains ``--warm-up`` steps; then the modes alternate in three rounds (load on a shared machine hits all of
them) and the median tasks/s of each and its ratio to fp32 are printed.

    python -m benchmarks.cpu_precision [--threads 1] [--micro-batches 4] [--warm-up 300] [--steps 40]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import contextmanager

import torch

import lsa_interp.training.trainer as trainer_module
from benchmarks.train_throughput import BATCH, our_stepper, tasks_per_s
from lsa_interp.data import PRESETS, generate_dataset, save_dataset

TOKENS, WIDTH, HIDDEN = 400, 128, 512
"""A micro-batch of 8 copy-20 rows (about 400 source tokens) through the feed-forward layer's first product."""


def matmul_gflops(dtype: torch.dtype, repeats: int = 200) -> float:
    """GFLOP/s of ``[TOKENS, WIDTH] @ [WIDTH, HIDDEN]`` in ``dtype`` (after 10 untimed products)."""
    x, w = torch.randn(TOKENS, WIDTH, dtype=dtype), torch.randn(WIDTH, HIDDEN, dtype=dtype)
    for _ in range(10):
        x @ w
    start = time.perf_counter()
    for _ in range(repeats):
        x @ w
    return 2 * TOKENS * WIDTH * HIDDEN * repeats / (time.perf_counter() - start) / 1e9


@contextmanager
def onednn_bf16_matmuls():
    """Within the block, the trainer's steps run fp32 matrix products at "medium" precision (bf16 in oneDNN)."""
    original = trainer_module.set_matmul_precision
    trainer_module.set_matmul_precision = lambda precision: torch.set_float32_matmul_precision("medium")
    try:
        yield
    finally:
        trainer_module.set_matmul_precision = original
        torch.set_float32_matmul_precision("highest")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--warm-up", type=int, default=300, help="untimed steps of each mode first")
    parser.add_argument("--steps", type=int, default=40, help="steps per mode and round")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    fp32, bf16 = matmul_gflops(torch.float32), matmul_gflops(torch.bfloat16)
    print(f"matmul {TOKENS}x{WIDTH}x{HIDDEN}: fp32 {fp32:,.0f} GFLOP/s | bf16 {bf16:,.0f} GFLOP/s | {bf16 / fp32:.2f}x")
    device = torch.device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = str(save_dataset(generate_dataset(PRESETS["copy-20"], seed=0), f"{tmp}/copy-20"))
        plain = our_stepper(data_dir, device, micro_batches=args.micro_batches)
        autocast = our_stepper(data_dir, device, micro_batches=args.micro_batches, precision="bf16")
        medium = our_stepper(data_dir, device, micro_batches=args.micro_batches)

        def medium_step() -> None:
            with onednn_bf16_matmuls():
                medium()

        modes = {"fp32": plain, "bf16 autocast": autocast, "fp32, bf16 matmuls": medium_step}
        for name, step in modes.items():
            start = time.perf_counter()
            tasks_per_s(step, args.warm_up, device)
            print(f"warm-up of {name}: {args.warm_up} steps in {time.perf_counter() - start:.1f} s")
        rounds = [{name: tasks_per_s(step, args.steps, device) for name, step in modes.items()} for _ in range(3)]
    base = statistics.median(r["fp32"] for r in rounds)
    for name in modes:
        rate = statistics.median(r[name] for r in rounds)
        each = ", ".join(f"{r[name]:.0f}" for r in rounds)
        print(f"{name}: {rate:,.0f} tasks/s ({each}) | {rate / base:.2f}x fp32")
    print(
        f"batch {BATCH} in {args.micro_batches} micro-batches, {args.threads} threads, {args.steps} steps a round "
        "after the warm-up; medians of 3 alternating rounds"
    )


if __name__ == "__main__":
    main()
