"""`start_run` and `resume_run` hand a run to the trainer its config asks for, with every argument given."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from lsa_interp.training import StackConfig, TrainConfig, runs
from lsa_interp.training.run_dir import CONFIG_FILE


@pytest.fixture
def calls(monkeypatch):
    """Stand-ins for the two trainers' `start` and `resume` that record their arguments."""
    seen = []

    def stand_in(kind, what):
        def record(cls, *args, **kwargs):
            seen.append((kind, what, args, kwargs))
            trainer = cls.__new__(cls)  # an instance of the right class, not built
            trainer.made_by = f"{kind}.{what}"
            return trainer

        return classmethod(record)

    for kind, cls in (("single", runs.Trainer), ("stack", runs.StackTrainer)):
        for what in ("start", "resume"):
            monkeypatch.setattr(cls, what, stand_in(kind, what))
    return seen


@pytest.mark.parametrize("force", [False, True])
def test_one_model_starts_a_trainer_with_its_config_folder_and_force(calls, tmp_path, force):
    config = TrainConfig(data_dir="d", seed=3)
    assert runs.start_run(config, tmp_path / "run", force=force).made_by == "single.start"
    assert calls == [("single", "start", (config, tmp_path / "run"), {"force": force})]


def test_force_is_off_unless_given(calls, tmp_path):
    runs.start_run(TrainConfig(data_dir="d"), tmp_path)
    runs.start_run(TrainConfig(data_dir="d", replicates=2), tmp_path)
    assert [call[3] for call in calls] == [{"force": False}, {"force": False}]


@pytest.mark.parametrize("force", [False, True])
def test_replicates_start_a_stack_of_the_configs_seeds(calls, tmp_path, force):
    config = TrainConfig(data_dir="d", seed=3, replicates=2, epochs=7)
    assert runs.start_run(config, tmp_path / "run", force=force).made_by == "stack.start"
    ((kind, what, args, kwargs),) = calls
    assert (kind, what, args[1:], kwargs) == ("stack", "start", (tmp_path / "run",), {"force": force})
    assert isinstance(args[0], StackConfig) and args[0] == StackConfig.from_train_config(config)
    assert [(spec.seed, spec.epochs) for spec in args[0].runs] == [(3, 7), (4, 7)]


def test_resume_passes_both_bounds_to_the_trainer_of_the_run(calls, tmp_path):
    single, stack = tmp_path / "single", tmp_path / "stack"
    single.mkdir()
    (single / CONFIG_FILE).write_text(json.dumps(asdict(TrainConfig(data_dir="d"))))
    stack.mkdir()
    (stack / CONFIG_FILE).write_text(json.dumps({"stack": True}))
    assert runs.resume_run(single, max_steps=5, max_minutes=7.5).made_by == "single.resume"
    assert runs.resume_run(stack, max_steps=6, max_minutes=2.5).made_by == "stack.resume"
    assert runs.resume_run(stack).made_by == "stack.resume"
    assert [call[2:] for call in calls] == [
        ((single,), {"max_steps": 5, "max_minutes": 7.5}),
        ((stack,), {"max_steps": 6, "max_minutes": 2.5}),
        ((stack,), {"max_steps": None, "max_minutes": None}),
    ]
