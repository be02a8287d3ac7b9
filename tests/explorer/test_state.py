"""The view state in the URL: round trips, parsing of heads, layers and cells, box selections, actions."""

from __future__ import annotations

import pytest

from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.explorer.compute import CellBox
from lsa_interp.explorer.state import (
    ViewState,
    format_cells,
    interventions_of,
    parse_answers,
    parse_cells,
    parse_head_view,
    parse_heads,
    parse_layer,
    parse_pair,
    parse_tab,
    selection_box,
    with_minimal_pair,
    with_next_pair,
    with_selection,
)
from lsa_interp.model import ModelConfig
from lsa_interp.model.heads import Head

CFG = ModelConfig()


def test_query_round_trip_keeps_every_field():
    state = ViewState(
        model="runs/x#2", task="abcdefghijklmnopqrstuvwxyz | ijk > hjk | bcd", layer="2", graph="3", heads="all",
        cells="3:35-37:0-127:zero", ablate="2.7+dec:1.3", patch="auto", tab="training", answers="count",
    )  # fmt: skip
    query = state.to_query()
    assert query.startswith("?model=") and "%3E" in query and " " not in query
    assert ViewState.from_query(query) == state
    assert ViewState.from_query("?model=a&unknown=1&task=") == ViewState(model="a", task="")
    assert ViewState.from_query(None) == ViewState()


def test_reset_clears_only_interventions():
    state = ViewState(model="m", layer="1", cells="1:0-0:0-0:zero", ablate="1.1", patch="2.7")
    assert state.reset() == ViewState(model="m", layer="1")


def test_cells_parse_and_format():
    boxes = parse_cells("3:37-35:0-127:zero, 1:2-2:5-9:mean")
    assert boxes == (CellBox(2, (35, 37), (0, 127), "zero"), CellBox(0, (2, 2), (5, 9), "mean"))
    assert parse_cells(format_cells(boxes)) == boxes
    for bad in ("3:35-37:0-127", "3:a-b:0-1:zero", "3:1-2:0-1:half", "３:1-2:0-1:zero", "3:1_0-12:0-1:zero"):
        with pytest.raises(ValueError, match="bad cell box"):
            parse_cells(bad)


def test_layers_are_one_based():
    assert parse_layer("", 3) == 2 and parse_layer("1", 3) == 0
    for bad in ("0", "4", "x"):
        with pytest.raises(ValueError, match=r"not one of 1..3"):
            parse_layer(bad, 3)


def test_a_link_s_layer_and_pair_refuse_the_same_non_ascii_digits():
    """``?layer=%EF%BC%92`` (a full-width "２") showed layer 2, while the same digit as ``pair`` was refused: both are
    refused now, with the message of any other bad layer."""
    assert ViewState.from_query("?layer=%EF%BC%92").layer == "\uff12"
    for digit in ("\uff12", "\u0662", "\u00b2"):  # full-width 2, Arabic-Indic 2, superscript 2
        with pytest.raises(ValueError, match=rf"^layer {digit!r} is not one of 1\.\.3$"):
            parse_layer(digit, 3)
        with pytest.raises(ValueError, match=rf"^pair {digit!r} is not a pair number"):
            parse_pair(digit)
    assert parse_layer(" 2 ", 3) == 1


def test_interventions_of_state():
    ivs = interventions_of(ViewState(layer="2", ablate="2.7+cross:3.1", patch="1.3"), CFG)
    assert ivs.lens_layer == 1
    assert ivs.ablated_heads == (Head("encoder", 1, 6), Head("decoder", 2, 0, "cross_attn"))
    assert ivs.patched_heads == (Head("encoder", 0, 2),) and ivs.source is not None
    assert interventions_of(ViewState(patch="auto"), CFG, (Head("encoder", 1, 2),)).patched_heads[0].label == "2.3"
    with pytest.raises(ValueError, match="no head '4.1'"):
        interventions_of(ViewState(ablate="4.1"), CFG)
    with pytest.raises(ValueError, match="matching heads"):
        interventions_of(ViewState(patch="auto"), CFG, ())
    assert interventions_of(ViewState(), CFG).source is None


def test_box_selection_becomes_cells():
    selected = {"range": {"x": [10.4, 2.6], "y": [35.2, 37.9]}, "points": []}
    assert selection_box(selected, 1, "mean", 39, 128) == CellBox(1, (35, 38), (3, 10), "mean")
    assert selection_box({"range": {"x": [-5, 500], "y": [-1, 99]}}, 0, "zero", 39, 128).dims == (0, 127)
    assert selection_box(None, 0, "zero", 39, 128) is None and selection_box({"points": []}, 0, "zero", 39, 128) is None
    state = with_selection(ViewState(graph="2", cells="1:0-0:0-0:zero"), selected, "zero", CFG)
    assert state.cells == "1:0-0:0-0:zero,2:35-38:3-10:zero"


def test_minimal_pair_action_sets_an_aligned_pair():
    state = with_minimal_pair(ViewState(), seed=3)
    assert state.patch == "auto" and "|" in state.source and state.task != state.source
    assert state.task.split("|")[-1] == state.source.split("|")[-1]  # same query


def test_a_query_names_the_model_always_and_other_fields_only_when_changed():
    assert ViewState().to_query() == "?model="
    assert ViewState(model="m", layer="1", tab="training").to_query() == "?model=m&layer=1&tab=training"


def test_the_last_layer_is_allowed():
    assert parse_layer("3", 3) == 2 and parse_layer(" ", 3) == 2


def test_box_selection_edges():
    box = selection_box({"range": {"x": [5.2, 5.4], "y": [-3, 0.3]}}, 0, "zero", 39, 128)
    assert box == CellBox(0, (0, 0), (5, 5), "zero"), "one dimension and the first position"
    assert selection_box({"range": {"x": [0, 1], "y": [30, 99]}}, 0, "zero", 39, 128).positions == (30, 38)
    assert selection_box({"range": {"x": [200, 300], "y": [1, 2]}}, 0, "zero", 39, 128) is None, "right of the map"
    assert selection_box({"range": {"x": [1, 2], "y": [50, 60]}}, 0, "zero", 39, 128) is None, "below the map"


def test_the_state_s_cells_become_interventions():
    ivs = interventions_of(ViewState(cells="1:0-2:3-4:mean"), CFG)
    assert ivs.cells == (CellBox(0, (0, 2), (3, 4), "mean"),) and not ivs.patched_heads


def test_the_minimal_pair_is_the_seed_s_first_three_letter_pair():
    for seed in (3, 4):
        (pair,) = minimal_pairs("succ", "pred", 1, seed=seed, lengths=(3,))
        state = with_minimal_pair(ViewState(), seed=seed)
        assert (state.task, state.source) == (str(pair.target.with_answer(None)), str(pair.source.with_answer(None)))
    assert with_minimal_pair(ViewState(), seed=3).task != with_minimal_pair(ViewState(), seed=4).task


def test_heads_typed_into_a_link_with_a_plus_are_read_as_joined():
    """A ``+`` typed into a URL reads as a space: ``ablate=2.7+dec:1.3`` names both heads, as the app's own
    links (``%2B``) do."""
    typed = ViewState.from_query("?model=m&ablate=2.7+dec:1.3").ablate
    assert typed == "2.7 dec:1.3"
    assert parse_heads(typed, ModelConfig()) == parse_heads("2.7+dec:1.3", ModelConfig())
    assert [h.label for h in parse_heads(typed, ModelConfig())] == ["2.7", "dec:1.3"]


def test_cell_boxes_may_be_typed_with_spaces_around_their_parts():
    assert parse_cells(" 3: 35-37 : 0 - 127 : zero ") == (CellBox(2, (35, 37), (0, 127), "zero"),)


def test_a_bad_source_task_is_named_as_the_source():
    """The message used to be Task.parse's alone, as if the task shown were wrong."""
    with pytest.raises(ValueError, match=r"^source task: a task needs 'alphabet"):
        interventions_of(ViewState(patch="1.3", source="zzz"), CFG)
    assert interventions_of(ViewState(source="zzz"), CFG).source is None  # read only when patching


def test_the_head_view_and_the_tab_are_one_of_theirs():
    assert [parse_head_view(v) for v in ("average", "all")] == ["average", "all"]
    assert [parse_tab(v) for v in ("graph", "training")] == ["graph", "training"]
    for bad in ("xyz", "", "All"):
        with pytest.raises(ValueError, match=rf"^heads {bad!r} is not one of average, all"):
            parse_head_view(bad)
        with pytest.raises(ValueError, match=rf"^tab {bad!r} is not one of graph, training, patching$"):
            parse_tab(bad)


def test_the_patched_answers_are_counted_or_not_and_nothing_else():
    assert [parse_answers(v) for v in ("off", "count")] == [False, True]
    assert ViewState().answers == "off" and "answers" not in ViewState(model="m").to_query()
    for bad in ("", "on", "Count"):
        with pytest.raises(
            ValueError, match=rf"^answers {bad!r} is not one of off, count \(the patched runs' answers\)$"
        ):
            parse_answers(bad)


def test_cell_modes_are_read_in_any_case_and_an_unknown_one_is_named_with_the_allowed_ones():
    """``ZERO`` or ``Mean`` used to be refused as a malformed box."""
    assert parse_cells("3:35-37:0-127:ZERO, 1:2-2:5-9:Mean") == (
        CellBox(2, (35, 37), (0, 127), "zero"), CellBox(0, (2, 2), (5, 9), "mean"),
    )  # fmt: skip
    assert interventions_of(ViewState(cells="1:0-2:3-4:MEAN"), CFG).cells == (CellBox(0, (0, 2), (3, 4), "mean"),)
    with pytest.raises(
        ValueError, match=r"^bad cell box '3:1-2:0-1:Half': unknown mode 'Half'; choose one of zero, mean$"
    ):
        parse_cells("3:1-2:0-1:Half")


def test_the_pair_drawn_is_in_the_link():
    state = with_minimal_pair(ViewState(model="m"), seed=2)
    assert state.pair == "2" and ViewState.from_query(state.to_query()) == state
    assert [parse_pair(text) for text in ("", " ", "0", "7")] == [0, 0, 0, 7]
    for bad in ("x", "-1", "1.5", "\u00b2"):
        with pytest.raises(ValueError, match=rf"^pair {bad!r} is not a pair number \(1, 2, \.\.\.\)$"):
            parse_pair(bad)


def test_the_pair_button_goes_on_from_the_link_s_pair_and_mends_a_bad_one():
    assert with_next_pair(ViewState(pair="4")) == with_minimal_pair(ViewState(), seed=5)
    for start in ("", "x", "\u00b2"):
        assert with_next_pair(ViewState(pair=start)) == with_minimal_pair(ViewState(), seed=1)
