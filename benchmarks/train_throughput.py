"""Training throughput: our training step against a faithful re-implementation of the reference's.

Reference step (as in the authors' code): `nn.Transformer` model with the reference's module names, each
batch of 32 tasks collated in Python (token lists per task, padded to the batch maximum), random order.
Ours: pre-tokenized tensors resident on the device, the same random batches (the same data, the same
batch size), the hooked model without hooks. Both use AdamW with the reference's hyper-parameters, fp32.
The two alternate in three rounds (so that load on a shared machine hits both); the medians and their ratio
are printed, on CPU and (if present) CUDA. Our step with opt-in length bucketing (``--length-bucketing``:
less padding, other batches) is timed the same way against our default step. With ``--replicates N`` a third
contender joins the rounds: N replicates stepped together as stacked parameters (tasks of all replicates
counted).

    python benchmarks/train_throughput.py [--steps 30] [--device cpu|cuda|all] [--replicates N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from lsa_interp.data import PRESETS, generate_dataset, save_dataset
from lsa_interp.data.task import Task
from lsa_interp.data.vocab import ARROW, EOS, PAD, SEP
from lsa_interp.model.reference import ReferenceTransformer
from lsa_interp.training import TrainConfig, start_run

BATCH = 32
_ID = {ch: i for i, ch in enumerate("abcdefghijklmnopqrstuvwxyz")} | {"|": SEP, ">": ARROW}


def reference_collate(tasks: list[Task], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-task Python tokenization and padding to the batch maximum, as the reference does it."""
    srcs, tins, touts = [], [], []
    for t in tasks:
        text = t.alphabet + "|" + "|".join(f"{a}>{b}" for a, b in t.examples) + "|" + t.query
        srcs.append([_ID[ch] for ch in text] + [EOS])
        tins.append([ARROW] + [_ID[ch] for ch in t.answer])
        touts.append([_ID[ch] for ch in t.answer] + [EOS])
    pad = lambda rows: torch.tensor([r + [PAD] * (max(map(len, rows)) - len(r)) for r in rows], device=device)
    return pad(srcs), pad(tins), pad(touts)


def reference_stepper(tasks: list[Task], device: torch.device):
    """A function that runs the next reference training step (Python collation, padding to the batch max)."""
    torch.manual_seed(0)
    model = ReferenceTransformer().to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01)
    order = list(range(len(tasks)))
    random.Random(0).shuffle(order)
    batches = ([tasks[i] for i in order[k : k + BATCH]] for k in range(0, len(order), BATCH))

    def step() -> None:
        src, tgt_in, tgt_out = reference_collate(next(batches), device)
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def our_stepper(
    data_dir: str, device: torch.device, replicates: int = 1, cuda_graph: bool = True, length_bucketing: bool = False
):
    """A function that runs our next training step (resident tensors, random batches, length-bucketed ones
    with ``length_bucketing``; on CUDA a graph replay unless ``cuda_graph`` is False)."""
    config = TrainConfig(
        data_dir=data_dir,
        device=device.type,
        log_every=10**9,
        replicates=replicates,
        val_limit=1,
        cuda_graph=cuda_graph,
        length_bucketing=length_bucketing,
    )
    trainer = start_run(config, tempfile.mkdtemp(), force=True)
    batches = iter(trainer.epoch_plan(1))
    return lambda: trainer.train_step(next(batches))


def tasks_per_s(step, steps: int, device: torch.device, replicates: int = 1) -> float:
    """Throughput of ``steps`` calls of ``step`` (after the device has finished earlier work)."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return steps * BATCH * replicates / (time.perf_counter() - start)


def alternate(first, second, steps: int, device: torch.device, first_replicates: int = 1) -> tuple[float, float, list]:
    """Warm both steps up, then time them in 3 alternating rounds (load on a shared machine hits both).

    Returns the median tasks/s of ``first`` and of ``second``, and the rounds' (first, second) pairs.
    """
    tasks_per_s(first, 5, device, first_replicates)
    tasks_per_s(second, 5, device)
    rounds = [
        (tasks_per_s(first, steps, device, first_replicates), tasks_per_s(second, steps, device)) for _ in range(3)
    ]
    return statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds), rounds


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per round")
    parser.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    parser.add_argument("--replicates", type=int, default=1, help="also time N stacked replicates")
    args = parser.parse_args()
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [torch.device(d) for d in devices if d == "cpu" or torch.cuda.is_available()]
    dataset = generate_dataset(PRESETS["copy-20"], seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = str(save_dataset(dataset, f"{tmp}/copy-20"))
        for device in devices:
            ours, ref = our_stepper(data_dir, device), reference_stepper(dataset.splits["train"], device)
            ours_rate, ref_rate, rounds = alternate(ours, ref, args.steps, device)
            ratios = ", ".join(f"{o / r:.2f}x" for o, r in rounds)
            print(
                f"{device.type}: reference step {ref_rate:,.0f} tasks/s | ours {ours_rate:,.0f} tasks/s | "
                f"ratio {ours_rate / ref_rate:.2f}x (median of 3 alternating rounds: {ratios}; batch {BATCH}, "
                f"{args.steps} steps a round, {torch.get_num_threads()} threads)"
            )
            bucketed, default, _ = alternate(
                our_stepper(data_dir, device, length_bucketing=True), ours, args.steps, device
            )
            print(
                f"{device.type}: our step with length bucketing {bucketed:,.0f} tasks/s | "
                f"{bucketed / default:.2f}x our default step | {bucketed / ref_rate:.2f}x the reference"
            )
            if device.type == "cuda":
                eager, graph, _ = alternate(our_stepper(data_dir, device, cuda_graph=False), ours, args.steps, device)
                print(f"cuda: our step without the CUDA graph {eager:,.0f} tasks/s | graph {graph / eager:.2f}x faster")
            if args.replicates > 1:
                stacked = our_stepper(data_dir, device, args.replicates)
                rate, single, _ = alternate(stacked, ours, args.steps, device, args.replicates)
                print(
                    f"{device.type}: {args.replicates} stacked replicates {rate:,.0f} tasks/s in all | one model "
                    f"{single:,.0f} tasks/s | {rate / ref_rate:.2f}x the reference"
                )


if __name__ == "__main__":
    main()
