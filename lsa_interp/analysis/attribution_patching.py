"""Attribution patching: activation patching's grids estimated from one backward pass (Nanda's attribution
patching; Syed et al. 2023).

For an activation ``a`` of the target run and its value ``a'`` in the source run, patching moves the measure by about
``(a' - a) . dM/da``: the gradient of the measure ``M`` (the mean logit difference where the answers part, as in
`lsa_interp.analysis.activation_patching`) at the target run, taken once for every activation at once. So a whole
grid costs the source run, the target run and one backward pass instead of one patched run per cell; the price is
that the estimate is linear: it is exact where the measure is linear in the activation along the way from ``a`` to
``a'`` and off where softmaxes saturate or norms rescale. Compare it with the exact grid before trusting it
(`compare_grids`; docs/matching_and_patching.md has how close it comes on the shipped models). Answers are not
decoded (their shares are NaN). The model's parameters' gradients are left as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.analysis.activations import eval_mode
from lsa_interp.analysis.pair_batch import pair_batch
from lsa_interp.analysis.patch_grids import (
    DEFAULT_SITES,
    ActivationPatching,
    PatchingGrid,
    check_sites,
    site_rows,
)
from lsa_interp.analysis.patch_runs import measure_at, parting_steps, run_patched, shared_position_labels
from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.data.tokenizer import TokenBatch, encode_tasks
from lsa_interp.model.hooked import HookedEncoderDecoder


def attribute_activations(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    sites: Sequence[str] = DEFAULT_SITES,
    steps: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> ActivationPatching:
    """The grids of ``sites`` for ``pairs``, as `lsa_interp.analysis.activation_patching.patch_activations` returns
    them, each cell's logit difference estimated as the target run's plus ``(source - target) . gradient`` summed over
    the cell's activations (answers NaN). With ``steps`` > 1 the gradient is the mean over that many runs whose encoder
    token embeddings go from the target prompt's to the source prompt's (midpoints; integrated gradients on the
    inputs, as EAP-IG), not the target run's alone; ``progress(done, steps)`` after each. Raises ValueError for
    ``steps`` < 1 and as ``patch_activations`` does."""
    check_sites(sites)
    check_steps(steps)
    with eval_mode(model):
        batch = pair_batch(pairs)
        positions = shared_position_labels(batch.source, batch.target)
        parting = parting_steps(pairs)
        layout = {site: site_rows(model, site, positions, (torch.arange(len(pairs)), parting[0])) for site in sites}
        needed = sorted({hook for rows, _ in layout.values() for hook, _, _ in rows})
        tgt = encode_tasks([p.target for p in pairs], with_answers=True).tgt_in.to(model.device)
        source_inputs, target_inputs = batch.source.to(model.device), batch.target.to(model.device)
        measure = measure_at(*parting)
        with torch.no_grad():
            source = run_patched(model, source_inputs, tgt, {}, save=[*needed, _EMBED])
            target = run_patched(model, target_inputs, tgt, {}, save=[*needed, _EMBED])
        ends = (target[_EMBED], source[_EMBED])
        gradients = _mean_gradients(model, target_inputs, tgt, measure, needed, ends, steps, progress)
        target_diff = float(measure(target["logits"]))
        changes = {hook: ((source[hook] - target[hook]) * gradients[hook]).float().cpu() for hook in needed}
        grids = {}
        for site, (rows, columns) in layout.items():
            diff = torch.zeros(len(rows), len(columns))
            for row, (hook, _, indices) in enumerate(rows):
                for column, index in enumerate(indices):
                    diff[row, column] = target_diff + float(changes[hook][index].sum())
            nan = torch.full_like(diff, torch.nan)
            labels = tuple(label for _, label, _ in rows)
            grids[site] = PatchingGrid(site, tuple(hook for hook, _, _ in rows), labels, columns, diff, nan, nan)
        source_rule, target_rule = pairs[0].source.transformation or "", pairs[0].target.transformation or ""
        source_diff = float(measure(source["logits"]))
        return ActivationPatching(source_rule, target_rule, len(pairs), positions, source_diff, target_diff, grids)


_EMBED = "encoder.hook_embed"


def check_steps(steps: int) -> None:
    """Raise ValueError for fewer than one integration step."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1 (1: the gradient at the target run), got {steps}")


def _mean_gradients(
    model: HookedEncoderDecoder,
    inputs: TokenBatch,
    tgt: Tensor,
    measure: Callable[[Tensor], Tensor],
    hooks: list[str],
    embeddings: tuple[Tensor, Tensor],
    steps: int,
    progress: Callable[[int, int], None] | None,
) -> dict[str, Tensor]:
    """The gradient of ``measure`` by each of ``hooks``' activations, at the run of ``inputs`` (``steps`` = 1) or
    averaged over ``steps`` runs whose token embeddings lie at the midpoints from the first of ``embeddings`` (the
    target's) to the second (the source's)."""
    mean = {}
    for step in range(steps):
        along = (step + 0.5) / steps if steps > 1 else 0.0
        embed = torch.lerp(*embeddings, along)
        kept: dict[str, Tensor] = {}
        patches = {hook: partial(_keep_for_gradient, into=kept, name=hook) for hook in hooks}
        with torch.enable_grad():
            logits = run_patched(model, inputs, tgt, {_EMBED: partial(_differentiable, value=embed), **patches})
            gradients = torch.autograd.grad(measure(logits["logits"]), [kept[hook] for hook in hooks])
        for hook, gradient in zip(hooks, gradients):
            mean[hook] = mean.get(hook, 0) + gradient / steps
        if progress:
            progress(step + 1, steps)
    return mean


def _differentiable(tensor: Tensor, value: Tensor) -> Tensor:
    """``value`` in place of ``tensor``, as a leaf the measure can be differentiated through."""
    return value.clone().requires_grad_()


def _keep_for_gradient(tensor: Tensor, into: dict[str, Tensor], name: str) -> Tensor:
    """Keep ``tensor`` (the activation the rest of the run reads) so the measure can be differentiated by it."""
    into[name] = tensor
    return tensor


@dataclass(frozen=True)
class GridAgreement:
    """How an estimated grid agrees with the exact one, on their normalised cells: Pearson's correlation, the largest
    absolute difference, and the exact value at the estimate's largest cell beside the exact grid's largest (equal
    where the estimate points at the cell that matters most, or at one that matters as much)."""

    site: str
    correlation: float
    max_abs_error: float
    exact_at_estimated_top: float
    exact_top: float


def compare_grids(estimate: ActivationPatching, exact: ActivationPatching) -> dict[str, GridAgreement]:
    """`GridAgreement` of every site both results hold. Raises ValueError when no site is shared or a shared grid's
    shape differs."""
    shared = [site for site in estimate.grids if site in exact.grids]
    if not shared:
        raise ValueError(f"no site in both results: {list(estimate.grids)} against {list(exact.grids)}")
    agreement = {}
    for site in shared:
        a, b = estimate.normalized(site), exact.normalized(site)
        if a.shape != b.shape:
            raise ValueError(f"site {site!r}: grids of shapes {list(a.shape)} and {list(b.shape)} do not compare")
        a, b = a.flatten(), b.flatten()
        error, at_top = float((a - b).abs().max()), float(b[int(a.argmax())])
        agreement[site] = GridAgreement(site, _correlation(a, b), error, at_top, float(b.max()))
    return agreement


def _correlation(a: Float[Tensor, " n"], b: Float[Tensor, " n"]) -> float:
    """Pearson's r (NaN where either side is constant)."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    return float((a * b).sum() / (a.norm() * b.norm()))
