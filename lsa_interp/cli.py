"""``lsa-interp``: a thin command-line shell over the library.

Bad input ends with one line on stderr and exit code 2 (set ``LSA_INTERP_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from lsa_interp.commands.common import (
    CommandGroup,
    check_device,
    device_option,
    given_options,
    training_preset,
    writable_out,
)

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


class UserError(Exception):
    """An input problem to report in one line (exit code 2)."""


@data_app.command("generate", epilog="Example: lsa-interp data generate --preset copy-200 --seed 0 --out data/copy-200")
def data_generate(
    preset: Annotated[str, typer.Option(help="Dataset preset, e.g. copy-20, nocopy-20, copy-200, copy-20-3shot.")],
    out: Annotated[Path, typer.Option(help="Output directory (Parquet per split + manifest.json).")],
    seed: Annotated[int, typer.Option(min=0, help="Random seed; the same preset and seed give identical files.")] = 0,
    force: Annotated[bool, typer.Option(help="Overwrite a non-empty output directory.")] = False,
) -> None:
    """Generate a dataset preset and write it to OUT."""
    from lsa_interp.data import generate_dataset, get_preset, save_dataset

    config = get_preset(preset)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise UserError(f"{out} exists and is not empty; pass --force to overwrite it")
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
    out = Console(width=max(shutil.get_terminal_size().columns, 120))
    out.print(
        f"[bold]{manifest['preset']}[/] seed {manifest['seed']} (lsa-interp {manifest['package_version']}): "
        f"{len(manifest['train_alphabets'])} training alphabets, {len(manifest['new_alphabets'])} new alphabets"
    )
    counts = count_rows(data_dir)
    splits = manifest["splits"]
    table = Table(title="tasks per split (non-copy / copy)")
    table.add_column("transformation", no_wrap=True)
    for split in splits:
        table.add_column(split, justify="right", no_wrap=True)
    for name in counts.index:
        table.add_row(name, *(f"{counts.loc[name, (s, False)]:,} / {counts.loc[name, (s, True)]:,}" for s in splits))
    table.add_row("[bold]total", *(f"[bold]{manifest['files'][s]['rows']:,}" for s in splits))
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
        int | None, typer.Option(min=0, help="Dataset seed; default: metadata data_seed, else seed, else 0.")
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
    from lsa_interp.evaluation.card import CARD_FILE, refresh_card
    from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, checkpoint_name
    from lsa_interp.training.snapshot import load_run_or_model

    name = model
    if card:
        name = checkpoint_name(model)
        if not (name and (CHECKPOINTS_DIR / name / CARD_FILE).is_file()):
            raise UserError(f"--card needs a shipped checkpoint with a {CARD_FILE}; {model!r} is none")
        options = (("--limit", limit), ("--preset", preset), ("--seed", seed))
        given = [option for option, value in options if value is not None]
        if given:
            raise UserError(f"--card writes a card of the full splits of the model's own dataset; drop {given[0]}")
    if out is not None:
        writable_out(out)
    net = load_run_or_model(model, device=device or ("cuda" if torch.cuda.is_available() else "cpu"))
    with console.status("loading the dataset" if data else "generating the dataset"):
        dataset = evaluation_dataset(net, preset, seed, data)
    result = evaluate_model(net, dataset, limit=limit, progress=True, batch_size=batch_size, model_name=name)
    out_console = Console(width=max(shutil.get_terminal_size().columns, 120))
    for table in rich_tables(result):
        out_console.print(table)
    if out is not None:
        paths = write_report(result, out)
        print("wrote " + ", ".join(str(path) for path in paths.values()))
    if card:
        print(f"wrote {refresh_card(CHECKPOINTS_DIR / name, result)} and its evaluation.json")


@app.command(
    "train",
    epilog="Example: lsa-interp train --preset copy-200 --seed 1 --batching alphabet --out runs/copy-200-s1\n\n"
    "Resume after an interruption: lsa-interp train --resume runs/copy-200-s1",
)
def train(
    ctx: typer.Context,
    out: Annotated[Path | None, typer.Option(help="Run directory (config, metrics.jsonl, state.pt, model/).")] = None,
    preset: Annotated[
        str | None, typer.Option(help="Dataset preset to train on; default copy-20, with --data the dataset's own.")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the model's initialisation, dropout and data order.")] = 0,
    data: Annotated[Path | None, typer.Option(help="A saved dataset; default: generate PRESET into OUT/data.")] = None,
    data_seed: Annotated[int, typer.Option(min=0, help="Seed of the generated dataset (without --data).")] = 0,
    epochs: Annotated[int, typer.Option(min=1)] = 20,
    batch_size: Annotated[int, typer.Option(min=1)] = 32,
    batching: Annotated[
        str, typer.Option(help="random, alphabet, transformation or transformation_alphabet.")
    ] = "random",
    lr: Annotated[float, typer.Option(min=0.0)] = 1e-3,
    precision: Annotated[str, typer.Option(help="fp32 (the recipe), tf32 matmuls, or bf16 autocast.")] = "fp32",
    device: Annotated[
        str,
        typer.Option(
            help="auto (CUDA if available), cpu or cuda.",
            callback=lambda value: check_device(value, ("auto", "cpu", "cuda")),
        ),
    ] = "auto",
    max_steps: Annotated[int | None, typer.Option(min=1, help="Stop after this many optimizer steps.")] = None,
    max_minutes: Annotated[float | None, typer.Option(min=0.0, help="Stop after this much wall time.")] = None,
    checkpoint_every: Annotated[int, typer.Option(min=1, help="Save the resumable state every N steps.")] = 2000,
    val_limit: Annotated[int | None, typer.Option(min=1, help="Validate on this many val rows per epoch.")] = None,
    model_config: Annotated[
        str, typer.Option(help='JSON overrides of the model config, e.g. \'{"d_model": 64, "n_heads": 4}\'.')
    ] = "{}",
    replicates: Annotated[
        int,
        typer.Option(min=1, help="Train N models as one natively stacked model (seeds SEED..SEED+N-1, one step)."),
    ] = 1,
    cuda_graph: Annotated[
        bool, typer.Option(help="On CUDA, capture the training step once as a CUDA graph and replay it.")
    ] = True,
    compile: Annotated[
        bool,
        typer.Option(
            help="Run torch.compile inside the stacked step (trains as a stack, also of one model; "
            "measure first: benchmarks/train_throughput.py --stacking native-compile).",
        ),
    ] = False,
    attention: Annotated[
        str,
        typer.Option(
            help="sdpa (torch's scaled_dot_product_attention), triton: the stacked step's own kernel for short "
            "rows and 16-wide heads (needs the triton package), or flash: FlashAttention-2's variable-length kernel "
            "over packed rows (needs --packing and --precision bf16); triton and flash train as a stack on a CUDA "
            "GPU (measure first: benchmarks/train_throughput.py --stacking native-triton,native-compile-flash-packed).",
        ),
    ] = "sdpa",
    packing: Annotated[
        bool,
        typer.Option(
            help="Pack each step's rows end to end without padding, so that only real tokens are computed (the "
            "same batches and losses up to rounding; trains as a stack; measure first: "
            "benchmarks/train_throughput.py --stacking native-compile-triton-packed).",
        ),
    ] = False,
    length_bucketing: Annotated[
        bool,
        typer.Option(
            help="Sort rows by length within windows of 50 batches: less padding (faster on CPU), "
            "but batches of similar tasks, unlike the reference's random batches."
        ),
    ] = False,
    micro_batches: Annotated[
        int,
        typer.Option(
            min=1,
            help="Cut each batch into N length-sorted parts whose gradients add up before the one optimizer step: "
            "the same batches and updates, less padding (1.2-1.4x faster on CPU with 4; eager step only).",
        ),
    ] = 1,
    architecture: Annotated[
        str,
        typer.Option(
            help="hooked (our model), or reference: the same network as a plain torch.nn.Transformer, trained by "
            "the same loop (to check a result is not our model's doing); both save a hooked checkpoint."
        ),
    ] = "hooked",
    resume: Annotated[Path | None, typer.Option(help="Continue the run in this directory.")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite a non-empty run directory.")] = False,
) -> None:
    """Train the paper's encoder-decoder with the reference recipe (AdamW, warm-up, linear decay)."""
    from rich.progress import MofNCompleteColumn, TimeRemainingColumn

    from lsa_interp.training import TrainConfig, resume_run, start_run

    if resume is not None:
        given = [name for name in given_options(ctx) if name not in ("resume", "max_steps", "max_minutes")]
        if given:
            option = "--" + given[0].replace("_", "-")
            raise UserError(f"{option} does not apply with --resume (the run keeps its config); only the bounds do")
        trainer = resume_run(resume, max_steps=max_steps, max_minutes=max_minutes)
    else:
        if out is None:
            raise UserError("give --out RUN_DIR for a new run (or --resume RUN_DIR to continue one)")
        if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
            raise UserError(f"{out} is not empty; pass --force to overwrite it or --resume {out} to continue it")
        preset = training_preset(preset, data)
        config = TrainConfig(
            data_dir=str(data if data is not None else out / "data"),
            preset=preset,
            seed=seed,
            epochs=epochs,
            batch_size=batch_size,
            batching=batching,
            lr=lr,
            precision=precision,
            device=device,
            max_steps=max_steps,
            max_minutes=max_minutes,
            checkpoint_every=checkpoint_every,
            val_limit=val_limit,
            replicates=replicates,
            cuda_graph=cuda_graph,
            compile=compile,
            attention=attention,
            packing=packing,
            length_bucketing=length_bucketing,
            micro_batches=micro_batches,
            architecture=architecture,
            model=_parse_model_config(model_config),
        )
        created = not out.exists()
        writable_out(out)
        try:
            if data is None:
                _generate_into(preset, data_seed, out / "data")
            trainer = start_run(config, out, force=True)
        except BaseException:  # a config the trainer refuses (no CUDA, ...): no dataset left in the way of a retry
            if data is None:
                shutil.rmtree(out if created else out / "data", ignore_errors=True)
            raise
    with Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
        console=console,
    ) as bar:
        job = bar.add_task("train", total=trainer.total_steps, completed=trainer.step, info="")

        def show(record: dict) -> None:
            info = f"loss {record['train_loss']:.4f}  {record['tasks_per_s']:,.0f} tasks/s  lr {record['lr']:.2e}"
            bar.update(job, completed=record["step"], total=record["total_steps"], info=info)

        run_dir = trainer.run(progress=show)
    signum = trainer.stopped_by
    state = "model written" if signum is None else "stopped by a signal; continue with --resume"
    print(f"{run_dir}: {trainer.step} steps ({trainer.step / trainer.steps_per_epoch:.2f} epochs), {state}")
    if signum is not None:  # the state is saved; exit as a program stopped by that signal does (130 for Ctrl-C)
        raise typer.Exit(128 + signum)


def _parse_model_config(text: str) -> dict:
    """The ``--model-config`` JSON object, checked against `ModelConfig`."""
    from lsa_interp.model import ModelConfig

    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"--model-config is not valid JSON ({err})") from None
    if not isinstance(overrides, dict):
        raise UserError("--model-config must be a JSON object such as '{\"d_model\": 64}'")
    ModelConfig.from_dict(overrides)
    return overrides


def _generate_into(preset: str, seed: int, out: Path) -> None:
    """Generate ``preset`` into ``out`` unless a dataset of that preset and seed is already there."""
    from lsa_interp.data import generate_dataset, get_preset, read_manifest, save_dataset

    config = get_preset(preset)
    if (out / "manifest.json").is_file():
        manifest = read_manifest(out)
        if (manifest["preset"], manifest["seed"]) == (preset, seed):
            return
    console.print(f"generating {preset} (seed {seed}) into {out}")
    save_dataset(generate_dataset(config, seed=seed), out, force=True)


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
        viewer,
    )

    for group in (ship, patching, representations, lens, report, viewer, results, sweep, explore, fit):
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
