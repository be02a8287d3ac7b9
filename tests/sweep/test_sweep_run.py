"""The in-process sweep: a bad grid trains nothing, a sweep finishes and is idempotent, a killed sweep resumes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from lsa_interp.cli import main
from lsa_interp.sweep import runner, work
from lsa_interp.sweep.failures import Failure
from lsa_interp.sweep.runner import SweepSummary, run_sweep
from lsa_interp.training.run_dir import StoppedBySignal
from tests.sweep.tiny_grid import evaluations, model_weights, same_weights, write_tiny_grid

REPO = Path(__file__).resolve().parents[2]


def test_bad_grid_exits_2_with_one_line_and_trains_nothing(tmp_path, capsys):
    grid = write_tiny_grid(tmp_path / "grid.toml")
    grid.write_text(grid.read_text().replace('presets = ["tiny", "tiny-nocopy"]', 'presets = ["tiny", "copy-21"]'))
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", str(grid), "--out", str(tmp_path / "sweep")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cells[0].presets[1]" in err and "copy-200" in err
    assert not (tmp_path / "sweep").exists()


def test_a_run_in_two_cells_exits_2_naming_the_grid_file(tmp_path, capsys):
    grid = write_tiny_grid(tmp_path / "grid.toml")
    grid.write_text(grid.read_text() + '[[cells]]\npresets = ["tiny"]\nbatching = ["random"]\nseeds = [1]\n')
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", str(grid), "--out", str(tmp_path / "sweep")])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err == f"lsa-interp: error: {grid}: cells[1]: run tiny-random-s1 is already in an earlier cell"
    assert not (tmp_path / "sweep").exists()


def test_a_batch_larger_than_a_datasets_training_rows_exits_2_before_any_training(tmp_path, capsys, monkeypatch):
    grid = write_tiny_grid(tmp_path / "grid.toml", batch_size=1805, small=True)  # the small datasets: 1,804 rows
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", str(grid), "--out", str(tmp_path / "sweep")])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "the recipe's batch_size 1,805 is larger than the 1,804 training rows of tiny (data seed 0)" in err
    assert not (tmp_path / "sweep").exists()  # nothing written: no plan, datasets or stacks
    fits = write_tiny_grid(tmp_path / "fits.toml", batch_size=902, small=True)  # tiny-nocopy's 902 rows, all of them
    summary = run_sweep(fits, tmp_path / "sweep", max_minutes=0, progress=False)
    assert (summary.runs, summary.finished) == (4, 0) and (tmp_path / "sweep" / "data" / "tiny-nocopy-d0").is_dir()
    saved = write_tiny_grid(tmp_path / "over.toml", batch_size=903, small=True)
    monkeypatch.setattr(work, "split_sizes", None)  # the rows now come from the saved datasets' manifests
    with pytest.raises(ValueError, match=r"batch_size 903 is larger than the 902 training rows of tiny-nocopy \("):
        run_sweep(saved, tmp_path / "sweep", max_minutes=0, progress=False)


def test_a_recipe_without_batch_size_is_checked_with_the_default_batch(tmp_path):
    grid = write_tiny_grid(tmp_path / "grid.toml", small=True)
    text = grid.read_text().replace("batch_size = 8\n", "")  # the recipe's default batch: Recipe.batch_size, 32
    one_rule = 'n_alphabets = 0\ncopy = false\ntrain_transformations = ["succ"]'  # tiny-nocopy: 21 training rows
    grid.write_text(text.replace("n_alphabets = 4\ncopy = false", one_rule))
    with pytest.raises(ValueError, match=r"batch_size 32 is larger than the 21 training rows of tiny-nocopy \("):
        run_sweep(grid, tmp_path / "sweep", max_minutes=0, progress=False)
    assert not (tmp_path / "sweep").exists()


def test_a_directory_that_is_neither_empty_nor_a_sweep_is_refused_before_anything_is_written(tmp_path, capsys):
    grid = write_tiny_grid(tmp_path / "grid.toml")
    other = tmp_path / "checkpoint"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", str(grid), "--out", str(other)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert f"{other} is not empty and holds no sweep (plan.json): give a new or empty --out" in err
    assert sorted(path.name for path in other.iterdir()) == ["model.safetensors"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_sweep(grid, empty, max_minutes=0, progress=False).runs == 4  # an empty directory, then its own sweep
    assert run_sweep(grid, empty, max_minutes=0, progress=False).runs == 4


def test_max_minutes_spent_starts_no_training(tmp_path):
    grid = write_tiny_grid(tmp_path / "grid.toml")
    summary = run_sweep(grid, tmp_path / "out", max_minutes=0, progress=False)
    assert (summary.runs, summary.finished, summary.results) == (4, 0, None) and not summary.complete
    assert (tmp_path / "out" / "plan.json").is_file() and (tmp_path / "out" / "data" / "tiny-d0").is_dir()
    assert not (tmp_path / "out" / "stacks").exists()


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory) -> Path:
    """The tiny grid swept in-process without interruption."""
    root = tmp_path_factory.mktemp("sweep")
    summary = run_sweep(write_tiny_grid(root / "grid.toml", analyses=("matching",)), root / "out", progress=False)
    assert summary.complete and summary.runs == 4
    return root / "out"


@pytest.mark.slow
def test_sweep_trains_evaluates_analyses_and_collects(finished_sweep):
    weights = model_weights(finished_sweep)
    assert sorted(weights) == ["tiny-nocopy-random-s0", "tiny-nocopy-random-s1", "tiny-random-s0", "tiny-random-s1"]
    assert set(evaluations(finished_sweep)) == set(weights)
    assert len(list(finished_sweep.glob("stacks/stack-000/replicate-*/analysis/matching/*.json"))) == 4
    assert sorted(p.name for p in (finished_sweep / "data").iterdir()) == ["tiny-d0", "tiny-nocopy-d0"]
    table = pd.read_csv(finished_sweep / "results.csv")
    assert len(table) == 4
    described = table.groupby("preset")[["n_alphabets", "copy", "n_shots"]].first()  # the grid's own datasets
    assert described.to_dict("index") == {
        "tiny": {"n_alphabets": 4, "copy": True, "n_shots": 1},
        "tiny-nocopy": {"n_alphabets": 4, "copy": False, "n_shots": 1},
    }
    fits = sorted(finished_sweep.glob("stacks/*/replicate-*/model/fit.json"))
    assert len(fits) == 4 and table["fit_train"].between(0, 100).all() and table["fit_val"].between(0, 100).all()


@pytest.mark.slow
def test_sweep_again_skips_finished_runs(finished_sweep):
    stamps = {p: p.stat().st_mtime_ns for p in finished_sweep.glob("stacks/*/replicate-*/model/*")}
    summary = run_sweep(finished_sweep / "grid.toml", finished_sweep, progress=False)
    assert summary.complete
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


@pytest.mark.slow
def test_killed_sweep_resumes_to_the_uninterrupted_weights_also_in_another_directory(finished_sweep, tmp_path):
    """Killed mid-stack, then moved, as a carried stack goes on in another machine's checkout: its saved config
    names the first directory's datasets, and the sweep points it at its own."""
    grid = tmp_path / "grid.toml"
    grid.write_text((finished_sweep / "grid.toml").read_text())
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", _KILLABLE, str(grid), str(out)]
    worker = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = out / "stacks" / "stack-000" / "state.pt"
    try:
        while not state.exists() and worker.poll() is None:
            time.sleep(0.02)
        worker.send_signal(signal.SIGKILL)
    finally:
        worker.wait()
    assert worker.returncode == -signal.SIGKILL, "the sweep ended before its first saved state"
    assert not list(out.glob("stacks/*/replicate-*/model/evaluation.json"))
    out = Path(shutil.move(out, tmp_path / "elsewhere"))
    assert run_sweep(grid, out, progress=False).complete
    assert same_weights(model_weights(out), model_weights(finished_sweep))
    assert evaluations(out) == evaluations(finished_sweep)
    saved = json.loads((out / "stacks" / "stack-000" / "train_config.json").read_text())
    assert all(Path(run["data_dir"]).parent == (out / "data").resolve() for run in saved["runs"])


@pytest.mark.slow
def test_an_interrupted_sweep_saves_its_state_exits_130_and_resumes_to_the_same_weights(finished_sweep, tmp_path):
    """Ctrl-C (SIGINT) mid-stack: the stack saves its state, the command says how to continue and exits as an
    interrupted program does; the same command then ends with the uninterrupted sweep's weights."""
    grid = tmp_path / "grid.toml"
    grid.write_text((finished_sweep / "grid.toml").read_text())
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", _KILLABLE_CLI, str(grid), str(out)]
    worker = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = out / "stacks" / "stack-000" / "state.pt"
    try:
        while not state.exists() and worker.poll() is None:
            time.sleep(0.02)
        worker.send_signal(signal.SIGINT)
        _, err = worker.communicate(timeout=120)
    finally:
        worker.kill()
    assert worker.returncode == 130, err
    assert err.splitlines()[-1] == f"{out}: stopped by SIGINT; run the same command again to continue"
    saved = torch.load(state, weights_only=False)["step"]
    assert 0 < saved < 6 and not list(out.glob("stacks/*/replicate-*/model"))
    assert run_sweep(grid, out, progress=False).complete
    assert same_weights(model_weights(out), model_weights(finished_sweep))


def test_the_sweep_command_lists_each_failure_and_exits_1(tmp_path, capsys, monkeypatch):
    log = tmp_path / "out" / "failures" / "analyse-matching-tiny-random-s0.txt"
    failure = Failure("analyse matching", "tiny-random-s0", "RuntimeError: shape mismatch", log)
    summary = SweepSummary(4, 3, tmp_path / "out" / "results.csv", (failure,))
    monkeypatch.setattr(runner, "run_sweep", lambda grid, out, ray, max_minutes: summary)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "grid.toml", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 1
    out, err = capsys.readouterr()
    table = tmp_path / "out" / "results.csv"
    assert out == f"{tmp_path / 'out'}: 3/4 runs finished; table: {table}; run the same command again to continue\n"
    assert (
        err == f"lsa-interp: failed: analyse matching tiny-random-s0: RuntimeError: shape mismatch (traceback: {log})\n"
    )


@pytest.mark.parametrize(
    ("stop", "code", "name"), [(KeyboardInterrupt(), 130, "SIGINT"), (StoppedBySignal(signal.SIGTERM), 143, "SIGTERM")]
)
def test_a_sweep_stopped_by_a_signal_exits_as_that_signal_does(tmp_path, capsys, monkeypatch, stop, code, name):
    def stopped(grid, out, ray, max_minutes):
        raise stop

    monkeypatch.setattr(runner, "run_sweep", stopped)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "grid.toml", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == code
    assert capsys.readouterr().err == f"{tmp_path / 'out'}: stopped by {name}; run the same command again to continue\n"


# The sweep in a child process, one torch thread (as the test process), each step slowed so the kill lands
# mid-stack: a training step is a few milliseconds on the tiny model.
_KILLABLE = """
import sys, time, torch
torch.set_num_threads(1)
from lsa_interp.training import stack_trainer
step = stack_trainer.StackStep.run
stack_trainer.StackStep.run = lambda self, index: (time.sleep(0.2), step(self, index))[1]
from lsa_interp.sweep.runner import run_sweep
run_sweep(sys.argv[1], sys.argv[2], progress=False)
"""

_KILLABLE_CLI = _KILLABLE.replace(
    "from lsa_interp.sweep.runner import run_sweep\nrun_sweep(sys.argv[1], sys.argv[2], progress=False)",
    "from lsa_interp.cli import main\nmain(['sweep', sys.argv[1], '--out', sys.argv[2]])",
)
