"""scripts/gpu_train.sh, dry-run on a CPU: plan, detached sweep, watch, pack, and the records kept afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from lsa_interp.sweep.grid import load_grid
from lsa_interp.sweep.plan import plan_stacks, stack_config, stack_dir
from lsa_interp.sweep.runner import run_sweep
from lsa_interp.training import StackTrainer
from tests.sweep.tiny_grid import write_tiny_grid

ROOT = Path(__file__).parents[1]


def _fake_commands(tmp_path: Path, **bodies: str) -> str:
    """Shell scripts under ``tmp_path/bin`` named by the keywords (``nvidia_smi``: nvidia-smi, by default one that
    names an H100 as the real one does); returns a PATH that finds them first, then this Python's own folder."""
    (tmp_path / "bin").mkdir()
    for name, body in {"nvidia_smi": "echo 'NVIDIA H100 80GB HBM3'", **bodies}.items():
        script = tmp_path / "bin" / name.replace("_", "-")
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}"


def _session_env(tmp_path: Path, path: str, done: Path, **more: str) -> dict[str, str]:
    """The environment of one dry-run GPU session: fake commands first on ``path``, the queue
    ``tmp_path/queue.toml``, finished runs in ``done``, the machine's work folder ``tmp_path/work``, ``$OUT``
    ``tmp_path/out``, no minutes taken for the machine's start; ``more`` adds or overrides variables."""
    return {
        **os.environ,
        "START_MINUTES": "0",
        "PATH": path,
        "QUEUE": str(tmp_path / "queue.toml"),
        "DONE": str(done),
        "GPU_TRAIN_DIR": str(tmp_path / "work"),
        "OUT": str(tmp_path / "out"),
        "PYTHONPATH": str(ROOT),
        **more,
    }


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_dry_run_trains_the_planned_runs_packs_them_and_the_next_plan_skips_them(tmp_path):
    """One GPU session on a CPU (fake nvidia-smi, tiny queue), then what happens here afterwards: unpack, keep the
    weightless records, plan the next session from them, and tabulate them with their matching analyses."""
    path = _fake_commands(tmp_path)
    queue = {"max_steps": 1000, "analyses": ("matching",), "batch_size": 256, "checkpoint_every": 1000}
    write_tiny_grid(tmp_path / "queue.toml", **queue, small=True)  # an epoch of 8 steps, a state at its end
    # In 10 minutes the compiled stack (0.01 ms a step) trains the three runs left, but its GPU check, running beside
    # its start-up, cannot pass here, so it is stopped and the plain stack planned: two runs fit (at most 1,000 steps
    # x 1 ms, 90 s start-up and 30 s per run: 2.52 minutes), three do not (at 600 ms: 13.5), as long as the check
    # takes under 7 minutes (on 2026-11-26 it took over 2.5 on a machine running five jobs on two cores).
    steps = {("native", 1): 1.0, ("native", 2): 1.0, ("native", 3): 600.0, ("native-compile", 1): 0.01}
    measured = [{"stacking": k, "precision": "fp32", "replicates": r, "step_ms": ms} for (k, r), ms in steps.items()]
    (tmp_path / "bench.json").write_text(json.dumps({"runs": [{"device": "cuda", "results": measured}]}))
    done = tmp_path / "done" / "model"
    done.mkdir(parents=True)
    (done / "config.json").write_text(json.dumps({"metadata": {"run": "tiny-random-s0", "epochs_completed": 1.0,
                                                               "epochs": 1}}))  # fmt: skip
    (done / "evaluation.json").write_text("{}")
    env = _session_env(
        tmp_path,
        path,
        tmp_path / "done",
        BUNDLE=str(tmp_path / "bundle"),
        WATCH_EVERY="1",
        FOLLOW_MINUTES="99",  # one sweep: what follows a finished sweep is the next test's
        OMP_NUM_THREADS="1",  # one core per test worker
    )
    script = ["bash", str(ROOT / "scripts" / "gpu_train.sh")]
    started = subprocess.run([*script, "start", "10", str(tmp_path / "bench.json")], env=env, capture_output=True,
                             text=True, timeout=700)  # fmt: skip
    assert started.returncode == 0, started.stderr[-2000:]
    assert "the compiled stack failed its check on this GPU" in started.stdout
    assert "the sweep is not running" in started.stdout
    assert re.search(r"stack-000/metrics.jsonl: step \d+/1,000 \(.*loss \d.*tasks/s, about .* min", started.stdout)
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["runs"] == ["tiny-random-s1", "tiny-nocopy-random-s0"]
    models = sorted((tmp_path / "work" / "grid").rglob("evaluation.json"))
    assert len(models) == 2
    packed = subprocess.run([*script, "pack", "0"], env=env, capture_output=True, text=True, timeout=120)
    assert packed.returncode == 0, packed.stderr[-2000:]
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"bundle.sha256", "bundle.tar.part00"}
    unpack = [sys.executable, str(ROOT / "scripts" / "pack_results.py"), "unpack", str(tmp_path / "out")]
    subprocess.run([*unpack, "--into", str(tmp_path / "back")], check=True, capture_output=True, timeout=60)
    back = tmp_path / "back"
    assert len(list((back / "grid").rglob("model.safetensors"))) == 2
    assert (back / "session" / "grid.toml").is_file() and (back / "session" / "sweep.log").is_file()
    assert not list(back.rglob("state.pt")) and not (back / "grid" / "data").exists()
    records = [sys.executable, str(ROOT / "scripts" / "pack_results.py"), "records", str(back / "grid")]
    subprocess.run([*records, "--into", str(tmp_path / "records")], check=True, capture_output=True, timeout=60)
    assert not list((tmp_path / "records").rglob("model.safetensors"))
    plan_next = [sys.executable, str(ROOT / "scripts" / "gpu_plan.py"), "--queue", str(tmp_path / "queue.toml")]
    plan_next += ["--done", str(tmp_path / "done"), "--done", str(tmp_path / "records"), "--minutes", "3"]
    plan_next += ["--bench", str(tmp_path / "bench.json"), "--out", str(tmp_path / "next.toml")]
    planned = subprocess.run(plan_next, env=env, capture_output=True, text=True, timeout=120)
    assert json.loads(planned.stdout)["runs"] == ["tiny-nocopy-random-s1"], planned.stderr[-2000:]
    results = [sys.executable, "-m", "lsa_interp", "results", "--runs", str(tmp_path / "records")]
    shown = subprocess.run([*results, "--out", str(tmp_path / "results")], env=env, capture_output=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    table = pd.read_csv(tmp_path / "results" / "runs.csv")
    assert len(table) == 2 and table["matching_best_head"].notna().all() and table["complete"].all()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_stack_that_no_session_can_finish_continues_in_the_next_session_from_its_carried_state(tmp_path):
    """Two sessions on a CPU, of 24 and 36 s (MINUTES 0.4 and 0.6): the first plans a stack that continues over
    sessions and packs its state; here that state is kept (pack_results.py carry) and cut into parts
    (pack_results.py upload); the second session, on a fresh machine, receives them one call each, refuses to
    start while one is missing, and goes on from the step where the first stopped. The kept stack is marked
    compiled first: its GPU check cannot pass on a CPU (8-11 s, which the second session's longer MINUTES
    cover), so the second session continues it as the plain stack."""
    path = _fake_commands(tmp_path)
    grid = write_tiny_grid(tmp_path / "queue.toml", max_steps=10**6, batch_size=8, checkpoint_every=10**6)
    grid.write_text(grid.read_text().replace("epochs = 1", "epochs = 50"))  # about 46,000 steps: minutes on a CPU
    measured = [{"stacking": "native", "precision": "fp32", "replicates": r, "step_ms": 1.0} for r in (1, 4)]
    (tmp_path / "bench.json").write_text(json.dumps({"runs": [{"device": "cuda", "results": measured}]}))
    base = {
        **os.environ,
        "PATH": path,
        "QUEUE": str(grid),
        "DONE": str(tmp_path / "none"),
        "STARTUP_SECONDS": "3",
        "START_MINUTES": "0",
        "CARRY_SURVIVAL": "1",  # the stack's size, not its risk: 26 sessions would weigh R by 0.6 ** 25
        "WATCH_EVERY": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    script = ["bash", str(ROOT / "scripts" / "gpu_train.sh")]
    pack_script = [sys.executable, str(ROOT / "scripts" / "pack_results.py")]
    steps = []
    for session in ("one", "two"):
        env = {**base, "GPU_TRAIN_DIR": str(tmp_path / session), "BUNDLE": str(tmp_path / session / "bundle")}
        env |= {"OUT": str(tmp_path / session / "out"), "UPLOAD": str(tmp_path / session / "upload")}
        start = [*script, "start", "0.4" if session == "one" else "0.6", str(tmp_path / "bench.json")]
        if session == "two":  # a fresh machine: the first session's checkout, its datasets included, is gone
            shutil.rmtree(tmp_path / "one" / "grid" / "data")
            _mark_compiled(tmp_path / "kept")
            _receive_all_but_the_last_part(tmp_path / "kept", tmp_path / "parts", script, env, start)
        started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=300)
        assert started.returncode == 0, started.stderr[-2000:]
        assert ("continuing the stack carried up" in started.stdout) == (session == "two")
        failed = "the compiled stack failed its check on this GPU (" in started.stdout
        assert (failed and "continuing it as the plain stack" in started.stdout) == (session == "two")
        packed = subprocess.run([*script, "pack", "0"], env=env, capture_output=True, text=True, timeout=120)
        assert packed.returncode == 0, packed.stderr[-2000:]
        back = tmp_path / session / "back"
        subprocess.run([*pack_script, "unpack", env["OUT"], "--into", str(back)], check=True, timeout=60)
        subprocess.run([*pack_script, "carry", str(back), "--into", str(tmp_path / "kept")], check=True, timeout=60)
        stack = tmp_path / "kept" / "grid" / "stacks" / "stack-000"
        records = [json.loads(line) for line in (stack / "metrics.jsonl").read_text().splitlines()]
        steps.append([r["step"] for r in records if r.get("type") == "step"])
        assert (stack / "state.pt").is_file() and not list(back.rglob("model.safetensors"))
        assert json.loads((stack / "train_config.json").read_text())["compile"] is False
        assert "compile" not in (tmp_path / "kept" / "session" / "grid.toml").read_text()
        assert "compile" not in json.loads((tmp_path / "kept" / "grid" / "plan.json").read_text())["recipe"]
    plan = json.loads((tmp_path / "one" / "out" / "plan.json").read_text())
    assert plan["sessions"] > 1 and plan["replicates"] == 4
    first, both = steps
    assert first and both[: len(first)] == first and both[-1] > first[-1]


def _mark_compiled(kept: Path) -> None:
    """Make the kept stack one that trained compiled: its saved config, its sweep's plan and its session's grid
    say so."""
    for config in kept.glob("grid/stacks/*/train_config.json"):
        config.write_text(json.dumps({**json.loads(config.read_text()), "compile": True}))
    plan = json.loads((kept / "grid" / "plan.json").read_text())
    (kept / "grid" / "plan.json").write_text(json.dumps({**plan, "recipe": {**plan["recipe"], "compile": True}}))
    grid = kept / "session" / "grid.toml"
    grid.write_text(grid.read_text().replace("[recipe]\n", "[recipe]\ncompile = true\n"))
    assert "compile = true" in grid.read_text()


def _receive_all_but_the_last_part(kept: Path, parts: Path, script: list[str], env: dict, start: list[str]) -> None:
    """Cut ``kept`` into three parts or more and carry each into ``env["UPLOAD"]`` as a call would: all but the
    last with ``receive``; ``start`` with the last one left out must fail, naming it."""
    size = sum(p.stat().st_size for p in kept.rglob("*") if p.is_file()) / 2**20
    cut = [sys.executable, str(ROOT / "scripts" / "pack_results.py"), "upload", str(kept), "--into", str(parts)]
    cut += ["--first-mib", f"{size / 4:.4f}", "--part-mib", f"{size / 3:.4f}"]
    printed = subprocess.run(cut, check=True, capture_output=True, text=True, timeout=60).stdout
    count = len(re.findall(r"^  call \d+: ", printed, flags=re.MULTILINE))
    assert count >= 3 and printed.rstrip().endswith("gpu_train.sh start MINUTES")
    upload = Path(env["UPLOAD"])
    for index in range(count - 1):
        upload.mkdir(parents=True, exist_ok=True)
        for name in ["carry.sha256"] * (index == 0) + [f"carry.tar.part{index:02d}"]:
            shutil.copy(parts / name, upload / name)
        received = subprocess.run([*script, "receive"], env=env, capture_output=True, text=True, timeout=60)
        assert received.returncode == 0, received.stderr
        assert f"received part(s) {', '.join(f'{i:02d}' for i in range(index + 1))} of {count}; still to send:" in (
            received.stdout
        ) and received.stdout.rstrip().endswith(f" {count - 1:02d}")
        assert not list(upload.iterdir())  # set aside: a later call's tree cannot take it away
    refused = subprocess.run(start, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and f"part(s) {count - 1:02d} of {count} missing" in refused.stderr
    shutil.copy(parts / f"carry.tar.part{count - 1:02d}", upload)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_after_the_carried_stack_finishes_the_session_trains_the_queues_next_stacks(tmp_path):
    """A session that continues a carried stack 100 steps into a run of 226 finishes it early, moves that
    sweep to done-1 and plans and trains the queue's next stack in the time left; pack brings back both."""
    path = _fake_commands(tmp_path)
    grid = write_tiny_grid(
        tmp_path / "queue.toml", max_steps=10**6, analyses=("matching",), checkpoint_every=10**6, small=True
    )
    # Each run: one epoch at batch 8; one seed, so the queue is one run for the carried stack and one after it.
    grid.write_text(grid.read_text().replace("max_steps = 1000000\n", "").replace("seeds = [0, 1]", "seeds = [0]"))
    # One run a stack (a second would cost 100 ms a step), continued over sessions (no session fits a run).
    measured = [
        {"stacking": "native", "precision": "fp32", "replicates": r, "step_ms": ms} for r, ms in ((1, 1), (2, 100))
    ]
    (tmp_path / "bench.json").write_text(json.dumps({"runs": [{"device": "cuda", "results": measured}]}))
    carried = tmp_path / "earlier"
    (carried / "session").mkdir(parents=True)
    plan = [sys.executable, str(ROOT / "scripts" / "gpu_plan.py"), "--queue", str(grid), "--minutes", "0.1"]
    plan += ["--bench", str(tmp_path / "bench.json"), "--carry-mib", "99", "--startup-seconds", "1"]
    planned = subprocess.run([*plan, "--out", str(carried / "session" / "grid.toml")], check=True,
                             capture_output=True, text=True)  # fmt: skip
    carried_runs = json.loads(planned.stdout)["runs"]
    session_grid = load_grid(carried / "session" / "grid.toml")
    run_sweep(carried / "session" / "grid.toml", carried / "grid", max_minutes=0, progress=False)  # plan and data
    stack = plan_stacks(session_grid, carried / "grid")[0]
    StackTrainer.start(stack_config(session_grid, carried / "grid", stack), stack_dir(carried / "grid", stack))
    StackTrainer.resume(stack_dir(carried / "grid", stack), max_steps=100).run()
    pack = [sys.executable, str(ROOT / "scripts" / "pack_results.py")]
    subprocess.run([*pack, "carry", str(carried), "--into", str(tmp_path / "carry")], check=True, capture_output=True)
    work = tmp_path / "work"
    env = {
        **os.environ,
        "PATH": path,
        "QUEUE": str(grid), "DONE": str(tmp_path / "none"), "CARRY": str(tmp_path / "carry"),
        "GPU_TRAIN_DIR": str(work), "BUNDLE": str(tmp_path / "bundle"), "OUT": str(tmp_path / "out"),
        "STARTUP_SECONDS": "1", "START_MINUTES": "0", "FOLLOW_MINUTES": "0.1", "WATCH_EVERY": "1",
        "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
    }  # fmt: skip
    script = ["bash", str(ROOT / "scripts" / "gpu_train.sh")]
    # 2.5 minutes: the carried run's last epoch must end before the deadline for its sweep to move to done-1; on
    # 2026-11-26, with five jobs on two cores, it took 64 s of training and ended after a deadline of 1.2 minutes.
    started = subprocess.run([*script, "start", "2.5", str(tmp_path / "bench.json")], env=env, capture_output=True,
                             text=True, timeout=400)  # fmt: skip
    assert started.returncode == 0, started.stderr[-2000:]
    assert "continuing the stack carried up" in started.stdout and "the sweep is not running" in started.stdout
    finished = sorted((work / "done-1" / "grid").rglob("evaluation.json"))
    assert len(finished) == 1, started.stdout[-3000:]
    assert (work / "done-1" / "grid" / "stacks" / "stack-000" / "done").is_file()
    # The next stack: a fast machine trains the rest of the queue (done-2) before the deadline, a slow one
    # leaves it in work/session; the queue's end leaves no plan behind.
    plans = [*work.glob("done-*/session/plan.json"), *work.glob("session/plan.json")]
    follow = [run for plan in plans if plan.parts[-3] != "done-1" for run in json.loads(plan.read_text())["runs"]]
    assert len(carried_runs) == 1 and follow and carried_runs[0] not in follow and len(set(follow)) == len(follow)
    drive_log = (work / "drive.log").read_text()
    assert "planning the next stack" in drive_log
    assert (work / "session" / "plan.json").is_file() or "every run of the queue is finished" in drive_log
    packed = subprocess.run([*script, "pack", "0"], env=env, capture_output=True, text=True, timeout=120)
    assert packed.returncode == 0, packed.stderr[-2000:]
    subprocess.run([*pack, "unpack", str(tmp_path / "out"), "--into", str(tmp_path / "back")], check=True)
    assert len(list((tmp_path / "back" / "done-1" / "grid").rglob("model.safetensors"))) == 1
    assert (tmp_path / "back" / "session" / "drive.log").is_file()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("gpu_name", ["NVIDIA H100 80GB HBM3", "NVIDIA H200"])
def test_without_a_benchmark_argument_start_plans_from_the_committed_step_times_of_the_gpu_it_runs_on(
    tmp_path, gpu_name
):
    """On 2026-11-26 the H100's name ("... HBM3") gave the kind "h100" and "h", so no committed document was found:
    the session probed for 3 minutes and planned the plain stack. An H200 (no documents of its own) plans from the
    H100's, the same chip with faster memory. Nothing fits in 0.01 minutes, so start stops after choosing its
    documents."""
    path = _fake_commands(tmp_path, nvidia_smi=f"echo '{gpu_name}'")
    write_tiny_grid(tmp_path / "queue.toml")
    env = _session_env(tmp_path, path, tmp_path / "none", CARRY_MIB="0")
    script = ["bash", str(ROOT / "scripts" / "gpu_train.sh")]
    started = subprocess.run([*script, "start", "0.01"], env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 2, started.stdout[-2000:] + started.stderr[-2000:]
    assert "cuda native" not in started.stdout
    committed = "benchmarks/results/stacking-h100.json"
    assert (tmp_path / "work" / "session" / "bench.json").read_bytes() == (ROOT / committed).read_bytes()
    benches = (tmp_path / "work" / "benches").read_text().split()
    others = ["benchmarks/results/compile-h100.json", "benchmarks/results/triton-h100.json"]
    assert benches == ["--bench", committed, "--bench", others[0], "--bench", others[1]]
    env["ELSEWHERE"] = "tiny-random-s1 not-a-run"  # the CPU machine's runs go to the planner
    started = subprocess.run([*script, "start", "0.01"], env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 2 and "--elsewhere: not a run of the queue: not-a-run" in started.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_start_that_is_the_machines_first_call_takes_its_start_off_the_minutes(tmp_path):
    """MINUTES read before the machine started hold its start: a first `start` takes START_MINUTES off them; after a
    `receive` on the same machine it does not."""
    write_tiny_grid(tmp_path / "queue.toml")
    env = _session_env(tmp_path, _fake_commands(tmp_path), tmp_path / "none", CARRY_MIB="0", START_MINUTES="1.5")
    env["STARTUP_SECONDS"] = "600"  # longer than either: nothing fits, and the planner's error names its minutes
    script = ["bash", str(ROOT / "scripts" / "gpu_train.sh")]
    planned = lambda done: float(re.search(r"fits in ([0-9.]+) minutes", done.stderr).group(1))
    first = subprocess.run([*script, "start", "1.8"], env=env, capture_output=True, text=True, timeout=120)
    assert "the first call on this machine: MINUTES hold its start, so the sweep gets 0.30" in first.stdout
    assert first.returncode == 2 and planned(first) <= 0.3
    shutil.rmtree(tmp_path / "work")
    subprocess.run([*script, "receive"], env=env, capture_output=True, text=True, timeout=120, check=True)
    warm = subprocess.run([*script, "start", "1.8"], env=env, capture_output=True, text=True, timeout=120)
    assert warm.returncode == 2 and "first call" not in warm.stdout and 1.5 < planned(warm) <= 1.8


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_start_with_parts_of_a_carried_stack_but_no_checksum_refuses_to_plan_afresh(tmp_path):
    """Part 00 and the checksum come with the first call; on a machine given back after it, the later parts alone
    arrive. `start` must not plan the queue afresh then (it would train the carried runs from step 0): exit 2."""
    write_tiny_grid(tmp_path / "queue.toml")
    env = _session_env(tmp_path, _fake_commands(tmp_path), tmp_path / "none", UPLOAD=str(tmp_path / "upload"))
    (tmp_path / "upload").mkdir()
    (tmp_path / "upload" / "carry.tar.part01").write_bytes(b"the second part")
    script = ["bash", str(ROOT / "scripts" / "gpu_train.sh")]
    started = subprocess.run([*script, "start", "5"], env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 2, started.stdout
    assert "no carry.sha256 (it comes with part 00): send part 00 again" in started.stderr
    assert "training until" not in started.stdout and not (tmp_path / "work" / "grid").exists()


def test_an_unknown_subcommand_is_a_usage_error():
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_train.sh"), "train"], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("usage: gpu_train.sh start MINUTES")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("status", "failed", "follow", "said"),
    [
        (1, "analyse-matching-copy-20-random-s0", "0", [
            r"analyses failed \({work}/done-1/grid/failures\); every run trained and was evaluated",
            r"every stack finished, [0-9.]+ minutes left: planning the next stack",
        ]),
        (0, "", "0", [r"every stack finished, [0-9.]+ minutes left: planning the next stack"]),
        (0, "", "1000", [r"no next stack: [0-9.]+ minutes left, under FOLLOW_MINUTES \(1000\)"]),
        (1, "evaluate-copy-20-random-s0", "0", ["no next stack: evaluate-copy-20-random-s0 failed"]),
        (1, "", "0", ["no next stack: the sweep exited 1"]),
    ],
)  # fmt: skip
def test_the_driver_lets_the_next_stack_follow_a_sweep_whose_failures_are_only_analyses(
    tmp_path, status, failed, follow, said
):
    """A sweep that exits 1 for failed analyses alone trained and evaluated every run: the driver moves it to done-1
    and plans the next stack (the plan itself fails here: no step times), as after exit 0. A failed evaluation, whose
    run the planner would plan again, an exit 1 without recorded failures (a crash), or too few minutes left end the
    driver, each with its reason in the log."""
    model = '"$6/stacks/stack-000/replicate-0/model"'
    sweep = 'if [ "$1 $2 $3" = "-m lsa_interp sweep" ]; then\n  mkdir -p "$6/failures" ' + model + "\n"
    sweep += f"  echo {{}} > {model}/config.json; echo {{}} > {model}/evaluation.json\n"
    sweep += f'  [ -z "{failed}" ] || echo traceback > "$6/failures/{failed}.txt"\n  exit {status}\nfi\n'
    path = _fake_commands(tmp_path, python3=f'{sweep}exec {sys.executable} "$@"')
    work = tmp_path / "work"
    (work / "session").mkdir(parents=True)
    (work / "session" / "grid.toml").write_text("replicates = 1\n")
    env = _session_env(tmp_path, path, tmp_path / "none", FOLLOW_MINUTES=follow)
    deadline = str(int(time.time()) + 600)
    driven = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_train.sh"), "drive", deadline], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = [line.split(" ", 1)[1] for line in driven.stdout.splitlines()]
    assert lines[0] == "the plain stack's sweep started", driven.stderr[-2000:]
    assert len(lines) == 1 + len(said), driven.stdout
    for line, pattern in zip(lines[1:], said):
        assert re.fullmatch(pattern.format(work=re.escape(str(work))), line), line
    moved = (work / "done-1" / "grid" / "failures").is_dir()
    assert moved == said[-1].endswith("planning the next stack")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_compiled_stack_whose_gpu_check_passes_trains_on_beside_it(tmp_path):
    """The compiled stack's sweep (a stand-in of 2 s) starts before its GPU check (a fake pytest of 1 s) has passed,
    is neither stopped nor started again, and the driver reports the check with its time; it gets the compile
    cache's folders."""
    calls, sweeps = tmp_path / "pytest_calls.txt", tmp_path / "sweeps.txt"
    preflight = tmp_path / "work" / "preflight-compiled.txt"
    path = _fake_commands(
        tmp_path,
        python3=f"""case "$1 $2 $3" in
  "-m pytest "*)
    echo "$@" >> {calls}; sleep 1
    for test in "$@"; do case $test in tests/*) echo "PASSED $test";; esac; done; exit 0 ;;
  "-m lsa_interp sweep")
    echo "start, checks passed: $(grep -c PASSED {preflight})" >> {sweeps}; echo "cache $LSA_COMPILE_CACHE" >> {sweeps}
    sleep 2; echo end >> {sweeps}; exit 0 ;;
esac
exec {sys.executable} "$@"
""",
    )
    write_tiny_grid(tmp_path / "queue.toml", max_steps=1000, batch_size=256, checkpoint_every=1000)
    measured = [
        {"stacking": k, "precision": "fp32", "replicates": 1, "step_ms": ms}
        for k, ms in {"native": 600.0, "native-compile": 0.5}.items()
    ]
    (tmp_path / "bench.json").write_text(json.dumps({"runs": [{"device": "cuda", "results": measured}]}))
    env = _session_env(tmp_path, path, tmp_path / "none", WATCH_EVERY="1", FOLLOW_MINUTES="99")
    command = ["bash", str(ROOT / "scripts" / "gpu_train.sh"), "start", "5", str(tmp_path / "bench.json")]
    started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["stacking"] == "native-compile"
    assert len(calls.read_text().splitlines()) == 1
    # Its stacks load the committed kernels of this GPU kind and keep new ones in the work folder (see pack).
    cache = f"cache {tmp_path / 'work' / 'compile-cache'}:benchmarks/compile-cache/h100"
    assert sweeps.read_text().splitlines() == ["start, checks passed: 0", cache, "end"]
    drive_log = (tmp_path / "work" / "drive.log").read_text()
    assert re.search(r"^\d\d:\d\d:\d\d the compiled stack passed its check on this GPU$", drive_log, re.MULTILINE)
    assert "failed" not in drive_log and re.search(
        r"^\d\d:\d\d:\d\d the compiled stack.s sweep started$", drive_log, re.M
    )
    # The watch prints the driver's lines once: this call's, and a later watch only what came after (a watch of
    # 0 s too: it looks at least once).
    assert started.stdout.count("sweep started") == 1 and started.stdout.count("passed its check") == 1
    with (tmp_path / "work" / "drive.log").open("a") as log:
        log.write("12:00:00 a later line\n")
    watched = subprocess.run([*command[:2], "watch", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert "a later line" in watched.stdout and "passed its check" not in watched.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("kind", "outcome", "planned"),
    [("compiled", "PASSED", "native-compile"), ("triton", "PASSED", "native"), ("compiled", "FAILED", "native")],
)
def test_a_plan_after_a_check_on_this_machine_charges_a_passed_kind_nothing_and_avoids_a_failed_one(
    tmp_path, kind, outcome, planned
):
    """A follow-on plan on a machine where a check already ran. The compiled stack's check passed: the compiled stack
    is planned without its check's start-up (here 10,000 s, which would leave it no room) and not checked again.
    Only the triton stack's passed: the compiled one is charged its check and the plain stack planned. The compiled
    stack's check failed: the plain stack is planned at once (the compiled one is not started and stopped again)."""
    calls = tmp_path / "pytest_calls.txt"
    path = _fake_commands(
        tmp_path,
        python3=f"""case "$1 $2 $3" in
  "-m pytest "*) echo "$@" >> {calls}; exit 1 ;;
  "-m lsa_interp sweep") exit 0 ;;
esac
exec {sys.executable} "$@"
""",
    )
    write_tiny_grid(tmp_path / "queue.toml", max_steps=1000, batch_size=256, checkpoint_every=1000)
    measured = [
        {"stacking": k, "precision": "fp32", "replicates": r, "step_ms": ms}
        for k, ms in {"native": 1.0, "native-compile": 0.5}.items()
        for r in (1, 2, 3)
    ]
    (tmp_path / "bench.json").write_text(json.dumps({"runs": [{"device": "cuda", "results": measured}]}))
    (tmp_path / "work").mkdir()
    check = f"tests/training/test_stack_graph.py::test_each_graph_replay_draws_fresh_dropout_masks[0.1-{kind}]"
    (tmp_path / "work" / f"preflight-{kind}.txt").write_text(f"{outcome} {check}\n")
    env = _session_env(tmp_path, path, tmp_path / "none", CHECK_SECONDS="10000", WATCH_EVERY="1")
    command = ["bash", str(ROOT / "scripts" / "gpu_train.sh"), "start", "5", str(tmp_path / "bench.json")]
    started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert (plan["stacking"], len(plan["runs"])) == (planned, 4) and plan["estimated_minutes"] < 5
    assert not calls.exists() and "failed its check" not in (tmp_path / "work" / "drive.log").read_text()


@pytest.mark.parametrize(
    "arguments", [["all"], ["triton", "four"], ["extra", "4"], ["triton", "4", "5"], ["acceptance", "-1"]]
)
def test_gpu_session_names_its_optional_parts(arguments):
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh"), *arguments], capture_output=True,
                            text=True)  # fmt: skip
    usage = "usage: gpu_session.sh [extra | triton [MINUTES] | acceptance [MINUTES]]\n"
    assert result.returncode == 2 and result.stderr == usage


def _logging_timeout(log: Path) -> dict[str, str]:
    """Fake ``python3`` and ``timeout`` that take no time and log their calls (``limit SECONDS`` for a timeout,
    which must send SIGKILL after its SIGTERM: ``-k``)."""
    timeout = f"""[ "$1" = -k ] || {{ echo "timeout without -k: $*" >&2; exit 3; }}
shift 2
echo "limit $1" >> {log}
shift
exec "$@"
"""
    return {"python3": f'echo "$@" >> {log}', "timeout": timeout}


def test_every_time_limit_of_the_gpu_scripts_ends_its_command():
    """A training loop turns SIGTERM into a stop flag and returns normally (run_dir.stop_on_signals): under
    ``timeout N`` alone, pytest went on with its next test past the limit. Every timeout sends SIGKILL too."""
    for script in ("gpu_session.sh", "gpu_train.sh"):
        text = (ROOT / "scripts" / script).read_text()
        calls = re.findall(r"(?<![\w#`])timeout (\S+)", text)
        assert calls and all(option == "-k" for option in calls), (script, calls)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("minutes", "limits"), [(None, [180, 240]), ("2", [110, 110]), ("0.5", [])])
def test_gpu_session_triton_gives_its_tests_no_more_than_its_minutes(tmp_path, minutes, limits):
    """Its two runs of GPU tests take 180 and 240 s at most, and never more than the minutes left (10 s kept for
    the copies): a session that runs `triton M` after its stack must still have time for `pack`. With under 30 s
    left a run does not start, and the timings are not kept for the planner."""
    log = tmp_path / "calls.txt"
    env = {**os.environ, "PATH": _fake_commands(tmp_path, **_logging_timeout(log)), "OUT": str(tmp_path / "out")}
    command = ["bash", str(ROOT / "scripts" / "gpu_session.sh"), "triton", *([minutes] if minutes else [])]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines()
    tested = [int(lines[i - 1].split()[1]) for i, line in enumerate(lines) if "-m pytest" in line]
    assert all(limit - 5 <= got <= limit for got, limit in zip(tested, limits)) and len(tested) == len(limits)
    assert "and not flash" in next(line for line in lines if "test_packing.py" in line) if limits else True
    assert ("failed or did not run" in result.stdout) == (not limits)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("minutes", "expected"), [("1", []), ("1.9", ["pytest"]), ("2.6", ["bf16", "fp32", "bf16", "pytest"])]
)
def test_gpu_session_acceptance_starts_only_what_its_minutes_leave_time_for(tmp_path, minutes, expected):
    """A fake python3 records its calls and takes no time: a timing call starts only with a minute left per
    configuration it times (the first two calls time two), the packed tests with one minute left, 10 s kept for
    copies; each call's time limit is the seconds left, and each writes its own JSON."""
    log = tmp_path / "calls.txt"
    env = {**os.environ, "PATH": _fake_commands(tmp_path, **_logging_timeout(log)), "OUT": str(tmp_path / "out")}
    command = ["bash", str(ROOT / "scripts" / "gpu_session.sh"), "acceptance", minutes]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in log.read_text().splitlines() if "import torch" not in line]
    limits = [int(line[1]) for line in lines if line[0] == "limit"]
    calls = [line for line in lines if line[0] != "limit"]
    kinds = [call[call.index("--precision") + 1] if "--precision" in call else "pytest" for call in calls]
    assert kinds == expected and len(limits) == len(calls)
    assert all(60 * float(minutes) - 10 - 5 <= limit <= 60 * float(minutes) - 10 for limit in limits)
    timed = [
        (call[call.index("--replicates") + 1], call[call.index("--stacking") + 1])
        for call in calls
        if "--replicates" in call
    ]
    assert (
        timed
        == [
            ("64", "native-compile-packed,native-compile-flash-packed"),
            ("8", "native-compile-packed,native-compile"),
            ("32", "native-compile-flash-packed"),
        ][: len(timed)]
    )
    outputs = [call[call.index("--json") + 1].rsplit("/", 1)[1] for call in calls if "--json" in call]
    assert outputs == ["acceptance-bf16-R64.json", "acceptance-fp32-R8.json", "acceptance-bf16-R32.json"][: len(timed)]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("minutes", [None, "3.5"])
def test_gpu_session_triton_fits_its_benchmarks_into_the_minutes_it_is_given(tmp_path, minutes):
    """With a fake python3 that only records its arguments (so the tests take no time): the kernel-alone benchmark
    only where 4 minutes are left after the tests, R = 64 only in the full 9 minutes, and a stack benchmark budget
    that ends a minute (and the 10 s kept for copies) before the time left."""
    log = tmp_path / "calls.txt"
    env = {**os.environ, "PATH": _fake_commands(tmp_path, python3=f'echo "$@" >> {log}'), "OUT": str(tmp_path / "out")}
    command = ["bash", str(ROOT / "scripts" / "gpu_session.sh"), "triton", *([minutes] if minutes else [])]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    assert sum("-m pytest" in call for call in calls) == 2
    (stack,) = [call.split() for call in calls if "benchmarks.train_throughput" in call]
    expected = (60 * float(minutes or 9) - 10 - 60) / 60
    assert expected - 0.1 <= float(stack[stack.index("--budget-minutes") + 1]) <= expected
    kernel = any("benchmarks.attention_kernel" in call for call in calls)
    assert (kernel, stack[stack.index("--replicates") + 1]) == ((True, "64,32") if minutes is None else (False, "32"))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_packed_stack_whose_gpu_checks_fail_is_stopped_and_the_plain_stack_planned_instead(tmp_path):
    """The planner's fastest stack is the compiled packed one; it starts at once while gpu_train.sh runs its two GPU
    checks beside it (fresh dropout masks at every replay; the packed losses equal the padded ones). A fake pytest
    passes the first check only, after 2 s, while the packed sweep starts; its process group is then stopped, its
    directory removed, and the plain stack planned instead (here too slow for the 7 minutes: nothing trains). The
    packed plan fits the two checks' start-up (20 s each)."""
    calls = tmp_path / "pytest_calls.txt"
    path = _fake_commands(
        tmp_path,
        python3=f"""if [ "$1 $2" = "-m pytest" ]; then
  echo "$@" >> {calls}
  sleep 2
  pgrep -f "{tmp_path / "work" / "grid"}" > {tmp_path / "sweep_during_checks.txt"}
  for test in "$@"; do case $test in tests/*) echo "PASSED $test";; esac; done | head -n 1
  exit 0
fi
exec {sys.executable} "$@"
""",
    )
    write_tiny_grid(tmp_path / "queue.toml", max_steps=1000, batch_size=256, checkpoint_every=1000)
    steps = {"native": 600.0, "native-compile-packed": 0.001}
    measured = [
        {"stacking": k, "precision": "fp32", "replicates": r, "step_ms": ms}
        for k, ms in steps.items()
        for r in (1, 2, 3)
    ]
    (tmp_path / "bench.json").write_text(json.dumps({"runs": [{"device": "cuda", "results": measured}]}))
    env = _session_env(tmp_path, path, tmp_path / "none", CARRY_MIB="0", WATCH_EVERY="1")
    command = ["bash", str(ROOT / "scripts" / "gpu_train.sh"), "start", "7", str(tmp_path / "bench.json")]
    started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-2000:]
    (checks,) = calls.read_text().splitlines()
    assert "fresh_dropout_masks[0.1-compiled-packed]" in checks
    assert "test_a_packed_graph_trains_like_the_padded_one[compiled]" in checks
    assert "the compiled-packed stack failed its check on this GPU" in started.stdout
    assert "stopped; planning the plain stack" in started.stdout and "the sweep is not running" in started.stdout
    assert (tmp_path / "sweep_during_checks.txt").read_text(), "the packed sweep did not start beside its checks"
    assert "runs finished" not in (tmp_path / "work" / "session" / "sweep.log").read_text()  # stopped, not awaited
    time.sleep(1)  # a sweep left running would write its directory again
    assert not (tmp_path / "work" / "grid").exists()
    running = subprocess.run(["pgrep", "-f", str(tmp_path / "work" / "grid")], capture_output=True, text=True)
    assert running.stdout == "", "the packed sweep outlived its failed checks"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("pytest_status", [0, 1, 124])
def test_gpu_session_triton_keeps_its_timings_for_the_planner_only_where_every_test_ran_and_passed(
    tmp_path, pytest_status
):
    """A failed test run (1) or one stopped by its time limit (124) leaves the timings out of runs/gpu-session,
    where gpu_train.sh would plan with them; the script runs from a copy, so its runs/ is the test's."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "gpu_session.sh", tmp_path / "scripts")
    fake_python = f"""case "$*" in
  *"-m pytest"*) exit {pytest_status} ;;
  *train_throughput*) echo '{{"runs": []}}' > "$OUT/triton.json" ;;
esac"""
    env = {**os.environ, "PATH": _fake_commands(tmp_path, python3=fake_python), "OUT": str(tmp_path / "out")}
    command = ["bash", str(tmp_path / "scripts" / "gpu_session.sh"), "triton", "3"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and (tmp_path / "out" / "triton.json").is_file(), result.stderr
    kept = (tmp_path / "runs" / "gpu-session" / "triton.json").is_file()
    assert kept == (pytest_status == 0)
    assert ("failed or did not run" in result.stdout) == (pytest_status != 0)
    assert ("the tests ran past" in result.stdout) == (pytest_status == 124)
