"""lsa_interp.sweep.stackings: the stacking modes a GPU session plans with and their measured step times."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from lsa_interp.sweep.stackings import (
    STACKING_RECIPE,
    check_kind,
    gpu_checks,
    merge_benchmarks,
    step_ms_at,
    step_times,
)


def test_step_time_is_measured_interpolated_or_extrapolated_from_the_two_largest_sizes():
    table = {1: 4.0, 8: 6.0, 32: 12.0}
    assert step_ms_at(table, 8) == 6.0
    assert step_ms_at(table, 20) == pytest.approx(9.0)
    assert step_ms_at(table, 4) == pytest.approx(4.0 + 3 * 2 / 7)
    assert step_ms_at(table, 64) == pytest.approx(20.0)
    assert step_ms_at({8: 6.0}, 16) == pytest.approx(12.0)
    assert step_ms_at({8: 6.0}, 2) == 6.0
    assert step_ms_at({2: 5.0, 8: 8.0, 32: 20.0}, 1) == pytest.approx(5.0)  # below the smallest: no faster than it
    assert step_ms_at({2: 4.0, 4: 6.0, 32: 20.0}, 3) == pytest.approx(5.0)
    assert step_ms_at({2: 6.0, 4: 5.0, 32: 20.0}, 1) == 6.0  # a noisy table: still the smallest size's time
    assert step_ms_at({2: 6.0, 4: 5.0, 8: 4.5}, 16) == 4.5  # extrapolated, never below the fastest measured


def test_the_planner_reads_the_document_the_benchmark_writes(monkeypatch):
    """The step times come from the CUDA run of the document `train_throughput.py --json` writes (here with
    instant stand-in steps), not from its CPU run; anything else is named as the wrong document."""
    import benchmarks.train_throughput as throughput

    monkeypatch.setattr(throughput, "our_stepper", lambda *args, **options: lambda: None)
    monkeypatch.setattr(throughput, "stack_stepper", lambda data, device, stacking, r, precision: lambda: 32 * r)
    args = argparse.Namespace(stacking="native,vmap", precision="fp32", replicates="1,8", steps=1, budget_minutes=5)
    saved = []
    cpu = throughput.stacking_matrix(args, "unused", torch.device("cpu"), lambda run: saved.append(json.dumps(run)))
    first = json.loads(saved[0])  # saved after each configuration: a run cut short keeps what it measured
    assert step_times({"runs": [first]}, "native", "fp32") == {1: first["results"][0]["step_ms"]}
    cuda = {**cpu, "device": "cuda", "results": [{**r, "step_ms": 3.0} for r in cpu["results"]]}
    document = json.loads(json.dumps({"runs": [cpu, cuda]}))
    assert step_times(document, "native", "fp32") == {1: 3.0, 8: 3.0}
    assert set(step_times({"runs": [cpu]}, "vmap", "fp32")) == {8}
    with pytest.raises(ValueError, match="not a benchmarks/train_throughput.py --json document"):
        step_times({"results": cpu["results"]}, "native", "fp32")


def test_a_compiled_or_triton_stack_is_checked_once_on_a_new_gpu_and_a_packed_one_twice():
    assert {name: gpu_checks(name) for name in STACKING_RECIPE} == {
        "native": 0, "native-compile": 1, "native-eager": 0, "native-triton": 1, "native-compile-triton": 1,
        "native-compile-packed": 2, "native-compile-triton-packed": 2,
    }  # fmt: skip


def test_a_stackings_check_kind_is_the_name_gpu_train_gives_the_checks_of_its_grid(tmp_path):
    """check_kind names what gpu_train.sh's stack_kind reads from a session grid whose recipe has the stacking's
    options (its preflight-KIND.txt)."""
    script = (Path(__file__).parents[2] / "scripts" / "gpu_train.sh").read_text()
    function = re.search(r"^stack_kind\(\) \{.*?^\}$", script, re.M | re.S).group(0)
    for name, recipe in STACKING_RECIPE.items():
        grid = tmp_path / f"{name}.toml"
        lines = [f"{key} = {json.dumps(value)}" for key, value in recipe.items()]
        grid.write_text("[recipe]\n" + "".join(f"{line}\n" for line in lines))
        shell = subprocess.run(["bash", "-c", f'{function}\nstack_kind "$1"', "-", str(grid)], capture_output=True,
                               text=True, check=True)  # fmt: skip
        assert check_kind(name) == shell.stdout.strip(), name
    assert [check_kind(name) for name in ("native", "native-compile-triton-packed")] == ["", "triton-compiled-packed"]


def test_merged_documents_keep_each_ones_cuda_run_in_order():
    cpu = {"device": "cpu", "results": [{"stacking": "native", "step_ms": 9.0}]}
    native = {"runs": [cpu, {"device": "cuda", "results": [{"stacking": "native", "step_ms": 1.0}]}]}
    compiled = {"runs": [{"device": "cuda", "results": [{"stacking": "native-compile", "step_ms": 0.5}]}]}
    merged = merge_benchmarks([native, compiled])
    assert merged == {
        "runs": [{"device": "cuda", "results": [*native["runs"][1]["results"], *compiled["runs"][0]["results"]]}]
    }
    assert merge_benchmarks([{"runs": [cpu]}])["runs"][0]["results"] == cpu["results"]
    with pytest.raises(ValueError, match="it has no 'runs'"):
        merge_benchmarks([{"runs": []}])
    cut_short = {"runs": [{"device": "cuda"}]}  # a run without results adds none; the planner names what is missing
    assert merge_benchmarks([cut_short, native])["runs"][0]["results"] == native["runs"][1]["results"]
    with pytest.raises(ValueError, match="measured no native stack at bf16"):
        step_times(cut_short, "native", "bf16")
