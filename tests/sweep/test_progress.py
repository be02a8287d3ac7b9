"""The sweep's progress display, and what `run_sweep` tells it and makes before any training."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from lsa_interp.data.dataset import read_manifest
from lsa_interp.sweep import runner
from lsa_interp.sweep.grid import load_grid
from lsa_interp.sweep.plan import plan_stacks
from lsa_interp.sweep.progress import SweepProgress, _TasksPerSecond
from tests.sweep.tiny_grid import write_tiny_grid


def _shown(capsys) -> tuple[str, int]:
    """The runs line and the percentage of the display's last render on stderr."""
    text = capsys.readouterr().err
    runs = re.findall(r"sweep: \d+/\d+ runs done", text)
    percent = re.findall(r"(\d+)%", text)
    assert runs and percent, text
    return runs[-1], int(percent[-1])


def test_the_bar_counts_each_stack_up_to_its_estimate(capsys):
    with SweepProgress(4, 1, {"a": (100, 30), "b": (50, 80)}):
        pass
    assert _shown(capsys) == ("sweep: 1/4 runs done", 53)
    with SweepProgress(4, 1, {"a": (100, 30), "b": (50, 80)}) as display:
        display.trained("a", 60)
    assert _shown(capsys) == ("sweep: 1/4 runs done", 73)
    with SweepProgress(4, 1, {"a": (100, 30), "b": (50, 80)}) as display:
        display.trained("a", 300)
    assert _shown(capsys) == ("sweep: 1/4 runs done", 100)


def test_the_line_shows_runs_bar_percentage_rate_elapsed_and_eta(capsys):
    with SweepProgress(4, 1, {"a": (100, 30), "b": (50, 80)}):
        pass
    (line,) = capsys.readouterr().err.strip().splitlines()
    # The rate column is empty until rich has a speed: two spaces after the percentage.
    assert re.fullmatch(r"sweep: 1/4 runs done [━╸]+ +53%  \d:\d\d:\d\d ETA (-:--:--|\d:\d\d:\d\d)", line), line


def test_the_clock_runs_to_the_end_and_a_full_bar_keeps_the_rate_training_ended_with(capsys, monkeypatch):
    """The elapsed time stopped once training ended (0:00:28 through the evaluations and analyses of a 40 s sweep),
    and the rate changed after it, as rich's window of recent samples emptied."""
    now = [0.0]
    monkeypatch.setattr("rich.console.monotonic", lambda: now[0])
    with SweepProgress(1, 0, {"a": (100, 0)}) as display:
        now[0] = 5.0
        display.trained("a", 50)
        now[0] = 10.0
        display.trained("a", 100, 100)
        display.working("evaluate run-a")
        now[0] = 40.0
        display.run_finished()
        display.working(None)
        now[0] = 45.0
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(r"sweep: 1/1 runs done [━╸]+ +100% 10 tasks/s 0:00:45 ETA 0:00:00", line), line


def test_the_description_names_the_work_going_on(capsys):
    with SweepProgress(2, 0, {"a": (10, 0)}) as display:
        display.failed("evaluate run-a: ValueError (traceback: x.txt)")
        display.working("analyse matching run-b")
    assert "sweep: 0/2 runs done, 1 failed; analyse matching run-b " in capsys.readouterr().err


def test_a_stack_s_exact_total_replaces_its_estimate(capsys):
    with SweepProgress(4, 0, {"a": (100, 0), "b": (50, 50)}) as display:
        display.trained("a", 60, 250)
    assert _shown(capsys) == ("sweep: 0/4 runs done", 37)
    with SweepProgress(4, 0, {"a": (100, 0), "b": (50, 0)}) as display:
        display.trained("a", 60, 250)
        display.stack_finished("a")
    assert _shown(capsys) == ("sweep: 0/4 runs done", 83)


def test_finished_runs_are_counted_in_the_description(capsys):
    with SweepProgress(3, 1, {"a": (10, 0)}) as display:
        display.run_finished()
        display.run_finished()
    assert _shown(capsys) == ("sweep: 3/3 runs done", 0)


def test_a_sweep_with_nothing_left_to_train_shows_a_full_bar(capsys):
    with SweepProgress(2, 2, {}):  # a finished sweep run again: "2/2 runs done" beside 0% read as nothing done
        pass
    assert _shown(capsys) == ("sweep: 2/2 runs done", 100)


def test_a_disabled_display_prints_nothing(capsys):
    with SweepProgress(4, 0, {"a": (10, 0)}, enabled=False) as display:
        display.trained("a", 5)
        display.failed("evaluate run-a: ValueError: no val split (traceback: x.txt)")
    assert capsys.readouterr().err == "" and display.failures == 1


def test_a_failure_is_printed_above_the_bar_and_counted(capsys):
    with SweepProgress(4, 1, {"a": (10, 0)}) as display:
        display.failed("evaluate run-a: ValueError: [no] val split (traceback: x.txt)")
    text = capsys.readouterr().err
    assert "failed: evaluate run-a: ValueError: [no] val split (traceback: x.txt)\n" in text, "printed as given"
    assert "sweep: 1/4 runs done, 1 failed" in text


def test_the_rate_column_reads_tasks_per_second():
    column = _TasksPerSecond()
    assert column.render(SimpleNamespace(speed=None, finished_speed=None)).plain == ""
    assert column.render(SimpleNamespace(speed=1234.6, finished_speed=None)).plain == "1,235 tasks/s"
    assert column.render(SimpleNamespace(speed=None, finished_speed=99.0)).plain == "99 tasks/s"


class _Recorder:
    """A stand-in display that keeps what `run_sweep` opened it with."""

    opened: list = []

    def __init__(self, runs_total, runs_done, stacks, enabled):
        _Recorder.opened.append((runs_total, runs_done, stacks, enabled))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def working(self, work):
        """The work going on, which these tests do not check."""


@pytest.fixture
def recorded(monkeypatch):
    _Recorder.opened = []
    monkeypatch.setattr(runner, "SweepProgress", _Recorder)
    return _Recorder.opened


def test_run_sweep_estimates_each_stack_s_tasks_from_its_datasets(tmp_path, recorded):
    bounded = write_tiny_grid(tmp_path / "bounded.toml", max_steps=6)
    summary = runner.run_sweep(bounded, tmp_path / "a", max_minutes=0, progress=False)
    assert recorded == [(4, 0, {"stack-000": (6 * 8 * 4, 0)}, False)]
    assert (summary.runs, summary.finished, summary.results, summary.complete) == (4, 0, None, False)
    unbounded = write_tiny_grid(tmp_path / "unbounded.toml", max_steps=10**6)
    plan_stacks(load_grid(unbounded), tmp_path / "b")  # a sweep's directory, as a first call leaves it
    stack = tmp_path / "b" / "stacks" / "stack-000"
    stack.mkdir(parents=True)
    (stack / "metrics.jsonl").write_text(json.dumps({"type": "step", "step": 5}) + "\n")
    runner.run_sweep(unbounded, tmp_path / "b", max_minutes=0, progress=True)
    rows = [
        read_manifest(tmp_path / "b" / "data" / name)["files"]["train"]["rows"]
        for name in ("tiny-d0", "tiny-nocopy-d0")
    ]
    assert rows[0] > rows[1], "the copy dataset is the longer: it bounds the lock-step stack"
    rows = rows[0]
    assert recorded[1] == (4, 0, {"stack-000": (-(-rows // 8) * 8 * 4, 5 * 8 * 4)}, True)


def test_run_sweep_counts_finished_runs_and_makes_only_the_data_still_needed(tmp_path, recorded, monkeypatch):
    grid = write_tiny_grid(tmp_path / "grid.toml")
    out = tmp_path / "out"
    plan_stacks(load_grid(grid), out)  # a sweep's directory, as a first call leaves it
    model = out / "stacks" / "stack-000" / "replicate-0" / "model"
    model.mkdir(parents=True)
    (model / "evaluation.json").write_text('{"limit": 40}')
    tables = []
    monkeypatch.setattr(runner, "runs_table", lambda dirs: ("table", dirs))
    monkeypatch.setattr(runner, "write_runs_table", lambda table, path: tables.append((table, path)))
    summary = runner.run_sweep(grid, out, max_minutes=0, progress=False)
    assert recorded[0][:2] == (4, 1)
    assert (summary.runs, summary.finished, summary.results) == (4, 1, out / "results.csv")
    assert tables == [(("table", [model]), out / "results.csv")]
    assert (out / "grid.toml").read_text() == grid.read_text()
    assert sorted(p.name for p in (out / "data").iterdir()) == ["tiny-d0", "tiny-nocopy-d0"]
    fresh = tmp_path / "fresh"
    plan_stacks(load_grid(grid), fresh)
    for i in range(4):
        done = fresh / "stacks" / "stack-000" / f"replicate-{i}" / "model"
        done.mkdir(parents=True)
        (done / "evaluation.json").write_text('{"limit": 40}')
    summary = runner.run_sweep(grid, fresh, max_minutes=0, progress=False)
    assert summary.complete and recorded[1][:3] == (4, 4, {})
    assert not (fresh / "data").exists(), "every run is finished: no dataset is made"


@pytest.fixture
def executed(monkeypatch):
    """Stand-ins for both executors and for Ray's check: what `run_sweep` hands them."""
    calls = []
    monkeypatch.setattr(runner, "require_ray", lambda: calls.append(("require_ray",)))
    monkeypatch.setattr(runner, "check_address", lambda address: calls.append(("check_address", address)))
    monkeypatch.setattr(runner, "execute_local", lambda *args: calls.append(("local", *args)))
    monkeypatch.setattr(runner, "execute_ray", lambda *args: calls.append(("ray", *args)))
    return calls


def test_run_sweep_hands_its_jobs_grid_deadline_and_display_to_the_executor(tmp_path, recorded, executed, monkeypatch):
    grid_file = write_tiny_grid(tmp_path / "grid.toml")
    monkeypatch.setattr(runner.time, "time", lambda: 1000.0)
    runner.run_sweep(grid_file, tmp_path / "out", max_minutes=2.5)
    ((kind, jobs, grid, deadline, display, failures),) = executed
    assert kind == "local" and [job.name for job in jobs] == ["stack-000"] and grid.eval_limit == 40
    assert deadline == 1000.0 + 150 and isinstance(display, _Recorder)
    assert failures.directory == tmp_path / "out" / "failures" and failures.failures == []
    assert recorded[0][3] is True, "the display is shown by default"
    executed.clear()
    runner.run_sweep(grid_file, tmp_path / "out", ray="auto", max_minutes=1)
    assert executed[:2] == [("require_ray",), ("check_address", "auto")]
    ((kind, jobs, grid, deadline, display, failures, address),) = executed[2:]
    assert (kind, [job.name for job in jobs], deadline, address) == ("ray", ["stack-000"], 1000.0 + 60, "auto")
    assert grid.eval_limit == 40 and isinstance(display, _Recorder) and failures.failures == []


def test_the_grid_s_own_minutes_bound_an_invocation_unless_it_is_given_its_own(
    tmp_path, recorded, executed, monkeypatch
):
    grid_file = write_tiny_grid(tmp_path / "grid.toml")
    grid_file.write_text("max_minutes = 4\n" + grid_file.read_text())
    monkeypatch.setattr(runner.time, "time", lambda: 1000.0)
    runner.run_sweep(grid_file, tmp_path / "out", progress=False)
    runner.run_sweep(grid_file, tmp_path / "out", max_minutes=1, progress=False)
    assert [call[3] for call in executed] == [1000.0 + 240, 1000.0 + 60]
    assert "require_ray" not in [call[0] for call in executed], "in-process sweeps do not need Ray"


def test_the_estimate_counts_a_last_partial_batch_as_a_step(tmp_path, recorded, executed):
    grid_file = write_tiny_grid(tmp_path / "grid.toml", max_steps=10**6, batch_size=7)
    runner.run_sweep(grid_file, tmp_path / "out", progress=False)
    rows = read_manifest(tmp_path / "out" / "data" / "tiny-d0")["files"]["train"]["rows"]
    assert rows % 7, "the test needs a partial batch"
    ((estimate, done),) = recorded[0][2].values()
    assert estimate == (rows // 7 + 1) * 7 * 4 and isinstance(estimate, int) and done == 0


def test_run_sweep_returns_the_failures_and_counts_only_the_grid_s_runs(tmp_path, recorded, monkeypatch):
    path = write_tiny_grid(tmp_path / "grid.toml")
    out = tmp_path / "out"

    def execute(jobs, grid, deadline, display, failures):
        failures.record("evaluate", "tiny-random-s1", ValueError("no val split"), "Traceback ...")

    monkeypatch.setattr(runner, "execute_local", execute)
    tables = []
    monkeypatch.setattr(runner, "runs_table", lambda dirs: dirs)
    monkeypatch.setattr(runner, "write_runs_table", lambda table, target: tables.append(table))
    summary = runner.run_sweep(path, out, progress=False)
    (failure,) = summary.failures
    assert (failure.kind, failure.name, failure.message) == ("evaluate", "tiny-random-s1", "no val split")
    assert failure.log.read_text() == "Traceback ..." and (summary.runs, summary.finished) == (4, 0)
    for i in range(4):
        model = out / "stacks" / "stack-000" / f"replicate-{i}" / "model"
        model.mkdir(parents=True)
        (model / "evaluation.json").write_text('{"limit": 40}')
    path.write_text(path.read_text().replace("seeds = [0, 1]", "seeds = [0]"))
    monkeypatch.setattr(runner, "execute_local", lambda *args: None)
    summary = runner.run_sweep(path, out, progress=False)
    assert (summary.runs, summary.finished, summary.failures) == (2, 2, ()) and summary.complete
    assert [model.parent.name for model in tables[-1]] == ["replicate-0", "replicate-2"], "the grid's runs only"
    assert recorded[-1][:2] == (2, 2)
    assert not (out / "failures").exists(), "the last invocation had no failures"
