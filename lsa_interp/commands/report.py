"""CLI commands ``report`` (every finding of the paper on one model, or on a population with ``--models``)
and ``splice`` (the authors' memory-splicing experiment)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lsa_interp.commands.common import (
    DeviceOption,
    ModelOption,
    OutOption,
    SeedOption,
    default_out,
    finish,
    open_model,
    writable_out,
)

ModelsOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Checkpoints to report on together (a glob such as 'checkpoints/replicates/copy-20-*', a run "
        "directory standing for its replicates; repeat the option for more): writes the k/N table."
    ),
]


def register(app: typer.Typer) -> None:
    """Add the ``report`` and ``splice`` commands to ``app``."""

    @app.command(
        "report",
        epilog="Example: lsa-interp report --model copy-200 --out runs/report/copy-200\n\n"
        "Over many models: lsa-interp report --models 'checkpoints/replicates/copy-20-*' --models "
        "'checkpoints/replicates/nocopy-20-*' --out runs/report/population",
    )
    def report(
        model: ModelOption = "copy-200",
        models: ModelsOption = None,
        workers: Annotated[
            int | None, typer.Option(min=1, help="Processes for --models (default: the CPU count).")
        ] = None,
        out: OutOption = None,
        seed: SeedOption = 0,
        device: DeviceOption = "cpu",
    ) -> None:
        """Run every analysis (roles, matching heads, patching with a control head, invariance, cross-attention,
        elimination, decoder lens, RASP, memory splicing, Figure 5's copy attention) and write report.html
        (findings table: paper vs ours, holds or not, plus every figure) and report.json; under a minute on
        a 2-core CPU. With --models: every finding on every checkpoint in parallel, and population.html /
        population.json with each finding's measure per model and in how many it holds (k/N)."""
        from rich.console import Console

        if models:
            _population(models, workers, out, seed)
            return
        from lsa_interp.analysis.report import run_report

        console = Console(stderr=True)
        target = writable_out(out if out is not None else default_out(model))
        net = open_model(model, device)
        with console.status("analysing") as status:
            result = run_report(net, model, seed, progress=lambda name: status.update(f"running {name}"))
        _print_findings(f"findings: {model}", [(f.name, f.paper, f.ours, f.holds) for f in result.findings])
        paths = result.write(target)
        Console().print(
            f"wrote {paths['html']} and {paths['json']} in {sum(result.seconds.values()):.0f} s", highlight=False
        )

    @app.command(
        "splice",
        epilog="Example: lsa-interp splice --model copy-200 --pairs 100 --out runs/analysis/copy-200",
    )
    def splice(
        model: ModelOption = "copy-200",
        donor: Annotated[str, typer.Option(help="Rule of the prompts whose memory positions are spliced in.")] = "pred",
        target: Annotated[str, typer.Option(help="Rule of the prompts that are decoded.")] = "succ",
        pairs: Annotated[int, typer.Option(min=1, help="Minimal pairs (3-letter windows, standard alphabet).")] = 100,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Memory splicing (the authors' experiment): decode --target prompts from an encoder output whose
        positions 0-31 (then only the alphabet positions 8-25) come from the --donor prompt of the same
        alphabet, example input and query; count outputs equal to the donor's answer, the own answer, neither."""
        from lsa_interp.analysis.splice import splice_analysis
        from lsa_interp.data.transformations import get_transformation

        get_transformation(donor), get_transformation(target)
        target_dir = writable_out(out if out is not None else default_out(model))
        net = open_model(model, device)
        finish(splice_analysis(net, donor, target, n_pairs=pairs, seed=seed, model_name=model), target_dir, model)


def _population(patterns: list[str], workers: int | None, out: Path | None, seed: int) -> None:
    """``report --models``: expand the globs, check --out, run the pool with a progress bar, print the k/N table."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from lsa_interp.analysis.matching import expand_checkpoints
    from lsa_interp.analysis.population import run_population

    paths = list(dict.fromkeys(p for pattern in patterns for p in expand_checkpoints(pattern)))
    target = writable_out(out if out is not None else Path("runs") / "report" / "population")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TimeRemainingColumn(), console=Console(stderr=True)) as bar:
        task = bar.add_task(f"report on {len(paths)} models", total=len(paths))
        population = run_population(paths, seed, workers, progress=lambda _: bar.advance(task))
    table = population.table()
    rows = [(r["finding"], r["paper"], f"holds in {r['holds']}/{r['judged']} of {r['models']}", None) for r in table]
    _print_findings(f"findings over {len(paths)} models", rows)
    for name, c in population.by_condition().items():
        attention = "-" if c["figure5_attention"] is None else f"{c['figure5_attention']:.3f}"
        Console().print(f"{name}: {c['models']} models, matching head {c['matching_head']}, Figure 5 {attention}")
    paths_written = population.write(target)
    Console().print(f"wrote {paths_written['html']} and {paths_written['json']}", highlight=False)


def _print_findings(title: str, rows: list[tuple[str, str, str, bool | None]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("finding", "paper", "ours", "verdict"):
        table.add_column(column)
    for name, paper, ours, holds in rows:
        table.add_row(name, paper, ours, {True: "[green]holds", False: "[red]does not hold"}.get(holds, ""))
    Console(width=140).print(table)
