"""The steering analysis: its summary, data and finding over the measured cells of the matrix."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from lsa_interp.analysis import steering
from lsa_interp.analysis.planted import PLANTED_HEAD, planted_model
from lsa_interp.analysis.prompts import WINDOW_LENGTHS
from lsa_interp.data.task import STANDARD_ALPHABET
from lsa_interp.data.transformations import PAPER


@pytest.fixture(scope="module")
def planted():
    return planted_model()


def test_the_analysis_summarises_the_measured_cells_only(planted, monkeypatch):
    rates = iter([0.25, 0.75])
    fake = lambda model, pairs, heads, engine: SimpleNamespace(flip_rate=next(rates), clean_outcomes={"target": 0.5})
    monkeypatch.setattr(steering, "patch_pairs", fake)
    result = steering.steering_analysis(
        planted, "m", PLANTED_HEAD, rules=("succ", "pred", "sort"), n_pairs=3, lengths=(4, 5)
    )
    assert result.name == "steering" and result.model == "m"
    assert result.summary == {
        "head": "2.3",
        "cells_measured": 2,
        "cells_missing": 4,
        "mean_flip_rate": 0.5,
        "pairs_per_cell": 3,
        "alphabets": "standard",
        "window_lengths": "4,5",
    }
    data = result.data
    assert data["rules"] == ["succ", "pred", "sort"] and data["n_pairs"] == {("succ", "pred"): 3, ("pred", "succ"): 3}
    assert (data["flip_rate"][0, 1].item(), data["flip_rate"][1, 0].item()) == (0.25, 0.75)
    assert data["clean_accuracy"][0, 1].item() == 0.5 and torch.isnan(data["clean_accuracy"][0, 2])
    assert set(data["missing"]) == {("succ", "sort"), ("pred", "sort"), ("sort", "succ"), ("sort", "pred")}
    (finding,) = result.findings
    assert finding.ours == "mean flip rate 0.50 over 2 rule pairs (head 2.3)" and finding.holds is None
    (figure,) = result.figures.values()
    assert list(result.figures) == ["steering matrix of head 2.3"] and figure.data[0].z[1][0] == 0.75


def test_without_a_measured_cell_the_mean_is_nan_and_given_alphabets_are_listed(planted):
    result = steering.steering_analysis(
        planted, "m", PLANTED_HEAD, rules=("sort", "pred"), n_pairs=2, alphabets=[STANDARD_ALPHABET, STANDARD_ALPHABET]
    )
    assert result.summary["cells_measured"] == 0 and math.isnan(result.summary["mean_flip_rate"])
    assert result.summary["alphabets"] == f"{STANDARD_ALPHABET},{STANDARD_ALPHABET}"


def test_a_cell_takes_every_pair_there_is_up_to_n_and_the_given_engine(planted, monkeypatch):
    """succ/pred have 462 three-letter minimal pairs: asked for 1,000, the cell takes those 462."""
    seen = []
    fake = lambda model, pairs, heads, engine: (
        seen.append((len(pairs), engine)) or SimpleNamespace(flip_rate=0.0, clean_outcomes={"target": 1.0})
    )
    monkeypatch.setattr(steering, "patch_pairs", fake)
    matrix = steering.steering_matrix(planted, rules=("succ", "pred"), n_pairs=1000, lengths=(3,), engine="nnsight")
    assert seen == [(462, "nnsight")] * 2 and matrix.n_pairs[("succ", "pred")] == 462
    assert matrix.heads == (PLANTED_HEAD,)  # "auto": the detected matching head


def test_the_defaults_draw_50_pairs_with_seed_0(planted, monkeypatch):
    calls, real = [], steering.minimal_pairs
    monkeypatch.setattr(steering, "minimal_pairs", lambda *a, **k: calls.append((a, k)) or real(*a, **k))
    monkeypatch.setattr(
        steering, "patch_pairs", lambda *a: SimpleNamespace(flip_rate=0.0, clean_outcomes={"target": 1.0})
    )
    steering.steering_matrix(planted, rules=("succ", "pred"))
    assert [(a[2], k["seed"], k.get("at_most", False)) for a, k in calls] == [(1, 0, False), (50, 0, True)] * 2


def test_the_analysis_passes_its_settings_on_and_states_the_paper_s_claim(planted, monkeypatch):
    calls, real = [], steering.steering_matrix
    monkeypatch.setattr(
        steering, "steering_matrix", lambda *a: calls.append(a[1:]) or real(planted, a[1], ("sort", "pred"))
    )
    result = steering.steering_analysis(planted, "m")
    assert calls == [("auto", PAPER, 50, 0, "hooks", "standard", WINDOW_LENGTHS)]
    steering.steering_analysis(planted, "m", "2.3", ("a",), 7, 9, "nnsight", "permuted", (4, 5))
    assert calls[1] == ("2.3", ("a",), 7, 9, "nnsight", "permuted", (4, 5))
    (finding,) = result.findings
    assert finding.name == "steering by one head"
    assert finding.paper == "head 2.7's pattern from successor prompts turns predecessor answers into successor answers"
