"""End-of-epoch validation of every replicate of a stack at once, on the device.

Each replicate is validated on its own val split: the splits are walked in chunks of rows (the same number
of rows for every replicate; a shorter split repeats its first row, ignored), each chunk scored with one
teacher-forced stacked forward pass (loss) and one cached greedy decode of all replicates (exact match).
The records have the keys of `validate_model`; `matching_score` adds each replicate's best matching-head
score (`lsa_interp.analysis.matching`) on a small fixed set of pred prompts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lsa_interp.analysis.matching import matching_scores, matching_tasks
from lsa_interp.data.task import Task
from lsa_interp.data.vocab import PAD
from lsa_interp.training.stack_data import StackSplit
from lsa_interp.training.stacked_model import StackedEncoderDecoder
from lsa_interp.training.validation import accuracy_record

ROWS_PER_CHUNK = 8192
"""Rows decoded together, summed over the replicates (a chunk holds ``ROWS_PER_CHUNK // R`` per replicate)."""
MATCHING_PROMPTS_PER_ALPHABET_KIND = 8
"""pred tasks per alphabet kind (standard, permuted) behind ``matching_score``: 16 prompts, a few ms."""


def matching_prompts() -> list[Task]:
    """The fixed pred prompts on which every replicate's matching score is measured."""
    return matching_tasks(MATCHING_PROMPTS_PER_ALPHABET_KIND, seed=0, rules=("pred",))


@torch.no_grad()
def validate_stack(
    model: StackedEncoderDecoder,
    val: StackSplit,
    autocast: Callable[[], Any],
    replicates: list[int] | None = None,
    prompts: list[Task] | None = None,
) -> list[dict[str, Any]]:
    """One record per replicate in ``replicates`` (default all), in that order; see the module doc.

    The loss runs under ``autocast`` (as in `validate_model`), greedy decoding in the weights' precision.
    Without ``prompts`` the records carry no ``matching_score``.
    """
    was_training = model.training
    model.eval()
    reps = model.replicates
    per_chunk = max(1, ROWS_PER_CHUNK // reps)
    loss_sum, hits = torch.zeros(reps, dtype=torch.float64), []
    for start in range(0, int(val.size.max()), per_chunk):
        local = np.arange(start, min(start + per_chunk, int(val.size.max())))
        valid = local[None, :] < val.size[:, None]
        rows = val.offset[:, None] + np.where(valid, local[None, :], 0)
        src_width, tgt_width = int(val.src_len[rows].max()), int(val.tgt_len[rows].max())
        index = torch.from_numpy(rows).to(val.src.device)
        keep = torch.from_numpy(valid).to(val.src.device)[..., None]
        src, tgt_in = val.src[index, :src_width], val.tgt_in[index, :tgt_width]
        tgt_out = val.tgt_out[index, :tgt_width].masked_fill(~keep, PAD)
        with autocast():
            total, _ = model.token_losses(src, tgt_in, tgt_out)
        loss_sum += total.double().cpu()
        generated = model.greedy_decode(src, tgt_width)
        generated = F.pad(generated, (0, tgt_width - generated.shape[-1]), value=PAD)
        hits.append(((generated == tgt_out).all(-1) | ~keep[..., 0]).cpu())
    model.train(was_training)
    hit = torch.cat(hits, dim=1)
    records = []
    for r in replicates if replicates is not None else range(reps):
        part = val.parts[r]
        record = accuracy_record(
            hit[r, : val.size[r]], part.split, float(loss_sum[r]) / int((part.tgt_out != PAD).sum())
        )
        if prompts is not None:
            record["matching_score"] = matching_scores(model.replicate_model(r), prompts).best()[1]
        records.append(record)
    return records
