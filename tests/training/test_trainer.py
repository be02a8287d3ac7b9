"""Training: the schedule, batch plans, a short CPU run, and resuming after SIGKILL/SIGTERM."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from rich.console import Console
from rich.progress import TimeElapsedColumn
from safetensors.torch import load_file

from lsa_interp import cli
from lsa_interp.commands import train as train_command
from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.data.batching import BATCHING_METHODS, batch_keys, epoch_batches
from lsa_interp.data.loaders import load_tokenized
from lsa_interp.data.vocab import EOS, PAD
from lsa_interp.model.checkpoint import load_model
from lsa_interp.training import TrainConfig, Trainer, exact_match, lr_factor
from lsa_interp.training.validation import ResidentSplit, loss_fn, matching_prompts, matching_score
from lsa_interp.utils import hardware_description
from tests.helpers import SMALL_MODEL, assert_same_weights


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """1,824 training rows: 29 steps an epoch at batch 64."""
    config = DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4)
    return save_dataset(generate_dataset(config, seed=3), tmp_path_factory.mktemp("data") / "tiny")


def test_schedule_warms_up_per_step_then_decays_per_epoch():
    assert lr_factor(0, 100, 20) == pytest.approx(1e-4)
    assert lr_factor(50, 100, 20) == pytest.approx(1e-4 + (1 - 1e-4) * 0.5)
    assert lr_factor(100, 100, 20) == 1.0
    assert lr_factor(200, 100, 20) == pytest.approx(1 - 0.95 / 18)
    assert lr_factor(250, 100, 20) == lr_factor(200, 100, 20)
    assert lr_factor(1999, 100, 20) == pytest.approx(0.05)


@pytest.mark.parametrize("method", BATCHING_METHODS)
def test_batch_plans_cover_every_row_once_and_respect_the_method(method):
    rng = np.random.default_rng(0)
    alphabet, rule, length = rng.integers(0, 5, 3000), rng.integers(0, 10, 3000), rng.integers(37, 90, 3000)
    keys = batch_keys(method, alphabet, rule)
    plan = epoch_batches(keys, length, 32, seed=1, epoch=3)
    reference = epoch_batches(keys, None, 32, seed=1, epoch=3)
    for batches in (plan, reference):
        assert sorted(np.concatenate(batches).tolist()) == list(range(3000))
        assert all(len(b) <= 32 and len(set(keys[b].tolist())) == 1 for b in batches)
        if method == "alphabet":
            assert all(len(set(alphabet[b].tolist())) == 1 for b in batches)
    spread = {
        name: np.mean([length[b].max() - length[b].min() for b in batches if len(b) == 32])
        for name, batches in (("bucketed", plan), ("reference", reference))
    }
    assert spread["bucketed"] < 30 < spread["reference"], f"length spread inside batches: {spread}"
    again = epoch_batches(keys, length, 32, seed=1, epoch=3)
    assert all((a == b).all() for a, b in zip(plan, again))
    assert not all(
        len(a) == len(b) and (a == b).all() for a, b in zip(plan, epoch_batches(keys, length, 32, seed=1, epoch=4))
    )


def test_exact_match_needs_answer_and_eos():
    target = torch.tensor([[0, 2, EOS, PAD], [1, EOS, PAD, PAD], [3, EOS, PAD, PAD]])
    generated = torch.tensor([[0, 2, EOS], [1, 5, EOS], [3, EOS, PAD]])
    assert exact_match(generated, target).tolist() == [True, False, True]


def test_training_shapes_are_checked_at_runtime():
    """jaxtyping's pytest hook covers lsa_interp.training: rows of different counts are refused."""
    from jaxtyping import TypeCheckError

    with pytest.raises(TypeCheckError):
        exact_match(torch.zeros(3, 4, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))


def test_bad_config_values():
    with pytest.raises(ValueError, match="unknown batching 'nope'"):
        TrainConfig(data_dir="x", batching="nope")
    with pytest.raises(ValueError, match="unknown precision"):
        TrainConfig(data_dir="x", precision="fp8")


@pytest.mark.slow
def test_short_cpu_run_learns_and_writes_a_loadable_model(data_dir, tmp_path):
    config = TrainConfig(
        data_dir=str(data_dir), preset="tiny", epochs=4, batch_size=64, lr=3e-3, log_every=5, model=SMALL_MODEL
    )
    trainer = Trainer.start(config, tmp_path / "run")
    started = time.perf_counter()
    trainer.run()
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["type"] == "step"]
    epochs = [r for r in records if r["type"] == "epoch"]
    assert len(epochs) == 4 and {"val_loss", "val_acc", "val_acc_copy", "val_acc_by_transformation"} <= set(epochs[0])
    assert all(-1.0 <= r["matching_score"] <= 1.0 for r in epochs)
    assert steps[-1]["train_loss"] < steps[0]["train_loss"] - 0.5
    assert epochs[-1]["val_loss"] < epochs[0]["val_loss"]
    model = load_model(tmp_path / "run" / "model")
    assert model.metadata["preset"] == "tiny" and model.metadata["steps"] == trainer.total_steps
    assert 0 < model.metadata["train_seconds"] < wall  # training time only: validation and saving left out
    with pytest.raises(FileExistsError, match="not empty"):
        Trainer.start(config, tmp_path / "run")


def _train_cmd(data_dir, out, *extra):
    return [
        sys.executable,
        "-m",
        "lsa_interp",
        "train",
        "--data",
        str(data_dir),
        "--out",
        str(out),
        "--preset",
        "tiny",
        "--epochs",
        "2",  # the cut comes at step 8 of 58, the resumed run crosses the epoch boundary at step 29
        "--batch-size",
        "64",
        "--checkpoint-every",
        "4",
        "--val-limit",
        "20",
        "--model-config",
        json.dumps(SMALL_MODEL),
        *extra,
    ]


def _run_env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _wait_for_state(run, min_step, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run / "state.pt").exists():
            try:
                if torch.load(run / "state.pt", weights_only=False)["step"] >= min_step:
                    return
            except Exception:
                pass
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise TimeoutError("no checkpoint appeared")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "extra"),
    [(signal.SIGKILL, ()), (signal.SIGTERM, ("--micro-batches", "4"))],  # micro-batches: the CPU runs' option
)
def test_killed_and_resumed_run_ends_with_the_same_weights(data_dir, tmp_path, sig, extra):
    env = _run_env()
    subprocess.run(_train_cmd(data_dir, tmp_path / "whole", *extra), check=True, env=env, capture_output=True)
    proc = subprocess.Popen(
        _train_cmd(data_dir, tmp_path / "cut", *extra), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _wait_for_state(tmp_path / "cut", 8, proc)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == (128 + sig if sig == signal.SIGTERM else -sig), "SIGTERM: state saved, exit 143"
    assert not (tmp_path / "cut" / "model").exists()
    done = subprocess.run(
        [sys.executable, "-m", "lsa_interp", "train", "--resume", str(tmp_path / "cut")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    whole = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    cut = load_file(tmp_path / "cut" / "model" / "model.safetensors")
    assert whole.keys() == cut.keys() and all(torch.equal(whole[k], cut[k]) for k in whole)
    lines = lambda run: [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines(tmp_path / "cut")] == [r["step"] for r in lines(tmp_path / "whole")]


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    return info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--out", "R", "--batching", "nope", "--data", "D"], "unknown batching 'nope'"),
        (["train", "--out", "R", "--preset", "nope"], "unknown preset 'nope'"),
        (["train", "--resume", "nowhere"], "not a training run"),
        (["train"], "give --out RUN_DIR"),
        (["train", "--out", "R", "--data", "D", "--model-config", "{x"], "--model-config is not valid JSON"),
        (["train", "--out", "R", "--data", "D", "--model-config", '{"d_model": 30}'], "not divisible"),
        (["train", "--out", "R", "--max-steps", "0"], "Invalid value for '--max-steps'"),
        (["train", "--out", "R", "--replicates", "0"], "Invalid value for '--replicates'"),
        (["train", "--out", "R", "--data", "D", "--micro-batches", "40"], "micro-batches must be between 1 and"),
        (["train", "--out", "R", "--data", "D", "--micro-batches", "2", "--replicates", "2"], "one model's eager"),
        (["train", "--out", "R", "--data", "D", "--preset", "copy-20"], "--preset copy-20 is not the preset of --data"),
        (["train", "--out", "R", "--data", "D", "--device", "tpu"], "unknown device 'tpu'; choose one of: auto, cpu"),
        (["train", "--resume", "R", "--epochs", "1"], "--epochs does not apply with --resume"),
        (["train", "--resume", "R", "--max-steps", "9", "--lr", "0.5"], "--lr does not apply with --resume"),
        (["train", "--out", "R", "--data", "D", "--data-seed", "2"], "--data-seed does not apply with --data"),
        (["train", "--out", "R", "--data", "D", "--data-seed", "0"], "--data-seed does not apply with --data"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message, tmp_path, capsys, monkeypatch, data_dir):
    monkeypatch.chdir(tmp_path)
    args = [str(data_dir) if a == "D" else a for a in args]
    code, err = run_cli(args, capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "R").exists()  # nothing half-written


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"lr": "x"}, "not a training config: missing 'betas'; missing 'data_dir'; lr must be a number, got 'x'"),
        ({"stack": True, "runs": 5}, "not a stack config: missing 'betas'; runs must be a list of run objects, got 5"),
    ],
)
def test_resuming_a_damaged_config_names_its_file(config, problem, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train_config.json").write_text(json.dumps(config), encoding="utf-8")
    code, err = run_cli(["train", "--resume", str(tmp_path / "run")], capsys)
    assert code == 2 and err == f"lsa-interp: error: {tmp_path / 'run' / 'train_config.json'}: {problem}\n"


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_an_out_that_is_a_file_is_named_as_one(force, tmp_path, capsys, data_dir):
    """It said 'is not empty; pass --force', and --force then failed with 'cannot write to --out: File exists'."""
    (tmp_path / "grid.toml").write_text("keep")
    code, err = run_cli(["train", "--out", str(tmp_path / "grid.toml"), "--data", str(data_dir), *force], capsys)
    assert code == 2 and err == (
        f"lsa-interp: error: --out {tmp_path / 'grid.toml'} is a file; give a directory for the run (a new or empty "
        "one)\n"
    )
    assert (tmp_path / "grid.toml").read_text() == "keep"


def test_a_new_run_stores_its_dataset_path_absolute(tmp_path, capsys, data_dir, monkeypatch):
    """The path as typed (relative) broke resuming and evaluating from another directory."""
    monkeypatch.chdir(data_dir.parent)
    code, _ = run_cli(["train", "--out", str(tmp_path / "R"), "--data", data_dir.name, "--max-steps", "1"], capsys)
    stored = json.loads((tmp_path / "R" / "train_config.json").read_text())["data_dir"]
    assert code == 0 and stored == str(data_dir.resolve())


def test_a_run_on_a_saved_dataset_records_that_dataset_s_preset(tmp_path, capsys, data_dir):
    """``--preset`` defaulted to copy-20 and was recorded whatever ``--data`` held, so evaluating the model later
    generated copy-20 data for a model trained on another dataset."""
    code, _ = run_cli(["train", "--out", str(tmp_path / "R"), "--data", str(data_dir), "--max-steps", "1"], capsys)
    assert code == 0 and load_model(tmp_path / "R" / "model").metadata["preset"] == "tiny"


def test_a_new_run_that_fails_to_start_leaves_no_generated_dataset_behind(tmp_path, capsys, data_dir, monkeypatch):
    """The dataset is generated into OUT/data before the trainer is built; a config the trainer refuses (here the
    flash attention without a GPU) used to leave it there, so the same command was then refused as not empty."""
    monkeypatch.setattr(train_command, "_generate_into", lambda preset, seed, out: shutil.copytree(data_dir, out))
    flash = ["--attention", "flash", "--packing", "--precision", "bf16", "--max-steps", "1"]
    code, err = run_cli(["train", "--out", str(tmp_path / "R"), *flash], capsys)
    assert code == 2 and "needs a CUDA device" in err and not (tmp_path / "R").exists()
    (tmp_path / "kept").mkdir()
    code, _ = run_cli(["train", "--out", str(tmp_path / "kept"), *flash, "--force"], capsys)
    assert code == 2 and list((tmp_path / "kept").iterdir()) == []


def test_a_run_stopped_by_a_signal_exits_as_that_signal_does(tmp_path, capsys, data_dir, monkeypatch):
    """Ctrl-C saves the state and exits 130, as an interrupted program does (it exited 0, as a finished run)."""
    step = Trainer.train_step

    def interrupted_at_step_2(self, batch):
        loss = step(self, batch)
        if self.step == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return loss

    monkeypatch.setattr(Trainer, "train_step", interrupted_at_step_2)
    bar = _capture_bar(monkeypatch)
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--out", str(tmp_path / "R"), "--data", str(data_dir), "--max-steps", "5"])
    assert info.value.code == 130
    said = "2 steps (0.04 epochs), stopped by a signal; continue with --resume"
    assert capsys.readouterr().out == f"{tmp_path / 'R'}: {said}\n"
    assert _bar_counts(bar) == [(2, 5)], "the step reached of --max-steps (it showed 0/1140: no step logged yet)"
    assert not (tmp_path / "R" / "model").exists()
    assert torch.load(tmp_path / "R" / "state.pt", weights_only=False)["step"] == 2


def _capture_bar(monkeypatch) -> io.StringIO:
    """The train command's console (its progress bar, rendered once at the end off a terminal) into a buffer."""
    buffer = io.StringIO()
    monkeypatch.setattr(train_command, "console", Console(file=buffer, width=200))
    return buffer


def _bar_counts(buffer: io.StringIO) -> list[tuple[int, int]]:
    """The (completed, total) of every bar rendered since the last call."""
    counts = [(int(a), int(b)) for a, b in re.findall(r"\b(\d+)/(\d+)\b", buffer.getvalue())]
    buffer.seek(0)
    buffer.truncate()
    return counts


def test_the_bar_counts_the_steps_the_run_trains_to_and_a_saved_bound_is_named(tmp_path, capsys, data_dir, monkeypatch):
    """The bar's total was the recipe's steps whatever --max-steps said, and it moved only on the step records
    (every 100 steps): a run of --max-steps 3 ended at 3/1140. A resumed run that stopped at once at the
    --max-steps saved with it said only 'N steps (...), model written'."""
    bar, run_dir = _capture_bar(monkeypatch), tmp_path / "R"
    started = []
    add_task = train_command.Progress.add_task
    monkeypatch.setattr(
        train_command.Progress,
        "add_task",
        lambda self, *args, **kw: started.append((kw["completed"], kw["total"])) or add_task(self, *args, **kw),
    )

    def train(*args):
        with pytest.raises(SystemExit) as info:
            cli.main(["train", *args])
        out = capsys.readouterr().out
        assert info.value.code == 0 and out.startswith(f"{run_dir}: ") and out.count("\n") == 1
        return out.removeprefix(f"{run_dir}: ").rstrip("\n"), _bar_counts(bar)

    small = ["--model-config", json.dumps(SMALL_MODEL), "--val-limit", "8"]
    again = f"continue with --resume {run_dir} --max-steps N (a total step count)"
    assert train("--out", str(run_dir), "--data", str(data_dir), "--max-steps", "3", *small) == (
        f"3 steps (0.05 epochs), model written; stopped at --max-steps 3 (step 3 of 1140); {again}",
        [(3, 3)],
    )
    saved = "the run's max_steps 3 (saved with the run); pass --max-steps N (a total step count) to go further"
    assert train("--resume", str(run_dir)) == (f"3 steps (0.05 epochs), model written; stopped at {saved}", [(3, 3)])
    assert train("--resume", str(run_dir), "--max-steps", "5") == (
        f"5 steps (0.09 epochs), model written; stopped at --max-steps 5 (step 5 of 1140); {again}",
        [(5, 5)],
    )
    assert train("--resume", str(run_dir)) == (
        f"5 steps (0.09 epochs), model written; trained nothing: the run is at step 5, past {saved}",
        [(5, 5)],
    )
    assert train("--resume", str(run_dir), "--max-steps", "4") == (
        "5 steps (0.09 epochs), model written; trained nothing: the run is at step 5, --max-steps 4 (a total step "
        "count) is behind it",
        [(5, 5)],
    )
    assert started == [(0, 3), (3, 3), (3, 5), (5, 5), (5, 5)], "a resumed bar starts at the run's step"


def test_the_stop_reason_names_a_time_bound_saved_or_given_and_a_finished_recipe():
    """A first run stopped by --max-minutes said only '16 steps (0.55 epochs), model written', as a finished run."""

    def reason(step, first, resumed=True, max_steps=None, max_minutes=None, given=(None, None)):
        config = SimpleNamespace(max_steps=max_steps, max_minutes=max_minutes)
        trainer = SimpleNamespace(config=config, step=step, total_steps=100, run_dir=Path("runs/mm"))
        return train_command._stop_reason(trainer, first, resumed, dict(zip(("max_steps", "max_minutes"), given)))

    assert reason(50, 40, max_minutes=0.1) == (
        "stopped at the run's max_minutes 0.1 (saved with the run), step 50 of 100; continue with --resume runs/mm, "
        "or pass --max-minutes M to train longer"
    )
    given = "stopped at --max-minutes 0.1 (step 50 of 100); continue with --resume runs/mm"
    assert reason(50, 40, max_minutes=0.1, given=(None, 0.1)) == reason(50, 0, False, max_minutes=0.1) == given
    assert reason(100, 100) == "trained nothing: the run has finished its recipe" and reason(100, 40) == ""
    assert reason(100, 40, max_minutes=0.1) == "", "a run that ended its recipe before the deadline says nothing"


def test_the_bar_follows_the_steps_between_step_records_and_shows_the_elapsed_time(
    tmp_path, capsys, data_dir, monkeypatch
):
    """The bar moved only on the step records (every 100 steps): a 58-step run read 0/58 with no rate or ETA until
    its epoch ended, and it had no elapsed time."""
    buffer = io.StringIO()
    monkeypatch.setattr(train_command, "console", Console(file=buffer, width=200, force_terminal=True))
    bars, shown = [], []
    start, step = train_command.Progress.start, Trainer.train_step
    monkeypatch.setattr(train_command.Progress, "start", lambda self: bars.append(self) or start(self))

    def drawn_at_step_2(self, batch):
        loss = step(self, batch)
        if self.step == 2:
            bars[0].refresh()
            shown.append(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buffer.getvalue()).splitlines()[-1])
        return loss

    monkeypatch.setattr(Trainer, "train_step", drawn_at_step_2)
    small = ["--model-config", json.dumps(SMALL_MODEL), "--val-limit", "8", "--max-steps", "4"]
    code, _ = run_cli(["train", "--out", str(tmp_path / "R"), "--data", str(data_dir), *small], capsys)
    assert code == 0
    (line,) = shown
    assert re.search(r" 2/4 .* \d:\d\d:\d\d (-:--:--|\d:\d\d:\d\d)\s*$", line), line
    assert any(isinstance(column, TimeElapsedColumn) for column in bars[0].columns)


def test_cli_refuses_a_used_run_directory(tmp_path, capsys, data_dir):
    (tmp_path / "R").mkdir()
    (tmp_path / "R" / "x").write_text("x")
    code, err = run_cli(["train", "--out", str(tmp_path / "R"), "--data", str(data_dir)], capsys)
    assert code == 2 and "--resume" in err


def test_length_bucketing_is_off_by_default_and_on_for_runs_saved_before_it_existed():
    config = TrainConfig(data_dir="d")
    assert config.length_bucketing is False
    assert TrainConfig.from_dict(json.loads(json.dumps(asdict(config)))) == config
    saved_before = {k: v for k, v in asdict(config).items() if k != "length_bucketing"}
    assert TrainConfig.from_dict(saved_before).length_bucketing is True


def test_optimizer_applies_the_scheduled_rate_at_the_first_and_last_steps(data_dir, tmp_path):
    """The rate AdamW steps with is ``lr * lr_factor(step)`` of the step being taken, not of the one before, down to
    the config's final factor; AdamW decays the weights at the config's rate (neither the recipe's)."""
    config = TrainConfig(
        data_dir=str(data_dir), epochs=3, batch_size=64, lr=3e-3, model=SMALL_MODEL, weight_decay=0.05,
        final_lr_factor=0.4,
    )  # fmt: skip
    trainer = Trainer.start(config, tmp_path / "run")
    assert trainer.optimizer.param_groups[0]["weight_decay"] == 0.05
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train_step(trainer.epoch_plan(0)[0])
    first = 3e-3 * 1e-4
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(first) and trainer.current_lr == pytest.approx(
        first
    )
    # Adam's first update moves every parameter by about the rate (sign of the gradient), far less than 3e-3
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(trainer.model.parameters(), before))
    assert first / 2 < moved < 2 * first
    trainer.step = trainer.total_steps - 1
    trainer.train_step(trainer.epoch_plan(2)[-1])
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(3e-3 * 0.4)
    assert trainer.step == trainer.total_steps == 3 * trainer.steps_per_epoch


def test_a_state_saved_with_the_foreach_optimizer_resumes_with_the_fused_one(data_dir, tmp_path):
    """Runs saved before the fused update (the CPU runs' states held ``foreach: True``) resume with it, and their
    next steps match the foreach update's to rounding (fused and foreach both run in one state's two runs here)."""
    config = TrainConfig(data_dir=str(data_dir), epochs=1, batch_size=64, model=SMALL_MODEL, max_steps=6)
    trainer = Trainer.start(config, tmp_path / "run")
    for rows in trainer.epoch_plan(0)[:3]:
        trainer.train_step(rows)
    assert {key: trainer.optimizer.param_groups[0][key] for key in ("foreach", "fused", "capturable")} == {
        "foreach": False, "fused": True, "capturable": False,
    }  # fmt: skip
    trainer.save_state()
    state = torch.load(tmp_path / "run" / "state.pt", weights_only=True)
    for group in state["optimizer"]["param_groups"]:
        group.update(foreach=True, fused=None)  # as the foreach trainer saved it
    torch.save(state, tmp_path / "run" / "state.pt")
    resumed = Trainer.resume(tmp_path / "run")
    assert resumed.optimizer.param_groups[0]["fused"] is True and resumed.optimizer.param_groups[0]["foreach"] is False
    foreach = Trainer.resume(tmp_path / "run")
    foreach.optimizer = torch.optim.AdamW(foreach.model.parameters(), lr=config.lr, betas=config.betas,
                                          weight_decay=config.weight_decay, foreach=True)  # fmt: skip
    foreach.optimizer.load_state_dict(state["optimizer"])
    for rows in trainer.epoch_plan(0)[3:6]:
        for run in (resumed, foreach):
            run.model.eval()  # no dropout: the two runs' updates are compared, not their masks
            run.train_step(rows)
    moved = max(
        float((p - q).detach().abs().max()) for p, q in zip(resumed.model.parameters(), trainer.model.parameters())
    )
    assert moved > 1e-4 and _largest_difference(resumed.model, foreach.model) < 1e-6


def _largest_difference(model, other) -> float:
    """The largest difference between two models' weights but the attention key biases, whose true gradient is zero
    (softmax ignores a shift shared by every key): AdamW turns the rounding noise there into steps of about lr."""
    d = model.cfg.d_model
    differences = []
    for (name, p), q in zip(model.named_parameters(), other.parameters()):
        difference = (p - q).detach().abs()
        differences.append(
            torch.cat([difference[:d], difference[2 * d :]]) if name.endswith("in_proj_bias") else difference
        )
    return max(float(difference.max()) for difference in differences)


@pytest.mark.parametrize("bucketing", [False, True])
def test_trainer_plans_follow_the_length_bucketing_flag(data_dir, tmp_path, bucketing):
    config = TrainConfig(data_dir=str(data_dir), batch_size=64, length_bucketing=bucketing, model=SMALL_MODEL)
    trainer = Trainer.start(config, tmp_path / "run")
    lengths = trainer.train.src_len if bucketing else None
    expected = epoch_batches(trainer.keys, lengths, 64, config.seed, 2)
    assert all((a == b).all() for a, b in zip(trainer.epoch_plan(2), expected, strict=True))


def _quick_config(data_dir, **overrides):
    """Batches of 32, at most 12 steps, a log line every 4 steps and a state every 6, validation on 16 rows."""
    base = {
        "data_dir": str(data_dir),
        "preset": "tiny",
        "epochs": 2,
        "batch_size": 32,
        "lr": 3e-3,
        "max_steps": 12,
        "log_every": 4,
        "checkpoint_every": 6,
        "val_limit": 16,
        "model": SMALL_MODEL,
    }
    return TrainConfig(**{**base, **overrides})


def _lines(run):
    """The metric lines of ``run`` without the wall-clock rate."""
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "tasks_per_s"} for r in records]


def test_a_run_stopped_by_a_signal_resumes_to_the_uninterrupted_weights_and_metrics(data_dir, tmp_path):
    """SIGTERM saves the state (no model); resuming drops metric lines written after that state and ends with the
    uninterrupted run's weights (dropout on), metric lines and step count."""
    Trainer.start(_quick_config(data_dir), tmp_path / "whole").run()
    cut = Trainer.start(_quick_config(data_dir), tmp_path / "cut")

    def terminate_at_step_8(record):
        if record["step"] == 8:
            os.kill(os.getpid(), signal.SIGTERM)

    cut.run(progress=terminate_at_step_8)
    assert not (tmp_path / "cut" / "model").exists() and cut.stopped_by == signal.SIGTERM
    state = torch.load(tmp_path / "cut" / "state.pt", weights_only=False)
    metrics = tmp_path / "cut" / "metrics.jsonl"
    assert state["step"] == 8 and state["metrics_offset"] == metrics.stat().st_size and state["elapsed"] > 0
    assert [r["step"] for r in _lines(tmp_path / "cut")] == [4, 8]
    with metrics.open("a") as handle:  # a line logged after the last state, as by a run killed before its next save
        handle.write('{"type": "step", "step": 9}\n')
    resumed = Trainer.resume(tmp_path / "cut")
    assert (resumed.step, resumed.elapsed) == (8, state["elapsed"])
    assert resumed.run() == tmp_path / "cut" and resumed.stopped_by is None
    assert _lines(tmp_path / "cut") == _lines(tmp_path / "whole")
    whole = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    done = load_file(tmp_path / "cut" / "model" / "model.safetensors")
    assert whole.keys() == done.keys() and all(torch.equal(whole[k], done[k]) for k in whole)
    assert load_model(tmp_path / "cut" / "model").metadata["steps"] == 12


def test_a_run_stopped_between_two_step_records_resumes_to_the_same_records(data_dir, tmp_path):
    """Stopped at step 6 (records every 4 steps), the state holds the losses of steps 5 and 6, so the resumed run's
    record at step 8 averages steps 5-8 as the uninterrupted run's does (not 7-8 alone)."""
    Trainer.start(_quick_config(data_dir), tmp_path / "whole").run()
    cut = Trainer.start(_quick_config(data_dir), tmp_path / "cut")
    train_step = cut.train_step

    def stop_after_step_6(batch):
        loss = train_step(batch)
        if cut.step == 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return loss

    cut.train_step = stop_after_step_6
    cut.run()
    state = torch.load(tmp_path / "cut" / "state.pt", weights_only=True)
    assert (state["step"], state["window_steps"]) == (6, 2) and [r["step"] for r in _lines(tmp_path / "cut")] == [4]
    Trainer.resume(tmp_path / "cut").run()
    assert _lines(tmp_path / "cut") == _lines(tmp_path / "whole")


def test_a_run_logs_steps_validates_at_epoch_ends_and_saves_states_on_schedule(data_dir, tmp_path):
    """Step lines every ``log_every`` steps and at the last step; an epoch line (integer epoch) after each epoch's
    last step; a state at every ``checkpoint_every`` steps, each epoch end and the last step; ``resume`` takes new
    bounds."""
    model = {**SMALL_MODEL, "dropout": 0.0}
    config = _quick_config(data_dir, batch_size=256, max_steps=11, log_every=3, checkpoint_every=5, model=model)
    trainer = Trainer.start(config, tmp_path / "run")
    assert trainer.steps_per_epoch == 8  # 1,824 rows
    saved = []
    original = trainer.save_state
    trainer.save_state = lambda: (saved.append(trainer.step), original())[1]
    trainer.run()
    lines = _lines(tmp_path / "run")
    expected = [("step", 3), ("step", 6), ("epoch", 8), ("step", 9), ("step", 11)]
    assert [(r["type"], r["step"]) for r in lines] == expected
    assert saved == [5, 8, 10, 11]
    epoch = lines[2]
    assert epoch["epoch"] == 1 and isinstance(epoch["epoch"], int) and 0 <= epoch["val_acc"] <= 1
    assert -1.0 <= epoch["matching_score"] <= 1.0
    model = trainer.hooked_model()  # the score of every epoch line is on the fixed prompts: comparable across runs
    assert trainer.validated(model)["matching_score"] == matching_score(model, matching_prompts())
    assert lines[1]["epoch"] == pytest.approx(6 / 8) and lines[4]["epoch"] == pytest.approx(11 / 8)
    assert [r["lr"] for r in lines if r["type"] == "step"] == pytest.approx(
        [3e-3 * lr_factor(s - 1, 8, 2, warmup_steps=1824 // 256) for s in (3, 6, 9, 11)]
    )
    metadata = load_model(tmp_path / "run" / "model").metadata
    assert metadata["steps"] == 11 and metadata["epochs_completed"] == pytest.approx(11 / 8)
    assert (metadata["preset"], metadata["seed"], metadata["data_seed"]) == ("tiny", 0, 3)
    assert metadata["train_config"] == json.loads(json.dumps(asdict(config)))
    assert metadata["device"] == "cpu" and metadata["hardware"] == hardware_description("cpu")
    assert metadata["torch"] == torch.__version__ and metadata["train_seconds"] >= 0
    resumed = Trainer.resume(tmp_path / "run", max_steps=13)
    assert resumed.config.max_steps == 13 and resumed.step == 11
    resumed.run()
    assert load_model(tmp_path / "run" / "model").metadata["steps"] == 13


class _Clock:
    """A stand-in for ``time.perf_counter``/``time.monotonic`` that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _clocked(trainer, clock, step_seconds=None, epoch_seconds=None):
    """Make each training step (or each step's entry of ``step_seconds``) and each validation advance ``clock``."""
    train_step, epoch_records = trainer.train_step, trainer.epoch_records

    def timed_step(rows):
        loss = train_step(rows)
        clock.now = step_seconds(trainer.step, clock.now)
        return loss

    def timed_epoch():
        records = epoch_records()
        clock.now = epoch_seconds(trainer.step, clock.now)
        return records

    trainer.train_step, trainer.epoch_records = timed_step, timed_epoch


def test_logged_loss_rate_and_training_time_are_those_of_the_steps_since_the_last_line(data_dir, tmp_path, monkeypatch):
    """A step line's train_loss is the mean loss of its window's steps, tasks_per_s its tasks over the training time
    since the last line (validation not counted); progress gets each line with total_steps; train_seconds sums the
    training time only."""
    model = {**SMALL_MODEL, "dropout": 0.0}
    config = _quick_config(
        data_dir, preset="a-label", seed=2, batch_size=256, max_steps=11, log_every=3, checkpoint_every=5, model=model
    )
    trainer = Trainer.start(config, tmp_path / "run")
    clock = _Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    _clocked(trainer, clock, step_seconds=lambda step, now: now + 0.52, epoch_seconds=lambda step, now: now + 100.0)
    losses = []
    train_step = trainer.train_step
    trainer.train_step = lambda rows: losses.append(float(train_step(rows))) or torch.tensor(losses[-1])
    seen = []
    trainer.run(progress=seen.append)
    monkeypatch.undo()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in lines if r["type"] == "step"]
    windows = [(0, 3), (3, 6), (6, 9), (9, 11)]  # steps 1-3, 4-6, 7-9 (the epoch ends at 8), 10-11
    assert [r["step"] for r in steps] == [3, 6, 9, 11]
    for record, (a, b) in zip(steps, windows):
        assert record["train_loss"] == pytest.approx(np.mean(losses[a:b]), rel=1e-6)
    # 0.52 s a step; the line after an epoch end counts the tasks and time since the end of its validation
    sizes = [len(b) for b in trainer.epoch_plan(0) + trainer.epoch_plan(1)]
    rates = [sum(sizes[0:3]) / 1.56, sum(sizes[3:6]) / 1.56, sizes[8] / 0.52, sum(sizes[9:11]) / 1.04]
    assert [r["tasks_per_s"] for r in steps] == pytest.approx(rates)
    assert [{k: v for k, v in p.items() if k != "total_steps"} for p in seen] == steps
    assert all(p["total_steps"] == 11 for p in seen)
    metadata = load_model(tmp_path / "run" / "model").metadata
    assert metadata["train_seconds"] == 5.7 and (metadata["preset"], metadata["seed"]) == ("a-label", 2)  # 5.72 s


def test_a_run_resumed_before_its_first_saved_state_keeps_none_of_its_records(data_dir, tmp_path):
    """Records logged before the first saved state belong to no state: resuming from none drops them all."""
    Trainer.start(_quick_config(data_dir), tmp_path / "run").log({"type": "step", "step": 1})
    resumed = Trainer.resume(tmp_path / "run")
    assert resumed.step == 0 and (tmp_path / "run" / "metrics.jsonl").read_bytes() == b""


def test_max_minutes_stops_at_the_first_step_or_epoch_end_past_the_deadline(data_dir, tmp_path, monkeypatch):
    """The deadline is ``max_minutes`` after the start: a step that ends exactly on it goes on, the first past it
    stops the run (state and model saved); a validation that runs past it stops the run at that epoch's end."""
    model = {**SMALL_MODEL, "dropout": 0.0}
    config = _quick_config(data_dir, batch_size=256, epochs=3, max_steps=None, max_minutes=0.25, model=model)
    clock = _Clock()

    def run(step_seconds, epoch_seconds):
        trainer = Trainer.start(config, tmp_path / "run", force=True)
        clock.now = 0.0
        with monkeypatch.context() as patch:
            patch.setattr(time, "monotonic", clock)
            _clocked(trainer, clock, step_seconds, epoch_seconds)
            trainer.run()
        return load_model(tmp_path / "run" / "model").metadata["steps"]

    # the deadline is 15 s: steps 1-7 at 0 s, step 8 (the epoch's last) at 14 s, its validation ends on 15 s,
    # steps 9-16 at 15 s (not past it), the second validation ends at 15.2 s: the run stops after step 16 of 24
    assert run(lambda step, now: 14.0 if step == 8 else now, lambda step, now: 15.0 if step == 8 else 15.2) == 16
    # a step ending at 15.1 s is the first past the deadline
    assert run(lambda step, now: 15.1 if step == 3 else now, lambda step, now: now) == 3
    assert torch.load(tmp_path / "run" / "state.pt", weights_only=False)["step"] == 3


@pytest.mark.parametrize("parts", [2, 3])
def test_micro_batches_take_the_same_steps_as_whole_batches(data_dir, tmp_path, parts):
    """Without dropout, micro-batched steps end 8 steps with the losses and weights (but the key biases, see
    `assert_same_weights`) of whole-batch steps, up to rounding; the parts are sorted by length and padded less."""
    model = {**SMALL_MODEL, "dropout": 0.0}
    runs = {
        k: Trainer.start(_quick_config(data_dir, micro_batches=k, model=model), tmp_path / str(k)) for k in (1, parts)
    }
    first = runs[1].epoch_plan(0)[0]
    before = float(loss_fn(runs[1].model, *runs[1].train.batch(first)).detach())
    losses = {k: [float(run.train_step(b)) for b in run.epoch_plan(0)[:8]] for k, run in runs.items()}
    assert losses[1][0] == pytest.approx(before, rel=1e-6)  # a step returns its batch's loss before the update
    assert losses[parts] == pytest.approx(losses[1], rel=1e-5)
    assert_same_weights(runs[1].model.state_dict(), runs[parts].model.state_dict(), SMALL_MODEL["d_model"])
    rows = runs[parts].epoch_plan(0)[0]
    pieces = runs[parts].train.micro_batches(rows, parts)
    widths = [runs[parts].train.batch(piece)[0].shape[1] for piece, _ in pieces]
    assert widths == sorted(widths) and widths[0] < runs[parts].train.batch(rows)[0].shape[1]


def test_micro_batches_are_refused_where_no_eager_single_model_step_runs():
    with pytest.raises(ValueError, match="between 1 and the batch size 32, got 0"):
        TrainConfig(data_dir="x", micro_batches=0)
    with pytest.raises(ValueError, match="one model's eager step"):
        TrainConfig(data_dir="x", micro_batches=2, compile=True)
    assert TrainConfig.from_dict(
        {k: v for k, v in asdict(TrainConfig(data_dir="d")).items() if k != "micro_batches"}
    ) == TrainConfig(data_dir="d", length_bucketing=False)


def test_a_run_the_trainer_refuses_leaves_no_run_directory(data_dir, tmp_path):
    config = TrainConfig(data_dir=str(data_dir), model={**SMALL_MODEL, "d_model": 30})
    with pytest.raises(ValueError, match="not divisible"):
        Trainer.start(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    splits = [ResidentSplit(load_tokenized(data_dir, name), torch.device("cpu")) for name in ("train", "val")]
    longest = max(int(max(split.src_len.max(), split.tgt_len.max())) for split in splits)
    short = TrainConfig(data_dir=str(data_dir), model={**SMALL_MODEL, "max_len": longest - 1})
    with pytest.raises(
        ValueError, match=f"longest row has {longest} tokens, more than the model's max_len {longest - 1}"
    ):
        Trainer.start(short, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert Trainer.start(replace(short, model={**SMALL_MODEL, "max_len": longest}), tmp_path / "run").step == 0
