"""`StackTrainer`: the runs of a `StackConfig` trained together as one natively stacked model, resumably.

Replicate ``i`` starts as a single run seeded with ``runs[i].seed`` would, trains on its own dataset's
train split in its own batch order (seed, batching method), with its own learning-rate schedule and step
count, and stops changing once its run has finished while the others go on (`StackPlan`, `StackAdamW`).
One step trains every replicate (`StackStep`: a CUDA graph on CUDA). Run directory: ``train_config.json``
(``StackConfig.to_dict()`` plus ``"stack": true``), ``metrics.jsonl`` (step records with per-replicate
losses and learning rates; per stack epoch, the epoch of the longest run, one validation record per
replicate with ``replicate``, ``run``, ``epoch`` (the replicate's own) and ``matching_score``), ``state.pt``
(atomically, every stack epoch, every ``checkpoint_every`` steps, at the bounds and on SIGINT/SIGTERM;
a killed run resumes bit-identically on CPU), and at the end ``replicate-{i}/model`` per replicate and, once
every run has finished, a ``done`` marker. Each process that trains logs one ``startup`` record after its first
step: the seconds since the trainer was made (data, model, graph capture, compile) and, for a compiled stack with
``LSA_COMPILE_CACHE`` set, what `lsa_interp.training.compile_cache` loaded and saved.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import torch

from lsa_interp.data.dataset import read_manifest
from lsa_interp.model import ModelConfig
from lsa_interp.model.checkpoint import save_model
from lsa_interp.training.compile_cache import cache_folders, load_compile_caches, save_compile_cache
from lsa_interp.training.config import Recipe, TrainConfig
from lsa_interp.training.packing import capacity_for
from lsa_interp.training.precision import precision_autocast, set_matmul_precision
from lsa_interp.training.run_dir import (
    CONFIG_FILE,
    DONE_FILE,
    MODEL_DIR,
    append_record,
    cut_metrics,
    parse_config,
    prepare_run_dir,
    read_config,
    replicate_dir,
    stop_on_signals,
)
from lsa_interp.training.run_state import pick_device, read_state, restore_rng, rng_state, write_state
from lsa_interp.training.stack_adamw import StackAdamW
from lsa_interp.training.stack_config import RunSpec, StackConfig
from lsa_interp.training.stack_data import StackPlan, StackSplit, StepWindow
from lsa_interp.training.stack_step import StackStep
from lsa_interp.training.stack_validation import validate_stack
from lsa_interp.training.stacked_model import StackedEncoderDecoder
from lsa_interp.training.validation import check_position_table, matching_prompts
from lsa_interp.utils import atomic_write, hardware_description

STACK_KEY = "stack"
"""The key of ``train_config.json`` that marks a stacked run."""
WINDOW_STEPS = 256
"""Steps whose batches are sent to the device at once."""

CAPACITY_SAMPLE_STEPS = 2048
"""The first steps whose largest batches size a packed stack's graph (`capacity_for`)."""


def is_stack_run(run_dir: str | os.PathLike) -> bool:
    """True when ``run_dir`` holds a stacked run's ``train_config.json``."""
    return (Path(run_dir) / CONFIG_FILE).is_file() and bool(read_config(Path(run_dir)).get(STACK_KEY))


class StackTrainer:
    """A stack of runs in ``run_dir``: build with `StackTrainer.start` or `StackTrainer.resume`, then `run`."""

    def __init__(self, config: StackConfig, run_dir: Path, state: dict[str, Any] | None = None) -> None:
        self.created = time.monotonic()
        self.config, self.run_dir = config, run_dir
        self.stopped_by: int | None = None
        """The signal that stopped the last `run` (its state saved, no models written), else None."""
        self.device = pick_device(config.device)
        if config.attention == "triton" and self.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("the triton attention needs a CUDA device (on a CPU, only under TRITON_INTERPRET=1)")
        if config.attention == "flash" and self.device.type != "cuda":
            raise ValueError("the flash attention needs a CUDA device")
        self.graphed = self.device.type == "cuda" and config.cuda_graph
        data_dirs = [run.data_dir for run in config.runs]
        self.train = StackSplit(data_dirs, "train", self.device)
        self.val = StackSplit(data_dirs, "val", self.device, config.val_limit)
        check_position_table(ModelConfig(**config.model).max_len, self.train, self.val)
        self.plan = StackPlan(
            config.runs, self.train, config.batch_size, config.length_bucketing, config.lr, config.warmup_start,
            config.final_lr_factor,
        )  # fmt: skip
        self.total_steps = int(self.plan.total_steps.max())
        self.longest = int(self.plan.total_steps.argmax())
        self.steps_per_epoch = int(self.plan.steps_per_epoch[self.longest])
        seeds = [run.seed for run in config.runs]
        self.model = StackedEncoderDecoder.from_seeds(
            ModelConfig(**config.model), seeds, self.device, config.attention
        ).train()
        torch.manual_seed(seeds[0])
        self.optimizer = StackAdamW(self.model.flat, config.betas, config.weight_decay)
        self.capacity = self._packing_capacity() if config.packing else None
        self.stepper = StackStep(
            self.model, self.optimizer, self.train, WINDOW_STEPS, config.batch_size, self._autocast, self.graphed,
            config.compile and self.graphed, self.capacity,
        )  # fmt: skip
        self.prompts = matching_prompts()
        self._window: StepWindow | None = None
        self.step, self.elapsed, self.metrics_offset = 0, 0.0, 0
        if state is not None:
            with torch.no_grad():
                self.model.flat.copy_(state["flat"])
                if "attention_step" in state:
                    self.model.attention_step.copy_(state["attention_step"])
            self.optimizer.load_state_dict(state["optimizer"])
            restore_rng(state, self.device)
            self.step, self.elapsed, self.metrics_offset = state["step"], state["elapsed"], state["metrics_offset"]
            if "window_loss_sum" in state:  # the losses since the last step record (states since 2026-12-05)
                self.stepper.loss_sum.copy_(state["window_loss_sum"])
                self.stepper.loss_count.copy_(state["window_loss_count"])

    @classmethod
    def start(cls, config: StackConfig, run_dir: str | os.PathLike, force: bool = False) -> StackTrainer:
        """A new stack; raises FileExistsError when ``run_dir`` is not empty and ``force`` is False, and
        ValueError for a config it cannot run (then nothing is written)."""
        trainer = cls(config, Path(run_dir))
        prepare_run_dir(run_dir, {STACK_KEY: True, **config.to_dict()}, force)
        return trainer

    @classmethod
    def resume(
        cls, run_dir: str | os.PathLike, max_steps: int | None = None, max_minutes: float | None = None
    ) -> StackTrainer:
        """Continue the stack in ``run_dir`` from its last state (new bounds override the saved ones).

        Raises FileNotFoundError when ``run_dir`` is not a stacked run.
        """
        run_dir = Path(run_dir)
        if not is_stack_run(run_dir):
            raise FileNotFoundError(f"{run_dir} is not a stacked training run (no {CONFIG_FILE} with {STACK_KEY!r})")
        config = parse_config(run_dir, _stack_config).with_bounds(max_steps, max_minutes)
        trainer = cls(config, run_dir, read_state(run_dir))
        cut_metrics(run_dir, trainer.metrics_offset)
        return trainer

    def _packing_capacity(self) -> tuple[int, int]:
        """The packed graph's slots: from the run's first steps, so a resumed stack has the same graph."""
        sample = self.plan.window(0, min(CAPACITY_SAMPLE_STEPS, self.total_steps))
        return capacity_for(sample.token_needs(self.train))

    def _autocast(self) -> torch.autocast:
        return precision_autocast(self.config.precision, self.device.type, self.graphed)

    def save_state(self) -> None:
        """Write the resumable state atomically."""
        state = {
            "flat": self.model.flat.detach().cpu(),
            "attention_step": self.model.attention_step.cpu(),
            "optimizer": {k: v.cpu() for k, v in self.optimizer.state_dict().items()},
            **rng_state(self.device),
            "step": self.step,
            "elapsed": self.elapsed,
            "window_loss_sum": self.stepper.loss_sum.cpu(),
            "window_loss_count": self.stepper.loss_count.cpu(),
        }
        self.metrics_offset = write_state(self.run_dir, state)

    def log(self, record: dict[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl``."""
        append_record(self.run_dir, record)

    def run(self, progress: Callable[[dict[str, Any]], None] | None = None, max_minutes: float | None = None) -> Path:
        """Train until every run has finished, ``max_steps``, ``max_minutes`` or a signal; return the run dir.

        ``max_minutes`` (counted from this call) overrides the config's. ``progress`` receives every logged step
        record (with ``total_steps``). The replicates' models are written when training stops for any reason but a
        signal (then only the state is saved).
        """
        cfg = self.config
        limit = self.limit
        minutes = cfg.max_minutes if max_minutes is None else max_minutes
        deadline = None if minutes is None else time.monotonic() + 60 * minutes
        window_start, window_tasks = time.perf_counter(), 0
        clock = window_start  # training wall time, without validation and checkpoints, accrues into self.elapsed
        folders = cache_folders() if cfg.compile else []
        loaded, first = load_compile_caches(folders) if folders else 0, self.step + 1
        with stop_on_signals() as stop:
            while self.step < limit and "signal" not in stop:
                window_tasks += self.train_step()
                if self.step == first:
                    self._log_startup(folders, loaded)
                if self.step % cfg.log_every == 0 or self.step == limit:
                    now = time.perf_counter()
                    record = self._step_record(window_tasks / max(now - window_start, 1e-9))
                    self.log(record)
                    if progress:
                        progress({**record, "total_steps": limit})
                    window_start, window_tasks = now, 0
                out_of_time = deadline is not None and time.monotonic() > deadline
                epoch_end = self.step % self.steps_per_epoch == 0
                checkpoint = self.step % cfg.checkpoint_every == 0 or self.step == limit
                if epoch_end or checkpoint or "signal" in stop or out_of_time:
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
                    self.elapsed += time.perf_counter() - clock
                    if epoch_end:
                        for record in self.epoch_records():
                            self.log(record)
                    self.save_state()
                    clock = time.perf_counter()
                    if epoch_end:
                        window_start, window_tasks = clock, 0  # tasks/s counts training time only
                    # an epoch's validation may itself run past the deadline: stop at the state just saved
                    out_of_time = deadline is not None and time.monotonic() > deadline
                if out_of_time:
                    break
        if "signal" in stop:
            self.stopped_by = stop["signal"]
            return self.run_dir
        self._save_final()
        return self.run_dir

    def _log_startup(self, folders: list[Path], loaded: int) -> None:
        """The ``startup`` record: seconds from the trainer's making to the end of its first step, and, with
        cache ``folders``, how many compiled artifacts were loaded and the file the new ones went to."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        record: dict[str, Any] = {"type": "startup", "step": self.step, "seconds": time.monotonic() - self.created}
        if folders:
            saved = save_compile_cache(folders)
            record["compile_cache"] = {"loaded": loaded, "saved": None if saved is None else saved.name}
        self.log(record)

    @property
    def limit(self) -> int:
        """The step at which `run` stops: the end of the longest run, or ``max_steps`` if sooner."""
        return min(self.total_steps, self.config.max_steps or self.total_steps)

    def train_step(self) -> int:
        """Run step ``self.step`` of every replicate (without a host sync); return how many tasks it trained.

        Raises IndexError past `limit`.
        """
        if self.step >= self.limit:
            raise IndexError(f"step {self.step} is past the end of this stack ({self.limit} steps)")
        set_matmul_precision(self.config.precision)
        window = self._window
        if window is None or not window.start <= self.step < window.start + window.count:
            window = self._window = self.plan.window(self.step, min(WINDOW_STEPS, self.limit - self.step))
            self.stepper.load_window(window)
        index = self.step - window.start
        self.stepper.run(index)
        self.step += 1
        return int(window.valid[index].sum())

    def _step_record(self, tasks_per_s: float) -> dict[str, Any]:
        window = self._window
        index = self.step - 1 - window.start
        by_replicate = [None if math.isnan(x) else x for x in self.stepper.take_losses().tolist()]
        trained = [x for x in by_replicate if x is not None]
        return {
            "type": "step",
            "step": self.step,
            "epoch": self.step / self.steps_per_epoch,
            "lr": float(window.lr[index, self.longest]),
            "lr_by_replicate": window.lr[index].tolist(),
            "train_loss": sum(trained) / max(len(trained), 1),
            "train_loss_by_replicate": by_replicate,
            "tasks_per_s": tasks_per_s,
        }

    def epoch_records(self) -> list[dict[str, Any]]:
        """Validation records of the replicates that trained during the stack epoch that just ended."""
        since = self.step - self.steps_per_epoch
        chosen = [r for r in range(self.config.replicates) if self.plan.total_steps[r] > since]
        set_matmul_precision(self.config.precision)
        records = validate_stack(self.model, self.val, self._autocast, chosen, self.prompts)
        return [
            {
                "type": "epoch",
                "step": self.step,
                "epoch": round(self._steps_of(r) / int(self.plan.steps_per_epoch[r]), 6),
                "stack_epoch": self.step // self.steps_per_epoch,
                "replicate": r,
                "run": self.config.runs[r].name,
                **record,
            }
            for r, record in zip(chosen, records)
        ]

    def _steps_of(self, replicate: int) -> int:
        return min(self.step, int(self.plan.total_steps[replicate]))

    def _metadata(self, replicate: int) -> dict[str, Any]:
        cfg, run = self.config, self.config.runs[replicate]
        manifest = read_manifest(run.data_dir)
        steps = self._steps_of(replicate)
        return {
            "preset": run.preset or manifest["preset"],
            "seed": run.seed,
            "data_seed": manifest["seed"],
            "batching": run.batching,
            "precision": cfg.precision,
            "train_config": asdict(run_train_config(cfg, run)),
            "steps": steps,
            "epochs_completed": steps / int(self.plan.steps_per_epoch[replicate]),
            "train_seconds": round(self.elapsed, 1),
            "device": str(self.device),
            "hardware": hardware_description(self.device.type),
            "torch": torch.__version__,
            "replicate": replicate,
            "run": run.name,
            "stack_replicates": cfg.replicates,
        }

    def _save_final(self) -> None:
        for index in range(self.config.replicates):
            target = self.run_dir / replicate_dir(index) / MODEL_DIR
            save_model(self.model.replicate_model(index), target, metadata=self._metadata(index), overwrite=True)
        if self.step >= self.total_steps:
            text = json.dumps({"steps": self.step, "replicates": self.config.replicates}) + "\n"
            atomic_write(self.run_dir / DONE_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def run_train_config(config: StackConfig, run: RunSpec) -> TrainConfig:
    """The single-run `TrainConfig` of one run of a stack (its data, seed, batching, epochs; the shared recipe)."""
    own = {
        "data_dir": run.data_dir,
        "preset": run.preset,
        "seed": run.seed,
        "epochs": run.epochs,
        "batching": run.batching,
    }
    recipe = {f.name: getattr(config, f.name) for f in fields(Recipe)}
    return TrainConfig(**own, **recipe)


def _stack_config(data: dict) -> StackConfig:
    """The `StackConfig` of a stack run's saved config (its stack marker left out)."""
    return StackConfig.from_dict({key: value for key, value in data.items() if key != STACK_KEY})
