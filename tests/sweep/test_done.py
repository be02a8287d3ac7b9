"""Which grid runs are already trained: a sweep's replicates by name, models trained on their own by their recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lsa_interp.evaluation.runs_table import read_metadata
from lsa_interp.sweep.done import finished_runs, grid_run_name
from lsa_interp.sweep.grid import load_grid, parse_grid

GRID_CELLS = [{"presets": ["copy-20"], "batching": ["random"]}]
GRID = parse_grid({
    "seeds": list(range(10)),
    "cells": [*GRID_CELLS, {**GRID_CELLS[0], "precision": "bf16"}, {**GRID_CELLS[0], "seeds": [3], "data_seed": 2}],
})  # fmt: skip
RECIPE = {
    "batch_size": 32, "lr": 0.001, "betas": [0.9, 0.95], "weight_decay": 0.01, "warmup_start": 0.0001,
    "final_lr_factor": 0.05, "length_bucketing": False, "batching": "random", "epochs": 20, "model": {},
    "architecture": "hooked", "device": "cpu", "micro_batches": 4, "val_limit": 5000, "cuda_graph": True,
}  # fmt: skip


def trained_on_its_own(**changes) -> dict:
    """The metadata `lsa-interp train` leaves on a finished single run (a CPU run of copy-20, seed 0)."""
    recipe = {**RECIPE, **changes.pop("recipe", {})}
    for key in changes.pop("drop", ()):
        del recipe[key]
    return {"preset": "copy-20", "seed": 0, "data_seed": 0, "epochs_completed": 20.0, "train_config": recipe, **changes}


def save(root: Path, name: str, meta: dict, evaluated: bool = True) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "config.json").write_text(json.dumps({"metadata": meta}))
    if evaluated:
        (root / name / "evaluation.json").write_text("{}")


def test_a_run_trained_on_its_own_with_the_grids_recipe_is_that_grid_run():
    assert grid_run_name(trained_on_its_own(), GRID) == "copy-20-random-s0"
    assert grid_run_name(trained_on_its_own(seed=3, data_seed=2), GRID) == "copy-20-random-s3-d2"
    assert grid_run_name(trained_on_its_own(recipe={"precision": "bf16"}), GRID) == "copy-20-random-s0-bf16"
    fast = {"device": "cuda", "compile": True, "attention": "triton", "packing": True, "micro_batches": 1}
    assert grid_run_name(trained_on_its_own(recipe=fast), GRID) == "copy-20-random-s0"


@pytest.mark.parametrize(
    "departure",
    [
        {"recipe": {"length_bucketing": True}},
        {"drop": ["length_bucketing"]},  # configs from before the option bucketed
        {"recipe": {"lr": 0.002}},
        {"recipe": {"betas": [0.9, 0.98]}},
        {"recipe": {"batch_size": 64}},
        {"recipe": {"final_lr_factor": 0.1}},
        {"recipe": {"architecture": "reference"}},
        {"recipe": {"model": {"d_model": 64}}},
        {"drop": ["lr"]},
        {"recipe": {"epochs": 12}},  # the grid's run trains 20
        {"seed": 10},  # not a seed of the grid
        {"preset": "copy-200"},  # not a cell of the grid
    ],
)
def test_a_run_that_departs_from_the_grids_recipe_stands_for_no_grid_run(departure):
    assert grid_run_name(trained_on_its_own(**departure), GRID) is None


def test_the_recipe_compared_is_the_grids_own():
    grid = parse_grid({"seeds": [0], "recipe": {"lr": 0.002}, "model": {"d_model": 64}, "cells": GRID_CELLS})
    assert grid_run_name(trained_on_its_own(), grid) is None
    meta = trained_on_its_own(recipe={"lr": 0.002, "model": {"d_model": 64}})
    assert grid_run_name(meta, grid) == "copy-20-random-s0"


def test_a_sweep_replicate_is_the_run_its_metadata_names():
    assert grid_run_name({"run": "nocopy-20-alphabet-s4-bf16"}, GRID) == "nocopy-20-alphabet-s4-bf16"
    assert grid_run_name({"preset": "copy-20", "seed": 0}, GRID) is None  # no recipe recorded


def test_finished_runs_need_an_evaluation_and_every_epoch(tmp_path):
    replicate = lambda run, epochs=20.0: {"run": run, "epochs_completed": epochs, "train_config": {"epochs": 20}}
    save(tmp_path, "a", replicate("copy-20-random-s0"))
    save(tmp_path, "b", replicate("copy-20-random-s1", 19.5))
    save(tmp_path, "c", replicate("copy-20-random-s2"), evaluated=False)
    save(tmp_path / "other", "d", replicate("nocopy-20-random-s0"))
    save(tmp_path / "shipped", "copy-20", trained_on_its_own(seed=7))
    save(tmp_path / "shipped", "partial", trained_on_its_own(seed=8, epochs_completed=2.16))
    save(tmp_path / "shipped", "bucketed", trained_on_its_own(seed=9, recipe={"length_bucketing": True}))
    expected = {"copy-20-random-s0", "nocopy-20-random-s0", "copy-20-random-s7"}
    assert finished_runs([tmp_path], GRID) == expected
    with pytest.raises(FileNotFoundError, match="missing does not exist"):
        finished_runs([tmp_path / "missing"], GRID)


def test_the_shipped_cpu_runs_stand_for_the_queues_runs_and_the_bucketed_gpu_run_for_none():
    root = Path(__file__).parents[2]
    queue = load_grid(root / "grids" / "queue.toml")
    assert {"copy-20-random-s0", "copy-200-alphabet-s0"} <= finished_runs([root / "checkpoints"], queue)
    assert grid_run_name(read_metadata(root / "checkpoints" / "copy-200"), queue) == "copy-200-alphabet-s0"
    bucketed = root / "analyses" / "runs" / "h100-copy-200-alphabet-bucketed"  # shipped as copy-200 until 2026-11-27
    assert grid_run_name(read_metadata(bucketed), queue) is None


def test_settings_a_record_leaves_out_take_their_defaults():
    bare = {"drop": ["model", "architecture"]}  # records from before either was written: our model, its sizes
    assert grid_run_name(trained_on_its_own(**bare), GRID) == "copy-20-random-s0"
    meta = trained_on_its_own()
    del meta["data_seed"]  # the data seed 0
    assert grid_run_name(meta, GRID) == "copy-20-random-s0"
    bucketing_grid = parse_grid({"seeds": [0], "recipe": {"length_bucketing": True}, "cells": GRID_CELLS})
    assert grid_run_name(trained_on_its_own(drop=["length_bucketing"]), bucketing_grid) == "copy-20-random-s0"


def test_the_metadatas_own_batching_and_precision_name_the_run_before_its_recipes():
    meta = trained_on_its_own(batching="random", recipe={"batching": "alphabet"})
    assert grid_run_name(meta, GRID) == "copy-20-random-s0"
    assert grid_run_name(trained_on_its_own(precision="bf16"), GRID) == "copy-20-random-s0-bf16"
    no_preset = trained_on_its_own()
    del no_preset["preset"]
    assert grid_run_name(no_preset, GRID) is None


def test_numbers_of_the_recipe_match_up_to_rounding_only():
    assert grid_run_name(trained_on_its_own(recipe={"lr": 0.001 * (1 + 1e-15)}), GRID) == "copy-20-random-s0"
    assert grid_run_name(trained_on_its_own(recipe={"lr": 0.001 * (1 + 1e-9)}), GRID) is None
    assert grid_run_name(trained_on_its_own(recipe={"batch_size": 32.0}), GRID) == "copy-20-random-s0"
    assert grid_run_name(trained_on_its_own(recipe={"batch_size": True}), GRID) is None


def test_a_config_without_metadata_has_none(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model": {}}))
    assert read_metadata(tmp_path) == {}
