"""`DatasetConfig` and the paper's 13 dataset presets (SPEC section 6)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field

from lsa_interp.data.alphabets import PERMUTATION_LEVELS, most_permuted
from lsa_interp.data.transformations import PAPER, SEEN, TRANSFORMATIONS
from lsa_interp.utils import check_type


@dataclass(frozen=True)
class DatasetConfig:
    """Everything that defines a generated dataset, apart from the seed.

    ``n_alphabets`` permuted alphabets (an equal share per permutation level) plus the standard one are
    used for training. ``match_size_of`` names a preset whose split sizes (same seed) this dataset is
    down-sampled to. The new-alphabet test set uses ``n_new_alphabets`` fresh alphabets and
    ``new_alphabet_reshuffle`` pairings per problem, without copy rows.

    Raises ValueError naming the first field of the wrong type or out of range, and when the permutation levels
    have fewer distinct alphabets than ``n_alphabets + n_new_alphabets`` (see `most_permuted`).
    """

    name: str
    n_alphabets: int = 20
    copy: bool = True
    n_shots: int = 1
    n_reshuffle: int = 10
    match_size_of: str | None = None
    train_transformations: tuple[str, ...] = SEEN
    eval_transformations: tuple[str, ...] = PAPER
    window_lengths: tuple[int, ...] = (3, 4, 5, 6, 7)
    permutation_levels: tuple[int, ...] = PERMUTATION_LEVELS
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    eval_size_divisor: int = 8
    n_new_alphabets: int = 20
    new_alphabet_reshuffle: int = 5
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        self._check_types()
        if self.n_alphabets < 0:
            raise ValueError(f"n_alphabets must be 0 or more (0: the standard alphabet only), got {self.n_alphabets}")
        for name in ("eval_size_divisor", "n_new_alphabets"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not all(2 <= level <= 26 for level in self.permutation_levels):
            raise ValueError(f"permutation_levels must lie in 2..26 (letters moved), got {self.permutation_levels}")
        for name in ("n_alphabets", "n_new_alphabets"):
            if getattr(self, name) % len(self.permutation_levels):
                raise ValueError(
                    f"{name} must be a multiple of {len(self.permutation_levels)} (one share per level), "
                    f"got {getattr(self, name)}"
                )
        most = most_permuted(self.permutation_levels)
        if self.n_alphabets + self.n_new_alphabets > most:
            raise ValueError(
                f"n_alphabets + n_new_alphabets must be at most {most}, the distinct alphabets permutation_levels "
                f"{self.permutation_levels} can supply, got {self.n_alphabets} + {self.n_new_alphabets}"
            )
        if not 1 <= self.n_shots <= 5:
            raise ValueError(f"n_shots must be between 1 and 5, got {self.n_shots}")
        if self.n_reshuffle < 1 or self.new_alphabet_reshuffle < 1:
            raise ValueError("n_reshuffle and new_alphabet_reshuffle must be at least 1")
        unknown = [t for t in (*self.train_transformations, *self.eval_transformations) if t not in TRANSFORMATIONS]
        if unknown:
            raise ValueError(f"unknown transformation(s) {unknown}; known: {', '.join(TRANSFORMATIONS)}")
        if not set(self.train_transformations) <= set(self.eval_transformations):
            raise ValueError("train_transformations must be a subset of eval_transformations")
        if min(self.window_lengths) < 3 or max(self.window_lengths) > 13:
            raise ValueError(f"window lengths must lie in 3..13, got {self.window_lengths}")
        fractions = self.split_fractions
        if not all(0 < f < 1 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:  # NaN lies in no range
            raise ValueError(f"split_fractions must each lie between 0 and 1 (exclusive) and sum to 1, got {fractions}")
        if self.match_size_of is not None and self.match_size_of not in PRESETS_SPEC:
            raise ValueError(f"match_size_of must name a preset, got {self.match_size_of!r}")

    def _check_types(self) -> None:
        """Raise ValueError naming a field whose value has the wrong type (a grid file's or a manifest's values
        carry none: ``n_alphabets = "a"`` failed later, as a TypeError of the arithmetic)."""

        def integer(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        def sequence_of(check: Callable[[object], bool]) -> Callable[[object], bool]:
            return lambda value: isinstance(value, tuple | list) and len(value) > 0 and all(map(check, value))

        def number(value: object) -> bool:
            return isinstance(value, int | float) and not isinstance(value, bool)

        checks: dict[str, tuple[Callable[[object], bool], str]] = {
            "name": (lambda v: isinstance(v, str), "a string"),
            "copy": (lambda v: isinstance(v, bool), "true or false"),
            "match_size_of": (lambda v: v is None or isinstance(v, str), "a preset name"),
            "notes": (lambda v: isinstance(v, str), "a string"),
            "train_transformations": (sequence_of(lambda t: isinstance(t, str)), "a list of rule names"),
            "eval_transformations": (sequence_of(lambda t: isinstance(t, str)), "a list of rule names"),
            "window_lengths": (sequence_of(integer), "a list of integers"),
            "permutation_levels": (sequence_of(integer), "a list of integers"),
            "split_fractions": (lambda v: sequence_of(number)(v) and len(v) == 3, "three numbers"),
        }
        counts = ("n_alphabets", "n_shots", "n_reshuffle", "eval_size_divisor", "n_new_alphabets")
        counts += ("new_alphabet_reshuffle",)
        checks |= {name: (integer, "an integer") for name in counts}
        for name, (check, wanted) in checks.items():
            if not check(getattr(self, name)):
                raise ValueError(f"{name} must be {wanted}, got {getattr(self, name)!r}")

    def to_dict(self) -> dict:
        """JSON-ready form (tuples become lists)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DatasetConfig:
        """Inverse of ``to_dict``; raises ValueError for unknown or missing keys, TypeError for data that is not a
        dict."""
        check_type(data, dict, "a dataset config is a dict (a JSON object)")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"unknown dataset config key(s): {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}"
            )
        fields = cls.__dataclass_fields__.values()
        required = {f.name for f in fields if f.default is MISSING and f.default_factory is MISSING}
        if required - set(data):
            raise ValueError(f"the dataset config lacks {', '.join(sorted(required - set(data)))}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


PRESETS_SPEC: dict[str, dict] = {
    "nocopy-20": dict(
        copy=False,
        n_reshuffle=20,
        match_size_of="copy-20",
        notes="no copy tasks, 20 reshuffles so that it matches copy-20's size",
    ),
    "copy-20": dict(),
    **{f"copy-{n}": dict(n_alphabets=n, match_size_of="copy-20") for n in (40, 60, 80, 100, 140, 200, 400)},
    **{f"copy-20-{k}shot": dict(n_shots=k) for k in (2, 3, 4, 5)},
}

DEFAULT_DATA_SEED = 0
"""The dataset seed `lsa-interp train`, a stack and a sweep generate with unless told another."""

PRESETS: dict[str, DatasetConfig] = {name: DatasetConfig(name=name, **kw) for name, kw in PRESETS_SPEC.items()}
"""The paper's 13 dataset variants by name."""


def get_preset(name: str) -> DatasetConfig:
    """Look a preset up by name; raises ValueError listing the presets."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None


def trained_data_seed(metadata: Mapping[str, object]) -> int:
    """The seed of the dataset a model was trained on: its metadata's ``data_seed``, else `DEFAULT_DATA_SEED`.

    Not the model's own ``seed``: every trainer generates its data with the data seed whatever the model's
    (a stack's replicates, seeds ``seed + i``, share one dataset), and records it. A ``data_seed`` of None
    (a snapshot whose dataset is gone) counts as unrecorded. Raises ValueError for any other value that is
    not a non-negative integer.
    """
    value = metadata.get("data_seed")
    if value is None:
        return DEFAULT_DATA_SEED
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"the model's metadata records data_seed {value!r}; a dataset seed is an integer >= 0")
    return value
