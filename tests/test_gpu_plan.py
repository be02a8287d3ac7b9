"""scripts/gpu_plan.py: a GPU session trains the queue's next runs in the largest stack that finishes in time."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lsa_interp.sweep.grid import load_grid, parse_grid
from lsa_interp.sweep.plan import expand, plan_stacks
from lsa_interp.sweep.stackings import merge_benchmarks
from tests.helpers import load_script

ROOT = Path(__file__).parents[1]
gpu_plan = load_script("scripts/gpu_plan.py")

STEPS_RANDOM = 20 * math.ceil(359_804 / 32)  # 224,880: a 20-epoch random-batching run
EVAL = 15  # the planner's default seconds per run for evaluation and analyses (--eval-seconds)


def bench(table: dict[int, float], precision: str = "fp32", stacking: str = "native") -> dict:
    results = [
        {"stacking": stacking, "precision": precision, "replicates": r, "step_ms": ms} for r, ms in table.items()
    ]
    vmap = {"stacking": "vmap", "precision": precision, "replicates": 8, "step_ms": 1.0}
    return {"runs": [{"device": "cuda", "results": [*results, vmap]}]}


def queue(cells: str, top: str = "") -> object:
    import tomllib

    return parse_grid(tomllib.loads(f"seeds = [0, 1, 2, 3, 4]\nanalyses = ['matching']\n{top}\n{cells}"))


COPY20 = "[[cells]]\npresets = ['copy-20']\nbatching = ['random']\n"
RECIPE = {"batch_size": 32, "lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.01, "warmup_start": 1e-4,
          "final_lr_factor": 0.05}  # fmt: skip


def finished_run(root: Path, name: str, epochs_completed: float = 20.0, evaluated: bool = True) -> None:
    model = root / name / "model"
    model.mkdir(parents=True)
    meta = {"run": name, "epochs_completed": epochs_completed, "train_config": {"epochs": 20}}
    (model / "config.json").write_text(json.dumps({"metadata": meta}))
    if evaluated:
        (model / "evaluation.json").write_text("{}")


def test_steps_per_epoch_bound_adds_one_batch_per_extra_group():
    grid = queue(COPY20)
    run = expand(grid)[0]
    full = math.ceil(359_804 / 32)
    assert gpu_plan.steps_per_epoch(run, grid, 32) == full
    alphabet = type(run)("copy-200", "alphabet", 0)
    assert gpu_plan.steps_per_epoch(alphabet, grid, 32) == full + 200
    both = type(run)("copy-20", "transformation_alphabet", 0)
    assert gpu_plan.steps_per_epoch(both, grid, 32) == full + 21 * 11 - 1
    assert gpu_plan.steps_per_epoch(run, grid, 4) == 89_951  # 359,804 rows: 4 divides them


def test_the_plan_is_the_largest_stack_whose_estimate_fits():
    grid = queue(COPY20 + "[[cells]]\npresets = ['nocopy-20']\nbatching = ['random']\n")
    table = {1: 4.0, 8: 4.0, 16: 6.0}
    # R <= 8 at 4 ms: 224,880 steps x 4 ms x 1.05 = 944.5 s, + 90 s start-up + 15 s per run.
    minutes_for = lambda r: (STEPS_RANDOM * 0.004 * 1.05 + 90 + EVAL * r) / 60
    plan = gpu_plan.plan_session(grid, set(), bench(table), minutes_for(8) + 0.01)
    assert [run.name for run in plan.runs] == [f"copy-20-random-s{s}" for s in range(5)] + [
        f"nocopy-20-random-s{s}" for s in range(3)
    ]
    assert plan.minutes == pytest.approx(minutes_for(8))
    assert (plan.steps, plan.step_ms, plan.sessions, plan.stop_early_seconds) == (STEPS_RANDOM, 4.0, 1, 0.0)
    assert plan.summary()["runs_left_after"] == 2
    assert len(gpu_plan.plan_session(grid, set(), bench(table), minutes_for(8) - 0.01).runs) == 7
    assert len(gpu_plan.plan_session(grid, set(), bench(table), 600).runs) == 10
    assert len(gpu_plan.plan_session(grid, set(), bench(table), 600, max_replicates=6).runs) == 6
    with pytest.raises(ValueError, match="not even one fp32 run fits in 10 minutes"):
        gpu_plan.plan_session(grid, set(), bench(table), 10)


def test_a_recipes_max_steps_bounds_the_stacks_steps():
    runs = tuple(expand(queue(COPY20))[:2])
    assert gpu_plan.stack_steps(runs, queue(COPY20), 32) == STEPS_RANDOM
    assert gpu_plan.stack_steps(runs, queue(COPY20, top="[recipe]\nmax_steps = 1000"), 32) == 1000
    assert gpu_plan.stack_steps(runs, queue(COPY20, top="[recipe]\nmax_steps = 10_000_000"), 32) == STEPS_RANDOM


def test_the_printed_plan_holds_every_field_gpu_train_reads_rounded_for_people():
    """`gpu_train.sh` reads the plan's steps, batch size, replicates and ``stop_early_seconds``; people the rest."""
    runs = tuple(expand(queue(COPY20))[:2])
    plan = gpu_plan.SessionPlan(runs, "bf16", 3.14159, 224_880, 17.23456, 12, 64, "native-compile", 3, 37.26, 0.81234)
    assert plan.summary() == {
        "replicates": 2, "runs": ["copy-20-random-s0", "copy-20-random-s1"], "precision": "bf16",
        "stacking": "native-compile", "step_ms": 3.142, "steps": 224_880, "batch_size": 64, "estimated_minutes": 17.23,
        "sessions": 3, "stop_early_seconds": 37.3, "survival": 0.812, "runs_left_after": 10,
    }  # fmt: skip


def test_finished_runs_are_skipped_and_the_stack_keeps_the_first_unfinished_runs_precision():
    grid = queue(
        COPY20 + COPY20 + "precision = 'bf16'\n" + "[[cells]]\npresets = ['copy-200']\nbatching = ['alphabet']\n"
    )
    done = {f"copy-20-random-s{s}" for s in range(5)} | {"copy-200-alphabet-s0"}
    results = [bench({1: 1.0}, precision)["runs"][0]["results"] for precision in ("bf16", "fp32")]
    both = {"runs": [{"device": "cuda", "results": results[0] + results[1]}]}
    plan = gpu_plan.plan_session(grid, done, both, 600)
    assert plan.precision == "bf16"
    assert [run.name for run in plan.runs] == [f"copy-20-random-s{s}-bf16" for s in range(5)]
    plan = gpu_plan.plan_session(grid, done | {run.name for run in plan.runs}, bench({1: 1.0}), 600)
    assert [run.name for run in plan.runs] == [f"copy-200-alphabet-s{s}" for s in range(1, 5)]
    with pytest.raises(ValueError, match="every run of the queue is finished"):
        gpu_plan.plan_session(grid, {run.name for run in expand(grid)}, bench({1: 1.0}), 600)


def test_a_stack_whose_estimate_is_exactly_the_minutes_fits():
    """1,000 steps at 3 ms, no overhead, 42 s of start-up and 15 s of evaluation: exactly one minute."""
    grid = queue(COPY20, top="[recipe]\nmax_steps = 1000")
    plan = gpu_plan.plan_session(grid, set(), bench({1: 3.0, 8: 3.0}), 1, overhead=0.0, startup_seconds=42)
    assert (len(plan.runs), plan.minutes) == (1, 1.0)


def test_the_stack_takes_the_first_unfinished_runs_precision_even_when_it_is_the_last_of_its_kind():
    grid = queue(COPY20 + COPY20 + "precision = 'bf16'\n")
    plan = gpu_plan.plan_session(grid, {f"copy-20-random-s{s}" for s in range(4)}, bench({1: 1.0}), 600)
    assert (plan.precision, [run.name for run in plan.runs]) == ("fp32", ["copy-20-random-s4"])


def test_the_recipes_batch_size_sets_the_plans_steps():
    grid = queue(COPY20, top="[recipe]\nbatch_size = 64")
    plan = gpu_plan.plan_session(grid, set(), bench({1: 1.0}), 600)
    assert (plan.batch_size, plan.steps) == (64, 20 * math.ceil(359_804 / 64))


def test_a_finished_fp32_run_stands_for_the_bf16_run_unless_the_queue_compares_the_two():
    grid = queue("[[cells]]\npresets = ['copy-200']\nbatching = ['alphabet']\n", top="precision = 'bf16'")
    plan = gpu_plan.plan_session(grid, {"copy-200-alphabet-s0"}, bench({1: 1.0}, "bf16"), 600)
    assert [run.name for run in plan.runs] == [f"copy-200-alphabet-s{s}-bf16" for s in range(1, 5)]
    check = queue(COPY20 + COPY20 + "precision = 'bf16'\n")
    done = {f"copy-20-random-s{s}" for s in range(5)}
    plan = gpu_plan.plan_session(check, done, bench({1: 1.0}, "bf16"), 600)
    assert [run.name for run in plan.runs] == [f"copy-20-random-s{s}-bf16" for s in range(5)]


def test_missing_benchmark_configuration_is_named():
    with pytest.raises(ValueError, match="no native stack at bf16"):
        gpu_plan.plan_session(queue(COPY20, top="precision = 'bf16'"), set(), bench({1: 1.0}), 600)


def test_the_session_grid_reads_back_as_one_stack_of_exactly_the_planned_runs(tmp_path):
    grid = queue(
        "[[cells]]\npresets = ['copy-200', 'nocopy-20']\nbatching = ['alphabet']\ndata_seed = 3\nepochs = 12\n",
        top="eval_limit = 500\n[recipe]\nbatch_size = 32\nval_limit = 2000\nbetas = [0.9, 0.95]\n[model]\nd_model = 64",
    )
    plan = gpu_plan.plan_session(grid, {"copy-200-alphabet-s0-d3"}, bench({1: 1.0, 8: 2.0}), 600)
    path = tmp_path / "session.toml"
    path.write_text(gpu_plan.session_grid(grid, replace(plan, stacking="native-compile")))
    session = load_grid(path)
    assert expand(session) == list(plan.runs)
    assert (session.replicates, session.analyses, session.eval_limit) == (9, ("matching",), 500)
    assert session.recipe == {**grid.recipe, "compile": True}
    assert session.model == {"d_model": 64}
    path.write_text(gpu_plan.session_grid(grid, replace(plan, stacking="native-eager")))
    assert load_grid(path).recipe == {**grid.recipe, "cuda_graph": False}
    path.write_text(gpu_plan.session_grid(grid, replace(plan, stacking="native-compile-triton")))
    assert load_grid(path).recipe == {**grid.recipe, "compile": True, "attention": "triton"}
    path.write_text(gpu_plan.session_grid(grid, replace(plan, stacking="native-compile-triton-packed")))
    assert load_grid(path).recipe == {**grid.recipe, "compile": True, "attention": "triton", "packing": True}
    (stack,) = plan_stacks(session, tmp_path / "sweep")
    assert stack.runs == plan.runs


def test_the_session_grid_keeps_the_queues_own_datasets_that_its_runs_train_on(tmp_path):
    grid = load_grid(ROOT / "grids" / "tiny.toml")
    plan = gpu_plan.plan_session(grid, set(), bench({1: 1.0, 8: 1.0}), 600, max_replicates=2)
    assert [run.name for run in plan.runs] == ["tiny-random-s0", "tiny-random-s1"]
    (tmp_path / "session.toml").write_text(gpu_plan.session_grid(grid, plan))
    session = load_grid(tmp_path / "session.toml")
    assert session.datasets == {"tiny": grid.datasets["tiny"]} and expand(session) == list(plan.runs)
    assert (session.recipe, session.model, session.replicates) == (grid.recipe, grid.model, 2)


def test_auto_stacking_plans_with_whichever_measured_stack_trains_more_runs():
    """Five copy-20 runs of 224,880 steps in 20 minutes: the native stack (3.8 ms, 4.4 ms at R=2) fits two, the
    compiled one at 2 ms (R <= 4) four, a triton one at 1.3 ms (R=5) all five; where two fit as many, the
    shorter plan wins; unmeasured modes are left out."""
    grid = queue(COPY20)
    native = bench({1: 3.8, 8: 8.0})
    compiled = bench({1: 2.0, 4: 2.0, 8: 14.0}, stacking="native-compile")
    plan = gpu_plan.plan_session(grid, set(), merge_benchmarks([native, compiled]), 20, "auto")
    assert (plan.stacking, len(plan.runs), plan.step_ms) == ("native-compile", 4, 2.0)
    assert gpu_plan.plan_session(grid, set(), native, 20, "auto").stacking == "native"
    slower = bench({1: 3.9, 2: 4.42, 8: 10.0}, stacking="native-compile")
    tie = gpu_plan.plan_session(grid, set(), merge_benchmarks([native, slower]), 20, "auto")
    assert (tie.stacking, len(tie.runs), tie.step_ms) == ("native", 2, pytest.approx(4.4))
    with pytest.raises(ValueError, match="not even one fp32 run fits in 5 minutes"):
        gpu_plan.plan_session(grid, set(), native, 5, "auto")
    triton = bench({1: 1.0, 4: 1.2, 8: 1.5}, stacking="native-compile-triton")
    fastest = gpu_plan.plan_session(grid, set(), merge_benchmarks([native, compiled, triton]), 20, "auto")
    assert (fastest.stacking, len(fastest.runs)) == ("native-compile-triton", 5)
    packed = bench({1: 0.9, 4: 1.0, 8: 1.1}, stacking="native-compile-triton-packed")
    merged = merge_benchmarks([native, compiled, triton, packed])
    shortest = gpu_plan.plan_session(grid, set(), merged, 20, "auto")
    assert (shortest.stacking, len(shortest.runs)) == ("native-compile-triton-packed", 5)
    few_fast = bench({1: 1.0, 4: 1.0, 5: 20.0, 8: 20.0}, stacking="native-compile")  # 4 runs in 6.4 minutes
    more = gpu_plan.plan_session(grid, set(), merge_benchmarks([bench({1: 3.0, 8: 3.0}), few_fast]), 20, "auto")
    assert (more.stacking, len(more.runs)) == ("native", 5)  # 14.6 minutes: more runs beat more runs a minute


def test_when_nothing_finishes_a_stack_continues_over_sessions_within_the_state_a_session_carries():
    """10 minutes a session, 90 s of each for start-up: 8.5 of training. 224,880 steps at 2.6 ms (R=1) or 3 ms
    (R=2) or 3.3 ms (R=3) finish in no session; R=3 trains the most runs a minute but needs 3 x 16 MiB of
    state."""
    grid = queue(COPY20)
    table = bench({1: 2.6, 2: 3.0, 3: 3.3, 8: 9.0})
    assert gpu_plan.state_mib(grid) == pytest.approx(1_400_606 * 12 / 2**20)
    assert gpu_plan.model_mib(grid) == pytest.approx(1_400_606 * 4 / 2**20)
    with pytest.raises(ValueError, match="not even one fp32 run fits in 10 minutes"):
        gpu_plan.plan_session(grid, set(), table, 10)
    plan = gpu_plan.plan_session(grid, set(), table, 10, carry_mib=50)
    work = (STEPS_RANDOM * 0.0033 * 1.05 + 3 * EVAL) / 60
    assert (len(plan.runs), plan.sessions) == (3, math.ceil(work / 8.5))
    assert (plan.precision, plan.steps, plan.step_ms, plan.stacking) == ("fp32", STEPS_RANDOM, 3.3, "native")
    assert plan.minutes == pytest.approx(work + plan.sessions * 1.5)
    assert plan.summary()["sessions"] == plan.sessions and plan.summary()["runs_left_after"] == 2
    assert len(gpu_plan.plan_session(grid, set(), table, 10, carry_mib=33).runs) == 2
    assert gpu_plan.plan_session(grid, set(), table, 60, carry_mib=50).sessions == 1
    with pytest.raises(ValueError, match="one run's state is 16.0 MiB of the 10 MiB a session carries"):
        gpu_plan.plan_session(grid, set(), table, 10, carry_mib=10)
    with pytest.raises(ValueError, match="one run's state is 16.0 MiB of the 1 MiB a session carries"):
        gpu_plan.plan_session(grid, set(), table, 10, carry_mib=1)
    assert len(gpu_plan.plan_session(grid, set(), table, 10, carry_mib=gpu_plan.state_mib(grid)).runs) == 1
    last = gpu_plan.plan_session(grid, {f"copy-20-random-s{s}" for s in range(4)}, table, 10, carry_mib=50)
    assert ([run.name for run in last.runs], last.precision) == (["copy-20-random-s4"], "fp32")
    with pytest.raises(ValueError, match="a stack cannot continue: .* start-up 90 s"):
        gpu_plan.plan_session(grid, set(), table, 1.5, carry_mib=50)
    with pytest.raises(ValueError, match="not even one run fits in 10 minutes with its start-up and transfers"):
        gpu_plan.plan_session(grid, set(), table, 10, carry_mib=50, session_minutes=1.5)
    wide = gpu_plan.plan_session(queue(COPY20, top="[recipe]\nbatch_size = 64"), set(), table, 5, carry_mib=50)
    assert (wide.batch_size, wide.steps) == (64, 20 * math.ceil(359_804 / 64)) and wide.sessions > 1
    compiled = bench({1: 1.5, 8: 20.0}, stacking="native-compile")
    auto = gpu_plan.plan_session(grid, set(), merge_benchmarks([table, compiled]), 10, "auto", carry_mib=50)
    assert (auto.stacking, len(auto.runs), auto.sessions) == ("native-compile", 1, 1)


def test_a_continued_stack_takes_another_session_for_work_just_past_what_its_sessions_hold():
    """Ten-minute sessions with 90 s of start-up hold 8.5 minutes of training each: 16.99 minutes of work take
    two sessions, 17.01 three. With four runs' state (64 MiB), a 30 s call to pack a second chunk and four to
    upload the state and the wheels (78 MiB in 17 MiB calls) leave 8 minutes in the first session and 6 in each
    later one: 14.01 minutes take three."""
    table, costs = bench({1: 5.0, 4: 5.0, 8: 5.0}), {"overhead": 0.0, "eval_seconds": 0.0}
    for steps, sessions in ((203_880, 2), (204_120, 3)):
        grid = queue(COPY20, top=f"[recipe]\nmax_steps = {steps}")
        plan = gpu_plan.plan_session(grid, set(), table, 10, carry_mib=20, **costs)
        assert (len(plan.runs), plan.sessions) == (1, sessions)
    grid = queue(COPY20, top="[recipe]\nmax_steps = 168_120")
    plan = gpu_plan.plan_session(grid, set(), table, 10, max_replicates=4, carry_mib=70, call_seconds=30, **costs)
    assert (len(plan.runs), plan.sessions, plan.stop_early_seconds) == (4, 3, 30)


def test_the_gpu_checks_a_stack_needs_count_in_the_start_up_of_every_session():
    """gpu_train.sh checks a compiled or triton stack on each new machine before it trains (a packed one twice).
    At 75 s a check, two compiled runs (1.9 ms a step: 9.48 minutes) no longer fit 10 minutes, one does; the
    plain stack is not charged; a stack continued over sessions pays the check in each of them."""
    grid = queue(COPY20)
    compiled = bench({1: 1.5, 2: 1.9, 8: 5.0}, stacking="native-compile")
    unchecked = gpu_plan.plan_session(grid, set(), compiled, 10, "native-compile")
    assert len(unchecked.runs) == 2
    assert unchecked.minutes == pytest.approx((STEPS_RANDOM * 0.0019 * 1.05 + 90 + 2 * EVAL) / 60)
    checked = gpu_plan.plan_session(grid, set(), compiled, 10, "native-compile", check_seconds=75)
    assert len(checked.runs) == 1
    assert checked.minutes == pytest.approx((STEPS_RANDOM * 0.0015 * 1.05 + 90 + 75 + EVAL) / 60)
    native = bench({1: 2.0, 8: 9.0})
    plain = gpu_plan.plan_session(grid, set(), native, 10, check_seconds=75)
    assert plain.minutes == gpu_plan.plan_session(grid, set(), native, 10).minutes
    slow = bench({1: 2.6, 2: 3.0, 3: 3.3, 8: 9.0}, stacking="native-compile")
    over = gpu_plan.plan_session(grid, set(), slow, 10, "native-compile", carry_mib=50, check_seconds=75)
    work = (STEPS_RANDOM * 0.0033 * 1.05 + 3 * EVAL) / 60
    assert (len(over.runs), over.sessions) == (3, math.ceil(work / (10 - 165 / 60)))
    assert over.minutes == pytest.approx(work + over.sessions * 165 / 60)


def test_cli_writes_the_grid_and_prints_the_plan(tmp_path, capsys):
    (tmp_path / "bench.json").write_text(json.dumps(bench({1: 3.8, 8: 4.2})))
    for name in ["copy-20-random-s0", *(f"copy-20-random-s{seed}-bf16" for seed in range(5))]:
        finished_run(tmp_path / "done", name)  # the queue's bf16 seeds first, then fp32
    on_its_own = {"preset": "copy-20", "seed": 1, "data_seed": 0, "epochs_completed": 20.0, "train_config": {
        **RECIPE, "batching": "random", "epochs": 20, "length_bucketing": False, "micro_batches": 4}}  # fmt: skip
    (tmp_path / "shipped" / "copy-20").mkdir(parents=True)
    (tmp_path / "shipped" / "copy-20" / "config.json").write_text(json.dumps({"metadata": on_its_own}))
    (tmp_path / "shipped" / "copy-20" / "evaluation.json").write_text("{}")
    out = tmp_path / "plans" / "next" / "session.toml"
    args = ["--queue", str(ROOT / "grids" / "queue.toml"), "--done", str(tmp_path / "done")]
    args += ["--done", str(tmp_path / "shipped")]
    code = gpu_plan.main([*args, "--bench", str(tmp_path / "bench.json"), "--minutes", "20", "--out", str(out)])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runs"][0] == "copy-20-random-s2" and printed["replicates"] == len(expand(load_grid(out)))
    assert printed["estimated_minutes"] <= 20
    assert [p.name for p in out.parent.iterdir()] == ["session.toml"]
    (tmp_path / "compile.json").write_text(json.dumps(bench({1: 1.0, 8: 1.0}, stacking="native-compile")))
    benches = ["--bench", str(tmp_path / "bench.json"), "--bench", str(tmp_path / "compile.json")]
    assert gpu_plan.main([*args, *benches, "--stacking", "auto", "--minutes", "20", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["stacking"] == "native-compile" and load_grid(out).recipe["compile"] is True
    elsewhere = ["--elsewhere", "copy-20-random-s2", "--elsewhere", "copy-20-random-s4"]  # on the CPU, say
    assert gpu_plan.main([*args, *benches, *elsewhere, "--stacking", "auto", "--minutes", "20", "--out", str(out)]) == 0
    planned = json.loads(capsys.readouterr().out)["runs"]
    assert planned[0] == "copy-20-random-s3" and not {"copy-20-random-s2", "copy-20-random-s4"} & set(planned)


def test_every_command_line_option_reaches_the_plan_and_each_left_out_takes_the_planners_default(tmp_path, capsys):
    """The printed plan equals `plan_session`'s for the same values: with every option given (a finishing stack
    chosen among stackings, two of them failed and one of the checks passed here; then a stack continued over
    sessions), and with none (64 runs at most, whose 64 models take 5 extra pack calls; then a continued stack)."""
    grid, out = queue(COPY20), tmp_path / "session.toml"
    (tmp_path / "queue.toml").write_text(f"seeds = [0, 1, 2, 3, 4]\nanalyses = ['matching']\n{COPY20}")
    stackings = {"native": 3.0, "native-compile": 2.0, "native-compile-triton": 1.0}
    stackings["native-compile-triton-packed"] = 0.5
    for name, ms in stackings.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(bench({1: ms, 8: ms}, stacking=name)))
    merged = merge_benchmarks([bench({1: ms, 8: ms}, stacking=name) for name, ms in stackings.items()])

    def printed(*options: str) -> dict:
        benches = [item for name in stackings for item in ("--bench", str(tmp_path / f"{name}.json"))]
        assert gpu_plan.main(["--queue", str(tmp_path / "queue.toml"), *benches, "--out", str(out), *options]) == 0
        plan = json.loads(capsys.readouterr().out)
        assert plan.pop("grid") == str(out)
        return plan

    costs = {"max_replicates": 3, "startup_seconds": 60, "eval_seconds": 10, "check_seconds": 20}
    options = ["--max-replicates", "3", "--startup-seconds", "60", "--eval-seconds", "10", "--check-seconds", "20"]
    kinds = ["--checked", "compiled", "--checked", "triton", "--failed", "triton-compiled-packed"]
    kinds += ["--failed", "triton-compiled", "--elsewhere", "copy-20-random-s0", "--stacking", "auto"]
    expected = gpu_plan.plan_session(grid, {"copy-20-random-s0"}, merged, 10, "auto", checked=["compiled", "triton"],
                                     failed=["triton-compiled-packed", "triton-compiled"], **costs)  # fmt: skip
    assert (expected.stacking, len(expected.runs)) == ("native-compile", 3)
    assert printed(*options, *kinds, "--minutes", "10") == expected.summary()
    carried = {"carry_mib": 50, "call_seconds": 30, "carry_survival": 0.9, "session_minutes": 12}
    options += ["--carry-mib", "50", "--call-seconds", "30", "--carry-survival", "0.9", "--session-minutes", "12"]
    expected = gpu_plan.plan_session(grid, set(), merged, 5, **{**costs, **carried, "max_replicates": 4})
    assert (expected.sessions, expected.survival) == (2, 0.9)  # with later sessions of 5 minutes, 5 sessions
    assert printed(*options, "--max-replicates", "4", "--minutes", "5") == expected.summary()
    many = tmp_path / "many.toml"
    many.write_text(f"seeds = {list(range(70))}\n{COPY20}")
    expected = gpu_plan.plan_session(load_grid(many), set(), merged, 10_000, "native-compile")
    assert (len(expected.runs), expected.stop_early_seconds) == (64, 0)
    assert printed("--queue", str(many), "--stacking", "native-compile", "--minutes", "10000") == expected.summary()
    expected = gpu_plan.plan_session(grid, set(), merged, 10, carry_mib=50)
    assert printed("--carry-mib", "50", "--minutes", "10") == expected.summary() and expected.sessions > 1


def test_a_check_that_passed_on_this_machine_is_not_charged_again_and_a_failed_ones_stackings_are_not_planned():
    """`gpu_train.sh` names the checks run on this machine: a passed kind costs this session nothing more (its
    later sessions still pay it); a failed kind's stackings are left out of ``auto`` and give way to ``native``."""
    grid = queue(COPY20)
    compiled = bench({1: 1.5, 2: 1.9, 8: 5.0}, stacking="native-compile")
    again = gpu_plan.plan_session(grid, set(), compiled, 10, "native-compile", check_seconds=75, checked=["compiled"])
    assert len(again.runs) == 2
    assert again.minutes == pytest.approx((STEPS_RANDOM * 0.0019 * 1.05 + 90 + 2 * EVAL) / 60)
    other = gpu_plan.plan_session(grid, set(), compiled, 10, "native-compile", check_seconds=75, checked=["triton"])
    assert len(other.runs) == 1
    slow = bench({1: 2.6, 2: 3.0, 3: 3.3, 8: 9.0}, stacking="native-compile")
    over = gpu_plan.plan_session(grid, set(), slow, 10, "native-compile", carry_mib=50, check_seconds=75,
                                 checked=["compiled"])  # fmt: skip
    work = (STEPS_RANDOM * 0.0033 * 1.05 + 3 * EVAL) / 60
    assert (len(over.runs), over.sessions) == (3, 1 + math.ceil((work - (10 - 90 / 60)) / (10 - 165 / 60)))
    assert over.minutes == pytest.approx(work + (90 + (over.sessions - 1) * 165) / 60)
    native = bench({1: 2.0, 2: 3.0, 8: 9.0})
    both = merge_benchmarks([native, compiled])
    assert gpu_plan.plan_session(grid, set(), both, 10, "auto").stacking == "native-compile"
    assert gpu_plan.plan_session(grid, set(), both, 10, "auto", failed=["compiled"]).stacking == "native"
    assert gpu_plan.plan_session(grid, set(), both, 10, "native-compile", failed=["compiled"]).stacking == "native"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--minutes": "5"}, "not even one bf16 run fits in 5 minutes"),
        ({"--bench": "missing.json"}, "missing.json"),
        ({"--done": "nowhere"}, "--done: not a directory: {tmp}/nowhere"),
        ({"--carry-survival": "0"}, "--carry-survival must be in (0, 1], not 0"),
        ({"--check-seconds": "-5"}, "--check-seconds must be 0 or more, not -5"),
        ({"--carry-survival": "1.5"}, "--carry-survival must be in (0, 1], not 1.5"),
        ({"--elsewhere": "copy-20-random-s9"}, "--elsewhere: not a run of the queue: copy-20-random-s9"),
    ],
)
def test_cli_errors_are_one_line_with_exit_code_2(tmp_path, capsys, change, message):
    (tmp_path / "bench.json").write_text(json.dumps(bench({1: 3.8}, precision="bf16")))
    options = {"--queue": str(ROOT / "grids" / "queue.toml"), "--bench": str(tmp_path / "bench.json")}
    options |= {"--minutes": "20", "--out": str(tmp_path / "session.toml"), "--done": str(tmp_path)}
    numbers = ("--minutes", "--carry-survival", "--check-seconds", "--elsewhere")
    options |= {key: value if key in numbers else str(tmp_path / value) for key, value in change.items()}
    assert gpu_plan.main([item for pair in options.items() for item in pair]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_plan: error:") and message.format(tmp=tmp_path) in err and "\n" not in err
    assert not (tmp_path / "session.toml").exists()


@pytest.mark.parametrize("left_out", ["--queue", "--bench", "--minutes", "--out"])
def test_each_required_option_left_out_is_named_with_exit_code_2(tmp_path, capsys, left_out):
    (tmp_path / "bench.json").write_text(json.dumps(bench({1: 3.8})))
    options = {"--queue": str(ROOT / "grids" / "queue.toml"), "--bench": str(tmp_path / "bench.json")}
    options |= {"--minutes": "20", "--out": str(tmp_path / "session.toml")}
    del options[left_out]
    with pytest.raises(SystemExit) as exit_info:
        gpu_plan.main([item for pair in options.items() for item in pair])
    assert exit_info.value.code == 2 and left_out in capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path / "session.toml").exists()


def test_a_stacking_the_planner_does_not_know_is_refused_by_name(tmp_path, capsys):
    (tmp_path / "bench.json").write_text(json.dumps(bench({1: 3.8})))
    options = ["--queue", str(ROOT / "grids" / "queue.toml"), "--bench", str(tmp_path / "bench.json")]
    with pytest.raises(SystemExit) as exit_info:
        gpu_plan.main([*options, "--minutes", "20", "--out", str(tmp_path / "s.toml"), "--stacking", "fastest"])
    assert exit_info.value.code == 2 and "invalid choice: 'fastest'" in capsys.readouterr().err


def test_the_script_run_as_a_program_exits_with_mains_code(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps(bench({1: 3.8}, precision="bf16")))
    command = [sys.executable, str(ROOT / "scripts" / "gpu_plan.py"), "--queue", str(ROOT / "grids" / "queue.toml")]
    command += ["--bench", str(tmp_path / "bench.json"), "--out", str(tmp_path / "session.toml"), "--minutes"]
    refused = subprocess.run([*command, "5"], capture_output=True, text=True, cwd=ROOT)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith("gpu_plan: error: not even one bf16 run fits in 5 minutes")
    planned = subprocess.run([*command, "20"], capture_output=True, text=True, cwd=ROOT)
    assert planned.returncode == 0 and json.loads(planned.stdout)["grid"] == str(tmp_path / "session.toml")


def test_the_planner_plans_without_importing_torch(tmp_path):
    """A GPU session plans before each stack and a test run plans dozens of times: the planner counts the model's
    parameters from its config and reads finished runs from their files, without torch, transformer_lens or scipy
    (3 s of imports a plan)."""
    (tmp_path / "bench.json").write_text(json.dumps(bench({1: 3.8, 8: 6.0})))
    options = ["--queue", str(ROOT / "grids" / "queue.toml"), "--done", str(ROOT / "analyses" / "runs"), "--done"]
    options += [str(ROOT / "checkpoints"), "--bench", str(tmp_path / "bench.json"), "--carry-mib", "64", "--minutes"]
    options += ["12", "--out", str(tmp_path / "session.toml")]
    code = "import runpy, sys; code = runpy.run_path(sys.argv[1])['main'](sys.argv[2:]); "
    code += "print(sorted({'torch', 'transformer_lens', 'scipy'} & set(sys.modules))); sys.exit(code)"
    script = str(ROOT / "scripts" / "gpu_plan.py")
    result = subprocess.run([sys.executable, "-c", code, script, *options], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    assert plan["sessions"] > 1 and result.stdout.rstrip().endswith("\n[]")


def test_a_queue_with_a_run_in_two_cells_is_refused_naming_the_file(tmp_path, capsys):
    queue = tmp_path / "queue.toml"
    queue.write_text("seeds = [0]\n" + '[[cells]]\npresets = ["copy-20"]\nbatching = ["random"]\n' * 2)
    (tmp_path / "bench.json").write_text(json.dumps(bench({1: 3.8})))
    options = ["--queue", str(queue), "--bench", str(tmp_path / "bench.json"), "--minutes", "20"]
    assert gpu_plan.main([*options, "--out", str(tmp_path / "session.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"gpu_plan: error: {queue}: cells[1]: run copy-20-random-s0 is already in an earlier cell"
    assert not (tmp_path / "session.toml").exists()


def test_what_the_planner_lets_a_call_carry_up_fits_beside_this_checkout():
    """A device call takes 64 MiB of working tree, the checkout included (measured as `pack_results.py upload`
    measures it): a checkout that outgrew `UPLOAD_MIB_PER_CALL` would make every continued stack's estimate
    short of its upload calls (it grew from 26 to 44 MiB with the shipped replicates while the planner still
    counted 34 MiB a call)."""
    pack_results = load_script("scripts/pack_results.py")
    room = pack_results.TREE_LIMIT_MIB - pack_results.MARGIN_MIB - pack_results.working_tree_mib()
    assert gpu_plan.WHEELS_MIB < gpu_plan.UPLOAD_MIB_PER_CALL <= room


def test_the_queue_starts_with_the_precision_check_and_covers_the_paper_grid():
    runs = expand(load_grid(ROOT / "grids" / "queue.toml"))
    assert [run.name for run in runs[:10]] == [f"copy-20-random-s{s}-bf16" for s in range(5)] + [
        f"copy-20-random-s{s}" for s in range(5)
    ]
    paper = {(r.dataset, r.batching, r.seed) for r in expand(load_grid(ROOT / "grids" / "paper.toml"))}
    assert {(r.dataset, r.batching, r.seed) for r in runs} == paper
    assert runs[10].name == "nocopy-20-random-s0" and runs[11].name == "copy-200-alphabet-s0"
    assert runs[-1].name == "copy-20-5shot-alphabet-s4"


def test_the_next_h100_session_finishes_two_bf16_runs_of_the_precision_check_from_the_committed_step_times():
    """What `gpu_train.sh start` plans on an H100 with 15 minutes of device time (MINUTES = 12, less the seconds
    before the planner runs): the queue's first runs, bf16, train compiled two at a time (2.2 ms a step,
    interpolated between the measured R = 1 and 8) and finish inside the session, with no state to carry."""
    documents = [json.loads((ROOT / "benchmarks" / "results" / f"{name}-h100.json").read_text())
                 for name in ("stacking", "compile")]  # fmt: skip
    bench, grid = merge_benchmarks(documents), load_grid(ROOT / "grids" / "queue.toml")
    options = {"carry_mib": 100, "call_seconds": 20, "carry_survival": 0.4}
    plan = gpu_plan.plan_session(grid, set(), bench, 11.8, "auto", **options)
    assert [run.name for run in plan.runs] == ["copy-20-random-s0-bf16", "copy-20-random-s1-bf16"]
    assert (plan.stacking, plan.sessions, plan.survival, plan.step_ms) == (
        "native-compile",
        1,
        1.0,
        pytest.approx(2.197, abs=1e-3),
    )
    assert plan.minutes <= 11.8


def test_the_fp32_runs_of_the_precision_check_continue_over_sessions_from_the_committed_step_times():
    """Once the bf16 seeds are done, not even one fp32 run finishes in a session. With one call's room for state
    (28 MiB) the first fp32 run trains compiled (2.65 ms a step against 3.9 plain) over two sessions; with the
    script's default carry (100 MiB in parts, 20 s a call) five runs train over four, 1.5 times the runs a
    minute, when the state is sure to survive between sessions; at the script's guess of that chance (0.4),
    two runs over two sessions, 1.4 times the runs a minute of one."""
    documents = [json.loads((ROOT / "benchmarks" / "results" / f"{name}-h100.json").read_text())
                 for name in ("stacking", "compile")]  # fmt: skip
    bench, grid = merge_benchmarks(documents), load_grid(ROOT / "grids" / "queue.toml")
    done = {f"copy-20-random-s{seed}-bf16" for seed in range(5)}
    with pytest.raises(ValueError, match="not even one fp32 run fits"):
        gpu_plan.plan_session(grid, done, bench, 11.8, "auto")
    one = gpu_plan.plan_session(grid, done, bench, 11.8, "auto", carry_mib=28, call_seconds=20)
    assert [run.name for run in one.runs] == ["copy-20-random-s0"]
    assert (one.stacking, one.sessions, one.step_ms) == ("native-compile", 2, pytest.approx(2.653, abs=1e-3))
    five = gpu_plan.plan_session(grid, done, bench, 11.8, "auto", carry_mib=100, call_seconds=20)
    assert [run.name for run in five.runs] == [f"copy-20-random-s{seed}" for seed in range(5)]
    assert (five.stacking, five.sessions, five.stop_early_seconds) == ("native-compile", 4, 20)
    assert len(five.runs) / five.minutes > 1.5 * len(one.runs) / one.minutes
    options_two_sessions = {"carry_mib": 100, "call_seconds": 20, "carry_survival": 0.4}
    two = gpu_plan.plan_session(grid, done, bench, 11.8, "auto", **options_two_sessions)
    assert [run.name for run in two.runs] == ["copy-20-random-s0", "copy-20-random-s1"] and two.sessions == 2
    assert two.survival == 0.4 and two.expected_rate == pytest.approx(2 / two.minutes * 0.4)
    assert len(two.runs) / two.minutes > 1.35 * len(one.runs) / one.minutes
    assert two.summary()["survival"] == 0.4 and five.summary()["survival"] == 1.0
    # A session whose 30-s start is paid before MINUTES are counted (scripts/README.md: 15 - 0.5 - 1.5 minutes, less
    # the seconds of the first call) finishes one compiled fp32 run, the GPU check's 20 s included, carrying nothing.
    single = gpu_plan.plan_session(grid, done, bench, 12.7, "auto", check_seconds=20, **options_two_sessions)
    assert [run.name for run in single.runs] == ["copy-20-random-s0"] and single.sessions == 1
    assert single.minutes == pytest.approx((STEPS_RANDOM * 0.002653 * 1.05 + 90 + 20 + EVAL) / 60, abs=1e-3)
    # After `gpu_session.sh triton` (9 minutes), 2.5 are left: the sessions after it are counted at full length.
    options = {"carry_mib": 100, "call_seconds": 20, "carry_survival": 0.4}
    rest = gpu_plan.plan_session(grid, done, bench, 2.5, "auto", session_minutes=11.8, **options)
    assert [run.name for run in rest.runs] == ["copy-20-random-s0"] and rest.sessions == 2
    assert gpu_plan.plan_session(grid, done, bench, 2.5, "auto", **options).sessions > 10


def test_extra_transfer_calls_are_charged_to_the_estimate_and_stop_the_training_early():
    """A continued stack of 4 runs holds 64 MiB of state: two pack calls a session (60 MiB a call), and, with the
    14 MiB of wheels that every session's first call carries, five upload calls (17 MiB a call): one and four
    beyond the first. A stack of 12 runs that finishes brings back 12 models (64 MiB): two pack calls."""
    grid, table = queue(COPY20), bench({1: 2.6, 3: 7.0, 4: 4.0, 12: 4.1})
    free = gpu_plan.plan_session(grid, set(), table, 10, carry_mib=70)
    paid = gpu_plan.plan_session(grid, set(), table, 10, carry_mib=70, call_seconds=30)
    assert len(free.runs) == len(paid.runs) == 4 and (free.stop_early_seconds, paid.stop_early_seconds) == (0, 30)
    work = (STEPS_RANDOM * 0.004 * 1.05 + 4 * EVAL) / 60
    assert paid.sessions == 1 + math.ceil((work - (10 - 1.5 - 0.5)) / (10 - 1.5 - 0.5 - 2))
    assert paid.minutes == pytest.approx(work + paid.sessions * (1.5 + 0.5) + (paid.sessions - 1) * 2)
    assert free.minutes == pytest.approx(work + free.sessions * 1.5)
    assert paid.summary()["stop_early_seconds"] == 30
    seeds = "seeds = { start = 0, stop = 12 }"
    finishing = gpu_plan.plan_session(queue(COPY20.replace("\n", f"\n{seeds}\n", 1)), set(), table, 30,
                                      call_seconds=60)  # fmt: skip
    train = (STEPS_RANDOM * 0.0041 * 1.05 + 90 + 12 * EVAL) / 60
    assert len(finishing.runs) == 12 and finishing.stop_early_seconds == 60
    assert finishing.minutes == pytest.approx(train + 1)
