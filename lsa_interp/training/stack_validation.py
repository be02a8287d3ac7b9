"""End-of-epoch validation of every replicate of a stack at once, on the device.

Each replicate is validated on its own val split: the splits are walked in chunks of rows (the same number
of rows for every replicate; a shorter split repeats its first row, ignored), each chunk scored with one
teacher-forced stacked forward pass (loss) and one cached greedy decode of all replicates (exact match).
The records have the keys of `validate_model`; `matching_score` adds each replicate's best matching-head
score on ``prompts`` (`lsa_interp.training.validation.matching_prompts`). A chunk decodes as many steps as its
longest target, so a sibling rule's answer longer than every target of its chunk (``val_sibling_by_family``)
cannot be given in full there and counts as not given (rare: chunks hold thousands of rows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lsa_interp.data.task import Task
from lsa_interp.data.vocab import PAD
from lsa_interp.training.stack_data import StackSplit
from lsa_interp.training.stacked_model import StackedEncoderDecoder
from lsa_interp.training.validation import accuracy_record, matching_score, sibling_hits

ROWS_PER_CHUNK = 16384
"""Rows decoded together, summed over the replicates (a chunk holds ``ROWS_PER_CHUNK // R`` per replicate)."""


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
    with torch.no_grad():
        was_training = model.training
        model.eval()
        reps = model.replicates
        per_chunk = max(1, ROWS_PER_CHUNK // reps)
        loss_sum, hits, outputs = torch.zeros(reps, dtype=torch.float64), [], []
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
            outputs.append(generated.cpu())
        model.train(was_training)
        hit = torch.cat(hits, dim=1)
        width = max(output.shape[-1] for output in outputs)
        generated = torch.cat([F.pad(output, (0, width - output.shape[-1]), value=PAD) for output in outputs], dim=1)
        records, probe = [], model.replicate_model(0) if prompts is not None else None
        for r in replicates if replicates is not None else range(reps):
            part = val.parts[r]
            size = val.size[r]
            loss = float(loss_sum[r]) / int((part.tgt_out != PAD).sum())
            record = accuracy_record(hit[r, :size], part.split, loss, sibling_hits(generated[r, :size], part.siblings))
            if prompts is not None:
                record["matching_score"] = matching_score(model.write_replicate(r, probe), prompts)
            records.append(record)
        return records
