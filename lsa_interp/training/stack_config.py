"""`StackConfig`: several runs trained together as one stack of models, each with its own data and batches.

Every replicate of a stack has its own `RunSpec` (dataset, seed, batching method, epochs), hence its own
batch order, epoch length and learning-rate schedule; what the replicates share is what one set of
kernels needs: the model architecture, the batch size, the precision and the device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from lsa_interp.data.batching import BATCHING_METHODS
from lsa_interp.training.config import MAX_SEED, Recipe, TrainConfig, check_fields


@dataclass(frozen=True)
class RunSpec:
    """One replicate of a stack: trained on ``data_dir`` (a saved dataset) with ``seed`` and ``batching``.

    ``seed`` seeds the initial weights and the batch order, exactly as a single run with that seed. Dropout
    masks come from the stack's one random stream (seeded with its first run's seed), so with dropout a run's
    trajectory also depends on the stack it trains in. ``name`` labels the run in logs and tables (default:
    ``{preset}-{batching}-s{seed}``).
    """

    data_dir: str
    seed: int = 0
    batching: str = "random"
    epochs: int = 20
    preset: str | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if self.batching not in BATCHING_METHODS:
            raise ValueError(f"unknown batching {self.batching!r}; choose one of: {', '.join(BATCHING_METHODS)}")
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be in 0..{MAX_SEED:,}, got {self.seed:,}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be positive, got {self.epochs}")
        if not self.name:
            object.__setattr__(self, "name", f"{self.preset or 'data'}-{self.batching}-s{self.seed}")


@dataclass(frozen=True, kw_only=True)
class StackConfig(Recipe):
    """The runs of one stack and the `Recipe` they share (defaults: the paper's).

    Raises ValueError for no runs, two runs of one name, or a bad recipe value.
    """

    runs: tuple[RunSpec, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.runs:
            raise ValueError("a stack needs at least one run")
        names = [run.name for run in self.runs]
        if len(set(names)) != len(names):
            raise ValueError(f"run names in a stack must differ, got {names}")

    @property
    def replicates(self) -> int:
        """How many models the stack trains."""
        return len(self.runs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (`from_dict` inverts it)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StackConfig:
        """Inverse of `to_dict`. Raises ValueError naming missing or unknown keys and values of the wrong type."""
        check_fields(cls, data, "stack config", ("betas", "runs"))
        for run in data["runs"]:
            check_fields(RunSpec, run, "stack config's run", ())
        runs = tuple(RunSpec(**run) for run in data["runs"])
        return cls(**{**data, "runs": runs, "betas": tuple(data["betas"])})

    @classmethod
    def from_train_config(cls, config: TrainConfig) -> StackConfig:
        """The stack of ``config.replicates`` runs of one recipe, with seeds ``seed .. seed + replicates - 1``."""
        runs = tuple(
            RunSpec(config.data_dir, config.seed + i, config.batching, config.epochs, config.preset)
            for i in range(config.replicates)
        )
        return cls(runs=runs, **{f.name: getattr(config, f.name) for f in fields(Recipe)})

    def with_bounds(self, max_steps: int | None = None, max_minutes: float | None = None) -> StackConfig:
        """This config with new step / time bounds (None keeps the saved one)."""
        bounds = {"max_steps": max_steps, "max_minutes": max_minutes}
        return replace(self, **{k: v for k, v in bounds.items() if v is not None})
