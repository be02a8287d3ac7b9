"""`Trainer`: one model trained with the paper's recipe, fast and resumable.

Pre-tokenized splits live on the training device; the batches of an epoch are a pure function of
(seed, epoch), and the dropout RNG is saved with the state, so a run killed at any moment and resumed
ends with the same weights as an uninterrupted one (CPU). ``state.pt`` is written atomically every epoch,
every ``checkpoint_every`` steps and on SIGINT/SIGTERM. See `lsa_interp.training.run_dir` for the files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.data.batching import batch_keys, epoch_batches
from lsa_interp.data.dataset import read_manifest
from lsa_interp.data.loaders import load_tokenized
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.checkpoint import save_model
from lsa_interp.model.convert import hooked_from_reference
from lsa_interp.model.reference import ReferenceTransformer
from lsa_interp.training.config import TrainConfig
from lsa_interp.training.graph_step import GraphedStep
from lsa_interp.training.precision import precision_autocast, set_matmul_precision
from lsa_interp.training.run_dir import (
    CONFIG_FILE,
    MODEL_DIR,
    append_record,
    cut_metrics,
    parse_config,
    prepare_run_dir,
    stop_on_signals,
)
from lsa_interp.training.run_state import pick_device, read_state, restore_rng, rng_state, write_state
from lsa_interp.training.schedule import lr_factor, reference_warmup_steps
from lsa_interp.training.validation import (
    ResidentSplit,
    check_position_table,
    loss_fn,
    matching_prompts,
    matching_score,
    validate_model,
)
from lsa_interp.utils import hardware_description


class Trainer:
    """One training run in ``run_dir``: build with `Trainer.start` or `Trainer.resume`, then call `run`."""

    def __init__(self, config: TrainConfig, run_dir: Path, state: dict[str, Any] | None = None) -> None:
        self.config, self.run_dir = config, run_dir
        self.stopped_by: int | None = None
        """The signal that stopped the last `run` (its state saved, no model written), else None."""
        self.device = pick_device(config.device)
        self.graphed = self.device.type == "cuda" and config.cuda_graph
        if self.graphed and config.micro_batches > 1:
            raise ValueError(
                "micro-batches need the eager step (--no-cuda-graph): the CUDA-graph step pads every "
                "batch to full width"
            )
        self._graph: GraphedStep | None = None
        self._build_models()
        self.train = ResidentSplit(load_tokenized(config.data_dir, "train"), self.device)
        self.keys = batch_keys(
            config.batching, self.train.split.alphabet.numpy(), self.train.split.transformation.numpy()
        )
        self.steps_per_epoch = len(self.epoch_plan(0))
        self.warmup_steps = reference_warmup_steps(len(self.train.src), config.batch_size)
        self.val = ResidentSplit(load_tokenized(config.data_dir, "val"), self.device, config.val_limit)
        check_position_table(ModelConfig(**config.model).max_len, self.train, self.val)
        self.prompts = matching_prompts()
        self.total_steps = self.steps_per_epoch * config.epochs
        self.step, self.elapsed, self.metrics_offset = 0, 0.0, 0
        self.current_lr = config.lr
        # The losses summed since the last step record, saved with the state so that a resumed run's first record
        # averages the same steps as an uninterrupted run's.
        self.window_loss, self.window_steps = torch.zeros((), device=self.device), 0
        if state is not None:
            self._load_weights(state)
            self.optimizer.load_state_dict(state["optimizer"])
            self._settle_optimizer()
            restore_rng(state, self.device)
            self.step, self.elapsed, self.metrics_offset = state["step"], state["elapsed"], state["metrics_offset"]
            if "window_loss" in state:
                self.window_loss, self.window_steps = state["window_loss"].to(self.device), state["window_steps"]

    def _build_models(self) -> None:
        """Create the model of the config's architecture (seeded with the run's seed) and its optimizer."""
        torch.manual_seed(self.config.seed)
        model_cfg = ModelConfig(**self.config.model)
        reference = self.config.architecture == "reference"
        net = ReferenceTransformer(model_cfg) if reference else HookedEncoderDecoder(model_cfg)
        self.model = net.to(self.device).train()
        self.optimizer = self._adamw(self.model.parameters())

    def hooked_model(self) -> HookedEncoderDecoder:
        """The model being trained as a `HookedEncoderDecoder` (converted from a plain ``nn.Transformer``
        under the reference architecture; the model itself otherwise)."""
        if isinstance(self.model, ReferenceTransformer):
            return hooked_from_reference(self.model)
        return self.model

    def _adamw(self, params: Any) -> torch.optim.AdamW:
        cfg = self.config
        lr = torch.tensor(cfg.lr, device=self.device) if self.graphed else cfg.lr
        return torch.optim.AdamW(params, lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay, **self._adamw_flags())

    def _adamw_flags(self) -> dict[str, bool]:
        """The fused implementation (one pass over the weights; docs/performance.md, "The optimizer"), capturable (a
        tensor learning rate) under a CUDA graph. A state saved with the foreach flags loads with these
        (`_settle_optimizer`)."""
        return {"foreach": False, "fused": True, "capturable": self.graphed}

    def _settle_optimizer(self) -> None:
        """After loading a state: this run's flags and learning-rate type, and AdamW's step counters as float32 on the
        training device, beside the weights, where the fused update reads them (a state saved with the foreach flags
        kept them on the CPU, which a CUDA run's fused update refuses). A graphed run gets its rate as a new tensor on
        the device whatever the state held: a state is read onto the CPU, and fused AdamW reads a CPU rate once, as a
        number, so a graph captured with it would train every later step at that rate while the schedule filled a
        tensor the graph never reads."""
        for group in self.optimizer.param_groups:
            group.update(self._adamw_flags())
            if self.graphed:
                group["lr"] = torch.tensor(float(group["lr"]), device=self.device)
            elif isinstance(group["lr"], Tensor):
                group["lr"] = float(group["lr"])
        for param_state in self.optimizer.state.values():
            if "step" in param_state:
                param_state["step"] = param_state["step"].to(self.device, torch.float32)

    def trainable_parameters(self) -> list[Tensor]:
        """The tensors the optimizer updates."""
        return list(self.model.parameters())

    def stacked_loss(
        self, src: Int[Tensor, "rep b s"], tgt_in: Int[Tensor, "rep b t"], tgt_out: Int[Tensor, "rep b t"]
    ) -> Float[Tensor, " rep"]:
        """The training loss of each replicate's batch (here one model, ``rep == 1``)."""
        return loss_fn(self.model, src[0], tgt_in[0], tgt_out[0])[None]

    def _weights(self) -> dict[str, Any]:
        return {"model": self.model.state_dict()}

    def _load_weights(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])

    def epoch_plan(self, epoch: int) -> list[Any]:
        """The batches of ``epoch`` in order (row-index arrays), a pure function of the seed and the epoch."""
        cfg = self.config
        return epoch_batches(self.keys, self.bucket_lengths, cfg.batch_size, cfg.seed, epoch)

    @property
    def bucket_lengths(self) -> np.ndarray | None:
        """Row lengths for length-bucketed batches, or None for the reference's random batches."""
        return self.train.src_len if self.config.length_bucketing else None

    @classmethod
    def start(cls, config: TrainConfig, run_dir: str | os.PathLike, force: bool = False) -> Trainer:
        """A new run; raises FileExistsError when ``run_dir`` is not empty and ``force`` is False, and ValueError
        for a config this trainer cannot run on this machine (then nothing is written)."""
        trainer = cls(config, Path(run_dir))
        prepare_run_dir(run_dir, asdict(config), force)
        return trainer

    @classmethod
    def resume(
        cls, run_dir: str | os.PathLike, max_steps: int | None = None, max_minutes: float | None = None
    ) -> Trainer:
        """Continue the run in ``run_dir`` from its last saved state (new bounds override the saved ones).

        Raises FileNotFoundError when ``run_dir`` is not a training run.
        """
        run_dir = Path(run_dir)
        if not (run_dir / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"{run_dir} is not a training run (no {CONFIG_FILE})")
        config = parse_config(run_dir, TrainConfig.from_dict)
        bounds = {"max_steps": max_steps, "max_minutes": max_minutes}
        config = replace(config, **{k: v for k, v in bounds.items() if v is not None})
        trainer = cls(config, run_dir, read_state(run_dir))
        cut_metrics(run_dir, trainer.metrics_offset)
        return trainer

    def save_state(self) -> None:
        """Write the resumable state atomically."""
        state = {
            **self._weights(),
            "optimizer": self.optimizer.state_dict(),
            **rng_state(self.device),
            "step": self.step,
            "elapsed": self.elapsed,
            "window_loss": self.window_loss.detach().cpu(),
            "window_steps": self.window_steps,
        }
        self.metrics_offset = write_state(self.run_dir, state)

    def log(self, record: dict[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl``."""
        append_record(self.run_dir, record)

    def _autocast(self) -> torch.autocast:
        return precision_autocast(self.config.precision, self.device.type, self.graphed)

    def _begin_step(self) -> None:
        """Apply the run's matmul precision (process-wide, see `set_matmul_precision`) and this step's rate."""
        set_matmul_precision(self.config.precision)
        cfg = self.config
        factor = lr_factor(
            self.step, self.steps_per_epoch, cfg.epochs, cfg.warmup_start, cfg.final_lr_factor, self.warmup_steps
        )
        lr = cfg.lr * factor
        changed, self.current_lr = lr != self.current_lr, lr
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], Tensor):
                if changed or self._graph is None:
                    group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def train_step(self, rows: np.ndarray | tuple[np.ndarray, ...]) -> Tensor:
        """One optimizer step on ``rows``; returns the (device) loss without syncing.

        On CUDA (unless ``cuda_graph`` is off) the step is a `GraphedStep` replay, which reads the batch of
        step ``self.step`` from its device copy of the epoch plan (the same batch as ``rows``).
        """
        self._begin_step()
        if self.graphed:
            if self._graph is None:
                self._graph = GraphedStep(self)
            loss = self._graph.replay(self.step)
            self.step += 1
            return loss[0] if self.config.replicates == 1 else loss
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.zeros((), device=self.device)
        for part, share in self.train.micro_batches(rows, self.config.micro_batches):
            with self._autocast():
                part_loss = loss_fn(self.model, *self.train.batch(part)) * share
            part_loss.backward()
            loss = loss + part_loss.detach()
        self.optimizer.step()
        self.step += 1
        return loss.detach()

    @staticmethod
    def tasks_in(batch: Any) -> int:
        """How many tasks one entry of `epoch_plan` trains on."""
        return len(batch)

    @property
    def limit(self) -> int:
        """The step at which `run` stops: the end of the last epoch, or ``max_steps`` if sooner."""
        return min(self.total_steps, self.config.max_steps or self.total_steps)

    def run(self, progress: Callable[[dict[str, Any]], None] | None = None) -> Path:
        """Train until the last epoch, ``max_steps`` or ``max_minutes``, or a signal; return the run dir.

        ``progress`` receives a dict after every logged step. The final model is written to ``model/``
        when training stops for any reason but a signal (then only the state is saved).
        """
        cfg, limit = self.config, self.limit
        deadline = None if cfg.max_minutes is None else time.monotonic() + 60 * cfg.max_minutes
        window_start, window_tasks = time.perf_counter(), 0
        clock = window_start  # training wall time, without validation and checkpoints, accrues into self.elapsed
        with stop_on_signals() as stop:
            while self.step < limit and "signal" not in stop:
                epoch, offset = divmod(self.step, self.steps_per_epoch)
                for batch in self.epoch_plan(epoch)[offset:]:
                    self.window_loss = self.window_loss + self.train_step(batch)
                    self.window_steps, window_tasks = self.window_steps + 1, window_tasks + self.tasks_in(batch)
                    if self.step % cfg.log_every == 0 or self.step == limit:
                        now = time.perf_counter()
                        record = {
                            "type": "step",
                            "step": self.step,
                            "epoch": self.step / self.steps_per_epoch,
                            "lr": self.current_lr,
                            **self._loss_record(self.window_loss / self.window_steps),
                            "tasks_per_s": window_tasks / max(now - window_start, 1e-9),
                        }
                        self.log(record)
                        if progress:
                            progress({**record, "total_steps": limit})
                        self.window_loss, self.window_steps = torch.zeros((), device=self.device), 0
                        window_start, window_tasks = now, 0
                    out_of_time = deadline is not None and time.monotonic() > deadline
                    epoch_end = self.step % self.steps_per_epoch == 0
                    if (
                        epoch_end
                        or self.step % cfg.checkpoint_every == 0
                        or "signal" in stop
                        or self.step == limit
                        or out_of_time
                    ):
                        self._finish_queued_work()
                        self.elapsed += time.perf_counter() - clock
                        if epoch_end:
                            for record in self.epoch_records():
                                self.log(
                                    {
                                        "type": "epoch",
                                        "step": self.step,
                                        "epoch": self.step // self.steps_per_epoch,
                                        **record,
                                    }
                                )
                        self.save_state()
                        clock = time.perf_counter()
                        if epoch_end:
                            window_start, window_tasks = clock, 0  # tasks/s counts training time only
                    if self.step >= limit or "signal" in stop or out_of_time:
                        break
                if deadline is not None and time.monotonic() > deadline:
                    break
        if "signal" in stop:
            self.stopped_by = stop["signal"]
            return self.run_dir
        self._save_final()
        return self.run_dir

    def _finish_queued_work(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _loss_record(self, mean_loss: Tensor) -> dict[str, Any]:
        return {"train_loss": float(mean_loss)}

    def epoch_records(self) -> list[dict[str, Any]]:
        """The end-of-epoch validation record(s) (one per model)."""
        return [self.validate()]

    def validate(self) -> dict[str, Any]:
        """The validation record of the model being trained (see `validated`)."""
        return self.validated(self.hooked_model())

    def validated(self, model: HookedEncoderDecoder) -> dict[str, Any]:
        """Validation loss and greedy exact-match accuracy of ``model`` (see `validate_model`) and its best
        matching-head score (``matching_score``, see `matching_score`)."""
        set_matmul_precision(self.config.precision)
        record = validate_model(model, self.val, self._autocast)
        return {**record, "matching_score": matching_score(model, self.prompts)}

    def _metadata(self, seed: int) -> dict[str, Any]:
        cfg = self.config
        manifest = read_manifest(cfg.data_dir)
        return {
            "preset": cfg.preset or manifest["preset"],
            "seed": seed,
            "data_seed": manifest["seed"],
            "train_config": asdict(cfg),
            "steps": self.step,
            "epochs_completed": self.step / self.steps_per_epoch,
            "train_seconds": round(self.elapsed, 1),
            "device": str(self.device),
            "hardware": hardware_description(self.device.type),
            "torch": torch.__version__,
        }

    def _save_final(self) -> None:
        self.model.eval()
        model = self.hooked_model()
        save_model(model, self.run_dir / MODEL_DIR, metadata=self._metadata(self.config.seed), overwrite=True)
        self.model.train()
