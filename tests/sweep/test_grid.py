"""Grid files: the shipped grids parse, every kind of bad input names its field, runs expand and pack."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lsa_interp.sweep.grid import load_grid, parse_grid
from lsa_interp.sweep.plan import (
    PLAN_FILE,
    SweepRun,
    analysis_dir,
    data_dir,
    expand,
    load_sweep_grid,
    model_dir,
    pack,
    plan_stacks,
    stack_config,
    stack_dir,
)

GRIDS = Path(__file__).resolve().parents[2] / "grids"


CELL = {"presets": ["copy-20"], "batching": ["random"]}


def _grid(**top) -> dict:
    return {"seeds": [0, 1], "cells": [CELL], **top}


def test_paper_grid_is_the_issue_14_grid():
    grid = load_grid(GRIDS / "paper.toml")
    runs = expand(grid)
    cells = {(run.dataset, run.batching) for run in runs}
    assert len(runs) == 5 * len(cells) == 130
    assert {("copy-20", m) for m in ("random", "alphabet", "transformation", "transformation_alphabet")} <= cells
    assert ("nocopy-20", "transformation_alphabet") in cells and ("copy-400", "random") in cells
    assert ("copy-20-5shot", "alphabet") in cells and ("copy-20-5shot", "random") not in cells
    assert {run.seed for run in runs} == set(range(5))


def test_tiny_grid_defines_its_own_datasets():
    grid = load_grid(GRIDS / "tiny.toml")
    assert grid.dataset_config("tiny").n_alphabets == 4
    assert grid.dataset_config("tiny-nocopy").copy is False
    assert grid.dataset_config("copy-20").name == "copy-20"


@pytest.mark.parametrize(
    ("data", "field", "allowed"),
    [
        (_grid(cells=[{"presets": ["copy-21"], "batching": ["random"]}]), "cells[0].presets[0]", "copy-200"),
        (_grid(cells=[{"presets": ["copy-20"], "batching": ["shuffled"]}]), "cells[0].batching[0]", "alphabet"),
        (_grid(seeds=[0, -1]), "seeds[1]", "an integer in 0..2,147,483,647, got -1"),
        (
            _grid(cells=[{"presets": ["copy-20"], "batching": ["random"], "seeds": [-3]}]),
            "cells[0].seeds[0]",
            "in 0..2,147,483,647",
        ),
        (_grid(cells=[{"batching": ["random"]}]), "cells[0].presets", "missing"),
        ({"cells": [{"presets": ["copy-20"], "batching": ["random"]}]}, "cells[0].seeds", "missing"),
        ({"seeds": [0]}, "cells", "missing"),
        (_grid(epoch=3), "epoch", "epochs"),
        (_grid(recipe={"batchsize": 3}), "recipe.batchsize", "batch_size"),
        (_grid(recipe={"batch_size": "32"}), "recipe.batch_size", "integer"),
        (_grid(recipe={"length_bucketing": 1}), "recipe.length_bucketing", "true or false"),
        (_grid(replicates=0), "replicates", ">= 1"),
        (_grid(precision="fp8"), "precision", "bf16"),
        (_grid(analyses=["matchin"]), "analyses[0]", "matching"),
        (_grid(model={"d_modle": 32}), "model", "d_model"),
        (_grid(seeds={"start": 2}), "seeds.stop", "missing"),
        (_grid(datasets={"copy-20": {"n_alphabets": 4}}), "datasets.copy-20", "another"),
        (_grid(datasets={"mine": {"n_alphabet": 4}}), "datasets.mine", "n_alphabet"),
        (_grid(eval_limit=2.5), "eval_limit", "integer"),
        (_grid(eval_limit=0), "eval_limit", ">= 1"),
        (_grid(max_minutes=0), "max_minutes", "positive number"),
        (_grid(max_minutes=-2.5), "max_minutes", "positive number"),
        (_grid(max_minutes="9"), "max_minutes", "positive number"),
        (_grid(max_minutes=True), "max_minutes", "positive number"),
        ({"seeds": [0], "cells": []}, "cells", "one or more"),
        ({"seeds": [0], "cells": 5}, "cells", "one or more"),
        ({"seeds": [0], "cells": [5]}, "cells", "one or more"),
        (_grid(cells=[{"presets": "copy-20", "batching": ["random"]}]), "cells[0].presets", "non-empty list"),
        (_grid(cells=[{"presets": [], "batching": ["random"]}]), "cells[0].presets", "non-empty list"),
        (_grid(cells=[{"presets": ["copy-20"], "batching": []}]), "cells[0].batching", "non-empty list"),
        (_grid(cells=[{"presets": ["copy-20"], "batching": ["random"], "epoch": 3}]), "cells[0].epoch", "epochs"),
        (_grid(cells=[{**CELL, "precision": "fp16"}]), "cells[0].precision", "bf16"),
        (_grid(epochs=0), "epochs", ">= 1"),
        (_grid(cells=[{**CELL, "epochs": 0}]), "cells[0].epochs", ">= 1"),
        (_grid(data_seed=-1), "data_seed", ">= 0"),
        (_grid(cells=[{**CELL, "data_seed": -1}]), "cells[0].data_seed", ">= 0"),
        (_grid(seeds=[]), "seeds", "a list of 1 to 10,000 integers >= 0 or a range"),
        (_grid(seeds=5), "seeds", "a list of 1 to 10,000 integers"),
        (_grid(seeds=list(range(10_001))), "seeds", "a list of 1 to 10,000 integers"),
        (_grid(seeds=[2**32]), "seeds[0]", "in 0..2,147,483,647, got 4,294,967,296"),  # an OverflowError mid-sweep
        (_grid(seeds={"start": 0, "stop": 10**11}), "seeds.stop", "in 1..10,000, got 100,000,000,000"),  # a MemoryError
        (_grid(seeds={"start": 2**31, "stop": 2**31 + 1}), "seeds.start", "in 0..2,147,483,647"),
        (_grid(seeds={"begin": 0, "stop": 2}), "seeds.begin", "start, stop"),
        (_grid(seeds={"start": -1, "stop": 2}), "seeds.start", "in 0..2,147,483,647"),
        (_grid(seeds={"start": 2, "stop": 2}), "seeds.stop", "an integer in 3..10,002, got 2"),
        (_grid(recipe={"betas": [0.9]}), "recipe.betas", "list of 2 numbers"),
        (_grid(recipe={"betas": [0.9, "x"]}), "recipe.betas[1]", "must be a number"),
        (_grid(recipe={"lr": "0.1"}), "recipe.lr", "must be a number"),
        (_grid(recipe={"lr": 0}), "recipe", "lr must be a positive finite number"),  # ranges are the recipe's
        (_grid(recipe={"device": "gpu"}), "recipe", "unknown device 'gpu'; choose one of: auto, cpu, cuda, cuda:N"),
        (_grid(recipe={"betas": [0.9, 1.0]}), "recipe", "betas must be two numbers in [0, 1)"),
        (_grid(recipe={"weight_decay": -0.01}), "recipe", "weight_decay must be at least 0"),
        (_grid(recipe={"batch_size": 0}), "recipe.batch_size", ">= 1"),
        (_grid(recipe={"attention": "flash"}), "recipe", "packing"),  # a combination only a stack's config refuses
    ],
)
def test_bad_grid_names_the_field(data, field, allowed):
    """The message starts with the field, where it was given (a cell's own setting, or the top level's)."""
    with pytest.raises(ValueError, match="^" + re.escape(field) + ":") as err:
        parse_grid(data)
    assert allowed in str(err.value)
    assert "\n" not in str(err.value)


def test_the_edges_a_grid_accepts():
    grid = parse_grid(_grid(seeds={"stop": 3}, eval_limit=1, max_minutes=30, recipe={"batch_size": 1, "lr": 1}))
    assert grid.cells[0].seeds == (0, 1, 2) and grid.eval_limit == 1 and grid.max_minutes == 30.0
    assert grid.recipe == {"batch_size": 1, "lr": 1.0} and grid.replicates == 8
    assert parse_grid(_grid(seeds={"start": 2, "stop": 3})).cells[0].seeds == (2,)
    assert (parse_grid(_grid()).eval_limit, parse_grid(_grid()).max_minutes) == (None, None)
    zeros = {"weight_decay": 0, "warmup_start": 0, "final_lr_factor": 0, "betas": [0, 0.999]}  # no decay, a 0 floor
    assert parse_grid(_grid(recipe=zeros)).recipe == {**zeros, "weight_decay": 0.0, "betas": (0.0, 0.999)} | {
        "warmup_start": 0.0,
        "final_lr_factor": 0.0,
    }


def test_bad_toml_and_missing_file(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text("seeds = [0,\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: not valid TOML \\(Invalid value"):
        load_grid(path)
    path.write_text("seeds = [0]\nseeds = [1]\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: not valid TOML \\(Cannot overwrite a value"):
        load_grid(path)
    path.write_bytes(b"seeds = [0]\n# \xff\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: not UTF-8 text, which TOML must be .*byte 0xff"):
        load_grid(path)
    with pytest.raises(ValueError, match="no such grid file"):
        load_grid(tmp_path / "absent.toml")
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path))}: a directory; give a grid file"):
        load_grid(tmp_path)


def test_a_grid_is_read_as_utf_8_whatever_the_locale(tmp_path, ascii_locale):
    path = tmp_path / "grid.toml"
    text = 'seeds = [0, 1]  # graines des données\n[[cells]]\npresets = ["copy-20"]\nbatching = ["random"]\n'
    path.write_text(text, encoding="utf-8")
    assert load_grid(path) == parse_grid(_grid())


def test_seed_ranges_cell_overrides_and_duplicate_runs():
    grid = parse_grid(
        {
            "seeds": {"start": 2, "stop": 5},
            "cells": [
                {"presets": ["copy-20"], "batching": ["random", "alphabet"]},
                {"presets": ["copy-20"], "batching": ["random"], "precision": "bf16", "seeds": [0]},
            ],
        }
    )
    names = [run.name for run in expand(grid)]
    assert names[:3] == ["copy-20-random-s2", "copy-20-random-s3", "copy-20-random-s4"]
    assert names[-1] == "copy-20-random-s0-bf16"
    again = parse_grid({"seeds": [0], "cells": [{"presets": ["copy-20"], "batching": ["random"]}] * 2})
    with pytest.raises(ValueError, match=r"cells\[1\]: run copy-20-random-s0 is already"):
        expand(again)


def test_a_run_in_two_cells_is_refused_naming_the_grid_file(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text("seeds = [0]\n" + '[[cells]]\npresets = ["copy-20"]\nbatching = ["random"]\n' * 2)
    message = f"^{re.escape(str(path))}: cells\\[1\\]: run copy-20-random-s0 is already in an earlier cell$"
    with pytest.raises(ValueError, match=message):
        load_sweep_grid(path)
    absent = tmp_path / "absent.toml"
    with pytest.raises(ValueError, match=f"^{re.escape(str(absent))}: no such grid file$"):
        load_sweep_grid(absent)
    assert load_sweep_grid(GRIDS / "tiny.toml") == load_grid(GRIDS / "tiny.toml")


def test_pack_keeps_precisions_apart_and_bounds_stack_size():
    runs = [SweepRun("copy-20", "random", s) for s in range(5)] + [SweepRun("copy-20", "random", 0, "bf16")]
    stacks = pack(runs, 2)
    assert [len(s.runs) for s in stacks] == [2, 2, 1, 1]
    assert [s.name for s in stacks] == ["stack-000", "stack-001", "stack-002", "stack-003"]
    assert all(len({r.precision for r in s.runs}) == 1 for s in stacks)


def test_plan_is_kept_and_extended(tmp_path):
    grid = parse_grid(_grid(replicates=2, seeds=[0, 1, 2]))
    first = plan_stacks(grid, tmp_path)
    assert [[r.seed for r in s.runs] for s in first] == [[0, 1], [2]]
    bigger = parse_grid(_grid(replicates=2, seeds=[0, 1, 2, 3, 4]))
    second = plan_stacks(bigger, tmp_path)
    assert second[:2] == first and [[r.seed for r in s.runs] for s in second[2:]] == [[3, 4]]
    assert len(json.loads((tmp_path / PLAN_FILE).read_text())["stacks"]) == 3
    assert [s.name for s in plan_stacks(parse_grid(_grid(replicates=2, seeds=[4])), tmp_path)] == ["stack-002"]
    with pytest.raises(ValueError, match=r"^the grid's recipe.batch_size differs from the sweep in "):
        plan_stacks(parse_grid(_grid(recipe={"batch_size": 8})), tmp_path)
    changed = _grid(recipe={"lr": 0.002, "batch_size": 8}, model={"d_model": 32, "n_heads": 4})
    with pytest.raises(ValueError, match=r"grid's recipe.batch_size, recipe.lr, model.d_model, model.n_heads differ"):
        plan_stacks(parse_grid(changed), tmp_path)
    with pytest.raises(ValueError, match="was planned"):
        plan_stacks(parse_grid(_grid(epochs=3)), tmp_path)


def test_a_grid_that_redefines_one_of_its_datasets_is_refused_and_a_new_one_is_kept(tmp_path):
    """Runs of a redefined ``[datasets.NAME]`` would train on other data under the same names: refused, like a
    changed recipe; a dataset the saved plan lacks (a plan written before datasets were saved, or a new one) joins."""
    tiny = {"n_alphabets": 4, "window_lengths": [3], "n_reshuffle": 1, "n_new_alphabets": 4}
    cell = {"presets": ["tiny"], "batching": ["random"]}
    plan_stacks(parse_grid({"seeds": [0], "cells": [cell], "datasets": {"tiny": tiny}}), tmp_path)
    saved = json.loads((tmp_path / PLAN_FILE).read_text())
    assert saved["datasets"]["tiny"]["n_alphabets"] == 4
    wider = {"seeds": [0, 1], "cells": [cell], "datasets": {"tiny": {**tiny, "n_alphabets": 8}}}
    with pytest.raises(ValueError, match="the grid's dataset tiny differs from the sweep"):
        plan_stacks(parse_grid(wider), tmp_path)
    other = {"seeds": [0], "cells": [cell, {"presets": ["other"], "batching": ["random"]}]}
    plan_stacks(parse_grid({**other, "datasets": {"tiny": tiny, "other": {**tiny, "n_alphabets": 8}}}), tmp_path)
    assert set(json.loads((tmp_path / PLAN_FILE).read_text())["datasets"]) == {"tiny", "other"}
    (tmp_path / PLAN_FILE).write_text(json.dumps({k: v for k, v in saved.items() if k != "datasets"}))
    assert plan_stacks(parse_grid(wider), tmp_path)  # an older plan without datasets: nothing to compare


def test_the_first_invocation_writes_the_plan_into_new_directories_and_later_ones_leave_it_untouched(tmp_path):
    grid = parse_grid(_grid(replicates=2, seeds=[0, 1, 2]))
    out = tmp_path / "sweeps" / "first" / "grid"
    plan_stacks(grid, out)
    written = (out / PLAN_FILE).stat()
    plan_stacks(grid, out)
    plan_stacks(parse_grid(_grid(replicates=2, seeds=[1])), out)
    kept = (out / PLAN_FILE).stat()
    assert (kept.st_ino, kept.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)  # an atomic rewrite is a new file


def test_the_sweep_directory_has_the_documented_layout(tmp_path):
    """docs/sweeps.md and the module docstring: what `gpu_train.sh`, `pack_results.py` and a user's scripts look for."""
    (stack,) = plan_stacks(parse_grid(_grid(data_seed=2)), tmp_path)
    replicate = tmp_path / "stacks" / "stack-000" / "replicate-1"
    assert stack_dir(tmp_path, stack) == tmp_path / "stacks" / "stack-000"
    assert model_dir(tmp_path, stack, 1) == replicate / "model"
    assert analysis_dir(tmp_path, stack, 1, "matching") == replicate / "analysis" / "matching"
    assert data_dir(tmp_path, stack.runs[0]) == tmp_path / "data" / "copy-20-d2"


def test_stack_config_carries_each_runs_spec(tmp_path):
    grid = parse_grid(_grid(recipe={"batch_size": 16, "val_limit": 8}, model={"d_model": 32}))
    (stack,) = plan_stacks(grid, tmp_path)
    config = stack_config(grid, tmp_path, stack)
    assert [(r.seed, r.preset, r.name) for r in config.runs] == [
        (0, "copy-20", "copy-20-random-s0"),
        (1, "copy-20", "copy-20-random-s1"),
    ]
    assert config.batch_size == 16 and config.val_limit == 8 and config.model == {"d_model": 32}
    assert Path(config.runs[0].data_dir) == (tmp_path / "data" / "copy-20-d0").resolve()


def test_a_runs_name_with_its_precision_and_data_seed_labels_its_spec(tmp_path):
    grid = parse_grid(_grid(seeds=[3], precision="bf16", data_seed=1))
    (stack,) = plan_stacks(grid, tmp_path)
    (spec,) = stack_config(grid, tmp_path, stack).runs
    assert spec.name == "copy-20-random-s3-bf16-d1"
    assert Path(spec.data_dir) == (tmp_path / "data" / "copy-20-d1").resolve()


def test_a_stack_of_bf16_runs_trains_in_bf16_and_one_of_fp32_runs_in_fp32(tmp_path):
    grid = parse_grid(_grid())
    for precision in ("bf16", "fp32"):
        stack = pack([SweepRun("copy-20", "random", 0, precision)], 1)[0]
        assert stack_config(grid, tmp_path, stack).precision == precision
