"""The per-epoch validation history of training runs, read from their ``metrics.jsonl``.

A run directory of `lsa_interp.training` (one model, or a stack of replicates) logs one ``epoch`` record
per model and epoch: validation loss and accuracy (overall, copy / non-copy, seen / new transformations,
per transformation), its best matching-head score, the share of each rule family's rows answered with a sibling
rule's answer and, for stacks, the replicate's run name. Between them, ``step`` records log the mean training loss
of each 100-step window (a stack: ``train_loss_by_replicate``). This module flattens them into one table: one row
per (run, epoch), with the epoch's mean training loss.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from lsa_interp.utils import NUMBER, JsonObject, read_json_lines, read_json_object

METRICS_FILE, CONFIG_FILE = "metrics.jsonl", "train_config.json"
CONFIG_EXPECTED = "a training run's config, as lsa-interp train writes it"
"""What ``train_config.json`` should be (ends the errors of a damaged one)."""


_NESTED = {"val_acc_by_transformation": "acc", "val_sibling_by_family": "sibling"}
"""Epoch-record fields that hold one number per rule or family (a null one: none), and their columns' prefix."""


def _log(path: Path, record: dict[str, Any]) -> JsonObject:
    """A ``step`` or ``epoch`` record of the log at ``path``, to read checked (`JsonObject.get`)."""
    return JsonObject(record, path, f"{record['type']} records as lsa-interp train logs them")


def _replicate_labels(config: JsonObject) -> list[tuple[str, str | None, str, int | None, int | None]]:
    """(run name, preset, batching, planned epochs or None, seed or None) per replicate of a run's saved config (a
    stack or a single run). A single run on another architecture than ours (``reference``: the plain
    ``nn.Transformer``) has it in its name, as ``scripts/cpu_runs.sh`` names its folder. Raises ValueError naming
    the config where a setting is of the wrong type, or a stack's run has no batching."""
    field = config.get
    if (runs := field("runs", list, None)) is not None:
        return [
            (field(f"runs.{i}.name", str, None) or f"replicate-{i}", field(f"runs.{i}.preset", str, None),
             field(f"runs.{i}.batching", str), field(f"runs.{i}.epochs", int, None), field(f"runs.{i}.seed", int, None))
            for i in range(len(runs))
        ]  # fmt: skip
    seed, replicates = field("seed", int, 0), field("replicates", int, 1)
    preset, batching = field("preset", str, None), field("batching", str, "random")
    epochs, architecture = field("epochs", int, None), field("architecture", str, "hooked")
    kind = "" if architecture == "hooked" else f"-{architecture}"
    return [
        (f"{preset or 'data'}-{batching}{kind}-s{seed + i}", preset, batching, epochs, seed + i)
        for i in range(replicates)
    ]


def _window_losses(path: Path, records: list[dict[str, Any]]) -> dict[int, dict[int, float]]:
    """By replicate, the logged training loss of each step window by its last step. A step logged twice (a run
    resumed from a state before it) keeps its last record, the one the run went on from. Raises ValueError naming
    the log (``path``) where a step is not a whole number or a loss not a number."""
    losses: dict[int, dict[int, float]] = {}
    for record in records:
        if record.get("type") != "step" or "train_loss" not in record:
            continue
        log = _log(path, record)
        step, by_replicate = log.get("step", int), log.get("train_loss_by_replicate", list, None)
        keys = (
            ["train_loss"]
            if by_replicate is None
            else [f"train_loss_by_replicate.{i}" for i in range(len(by_replicate))]
        )
        for index, key in enumerate(keys):
            if (loss := log.get(key, NUMBER, None)) is not None:
                losses.setdefault(index, {})[step] = float(loss)
    return losses


def _epoch_train_loss(windows: dict[int, float], after: int, upto: int) -> float:
    """The mean loss of the windows that end in steps ``after + 1 .. upto`` (NaN when none was logged)."""
    inside = [loss for step, loss in windows.items() if after < step <= upto]
    return sum(inside) / len(inside) if inside else float("nan")


def epoch_history(run_dir: str | os.PathLike) -> pd.DataFrame:
    """One row per (model, epoch) of one run directory: ``run``, ``preset``, ``batching``, ``precision`` (the
    training precision of the run or stack), ``planned_epochs`` (the epochs its config asks for; None where it does
    not say), ``seed`` (None where a stack's run names none), ``architecture`` (``hooked``, ours, unless the config
    names another), ``length_bucketing`` (true where the config predates the option), ``epoch``, ``step``,
    every scalar of the epoch record, ``acc_<rule>`` per transformation, ``sibling_<family>`` per rule family
    (records written since the rule-family analysis) and ``train_loss``: the mean of the model's logged window
    losses whose windows end in the epoch (after the step of the model's previous epoch, up to this one's; NaN
    where none was logged, or the epoch record has no step). Raises FileNotFoundError when ``run_dir`` is not a
    training run, ValueError naming the file where its config or log is damaged (not JSON objects, a setting, step
    or replicate of the wrong type)."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run (no {CONFIG_FILE})")
    config = read_json_object(run_dir / CONFIG_FILE, CONFIG_EXPECTED)
    labels, precision = _replicate_labels(config), config.get("precision", str, "fp32")
    architecture = config.get("architecture", str, "hooked")
    bucketed = config.get("length_bucketing", bool, True)  # configs from before the option: bucketed
    metrics = run_dir / METRICS_FILE
    records = read_json_lines(metrics)
    epochs = []  # (replicate, step, record) of each epoch record
    for record in records:
        if record.get("type") == "epoch":
            log = _log(metrics, record)
            for keys in _NESTED:
                log.get(keys, dict, None)
            epochs.append((log.get("replicate", int, 0), log.get("step", int, 0), record))
    windows = _window_losses(metrics, records)
    ends: dict[int, set[int]] = {}
    for index, end, _ in epochs:
        ends.setdefault(index, set()).add(end)
    rows = []
    for index, end, record in epochs:
        name, preset, batching, planned, seed = (
            labels[index] if index < len(labels) else (f"replicate-{index}", None, None, None, None)
        )
        row = {"run": name, "preset": preset, "batching": batching, "precision": precision, "planned_epochs": planned}
        row["seed"], row["architecture"], row["length_bucketing"] = seed, architecture, bucketed
        row["replicate"] = index
        row.update({k: v for k, v in record.items() if k not in _NESTED and not isinstance(v, dict) and k != "type"})
        after = max((s for s in ends[index] if s < end), default=0)
        row["train_loss"] = _epoch_train_loss(windows.get(index, {}), after, end)
        for key, prefix in _NESTED.items():
            row.update({f"{prefix}_{name}": value for name, value in (record.get(key) or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def training_runs(path: str | os.PathLike) -> list[Path]:
    """``path`` when it is a training run (it has a ``train_config.json``), else every training run below it, in
    order of their paths (e.g. ``analyses/runs``, the committed records). Raises FileNotFoundError when it holds
    none."""
    path = Path(path)
    if (path / CONFIG_FILE).is_file():
        return [path]
    found = sorted(config.parent for config in path.rglob(CONFIG_FILE))
    if not found:
        raise FileNotFoundError(f"{path} is not a training run and holds none (no {CONFIG_FILE} in or below it)")
    return found


def histories(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """`epoch_history` of every training run in ``paths`` (a run, or a directory of runs: `training_runs`; a run
    found twice is read once), concatenated (empty when none has epoch records), with each row's ``run_dir``.
    ``run`` names one model: where run directories share a name (the same preset, batching and seed trained on
    two machines, or on the plain `nn.Transformer`), each such name gets its directory in brackets. Raises
    FileNotFoundError for a path that holds no run."""
    runs = dict.fromkeys(run.resolve() for path in paths for run in training_runs(path))
    frames = [frame.assign(run_dir=str(run)) for run in runs if not (frame := epoch_history(run)).empty]
    if not frames:
        return pd.DataFrame()
    frame = pd.concat(frames, ignore_index=True)
    directories = frame.groupby("run")["run_dir"].nunique()
    shared = frame["run"].isin(directories[directories > 1].index)
    frame.loc[shared, "run"] = frame.loc[shared, "run"] + " [" + frame.loc[shared, "run_dir"] + "]"
    return frame


PRECISION_COLUMNS = ("preset", "batching", "epoch", "precision", "runs", "mean", "sd", "low", "high")


def our_runs(history: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows of `histories` that a precision check compares: runs on our model (not the plain ``nn.Transformer``
    of ``--architecture reference``) with ``column`` logged. Empty when the histories lack either column."""
    if history.empty or not {"architecture", column} <= set(history):
        return history.iloc[:0]
    return history[history["architecture"] == "hooked"].dropna(subset=[column])


def precision_by_epoch(history: pd.DataFrame, column: str = "val_acc_seen_transformations") -> pd.DataFrame:
    """The precision check over training, from `histories`: for each (preset, batching) trained in more than one
    precision, per epoch and precision, the runs on our model that reached the epoch (runs still training count)
    and the mean, sample standard deviation (NaN for one run), lowest and highest of ``column`` in %. Columns
    `PRECISION_COLUMNS`; empty when no condition has two precisions or the histories lack ``column``."""
    needed = {"run", "preset", "batching", "precision", "epoch", "architecture", column}
    if history.empty or not needed <= set(history):
        return pd.DataFrame(columns=list(PRECISION_COLUMNS))
    frame = our_runs(history, column)
    mixed = frame.groupby(["preset", "batching"])["precision"].transform("nunique") > 1
    rows = [
        {
            "preset": preset,
            "batching": batching,
            "epoch": epoch,
            "precision": precision,
            "runs": runs["run"].nunique(),
            "mean": 100 * runs[column].mean(),
            "sd": 100 * runs[column].std(),
            "low": 100 * runs[column].min(),
            "high": 100 * runs[column].max(),
        }  # fmt: skip
        for (preset, batching, epoch, precision), runs in frame[mixed].groupby(
            ["preset", "batching", "epoch", "precision"], sort=True
        )
    ]
    return pd.DataFrame(rows, columns=list(PRECISION_COLUMNS))


def matched_epoch(
    by_epoch: pd.DataFrame, history: pd.DataFrame, column: str = "val_acc_seen_transformations"
) -> pd.DataFrame:
    """The rows of `precision_by_epoch` (of ``column``) at each condition's last epoch that two runs of each of its
    precisions reached (of the runs it compares, `our_runs`; the one run, where a precision has one): the latest
    epoch with a run-to-run spread in every precision that can have one, where a run still training compares with
    the rest, and a young run started since does not pull the comparison back to its first epochs."""
    if by_epoch.empty:
        return by_epoch
    compared = our_runs(history, column)
    reach = compared.groupby(["preset", "batching", "precision", "run"])["epoch"].max()
    second = reach.groupby(["preset", "batching", "precision"]).apply(lambda runs: runs.nlargest(2).iloc[-1])
    reached = second.groupby(["preset", "batching"]).min()
    last = by_epoch.apply(lambda row: reached.get((row["preset"], row["batching"])), axis=1)
    return by_epoch[by_epoch["epoch"] == last].reset_index(drop=True)
