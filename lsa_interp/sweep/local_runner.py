"""Run a sweep's stacks in this process, one after another (one GPU, or the CPU)."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from lsa_interp.sweep.failures import FailureLog
from lsa_interp.sweep.grid import Grid
from lsa_interp.sweep.jobs import StackJob, past
from lsa_interp.sweep.progress import SweepProgress
from lsa_interp.sweep.work import analyse_run, evaluate_run, train_stack


def execute_local(
    jobs: list[StackJob], grid: Grid, deadline: float | None, display: SweepProgress, failures: FailureLog
) -> None:
    """Train the stacks one after another in this process, each followed by its runs' evaluations and analyses.

    A unit that raises is recorded in ``failures`` and the work goes on (a failed stack's runs are left out).
    Stops early when the deadline passes; a signal that stopped training raises `StoppedBySignal`.
    """
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        for job in jobs:
            if past(deadline) or not _run_job(job, grid, deadline, display, failures, device):
                return
    finally:
        display.working(None)


def _run_job(
    job: StackJob, grid: Grid, deadline: float | None, display: SweepProgress, failures: FailureLog, device: str
) -> bool:
    """Train one stack, then evaluate and analyse its runs, naming each on the display; returns False where the
    deadline stopped the work (or the stack's training short of its end), True to go on to the next stack."""
    show = lambda record: display.trained(job.name, job.tasks(record["step"]), job.tasks(record["total_steps"]))
    display.working(f"train {job.name}")
    train = partial(train_stack, job.config, job.directory, deadline, show)
    finished = _attempt(failures, display, "train", job.name, train)
    if finished is None:
        return True
    if not finished:
        return False
    display.stack_finished(job.name)
    for run in job.grid_runs:
        if past(deadline):
            return False
        display.working(f"evaluate {run.name}")
        evaluate = partial(evaluate_run, run.model_dir, run.data_dir, run.name, grid.eval_limit, device)
        if _attempt(failures, display, "evaluate", run.name, evaluate):
            display.run_finished()
        for name, analysis_out in run.missing_analyses():
            if past(deadline):
                return False
            display.working(f"analyse {name} {run.name}")
            analyse = partial(analyse_run, run.model_dir, analysis_out, name, run.name, device)
            _attempt(failures, display, f"analyse {name}", run.name, analyse)
    return True


def _attempt(failures: FailureLog, display: SweepProgress, kind: str, name: str, work: Callable[[], Any]) -> Any:
    """``work()``; None when it raised an Exception (recorded with its traceback in ``failures``, and shown)."""
    try:
        return work()
    except Exception as error:
        display.failed(failures.record(kind, name, error, traceback.format_exc()))
        return None
