"""Attention heads of a model and their labels.

The paper names heads 1-based, ``"2.7"`` = encoder layer 2, head 7; the Python API and hook names are
0-based (TransformerLens), so ``"2.7"`` is ``Head("encoder", layer=1, head=6)``. A label may name another
attention block: ``"dec:1.3"`` (decoder self-attention), ``"cross:3.1"`` (decoder cross-attention); a bare
``"L.H"`` is an encoder head.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsa_interp.model.config import ModelConfig
from lsa_interp.utils import check_type

BLOCKS: dict[str, tuple[str, str]] = {
    "enc": ("encoder", "attn"),
    "dec": ("decoder", "attn"),
    "cross": ("decoder", "cross_attn"),
}
"""Label prefix -> (stack, attention module) of the three kinds of attention block."""


@dataclass(frozen=True, order=True)
class Head:
    """One attention head, 0-based: ``stack`` "encoder"/"decoder", ``attn`` "attn"/"cross_attn"."""

    stack: str
    layer: int
    head: int
    attn: str = "attn"

    @property
    def label(self) -> str:
        """The paper's 1-based label: ``"2.7"`` for an encoder head, ``"dec:1.3"``/``"cross:3.1"`` otherwise."""
        prefix = {v: k for k, v in BLOCKS.items()}[(self.stack, self.attn)]
        core = f"{self.layer + 1}.{self.head + 1}"
        return core if prefix == "enc" else f"{prefix}:{core}"

    def hook(self, name: str = "pattern") -> str:
        """The hook name of this head's block, e.g. ``encoder.1.attn.hook_pattern``."""
        return f"{self.stack}.{self.layer}.{self.attn}.hook_{name}"

    def __str__(self) -> str:
        return self.label


def parse_head(text: str, cfg: ModelConfig) -> Head:
    """Parse a 1-based label (``"2.7"``, ``"enc:2.7"``, ``"dec:1.3"``, ``"cross:3.1"``) for a model of ``cfg``.

    Raises ValueError naming the allowed range when the label is malformed or outside the model.
    """
    check_type(text, str, "a head label is a str such as '2.7' or 'cross:3.1'")
    prefix, _, core = text.strip().rpartition(":")
    prefix = prefix or "enc"
    allowed = f"layers 1..{{}} and heads 1..{cfg.n_heads}, e.g. '2.7' (1-based, as in the paper)"
    if prefix not in BLOCKS:
        raise ValueError(f"bad head {text!r}: the prefix must be one of {', '.join(BLOCKS)}")
    stack, attn = BLOCKS[prefix]
    n_layers = cfg.n_layers(stack)
    layer_text, dot, head_text = core.partition(".")
    if not (dot and core.isascii() and layer_text.isdigit() and head_text.isdigit()):  # not "２.７" (full width)
        raise ValueError(f"bad head {text!r}: write LAYER.HEAD with {allowed.format(n_layers)}")
    layer, head = int(layer_text), int(head_text)
    if not (1 <= layer <= n_layers and 1 <= head <= cfg.n_heads):
        raise ValueError(f"no head {text!r} in this model: {stack} has {allowed.format(n_layers)}")
    return Head(stack, layer - 1, head - 1, attn)


def all_heads(cfg: ModelConfig, stack: str = "encoder", attn: str = "attn") -> list[Head]:
    """Every head of one kind of block, in layer-then-head order."""
    return [Head(stack, layer, head, attn) for layer in range(cfg.n_layers(stack)) for head in range(cfg.n_heads)]


def parse_heads(text: str, cfg: ModelConfig) -> list[Head]:
    """One head's label, or every head of a layer with ``*`` for the head (``"2.*"``, ``"cross:3.*"``), for a model
    of ``cfg``. Raises ValueError as `parse_head`."""
    check_type(text, str, "heads are a label such as '2.7' or a layer's heads such as '2.*'")
    prefix, colon, core = text.strip().rpartition(":")
    layer, dot, head = core.partition(".")
    if not (dot and head.strip() == "*"):
        return [parse_head(text, cfg)]
    try:
        first = parse_head(f"{prefix}{colon}{layer}.1", cfg)
    except ValueError as error:
        raise ValueError(f"bad heads {text!r}: {error}") from None
    return [Head(first.stack, first.layer, index, first.attn) for index in range(cfg.n_heads)]
