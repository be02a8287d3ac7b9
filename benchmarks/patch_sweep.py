"""Attention-pattern patching sweep: every encoder head x N minimal pairs, batched against a naive loop.

Batched: `lsa_interp.analysis.patching.patch_sweep` (the source patterns read once, one clean run, then per
head one batched encode with the patched pattern and one KV-cached greedy decode of all pairs). Naive: the
same hooks engine one pair at a time (per pair: read its source pattern, then per head decode its target
prompt with that pattern patched in), timed on ``--naive-heads`` heads and scaled to all heads. Both loops
run in this process on the same model and pairs; the naive answers are checked against the batched ones.

    python benchmarks/patch_sweep.py [--model copy-200] [--pairs 200] [--naive-heads 3] [--threads 1]

Without ``--model`` the paper's architecture with random weights is used (it rarely emits EOS, so every
answer runs to the decoding limit: a pessimistic timing).
"""

from __future__ import annotations

import argparse
import time

import torch

from lsa_interp.analysis.patching import HookEngine, pair_batch, patch_sweep
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.data.tokenizer import decode_batch
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, load_model
from lsa_interp.model.heads import all_heads
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS


def naive_sweep(model: HookedEncoderDecoder, batch, heads) -> dict:
    """Patched answers per head, computed one pair at a time with the hooks engine."""
    engine = HookEngine(model, DEFAULT_MAX_NEW_TOKENS)
    answers = {head: [] for head in heads}
    layers = sorted({h.layer for h in heads})
    for row in range(len(batch)):
        source, target = batch.source.select(slice(row, row + 1)), batch.target.select(slice(row, row + 1))
        patterns = engine.patterns(source, layers)
        for head in heads:
            tokens, _ = engine.generate(target, {head.layer: [(head.head, patterns[head.layer][:, head.head])]})
            answers[head] += decode_batch(tokens)
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint name or directory (default: random weights)")
    parser.add_argument("--pairs", type=int, default=200, help="succ -> pred minimal pairs")
    parser.add_argument("--naive-heads", type=int, default=3, help="heads timed in the naive loop")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.model is None:
        torch.manual_seed(0)
        model, name = HookedEncoderDecoder(ModelConfig()).eval(), "random paper-size model"
    else:
        model, name = load_model(args.model), args.model
    batch = pair_batch(minimal_pairs("succ", "pred", args.pairs))
    heads = all_heads(model.cfg)
    print(f"{name}: {len(heads)} encoder heads x {len(batch)} pairs, {torch.get_num_threads()} torch threads")

    start = time.perf_counter()
    results = patch_sweep(model, batch, heads)
    batched_s = time.perf_counter() - start
    timed = heads[: args.naive_heads]
    start = time.perf_counter()
    naive = naive_sweep(model, batch, timed)
    naive_s = (time.perf_counter() - start) * len(heads) / len(timed)

    print(f"{'loop':<58}{'seconds':>9}")
    print(f"{'batched patch_sweep, all heads':<58}{batched_s:>9.2f}")
    label = f"naive, one pair at a time ({len(timed)} heads timed, scaled to {len(heads)})"
    print(f"{label:<58}{naive_s:>9.2f}")
    print(f"speed-up: {naive_s / batched_s:.1f}x")
    same = sum(a == b for head in timed for a, b in zip(naive[head], results[head].patched))
    print(f"same patched answers on the timed heads: {same:,}/{len(timed) * len(batch):,}")


if __name__ == "__main__":
    main()
