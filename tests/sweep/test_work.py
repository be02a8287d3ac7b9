"""The sweep's units of work, each on its own: what each one skips, what it makes, and what it leaves behind."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lsa_interp.data.dataset import load_dataset, read_manifest
from lsa_interp.evaluation.fit import FIT_ROWS
from lsa_interp.model.checkpoint import save_model
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.sweep import work
from lsa_interp.sweep.grid import load_grid
from lsa_interp.sweep.plan import data_dir, plan_stacks, stack_config
from lsa_interp.training.run_dir import CONFIG_FILE, DONE_FILE, METRICS_FILE
from tests.helpers import TINY
from tests.sweep.tiny_grid import write_tiny_grid


@pytest.fixture
def sweep(tmp_path):
    """The small tiny grid planned in ``tmp_path/out`` with its two datasets made: (grid, out, stack config)."""
    grid = load_grid(write_tiny_grid(tmp_path / "grid.toml", max_steps=2, small=True))
    out = tmp_path / "out"
    stacks = plan_stacks(grid, out)
    for run in stacks[0].runs:
        work.ensure_dataset(grid.dataset_config(run.dataset), run.data_seed, data_dir(out, run))
    return grid, out, stack_config(grid, out, stacks[0])


def test_ensure_dataset_makes_it_once_and_again_for_another_seed_or_preset(sweep, tmp_path):
    grid, out, _ = sweep
    tiny, nocopy = grid.dataset_config("tiny"), grid.dataset_config("tiny-nocopy")
    directory = tmp_path / "data"
    assert work.ensure_dataset(tiny, 0, directory)
    stamp = (directory / "manifest.json").stat().st_mtime_ns
    assert not work.ensure_dataset(tiny, 0, directory)
    assert (directory / "manifest.json").stat().st_mtime_ns == stamp
    assert work.ensure_dataset(tiny, 1, directory)
    assert (read_manifest(directory)["preset"], read_manifest(directory)["seed"]) == ("tiny", 1)
    assert work.ensure_dataset(nocopy, 1, directory)
    assert (read_manifest(directory)["preset"], read_manifest(directory)["seed"]) == ("tiny-nocopy", 1)
    wider = dataclasses.replace(nocopy, n_alphabets=8)  # the same name and seed, other options: made again
    assert work.ensure_dataset(wider, 1, directory) and read_manifest(directory)["config"]["n_alphabets"] == 8
    assert not work.ensure_dataset(wider, 1, directory)


def test_ensure_dataset_replaces_a_directory_without_a_manifest(sweep, tmp_path):
    grid, _, _ = sweep
    directory = tmp_path / "half"
    directory.mkdir()
    (directory / "train.parquet").write_text("cut short")
    assert work.ensure_dataset(grid.dataset_config("tiny"), 0, directory)
    assert read_manifest(directory)["seed"] == 0


def _write_model(directory: Path, replicate: int, steps: int | None, all_epochs: bool = False) -> None:
    """A replicate's model config saying it trained ``steps`` steps (None: a config that does not say), and with
    ``all_epochs`` that those were all its epochs (a shorter run of the stack, finished before max_steps)."""
    path = directory / f"replicate-{replicate}" / "model" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {} if steps is None else {"steps": steps}
    if all_epochs:
        meta |= {"epochs_completed": 1.0, "train_config": {"epochs": 1}}
    path.write_text(json.dumps({"metadata": meta}))


def test_stack_finished_by_its_marker_or_by_every_model_at_max_steps_or_its_epochs(sweep, tmp_path):
    _, _, config = sweep
    assert config.replicates == 4 and config.max_steps == 2
    directory = tmp_path / "stack"
    directory.mkdir()
    assert not work.stack_finished(directory, config)
    for replicate, steps in enumerate([2, 1, 1]):
        _write_model(directory, replicate, steps, all_epochs=replicate > 0)
    assert not work.stack_finished(directory, config), "a replicate's model is missing"
    _write_model(directory, 3, 1)
    assert not work.stack_finished(directory, config), "replicate 3 stopped at step 1 before its epochs ended"
    _write_model(directory, 3, 2)
    assert work.stack_finished(directory, config), "each replicate reached max_steps or trained all its epochs"
    _write_model(directory, 0, 1)
    assert not work.stack_finished(directory, config)
    _write_model(directory, 0, 3)
    assert work.stack_finished(directory, config)
    assert not work.stack_finished(directory, config.with_bounds(max_steps=4))
    unbounded = type(config).from_dict({**config.to_dict(), "max_steps": None})
    assert not work.stack_finished(directory, unbounded), "without max_steps only the marker says it is done"
    (directory / DONE_FILE).write_text("")
    assert work.stack_finished(directory, unbounded) and work.stack_finished(tmp_path / "stack", config)


def test_a_model_that_does_not_say_its_steps_counts_as_step_0(sweep, tmp_path):
    _, _, config = sweep
    for replicate in range(4):
        _write_model(tmp_path, replicate, None)
    assert not work.stack_finished(tmp_path, config.with_bounds(max_steps=1))


def test_steps_logged_is_the_last_step_record(tmp_path):
    assert work.steps_logged(tmp_path) == 0
    records = [{"type": "startup", "step": 1}, {"type": "epoch", "step": 9}]
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert work.steps_logged(tmp_path) == 0
    records[1:1] = [{"type": "step", "step": 4}, {"type": "step", "step": 6}]
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert work.steps_logged(tmp_path) == 6
    records.append({"type": "step"})
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert work.steps_logged(tmp_path) == 0, "a step record without its step counts as step 0"


def test_train_stack_trains_once_and_then_reports_finished(sweep, monkeypatch):
    _, out, config = sweep
    directory = out / "stack"
    records = []
    assert work.train_stack(config, directory, progress=records.append)
    assert [r["step"] for r in records] == [2] and records[0]["total_steps"] == 2
    saved = json.loads((directory / CONFIG_FILE).read_text())
    assert [run["name"] for run in saved["runs"]] == [run.name for run in config.runs]
    monkeypatch.setattr(work.StackTrainer, "resume", lambda *a, **k: pytest.fail("a finished stack trained again"))
    assert work.train_stack(config, directory)


def test_train_stack_past_its_deadline_starts_nothing(sweep, monkeypatch):
    _, out, config = sweep
    assert not work.train_stack(config, out / "stack", deadline=0.0)
    monkeypatch.setattr(work.time, "time", lambda: 1000.0)
    assert not work.train_stack(config, out / "stack", deadline=1000.0), "no minute left at the deadline itself"
    assert not (out / "stack").exists()


def test_train_stack_trains_with_less_than_a_minute_left(sweep):
    _, out, config = sweep
    assert work.train_stack(config, out / "stack", deadline=work.time.time() + 30)
    assert work.steps_logged(out / "stack") == 2


def test_train_stack_starts_over_a_directory_that_holds_no_stack(sweep):
    """A stack directory without its config (a start cut short, a stray file) is started afresh, not refused."""
    _, out, config = sweep
    directory = out / "stack"
    directory.mkdir()
    (directory / METRICS_FILE).write_text(json.dumps({"type": "step", "step": 9}) + "\n")
    assert work.train_stack(config, directory)
    assert work.steps_logged(directory) == 2


def test_train_stack_resumes_a_stopped_stack_with_the_minutes_left(sweep, monkeypatch):
    _, out, config = sweep
    directory = out / "stack"
    work.StackTrainer.start(config, directory)
    work.StackTrainer.resume(directory, max_steps=1).run()
    assert work.steps_logged(directory) == 1 and not work.stack_finished(directory, config)
    bounds = []
    run = work.StackTrainer.run

    def spy(trainer, progress=None, max_minutes=None):
        bounds.append((trainer.run_dir, trainer.config.max_steps, max_minutes))
        return run(trainer, progress=progress, max_minutes=max_minutes)

    monkeypatch.setattr(work.StackTrainer, "run", spy)
    monkeypatch.setattr(work.StackTrainer, "start", lambda *a, **k: pytest.fail("a started stack restarted"))
    assert work.train_stack(config, directory, deadline=work.time.time() + 600)
    ((run_dir, max_steps, minutes),) = bounds
    assert run_dir == directory and max_steps == config.max_steps and 9.9 < minutes <= 10
    assert work.steps_logged(directory) == 2


@pytest.mark.parametrize("started", [False, True])
def test_train_stack_builds_one_trainer_and_counts_the_minutes_left_after_building_it(sweep, monkeypatch, started):
    """Building a trainer (data to the device, the model, the plan) takes seconds, on a GPU more: the minutes the
    stack trains are those left once it is built, so that it stops at the deadline; a new stack is built once."""
    _, out, config = sweep
    directory = out / "stack"
    if started:
        work.StackTrainer.start(config, directory)
    clock = [1000.0]
    monkeypatch.setattr(work.time, "time", lambda: clock[0])
    built, given = [], []
    init, run = work.StackTrainer.__init__, work.StackTrainer.run

    def slow_init(trainer, *args, **kwargs):
        init(trainer, *args, **kwargs)
        built.append(trainer)
        clock[0] += 120.0  # two minutes of building

    def spy(trainer, progress=None, max_minutes=None):
        given.append(max_minutes)
        return run(trainer, progress=progress, max_minutes=max_minutes)

    monkeypatch.setattr(work.StackTrainer, "__init__", slow_init)
    monkeypatch.setattr(work.StackTrainer, "run", spy)
    assert work.train_stack(config, directory, deadline=1600.0)
    assert len(built) == 1 and given == [pytest.approx(8.0)]
    clock[0] = 1500.0  # building runs past the deadline: nothing trains
    assert not work.train_stack(config, out / "late", deadline=1600.0)
    assert given == [pytest.approx(8.0)] and work.steps_logged(out / "late") == 0


def test_point_at_datasets_rewrites_only_the_moved_runs(sweep, tmp_path):
    _, _, config = sweep
    directory = tmp_path / "stack"
    directory.mkdir()
    saved = json.loads(json.dumps(config.to_dict()))
    saved["runs"][0]["data_dir"] = "/elsewhere/tiny-d0"
    saved["runs"].append({**saved["runs"][1], "name": "", "data_dir": "/elsewhere/unnamed"})
    (directory / CONFIG_FILE).write_text(json.dumps(saved))
    work.point_at_datasets(directory, config)
    runs = json.loads((directory / CONFIG_FILE).read_text())["runs"]
    assert [run["data_dir"] for run in runs] == [run.data_dir for run in config.runs] + ["/elsewhere/unnamed"]
    assert [run["name"] for run in runs[:4]] == [run.name for run in config.runs]
    stamp = (directory / CONFIG_FILE).stat().st_mtime_ns
    work.point_at_datasets(directory, config)
    assert (directory / CONFIG_FILE).stat().st_mtime_ns == stamp, "nothing moved: the file stays as it was"
    (directory / CONFIG_FILE).write_text(json.dumps({"batch_size": 8}))
    work.point_at_datasets(directory, config)
    assert json.loads((directory / CONFIG_FILE).read_text()) == {"batch_size": 8}, "a config without runs is left be"


@pytest.fixture
def saved_model(sweep, tmp_path) -> tuple[Path, Path]:
    """An untrained tiny model saved beside the sweep's tiny dataset: (model dir, data dir)."""
    _, out, config = sweep
    torch.manual_seed(0)
    model_dir = save_model(HookedEncoderDecoder(TINY), tmp_path / "model")
    return model_dir, Path(config.runs[0].data_dir)


def _spy_splits(monkeypatch) -> list[tuple[str, ...]]:
    loads = []

    def spy(directory, splits=None):
        loads.append(tuple(splits))
        return load_dataset(directory, splits=splits)

    monkeypatch.setattr(work, "load_dataset", spy)
    return loads


def test_evaluate_run_writes_the_evaluation_and_the_fit_once(saved_model, monkeypatch):
    model_dir, data = saved_model
    loads = _spy_splits(monkeypatch)
    assert work.evaluate_run(model_dir, data, "tiny-run", limit=12)
    assert loads == [("train", "val", "test_new_alphabets")]
    evaluation = json.loads((model_dir / "evaluation.json").read_text())
    fit = json.loads((model_dir / "fit.json").read_text())
    assert evaluation["model"] == "tiny-run" and fit["model"] == "tiny-run"
    assert evaluation["limit"] == 12 and fit["rows"] == 12, "the limit bounds the fit's rows too"
    assert not (model_dir / "fit.html").exists(), "a sweep writes no pages"
    assert not work.evaluate_run(model_dir, data, "tiny-run", limit=12)
    assert len(loads) == 1, "both files there: the model and data are not read again"


def test_evaluate_run_makes_only_what_is_missing(saved_model, monkeypatch):
    model_dir, data = saved_model
    loads = _spy_splits(monkeypatch)
    work.evaluate_run(model_dir, data, "tiny-run", limit=12)
    (model_dir / "fit.json").unlink()
    stamp = (model_dir / "evaluation.json").stat().st_mtime_ns
    assert not work.evaluate_run(model_dir, data, "tiny-run", limit=12), "only the fit was written"
    assert loads[-1] == ("train", "val") and (model_dir / "fit.json").is_file()
    assert (model_dir / "evaluation.json").stat().st_mtime_ns == stamp
    (model_dir / "evaluation.json").unlink()
    assert work.evaluate_run(model_dir, data, "tiny-run", limit=12)
    assert loads[-1] == ("val", "test_new_alphabets")


def test_evaluate_run_evaluates_again_under_another_limit(saved_model, monkeypatch):
    model_dir, data = saved_model
    loads = _spy_splits(monkeypatch)
    work.evaluate_run(model_dir, data, "tiny-run", limit=12)
    assert work.evaluate_run(model_dir, data, "tiny-run", limit=20), "a grid's eval_limit changed"
    assert loads[-1] == ("train", "val", "test_new_alphabets")
    assert json.loads((model_dir / "evaluation.json").read_text())["limit"] == 20
    assert json.loads((model_dir / "fit.json").read_text())["rows"] == 20
    (model_dir / "fit.json").write_text(json.dumps({"rows": FIT_ROWS}))
    (model_dir / "evaluation.json").write_text(json.dumps({"limit": None}))
    monkeypatch.setattr(work, "evaluate_model", lambda *args, **kwargs: SimpleNamespace(to_dict=lambda: {"limit": 9}))
    assert work.evaluate_run(model_dir, data, "tiny-run", limit=FIT_ROWS + 1)
    assert loads[-1] == ("val", "test_new_alphabets"), "the fit reads FIT_ROWS rows under either limit"


def test_evaluate_run_sizes_its_batches_and_fit_rows(saved_model, monkeypatch):
    model_dir, data = saved_model
    calls = {}

    class Stored:
        def to_dict(self):
            return {"stand-in": True}

    def fit(model, dataset, rows, name, batch_size):
        calls["fit"] = (rows, name, batch_size)
        return "fit"

    def evaluate(model, dataset, limit, model_name, batch_size):
        calls["evaluate"] = (limit, model_name, batch_size)
        return Stored()

    monkeypatch.setattr(work, "training_fit", fit)
    monkeypatch.setattr(work, "write_fit", lambda result, out, page: (out / "fit.json").write_text(result))
    monkeypatch.setattr(work, "evaluate_model", evaluate)
    work.evaluate_run(model_dir, data, "a", limit=None)
    assert calls == {"fit": (FIT_ROWS, "a", 512), "evaluate": (None, "a", 512)}
    for name in ("fit.json", "evaluation.json"):
        (model_dir / name).unlink()
    work.evaluate_run(model_dir, data, "b", limit=FIT_ROWS + 1)
    assert calls["fit"] == (FIT_ROWS, "b", 512) and calls["evaluate"] == (FIT_ROWS + 1, "b", 512)
    for name in ("fit.json", "evaluation.json"):
        (model_dir / name).unlink()
    model = HookedEncoderDecoder(TINY)
    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("cuda")))
    monkeypatch.setattr(work, "load_model", lambda directory, device: model)
    work.evaluate_run(model_dir, data, "c", limit=7, device="cuda")
    assert calls == {"fit": (7, "c", work.GPU_EVAL_BATCH), "evaluate": (7, "c", work.GPU_EVAL_BATCH)}
    assert json.loads((model_dir / "evaluation.json").read_text()) == {"stand-in": True}


def test_evaluate_run_needs_its_model_and_data(saved_model, tmp_path):
    model_dir, data = saved_model
    with pytest.raises(FileNotFoundError):
        work.evaluate_run(tmp_path / "no-model", data, "x")
    with pytest.raises(FileNotFoundError):
        work.evaluate_run(model_dir, tmp_path / "no-data", "x")
    assert not (model_dir / "evaluation.json").exists() and not (model_dir / "fit.json").exists()


class _Written:
    def __init__(self, fail: bool = False):
        self.fail = fail

    def write(self, directory: Path) -> None:
        directory.mkdir()
        (directory / "result.json").write_text("{}")
        if self.fail:
            raise RuntimeError("the analysis failed half-way")


def test_analyse_run_writes_through_a_staging_directory_once(saved_model, tmp_path, monkeypatch):
    model_dir, _ = saved_model
    calls = []

    def analysis(name):
        def run(model, model_name, seed):
            calls.append((name, type(model).__name__, model_name, seed))
            return _Written()

        return run

    monkeypatch.setattr(work, "analysis_function", analysis)
    out = tmp_path / "analysis" / "matching"
    out.parent.mkdir()
    stale = out.with_name(".matching.staging")
    stale.mkdir()
    (stale / "old.json").write_text("{}")
    assert work.analyse_run(model_dir, out, "matching", "tiny-run")
    assert calls == [("matching", "HookedEncoderDecoder", "tiny-run", 0)]
    assert sorted(p.name for p in out.iterdir()) == ["result.json"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["matching"], "the stale staging directory is gone"
    assert not work.analyse_run(model_dir, out, "matching", "tiny-run") and len(calls) == 1


def test_a_failed_analysis_leaves_no_output_that_counts_as_done(saved_model, tmp_path, monkeypatch):
    model_dir, _ = saved_model
    monkeypatch.setattr(work, "analysis_function", lambda name: lambda model, model_name, seed: _Written(fail=True))
    out = tmp_path / "matching"
    with pytest.raises(RuntimeError, match="half-way"):
        work.analyse_run(model_dir, out, "matching", "tiny-run")
    assert not out.exists()
