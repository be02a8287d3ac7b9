"""Where a stacked training step spends its time: a kernel profile and a few one-change timings.

For each ``--replicates`` and ``--precision``: the top kernels of the stacked step (eager; graphed with
``--compile``, whose eager steps would recompile at every new width; torch.profiler,
self device time per step, calls per step), the step's device time against its wall time (launch-bound or
not), and the padding of the graphed batches (full tensor width against the mean row length). Then, for the
largest stack (``--one-change``), the graphed step's time with one change each: no dropout, and each
attention backend of ``scaled_dot_product_attention`` forced. ``--compile`` profiles and times the stack
with ``torch.compile`` inside the step, ``--attention triton`` with the stack's own attention kernel and
``--packing`` with packed rows (the one-change timings keep sdpa and padding). ``--json OUT`` writes every
number (rewritten after each part).

    python -m benchmarks.profile_stack --device cuda --replicates 1,64 --precision bf16,fp32 --one-change --json OUT
    python -m benchmarks.profile_stack --device cuda --replicates 1,8 --precision bf16 --compile --json OUT
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from benchmarks.train_throughput import _bench_config, _release, _write_json, timed
from lsa_interp.data import PRESETS, generate_dataset, save_dataset
from lsa_interp.training import StackConfig, StackTrainer


def stack_trainer(data_dir: str, device: torch.device, replicates: int, precision: str, **options) -> StackTrainer:
    """A fresh stack of ``replicates`` models on ``data_dir`` (``options``: `TrainConfig` fields)."""
    config = _bench_config(data_dir, device, replicates=replicates, precision=precision, **options)
    return StackTrainer.start(StackConfig.from_train_config(config), tempfile.mkdtemp(), force=True)


def padding(trainer: StackTrainer) -> dict:
    """Full widths of the training tensors (what a graphed step computes) against the mean row lengths."""
    train = trainer.train
    return {
        "src_width": int(train.src.shape[1]),
        "src_mean_len": float(train.src_len.mean()),
        "tgt_width": int(train.tgt_in.shape[1]),
        "tgt_mean_len": float(train.tgt_len.mean()),
        "packed_capacity": None if trainer.capacity is None else list(trainer.capacity),
    }


def kernel_profile(trainer: StackTrainer, device: torch.device, steps: int, top: int) -> dict:
    """Self device time per step of the ``top`` costliest kernels, and the step's device and wall times."""
    for _ in range(3):
        trainer.train_step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            trainer.train_step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    events = list(prof.key_averages())
    if device.type == "cuda":
        events = [e for e in events if e.device_type.name == "CUDA"]
    self_us = lambda e: e.self_device_time_total if device.type == "cuda" else e.self_cpu_time_total
    kernels = sorted(events, key=self_us, reverse=True)
    device_us = sum(self_us(e) for e in kernels) / steps
    wall_ms = timed(lambda: trainer.train_step() or 1, steps, device)[0] * 1000
    return {
        "device_ms_per_step": device_us / 1000,
        "wall_ms_per_step": wall_ms,
        "kernels_per_step": sum(e.count for e in kernels) / steps,
        "top": [
            {"name": e.key[:120], "ms_per_step": self_us(e) / 1000 / steps, "calls_per_step": e.count / steps}
            for e in kernels[:top]
        ],
    }


def one_change_timings(
    data_dir: str, device: torch.device, replicates: int, precision: str, steps: int, compile: bool = False
) -> dict:
    """The graphed step's ms with nothing changed, without dropout, and with each attention backend forced."""
    variants = {"as is": ({}, None), "dropout 0": ({"model": {"dropout": 0.0}}, None)}
    for backend in ("EFFICIENT_ATTENTION", "FLASH_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        variants[f"sdpa {backend.lower()}"] = ({}, getattr(SDPBackend, backend))
    timings = {}
    for name, (options, backend) in variants.items():
        _release(device)
        scope = sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()
        try:
            with scope:
                trainer = stack_trainer(data_dir, device, replicates, precision, compile=compile, **options)
                timed(lambda t=trainer: t.train_step() or 1, 3, device)
            timings[name] = timed(lambda t=trainer: t.train_step() or 1, steps, device)[0] * 1000
        except (RuntimeError, ValueError) as error:
            timings[name] = f"failed: {str(error).splitlines()[0][:160]}"
        print(f"R={replicates} {precision} {name}: {timings[name]}", flush=True)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--replicates", default="1,64")
    parser.add_argument("--precision", default="bf16,fp32")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--compile", action="store_true", help="torch.compile inside the step")
    parser.add_argument(
        "--attention", default="sdpa", choices=["sdpa", "triton", "flash"], help="the stack's attention"
    )
    parser.add_argument("--packing", action="store_true", help="pack each step's rows without padding")
    parser.add_argument("--one-change", action="store_true", help="time one-change variants of the largest stack")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    reps = [int(r) for r in args.replicates.split(",")]
    report: dict = {"torch": torch.__version__, "compile": args.compile, "attention": args.attention}
    report["packing"] = args.packing
    report.update(profiles=[], one_change={})
    save = (lambda: _write_json(args.json, report)) if args.json else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = str(save_dataset(generate_dataset(PRESETS["copy-20"], seed=0), f"{tmp}/copy-20"))
        for precision in args.precision.split(","):
            for replicates in reps:
                _release(device)
                # Compiled: graphed (fixed widths; eager steps would recompile at every new width).
                graphed = args.compile and device.type == "cuda"
                trainer = stack_trainer(
                    data_dir, device, replicates, precision, cuda_graph=graphed, compile=args.compile,
                    attention=args.attention, packing=args.packing,
                )  # fmt: skip
                result = {"replicates": replicates, "precision": precision, **padding(trainer)}
                result.update(kernel_profile(trainer, device, args.steps, args.top))
                report["profiles"].append(result)
                print(json.dumps({k: v for k, v in result.items() if k != "top"}), flush=True)
                for row in result["top"]:
                    print(f"  {row['ms_per_step']:8.3f} ms  {row['calls_per_step']:6.1f}x  {row['name']}", flush=True)
                save()
        if args.one_change and device.type == "cuda":
            precision = args.precision.split(",")[0]
            report["one_change"] = one_change_timings(data_dir, device, max(reps), precision, args.steps, args.compile)
            save()


if __name__ == "__main__":
    main()
