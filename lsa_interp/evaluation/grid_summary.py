"""Means over replicate runs with bootstrap 95% intervals, beside the paper's: Table 1, the batching table,
accuracy by number of training alphabets (Figure 3), the few-shot presets and the matching head's occurrence;
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
    FIGURE3_BATCHING,
    PAPER_ALPHABETS,
    PAPER_BATCHING,
    PAPER_FEW_SHOT,
    PAPER_MATCHING_OCCURRENCE,
    PAPER_TABLE1,
    RECIPE_PRECISION,
    TABLE1_BATCHING,
)

RESAMPLES = 10_000
SPREAD_RUNS = 2
"""The runs each precision needs before the precision check gives a verdict: one run has no run-to-run spread."""


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


def uncounted_reasons(frame: pd.DataFrame, include_partial: bool = False) -> pd.Series:
    """Why each run of ``frame`` that `counted_runs` leaves out is left out, by its index: it stopped before its last
    epoch, or another run of its preset, batching method and seed counts (and which way that one is closer to the
    recipe). Empty where every run counts."""
    counted = counted_runs(frame, include_partial)
    reasons = {}
    for index, row in frame.drop(index=counted.index).iterrows():
        if not include_partial and not bool(row["complete"]):
            reasons[index] = "stopped before its last epoch (--include-partial counts it)"
            continue
        keys = ["preset", "batching", "seed"]
        same = counted[(counted[keys] == row[keys]).all(axis=1)]  # none where the seed is missing (NaN)
        why = _closer(same.iloc[0], row) if len(same) else "another run of it counts"
        reasons[index] = f"{row['preset']} / {row['batching']} seed {row['seed']} counts once: {why}"
    return pd.Series(reasons, dtype=object)


def _closer(counted: pd.Series, other: pd.Series) -> str:
    """How the run that counts (``counted``) is closer to the recipe than ``other``, by the ranking of
    `counted_runs`."""
    if counted.get("precision") != other.get("precision") and counted.get("precision") == RECIPE_PRECISION:
        return f"its {RECIPE_PRECISION} run counts, not this {other['precision']} one"
    if bool(counted.get("length_bucketing", False)) != bool(other.get("length_bucketing", False)):
        return "its run with the reference's batches counts, not this length-bucketed one"
    if counted.get("architecture") != other.get("architecture"):
        return "its run on our model counts, not this one on the plain nn.Transformer"
    return "an earlier-listed run of it counts"


def counted_histories(history: pd.DataFrame) -> pd.DataFrame:
    """``history`` (`lsa_interp.evaluation.training_history.histories`) with a ``counted`` column: whether the run's
    curve counts in a mean over runs, by the rule of `counted_runs`: one run per preset, batching method and seed,
    one that finished its planned epochs before one still training, then fp32, the reference's batches and our
    model. A run without a seed counts on its own."""
    if history.empty:
        return history.assign(counted=pd.Series(dtype=bool))
    by_run = history.groupby("run", sort=False)
    ranked = [c for c in ("precision", "length_bucketing", "architecture") if c in history]
    runs = by_run[ranked].first() if ranked else pd.DataFrame(index=by_run.size().index)
    for key in ("preset", "batching", "seed"):
        values = by_run[key].first() if key in history else pd.Series(None, index=runs.index, dtype=object)
        runs[key] = [str(value) if pd.notna(value) else f"({run})" for run, value in values.items()]
    planned = by_run["planned_epochs"].first() if "planned_epochs" in history else pd.Series(None, index=runs.index)
    runs["_training"] = by_run["epoch"].max() < pd.to_numeric(planned, errors="coerce")  # False: no plan
    chosen = _closest_to_recipe(runs, ["preset", "batching", "seed"], first=["_training"])
    return history.assign(counted=history["run"].isin(chosen.index))


def _closest_to_recipe(runs: pd.DataFrame, keys: list[str], first: list[str] | None = None) -> pd.DataFrame:
    """One run per value of ``keys``: the first by the ranking of `counted_runs` (fp32 only where ``keys`` leaves
    the precision free), after the boolean columns ``first`` (False first)."""
    ranks = {name: runs[name].astype(bool) for name in first or []}
    if "precision" not in keys and "precision" in runs:
        ranks["_not_fp32"] = runs["precision"] != RECIPE_PRECISION
    if "length_bucketing" in runs:
        ranks["_bucketed"] = runs["length_bucketing"].astype(bool)
    if "architecture" in runs:
        ranks["_other_model"] = runs["architecture"] != "hooked"
    ordered = runs.assign(**ranks).sort_values(list(ranks), kind="stable") if ranks else runs
    return ordered.drop_duplicates(keys).drop(columns=list(ranks)).sort_index()


def precision_summary(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """The precision check: per preset and batching method trained in more than one precision, per precision its
    runs (``n``), the ``mean`` and sample standard deviation ``sd`` of seen-transformation seen-alphabet accuracy,
    and, beside fp32, the ``difference`` of the means and ``within_spread``: whether that difference is smaller
    than the larger of the two standard deviations (issue 14's rule: then the faster precision may train the rest
    of a grid). The verdict needs a run-to-run spread on both sides: None unless both precisions have
    `SPREAD_RUNS` runs or more. ``hardware``: the machines the precision's runs trained on, as their records name
    them; ``note``: why there is no verdict, and where the two precisions trained on different hardware, which
    (their difference is then not the precision's alone). Each seed counts once per precision (ranked as in
    `counted_runs`), so the spread is between seeds."""
    columns = ["preset", "batching", "precision", "n", "mean", "sd", "difference", "within_spread", "hardware", "note"]
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
        hardware_of = {
            precision: sorted({str(h) for h in part.get("hardware", pd.Series(dtype=object)).dropna()})
            for precision, part in group.groupby("precision")
        }
        reference = stats_of.get(RECIPE_PRECISION)
        for precision, (n, mean, sd) in stats_of.items():
            difference, within, notes = math.nan, None, []
            if precision != RECIPE_PRECISION and reference is None:
                notes.append(f"no verdict: no {RECIPE_PRECISION} runs to compare with")
            elif precision != RECIPE_PRECISION:
                difference = mean - reference[1]
                few = [
                    f"{name} has {count} run{'s' if count != 1 else ''}"
                    for name, count in ((precision, n), (RECIPE_PRECISION, reference[0]))
                    if count < SPREAD_RUNS
                ]
                if few:
                    notes.append(f"no verdict: {' and '.join(few)}, so no run-to-run spread")
                elif not (math.isnan(sd) or math.isnan(reference[2])):
                    within = bool(abs(difference) < max(sd, reference[2]))
                ours, theirs = hardware_of[precision], hardware_of[RECIPE_PRECISION]
                if ours and theirs and ours != theirs:
                    notes.append(
                        f"trained on different hardware: {precision} on {'; '.join(ours)}, "
                        f"{RECIPE_PRECISION} on {'; '.join(theirs)}"
                    )
            hardware = "; ".join(hardware_of[precision])
            rows.append([preset, batching, precision, n, mean, sd, difference, within, hardware, "; ".join(notes)])
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
    ``paper_<cell>`` columns, and what our row pools (`pooled`: ``batching_methods``, ``precisions``)."""
    runs = counted_runs(frame, include_partial)
    pooled = [batching in TABLE1_BATCHING.get(preset, ()) for preset, batching in zip(runs["preset"], runs["batching"])]
    runs = runs[np.array(pooled, dtype=bool)]
    summary = summarize(runs, ["preset"])
    for i, cell in enumerate(CELLS):
        summary[f"paper_{cell}"] = [PAPER_TABLE1[preset][i] for preset in summary["preset"]]
    return _with_pooled(summary, runs, ["preset"])


def pooled(runs: pd.DataFrame) -> tuple[str, str]:
    """What a mean over ``runs`` pools: its batching methods (``"alphabet, random"``) and its precisions with their
    runs (``"bf16 4, fp32 1"``; empty where the table has no precisions)."""
    methods = ", ".join(sorted(runs["batching"].astype(str).unique()))
    if "precision" not in runs:
        return methods, ""
    counts = runs["precision"].astype(str).value_counts()
    return methods, ", ".join(f"{precision} {counts[precision]}" for precision in sorted(counts.index))


def _with_pooled(summary: pd.DataFrame, runs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """``summary`` with `pooled`'s ``batching_methods`` and ``precisions`` of each group's ``runs``."""
    groups = runs.groupby(by) if len(runs) else []
    described = {key if isinstance(key, tuple) else (key,): pooled(group) for key, group in groups}
    keys = [tuple(row) for row in summary[by].itertuples(index=False)]
    return summary.assign(
        batching_methods=[described.get(key, ("", ""))[0] for key in keys],
        precisions=[described.get(key, ("", ""))[1] for key in keys],
    )


def batching_summary(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """The appendix's batching table: per (preset, batching) it lists, with ``paper_<cell>`` and
    ``paper_<cell>_low/_high`` columns (NaN where the paper has no such condition) and the ``precisions`` each
    row pools (`pooled`)."""
    runs = counted_runs(frame, include_partial)
    runs = runs[np.array([(p, b) in PAPER_BATCHING for p, b in zip(runs["preset"], runs["batching"])], dtype=bool)]
    summary = summarize(runs, ["preset", "batching"])
    for i, cell in enumerate(CELLS):
        paper = [PAPER_BATCHING[(p, b)][i] for p, b in zip(summary["preset"], summary["batching"])]
        for j, suffix in enumerate(("", "_low", "_high")):
            summary[f"paper_{cell}{suffix}"] = [interval[j] for interval in paper]
    return _with_pooled(summary, runs, ["preset", "batching"]).drop(columns="batching_methods")


def alphabets_summary(frame: pd.DataFrame, include_partial: bool = False) -> pd.DataFrame:
    """Figure 3: one-shot copy presets by number of training alphabets and batching, with the paper's means."""
    runs = counted_runs(frame, include_partial)
    mask = runs["copy"].astype(bool) & (runs["n_shots"] == 1) & runs["n_alphabets"].isin(list(PAPER_ALPHABETS))
    summary = summarize(runs[mask & runs["batching"].isin(FIGURE3_BATCHING)], ["n_alphabets", "batching"])
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
    matching head (``with_head``), the paper's counts (``paper_with_head`` of ``paper_n``; NaN where the
    paper gives none; its "all" pools its four batching methods) and the batching methods our row pools
    (``pooled``: for "all", those of the runs analysed, which may be fewer than the paper's four)."""
    columns = ["preset", "batching", "n", "with_head", "paper_with_head", "paper_n", "pooled"]
    runs = counted_runs(frame, include_partial)
    if runs.empty or "matching_head" not in runs:
        return pd.DataFrame(columns=columns)
    runs = runs[runs["preset"].isin(list(PAPER_MATCHING_OCCURRENCE)) & runs["matching_head"].notna()]
    rows = []
    for preset, group in runs.groupby("preset"):
        for batching, part in [*group.groupby("batching"), ("all", group)]:
            paper = PAPER_MATCHING_OCCURRENCE[preset].get(batching, (math.nan, math.nan))
            methods = ", ".join(sorted(part["batching"].astype(str).unique()))
            rows.append([preset, batching, len(part), int(part["matching_head"].astype(bool).sum()), *paper, methods])
    return pd.DataFrame(rows, columns=columns)
