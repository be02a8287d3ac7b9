"""The native stack: each replicate trains exactly like a single run, in stacks of mixed data and batching,
stops when its run ends, validates like `validate_model`, saves loadable models and resumes bit-exactly."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from lsa_interp.data import load_dataset
from lsa_interp.data.vocab import EOS, PAD
from lsa_interp.evaluation import card
from lsa_interp.model.checkpoint import load_model
from lsa_interp.training import (
    RunSpec,
    StackConfig,
    StackTrainer,
    TrainConfig,
    Trainer,
    resume_run,
    stack_trainer,
    stack_validation,
    start_run,
)
from lsa_interp.training.stack_trainer import run_train_config
from lsa_interp.training.stack_validation import validate_stack
from lsa_interp.training.validation import ResidentSplit, accuracy_record, matching_score, validate_model
from lsa_interp.utils import hardware_description
from tests.helpers import SMALL_MODEL, assert_same_weights

NO_DROPOUT = {**SMALL_MODEL, "dropout": 0.0}


def _single(data_dir, tmp_path, name, **overrides):
    base = dict(data_dir=str(data_dir), preset="tiny", batch_size=64, lr=3e-3, log_every=4, val_limit=40)
    config = TrainConfig(**{**base, "model": NO_DROPOUT, **overrides})
    Trainer.start(config, tmp_path / name).run()
    return load_file(tmp_path / name / "model" / "model.safetensors")


def _stack_config(runs, **overrides):
    base = dict(batch_size=64, lr=3e-3, log_every=4, val_limit=40, model=NO_DROPOUT)
    return StackConfig(runs=tuple(runs), **{**base, **overrides})


def _replicate(run_dir, index):
    return load_file(run_dir / f"replicate-{index}" / "model" / "model.safetensors")


def _assert_close(stacked, single, d_model=SMALL_MODEL["d_model"]):
    assert_same_weights(stacked, single, d_model, rtol=1e-4)


@pytest.mark.slow
def test_each_replicate_matches_a_single_run_with_its_seed(data_dir, tmp_path):
    config = TrainConfig(
        data_dir=str(data_dir), preset="tiny", seed=5, batch_size=64, lr=3e-3, batching="alphabet", max_steps=12,
        val_limit=40, replicates=2, model=NO_DROPOUT,
    )  # fmt: skip
    trainer = start_run(config, tmp_path / "stack")
    assert isinstance(trainer, StackTrainer) and [run.seed for run in trainer.config.runs] == [5, 6]
    trainer.run()
    for index, seed in enumerate((5, 6)):
        single = _single(data_dir, tmp_path, f"s{seed}", seed=seed, batching="alphabet", max_steps=12)
        _assert_close(_replicate(tmp_path / "stack", index), single)
        meta = load_model(tmp_path / "stack" / f"replicate-{index}" / "model").metadata
        assert (meta["seed"], meta["replicate"], meta["steps"], meta["batching"]) == (seed, index, 12, "alphabet")
        assert meta["train_config"]["seed"] == seed and meta["precision"] == "fp32" and "hardware" in meta
    assert not (tmp_path / "stack" / "done").exists(), "stopped by max_steps: not finished"


@pytest.mark.slow
def test_mixed_stack_matches_single_runs_and_a_finished_replicate_stops_changing(data_dir, other_dir, tmp_path):
    runs = [
        RunSpec(str(data_dir), seed=1, batching="random", epochs=1, preset="tiny"),
        RunSpec(str(other_dir), seed=2, batching="alphabet", epochs=2, preset="tiny4"),
    ]
    config = _stack_config(runs, checkpoint_every=3)
    trainer = StackTrainer.start(config, tmp_path / "stack")
    short, long = (int(n) for n in trainer.plan.total_steps)
    assert short < long and trainer.total_steps == long
    snapshots = {}
    trainer.run(progress=lambda record: snapshots.setdefault(record["step"], trainer.model.flat[0].clone()))
    assert (tmp_path / "stack" / "done").is_file()
    after_short = [step for step in snapshots if step >= short]
    assert after_short and all(torch.equal(snapshots[step], trainer.model.flat[0].detach()) for step in after_short)
    first = _single(data_dir, tmp_path, "a", seed=1, batching="random", epochs=1)
    second = _single(other_dir, tmp_path, "b", seed=2, batching="alphabet", epochs=2, preset="tiny4")
    _assert_close(_replicate(tmp_path / "stack", 0), first)
    _assert_close(_replicate(tmp_path / "stack", 1), second)
    records = [json.loads(line) for line in (tmp_path / "stack" / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in records if r["type"] == "epoch"]
    assert {(r["replicate"], r["run"]) for r in epochs} == {(0, runs[0].name), (1, runs[1].name)}
    assert [r["epoch"] for r in epochs if r["replicate"] == 1] == [1.0, 2.0]
    assert all(-1.0 <= r["matching_score"] <= 1.0 for r in epochs)
    steps = [r for r in records if r["type"] == "step"]
    assert steps[-1]["train_loss_by_replicate"][0] is None and steps[-1]["lr_by_replicate"][0] == 0.0
    assert all(r["tasks_per_s"] > 0 for r in steps)
    assert load_model(tmp_path / "stack" / "replicate-0" / "model").metadata["steps"] == short


def test_batched_validation_equals_validate_model_on_each_replicate(data_dir, large_dir, tmp_path, monkeypatch):
    """In chunks of 5 rows a replicate, over val splits of different sizes (the shorter one padded), each record of
    all replicates (no list given) equals `validate_model`'s on its replicate, with its matching score."""
    runs = [RunSpec(str(data_dir), seed=1, preset="tiny"), RunSpec(str(large_dir), seed=2, preset="tiny8")]
    trainer = StackTrainer.start(_stack_config(runs, model=SMALL_MODEL, max_steps=6, val_limit=None), tmp_path / "s")
    trainer.run()
    assert trainer.val.size.tolist() == [67, 126]
    monkeypatch.setattr(stack_validation, "ROWS_PER_CHUNK", 10)
    records = validate_stack(trainer.model, trainer.val, trainer._autocast, prompts=trainer.prompts)
    assert len(records) == 2
    for index, record in enumerate(records):
        model = trainer.model.replicate_model(index)
        alone = validate_model(model, ResidentSplit(trainer.val.parts[index].split, trainer.device), trainer._autocast)
        assert record.pop("matching_score") == matching_score(model, trainer.prompts)
        assert record.pop("val_loss") == pytest.approx(alone.pop("val_loss"), rel=1e-6)
        nan_free = lambda values: json.loads(json.dumps(values).replace("NaN", "null"))
        assert nan_free(record) == nan_free(alone)


def test_batched_validation_counts_a_row_right_exactly_when_its_whole_answer_is(
    data_dir, large_dir, tmp_path, monkeypatch
):
    """A decoder that answers a row right when the sum of its source tokens is even, else with its first sibling
    rule's answer where it has one and it fits the chunk's steps (else EOS alone), as wide as the chunk's widest
    answer: the records count exactly those rows as right and as sibling answers, in chunks of 3 rows (fewer than an
    answer's tokens), in each replicate's split."""
    runs = [RunSpec(str(data_dir), seed=1, preset="tiny"), RunSpec(str(large_dir), seed=2, preset="tiny8")]
    trainer = StackTrainer.start(_stack_config(runs, model=SMALL_MODEL, val_limit=None), tmp_path / "s")
    val = trainer.val
    tokens = lambda row: tuple(int(t) for t in row if t != PAD)
    rows_of = lambda r: range(int(val.offset[r]), int(val.offset[r] + val.size[r]))
    answers, siblings = {}, {}
    for r in range(2):
        for i in rows_of(r):
            answers[r, tokens(val.src[i])] = tokens(val.tgt_out[i])
            siblings[r, tokens(val.src[i])] = tokens(val.parts[r].siblings[i - int(val.offset[r]), 0])
    right = lambda r, src: sum(tokens(src)) % 2 == 0
    given = set()  # the rows answered with a sibling's answer: those whose answer fits the chunk's decoding steps

    def answer(r, src, max_len):
        key = r, tokens(src)
        if right(r, src):
            return answers[key]
        if siblings[key] and len(siblings[key]) <= max_len:
            given.add(key)
            return siblings[key]
        return (EOS,)

    def oracle(src, max_len):
        out = [[answer(r, row, max_len) for row in rows] for r, rows in enumerate(src)]
        width = max(len(a) for rows in out for a in rows)
        assert width <= max_len
        return torch.tensor([[list(a) + [PAD] * (width - len(a)) for a in rows] for rows in out])

    monkeypatch.setattr(trainer.model, "greedy_decode", oracle)
    monkeypatch.setattr(stack_validation, "ROWS_PER_CHUNK", 6)  # 3 rows, fewer than tokens
    records = validate_stack(trainer.model, val, trainer._autocast)
    for r, record in enumerate(records):
        part = val.parts[r].split
        hits = torch.tensor([right(r, val.src[i]) for i in rows_of(r)])
        sibling = torch.tensor([(r, tokens(val.src[i])) in given for i in rows_of(r)])
        assert 0 < hits.sum() < len(hits) and sibling.any()
        expected = accuracy_record(hits, part, record["val_loss"], sibling)
        assert json.dumps(record) == json.dumps(expected)


def test_epoch_records_are_of_the_replicates_that_trained_in_the_stack_epoch_at_their_own_epochs(
    data_dir, other_dir, tmp_path
):
    """A stack epoch is the longest run's (9 steps here); a run of 10 steps an epoch is at 0.9 of its own after it,
    and a run that ended with an earlier stack epoch is not validated again."""
    runs = [
        RunSpec(str(data_dir), seed=1, epochs=1, preset="tiny"),
        RunSpec(str(data_dir), seed=2, epochs=2, preset="tiny"),
        RunSpec(str(other_dir), seed=3, batching="alphabet", epochs=1, preset="tiny4"),
    ]
    trainer = StackTrainer.start(_stack_config(runs, model=SMALL_MODEL), tmp_path / "stack")
    assert trainer.plan.steps_per_epoch.tolist() == [9, 9, 10] and trainer.plan.total_steps.tolist() == [9, 18, 10]
    expected = {9: {0: 1.0, 1: 1.0, 2: 0.9}, 18: {1: 2.0, 2: 1.0}}
    for step, epochs in expected.items():
        trainer.step = step  # the records read the step count and the weights only: no training needed
        records = trainer.epoch_records()
        assert [(r["replicate"], r["run"], r["epoch"]) for r in records] == [
            (index, runs[index].name, epoch) for index, epoch in epochs.items()
        ]
        assert all(r["type"] == "epoch" and r["step"] == step for r in records)
        assert all(type(r["stack_epoch"]) is int and r["stack_epoch"] == step // 9 for r in records)
        assert all(-1.0 <= r["matching_score"] <= 1.0 for r in records)
        alone = [validate_stack(trainer.model, trainer.val, trainer._autocast, [r])[0] for r in epochs]
        assert [r["val_loss"] for r in records] == [a["val_loss"] for a in alone]  # each its own replicate's
    assert len({r["val_loss"] for r in alone}) == 2


def test_a_bf16_stack_validates_under_bf16_autocast_and_an_fp32_stack_without(data_dir, tmp_path):
    runs = [RunSpec(str(data_dir), seed=0, preset="tiny")]
    contexts = {"fp32": contextlib.nullcontext, "bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16)}
    losses = {}
    for precision, context in contexts.items():
        trainer = StackTrainer.start(_stack_config(runs, model=SMALL_MODEL, precision=precision), tmp_path / precision)
        trainer.step = trainer.steps_per_epoch
        losses[precision] = trainer.epoch_records()[0]["val_loss"]
        assert losses[precision] == validate_stack(trainer.model, trainer.val, context, [0])[0]["val_loss"]
    assert losses["fp32"] != losses["bf16"]  # the same weights (seed 0): only the precision differs


def _fake_clock(monkeypatch):
    """Make the trainer module's clocks read ``clock[0]`` seconds (0 to begin with); returns ``clock``."""
    clock = [0.0]
    monkeypatch.setattr(
        stack_trainer, "time", SimpleNamespace(monotonic=lambda: clock[0], perf_counter=lambda: clock[0])
    )
    return clock


def _records(run_dir, kind=None):
    """The records of ``run_dir``'s ``metrics.jsonl`` (those of type ``kind`` only, if given)."""
    lines = map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
    return [r for r in lines if kind is None or r["type"] == kind]


def _clocked(trainer, clock, per_step, saves):
    """Make ``trainer`` run on the fake ``clock`` (``clock[0]`` seconds), which each step moves ``per_step[0]`` seconds
    on, and list the step of every state it saves in ``saves``."""
    train_step, save_state = trainer.train_step, trainer.save_state
    trainer.train_step = lambda: (clock.__setitem__(0, clock[0] + per_step[0]), train_step())[1]
    trainer.save_state = lambda: (saves.append(trainer.step), save_state())[1]
    return trainer


def test_a_stack_stops_at_its_minutes_and_resumes_under_new_ones_to_the_weights_of_one_run(
    data_dir, tmp_path, monkeypatch
):
    """On a clock that moves 61 s a step, 2 minutes end the run after step 2 (122 s), its state and models saved,
    not done; resumed with 4 minutes on a clock of 60 s a step, it trains until the clock is past them (step 7: the
    fourth step's 240 s are not past), from that state, cutting what was logged after it, saving every 3 steps and at
    its end, and ends (dropout on) with the weights of a run of 7 steps that nobody stopped. Its step records (every
    2 steps) count the tasks of 2 steps of both replicates in 2 steps' seconds, its models the seconds it trained."""
    clock, per_step, saves = _fake_clock(monkeypatch), [61.0], []
    runs = [RunSpec(str(data_dir), seed=s, epochs=2, preset="tiny") for s in (0, 1)]
    config = _stack_config(runs, model=SMALL_MODEL, log_every=2, checkpoint_every=3, max_minutes=2.0)
    _clocked(StackTrainer.start(config, tmp_path / "cut"), clock, per_step, saves).run()
    assert saves == [2] and torch.load(tmp_path / "cut" / "state.pt", weights_only=False)["step"] == 2
    meta = load_model(tmp_path / "cut" / "replicate-1" / "model").metadata
    assert (meta["steps"], meta["train_seconds"]) == (2, 122.0) and not (tmp_path / "cut" / "done").exists()
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as metrics:
        metrics.write(json.dumps({"type": "step", "step": 3}) + "\n")  # logged by a process killed after its state
    per_step[0], resumed = 60.0, StackTrainer.resume(tmp_path / "cut", max_minutes=4.0)
    assert resumed.step == 2 and resumed.config.max_minutes == 4.0
    _clocked(resumed, clock, per_step, saves).run()
    assert resumed.step == 7 and saves == [2, 3, 6, 7]
    meta = load_model(tmp_path / "cut" / "replicate-0" / "model").metadata
    assert (meta["steps"], meta["train_seconds"]) == (7, 422.0)
    whole = StackTrainer.start(replace(config, max_steps=7, max_minutes=None), tmp_path / "whole")
    _clocked(whole, clock, per_step, []).run()
    assert torch.equal(resumed.model.flat, whole.model.flat)
    assert [r["step"] for r in _records(tmp_path / "cut", "step")] == [2, 4, 6]
    assert [r["step"] for r in _records(tmp_path / "whole", "step")] == [2, 4, 6, 7]  # and at its last step
    for record in _records(
        tmp_path / "cut", "step"
    ):  # the schedule's rate at the step just run, the replicates' mean loss
        lr = resumed.plan.window(record["step"] - 1, 1).lr[0].tolist()
        assert record["lr_by_replicate"] == lr and record["lr"] == lr[resumed.longest] and lr[0] < config.lr
        assert record["epoch"] == record["step"] / 9
        assert record["train_loss"] == pytest.approx(sum(record["train_loss_by_replicate"]) / 2)
    rates = [r["tasks_per_s"] for r in _records(tmp_path / "cut", "step")]
    assert rates == [256 / 122, 256 / 120, 176 / 120]  # each replicate's short batch (536 = 8 x 64 + 24) in 5-6


@pytest.mark.parametrize("saved_minutes", [None, 100.0])
def test_the_minutes_given_to_run_override_the_configs(data_dir, tmp_path, monkeypatch, saved_minutes):
    """`run(max_minutes=M)` (the sweep's minutes left, counted once the trainer is built) bounds this call whatever
    the config says: 2 minutes on a clock of 61 s a step end it after step 2."""
    clock, saves = _fake_clock(monkeypatch), []
    config = _stack_config([RunSpec(str(data_dir), seed=0, epochs=2)], model=SMALL_MODEL, max_minutes=saved_minutes)
    trainer = _clocked(StackTrainer.start(config, tmp_path / "stack"), clock, [61.0], saves)
    trainer.run(max_minutes=2.0)
    assert trainer.step == 2 and saves == [2] and trainer.config.max_minutes == saved_minutes


def test_a_stack_whose_epoch_validation_runs_past_its_minutes_stops_at_that_epochs_state(
    data_dir, tmp_path, monkeypatch
):
    """1 s a step and 100 s for an epoch's validation, 1 minute: the first epoch's validation (after step 9) ends
    past the minute, so the stack stops there, as a single run does, not one step later."""
    clock, saves = _fake_clock(monkeypatch), []
    config = _stack_config([RunSpec(str(data_dir), seed=0, epochs=2)], model=SMALL_MODEL, max_minutes=1.0)
    trainer = _clocked(StackTrainer.start(config, tmp_path / "stack"), clock, [1.0], saves)
    epoch_records = trainer.epoch_records
    trainer.epoch_records = lambda: (clock.__setitem__(0, clock[0] + 100.0), epoch_records())[1]
    trainer.run()
    assert trainer.steps_per_epoch == 9 and trainer.step == 9 and saves == [9]


def test_a_stack_stopped_between_two_step_records_resumes_to_the_same_records(data_dir, tmp_path):
    """Stopped at step 3 (records every 2 steps), the state holds step 3's losses, so the resumed stack's record at
    step 4 averages steps 3-4 per replicate as the uninterrupted stack's does."""
    runs = [RunSpec(str(data_dir), seed=s, epochs=1) for s in (0, 1)]
    config = _stack_config(runs, model=SMALL_MODEL, log_every=2, max_steps=6)
    StackTrainer.start(config, tmp_path / "whole").run()
    cut = StackTrainer.start(config, tmp_path / "cut")
    train_step = cut.train_step

    def stop_after_step_3():
        tasks = train_step()
        if cut.step == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return tasks

    cut.train_step = stop_after_step_3
    cut.run()
    assert torch.load(tmp_path / "cut" / "state.pt", weights_only=True)["step"] == 3
    assert cut.stopped_by == signal.SIGTERM
    StackTrainer.resume(tmp_path / "cut").run()
    steps = lambda run: [{k: v for k, v in r.items() if k != "tasks_per_s"} for r in _records(run, "step")]
    assert [r["step"] for r in steps(tmp_path / "cut")] == [2, 4, 6] and steps(tmp_path / "cut") == steps(
        tmp_path / "whole"
    )


def test_each_saved_replicate_records_its_own_run_and_the_stacks_recipe(data_dir, other_dir, tmp_path, monkeypatch):
    """What `lsa-interp results` tabulates: each model's preset (the dataset's where its run names none), seeds,
    batching, precision, steps and epochs of its own, the stack's training seconds (on a clock of 2.468 s a step)."""
    clock = _fake_clock(monkeypatch)
    runs = [
        RunSpec(str(data_dir), seed=3, epochs=1),
        RunSpec(str(other_dir), seed=4, batching="alphabet", epochs=2, preset="tiny4"),
    ]
    config = _stack_config(runs, model=SMALL_MODEL, max_steps=5, precision="bf16")
    _clocked(StackTrainer.start(config, tmp_path / "stack"), clock, [2.468], []).run()
    own = [
        {
            "preset": "tiny",
            "seed": 3,
            "data_seed": 3,
            "batching": "random",
            "epochs_completed": 5 / 9,
            "run": runs[0].name,
        },
        {
            "preset": "tiny4",
            "seed": 4,
            "data_seed": 4,
            "batching": "alphabet",
            "epochs_completed": 0.5,
            "run": runs[1].name,
        },
    ]
    for index, expected in enumerate(own):
        meta = load_model(tmp_path / "stack" / f"replicate-{index}" / "model").metadata
        assert {key: meta[key] for key in expected} == expected
        assert (meta["replicate"], meta["stack_replicates"], meta["steps"], meta["train_seconds"]) == (
            index,
            2,
            5,
            12.3,
        )
        assert (meta["precision"], meta["device"], meta["torch"]) == ("bf16", "cpu", torch.__version__)
        assert meta["hardware"] == hardware_description("cpu")
        assert meta["train_config"] == json.loads(json.dumps(asdict(run_train_config(config, runs[index]))))
    assert not (tmp_path / "stack" / "done").exists()


def test_a_finished_stack_marks_itself_done_with_its_steps_and_replicates(data_dir, tmp_path):
    """Runs of 1 and 2 epochs (9 steps each): past step 9 the first logs no loss and no learning rate, the stack's
    loss is the second's, and once the second has finished the stack takes no step more."""
    runs = [RunSpec(str(data_dir), seed=s, epochs=s + 1, preset="tiny") for s in (0, 1)]
    trainer = StackTrainer.start(_stack_config(runs, model=SMALL_MODEL, val_limit=8, log_every=3), tmp_path / "stack")
    trainer.run()
    assert json.loads((tmp_path / "stack" / "done").read_text()) == {"steps": 18, "replicates": 2}
    records = _records(tmp_path / "stack", "step")
    assert [r["step"] for r in records] == [3, 6, 9, 12, 15, 18]
    for record in records[3:]:
        assert record["train_loss_by_replicate"][0] is None and record["lr_by_replicate"][0] == 0.0
        assert record["train_loss"] == record["train_loss_by_replicate"][1] > 0
    with pytest.raises(IndexError, match="past the end"):
        trainer.train_step()


def test_a_stack_validates_val_limit_rows_of_each_replicate_and_all_of_them_without_a_limit(
    data_dir, large_dir, tmp_path
):
    runs = [RunSpec(str(data_dir), seed=0, preset="tiny"), RunSpec(str(large_dir), seed=1, preset="tiny8")]
    sizes = [len(load_dataset(d).splits["val"]) for d in (data_dir, large_dir)]
    assert StackTrainer(_stack_config(runs, val_limit=40), tmp_path).val.size.tolist() == [40, 40]
    assert StackTrainer(_stack_config(runs, val_limit=None), tmp_path).val.size.tolist() == sizes > [40, 40]


def test_a_length_bucketed_stack_batches_rows_of_a_length_together(data_dir, tmp_path):
    """Random batching, one group: sorted by length in one window of 50 batches, at most one batch of the epoch
    holds rows of two lengths (the tiny dataset's sources are 39 and 40 tokens); unbucketed, nearly all do."""
    runs = [RunSpec(str(data_dir), seed=0, preset="tiny")]
    mixed = {}
    for bucketing in (False, True):
        trainer = StackTrainer(_stack_config(runs, length_bucketing=bucketing), tmp_path)
        lengths = trainer.train.src_len
        mixed[bucketing] = sum(len(set(lengths[batch].tolist())) > 1 for batch in trainer.plan.epoch_plan(0, 0))
    assert mixed[True] <= 1 and mixed[False] >= 7


def test_a_stack_decays_its_weights_at_its_configs_rate(data_dir, tmp_path):
    runs = [RunSpec(str(data_dir), seed=0, preset="tiny")]
    weights = {}
    for decay in (0.0, 0.5, 0.5):
        trainer = StackTrainer(_stack_config(runs, weight_decay=decay, max_steps=2), tmp_path)
        for _ in range(2):
            trainer.train_step()
        weights.setdefault(decay, []).append(trainer.model.flat.detach().clone())
    assert torch.equal(*weights[0.5]) and (weights[0.0][0] - weights[0.5][0]).abs().max() > 1e-4


def test_a_stack_resumed_before_its_first_saved_state_keeps_none_of_its_records(data_dir, tmp_path):
    """Records logged before the first saved state belong to no state: resuming from none drops them all."""
    config = _stack_config([RunSpec(str(data_dir), preset="tiny")], max_steps=2)
    StackTrainer.start(config, tmp_path / "stack").log({"type": "step", "step": 1})
    resumed = StackTrainer.resume(tmp_path / "stack")
    assert resumed.step == 0 and (tmp_path / "stack" / "metrics.jsonl").read_bytes() == b""


def test_a_compiled_stack_on_a_cpu_steps_eagerly_and_compiles_nothing(data_dir, tmp_path, monkeypatch):
    """``compile`` compiles the graphed step, which a CPU does not capture."""
    monkeypatch.setattr(torch, "compile", lambda *args, **kwargs: pytest.fail("torch.compile called"))
    trainer = StackTrainer.start(
        _stack_config([RunSpec(str(data_dir), preset="tiny")], compile=True, max_steps=2, device="cpu"),
        tmp_path / "stack",
    )
    trainer.run()
    assert trainer.step == 2 and trainer.stepper.graph is None


def test_windows_of_3_steps_train_what_one_window_of_256_does(data_dir, tmp_path, monkeypatch):
    """The batches of 7 steps sent to the device 3 steps at a time (the last window cut at the run's end): the same
    weights and losses as in one window."""
    runs = [RunSpec(str(data_dir), seed=s, preset="tiny") for s in (0, 1)]
    config = _stack_config(runs, model=SMALL_MODEL, max_steps=7, log_every=1)
    trainers, loaded = {}, []
    for steps in (256, 3):  # WINDOW_STEPS is read while training too: each stack trains under its own
        monkeypatch.setattr(stack_trainer, "WINDOW_STEPS", steps)
        trainers[steps] = StackTrainer.start(config, tmp_path / str(steps))
        if steps == 3:
            stepper = trainers[3].stepper
            stepper.load_window = lambda window, load=stepper.load_window: (loaded.append(window.start), load(window))[
                1
            ]
        trainers[steps].run()
    assert loaded == [0, 3, 6] and trainers[3]._window.count == 1  # sent once each
    assert torch.equal(trainers[3].model.flat, trainers[256].model.flat)
    losses = lambda run: [r["train_loss_by_replicate"] for r in _records(run, "step")]
    assert losses(tmp_path / "3") == losses(tmp_path / "256") and len(losses(tmp_path / "3")) == 7


def test_tasks_per_second_count_windows_under_a_second_and_restart_after_an_epochs_validation(
    data_dir, tmp_path, monkeypatch
):
    """On a clock of 0.125 s a step, every step logged: each record's rate is its step's tasks over 0.125 s, also
    the first after the epoch's end (step 10), whose validation takes no time on that clock."""
    clock = _fake_clock(monkeypatch)
    runs = [RunSpec(str(data_dir), seed=0, preset="tiny")]
    trainer = StackTrainer.start(_stack_config(runs, model=SMALL_MODEL, max_steps=11, log_every=1), tmp_path / "s")
    _clocked(trainer, clock, [0.125], []).run()
    tasks = trainer.plan.window(0, 11).valid.reshape(11, -1).sum(1).tolist()
    lines = _records(tmp_path / "s")
    assert [r["tasks_per_s"] for r in lines if r["type"] == "step"] == [n / 0.125 for n in tasks]
    assert [r["type"] for r in lines].count("epoch") == 1
    assert [(r["step"], r["seconds"]) for r in lines if r["type"] == "startup"] == [(1, 0.125)]  # made at 0 s


def test_a_signal_stops_the_stack_after_its_step_with_the_state_saved_and_no_models(data_dir, tmp_path):
    runs = [RunSpec(str(data_dir), seed=s, epochs=2, preset="tiny") for s in (0, 1)]
    trainer = StackTrainer.start(_stack_config(runs, model=SMALL_MODEL, checkpoint_every=100), tmp_path / "stack")
    train_step = trainer.train_step
    trainer.train_step = lambda: (trainer.step == 3 and os.kill(os.getpid(), signal.SIGTERM), train_step())[1]
    trainer.run()
    assert trainer.step == 4 and torch.load(tmp_path / "stack" / "state.pt", weights_only=False)["step"] == 4
    assert not (tmp_path / "stack" / "replicate-0").exists()


def test_a_saved_replicate_loads_back_with_the_same_weights_and_answers(data_dir, other_dir, tmp_path, monkeypatch):
    runs = [RunSpec(str(data_dir), seed=3, preset="tiny"), RunSpec(str(other_dir), seed=4, preset="tiny4")]
    trainer = StackTrainer.start(_stack_config(runs, model=SMALL_MODEL, max_steps=5), tmp_path / "stack")
    trainer.run()
    tasks = load_dataset(data_dir).splits["val"][:30] + load_dataset(other_dir).splits["val"][:30]
    for index in range(2):
        loaded = load_model(tmp_path / "stack" / f"replicate-{index}" / "model")
        live = trainer.model.replicate_model(index)
        assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), live.state_dict().values()))
        assert loaded.solve(tasks) == live.solve(tasks)
    used = []

    def stop(model, data_dir=None, splits=()):  # ship_run's evaluation: record which dataset it was given, then stop
        used.append(data_dir)
        raise KeyboardInterrupt

    monkeypatch.setattr(card, "evaluation_dataset", stop)
    with pytest.raises(KeyboardInterrupt):
        card.ship_run(tmp_path / "stack", "rep", replicate=1, dest=tmp_path / "shipped")
    assert used == [str(other_dir)]


def test_start_and_resume_refuse_what_they_cannot_use(data_dir, tmp_path):
    config = _stack_config([RunSpec(str(data_dir), preset="tiny")], max_steps=1)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        StackTrainer.start(config, tmp_path / "used")
    (tmp_path / "forced").mkdir()
    (tmp_path / "forced" / "x").write_text("x")
    assert StackTrainer.start(config, tmp_path / "forced", force=True).run_dir == tmp_path / "forced"
    with pytest.raises(FileNotFoundError, match="not a stacked training run"):
        StackTrainer.resume(tmp_path / "used")
    with pytest.raises(ValueError, match="not divisible"):
        StackTrainer.start(replace(config, model={**SMALL_MODEL, "d_model": 30}), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()  # nothing written for a stack that cannot start
    with pytest.raises(ValueError, match="more than the model's max_len 8 "):
        StackTrainer.start(replace(config, model={**SMALL_MODEL, "max_len": 8}), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    single = TrainConfig(data_dir=str(data_dir), max_steps=1, val_limit=8, model=SMALL_MODEL)
    Trainer.start(single, tmp_path / "single").run()
    with pytest.raises(FileNotFoundError, match="not a stacked training run"):
        StackTrainer.resume(tmp_path / "single")
    saved = json.loads((tmp_path / "single" / "train_config.json").read_text())
    (tmp_path / "single" / "train_config.json").write_text(json.dumps({**saved, "replicates": 2}))
    with pytest.raises(ValueError, match="retired vmap stack"):
        resume_run(tmp_path / "single")


def _stack_script(data_dir, run_dir, max_steps):
    config = {
        "runs": [{"data_dir": str(data_dir), "seed": s, "preset": "tiny", "epochs": 2} for s in (0, 1, 2)],
        "batch_size": 64,
        "checkpoint_every": 4,
        "val_limit": 20,
        "log_every": 5,
        "model": SMALL_MODEL,
    }
    return (
        "import json, sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from lsa_interp.training import StackConfig, StackTrainer\n"
        f"config = StackConfig.from_dict({{**json.loads({json.dumps(json.dumps(config))}), 'betas': (0.9, 0.95)}})\n"
        f"StackTrainer.start(config.with_bounds(max_steps={max_steps}), {str(run_dir)!r}).run()\n"
    )


@pytest.mark.slow
def test_killed_and_resumed_stack_ends_with_the_same_weights(data_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    end = 40
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    subprocess.run([sys.executable, "-c", _stack_script(data_dir, whole, end)], check=True, env=env)
    proc = subprocess.Popen([sys.executable, "-c", _stack_script(data_dir, cut, end)], env=env)
    deadline = time.monotonic() + 120
    while not _saved_step(cut, 8):
        assert proc.poll() is None and time.monotonic() < deadline, "no state saved before the run ended"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (cut / "replicate-0").exists()
    StackTrainer.resume(cut).run()
    for index in range(3):
        a, b = _replicate(whole, index), _replicate(cut, index)
        assert all(torch.equal(a[k], b[k]) for k in a)
    lines = lambda run: [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    trained = lambda run: [(r["type"], r["step"]) for r in lines(run) if r["type"] != "startup"]
    assert trained(cut) == trained(whole)
    startups = lambda run: [r["step"] for r in lines(run) if r["type"] == "startup"]
    assert startups(whole) == [1] and startups(cut)[0] == 1 and startups(cut)[1] > 8  # one per process
    epochs = lambda run: [r for r in lines(run) if r["type"] == "epoch"]
    assert epochs(cut) == epochs(whole) and len(epochs(whole)) == 6


def _saved_step(run_dir, at_least):
    try:
        return torch.load(run_dir / "state.pt", weights_only=False)["step"] >= at_least
    except (FileNotFoundError, RuntimeError, EOFError):
        return False


def test_cli_trains_replicates_as_a_native_stack(data_dir, tmp_path, capsys):
    from lsa_interp import cli

    args = ["train", "--data", str(data_dir), "--out", str(tmp_path / "run"), "--preset", "tiny", "--replicates", "2"]
    args += ["--max-steps", "3", "--batch-size", "64", "--val-limit", "20", "--model-config", json.dumps(SMALL_MODEL)]
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 0
    assert "model written" in capsys.readouterr().out
    seeds = [load_model(tmp_path / "run" / f"replicate-{i}" / "model").metadata["seed"] for i in (0, 1)]
    assert seeds == [0, 1] and json.loads((tmp_path / "run" / "train_config.json").read_text())["stack"] is True
    resume_run(tmp_path / "run", max_steps=4).run()
    assert load_model(tmp_path / "run" / "replicate-1" / "model").metadata["steps"] == 4
