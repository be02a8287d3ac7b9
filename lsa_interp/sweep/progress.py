"""One rich progress display over every run of a sweep: runs finished, training tasks per second, ETA.

The bar counts training tasks (steps x batch size x runs of each stack, estimated from the datasets' sizes
before a stack reports its exact step count); the description counts finished runs (model + evaluation) and names
the work going on. The elapsed time runs until the display closes (through the evaluations and analyses after the
last training); once the bar is full, the rate is the one training ended with.
"""

from __future__ import annotations

from datetime import timedelta

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task as ProgressTask,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class _TasksPerSecond(ProgressColumn):
    def render(self, task: ProgressTask) -> Text:
        """Rich's rate, or once the bar is full the rate training ended with; empty while there is none."""
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} tasks/s" if speed else "", style="progress.data.speed")


class _Elapsed(ProgressColumn):
    def render(self, task: ProgressTask) -> Text:
        """The time since the display opened (rich's `TimeElapsedColumn` stops once the bar is full)."""
        elapsed = task.elapsed
        return Text("-:--:--" if elapsed is None else str(timedelta(seconds=int(elapsed))), style="progress.elapsed")


class SweepProgress:
    """The display; use as a context manager. ``stacks`` maps a stack name to (estimated tasks, tasks done)."""

    def __init__(self, runs_total: int, runs_done: int, stacks: dict[str, tuple[int, int]], enabled: bool = True):
        self.runs_total, self.runs_done, self.failures, self.enabled = runs_total, runs_done, 0, enabled
        self.work: str | None = None
        self._estimate = {name: estimate for name, (estimate, _) in stacks.items()}
        self._done = {name: min(done, estimate) for name, (estimate, done) in stacks.items()}
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            _TasksPerSecond(),
            _Elapsed(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not enabled,
        )
        self._job = self._bar.add_task(self._description(), total=self._total())
        self._bar.update(self._job, completed=self._completed())

    def __enter__(self) -> SweepProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def _description(self) -> str:
        failed = f", {self.failures} failed" if self.failures else ""
        work = f"; {self.work}" if self.work else ""
        return f"sweep: {self.runs_done}/{self.runs_total} runs done{failed}{work}"

    def working(self, work: str | None) -> None:
        """Name the work going on (e.g. ``evaluate copy-20-random-s0``) in the description; None for none."""
        self.work = work
        self._refresh()

    def trained(self, stack: str, tasks: int, total: int | None = None) -> None:
        """Stack ``stack`` has trained ``tasks`` tasks in all (of ``total``, once known)."""
        if total is not None:
            self._estimate[stack] = total
        self._done[stack] = min(tasks, self._estimate[stack])
        self._refresh()

    def stack_finished(self, stack: str) -> None:
        """Stack ``stack`` has trained all of its tasks."""
        self.trained(stack, self._estimate[stack])

    def run_finished(self) -> None:
        """One more run has its model and evaluation."""
        self.runs_done += 1
        self._refresh()

    def failed(self, failure: object) -> None:
        """A unit of work failed: count it and, when the display is on, print ``failure`` (one line) above the bar."""
        self.failures += 1
        if self.enabled:
            self._bar.console.print(f"failed: {failure}", markup=False, highlight=False, soft_wrap=True)
        self._refresh()

    def _total(self) -> int:
        return sum(self._estimate.values()) or 1

    def _completed(self) -> int:
        """Tasks trained; with no stack left to train (a finished sweep run again) the whole bar."""
        return sum(self._done.values()) if self._estimate else 1

    def _refresh(self) -> None:
        self._bar.update(self._job, description=self._description(), total=self._total(), completed=self._completed())
        task = self._bar.tasks[0]
        if task.finished and task.finished_speed is None:  # rich keeps this rate only when a task is advanced
            task.finished_speed = task.speed
