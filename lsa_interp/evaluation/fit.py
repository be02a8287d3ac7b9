"""Training fit: does a model solve the rows it was trained on, and how much of that carries over to val?

A model below the paper on seen transformations can be there for two reasons: it has not fit its training rows
(an optimisation problem: more steps, another learning rate, another seed) or it fits them and does not
generalise to the val split's new problem strings. `training_fit` tells them apart by decoding the same number
of non-copy rows of the seen transformations from the train and the val split (seen alphabets both).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lsa_interp.data.alphabets import permutation_level
from lsa_interp.data.dataset import Dataset
from lsa_interp.data.task import Task
from lsa_interp.evaluation.metrics import Accuracy, accuracy, by_transformation, in_paper_order
from lsa_interp.evaluation.run import predict, subsample
from lsa_interp.evaluation.runs_table import FIT_FILE
from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.utils import atomic_write

FIT_SPLITS: tuple[str, ...] = ("train", "val")
"""The splits compared: the training rows and the val split's (same alphabets, other problem strings)."""
FIT_FILES: dict[str, str] = {"json": FIT_FILE, "html": "fit.html"}
FIT_ROWS = 4000
"""Rows per split that a sweep's evaluation and `lsa-interp ship` decode for ``fit.json``."""


@dataclass(frozen=True)
class FitResult:
    """Exact match on ``rows`` non-copy seen-transformation rows per split (the rows decoded in each): overall, by
    transformation and by the alphabet's permutation level (letters out of their standard place; 0 = the standard
    alphabet).

    ``overall[split]``, ``by_transformation[split][name]`` and ``by_level[split][level]`` are `Accuracy` counts
    for split ``train``/``val``.
    """

    model: str
    preset: str
    seed: int
    rows: int
    overall: dict[str, Accuracy]
    by_transformation: dict[str, dict[str, Accuracy]]
    by_level: dict[str, dict[int, Accuracy]]

    @property
    def gap(self) -> float:
        """Train minus val accuracy, in points."""
        return self.overall["train"].percent - self.overall["val"].percent

    def to_dict(self) -> dict:
        """A JSON-ready dict of every count and percentage."""
        return {
            "model": self.model,
            "preset": self.preset,
            "seed": self.seed,
            "rows": self.rows,
            "overall": {split: acc.to_dict() for split, acc in self.overall.items()},
            "gap_points": self.gap,
            "by_transformation": {
                split: {name: acc.to_dict() for name, acc in table.items()}
                for split, table in self.by_transformation.items()
            },
            "by_permutation_level": {
                split: {str(level): acc.to_dict() for level, acc in table.items()}
                for split, table in self.by_level.items()
            },
        }


def fit_rows(tasks: Sequence[Task], seen: Sequence[str], rows: int, seed: int = 0) -> list[Task]:
    """A deterministic random subset of at most ``rows`` of ``tasks``' non-copy rows of the ``seen`` rules."""
    keep = set(seen)
    return subsample([t for t in tasks if not t.is_copy and t.transformation in keep], rows, seed)


def fit_pool_sizes(dataset: Dataset) -> dict[str, int]:
    """The non-copy rows of the seen transformations in each of ``dataset``'s `FIT_SPLITS` (the rows a training fit
    draws from). Raises ValueError when the dataset lacks one of the splits or a split has no such rows."""
    missing = [split for split in FIT_SPLITS if split not in dataset.splits]
    if missing:
        raise ValueError(f"the dataset lacks split(s) {missing}; the training fit needs {list(FIT_SPLITS)}")
    seen = set(dataset.config.train_transformations)
    sizes = {
        split: sum(not t.is_copy and t.transformation in seen for t in dataset.splits[split]) for split in FIT_SPLITS
    }
    for split, size in sizes.items():
        if not size:
            raise ValueError(f"the {split} split has no non-copy rows of the seen transformations")
    return sizes


def training_fit(
    model: HookedEncoderDecoder, dataset: Dataset, rows: int = FIT_ROWS, model_name: str = "", batch_size: int = 512
) -> FitResult:
    """Decode ``rows`` non-copy seen-transformation rows of ``dataset``'s train and val splits and score them; when
    a split has fewer such rows (`fit_pool_sizes`), as many rows of each split as the smaller one has. The result
    records the rows decoded per split.

    Raises ValueError when the dataset lacks the train or val split, ``rows`` is not positive, or a split has
    no such rows.
    """
    if rows < 1:
        raise ValueError(f"rows must be positive, got {rows}")
    rows = min(rows, *fit_pool_sizes(dataset).values())
    overall, per_rule, per_level = {}, {}, {}
    for split in FIT_SPLITS:
        tasks = fit_rows(dataset.splits[split], dataset.config.train_transformations, rows)
        answers = predict(model, tasks, batch_size)
        overall[split] = accuracy(tasks, answers)
        per_rule[split] = by_transformation(tasks, answers)
        per_level[split] = by_permutation_level(tasks, answers)
    return FitResult(model_name, dataset.config.name, dataset.seed, rows, overall, per_rule, per_level)


def by_permutation_level(tasks: Sequence[Task], predictions: Sequence[str]) -> dict[int, Accuracy]:
    """Exact match per permutation level of the tasks' alphabets, levels ascending."""
    grouped: dict[int, tuple[list[Task], list[str]]] = {}
    for task, answer in zip(tasks, predictions, strict=True):
        level_tasks, level_answers = grouped.setdefault(permutation_level(task.alphabet), ([], []))
        level_tasks.append(task)
        level_answers.append(answer)
    return {level: accuracy(*grouped[level]) for level in sorted(grouped)}


def fit_figure(result: FitResult) -> go.Figure:  # pragma: no mutate block
    """Grouped bars of train against val accuracy: per seen transformation (top) and per permutation level of
    the alphabet (bottom); hover shows the counts."""
    fig = make_subplots(
        rows=2, cols=1, vertical_spacing=0.2, subplot_titles=("by transformation", "by permutation level")
    )
    names = in_paper_order(result.by_transformation["train"])
    levels = sorted(set(result.by_level["train"]) | set(result.by_level["val"]))
    for split, colour in zip(FIT_SPLITS, ("#1f77b4", "#ff7f0e"), strict=True):
        panels = (
            (1, [n for n in names if n in result.by_transformation[split]], result.by_transformation[split]),
            (2, [lv for lv in levels if lv in result.by_level[split]], result.by_level[split]),
        )
        for row, keys, table in panels:
            fig.add_bar(
                x=["standard" if key == 0 else str(key) for key in keys],
                y=[table[key].percent for key in keys],
                name=f"{split} ({result.overall[split].percent:.1f}% overall)",
                legendgroup=split,
                showlegend=row == 1,
                marker={"color": colour},
                customdata=[[table[key].correct, table[key].total] for key in keys],
                hovertemplate="%{x}<br>%{y:.1f}% (%{customdata[0]}/%{customdata[1]})<extra>" + split + "</extra>",
                row=row,
                col=1,
            )
    fig.update_layout(
        title=f"Training fit of {result.model or 'the model'} on {result.preset}: train vs val rows, non-copy",
        barmode="group",
        height=800,
    )
    fig.update_yaxes(title_text="exact match (%)", range=[0, 100])
    fig.update_xaxes(tickangle=-40, row=1, col=1)
    fig.update_xaxes(title_text="letters out of their standard place", type="category", row=2, col=1)
    return fig


def write_fit(result: FitResult, out_dir: str | os.PathLike, page: bool = True) -> dict[str, Path]:
    """Write ``fit.json`` and (``page``) the offline ``fit.html`` into ``out_dir`` atomically; returns the paths
    keyed json/html."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / name for kind, name in FIT_FILES.items() if page or kind == "json"}
    atomic_write(paths["json"], lambda p: p.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8"))
    if page:
        figure = fit_figure(result)
        atomic_write(paths["html"], lambda p: figure.write_html(p, include_plotlyjs=True))
    return paths
