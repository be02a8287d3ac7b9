"""Shared by the representation analyses: task sets over several rules and alphabets, cached runs in
eval mode a chunk at a time, and cosine similarities."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.analysis.prompts import WINDOW_LENGTHS, rule_tasks
from lsa_interp.data.task import Task
from lsa_interp.model.cache import ActivationCache
from lsa_interp.model.hooked import HookedEncoderDecoder

ALPHABET_KINDS: dict[str, tuple[str, ...]] = {
    "standard": ("standard",),
    "permuted": ("permuted",),
    "both": ("standard", "permuted"),
}
"""``alphabets`` choices of `analysis_tasks`: the standard alphabet, unseen permuted ones, or half each."""

T = TypeVar("T")


def analysis_tasks(
    transformations: Sequence[str],
    n: int,
    seed: int = 0,
    alphabets: str = "both",
    lengths: Sequence[int] = WINDOW_LENGTHS,
) -> list[Task]:
    """``n`` 1-shot tasks (answers included) split as evenly as possible over ``transformations`` and, for
    ``alphabets="both"``, between the standard alphabet and unseen permuted ones (`prompts.rule_tasks`).

    Raises ValueError for ``n < 1``, no or unknown transformations, unknown ``alphabets``, or a rule with
    too few distinct tasks.
    """
    if n < 1:
        raise ValueError(f"the number of tasks must be at least 1, got {n}")
    if not transformations:
        raise ValueError("give at least one transformation")
    if alphabets not in ALPHABET_KINDS:
        raise ValueError(f"unknown alphabets {alphabets!r}; choose one of {', '.join(ALPHABET_KINDS)}")
    groups = [(rule, kind) for rule in transformations for kind in ALPHABET_KINDS[alphabets]]
    tasks: list[Task] = []
    for i, (rule, kind) in enumerate(groups):
        count = n // len(groups) + (i < n % len(groups))
        if count:
            tasks.extend(rule_tasks(rule, count, seed=seed, alphabets=kind, lengths=lengths))
    return tasks


@contextmanager
def eval_mode(model: HookedEncoderDecoder) -> Iterator[HookedEncoderDecoder]:
    """Put ``model`` in eval mode (no dropout) for the block and restore its mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def map_cached(
    model: HookedEncoderDecoder,
    tasks: Sequence[Task],
    names: Sequence[str],
    reduce: Callable[[list[Task], ActivationCache], T],
    batch_size: int = 256,
) -> list[T]:
    """Run ``tasks`` ``batch_size`` at a time in eval mode without gradients, caching the hooks ``names`` on
    the CPU, and return ``reduce(chunk, cache)`` of every chunk.

    The answers are left out of the run, so the decoder sees only ``>``: its first decoding step (whose
    cross-attention is the same with teacher forcing, as the decoder is causal). Raises ValueError for an
    empty task list or an unknown hook name.
    """
    if not tasks:
        raise ValueError("no tasks to run")
    out = []
    with eval_mode(model), torch.no_grad():
        for start in range(0, len(tasks), batch_size):
            chunk = list(tasks[start : start + batch_size])
            _, cache = model.run_with_cache(
                [t.with_answer(None) for t in chunk], names_filter=list(names), device="cpu"
            )
            out.append(reduce(chunk, cache))
    return out


def final_norm(model: HookedEncoderDecoder, x: Float[Tensor, "*rest d_model"]) -> Float[Tensor, "*rest d_model"]:
    """``x`` (any encoder residual) through the final encoder LayerNorm, as the authors read every encoder
    layer (SPEC 5b: their "layer k residual" is ``encoder.ln_final(resid_post_k)``); on ``x``'s device."""
    norm = model.encoder.ln_final
    with torch.no_grad():
        weight, bias = norm.weight.to(x.device, x.dtype), norm.bias.to(x.device, x.dtype)
        return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, norm.eps)


def pairwise_cosine(x: Float[Tensor, "n d"]) -> Float[Tensor, "n n"]:
    """Cosine similarity of every pair of rows (a zero row has cosine 0 with everything)."""
    unit = torch.nn.functional.normalize(x.double(), dim=-1)
    return (unit @ unit.T).to(x.dtype)


def off_diagonal(matrix: Float[Tensor, "n n"]) -> Float[Tensor, " pairs"]:
    """The entries above the diagonal of a square matrix (each unordered pair once)."""
    rows, cols = torch.triu_indices(matrix.shape[0], matrix.shape[1], offset=1)
    return matrix[rows, cols]


RUNNING_EXAMPLE = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd", transformation="pred")
"""The paper's running example (predecessor, standard alphabet), shown in the per-token figures."""
