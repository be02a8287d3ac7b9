"""The explorer's callbacks driven as the browser drives them (tests/explorer/dash_calls.py): switching between
models of different depths, a checkpoint gone since the start, the drawn tasks of another model."""

from __future__ import annotations

import shutil
from urllib.parse import parse_qs, urlencode

import pytest
import torch

from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.explorer.app import create_app
from lsa_interp.explorer.catalogue import ModelCatalogue, ModelEntry
from lsa_interp.explorer.layout import CONTROLS, GRAPHS
from lsa_interp.explorer.state import DEFAULT_TASK, ViewState
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, save_model
from tests.explorer.dash_calls import call_callback


def _model(encoder_layers: int) -> HookedEncoderDecoder:
    torch.manual_seed(encoder_layers)
    config = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=encoder_layers, n_decoder_layers=1, d_mlp=32)
    return HookedEncoderDecoder(config)


@pytest.fixture(scope="module")
def app():
    """Two models of 4 and 3 encoder layers, in that order."""
    return create_app(ModelCatalogue([], {"deep": _model(4), "shallow": _model(3)}))


def _respond(
    app, search: str, controls: dict[str, str], changed: str, pair_clicks: int = 0, drawn: str | None = None
) -> tuple[dict, list]:
    """The sync callback's response fired by ``changed`` ({} when it updates nothing) and the controls' values
    sent."""
    values = [controls.get(name, getattr(ViewState(), name)) for name in CONTROLS]
    inputs = [search, *values, 0, 0, pair_clicks, None, drawn]
    return call_callback(app, "url.search...model.value", inputs, ["zero"], changed), values


def _sync(
    app, search: str, controls: dict[str, str], changed: str, pair_clicks: int = 0, drawn: str | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """The URL's fields and the controls' values after the sync callback fired by ``changed`` (a control the
    response leaves out keeps the value sent)."""
    response, sent = _respond(app, search, controls, changed, pair_clicks, drawn)
    search = response["url"]["search"] if "url" in response else search  # left out: the link stays as it was
    url = {k: v[-1] for k, v in parse_qs(search.lstrip("?"), keep_blank_values=True).items()}
    return url, {name: response[name]["value"] if name in response else value for name, value in zip(CONTROLS, sent)}


def _render(app, search: str, shown: dict | None) -> dict:
    """The render callback's response to the link ``search``, the page showing the figures of digests ``shown``."""
    return call_callback(app, "error.children", [search], [shown], changed="url.search")


def test_switching_to_a_shallower_model_takes_its_own_layers_not_the_last_models(app):
    """Opened on the 4-layer model, the lens radio shows its last layer (4); the controls then name layer 4 and
    graph 4. Picking the 3-layer model used to write layer=4 into the link: an error page whose radios had no layer
    left to pick. The new model's defaults are taken instead, and its radios offer its own layers."""
    _, controls = _sync(app, "?model=deep", {}, "url.search")
    assert controls["layer"] == "4"
    url, controls = _sync(app, "", {**controls, "graph": "4", "model": "shallow"}, "model.value")
    assert url == {"model": "shallow"} and (controls["layer"], controls["graph"]) == ("3", "1")
    other = _sync(app, "?model=shallow", {**controls, "task": DEFAULT_TASK.replace("| bcd", "| cde")}, "task.value")[0]
    assert "layer" not in other


def test_a_link_with_a_layer_the_model_lacks_shows_the_error_and_keeps_the_layer_choices(app):
    response = _render(app, "?model=shallow&layer=4", {})
    assert response["error"]["children"] == "layer '4' is not one of 1..3"
    assert response["layer"]["options"] == response["graph"]["options"] == ["1", "2", "3"]


def test_a_checkpoint_removed_after_the_start_is_reported_not_a_server_error(tmp_path):
    save_model(_model(3), tmp_path / "gone")
    app = create_app(ModelCatalogue([ModelEntry("gone", tmp_path / "gone")], {"here": _model(3)}))
    shutil.rmtree(tmp_path / "gone")
    url, controls = _sync(app, "?model=gone", {}, "url.search")  # used to answer HTTP 500
    assert url == {"model": "gone"} and controls["model"] == "gone"
    rendered = _render(app, "?model=gone", {})
    assert rendered["error"]["children"].startswith("no checkpoint named or at")


def test_the_drawn_tasks_are_cleared_when_the_model_changes(app):
    state = ["val", "", "", "any", "deep"]
    response = call_callback(app, "drawn.options", [1, "shallow"], state, changed="model.value")
    assert response["drawn"]["options"] == [] and response["draw-message"]["children"] == ""
    assert response["drawn-for"]["data"] is None


def test_the_drawn_tasks_outlive_every_interaction_but_a_new_draw_or_model(app):
    """The sync callback wrote every control's value at every interaction, the model's included, which fired the draw
    callback as a model change: a graph-layer click, a typed ablation or picking a drawn task emptied the list. The
    sync now leaves the controls the page already shows alone, and the draw callback clears the list only for a
    model other than the one it was drawn for."""
    _, controls = _sync(app, "?model=deep", {}, "url.search")
    task = DEFAULT_TASK.replace("| bcd", "| cde")
    for changed, change, drawn in (("graph", "2", None), ("ablate", "1.1", None), ("drawn", None, task)):
        sent = {**controls, changed: change} if change else controls
        response, _ = _respond(app, "?model=deep", sent, f"{changed}.value", drawn=drawn)
        assert "model" not in response, f"{changed}: the model picker was written"
        assert [name for name in CONTROLS if name in response] == (["task"] if drawn else [])
    assert response["task"]["value"] == task and "drawn" not in response
    kept = call_callback(app, "drawn.options", [1, "deep"], ["val", "", "", "any", "deep"], changed="model.value")
    assert kept == {}, "the model the tasks were drawn for: the list stays"


def test_a_drawn_task_can_be_picked_again_after_typing_another(app):
    """The picker kept showing the task picked, so picking it again after typing another changed nothing and fired
    nothing: the picker is cleared once the task is no longer the one it shows."""
    picked = DEFAULT_TASK.replace("| bcd", "| cde")
    response, _ = _respond(app, "?model=deep", {"layer": "4"}, "task.value", drawn=picked)
    assert response["drawn"]["value"] is None
    url, controls = _sync(app, "?model=deep", {"layer": "4"}, "drawn.value", drawn=picked)
    assert url["task"] == controls["task"] == picked


def test_a_link_s_unknown_model_is_kept_when_the_picker_empties_itself(app):
    """Dash's dropdown drops a value it does not offer (``?model=/etc/passwd``) and fires with None: the link used
    to become ``?model=`` and show the first model under a blank picker, the unknown name's message gone (on the
    training tab too). The link and the controls now stay as they are, and the page names the unknown model."""
    url, controls = _sync(app, "?model=%2Fetc%2Fpasswd", {}, "url.search")
    assert url == {"model": "/etc/passwd"} and controls["model"] == "/etc/passwd"
    picked = [None if name == "model" else getattr(ViewState(), name) for name in CONTROLS]
    inputs = ["?model=%2Fetc%2Fpasswd", *picked, 0, 0, 0, None, None]
    assert call_callback(app, "url.search...model.value", inputs, ["zero"], "model.value") == {}
    rendered = _render(app, "?model=%2Fetc%2Fpasswd", {})
    assert rendered["error"]["children"].startswith("unknown model '/etc/passwd'")


def test_a_link_s_unknown_tab_or_head_view_shows_the_graph_tab_with_its_message(app):
    """``tab=foo`` used to show neither tab (a blank page), ``heads=xyz`` the head average without a word."""
    _, controls = _sync(app, "?model=deep&tab=foo", {}, "url.search")
    assert controls["tab"] == "graph"
    rendered = _render(app, "?model=deep&tab=foo", {})
    assert rendered["error"]["children"] == "tab 'foo' is not one of graph, training, patching"
    rendered = _render(app, "?model=deep&heads=xyz", {})
    assert rendered["error"]["children"] == "heads 'xyz' is not one of average, all (the attention view)"
    assert call_callback(app, "training.children", ["?model=deep&tab=foo"], changed="url.search") == {}


def test_a_link_without_a_graph_layer_checks_the_layer_drawn(app):
    """``graph=`` draws the last layer (as ``layer=`` reads it); its radio used to have nothing checked."""
    _, controls = _sync(app, "?model=deep&graph=&layer=", {}, "url.search")
    assert (controls["graph"], controls["layer"]) == ("4", "4")
    rendered = _render(app, "?model=deep&graph=", {})
    assert rendered["graph-encoder"]["figure"]["layout"]["title"]["text"].startswith("encoder layer 4 ")


def test_a_link_carries_the_layer_only_once_the_user_picks_one(app):
    """The lens radio shows the last layer for a link without one; any other control then wrote that layer into
    the link (``layer=3`` after switching models) as if the user had picked it. Only a click on the radio does."""
    task = DEFAULT_TASK.replace("| bcd", "| cde")
    _, controls = _sync(app, "?model=deep", {}, "url.search")
    url, controls = _sync(app, "?model=deep", {**controls, "model": "shallow"}, "model.value")
    assert url == {"model": "shallow"} and controls["layer"] == "3"
    url, controls = _sync(app, "?model=shallow", {**controls, "task": task}, "task.value")
    assert url == {"model": "shallow", "task": task} and controls["layer"] == "3"
    _, controls = _sync(app, "?model=shallow&graph=", {}, "url.search")
    assert (controls["layer"], controls["graph"]) == ("3", "3")
    url, _ = _sync(app, "?model=shallow&graph=", {**controls, "ablate": "1.1"}, "ablate.value")
    assert url == {"model": "shallow", "graph": "", "ablate": "1.1"}
    url, _ = _sync(app, "?model=shallow", {**controls, "layer": "3"}, "layer.value")
    assert url["layer"] == "3"


def _pair(seed: int) -> tuple[str, str]:
    (pair,) = minimal_pairs("succ", "pred", 1, seed=seed, lengths=(3,))
    return str(pair.target.with_answer(None)), str(pair.source.with_answer(None))


def test_the_succ_pred_pair_goes_on_from_the_link_s_pair_after_a_reload(app):
    """The button's clicks start again at 0 when the page reloads: it used to draw the first pair again. The pair
    drawn is in the link (``pair=N``), and the next click draws the pair after it."""
    url, controls = _sync(app, "?model=deep", {}, "url.search")
    url, controls = _sync(app, "?model=deep", controls, "pair.n_clicks", pair_clicks=1)
    assert (url["task"], url["source"], url["patch"], url["pair"]) == (*_pair(1), "auto", "1")
    link = "?" + urlencode(url)
    reloaded, controls = _sync(app, link, {}, "url.search")
    assert reloaded == url and (controls["task"], controls["source"]) == _pair(1)
    url, controls = _sync(app, link, controls, "pair.n_clicks", pair_clicks=1)
    assert (url["task"], url["source"], url["pair"]) == (*_pair(2), "2")
    assert (controls["task"], controls["source"]) == _pair(2)


def test_an_error_is_shown_once_without_empty_plot_frames(app):
    """An empty task used to leave five empty plot frames with their axes on the page and show the message twice (in
    red and again in the summary box). The view (summary, table, figures) is hidden and keeps its figures, the
    message is shown once, and the next good view shows it again."""
    response = _render(app, "?model=deep&task=", {})
    assert response["error"]["children"].startswith("no task: type one")
    assert response["view"]["style"] == {"display": "none"}
    assert not {"summary", "changes", "legend"} & set(response), "the message once, in the error line"
    assert not [key for key in response if key.startswith("graph-")], "no empty figure sent"
    shown = _render(app, "?model=deep", {})
    assert shown["view"]["style"] == {} and shown["error"]["children"] == ""
    assert shown["summary"]["children"].startswith("task: ") and len(shown["graph-encoder"]["figure"]["data"]) == 1


def test_a_view_sends_only_the_figures_that_changed(app):
    """Every interaction re-sent all five figures (a lens-radio click 267 KB on copy-200). The page keeps a digest of
    each figure it shows; the render callback leaves out those that did not change: the decoder lens changes the
    decoder's attention and the answer, not the encoder's attention and hidden states."""
    first = _render(app, "?model=deep", {})
    assert [key for key in first if key.startswith("graph-")] == list(GRAPHS.values())
    shown = first["figures-shown"]["data"]
    lens = _render(app, "?model=deep&layer=2", shown)
    assert {key for key in lens if key.startswith("graph-")} == {"graph-topk", "graph-decoder", "graph-cross"}
    assert lens["summary"]["children"].endswith("(no intervention)")
    shown = lens["figures-shown"]["data"]
    graph = _render(app, "?model=deep&layer=2&graph=2", shown)
    assert {key for key in graph if key.startswith("graph-")} == {"graph-encoder", "graph-hidden"}
    assert graph["graph-encoder"]["figure"]["layout"]["title"]["text"].startswith("encoder layer 2 ")
    again = _render(app, "?model=deep&layer=2&graph=2", graph["figures-shown"]["data"])
    assert not [key for key in again if key.startswith("graph-")] and "figures-shown" not in again
    assert len(_render(app, "?model=deep&layer=2&graph=2", None)["figures-shown"]["data"]) == len(GRAPHS)
