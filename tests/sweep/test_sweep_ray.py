"""The sweep on a local Ray instance (started once for this module) gives the in-process sweep's results."""

from __future__ import annotations

import builtins
import os
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from lsa_interp.cli import main
from lsa_interp.sweep.runner import run_sweep
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


def test_a_task_error_is_raised_as_its_own_exception_naming_what_failed():
    """Ray wraps a task's exception; the CLI printed only the wrapper's first line, its task header."""
    from types import SimpleNamespace

    from lsa_interp.sweep.ray_runner import _result

    class Wrapped(Exception):
        def __init__(self, cause):
            super().__init__("ray::_analyse_task() (pid=1, ip=0.0.0.0)\nValueError: unknown preset 'tiny'")
            self.cause = cause

    def failing(cause):
        def get(ref):
            raise Wrapped(cause)

        return SimpleNamespace(exceptions=SimpleNamespace(RayTaskError=Wrapped), get=get)

    run = SimpleNamespace(name="tiny-random-s0")
    with pytest.raises(ValueError, match=r"^analyse tiny-random-s0: unknown preset 'tiny'$"):
        _result(failing(ValueError("unknown preset 'tiny'")), None, "analyse", run)
    with pytest.raises(KeyError, match="x"):
        _result(failing(KeyError("x")), None, "train", run)
    assert _result(SimpleNamespace(exceptions=ray.exceptions, get=lambda ref: 5), None, "train", run) == 5
