"""The training step of a stack: gather every replicate's batch, forward, backward, `StackAdamW` update.

The step reads its inputs from a window of steps held on the device (`StepWindow`: rows, valid flags,
learning rates, on/off flags for ``window`` steps) at a device-side cursor that the step advances itself;
it accumulates each replicate's loss on the device. So the host does nothing per step but launch it, and
on CUDA the whole step is captured once as a CUDA graph and replayed (with ``compile``, the model's loss
function and the `StackAdamW` update run ``torch.compile``-d inside the graph: the update as one fused
pass over the stack's weights, moments and gradients instead of about ten). A graph has fixed shapes, so
graphed batches are gathered at the full width of the training tensors (extra columns are PAD, which the
masks and the loss ignore); eager steps cut them to the longest row of the step. Filler rows (short
batches, finished replicates) carry PAD targets: no loss, no gradient.

With a packing ``capacity`` (source and target slots per replicate), each step packs its rows end to end
(`lsa_interp.training.packing`; filler rows take no slot) and the graph computes only those slots. A step
whose rows do not fit the capacity (the host knows each step's need from the window) runs eagerly at its
own size instead of replaying the graph; so do all steps of an eager stack.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.data.vocab import PAD
from lsa_interp.training.packing import pack_rows
from lsa_interp.training.stack_adamw import StackAdamW
from lsa_interp.training.stack_data import StackSplit, StepWindow
from lsa_interp.training.stacked_model import StackedEncoderDecoder

WARMUP_STEPS = 3
"""Eager steps on a side stream before capture (cuBLAS handles and compiled kernels are made there)."""


class StackStep:
    """Runs steps of ``model`` on ``train`` with ``optimizer``; `load_window` then `run` once per step."""

    def __init__(
        self,
        model: StackedEncoderDecoder,
        optimizer: StackAdamW,
        train: StackSplit,
        window: int,
        batch_size: int,
        autocast: Callable[[], Any],
        graphed: bool = False,
        compile: bool = False,
        capacity: tuple[int, int] | None = None,
    ) -> None:
        reps, device = model.replicates, model.flat.device
        self.model, self.optimizer, self.train, self.autocast = model, optimizer, train, autocast
        self.rows = torch.zeros(window, reps, batch_size, dtype=torch.long, device=device)
        self.valid = torch.zeros(window, reps, batch_size, dtype=torch.bool, device=device)
        self.lr = torch.zeros(window, reps, device=device)
        self.active = torch.zeros(window, reps, device=device)
        self.cursor = torch.zeros(1, dtype=torch.long, device=device)
        self.loss_sum = torch.zeros(reps, device=device)
        self.loss_count = torch.zeros(reps, device=device)
        self.capacity = capacity
        self._shortest = (int(train.src_len.min()), int(train.tgt_len.min()))
        self._eager_loss = model.losses if capacity is None else model.packed_losses
        self._loss = torch.compile(self._eager_loss, dynamic=False) if compile else self._eager_loss
        self._update = torch.compile(optimizer.step, dynamic=False) if compile else optimizer.step
        self._window: StepWindow | None = None
        self._needs: np.ndarray | None = None
        self.graphed = graphed
        self.graph: torch.cuda.CUDAGraph | None = None

    def load_window(self, window: StepWindow) -> None:
        """Send ``window`` to the device (without a host sync on CUDA) and point the cursor at its first step."""
        pinned = self.rows.is_cuda
        send = lambda array, dst: dst[: len(array)].copy_(_host(array, pinned), non_blocking=pinned)
        send(window.rows, self.rows)
        send(window.valid, self.valid)
        send(window.lr, self.lr)
        send(window.active, self.active)
        self.cursor.zero_()
        self._window = window
        self._needs = window.token_needs(self.train) if self.capacity is not None else None

    def run(self, index: int) -> None:
        """Step ``index`` of the loaded window (the cursor must point at it: steps run in order)."""
        if self.capacity is not None:
            need = np.maximum(self._needs[index], 1)
            if not self.graphed or (need > self.capacity).any():
                self._step(self._eager_loss, capacity=(int(need[0]), int(need[1])))
                return
        elif not self.graphed:
            window = self._window
            rows = window.rows[index][window.valid[index]]
            self._step(
                self._eager_loss, widths=(int(self.train.src_len[rows].max()), int(self.train.tgt_len[rows].max()))
            )
            return
        if self.graph is None:
            self.graph = self._capture()
        self.graph.replay()

    def take_losses(self) -> Float[Tensor, " rep"]:
        """Mean loss per replicate since the last call (NaN for a replicate that did not train); syncs."""
        mean = self.loss_sum / self.loss_count
        result = mean.cpu()
        self.loss_sum.zero_()
        self.loss_count.zero_()
        return result

    def _step(
        self, loss: Callable, widths: tuple[int, int] | None = None, capacity: tuple[int, int] | None = None
    ) -> None:
        """One step at the cursor: padded rows (cut to ``widths`` if given), or packed into ``capacity`` slots."""
        k = self.cursor
        rows, valid = self.rows.index_select(0, k)[0], self.valid.index_select(0, k)[0]
        src, tgt_in, tgt_out = self.train.src[rows], self.train.tgt_in[rows], self.train.tgt_out[rows]
        if widths is not None:
            src, tgt_in, tgt_out = src[..., : widths[0]], tgt_in[..., : widths[1]], tgt_out[..., : widths[1]]
        tgt_out = tgt_out.masked_fill(~valid[..., None], PAD)
        self.model.flat.grad = None
        with self.autocast():
            if capacity is None:
                losses = loss(src, tgt_in, tgt_out, self._shortest)
            else:
                packed_src = pack_rows(src, (src != PAD).sum(-1) * valid, capacity[0], self._shortest[0])
                packed_tgt = pack_rows(tgt_in, (tgt_in != PAD).sum(-1) * valid, capacity[1], self._shortest[1])
                losses = loss(packed_src, packed_tgt, packed_tgt.gather(tgt_out))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*gradient layout contract")
            losses.sum().backward()
        active = self.active.index_select(0, k)[0]
        self._update(self.lr.index_select(0, k)[0], active)
        self.loss_sum.add_(losses.detach() * active)
        self.loss_count.add_(active)
        self.cursor.add_(1)

    def _capture(self) -> torch.cuda.CUDAGraph:
        """Warm up on a side stream, capture one step, then restore everything the warm-up changed."""
        opt = self.optimizer
        tensors = [self.model.flat, opt.exp_avg, opt.exp_avg_sq, opt.steps, self.cursor, self.loss_sum, self.loss_count]
        tensors.append(self.model.attention_step)
        saved = [t.detach().clone() for t in tensors]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self.cursor.zero_()
                self._step(self._loss, capacity=self.capacity)
        torch.cuda.current_stream().wait_stream(side)
        self.cursor.zero_()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step(self._loss, capacity=self.capacity)
        with torch.no_grad():
            for tensor, value in zip(tensors, saved):
                tensor.copy_(value)
        return graph


def _host(array: np.ndarray, pinned: bool) -> Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.pin_memory() if pinned else tensor
