"""The activation-patching tab: the view's task and source as one pair, the planted circuit found where it is, and
one-line messages where there is nothing to trace."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlencode

import pytest
import torch

from lsa_interp.analysis.activation_patching import HEAD_POSITIONS, HEADS, RESID, ActivationPatching, PatchingGrid
from lsa_interp.analysis.planted import PLANTED_HEAD, READOUT_HEAD, planted_model
from lsa_interp.data.task import Task
from lsa_interp.explorer import patching_tab
from lsa_interp.explorer.app import create_app
from lsa_interp.explorer.catalogue import ModelCatalogue
from lsa_interp.explorer.patching_tab import PATCHING_SITES, activation_figures, leading_head, patching_pair, path_map
from lsa_interp.model.heads import Head
from tests.explorer.dash_calls import call_callback

torch.set_num_threads(1)
PRED = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd")
SUCC = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd")
OUT1 = 31


@pytest.fixture(scope="module")
def planted():
    return planted_model()


def test_the_pair_carries_the_models_own_answers(planted):
    pair = patching_pair(planted, PRED, SUCC)  # the planted model answers an example's first output letter
    assert (pair.source.answer, pair.target.answer) == ("g", "f") and pair.target.examples == PRED.examples


def test_tasks_the_model_answers_alike_or_of_another_layout_are_refused(planted):
    same_first = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhj | bcd")
    with pytest.raises(ValueError, match="answers both the task and the source task 'f': there is no difference"):
        patching_pair(planted, PRED, same_first)
    with pytest.raises(ValueError, match="does not align token for token"):
        patching_pair(planted, PRED, Task.parse("abcdefghijklmnopqrstuvwxyz | ghij > ghik | bcd"))


@pytest.fixture(scope="module")
def figures(planted):
    figures, leading = activation_figures(planted, PRED, SUCC)
    return figures | path_map(planted, PRED, SUCC, "", leading)


def test_each_head_at_each_position_shows_the_planted_head_at_the_first_output_letter(figures):
    assert list(figures) == [*PATCHING_SITES, "paths from 2.3"] and list(PATCHING_SITES) == [
        HEAD_POSITIONS,
        RESID,
        HEADS,
    ]
    grid = figures[HEAD_POSITIONS].data[0]
    row = PLANTED_HEAD.layer * 4 + PLANTED_HEAD.head
    assert grid.y[row] == "head 2.3" and grid.x[OUT1] == "out1·31" and grid.z[row][OUT1] == pytest.approx(1, abs=1e-3)
    assert sum(abs(value) > 1e-3 for line in grid.z for value in line) == 2  # and the readout head at >
    assert "answers" not in grid.hovertemplate  # by default the tab reads the logit difference only


def test_counted_answers_show_the_planted_heads_cell_taking_the_source_answer(planted):
    """With answers counted, the planted head's output at the first example-output letter alone turns the answer
    into the source's (its one letter the source's token); its output at the letter before leaves it the task's."""
    figures, leading = activation_figures(planted, PRED, SUCC, answers=True)
    grid = figures[HEAD_POSITIONS].data[0]
    row = PLANTED_HEAD.layer * 4 + PLANTED_HEAD.head
    assert "answers: source's" in grid.hovertemplate
    assert grid.customdata[row][OUT1][1:] == [1.0, 0.0, "the source's token where the answers differ: #1 100%"]
    assert grid.customdata[row][OUT1 - 1][1:] == [0.0, 0.0, "the source's token where the answers differ: #1 0%"]
    paths = path_map(planted, PRED, SUCC, "", leading, answers=True)["paths from 2.3"].data[0]
    v_row = paths.y.index("encoder 3 self-attention: v")
    assert paths.customdata[v_row][READOUT_HEAD.head][1] == 1.0 and paths.customdata[0][0][1] == 0.0


@pytest.fixture(scope="module")
def app(planted):
    return create_app(ModelCatalogue([], {"planted": planted}))


def _tab(app, **fields) -> list | dict:
    search = "?" + urlencode({"model": "planted", "tab": "patching", **fields})
    return call_callback(app, "patching.children", [search], changed="url.search")


def test_the_tab_draws_a_graph_per_site_for_the_links_task_and_source(app):
    children = _tab(app, task=str(PRED), source=str(SUCC))["patching"]["children"]
    assert children[0]["props"]["children"] == "planted: activation patching"
    graphs = [child["props"] for child in children if child["type"] == "Graph"]
    assert [g["id"] for g in graphs] == ["patching-0", "patching-1", "patching-2", "patching-3"]
    assert graphs[0]["figure"]["data"][0]["y"][PLANTED_HEAD.layer * 4 + PLANTED_HEAD.head] == "head 2.3"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"task": str(PRED), "source": str(PRED)}, "answers both the task and the source task 'f'"),
        ({"task": "abc > abd"}, "a task needs 'alphabet | example_in > example_out | query'"),
        ({"model": "nowhere"}, "unknown model 'nowhere'; this explorer offers: planted"),
        ({"answers": "yes"}, "answers 'yes' is not one of off, count (the patched runs' answers)"),
    ],
)
def test_the_tab_names_what_it_cannot_trace_in_one_line(app, fields, message):
    child = _tab(app, **fields)["patching"]["children"]
    assert child["props"]["id"] == "patching-error" and message in child["props"]["children"]


def test_a_link_that_counts_answers_says_so_and_shows_them_on_hover(app):
    counted = _tab(app, task=str(PRED), source=str(SUCC), answers="count")["patching"]["children"]
    intro = counted[1]["props"]["children"]
    assert "Hovering a cell also shows the patched run's greedy answer" in intro
    graphs = [child["props"]["figure"] for child in counted if child["type"] == "Graph"]
    assert len(graphs) == 4 and all("answers: source's" in g["data"][0]["hovertemplate"] for g in graphs)
    plain = _tab(app, task=str(PRED), source=str(SUCC))["patching"]["children"]
    assert "Hovering" not in plain[1]["props"]["children"]
    assert all("answers" not in child["props"]["figure"]["data"][0]["hovertemplate"] for child in plain[2:])


def test_the_links_sender_replaces_the_leading_heads_paths(app):
    children = _tab(app, task=str(PRED), source=str(SUCC), sender="1.2")["patching"]["children"]
    graphs = [child["props"]["figure"] for child in children if child["type"] == "Graph"]
    assert len(graphs) == 4 and graphs[-1]["layout"]["title"]["text"].startswith("paths from 1.2 (chosen)")
    assert graphs[-1]["data"][0]["y"][0] == "encoder 2 self-attention: q"  # layer 2 reads layer 1's head
    readout = [child["props"]["figure"] for child in _tab(app, sender=" 3.1 ")["patching"]["children"][-1:]]
    assert readout[0]["data"][0]["y"] == [
        "decoder 1 cross-attention: k",
        "decoder 1 cross-attention: v",
        "decoder 1 cross-attention: k,v",
    ]


@pytest.mark.parametrize(
    ("sender", "message"),
    [
        ("9.1", "no head '9.1' in this model"),
        ("cross:1.1", "sender 'cross:1.1': give encoder heads (e.g. 1.3)"),
        ("2.3@x", "bad sender '2.3@x': after '@' give 0-based positions"),
        ("2.3@99", "sender 2.3@99: its output has 39 positions (0..38) in these prompts"),
    ],
)
def test_a_sender_that_names_no_encoder_head_is_one_line(app, sender, message):
    child = _tab(app, sender=sender)["patching"]["children"]
    assert child["props"]["id"] == "patching-error" and message in child["props"]["children"]


def test_other_tabs_leave_the_patching_tab_alone_and_it_leaves_the_graph(app):
    assert call_callback(app, "patching.children", ["?model=planted&tab=graph"], changed="url.search") == {}
    assert call_callback(app, "error.children", ["?model=planted&tab=patching"], [{}], changed="url.search") == {}


def test_the_paths_map_follows_the_planted_head_into_the_readouts_values(figures):
    title = figures["paths from 2.3"].layout.title.text
    assert title == (
        "paths from 2.3 (the encoder head that carries the difference first) into each later head's inputs; into the "
        "memory: 0.00"
    )
    grid = figures["paths from 2.3"].data[0]
    assert (
        "answers" not in grid.hovertemplate
        and figures[HEADS].layout.title.text == "heads: patched from the source task"
    )
    v_row = grid.y.index("encoder 3 self-attention: v")
    assert grid.z[v_row][READOUT_HEAD.head] == pytest.approx(1, abs=1e-3) and grid.x[-1] == "all heads"
    lit = [(r, c) for r, line in enumerate(grid.z) for c, value in enumerate(line) if abs(value) > 1e-3]
    together = grid.y.index("encoder 3 self-attention: q,k,v")
    assert lit == [(v_row, 0), (v_row, 4), (together, 0), (together, 4)]


def test_a_memory_share_a_hair_below_zero_is_titled_without_a_minus(planted, monkeypatch):
    real = patching_tab.paths_from

    def hair_below(*args, **kwargs):
        sweep = real(*args, **kwargs)
        return dataclasses.replace(sweep, memory=dataclasses.replace(sweep.memory, normalized=-0.001))

    monkeypatch.setattr(patching_tab, "paths_from", hair_below)
    title = path_map(planted, PRED, SUCC, "", PLANTED_HEAD)["paths from 2.3"].layout.title.text
    assert title.endswith("; into the memory: 0.00")


def _heads_result(values: list[list[float]]) -> ActivationPatching:
    rows = ["encoder.0.attn.hook_z", "encoder.1.attn.hook_z", "decoder.0.cross_attn.hook_z"]
    diff = torch.tensor(values)
    grid = PatchingGrid(
        HEADS, tuple(rows), ("1", "2", "3"), ("head 1", "head 2"), diff, diff * torch.nan, diff * torch.nan
    )
    return ActivationPatching("succ", "pred", 1, (), 1.0, 0.0, {HEADS: grid})


@pytest.mark.parametrize(
    ("values", "head"),
    [
        ([[0.1, 0.2], [0.6, 0.9], [1.0, 0.0]], Head("encoder", 1, 0)),
        ([[0.1, 0.5], [0.6, 0.9], [1.0, 0.0]], Head("encoder", 0, 1)),
        ([[0.1, 0.2], [0.3, 0.1], [1.0, 0.0]], Head("encoder", 1, 0)),
        ([[-0.1, -0.2], [-0.3, -0.4], [1.0, 0.0]], Head("encoder", 0, 0)),
    ],
)
def test_the_leading_head_is_the_earliest_encoder_head_moving_half_else_the_largest(values, head):
    assert leading_head(_heads_result(values)) == head


def test_a_sender_at_some_positions_sends_from_there_only(planted):
    """The planted head writes at the first example-output letter: from there its path into the readout's values is
    whole, from the letter after it nothing."""
    leading = Head("encoder", 0, 0)
    for place, expected in ((OUT1, 1), (OUT1 + 1, 0)):
        grid = path_map(planted, PRED, SUCC, f"2.3@{place}", leading)[f"paths from 2.3@{place}"].data[0]
        v_row = grid.y.index("encoder 3 self-attention: v")
        assert grid.z[v_row][READOUT_HEAD.head] == pytest.approx(expected, abs=1e-3)
