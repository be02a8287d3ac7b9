"""What both patching engines share: the patch format, the engine protocol and the head replacement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.data.tokenizer import TokenBatch

ENGINES: tuple[str, ...] = ("hooks", "nnsight")

LayerPatches = dict[int, list[tuple[int, Tensor]]]
"""Encoder layer -> [(head index, replacement pattern ``[batch, q_pos, k_pos]``)]."""


@runtime_checkable
class Engine(Protocol):
    """How patterns are read and patched: ``patterns`` returns the encoder patterns of ``layers``
    (``[batch, head, q_pos, k_pos]`` each); ``generate`` greedy-decodes with ``patches`` applied and returns the
    tokens and the encoder output (memory)."""

    def patterns(
        self, batch: TokenBatch, layers: Sequence[int]
    ) -> dict[int, Float[Tensor, "batch head q_pos k_pos"]]: ...

    def generate(
        self, batch: TokenBatch, patches: LayerPatches
    ) -> tuple[Int[Tensor, "batch n"], Float[Tensor, "batch src_pos d_model"]]: ...


def check_engine(engine: str) -> None:
    """Raise ValueError unless ``engine`` is one of `ENGINES`."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def replace_heads(
    pattern: Float[Tensor, "batch head q_pos k_pos"], entries: Sequence[tuple[int, Tensor]]
) -> Float[Tensor, "batch head q_pos k_pos"]:
    """``pattern`` with head ``h``'s pattern replaced for every ``(h, replacement)`` (a copy if any)."""
    if not entries:
        return pattern
    patched = pattern.clone()
    for head, replacement in entries:
        patched[:, head] = replacement
    return patched
