"""The work of a sweep as jobs: each stack to train with its runs, each run's evaluation and analyses."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from lsa_interp.sweep.grid import Grid
from lsa_interp.sweep.plan import (
    Stack,
    analysis_dir,
    data_dir,
    evaluated_with,
    expand,
    model_dir,
    stack_config,
    stack_dir,
)
from lsa_interp.training.stack_config import StackConfig


@dataclass(frozen=True)
class RunJob:
    """The after-training work of one run: its evaluation (of at most ``eval_limit`` rows per split) and analyses.

    ``in_grid`` is False for a run the grid no longer asks for that shares a stack with one it does: the stack
    trains it (a stack resumes with the runs it started with), but it is not evaluated, counted or tabulated.
    """

    name: str
    model_dir: Path
    data_dir: Path
    analyses: tuple[tuple[str, Path], ...]
    eval_limit: int | None = None
    in_grid: bool = True

    @property
    def evaluated(self) -> bool:
        """Whether the run has its model and an ``evaluation.json`` of ``eval_limit`` rows per split."""
        return evaluated_with(self.model_dir, self.eval_limit)

    def missing_analyses(self) -> list[tuple[str, Path]]:
        """The grid's analyses of this run that have not written their files yet."""
        return [(name, out) for name, out in self.analyses if not out.is_dir()]


@dataclass(frozen=True)
class StackJob:
    """One stack to train, and its runs."""

    name: str
    directory: Path
    config: StackConfig
    runs: tuple[RunJob, ...]

    @property
    def grid_runs(self) -> tuple[RunJob, ...]:
        """The runs of the stack that the grid asks for."""
        return tuple(run for run in self.runs if run.in_grid)

    @property
    def done(self) -> bool:
        """Whether every run of the stack that the grid asks for is trained, evaluated and analysed."""
        return all(run.evaluated and not run.missing_analyses() for run in self.grid_runs)

    def tasks(self, steps: int) -> int:
        """Training tasks in ``steps`` steps of the stack (a full batch per run and step)."""
        return steps * self.config.batch_size * self.config.replicates


def stack_jobs(grid: Grid, out: Path, stacks: list[Stack]) -> list[StackJob]:
    """The jobs of ``stacks`` in the sweep directory ``out``."""
    wanted = {run.name for run in expand(grid)}
    return [
        StackJob(
            stack.name,
            stack_dir(out, stack),
            stack_config(grid, out, stack),
            tuple(
                RunJob(
                    run.name,
                    model_dir(out, stack, i),
                    data_dir(out, run),
                    tuple((name, analysis_dir(out, stack, i, name)) for name in grid.analyses),
                    grid.eval_limit,
                    run.name in wanted,
                )
                for i, run in enumerate(stack.runs)
            ),
        )
        for stack in stacks
    ]


def past(deadline: float | None) -> bool:
    """Whether the wall-clock ``deadline`` (time.time()) has passed."""
    return deadline is not None and time.time() >= deadline
