"""The sweep on a local Ray instance (started once for this module) gives the in-process sweep's results."""

from __future__ import annotations

import builtins
import os
import signal
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from lsa_interp.cli import main
from lsa_interp.sweep.failures import FailureLog
from lsa_interp.sweep.grid import load_grid
from lsa_interp.sweep.jobs import stack_jobs
from lsa_interp.sweep.plan import plan_stacks
from lsa_interp.sweep.progress import SweepProgress
from lsa_interp.sweep.ray_runner import execute_ray
from lsa_interp.sweep.runner import run_sweep
from lsa_interp.training.run_dir import DONE_FILE
from tests.sweep.tiny_grid import evaluations, model_weights, same_weights, write_tiny_grid

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


STEPS = 120
"""Long enough for a worker to be killed between the stack's first saved state and its end."""


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory) -> Path:
    """The tiny grid swept in-process: the reference every Ray sweep must reproduce."""
    root = tmp_path_factory.mktemp("sweep")
    grid = write_tiny_grid(root / "grid.toml", max_steps=STEPS, analyses=("matching",))
    assert run_sweep(grid, root / "local", progress=False).complete
    return root


@pytest.mark.slow
def test_ray_sweep_equals_the_in_process_sweep(local_ray, local_sweep, tmp_path):
    grid, local_out = local_sweep / "grid.toml", local_sweep / "local"
    distributed = run_sweep(grid, tmp_path / "ray", ray="auto", progress=False)
    assert distributed.complete and distributed.runs == 4
    assert same_weights(model_weights(tmp_path / "ray"), model_weights(local_out))
    assert evaluations(tmp_path / "ray") == evaluations(local_out)
    tables = [pd.read_csv(path / "results.csv") for path in (local_out, tmp_path / "ray")]
    # Rows differ only in where the models lie (the two output directories) and how long they took.
    differing = ["run", *[c for c in tables[0].columns if "second" in c]]
    pd.testing.assert_frame_equal(tables[0].drop(columns=differing), tables[1].drop(columns=differing))
    assert len(list((tmp_path / "ray").glob("stacks/*/replicate-*/analysis/matching/*.json"))) == 4


def test_ray_missing_names_the_extra(tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def without_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_ray)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", str(write_tiny_grid(tmp_path / "grid.toml")), "--out", str(tmp_path / "out"), "--ray", "auto"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'lsa-interp[ray]'" in err
    assert not (tmp_path / "out").exists()


def _kill_ray_task(function: str) -> int | None:
    """SIGKILL the Ray worker process running ``function`` (Ray titles it ``ray::function``); its pid, or None."""
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if title.startswith(f"ray::{function}"):
            os.kill(int(proc.name), signal.SIGKILL)
            return int(proc.name)
    return None


@pytest.mark.slow
def test_a_killed_ray_worker_is_retried_and_its_stack_resumes_to_the_same_weights(local_ray, local_sweep, tmp_path):
    grid, reference = local_sweep / "grid.toml", local_sweep / "local"
    out, outcome = tmp_path / "ray", {}
    sweep = threading.Thread(target=lambda: outcome.update(summary=run_sweep(grid, out, ray="auto", progress=False)))
    sweep.start()
    state, killed = out / "stacks" / "stack-000" / "state.pt", None
    while sweep.is_alive() and killed is None:
        killed = _kill_ray_task("_train_task") if state.exists() else None
        time.sleep(0.005)
    sweep.join()
    assert killed is not None, "the stack finished before its worker could be killed"
    assert outcome["summary"].complete
    assert same_weights(model_weights(out), model_weights(reference))
    assert evaluations(out) == evaluations(reference)


def test_a_task_error_is_recorded_led_by_what_failed(tmp_path):
    """Ray wraps a task's exception, its text led by a task header; the failure keeps the error's own line and
    Ray's whole text (the remote traceback)."""
    from lsa_interp.sweep.ray_runner import _result

    class Wrapped(Exception):
        def __init__(self, cause, last_line=""):
            super().__init__(f"ray::_analyse_task() (pid=1, ip=0.0.0.0)\nTraceback ...\n{last_line or repr(cause)}")
            self.cause = cause

    def failing(cause, last_line=""):
        def get(ref):
            raise Wrapped(cause, last_line)

        return SimpleNamespace(exceptions=SimpleNamespace(RayError=Wrapped), get=get)

    run = SimpleNamespace(name="tiny-random-s0")
    failures, display = FailureLog(tmp_path), SweepProgress(1, 0, {}, enabled=False)
    unknown = ValueError("unknown preset 'tiny'")
    assert _result(failing(unknown), None, "analyse matching", run, failures, display) is None
    assert _result(failing(KeyError("x")), None, "train", run, failures, display) is None
    died = failing(None, "The worker died unexpectedly")
    assert _result(died, None, "evaluate", run, failures, display) is None
    analysis, train, crash = failures.failures
    assert (analysis.kind, analysis.name, analysis.message) == ("analyse matching", run.name, str(unknown))
    text = analysis.log.read_text()
    assert text.startswith("ray::_analyse_task() (pid=1") and "Traceback" in text, "Ray's whole text is kept"
    assert train.message == "KeyError: 'x'"
    assert crash.message == "RuntimeError: The worker died unexpectedly", "no cause: Ray's last line"
    assert display.failures == 3
    answers = SimpleNamespace(exceptions=ray.exceptions, get=lambda ref: 5)
    assert _result(answers, None, "train", run, failures, display) == 5 and len(failures.failures) == 3


def test_the_work_in_flight_is_named_as_the_in_process_sweep_names_it():
    from lsa_interp.sweep.ray_runner import _in_flight

    named = lambda name: SimpleNamespace(name=name)
    pending = {
        1: ("train", named("stack-000")),
        2: ("train", named("stack-001")),
        3: ("evaluate", named("tiny-random-s0")),
        4: ("analyse matching", named("tiny-random-s0")),
        5: ("train", named("stack-002")),
        6: ("analyse rasp", named("tiny-random-s1")),
    }
    expected = (
        "train stack-000 +2, evaluate tiny-random-s0, analyse matching tiny-random-s0, analyse rasp tiny-random-s1"
    )
    assert _in_flight(pending) == expected
    assert _in_flight({}) is None


class _Labels(SweepProgress):
    """A disabled display that keeps each change of the work it names."""

    def __init__(self, *args):
        super().__init__(*args, enabled=False)
        self.labels: list[str | None] = []

    def working(self, work):
        if not self.labels or self.labels[-1] != work:
            self.labels.append(work)
        super().working(work)


def test_failing_ray_tasks_are_recorded_and_the_others_go_on(local_ray, tmp_path):
    """A stack marked done whose models are missing: each run's evaluation and analysis fails in its worker. The
    display names the tasks in flight, the stack's training and then its runs' evaluations and analyses."""
    grid = load_grid(write_tiny_grid(tmp_path / "grid.toml", analyses=("matching",)))
    out = tmp_path / "out"
    (job,) = stack_jobs(grid, out, plan_stacks(grid, out))
    job.directory.mkdir(parents=True)
    (job.directory / DONE_FILE).write_text("")
    failures, display = FailureLog(out), _Labels(4, 0, {job.name: (1, 0)})
    execute_ray([job], grid, None, display, failures, "auto")
    first = job.runs[0].name
    assert display.labels[:2] == ["train stack-000", f"evaluate {first} +3, analyse matching {first} +3"]
    assert display.labels[-1] is None and display.work is None, "nothing is named once every task returned"
    units = sorted((failure.kind, failure.name) for failure in failures.failures)
    expected = [(kind, run.name) for run in job.runs for kind in ("analyse matching", "evaluate")]
    assert units == sorted(expected) and display.failures == 8
    models = {run.name: run.model_dir for run in job.runs}
    for failure in failures.failures:
        assert failure.message.startswith(f"no checkpoint named or at '{models[failure.name]}'")
        assert "FileNotFoundError" in failure.log.read_text()


def test_ray_is_shut_down_only_when_the_sweep_started_it(monkeypatch, tmp_path):
    """`connect`'s answer decides (a stand-in Ray, no stacks): the Ray a sweep started is shut down after it, the
    one it joined is left running; the address is passed on; the display names no work at the end."""
    from lsa_interp.sweep import ray_runner

    calls = []
    task = SimpleNamespace(options=lambda **options: None)
    stand_in = SimpleNamespace(cluster_resources=dict, remote=lambda f: task, shutdown=lambda: calls.append("shutdown"))
    monkeypatch.setattr(ray_runner, "require_ray", lambda: stand_in)
    for started in (True, False):
        monkeypatch.setattr(ray_runner, "connect", lambda address, started=started: calls.append(address) or started)
        display = _Labels(0, 0, {})
        execute_ray([], None, None, display, FailureLog(tmp_path), "ray://head:10001")
        assert display.labels == [None]
    assert calls == ["ray://head:10001", "shutdown", "ray://head:10001"]


class _StandInRay:
    """Ray as `execute_ray` calls it, in this process: a task's ``remote`` returns a ref (recorded with the task's
    name and arguments) that `get` answers True; `wait` returns nothing for the first ``busy`` polls, then one
    ready task per poll, and refuses to block (Ray's ``wait`` without a timeout waits for a task to return)."""

    exceptions = ray.exceptions

    def __init__(self, busy: int):
        self.busy, self.submitted, self.polls = busy, [], []

    def cluster_resources(self):
        return {}

    def remote(self, function):
        submitted = self.submitted

        class Task:
            def options(self, **options):
                return self

            def remote(self, *args):
                submitted.append((function.__name__, args))
                return len(submitted) - 1

        return Task()

    def wait(self, refs, num_returns=1, timeout=None):
        assert timeout is not None, "without a timeout, Ray's wait blocks until a task returns"
        self.polls.append(timeout)
        if self.busy:
            self.busy -= 1
            return [], refs
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        return True

    def shutdown(self):
        pass


class _Counts(_Labels):
    """`_Labels` that also counts each stack's progress reports."""

    def __init__(self, *args):
        super().__init__(*args)
        self.reports = 0

    def trained(self, stack, tasks, total=None):
        self.reports += 1
        super().trained(stack, tasks, total)


def test_the_loop_polls_evaluates_with_the_grids_limit_counts_runs_and_keeps_the_deadline(monkeypatch, tmp_path):
    """With a stand-in Ray: while a stack trains, every poll (each `POLL_SECONDS`) reports its progress; once it
    returns, each run's evaluation (of the grid's `eval_limit` rows) and analyses are submitted and each returned
    evaluation counts a finished run. Past the deadline, a trained stack's runs are not evaluated."""
    from lsa_interp.sweep import ray_runner

    grid = load_grid(write_tiny_grid(tmp_path / "grid.toml", analyses=("matching",)))
    out = tmp_path / "out"
    (job,) = stack_jobs(grid, out, plan_stacks(grid, out))
    for deadline, busy in ((None, 2), (time.time() - 1, 0)):
        stand_in = _StandInRay(busy)
        monkeypatch.setattr(ray_runner, "require_ray", lambda stand_in=stand_in: stand_in)
        monkeypatch.setattr(ray_runner, "connect", lambda address: False)
        display = _Counts(4, 0, {job.name: (1, 0)})
        execute_ray([job], grid, deadline, display, FailureLog(out), "auto")
        tasks = [name for name, _ in stand_in.submitted]
        if deadline is None:
            assert tasks == ["_train_task"] + ["_evaluate_task", "_analyse_task"] * 4
            limits = {args[1] for name, args in stand_in.submitted if name == "_evaluate_task"}
            assert limits == {grid.eval_limit} == {40} and display.runs_done == 4
            assert display.reports == 3 + 1, "at each of the three polls of the training stack, and at its end"
        else:
            assert tasks == ["_train_task"] and display.runs_done == 0
        assert set(stand_in.polls) == {ray_runner.POLL_SECONDS} and display.failures == 0


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_ray_address_is_checked_before_any_work(tmp_path, capsys):
    from lsa_interp.sweep.ray_runner import check_address

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        for address in ("auto", "local", f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}", f"[::ffff:127.0.0.1]:{port}"):
            check_address(address)
    for address in ("head-node", "10.0.0.1:", ":6379", "ray://", "10.0.0.1:port"):
        with pytest.raises(ValueError, match=r"not an address; give auto, local, HOST:PORT or ray://HOST:PORT$"):
            check_address(address)
    closed = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ValueError, match=rf"^--ray {closed}: nothing answers there \(Connection refused\); start"):
        check_address(closed)
    grid = write_tiny_grid(tmp_path / "grid.toml")
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--ray", closed])
    assert exit_info.value.code == 2 and time.monotonic() - started < 30
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"lsa-interp: error: --ray {closed}: nothing answers there") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists(), "refused before any work"
