"""The explorer's training tab: validation curves from a run's ``metrics.jsonl`` and the grid's run table.

The trainer appends one ``{"type": "epoch", ...}`` record per epoch (per replicate in a stacked run, with
``replicate``) holding ``val_acc``, ``val_acc_copy``/``_noncopy``, ``val_acc_seen_transformations``/
``_new_transformations`` and ``val_acc_by_transformation``. The run table is the first ``*.csv`` or
``*.parquet`` under ``analyses/results/`` (written by the training-grid work); with a ``condition`` column
each numeric column is summarised per condition as a mean with a bootstrap 95% interval over runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from scipy.stats import bootstrap

import lsa_interp

RESULTS_DIR = Path(lsa_interp.__file__).resolve().parent.parent / "analyses" / "results"
SUMMARY_CURVES = {
    "val_acc": "overall",
    "val_acc_copy": "copy",
    "val_acc_noncopy": "non-copy",
    "val_acc_seen_transformations": "seen transformations",
    "val_acc_new_transformations": "new transformations",
}


def epoch_history(metrics_file: str | Path, replicate: int | None = None) -> pd.DataFrame:
    """One row per epoch record of ``metrics_file`` (of ``replicate`` in a stacked run): ``epoch``, the summary
    accuracies and ``acc:<transformation>`` columns. Empty when the run recorded no epoch.

    Raises ValueError naming the line that is not JSON."""
    rows = []
    for number, line in enumerate(Path(metrics_file).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{metrics_file} line {number} is not JSON ({err})") from None
        if record.get("type") != "epoch" or record.get("replicate", replicate) != replicate:
            continue
        row = {"epoch": record["epoch"], **{k: record.get(k) for k in SUMMARY_CURVES}}
        row.update({f"acc:{k}": v for k, v in (record.get("val_acc_by_transformation") or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def history_figure(history: pd.DataFrame, title: str) -> go.Figure:
    """Validation accuracy (%) per epoch: the summary curves, and one dotted curve per transformation."""
    fig = go.Figure()
    for column, name in SUMMARY_CURVES.items():
        if column in history and history[column].notna().any():
            fig.add_scatter(x=history["epoch"], y=100 * history[column], name=name, mode="lines+markers")
    for column in sorted(c for c in history.columns if c.startswith("acc:")):
        fig.add_scatter(
            x=history["epoch"],
            y=100 * history[column],
            name=column[4:],
            mode="lines",
            line={"dash": "dot"},
            visible="legendonly",
        )
    fig.update_layout(
        title=title,
        xaxis_title="epoch",
        yaxis_title="validation accuracy (%)",
        yaxis_range=[0, 100],
        height=420,
        legend={"title": "click to show or hide"},
    )
    return fig


def run_table(results_dir: str | Path = RESULTS_DIR) -> pd.DataFrame | None:
    """The grid's table of runs (first ``*.csv`` or ``*.parquet`` in ``results_dir``), or None when absent."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        return None
    for path in sorted(results_dir.glob("*.csv")) + sorted(results_dir.glob("*.parquet")):
        return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    return None


def condition_intervals(table: pd.DataFrame, seed: int = 0) -> pd.DataFrame | None:
    """Per ``condition``: the number of runs and, for each numeric column, ``mean [low, high]`` (bootstrap 95%
    interval of the mean over runs, 10,000 resamples; the mean alone for a single run). None without a
    ``condition`` column."""
    if "condition" not in table:
        return None
    numeric = [c for c in table.select_dtypes("number").columns if c != "seed"]
    rows = []
    for condition, group in table.groupby("condition", sort=False):
        row = {"condition": condition, "runs": len(group)}
        for column in numeric:
            values = group[column].dropna().to_numpy(dtype=float)
            row[column] = _mean_interval(values, seed)
        rows.append(row)
    return pd.DataFrame(rows)


def _mean_interval(values: np.ndarray, seed: int) -> str:
    if len(values) == 0:
        return ""
    if len(values) == 1 or np.all(values == values[0]):
        return f"{values.mean():.1f}"
    ci = bootstrap((values,), np.mean, n_resamples=10_000, method="percentile", random_state=seed)
    return f"{values.mean():.1f} [{ci.confidence_interval.low:.1f}, {ci.confidence_interval.high:.1f}]"
