"""The sweep's jobs and the in-process runner: what counts as done, and the order and bounds of the work."""

from __future__ import annotations

import signal

import pytest

from lsa_interp.sweep import local_runner
from lsa_interp.sweep.failures import FailureLog
from lsa_interp.sweep.grid import load_grid
from lsa_interp.sweep.jobs import past, stack_jobs
from lsa_interp.sweep.plan import plan_stacks
from lsa_interp.training.run_dir import StoppedBySignal
from tests.sweep.tiny_grid import write_tiny_grid


@pytest.fixture
def jobs(tmp_path):
    """The tiny grid's one stack of four runs as jobs, with two analyses per run: (grid, jobs)."""
    grid = load_grid(write_tiny_grid(tmp_path / "grid.toml", analyses=("matching", "rasp")))
    out = tmp_path / "out"
    return grid, stack_jobs(grid, out, plan_stacks(grid, out))


def test_a_stack_is_done_once_every_run_is_evaluated_and_analysed(jobs):
    _, (job,) = jobs
    assert job.tasks(3) == 3 * 8 * 4 and job.tasks(0) == 0
    assert [run.name for run in job.runs] == [
        "tiny-random-s0", "tiny-random-s1", "tiny-nocopy-random-s0", "tiny-nocopy-random-s1",
    ]  # fmt: skip
    assert not job.done
    for run in job.runs:
        run.model_dir.mkdir(parents=True)
        (run.model_dir / "evaluation.json").write_text('{"limit": 40}')
    assert all(run.evaluated for run in job.runs) and not job.done
    first = job.runs[0]
    assert [name for name, _ in first.missing_analyses()] == ["matching", "rasp"]
    first.analyses[1][1].mkdir(parents=True)
    assert first.missing_analyses() == [first.analyses[0]]
    for run in job.runs:
        for _, out in run.analyses:
            out.mkdir(parents=True, exist_ok=True)
    assert job.done
    (job.runs[2].model_dir / "evaluation.json").unlink()
    assert not job.runs[2].evaluated and not job.done


def test_a_run_evaluated_with_another_limit_counts_as_not_evaluated(jobs):
    grid, (job,) = jobs
    run = job.runs[0]
    run.model_dir.mkdir(parents=True)
    for text, evaluated in (
        ('{"limit": 40}', True),
        ('{"limit": null}', False),
        ('{"limit": 12}', False),
        ("{", False),
    ):
        (run.model_dir / "evaluation.json").write_text(text)
        assert run.evaluated is evaluated, f"grid eval_limit {grid.eval_limit}, evaluation.json {text}"


def test_runs_dropped_from_the_grid_are_trained_with_their_stack_but_not_evaluated(tmp_path, monkeypatch):
    path = write_tiny_grid(tmp_path / "grid.toml")
    out = tmp_path / "out"
    plan_stacks(load_grid(path), out)
    path.write_text(path.read_text().replace("seeds = [0, 1]", "seeds = [0]"))
    grid = load_grid(path)
    (job,) = stack_jobs(grid, out, plan_stacks(grid, out))
    assert len(job.runs) == len(job.config.runs) == 4, "the stack resumes with the runs it started with"
    assert [run.name for run in job.grid_runs] == ["tiny-random-s0", "tiny-nocopy-random-s0"]
    log = []
    _stand_ins(monkeypatch, [job], log)
    local_runner.execute_local([job], grid, None, _Display(log), FailureLog(out))
    assert [entry[1] for entry in log if entry[0] == "evaluate"] == ["tiny-random-s0", "tiny-nocopy-random-s0"]
    assert not job.done
    for run in job.grid_runs:
        run.model_dir.mkdir(parents=True)
        (run.model_dir / "evaluation.json").write_text('{"limit": 40}')
    assert job.done, "the dropped runs (unevaluated) are not waited for"


def test_past_only_once_the_deadline_is_reached(monkeypatch):
    monkeypatch.setattr("lsa_interp.sweep.jobs.time.time", lambda: 100.0)
    assert not past(None) and not past(100.5) and past(100.0) and past(99.0)


class _Display:
    def __init__(self, log: list):
        self.log, self.work = log, []

    def working(self, work):
        self.work.append(work)

    def trained(self, stack, tasks, total):
        self.log.append(("trained", stack, tasks, total))

    def stack_finished(self, stack):
        self.log.append(("stack_finished", stack))

    def run_finished(self):
        self.log.append(("run_finished",))

    def failed(self, failure):
        self.log.append(("failed", failure.kind, failure.name))


def _stand_ins(monkeypatch, jobs, log: list, finishes: bool = True, evaluated: tuple[bool, ...] = (True,) * 4):
    """Training, evaluation and analysis stand-ins that log their calls and check that each is given its own job's
    or run's config and directories."""
    runs = {run.name: run for job in jobs for run in job.runs}

    def train(config, directory, deadline, progress):
        assert (config, directory) == next((j.config, j.directory) for j in jobs if j.directory == directory)
        log.append(("train", directory.name, deadline))
        progress({"step": 2, "total_steps": 6})
        return finishes

    def evaluate(model_dir, data_dir, name, limit, device):
        assert (model_dir, data_dir) == (runs[name].model_dir, runs[name].data_dir)
        log.append(("evaluate", name, limit, device))
        return evaluated[len([e for e in log if e[0] == "evaluate"]) - 1]

    def analyse(model_dir, out, analysis, name, device):
        assert model_dir == runs[name].model_dir and out == dict(runs[name].analyses)[analysis]
        log.append(("analyse", name, analysis, device))
        out.mkdir(parents=True)

    monkeypatch.setattr(local_runner, "train_stack", train)
    monkeypatch.setattr(local_runner, "evaluate_run", evaluate)
    monkeypatch.setattr(local_runner, "analyse_run", analyse)


@pytest.mark.parametrize("cuda", [False, True])
def test_each_stack_is_trained_then_each_run_evaluated_and_analysed(jobs, monkeypatch, cuda, tmp_path):
    grid, stacks = jobs
    log, device = [], "cuda" if cuda else "cpu"
    monkeypatch.setattr("torch.cuda.is_available", lambda: cuda)
    _stand_ins(monkeypatch, stacks, log, evaluated=(True, False, True, True))
    local_runner.execute_local(stacks, grid, 1e12, _Display(log), FailureLog(tmp_path))
    assert log[:3] == [("train", "stack-000", 1e12), ("trained", "stack-000", 64, 192), ("stack_finished", "stack-000")]
    runs = [run.name for run in stacks[0].runs]
    expected = []
    for run, counted in zip(runs, (True, False, True, True)):
        expected += [("evaluate", run, 40, device)] + [("run_finished",)] * counted
        expected += [("analyse", run, "matching", device), ("analyse", run, "rasp", device)]
    assert log[3:] == expected


def test_the_display_names_each_unit_of_work_and_nothing_once_the_work_ends(jobs, monkeypatch, tmp_path):
    """The sweep's bar showed nothing of the evaluations and analyses after training (its clock stopped there too)."""
    grid, stacks = jobs
    _stand_ins(monkeypatch, stacks, [])
    display = _Display([])
    local_runner.execute_local(stacks, grid, None, display, FailureLog(tmp_path))
    expected = ["train stack-000"]
    for run in stacks[0].runs:
        expected += [f"evaluate {run.name}", f"analyse matching {run.name}", f"analyse rasp {run.name}"]
    assert display.work == [*expected, None]


def test_a_stack_that_stops_unfinished_ends_the_invocation(jobs, monkeypatch, tmp_path):
    grid, stacks = jobs
    log = []
    _stand_ins(monkeypatch, stacks, log, finishes=False)
    local_runner.execute_local(stacks + stacks, grid, None, _Display(log), FailureLog(tmp_path))
    assert [entry[0] for entry in log] == ["train", "trained"], "no evaluation, no second stack"


def test_only_the_missing_analyses_run(jobs, monkeypatch, tmp_path):
    grid, stacks = jobs
    log = []
    _stand_ins(monkeypatch, stacks, log)
    for run in stacks[0].runs:
        run.analyses[0][1].mkdir(parents=True)
    local_runner.execute_local(stacks, grid, None, _Display(log), FailureLog(tmp_path))
    assert [entry[2] for entry in log if entry[0] == "analyse"] == ["rasp"] * 4


@pytest.mark.parametrize(
    ("checks", "last"),
    [(0, None), (1, ("stack_finished", "stack-000")), (2, ("run_finished",)), (3, ("analyse", "matching"))],
)
def test_no_new_work_starts_past_the_deadline(jobs, monkeypatch, checks, last, tmp_path):
    """The deadline is checked before the stack, before each run's evaluation and before each analysis: it
    passes after ``checks`` of those checks."""
    grid, stacks = jobs
    log, answers = [], iter([False] * checks + [True] * 100)
    _stand_ins(monkeypatch, stacks, log)

    def past(deadline):
        assert deadline == 5.0, "each check is against the sweep's deadline"
        return next(answers)

    monkeypatch.setattr(local_runner, "past", past)
    local_runner.execute_local(stacks, grid, 5.0, _Display(log), FailureLog(tmp_path))
    if last is None:
        assert log == []
    elif last[0] == "analyse":
        assert log[-1][:1] + log[-1][2:3] == last and [e[0] for e in log].count("analyse") == 1
    else:
        assert log[-1] == last


def test_a_unit_that_raises_is_recorded_and_the_rest_goes_on(jobs, monkeypatch, tmp_path):
    grid, stacks = jobs
    log = []
    _stand_ins(monkeypatch, stacks, log)
    runs = [run.name for run in stacks[0].runs]

    def evaluate(model_dir, data_dir, name, limit, device):
        log.append(("evaluate", name))
        if name == runs[1]:
            raise ValueError("the dataset lacks split(s) ['val']")
        return True

    def analyse(model_dir, out, analysis, name, device):
        log.append(("analyse", name, analysis))
        if (name, analysis) == (runs[2], "matching"):
            raise RuntimeError("shape mismatch\nin layer 1")
        out.mkdir(parents=True)

    monkeypatch.setattr(local_runner, "evaluate_run", evaluate)
    monkeypatch.setattr(local_runner, "analyse_run", analyse)
    failures = FailureLog(tmp_path / "out")
    local_runner.execute_local(stacks, grid, None, _Display(log), failures)
    assert [entry[1] for entry in log if entry[0] == "evaluate"] == runs, "every run is evaluated"
    analysed = [entry[1:] for entry in log if entry[0] == "analyse"]
    assert analysed == [(run, name) for run in runs for name in ("matching", "rasp")], "every analysis runs"
    assert log.count(("run_finished",)) == 3
    shown = [entry for entry in log if entry[0] == "failed"]
    assert shown == [("failed", "evaluate", runs[1]), ("failed", "analyse matching", runs[2])]
    evaluation, analysis = failures.failures
    assert evaluation.message == "the dataset lacks split(s) ['val']", "a one-line error keeps its own line"
    assert analysis.message == "RuntimeError: shape mismatch", "other errors are led by their type"
    assert evaluation.log == tmp_path / "out" / "failures" / f"evaluate-{runs[1]}.txt"
    assert analysis.log.name == f"analyse-matching-{runs[2]}.txt"
    text = analysis.log.read_text()
    assert text.startswith("Traceback") and "RuntimeError: shape mismatch" in text and "in layer 1" in text
    assert str(analysis) == f"analyse matching {runs[2]}: RuntimeError: shape mismatch (traceback: {analysis.log})"


def test_a_stack_that_raises_leaves_its_runs_and_the_next_stack_trains(jobs, monkeypatch, tmp_path):
    grid, stacks = jobs
    log = []
    _stand_ins(monkeypatch, stacks, log)
    outcomes = iter([RuntimeError("CUDA out of memory"), True])

    def train(config, directory, deadline, progress):
        log.append(("train",))
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(local_runner, "train_stack", train)
    failures = FailureLog(tmp_path)
    local_runner.execute_local(stacks + stacks, grid, None, _Display(log), failures)
    kinds = [entry[0] for entry in log]
    assert kinds[:4] == ["train", "failed", "train", "stack_finished"] and kinds.count("evaluate") == 4
    (failure,) = failures.failures
    assert (failure.kind, failure.name, failure.message) == ("train", "stack-000", "RuntimeError: CUDA out of memory")


def test_a_signal_that_stopped_training_ends_the_sweep_without_a_failure(jobs, monkeypatch, tmp_path):
    grid, stacks = jobs
    log = []
    _stand_ins(monkeypatch, stacks, log)

    def train(config, directory, deadline, progress):
        raise StoppedBySignal(signal.SIGTERM)

    monkeypatch.setattr(local_runner, "train_stack", train)
    failures = FailureLog(tmp_path)
    with pytest.raises(StoppedBySignal) as stop:
        local_runner.execute_local(stacks + stacks, grid, None, _Display(log), failures)
    assert stop.value.signum == signal.SIGTERM and str(stop.value) == "stopped by SIGTERM"
    assert failures.failures == [] and log == []


def test_a_failure_log_starts_empty_and_names_each_unit_s_file(tmp_path):
    stale = tmp_path / "failures" / "train-stack-000.txt"
    stale.parent.mkdir()
    stale.write_text("from the invocation before")
    failures = FailureLog(tmp_path)
    assert not stale.exists(), "the folder holds the last invocation's failures only"
    failure = failures.record("evaluate", "run-a", KeyError("val"), "Traceback ...")
    assert failure.message == "KeyError: 'val'" and failure.log.read_text() == "Traceback ..."
    assert failures.record("train", "stack-001", OSError(), "t").message == "OSError"


def test_a_failure_log_makes_its_folders_and_keeps_a_traceback_outside_ascii(tmp_path, ascii_locale):
    """A library caller's sweep directory may not exist yet; a traceback may name a path or message outside ASCII
    (written as UTF-8 whatever the locale)."""
    failures = FailureLog(tmp_path / "new" / "sweep")
    text = "Traceback ...\nValueError: no dataset at /données/copy-20 — missing\n"
    failure = failures.record("evaluate", "run-é", ValueError("no dataset at /données/copy-20 — missing"), text)
    assert failure.log == tmp_path / "new" / "sweep" / "failures" / "evaluate-run-é.txt"
    assert failure.log.read_bytes().decode("utf-8") == text
