"""The explorer's activation-patching tab: the view's task and its source task (the second task, which pattern
patching takes its patterns from) as one minimal pair. Each encoder head's output at each position, each position of
the encoder's residual stream and every head at all positions are patched from the source task into the task, one at
a time (`lsa_interp.analysis.activation_patching`), and drawn as heat maps of the normalised logit difference where
the model's two answers part."""

from __future__ import annotations

import plotly.graph_objects as go

from lsa_interp.analysis.activation_patching import HEAD_POSITIONS, HEADS, RESID, patch_activations, patching_heatmap
from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.data.task import Task
from lsa_interp.explorer.compute import check_aligned
from lsa_interp.model.hooked import HookedEncoderDecoder

PATCHING_SITES: tuple[str, ...] = (HEAD_POSITIONS, RESID, HEADS)
"""The tab's grids, in the order drawn: for one pair the runs are cheap (about 1,150 of one task for the paper's
model), so each head at each position comes first."""


def patching_pair(model: HookedEncoderDecoder, task: Task, source: Task) -> MinimalPair:
    """``source`` and ``task`` as a minimal pair, each with the model's own greedy answer. Raises ValueError when the
    two do not share one token layout or the model answers them alike (nothing differs to trace)."""
    check_aligned(task, source)
    source_answer, answer = model.solve(source), model.solve(task)
    if source_answer == answer:
        raise ValueError(
            f"the model answers both the task and the source task {answer!r}: there is no difference to trace; give a "
            "source task it answers otherwise (the 'succ/pred pair' button draws one)"
        )
    try:
        return MinimalPair(source.with_answer(source_answer), task.with_answer(answer))
    except ValueError:
        raise ValueError(
            f"the model's answers ({source_answer!r} to the source task, {answer!r} to the task) are not letters "
            "a-z; there is no answer step to read"
        ) from None


def patching_figures(model: HookedEncoderDecoder, task: Task, source: Task) -> dict[str, go.Figure]:
    """A heat map per site of `PATCHING_SITES` for the pair of `patching_pair` (no greedy answers counted: the tab
    reads the logit difference). Raises what `patching_pair` raises."""
    pair = patching_pair(model, task, source)
    result = patch_activations(model, [pair], PATCHING_SITES, answers=False)
    return {
        site: patching_heatmap(result.grids[site], result.normalized(site), f"{site}: patched from the source task")
        for site in PATCHING_SITES
    }
