"""The steering matrix: patching one head's pattern from every transformation into every other.

Cell (source, target) is the flip rate of `patch_pairs` on minimal pairs of the two rules: the fraction of
target prompts whose answer becomes the source rule's answer. Rules whose prompts never share an example
input and a query (e.g. ``sort`` and ``pred``) have no minimal pairs; their cells are NaN and recorded as
missing, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.analysis.pair_batch import PairBatch, pair_batch
from lsa_interp.analysis.patching import patch_pairs, resolve_heads
from lsa_interp.analysis.pattern_patches import check_engine
from lsa_interp.analysis.prompts import WINDOW_LENGTHS, minimal_pairs
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.transformations import PAPER, get_transformation
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import HookedEncoderDecoder


@dataclass(frozen=True)
class SteeringMatrix:
    """Flip rates of ``heads`` patched together, ``[source, target]`` over ``rules`` (NaN on the diagonal and
    for missing cells).

    ``clean_accuracy``: fraction of target prompts answered correctly without patching; ``n_pairs``: pairs
    per measured cell; ``missing``: (source, target) -> why the cell has no value.
    """

    heads: tuple[Head, ...]
    rules: tuple[str, ...]
    flip: Float[Tensor, "source target"]
    clean_accuracy: Float[Tensor, "source target"]
    n_pairs: dict[tuple[str, str], int]
    missing: dict[tuple[str, str], str]

    @property
    def label(self) -> str:
        """The heads' labels joined by ``+``."""
        return "+".join(head.label for head in self.heads)


def _pairs(source: str, target: str, n: int, seed: int, alphabets, lengths) -> PairBatch | str:
    """Up to ``n`` aligned minimal pairs, or why there are none (a cheap one-pair probe first: most rule pairs have
    none; some, like ``extend_sequence`` and ``succ``, have example outputs of different lengths)."""
    options = {"seed": seed, "alphabets": alphabets, "lengths": lengths}
    try:
        minimal_pairs(source, target, 1, **options)
        return pair_batch(minimal_pairs(source, target, n, at_most=True, **options))
    except ValueError as err:
        return str(err)


def steering_matrix(
    model: HookedEncoderDecoder,
    head: Head | str = "auto",
    rules: Sequence[str] = PAPER,
    n_pairs: int = 50,
    seed: int = 0,
    engine: str = "hooks",
    alphabets: str | Sequence[str] = "standard",
    lengths: Sequence[int] = WINDOW_LENGTHS,
) -> SteeringMatrix:
    """Patch ``head`` (a `Head`, a list, a 1-based label, labels joined by ``+`` or ``"auto"``: the heads are
    patched together) for every ordered pair of ``rules``, on minimal pairs in ``alphabets`` of windows of
    ``lengths`` letters (default every training length: many rule pairs have no 3-letter pairs).

    Raises ValueError for unknown rules or engine, fewer than two rules, ``"all"`` or a head that is not an
    encoder head.
    """
    rules = tuple(rules)
    for rule in rules:
        get_transformation(rule)
    if len(set(rules)) < 2:
        raise ValueError("the steering matrix needs at least two different transformations")
    if isinstance(head, str) and head.strip().lower() == "all":
        raise ValueError("the steering matrix patches the heads it is given together; give L.H, L.H+L.H or auto")
    heads = resolve_heads(model, head)
    check_engine(engine)
    size = (len(rules), len(rules))
    flip, clean = torch.full(size, float("nan")), torch.full(size, float("nan"))
    counts: dict[tuple[str, str], int] = {}
    missing: dict[tuple[str, str], str] = {}
    for i, source in enumerate(rules):
        for j, target in enumerate(rules):
            if source == target:
                continue
            pairs = _pairs(source, target, n_pairs, seed, alphabets, lengths)
            if isinstance(pairs, str):
                missing[source, target] = pairs
                continue
            result = patch_pairs(model, pairs, heads, engine)
            flip[i, j], clean[i, j] = result.flip_rate, result.clean_outcomes["target"]
            counts[source, target] = len(pairs)
    return SteeringMatrix(tuple(heads), rules, flip, clean, counts, missing)


def steering_analysis(
    model: HookedEncoderDecoder,
    model_name: str,
    head: Head | str = "auto",
    rules: Sequence[str] = PAPER,
    n_pairs: int = 50,
    seed: int = 0,
    engine: str = "hooks",
    alphabets: str | Sequence[str] = "standard",
    lengths: Sequence[int] = WINDOW_LENGTHS,
) -> AnalysisResult:
    """`steering_matrix` as a result: a source x target heat map of flip rates and the missing cells."""
    matrix = steering_matrix(model, head, rules, n_pairs, seed, engine, alphabets, lengths)
    measured = ~torch.isnan(matrix.flip)
    mean_flip = float(matrix.flip[measured].mean()) if measured.any() else float("nan")
    label = matrix.label
    return AnalysisResult(
        name="steering",
        model=model_name,
        summary={
            "head": label,
            "cells_measured": int(measured.sum()),
            "cells_missing": len(matrix.missing),
            "mean_flip_rate": mean_flip,
            "pairs_per_cell": n_pairs,
            "alphabets": alphabets if isinstance(alphabets, str) else ",".join(alphabets),
            "window_lengths": ",".join(map(str, lengths)),
        },
        data={
            "rules": list(matrix.rules),
            "flip_rate": matrix.flip,
            "clean_accuracy": matrix.clean_accuracy,
            "n_pairs": matrix.n_pairs,
            "missing": matrix.missing,
        },
        figures={f"steering matrix of head {label}": _steering_figure(matrix)},
        findings=[
            Finding(
                "steering by one head",
                "head 2.7's pattern from successor prompts turns predecessor answers into successor answers",
                f"mean flip rate {mean_flip:.2f} over {int(measured.sum())} rule pairs (head {label})",
                None,
            )
        ],
    )


def _steering_figure(matrix: SteeringMatrix):  # pragma: no mutate block
    """The flip rates as a source x target heat map (NaN cells blank)."""
    import plotly.graph_objects as go

    return go.Figure(
        go.Heatmap(
            z=matrix.flip.tolist(),
            x=list(matrix.rules),
            y=list(matrix.rules),
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            colorbar={"title": "flip rate"},
            texttemplate="%{z:.2f}",
        ),
        layout={
            "xaxis": {"title": "target (prompts run)"},
            "yaxis": {"title": "source (pattern taken from)", "autorange": "reversed"},
        },
    )
