"""The explorer page's components (Dash), with the ids the callbacks use. No model code here."""

from __future__ import annotations

from dash import dcc, html

from lsa_interp.data.transformations import PAPER
from lsa_interp.explorer.draw import ALPHABET_KINDS, OUTCOMES, TEST_SPLITS
from lsa_interp.explorer.state import DEFAULT_SOURCE, DEFAULT_TASK

CONTROLS: tuple[str, ...] = (
    "model",
    "task",
    "layer",
    "graph",
    "heads",
    "cells",
    "ablate",
    "patch",
    "source",
    "tab",
    "sender",
    "answers",
)
"""`ViewState` fields, each the ``value`` of the component of the same id."""
GRAPHS: dict[str, str] = {
    "top-k": "graph-topk",
    "encoder self-attention": "graph-encoder",
    "encoder hidden states": "graph-hidden",
    "decoder self-attention": "graph-decoder",
    "cross-attention": "graph-cross",
}
"""Figure name (as `render_view` names it) -> the id of its dcc.Graph."""
_STYLE = {"fontFamily": "system-ui, sans-serif", "margin": "1rem 2rem", "color": "#222"}
_ROW = {"display": "flex", "flexWrap": "wrap", "gap": "1.2rem", "alignItems": "flex-end", "margin": "0.5rem 0"}
_WIDE = {"width": "34rem", "fontFamily": "monospace"}
_ERROR = {"color": "#cf222e", "fontWeight": 600, "whiteSpace": "pre-wrap"}


def _labelled(label: str, component) -> html.Label:
    return html.Label([html.Div(label, style={"fontSize": "0.8rem", "color": "#555"}), component])


def _radio(id_: str, options: list, value: str) -> dcc.RadioItems:
    return dcc.RadioItems(id=id_, options=options, value=value, inline=True, inputStyle={"marginRight": "0.25rem"})


def _graph(id_: str) -> dcc.Graph:
    return dcc.Graph(id=id_, config={"displaylogo": False}, style={"display": "inline-block"})


def _task_controls(models: list[str]) -> list:
    draw = [
        _labelled("test set", dcc.Dropdown(id="draw-split", options=TEST_SPLITS, value="test", clearable=False)),
        _labelled(
            "transformation",
            dcc.Dropdown(id="draw-transformation", options=["any", *PAPER], value="pred", clearable=False),
        ),
        _labelled("alphabet", dcc.Dropdown(id="draw-alphabet", options=ALPHABET_KINDS, value="any", clearable=False)),
        _labelled("outcome", dcc.Dropdown(id="draw-outcome", options=OUTCOMES, value="any", clearable=False)),
        html.Button("draw tasks", id="draw"),
    ]
    return [
        html.Div(
            [
                _labelled("model", dcc.Dropdown(id="model", options=models, value=models[0], clearable=False)),
                _labelled(
                    "task (the paper's notation; Enter to run)",
                    dcc.Input(id="task", value=DEFAULT_TASK, debounce=True, style=_WIDE),
                ),
            ],
            style=_ROW,
        ),
        html.Details(
            [
                html.Summary("draw a task from the model's test sets"),
                html.Div([*[html.Div(c, style={"minWidth": "10rem"}) for c in draw]], style=_ROW),
                html.Div(id="draw-message", style={"fontSize": "0.85rem", "color": "#555"}),
                dcc.Dropdown(
                    id="drawn", options=[], placeholder="drawn tasks (model's answer)", style={"width": "48rem"}
                ),
                dcc.Store(id="drawn-for"),  # the model the drawn tasks were drawn for
            ]
        ),
    ]


def _intervention_controls() -> list:
    return [
        html.Div(
            [
                _labelled("graph layer", _radio("graph", [], "1")),
                _labelled("attention", _radio("heads", ["average", "all"], "average")),
                _labelled("decoder lens: the decoder reads encoder layer", _radio("layer", [], "")),
            ],
            style=_ROW,
        ),
        html.Div(
            [
                _labelled(
                    "ablated cells (LAYER:POS-POS:DIM-DIM:MODE, or drag a box on the hidden states)",
                    dcc.Input(id="cells", value="", debounce=True, style=_WIDE),
                ),
                _labelled("box mode", _radio("cell-mode", ["zero", "mean"], "zero")),
            ],
            style=_ROW,
        ),
        html.Div(
            [
                _labelled("ablate heads (e.g. 2.7+dec:1.3+cross:3.1)", dcc.Input(id="ablate", value="", debounce=True)),
                _labelled("patch heads (e.g. 2.7, or auto)", dcc.Input(id="patch", value="", debounce=True)),
                html.Button("matching heads", id="matching", title="patch the model's detected matching heads"),
                _labelled(
                    "source task of the patterns",
                    dcc.Input(id="source", value=DEFAULT_SOURCE, debounce=True, style=_WIDE),
                ),
                html.Button("succ/pred pair", id="pair", title="a pred task, its succ twin, the matching heads"),
            ],
            style=_ROW,
        ),
        html.Div(
            [
                html.Button("reset interventions", id="reset"),
                html.Button("export HTML", id="export"),
                dcc.Download(id="download"),
            ],
            style=_ROW,
        ),
    ]


def page(models: list[str]) -> html.Div:
    """The whole page for the catalogue's ``models`` (the only names the model picker offers)."""
    graph_tab = html.Div(
        [
            *_intervention_controls(),
            html.Div(id="error", role="alert", style=_ERROR),
            html.Div(  # hidden while the view is an error: the error says what is wrong, once
                [
                    html.Pre(id="summary", style={"background": "#f6f8fa", "padding": "0.6rem"}),
                    html.Div(id="changes"),
                    html.Div(id="legend"),
                    *[_graph(id_) for id_ in GRAPHS.values()],
                    dcc.Store(id="figures-shown", data={}),  # figure name -> digest of the figure the page shows
                ],
                id="view",
            ),
        ]
    )
    training_tab = html.Div(id="training")
    sender = dcc.Input(
        id="sender", value="", debounce=True, placeholder="leading head", style={"width": "9rem"}, type="text"
    )
    patching_tab = html.Div(
        [
            html.Div(
                [
                    _labelled(
                        "path patching from the encoder head (e.g. 1.3; 1.3@31,33: its output at those positions "
                        "only; empty: the leading head)",
                        sender,
                    ),
                    _labelled(
                        "patched answers (count: each patched run's greedy answer, letter by letter; 1.2x slower)",
                        _radio("answers", ["off", "count"], "off"),
                    ),
                ],
                style=_ROW,
            ),
            html.Div(id="patching"),
        ]
    )
    return html.Div(
        [
            dcc.Location(id="url", refresh=False),
            html.H1("lsa-interp explorer", style={"fontSize": "1.4rem"}),
            *_task_controls(models),
            dcc.Tabs(
                id="tab",
                value="graph",
                children=[
                    dcc.Tab(label="computational graph and interventions", value="graph", children=graph_tab),
                    dcc.Tab(label="training", value="training", children=training_tab),
                    dcc.Tab(label="activation patching", value="patching", children=patching_tab),
                ],
            ),
        ],
        style=_STYLE,
    )
