"""From a `Grid` to stacks: the grid's runs, their packing into stacks, and the sweep directory's layout.

The plan is saved as ``DIR/plan.json`` on the first invocation and kept: a later invocation with a grid
that adds runs packs only the new runs into new stacks, so an interrupted stack always resumes with the
runs it started with. A grid whose recipe, model or existing runs differ from the saved plan is refused.

Layout of a sweep directory::

    DIR/grid.toml, DIR/plan.json, DIR/results.csv
    DIR/data/{dataset}-d{data_seed}/               one saved dataset per dataset and data seed
    DIR/stacks/stack-{k}/                          a StackTrainer run directory
    DIR/stacks/stack-{k}/replicate-{i}/model/      run i's model, with evaluation.json beside config.json
    DIR/stacks/stack-{k}/replicate-{i}/analysis/{name}/   the grid's analyses of that model
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lsa_interp.data.presets import DEFAULT_DATA_SEED
from lsa_interp.sweep.grid import Grid, load_grid
from lsa_interp.training.run_dir import MODEL_DIR, replicate_dir
from lsa_interp.training.stack_config import RunSpec, StackConfig
from lsa_interp.utils import atomic_write

PLAN_FILE, GRID_COPY, RESULTS_FILE, EVALUATION_FILE = "plan.json", "grid.toml", "results.csv", "evaluation.json"
_ABSENT = object()


@dataclass(frozen=True)
class SweepRun:
    """One run of the grid: a dataset (preset or the grid's own) trained with one batching method and seed."""

    dataset: str
    batching: str
    seed: int
    precision: str = "fp32"
    epochs: int = 20
    data_seed: int = DEFAULT_DATA_SEED

    @property
    def name(self) -> str:
        """``{dataset}-{batching}-s{seed}``, with ``-{precision}`` unless fp32 and ``-d{data_seed}`` unless 0."""
        suffix = (f"-{self.precision}" if self.precision != "fp32" else "") + (
            f"-d{self.data_seed}" if self.data_seed else ""
        )
        return f"{self.dataset}-{self.batching}-s{self.seed}{suffix}"

    @property
    def data_key(self) -> str:
        """The name of this run's dataset directory under ``DIR/data``."""
        return f"{self.dataset}-d{self.data_seed}"


@dataclass(frozen=True)
class Stack:
    """Runs trained together in one `StackTrainer` run directory ``DIR/stacks/{name}``."""

    name: str
    runs: tuple[SweepRun, ...]


def expand(grid: Grid) -> list[SweepRun]:
    """Every run of the grid in file order; raises ValueError when two cells ask for the same run."""
    runs: dict[str, SweepRun] = {}
    for index, cell in enumerate(grid.cells):
        for dataset in cell.presets:
            for batching in cell.batching:
                for seed in cell.seeds:
                    run = SweepRun(dataset, batching, seed, cell.precision, cell.epochs, cell.data_seed)
                    if run.name in runs:
                        raise ValueError(f"cells[{index}]: run {run.name} is already in an earlier cell")
                    runs[run.name] = run
    return list(runs.values())


def load_sweep_grid(path: str | Path) -> Grid:
    """The grid of the file at ``path`` (`load_grid`), its runs checked by `expand`; raises ValueError prefixed with
    the path for any problem, two cells asking for the same run included."""
    grid = load_grid(path)
    try:
        expand(grid)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return grid


def pack(runs: list[SweepRun], replicates: int, first_index: int = 0) -> list[Stack]:
    """Stacks of at most ``replicates`` runs of one precision (the grid's model config is shared by all).

    Runs keep their order within a precision, so runs of one preset (similar epoch lengths) share stacks.
    """
    by_precision: dict[str, list[SweepRun]] = {}
    for run in runs:
        by_precision.setdefault(run.precision, []).append(run)
    chunks = [group[i : i + replicates] for group in by_precision.values() for i in range(0, len(group), replicates)]
    return [Stack(f"stack-{first_index + k:03d}", tuple(chunk)) for k, chunk in enumerate(chunks)]


def plan_stacks(grid: Grid, out: Path) -> list[Stack]:
    """The stacks holding the grid's runs: the saved plan's, plus new stacks for runs it lacks (saved).

    Raises ValueError when the saved plan has another recipe, model or definition of a dataset the grid defines
    (``[datasets.NAME]``), or a run of the same name differs.
    """
    runs = expand(grid)
    path = out / PLAN_FILE
    recipe = json.loads(json.dumps(grid.recipe))
    datasets = {name: json.loads(json.dumps(config.to_dict())) for name, config in grid.datasets.items()}
    stacks: list[Stack] = []
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        differ = [
            f"{table}.{key}"
            for table, ours, theirs in (("recipe", recipe, saved["recipe"]), ("model", grid.model, saved["model"]))
            for key in sorted(set(ours) | set(theirs))
            if ours.get(key) != theirs.get(key)
        ]
        if differ:
            verb = "differs" if len(differ) == 1 else "differ"
            raise ValueError(f"the grid's {', '.join(differ)} {verb} from the sweep in {out} ({path}); use a new --out")
        changed = sorted(
            name for name, config in saved.get("datasets", {}).items() if datasets.get(name, config) != config
        )
        if changed:
            raise ValueError(
                f"the grid's dataset {changed[0]} differs from the sweep in {out} ({path}); use a new --out"
            )
        datasets = {**saved.get("datasets", {}), **datasets}
        stacks = [Stack(s["name"], tuple(SweepRun(**r) for r in s["runs"])) for s in saved["stacks"]]
    planned = {run.name: run for stack in stacks for run in stack.runs}
    for run in runs:
        if run.name in planned and planned[run.name] != run:
            raise ValueError(f"run {run.name} was planned in {out} as {planned[run.name]}; use a new --out")
    new = [run for run in runs if run.name not in planned]
    if new:  # a grid has at least one run, so a sweep's first invocation always writes its plan
        stacks += pack(new, grid.replicates, first_index=len(stacks))
        document = {
            "recipe": recipe,
            "model": grid.model,
            "datasets": datasets,
            "stacks": [{"name": s.name, "runs": [asdict(r) for r in s.runs]} for s in stacks],
        }
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8"))
    wanted = {run.name for run in runs}
    return [stack for stack in stacks if any(run.name in wanted for run in stack.runs)]


def data_dir(out: Path, run: SweepRun) -> Path:
    """Where the run's dataset is saved."""
    return out / "data" / run.data_key


def stack_dir(out: Path, stack: Stack) -> Path:
    """The stack's `StackTrainer` run directory."""
    return out / "stacks" / stack.name


def model_dir(out: Path, stack: Stack, index: int) -> Path:
    """Where replicate ``index`` of ``stack`` leaves its final model (and its ``evaluation.json``)."""
    return stack_dir(out, stack) / replicate_dir(index) / MODEL_DIR


def stored_value(path: Path, key: str, absent: Any = None) -> Any:
    """``key`` of the JSON object in ``path`` (None where the object lacks it); ``absent`` when the file is missing
    or not readable JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get(key)
    except (FileNotFoundError, json.JSONDecodeError):
        return absent


def evaluated_with(model: Path, limit: int | None) -> bool:
    """Whether the model directory ``model`` holds an ``evaluation.json`` of at most ``limit`` rows per split (a
    grid whose ``eval_limit`` changed has its runs evaluated again)."""
    return stored_value(model / EVALUATION_FILE, "limit", absent=_ABSENT) == limit


def analysis_dir(out: Path, stack: Stack, index: int, analysis: str) -> Path:
    """Where analysis ``analysis`` of replicate ``index`` writes its files."""
    return stack_dir(out, stack) / replicate_dir(index) / "analysis" / analysis


def stack_config(grid: Grid, out: Path, stack: Stack) -> StackConfig:
    """The `StackConfig` that trains ``stack``: one `RunSpec` per run, the grid's recipe and model."""
    specs = tuple(
        RunSpec(str(data_dir(out, run).resolve()), run.seed, run.batching, run.epochs, run.dataset, run.name)
        for run in stack.runs
    )
    return StackConfig(runs=specs, precision=stack.runs[0].precision, model=dict(grid.model), **grid.recipe)
