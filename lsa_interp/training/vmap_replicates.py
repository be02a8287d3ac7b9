"""The ``torch.func.vmap`` stack of replicates: the baseline of ``benchmarks/train_throughput.py``.

Training uses the native stack (`lsa_interp.training.stack_trainer`); this older design stays only so that
the benchmark can measure the native stack against it. Several replicates of one recipe in one process, as
stacked parameters (``torch.func``).

Replicate ``i`` is initialised with seed ``seed + i`` and reads the training set in the order of seed
``seed + i``: the same model and data order as a single run with that seed. All replicates step together:
their parameters are stacked along a new first dimension, the loss is ``vmap``-ed over them (dropout masks
differ between replicates), and one AdamW updates the stack, which is the same as one AdamW per replicate
because AdamW is element-wise. Each step's batches are padded to a common shape (extra rows carry no
target, extra columns are PAD), so every replicate sees exactly its own batch. On a GPU this turns N small
launch-bound steps into one; on CPU it saves the per-operation overhead of N-1 models.

Run directory: ``train_config.json``, ``metrics.jsonl`` (step records carry ``train_loss_by_replicate``;
epoch records carry ``replicate``), ``state.pt``, and at the end ``replicate-{i}/model`` for every ``i``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from lsa_interp.data.batching import epoch_batches
from lsa_interp.data.vocab import PAD
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.checkpoint import save_model
from lsa_interp.training.run_dir import MODEL_DIR, replicate_dir
from lsa_interp.training.trainer import Trainer


class _TeacherForcedLoss(nn.Module):
    """The training loss of one model as a module, so that `functional_call` can swap its parameters."""

    def __init__(self, model: HookedEncoderDecoder) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
        logits = self.model.decode(tgt_in, self.model.encode(src), src == PAD)
        return F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)


class VmapReplicateTrainer(Trainer):
    """``config.replicates`` models trained in lock-step; see the module docstring."""

    def _build_models(self) -> None:
        cfg = self.config
        models = []
        for index in range(cfg.replicates):
            torch.manual_seed(cfg.seed + index)
            models.append(_TeacherForcedLoss(HookedEncoderDecoder(ModelConfig(**cfg.model))).to(self.device).train())
        torch.manual_seed(cfg.seed)
        self.params, self.buffers = stack_module_state(models)
        self._template = copy.deepcopy(models[0]).to("meta")
        self.model = models[0].model.eval()
        self.optimizer = self._adamw(list(self.params.values()))

        def one_loss(params: dict, buffers: dict, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
            return functional_call(self._template, (params, buffers), (src, tgt_in, tgt_out))

        self._losses = vmap(one_loss, randomness="different")

    def _weights(self) -> dict[str, Any]:
        return {"params": {k: v.detach().clone() for k, v in self.params.items()}}

    def _load_weights(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for name, value in state["params"].items():
                self.params[name].copy_(value)

    def epoch_plan(self, epoch: int) -> list[tuple[np.ndarray, ...]]:
        """Per step, one row-index array per replicate (replicate ``i`` in the order of seed ``seed + i``)."""
        cfg = self.config
        plans = [
            epoch_batches(self.keys, self.bucket_lengths, cfg.batch_size, cfg.seed + i, epoch)
            for i in range(cfg.replicates)
        ]
        if len({len(plan) for plan in plans}) != 1:
            raise RuntimeError("replicates got different numbers of batches per epoch; use --replicates 1")
        return list(zip(*plans))

    @staticmethod
    def tasks_in(batch: tuple[np.ndarray, ...]) -> int:
        """Tasks trained on in one step, summed over the replicates."""
        return sum(len(rows) for rows in batch)

    def stacked_batch(
        self, batch: tuple[np.ndarray, ...]
    ) -> tuple[Int[Tensor, "rep b s"], Int[Tensor, "rep b t"], Int[Tensor, "rep b t"]]:
        """The replicates' batches padded to one shape: filler rows repeat a row with PAD targets."""
        width = max(len(rows) for rows in batch)
        index = np.stack([np.concatenate([rows, np.full(width - len(rows), rows[0])]) for rows in batch])
        filler = np.arange(width)[None, :] >= np.array([len(rows) for rows in batch])[:, None]
        src, tgt_in, tgt_out = self.train.batch(index.reshape(-1))
        shape = (len(batch), width)
        tgt_out = tgt_out.masked_fill(torch.from_numpy(filler.reshape(-1, 1)).to(tgt_out.device), PAD)
        return src.view(*shape, -1), tgt_in.view(*shape, -1), tgt_out.view(*shape, -1)

    def trainable_parameters(self) -> list[Tensor]:
        """The stacked parameters (first dimension: replicate)."""
        return list(self.params.values())

    def stacked_loss(
        self, src: Int[Tensor, "rep b s"], tgt_in: Int[Tensor, "rep b t"], tgt_out: Int[Tensor, "rep b t"]
    ) -> Float[Tensor, " rep"]:
        """Each replicate's training loss on its own batch."""
        return self._losses(self.params, self.buffers, src, tgt_in, tgt_out)

    def train_step(self, batch: tuple[np.ndarray, ...]) -> Tensor:
        """One optimizer step of every replicate; returns the ``[replicates]`` losses without syncing."""
        if self.graphed:
            return super().train_step(batch)
        self._begin_step()
        with self._autocast():
            losses = self.stacked_loss(*self.stacked_batch(batch))
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.optimizer.step()
        self.step += 1
        return losses.detach()

    def _loss_record(self, mean_loss: Tensor) -> dict[str, Any]:
        by_replicate = mean_loss.tolist()
        return {"train_loss": sum(by_replicate) / len(by_replicate), "train_loss_by_replicate": by_replicate}

    def replicate_model(self, index: int) -> HookedEncoderDecoder:
        """A standalone model holding replicate ``index``'s current weights (in eval mode)."""
        with torch.no_grad():
            stacked = {**self.params, **self.buffers}
            self.model.load_state_dict({name.removeprefix("model."): value[index] for name, value in stacked.items()})
        return self.model.eval()

    def epoch_records(self) -> list[dict[str, Any]]:
        """One validation record per replicate."""
        return [{"replicate": i, **self.validated(self.replicate_model(i))} for i in range(self.config.replicates)]

    def validate(self) -> dict[str, Any]:
        """Validation of replicate 0 (`epoch_records` has all of them)."""
        return self.validated(self.replicate_model(0))

    def _save_final(self) -> None:
        for index in range(self.config.replicates):
            model = self.replicate_model(index)
            metadata = {**self._metadata(self.config.seed + index), "replicate": index}
            save_model(model, self.run_dir / replicate_dir(index) / MODEL_DIR, metadata=metadata, overwrite=True)
