"""Training throughput: our training step against the reference's, and stacks of many models against one.

Default mode. Reference step (as in the authors' code): `nn.Transformer` model with the reference's module
names, each batch of 32 tasks collated in Python (token lists per task, padded to the batch maximum),
random order. Ours: pre-tokenized tensors resident on the device, the same random batches (the same data,
the same batch size), the hooked model without hooks. Both use AdamW with the reference's
hyper-parameters, fp32. The two alternate in three rounds (so that load on a shared machine hits both);
the medians and their ratio are printed, on CPU and (if present) CUDA. Our step with opt-in length
bucketing, and on CPU in 2 and 4 micro-batches, is timed the same way against our default step.

Stacking mode (``--stacking native,vmap``): for every (stacking, replicates, precision) configuration, the
step of R models trained together (``native``: `StackTrainer`, a CUDA graph on CUDA; ``native-compile``: the
same with ``torch.compile`` of the model's loss inside the step, compile time excluded from the rounds;
``native-eager``: the same without the CUDA graph; ``native-triton`` and ``native-compile-triton``: ``native``
and ``native-compile`` with the stack's own attention kernel, `lsa_interp.training.small_attention`; a
``-packed`` suffix (``native-compile-packed``, ``native-compile-triton-packed``, ...) packs each step's rows
without padding, `lsa_interp.training.packing`; ``vmap``: the older ``torch.func`` stack) alternates in
three rounds with the single-model step (fp32, a CUDA graph on CUDA) built once for the whole run; per
configuration: step time (CUDA events on CUDA), tasks/s over all replicates, the ratio to the single model's
tasks/s in the same rounds, peak GPU memory, and TFLOP/s counted at 245 MFLOP per task (SPEC section 4).
``--json OUT`` writes every number and the hardware, after every configuration (a run cut short by a timeout
keeps what it measured). Configurations that do not fit in ``--budget-minutes`` are listed as skipped.

    python benchmarks/train_throughput.py [--steps 30] [--device cpu|cuda|all]
    python benchmarks/train_throughput.py --device cuda --replicates 1,8,32,64 --stacking native,vmap \
        --precision fp32,tf32,bf16 --steps 20 --json runs/bench/stacking.json
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from lsa_interp.data import PRESETS, generate_dataset, save_dataset
from lsa_interp.data.task import Task
from lsa_interp.data.vocab import ARROW, EOS, PAD, SEP
from lsa_interp.model.reference import ReferenceTransformer
from lsa_interp.training import StackConfig, StackTrainer, TrainConfig, start_run
from lsa_interp.training.vmap_replicates import VmapReplicateTrainer
from lsa_interp.utils import atomic_write, hardware_description

BATCH = 32
MFLOP_PER_TASK = 245
"""Useful work of one training task at its own length (SPEC section 4, counted with torch.utils.flop_counter)."""
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


def _bench_config(data_dir: str, device: torch.device, **options) -> TrainConfig:
    """The recipe on ``device``, never logging and validating on one row (the benchmark times steps only)."""
    return TrainConfig(data_dir=data_dir, device=device.type, log_every=10**9, val_limit=1, **options)


def our_stepper(data_dir: str, device: torch.device, **options):
    """A function that runs our next training step (resident tensors, the reference's random batches; on CUDA
    a graph replay); ``options`` are `TrainConfig` fields (``length_bucketing``, ``micro_batches``, ...)."""
    config = _bench_config(data_dir, device, **options)
    trainer = start_run(config, tempfile.mkdtemp(), force=True)
    batches = iter(trainer.epoch_plan(1))
    return lambda: trainer.train_step(next(batches))


def tasks_per_s(step, steps: int, device: torch.device) -> float:
    """Throughput of ``steps`` calls of ``step`` (after the device has finished earlier work)."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return steps * BATCH / (time.perf_counter() - start)


def alternate(first, second, steps: int, device: torch.device) -> tuple[float, float, list]:
    """Warm both steps up, then time them in 3 alternating rounds (load on a shared machine hits both).

    Returns the median tasks/s of ``first`` and of ``second``, and the rounds' (first, second) pairs.
    """
    tasks_per_s(first, 5, device)
    tasks_per_s(second, 5, device)
    rounds = [(tasks_per_s(first, steps, device), tasks_per_s(second, steps, device)) for _ in range(3)]
    return statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds), rounds


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def stack_stepper(data_dir: str, device: torch.device, stacking: str, replicates: int, precision: str):
    """A function that runs the next step of ``replicates`` models stacked by ``stacking`` and returns its tasks."""
    config = _bench_config(
        data_dir,
        device,
        replicates=replicates,
        precision=precision,
        compile=stacking.startswith("native-compile"),
        cuda_graph="-eager" not in stacking,
        attention=next((name for name in ("triton", "flash") if f"-{name}" in stacking), "sdpa"),
        packing=stacking.endswith("-packed"),
    )
    if stacking != "vmap":
        trainer = StackTrainer.start(StackConfig.from_train_config(config), tempfile.mkdtemp(), force=True)
        return trainer.train_step
    trainer = VmapReplicateTrainer.start(config, tempfile.mkdtemp(), force=True)
    batches = iter(trainer.epoch_plan(0))

    def step() -> int:
        batch = next(batches)
        trainer.train_step(batch)
        return trainer.tasks_in(batch)

    return step


def timed(step, steps: int, device: torch.device) -> tuple[float, float]:
    """Seconds per step (CUDA events on CUDA) and tasks per step over ``steps`` calls of ``step``."""
    if device.type != "cuda":
        start = time.perf_counter()
        tasks = sum(step() for _ in range(steps))
        return (time.perf_counter() - start) / steps, tasks / steps
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    tasks = sum(step() for _ in range(steps))
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1000 / steps, tasks / steps


def measure_config(contender, baseline, steps: int, device: torch.device) -> dict:
    """Warm both steps up (the first call of a graphed step captures it), then 3 alternating rounds."""
    timed(contender, 2, device)
    timed(baseline, 2, device)
    rounds = [(timed(contender, steps, device), timed(baseline, steps, device)) for _ in range(3)]
    rates = [(tasks / seconds, base_tasks / base_seconds) for (seconds, tasks), (base_seconds, base_tasks) in rounds]
    rate, base_rate = statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates)
    return {
        "step_ms": 1000 * statistics.median(seconds for (seconds, _), _ in rounds),
        "tasks_per_step": rounds[0][0][1],
        "tasks_per_s": rate,
        "baseline_step_ms": 1000 * statistics.median(base for _, (base, _) in rounds),
        "baseline_tasks_per_s": base_rate,
        "ratio_to_single_model": rate / base_rate,
        "round_ratios": [a / b for a, b in rates],
        "tflops": rate * MFLOP_PER_TASK * 1e6 / 1e12,
    }


def stacking_matrix(args, data_dir: str, device: torch.device, save=None) -> dict:
    """Every configuration of the matrix against the single-model step; see the module doc. ``save`` (if given)
    receives the report so far after every configuration, so that a run cut short keeps what it measured."""
    started = time.monotonic()
    results, skipped = [], []
    report = {
        "device": device.type,
        "hardware": hardware_description(device.type),
        "torch": torch.__version__,
        "steps_per_round": args.steps,
        "batch_size": BATCH,
        "mflop_per_task": MFLOP_PER_TASK,
        "baseline": "one model, fp32, CUDA-graph step on CUDA (eager on CPU)",
        "results": results,
        "skipped": skipped,
        "seconds": 0.0,
    }
    baseline_step = our_stepper(data_dir, device)

    def single() -> int:
        baseline_step()
        return BATCH

    timed(single, 2, device)  # the baseline's graph and optimizer state exist before any configuration's memory

    configs = [
        (stacking, replicates, precision)
        for stacking in args.stacking.split(",")
        for precision in args.precision.split(",")
        for replicates in (int(r) for r in args.replicates.split(","))
    ]
    for stacking, replicates, precision in configs:
        name = {"stacking": stacking, "replicates": replicates, "precision": precision}
        if stacking == "vmap" and replicates == 1:
            skipped.append({**name, "why": "one vmap replicate is the single model"})
            continue
        if "-flash" in stacking and precision != "bf16":
            skipped.append({**name, "why": "the flash attention runs in bf16 only"})
            continue
        if time.monotonic() - started > 60 * args.budget_minutes:
            skipped.append({**name, "why": f"over the {args.budget_minutes}-minute budget"})
            continue
        contender = None
        _release(device)
        before = torch.cuda.memory_allocated() if device.type == "cuda" else 0
        try:
            contender = stack_stepper(data_dir, device, stacking, replicates, precision)
            result = {**name, **measure_config(contender, single, args.steps, device)}
        except Exception as error:  # one configuration failing must not cost the others their timings
            kind = "out of memory" if isinstance(error, torch.cuda.OutOfMemoryError) else type(error).__name__
            skipped.append({**name, "why": f"{kind}: {str(error).splitlines()[0][:200]}"})
            print(f"{device.type} {stacking} R={replicates} {precision}: {skipped[-1]['why']}", flush=True)
            _report_progress(report, started, save)
            continue
        if device.type == "cuda":
            result["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9
            result["config_peak_memory_gb"] = (torch.cuda.max_memory_allocated() - before) / 1e9
        results.append(result)
        print(
            f"{device.type} {stacking:6s} R={replicates:3d} {precision}: {result['step_ms']:8.2f} ms/step "
            f"{result['tasks_per_s']:12,.0f} tasks/s  {result['ratio_to_single_model']:6.2f}x one model  "
            f"{result['tflops']:6.2f} TFLOP/s"
            + (f"  peak {result['peak_memory_gb']:.1f} GB" if "peak_memory_gb" in result else ""),
            flush=True,
        )
        _report_progress(report, started, save)
    return _report_progress(report, started, save)


STACKINGS = (
    "vmap",
    "native-flash-packed",
    "native-compile-flash-packed",
    *(
        kind + packed
        for kind in ("native", "native-compile", "native-eager", "native-triton", "native-compile-triton")
        for packed in ("", "-packed")
    ),
)
"""The stackings `--stacking` takes (a misspelt one used to run as the plain graphed stack under its own name)."""


def _report_progress(report: dict, started: float, save) -> dict:
    report["seconds"] = time.monotonic() - started
    if save is not None:
        save(report)
    return report


def _write_json(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8"))


def _release(device: torch.device) -> None:
    """Between configurations: forget what the last one compiled (Dynamo keeps its entries on the shared code
    objects, and past `recompile_limit` of them a "compiled" stack silently runs eagerly) and free its memory,
    including the cuBLAS workspace each graph capture's side stream was given, so that a configuration's peak
    memory is its own."""
    gc.collect()
    torch._dynamo.reset()
    if device.type == "cuda":
        getattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: None)()  # CUDA builds of torch only
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per round")
    parser.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    parser.add_argument(
        "--stacking",
        default=None,
        help="stacking mode: native,native-compile,native-eager,vmap,native-triton,native-compile-triton, each "
        "native one also with -packed, and native-flash-packed, native-compile-flash-packed (comma-separated; "
        "-triton: the stack's own attention kernel; -flash: FlashAttention-2's variable-length kernel, bf16 only; "
        "-packed: rows packed without padding)",
    )
    parser.add_argument("--replicates", default="1,8,32,64", help="stacking mode: replicate counts")
    parser.add_argument("--precision", default="fp32", help="stacking mode: fp32,tf32,bf16")
    parser.add_argument("--budget-minutes", type=float, default=7.0, help="stacking mode: skip configurations after")
    parser.add_argument("--json", type=Path, default=None, help="stacking mode: write every number here")
    args = parser.parse_args()
    unknown = [name for name in (args.stacking or "").split(",") if args.stacking and name not in STACKINGS]
    if unknown:
        parser.error(f"unknown stacking {', '.join(unknown)}; choose from: {', '.join(STACKINGS)}")
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [torch.device(d) for d in devices if d == "cpu" or torch.cuda.is_available()]
    dataset = generate_dataset(PRESETS["copy-20"], seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = str(save_dataset(dataset, f"{tmp}/copy-20"))
        if args.stacking:
            runs: list[dict] = []
            save = None if args.json is None else lambda run: _write_json(args.json, {"runs": [*runs, run]})
            for device in devices:
                runs.append(stacking_matrix(args, data_dir, device, save))
            if args.json is not None:
                _write_json(args.json, {"runs": runs})
                print(f"wrote {args.json}")
            return
        for device in devices:
            compare_with_reference(data_dir, dataset, device, args.steps)


def compare_with_reference(data_dir: str, dataset, device: torch.device, steps: int) -> None:
    """The default mode: our step against the reference's, with and without length bucketing and graphs."""
    ours, ref = our_stepper(data_dir, device), reference_stepper(dataset.splits["train"], device)
    ours_rate, ref_rate, rounds = alternate(ours, ref, steps, device)
    ratios = ", ".join(f"{o / r:.2f}x" for o, r in rounds)
    print(
        f"{device.type}: reference step {ref_rate:,.0f} tasks/s | ours {ours_rate:,.0f} tasks/s | "
        f"ratio {statistics.median(o / r for o, r in rounds):.2f}x (median of 3 alternating rounds: {ratios}; "
        f"batch {BATCH}, {steps} steps a round, {torch.get_num_threads()} threads)"
    )
    bucketed, default, _ = alternate(our_stepper(data_dir, device, length_bucketing=True), ours, steps, device)
    print(
        f"{device.type}: our step with length bucketing {bucketed:,.0f} tasks/s | "
        f"{bucketed / default:.2f}x our default step | {bucketed / ref_rate:.2f}x the reference"
    )
    if device.type == "cpu":
        for parts in (2, 4):
            split, default, _ = alternate(our_stepper(data_dir, device, micro_batches=parts), ours, steps, device)
            print(
                f"cpu: our step in {parts} micro-batches {split:,.0f} tasks/s | {split / default:.2f}x our default "
                f"step | {split / ref_rate:.2f}x the reference"
            )
    if device.type == "cuda":
        eager, graph, _ = alternate(our_stepper(data_dir, device, cuda_graph=False), ours, steps, device)
        print(f"cuda: our step without the CUDA graph {eager:,.0f} tasks/s | graph {graph / eager:.2f}x faster")


if __name__ == "__main__":
    main()
