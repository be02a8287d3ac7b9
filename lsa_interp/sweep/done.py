"""Which runs of a grid are already trained: evaluated models found anywhere, trained by a sweep or on their own.

A sweep's replicate names its run in its metadata (``run``). A model trained on its own (``lsa-interp train``,
e.g. a long CPU run later shipped under ``checkpoints/``) carries no such name; it stands for the grid run with
its preset, batching method, seed, precision, epochs and data seed when it trained the grid's recipe: the same
optimizer and schedule settings, the reference's batches (no length bucketing), the grid's model and the
hook-point architecture. Settings that change how a step runs but not what it computes (device, CUDA graph,
compile, attention kernel, packing, micro-batches, validation rows, checkpointing) do not matter.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import MISSING, fields
from typing import Any

from lsa_interp.data.presets import trained_data_seed
from lsa_interp.evaluation.runs_table import find_runs, read_metadata, training_progress
from lsa_interp.sweep.grid import Grid
from lsa_interp.sweep.plan import SweepRun, expand
from lsa_interp.training.config import LEGACY_LENGTH_BUCKETING, Recipe

RECIPE_SETTINGS = ("batch_size", "lr", "betas", "weight_decay", "warmup_start", "final_lr_factor", "length_bucketing")
"""The `Recipe` settings that change what a run learns: a model trained on its own must match the grid's."""

_DEFAULTS = {f.name: f.default for f in fields(Recipe) if f.default is not MISSING}


def _same(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, tuple):
        return isinstance(value, list | tuple) and len(value) == len(wanted) and all(map(_same, value, wanted))
    if isinstance(wanted, bool) or not isinstance(wanted, int | float):
        return value == wanted
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value - wanted) <= 1e-12 * abs(wanted)


def grid_run_name(meta: dict[str, Any], grid: Grid) -> str | None:
    """The name of the grid run that a model's training metadata stands for, or None: a sweep replicate's own
    ``run``; for a model trained on its own, the run of ``grid`` with its preset, batching, seed, precision, epochs
    and data seed, when it trained the grid's recipe (`RECIPE_SETTINGS`, model overrides, architecture)."""
    if meta.get("run"):
        return str(meta["run"])
    recipe = meta.get("train_config")
    if not isinstance(recipe, dict) or meta.get("seed") is None or not meta.get("preset"):
        return None
    wanted = {key: grid.recipe.get(key, _DEFAULTS[key]) for key in RECIPE_SETTINGS}
    settings = {**recipe, "length_bucketing": recipe.get("length_bucketing", LEGACY_LENGTH_BUCKETING)}
    if not all(key in settings and _same(settings[key], value) for key, value in wanted.items()):
        return None
    if recipe.get("model", {}) != grid.model or recipe.get("architecture", "hooked") != "hooked":
        return None
    _, planned, _ = training_progress(meta)
    batching = meta.get("batching") or recipe.get("batching")
    if planned is None or batching is None:
        return None
    precision = meta.get("precision") or recipe.get("precision", "fp32")
    run = SweepRun(meta["preset"], batching, int(meta["seed"]), precision, int(planned), trained_data_seed(meta))
    return run.name if run in expand(grid) else None


def finished_runs(roots: Iterable[str | os.PathLike], grid: Grid) -> set[str]:
    """Names of the runs (`grid_run_name`) of the models under ``roots`` that trained all their epochs and were
    evaluated.

    Raises FileNotFoundError for a root that does not exist."""
    names = set()
    for model_dir in find_runs(roots):
        meta = read_metadata(model_dir)
        name = grid_run_name(meta, grid)
        if name and training_progress(meta)[2]:
            names.add(name)
    return names
