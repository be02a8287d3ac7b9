"""How far bf16 autocast moves a model's training loss and gradients, beside the batch-to-batch spread.

The GPU's bf16 runs of copy-20 end with a higher training loss than the CPU's fp32 run, and the gap widens as the
loss falls (docs/results.md, the precision check). This measures, at a model's weights, what the bf16 forward
changes in the step that trains it: on ``--batches`` random training batches of 32 (the reference's batches) of
the model's own dataset, the loss and the gradient of every weight in fp32 and under bf16 autocast, with the same
dropout masks in both, through the GPU runs' own forward (the stacked model of one replicate, attention through
``scaled_dot_product_attention``, whose scores stay fp32: the hook-point model's explicit attention would round
them to bf16, which the GPU runs never did), and reports per model

- the mean training loss in each precision;
- per batch, the bf16 gradient's distance from the fp32 one relative to the fp32 gradient's size
  (``batch_error``), and their cosine;
- the same for the gradients' mean over all batches (``mean_error``), beside what it would be if each batch's
  difference were independent noise (``mean_error_if_noise``): above that, bf16 moves the weights in a
  direction of its own, which averaging over steps does not remove;
- the batch-to-batch spread: the fp32 batch gradients' distance from their mean, relative to the mean's size
  (``batch_spread``), the noise that training by batches has anyway;
- per weight, the mean gradient over its root mean square (the direction AdamW's ``m / sqrt(v)`` estimates): the
  bf16 one's distance from the fp32 one (``adam_error``), beside the distance between the fp32 directions of the
  first and second half of the batches (``adam_halves``).

A model is a shipped name, a checkpoint directory or a training run's folder (its last saved state). It writes
``analyses/results/precision_gradients.json``.

    python analyses/precision_gradients.py --model copy-20 --model replicates/copy-20-s0-bf16
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from jaxtyping import Float

from lsa_interp.data.loaders import tokenize_split
from lsa_interp.evaluation.run import evaluation_dataset
from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.training.snapshot import load_run_or_model
from lsa_interp.training.stacked_model import StackedEncoderDecoder
from lsa_interp.training.validation import ResidentSplit
from lsa_interp.utils import atomic_write

OUT = Path(__file__).parent / "results" / "precision_gradients.json"
BATCH = 32


def training_batches(model: HookedEncoderDecoder, batches: int, seed: int) -> ResidentSplit:
    """``batches`` x 32 rows drawn at random (without replacement) from the training split of ``model``'s own
    dataset (its preset and data seed), tokenized on the CPU. Raises ValueError for a model whose metadata names
    no preset, or a split smaller than the rows asked for."""
    tasks = evaluation_dataset(model, splits=("train",)).splits["train"]
    if batches * BATCH > len(tasks):
        raise ValueError(f"{batches} batches of {BATCH} need {batches * BATCH} rows; the train split has {len(tasks)}")
    rows = np.random.default_rng(seed).choice(len(tasks), batches * BATCH, replace=False)
    return ResidentSplit(tokenize_split([tasks[i] for i in rows]), torch.device("cpu"))


def replicate_stack(model: HookedEncoderDecoder) -> StackedEncoderDecoder:
    """A stack of one replicate holding ``model``'s weights, in training mode."""
    stack = StackedEncoderDecoder(model.cfg, 1)
    stack.load_replicate(0, model)
    return stack.train()


def loss_and_gradient(
    stack: StackedEncoderDecoder, batch: tuple, bf16: bool, seed: int
) -> tuple[float, Float[torch.Tensor, " weights"]]:
    """The batch's mean training loss and the gradient of all weights (float64), in fp32 or under bf16 autocast,
    with the dropout masks of ``seed`` (the same masks in both precisions)."""
    stack.zero_grad(set_to_none=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = stack.losses(*(tensor[None] for tensor in batch))[0]
        loss.backward()
    return float(loss.detach()), stack.flat.grad[0].double()


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


def _adam_direction(total: torch.Tensor, squares: torch.Tensor, count: int) -> torch.Tensor:
    """Per weight, the mean gradient over its root mean square: the direction AdamW's m / sqrt(v) estimates."""
    return (total / count) / (squares / count).sqrt().clamp_min(1e-12)


class _Sums:
    """Running sums over an even number of batches of one precision's gradients: per weight, over all batches and
    over each half."""

    def __init__(self, size: int, batches: int) -> None:
        zeros = lambda: torch.zeros(size, dtype=torch.float64)
        self.total, self.squares = zeros(), zeros()
        self.halves = [(zeros(), zeros()), (zeros(), zeros())]
        self.norms2, self.batches = 0.0, batches

    def add(self, index: int, gradient: torch.Tensor) -> None:
        half = self.halves[2 * index // self.batches]
        for total, squares in ((self.total, self.squares), half):
            total += gradient
            squares += gradient**2
        self.norms2 += float(gradient @ gradient)

    @property
    def mean(self) -> torch.Tensor:
        return self.total / self.batches

    def adam(self, half: int | None = None) -> torch.Tensor:
        total, squares = (self.total, self.squares) if half is None else self.halves[half]
        return _adam_direction(total, squares, self.batches if half is None else self.batches // 2)


def precision_effect(model: HookedEncoderDecoder, split: ResidentSplit, batches: int) -> dict:
    """The losses, gradient errors and spreads listed in the module docstring, over ``batches`` batches of
    ``split`` (rows ``32 b`` to ``32 b + 31`` make batch ``b``, with dropout seed ``b``). Sizes over batches are
    root mean squares: a batch the model answers perfectly has a gradient near zero and would dominate a mean of
    ratios."""
    stack = replicate_stack(model)
    losses: dict[str, list[float]] = {"fp32": [], "bf16": []}
    sums, difference_norms2, cosines = {}, 0.0, []
    for b in range(batches):
        batch = split.batch(np.arange(b * BATCH, (b + 1) * BATCH))
        gradients = {}
        for precision in ("fp32", "bf16"):
            loss, gradients[precision] = loss_and_gradient(stack, batch, precision == "bf16", seed=b)
            losses[precision].append(loss)
            sums.setdefault(precision, _Sums(gradients[precision].numel(), batches)).add(b, gradients[precision])
        difference = gradients["bf16"] - gradients["fp32"]
        difference_norms2 += float(difference @ difference)
        cosines.append(_cosine(gradients["bf16"], gradients["fp32"]))
    fp32, bf16 = sums["fp32"], sums["bf16"]
    signal = float(fp32.mean.norm())
    adam32 = fp32.adam()
    return {
        "steps": model.metadata.get("steps"),
        "epochs": model.metadata.get("epochs_completed"),
        "precision": model.metadata.get("precision") or (model.metadata.get("train_config") or {}).get("precision"),
        "loss_fp32": float(np.mean(losses["fp32"])),
        "loss_bf16": float(np.mean(losses["bf16"])),
        "batch_error": (difference_norms2 / fp32.norms2) ** 0.5,
        "batch_cosine": float(np.median(cosines)),
        "mean_error": float((bf16.mean - fp32.mean).norm()) / signal,
        "mean_cosine": _cosine(bf16.mean, fp32.mean),
        "mean_error_if_noise": (difference_norms2 / batches) ** 0.5 / batches**0.5 / signal,
        "batch_spread": max(fp32.norms2 / batches - signal**2, 0.0) ** 0.5 / signal,
        "adam_error": float((bf16.adam() - adam32).norm() / adam32.norm()),
        "adam_halves": float((fp32.adam(0) - fp32.adam(1)).norm() / adam32.norm()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="checkpoint name, directory or run folder")
    parser.add_argument("--batches", type=int, default=64, help="training batches of 32 per model, even (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the batches' rows (default 0)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.batches < 2 or args.batches % 2:
        message = f"--batches must be even (two halves) and at least 2, got {args.batches}"
        print(f"precision_gradients: error: {message}", file=sys.stderr)
        return 2
    results = {}
    try:
        for name in args.model:
            model = load_run_or_model(name)
            results[name] = precision_effect(model, training_batches(model, args.batches, args.seed), args.batches)
    except (ValueError, FileNotFoundError) as error:
        print(f"precision_gradients: error: {error}", file=sys.stderr)
        return 2
    document = {"batches": args.batches, "batch_size": BATCH, "seed": args.seed, "models": results}
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8"))
    columns = ("loss_fp32", "loss_bf16", "batch_error", "mean_error", "mean_error_if_noise", "batch_spread")
    columns += ("adam_error", "adam_halves")
    print(f"{'model':28s} " + " ".join(f"{c[-12:]:>12s}" for c in columns))
    for name, row in results.items():
        print(f"{name[-28:]:28s} " + " ".join(f"{row[c]:12.4g}" for c in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
