"""The explorer's activation-patching tab: the view's task and its source task (the second task, which pattern
patching takes its patterns from) as one minimal pair. Each encoder head's output at each position, each position of
the encoder's residual stream and every head at all positions are patched from the source task into the task, one at
a time (`lsa_interp.analysis.activation_patching`), and drawn as heat maps of the normalised logit difference where
the model's two answers part (on request with every patched run's greedy answer in the hover). A last map follows
the encoder head that carries the difference first (the earliest whose output alone moves half of it, else the one
that moves most) into every later head's queries, keys and values and the memory
(`lsa_interp.analysis.path_patching`)."""

from __future__ import annotations

import plotly.graph_objects as go

from lsa_interp.analysis.activation_patching import (
    HEAD_POSITIONS,
    HEADS,
    RESID,
    ActivationPatching,
    patch_activations,
    patching_heatmap,
)
from lsa_interp.analysis.path_patching import Sender, parse_senders, paths_from
from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.data.task import Task
from lsa_interp.explorer.compute import check_aligned
from lsa_interp.model.heads import Head
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


def activation_figures(
    model: HookedEncoderDecoder, task: Task, source: Task, answers: bool = False
) -> tuple[dict[str, go.Figure], Head]:
    """A heat map per site of `PATCHING_SITES` for the pair of `patching_pair`, and the grids' `leading_head`. With
    ``answers`` every patched run's greedy answer is counted (decoded where its teacher-forced run leaves it in doubt,
    `patched_target`) and the hover says whether it is the source task's, neither task's, and which of its letters
    are the source's. Raises what `patching_pair` raises."""
    result = patch_activations(model, [patching_pair(model, task, source)], PATCHING_SITES, answers=answers)
    figures = {
        site: patching_heatmap(result.grids[site], result.normalized(site), f"{site}: patched from the source task")
        for site in PATCHING_SITES
    }
    return figures, leading_head(result)


def path_map(
    model: HookedEncoderDecoder, task: Task, source: Task, sender: str, leading: Head, answers: bool = False
) -> dict[str, go.Figure]:
    """The heat map of `paths_from` the encoder heads ``sender`` (a 1-based label, ``"1.3"``, at some positions only
    ``"1.3@31,33"``, a layer's heads ``"1.*"``; blank: ``leading``) on the pair of `patching_pair` into every later
    head's inputs, keyed ``"paths from 1.3"``, its title saying why those heads and the path into the memory;
    ``answers`` as in `activation_figures`. Raises
    ValueError for a label that names no encoder head of the model, positions past the prompt, or what
    `patching_pair` raises."""
    chosen, why = [Sender(leading)], "the encoder head that carries the difference first"
    if sender.strip():
        chosen, why = parse_senders(sender, model.cfg), "chosen"
        if chosen[0].head.stack != "encoder":
            raise ValueError(f"sender {sender!r}: give encoder heads (e.g. 1.3); decoder heads are not offered here")
    sweep = paths_from(model, [patching_pair(model, task, source)], chosen, answers=answers)
    memory = round(sweep.memory.normalized, 2) + 0.0  # no "-0.00"
    title = f"{sweep.grid.site} ({why}) into each later head's inputs; into the memory: {memory:.2f}"
    return {sweep.grid.site: patching_heatmap(sweep.grid, sweep.normalized, title)}


def leading_head(result: ActivationPatching) -> Head:
    """The encoder head of ``result``'s heads grid that carries the difference first: the earliest (layer, then head)
    whose output alone moves at least half of it, else the one that moves most."""
    grid, normalized = result.grids[HEADS], result.normalized(HEADS)
    rows = [row for row, hook in enumerate(grid.hooks) if hook.startswith("encoder.")]
    cells = [(row, head) for row in rows for head in range(normalized.shape[1])]
    half = [cell for cell in cells if float(normalized[cell]) >= 0.5]
    row, head = half[0] if half else max(cells, key=lambda cell: float(normalized[cell]))
    return Head("encoder", int(grid.hooks[row].split(".")[1]), head)
