"""A training step captured once as a CUDA graph and replayed for every batch (CUDA only).

At batch 32 this model is launch-bound on a GPU: a step is about a thousand small kernels, and launching
them from Python costs more than running them. `GraphedStep` captures forward, backward and the AdamW
update once and replays the graph for every batch, so a step costs a few launches and no host sync.

A graph has fixed shapes and addresses, so each batch is gathered on the device into fixed buffers: every
batch is padded to the full width of the training tensors (extra columns are PAD, which the key mask and
the loss ignore) and to ``batch_size`` rows (filler rows repeat a real row with PAD targets, so they carry
no loss and no gradient). The loss and gradients are therefore those of the batch itself; only the
dropout draws differ from an eager step. The epoch's batch plan is sent to the device once per epoch.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.data.vocab import PAD


@runtime_checkable
class Steppable(Protocol):
    """What `GraphedStep` needs of a trainer: its config, device, data, optimizer, plan and loss."""

    config: Any
    device: torch.device
    train: Any
    optimizer: torch.optim.Optimizer
    step: int
    steps_per_epoch: int

    def epoch_plan(self, epoch: int) -> list: ...

    def trainable_parameters(self) -> list[Tensor]: ...

    def stacked_loss(
        self, src: Int[Tensor, "rep b s"], tgt_in: Int[Tensor, "rep b t"], tgt_out: Int[Tensor, "rep b t"]
    ) -> Float[Tensor, " rep"]: ...

    def _autocast(self) -> Any: ...


WARMUP_STEPS = 3
"""Eager steps on a side stream before capture (cuBLAS handles and optimizer state are created there)."""


def padded_plan(plan: list, replicates: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """An epoch plan as ``rows [steps, replicates, batch_size]`` and ``valid`` (same shape, bool).

    Each entry of ``plan`` is one row-index array (``replicates == 1``) or a tuple of one per replicate.
    Short batches are filled with their first row, marked not valid. Raises ValueError for a batch
    larger than ``batch_size``.
    """
    rows = np.zeros((len(plan), replicates, batch_size), dtype=np.int64)
    valid = np.zeros((len(plan), replicates, batch_size), dtype=bool)
    for step, entry in enumerate(plan):
        for replicate, batch in enumerate(entry if replicates > 1 else (entry,)):
            n = len(batch)
            if n > batch_size:
                raise ValueError(f"a batch of {n} rows does not fit batch size {batch_size}")
            rows[step, replicate, :n], rows[step, replicate, n:] = batch, batch[0]
            valid[step, replicate, :n] = True
    return rows, valid


class GraphedStep:
    """The trainer's step as a CUDA graph; `replay` runs the step of a global step number.

    Capture runs `WARMUP_STEPS` real steps first; the weights and optimizer state are restored in place
    afterwards, so the run continues exactly where it was. Raises RuntimeError off CUDA.
    """

    def __init__(self, trainer: Steppable) -> None:
        if trainer.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        self.trainer = trainer
        replicates, batch_size = trainer.config.replicates, trainer.config.batch_size
        device = trainer.device
        self.rows = torch.zeros(replicates, batch_size, dtype=torch.long, device=device)
        self.valid = torch.ones(replicates, batch_size, dtype=torch.bool, device=device)
        self.loss = torch.zeros(replicates, device=device)
        self._epoch, self._plan_rows, self._plan_valid = -1, None, None
        self._load_epoch(trainer.step // trainer.steps_per_epoch)
        self.graph = self._capture()

    def _load_epoch(self, epoch: int) -> None:
        trainer = self.trainer
        rows, valid = padded_plan(trainer.epoch_plan(epoch), trainer.config.replicates, trainer.config.batch_size)
        self._plan_rows = torch.from_numpy(rows).to(trainer.device)
        self._plan_valid = torch.from_numpy(valid).to(trainer.device)
        self._epoch = epoch
        self.rows.copy_(self._plan_rows[0])
        self.valid.copy_(self._plan_valid[0])

    def _step(self) -> None:
        trainer, train = self.trainer, self.trainer.train
        src, tgt_in = train.src[self.rows], train.tgt_in[self.rows]
        tgt_out = train.tgt_out[self.rows].masked_fill(~self.valid[..., None], PAD)
        with trainer._autocast():
            losses = trainer.stacked_loss(src, tgt_in, tgt_out)
        losses.sum().backward()
        trainer.optimizer.step()
        self.loss.copy_(losses.detach())

    def _capture(self) -> torch.cuda.CUDAGraph:
        trainer = self.trainer
        params = trainer.trainable_parameters()
        optimizer = trainer.optimizer
        saved_params = [p.detach().clone() for p in params]
        saved_state = {
            i: {k: v.clone() for k, v in optimizer.state[p].items()}
            for i, p in enumerate(params)
            if optimizer.state.get(p)
        }
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                optimizer.zero_grad(set_to_none=True)
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step()
        with torch.no_grad():
            for i, (param, saved) in enumerate(zip(params, saved_params)):
                param.copy_(saved)
                for key, value in optimizer.state[param].items():
                    value.copy_(saved_state[i][key]) if i in saved_state else value.zero_()
        return graph

    def replay(self, step: int) -> Float[Tensor, " replicates"]:
        """Run training step ``step`` (global count from 0); return the per-replicate losses (no sync).

        The returned tensor is the graph's output buffer: the next replay overwrites it.
        """
        epoch, offset = divmod(step, self.trainer.steps_per_epoch)
        if epoch != self._epoch:
            self._load_epoch(epoch)
        self.rows.copy_(self._plan_rows[offset])
        self.valid.copy_(self._plan_valid[offset])
        self.graph.replay()
        return self.loss
