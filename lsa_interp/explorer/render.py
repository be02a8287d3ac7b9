"""One view of the explorer, computed from its `ViewState`: runs, comparison and figures, and its export.

`render_view` is what the app shows for a URL; the Dash callbacks only lay it out. It parses the state,
runs the clean and intervened runs (`lsa_interp.explorer.compute`) under the catalogue's lock, and builds
the figures. `export_html` writes the same view, its comparison table included, as one offline HTML page (plotly.js
inlined where there is a figure).
"""

from __future__ import annotations

import html
from collections import OrderedDict
from dataclasses import dataclass, field

import plotly.graph_objects as go

from lsa_interp.analysis.matching import matching_heads
from lsa_interp.data.task import Task
from lsa_interp.explorer.catalogue import ModelCatalogue
from lsa_interp.explorer.compute import (
    Interventions,
    Prediction,
    StepChange,
    compare,
    prediction,
    reference_means,
    run_task,
)
from lsa_interp.explorer.figures import Figure, attention_heatmap, hidden_state_heatmap, top_k_bars
from lsa_interp.explorer.state import (
    DEFAULT_TASK,
    ViewState,
    interventions_of,
    parse_head_view,
    parse_layer,
    parse_pair,
    parse_tab,
)
from lsa_interp.viz.attention_data import AttentionData
from lsa_interp.viz.attention_figures import role_legend_html
from lsa_interp.viz.html import figures_page

TOP_K = 5
_RUNS = 128
"""Runs kept per session, by model, task and interventions: a view that shares a run with a recent one (the
clean run of a new intervention, the runs of another graph layer or head view) reuses it."""


@dataclass
class RenderedView:
    """What one state shows. ``error`` is set (and the rest empty) when the state cannot be shown."""

    state: ViewState
    error: str = ""
    task: Task | None = None
    run: Prediction | None = None
    clean: Prediction | None = None
    model_answer: str = ""
    changes: list[StepChange] = field(default_factory=list)
    interventions: Interventions | None = None
    figures: dict[str, Figure] = field(default_factory=dict)
    roles: tuple[str, ...] = ()
    n_encoder_layers: int = 0

    @property
    def answer_changed(self) -> bool:
        """Whether the intervened run answers differently from the clean run (False until both exist)."""
        return self.run is not None and self.clean is not None and self.run.answer != self.clean.answer

    def summary_lines(self) -> list[str]:
        """Plain-text lines: the task, the answers and what each intervention is."""
        if self.task is None or self.run is None or self.clean is None or self.interventions is None:
            return [self.error] if self.error else []
        ivs = self.interventions
        lines = [f"task: {self.task.spaced()}", f"model's answer: {self.model_answer or '(empty)'}"]
        lens = ivs.lens_layer
        lines.append(f"decoder lens: encoder layer {lens + 1 if lens is not None else 'last'}")
        if ivs.active:
            parts = []
            if ivs.cells:
                parts.append(f"{len(ivs.cells)} cell box(es) ablated")
            if ivs.ablated_heads:
                parts.append("heads ablated: " + " ".join(h.label for h in ivs.ablated_heads))
            if ivs.patched_heads:
                parts.append(f"patterns of {' '.join(h.label for h in ivs.patched_heads)} from {ivs.source}")
            lines.append("interventions: " + "; ".join(parts))
            verdict = "changed" if self.answer_changed else "unchanged"
            lines.append(f"answer: {self.clean.answer or '(empty)'} -> {self.run.answer or '(empty)'} ({verdict})")
        else:
            lines.append(f"answer: {self.run.answer or '(empty)'} (no intervention)")
        return lines


class ViewRenderer:
    """Renders states for one catalogue, keeping recent clean runs."""

    def __init__(self, catalogue: ModelCatalogue) -> None:
        self.catalogue = catalogue
        self._runs: OrderedDict[tuple[str, str, Interventions], AttentionData] = OrderedDict()

    def run(self, name: str, task: Task, interventions: Interventions) -> AttentionData:
        """The run of ``task`` on model ``name`` under ``interventions`` (memoised, least recently used
        dropped first)."""
        key = (name, str(task), interventions)
        if key not in self._runs:
            means = None
            if any(box.mode == "mean" for box in interventions.cells):
                means = self.catalogue.memo(name, "means", reference_means)
            self._runs[key] = run_task(self.catalogue.model(name), task, interventions, TOP_K, means)
            if len(self._runs) > _RUNS:
                self._runs.popitem(last=False)
        self._runs.move_to_end(key)
        return self._runs[key]

    def render(self, state: ViewState) -> RenderedView:
        """The view of ``state``; a bad model, task, layer, head or cell gives a view with ``error`` set."""
        try:
            with self.catalogue.lock:
                return self._render(state)
        except (ValueError, KeyError, FileNotFoundError) as err:
            message = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
            return RenderedView(state, error=message.splitlines()[0] if message else type(err).__name__)

    def _render(self, state: ViewState) -> RenderedView:
        name = state.model or self.catalogue.names[0]
        model = self.catalogue.model(name)
        parse_tab(state.tab)
        parse_pair(state.pair)
        heads = parse_head_view(state.heads)
        if not state.task.strip():
            raise ValueError(f"no task: type one in the paper's notation, e.g. {DEFAULT_TASK}")
        task = Task.parse(state.task).with_answer(None)
        matching = None
        if state.patch.strip().lower() == "auto":
            matching = self.catalogue.memo(name, "matching", lambda m: tuple(matching_heads(m)))
        ivs = interventions_of(state, model.cfg, matching)
        clean = self.run(name, task, ivs.without_changes())
        run = self.run(name, task, ivs) if ivs.active else clean
        plain = self.run(name, task, Interventions(model.cfg.n_encoder_layers - 1))
        graph = parse_layer(state.graph, model.cfg.n_encoder_layers)
        view = RenderedView(
            state,
            task=task,
            run=prediction(run),
            clean=prediction(clean),
            model_answer=plain.answer,
            interventions=ivs,
            roles=run.src_roles,
            n_encoder_layers=model.cfg.n_encoder_layers,
        )
        view.changes = compare(view.clean, view.run) if ivs.active else []
        view.figures = _figures(run, view, graph, heads, model.cfg.n_decoder_layers)
        return view


def _figures(data: AttentionData, view: RenderedView, layer: int, heads: str, n_dec: int) -> dict[str, Figure]:
    dec = min(layer, n_dec - 1)
    src, tgt, roles = data.src_labels, data.tgt_labels, data.src_roles
    title = "answer: top-5 next tokens per decoding step"
    if view.interventions is not None and view.interventions.active:
        title += f" ({view.clean.answer or '(empty)'} -> {view.run.answer or '(empty)'})"
    return {
        "encoder self-attention": attention_heatmap(
            data.encoder_attn[layer],
            src,
            src,
            f"encoder layer {layer + 1} self-attention",
            heads,
            roles,
            roles,
            masked=data.masked("encoder"),
        ),
        "encoder hidden states": hidden_state_heatmap(data.resid[layer], src, roles, layer, view.interventions.cells),
        "decoder self-attention": attention_heatmap(
            data.decoder_attn[dec],
            tgt,
            tgt,
            f"decoder layer {dec + 1} self-attention (causal)",
            heads,
            masked=data.masked("decoder"),
        ),
        "cross-attention": attention_heatmap(
            data.cross_attn[dec],
            tgt,
            src,
            f"decoder layer {dec + 1} cross-attention",
            heads,
            None,
            roles,
            masked=data.masked("cross"),
        ),
        "top-k": top_k_bars(view.run, title, view.clean if view.interventions.active else None),
    }


CHANGE_COLUMNS = ("step", "clean", "p", "intervened", "p", "")
"""The columns of the clean vs intervened table; the last says "changed" where the two runs' tokens differ."""


def change_rows(view: RenderedView) -> list[tuple[str, ...]]:
    """The cells of the clean vs intervened table (`CHANGE_COLUMNS`), one row per decoding step ([] without
    interventions), for the live view and the exported page alike."""
    return [
        (
            str(c.step),
            c.clean,
            f"{c.clean_prob:.3f}",
            c.changed,
            f"{c.changed_prob:.3f}",
            "changed" if c.differs else "",
        )
        for c in view.changes
    ]


def change_verdict(view: RenderedView) -> str:
    """The comparison's verdict: "the answer changed" or "the answer did not change" (under the interventions)."""
    return "the answer changed" if view.answer_changed else "the answer did not change"


def changes_html(view: RenderedView) -> str:
    """The clean vs intervened comparison as HTML, as the live view shows it: the verdict and a table of every
    decoding step's token and probability in each run; "" without interventions."""
    if not view.changes:
        return ""
    header = "".join(f"<th>{h}</th>" for h in CHANGE_COLUMNS)
    cells = lambda row: "".join(f"<td>{html.escape(cell)}</td>" for cell in row[:-1])
    rows = "".join(f"<tr>{cells(row)}<td class='fails'>{row[-1]}</td></tr>" for row in change_rows(view))
    return f"<p><b>{change_verdict(view)}</b></p><table class='findings'><tr>{header}</tr>{rows}</table>"


def export_html(view: RenderedView) -> str:
    """The view as one self-contained HTML page (returned as text; nothing fetched): the summary, the link, the role
    legend, the step-by-step comparison and every figure in the live app's look (plotly.js's own defaults, template
    "none": masked cells blank). An error view is its one line, without plotly.js."""
    title = f"lsa-interp explorer: {view.state.model}"
    lines = "<br>".join(html.escape(line) for line in view.summary_lines())
    link = html.escape(view.state.to_query())
    legend = role_legend_html(view.roles) if view.roles else ""
    intro = f"<p>{lines}</p><p>view: <code>{link}</code></p>{legend}{changes_html(view)}"
    figures = {name: go.Figure(figure).update_layout(template="none") for name, figure in view.figures.items()}
    return figures_page(title, figures, intro=intro)
