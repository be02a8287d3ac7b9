"""The explorer's training tab: a model's validation curves over training and the run table of its grid.

Both come from the library's results layout: `lsa_interp.evaluation.training_history.epoch_history` reads a
run directory's ``metrics.jsonl`` (one record per model and epoch; a stack's replicates each have their
own), and the grid's runs are a `lsa_interp.evaluation.runs_table` table (a sweep's ``results.csv`` above
the model, else ``analyses/results/runs.csv``), summarised by `table1_summary` and `batching_summary`
(means with bootstrap 95% intervals, beside the paper's).
"""

from __future__ import annotations

import json
from itertools import cycle
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

import lsa_interp
from lsa_interp.data.transformations import NEW, SEEN
from lsa_interp.evaluation.grid_summary import batching_summary, counted_runs, format_interval, table1_summary
from lsa_interp.evaluation.paper_tables import CELL_LABELS, CELLS
from lsa_interp.evaluation.runs_table import read_metadata
from lsa_interp.evaluation.training_history import CONFIG_FILE, epoch_history, training_runs
from lsa_interp.explorer.catalogue import ModelEntry
from lsa_interp.model.checkpoint import CONFIG_FILE as CHECKPOINT_CONFIG
from lsa_interp.sweep.plan import RESULTS_FILE
from lsa_interp.training.config import LEGACY_LENGTH_BUCKETING

RUNS_TABLE = Path(lsa_interp.__file__).resolve().parent.parent / "analyses" / "results" / "runs.csv"
"""The grid's table of runs (``lsa-interp results --runs checkpoints``), used when no sweep holds the model."""
RECORDS_DIR = RUNS_TABLE.parent.parent / "runs"
"""The committed records of trained runs (their configs and ``metrics.jsonl``, no weights), the shipped
checkpoints' among them."""
SAME_RUN = {"preset": None, "seed": None, "batching": "random", "epochs": None, "precision": "fp32",
            "length_bucketing": LEGACY_LENGTH_BUCKETING, "architecture": "hooked"}  # fmt: skip
"""What a single run's training config must share with a checkpoint's to be its record (default where a config
predates the setting)."""
SUMMARY_CURVES = {
    "val_acc": "overall",
    "val_acc_copy": "copy",
    "val_acc_noncopy": "non-copy",
    "val_acc_seen_transformations": "seen transformations",
    "val_acc_new_transformations": "new transformations",
}
LOSS_CURVES = {"train_loss": "training loss (mean of the epoch)", "val_loss": "validation loss"}
CURVE_COLOURS: tuple[str, ...] = tuple(qualitative.Dark24)
"""The accuracy curves' colours, one per curve in the figure's order (summary, seen, new: 24 at most), so no two
share a colour in the one legend (plotly's 10-colour cycle repeated them); the losses are black."""
RUN_COLUMNS = (
    "run", "condition", "seed", "precision", "length_bucketing", "epochs", "epochs_planned", "complete", "counted",
    *CELLS,
)  # fmt: skip
"""The run table's columns (those the table has): what tells two runs of one seed apart, and whether the means
count the run (``counted``, `grid_summary.counted_runs`)."""
RUN_LABELS = {"length_bucketing": "length-bucketed", **CELL_LABELS}
_SWEEP_DEPTH = 4
"""How far above a model directory a sweep's ``results.csv`` is looked for (DIR/stacks/stack-k/replicate-i/model)."""


def _same_run(config: dict[str, Any], recipe: dict[str, Any]) -> bool:
    return all(
        config.get(key, default) == recipe.get(key, default) and (default is not None or key in recipe)
        for key, default in SAME_RUN.items()
    )


def training_record(meta: dict[str, Any], records: Path = RECORDS_DIR) -> tuple[Path, int] | None:
    """Where under ``records`` the training of a checkpoint with metadata ``meta`` was recorded, and its replicate
    index there: the stack whose config names its run (a sweep replicate's ``run``), or the single run whose
    config has its preset, seed, batching, epochs, precision, length bucketing and architecture (`SAME_RUN`).
    None when no record matches, or more than one does."""
    try:
        run_dirs = training_runs(records)
    except FileNotFoundError:
        return None
    found = []
    for run_dir in run_dirs:
        config = json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
        if "runs" in config:
            found += [(run_dir, i) for i, run in enumerate(config["runs"]) if meta.get("run") == run.get("name")]
        elif not meta.get("run") and _same_run(config, meta.get("train_config", {})):
            found.append((run_dir, 0))
    return found[0] if len(found) == 1 else None


def model_history(entry: ModelEntry, records: Path = RECORDS_DIR) -> pd.DataFrame:
    """The epoch records of ``entry``'s model (its replicate's rows in a stacked run), one row per epoch; for a
    checkpoint without its run directory (a shipped one), those of its run's record under ``records``
    (`training_record`).

    Raises LookupError saying why there are none: no run directory and no record, or a run that recorded no
    epoch yet."""
    run_dir, replicate = entry.run_dir, entry.replicate
    if run_dir is None and entry.path is not None and (entry.path / CHECKPOINT_CONFIG).is_file():
        run_dir, replicate = training_record(read_metadata(entry.path), records) or (None, None)
    if run_dir is None:
        raise LookupError(
            f"{entry.name} is a checkpoint without its training run, so no per-epoch history was recorded; "
            "open a run directory (lsa-interp explore --model RUN_DIR) to see its curves"
        )
    try:
        history = epoch_history(run_dir)
    except FileNotFoundError as err:
        raise LookupError(f"{entry.name}: {err}") from None
    if not history.empty:
        history = history[history["replicate"] == (replicate or 0)]
    if history.empty:
        raise LookupError(f"{entry.name}: its run {run_dir} has recorded no epoch yet")
    return history.sort_values("epoch").reset_index(drop=True)


def history_figure(history: pd.DataFrame, title: str) -> go.Figure:  # pragma: no mutate block
    """Validation accuracy (%) per epoch in three panels: the summary curves (and the matching-head score, where
    the history has it), each seen transformation, each new transformation; below them, where the history has them, the
    training and validation losses (log axis)."""
    losses = [column for column in LOSS_CURVES if column in history and history[column].notna().any()]
    panels = ("overall, copy and by kind", "seen transformations", "new transformations", *(["loss"] if losses else []))
    fig = make_subplots(
        rows=2 if losses else 1, cols=3, subplot_titles=panels, shared_yaxes=True, horizontal_spacing=0.04,
        specs=[[{}, {}, {}], [{"colspan": 3}, None, None]] if losses else None, vertical_spacing=0.14,
    )  # fmt: skip
    epochs = history["epoch"]
    colours = cycle(CURVE_COLOURS)
    for column, name in SUMMARY_CURVES.items():
        if column in history and history[column].notna().any():
            fig.add_scatter(
                x=epochs, y=100 * history[column], name=name, mode="lines+markers", line={"color": next(colours)},
                row=1, col=1,
            )  # fmt: skip
    if "matching_score" in history and history["matching_score"].notna().any():
        fig.add_scatter(
            x=epochs, y=100 * history["matching_score"], name="matching-head score (x100)", mode="lines",
            line={"dash": "dash", "color": "black"}, row=1, col=1,
        )  # fmt: skip
    for col, rules in ((2, SEEN), (3, NEW)):
        for rule in rules:
            if f"acc_{rule}" in history:
                fig.add_scatter(
                    x=epochs, y=100 * history[f"acc_{rule}"], name=rule, mode="lines", line={"color": next(colours)},
                    row=1, col=col,
                )  # fmt: skip
    for column, dash in zip(losses, ("solid", "dot")):
        fig.add_scatter(
            x=epochs, y=history[column], name=LOSS_CURVES[column], mode="lines+markers",
            line={"color": "black", "dash": dash}, row=2, col=1,
        )  # fmt: skip
    fig.update_yaxes(range=[0, 101], row=1)
    fig.update_yaxes(title_text="validation accuracy (%)", row=1, col=1)
    if losses:
        fig.update_yaxes(title_text="loss", type="log", row=2, col=1)
    fig.update_xaxes(title_text="epoch")
    fig.update_layout(title=title, height=760 if losses else 460, legend={"title": "click to show or hide"})
    return fig


def results_table_path(entry: ModelEntry, default: Path = RUNS_TABLE) -> Path | None:
    """The run table of ``entry``'s grid: the ``results.csv`` of the sweep directory holding its model (the
    nearest one up to four levels above it), else ``default`` when it exists, else None."""
    if entry.path is not None:
        for parent in list(entry.path.parents)[:_SWEEP_DEPTH]:
            if (parent / RESULTS_FILE).is_file():
                return parent / RESULTS_FILE
    return default if default.is_file() else None


def grid_tables(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Display tables of a runs table: ``runs`` (`RUN_COLUMNS`: the run, its condition, seed, precision, length
    bucketing, epochs, ``counted`` and the Table 1 cells), ``Table 1`` and ``batching`` (per condition: the runs
    counted and, per cell, ours "mean [low, high]" beside the paper's). The summaries count the runs of
    `grid_summary.counted_runs` (complete ones, one per preset, batching and seed: the one closest to the recipe);
    a summary without any such run is left out. Raises KeyError when ``runs`` has no ``complete`` column."""
    marked = runs.assign(counted=runs.index.isin(counted_runs(runs).index))
    shown = marked[[c for c in RUN_COLUMNS if c in marked]].copy()
    if "epochs" in shown:
        shown["epochs"] = shown["epochs"].round(2)
    for cell in CELLS:
        if cell in shown:
            shown[cell] = [format_interval(v, missing="") for v in shown[cell]]
    tables = {"runs": shown.rename(columns=RUN_LABELS)}
    for name, summary, keys in (
        ("Table 1", table1_summary(runs), ["preset"]),
        ("batching", batching_summary(runs), ["preset", "batching"]),
    ):
        if summary.empty:
            continue
        table = summary[[*keys, "n"]].rename(columns={"n": "runs"})
        for cell in CELLS:
            label = CELL_LABELS[cell]
            table[label] = [
                format_interval(*row, missing="") for row in summary[[cell, f"{cell}_low", f"{cell}_high"]].to_numpy()
            ]
            paper = [f"paper_{cell}"] + ([f"paper_{cell}_low", f"paper_{cell}_high"] if name == "batching" else [])
            table[f"paper {label}"] = [format_interval(*row, missing="") for row in summary[paper].to_numpy()]
        tables[name] = table
    return tables
