"""Figures of a grid of runs: accuracy against the number of training alphabets (the paper's Figure 3),
validation accuracy and matching-head score over training by preset (copy-20 against nocopy-20, the paper's
comparison), the same condition's runs in two precisions over training (the precision check), and per run its
matching-head score against how often it answered with a sibling rule's answer."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lsa_interp.evaluation.grid_summary import counted_histories
from lsa_interp.evaluation.paper_tables import PAPER_ALPHABETS

_ALPHABET_SERIES = {
    "seen_transformations_seen_alphabets": ("seen alphabets", "#d62728", "rgba(214,39,40,0.15)"),
    "seen_transformations_new_alphabets": ("new alphabets", "#1f77b4", "rgba(31,119,180,0.15)"),
}
_DASH = {"alphabet": "solid", "random": "dash"}


def alphabets_figure(summary: pd.DataFrame) -> go.Figure:  # pragma: no mutate block
    """Figure 3 from `lsa_interp.evaluation.grid_summary.alphabets_summary`: seen-transformation accuracy on
    seen and new alphabets against the number of training alphabets, per batching method, with bootstrap
    bands (where a condition has two or more runs) and the paper's means as open markers (the means of the
    authors' runs behind its Figure 3: `lsa_interp.evaluation.paper_tables.PAPER_ALPHABETS`)."""
    fig = go.Figure()
    for batching, group in summary.groupby("batching", sort=True):
        group = group.sort_values("n_alphabets")
        x = group["n_alphabets"].tolist()
        for cell, (label, colour, band) in _ALPHABET_SERIES.items():
            name = f"{label}, {batching} batching"
            low, high = group[f"{cell}_low"].tolist(), group[f"{cell}_high"].tolist()
            if any(not math.isnan(v) for v in low):
                fig.add_scatter(
                    x=x + x[::-1], y=high + low[::-1], fill="toself", fillcolor=band, line={"width": 0},
                    hoverinfo="skip", showlegend=False, legendgroup=name,
                )  # fmt: skip
            fig.add_scatter(
                x=x, y=group[cell], mode="lines+markers", name=f"ours: {name}", legendgroup=name,
                line={"color": colour, "dash": _DASH.get(str(batching), "dot")},
                customdata=group[["n"]].to_numpy(),
                hovertemplate="%{x} alphabets: %{y:.1f}% (%{customdata[0]} runs)<extra>%{fullData.name}</extra>",
            )  # fmt: skip
            fig.add_scatter(
                x=x, y=group[f"paper_{cell}"], mode="markers", name=f"paper: {name}", legendgroup=name,
                marker={"color": colour, "symbol": "circle-open", "size": 10},
                hovertemplate="paper, %{x} alphabets: %{y:.1f}%<extra></extra>",
            )  # fmt: skip
    fig.update_layout(
        title="Figure 3: seen-transformation accuracy by number of training alphabets (copy tasks; bands: 95% "
        "bootstrap)<br><sup>open markers: the paper's Figure 3, the means of the authors' runs behind it "
        f"(20 alphabets, random batching: {PAPER_ALPHABETS[20]['random'][0]:.1f} over its 5 runs)</sup>",
        xaxis={"title": "training alphabets", "type": "log", "tickvals": [20, 40, 60, 80, 100, 140, 200, 400]},
        yaxis={"title": "exact match (%)", "range": [0, 100]},
        legend={"groupclick": "togglegroup"},
    )
    return fig


def _still_training(runs: pd.DataFrame) -> pd.Series:
    """Per run, the text "(training: epoch N of M)" where its records stop before the epochs its config plans
    (``planned_epochs``), else an empty text."""
    last = runs.groupby("run")["epoch"].max()
    if "planned_epochs" not in runs:
        return last.map(lambda _: "")
    planned = pd.to_numeric(runs.groupby("run")["planned_epochs"].first(), errors="coerce")
    training = last < planned  # False where the config plans no number
    return pd.Series(
        [f" (training: epoch {last[run]:g} of {planned[run]:g})" if training[run] else "" for run in last.index],
        index=last.index,
        dtype=object,
    )


def _mean_curve(runs: pd.DataFrame, column: str) -> tuple[pd.Series, list[str]]:
    """The mean of ``column`` per epoch and the runs it is over: the runs with that column that finished their
    planned epochs, where any did (a run still training is drawn on its own, not averaged in), else all of them; at
    the epochs every one of those runs reached (a shorter run would otherwise turn the mean into that of fewer runs
    part of the way)."""
    logged = runs.dropna(subset=[column])
    finished = _still_training(logged) == ""
    if finished.any():
        logged = logged[logged["run"].isin(finished[finished].index)]
    last = logged.groupby("run")["epoch"].max().min()
    return logged[logged["epoch"] <= last].groupby("epoch")[column].mean(), sorted(logged["run"].unique())


def _run_line(run: str, note: str) -> tuple[str, str]:
    """A run's thin line: its name and dash, dotted and with its epoch while it trains (``note``)."""
    return f"{run}{note}", "dot" if note else "solid"


_PRESET_COLOURS = {"copy-20": "#1f77b4", "nocopy-20": "#ff7f0e", "copy-200": "#2ca02c"}
_OTHER_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
PAIRED_PRESETS = ("copy-20", "nocopy-20")
"""The paper's copy against no-copy comparison (same 20 alphabets): first in the training-curves figure."""


def _preset_colours(presets: pd.Series) -> tuple[list[str], dict[str, str]]:
    """The presets of ``presets`` in drawing order (copy-20 and nocopy-20 first, the rest sorted) and a colour each."""
    found = set(presets.astype(str))
    order = [*[p for p in PAIRED_PRESETS if p in found], *sorted(found - set(PAIRED_PRESETS))]
    others = iter(_OTHER_COLOURS * (len(order) // len(_OTHER_COLOURS) + 1))
    return order, {preset: _PRESET_COLOURS.get(preset) or next(others) for preset in order}


def training_curves_figure(history: pd.DataFrame) -> go.Figure:  # pragma: no mutate block
    """Validation accuracy of non-copy tasks, the best matching-head score and the share of extend / succ / pred
    tasks answered with a sibling rule's answer (the example not read) per epoch, one thin line per run and a thick
    mean per preset (copy-20 against nocopy-20 first, the paper's comparison; every other preset on its own, never
    pooled with them), from `lsa_interp.evaluation.training_history.histories`. A preset's mean counts one run per
    batching method and seed, by the tables' rule (`lsa_interp.evaluation.grid_summary.counted_histories`); its
    legend names the batching methods and how many runs it holds. A seed's other finished runs (its bf16 run where
    the fp32 one counts) are left out and named in the title; a run still training is drawn dotted and left out of
    the mean (`_mean_curve`). Runs without ``matching_score`` or ``sibling_window`` leave those panels empty."""
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
        subplot_titles=(
            "non-copy validation accuracy", "best matching-head score",
            "extend / succ / pred tasks answered with a sibling rule's answer",
        ),
    )  # fmt: skip
    if history.empty:
        fig.update_layout(title="No epoch records found")
        return fig
    frame = counted_histories(history)
    frame = frame.assign(preset=frame["preset"].astype(object).where(frame["preset"].notna(), "no preset"))
    training = _still_training(frame)
    drawn = frame["counted"] | frame["run"].map(training != "")  # a seed's run still training is drawn, dotted
    left_out = sorted(frame.loc[~drawn, "run"].unique())
    presets, colours = _preset_colours(frame["preset"])
    panels = [(1, "val_acc_noncopy", 100.0), (2, "matching_score", 1.0), (3, "sibling_window", 100.0)]
    for preset in presets:
        runs = frame[drawn & (frame["preset"] == preset)]
        counted = runs[runs["counted"]]
        methods = ", ".join(sorted(counted["batching"].dropna().astype(str).unique())) or "batching not recorded"
        for row, column, scale in panels:
            if column not in runs or runs[column].isna().all():
                continue
            for run, curve in runs.groupby("run", sort=True):
                curve, (name, dash) = curve.sort_values("epoch"), _run_line(str(run), training[run])
                fig.add_scatter(
                    x=curve["epoch"], y=curve[column] * scale, mode="lines", name=name, legendgroup=preset,
                    line={"color": colours[preset], "width": 1, "dash": dash}, opacity=0.35, showlegend=False,
                    row=row, col=1,
                )  # fmt: skip
            if counted[column].isna().all():
                continue
            mean, in_mean = _mean_curve(counted, column)
            precisions = (
                counted[counted["run"].isin(in_mean)].groupby("run")["precision"].first().value_counts()
                if "precision" in counted
                else pd.Series(dtype=int)
            )
            held = ", ".join(f"{precisions[p]} {p}" for p in sorted(precisions.index)) or "precision not recorded"
            fig.add_scatter(
                x=mean.index, y=mean.values * scale, mode="lines+markers",
                name=f"{preset} ({methods}): mean of {len(in_mean)} run{'s' if len(in_mean) != 1 else ''}, one per "
                f"seed ({held})",
                legendgroup=preset, showlegend=row == 1, line={"color": colours[preset], "width": 3}, row=row, col=1,
            )  # fmt: skip
    title = "Training by preset: copy-20 against nocopy-20 (the paper's comparison); other presets on their own"
    if left_out:
        title += (
            f"<br><sup>left out: {', '.join(left_out)} (another run of the seed counts, as in the tables: fp32, "
            "the reference's batches, our model)</sup>"
        )
    fig.update_yaxes(title_text="accuracy (%)", range=[0, 100], row=1, col=1)
    fig.update_yaxes(title_text="score", row=2, col=1)
    fig.update_yaxes(title_text="% of tasks", row=3, col=1)
    fig.update_xaxes(title_text="epoch", row=3, col=1)
    fig.update_layout(title=title, height=950)
    return fig


_PRECISION_COLOURS = {"fp32": "#2ca02c", "tf32": "#9467bd", "bf16": "#d62728"}


def precision_curves_figure(history: pd.DataFrame) -> go.Figure | None:  # pragma: no mutate block
    """Per epoch, the seen-transformation validation accuracy and (where the histories have it) the mean training
    loss of each condition (preset / batching) trained in more than one precision, one row of panels per
    condition: one thin line per run (dotted while it trains) and a thick mean per precision (`_mean_curve`) (the
    precision check of the paper's grid; the loss on a log axis). None when no condition has runs in two
    precisions."""
    needed = {"precision", "val_acc_seen_transformations"}
    if history.empty or not needed <= set(history):
        return None
    if "architecture" in history:  # as the table of `precision_by_epoch`: runs on our model only
        history = history[history["architecture"] == "hooked"]
    frame = history.assign(condition=history["preset"].astype(str) + " / " + history["batching"].astype(str))
    mixed = [name for name, runs in frame.groupby("condition", sort=True) if runs["precision"].nunique() > 1]
    if not mixed:
        return None
    panels = [("val_acc_seen_transformations", 100.0, "accuracy (%)", "seen-transformation validation accuracy")]
    if "train_loss" in frame and frame["train_loss"].notna().any():
        panels.append(("train_loss", 1.0, "training loss", "training loss, mean of the epoch"))
    titles = [f"{condition}: {title}" for condition in mixed for *_, title in panels]
    fig = make_subplots(
        rows=len(mixed), cols=len(panels), shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.08
    )
    for row, condition in enumerate(mixed, start=1):
        for precision, runs in frame[frame["condition"] == condition].groupby("precision", sort=True):
            colour = _PRECISION_COLOURS.get(str(precision), "#7f7f7f")
            notes = _still_training(runs)
            for col, (column, scale, *_) in enumerate(panels, start=1):
                for run, curve in runs.dropna(subset=[column]).groupby("run", sort=True):
                    curve, (name, dash) = curve.sort_values("epoch"), _run_line(str(run), notes[run])
                    fig.add_scatter(
                        x=curve["epoch"], y=curve[column] * scale, mode="lines", name=name,
                        line={"color": colour, "width": 1, "dash": dash}, opacity=0.4,
                        legendgroup=str(precision), showlegend=False, row=row, col=col,
                    )  # fmt: skip
                if runs[column].isna().all():
                    continue
                mean, means_runs = _mean_curve(runs, column)
                fig.add_scatter(
                    x=mean.index, y=mean.values * scale, mode="lines+markers",
                    name=f"{precision} (mean of {len(means_runs)})",
                    line={"color": colour, "width": 3}, legendgroup=str(precision),
                    showlegend=row == 1 and col == 1, row=row, col=col,
                )  # fmt: skip
        for col, (column, _, label, _) in enumerate(panels, start=1):
            fig.update_yaxes(title_text=label, type="log" if column == "train_loss" else "linear", row=row, col=col)
    for col in range(1, len(panels) + 1):
        fig.update_xaxes(title_text="epoch", row=len(mixed), col=col)
    fig.update_layout(title="Precision check per epoch", height=350 + 300 * len(mixed))
    return fig


def matching_vs_rule_figure(runs: pd.DataFrame) -> go.Figure:  # pragma: no mutate block
    """One point per run of `lsa_interp.evaluation.runs_table.runs_table` that has both a matching-head analysis
    and rule-family counts: its best matching-head score against the share of the look-alike rules' tasks it
    answered with a sibling rule's answer (the example not read), a colour per preset (copy-20 and copy-200 trained
    on different data are told apart)."""
    fig = go.Figure()
    paired = runs.reindex(columns=["matching_best_score", "sibling_percent"]).notna().all(axis=1)
    points = runs[paired].assign(preset=lambda frame: frame["preset"].astype(str))
    presets, colours = _preset_colours(points["preset"])
    for preset in presets:
        group = points[points["preset"] == preset]
        label = f"{preset} ({len(group)} run{'' if len(group) == 1 else 's'})"
        fig.add_scatter(
            x=group["matching_best_score"], y=group["sibling_percent"], mode="markers", name=label,
            marker={"color": colours[preset], "size": 10}, customdata=group[["run"]].to_numpy(),
            hovertemplate="%{customdata[0]}: score %{x:.3f}, %{y:.1f}% sibling answers<extra>" + label + "</extra>",
        )  # fmt: skip
    fig.update_layout(
        title="Matching head against reading the rule: one point per run",
        xaxis={"title": "best matching-head score"},
        yaxis={"title": "look-alike rules' tasks answered with a sibling's answer (%)", "rangemode": "tozero"},
    )
    return fig
