"""One table of every trained run: its condition, seed, recipe, training time and every evaluated number.

A run is a model directory (a `save_model` checkpoint: ``config.json`` with the training metadata) that
holds an ``evaluation.json`` (written by ``lsa-interp ship``, ``lsa-interp evaluate --out`` or a sweep).
The table has one row per run and flat columns, so it reads back with ``pandas.read_csv``:

- ``run`` (the directory), ``preset``, ``batching``, ``condition`` (``preset/batching``), ``seed``, ``data_seed``,
  ``n_alphabets``, ``copy``, ``n_shots``, ``precision``, ``length_bucketing`` (batches sorted by length, a
  departure from the recipe; runs whose config predates the option had it), ``architecture`` (``hooked``, or
  ``reference``: the plain `nn.Transformer`), ``hardware``, ``epochs``, ``epochs_planned``, ``complete`` (all
  planned epochs trained), ``train_seconds``;
- the four Table 1 cells (`CELLS`), ``copy_accuracy`` and ``overall_seen_alphabets`` (val, copy rows
  included: the few-shot measure), ``acc_seen_<rule>`` / ``acc_new_<rule>`` per transformation;
- ``<rule>_<outcome>`` counts of the alternate-rule analysis on seen alphabets (``pred_applied_other_rule``
  counts pred tasks answered with the succ answer) and ``<rule>_as_<sibling>`` counts of the rule-family analysis
  (`lsa_interp.evaluation.rule_families`: tasks answered with a sibling rule's answer; evaluations written before
  it lack them) and ``sibling_percent``, the share of all the family rules' tasks answered so (NaN without them);
- ``n_val`` / ``n_new``: how many tasks were evaluated;
- ``matching_head``, ``matching_heads``, ``matching_best_head``, ``matching_best_score``: the sweep's
  matching-head analysis of the run (`matching_record`; empty for a run without one);
- ``fit_train``, ``fit_val``: exact match % on the train and val rows of ``fit.json`` beside the model
  (`lsa_interp.evaluation.fit`, written by a sweep's evaluation and by ``lsa-interp ship``; NaN without one).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from lsa_interp.data.dataset import read_manifest
from lsa_interp.data.presets import PRESETS, DatasetConfig, trained_data_seed
from lsa_interp.evaluation.metrics import OUTCOMES
from lsa_interp.evaluation.paper_tables import CELLS
from lsa_interp.utils import NUMBER, JsonObject, atomic_write, read_json_object

EVALUATION_FILE, CONFIG_FILE, FIT_FILE = "evaluation.json", "config.json", "fit.json"
MATCHING_FILE = Path("analysis") / "matching" / "matching_heads.json"
"""Where a sweep keeps a run's matching-head analysis, relative to the folder that holds its model directory."""
CHECKPOINT_MATCHING_FILE = MATCHING_FILE.name
"""Where a shipped checkpoint keeps the matching-head analysis of its stored weights, inside its own folder."""


EXPECTED = {
    EVALUATION_FILE: "an evaluation written by lsa-interp evaluate or ship",
    CONFIG_FILE: "a checkpoint's config.json with its training metadata (lsa-interp train or ship writes it)",
    FIT_FILE: "a training fit written by lsa-interp fit or ship",
    CHECKPOINT_MATCHING_FILE: "a matching-head analysis written by a sweep or lsa-interp ship",
}
"""What each file the table reads should be, by its name (ends the errors of a damaged one)."""
METADATA = {"preset": str, "batching": str, "seed": int, "data_seed": int, "precision": str, "hardware": str,
            "device": str, "epochs": int, "epochs_completed": NUMBER, "train_seconds": NUMBER, "train_config": dict,
            "train_config.batching": str, "train_config.precision": str, "train_config.length_bucketing": bool,
            "train_config.architecture": str, "train_config.epochs": int}  # fmt: skip
"""The training metadata the table reads (under ``metadata`` in ``config.json``), each optional, with its type."""


def _read(path: Path) -> JsonObject:
    """The JSON object in ``path``, one of the files in `EXPECTED`; raises ValueError naming it when damaged."""
    return read_json_object(path, EXPECTED[path.name])


def _percent(data: JsonObject, keys: str, needed: bool = True) -> float:
    """The ``percent`` of the cell at ``keys``: NaN where it is missing or null, or the cell is null (or missing,
    unless ``needed``). Raises ValueError naming the file where a ``needed`` cell is missing or a value is of the
    wrong type."""
    if needed:
        data.get(keys, (dict, type(None)))
    return float(data.get(f"{keys}.percent", NUMBER, math.nan))


def run_record(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The table row of one run. Raises FileNotFoundError when ``model_dir`` lacks ``config.json`` or
    ``evaluation.json``, ValueError naming the file when one of its files is not what `EXPECTED` says (no
    ``metadata``, no ``table1``, a value of the wrong type...)."""
    model_dir = Path(model_dir)
    for name in (CONFIG_FILE, EVALUATION_FILE):
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"{model_dir} holds no {name}; evaluate the run first (lsa-interp ship)")
    meta = read_metadata(model_dir, needed=True)
    evaluation = _read(model_dir / EVALUATION_FILE)
    field = evaluation.get
    field("table1", dict)
    recipe = meta.get("train_config") or {}
    evaluated = field("training_preset", str, None) or field("preset", str, None)
    preset = meta.get("preset") or evaluated
    batching = meta.get("batching") or recipe.get("batching", "unknown")
    dataset = PRESETS.get(preset) or _own_dataset(recipe.get("data_dir"), preset)
    epochs, planned, complete = training_progress(meta)
    row: dict[str, Any] = {
        "run": str(model_dir),
        "preset": preset,
        "batching": batching,
        "condition": f"{preset}/{batching}",
        "seed": meta.get("seed"),
        "data_seed": trained_data_seed(meta),
        "n_alphabets": dataset.n_alphabets if dataset else None,
        "copy": dataset.copy if dataset else None,
        "n_shots": dataset.n_shots if dataset else None,
        "precision": meta.get("precision") or recipe.get("precision", "fp32"),
        "length_bucketing": bool(recipe.get("length_bucketing", True)),
        "architecture": recipe.get("architecture", "hooked"),
        "hardware": meta.get("hardware", meta.get("device")),
        "epochs": epochs,
        "epochs_planned": planned,
        "complete": complete,
        "train_seconds": meta.get("train_seconds"),
        "n_val": field("n_tasks.seen_alphabets", int),
        "n_new": field("n_tasks.new_alphabets", int),
    }
    row.update({cell: _percent(evaluation, f"table1.{cell}", needed=False) for cell in CELLS})
    row["copy_accuracy"] = _percent(evaluation, "copy_vs_non_copy.seen_alphabets.copy")
    row["overall_seen_alphabets"] = _percent(evaluation, "overall.seen_alphabets")
    for prefix, split in (("acc_seen_", "seen_alphabets"), ("acc_new_", "new_alphabets")):
        for rule in field(f"by_transformation.{split}", dict):
            row[prefix + rule] = _percent(evaluation, f"by_transformation.{split}.{rule}")
    for rule in field("alternate_rule.seen_alphabets", dict, {}):
        keys = f"alternate_rule.seen_alphabets.{rule}"
        counts = field(keys, dict)
        row.update({f"{rule}_{outcome}": field(f"{keys}.{outcome}", int) for outcome in OUTCOMES if outcome in counts})
    family_tasks = siblings = 0
    for rule in field("rule_families.seen_alphabets", dict, {}):
        keys = f"rule_families.seen_alphabets.{rule}"
        for sibling in field(f"{keys}.as_rule", dict):
            row[f"{rule}_as_{sibling}"] = count = field(f"{keys}.as_rule.{sibling}", int)
            siblings += count
        family_tasks += field(f"{keys}.total", int)
    row["sibling_percent"] = 100.0 * siblings / family_tasks if family_tasks else math.nan
    row.update(matching_record(model_dir))
    row.update(fit_record(model_dir))
    return row


def _own_dataset(data_dir: object, preset: object) -> DatasetConfig | None:
    """The config of a dataset that is no paper preset (a grid's ``[datasets.NAME]``) from the manifest of the
    folder the run trained on, while that folder is there and holds ``preset``; else None. Raises ValueError
    naming the manifest when it is damaged."""
    if not isinstance(data_dir, str) or not (Path(data_dir) / "manifest.json").is_file():
        return None
    manifest = read_manifest(data_dir)
    return DatasetConfig.from_dict(manifest["config"]) if manifest["preset"] == preset else None


def read_metadata(model_dir: str | os.PathLike, needed: bool = False) -> dict[str, Any]:
    """The training metadata in a model directory's ``config.json`` (empty when it has none, unless ``needed``).
    Raises ValueError naming the file when it is not a JSON object, lacks the metadata it ``needed`` or has a
    setting of `METADATA` of the wrong type."""
    config = _read(Path(model_dir) / CONFIG_FILE)
    meta = config.get("metadata", dict) if needed else config.get("metadata", dict, {})
    for keys, kinds in METADATA.items():
        config.get(f"metadata.{keys}", kinds, None)
    return meta


def fit_record(model_dir: str | os.PathLike) -> dict[str, float]:
    """``fit_train`` and ``fit_val`` (exact match %) from the run's ``fit.json``; NaN without one. Raises
    ValueError naming the file when it is damaged (no ``overall``, a percent that is not a number...)."""
    path = Path(model_dir) / FIT_FILE
    if not path.is_file():
        return {"fit_train": math.nan, "fit_val": math.nan}
    fit = _read(path)
    fit.get("overall", dict)
    return {f"fit_{split}": _percent(fit, f"overall.{split}", needed=False) for split in ("train", "val")}


def training_progress(meta: dict[str, Any]) -> tuple[float | int | None, int | None, bool]:
    """(epochs trained, epochs planned, whether all were trained) from a checkpoint's training metadata."""
    epochs = meta.get("epochs_completed")
    planned = meta.get("epochs") or (meta.get("train_config") or {}).get("epochs")
    return epochs, planned, epochs is not None and planned is not None and epochs >= planned - 1e-6


def matching_record(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's matching-head columns from the checkpoint's own analysis, else the sweep's beside its model
    (None / NaN without either): ``matching_head`` (a head reached the threshold), ``matching_heads`` (their
    labels), ``matching_best_head`` and ``matching_best_score``. Raises ValueError naming the file when it is
    damaged (no ``summary``, a value of the wrong type...)."""
    path = Path(model_dir) / CHECKPOINT_MATCHING_FILE
    if not path.is_file():
        path = Path(model_dir).parent / MATCHING_FILE
    if not path.is_file():
        return {
            "matching_head": None,
            "matching_heads": None,
            "matching_best_head": None,
            "matching_best_score": math.nan,
        }
    analysis = _read(path)  # the checkpoint's own or the sweep's: both named matching_heads.json
    heads = analysis.get("summary.matching_heads", str)
    return {
        "matching_head": heads != "none",
        "matching_heads": heads,
        "matching_best_head": analysis.get("summary.best_head", str),
        "matching_best_score": float(analysis.get("summary.best_score", NUMBER)),
    }


def find_runs(roots: Iterable[str | os.PathLike]) -> list[Path]:
    """Every evaluated model directory at or under ``roots`` (sorted); raises FileNotFoundError for a root
    that does not exist."""
    found: set[Path] = set()
    for root in map(Path, roots):
        if not root.exists():
            raise FileNotFoundError(f"{root} does not exist")
        for path in [root, *root.rglob("*")]:
            if path.is_dir() and (path / CONFIG_FILE).is_file() and (path / EVALUATION_FILE).is_file():
                found.add(path)
    return sorted(found)


SAME_RUN = ("preset", "batching", "seed", "data_seed", "precision", "architecture", "length_bucketing", "hardware",
            "epochs", "train_seconds")  # fmt: skip
"""Columns that together name one trained run: its condition and recipe, its hardware and training time (to the
tenth of a second). Not its evaluation: a shipped copy evaluated again (`lsa-interp evaluate --card`, on other
hardware) is still the same run."""


def _one_row_per_run(frame: pd.DataFrame) -> pd.DataFrame:
    """A run found twice (shipped into checkpoints/ with its sweep's evaluation, and in the sweep's weightless
    records under analyses/runs/) becomes one row: the copy with weights (its evaluation, where the two differ;
    the first by path of several), its empty cells (the matching-head analysis, which stays beside the records)
    filled from the other. The index is left as it comes (`runs_table` numbers the rows)."""
    key = [column for column in SAME_RUN if column in frame]
    twice = frame.duplicated(key, keep=False)
    if not twice.any():
        return frame
    found = frame[twice]
    weightless = ~found["run"].map(lambda run: (Path(run) / "model.safetensors").is_file())
    found = found.assign(_weightless=weightless).sort_values(["_weightless", "run"])
    merged = found.drop(columns="_weightless").groupby(key, dropna=False, sort=False, as_index=False).first()
    return pd.concat([frame[~twice], merged[frame.columns]])


def runs_table(model_dirs: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """One row per run (see the module docstring; a run found twice, shipped and in a sweep's records, once),
    sorted by condition and seed."""
    rows = [run_record(path) for path in model_dirs]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    frame = _one_row_per_run(frame)
    return frame.sort_values(["preset", "batching", "seed", "run"]).reset_index(drop=True)


def write_runs_table(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write ``frame`` as CSV at ``path`` atomically; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))
    return path


def read_runs_table(path: str | os.PathLike) -> pd.DataFrame:
    """The table written by `write_runs_table`. Raises FileNotFoundError when ``path`` does not exist, ValueError
    naming the file when it lacks a run's identity (preset, batching, seed, complete) or an accuracy or count column
    holds something other than a number (a hand-edited table: the summaries failed with a TypeError)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no runs table at {path}; write one with lsa-interp results --runs DIR")
    frame = pd.read_csv(path)
    again = "write it again with lsa-interp results --runs DIR"
    missing = [column for column in ("preset", "batching", "seed", "complete") if column not in frame]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)}; {again}")
    for column in (*CELLS, "seed", "epochs"):
        if column in frame and not pd.api.types.is_numeric_dtype(frame[column]):
            bad = next(v for v in frame[column] if pd.notna(v) and pd.isna(pd.to_numeric(v, errors="coerce")))
            raise ValueError(f"{path}: column {column} holds {bad!r}, not a number; {again}")
    return frame
