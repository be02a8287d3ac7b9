"""``lsa-interp``: a thin command-line shell over the library.

Bad input ends with one line on stderr and exit code 2 (set ``LSA_INTERP_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from lsa_interp.commands.common import (
    CommandGroup,
    UserError,
    device_option,
    not_a_model,
    refuse_foreign_out,
    writable_out,
)
from lsa_interp.commands.tables import table_console

app = typer.Typer(
    name="lsa-interp",
    cls=CommandGroup,
    no_args_is_help=True,
    add_completion=False,
    help="Letter-string analogy transformers: datasets, training, hooked models and the paper's findings.",
)
data_app = typer.Typer(cls=CommandGroup, no_args_is_help=True, help="Generate and inspect the paper's datasets.")
app.add_typer(data_app, name="data")
console = Console(stderr=True)


@data_app.command("generate", epilog="Example: lsa-interp data generate --preset copy-200 --seed 0 --out data/copy-200")
def data_generate(
    preset: Annotated[str, typer.Option(help="Dataset preset, e.g. copy-20, nocopy-20, copy-200, copy-20-3shot.")],
    out: Annotated[Path, typer.Option(help="Output directory (Parquet per split + manifest.json).")],
    seed: Annotated[int, typer.Option(min=0, help="Random seed; the same preset and seed give identical files.")] = 0,
    force: Annotated[bool, typer.Option(help="Replace the dataset already in OUT (never other files).")] = False,
) -> None:
    """Generate a dataset preset and write it to OUT."""
    from lsa_interp.data import generate_dataset, get_preset, save_dataset
    from lsa_interp.data.dataset import MANIFEST

    config = get_preset(preset)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; give a directory (a new or empty one, or a dataset's with --force)")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise UserError(
            f"--out {out} holds no dataset (no {MANIFEST}) and is not empty; give a new or empty directory (--force "
            "replaces only a dataset)"
        )
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{out} holds a dataset; pass --force to replace it")
    writable_out(out)
    stages = 6 + (config.match_size_of is not None)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        job = bar.add_task(f"{preset} (seed {seed})", total=stages)

        def step(message: str) -> None:
            bar.update(job, advance=1, description=message)

        dataset = generate_dataset(config, seed=seed, progress=step)
        step(f"writing {out}")
        save_dataset(dataset, out, force=force)
        bar.update(job, completed=stages, description=f"{preset} (seed {seed}) written to {out}")
    sizes = ", ".join(f"{name} {n:,}" for name, n in dataset.sizes().items())
    print(f"{preset} seed {seed}: {sizes}; {len(dataset.train_alphabets)} training alphabets -> {out}")


@data_app.command("show", epilog="Example: lsa-interp data show data/copy-200 --examples 3")
def data_show(
    data_dir: Annotated[Path, typer.Argument(help="A directory written by 'lsa-interp data generate'.")],
    examples: Annotated[int, typer.Option(min=0, help="Example tasks to print per split.")] = 3,
) -> None:
    """Print sizes per split x transformation x copy and a few example tasks."""
    from lsa_interp.data.dataset import count_rows, read_manifest, sample_tasks

    manifest = read_manifest(data_dir)
    counts = count_rows(data_dir)
    splits = manifest["splits"]
    table = Table(title="tasks per split (non-copy / copy)")
    table.add_column("transformation", no_wrap=True)
    for split in splits:
        table.add_column(split, justify="right", no_wrap=True)
    for name in counts.index:
        table.add_row(name, *(f"{counts.loc[name, (s, False)]:,} / {counts.loc[name, (s, True)]:,}" for s in splits))
    table.add_row("[bold]total", *(f"[bold]{manifest['files'][s]['rows']:,}" for s in splits))
    out = table_console([table])
    out.print(
        f"[bold]{manifest['preset']}[/] seed {manifest['seed']} (lsa-interp {manifest['package_version']}): "
        f"{len(manifest['train_alphabets'])} training alphabets, {len(manifest['new_alphabets'])} new alphabets"
    )
    out.print(table)
    for split in splits:
        for task in sample_tasks(data_dir, split, examples):
            out.print(f"{split:>18}  [dim]{task.transformation:<18}[/] {task}", highlight=False)


@app.command("evaluate", epilog="Example: lsa-interp evaluate --model copy-200 --out runs/eval/copy-200 --limit 5000")
def evaluate(
    model: Annotated[
        str,
        typer.Option(
            help="A shipped checkpoint name, a checkpoint directory or reference .pt, or a training run directory."
        ),
    ],
    preset: Annotated[
        str | None, typer.Option(help="Dataset preset; default: the preset in the model's training metadata.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(min=0, help="Dataset seed; default: the metadata's data_seed, else 0.")
    ] = None,
    data: Annotated[
        Path | None, typer.Option(help="A dataset saved by 'lsa-interp data generate', read instead of regenerating.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write evaluation.json, evaluation.md and accuracy_by_transformation.html here.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Evaluate a deterministic random subset of N rows per split.")
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Tasks decoded per batch.")] = 512,
    device: Annotated[
        str | None, typer.Option(help="cpu or cuda; default: cuda when available, else cpu.", callback=device_option)
    ] = None,
    card: Annotated[
        bool,
        typer.Option(
            "--card",
            help="Write the result into the shipped checkpoint: its evaluation.json and card.md (header kept). "
            "Needs the full splits of its own dataset (no --limit, --preset or --seed).",
        ),
    ] = False,
) -> None:
    """Greedy exact match: the paper's Table 1, accuracy by transformation, copy vs non-copy, alternate-rule errors,
    rule families. --model may be a training run directory: its last saved state (a stack's run: RUN/replicate-I).

    Seen-alphabet numbers come from the val split, new-alphabet numbers from the new-alphabet test set.
    """
    import torch

    from lsa_interp.evaluation import evaluate_model, evaluation_dataset, rich_tables, write_report
    from lsa_interp.evaluation.card import CARD_FILE, refresh_card, shipped_name
    from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, checkpoint_name
    from lsa_interp.training.snapshot import load_run_or_model

    record = not_a_model(model)
    if record:
        raise UserError(record)
    name = model
    if card:
        shipped = checkpoint_name(model)
        card_dir = CHECKPOINTS_DIR / shipped if shipped else Path(model)
        if not (card_dir / CARD_FILE).is_file():
            raise UserError(
                f"--card needs a checkpoint with a {CARD_FILE} (lsa-interp ship writes one); {model!r} has none"
            )
        name = shipped or shipped_name(card_dir) or model
        options = (("--limit", limit), ("--preset", preset), ("--seed", seed))
        given = [option for option, value in options if value is not None]
        if given:
            raise UserError(f"--card writes a card of the full splits of the model's own dataset; drop {given[0]}")
        if data is not None:
            _refuse_foreign_card_data(card_dir, data)
    if out is not None:
        refuse_foreign_out(out)
        writable_out(out)
    net = load_run_or_model(model, device=device or ("cuda" if torch.cuda.is_available() else "cpu"))
    with console.status("loading the dataset" if data else "generating the dataset"):
        dataset = evaluation_dataset(net, preset, seed, data, remedy="pass --preset or --data")
    result = evaluate_model(net, dataset, limit=limit, progress=True, batch_size=batch_size, model_name=name)
    tables = rich_tables(result)
    out_console = table_console(tables)
    for table in tables:
        out_console.print(table)
    if out is not None:
        paths = write_report(result, out)
        print("wrote " + ", ".join(str(path) for path in paths.values()))
    if card:
        print(f"wrote {refresh_card(card_dir, result, reference=None if shipped else model)} and its evaluation.json")


def _refuse_foreign_card_data(card_dir: Path, data: Path) -> None:
    """Raise UserError when the dataset in ``data`` is not the one of the checkpoint's card (the preset and dataset
    seed its ``evaluation.json`` records, which `refresh_card` requires of the new evaluation), before evaluating."""
    from lsa_interp.data.dataset import read_manifest
    from lsa_interp.evaluation.card import EVALUATION_FILE
    from lsa_interp.utils import read_json_object

    recorded = card_dir / EVALUATION_FILE
    if not recorded.is_file():
        return
    old = read_json_object(recorded, "a shipped model's evaluation")
    manifest = read_manifest(data)
    for field, found in (("preset", manifest["preset"]), ("seed", manifest["seed"])):
        wanted = old.get(field, (str, int), None)
        if wanted is not None and wanted != found:
            raise UserError(
                f"--data {data} is of {field} {found!r}; the checkpoint's: {wanted!r}: --card needs the model's own "
                "dataset (leave --data out to regenerate it)"
            )


def _register_analysis_commands() -> None:
    from lsa_interp.commands import (
        explore,
        fit,
        lens,
        patching,
        report,
        representations,
        results,
        ship,
        sweep,
        train,
        viewer,
    )

    for group in (train, ship, patching, representations, lens, report, viewer, results, sweep, explore, fit):
        group.register(app)


_register_analysis_commands()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        code = app(args=argv, prog_name="lsa-interp", standalone_mode=False)
    except typer.Exit as err:
        code = err.exit_code
    except typer.Abort:
        _fail("aborted", code=130)
    except typer.TyperException as err:
        ctx = getattr(err, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        message = err.format_message() if hasattr(err, "format_message") else str(err)
        if not message.strip():
            sys.exit(2)  # a group called without a command: its help is already printed
        _fail(f"{' '.join(message.split())}{hint}")
    except (UserError, ValueError, OSError) as err:  # OSError: a file or directory in the way, unreadable, ...
        if os.environ.get("LSA_INTERP_DEBUG"):
            raise
        _fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
    sys.exit(code or 0)


def _fail(message: str, code: int = 2) -> None:
    print(f"lsa-interp: error: {message}", file=sys.stderr)
    sys.exit(code)
