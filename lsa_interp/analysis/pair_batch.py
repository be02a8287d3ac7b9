"""Minimal pairs tokenized for attention-pattern patching: the source and target prompts side by side, checked
to share one token layout (a pattern can only be swapped between aligned prompts)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.data.tokenizer import TokenBatch, encode_tasks
from lsa_interp.data.vocab import ROLE_ID


@dataclass(frozen=True)
class PairBatch:
    """The source and target prompts of minimal pairs, tokenized with the same layout, and their answers."""

    source: TokenBatch
    target: TokenBatch
    source_answers: list[str]
    target_answers: list[str]

    def __len__(self) -> int:
        return len(self.source)

    def changed_positions(self) -> tuple[int, ...]:
        """The encoder positions where some pair's source and target prompts differ (in order)."""
        return tuple(int(p) for p in (self.source.src != self.target.src).any(0).nonzero().flatten())


def pair_batch(pairs: Sequence[MinimalPair]) -> PairBatch:
    """Tokenize ``pairs``. Raises ValueError for no pairs, answers that are missing or equal, or a pair whose
    prompts do not have the same token layout (patterns can only be swapped between aligned prompts)."""
    if not pairs:
        raise ValueError("patching needs at least one minimal pair")
    for index, pair in enumerate(pairs):
        if not pair.source_answer or not pair.target_answer:
            raise ValueError(f"pair {index} lacks an answer; both tasks of a minimal pair need one")
        if pair.source_answer == pair.target_answer:
            raise ValueError(f"pair {index}: source and target answers are both {pair.source_answer!r}")
    source = encode_tasks([p.source for p in pairs], with_answers=False)
    target = encode_tasks([p.target for p in pairs], with_answers=False)
    width = max(source.roles.shape[1], target.roles.shape[1])
    bad = (_pad_roles(source.roles, width) != _pad_roles(target.roles, width)).any(1).nonzero()
    if len(bad):
        pair = pairs[int(bad[0])]
        outs = " vs ".join(repr(",".join(out for _, out in task.examples)) for task in (pair.source, pair.target))
        raise ValueError(
            f"pair {int(bad[0])}: the source and target prompts do not align token for token (example outputs "
            f"{outs}); attention patterns can only be patched between prompts of the same layout"
        )
    return PairBatch(source, target, [p.source_answer for p in pairs], [p.target_answer for p in pairs])


def _pad_roles(roles: Tensor, width: int) -> Tensor:
    return torch.nn.functional.pad(roles, (0, width - roles.shape[1]), value=ROLE_ID["pad"])
