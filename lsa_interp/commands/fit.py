"""CLI command ``fit``: a model's accuracy on its training rows against its val rows (`lsa_interp.evaluation.fit`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from lsa_interp.commands.common import device_option


def register(app: typer.Typer) -> None:
    """Add the ``fit`` command to ``app``."""

    @app.command(
        "fit",
        help="Training fit: exact match on non-copy rows of the seen transformations from the train split (rows the "
        "model was trained on) against as many from the val split, overall and per transformation. Low on both: the "
        "model has not fit its training data (optimisation); high on train only: it does not generalise.",
        epilog="Example: lsa-interp fit --model copy-200 --rows 4000 --out runs/fit/copy-200",
    )
    def fit(
        model: Annotated[str, typer.Option(help="A shipped checkpoint name, or a checkpoint directory.")],
        rows: Annotated[
            int,
            typer.Option(
                min=1, help="Rows decoded per split (a fixed random subset; at most as many as the smaller split has)."
            ),
        ] = 4000,
        data: Annotated[
            Path | None,
            typer.Option(help="The model's dataset saved by 'lsa-interp data generate'; default: regenerate it."),
        ] = None,
        out: Annotated[Path | None, typer.Option(help="Write fit.json and fit.html (offline plotly) here.")] = None,
        device: Annotated[
            str | None,
            typer.Option(help="cpu or cuda; default: cuda when available, else cpu.", callback=device_option),
        ] = None,
    ) -> None:
        """Print the training fit of a model."""
        import torch
        from rich.console import Console
        from rich.table import Table

        from lsa_interp.commands.common import (
            UserError,
            not_a_model,
            open_model,
            refuse_foreign_out,
            writable_out,
        )
        from lsa_interp.commands.tables import table_console
        from lsa_interp.data.dataset import read_manifest
        from lsa_interp.evaluation.fit import FIT_SPLITS, fit_pool_sizes, training_fit, write_fit
        from lsa_interp.evaluation.run import evaluation_dataset

        record = not_a_model(model)
        if record:
            raise UserError(record)
        if out is not None:
            refuse_foreign_out(out)
            writable_out(out)
        net = open_model(model, device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if data is not None:
            _check_own_dataset(model, net.metadata, data, read_manifest(data))
        with Console(stderr=True).status("loading the dataset" if data else "generating the dataset"):
            dataset = evaluation_dataset(net, data_dir=data, splits=FIT_SPLITS, remedy="pass its dataset with --data")
        sizes = fit_pool_sizes(dataset)
        split, size = min(sizes.items(), key=lambda item: item[1])
        if rows > size:
            print(
                f"--rows {rows:,} is more than the {split} split's {size:,} non-copy rows of the seen "
                f"transformations: decoding {size:,} rows of each split",
                file=sys.stderr,
            )
        result = training_fit(net, dataset, rows, model_name=model)
        table = Table(title=f"{model} on {result.preset}: exact match %, non-copy rows of the seen transformations")
        for column in ("transformation", *FIT_SPLITS, "train - val"):
            table.add_column(column, justify="left" if column == "transformation" else "right")
        per_rule = result.by_transformation
        for name in [*per_rule["train"], "all"]:
            train, val = (per_rule[s].get(name) if name != "all" else result.overall[s] for s in FIT_SPLITS)
            cells = [f"{a.percent:.1f} ({a.correct}/{a.total})" if a else "-" for a in (train, val)]
            gap = f"{train.percent - val.percent:+.1f}" if train and val else "-"
            table.add_row(name, *cells, gap, style="bold" if name == "all" else None)
        levels = Table(title="by the alphabet's permutation level (letters out of their standard place)")
        for column in ("level", *FIT_SPLITS):
            levels.add_column(column, justify="right")
        for level in sorted(set(result.by_level["train"]) | set(result.by_level["val"])):
            train, val = (result.by_level[split].get(level) for split in FIT_SPLITS)
            cells = [f"{a.percent:.1f} ({a.correct}/{a.total})" if a else "-" for a in (train, val)]
            levels.add_row("standard" if level == 0 else str(level), *cells)
        out_console = table_console([table, levels])
        out_console.print(table)
        out_console.print(levels)
        if out is not None:
            paths = write_fit(result, out)
            print("wrote " + ", ".join(str(path) for path in paths.values()))


def _check_own_dataset(model: str, metadata: dict, data: Path, manifest: dict) -> None:
    """Raise UserError unless ``data`` is the dataset the model was trained on: the directory its training config
    names, or one of the preset and dataset seed its metadata records (a model that records neither passes)."""
    from lsa_interp.commands.common import UserError

    own = (metadata.get("train_config") or {}).get("data_dir")
    if own is not None and Path(own).resolve() == data.resolve():
        return
    trained_on = (metadata.get("preset"), metadata.get("data_seed"))
    if None not in trained_on and trained_on != (manifest["preset"], manifest["seed"]):
        raise UserError(
            f"{model} was trained on {trained_on[0]} with dataset seed {trained_on[1]}, but --data {data} holds "
            f"{manifest['preset']} with dataset seed {manifest['seed']}: give the model's own dataset (its training "
            "rows)"
        )
