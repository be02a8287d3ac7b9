"""`Grid`: a TOML file describing a grid of training runs, read and validated into frozen dataclasses.

A grid file has top-level settings (``replicates`` per stack, default ``seeds`` / ``epochs`` /
``precision`` / ``data_seed`` for its cells, ``analyses`` and ``eval_limit`` for each finished model,
``max_minutes`` per invocation), optional tables ``[recipe]`` (the training options every run shares),
``[model]`` (model config overrides) and ``[datasets.NAME]`` (dataset configs beside the paper's presets),
and one or more ``[[cells]]``, each a product of ``presets`` x ``batching`` x ``seeds``. See docs/sweeps.md.
Every problem raises one ValueError naming the field (``cells[2].seeds[0]``) and what is allowed.
"""

from __future__ import annotations

import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from lsa_interp.data.batching import BATCHING_METHODS
from lsa_interp.data.presets import DEFAULT_DATA_SEED, PRESETS, DatasetConfig
from lsa_interp.model.config import ModelConfig
from lsa_interp.sweep.analyses import ANALYSIS_NAMES
from lsa_interp.training.config import MAX_SEED, PRECISIONS, Recipe
from lsa_interp.training.stack_config import RunSpec, StackConfig

RECIPE_KEYS = tuple(f.name for f in fields(Recipe) if f.name not in ("precision", "model", "max_minutes"))
"""The `Recipe` options a grid's ``[recipe]`` table may set (shared by every run of the grid)."""
MAX_SEEDS = 10_000
"""The most seeds one cell may list (a range of 10^11 seeds was built in memory before any check)."""
CELL_DEFAULTS = ("seeds", "epochs", "precision", "data_seed")
"""Settings given at the top level as defaults and overridable per cell."""
TOP_LEVEL = (*CELL_DEFAULTS, "replicates", "analyses", "eval_limit", "max_minutes", "recipe", "model", "datasets")


@dataclass(frozen=True)
class Cell:
    """One block of the grid: every preset x batching method x seed, with one epochs / precision / data seed."""

    presets: tuple[str, ...]
    batching: tuple[str, ...]
    seeds: tuple[int, ...]
    epochs: int = 20
    precision: str = "fp32"
    data_seed: int = DEFAULT_DATA_SEED


@dataclass(frozen=True)
class Grid:
    """A validated grid file (build with `load_grid` or `parse_grid`)."""

    cells: tuple[Cell, ...]
    replicates: int = 8
    recipe: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    datasets: dict[str, DatasetConfig] = field(default_factory=dict)
    analyses: tuple[str, ...] = ()
    eval_limit: int | None = None
    max_minutes: float | None = None

    def dataset_config(self, name: str) -> DatasetConfig:
        """The grid's own dataset ``name``, else the paper's preset; KeyError for neither."""
        return self.datasets[name] if name in self.datasets else PRESETS[name]


def load_grid(path: str | Path) -> Grid:
    """Read and validate the grid file at ``path``; raises ValueError (prefixed with the path) for any problem but
    a run asked for by two cells, which `lsa_interp.sweep.plan.load_sweep_grid` also refuses."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: a directory; give a grid file (.toml)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such grid file") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text, which TOML must be ({err})") from None
    try:
        return parse_grid(data)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def parse_grid(data: dict[str, Any]) -> Grid:
    """Validate a grid read from TOML; raises ValueError ``"FIELD: problem; allowed"`` for the first problem."""
    allowed = (*TOP_LEVEL, "cells")
    _no_unknown(data, allowed, "")
    datasets = _datasets(data.get("datasets", {}))
    defaults = {key: data[key] for key in CELL_DEFAULTS if key in data}
    cells_data = data.get("cells")
    if cells_data is None:
        raise ValueError("cells: missing; add at least one [[cells]] table with presets and batching")
    if not isinstance(cells_data, list) or not cells_data or not all(isinstance(c, dict) for c in cells_data):
        raise ValueError("cells: must be one or more [[cells]] tables")
    names = (*PRESETS, *datasets)
    cells = tuple(_cell(cell, defaults, names, f"cells[{i}]") for i, cell in enumerate(cells_data))
    return Grid(
        cells=cells,
        replicates=_integer(data.get("replicates", Grid.replicates), "replicates", 1),
        recipe=_recipe(data.get("recipe", {})),
        model=_model(data.get("model", {})),
        datasets=datasets,
        analyses=_choices(data.get("analyses", []), "analyses", ANALYSIS_NAMES),
        eval_limit=None if "eval_limit" not in data else _integer(data["eval_limit"], "eval_limit", 1),
        max_minutes=None if "max_minutes" not in data else _number(data["max_minutes"], "max_minutes"),
    )


def _no_unknown(data: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        name = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ValueError(f"{name}: unknown key; allowed here: {', '.join(allowed)}")


def _integer(value: Any, name: str, minimum: int = 0, maximum: int | None = None) -> int:
    wanted = f"an integer >= {minimum}" if maximum is None else f"an integer in {minimum}..{maximum:,}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: must be {wanted}, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"{name}: must be {wanted}, got {value:,}")
    return value


def _number(value: Any, name: str, positive: bool = True) -> float:
    """``value`` as a float; raises ValueError when it is no number, or not positive where ``positive``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or (positive and value <= 0):
        raise ValueError(f"{name}: must be a {'positive ' if positive else ''}number, got {value!r}")
    return float(value)


def _choices(value: Any, name: str, allowed: tuple[str, ...], nonempty: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or (nonempty and not value):
        raise ValueError(f"{name}: must be a{' non-empty' if nonempty else ''} list of: {', '.join(allowed)}")
    for i, item in enumerate(value):
        if item not in allowed:
            raise ValueError(f"{name}[{i}]: unknown value {item!r}; choose one of: {', '.join(allowed)}")
    if len(set(value)) != len(value):
        raise ValueError(f"{name}: lists a value twice ({value})")
    return tuple(value)


def _seeds(value: Any, name: str) -> tuple[int, ...]:
    """A list of seeds, or a range ``{start = 0, stop = 5}`` (stop excluded, as Python's range)."""
    if isinstance(value, dict):
        _no_unknown(value, ("start", "stop"), name)
        if "stop" not in value:
            raise ValueError(f"{name}.stop: missing; a seed range is {{start = 0, stop = 5}} (stop excluded)")
        start = _integer(value.get("start", 0), f"{name}.start", maximum=MAX_SEED)
        stop = _integer(value["stop"], f"{name}.stop", start + 1, maximum=min(MAX_SEED + 1, start + MAX_SEEDS))
        return tuple(range(start, stop))
    if not isinstance(value, list) or not value or len(value) > MAX_SEEDS:
        raise ValueError(
            f"{name}: must be a list of 1 to {MAX_SEEDS:,} integers >= 0 or a range {{start = 0, stop = 5}}"
        )
    seeds = tuple(_integer(seed, f"{name}[{i}]", maximum=MAX_SEED) for i, seed in enumerate(value))
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{name}: lists a seed twice ({list(seeds)})")
    return seeds


def _cell(data: dict[str, Any], defaults: dict[str, Any], names: tuple[str, ...], where: str) -> Cell:
    _no_unknown(data, ("presets", "batching", *CELL_DEFAULTS), where)
    for key in ("presets", "batching"):
        if key not in data:
            raise ValueError(f"{where}.{key}: missing")
    merged = {**defaults, **data}
    if "seeds" not in merged:
        raise ValueError(f"{where}.seeds: missing (give seeds at the top level or in every cell)")
    precision = merged.get("precision", "fp32")
    if precision not in PRECISIONS:
        place = where if "precision" in data else ""
        name = f"{place}.precision" if place else "precision"
        raise ValueError(f"{name}: unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")
    at = lambda key: f"{where}.{key}" if key in data else key
    return Cell(
        presets=_choices(data["presets"], f"{where}.presets", names, nonempty=True),
        batching=_choices(data["batching"], f"{where}.batching", BATCHING_METHODS, nonempty=True),
        seeds=_seeds(merged["seeds"], at("seeds")),
        epochs=_integer(merged.get("epochs", 20), at("epochs"), 1),
        precision=precision,
        data_seed=_integer(merged.get("data_seed", DEFAULT_DATA_SEED), at("data_seed")),
    )


def _recipe(data: Any) -> dict[str, Any]:
    """The ``[recipe]`` table, type-checked against `Recipe`'s defaults and checked by building a stack."""
    if not isinstance(data, dict):
        raise ValueError("recipe: must be a table of training options")
    _no_unknown(data, RECIPE_KEYS, "recipe")
    defaults = {f.name: f.default for f in fields(Recipe) if f.default is not MISSING}
    recipe: dict[str, Any] = {}
    for key, value in data.items():
        default, name = defaults[key], f"recipe.{key}"
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"{name}: must be true or false, got {value!r}")
        elif isinstance(default, str):
            if not isinstance(value, str):
                raise ValueError(f"{name}: must be a string, got {value!r}")
        elif isinstance(default, tuple):
            if not isinstance(value, list) or len(value) != len(default):
                raise ValueError(f"{name}: must be a list of {len(default)} numbers, got {value!r}")
            value = tuple(_number(v, f"{name}[{i}]", positive=False) for i, v in enumerate(value))
        elif isinstance(default, float):
            value = _number(value, name, positive=False)  # its range is the recipe's to check (0 is a valid decay)
        else:
            value = _integer(value, name, 1)
        recipe[key] = value
    try:
        StackConfig(runs=(RunSpec("data"),), **recipe)
    except ValueError as err:
        raise ValueError(f"recipe: {err}") from None
    return recipe


def _model(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError("model: must be a table of model config overrides")
    try:
        ModelConfig.from_dict(data)
    except (TypeError, ValueError) as err:
        raise ValueError(f"model: {err}") from None
    return dict(data)


def _datasets(data: Any) -> dict[str, DatasetConfig]:
    if not isinstance(data, dict):
        raise ValueError("datasets: must hold one [datasets.NAME] table per dataset")
    configs = {}
    for name, options in data.items():
        if name in PRESETS:
            raise ValueError(f"datasets.{name}: a paper preset has this name; choose another")
        if not isinstance(options, dict):
            raise ValueError(f"datasets.{name}: must be a table of dataset options")
        try:
            configs[name] = DatasetConfig.from_dict({**options, "name": name})
        except (TypeError, ValueError) as err:
            raise ValueError(f"datasets.{name}: {err}") from None
    return configs
