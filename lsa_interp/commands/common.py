"""Options and helpers shared by the commands: open a model, print and write a result, and the command group
that refuses empty paths and removes the output directories of a command that failed."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, get_args

import typer
import typer.core
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from lsa_interp.analysis.types import AnalysisResult

ModelOption = Annotated[
    str,
    typer.Option(
        help="A shipped checkpoint name (copy-200, copy-20, nocopy-20), a checkpoint directory, or a training run "
        "directory (its last saved state; a stack's run: RUN_DIR/replicate-I)."
    ),
]
OutOption = Annotated[
    Path | None, typer.Option(help="Directory for NAME.json and NAME.html; default runs/analysis/MODEL.")
]
SeedOption = Annotated[int, typer.Option(min=0, help="Seed of the generated tasks.")]


class UserError(Exception):
    """An input problem to report in one line (exit code 2)."""


def check_device(device: str | None, allowed: tuple[str, ...] = ("cpu", "cuda")) -> str | None:
    """``device`` (None passes) when it is one of ``allowed`` and usable here, checked while the options are read;
    raises typer.BadParameter (exit 2) naming what is allowed, or that torch sees no CUDA device."""
    if device is None:
        return None
    if device not in allowed:
        raise typer.BadParameter(f"unknown device {device!r}; choose one of: {', '.join(allowed)}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise typer.BadParameter("torch sees no CUDA device here; use cpu")
    return device


def device_option(value: str | None) -> str | None:
    """`check_device` as a typer callback (typer hands a callback of one parameter the option's value)."""
    return check_device(value)


DeviceOption = Annotated[str, typer.Option(help="cpu or cuda.", callback=device_option)]
HEAD_HELP = "Head labels are the paper's, 1-based: '2.7' = encoder layer 2, head 7 (index 1, 6 in the Python API)."


def open_model(name: str, device: str = "cpu"):
    """Load a model by shipped name or path, or a training run's last saved state (`load_run_or_model`); a
    missing or broken checkpoint raises ValueError, a directory that holds no model (`not_a_model`) UserError
    (exit 2 both)."""
    from lsa_interp.training.snapshot import load_run_or_model

    reason = not_a_model(name)
    if reason:
        raise UserError(reason)
    return load_run_or_model(name, device=device)


def check_models(paths: Iterable[str | Path]) -> None:
    """Load every checkpoint of ``paths`` once (config, SHA-256, weights), before work that opens them one by one;
    raises what `load_model` raises: ValueError for a broken or foreign one, FileNotFoundError (exit 2)."""
    from lsa_interp.model import load_model

    for path in paths:
        load_model(path)


def default_out(model: str) -> Path:
    """``runs/analysis/NAME``: NAME is the model's name or directory name, the run's for a run's ``model``
    directory or a checkpoint's file, and ``STACK-replicate-I`` for a stack's replicate (two stacks' replicate-0
    would otherwise write into one directory)."""
    path = Path(model)
    while path.name in ("model", "config.json", "model.safetensors") and path.parent.name:
        path = path.parent
    name = path.name
    if re.fullmatch(r"replicate-\d+", name) and path.parent.name:
        name = f"{path.parent.name}-{name}"
    return Path("runs") / "analysis" / name


_MADE: list[Path] = []
"""The directories `writable_out` made for the command now running (`CommandGroup` removes them again, where
still empty, when the command fails)."""


FOREIGN_MARKERS = {
    "manifest.json": "a dataset",
    "train_config.json": "a training run",
    "model.safetensors": "a model",
    "plan.json": "a sweep",
}
"""Files that say a directory is something other than a folder of results (what it is)."""


def refuse_foreign_out(out: Path, option: str = "--out") -> None:
    """Raise UserError (exit 2) when ``out`` holds a dataset, a training run, a model or a sweep: a command's results
    go in a folder of their own, not among those files."""
    found = next((what for name, what in FOREIGN_MARKERS.items() if (out / name).is_file()), None)
    if found:
        raise UserError(f"{option} {out} holds {found}; give a folder of its own for these results")


def refuse_foreign_page(page: Path, option: str = "--out") -> None:
    """Raise UserError (exit 2) when ``page`` is a file that is not an HTML page (a model's config.json, a table):
    a page replaces only an earlier page."""
    if page.is_file():
        with page.open("rb") as file:
            head = file.read(256).lstrip().lower()
        if not head.startswith((b"<!doctype html", b"<html")):
            raise UserError(f"{option} {page} exists and is not an HTML page; give the page a file name of its own")


def writable_out(out: Path, option: str = "--out") -> Path:
    """Make sure ``out`` is a directory we can write files into (created if missing), before any work.

    Raises ValueError (exit 2) naming the directory and why when it cannot be created or written.
    """
    import tempfile

    _MADE.extend(path.absolute() for path in (out, *out.parents) if not path.exists())
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as err:
        raise ValueError(f"cannot write to {option} {out}: {err.strerror or err}; give a writable directory") from None
    return out


@contextmanager
def made_dirs_removed_on_failure() -> Iterator[None]:
    """Run a command; when it fails, remove the directories `writable_out` made for it that are still empty
    (deepest first; a directory that existed before or holds anything stays)."""
    _MADE.clear()
    try:
        yield
    except BaseException as err:
        if not (isinstance(err, typer.Exit) and err.exit_code == 0):  # typer.Exit(0): a command that succeeded
            for path in sorted(set(_MADE), key=lambda path: len(path.parts), reverse=True):
                try:
                    path.rmdir()
                except OSError:  # not empty, or gone
                    pass
        raise
    finally:
        _MADE.clear()


MODEL_PARAMS = ("model", "models")
"""The parameters that name models (``--model``, ``--models``): `refuse_empty_paths` refuses them empty too."""
EMPTY_MODEL = "an empty model name; give a shipped checkpoint name (e.g. copy-200), a checkpoint or a run directory"


def refuse_empty_paths(command: typer.core.TyperCommand, ctx: typer.Context, args: list[str]) -> None:
    """Raise typer.BadParameter (exit 2) for a path parameter of ``command``, or one naming a model
    (`MODEL_PARAMS`), given as an empty string in ``args`` (it would mean the working directory). Arguments it
    cannot parse pass: the command's own parse reports them."""
    try:
        given, _, _ = command.make_parser(ctx).parse_args(args=list(args))
    except typer.TyperException:
        return
    for param in command.params:
        annotation = param.type_descriptor.annotation
        value = given.get(param.name)
        values = [value] if isinstance(value, str) else value or []
        model = param.name in MODEL_PARAMS
        if (model or Path in (annotation, *get_args(annotation))) and "" in values:
            message = "an empty path; give a file or directory name ('.' for the working directory)"
            raise typer.BadParameter(EMPTY_MODEL if model else message, ctx=ctx, param=param)


class CommandGroup(typer.core.TyperGroup):
    """The CLI's command groups: a command's empty path parameter is refused before it runs, and the output
    directories a failing command made are removed again (`made_dirs_removed_on_failure`)."""

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not hasattr(command, "commands"):  # a command, not a group
            refuse_empty_paths(command, typer.Context(command, info_name=name, parent=ctx), rest)
        return name, command, rest

    def invoke(self, ctx: typer.Context):
        with made_dirs_removed_on_failure():
            return super().invoke(ctx)


def out_dir(out: Path | None, model: str) -> Path:
    """``--out`` (default `default_out`) checked with `writable_out` before any work; raises ValueError (exit 2)."""
    return writable_out(out if out is not None else default_out(model))


def parse_lengths(text: str) -> tuple[int, ...]:
    """``"3"`` or ``"3,4,5"`` -> window lengths; raises ValueError (exit 2) unless each is an integer in 3..13 (the
    data's window lengths: training uses 3..7), naming an empty ``text`` as such."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("--lengths is empty: give window lengths in 3..13, e.g. 3 or 3,4,5")
    if not all(item.isdigit() and 3 <= int(item) <= 13 for item in items):
        raise ValueError(f"bad --lengths {text!r}: give window lengths in 3..13, e.g. 3 or 3,4,5")
    return tuple(int(item) for item in items)


def finish(result: AnalysisResult, out: Path | None, model: str) -> None:
    """Print the summary and findings as tables, then write the JSON and HTML files."""
    console = Console(width=max(shutil.get_terminal_size().columns, 120))
    table = Table(title=f"{result.name}: {result.model}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.summary.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
    if result.findings:
        findings = Table(title="findings")
        for column in ("finding", "paper", "ours", "verdict"):
            findings.add_column(column)
        for f in result.findings:
            verdict = {True: "[green]holds", False: "[red]does not hold"}.get(f.holds, "n/a")
            findings.add_row(f.name, f.paper, f.ours, verdict)
        console.print(findings)
    paths = result.write(out if out is not None else default_out(model))
    console.print("wrote " + ", ".join(str(p) for p in paths.values()), highlight=False)


def not_a_model(model: str) -> str | None:
    """One line saying why ``model`` cannot be opened when it is a directory that holds no model to open: a sweep's
    directory (naming one of its runs), a training run (or a stack's replicate-I) that finished (it logged an epoch,
    or is done) but holds no state.pt, or a checkpoint directory whose weights file is gone (config.json and results
    only); None for anything else."""
    from lsa_interp.model.checkpoint import CONFIG_FILE, WEIGHTS_FILE, available_models
    from lsa_interp.sweep.plan import PLAN_FILE
    from lsa_interp.training.run_dir import DONE_FILE, METRICS_FILE, MODEL_DIR, STATE_FILE
    from lsa_interp.training.snapshot import is_training_run

    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    if (path / PLAN_FILE).is_file():
        runs = sorted(str(run) for run in path.glob("stacks/*/replicate-*") if run.is_dir())
        example = f", e.g. {runs[0]}" if runs else ""
        return f"{path} is a sweep's directory, not a model: give one of its runs (STACK/replicate-I){example}"
    run = path.parent if re.fullmatch(r"replicate-\d+", path.name) and is_training_run(path.parent) else path
    if is_training_run(run):
        own, metrics = path / MODEL_DIR, run / METRICS_FILE
        if (run / STATE_FILE).is_file():
            return None
        if (own / WEIGHTS_FILE).is_file():
            return f"{run} holds no {STATE_FILE} (its training state); its final model is {own}: give that"
        finished = (run / DONE_FILE).is_file() or (
            metrics.is_file() and '"type": "epoch"' in metrics.read_text(encoding="utf-8", errors="replace")
        )
        if not finished:
            return None  # a run before its first save: load_run_or_model says so
        missing = f"no {STATE_FILE} or saved model weights"
    elif (path / CONFIG_FILE).is_file():
        try:
            weights = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8")).get("weights_file", WEIGHTS_FILE)
        except (ValueError, AttributeError):  # not a JSON object: loading names the problem
            return None
        if not isinstance(weights, str) or (path / weights).exists():
            return None
        missing = f"no {weights}"
    else:
        return None
    names = sorted(child.name + "/" * child.is_dir() for child in path.iterdir())
    holds = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "") if names else "nothing"
    shipped = ", ".join(available_models(replicates=False)) or "none here"
    return (
        f"{path} is a run's record without its weights (it holds {holds}; {missing}): give a model with weights: "
        f"a shipped checkpoint (checkpoints/: {shipped}), a training run's directory or its model/"
    )


def given_options(ctx: typer.Context) -> list[str]:
    """The names of the options given on the command line (not left at their defaults). The source is compared by
    name: typer's context may come from its own copy of click, whose enum is not `click.core.ParameterSource`."""
    return [name for name in ctx.params if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"]


def training_preset(preset: str | None, data: Path | None) -> str:
    """The preset a new run records: ``--data``'s own (its manifest), which ``--preset`` may only repeat; else
    ``preset`` or copy-20. Raises ValueError (exit 2) for a ``--preset`` that is not the dataset's."""
    from lsa_interp.data.dataset import MANIFEST, read_manifest

    if data is None or not (data / MANIFEST).is_file():  # no --data, or no dataset there: the trainer says so
        return preset or "copy-20"
    own = read_manifest(data)["preset"]
    if preset is not None and preset != own:
        raise ValueError(f"--preset {preset} is not the preset of --data {data} ({own}); leave --preset out")
    return own


def progress_bar():
    """A rich progress bar on stderr: description, bar, done/total, elapsed and remaining time."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, TimeRemainingColumn(), console=Console(stderr=True))
