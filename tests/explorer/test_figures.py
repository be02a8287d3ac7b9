"""The explorer's top-k panels: each panel's token labels have room beside the previous panel, at the figure's width."""

from __future__ import annotations

import pytest

from lsa_interp.explorer.compute import Prediction
from lsa_interp.explorer.figures import _BAR_PANEL_PX, _BAR_WIDTH_MIN, top_k_bars

GLYPH_PX, CLEAR_PX = 9, 10
"""A 12 px tick label's glyph is at most 9 px wide (EOS is about 25 px); 10 px more keep a panel's last x tick
label ("1") clear of the next panel's first ("0") and of its token labels."""


def _prediction(n_steps: int, longest: str) -> Prediction:
    ranked = ((longest, 0.9), *((letter, 0.02) for letter in "abcd"))
    return Prediction("a" * n_steps, (ranked,) * n_steps, (ranked,) * n_steps)


def _axis(layout: dict, kind: str, step: int) -> dict:
    return layout[f"{kind}axis{step + 1 if step else ''}"]


@pytest.mark.parametrize("longest", ["a", "EOS"])
@pytest.mark.parametrize("n_steps", [1, 2, 3, 6, 12])
def test_each_top_k_panel_leaves_its_token_labels_room(n_steps, longest):
    """With few steps the panels were 0.03 of the plot apart (15 px at 3 steps): the last step's "EOS" label ran
    into the previous panel, its x ticks "1" and "0" touched. The gap is now in pixels, as the longest label needs."""
    layout = top_k_bars(_prediction(n_steps, longest), "answer")["layout"]
    margin = layout["margin"]
    plot_px = layout["width"] - margin["l"] - margin["r"]
    need = GLYPH_PX * len(longest) + CLEAR_PX
    assert margin["l"] >= need and all(_axis(layout, "y", s)["automargin"] for s in range(n_steps))
    domains = [_axis(layout, "x", s)["domain"] for s in range(n_steps)]
    assert all((right[0] - left[1]) * plot_px >= need for left, right in zip(domains, domains[1:]))
    assert all((hi - lo) * plot_px >= 120 for lo, hi in domains) and domains[-1][1] == pytest.approx(1)


@pytest.mark.parametrize("longest", ["a", "EOS"])
@pytest.mark.parametrize("n_steps", [1, 2, 3, 6, 12])
def test_top_k_panels_are_a_fixed_width_apart_by_their_label_room(n_steps, longest):
    """In pixels: each gap between panels is the room left of the first panel (the left margin), the figure is
    `_BAR_WIDTH_MIN` wide at least and otherwise as wide as its panels of `_BAR_PANEL_PX`, their gaps and the
    right margin; panels are equally wide, `_BAR_PANEL_PX` once the figure is wider than its minimum."""
    layout = top_k_bars(_prediction(n_steps, longest), "answer")["layout"]
    left, right = layout["margin"]["l"], layout["margin"]["r"]
    plot_px = layout["width"] - left - right
    assert layout["width"] == max(_BAR_WIDTH_MIN, n_steps * (_BAR_PANEL_PX + left) + right)
    domains = [_axis(layout, "x", s)["domain"] for s in range(n_steps)]
    assert all((b[0] - a[1]) * plot_px == pytest.approx(left) for a, b in zip(domains, domains[1:]))
    widths = [(hi - lo) * plot_px for lo, hi in domains]
    assert widths == pytest.approx([widths[0]] * n_steps) and domains[0][0] == 0
    if layout["width"] > _BAR_WIDTH_MIN:
        assert widths[0] == pytest.approx(_BAR_PANEL_PX)


def test_each_step_is_a_panel_of_its_top_k_bars_with_the_clean_run_s_beside_them():
    """Bars bottom-up from the likeliest at the top, in the step's panel; the clean run's probabilities of the same
    tokens (from its full distribution) beside them while the clean run has that step; one legend entry each."""
    run = Prediction("ab", ((("a", 0.6), ("b", 0.3), ("EOS", 0.1)), (("b", 0.7), ("EOS", 0.2), ("c", 0.1))), ())
    clean_probs = (("a", 0.05), ("b", 0.15), ("c", 0.5), ("EOS", 0.3))
    clean = Prediction("c", ((("c", 0.5), ("EOS", 0.3), ("b", 0.15)),), (clean_probs,))
    figure = top_k_bars(run, "answer: top-3", clean)
    keys = ("type", "orientation", "y", "x", "xaxis", "yaxis", "name", "showlegend", "legendgroup")
    bar = {"type": "bar", "orientation": "h"}
    assert [{key: trace[key] for key in keys} for trace in figure["data"]] == [
        {**bar, "y": ["EOS", "b", "a"], "x": [0.1, 0.3, 0.6], "xaxis": "x", "yaxis": "y", "name": "this run",
         "showlegend": True, "legendgroup": "run"},
        {**bar, "y": ["EOS", "b", "a"], "x": [0.3, 0.15, 0.05], "xaxis": "x", "yaxis": "y", "name": "clean run",
         "showlegend": True, "legendgroup": "clean"},
        {**bar, "y": ["c", "EOS", "b"], "x": [0.1, 0.2, 0.7], "xaxis": "x2", "yaxis": "y2", "name": "this run",
         "showlegend": False, "legendgroup": "run"},
    ]  # fmt: skip
    layout = figure["layout"]
    assert layout["title"] == {"text": "answer: top-3"} and layout["barmode"] == "group"
    for step in range(2):
        assert _axis(layout, "x", step)["range"] == [0, 1] and _axis(layout, "y", step)["type"] == "category"
    notes = [(note["text"], note["xref"], note["yref"], note["x"]) for note in layout["annotations"]]
    centres = [sum(_axis(layout, "x", step)["domain"]) / 2 for step in range(2)]
    assert notes == [("step 1", "paper", "paper", centres[0]), ("step 2", "paper", "paper", centres[1])]


def test_a_run_without_steps_is_one_empty_panel():
    figure = top_k_bars(Prediction("", (), ()), "answer", Prediction("", (), ()))
    assert figure["data"] == [] and [note["text"] for note in figure["layout"]["annotations"]] == ["step 1"]
    assert figure["layout"]["width"] == _BAR_WIDTH_MIN and figure["layout"]["xaxis"]["range"] == [0, 1]
