"""scripts/cpu_runs.sh, with a stand-in for `lsa-interp` that records what it was asked to do."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "scripts" / "cpu_runs.sh"


def _stub_lsa(bin_dir: Path, calls: Path, linger: int = 0) -> Path:
    """`python` and a stand-in `lsa-interp` that records its arguments and thread counts; a `train` call
    then lives ``linger`` s (a `data generate` call returns at once) in a child it forks, which keeps its command
    line: a run's child is not a run of its own (made again for each call)."""
    bin_dir.mkdir(exist_ok=True)
    train = (
        f'echo "$*" >> {calls}; echo "$OMP_NUM_THREADS $MKL_NUM_THREADS" >> {calls}.threads; '
        f'[ "$1" != train ] || (sleep {linger}; :)'
    )
    for name, body in (("python", f'exec {sys.executable} "$@"'), ("lsa-interp", train)):
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod((bin_dir / name).stat().st_mode | stat.S_IXUSR)
    return bin_dir / "lsa-interp"


def _repo(tmp_path: Path, replicates: tuple[str, ...] = ()) -> Path:
    """A checkout with the script, the queue and two shipped models that the queue counts as done (copy-20: its
    copy-20-random-s0; copy-200: its copy-200-alphabet-s0), plus empty replicates by name."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "grids").mkdir()
    (repo / "analyses" / "runs").mkdir(parents=True)
    (repo / "checkpoints" / "replicates").mkdir(parents=True)
    (repo / "scripts" / "cpu_runs.sh").write_text(SCRIPT.read_text())
    (repo / "scripts" / "cpu_snapshot.py").write_text((ROOT / "scripts" / "cpu_snapshot.py").read_text())
    (repo / "grids" / "queue.toml").write_text((ROOT / "grids" / "queue.toml").read_text())
    for shipped in ("copy-20", "copy-200"):
        (repo / "checkpoints" / shipped).symlink_to(ROOT / "checkpoints" / shipped)
    for name in replicates:
        (repo / "checkpoints" / "replicates" / name).mkdir()
        (repo / "checkpoints" / "replicates" / name / "model.safetensors").write_bytes(b"")
    return repo


def _call(tmp_path: Path, calls: Path, *args: str, replicates: tuple[str, ...] = (), linger: int = 0,
          **settings: str) -> subprocess.CompletedProcess:  # fmt: skip
    """The script run with ``args`` in a new checkout, with the stand-in `lsa-interp` (living ``linger`` s) and
    ``settings`` as its ``LSA_CPU_*`` variables (default: 8 slots)."""
    repo = _repo(tmp_path, replicates)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LSA_CPU_")},
        "LSA": str(_stub_lsa(tmp_path / "bin", calls, linger)),
        "LSA_CPU_RUNS": str(tmp_path / "runs"),
        **{f"LSA_CPU_{name.upper()}": value for name, value in (settings or {"slots": "8"}).items()},
    }
    script = repo / "scripts" / "cpu_runs.sh"
    return subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=120)


def _run(tmp_path: Path, calls: Path, replicates: tuple[str, ...] = (), linger: int = 0, **settings: str) -> str:
    """The output of the script run without arguments (see `_call`); fails unless it exits 0."""
    done = _call(tmp_path, calls, replicates=replicates, linger=linger, **settings)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _train_calls(calls: Path, count: int) -> list[str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = calls.read_text().splitlines() if calls.exists() else []
        trains = [line for line in lines if line.startswith("train ")]
        if len(trains) >= count:
            return trains
        time.sleep(0.1)
    raise AssertionError(f"expected {count} train calls, got {calls.read_text() if calls.exists() else 'none'}")


def test_a_replaced_machine_trains_again_only_the_runs_that_are_not_shipped(tmp_path):
    calls = tmp_path / "calls.txt"
    out = _run(tmp_path, calls)
    assert "copy-200-alphabet-s0: shipped" in out and "copy-20-random-s0: shipped" in out
    started = [line.split(":")[0] for line in out.splitlines() if ": started" in line]
    assert started == [
        "nocopy-20-random-s0",
        "copy-200-alphabet-reference-s0",
        "copy-200-alphabet-reference-s1",
        *(f"copy-20-random-s{seed}" for seed in (4, 3, 2, 1)),  # the GPU queue's fp32 seeds from its far end
        "copy-200-alphabet-s1",
        "copy-200-alphabet-s2",
    ]
    trains = _train_calls(calls, len(started))
    assert not any("/copy-20-random-s0" in line or "/copy-200-alphabet-s0" in line for line in trains)
    assert any("--architecture reference" in line and "--seed 1" in line for line in trains)
    assert any("/copy-200-alphabet-reference-s0 " in line and "--seed 0 " in line for line in trains)
    assert any(
        "/copy-20-random-s3 " in line and "--seed 3 " in line and "--architecture hooked" in line for line in trains
    )


def test_by_default_each_run_trains_on_one_thread_and_the_first_may_take_every_core(tmp_path):
    """By default each run on one thread. LSA_CPU_SLOTS=1 LSA_CPU_THREADS=2: the first unfinished run alone on
    both, the next waiting."""
    calls = tmp_path / "default" / "calls.txt"
    (tmp_path / "default").mkdir()
    out = _run(tmp_path / "default", calls)
    assert len(_train_calls(calls, 9)) == 9 and "nocopy-20-random-s0: started" in out
    assert set(Path(f"{calls}.threads").read_text().split()) == {"1"}
    calls = tmp_path / "alone" / "calls.txt"
    (tmp_path / "alone").mkdir()
    out = _run(tmp_path / "alone", calls, linger=20, slots="1", threads="2")
    subprocess.run(["pkill", "-f", f"lsa-interp train .*{tmp_path}"], check=False)
    assert "nocopy-20-random-s0: started" in out
    assert "copy-200-alphabet-reference-s0: waiting (at most 1 at a time)" in out
    assert len(_train_calls(calls, 1)) == 1
    assert Path(f"{calls}.threads").read_text().split() == ["2", "2"]


def test_each_run_trains_at_nice_19_in_an_autogroup_of_its_own_also_at_nice_19(tmp_path):
    """A run's session gets a CPU share of its own where the kernel groups sessions (autogroups), so nice 19 alone
    would rank it only against itself: its autogroup is at nice 19 too, and the caller's is left as it was. Read
    from /proc while the runs live: on a busy machine they may wait for the CPU as soon as they are at nice 19."""
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("the kernel groups no sessions (no /proc/self/autogroup)")
    own = Path("/proc/self/autogroup").read_text()  # empty in the kernel's default group (no setsid above us, as in CI)
    out = _run(tmp_path, tmp_path / "calls.txt", linger=120)
    try:
        groups, deadline = {}, time.monotonic() + 60
        for pid in re.findall(r": started \(pid (\d+)\)", out):
            while not (group := Path(f"/proc/{pid}/autogroup").read_text()).endswith("nice 19\n"):
                assert time.monotonic() < deadline, f"run {pid}: {group}"
                time.sleep(0.1)
            groups[pid] = group.split()[0]
            assert int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]) == 19  # its nice
    finally:
        subprocess.run(["pkill", "-f", f"lsa-interp train .*{tmp_path}"], check=False)
    assert len(groups) == 8 and len(set(groups.values())) == 8
    assert own == "" or own.split()[0] not in groups.values()
    assert Path("/proc/self/autogroup").read_text() == own


def test_a_run_shipped_under_replicates_by_its_name_is_not_trained_again(tmp_path):
    out = _run(tmp_path, tmp_path / "calls.txt", replicates=("copy-200-alphabet-reference-s1",))
    assert "copy-200-alphabet-reference-s1: shipped" in out
    assert "nocopy-20-random-s0: started" in out and "copy-20-random-s1: started" in out


def _epochs_logged(run: Path, epochs: int) -> None:
    """A run directory whose metrics.jsonl has, for each of ``epochs`` epochs, a step record and the epoch's."""
    run.mkdir(parents=True)
    lines = []
    for e in range(1, epochs + 1):
        lines.append(f'{{"type": "step", "step": {100 * e}, "epoch": {e - 0.5}, "train_loss": 1.0}}')
        lines.append(f'{{"type": "epoch", "step": {100 * e}, "epoch": {e}, "val_acc": 0.5}}')
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_the_queue_runs_past_half_their_epochs_are_named_for_a_gpu_session_and_a_running_reference_run_is_not(
    tmp_path,
):
    runs = tmp_path / "runs"
    _epochs_logged(runs / "nocopy-20-random-s0", 13)
    _epochs_logged(runs / "copy-20-random-s1", 10)
    _epochs_logged(runs / "copy-20-random-s2", 9)
    _epochs_logged(runs / "copy-200-alphabet-reference-s1", 15)
    reference = f"lsa-interp train --resume {runs / 'copy-200-alphabet-reference-s1'}"
    running = subprocess.Popen([reference, "60"], executable="/bin/sleep", start_new_session=True)  # as setsid
    try:
        out = _run(tmp_path, tmp_path / "calls.txt")  # exit status 0 checked: a running reference run returns 0
    finally:
        running.kill()
    assert "copy-200-alphabet-reference-s1: running" in out
    elsewhere = 'ELSEWHERE="nocopy-20-random-s0 copy-20-random-s1" bash scripts/gpu_train.sh start MINUTES'
    assert out.splitlines()[-1] == f"a GPU session leaves these to this CPU: {elsewhere}"


def test_a_machine_whose_runs_are_all_young_leaves_none_of_them_to_itself(tmp_path):
    _epochs_logged(tmp_path / "runs" / "nocopy-20-random-s0", 9)
    out = _run(tmp_path, tmp_path / "calls.txt")
    assert "nocopy-20-random-s0: started" in out and "ELSEWHERE=" not in out
    assert out.splitlines()[-1].startswith("no run here is past epoch 10: a GPU session leaves none to this CPU")


def test_a_running_run_says_how_long_its_training_needs_at_its_recent_rate(tmp_path):
    """19.5 epochs of 2,000 steps of 32 tasks at a median 100 tasks/s (one window cut by a pause): 3.5 hours."""
    run = tmp_path / "runs" / "nocopy-20-random-s0"
    run.mkdir(parents=True)
    (run / "train_config.json").write_text('{"epochs": 20, "batch_size": 32}')
    rates = [100.0] * 9 + [1.0]
    lines = [f'{{"type": "step", "step": {100 * (i + 1)}, "epoch": {0.05 * (i + 1):.2f}, "tasks_per_s": {rate}}}'
             for i, rate in enumerate(rates)]  # fmt: skip
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    running = subprocess.Popen(
        [f"lsa-interp train --resume {run}", "60"], executable="/bin/sleep", start_new_session=True
    )
    try:
        out = _run(tmp_path, tmp_path / "calls.txt")
    finally:
        running.kill()
    assert "nocopy-20-random-s0: running (step 1000, epoch 0.50; about 3.5 h of training left at 100 tasks/s)" in out


def test_a_snapshot_copies_each_unshipped_runs_whole_records_into_the_checkout_and_starts_nothing(tmp_path):
    """A run still appending may be mid-line: the copy ends at its last whole line. A shipped run is not copied."""
    runs = tmp_path / "runs"
    training = runs / "copy-20-random-s1"
    training.mkdir(parents=True)
    (training / "train_config.json").write_text('{"preset": "copy-20", "seed": 1, "epochs": 20}')
    whole = '{"type": "step", "step": 100}\n{"type": "epoch", "step": 200, "epoch": 1}\n{"type": "step", "step": 300}\n'
    (training / "metrics.jsonl").write_text(whole + '{"type": "st')
    shipped = runs / "copy-20-random-s0"  # copy-20 is shipped: the queue counts it as done
    shipped.mkdir()
    (shipped / "train_config.json").write_text("{}")
    (shipped / "metrics.jsonl").write_text("{}\n")
    (runs / "data-copy-20").mkdir()
    calls = tmp_path / "calls.txt"
    done = _call(tmp_path, calls, "snapshot")
    assert done.returncode == 0, done.stderr
    copied = tmp_path / "repo" / "analyses" / "runs" / "cpu"
    assert done.stdout == "copy-20-random-s1: analyses/runs/cpu/copy-20-random-s1 (last epoch 1, step 300)\n"
    assert sorted(p.name for p in copied.iterdir()) == ["copy-20-random-s1"]
    assert sorted(p.name for p in (copied / "copy-20-random-s1").iterdir()) == ["metrics.jsonl", "train_config.json"]
    assert (copied / "copy-20-random-s1" / "metrics.jsonl").read_text() == whole
    assert (copied / "copy-20-random-s1" / "train_config.json").read_text() == (
        training / "train_config.json"
    ).read_text()
    assert not calls.exists()  # nothing trained, no data generated


def test_an_unknown_argument_is_refused_in_one_line_before_anything_starts(tmp_path):
    calls = tmp_path / "calls.txt"
    done = _call(tmp_path, calls, "status")
    assert done.returncode == 2 and done.stdout == "" and not calls.exists()
    assert done.stderr.splitlines() == [
        "cpu_runs.sh: unknown argument 'status'; run it without one (start or resume the runs) or with 'snapshot'"
    ]


def _snapshot(tmp_path: Path, repo: Path) -> subprocess.CompletedProcess:
    """``cpu_runs.sh snapshot`` in the checkout ``repo`` (made by `_repo`), the runs under ``tmp_path / "runs"``."""
    env = {
        **os.environ,
        "LSA": str(_stub_lsa(tmp_path / "bin", tmp_path / "calls.txt")),
        "LSA_CPU_RUNS": str(tmp_path / "runs"),
    }
    script = repo / "scripts" / "cpu_runs.sh"
    return subprocess.run(["bash", str(script), "snapshot"], env=env, capture_output=True, text=True, timeout=120)


def _records(path: Path, config: str, lines: list[str]) -> Path:
    path.mkdir(parents=True)
    (path / "train_config.json").write_text(config)
    (path / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return path


def test_a_snapshot_keeps_a_committed_record_that_reaches_further_than_a_run_started_again(tmp_path):
    """After a lost machine the run starts again from step 0: its first snapshot must not shorten the record."""
    config = '{"preset": "copy-20", "seed": 1, "epochs": 20}'
    _records(tmp_path / "runs" / "copy-20-random-s1", config, ['{"type": "step", "step": 100}'])
    committed = ['{"type": "step", "step": 4900}', '{"type": "epoch", "step": 5000, "epoch": 2}']
    repo = _repo(tmp_path)
    record = _records(repo / "analyses" / "runs" / "cpu" / "copy-20-random-s1", config, committed)
    done = _snapshot(tmp_path, repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "copy-20-random-s1: kept analyses/runs/cpu/copy-20-random-s1 (last epoch 2, step 5,000): the run here is "
        "behind it (last epoch 0, step 100), started again\n"
    )
    assert (record / "metrics.jsonl").read_text().splitlines() == committed


def test_a_snapshot_removes_the_partial_record_of_a_run_shipped_since_and_keeps_a_finished_one(tmp_path):
    """copy-20-random-s0 is shipped (the queue counts checkpoints/copy-20 as done): a partial record of it would count
    its seed twice; nocopy-20-random-s0's complete record (all its planned epochs) stays whatever is shipped."""
    repo = _repo(tmp_path, replicates=("nocopy-20-random-s0",))
    cpu = repo / "analyses" / "runs" / "cpu"
    epoch = '{"type": "epoch", "step": 100, "epoch": 1}'
    _records(cpu / "copy-20-random-s0", '{"epochs": 20}', [epoch])
    finished = _records(cpu / "nocopy-20-random-s0", '{"epochs": 1}', [epoch])
    unshipped = _records(cpu / "copy-20-random-s3", '{"epochs": 20}', [epoch])
    done = _snapshot(tmp_path, repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "copy-20-random-s0: removed analyses/runs/cpu/copy-20-random-s0 (last epoch 1 of 20, step 100): the run is "
        "shipped\n"
    )
    assert sorted(p.name for p in cpu.iterdir()) == ["copy-20-random-s3", "nocopy-20-random-s0"]
    assert (finished / "metrics.jsonl").read_text() == epoch + "\n" and unshipped.is_dir()


def test_a_later_snapshot_brings_the_record_up_to_the_run_and_one_at_the_same_step_copies_it_again(tmp_path):
    """Each session's snapshot of a run that went on replaces the record committed before it; a run exactly as far as
    the record (no step since) is copied again, not called behind it."""
    config = '{"preset": "copy-20", "seed": 1, "epochs": 20}'
    run = _records(tmp_path / "runs" / "copy-20-random-s1", config, ['{"type": "step", "step": 300}'])
    repo = _repo(tmp_path)
    cpu = repo / "analyses" / "runs" / "cpu"
    record = _records(cpu / "copy-20-random-s1", config, ['{"type": "step", "step": 100}'])
    for _ in range(2):
        done = _snapshot(tmp_path, repo)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "copy-20-random-s1: analyses/runs/cpu/copy-20-random-s1 (last epoch 0, step 300)\n"
        assert (record / "metrics.jsonl").read_text() == (run / "metrics.jsonl").read_text()


def test_a_snapshot_names_the_first_epoch_where_a_record_it_replaces_differs_from_the_run(tmp_path):
    """The same seed trained again on another kind of machine parts from the committed record by rounding: when the
    new run reaches further, its snapshot replaces that record and names the first epoch that differs; a record that
    is the run's own beginning (the run resumed) is replaced without a word."""
    config = '{"preset": "copy-20", "seed": 1, "epochs": 20}'
    epochs = [f'{{"type": "epoch", "step": {100 * e}, "epoch": {e}, "val_acc": 0.{e}}}' for e in (1, 2, 3)]
    run = _records(tmp_path / "runs" / "copy-20-random-s1", config, epochs)
    repo = _repo(tmp_path)
    record = _records(
        repo / "analyses" / "runs" / "cpu" / "copy-20-random-s1",
        config,
        [epochs[0], '{"type": "epoch", "step": 200, "epoch": 2, "val_acc": 0.25}'],
    )
    done = _snapshot(tmp_path, repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "copy-20-random-s1: analyses/runs/cpu/copy-20-random-s1 (last epoch 3, step 300); it replaces a record that "
        "first differs from this run's at epoch 2 (last epoch 2, step 200; git's history keeps it)\n"
    )
    assert (record / "metrics.jsonl").read_text() == (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in epochs + ['{"type": "step", "step": 400}']))
    done = _snapshot(tmp_path, repo)
    assert done.stdout == "copy-20-random-s1: analyses/runs/cpu/copy-20-random-s1 (last epoch 3, step 400)\n"


@pytest.mark.parametrize(
    ("kept", "run", "differs"),
    [
        (["a"], ["b"], 1),
        (["a", "b"], ["a", "c", "d"], 2),
        (["a", "b", "c"], ["a", "x", "c"], 2),
        (["a", "b"], ["a", "b", "c"], None),
        (["a", "b", "c"], ["a"], None),
        ([], ["a"], None),
    ],
)
def test_two_records_differ_first_at_the_earliest_epoch_whose_records_are_not_equal(
    snapshot_helper, kept, run, differs
):
    def text(values):
        return "".join(f'{{"type": "epoch", "epoch": {e}, "v": "{v}"}}\n' for e, v in enumerate(values, 1))

    assert snapshot_helper.first_difference(text(kept), text(run)) == differs


@pytest.fixture(scope="module")
def snapshot_helper():
    return load_script("scripts/cpu_snapshot.py")


@pytest.mark.parametrize(
    "argv",
    [[], ["copy", "a"], ["copy", "a", "b", "c"], ["prune"], ["prune", "a", "b"], ["move", "a"], ["move", "a", "b"]],
)
def test_the_snapshot_helper_refuses_other_arguments_with_its_usage(snapshot_helper, argv, capsys):
    assert snapshot_helper.main(argv) == 2
    assert capsys.readouterr() == ("", "usage: cpu_snapshot.py copy RUN_DIR TARGET | prune TARGET\n")


def test_pruning_leaves_a_record_without_its_config_or_without_its_metrics(snapshot_helper, tmp_path):
    only_metrics = _records(tmp_path / "a", "{}", ['{"type": "epoch", "step": 100, "epoch": 1}'])
    (only_metrics / "train_config.json").unlink()
    only_config = _records(tmp_path / "b", '{"epochs": 20}', [])
    (only_config / "metrics.jsonl").unlink()
    for target in (only_metrics, only_config):
        assert snapshot_helper.prune(target) is None and target.is_dir()


def test_a_records_reach_counts_step_and_epoch_records_only_and_is_0_without_them(snapshot_helper):
    assert snapshot_helper.reach("") == (0, 0)
    lines = '{"type": "startup", "step": 900, "seconds": 70.5}\n{"type": "step", "step": 100}\n'
    assert snapshot_helper.reach(lines) == (0, 100)


def test_a_run_whose_committed_record_holds_an_epoch_goes_after_the_runs_without_one_until_it_has_a_state(tmp_path):
    """On a new machine copy-20 seed 3 (its committed record reaches epoch 2) would retrace that record: the runs
    after it take the two free slots first. Once it has a saved state here it resumes in its place in the order."""
    repo = _repo(tmp_path)
    epoch = '{"type": "epoch", "step": 5000, "epoch": 2}'
    _records(repo / "analyses" / "runs" / "cpu" / "copy-20-random-s3", '{"epochs": 20}', [epoch])
    _records(repo / "analyses" / "runs" / "cpu" / "copy-20-random-s2", '{"epochs": 20}', ['{"type": "step"}'])
    for name in ("nocopy-20-random-s0", "copy-200-alphabet-reference-s0", "copy-200-alphabet-reference-s1"):
        (repo / "checkpoints" / "replicates" / name).mkdir()
        (repo / "checkpoints" / "replicates" / name / "model.safetensors").write_bytes(b"")
    calls = tmp_path / "calls.txt"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LSA_CPU_")},
        "LSA": str(_stub_lsa(tmp_path / "bin", calls, linger=20)),
        "LSA_CPU_RUNS": str(tmp_path / "runs"),
        "LSA_CPU_SLOTS": "2",
    }
    script = repo / "scripts" / "cpu_runs.sh"
    try:
        done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        started = [line.split(":")[0] for line in lines if ": started" in line]
        assert started == ["copy-20-random-s4", "copy-20-random-s2"]  # s2's record holds no epoch: in order
        assert lines[-2] == (
            "copy-20-random-s3: waiting (at most 2 at a time) (its committed record reaches epoch 2: after the runs "
            "without one)"
        )
        assert len(_train_calls(calls, 2)) == 2
    finally:
        subprocess.run(["pkill", "-f", f"lsa-interp train .*{tmp_path}"], check=False)
    state = tmp_path / "runs" / "copy-20-random-s3" / "state.pt"
    state.parent.mkdir(parents=True)
    state.write_bytes(b"")
    while subprocess.run(["pgrep", "-f", f"lsa-interp train .*{tmp_path}"], capture_output=True).returncode == 0:
        time.sleep(0.1)
    done = subprocess.run(["bash", str(script)], env={**env, "LSA_CPU_SLOTS": "8"}, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    started = [line for line in done.stdout.splitlines() if ": started" in line]
    assert [line.split(":")[0] for line in started][:3] == [
        "copy-20-random-s4",
        "copy-20-random-s3",
        "copy-20-random-s2",
    ]
    assert "after the runs without one" not in started[1]
    assert any(f"train --resume {state.parent}" in line for line in _train_calls(calls, 5))
    subprocess.run(["pkill", "-f", f"lsa-interp train .*{tmp_path}"], check=False)
