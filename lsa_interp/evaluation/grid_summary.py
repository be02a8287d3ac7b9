"""Means over replicate runs with bootstrap 95% intervals, beside the paper's: Table 1, the batching table,
accuracy by number of training alphabets (Figure 4), the few-shot presets and the matching head's occurrence;
and the precision check.

Intervals are percentile bootstrap intervals of the mean over run-level accuracies (scipy.stats.bootstrap,
10,000 resamples, as the paper did); a condition with one run has none (NaN). Only runs that trained all
their planned epochs count unless ``include_partial`` is set, and each seed once (`counted_runs`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from lsa_interp.evaluation.paper_tables import (
    CELLS,
    FIGURE4_BATCHING,
    PAPER_ALPHABETS,
    PAPER_BATCHING,
    PAPER_FEW_SHOT,
    PAPER_MATCHING_OCCURRENCE,
    PAPER_TABLE1,
    TABLE1_BATCHING,
)

RESAMPLES = 10_000
RECIPE_PRECISION = "fp32"
"""The recipe's precision: where a seed was trained in several precisions, its run in this one counts."""


def bootstrap_interval(values: np.ndarray | list[float], seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` and its percentile bootstrap 95% interval. NaN values are
    dropped; one value gives (value, NaN, NaN), none gives three NaNs; identical values give a zero-width
    interval (scipy's percentiles of identical means)."""
    data = np.asarray(values, dtype=float)
    data = data[~np.isnan(data)]
    if data.size == 0:
        return (float("nan"),) * 3
    mean = float(data.mean())
    if data.size == 1:
        return mean, float("nan"), float("nan")
    result = stats.bootstrap(
        (data,), np.mean, n_resamples=RESAMPLES, confidence_level=0.95, method="percentile", random_state=seed
    )
    return mean, float(result.confidence_interval.low), float(result.confidence_interval.high)


def format_interval(
    mean: float | None, low: float | None = math.nan, high: float | None = math.nan, missing: str = "-"
) -> str:
    """``mean [low, high]`` with one decimal; the mean alone where there is no interval; ``missing`` without a mean."""
    if mean is None or math.isnan(mean):
        return missing
    if low is None or math.isnan(low):
        return f"{mean:.1f}"
    return f"{mean:.1f} [{low:.1f}, {high:.1f}]"


def complete_runs(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """The runs that trained all their planned epochs (every run with ``include_partial``)."""
    if include_partial or frame.empty:
        return frame
    return frame[frame["complete"].astype(bool)]


def counted_runs(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """The runs that count in the means: complete ones only, unless ``include_partial``, and one run per preset,
    batching method and seed, so that no seed counts twice. Of a seed's runs the one closest to the recipe counts:
    in the recipe's fp32 (the precision check trains a seed in several), then with the reference's batches (not
    length-bucketed), then on our hook-point model (not the plain `nn.Transformer`), then the first; columns a
    table lacks do not rank (a table without ``precision`` keeps every run)."""
    runs = complete_runs(frame, include_partial)
    if runs.empty or "precision" not in runs:
        return runs
    return _closest_to_recipe(runs, ["preset", "batching", "seed"])


def _closest_to_recipe(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One run per value of ``keys``: the first by the ranking of `counted_runs` (fp32 only where ``keys`` leaves
    the precision free)."""
    ranks = {}
    if "precision" not in keys:
        ranks["_not_fp32"] = runs["precision"] != RECIPE_PRECISION
    if "length_bucketing" in runs:
        ranks["_bucketed"] = runs["length_bucketing"].astype(bool)
    if "architecture" in runs:
        ranks["_other_model"] = runs["architecture"] != "hooked"
    first = runs.assign(**ranks).sort_values(list(ranks), kind="stable") if ranks else runs
    return first.drop_duplicates(keys).drop(columns=list(ranks)).sort_index()


def precision_summary(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """The precision check: per preset and batching method trained in more than one precision, per precision its
    runs (``n``), the ``mean`` and sample standard deviation ``sd`` of seen-transformation seen-alphabet accuracy,
    and, beside fp32, the ``difference`` of the means and ``within_spread``: whether that difference is smaller
    than the larger of the two standard deviations (then the faster precision may train the rest of a grid;
    None where neither has two runs). Each seed counts once per precision (ranked as in `counted_runs`), so the
    spread is between seeds."""
    columns = ["preset", "batching", "precision", "n", "mean", "sd", "difference", "within_spread"]
    runs, rows = complete_runs(frame, include_partial), []
    if runs.empty or "precision" not in runs:
        return pd.DataFrame(columns=columns)
    runs = _closest_to_recipe(runs, ["preset", "batching", "precision", "seed"])
    for (preset, batching), group in runs.groupby(["preset", "batching"]):
        if group["precision"].nunique() < 2:
            continue
        stats_of = {
            precision: (len(values), float(values.mean()), float(values.std(ddof=1)))
            for precision, values in group.groupby("precision")[CELLS[0]]
        }
        reference = stats_of.get(RECIPE_PRECISION)
        for precision, (n, mean, sd) in stats_of.items():
            difference, within = math.nan, None
            if reference is not None and precision != RECIPE_PRECISION:
                difference = mean - reference[1]
                spreads = [value for value in (sd, reference[2]) if not math.isnan(value)]
                within = bool(abs(difference) < max(spreads)) if spreads else None
            rows.append([preset, batching, precision, n, mean, sd, difference, within])
    return pd.DataFrame(rows, columns=columns)


def summarize(frame: pd.DataFrame, by: list[str], columns: tuple[str, ...] = CELLS) -> pd.DataFrame:
    """Per group of ``by``: ``n`` runs and, per column, ``<column>`` (mean), ``<column>_low``, ``<column>_high``."""
    rows = []
    for key, group in frame.groupby(by):
        row = dict(zip(by, key))
        row["n"] = len(group)
        for column in columns:
            row[column], row[f"{column}_low"], row[f"{column}_high"] = bootstrap_interval(group[column].to_numpy())
        rows.append(row)
    return pd.DataFrame(rows, columns=[*by, "n", *[f"{c}{s}" for c in columns for s in ("", "_low", "_high")]])


def table1_summary(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """Table 1: per preset of the paper's Table 1, the runs of the batching methods the paper pooled for it
    (`TABLE1_BATCHING`: all four for the 20-alphabet presets, alphabet and random for copy-200), with
    ``paper_<cell>`` columns."""
    runs = counted_runs(frame, include_partial)
    pooled = [batching in TABLE1_BATCHING.get(preset, ()) for preset, batching in zip(runs["preset"], runs["batching"])]
    runs = runs[np.array(pooled, dtype=bool)]
    summary = summarize(runs, ["preset"])
    for i, cell in enumerate(CELLS):
        summary[f"paper_{cell}"] = [PAPER_TABLE1[preset][i] for preset in summary["preset"]]
    return summary


def batching_summary(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """The appendix's batching table: per (preset, batching) it lists, with ``paper_<cell>`` and
    ``paper_<cell>_low/_high`` columns (NaN where the paper has no such condition)."""
    runs = counted_runs(frame, include_partial)
    runs = runs[np.array([(p, b) in PAPER_BATCHING for p, b in zip(runs["preset"], runs["batching"])], dtype=bool)]
    summary = summarize(runs, ["preset", "batching"])
    for i, cell in enumerate(CELLS):
        paper = [PAPER_BATCHING[(p, b)][i] for p, b in zip(summary["preset"], summary["batching"])]
        for j, suffix in enumerate(("", "_low", "_high")):
            summary[f"paper_{cell}{suffix}"] = [interval[j] for interval in paper]
    return summary


def alphabets_summary(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """Figure 4: one-shot copy presets by number of training alphabets and batching, with the paper's means."""
    runs = counted_runs(frame, include_partial)
    mask = runs["copy"].astype(bool) & (runs["n_shots"] == 1) & runs["n_alphabets"].isin(list(PAPER_ALPHABETS))
    summary = summarize(runs[mask & runs["batching"].isin(FIGURE4_BATCHING)], ["n_alphabets", "batching"])
    for i, cell in enumerate(CELLS):
        summary[f"paper_{cell}"] = [
            PAPER_ALPHABETS[int(n)][b][i] for n, b in zip(summary["n_alphabets"], summary["batching"])
        ]
    return summary


def few_shot_summary(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """Copy-20 with 1-5 examples, alphabet batching: overall val accuracy (copy rows included) beside the paper's."""
    runs = counted_runs(frame, include_partial)
    mask = (runs["n_alphabets"] == 20) & runs["copy"].astype(bool) & (runs["batching"] == "alphabet")
    summary = summarize(runs[mask], ["n_shots"], columns=("overall_seen_alphabets",))
    summary["paper_overall_seen_alphabets"] = [PAPER_FEW_SHOT[int(k)] for k in summary["n_shots"]]
    return summary


def occurrence_summary(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """Matching-head occurrence (Appendix B): per preset of the paper's occurrence table, per batching method and
    over all of them (``"all"``), the counted runs with a matching-head analysis (``n``), how many have a
    matching head (``with_head``), and the paper's counts (``paper_with_head`` of ``paper_n``; NaN where the
    paper gives none)."""
    columns = ["preset", "batching", "n", "with_head", "paper_with_head", "paper_n"]
    runs = counted_runs(frame, include_partial)
    if runs.empty or "matching_head" not in runs:
        return pd.DataFrame(columns=columns)
    runs = runs[runs["preset"].isin(list(PAPER_MATCHING_OCCURRENCE)) & runs["matching_head"].notna()]
    rows = []
    for preset, group in runs.groupby("preset"):
        for batching, part in [*group.groupby("batching"), ("all", group)]:
            paper = PAPER_MATCHING_OCCURRENCE[preset].get(batching, (math.nan, math.nan))
            rows.append([preset, batching, len(part), int(part["matching_head"].astype(bool).sum()), *paper])
    return pd.DataFrame(rows, columns=columns)
