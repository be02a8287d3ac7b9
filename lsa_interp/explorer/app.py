"""The explorer's Dash app: `create_app` wires the page to `ViewRenderer`; `serve` and `explore` run it.

The URL holds the whole view (`ViewState`): one callback keeps the controls and the query string in step
(a control or a button changes the state, the URL follows; a pasted link sets the controls), and one renders
the view of the URL. Callbacks hold no model arithmetic: they call `lsa_interp.explorer` functions. Every
script and style is served by the app itself (``serve_locally``; no external stylesheet or script).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from lsa_interp.data.task import Task
from lsa_interp.evaluation import evaluation_dataset
from lsa_interp.evaluation.runs_table import read_runs_table
from lsa_interp.explorer.catalogue import ModelCatalogue, discover_models
from lsa_interp.explorer.draw import draw_tasks, filter_tasks
from lsa_interp.explorer.figures import Figure
from lsa_interp.explorer.layout import CONTROLS, GRAPHS, page
from lsa_interp.explorer.patching_tab import activation_figures, path_map
from lsa_interp.explorer.render import (
    CHANGE_COLUMNS,
    RenderedView,
    ViewRenderer,
    change_rows,
    change_verdict,
    export_html,
)
from lsa_interp.explorer.state import TABS, ViewState, parse_answers, with_next_pair, with_selection
from lsa_interp.explorer.training import grid_tables, history_figure, model_history, results_table_path
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.viz.attention_figures import role_legend_html

DRAWN = 20
_HIDDEN = {"display": "none"}


def create_app(catalogue: ModelCatalogue) -> Dash:
    """The Dash app over ``catalogue``'s models."""
    app = Dash(
        __name__,
        title="lsa-interp explorer",
        serve_locally=True,
        external_scripts=[],
        external_stylesheets=[],
        suppress_callback_exceptions=False,
        update_title=None,
    )
    app.layout = page(catalogue.names)
    renderer = ViewRenderer(catalogue)
    _sync_callback(app, catalogue)
    _render_callback(app, renderer)
    _training_callback(app, catalogue)
    _patching_callback(app, catalogue)
    _draw_callback(app, catalogue)

    @app.callback(
        Output("download", "data"), Input("export", "n_clicks"), State("url", "search"), prevent_initial_call=True
    )
    def export(_clicks, search):
        view = renderer.render(ViewState.from_query(search))
        return dcc.send_string(export_html(view), "explorer-view.html")

    return app


def _sync_callback(app: Dash, catalogue: ModelCatalogue) -> None:
    buttons = [Input("reset", "n_clicks"), Input("matching", "n_clicks"), Input("pair", "n_clicks")]

    @app.callback(
        Output("url", "search"),
        *[Output(name, "value") for name in CONTROLS],
        Output("drawn", "value"),
        Input("url", "search"),
        *[Input(name, "value") for name in CONTROLS],
        *buttons,
        Input("graph-hidden", "selectedData"),
        Input("drawn", "value"),
        State("cell-mode", "value"),
    )
    def sync(search, *values):
        controls, (selected, drawn, mode) = values[: len(CONTROLS)], values[-3:]
        trigger = ctx.triggered_id
        linked = ViewState.from_query(search)
        if trigger in (None, "url"):
            state = replace(linked, model=linked.model or catalogue.names[0])
            query = state.to_query()
            return (no_update if query == search else query), *_changed_controls(state, catalogue, controls, drawn)
        if trigger == "model" and not controls[CONTROLS.index("model")]:
            # the picker emptied itself (Dash's dropdown drops a value it does not offer, such as a link's unknown
            # model): the link keeps naming that model, and the render callback says it is unknown
            raise PreventUpdate
        state = replace(linked, **_chosen(linked, dict(zip(CONTROLS, controls)), trigger))
        try:
            if trigger == "model":  # the lens and graph layers were the last model's: the new one's defaults
                state = replace(state, layer="", graph=ViewState.graph)
            elif trigger == "reset":
                state = state.reset()
            elif trigger == "matching":
                state = replace(state, patch="auto")
            elif trigger == "pair":
                state = with_next_pair(state)
            elif trigger == "graph-hidden":
                state = with_selection(state, selected, mode, catalogue.model(state.model).cfg)
            elif trigger == "drawn" and drawn:
                state = replace(state, task=drawn)
        except (ValueError, FileNotFoundError):
            pass  # the render callback reports what is wrong with the state
        return state.to_query(), *_changed_controls(state, catalogue, controls, drawn)


def _changed_controls(state: ViewState, catalogue: ModelCatalogue, controls: Sequence, drawn: str | None) -> list:
    """The control values of ``state`` (`_control_values`), no_update for each that the page already shows, then the
    drawn-task picker's value: cleared once the task is no longer the one picked, so that picking it again fires.

    A control written with the value it has still fires the callbacks that read it: the model picker's did, and the
    draw callback took it for a model change and cleared the drawn tasks at every interaction."""
    values = [no_update if new == old else new for new, old in zip(_control_values(state, catalogue), controls)]
    return [*values, no_update if drawn is None or drawn == state.task else None]


def _chosen(linked: ViewState, controls: dict, trigger: str) -> dict[str, str]:
    """The controls' values as state fields, except a layer radio showing its stand-in for the link's blank
    layer (`_control_values`): that stays blank unless the radio itself fired."""
    chosen = {name: "" if value is None else value for name, value in controls.items()}
    for name in ("layer", "graph"):
        if name != trigger and not getattr(linked, name).strip():
            chosen[name] = getattr(linked, name)
    return chosen


def _control_values(state: ViewState, catalogue: ModelCatalogue) -> list[str]:
    """Control values of ``state``; the lens and graph radios show the last layer when the state names none (the
    layer drawn), the tabs the graph tab when the state names no tab (the render callback says what is wrong)."""
    values = [getattr(state, name) for name in CONTROLS]
    empty = [name for name in ("layer", "graph") if not getattr(state, name).strip()]
    if empty and state.model in catalogue.entries:
        try:
            n_layers = str(catalogue.model(state.model).cfg.n_encoder_layers)
        except (ValueError, FileNotFoundError):  # a checkpoint gone since the start: the render callback says so
            n_layers = None
        for name in empty if n_layers else ():
            values[CONTROLS.index(name)] = n_layers
    if state.tab not in TABS:
        values[CONTROLS.index("tab")] = "graph"
    return values


def _render_callback(app: Dash, renderer: ViewRenderer) -> None:
    @app.callback(
        Output("error", "children"),
        Output("summary", "children"),
        Output("changes", "children"),
        Output("legend", "children"),
        Output("layer", "options"),
        Output("graph", "options"),
        Output("view", "style"),
        Output("figures-shown", "data"),
        *[Output(id_, "figure") for id_ in GRAPHS.values()],
        Input("url", "search"),
        State("figures-shown", "data"),
    )
    def render(search, shown):
        state = ViewState.from_query(search)
        if state.tab in TABS and state.tab != "graph":  # an unknown tab is the graph tab's, which names it
            return (no_update,) * (8 + len(GRAPHS))
        view = renderer.render(state)
        layers = _layer_options(view, renderer.catalogue)
        if view.error:  # the message alone: the summary, table and figures (empty frames) are hidden, not resent
            kept = [no_update] * (1 + len(GRAPHS))  # the digests of the figures shown, and those figures
            return view.error, no_update, no_update, no_update, layers, layers, _HIDDEN, *kept
        digests = {name: _digest(view.figures[name]) for name in GRAPHS}
        figures = [no_update if (shown or {}).get(name) == digests[name] else view.figures[name] for name in GRAPHS]
        legend = dcc.Markdown(role_legend_html(view.roles), dangerously_allow_html=True) if view.roles else ""
        summary = "\n".join(view.summary_lines())
        shown = no_update if digests == shown else digests
        return "", summary, _changes_table(view), legend, layers, layers, {}, shown, *figures


def _digest(figure: Figure) -> str:
    """A digest of ``figure``'s JSON: the render callback sends a figure only when it differs from the one shown (a
    lens-radio click re-sent all five, 267 KB, where the encoder's two had not changed)."""
    return hashlib.blake2b(json.dumps(figure, default=str).encode(), digest_size=16).hexdigest()


def _layer_options(view: RenderedView, catalogue: ModelCatalogue) -> list[str]:
    """The model's encoder layers, 1-based: from the model itself where the view failed (a bad layer in the link
    must not leave the radios without a layer to pick)."""
    layers = view.n_encoder_layers
    if not layers:
        try:
            layers = catalogue.model(view.state.model).cfg.n_encoder_layers
        except (ValueError, FileNotFoundError):
            layers = 0
    return [str(i) for i in range(1, layers + 1)]


def _changes_table(view: RenderedView) -> html.Div | str:
    if not view.changes:
        return ""
    header = html.Tr([html.Th(h) for h in CHANGE_COLUMNS])
    rows = [
        html.Tr([*(html.Td(cell) for cell in row[:-1]), html.Td(row[-1], style={"color": "#cf222e"})])
        for row in change_rows(view)
    ]
    verdict = html.Strong(change_verdict(view), id="verdict")
    return html.Div([verdict, html.Table([header, *rows], style={"fontSize": "0.85rem"})])


def _training_callback(app: Dash, catalogue: ModelCatalogue) -> None:
    @app.callback(Output("training", "children"), Input("url", "search"))
    def training(search):
        state = ViewState.from_query(search)
        if state.tab != "training":
            return no_update
        try:
            entry = catalogue.entry(state.model or catalogue.names[0])
        except ValueError as err:
            return html.Div(str(err), style={"color": "#cf222e"})
        parts: list = [html.H3(f"{entry.name}: validation accuracy and loss over training")]
        try:
            history = model_history(entry)
            parts.append(dcc.Graph(id="history", figure=history_figure(history, f"{entry.name}, per epoch")))
        except (LookupError, ValueError) as err:
            parts.append(html.P(str(err), id="no-history"))
        path = results_table_path(entry)
        if path is None:
            parts.append(html.P("No run table of the training grid yet (lsa-interp results writes one).", id="no-runs"))
            return parts
        try:
            tables = grid_tables(read_runs_table(path))
        except (ValueError, KeyError, OSError) as err:
            parts.append(html.P(f"cannot read the run table {path}: {err}", style={"color": "#cf222e"}))
            return parts
        parts.append(html.H3(f"runs of the grid ({path.name}, {len(tables['runs'])} runs)"))
        parts.append(_frame_table(tables["runs"], "runs-table"))
        for name in ("Table 1", "batching"):
            if name in tables:
                title = f"{name}: mean [95% bootstrap interval] over the runs marked counted, beside the paper"
                parts.append(html.H4(title))
                parts.append(_frame_table(tables[name], f"{name.replace(' ', '-').lower()}-table"))
        return parts


def _patching_callback(app: Dash, catalogue: ModelCatalogue) -> None:
    @app.callback(Output("patching", "children"), Input("url", "search"))
    def patching(search):
        state = ViewState.from_query(search)
        if state.tab != "patching":
            return no_update
        try:
            name = state.model or catalogue.names[0]
            catalogue.entry(name)
            task, source, answers = Task.parse(state.task), Task.parse(state.source), parse_answers(state.answers)
            key, sender = f"activation patching|{task}|{source}|answers {answers}", state.sender.strip()
            figures, leading = catalogue.memo(name, key, lambda model: activation_figures(model, task, source, answers))
            paths = catalogue.memo(
                name,
                f"{key}|paths from {sender}",
                lambda model: path_map(model, task, source, sender, leading, answers),
            )
            figures = figures | paths
        except ValueError as err:
            return html.Div(str(err), id="patching-error", style={"color": "#cf222e"})
        intro = (
            f"The task {task} runs with one activation at a time taken from the source task {source} (set it on the "
            "graph tab, or draw a succ/pred pair there); each cell is how far that alone moves the logit difference "
            "between the model's two answers at the step where they part: 1 = the source task's, 0 = unchanged. The "
            "last map is path patching: the source task's output of the encoder head that carries the difference "
            "first (or the one named above), every other head frozen, reaching only the inputs (queries, keys, "
            "values) of the heads in a row."
        ) + (
            " Hovering a cell also shows the patched run's greedy answer: source's 100% where it is the source "
            "task's answer, neither 100% where it is neither task's, and at each answer position where the two "
            "answers differ (#1: the first letter) whether it took the source's token."
            if answers
            else ""
        )
        graphs = [dcc.Graph(id=f"patching-{i}", figure=figure) for i, figure in enumerate(figures.values())]
        return [html.H3(f"{name}: activation patching"), html.P(intro, id="patching-intro"), *graphs]


def _frame_table(frame, id_: str) -> html.Table:
    header = html.Tr([html.Th(str(c)) for c in frame.columns])
    rows = [html.Tr([html.Td(str(v)) for v in row]) for row in frame.itertuples(index=False)]
    return html.Table([header, *rows], id=id_, style={"fontSize": "0.8rem"})


def _draw_callback(app: Dash, catalogue: ModelCatalogue) -> None:
    @app.callback(
        Output("drawn", "options"),
        Output("draw-message", "children"),
        Output("drawn-for", "data"),
        Input("draw", "n_clicks"),
        Input("model", "value"),
        State("draw-split", "value"),
        State("draw-transformation", "value"),
        State("draw-alphabet", "value"),
        State("draw-outcome", "value"),
        State("drawn-for", "data"),
        prevent_initial_call=True,
    )
    def draw(clicks, name, split, transformation, alphabet, outcome, drawn_for):
        if ctx.triggered_id == "model":  # the tasks drawn and their answers were the last model's, if it changed
            if name == drawn_for:
                raise PreventUpdate
            return [], "", None
        try:  # the lock is taken per chunk of decoding, not for the whole draw: other views go on meanwhile
            dataset = catalogue.memo(name, "dataset", evaluation_dataset)
            pool = filter_tasks(dataset.splits[split], transformation, alphabet)
            drawn = draw_tasks(catalogue.model(name), pool, outcome, DRAWN, clicks or 0, catalogue.lock)
        except (ValueError, KeyError, FileNotFoundError) as err:
            return [], f"cannot draw tasks: {err}", None
        options = [
            {"label": f"{t.with_answer(None)}  (model: {a or '(empty)'})", "value": str(t.with_answer(None))}
            for t, a in drawn.found
        ]
        return options, drawn.message(), name


def explorer_catalogue(
    models: Sequence[str] = (), loaded: dict[str, HookedEncoderDecoder] | None = None
) -> ModelCatalogue:
    """The shipped models, the models at ``models`` (names or directories) and the in-memory ``loaded``."""
    return ModelCatalogue(discover_models(models), loaded)


def serve(catalogue: ModelCatalogue, host: str = "127.0.0.1", port: int = 8050, debug: bool = False) -> None:
    """Run the app's server until interrupted (threaded; model runs are serialised by the catalogue lock)."""
    create_app(catalogue).run(host=host, port=port, debug=debug)


def explore(model: HookedEncoderDecoder | str | None = None, port: int = 8050, mode: str = "inline") -> Dash:
    """Show the explorer in a notebook (Dash's jupyter ``mode``: inline, tab or external) for ``model`` (a
    loaded model, a shipped name or a directory; None: the shipped checkpoints). Returns the app. A loaded model
    is put in eval mode (the explorer runs it without dropout) and stays so: call ``model.train()`` to go on
    training it."""
    if isinstance(model, HookedEncoderDecoder):
        catalogue = ModelCatalogue(discover_models(), {"notebook model": model})
    else:
        catalogue = explorer_catalogue([model] if model else [])
    app = create_app(catalogue)
    app.run(jupyter_mode=mode, port=port, host="127.0.0.1")
    return app
