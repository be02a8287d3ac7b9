"""Evaluation throughput: our batched, key/value-cached greedy decoding against a reference-style loop.

Both run the paper's architecture with the same random weights on the same copy-20 val tasks, in
batches of the same size. The reference-style loop is the paper's: ``nn.Transformer``, the whole decoder
re-run on ``>`` + all tokens so far at every step, for a fixed number of steps (the longest target of the
batch, EOS included). Ours is `lsa_interp.evaluation.predict` (batches of similar input length, cached
incremental steps, finished rows dropped, stop at the longest target). Prints tasks/s of each, the ratio,
and how often the two give the same answer.

    python benchmarks/eval_throughput.py [--tasks 2000] [--batch-size 512] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch

from lsa_interp.data import PRESETS, generate_dataset
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import decode_batch, encode_tasks
from lsa_interp.evaluation import predict, subsample
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.convert import convert_reference_state_dict
from lsa_interp.model.reference import ReferenceTransformer, reference_greedy_decode


def reference_predict(model: ReferenceTransformer, tasks: list[Task], batch_size: int) -> list[str]:
    """The paper's evaluation loop: batches in dataset order, full decoder re-run for the longest target."""
    predictions = []
    for start in range(0, len(tasks), batch_size):
        batch = tasks[start : start + batch_size]
        n_steps = max(len(t.answer) for t in batch) + 1
        src = encode_tasks(batch, with_answers=False).src
        predictions += decode_batch(reference_greedy_decode(model, src, n_steps))
    return predictions


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000, help="copy-20 val tasks to decode")
    parser.add_argument("--batch-size", type=int, default=512, help="tasks per batch, for both loops")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    dataset, seconds = timed(lambda: generate_dataset(PRESETS["copy-20"], seed=0))
    tasks = subsample(dataset.splits["val"], args.tasks)
    print(
        f"copy-20 generated in {seconds:.1f} s; decoding {len(tasks):,} val tasks, batch {args.batch_size}, "
        f"{torch.get_num_threads()} torch threads"
    )
    cfg = ModelConfig()
    torch.manual_seed(0)
    reference = ReferenceTransformer(cfg).eval()
    model = HookedEncoderDecoder(cfg)
    model.load_state_dict(convert_reference_state_dict(reference.state_dict(), cfg), strict=True)
    model.eval()

    ours, ours_s = timed(lambda: predict(model, tasks, args.batch_size))
    theirs, ref_s = timed(lambda: reference_predict(reference, tasks, args.batch_size))
    n = len(tasks)
    print(f"{'loop':<48}{'seconds':>9}{'tasks/s':>10}")
    print(f"{'ours: cached greedy (evaluation.predict)':<48}{ours_s:>9.2f}{n / ours_s:>10,.0f}")
    print(f"{'reference-style: full decoder re-run per step':<48}{ref_s:>9.2f}{n / ref_s:>10,.0f}")
    print(f"speed-up: {ref_s / ours_s:.1f}x")
    same_answer = sum(a == b for a, b in zip(ours, theirs))
    same_match = sum((a == t.answer) == (b == t.answer) for a, b, t in zip(ours, theirs, tasks))
    print(
        f"same answer string: {same_answer:,}/{n:,} (ours is cut at each batch's own longest target); "
        f"same exact-match verdict: {same_match:,}/{n:,}"
    )


if __name__ == "__main__":
    main()
