"""`run_sweep`: plan a grid into stacks, make the datasets, train, evaluate and analyse, collect the table.

In-process by default (one stack after another on this machine's GPU or CPU), or on a Ray cluster
(`lsa_interp.sweep.ray_runner`). Every unit of work is skipped when its output exists, so running the same
command again continues where the last one stopped: finished runs are skipped, an interrupted stack
resumes from its saved state. ``max_minutes`` bounds one invocation (no new work starts after it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from lsa_interp.data.dataset import read_manifest
from lsa_interp.evaluation.runs_table import runs_table, write_runs_table
from lsa_interp.sweep.failures import Failure, FailureLog
from lsa_interp.sweep.grid import Grid
from lsa_interp.sweep.jobs import StackJob, stack_jobs
from lsa_interp.sweep.local_runner import execute_local
from lsa_interp.sweep.plan import GRID_COPY, PLAN_FILE, RESULTS_FILE, data_dir, expand, load_sweep_grid, plan_stacks
from lsa_interp.sweep.progress import SweepProgress
from lsa_interp.sweep.ray_runner import check_address, execute_ray, require_ray
from lsa_interp.sweep.work import ensure_dataset, steps_logged, training_rows
from lsa_interp.training.config import Recipe
from lsa_interp.utils import atomic_write


@dataclass(frozen=True)
class SweepSummary:
    """What one invocation leaves: runs in the grid, runs finished (model + evaluation), the results table, and
    the units of work that failed in this invocation (each with its traceback's file)."""

    runs: int
    finished: int
    results: Path | None
    failures: tuple[Failure, ...] = ()

    @property
    def complete(self) -> bool:
        """Whether every run of the grid is finished."""
        return self.finished == self.runs


def run_sweep(
    grid_path: str | Path,
    out: str | Path,
    ray: str | None = None,
    max_minutes: float | None = None,
    progress: bool = True,
) -> SweepSummary:
    """Run (or continue) the sweep of the grid file ``grid_path`` in directory ``out``.

    ``ray``: None runs in-process; ``"auto"`` or a cluster address runs the stacks as Ray tasks.
    ``max_minutes`` (default: the grid's) bounds this invocation. A unit of work that raises is recorded (its
    traceback in ``out/failures/``) and the rest goes on: see `SweepSummary.failures`. Raises ValueError for a bad
    grid, an ``out`` that is neither empty nor a sweep's directory, a recipe batch larger than a dataset's training
    rows, a grid that does not match the sweep already in ``out``, ``ray`` without Ray installed or an address
    where nothing answers, before any work; `StoppedBySignal` when SIGINT/SIGTERM stopped training (state saved).
    """
    grid, out = load_sweep_grid(grid_path), Path(out)
    if out.is_dir() and any(out.iterdir()) and not (out / PLAN_FILE).is_file():
        raise ValueError(
            f"{out} is not empty and holds no sweep ({PLAN_FILE}): give a new or empty --out, or the directory of "
            "the sweep to continue"
        )
    if ray is not None:
        require_ray()
        check_address(ray)
    _check_batches_fit(grid, out)
    stacks = plan_stacks(grid, out)
    text = Path(grid_path).read_text(encoding="utf-8")
    atomic_write(out / GRID_COPY, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    minutes = max_minutes if max_minutes is not None else grid.max_minutes
    deadline = None if minutes is None else time.time() + 60 * minutes
    every_job = stack_jobs(grid, out, stacks)
    jobs = [job for job in every_job if not job.done]
    runs = [run for job in every_job for run in job.grid_runs]
    needed = {run.data_dir for job in jobs for run in job.runs}
    for run in {run.data_key: run for stack in stacks for run in stack.runs}.values():
        if data_dir(out, run) in needed:
            ensure_dataset(grid.dataset_config(run.dataset), run.data_seed, data_dir(out, run))
    finished_before = sum(run.evaluated for run in runs)
    estimates = {job.name: (_estimate(job), job.tasks(steps_logged(job.directory))) for job in jobs}
    failures = FailureLog(out)
    with SweepProgress(len(runs), finished_before, estimates, enabled=progress) as display:
        if ray is None:
            execute_local(jobs, grid, deadline, display, failures)
        else:
            execute_ray(jobs, grid, deadline, display, failures, ray)
    finished = [run.model_dir for run in runs if run.evaluated]
    results = None
    if finished:
        results = out / RESULTS_FILE
        write_runs_table(runs_table(finished), results)
    return SweepSummary(len(runs), len(finished), results, tuple(failures.failures))


def _check_batches_fit(grid: Grid, out: Path) -> None:
    """Raise ValueError where the recipe's batch is larger than a dataset's training rows, before anything is
    written (each of its stacks would otherwise fail at its first epoch and be recorded as a failure)."""
    batch = grid.recipe.get("batch_size", Recipe.batch_size)
    for run in {run.data_key: run for run in expand(grid)}.values():
        rows = training_rows(grid.dataset_config(run.dataset), run.data_seed, data_dir(out, run))
        if batch > rows:
            raise ValueError(
                f"the recipe's batch_size {batch:,} is larger than the {rows:,} training rows of {run.dataset} "
                f"(data seed {run.data_seed}): a batch is at most a split's rows"
            )


def _estimate(job: StackJob) -> int:
    """Training tasks of the stack, from its datasets' sizes (the slowest run bounds a lock-step stack)."""
    cfg = job.config
    longest = max(
        spec.epochs * -(-read_manifest(run.data_dir)["files"]["train"]["rows"] // cfg.batch_size)
        for spec, run in zip(cfg.runs, job.runs)
    )
    return job.tasks(min(longest, cfg.max_steps or longest))
