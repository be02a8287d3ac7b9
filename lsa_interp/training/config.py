"""`Recipe`: the training recipe (defaults: the paper's) and bounds; `TrainConfig`: one run of it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from lsa_interp.data.batching import BATCHING_METHODS
from lsa_interp.model.config import ModelConfig
from lsa_interp.utils import NUMBER, check_type, is_json_kind

PRECISIONS = ("fp32", "tf32", "bf16")
"""fp32 (the recipe); tf32 matmuls; bf16 autocast."""

ATTENTIONS = ("sdpa", "triton", "flash")
"""sdpa: ``scaled_dot_product_attention`` (the default); triton: the stacked step's own kernel for short rows and
16-wide heads (`lsa_interp.training.small_attention`; needs the ``triton`` package and a CUDA device); flash:
FlashAttention-2's variable-length kernel over packed rows (`lsa_interp.training.packing.packed_flash`; needs
packing, bf16 and a CUDA device)."""

DEVICES = ("auto", "cpu", "cuda", "cuda:N")
"""auto: CUDA when torch sees a GPU, else the CPU; cuda:N: the GPU of that index."""

ARCHITECTURES = ("hooked", "reference")
"""hooked: `HookedEncoderDecoder` (the default); reference: the same network built from a plain
``torch.nn.Transformer`` (`ReferenceTransformer`), trained by the same loop, to check that a result is not our
model's doing. Both save a hooked checkpoint."""


MAX_SEED = 2**31 - 1
"""The largest seed a run takes: a stack keeps its first run's seed shifted by 32 bits in the int64 counter of its
attention-dropout draws (`lsa_interp.training.stacked_model`)."""

LEGACY_LENGTH_BUCKETING = True
"""``length_bucketing`` of a run whose saved config predates the option: such runs bucketed (docs/training.md)."""


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """What one run and a stack of runs share: the optimizer, schedule, precision, model and bounds (defaults:
    the paper's recipe). Raises ValueError for an unknown precision or device, a non-positive batch size, step or
    time bound, checkpoint or log interval or validation limit, a learning rate that is not a positive finite
    number, AdamW betas outside [0, 1), a negative weight decay or schedule factor, or a model key that is not a
    `ModelConfig` field (its values are checked when the model is built)."""

    batch_size: int = 32
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.01
    warmup_start: float = 1e-4
    final_lr_factor: float = 0.05
    precision: str = "fp32"
    device: str = "auto"
    max_steps: int | None = None
    max_minutes: float | None = None
    checkpoint_every: int = 2000
    log_every: int = 100
    val_limit: int | None = None
    cuda_graph: bool = True
    compile: bool = False
    attention: str = "sdpa"
    packing: bool = False
    length_bucketing: bool = False
    model: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of: {', '.join(PRECISIONS)}")
        if self.device not in DEVICES[:3] and not re.fullmatch(r"cuda:\d+", self.device):
            raise ValueError(f"unknown device {self.device!r}; choose one of: {', '.join(DEVICES)}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"unknown attention {self.attention!r}; choose one of: {', '.join(ATTENTIONS)}")
        if self.attention == "flash" and not (self.packing and self.precision == "bf16"):
            raise ValueError("the flash attention runs on packed rows in bf16: use packing and precision bf16")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be positive, got {self.batch_size}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max steps must be positive, got {self.max_steps}")
        if self.max_minutes is not None and not 0 < self.max_minutes < math.inf:
            raise ValueError(f"max minutes must be a positive finite number, got {self.max_minutes}")
        for name in ("checkpoint_every", "log_every", "val_limit"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0 < self.lr < math.inf:
            raise ValueError(f"lr must be a positive finite number, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= beta < 1 for beta in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas}")
        for name in ("weight_decay", "warmup_start", "final_lr_factor"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be at least 0, got {getattr(self, name)}")
        model_keys = [f.name for f in fields(ModelConfig)]
        if not isinstance(self.model, dict) or set(self.model) - set(model_keys):
            raise ValueError(
                f"model must map model config keys ({', '.join(model_keys)}) to values, got {self.model!r}"
            )


@dataclass(frozen=True, kw_only=True)
class TrainConfig(Recipe):
    """One run: its dataset (``data_dir`` holds a saved dataset), seed, epochs and batching, and the `Recipe`.

    ``replicates > 1`` trains seeds ``seed .. seed + replicates - 1`` as one stack; ``compile`` runs
    ``torch.compile`` inside the stacked step, ``attention="triton"`` its own attention kernel, and
    ``packing`` packs each step's rows without padding (`lsa_interp.training.packing`), so such a run is a
    stack (of one model, if need be).
    ``micro_batches > 1`` sorts each batch by source length and cuts it into that many parts, each padded to
    its own longest row, whose token-weighted gradients add up to the batch's before the one optimizer step:
    the same batches and updates up to rounding, less padding (faster on CPU; one model's eager step only).
    Raises ValueError for an unknown batching method, precision or architecture, or a combination no trainer
    runs.
    """

    data_dir: str
    preset: str | None = None
    seed: int = 0
    epochs: int = 20
    batching: str = "random"
    replicates: int = 1
    architecture: str = "hooked"
    micro_batches: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batching not in BATCHING_METHODS:
            raise ValueError(f"unknown batching {self.batching!r}; choose one of: {', '.join(BATCHING_METHODS)}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be positive, got {self.epochs}")
        if self.replicates < 1:
            raise ValueError(f"replicates must be at least 1, got {self.replicates}")
        if not 0 <= self.seed <= MAX_SEED - self.replicates + 1:
            last = MAX_SEED - self.replicates + 1
            raise ValueError(
                f"seed must be in 0..{last:,} (the last replicate's at most {MAX_SEED:,}), got {self.seed:,}"
            )
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {self.architecture!r}; choose one of: {', '.join(ARCHITECTURES)}")
        if self.architecture == "reference" and self.stacked:
            raise ValueError(
                "the reference architecture trains one model at a time: use replicates 1, no compile, sdpa "
                "attention, no packing"
            )
        if not 1 <= self.micro_batches <= self.batch_size:
            raise ValueError(
                f"micro-batches must be between 1 and the batch size {self.batch_size}, got {self.micro_batches}"
            )
        if self.micro_batches > 1 and self.stacked:
            raise ValueError(
                "micro-batches split one model's eager step: use replicates 1, no compile, sdpa attention, no packing"
            )

    @property
    def stacked(self) -> bool:
        """Whether the stacked trainer runs this config (several replicates, compile, the triton attention, or
        packing)."""
        return self.replicates > 1 or self.compile or self.attention != "sdpa" or self.packing

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of ``dataclasses.asdict``. A config saved before ``length_bucketing`` existed ran with it on.
        Raises ValueError naming missing or unknown keys and values of the wrong type."""
        check_fields(cls, data, "training config")
        return cls(**{"length_bucketing": LEGACY_LENGTH_BUCKETING, **data, "betas": tuple(data["betas"])})


_FIELD_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "int": ("an integer", lambda v: is_json_kind(v, int)),
    "float": ("a number", lambda v: is_json_kind(v, NUMBER)),
    "str": ("a string", lambda v: is_json_kind(v, str)),
    "bool": ("true or false", lambda v: is_json_kind(v, bool)),
    "dict[str, Any]": ("an object of model config keys", lambda v: is_json_kind(v, dict)),
    "tuple[float, float]": ("a list of two numbers", lambda v: is_json_kind(v, (list, tuple)) and len(v) == 2
                            and all(is_json_kind(x, NUMBER) for x in v)),
    "tuple[RunSpec, ...]": ("a list of run objects", lambda v: is_json_kind(v, (list, tuple))
                            and all(is_json_kind(run, dict) for run in v)),
}  # fmt: skip
"""What a saved config's value of each field type must be (JSON carries no types), and how to say it."""


def check_fields(cls: type, data: dict[str, Any], what: str, needed: tuple[str, ...] = ("betas",)) -> None:
    """Raise ValueError when ``data`` lacks a field of dataclass ``cls`` without a default (or one of ``needed``), has
    a key that is not a field, or holds a value of the wrong type for its field (a damaged or foreign
    ``train_config.json``; older configs lack newer fields, which keep their defaults)."""
    check_type(data, dict, f"a {what} is a dict (a JSON object)")
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    problems = [f"missing {key!r}" for key in sorted((required | set(needed)) - set(data))]
    problems += [f"unknown key {key!r}" for key in sorted(set(data) - names)]
    for f in fields(cls):
        optional = f.type.endswith(" | None")
        wanted, fits = _FIELD_KINDS[f.type.removesuffix(" | None")]
        if f.name in data and not (fits(data[f.name]) or (optional and data[f.name] is None)):
            problems.append(f"{f.name} must be {wanted}{' or null' if optional else ''}, got {data[f.name]!r}")
    if problems:
        raise ValueError(f"not a {what}: {'; '.join(problems)}")
