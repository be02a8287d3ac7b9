"""Plotly figures of the explorer: one layer's attention (head average or every head), one encoder layer's
hidden states (box-selectable, ablated cells outlined) and the top-k next tokens of every decoding step.

Axes are numeric positions with token labels as tick text, so a box selection reads back as positions.
Layers and heads are labelled 1-based, as in the paper; token roles colour the tick labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from jaxtyping import Bool, Float
from torch import Tensor

from lsa_interp.explorer.compute import CellBox, Prediction
from lsa_interp.viz.attention_figures import ATTENTION_COLORSCALE, HIDDEN_COLORSCALE, ROLE_COLOURS, blank_masked

_CELL_PX = 14
DECIMALS = 4
"""Values are sent rounded to this many decimals (hover shows 3): a quarter of the JSON, encoded faster."""
HOVER = "%{text}: %{z:.3f}<extra></extra>"
"""Hover of an attention cell: source -> destination: weight (none on masked cells, which are blank)."""


Figure = dict
"""A plotly figure as a plain ``{"data": [...], "layout": {...}}`` dict: Dash sends it as is, without the
validation of ``plotly.graph_objects`` (which costs more than the model run); `go.Figure(fig)` makes one."""


_BAR_PANEL_PX, _BAR_WIDTH_MIN = 140, 480
"""Top-k view: the plot width of one step's panel and of the whole figure at least (room for the title)."""
_TICK_CHAR_PX, _TICK_PAD_PX = 9, 14
"""A 12 px tick label's widest glyph, and the room between a top-k panel's edge and the next panel's token labels (its
last x tick label beside the next panel's first): panels are that far apart, in pixels at the figure's fixed width."""
_HEAD_CELL_PX, _HEAD_TITLE_PX = 9, 30
"""Every-head view: pixels per position of a panel (its tick labels are 7 px) and between rows (the panel titles)."""
PLAIN_AXIS = {"zeroline": False, "showgrid": False}
"""A heatmap's axis: no zero line or grid lines through the cells (they showed in blank masked cells)."""


def _ticks(labels: Sequence[str], roles: Sequence[str] | None, size: int = 9) -> dict:
    """A position axis (`PLAIN_AXIS`) with one tick per position, labelled ``labels``, coloured by ``roles``."""
    text = (
        list(labels)
        if roles is None
        else [f"<span style='color:{ROLE_COLOURS[r]}'>{label}</span>" for label, r in zip(labels, roles)]
    )
    ticks = {"tickmode": "array", "tickvals": list(range(len(labels))), "ticktext": text, "tickfont": {"size": size}}
    return {**PLAIN_AXIS, **ticks}


def _grid(n: int, cols: int, gap: float = 0.04, vgap: float | None = None) -> list[tuple[str, str, dict, dict]]:
    """Axis names and domains of ``n`` panels in rows of ``cols``, ``gap`` apart across and ``vgap`` (default
    ``gap``) down, as fractions of the plot: (x name, y name, x axis, y axis) per panel."""
    vgap = gap if vgap is None else vgap
    rows = -(-n // cols)
    width, height = (1 - gap * (cols - 1)) / cols, (1 - vgap * (rows - 1)) / rows
    panels = []
    for i in range(n):
        row, col = divmod(i, cols)
        x0, y1 = col * (width + gap), 1 - row * (height + vgap)
        suffix = "" if i == 0 else str(i + 1)
        panels.append(
            (f"x{suffix}", f"y{suffix}", {"domain": [x0, x0 + width], "anchor": f"y{suffix}"},
             {"domain": [y1 - height, y1], "anchor": f"x{suffix}"})
        )  # fmt: skip
    return panels


@lru_cache(maxsize=64)
def _hover_text(q_labels: tuple[str, ...], k_labels: tuple[str, ...]) -> list[list[str]]:
    return [[f"{k} -> {q}" for k in k_labels] for q in q_labels]


@lru_cache(maxsize=64)
def _row_text(labels: tuple[str, ...], width: int) -> list[list[str]]:
    return [[label] * width for label in labels]


def _rounded(values: np.ndarray) -> list:
    return np.round(values, DECIMALS).tolist()


def attention_heatmap(
    patterns: Float[Tensor, "head q_pos k_pos"],
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    title: str,
    heads: str = "average",
    q_roles: Sequence[str] | None = None,
    k_roles: Sequence[str] | None = None,
    masked: Bool[Tensor, "q_pos k_pos"] | None = None,
) -> Figure:
    """One layer's attention (destination rows x source columns): the head average, or every head in a grid
    (``heads="all"``, panels titled 1-based). Hover reads ``source -> destination: weight``; cells where
    ``masked`` is True (keys the query cannot attend) are blank."""
    values = patterns.detach().float().cpu().numpy()
    text = _hover_text(tuple(q_labels), tuple(k_labels))
    trace = {
        "type": "heatmap", "text": text, "hovertemplate": HOVER, "hoverongaps": False,
        "colorscale": ATTENTION_COLORSCALE, "zmin": 0.0,
    }  # fmt: skip
    if heads == "average":
        margin = {"t": 60, "l": 70, "r": 30, "b": 60}
        layout = {
            "title": {"text": f"{title}, head average"},
            "xaxis": {"title": {"text": "source (key)"}, **_ticks(k_labels, k_roles)},
            "yaxis": {"title": {"text": "destination (query)"}, "autorange": "reversed", **_ticks(q_labels, q_roles)},
            "width": max(520, 200 + _CELL_PX * len(k_labels)),
            "height": max(320, 160 + _CELL_PX * len(q_labels)),
        }
        z = _rounded(blank_masked(values.mean(0), masked))
        return {"data": [{**trace, "z": z}], "layout": {**layout, "margin": margin}}
    return _every_head(values, (q_labels, k_labels), (q_roles, k_roles), title, trace, masked)


def _every_head(
    values: Float[np.ndarray, "head q_pos k_pos"],
    labels: tuple[Sequence[str], Sequence[str]],
    roles: tuple[Sequence[str] | None, Sequence[str] | None],
    title: str,
    trace: dict,
    masked: Bool[Tensor, "q_pos k_pos"] | None,
) -> Figure:
    """`attention_heatmap`'s every-head grid of ``trace`` heatmaps (``labels`` and ``roles``: query, key): tick
    labels on the outer panels (left column, bottom of each column), a title above each panel in a gap of its own."""
    (q_labels, k_labels), (q_roles, k_roles) = labels, roles
    n_heads = values.shape[0]
    cols = min(4, n_heads)
    rows = -(-n_heads // cols)
    panel = max(150, _HEAD_CELL_PX * max(len(k_labels), len(q_labels)))
    plot_height = rows * panel + (rows - 1) * _HEAD_TITLE_PX
    margin = {"t": 60, "l": 70, "r": 30, "b": 70}
    coloraxis = {"colorscale": ATTENTION_COLORSCALE, "cmin": 0}
    data, layout = [], {"title": {"text": f"{title}, every head"}, "coloraxis": coloraxis}
    annotations = []
    for h, (xname, yname, xaxis, yaxis) in enumerate(_grid(n_heads, cols, vgap=_HEAD_TITLE_PX / plot_height)):
        z = _rounded(blank_masked(values[h], masked))
        data.append({**trace, "z": z, "xaxis": xname, "yaxis": yname, "coloraxis": "coloraxis"})
        bottom, left = h + cols >= n_heads, h % cols == 0
        inner = {**PLAIN_AXIS, "showticklabels": False, "ticks": ""}
        x_ticks = _ticks(k_labels, k_roles, size=7) if bottom else inner
        y_ticks = _ticks(q_labels, q_roles, size=7) if left else inner
        layout["xaxis" + xname[1:]] = {**xaxis, **x_ticks}
        layout["yaxis" + yname[1:]] = {**yaxis, **y_ticks, "autorange": "reversed"}
        annotations.append(
            {"text": f"head {h + 1}", "xref": "paper", "yref": "paper", "x": sum(xaxis["domain"]) / 2,
             "y": yaxis["domain"][1], "yanchor": "bottom", "showarrow": False}
        )  # fmt: skip
    height = plot_height + margin["t"] + margin["b"]
    layout.update(annotations=annotations, width=cols * panel + 150, height=height, margin=margin)
    return {"data": data, "layout": layout}


def hidden_state_heatmap(
    resid: Float[Tensor, "pos d_model"], labels: Sequence[str], roles: Sequence[str], layer: int, cells=()
) -> Figure:
    """Encoder layer ``layer`` (0-based) output, tokens x dimensions, colour -1..1 (clipped), in box-select
    mode; the boxes of ``cells`` (`CellBox`) in this layer are outlined."""
    values = resid.detach().float().cpu().numpy()
    boxes: Sequence[CellBox] = [box for box in cells if box.layer == layer]
    trace = {
        "type": "heatmap",
        "z": _rounded(values),
        "text": _row_text(tuple(labels), values.shape[1]),
        "zmin": -1.0,
        "zmax": 1.0,
        "colorscale": HIDDEN_COLORSCALE,
        "hovertemplate": "%{text}, dim %{x}: %{z:.3f}<extra></extra>",
    }
    layout = {
        "title": {"text": f"encoder layer {layer + 1} hidden states (hook_resid_post): drag a box to select cells"},
        "dragmode": "select",
        "width": max(480, 220 + 5 * values.shape[1]),
        "height": max(320, 160 + _CELL_PX * len(labels)),
        "margin": {"t": 60, "l": 70, "r": 30, "b": 50},
        "xaxis": {"title": {"text": "dimension"}, **PLAIN_AXIS},
        "yaxis": {"title": {"text": "token"}, "autorange": "reversed", **_ticks(labels, roles)},
        "shapes": [
            {
                "type": "rect",
                "x0": box.dims[0] - 0.5,
                "x1": box.dims[1] + 0.5,
                "y0": box.positions[0] - 0.5,
                "y1": box.positions[1] + 0.5,
                "line": {"color": "black", "width": 2, "dash": "dot" if box.mode == "mean" else "solid"},
            }
            for box in boxes
        ],
    }
    return {"data": [trace], "layout": layout}


def top_k_bars(prediction: Prediction, title: str, clean: Prediction | None = None) -> Figure:
    """Horizontal bars of the top-k next tokens at every decoding step, one panel per step; with ``clean``,
    the clean run's probabilities of the same tokens at the same step (from its full distribution) beside them.
    Panels are a fixed pixel width, their token labels in a gap as wide as the longest needs."""
    n_steps = max(1, len(prediction.steps))
    longest = max((len(token) for ranked in prediction.steps for token, _ in ranked), default=1)
    labels = _TICK_CHAR_PX * longest + _TICK_PAD_PX  # pixels left of each panel for its token labels
    margin = {"t": 80, "l": labels, "r": 20, "b": 40}
    plot = max(_BAR_WIDTH_MIN - labels - margin["r"], n_steps * _BAR_PANEL_PX + (n_steps - 1) * labels)
    data, layout, annotations = [], {}, []
    for step, (xname, yname, xaxis, yaxis) in enumerate(_grid(n_steps, n_steps, gap=labels / plot)):
        layout["xaxis" + xname[1:]] = {**xaxis, "range": [0, 1], "nticks": 3}
        layout["yaxis" + yname[1:]] = {**yaxis, "type": "category", "automargin": True}
        annotations.append(
            {"text": f"step {step + 1}", "xref": "paper", "yref": "paper", "x": sum(xaxis["domain"]) / 2, "y": 1,
             "yanchor": "bottom", "showarrow": False}
        )  # fmt: skip
        if step >= len(prediction.steps):
            continue
        ranked = prediction.steps[step]
        tokens = [token for token, _ in ranked][::-1]
        bar = {"type": "bar", "orientation": "h", "y": tokens, "xaxis": xname, "yaxis": yname}
        data.append(
            {**bar, "x": [p for _, p in ranked][::-1], "marker": {"color": "#1f77b4"}, "name": "this run",
             "showlegend": step == 0, "legendgroup": "run", "hovertemplate": "%{y}: %{x:.3f}<extra>this run</extra>"}
        )  # fmt: skip
        if clean is not None and step < len(clean.steps):
            data.append(
                {**bar, "x": [clean.probability(step, t) for t in tokens], "marker": {"color": "#bbbbbb"},
                 "name": "clean run", "showlegend": step == 0, "legendgroup": "clean",
                 "hovertemplate": "%{y}: %{x:.3f}<extra>clean</extra>"}
            )  # fmt: skip
    layout.update(
        title={"text": title},
        barmode="group",
        annotations=annotations,
        height=300,
        width=plot + labels + margin["r"],
        margin=margin,
        legend={"orientation": "h", "y": -0.15},
    )
    return {"data": data, "layout": layout}
