"""A direction that spliced memory states share: find it, add it, take it away, and see where it comes from.

Splicing the alphabet letters that neither prompt uses (`splice.unused_positions`) from a pred prompt's memory into a
succ prompt's changes many states by much the same vector. These functions estimate that vector per pair from the
other pairs (`direction_vectors`, leave-one-out, so no pair sees its own donor), decode with vectors added to chosen
memory states (`decode_with_added`, `decode_with_changes`), remove a direction from a splice (`without_component`),
compare the states after every encoder layer (`by_layer`), compare one set of pairs' mean difference with another's
(`mean_change`, `share_along`, `compare_mean_changes`) and split vectors along it (`split_along`), and measure how
much the letters attend to the example's changed output letter in the last encoder layer
(`changed_letter_attention`). ``analyses/splice_controls.py`` runs them over the shipped models (docs/findings.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lsa_interp.analysis.splice import MEMORY_HOOK, check_pair_counts, masked_change, memory_change, splice_mask
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import decode_batch, encode_tasks
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS, HookedEncoderDecoder


def mean_of_others(sums: Float[Tensor, "pair d_model"], counts: Int[Tensor, " pair"]) -> Float[Tensor, "pair d_model"]:
    """Row i: the mean over every pair but i of the vectors whose per-pair sums and counts are given (zero where the
    other pairs hold none). Raises ValueError for unequal numbers of sums and counts."""
    check_pair_counts({"sums": sums.shape[0], "counts": counts.shape[0]})
    others = (counts.sum() - counts).clamp_min(1)
    return (sums.sum(0) - sums) / others[:, None].to(sums.dtype)


def random_directions(vectors: Float[Tensor, "pair d_model"], seed: int) -> Float[Tensor, "pair d_model"]:
    """Vectors of the same lengths as ``vectors`` in random (Gaussian, seeded) directions."""
    noise = torch.randn(vectors.shape, generator=torch.Generator().manual_seed(seed), dtype=vectors.dtype)
    return noise / noise.norm(dim=1, keepdim=True) * vectors.norm(dim=1, keepdim=True)


def direction_vectors(
    donor_memory: Float[Tensor, "pair donor_pos d_model"],
    target_memory: Float[Tensor, "pair target_pos d_model"],
    mask: Bool[Tensor, "pair pos"],
    scale: float | int = 1.0,
    random_seed: int | None = None,
) -> Float[Tensor, "pair d_model"]:
    """Per pair, ``scale`` times the mean donor-minus-target state difference at the ``mask`` positions of the other
    pairs (`mean_of_others`); with ``random_seed``, vectors of those lengths in random directions. Raises ValueError
    as `masked_change` does: for memories and a mask of unequal numbers of pairs, a mask wider than either memory or
    one that marks no state."""
    change = masked_change(donor_memory, target_memory, mask)
    vectors = scale * mean_of_others(change.sum(1), mask.sum(1))
    return vectors if random_seed is None else random_directions(vectors, random_seed)


def mean_change(
    donor_memory: Float[Tensor, "pair donor_pos d_model"],
    target_memory: Float[Tensor, "pair target_pos d_model"],
    mask: Bool[Tensor, "pair pos"],
) -> Float[Tensor, " d_model"]:
    """The mean donor-minus-target state difference over every ``mask`` state of every pair. Raises ValueError as
    `direction_vectors` does."""
    return masked_change(donor_memory, target_memory, mask).sum((0, 1)) / mask.sum()


def share_along(
    donor_memory: Float[Tensor, "pair donor_pos d_model"],
    target_memory: Float[Tensor, "pair target_pos d_model"],
    mask: Bool[Tensor, "pair pos"],
    direction: Float[Tensor, " d_model"],
) -> float:
    """The share of the donor-minus-target differences' summed squared length, over the ``mask`` states, that lies
    along ``direction`` (1: every difference is a multiple of it; 0: all orthogonal to it, or a zero direction or no
    difference). Raises ValueError as `direction_vectors` does."""
    change = masked_change(donor_memory, target_memory, mask)
    along = change @ (direction / direction.norm().clamp_min(1e-30))
    return float(along.square().sum() / change.square().sum().clamp_min(1e-30))


def split_along(
    vectors: Float[Tensor, "pair d_model"], direction: Float[Tensor, " d_model"]
) -> tuple[Float[Tensor, "pair d_model"], Float[Tensor, "pair d_model"]]:
    """Each vector's component along ``direction`` (its length and sign do not matter) and the rest, which add up to
    the vector (a zero direction: all of it is rest)."""
    rest = without_component(vectors[:, None, :], direction.expand_as(vectors))[:, 0]
    return vectors - rest, rest


def compare_mean_changes(
    reference: tuple[Tensor, Tensor, Tensor], other: tuple[Tensor, Tensor, Tensor]
) -> dict[str, float]:
    """How the mean donor-minus-target difference (`mean_change`) of ``other`` lines up with that of ``reference``,
    each given as (donor memory, target memory, mask): ``cosine`` of the two means, ``length ratio`` (other's mean
    over reference's; 0 for a zero reference) and ``share along`` (`share_along` of other's differences along
    reference's mean). Raises ValueError as `direction_vectors` does."""
    reference_mean, other_mean = mean_change(*reference), mean_change(*other)
    return {
        "cosine": float(torch.cosine_similarity(reference_mean, other_mean, 0)),
        "length ratio": float(other_mean.norm() / reference_mean.norm()) if bool(reference_mean.any()) else 0.0,
        "share along": share_along(*other, reference_mean),
    }


def decode_with_added(
    model: HookedEncoderDecoder,
    targets: Sequence[Task],
    mask: Bool[Tensor, "pair pos"],
    vectors: Float[Tensor, "pair d_model"],
) -> list[str]:
    """Greedy answers of ``targets`` with pair i's vector added to its memory states where ``mask`` is set (the mask
    covers the memory's first positions); the model's mode is restored. Raises ValueError for unequal numbers of
    targets, mask rows and vectors."""
    check_pair_counts({"targets": len(targets), "mask rows": mask.shape[0], "vectors": vectors.shape[0]})
    return decode_with_changes(model, targets, mask[..., None] * vectors[:, None, :])


def decode_with_changes(
    model: HookedEncoderDecoder, targets: Sequence[Task], changes: Float[Tensor, "pair pos d_model"]
) -> list[str]:
    """Greedy answers of ``targets`` with ``changes`` added to their memories' first positions; the model's mode is
    restored. Raises ValueError for unequal numbers of targets and changes."""
    check_pair_counts({"targets": len(targets), "changes": changes.shape[0]})
    width = changes.shape[1]
    added = changes.to(model.device)

    def add(memory, hook):
        memory = memory.clone()
        memory[:, :width] += added.to(memory.dtype)
        return memory

    batch = encode_tasks(targets, with_answers=False).to(model.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), model.hooks(fwd_hooks=[(MEMORY_HOOK, add)]):
            return decode_batch(model.greedy_decode(batch.src, DEFAULT_MAX_NEW_TOKENS))
    finally:
        model.train(was_training)


def without_component(
    changes: Float[Tensor, "pair pos d_model"], directions: Float[Tensor, "pair d_model"]
) -> Float[Tensor, "pair pos d_model"]:
    """``changes`` less their component along pair i's direction (its length does not matter; a zero direction
    removes nothing). Raises ValueError for unequal numbers of changes and directions."""
    check_pair_counts({"changes": changes.shape[0], "directions": directions.shape[0]})
    unit = directions / directions.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return changes - (changes * unit[:, None, :]).sum(-1, keepdim=True) * unit[:, None, :]


def by_layer(
    model: HookedEncoderDecoder,
    donors: Sequence[Task],
    targets: Sequence[Task],
    positions: Sequence[Sequence[int]],
    zeroed_heads: Sequence[int] = (),
) -> dict[str, dict[str, float]]:
    """`memory_change` at each pair's ``positions`` after each encoder layer (``encoder.L.hook_resid_post``, L 0-based)
    and in the memory (after the final norm): where the difference between donor and target forms. ``zeroed_heads``
    (0-based heads of the last encoder layer) have their output (``hook_z``) zeroed at those positions in donors and
    targets alike: what the difference is without them. Raises ValueError for unequal numbers of donors and targets,
    a head outside 0..n_heads-1, and as `splice_mask` and `memory_change` do."""
    check_pair_counts({"donors": len(donors), "targets": len(targets)})
    bad = [head for head in zeroed_heads if not 0 <= head < model.cfg.n_heads]
    if bad:
        raise ValueError(f"zeroed heads must lie in 0..{model.cfg.n_heads - 1} (0-based), got {bad}")
    last = model.cfg.n_encoder_layers - 1
    names = [f"encoder.{layer}.hook_resid_post" for layer in range(last + 1)] + [MEMORY_HOOK]
    batches = [encode_tasks(tasks, with_answers=False).to(model.device) for tasks in (donors, targets)]
    width = min(batch.src.shape[1] for batch in batches)
    mask = splice_mask(positions, len(targets), width)
    on_device = mask.to(model.device)

    def zero(z, hook):
        z = z.clone()
        for head in zeroed_heads:
            z[:, :width, head][on_device] = 0.0
        return z

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), model.hooks(fwd_hooks=[(f"encoder.{last}.attn.hook_z", zero)] if zeroed_heads else []):
            caches = [model.run_with_cache(batch, names_filter=names)[1] for batch in batches]
    finally:
        model.train(was_training)
    donor_cache, target_cache = caches
    return {
        name: memory_change(donor_cache[name].float().cpu(), target_cache[name].float().cpu(), mask) for name in names
    }


def changed_letter_position(task: Task) -> int:
    """Prompt position of the one example's first output letter that differs from its input (alphabet, ``|``,
    input, ``>``, output). Raises ValueError for a task with several examples or an unchanged example."""
    if len(task.examples) != 1:
        raise ValueError(f"give one-example tasks, got {len(task.examples)} examples in {task}")
    (example_in, example_out), start = task.examples[0], len(task.alphabet) + len(task.examples[0][0]) + 2
    changed = next((i for i, (a, b) in enumerate(zip(example_in, example_out)) if a != b), None)
    if changed is None:
        raise ValueError(f"the example of {task} changes no letter in place")
    return start + changed


def changed_letter_attention(
    model: HookedEncoderDecoder, tasks: Sequence[Task], positions: Sequence[Sequence[int]]
) -> dict[str, float | int | str | list[float]]:
    """In the last encoder layer, the attention of each task's ``positions`` (its unused letters) on its example's
    changed output letter, averaged over the positions and then over the tasks that have any: ``per_head`` (0-based
    order), the strongest head's ``index`` (0-based), its ``head`` label (1-based, as 3.5) and ``share``, and
    ``head_mean``. Raises ValueError as `changed_letter_position` and `splice_mask` do."""
    layer = model.cfg.n_encoder_layers - 1
    name = f"encoder.{layer}.attn.hook_pattern"
    batch = encode_tasks(tasks, with_answers=False).to(model.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            pattern = model.run_with_cache(batch, names_filter=[name])[1][name].float().cpu()
    finally:
        model.train(was_training)
    mask = splice_mask(positions, len(tasks), pattern.shape[-1])
    keys = torch.tensor([changed_letter_position(task) for task in tasks])
    on_changed = pattern[torch.arange(len(tasks)), :, :, keys]  # [task, head, query]
    counts = mask.sum(-1)
    per_task = (on_changed * mask[:, None, :]).sum(-1) / counts.clamp_min(1)[:, None]
    per_head = per_task[counts > 0].mean(0)
    head = int(per_head.argmax())
    return {
        "per_head": [float(share) for share in per_head],
        "index": head,
        "head": f"{layer + 1}.{head + 1}",
        "share": float(per_head[head]),
        "head_mean": float(per_head.mean()),
    }
