"""CLI commands ``report`` (every finding of the paper on one model, or on a population with ``--models``)
and ``splice`` (the authors' memory-splicing experiment)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lsa_interp.commands.common import (
    DeviceOption,
    ModelOption,
    OutOption,
    SeedOption,
    check_models,
    default_out,
    finish,
    given_options,
    open_model,
    progress_bar,
    writable_out,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from lsa_interp.analysis.splice import Case

ModelsOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Checkpoints to report on together (a shipped name, a glob such as 'replicates/copy-20-*', a run "
        "directory standing for its replicates; repeat the option for more): writes the k/N table. Replaces --model."
    ),
]


def register(app: typer.Typer) -> None:
    """Add the ``report`` and ``splice`` commands to ``app``."""

    @app.command(
        "report",
        epilog="Example: lsa-interp report --model copy-200 --out runs/report/copy-200\n\n"
        "Over many models: lsa-interp report --models 'checkpoints/replicates/copy-20-*' --models "
        "checkpoints/nocopy-20 --out runs/report/population",
    )
    def report(
        ctx: typer.Context,
        model: ModelOption = "copy-200",
        models: ModelsOption = None,
        workers: Annotated[
            int | None,
            typer.Option(
                min=1,
                help="Processes (default: the CPU count): with --models one model each, else the report's "
                "analyses spread over them (one torch thread each).",
            ),
        ] = None,
        out: Annotated[
            Path | None,
            typer.Option(
                help="Directory for the report; default runs/analysis/MODEL, with --models runs/report/population."
            ),
        ] = None,
        seed: SeedOption = 0,
        device: DeviceOption = "cpu",
    ) -> None:
        """Run every analysis (roles, matching heads, patching with a control head, invariance, cross-attention,
        elimination, decoder lens, RASP, memory splicing, Figure 5's copy attention) and write report.html
        (findings table: paper vs ours, holds or not, plus every figure) and report.json; about half a minute
        of CPU time, spread over the cores (one torch thread per process). With --models: every finding on every
        checkpoint in parallel, and population.html / population.json with each finding's measure per model
        and in how many it holds (k/N)."""
        from rich.console import Console

        if models:
            if "model" in given_options(ctx):
                raise ValueError("give --model or --models, not both: --models names every checkpoint reported on")
            if device != "cpu":
                raise ValueError("--models runs each checkpoint in a CPU worker process; --device does not apply")
            _population(models, workers, out, seed)
            return
        from lsa_interp.analysis.report import STEPS
        from lsa_interp.analysis.report_pool import run_report_pool

        target = writable_out(out if out is not None else default_out(model))
        _one_thread()
        net = open_model(model, device)
        started = time.perf_counter()
        with progress_bar() as bar:
            task = bar.add_task(f"report on {model}", total=len(STEPS))
            result = run_report_pool(
                net, model, seed, workers if device == "cpu" else 1, progress=lambda _: bar.advance(task)
            )
        _print_findings(f"findings: {model}", [(f.name, f.paper, f.ours, f.holds) for f in result.findings])
        paths = result.write(target)
        Console().print(
            f"wrote {paths['html']} and {paths['json']} in {time.perf_counter() - started:.0f} s", highlight=False
        )

    @app.command(
        "splice",
        epilog="Example: lsa-interp splice --model copy-200 --pairs 100 --out runs/analysis/copy-200",
    )
    def splice(
        model: ModelOption = "copy-200",
        donor: Annotated[
            str,
            typer.Option(help="Rule of the prompts whose memory positions are spliced in (the paper's: pred)."),
        ] = "pred",
        target: Annotated[str, typer.Option(help="Rule of the prompts that are decoded (the paper's: succ).")] = "succ",
        pairs: Annotated[
            int,
            typer.Option(
                min=1,
                help="Minimal pairs (3-letter windows, standard alphabet); at most: fewer where no more distinct "
                "pairs of the two rules exist (pred and succ: 462), and the result says how many.",
            ),
        ] = 100,
        positions: Annotated[
            list[str] | None,
            typer.Option(
                help="Memory positions spliced in one case, 0-based ranges joined by commas (e.g. 0-31 or "
                "8-25,33), or 'unused' (per pair, the alphabet letters neither prompt uses); repeat for more cases. "
                "Default: the authors' two cases, 0-31 and 8-25, and unused."
            ),
        ] = None,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Memory splicing (the authors' experiment): decode --target prompts from an encoder output whose
        positions 0-31 (then only the alphabet positions 8-25; then, per pair, the alphabet letters neither
        prompt uses, 16 of the authors' 18 at 8-25) come from the --donor prompt of the same alphabet, example
        input and query; count outputs equal to the donor's answer, the own answer, neither, the query copied.
        The authors' cases hold when more than half the pairs give their outcome (0-31: the donor's answer;
        8-25 and unused: the own answer); other --positions cases, and every case of a pair of rules other
        than the authors' (--donor pred --target succ), are reported, not judged."""
        from lsa_interp.analysis.splice import CASES, splice_analysis
        from lsa_interp.data.transformations import get_transformation

        get_transformation(donor), get_transformation(target)
        if donor == target:
            message = f"--donor and --target are both {donor!r}"
            raise ValueError(f"{message}; give two different rules, e.g. --donor pred --target succ")
        cases = dict(_parse_case(text, CASES) for text in positions) if positions else CASES
        target_dir = writable_out(out if out is not None else default_out(model))
        net = open_model(model, device)
        result = splice_analysis(net, donor, target, n_pairs=pairs, seed=seed, cases=cases, model_name=model)
        finish(result, target_dir, model)


def _one_thread() -> None:
    """Run torch on one thread, as each ``--models`` worker does: the models are small, and two threads on a
    busy 2-core machine cost 2-3x the CPU time and the wall time of one (docs/analyses.md)."""
    import torch

    torch.set_num_threads(1)


def _ascii_number(text: str) -> bool:
    """Whether ``text`` is a number in ASCII digits ("٣" and "²" are digits to `str.isdigit`, not to us)."""
    return text.isascii() and text.isdigit()


def _parse_case(text: str, known: Mapping[str, Case]) -> tuple[str, Case]:
    """``"0-31"`` or ``"8-25,33"`` -> (the name of the ``known`` case with these positions, else ``"positions
    8-25,33"``; the positions); ``"unused"`` -> the per-pair case of that name. Raises ValueError (exit 2) for
    anything else."""
    from lsa_interp.analysis.splice import UNUSED

    if text.strip() == "unused":
        return UNUSED, known[UNUSED]
    chosen: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")  # "8-" (a range without its end) is no single position
        if not (_ascii_number(low) and (_ascii_number(high) or not dash)) or (high and int(high) < int(low)):
            raise ValueError(f"bad --positions {text!r}: give 0-based ranges such as 0-31 or 8-25,33, or unused")
        chosen.extend(range(int(low), int(high or low) + 1))
    unique = tuple(dict.fromkeys(chosen))
    return next((name for name, case in known.items() if case == unique), f"positions {text.replace(' ', '')}"), unique


def _population(patterns: list[str], workers: int | None, out: Path | None, seed: int) -> None:
    """``report --models``: expand the globs, load each checkpoint once and check --out (before any work), run the
    pool with a progress bar, print the k/N table."""
    from rich.console import Console

    from lsa_interp.analysis.matching import expand_checkpoints
    from lsa_interp.analysis.population import holds_text, run_population

    paths = list(dict.fromkeys(p for pattern in patterns for p in expand_checkpoints(pattern)))
    check_models(paths)
    target = writable_out(out if out is not None else Path("runs") / "report" / "population")
    with progress_bar() as bar:
        task = bar.add_task(f"report on {len(paths)} models", total=len(paths))
        population = run_population(paths, seed, workers, progress=lambda _: bar.advance(task))
    table = population.table()
    rows = [(r["finding"], r["paper"], holds_text(r), None) for r in table]
    _print_findings(f"findings over {len(paths)} models", rows, verdicts=False)
    for name, c in population.by_condition().items():
        attention = "-" if c["figure5_attention"] is None else f"{c['figure5_attention']:.3f}"
        Console().print(f"{name}: {c['models']} models, matching head {c['matching_head']}, Figure 5 {attention}")
    paths_written = population.write(target)
    Console().print(f"wrote {paths_written['html']} and {paths_written['json']}", highlight=False)


def _print_findings(title: str, rows: list[tuple[str, str, str, bool | None]], verdicts: bool = True) -> None:
    """The findings as a table; ``verdicts``: with a column saying whether each holds (one model's report)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("finding", "paper", "ours", "verdict")[: 4 if verdicts else 3]:
        table.add_column(column)
    for name, paper, ours, holds in rows:
        verdict = {True: "[green]holds", False: "[red]does not hold"}.get(holds, "")
        table.add_row(name, paper, ours, *([verdict] if verdicts else []))
    Console(width=140).print(table)
