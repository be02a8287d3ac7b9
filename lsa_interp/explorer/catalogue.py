"""The models an explorer session may open, fixed at start: the browser names one, never a path.

`discover_models` lists the shipped checkpoints (``checkpoints/NAME``), the replicates
(``checkpoints/replicates/*``) and any run or checkpoint directories given on the command line; a run
directory contributes its ``model/`` or every ``replicate-{i}/model``. `ModelCatalogue` loads each model
on first use and keeps per-model results that are slow to recompute (reference means, matching heads,
test sets); its lock serialises model runs, since hooks attach to the shared model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lsa_interp.model.checkpoint import (
    CONFIG_FILE,
    available_models,
    checkpoint_path,
    load_model,
)
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.training.run_dir import MODEL_DIR


@dataclass(frozen=True)
class ModelEntry:
    """One model of the catalogue: where it loads from (``path``, None for a model given in memory), the run
    directory holding its ``metrics.jsonl`` (None for a bare checkpoint) and its replicate index within a
    stacked run."""

    name: str
    path: Path | None = None
    run_dir: Path | None = None
    replicate: int | None = None


def _is_checkpoint(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file()


def _replicate_index(path: Path) -> int | None:
    """i for a directory named ``replicate-{i}``, else None."""
    prefix, _, index = path.name.rpartition("-")
    return int(index) if prefix == "replicate" and index.isdigit() else None


def entries_for_path(path: str | Path) -> list[ModelEntry]:
    """The models in a checkpoint directory, a run directory (``model/`` or ``replicate-{i}/model``), a sweep
    directory (every run of its ``stacks/``) or a directory of checkpoints. Raises FileNotFoundError when
    ``path`` holds none."""
    path = Path(path).expanduser().resolve()
    if _is_checkpoint(path):
        if path.name != MODEL_DIR:
            return [ModelEntry(path.name, path)]
        replicate = _replicate_index(path.parent)
        if replicate is not None:  # one run of a stack: the stack's directory holds its history
            stack = path.parent.parent
            return [ModelEntry(f"{stack.name}/{path.parent.name}", path, stack, replicate)]
        return [ModelEntry(path.parent.name, path, path.parent)]
    found = path.glob("stacks/*/replicate-*/model")
    runs = sorted(
        (p for p in found if _is_checkpoint(p)), key=lambda p: (p.parent.parent.name, _replicate_index(p.parent) or 0)
    )
    if runs:  # a sweep directory: its finished runs
        return [
            replace(entries_for_path(p)[0], name=f"{path.name}/{p.parent.parent.name}/{p.parent.name}") for p in runs
        ]
    if _is_checkpoint(path / MODEL_DIR):
        return [ModelEntry(path.name, path / MODEL_DIR, path)]
    replicas = [
        p for p in path.glob("replicate-*/model") if _is_checkpoint(p) and _replicate_index(p.parent) is not None
    ]
    if replicas:
        return sorted((entries_for_path(p)[0] for p in replicas), key=lambda e: e.replicate)
    nested = [p for p in sorted(path.iterdir()) if _is_checkpoint(p)] if path.is_dir() else []
    if nested:
        return [ModelEntry(f"{path.name}/{p.name}", p) for p in nested]
    raise FileNotFoundError(f"{path} holds no model: expected a checkpoint directory, a run directory or replicates")


def discover_models(extra: Iterable[str | Path] = (), shipped: bool = True) -> list[ModelEntry]:
    """The models of every name or path in ``extra`` (first, in order), then, with ``shipped``, the shipped
    checkpoints and replicates. A shipped name is that checkpoint; a path is read by `entries_for_path`.
    Names are made unique with a ``#n`` suffix. The models of ``extra`` are loaded once here (the loader's checks:
    config, SHA-256, weights), so that a broken one fails at start, not when the browser opens it; the shipped
    ones are trusted. Raises FileNotFoundError for an item that holds no model (for one that does not exist,
    listing the shipped names), CheckpointError (a ValueError) for a broken one.
    """
    entries: list[ModelEntry] = []
    names = available_models()
    for item in extra:
        if str(item) in names and not Path(item).exists():
            entries.append(ModelEntry(str(item), checkpoint_path(item)))
        elif not Path(item).expanduser().exists():  # a mistyped name: list the names, as the other commands do
            listing = ", ".join(names) if names else "none"
            raise FileNotFoundError(f"no checkpoint named or at {str(item)!r}; available names: {listing}")
        else:
            entries += entries_for_path(item)
    for entry in entries:
        load_model(entry.path)
    if shipped:  # by the loader's own resolution: a shipped `.pt` is the file, not a directory of its stem
        entries += [ModelEntry(name, checkpoint_path(name)) for name in names]
    return _unique(entries)


def _unique(entries: list[ModelEntry]) -> list[ModelEntry]:
    seen: dict[str, int] = {}
    result = []
    for entry in entries:
        if entry.path is not None and any(e.path == entry.path for e in result):
            continue
        count = seen.get(entry.name, 0)
        seen[entry.name] = count + 1
        name = entry.name if count == 0 else f"{entry.name}#{count + 1}"
        result.append(ModelEntry(name, entry.path, entry.run_dir, entry.replicate))
    return result


class ModelCatalogue:
    """The session's models by name (the in-memory ``models`` first, then ``entries``), loaded on first use,
    with a per-model memo of slow results."""

    def __init__(
        self, entries: Iterable[ModelEntry] = (), models: Mapping[str, HookedEncoderDecoder] | None = None
    ) -> None:
        models = dict(models or {})
        self.entries: dict[str, ModelEntry] = {name: ModelEntry(name) for name in models}
        self.entries.update({e.name: e for e in entries if e.name not in models})
        self._models: dict[str, HookedEncoderDecoder] = {name: model.eval() for name, model in models.items()}
        if not self.entries:
            raise ValueError("the explorer needs at least one model")
        self._memo: dict[tuple[str, str], Any] = {}
        self.lock = threading.RLock()

    @property
    def names(self) -> list[str]:
        """Every model name, in catalogue order."""
        return list(self.entries)

    def entry(self, name: str) -> ModelEntry:
        """The entry of ``name``; raises ValueError naming the models on offer."""
        if name not in self.entries:
            raise ValueError(f"unknown model {name!r}; this explorer offers: {', '.join(self.entries)}")
        return self.entries[name]

    def model(self, name: str) -> HookedEncoderDecoder:
        """The model ``name`` (eval mode), loaded once. Raises ValueError for an unknown or broken model."""
        entry = self.entry(name)
        with self.lock:
            if name not in self._models:
                self._models[name] = load_model(entry.path).eval()
            return self._models[name]

    def memo(self, name: str, key: str, make: Callable[[HookedEncoderDecoder], Any]) -> Any:
        """``make(model)`` computed once per model and ``key``; an exception is re-raised and not kept."""
        with self.lock:
            if (name, key) not in self._memo:
                self._memo[name, key] = make(self.model(name))
            return self._memo[name, key]
