"""The paper's RASP-L selectors as attention matrices, and how closely each encoder head follows them.

Selectors (the first layer of the paper's RASP-L program for the predecessor analogy), for query position
q and key position k of a task's encoder input:

- ``pipe``: k holds ``|`` (every row selects the separators);
- ``arrow``: k holds ``>`` (every row selects the arrow);
- ``same_as``: k holds the same token as q (RASP's ``select(s, s, ==)``: every position selects itself too).

EOS: the paper's string has no EOS, ours ends with one. EOS is kept as a key that no pipe/arrow selector
picks (attention a head puts on it counts as attention off the selector, like any other token); the EOS
*row* has no counterpart in the paper's program and is never scored. PAD positions are neither rows nor
keys. `selector_patterns` row-normalises a selector like an attention pattern (uniform over the selected
keys; all-zero rows select nothing).

Similarity of a head's pattern A to a selector S (`selector_scores`), per task, over the scored rows:

- ``mass`` (the primary score): the mean over rows of the attention mass A puts on S's keys other than the
  query position itself. 1 = the head only reads selected tokens; a uniform head scores about
  (selected keys) / (keys), reported as ``chance``;
- ``correlation``: Pearson correlation between A and the row-normalised off-diagonal selector over the
  scored rows' off-diagonal entries (PAD keys left out); NaN when either is constant.

The diagonal is left out of both scores and a row is scored only when S selects some key other than the
query itself: every token equals itself, so with the diagonal a head that only attends to itself would
match ``same_as`` perfectly while reading nothing. Scores are averaged over tasks (each task weighs one).

Findings (paper, by eye on one predecessor prompt): layer-1 heads resemble the pipe and the arrow selectors;
the matching head ("2.7" in the paper's checkpoint, encoder layer 2) resembles ``same_as``; the paper itself
calls only arrow and same-as convincing. Each selector is scored on its own: it holds when some head of
its judged layer puts at least `MATCH_THRESHOLD` of its attention on the selected keys. Pipe and arrow are
judged in encoder layer 1, the layer the claim names (as the role-assignment finding judges layer 1's
separator stripes); same-as in any layer, as the matching head is found: its place varies between runs
(the paper's appendix: "usually within the first two layers"). The best head of any layer and the best of
the paper's layer are reported beside the verdict.
Default tasks (`paper_rasp_tasks`): the paper's predecessor prompts (``a..z | ghi > fhi | bcd`` and more of
its form, `prompts.paper_prompts`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lsa_interp.analysis.activations import analysis_tasks
from lsa_interp.analysis.prompts import paper_prompts
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import encode_tasks, source_labels
from lsa_interp.data.transformations import SEEN
from lsa_interp.data.vocab import ARROW, EOS, PAD, SEP
from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.model.heads import Head, all_heads

SELECTORS: tuple[str, ...] = ("pipe", "arrow", "same_as")
RUNNING_EXAMPLE = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd"
PAPER_LAYER: dict[str, int] = {"pipe": 1, "arrow": 1, "same_as": 2}
"""The 1-based encoder layer whose heads resemble each selector in the paper."""
JUDGED_IN_ANY_LAYER = frozenset({"same_as"})
"""Selectors whose finding the best head of any layer decides; the others are judged in their `PAPER_LAYER`."""
MATCH_THRESHOLD = 0.5
"""Mass on the selected keys the best head needs for a finding to hold (chance is about 0.03-0.06): a head
"resembles" a selector when most of its attention (more than half) goes where the selector points."""


def selector_masks(src: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch selector pos pos"]:
    """Return the boolean selectors ``[batch, selector (SELECTORS order), q, k]`` of encoder ids ``src``."""
    valid = src != PAD
    rows = valid[:, :, None]
    keys = src[:, None, :]
    pipe = rows & (keys == SEP)
    arrow = rows & (keys == ARROW)
    same = rows & valid[:, None, :] & (src[:, :, None] == keys)
    return torch.stack([pipe, arrow, same], dim=1)


def selector_patterns(
    src: Int[Tensor, "batch pos"], include_self: bool = True
) -> Float[Tensor, "batch selector pos pos"]:
    """Return the selectors as row-normalised attention patterns (rows selecting nothing are zero).

    ``include_self=False`` drops the diagonal first (the form the scores compare heads with).
    """
    masks = selector_masks(src)
    if not include_self:
        masks = masks & ~torch.eye(src.shape[1], dtype=torch.bool, device=src.device)
    weights = masks.float()
    return weights / weights.sum(-1, keepdim=True).clamp(min=1.0)


def scored_rows(src: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch selector pos"]:
    """Rows each selector is scored on: not PAD or EOS, and selecting a key other than the row itself."""
    off_diagonal = selector_masks(src) & ~torch.eye(src.shape[1], dtype=torch.bool, device=src.device)
    return off_diagonal.any(-1) & ((src != PAD) & (src != EOS))[:, None, :]


def selector_scores(
    patterns: Float[Tensor, "batch head pos pos"], src: Int[Tensor, "batch pos"]
) -> tuple[Float[Tensor, "batch head selector"], Float[Tensor, "batch head selector"]]:
    """Return ``(mass, correlation)`` of each head's pattern with each selector, per task (module docstring)."""
    target = selector_patterns(src, include_self=False)[:, None]
    rows = scored_rows(src)[:, None, :, :, None]
    eye = torch.eye(src.shape[1], dtype=torch.bool, device=src.device)
    entries = rows & ((src != PAD)[:, None, None, None, :] & ~eye)
    attn = patterns[:, :, None]
    n_rows = rows.sum((-2, -1)).clamp(min=1)
    mass = (attn * (target > 0)).masked_fill(~entries, 0.0).sum((-2, -1)) / n_rows
    n = entries.sum((-2, -1)).clamp(min=1)

    def centred(x: Tensor) -> Tensor:
        x = x.masked_fill(~entries, 0.0)
        return (x - x.sum((-2, -1), keepdim=True) / n[..., None, None]).masked_fill(~entries, 0.0)

    a, s = centred(attn), centred(target)
    correlation = (a * s).sum((-2, -1)) / ((a * a).sum((-2, -1)) * (s * s).sum((-2, -1))).sqrt()
    return mass, correlation


def seen_rule_tasks(n: int, seed: int = 0) -> list[Task]:
    """``n`` 1-shot tasks in the standard alphabet, split as evenly as possible over the seen transformations
    (`activations.analysis_tasks`). Raises ValueError for a non-positive ``n``."""
    if n < 1:
        raise ValueError(f"the number of tasks must be positive, got {n}")
    return analysis_tasks(SEEN, n, seed=seed, alphabets="standard")


def paper_rasp_tasks(n: int = 19, seed: int = 0) -> list[Task]:
    """``n`` of the paper's predecessor prompts (query ``bcd``, only the example varied; at most 19 exist).
    Raises ValueError for a non-positive ``n`` or more than exist."""
    if n < 1:
        raise ValueError(f"the number of tasks must be positive, got {n}")
    return paper_prompts("pred", n, seed)


def encoder_patterns(
    model: HookedEncoderDecoder, tasks: Sequence[Task]
) -> tuple[Float[Tensor, "batch layer head pos pos"], Int[Tensor, "batch pos"]]:
    """Return every encoder layer's attention pattern for ``tasks`` and their encoder ids (on the CPU)."""
    names = [f"encoder.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_encoder_layers)]
    batch = encode_tasks(list(tasks), with_answers=False)
    with torch.no_grad():
        _, cache = model.run_with_cache(batch, names_filter=names, device="cpu")
    return torch.stack([cache[name] for name in names], dim=1), batch.src


def rasp_comparison(
    model: HookedEncoderDecoder,
    tasks: Sequence[Task],
    example: Task | None = None,
    batch_size: int = 128,
    model_name: str = "",
) -> AnalysisResult:
    """Score every encoder head against every selector, averaged over ``tasks``; return tables (head x
    selector mass and correlation), the best head per selector, heat maps, the selectors next to their best
    heads on ``example`` (default: the paper's running example) and `Finding` rows.

    Raises ValueError for an empty task list.
    """
    if not tasks:
        raise ValueError("the RASP comparison needs at least one task")
    was_training = model.training
    model.eval()
    try:
        mass, correlation, chance = _average_scores(model, list(tasks), batch_size)
        example = example or Task.parse(RUNNING_EXAMPLE)
        example_patterns, example_src = encoder_patterns(model, [example])
    finally:
        model.train(was_training)
    heads = all_heads(model.cfg)
    best_index = mass.argmax(0).tolist()
    best = {sel: heads[index] for sel, index in zip(SELECTORS, best_index)}
    best_rows = {
        sel: {
            "head": heads[h].label,
            "mass": float(mass[h, i]),
            "correlation": float(correlation[h, i]),
            "chance": float(chance[i]),
            **_best_in_layer(mass[:, i], heads, PAPER_LAYER[sel]),
        }
        for i, (sel, h) in enumerate(zip(SELECTORS, best_index))
    }
    summary = {
        "tasks": len(tasks),
        **{f"best_{sel}": row["head"] for sel, row in best_rows.items()},
        **{f"best_{sel}_mass": row["mass"] for sel, row in best_rows.items()},
    }
    labels = list(source_labels(example))
    data = {
        "selectors": list(SELECTORS),
        "heads": [h.label for h in heads],
        "mass": _table(mass, heads),
        "correlation": _table(correlation, heads),
        "chance": dict(zip(SELECTORS, chance.tolist())),
        "best": best_rows,
        "example": str(example),
        "example_tokens": labels,
    }
    figures = {
        "attention mass on the selector's keys": score_heatmap(mass, heads, "mass on selected keys"),
        "correlation with the selector": score_heatmap(correlation, heads, "Pearson correlation", signed=True),
        "selectors and their best heads": example_figure(
            selector_patterns(example_src)[0],
            [example_patterns[0, b.layer, b.head] for b in best.values()],
            list(best.values()),
            labels,
        ),
    }
    return AnalysisResult("rasp", model_name, summary, data, figures, _findings(best_rows))


def _average_scores(
    model: HookedEncoderDecoder, tasks: list[Task], batch_size: int
) -> tuple[Float[Tensor, "heads selector"], Float[Tensor, "heads selector"], Float[Tensor, " selector"]]:
    """Mean mass and correlation over tasks per (head, selector), and the mass of uniform attention."""
    masses, correlations, chances = [], [], []
    for start in range(0, len(tasks), batch_size):
        patterns, src = encoder_patterns(model, tasks[start : start + batch_size])
        batch, layers, n_heads, pos, _ = patterns.shape
        mass, corr = selector_scores(patterns.reshape(batch, layers * n_heads, pos, pos), src)
        masses.append(mass)
        correlations.append(corr)
        keys = (src != PAD).float()[:, None, None, :].expand(batch, 1, pos, pos)
        chances.append(selector_scores(keys / keys.sum(-1, keepdim=True), src)[0][:, 0])
    return torch.cat(masses).mean(0), torch.cat(correlations).nanmean(0), torch.cat(chances).mean(0)


def _table(values: Float[Tensor, "heads selector"], heads: list[Head]) -> dict[str, dict[str, float]]:
    """``{head label: {selector: value}}``."""
    return {head.label: dict(zip(SELECTORS, map(float, values[h]))) for h, head in enumerate(heads)}


def _best_in_layer(mass: Float[Tensor, " heads"], heads: list[Head], layer: int) -> dict[str, float | str]:
    """The best head of 1-based encoder ``layer`` for one selector and its mass (empty if no such layer)."""
    inside = [i for i, h in enumerate(heads) if h.layer == layer - 1]
    if not inside:
        return {}
    best = max(inside, key=lambda i: float(mass[i]))
    return {"paper_layer_head": heads[best].label, "paper_layer_mass": float(mass[best])}


def _findings(best_rows: dict[str, dict]) -> list[Finding]:
    findings = []
    for sel, row in best_rows.items():
        in_layer = (
            f"; best of layer {PAPER_LAYER[sel]}: {row['paper_layer_head']} {row['paper_layer_mass']:.2f}"
            if "paper_layer_head" in row
            else ""
        )
        paper = (
            f"the matching head (2.7, layer {PAPER_LAYER[sel]}) resembles same-as"
            if sel == "same_as"
            else f"layer-{PAPER_LAYER[sel]} heads resemble the {sel} selector"
        )
        anywhere = sel in JUDGED_IN_ANY_LAYER
        judged = row["mass"] if anywhere else row.get("paper_layer_mass", 0.0)
        where = (
            "in any layer (the matching head's layer varies between runs)"
            if anywhere
            else f"of encoder layer {PAPER_LAYER[sel]}, the layer the claim names,"
        )
        findings.append(
            Finding(
                f"RASP {sel} selector",
                paper,
                f"best head {row['head']}: mass {row['mass']:.2f} (chance {row['chance']:.2f}), "
                f"r {row['correlation']:.2f}{in_layer}",
                judged >= MATCH_THRESHOLD,
                f"holds when some head {where} puts >= {MATCH_THRESHOLD} of its attention on the selected keys",
                judged,
            )
        )
    return findings


def score_heatmap(  # pragma: no mutate block
    scores: Float[Tensor, "heads selector"], heads: list[Head], title: str, signed: bool = False
):
    """A plotly heat map of one score, heads (1-based labels) x selectors: 0..1, or with ``signed`` (a correlation)
    -1..1 on a diverging scale centred on 0, so a negative score does not look like none."""
    import plotly.graph_objects as go

    figure = go.Figure(
        go.Heatmap(
            z=scores.tolist(),
            x=list(SELECTORS),
            y=[h.label for h in heads],
            zmin=-1.0 if signed else 0.0,
            zmax=1.0,
            colorscale="RdBu_r" if signed else "Viridis",
            texttemplate="%{z:.2f}",
            colorbar={"title": title},
        )
    )
    figure.update_layout(
        title=f"Encoder heads vs RASP-L selectors: {title}",
        yaxis={"autorange": "reversed", "title": "head (L.H)"},
        height=max(400, 22 * len(heads) + 150),
    )
    return figure


def example_figure(
    selectors: Float[Tensor, "selector pos pos"], patterns: list[Tensor], heads: list[Head], labels: list[str]
):  # pragma: no mutate block
    """The selectors (top row) above the pattern of their best head (bottom row) on one task."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    titles = [f"RASP {sel}" for sel in SELECTORS]
    titles += [f"head {h.label} (best for {sel})" for h, sel in zip(heads, SELECTORS)]
    figure = make_subplots(
        rows=2, cols=len(SELECTORS), subplot_titles=titles, horizontal_spacing=0.06, vertical_spacing=0.08
    )
    ticks = {"tickvals": list(range(len(labels))), "ticktext": labels, "tickfont": {"size": 7}}
    for col, (selector, pattern) in enumerate(zip(selectors, patterns), start=1):
        for row, matrix in ((1, selector), (2, pattern)):
            figure.add_trace(
                go.Heatmap(z=matrix.tolist(), zmin=0.0, zmax=1.0, colorscale="Blues", showscale=row == 1 and col == 1),
                row=row,
                col=col,
            )
            figure.update_xaxes(title_text="key", row=row, col=col, **ticks)
            figure.update_yaxes(title_text="query", autorange="reversed", row=row, col=col, **ticks)
    figure.update_layout(
        title="RASP-L selectors (top) and the best-matching encoder heads (bottom)", height=1100, width=1400
    )
    return figure
