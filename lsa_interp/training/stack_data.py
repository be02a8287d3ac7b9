"""The data of a stack: every replicate's split on the device, and which rows each replicate trains on when.

`StackSplit` concatenates one split of every distinct dataset of a stack into device tensors (padded to a
common width), so that one gather fetches the batches of all replicates. `StackPlan` says, for every global
step, the rows of each replicate's batch (its own epoch plan of its own dataset, seed and batching method),
its learning rate and whether it still trains: replicate ``r`` trains ``steps_per_epoch[r] * epochs`` steps
and then stops. Plans are pure functions of (run, epoch), so a resumed stack rebuilds exactly the batches it
would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from lsa_interp.data.batching import batch_keys, epoch_batches
from lsa_interp.data.loaders import load_tokenized
from lsa_interp.data.vocab import PAD
from lsa_interp.training.schedule import lr_factor, reference_warmup_steps
from lsa_interp.training.stack_config import RunSpec
from lsa_interp.training.validation import ResidentSplit


class StackSplit:
    """Split ``name`` of each replicate's dataset, concatenated on ``device``; replicate r's rows start at
    ``offset[r]`` and number ``size[r]``. ``parts[r]`` is replicate r's `ResidentSplit` (kept on the CPU)."""

    def __init__(self, data_dirs: list[str], name: str, device: torch.device, limit: int | None = None) -> None:
        distinct = {
            d: ResidentSplit(load_tokenized(d, name), torch.device("cpu"), limit) for d in dict.fromkeys(data_dirs)
        }
        splits = list(distinct.values())
        starts = np.cumsum([0] + [len(s.src) for s in splits])
        start_of = dict(zip(distinct, starts.tolist()))
        widen = lambda tensors: torch.cat(
            [F.pad(t, (0, max(x.shape[1] for x in tensors) - t.shape[1]), value=PAD) for t in tensors]
        )
        self.src = widen([s.src for s in splits]).to(device)
        self.tgt_in = widen([s.tgt_in for s in splits]).to(device)
        self.tgt_out = widen([s.tgt_out for s in splits]).to(device)
        self.src_len = np.concatenate([s.src_len for s in splits])
        self.tgt_len = np.concatenate([s.tgt_len for s in splits])
        self.parts = [distinct[d] for d in data_dirs]
        self.offset = np.array([start_of[d] for d in data_dirs], dtype=np.int64)
        self.size = np.array([len(distinct[d].src) for d in data_dirs], dtype=np.int64)


@dataclass(frozen=True)
class StepWindow:
    """``count`` steps from ``start``: rows and valid flags ``[count, R, batch]``, lr and active ``[count, R]``."""

    start: int
    rows: np.ndarray
    valid: np.ndarray
    lr: np.ndarray
    active: np.ndarray

    @property
    def count(self) -> int:
        """How many steps the window holds."""
        return len(self.rows)

    def token_needs(self, split: StackSplit) -> np.ndarray:
        """``[count, 2]``: the source and target tokens of the fullest replicate's valid rows at each step (what
        a packed step needs, `lsa_interp.training.packing`)."""
        tokens = lambda lengths: (lengths[self.rows] * self.valid).sum(-1).max(-1)
        return np.stack([tokens(split.src_len), tokens(split.tgt_len)], axis=-1)


class StackPlan:
    """Per replicate: epoch plans, steps per epoch, total steps and the learning-rate schedule."""

    def __init__(
        self,
        runs: tuple[RunSpec, ...],
        train: StackSplit,
        batch_size: int,
        length_bucketing: bool,
        lr: float,
        warmup_start: float,
        final_lr_factor: float,
    ) -> None:
        self.runs, self.train, self.batch_size = runs, train, batch_size
        self.lr, self.warmup_start, self.final_lr_factor = lr, warmup_start, final_lr_factor
        self.keys = [
            batch_keys(run.batching, part.split.alphabet.numpy(), part.split.transformation.numpy())
            for run, part in zip(runs, train.parts)
        ]
        self.lengths = [part.src_len if length_bucketing else None for part in train.parts]
        self._cache: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
        self.steps_per_epoch = np.array([len(self.epoch_plan(r, 0)) for r in range(len(runs))], dtype=np.int64)
        self.total_steps = self.steps_per_epoch * np.array([run.epochs for run in runs], dtype=np.int64)

    def epoch_plan(self, replicate: int, epoch: int) -> list[np.ndarray]:
        """The batches (row indices into the replicate's own split) of ``epoch``, as a single run would draw them."""
        run = self.runs[replicate]
        return epoch_batches(self.keys[replicate], self.lengths[replicate], self.batch_size, run.seed, epoch)

    def _padded_epoch(self, replicate: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``[steps, batch]`` (stack-global indices; short batches filled with their first row) and valid."""
        cached = self._cache.get(replicate)
        if cached is None or cached[0] != epoch:
            plan = self.epoch_plan(replicate, epoch)
            rows = np.zeros((len(plan), self.batch_size), dtype=np.int64)
            valid = np.zeros((len(plan), self.batch_size), dtype=bool)
            for step, batch in enumerate(plan):
                if len(batch) > self.batch_size:
                    raise ValueError(f"a batch of {len(batch)} rows does not fit batch size {self.batch_size}")
                rows[step, : len(batch)], rows[step, len(batch) :] = batch, batch[0]
                valid[step, : len(batch)] = True
            cached = (epoch, rows + self.train.offset[replicate], valid)
            self._cache[replicate] = cached
        return cached[1], cached[2]

    def window(self, start: int, count: int) -> StepWindow:
        """The batches, learning rates and on/off flags of every replicate for steps ``start .. start+count-1``."""
        reps = len(self.runs)
        rows = np.repeat(self.train.offset[None, :, None], count, axis=0).repeat(self.batch_size, axis=2)
        valid = np.zeros((count, reps, self.batch_size), dtype=bool)
        lr = np.zeros((count, reps), dtype=np.float32)
        for r, run in enumerate(self.runs):
            spe = int(self.steps_per_epoch[r])
            warmup = reference_warmup_steps(int(self.train.size[r]), self.batch_size)
            step, end = start, min(start + count, int(self.total_steps[r]))
            while step < end:
                epoch, offset = divmod(step, spe)
                n = min(end - step, spe - offset)
                epoch_rows, epoch_valid = self._padded_epoch(r, epoch)
                rows[step - start : step - start + n, r] = epoch_rows[offset : offset + n]
                valid[step - start : step - start + n, r] = epoch_valid[offset : offset + n]
                step += n
            for step in range(start, end):
                factor = lr_factor(step, spe, run.epochs, self.warmup_start, self.final_lr_factor, warmup)
                lr[step - start, r] = self.lr * factor
        active = (np.arange(start, start + count)[:, None] < self.total_steps[None, :]).astype(np.float32)
        return StepWindow(start, rows, valid, lr, active)
