"""The explorer's top-k panels: each panel's token labels have room beside the previous panel, at the figure's width."""

from __future__ import annotations

import pytest

from lsa_interp.explorer.compute import Prediction
from lsa_interp.explorer.figures import top_k_bars

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
