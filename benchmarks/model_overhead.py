"""Overhead of the hooked model against the equivalent ``torch.nn.Transformer`` module (CPU, same weights).

Measures, in one run (inference: eval mode, no autograd, random weights of the paper's architecture):

1. teacher-forced forward of 256 tasks, no hooks: hooked / nn.Transformer (target <= 1.15);
2. ``run_with_cache`` of every hook on the same batch: hooked / nn.Transformer forward (target <= 2);
3. greedy decoding of 10,000 tasks: the reference loop (full decoder re-run over all tokens so far, for a
   fixed 32 steps) / our cached ``generate`` with the same step limit (target >= 5). A random model seldom
   emits EOS, so both run about 32 steps; a trained model stops earlier, which only helps ``generate``.
   Both decode batches of 256 rows. The reference loop is timed on ``--ref-tasks`` of the tasks (default
   1,024: its time is linear in the number of batches, so it is scaled to 10,000) to keep the run near two
   minutes; ``--ref-tasks 10000`` times all of them (a few minutes more). Our ``generate`` calls and the
   reference batches alternate, so load from other processes falls on both alike.

The load average is printed before and after: other processes on the machine inflate every timing.

Forward timings alternate the two models and report medians. Usage:
``python benchmarks/model_overhead.py [--threads N] [--ref-tasks N]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import string
import time
import warnings
from collections.abc import Callable

import torch

from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import TokenBatch, encode_tasks
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, convert_reference_state_dict
from lsa_interp.model.reference import ReferenceTransformer, reference_greedy_decode

N_STEPS = 32
DECODE_TASKS = 10_000
DECODE_BATCH = 256


def random_tasks(n: int, seed: int) -> list[Task]:
    """1-shot tasks with random alphabets and 3-7 letter strings (the lengths of the real tasks)."""
    rng = random.Random(seed)
    letters = string.ascii_lowercase

    def word() -> str:
        return "".join(rng.choice(letters) for _ in range(rng.randint(3, 7)))

    return [Task("".join(rng.sample(letters, 26)), ((word(), word()),), word(), word()) for _ in range(n)]


def alternate(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each function, calling them in turn ``repeats`` times after one warm-up round."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_index in range(repeats + 1):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            if round_index:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Seconds taken by ``fn()``, and its result."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def decode_interleaved(
    model: HookedEncoderDecoder, reference: ReferenceTransformer, decode: TokenBatch, ref_tasks: int
) -> tuple[float, float, int, bool]:
    """Time ``generate`` on all tasks and the reference loop on about ``ref_tasks`` of them.

    The tasks are split into one group per reference batch; each group's ``generate`` call alternates with
    the reference decoding the group's first batch, so that load from other processes falls on both alike.
    Returns (our seconds, reference seconds, tasks the reference decoded, whether the tokens agree).
    """
    ref_batches = max(1, min(ref_tasks, len(decode)) // DECODE_BATCH)
    group = -(-len(decode) // ref_batches)
    ours_seconds = ref_seconds = 0.0
    same = True
    for index in range(ref_batches):
        seconds, ours = timed(
            lambda index=index: model.generate(
                decode.select(slice(index * group, (index + 1) * group)),
                max_new_tokens=N_STEPS,
                batch_size=DECODE_BATCH,
            )
        )
        ours_seconds += seconds
        start = index * group
        seconds, theirs = timed(
            lambda start=start: reference_greedy_decode(reference, decode.src[start : start + DECODE_BATCH], N_STEPS)
        )
        ref_seconds += seconds
        same &= torch.equal(ours[:DECODE_BATCH], theirs[:, : ours.shape[1]])
    return ours_seconds, ref_seconds, ref_batches * DECODE_BATCH, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch intra-op threads")
    parser.add_argument("--ref-tasks", type=int, default=1024, help="tasks decoded by the slow reference loop")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds of the forward comparisons")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)  # nn.Transformer's nested-tensor notice
    torch.manual_seed(0)
    cfg = ModelConfig()
    reference = ReferenceTransformer(cfg).eval()
    model = HookedEncoderDecoder(cfg)
    model.load_state_dict(convert_reference_state_dict(reference.state_dict(), cfg))
    model.eval()
    print(f"torch {torch.__version__}, {args.threads} threads, paper config ({cfg.d_model}d, {cfg.n_heads} heads)")
    print(f"load average before: {os.getloadavg()[0]:.2f}")

    batch = encode_tasks(random_tasks(256, seed=0))
    print(f"forward batch: 256 tasks, src {tuple(batch.src.shape)}, tgt {tuple(batch.tgt_in.shape)}")
    with torch.no_grad():
        medians = alternate(
            {
                "nn.Transformer": lambda: reference(batch.src, batch.tgt_in),
                "hooked, no hooks": lambda: model(batch),
                "hooked, run_with_cache (all hooks)": lambda: model.run_with_cache(batch),
            },
            args.repeats,
        )
    base = medians["nn.Transformer"]
    for name, seconds in medians.items():
        print(f"  {name:<36} {seconds * 1e3:8.1f} ms   x{seconds / base:.3f}")
    forward_ratio = medians["hooked, no hooks"] / base
    cache_ratio = medians["hooked, run_with_cache (all hooks)"] / base

    decode = encode_tasks(random_tasks(DECODE_TASKS, seed=1))
    ours_seconds, ref_seconds, n_ref, same = decode_interleaved(model, reference, decode, args.ref_tasks)
    ref_scaled = ref_seconds * DECODE_TASKS / n_ref
    print(f"greedy decoding, {DECODE_TASKS} tasks, batches of {DECODE_BATCH}, up to {N_STEPS} steps:")
    print(f"  cached generate                      {ours_seconds:8.2f} s")
    scaled_note = f", measured on {n_ref} tasks and scaled" if n_ref < DECODE_TASKS else ""
    print(f"  reference loop (full re-run)         {ref_scaled:8.2f} s   ({N_STEPS} steps{scaled_note})")
    print(f"  same tokens on the {n_ref} tasks decoded by both: {same}")
    decode_speedup = ref_scaled / ours_seconds

    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("ratios:")
    print(f"  forward, no hooks / nn.Transformer:       {forward_ratio:.3f}  (target <= 1.15)")
    print(f"  run_with_cache, all hooks / nn.Transformer: {cache_ratio:.3f}  (target <= 2)")
    print(f"  decoding speed-up, reference / cached:    {decode_speedup:.1f}  (target >= 5)")


if __name__ == "__main__":
    main()
