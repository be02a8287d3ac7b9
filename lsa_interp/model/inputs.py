"""The one place where model inputs (tasks, token batches, id tensors) become a `TokenBatch` and masks.

Tasks that all carry answers are teacher-forced: the decoder input is ``>`` + answer. Otherwise (no
answers, or only some) the decoder input is ``>`` alone, i.e. the encoder plus one decoder step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import TokenBatch, encode_tasks, source_roles
from lsa_interp.data.vocab import ARROW, EOS, PAD, VOCAB_SIZE

ModelInput = Task | str | Sequence[Task | str] | TokenBatch | Tensor
"""A task (a `Task` or its text, read by `Task.parse`), a list of them, a `TokenBatch`, or a ``[batch, src_pos]``
tensor of encoder ids."""


def to_token_batch(
    inputs: ModelInput, tgt: Int[Tensor, "batch tgt_pos"] | None = None, teacher_force: bool = True
) -> TokenBatch:
    """Return a `TokenBatch` whose ``tgt_in`` is set (``>`` + answer when teacher-forced, else ``>``).

    ``tgt`` overrides the decoder input. ``teacher_force=False`` ignores answers. Raises TypeError for an
    unsupported input or an id tensor or ``tgt`` that is not a ``[batch, pos]`` int64 tensor, and ValueError for an
    empty list, a task text `Task.parse` refuses, an id tensor or ``tgt`` with an id outside the vocabulary, an id
    tensor with a PAD before a token (ids are right-padded) or a ``tgt`` whose batch size differs.
    """
    if isinstance(inputs, (Task, str)):
        inputs = [inputs]
    if isinstance(inputs, Sequence):
        inputs = [Task.parse(item) if isinstance(item, str) else item for item in inputs]
    if isinstance(inputs, TokenBatch):
        batch = inputs
    elif isinstance(inputs, Tensor):
        _check_ids(inputs, "encoder ids", "src_pos")
        pad = inputs == PAD
        if bool((pad[:, :-1] & ~pad[:, 1:]).any()):
            raise ValueError("encoder ids must be right-padded: a row has a PAD before a token (put PAD after them)")
        roles = torch.from_numpy(source_roles(inputs.cpu().numpy())).to(inputs.device)
        batch = TokenBatch(inputs, roles)
    elif isinstance(inputs, Sequence) and all(isinstance(t, Task) for t in inputs):
        batch = encode_tasks(list(inputs), with_answers=None if teacher_force else False)
    else:
        raise TypeError(
            f"expected a Task or its text, a list of them, a TokenBatch or an id tensor, got {type(inputs).__name__}"
        )
    if tgt is not None:
        _check_ids(tgt, "tgt", "tgt_pos")
        if tgt.shape[0] != batch.src.shape[0]:
            raise ValueError(f"tgt has {tgt.shape[0]} rows but the encoder input has {batch.src.shape[0]}")
        return replace(batch, tgt_in=tgt, tgt_out=None)
    if batch.tgt_in is None or not teacher_force:
        start = torch.full((batch.src.shape[0], 1), ARROW, dtype=torch.long, device=batch.src.device)
        return replace(batch, tgt_in=start, tgt_out=None)
    return batch


def _check_ids(ids: object, name: str, positions: str) -> None:
    """Raise TypeError unless ``ids`` is a ``[batch, positions]`` int64 tensor, ValueError for an id outside the
    vocabulary (one min/max over the tensor: cheap enough for every forward pass)."""
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
        got = f"{tuple(ids.shape)} {ids.dtype}" if isinstance(ids, Tensor) else type(ids).__name__
        raise TypeError(f"{name} must be a [batch, {positions}] int64 tensor, got {got}")
    low, high = torch.stack(torch.aminmax(ids)).tolist() if ids.numel() else (0, 0)
    if not 0 <= low <= high < VOCAB_SIZE:
        raise ValueError(f"{name} must be token ids 0..{VOCAB_SIZE - 1} (the vocabulary), got {low}..{high}")


def key_mask(pad: Bool[Tensor, "batch k_pos"], dtype: torch.dtype) -> Float[Tensor, "batch 1 1 k_pos"]:
    """Additive attention mask: -inf at padded keys, 0 elsewhere (out of place, so it also works under vmap)."""
    return torch.zeros(pad.shape, dtype=dtype, device=pad.device).masked_fill(pad, float("-inf"))[:, None, None, :]


def causal_mask(pad: Bool[Tensor, "batch pos"], dtype: torch.dtype) -> Float[Tensor, "batch 1 pos pos"]:
    """Additive mask of causal self-attention: -inf at future and padded keys, 0 elsewhere."""
    n = pad.shape[1]
    future = torch.ones(n, n, dtype=torch.bool, device=pad.device).triu_(1)
    return key_mask(pad, dtype).masked_fill(future, float("-inf"))


def decoder_input_from_generated(generated: Int[Tensor, "batch n"]) -> Int[Tensor, "batch tgt_pos"]:
    """The decoder inputs fed while generating ``generated``: ``>`` then every token before the row's EOS.

    PAD fills the rest; trailing all-PAD columns are dropped (the ``>`` column stays, so an empty batch gives
    ``[0, 1]``). Position i of the result predicts ``generated[:, i]``.
    """
    start = torch.full((generated.shape[0], 1), ARROW, dtype=torch.long, device=generated.device)
    tgt = torch.cat([start, generated[:, :-1]], dim=1)
    tgt = tgt.masked_fill(tgt == EOS, PAD)
    widths = torch.arange(1, tgt.shape[1] + 1, device=tgt.device)
    keep = int(torch.where((tgt != PAD).any(0), widths, 1).max())
    return tgt[:, :keep]
