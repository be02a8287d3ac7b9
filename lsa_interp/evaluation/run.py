"""Running a model on a dataset: batched greedy predictions, deterministic subsets, `evaluate_model`."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task as ProgressTask,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from lsa_interp.data.dataset import Dataset, load_dataset
from lsa_interp.data.generate import generate_dataset
from lsa_interp.data.presets import PRESETS, get_preset, trained_data_seed
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import decode_batch, source_text
from lsa_interp.evaluation.result import NEW_ALPHABETS, SEEN_ALPHABETS, SPLIT_OF, EvaluationResult, score_predictions
from lsa_interp.model import HookedEncoderDecoder

DEFAULT_BATCH_SIZE = 512


def evaluation_dataset(
    model: HookedEncoderDecoder,
    preset: str | None = None,
    seed: int | None = None,
    data_dir: str | os.PathLike | None = None,
    splits: tuple[str, ...] = tuple(SPLIT_OF.values()),
    remedy: str = "give a preset or a saved dataset",
) -> Dataset:
    """Return the dataset to evaluate ``model`` on: its val and test_new_alphabets splits (``splits``).

    With ``data_dir``: those splits of that saved dataset (``preset``/``seed``, if given, must match its
    manifest). Otherwise ``preset`` (default: ``model.metadata["preset"]``) is generated with ``seed`` (default:
    `trained_data_seed`: the metadata's ``data_seed``, else 0), every split; a model trained on a dataset of its own
    (a grid's ``[datasets.NAME]``, no paper preset) reads the one its training config names while it is there.
    Raises ValueError for an unknown or missing preset (its message ends with ``remedy``: what the caller's user
    can give instead), a mismatch, or metadata of the wrong type (naming its key: ``preset`` not a string,
    ``train_config`` not an object, its ``data_dir`` not a string), FileNotFoundError for a missing dataset directory.
    """
    if preset is not None:
        get_preset(preset)
    if data_dir is not None:
        dataset = load_dataset(data_dir, splits=splits)
        for name, wanted, found in (("preset", preset, dataset.config.name), ("seed", seed, dataset.seed)):
            if wanted is not None and wanted != found:
                raise ValueError(f"{name} {wanted!r} does not match the dataset in {data_dir} ({name} {found!r})")
        return dataset
    if preset is None:
        preset = _recorded(model.metadata.get("preset"), "preset", str, "a preset is a name (a string)")
        own = _own_dataset(model.metadata) if preset not in PRESETS else None
        if own:
            if not os.path.isdir(own):
                raise ValueError(
                    f"the model trained on a dataset of its own, {own}, not found from here (a path relative to where "
                    "its run started?); pass the dataset with --data"
                )
            return load_dataset(own, splits=splits)
    if preset is None:
        raise ValueError(f"the model's metadata records no training preset, so its dataset is not known; {remedy}")
    if seed is None:
        seed = trained_data_seed(model.metadata)
    return generate_dataset(get_preset(preset), seed)


def _recorded(value: object, key: str, kind: type, allowed: str) -> Any:
    """``value``, the model's metadata's ``key`` (None where it records none). Raises ValueError naming ``key`` and
    saying what is ``allowed`` when it is not of ``kind``."""
    if value is None or isinstance(value, kind):
        return value
    raise ValueError(f"the model's metadata records {key} {value!r}; {allowed}")


def _own_dataset(metadata: Mapping[str, Any]) -> str | None:
    """The dataset directory the model's training config names, None where it names none. Raises ValueError where
    the config is not an object or the directory not a string."""
    train_config = _recorded(metadata.get("train_config"), "train_config", dict, "a training config is a JSON object")
    return _recorded(
        (train_config or {}).get("data_dir"), "train_config.data_dir", str, "a dataset is a path (a string)"
    )


def predict(
    model: HookedEncoderDecoder,
    tasks: Sequence[Task],
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[int], None] | None = None,
) -> list[str]:
    """Return the model's greedy answer to each task (input order), decoded ``batch_size`` tasks at a time.

    Tasks are batched by encoder length. When every task of a batch has an answer, decoding stops after the longest
    answer of the batch + EOS (as the paper did): a longer output cannot match any answer of the batch, so exact
    match is unaffected, though such outputs come back truncated. Runs in eval mode with fp32 matmuls in full
    precision (the model's mode and the process's matmul setting are restored). ``on_batch(n)`` is called after each
    batch of ``n`` tasks. Raises ValueError for a non-positive ``batch_size``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = sorted(range(len(tasks)), key=lambda i: len(source_text(tasks[i])))
    predictions: list[str] = [""] * len(tasks)
    was_training, matmuls = model.training, torch.get_float32_matmul_precision()
    model.eval()
    torch.set_float32_matmul_precision("highest")  # fp32 answers: a tf32 run earlier in the process leaves TF32 on
    try:
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = [tasks[i] for i in rows]
            answers = [t.answer for t in batch]
            limit = {} if None in answers else {"max_new_tokens": max(map(len, answers)) + 1}
            tokens = model.generate(batch, batch_size=batch_size, **limit)
            for i, answer in zip(rows, decode_batch(tokens)):
                predictions[i] = answer
            if on_batch is not None:
                on_batch(len(rows))
    finally:
        model.train(was_training)
        torch.set_float32_matmul_precision(matmuls)
    return predictions


def subsample(tasks: Sequence[Task], limit: int | None, seed: int = 0) -> list[Task]:
    """Return a deterministic random subset of at most ``limit`` tasks in their original order (all if None).

    Raises ValueError when ``limit`` is not positive.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    if limit is None or limit >= len(tasks):
        return list(tasks)
    return [tasks[i] for i in sorted(random.Random(seed).sample(range(len(tasks)), limit))]


class _RateColumn(ProgressColumn):
    """Tasks per second."""

    def render(self, task: ProgressTask) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} tasks/s" if speed else "", style="progress.data.speed")


def _progress_bar(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )


def evaluate_model(
    model: HookedEncoderDecoder,
    dataset: Dataset,
    limit: int | None = None,
    progress: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    model_name: str = "",
) -> EvaluationResult:
    """Decode ``dataset``'s val and test_new_alphabets splits greedily and score them (see `score_predictions`).

    ``limit``: evaluate a deterministic random subset of at most that many rows per split. ``progress``:
    show a progress bar (rate, ETA) on stderr. Seen transformations are the dataset's training
    transformations. Raises ValueError when a split is missing or ``limit``/``batch_size`` is not positive.
    """
    missing = [split for split in SPLIT_OF.values() if split not in dataset.splits]
    if missing:
        raise ValueError(f"the dataset lacks split(s) {missing}; evaluation needs {list(SPLIT_OF.values())}")
    tasks = {key: subsample(dataset.splits[split], limit) for key, split in SPLIT_OF.items()}
    started = time.perf_counter()
    predictions: dict[str, list[str]] = {}
    with _progress_bar(progress) as bar:
        for key, split_tasks in tasks.items():
            job = bar.add_task(f"decoding {SPLIT_OF[key]}", total=len(split_tasks))
            predictions[key] = predict(model, split_tasks, batch_size, lambda n, job=job: bar.advance(job, n))
    result = score_predictions(
        tasks[SEEN_ALPHABETS],
        predictions[SEEN_ALPHABETS],
        tasks[NEW_ALPHABETS],
        predictions[NEW_ALPHABETS],
        dataset.config.train_transformations,
    )
    return replace(
        result,
        model=model_name,
        preset=dataset.config.name,
        training_preset=model.metadata.get("preset"),
        seed=dataset.seed,
        limit=limit,
        seconds=round(time.perf_counter() - started, 3),
    )
