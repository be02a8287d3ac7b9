"""Rows packed end to end: each replicate's tokens in a buffer of fixed capacity, without padding.

A stacked step computes every row at the full width of the training tensors (93 source and 22 target
tokens for the paper's data) because a CUDA graph has fixed shapes; the paper's rows are 49 and 7 tokens
long on average. `pack_rows` lays each replicate's rows of a step end to end in a buffer of ``capacity``
tokens instead (still a fixed shape: the capacity must hold the replicate's longest batch), so that the
embeddings, projections, MLPs, norms and the loss see only real tokens. The attention then needs each
row's start and length: `lsa_interp.training.small_attention.packed_small_attention`; `packed_sdpa`, which
unpacks to padded rows for ``scaled_dot_product_attention`` and packs the result back; or `packed_flash`,
FlashAttention-2's variable-length kernel over the packed buffer as it is (CUDA, bf16), whose sequences
(`sequence_bounds`) are the rows and filler sequences over each replicate's unused slots.

Token ``t`` of replicate ``r`` lives at flat index ``r * capacity + t``; row ``b`` of replicate ``r`` is flat
row ``r * batch + b``. Everything here runs on the device without a host synchronisation.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lsa_interp.data.vocab import PAD


class PackedRows(NamedTuple):
    """One side (source or target) of a step's batches, packed (see module doc).

    ``tokens`` and ``positions`` ``[rep, capacity]``: each token and its position in its row (PAD and 0 in
    slots of no row); ``starts`` and ``lengths`` ``[(rep batch)]``: each row's first flat token index and its
    length; ``slot_row`` and ``slot_pos`` ``[(rep capacity)]``: each slot's flat row (``rep * batch`` for
    none) and position; ``width``: the padded width the rows came from (no row is longer); ``shortest``: the
    shortest non-empty row the data has (a hint for the attention kernel's tiles, not a bound it relies on).
    """

    tokens: Tensor
    positions: Tensor
    starts: Tensor
    lengths: Tensor
    slot_row: Tensor
    slot_pos: Tensor
    width: int
    shortest: int = 1

    @property
    def rows(self) -> int:
        """How many rows (``rep * batch``) the step has."""
        return len(self.starts)

    def _at_slots(self, per_row: Tensor) -> tuple[Tensor, Tensor]:
        """``per_row [(rep batch), width, *rest]`` at each slot's (row, position), and which slots hold a row."""
        return per_row[self.slot_row.clamp(max=self.rows - 1), self.slot_pos], self.slot_row < self.rows

    def gather(self, padded: Int[Tensor, "rep batch width"]) -> Int[Tensor, "rep capacity"]:
        """Another tensor of the same rows (e.g. the targets of ``tgt_in``), packed in this layout."""
        values, inside = self._at_slots(padded.reshape(self.rows, -1))
        return values.masked_fill(~inside, PAD).view(self.tokens.shape)

    def unpack(self, packed: Float[Tensor, " token *rest"]) -> tuple[Tensor, Bool[Tensor, "row width"]]:
        """``packed`` rows at the full width ``[(rep batch), width, *rest]`` (positions past a row's end hold
        other tokens' values) and which positions are the row's own."""
        offsets = torch.arange(self.width, device=packed.device)
        index = (self.starts[:, None] + offsets).clamp(max=len(packed) - 1)
        return packed[index], offsets < self.lengths[:, None]

    def repack(self, padded: Float[Tensor, "row width *rest"]) -> Float[Tensor, " token *rest"]:
        """Inverse of `unpack`: each slot's value from its row and position, zeros in slots of no row."""
        values, inside = self._at_slots(padded)
        return values * inside.view(-1, *[1] * (values.dim() - 1)).to(values.dtype)


def pack_rows(
    tokens: Int[Tensor, "rep batch width"], lengths: Int[Tensor, "rep batch"], capacity: int, shortest: int = 1
) -> PackedRows:
    """Each replicate's rows (the first ``lengths`` tokens of each) end to end in ``capacity`` slots.

    A row of length 0 takes no slot. Tokens past the capacity are left out: the caller sizes ``capacity``
    to hold every replicate's rows (`capacity_for`).
    """
    reps, batch, width = tokens.shape
    device = tokens.device
    lengths = lengths.long()
    ends = lengths.cumsum(-1)
    first = ends - lengths
    slots = torch.arange(capacity, device=device).expand(reps, capacity).contiguous()
    row = torch.searchsorted(ends, slots, right=True)
    inside = row < batch
    row = row.clamp(max=batch - 1)
    position = torch.where(inside, slots - first.gather(1, row), 0)
    flat_row = row + torch.arange(reps, device=device)[:, None] * batch
    packed = tokens.reshape(reps * batch, width)[flat_row, position].masked_fill(~inside, PAD)
    return PackedRows(
        tokens=packed,
        positions=position,
        starts=(first + torch.arange(reps, device=device)[:, None] * capacity).flatten(),
        lengths=lengths.flatten(),
        slot_row=torch.where(inside, flat_row, reps * batch).flatten(),
        slot_pos=position.flatten(),
        width=width,
        shortest=shortest,
    )


CAPACITY_MARGIN = 1.05
"""A packed graph's capacity: the most tokens a sample of steps needs, times this (then rounded up to 16)."""


def capacity_for(needs: np.ndarray, margin: float = CAPACITY_MARGIN, multiple: int = 16) -> tuple[int, int]:
    """Source and target slots of a packed graph: the most of ``needs`` ``[steps, 2]`` (`StepWindow.token_needs`)
    times ``margin``, rounded up to a multiple of ``multiple``. A step that needs more runs eagerly at its own
    size (`lsa_interp.training.stack_step`)."""
    most = needs.max(0) * margin
    return tuple(int(max(multiple, math.ceil(m / multiple) * multiple)) for m in most)


def packed_sdpa(
    q: Float[Tensor, "q_token head d_head"],
    k: Float[Tensor, "k_token head d_head"],
    v: Float[Tensor, "k_token head d_head"],
    queries: PackedRows,
    keys: PackedRows,
    causal: bool,
    dropout_p: float,
) -> Float[Tensor, "q_token head d_head"]:
    """Attention of packed rows through ``scaled_dot_product_attention``: unpacked to the full width, each
    row's own keys (and, ``causal``, earlier ones) visible, packed back. Slots of no row get zeros."""
    (q_rows, _), (k_rows, keep), (v_rows, _) = queries.unpack(q), keys.unpack(k), keys.unpack(v)
    # A row without keys (a filler row) sees all its slots rather than none: no NaN, and no slot reads it.
    mask = (keep | (keys.lengths == 0)[:, None])[:, None, None, :]
    if causal:
        mask = mask & torch.ones(queries.width, keys.width, dtype=torch.bool, device=q.device).tril()
    heads_first = lambda t: t.transpose(1, 2)
    z = F.scaled_dot_product_attention(
        heads_first(q_rows), heads_first(k_rows), heads_first(v_rows), attn_mask=mask, dropout_p=dropout_p
    )
    return queries.repack(heads_first(z))


def filler_sequences(*sides: PackedRows) -> int:
    """How many filler sequences `sequence_bounds` cuts each replicate's unused slots into: enough that none is
    longer than its side's ``width`` on any of ``sides``, and one count for all of them (so that row i of a
    replicate is sequence i on every side, as cross-attention pairs them)."""
    return max(math.ceil(side.tokens.shape[1] / side.width) for side in sides)


def sequence_bounds(rows: PackedRows, fillers: int) -> Int[Tensor, " bound"]:
    """Where each sequence of a variable-length attention starts in the flat packed buffer, and its end:
    int32 ``[rep * (batch + fillers) + 1]``, non-decreasing, from 0 to ``rep * capacity``.

    Replicate r's sequences are its rows in order (empty ones included, as empty sequences), then its unused
    slots cut into ``fillers`` sequences of at most ``width`` tokens each (empty ones at the end). Every slot
    belongs to exactly one sequence, so the attention writes every output; no row sees a filler's keys.
    Needs ``fillers >= ceil(capacity / width)`` (`filler_sequences`).
    """
    reps, capacity = rows.tokens.shape
    device = rows.starts.device
    base = torch.arange(reps, device=device)[:, None] * capacity
    unused = base + rows.lengths.view(reps, -1).sum(1, keepdim=True)
    steps = torch.arange(fillers, device=device) * rows.width
    filler_starts = torch.minimum(unused + steps, base + capacity)
    starts = torch.cat([rows.starts.view(reps, -1), filler_starts], 1).flatten()
    return torch.cat([starts, starts.new_full((1,), reps * capacity)]).int()


def flash_varlen(
    q: Float[Tensor, "q_token head d_head"],
    k: Float[Tensor, "k_token head d_head"],
    v: Float[Tensor, "k_token head d_head"],
    q_bounds: Int[Tensor, " bound"],
    k_bounds: Int[Tensor, " bound"],
    q_longest: int,
    k_longest: int,
    causal: bool,
    dropout_p: float,
) -> Float[Tensor, "q_token head d_head"]:
    """FlashAttention-2's variable-length attention (PyTorch's ``aten::_flash_attention_forward``, differentiable;
    CUDA, fp16 or bf16): sequence i's queries ``q[q_bounds[i]:q_bounds[i + 1]]`` attend to its keys only
    (``causal``: to keys at or before their own position), with attention dropout. The public
    ``torch.nn.attention.varlen.varlen_attn`` takes no dropout, which the recipe has.
    ``q_longest``/``k_longest``: no sequence is longer. A sequence without keys gets zeros."""
    return torch.ops.aten._flash_attention_forward(
        q, k, v, q_bounds, k_bounds, q_longest, k_longest, dropout_p, causal, False
    )[0]


def packed_flash(
    q: Float[Tensor, "q_token head d_head"],
    k: Float[Tensor, "k_token head d_head"],
    v: Float[Tensor, "k_token head d_head"],
    queries: PackedRows,
    keys: PackedRows,
    bounds: tuple[Tensor, Tensor],
    causal: bool,
    dropout_p: float,
) -> Float[Tensor, "q_token head d_head"]:
    """Attention of packed rows through `flash_varlen`, with no unpacking: each row's queries see the row's own
    keys (and, ``causal``, earlier ones). ``bounds``: the queries' and the keys' `sequence_bounds`, of one
    filler count. Slots of no row hold what their filler sequence computed (finite, and read by no row)."""
    return flash_varlen(q, k, v, *bounds, queries.width, keys.width, causal, dropout_p)
