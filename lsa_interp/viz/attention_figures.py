"""Plotly figures of the attention viewer: heatmaps with layer and head selectors, hidden states, top-k table.

Selectors are plain plotly ``updatemenus`` (no extra JavaScript). A layer row of buttons and a head dropdown
must combine, yet a plotly button only knows its own arguments, so there is one layer row per head choice
and one head dropdown per layer, all stacked in place: a click shows the trace it names and reveals the
matching menu of the other kind (with its active entry set). Layers and heads are labelled 1-based.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from jaxtyping import Bool, Float
from plotly.colors import diverging, make_colorscale, sequential
from torch import Tensor

ROLE_COLOURS: dict[str, str] = {
    "alphabet": "#8c8c8c",
    "separator": "#222222",
    "example_in": "#1f77b4",
    "arrow": "#9467bd",
    "example_out": "#ff7f0e",
    "query": "#2ca02c",
    "eos": "#d62728",
    "pad": "#dddddd",
}
ATTENTION_COLORSCALE: list[list] = make_colorscale(sequential.Viridis)
"""Attention weights (0..1): Viridis as an explicit ``[[position, colour], ...]`` list, as every attention heatmap
(viewer, explorer, export) sends it: plotly.js and plotly.py resolve the name to different stops."""
HIDDEN_COLORSCALE: list[list] = make_colorscale(diverging.RdBu_r)
"""Hidden states: negative blue, 0 white, positive red (ColorBrewer's RdBu, reversed), as an explicit list: the name
``"RdBu"`` draws +1 red in plotly.js (the explorer's plain-dict figures) but +1 blue in plotly.py (the viewer)."""
ATTENTION_HOVER = "%{x} -> %{y}: %{z:.3f}<extra></extra>"
"""Hover text of an attention cell: source (key) -> destination (query): weight. Masked cells have none."""
_CELL_PX, _MIN_PX, _MIN_WIDTH_PX = 16, 320, 560
_MENU_Y = 1.1


def role_segments(roles: Sequence[str]) -> list[tuple[int, int, str]]:
    """Contiguous runs of one role as ``(first, last, role)`` positions (inclusive)."""
    segments: list[tuple[int, int, str]] = []
    for pos, role in enumerate(roles):
        if segments and segments[-1][2] == role:
            segments[-1] = (segments[-1][0], pos, role)
        else:
            segments.append((pos, pos, role))
    return segments


def role_legend_html(roles: Sequence[str]) -> str:  # pragma: no mutate block
    """An HTML line naming the colour of every role in ``roles`` (first-seen order)."""
    spans = [
        f"<span style='display:inline-block;width:0.8em;height:0.8em;background:{ROLE_COLOURS[role]}'></span> "
        f"{html.escape(role.replace('_', ' '))}"
        for role in dict.fromkeys(roles)
    ]
    return "<p>token roles: " + " &nbsp; ".join(spans) + "</p>"


def _role_shapes(roles: Sequence[str], axis: str) -> list[dict]:  # pragma: no mutate block
    """A colour band per role run outside the plot (top for ``x``, right for ``y``) and a line between runs."""
    shapes = []
    for first, last, role in role_segments(roles):
        lo, hi = first - 0.5, last + 0.5
        if axis == "x":
            band = {"xref": "x", "yref": "paper", "x0": lo, "x1": hi, "y0": 1.005, "y1": 1.03}
            line = {"xref": "x", "yref": "paper", "x0": lo, "x1": lo, "y0": 0, "y1": 1}
        else:
            band = {"xref": "paper", "yref": "y", "x0": 1.005, "x1": 1.03, "y0": lo, "y1": hi}
            line = {"xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": lo, "y1": lo}
        shapes.append({"type": "rect", "fillcolor": ROLE_COLOURS[role], "line": {"width": 0}, **band})
        if first > 0:
            shapes.append({"type": "line", "line": {"color": "rgba(255,255,255,0.55)", "width": 1}, **line})
    return shapes


def _axis(
    labels: Sequence[str], roles: Sequence[str] | None, title: str, reversed_: bool = False
) -> dict:  # pragma: no mutate block
    """A category axis with one tick per position, tick labels coloured by role."""
    text = (
        list(labels)
        if roles is None
        else [f"<span style='color:{ROLE_COLOURS[role]}'>{label}</span>" for label, role in zip(labels, roles)]
    )
    axis = {
        "type": "category",
        "tickmode": "array",
        "tickvals": list(labels),
        "ticktext": text,
        "title": title,
        "tickfont": {"size": 9},
        "showgrid": False,
    }
    if reversed_:
        axis["autorange"] = "reversed"
    return axis


def _choice_name(choice: int, n_heads: int) -> str:
    return "head average" if choice == n_heads else f"head {choice + 1}"


def _selector_menus(n_layers: int, n_heads: int, title: str) -> list[dict]:
    """Layer rows (one per head choice, menus ``0..n_heads``) and head dropdowns (one per layer, after them).

    Trace ``layer * (n_heads + 1) + choice`` is head ``choice`` of ``layer``; choice ``n_heads`` is the average.
    """
    per_layer = n_heads + 1
    choices = [n_heads, *range(n_heads)]

    def update(layer: int, choice: int, menus: dict) -> list[dict]:
        visible = [False] * (n_layers * per_layer)
        visible[layer * per_layer + choice] = True
        label = f"{title}: layer {layer + 1}, {_choice_name(choice, n_heads)}"
        return [{"visible": visible}, {"title.text": label, **menus}]

    menus = []
    for choice in range(per_layer):
        buttons = [
            {
                "label": f"layer {layer + 1}",
                "method": "update",
                "args": update(
                    layer,
                    choice,
                    {
                        **{f"updatemenus[{per_layer + other}].visible": other == layer for other in range(n_layers)},
                        f"updatemenus[{per_layer + layer}].active": choices.index(choice),
                    },
                ),
            }
            for layer in range(n_layers)
        ]
        menus.append(
            {
                "type": "buttons",
                "direction": "right",
                "buttons": buttons,
                "active": 0,
                "visible": choice == n_heads,
                "x": 0,
                "xanchor": "left",
                "y": _MENU_Y,
                "yanchor": "bottom",
            }
        )
    for layer in range(n_layers):
        buttons = [
            {
                "label": _choice_name(choice, n_heads),
                "method": "update",
                "args": update(
                    layer,
                    choice,
                    {
                        **{f"updatemenus[{other}].visible": other == choice for other in range(per_layer)},
                        f"updatemenus[{choice}].active": layer,
                    },
                ),
            }
            for choice in choices
        ]
        menus.append(
            {
                "type": "dropdown",
                "direction": "down",
                "buttons": buttons,
                "active": 0,
                "visible": layer == 0,
                "x": 1,
                "xanchor": "right",
                "y": _MENU_Y,
                "yanchor": "bottom",
            }
        )
    return menus


def blank_masked(
    values: Float[np.ndarray, "q_pos k_pos"], masked: Bool[Tensor, "q_pos k_pos"] | None
) -> Float[np.ndarray, "q_pos k_pos"]:
    """A copy of ``values`` (``[q_pos, k_pos]``) to draw: NaN (a blank cell in plotly) where ``masked`` is True.

    Only for drawing: means and maxima are taken from ``values`` itself.
    """
    if masked is None:
        return values
    return np.where(masked.cpu().numpy(), np.nan, values)


def attention_figure(
    patterns: Float[Tensor, "layer head q_pos k_pos"],
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    title: str,
    q_roles: Sequence[str] | None = None,
    k_roles: Sequence[str] | None = None,
    masked: Bool[Tensor, "q_pos k_pos"] | None = None,
) -> go.Figure:  # pragma: no mutate block
    """Heatmaps (destination rows x source columns) of every head and each layer's head average, one shown.

    Trace ``layer * (n_heads + 1) + head`` is that head; ``head = n_heads`` the average (names say which).
    Cells where ``masked`` is True (keys the query cannot attend) are left blank (NaN), without hover.
    """
    n_layers, n_heads = patterns.shape[:2]
    values = patterns.detach().float().cpu().numpy()
    fig = go.Figure()
    for layer in range(n_layers):
        for choice in range(n_heads + 1):
            z = values[layer].mean(axis=0) if choice == n_heads else values[layer, choice]
            fig.add_trace(
                go.Heatmap(
                    z=blank_masked(z, masked),
                    hoverongaps=False,
                    x=list(k_labels),
                    y=list(q_labels),
                    zmin=0.0,
                    zmax=1.0,  # one scale for every head: a near-uniform head must not look as sharp as a peaked one
                    colorscale=ATTENTION_COLORSCALE,
                    name=f"layer {layer + 1} {_choice_name(choice, n_heads)}",
                    visible=layer == 0 and choice == n_heads,
                    hovertemplate=ATTENTION_HOVER,
                    colorbar={"x": 1.06, "thickness": 12, "title": {"text": "weight"}},
                )
            )
    shapes = (_role_shapes(k_roles, "x") if k_roles else []) + (_role_shapes(q_roles, "y") if q_roles else [])
    fig.update_layout(
        title={"text": f"{title}: layer 1, head average", "y": 0.99, "yanchor": "top"},
        width=max(_MIN_WIDTH_PX, 220 + _CELL_PX * len(k_labels)),
        height=max(_MIN_PX, 230 + _CELL_PX * len(q_labels)),
        margin={"t": 130, "l": 90, "r": 140, "b": 90},
        plot_bgcolor="white",
        shapes=shapes,
        modebar_orientation="v",
        updatemenus=_selector_menus(n_layers, n_heads, title),
        xaxis=_axis(k_labels, k_roles, "source (key)"),
        yaxis=_axis(q_labels, q_roles, "destination (query)", True),
    )
    return fig


def hidden_state_figure(
    resid: Float[Tensor, "layer pos d_model"], labels: Sequence[str], roles: Sequence[str]
) -> go.Figure:  # pragma: no mutate block
    """Heatmaps of each encoder layer's output (tokens x dimensions) with a layer selector."""
    values = resid.detach().float().cpu().numpy()
    n_layers, _, d_model = values.shape
    fig = go.Figure()
    for layer in range(n_layers):
        fig.add_trace(
            go.Heatmap(
                z=values[layer],
                x=list(range(d_model)),
                y=list(labels),
                zmid=0.0,
                colorscale=HIDDEN_COLORSCALE,
                name=f"layer {layer + 1}",
                visible=layer == 0,
                hovertemplate="%{y}, dim %{x}: %{z:.3f}<extra></extra>",
                colorbar={"x": 1.06, "thickness": 12},
            )
        )
    title = "encoder hidden states (hook_resid_post)"
    buttons = [
        {
            "label": f"layer {layer + 1}",
            "method": "update",
            "args": [
                {"visible": [other == layer for other in range(n_layers)]},
                {"title.text": f"{title}: layer {layer + 1}"},
            ],
        }
        for layer in range(n_layers)
    ]
    fig.update_layout(
        title={"text": f"{title}: layer 1", "y": 0.99, "yanchor": "top"},
        width=max(_MIN_PX, 300 + 6 * d_model),
        height=max(_MIN_PX, 230 + _CELL_PX * len(labels)),
        margin={"t": 130, "l": 90, "r": 140, "b": 60},
        shapes=_role_shapes(roles, "y"),
        modebar_orientation="v",
        updatemenus=[
            {
                "type": "buttons",
                "direction": "right",
                "buttons": buttons,
                "active": 0,
                "x": 0,
                "xanchor": "left",
                "y": _MENU_Y,
                "yanchor": "bottom",
            }
        ],
        xaxis={"title": "dimension", "showgrid": False},
        yaxis=_axis(labels, roles, "token", True),
    )
    return fig


def top_k_figure(
    inputs: Sequence[str], outputs: Sequence[str], tokens: Sequence[Sequence[str]], probs: np.ndarray
) -> go.Figure:  # pragma: no mutate block
    """A table: one row per decoder step (its input, the greedy output, the ``k`` likeliest tokens)."""
    n_steps, k = probs.shape
    ranked = [[f"{tokens[step][rank]} {probs[step, rank]:.3f}" for step in range(n_steps)] for rank in range(k)]
    shade = [[f"rgba(31,119,180,{probs[step, rank]:.2f})" for step in range(n_steps)] for rank in range(k)]
    plain = ["white"] * n_steps
    table = go.Table(
        header={"values": ["step", "input", "output", *(f"#{rank + 1}" for rank in range(k))], "align": "left"},
        cells={
            "values": [list(range(1, n_steps + 1)), list(inputs), list(outputs), *ranked],
            "align": "left",
            "fill": {"color": [plain, plain, plain, *shade]},
        },
    )
    fig = go.Figure(table)
    fig.update_layout(
        title="decoder: top-k next-token probabilities per step",
        height=140 + 28 * (n_steps + 1),
        width=max(600, 260 + 95 * k),
        margin={"t": 50, "l": 10, "r": 10, "b": 10},
    )
    return fig
