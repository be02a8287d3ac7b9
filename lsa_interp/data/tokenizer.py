"""Tokenizer with the reference vocabulary and layout, vectorised over many tasks.

Encoder input: 26 alphabet tokens, ``|``, example in, ``>``, example out, [``|``, in, ``>``, out ...], ``|``,
query, EOS. Decoder input: ``>`` then the answer; decoder target: the answer then EOS. Batches are padded
with PAD to the longest row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Int, Int64
from torch import Tensor

from lsa_interp.data.task import Task
from lsa_interp.data.vocab import (
    ARROW,
    EOS,
    PAD,
    ROLE_ID,
    SEP,
    TOKEN_STRINGS,
    VOCAB_SIZE,
    display_token,
    position_labels,
)

_EOS_CHAR, _PAD_CHAR = "$", "."
_LUT = np.full(256, -1, dtype=np.int64)
_LUT[np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)] = np.arange(26)
_LUT[ord("|")], _LUT[ord(">")], _LUT[ord(_EOS_CHAR)], _LUT[ord(_PAD_CHAR)] = SEP, ARROW, EOS, PAD


_ROW_INDEX = "an int, a slice, a list of ints, a 1-D int64 index tensor or a bool mask of the batch's length"


@dataclass(frozen=True)
class TokenBatch:
    """Padded token ids of a batch of tasks (all int64, PAD-filled).

    ``tgt_in``/``tgt_out`` are None when the tasks carry no answers. There is no ``shape``: the encoder and decoder
    sides differ in width, so ``len(batch)`` is the number of rows, ``batch.src.shape`` (also ``roles``) is
    ``(batch, src_pos)`` and ``batch.tgt_in.shape`` (also ``tgt_out``) is ``(batch, tgt_pos)``. ``batch[rows]``
    selects rows (see `__getitem__`).
    """

    src: Int[Tensor, "batch src_pos"]
    roles: Int[Tensor, "batch src_pos"]
    tgt_in: Int[Tensor, "batch tgt_pos"] | None = None
    tgt_out: Int[Tensor, "batch tgt_pos"] | None = None

    def __len__(self) -> int:
        return self.src.shape[0]

    @property
    def src_pad_mask(self) -> Bool[Tensor, "batch src_pos"]:
        """True at padding positions of the encoder input."""
        return self.src == PAD

    @property
    def tgt_pad_mask(self) -> Bool[Tensor, "batch tgt_pos"] | None:
        """True at padding positions of the decoder input (None without answers)."""
        return None if self.tgt_in is None else self.tgt_in == PAD

    def to(self, device: torch.device | str) -> TokenBatch:
        """Return the batch with every tensor moved to ``device``; raises TypeError for a dtype (token ids stay
        integers)."""
        if isinstance(device, torch.dtype):
            raise TypeError(f"a TokenBatch holds token ids: move it to a device, not to {device}")
        move = lambda t: None if t is None else t.to(device)
        return TokenBatch(move(self.src), move(self.roles), move(self.tgt_in), move(self.tgt_out))

    def __getitem__(
        self, rows: int | slice | list[int] | Int64[Tensor, " rows"] | Bool[Tensor, " batch"]
    ) -> TokenBatch:
        """Return the rows ``rows`` (an int, a slice, a list of ints, a 1-D int64 index tensor or a bool mask of
        ``len(batch)``) as a TokenBatch: an int keeps a batch of one row, so the result is always a batch.

        Columns are kept as they are: padding the selected rows no longer need is not trimmed. ``tgt_in``/``tgt_out``
        stay None where they are. Raises IndexError for a row out of range, a mask of another length or a tensor
        that is not 1-D, and TypeError for any other index (a tuple such as ``batch[0, 1]``, a float, a float
        tensor).
        """
        if isinstance(rows, slice):  # numpy's slicing takes a negative step, torch's does not
            rows = torch.from_numpy(np.arange(len(self), dtype=np.int64)[rows].copy())
        is_int = lambda row: isinstance(row, int) and not isinstance(row, bool)
        if is_int(rows):
            rows = [rows]
        if isinstance(rows, list) and all(is_int(row) for row in rows):
            rows = torch.tensor(rows, dtype=torch.long)
        if isinstance(rows, list):
            held = ", ".join(sorted({type(row).__name__ for row in rows}))
            raise TypeError(f"index a TokenBatch by {_ROW_INDEX}, not a list holding {held}")
        if not isinstance(rows, Tensor) or rows.dtype not in (torch.long, torch.bool):
            given = f"a {rows.dtype} tensor" if isinstance(rows, Tensor) else type(rows).__name__
            raise TypeError(f"index a TokenBatch by {_ROW_INDEX}, not {given}")
        n = len(self)
        if rows.dim() != 1 or (rows.dtype == torch.bool and len(rows) != n):
            given = f"a {rows.dtype} tensor of shape {tuple(rows.shape)}"
            raise IndexError(f"index a TokenBatch of {n} rows by {_ROW_INDEX}, not {given}")
        if rows.dtype == torch.long:
            outside = rows[(rows < -n) | (rows >= n)]
            if len(outside):
                raise IndexError(f"row(s) {outside.tolist()} out of range for a TokenBatch of {n} rows")
        return self.select(rows)

    def select(self, index: Tensor | slice) -> TokenBatch:
        """Return the rows ``index`` (a slice, index tensor or boolean mask) of every tensor."""
        pick = lambda t: None if t is None else t[index]
        return TokenBatch(pick(self.src), pick(self.roles), pick(self.tgt_in), pick(self.tgt_out))


def concat_batches(batches: Sequence[TokenBatch]) -> TokenBatch:
    """One batch of the rows of ``batches`` in order, each tensor padded to the widest (PAD, roles ``pad``).

    ``tgt_in``/``tgt_out`` are kept where every batch has them, else None. Raises ValueError for no batches.
    """
    if not batches:
        raise ValueError("cannot concatenate an empty list of batches")

    def joined(parts: list[Tensor | None], fill: int) -> Tensor | None:
        if any(part is None for part in parts):
            return None
        width = max(part.shape[1] for part in parts)
        return torch.cat([F.pad(part, (0, width - part.shape[1]), value=fill) for part in parts])

    field = lambda name: [getattr(batch, name) for batch in batches]
    return TokenBatch(
        joined(field("src"), PAD), joined(field("roles"), ROLE_ID["pad"]), joined(field("tgt_in"), PAD),
        joined(field("tgt_out"), PAD),
    )  # fmt: skip


def source_text(task: Task) -> str:
    """The encoder input of ``task`` as one character per token (``$`` stands for EOS)."""
    examples = "|".join(f"{ex_in}>{ex_out}" for ex_in, ex_out in task.examples)
    return f"{task.alphabet}|{examples}|{task.query}{_EOS_CHAR}"


def source_labels(task: Task) -> tuple[str, ...]:
    """The `position_labels` of ``task``'s encoder input (``a·0`` .. ``EOS·38``), as the figures show them."""
    return position_labels(display_token(int(t)) for t in _char_matrix([source_text(task)])[0])


def _char_matrix(texts: Sequence[str]) -> np.ndarray:
    """Map strings to a PAD-filled [n, longest] id matrix in one vectorised pass."""
    width = max((len(t) for t in texts), default=0)
    # A non-ASCII symbol becomes one "?" (not a token), so that it is named in the error below.
    joined = "".join(t.ljust(width, _PAD_CHAR) for t in texts).encode("ascii", errors="replace")
    ids = _LUT[np.frombuffer(joined, dtype=np.uint8)].reshape(len(texts), width)
    if (ids < 0).any():
        bad = sorted({ch for t in texts for ch in t if _LUT[ord(ch) % 256] < 0 or ord(ch) > 255})
        raise ValueError(f"cannot tokenize symbol(s) {bad}; allowed: letters a-z, '|', '>'")
    return ids


def source_roles(src: np.ndarray) -> np.ndarray:
    """Role id of every encoder position (see ``vocab.ROLES``) for a PAD-filled id matrix."""
    is_sep, is_arrow = src == SEP, src == ARROW
    seg = np.cumsum(is_sep, axis=1, dtype=np.int16)
    arrows = np.cumsum(is_arrow, axis=1, dtype=np.int16)
    arrows_at_last_sep = np.maximum.accumulate(np.where(is_sep, arrows, 0), axis=1)
    after_arrow = arrows > arrows_at_last_sep
    is_letter = src < SEP
    roles = np.full(src.shape, ROLE_ID["pad"], dtype=np.int64)
    roles[is_letter] = ROLE_ID["example_in"]
    roles[is_letter & after_arrow] = ROLE_ID["example_out"]
    roles[is_letter & (seg == 0)] = ROLE_ID["alphabet"]
    roles[is_letter & (seg == is_sep.sum(axis=1, keepdims=True))] = ROLE_ID["query"]
    roles[is_sep] = ROLE_ID["separator"]
    roles[is_arrow] = ROLE_ID["arrow"]
    roles[src == EOS] = ROLE_ID["eos"]
    return roles


def encode_tasks(tasks: Sequence[Task], with_answers: bool | None = None) -> TokenBatch:
    """Tokenize ``tasks`` into one padded batch.

    ``with_answers`` defaults to True when every task has an answer. Raises ValueError when answers are
    asked for but missing, or for an empty list.
    """
    if len(tasks) == 0:
        raise ValueError("cannot tokenize an empty list of tasks")
    has_answers = all(t.answer is not None for t in tasks)
    with_answers = has_answers if with_answers is None else with_answers
    if with_answers and not has_answers:
        raise ValueError("with_answers=True but some tasks have no answer")
    src = _char_matrix([source_text(t) for t in tasks])
    roles = torch.from_numpy(source_roles(src))
    if not with_answers:
        return TokenBatch(torch.from_numpy(src), roles)
    tgt_in = _char_matrix([">" + t.answer for t in tasks])  # type: ignore[operator]
    tgt_out = _char_matrix([t.answer + _EOS_CHAR for t in tasks])  # type: ignore[operator]
    return TokenBatch(torch.from_numpy(src), roles, torch.from_numpy(tgt_in), torch.from_numpy(tgt_out))


def _refuse_outside_vocabulary(ids: list[int]) -> None:
    """Raise ValueError naming the ids of ``ids`` outside the vocabulary (``-1`` would index from the end)."""
    outside = sorted({token for token in ids if not 0 <= token < VOCAB_SIZE})
    raise ValueError(f"token id(s) {outside} outside the vocabulary: ids run 0..{VOCAB_SIZE - 1}")


def _answer(tokens: list[int], skip_start: bool) -> str:
    """`decode` of ids already known to lie in the vocabulary."""
    if skip_start and tokens and tokens[0] == ARROW:
        tokens = tokens[1:]
    out = []
    for token in tokens:
        if token == EOS:
            break
        out.append(TOKEN_STRINGS[token])
    return "".join(out)


def decode(ids: Sequence[int] | Tensor, skip_start: bool = False) -> str:
    """Turn decoder ids into an answer string: EOS ends it. A model's generated tokens hold no start symbol, so
    a ``>`` the model emitted stays in the answer (and is scored wrong); ``skip_start=True`` drops a leading
    ``>`` (a decoder input row: ``>`` then the answer).

    Tokens other than letters are kept as their symbols (``|``, ``>``, ``<pad>``), so a malformed output
    never equals a letter-only answer. Raises ValueError naming any id outside the vocabulary (0..29), even
    one after EOS.
    """
    tokens = ids.tolist() if isinstance(ids, Tensor) else list(ids)
    if tokens and (min(tokens) < 0 or max(tokens) >= VOCAB_SIZE):
        _refuse_outside_vocabulary(tokens)
    return _answer(tokens, skip_start)


def decode_batch(ids: Int[Tensor, "batch pos"], skip_start: bool = False) -> list[str]:
    """``decode`` every row of a batch of decoder ids (the ids are checked once, for the whole batch)."""
    if ids.numel() and (ids.min() < 0 or ids.max() >= VOCAB_SIZE):
        _refuse_outside_vocabulary(ids.flatten().tolist())
    return [_answer(row, skip_start) for row in ids.tolist()]
