"""`ModelConfig`: the hyper-parameters of the encoder-decoder (defaults: the paper's model)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from lsa_interp.data.vocab import VOCAB_SIZE

MAX_LEN_LIMIT = 65_536
"""The longest position table a config may ask for (64 Ki rows: 32 MiB at d_model 128)."""


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the post-LN encoder-decoder; the defaults are the paper's 1,400,606-parameter model.

    ``max_len`` is the length of the sinusoidal position table (the longest encoder or decoder input).
    ``use_hook_result`` adds the opt-in per-head ``attn.hook_result`` hook points.
    """

    d_model: int = 128
    n_heads: int = 8
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    d_mlp: int = 512
    dropout: float = 0.1
    vocab_size: int = VOCAB_SIZE
    max_len: int = 512
    ln_eps: float = 1e-5
    use_hook_result: bool = False

    def __post_init__(self) -> None:
        for field in fields(self):
            value, kind = getattr(self, field.name), field.type
            if kind == "bool":
                ok, wanted = isinstance(value, bool), "true or false"
            else:
                numbers = (int, float) if kind == "float" else (int,)
                ok, wanted = isinstance(value, numbers) and not isinstance(value, bool), f"a number ({kind})"
            if not ok:
                raise ValueError(f"{field.name} must be {wanted}, got {value!r}")
        for name in ("d_model", "n_heads", "d_mlp", "vocab_size", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.d_model % 2:
            raise ValueError(f"d_model must be even (sinusoidal positions pair its dimensions), got {self.d_model}")
        if self.n_encoder_layers < 1 or self.n_decoder_layers < 1:
            raise ValueError("the model needs at least one encoder and one decoder layer")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not 0.0 < self.ln_eps < math.inf:
            raise ValueError(f"ln_eps must be a positive number (layer norm's epsilon), got {self.ln_eps}")
        if self.vocab_size < VOCAB_SIZE:
            raise ValueError(
                f"vocab_size must be at least {VOCAB_SIZE} (the tokenizer's tokens), got {self.vocab_size}"
            )
        if self.max_len > MAX_LEN_LIMIT:
            raise ValueError(
                f"max_len must be at most {MAX_LEN_LIMIT:,} (rows of the position table; the paper's longest "
                f"input has 93 tokens), got {self.max_len:,}"
            )

    @property
    def d_head(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads

    @property
    def n_params(self) -> int:
        """Trainable parameters of the model this config builds: each stack's embedding, layers and final norm,
        and the unembedding (the sinusoidal position table is a buffer, not a parameter)."""
        d, d_mlp, vocab = self.d_model, self.d_mlp, self.vocab_size
        attention, mlp, norm = 4 * d * d + 4 * d, 2 * d * d_mlp + d_mlp + d, 2 * d
        encoder_layer, decoder_layer = attention + mlp + 2 * norm, 2 * attention + mlp + 3 * norm
        stacks = self.n_encoder_layers * encoder_layer + self.n_decoder_layers * decoder_layer + 2 * (vocab * d + norm)
        return stacks + d * vocab + vocab

    def n_layers(self, stack: str) -> int:
        """Number of layers of ``"encoder"`` or ``"decoder"`` (raises ValueError for another stack name)."""
        if stack == "encoder":
            return self.n_encoder_layers
        if stack == "decoder":
            return self.n_decoder_layers
        raise ValueError(f"unknown stack {stack!r}; expected 'encoder' or 'decoder'")

    def to_dict(self) -> dict[str, Any]:
        """Return the config as a JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Build a config from ``to_dict`` output; raises ValueError on unknown keys or bad values."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown model config key(s) {unknown}; known: {sorted(known)}")
        return cls(**data)
