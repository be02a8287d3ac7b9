"""Plotly figures of the explorer: one layer's attention (head average or every head), one encoder layer's
hidden states (box-selectable, ablated cells outlined) and the top-k next tokens of every decoding step.

Axes are numeric positions with token labels as tick text, so a box selection reads back as positions.
Layers and heads are labelled 1-based, as in the paper; token roles colour the tick labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from jaxtyping import Float
from plotly.subplots import make_subplots
from torch import Tensor

from lsa_interp.explorer.compute import CellBox, Prediction
from lsa_interp.viz.attention_figures import ATTENTION_HOVER, ROLE_COLOURS

_CELL_PX = 14


def _ticks(labels: Sequence[str], roles: Sequence[str] | None) -> dict:
    text = (
        list(labels)
        if roles is None
        else [f"<span style='color:{ROLE_COLOURS[r]}'>{label}</span>" for label, r in zip(labels, roles)]
    )
    return {"tickmode": "array", "tickvals": list(range(len(labels))), "ticktext": text, "tickfont": {"size": 9}}


def attention_heatmap(
    patterns: Float[Tensor, "head q_pos k_pos"],
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    title: str,
    heads: str = "average",
    q_roles: Sequence[str] | None = None,
    k_roles: Sequence[str] | None = None,
) -> go.Figure:
    """One layer's attention (destination rows x source columns): the head average, or every head in a grid
    (``heads="all"``, panels titled 1-based). Hover reads ``source -> destination: weight``."""
    values = patterns.detach().float().cpu().numpy()
    n_heads = values.shape[0]
    x_axis, y_axis = _ticks(k_labels, k_roles), _ticks(q_labels, q_roles)
    if heads == "average":
        fig = go.Figure(go.Heatmap(z=values.mean(0), **_heat(k_labels, q_labels)))
        fig.update_xaxes(title="source (key)", **x_axis)
        fig.update_yaxes(title="destination (query)", autorange="reversed", **y_axis)
        size = (max(420, 200 + _CELL_PX * len(k_labels)), max(320, 160 + _CELL_PX * len(q_labels)))
        fig.update_layout(title=f"{title}, head average", width=size[0], height=size[1])
    else:
        cols = min(4, n_heads)
        rows = -(-n_heads // cols)
        fig = make_subplots(rows, cols, subplot_titles=[f"head {h + 1}" for h in range(n_heads)])
        for h in range(n_heads):
            fig.add_trace(
                go.Heatmap(z=values[h], coloraxis="coloraxis", **_heat(k_labels, q_labels)), h // cols + 1, h % cols + 1
            )
        fig.update_xaxes(showticklabels=False)
        fig.update_yaxes(showticklabels=False, autorange="reversed")
        panel = max(150, 5 * max(len(k_labels), len(q_labels)))
        fig.update_layout(title=f"{title}, every head", coloraxis={"colorscale": "Viridis"}, width=cols * panel + 150)
        fig.update_layout(height=rows * panel + 120)
    fig.update_layout(margin={"t": 60, "l": 70, "r": 30, "b": 60}, plot_bgcolor="white")
    return fig


def _heat(k_labels: Sequence[str], q_labels: Sequence[str]) -> dict:
    return {
        "x": list(range(len(k_labels))),
        "y": list(range(len(q_labels))),
        "customdata": [[(k, q) for k in k_labels] for q in q_labels],
        "hovertemplate": ATTENTION_HOVER.replace("%{x}", "%{customdata[0]}").replace("%{y}", "%{customdata[1]}"),
        "colorscale": "Viridis",
        "zmin": 0.0,
    }


def hidden_state_heatmap(
    resid: Float[Tensor, "pos d_model"], labels: Sequence[str], roles: Sequence[str], layer: int, cells=()
) -> go.Figure:
    """Encoder layer ``layer`` (0-based) output, tokens x dimensions, colour -1..1 (clipped), in box-select
    mode; the boxes of ``cells`` (`CellBox`) in this layer are outlined."""
    values = resid.detach().float().cpu().numpy()
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=list(range(values.shape[1])),
            y=list(range(len(labels))),
            customdata=[[label] * values.shape[1] for label in labels],
            zmin=-1.0,
            zmax=1.0,
            colorscale="RdBu",
            hovertemplate="%{customdata}, dim %{x}: %{z:.3f}<extra></extra>",
        )
    )
    boxes: Sequence[CellBox] = [box for box in cells if box.layer == layer]
    fig.update_layout(
        title=f"encoder layer {layer + 1} hidden states (hook_resid_post): drag a box to select cells",
        dragmode="select",
        width=max(480, 220 + 5 * values.shape[1]),
        height=max(320, 160 + _CELL_PX * len(labels)),
        margin={"t": 60, "l": 70, "r": 30, "b": 50},
        shapes=[
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
    )
    fig.update_xaxes(title="dimension")
    fig.update_yaxes(title="token", autorange="reversed", **_ticks(labels, roles))
    return fig


def top_k_bars(prediction: Prediction, title: str, clean: Prediction | None = None) -> go.Figure:
    """Horizontal bars of the top-k next tokens at every decoding step, one panel per step; with ``clean``,
    the clean run's probabilities of the same tokens are drawn beside them."""
    n_steps = max(1, len(prediction.steps))
    fig = make_subplots(1, n_steps, subplot_titles=[f"step {s + 1}" for s in range(n_steps)], shared_xaxes=True)
    for step, ranked in enumerate(prediction.steps):
        tokens = [token for token, _ in ranked][::-1]
        fig.add_trace(
            go.Bar(
                x=[p for _, p in ranked][::-1],
                y=tokens,
                orientation="h",
                marker_color="#1f77b4",
                name="this run",
                showlegend=step == 0,
                hovertemplate="%{y}: %{x:.3f}<extra>this run</extra>",
            ),
            1,
            step + 1,
        )
        if clean is not None and step < len(clean.steps):
            before = dict(clean.steps[step])
            fig.add_trace(
                go.Bar(
                    x=[before.get(t, 0.0) for t in tokens],
                    y=tokens,
                    orientation="h",
                    marker_color="#bbbbbb",
                    name="clean run (0 if not in its top-k)",
                    showlegend=step == 0,
                    hovertemplate="%{y}: %{x:.3f}<extra>clean</extra>",
                ),
                1,
                step + 1,
            )
    fig.update_xaxes(range=[0, 1], nticks=3)
    fig.update_layout(
        title=title,
        barmode="group",
        height=300,
        width=max(480, 150 * n_steps + 120),
        margin={"t": 70, "l": 40, "r": 20, "b": 40},
        legend={"orientation": "h", "y": -0.15},
    )
    return fig
