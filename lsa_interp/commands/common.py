"""Options and helpers shared by the analysis commands: open a model, print and write a result."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
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
DeviceOption = Annotated[str, typer.Option(help="cpu or cuda.")]
HEAD_HELP = "Head labels are the paper's, 1-based: '2.7' = encoder layer 2, head 7 (index 1, 6 in the Python API)."


def open_model(name: str, device: str = "cpu"):
    """Load a model by shipped name or path, or a training run's last saved state (`load_run_or_model`); a
    missing or broken checkpoint raises ValueError (exit 2)."""
    from lsa_interp.training.snapshot import load_run_or_model

    return load_run_or_model(name, device=device)


def default_out(model: str) -> Path:
    """``runs/analysis/<model name or directory name>``."""
    return Path("runs") / "analysis" / Path(model).name


def writable_out(out: Path) -> Path:
    """Make sure ``out`` is a directory we can write files into (created if missing), before any work.

    Raises ValueError (exit 2) naming the directory and why when it cannot be created or written.
    """
    import tempfile

    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as err:
        raise ValueError(f"cannot write to --out {out}: {err.strerror or err}; give a writable directory") from None
    return out


def out_dir(out: Path | None, model: str) -> Path:
    """``--out`` (default `default_out`) checked with `writable_out` before any work; raises ValueError (exit 2)."""
    return writable_out(out if out is not None else default_out(model))


def parse_lengths(text: str) -> tuple[int, ...]:
    """``"3"`` or ``"3,4,5"`` -> window lengths; raises ValueError (exit 2) unless each is an integer >= 3."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items or not all(item.isdigit() and int(item) >= 3 for item in items):
        raise ValueError(f"bad --lengths {text!r}: give window lengths of 3 or more, e.g. 3 or 3,4,5")
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
