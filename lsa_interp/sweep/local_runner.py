"""Run a sweep's stacks in this process, one after another (one GPU, or the CPU)."""

from __future__ import annotations

from lsa_interp.sweep.grid import Grid
from lsa_interp.sweep.jobs import StackJob, past
from lsa_interp.sweep.progress import SweepProgress
from lsa_interp.sweep.work import analyse_run, evaluate_run, train_stack


def execute_local(jobs: list[StackJob], grid: Grid, deadline: float | None, display: SweepProgress) -> None:
    """Train the stacks one after another in this process, each followed by its runs' evaluations and analyses.

    Stops early when the deadline passes or a stack stops without finishing (a signal).
    """
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    for job in jobs:
        if past(deadline):
            return
        show = lambda record, job=job: display.trained(
            job.name, job.tasks(record["step"]), job.tasks(record["total_steps"])
        )
        if not train_stack(job.config, job.directory, deadline, show):
            return
        display.stack_finished(job.name)
        for run in job.runs:
            if past(deadline):
                return
            if evaluate_run(run.model_dir, run.data_dir, run.name, grid.eval_limit, device):
                display.run_finished()
            for name, analysis_out in run.missing_analyses():
                if past(deadline):
                    return
                analyse_run(run.model_dir, analysis_out, name, run.name, device)
