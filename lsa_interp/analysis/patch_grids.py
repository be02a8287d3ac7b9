"""The sites of activation patching and the grids they fill: which hook and index each cell patches, and the results'
types, shared by exact patching (`lsa_interp.analysis.activation_patching`) and its gradient approximation
(`lsa_interp.analysis.attribution_patching`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.analysis.patch_runs import AnswerOutcomes, Index
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.hooked import HookedEncoderDecoder

RESID, ATTN_OUT, MLP_OUT, HEADS = "encoder residual", "encoder attention output", "encoder MLP output", "heads"
HEAD_POSITIONS, DECODER_RESID = "encoder heads by position", "decoder residual"
SITES: tuple[str, ...] = (RESID, ATTN_OUT, MLP_OUT, HEADS, HEAD_POSITIONS, DECODER_RESID)
"""The grids `patch_activations` can fill: three of (hook, encoder position), one of (attention module, head), one
of (encoder head, position) and one of the decoder's residual stream at each pair's parting step (one column)."""
DEFAULT_SITES: tuple[str, ...] = (RESID, ATTN_OUT, MLP_OUT, HEADS)
"""What the analysis patches unless told: all but the heads by position (24 x 39 runs for the paper's model)."""
Row = tuple[str, str, list[Index]]
"""One row of a grid: the hook patched, the row's label and the index of the activation each column patches."""


@dataclass(frozen=True)
class PatchingGrid:
    """One site's results: a row per hook (or head), a column per position (or head); ``hooks`` names each row's."""

    site: str
    hooks: tuple[str, ...]
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    logit_diff: Float[Tensor, "row column"]
    """Mean over pairs of the patched run's logit difference (source letter minus target letter)."""
    source_answers: Float[Tensor, "row column"]
    """Fraction of pairs whose greedy answer becomes the source prompt's answer (NaN for a decoder hook: its source
    activations belong to the source prompt's decoder input, which a free decoding leaves)."""
    other_answers: Float[Tensor, "row column"]
    """Fraction of pairs whose greedy answer is neither prompt's answer (NaN for a decoder hook)."""
    source_letters: Float[Tensor, "letter row column"] | None = None
    """Per answer position (its letters, then the EOS), among the pairs whose two answers differ there, the fraction
    whose greedy answer has the source's token there (NaN for a decoder hook and where no pair's answers differ); None
    where no answers were decoded."""
    other_letters: Float[Tensor, "letter row column"] | None = None
    """The same fraction for neither answer's token (`source_letters`)."""

    def letters_at(self, row: int, column: int) -> tuple[float, ...]:
        """One cell's `source_letters` (empty where no answers were decoded)."""
        return () if self.source_letters is None else tuple(self.source_letters[:, row, column].tolist())


@dataclass(frozen=True)
class ActivationPatching:
    """What `patch_activations` returns: the grids and the two unpatched runs they are measured against."""

    source_rule: str
    target_rule: str
    pairs: int
    positions: tuple[str, ...]
    source_logit_diff: float
    target_logit_diff: float
    grids: dict[str, PatchingGrid]

    def normalized(self, site: str) -> Float[Tensor, "row column"]:
        """The grid of ``site`` as (patched - target run) / (source run - target run). Raises KeyError for a site
        that was not patched."""
        if site not in self.grids:
            raise KeyError(f"site {site!r} was not patched; patched: {', '.join(self.grids)}")
        return normalized_diff(self.grids[site].logit_diff, self.source_logit_diff, self.target_logit_diff)


@dataclass(frozen=True)
class PatchEffect:
    """One patched run's measures: the mean logit difference where the answers part, normalised and raw, and where the
    patched prompts were decoded greedily their `AnswerOutcomes` (else NaN shares and no letters): the shares of
    answers that are the source's and that are neither, and per answer position the shares of the source's token and
    of neither's among the pairs whose answers differ there (``source_letters[0]``: the first letter)."""

    normalized: float
    logit_diff: float
    source_answers: float = math.nan
    other_answers: float = math.nan
    source_letters: tuple[float, ...] = ()
    other_letters: tuple[float, ...] = ()


def patch_effect(diff: float, source: float, target: float, outcomes: AnswerOutcomes | None) -> PatchEffect:
    """The `PatchEffect` of a patched run's logit difference ``diff`` against the ``source`` and ``target`` runs'."""
    if outcomes is None:
        return PatchEffect(normalized_diff(diff, source, target), diff)
    shares = outcomes.source, outcomes.other, outcomes.source_letters, outcomes.other_letters
    return PatchEffect(normalized_diff(diff, source, target), diff, *shares)


class GridSheet:
    """A grid's cells as they are measured (NaN until filled), then its `PatchingGrid`; ``width`` answer positions
    (0: answers not decoded, no letter grids)."""

    def __init__(self, rows: int, columns: int, width: int):
        self.diff = torch.full((rows, columns), torch.nan)
        self.shares = torch.full((2, rows, columns), torch.nan)
        self.letters = torch.full((2, width, rows, columns), torch.nan) if width else None

    def fill(self, row: int, column: int, cell: PatchEffect) -> None:
        """Set one cell from its patched run's measures (its letters only where they were counted)."""
        self.diff[row, column] = cell.logit_diff
        self.shares[:, row, column] = torch.tensor([cell.source_answers, cell.other_answers])
        if self.letters is not None and cell.source_letters:
            self.letters[:, :, row, column] = torch.tensor([cell.source_letters, cell.other_letters])

    def grid(self, site: str, hooks: tuple[str, ...], rows: tuple[str, ...], columns: tuple[str, ...]) -> PatchingGrid:
        """The filled grid of ``site``."""
        letters = (None, None) if self.letters is None else tuple(self.letters)
        return PatchingGrid(site, hooks, rows, columns, self.diff, *self.shares, *letters)


def normalized_diff(value: Tensor | float, source: float, target: float) -> Tensor | float:
    """(value - target run) / (source run - target run)."""
    return (value - target) / (source - target)


def check_sites(sites: Sequence[str]) -> None:
    """Raise ValueError for no sites or one not in `SITES`, naming them."""
    unknown = [site for site in sites if site not in SITES]
    if unknown or not sites:
        problem = f"unknown sites {unknown}" if unknown else "no sites given"
        raise ValueError(f"{problem}; choose from: {', '.join(SITES)}")


def site_rows(
    model: HookedEncoderDecoder, site: str, positions: tuple[str, ...], parting: Index
) -> tuple[list[Row], tuple[str, ...]]:
    """The rows of ``site``'s grid and its column labels, for a model of ``model``'s shape, ``positions`` the shared
    position labels and ``parting`` each pair's row and parting step (two index tensors)."""
    cfg = model.cfg
    if site == DECODER_RESID:
        kinds = {"pre": "before", "mid": "after the self-attention of", "mid_cross": "after the cross-attention of"}
        rows = [
            (f"decoder.{layer}.hook_resid_{kind}", f"{label} layer {layer + 1}", [parting])
            for layer in range(cfg.n_decoder_layers)
            for kind, label in kinds.items()
        ]
        last = cfg.n_decoder_layers - 1
        return [*rows, (f"decoder.{last}.hook_resid_post", f"after layer {last + 1}", [parting])], ("parting step",)
    layers, every = range(cfg.n_encoder_layers), slice(None)
    at_positions = [(every, position) for position in range(len(positions))]
    if site == HEADS:
        heads = [(every, every, head) for head in range(cfg.n_heads)]
        rows = [(f"{module}.hook_z", module_label(module), heads) for module in attention_modules(cfg)]
        return rows, tuple(f"head {h + 1}" for h in range(cfg.n_heads))
    if site == HEAD_POSITIONS:
        rows = [
            (
                f"encoder.{layer}.attn.hook_z",
                f"head {layer + 1}.{head + 1}",
                [(every, p, head) for p in range(len(positions))],
            )
            for layer in layers
            for head in range(cfg.n_heads)
        ]
        return rows, positions
    if site == RESID:
        hooks = [f"encoder.{layer}.hook_resid_pre" for layer in layers] + ["encoder.ln_final.hook_out"]
        labels = ["embeddings", *(f"after layer {layer}" for layer in range(1, cfg.n_encoder_layers)), "memory"]
        return [(hook, label, at_positions) for hook, label in zip(hooks, labels)], positions
    suffix = "hook_attn_out" if site == ATTN_OUT else "hook_mlp_out"
    return [(f"encoder.{layer}.{suffix}", f"layer {layer + 1}", at_positions) for layer in layers], positions


def attention_modules(cfg: ModelConfig) -> list[str]:
    """Every attention module, in forward order: ``encoder.0.attn`` .. ``decoder.{last}.cross_attn``."""
    modules = [f"encoder.{layer}.attn" for layer in range(cfg.n_encoder_layers)]
    for layer in range(cfg.n_decoder_layers):
        modules += [f"decoder.{layer}.attn", f"decoder.{layer}.cross_attn"]
    return modules


def module_label(module: str) -> str:
    """``decoder.1.cross_attn`` -> ``decoder 2 cross-attention`` (layers 1-based, as the paper counts them)."""
    stack, layer, kind = module.split(".")
    return f"{stack} {int(layer) + 1} {'cross-attention' if kind == 'cross_attn' else 'self-attention'}"
