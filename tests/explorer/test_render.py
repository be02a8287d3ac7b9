"""One explorer view from its state: the summary, which runs it makes and keeps, its figures and its export."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest
import torch
from plotly.io.json import to_json_plotly

from lsa_interp.analysis.planted import PLANTED_HEAD, planted_model
from lsa_interp.data.task import Task
from lsa_interp.data.vocab import VOCAB_SIZE, display_token
from lsa_interp.explorer import render
from lsa_interp.explorer.catalogue import ModelCatalogue
from lsa_interp.explorer.compute import CellBox, Interventions, Prediction, reference_means, run_task
from lsa_interp.explorer.figures import attention_heatmap
from lsa_interp.explorer.render import RenderedView, ViewRenderer, export_html
from lsa_interp.explorer.state import ViewState
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.heads import Head
from lsa_interp.viz.attention import attention_view
from lsa_interp.viz.attention_data import collect_attention
from lsa_interp.viz.attention_figures import role_legend_html
from lsa_interp.viz.html import figures_page

TASK = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd"
SPACED = "task: a b c d e f g h i j k l m n o p q r s t u v w x y z | g h i > f h i | b c d"


@pytest.fixture(scope="module")
def planted():
    return planted_model()


@pytest.fixture
def renderer(planted):
    torch.manual_seed(0)
    tiny = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, d_mlp=64, n_encoder_layers=2, n_decoder_layers=2))
    return ViewRenderer(ModelCatalogue(models={"planted": planted, "tiny": tiny.eval()}))


def test_a_view_without_interventions_says_so(renderer):
    view = renderer.render(ViewState(model="planted"))
    assert view.summary_lines() == [
        SPACED,
        "model's answer: f",
        "decoder lens: encoder layer 3",
        "answer: f (no intervention)",
    ]
    assert view.changes == [] and not view.answer_changed and view.n_encoder_layers == 3
    assert len(view.roles) == 39 and view.roles[0] == "alphabet"


def test_a_view_names_each_intervention_and_the_verdict(renderer):
    state = ViewState(
        model="planted", layer="3", ablate="3.1+1.2", cells="1:0-1:0-3:zero,2:4-4:0-0:zero", patch="2.1+1.1"
    )
    view = renderer.render(state)
    lines = view.summary_lines()
    assert lines[:3] == [SPACED, "model's answer: f", "decoder lens: encoder layer 3"]
    source = Task.parse(state.source)
    assert (
        lines[3] == f"interventions: 2 cell box(es) ablated; heads ablated: 3.1 1.2; patterns of 2.1 1.1 from {source}"
    )
    assert (
        lines[4] == f"answer: f -> {view.run.answer or '(empty)'} ({'changed' if view.answer_changed else 'unchanged'})"
    )
    assert [change.step for change in view.changes] == list(range(1, len(view.changes) + 1)) and view.changes


def test_an_unchanged_answer_and_an_empty_one(renderer):
    view = renderer.render(ViewState(model="planted", ablate="1.1"))
    assert view.summary_lines()[-1] == "answer: f -> f (unchanged)" and not view.answer_changed
    empty = RenderedView(
        ViewState(), task=Task.parse(TASK), run=Prediction("", (), ()), clean=Prediction("", (), ()),
        interventions=Interventions(lens_layer=0),
    )  # fmt: skip
    assert empty.summary_lines()[1:] == [
        "model's answer: (empty)", "decoder lens: encoder layer 1", "answer: (empty) (no intervention)",
    ]  # fmt: skip
    changed = RenderedView(
        ViewState(), task=Task.parse(TASK), run=Prediction("", (), ()), clean=view.clean,
        interventions=Interventions(ablated_heads=(Head("encoder", 0, 0),)),
    )  # fmt: skip
    assert changed.summary_lines()[-1] == "answer: f -> (empty) (changed)"
    from_empty = RenderedView(
        ViewState(),
        task=Task.parse(TASK),
        run=view.run,
        clean=Prediction("", (), ()),
        interventions=changed.interventions,
    )
    assert from_empty.summary_lines()[-1] == "answer: (empty) -> f (changed)"
    data = renderer.run("planted", Task.parse(TASK), Interventions())
    title = render._figures(data, from_empty, 0, "average", 1)["top-k"]["layout"]["title"]["text"]
    assert title == "answer: top-5 next tokens per decoding step ((empty) -> f)"
    title = render._figures(data, changed, 0, "average", 1)["top-k"]["layout"]["title"]["text"]
    assert title == "answer: top-5 next tokens per decoding step (f -> (empty))"
    unlensed = RenderedView(
        ViewState(), task=Task.parse(TASK), run=view.run, clean=view.clean, interventions=Interventions()
    )
    assert unlensed.summary_lines()[2] == "decoder lens: encoder layer last"


@pytest.mark.parametrize("missing", ["task", "run", "clean", "interventions"])
def test_a_view_short_of_any_part_shows_its_error_or_nothing(renderer, missing):
    full = renderer.render(ViewState(model="planted"))
    parts = {name: getattr(full, name) for name in ("task", "run", "clean", "interventions")}
    assert RenderedView(ViewState(), **{**parts, missing: None}).summary_lines() == []
    assert RenderedView(ViewState(), error="bad", **{**parts, missing: None}).summary_lines() == ["bad"]


def test_the_model_s_own_answer_ignores_the_lens(renderer, planted):
    view = renderer.render(ViewState(model="planted", layer="1"))
    assert view.model_answer == planted.solve(Task.parse(TASK)) == "f" and view.run.answer != "f"
    assert view.summary_lines()[1:3] == ["model's answer: f", "decoder lens: encoder layer 1"]


def test_no_model_named_is_the_first_of_the_catalogue(renderer):
    assert renderer.render(ViewState()).n_encoder_layers == 3
    assert renderer.render(ViewState(model="tiny")).n_encoder_layers == 2


def test_patch_auto_patches_the_matching_heads_found_once(renderer, monkeypatch):
    found = []
    monkeypatch.setattr(render, "matching_heads", lambda model: found.append(model) or [PLANTED_HEAD])
    for patch in ("auto", " AUTO "):
        view = renderer.render(ViewState(model="planted", patch=patch))
        assert view.error == "" and view.interventions.patched_heads == (PLANTED_HEAD,)
    assert len(found) == 1 and found[0] is renderer.catalogue.model("planted")
    assert renderer.render(ViewState(model="tiny", patch="auto")).interventions.patched_heads == (PLANTED_HEAD,)
    assert len(found) == 2, "each model has its own matching heads"


def test_runs_are_kept_and_the_least_recently_used_dropped(renderer, monkeypatch, planted):
    task, other = Task.parse(TASK), Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | cde")
    data, runs = run_task(planted, task), []
    monkeypatch.setattr(render, "run_task", lambda model, task, ivs, k, means: runs.append((task, ivs)) or data)
    monkeypatch.setattr(render, "_RUNS", 2)
    first = renderer.run("planted", task, Interventions())
    assert renderer.run("planted", task, Interventions()) is first and len(runs) == 1
    renderer.run("tiny", task, Interventions())
    assert len(runs) == 2, "another model is another run"
    renderer.run("planted", task, Interventions())  # used again: now the most recent
    renderer.run("planted", other, Interventions())
    assert len(runs) == 3
    renderer.run("planted", task, Interventions())
    assert len(runs) == 3, "kept: the tiny model's run was dropped"
    renderer.run("tiny", task, Interventions())
    assert len(runs) == 4


def test_mean_cells_use_the_model_s_reference_means_computed_once(renderer, monkeypatch):
    tiny = renderer.catalogue.model("tiny")
    made = []
    monkeypatch.setattr(render, "reference_means", lambda model: made.append(model) or reference_means(model))
    for cells in ("2:3-5:0-31:mean", "2:3-6:0-31:mean"):
        view = renderer.render(ViewState(model="tiny", cells=cells))
        assert view.error == ""
    assert made == [tiny]
    box = CellBox(1, (3, 6), (0, 31), "mean")
    expected = run_task(tiny, Task.parse(TASK), Interventions(cells=(box,)), 5, reference_means(tiny))
    torch.testing.assert_close(renderer.run("tiny", Task.parse(TASK), view.interventions).resid, expected.resid)
    renderer.render(ViewState(model="tiny", cells="2:3-5:0-31:zero"))
    assert len(made) == 1


def test_errors_become_one_line(renderer, monkeypatch):
    for error, shown in [
        (KeyError("no such cell"), "no such cell"),
        (ValueError("first line\nsecond line"), "first line"),
        (ValueError(""), "ValueError"),
        (KeyError(), "KeyError"),
        (FileNotFoundError("no checkpoint"), "no checkpoint"),
    ]:
        monkeypatch.setattr(renderer, "_render", lambda state, error=error: (_ for _ in ()).throw(error))
        view = renderer.render(ViewState(model="m"))
        assert (view.error, view.state) == (shown, ViewState(model="m"))


def _title(figure) -> str:
    return figure["layout"]["title"]["text"]


def test_the_figures_show_the_graph_layer_and_the_head_view(renderer):
    view = renderer.render(ViewState(model="tiny", graph="2", heads="all", ablate="1.1"))
    titles = {name: _title(figure) for name, figure in view.figures.items()}
    assert titles == {
        "encoder self-attention": "encoder layer 2 self-attention, every head",
        "encoder hidden states": "encoder layer 2 hidden states (hook_resid_post): drag a box to select cells",
        "decoder self-attention": "decoder layer 2 self-attention (causal), every head",
        "cross-attention": "decoder layer 2 cross-attention, every head",
        "top-k": f"answer: top-5 next tokens per decoding step ({view.clean.answer or '(empty)'} -> "
        f"{view.run.answer or '(empty)'})",
    }
    assert {len(figure["data"]) for name, figure in view.figures.items() if "attention" in name} == {4}
    averaged = renderer.render(ViewState(model="tiny", graph="1", heads="average"))
    assert {len(f["data"]) for name, f in averaged.figures.items() if "attention" in name} == {1}
    assert _title(averaged.figures["top-k"]) == "answer: top-5 next tokens per decoding step"
    assert [trace["name"] for trace in averaged.figures["top-k"]["data"]] == ["this run"] * len(averaged.run.steps)


def test_the_planted_model_s_one_decoder_layer_serves_every_graph_layer(renderer):
    view = renderer.render(ViewState(model="planted", graph="3"))
    assert _title(view.figures["encoder self-attention"]).startswith("encoder layer 3 ")
    assert _title(view.figures["decoder self-attention"]).startswith("decoder layer 1 ")
    assert _title(view.figures["cross-attention"]).startswith("decoder layer 1 ")


def test_ticks_carry_the_token_roles_and_the_hidden_states_outline_the_shown_layer_s_cells(renderer):
    view = renderer.render(ViewState(model="planted", graph="2", cells="2:30-31:0-9:zero,1:0-0:0-0:zero"))
    for name, axes in [
        ("encoder self-attention", ("xaxis", "yaxis")), ("encoder hidden states", ("yaxis",)),
        ("cross-attention", ("xaxis",)),
    ]:  # fmt: skip
        for axis in axes:
            ticks = view.figures[name]["layout"][axis]["ticktext"]
            assert len(ticks) == 39 and all(tick.startswith("<span style='color:") for tick in ticks), (name, axis)
    assert "<span" not in "".join(view.figures["cross-attention"]["layout"]["yaxis"]["ticktext"])
    assert len(view.figures["encoder hidden states"]["layout"]["shapes"]) == 1
    assert [t["name"] for t in view.figures["top-k"]["data"]][:2] == ["this run", "clean run"]


def test_export_is_one_page_of_the_summary_the_link_the_roles_and_every_figure(renderer):
    view = renderer.render(ViewState(model="planted", ablate="3.1"))
    page = export_html(view)
    lines = "<br>".join(html.escape(line) for line in view.summary_lines())
    link = html.escape(view.state.to_query())
    assert f"<p>{lines}</p><p>view: <code>{link}</code></p>{role_legend_html(view.roles)}" in page
    for figure in view.figures.values():  # plotly's JSON writes ">" as "\u003e"
        assert _title(figure).replace(">", "\\u003e") in page
    bare = export_html(RenderedView(ViewState(model="x"), error="unknown model 'x'"))
    intro = "<p>unknown model &#x27;x&#x27;</p><p>view: <code>?model=x</code></p>"
    assert bare == figures_page("lsa-interp explorer: x", {}, intro=intro), "no figures and no role legend"


def test_the_export_holds_the_step_table_draws_in_the_live_look_and_an_error_without_plotly(renderer):
    """The exported page is the whole view: the clean vs intervened steps, figures without plotly.py's template (its
    grey-blue background showed through the blank masked cells), and an error view is one line, not 4.8 MB."""
    view = renderer.render(ViewState(model="planted", ablate="3.1"))
    page = export_html(view)
    assert view.changes and "<p><b>the answer changed</b></p><table class='findings'><tr><th>step</th>" in page
    first = view.changes[0]
    assert (
        f"<tr><td>1</td><td>{html.escape(first.clean)}</td><td>{first.clean_prob:.3f}</td>"
        f"<td>{html.escape(first.changed)}</td><td>{first.changed_prob:.3f}</td><td class='fails'>changed</td></tr>"
    ) in page
    exported = _page_figures(page)
    assert len(exported) == len(view.figures) and all("layout" not in f["layout"]["template"] for f in exported)
    assert "plot_bgcolor" not in "".join(json.dumps(f["layout"]) for f in exported)
    plain = export_html(renderer.render(ViewState(model="planted")))
    assert "the answer" not in plain and "<th>step</th>" not in plain  # no intervention: no comparison
    bare = export_html(RenderedView(ViewState(model="x"), error="unknown model 'x'"))
    assert len(bare) < 2000 and "<script" not in bare and "unknown model &#x27;x&#x27;" in bare


def _page_figures(page: str) -> list[dict]:
    """The figures of an HTML page as plotly.js receives them (``Plotly.newPlot(id, data, layout, config)``)."""
    decoder, figures = json.JSONDecoder(), []
    for call in page.split("Plotly.newPlot(")[1:]:
        start = call.index("[")
        data, end = decoder.raw_decode(call, start)
        layout, _ = decoder.raw_decode(call, call.index("{", end))
        figures.append({"data": data, "layout": layout})
    return figures


def test_the_live_view_its_export_and_the_viewer_draw_with_the_same_colour_scales(renderer, planted):
    """plotly.js and plotly.py resolve a colour scale's name differently ("RdBu" drew +1 red live, +1 blue in the
    export and the viewer): every heatmap sends one explicit list; hidden states are negative blue, positive red."""
    view = renderer.render(ViewState(model="planted"))
    live = [view.figures[name]["data"][0]["colorscale"] for name in ("encoder self-attention", "encoder hidden states")]
    assert all(isinstance(scale, list) for scale in live)
    assert live[1][0] == [0.0, "rgb(5,48,97)"] and live[1][-1] == [1.0, "rgb(103,0,31)"]
    exported = _page_figures(export_html(view))
    assert [figure["data"][0]["colorscale"] for figure in exported[:2]] == live  # in the order of view.figures
    viewer = _page_figures(attention_view(planted, Task.parse(TASK)).html())
    scales = {figure["layout"]["title"]["text"].split(":")[0]: figure["data"][0].get("colorscale") for figure in viewer}
    assert scales["encoder self-attention"] == live[0] and scales["encoder hidden states (hook_resid_post)"] == live[1]


def test_every_head_panel_is_titled_clear_of_the_row_above_and_the_outer_panels_carry_the_tick_labels(renderer):
    view = renderer.render(ViewState(model="tiny", graph="2", heads="all"))
    for name, (q_roles, k_roles) in [
        ("encoder self-attention", (True, True)), ("decoder self-attention", (False, False)),
        ("cross-attention", (False, True)),
    ]:  # fmt: skip
        layout = view.figures[name]["layout"]
        xs, ys = (sorted((k for k in layout if k.startswith(axis)), key=lambda k: int(k[5:] or 1)) for axis in "xy")
        assert len(xs) == len(ys) == 4, "the tiny model's four heads in one row"
        for axis, roles in [(layout[xs[0]], k_roles), (layout[ys[0]], q_roles)]:  # every x axis is the bottom one
            assert axis.get("showticklabels", True) and len(axis["ticktext"]) == len(axis["tickvals"]) > 1
            assert axis["ticktext"][0].startswith("<span") == roles
        assert all(layout[y]["showticklabels"] is False and "ticktext" not in layout[y] for y in ys[1:])
    two_rows = attention_heatmap(torch.rand(8, 39, 39), [str(i) for i in range(39)], list("a" * 39), "t", "all")
    layout = two_rows["layout"]
    plot_px = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]

    def axis(kind: str, head: int) -> dict:  # head 0's axes are xaxis and yaxis, head 4's xaxis5 and yaxis5
        return layout[f"{kind}axis{head + 1 if head else ''}"]

    for head in range(4, 8):  # the second row: its titles need 20 px below the panel above
        title = layout["annotations"][head]
        assert title["text"] == f"head {head + 1}" and title["y"] + 20 / plot_px <= axis("y", head - 4)["domain"][0]
    assert ["ticktext" in axis("y", h) for h in (0, 1, 4, 5)] == [True, False, True, False]
    assert ["ticktext" in axis("x", h) for h in (0, 4, 7)] == [False, True, True]
    assert axis("x", 4)["ticktext"] == list("a" * 39) and axis("y", 4)["ticktext"][-1] == "38"


def test_no_zero_or_grid_line_runs_through_a_heatmap(renderer):
    """A zero line ran through the blank masked cells of the decoder self-attention."""
    for heads in ("average", "all"):
        view = renderer.render(ViewState(model="tiny", heads=heads))
        for name, figure in view.figures.items():
            if name == "top-k":
                continue
            axes = [value for key, value in figure["layout"].items() if key.startswith(("xaxis", "yaxis"))]
            assert axes and all(a["zeroline"] is False and a["showgrid"] is False for a in axes), (heads, name)


def test_the_decoder_s_masked_future_is_blank_in_both_head_views(renderer):
    """A step cannot attend to later steps: those cells are sent as NaN (JSON null, a blank cell, no hover), the
    rest as the run's weights, so a masked cell differs from a real weight of 0."""
    for heads in ("average", "all"):
        view = renderer.render(ViewState(model="tiny", graph="2", heads=heads))
        traces = view.figures["decoder self-attention"]["data"]
        n_steps = len(traces[0]["z"])
        assert n_steps > 1, "the test needs at least two decoder steps"
        future = np.triu(np.ones((n_steps, n_steps), dtype=bool), 1)
        for trace in traces:
            z = np.asarray(trace["z"], dtype=float)
            assert np.isnan(z[future]).all() and not np.isnan(z[~future]).any() and trace["hoverongaps"] is False
        assert "null" in to_json_plotly(traces[0]["z"]) and "NaN" not in to_json_plotly(traces[0]["z"])
        for name in ("encoder self-attention", "cross-attention"):
            assert not any(np.isnan(np.asarray(t["z"], dtype=float)).any() for t in view.figures[name]["data"])


@pytest.mark.parametrize(
    ("state", "error"),
    [
        (ViewState(model="tiny", heads="sideways"), "heads 'sideways' is not one of average, all (the attention view)"),
        (ViewState(model="tiny", tab="foo"), "tab 'foo' is not one of graph, training, patching"),
        (ViewState(model="tiny", pair="x"), "pair 'x' is not a pair number (1, 2, ...)"),
        (ViewState(model="tiny", task=" "), f"no task: type one in the paper's notation, e.g. {TASK}"),
        (ViewState(model="tiny", patch="1.1", source=""), "source task: a task needs 'alphabet | example_in > "),
    ],
)
def test_a_link_s_malformed_view_part_is_named_not_drawn_as_the_default(renderer, state, error):
    """A head view or tab outside the link's choices used to draw the head average (or a blank page) without a
    word; an empty task was reported as a task missing its '|'s."""
    view = renderer.render(state)
    assert view.error.startswith(error) and view.figures == {}


def test_the_clean_bars_show_every_token_s_own_probability_not_0_outside_its_top_5(renderer):
    """A token of the intervened run's top-5 outside the clean run's top-5 at that step used to be drawn at 0
    (legend "0 if not in its top-k"); each clean bar is now the clean run's probability of that token, as a
    teacher-forced run of the clean answer gives it over the whole vocabulary."""
    view = renderer.render(ViewState(model="tiny", ablate="1.1+2.2"))
    reference = collect_attention(renderer.catalogue.model("tiny"), Task.parse(TASK), top_k=VOCAB_SIZE)
    run_bars, clean_bars = view.figures["top-k"]["data"][:2]
    assert clean_bars["name"] == "clean run" and run_bars["y"] == clean_bars["y"]
    steps = [(trace["y"], trace["x"]) for trace in view.figures["top-k"]["data"] if trace["name"] == "clean run"]
    outside = 0
    for step, (tokens, shown) in enumerate(steps):
        full = dict(zip(map(display_token, reference.top_ids[step].tolist()), reference.top_probs[step].tolist()))
        assert shown == pytest.approx([full[token] for token in tokens], abs=1e-5)
        outside += len(set(tokens) - {token for token, _ in view.clean.steps[step]})
    assert steps and outside, "the test needs a token outside the clean run's top-5"
