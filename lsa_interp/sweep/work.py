"""The units of work of a sweep, each idempotent: a dataset, a stack's training, a run's evaluation, an analysis.

Each unit checks whether its output is already there and does nothing then; each writes its output
atomically, so a unit killed half-way leaves nothing that a later invocation would take for finished.
The in-process runner calls them directly, the Ray runner as remote tasks.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsa_interp.data.dataset import MANIFEST, load_dataset, read_manifest, save_dataset
from lsa_interp.data.generate import generate_dataset, split_sizes
from lsa_interp.data.presets import DatasetConfig
from lsa_interp.evaluation import evaluate_model
from lsa_interp.evaluation.fit import FIT_FILES, FIT_ROWS, FIT_SPLITS, training_fit, write_fit
from lsa_interp.evaluation.result import SPLIT_OF
from lsa_interp.evaluation.run import DEFAULT_BATCH_SIZE
from lsa_interp.model.checkpoint import CONFIG_FILE as MODEL_CONFIG_FILE, load_model
from lsa_interp.sweep.analyses import analysis_function
from lsa_interp.sweep.plan import EVALUATION_FILE, evaluated_with, stored_value
from lsa_interp.training.run_dir import (
    CONFIG_FILE,
    DONE_FILE,
    METRICS_FILE,
    MODEL_DIR,
    StoppedBySignal,
    replicate_dir,
)
from lsa_interp.training.stack_config import StackConfig
from lsa_interp.training.stack_trainer import StackTrainer
from lsa_interp.utils import atomic_write, read_json_lines

GPU_EVAL_BATCH = 4096
"""Tasks per greedy-decoding batch when a sweep evaluates on a GPU."""


def _saved(config: DatasetConfig, seed: int, directory: Path) -> dict[str, Any] | None:
    """The manifest of the dataset saved in ``directory`` if it is ``config`` with ``seed`` (the same name, seed and
    options), else None."""
    if not (directory / "manifest.json").is_file():
        return None
    manifest = read_manifest(directory)
    options = json.loads(json.dumps(config.to_dict()))  # as the manifest holds them: tuples become lists
    return (
        manifest if (manifest["preset"], manifest["seed"], manifest["config"]) == (config.name, seed, options) else None
    )


def ensure_dataset(config: DatasetConfig, seed: int, directory: Path) -> bool:
    """Generate and save ``config`` with ``seed`` into ``directory`` unless that dataset is there; True if made.

    ``directory`` is the sweep's own (OUT/data/...): another dataset there is replaced, and so is a folder without a
    manifest (a copy cut short), which `save_dataset` would not replace."""
    if _saved(config, seed, directory) is not None:
        return False
    if directory.is_dir() and not (directory / MANIFEST).is_file():
        shutil.rmtree(directory)
    save_dataset(generate_dataset(config, seed=seed), directory, force=True)
    return True


def training_rows(config: DatasetConfig, seed: int, directory: Path) -> int:
    """The train split's rows of ``config`` with ``seed``: from the manifest in ``directory`` where that dataset is
    saved, else counted without building it (`split_sizes`: 0.1-4 s for the paper's presets)."""
    manifest = _saved(config, seed, directory)
    return manifest["files"]["train"]["rows"] if manifest is not None else split_sizes(config, seed)["train"]


def stack_finished(directory: Path, config: StackConfig) -> bool:
    """Whether the stack in ``directory`` has trained all it will: its ``done`` marker, or, under the recipe's
    ``max_steps``, every replicate's final model written at that step or after all its epochs (a stack stopped
    early by --max-minutes and killed while saving has models of an earlier step: not finished)."""
    if (directory / DONE_FILE).is_file():
        return True
    models = [directory / replicate_dir(i) / MODEL_DIR / MODEL_CONFIG_FILE for i in range(config.replicates)]
    if config.max_steps is None or not all(path.is_file() for path in models):
        return False
    for path in models:
        meta = json.loads(path.read_text(encoding="utf-8"))["metadata"]
        all_epochs = (meta.get("epochs_completed") or 0) >= meta.get("train_config", {}).get("epochs", math.inf)
        if meta.get("steps", 0) < config.max_steps and not all_epochs:
            return False
    return True


def steps_logged(directory: Path) -> int:
    """The step of the last step record in the stack's ``metrics.jsonl`` (0 when there is none)."""
    steps = [
        record.get("step", 0) for record in read_json_lines(directory / METRICS_FILE) if record.get("type") == "step"
    ]
    return steps[-1] if steps else 0


def train_stack(
    config: StackConfig,
    directory: Path,
    deadline: float | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> bool:
    """Train (or resume) the stack in ``directory`` until it ends or the wall-clock ``deadline`` (time.time()).

    A new stack is started; one with a saved state resumes from it. The minutes left are counted once the trainer
    is built (its data and model take seconds), so training stops at the deadline. Returns whether the stack
    finished. Raises `StoppedBySignal` when SIGINT or SIGTERM stopped the training (its state saved).
    """
    if stack_finished(directory, config):
        return True
    if deadline is not None and deadline <= time.time():
        return False
    if not (directory / CONFIG_FILE).is_file():
        trainer = StackTrainer.start(config, directory, force=True)
    else:
        point_at_datasets(directory, config)
        trainer = StackTrainer.resume(directory)
    minutes = None if deadline is None else (deadline - time.time()) / 60
    if minutes is not None and minutes <= 0:
        return False
    trainer.run(progress=progress, max_minutes=minutes)
    if trainer.stopped_by is not None:
        raise StoppedBySignal(trainer.stopped_by)
    return stack_finished(directory, config)


def point_at_datasets(directory: Path, config: StackConfig) -> None:
    """Make the saved config of the stack in ``directory`` name this sweep's datasets (``config``'s, matched by
    run name): a stack carried to another machine saved the absolute paths of the checkout it started in, and
    the sweep there makes the same datasets again from their seeds under its own directory."""
    path = directory / CONFIG_FILE
    saved = json.loads(path.read_text(encoding="utf-8"))
    wanted = {run.name: run.data_dir for run in config.runs if run.name}
    moved = [
        run for run in saved.get("runs", []) if run.get("name") in wanted and run["data_dir"] != wanted[run["name"]]
    ]
    for run in moved:
        run["data_dir"] = wanted[run["name"]]
    if moved:
        atomic_write(path, lambda tmp: tmp.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8"))


def evaluate_run(model_dir: Path, data_dir: Path, name: str, limit: int | None = None, device: str = "cpu") -> bool:
    """Write ``evaluation.json`` beside the model (val and new-alphabet splits of its dataset, at most ``limit``
    rows each) and ``fit.json`` (`training_fit` on `FIT_ROWS` train and val rows, or ``limit`` if smaller), each
    unless it is there with that limit (a grid whose ``eval_limit`` changed has its runs evaluated again).

    Returns whether it wrote the evaluation. Raises FileNotFoundError when the model or dataset is missing.
    """
    target, fit_target = model_dir / EVALUATION_FILE, model_dir / FIT_FILES["json"]
    fit_rows = min(FIT_ROWS, limit or FIT_ROWS)
    fit_done = stored_value(fit_target, "rows") == fit_rows
    evaluated = evaluated_with(model_dir, limit)
    if evaluated and fit_done:
        return False
    model = load_model(model_dir, device=device)
    # On a GPU a greedy decode step costs launches, not arithmetic: larger batches evaluate several times faster.
    batch_size = GPU_EVAL_BATCH if model.device.type == "cuda" else DEFAULT_BATCH_SIZE
    needed = (() if fit_done else FIT_SPLITS) + (() if evaluated else tuple(SPLIT_OF.values()))
    dataset = load_dataset(data_dir, splits=tuple(dict.fromkeys(needed)))  # each split read once
    if not fit_done:
        write_fit(training_fit(model, dataset, fit_rows, name, batch_size), model_dir, page=False)
    if evaluated:
        return False
    result = evaluate_model(model, dataset, limit=limit, model_name=name, batch_size=batch_size)
    atomic_write(target, lambda tmp: tmp.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8"))
    return True


def analyse_run(model_dir: Path, out_dir: Path, analysis: str, name: str, device: str = "cpu") -> bool:
    """Run ``analysis`` on the model and write its files into ``out_dir`` unless it exists; True if it ran."""
    if out_dir.is_dir():
        return False
    staging = out_dir.with_name(f".{out_dir.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    analysis_function(analysis)(load_model(model_dir, device=device), name, 0).write(staging)
    staging.rename(out_dir)
    return True
