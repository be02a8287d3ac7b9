"""CLI command ``results``: the table of every evaluated run, our Table 1 and batching table with bootstrap
intervals beside the paper's, the precision check, the matching head's occurrence, and Figure 3 (accuracy by
number of training alphabets) as an offline page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RESULTS_DIR = Path("runs") / "results"
"""The default --out: beside the other commands' runs/ output, never the repository's own analyses/results (which
holds the tables of the shipped checkpoints and analyses/runs: regenerate it with --out analyses/results)."""


NEW_ALPHABETS_NOTE = (
    "newA: ours is the whole set of 20 new alphabets; the paper's counted the standard alphabet too and is one test "
    "split of such a set (docs/results.md scores ours that way)"
)


def _pooled_text(frame, keys) -> str:
    """What each of our rows pools, from the summaries' ``batching_methods`` / ``precisions`` columns:
    ``copy-20: random batching, bf16 4 + fp32 1``."""
    parts = []
    for _, row in frame.iterrows():
        pooled = [f"{row['batching_methods']} batching"] if "batching_methods" in row else []
        precisions = row.get("precisions")
        pooled += [precisions.replace(", ", " + ")] if isinstance(precisions, str) and precisions else []
        parts.append(f"{' / '.join(str(row[key]) for key in keys)}: {', '.join(pooled) or 'precision not recorded'}")
    return "; ".join(parts) if parts else "no runs"


def _captions(table1, batching) -> dict[str, str]:
    """The printed tables' captions: what our rows pool (batching methods and precisions, from the summaries) and
    which of the paper's tables each paper number comes from."""
    from lsa_interp.evaluation.paper_tables import PAPER_ALPHABETS, PAPER_BATCHING, PAPER_BATCHING_ROWS, PAPER_TABLE1

    rows, five_runs = PAPER_BATCHING_ROWS[("copy-20", "random")], PAPER_ALPHABETS[20]["random"][0]
    return {
        "Table 1": f"ours, one run per seed: {_pooled_text(table1, ['preset'])}. paper: the main results table "
        "(Table 1 here, as in SPEC; the PDF's Table 3), whose 20-alphabet rows pool all four batching methods "
        f"(copy-20: 26 rows of the authors' table, {PAPER_TABLE1['copy-20'][0]:.1f} on seenT/seenA) and copy-200 "
        "alphabet and random batching (10 runs; its caption says 10 runs for every row); " + NEW_ALPHABETS_NOTE,
        "Batching methods": f"ours, one run per seed: {_pooled_text(batching, ['preset', 'batching'])}. paper: the "
        f"appendix's batching table; its copy-20 / random cell ({PAPER_BATCHING[('copy-20', 'random')][0][0]:.1f}) "
        f"averages {rows} rows of the authors' table: 5 runs, each listed twice (one with two different results), "
        f"and a sixth (its 5 runs: {five_runs:.1f} on seenT/seenA, Figure 3's point); " + NEW_ALPHABETS_NOTE,
    }


def _print_summaries(table1, batching, console) -> None:
    from rich.table import Table

    from lsa_interp.evaluation.grid_summary import format_interval
    from lsa_interp.evaluation.paper_tables import CELL_LABELS, CELLS

    captions = _captions(table1, batching)
    for title, frame, keys in (("Table 1", table1, ["preset"]), ("Batching methods", batching, ["preset", "batching"])):
        table = Table(
            title=f"{title}: ours, mean [95% bootstrap] (runs) / paper", show_lines=False, caption=captions[title]
        )
        for key in keys:
            table.add_column(key)
        for cell in CELLS:
            table.add_column(CELL_LABELS[cell], justify="right")
        for _, row in frame.iterrows():
            cells = []
            for cell in CELLS:
                ours = f"{format_interval(row[cell], row[f'{cell}_low'], row[f'{cell}_high'])} (n={int(row['n'])})"
                nan = float("nan")
                paper = format_interval(
                    row[f"paper_{cell}"], row.get(f"paper_{cell}_low", nan), row.get(f"paper_{cell}_high", nan)
                )
                cells.append(f"{ours}\n[dim]paper {paper}")
            table.add_row(*[str(row[key]) for key in keys], *cells)
        if frame.empty:
            table.add_row(*(["no complete runs"] + [""] * (len(keys) + len(CELLS) - 1)))
        console.print(table)


def _print_precision_check(summary, console) -> None:
    from rich.table import Table

    from lsa_interp.evaluation.grid_summary import SPREAD_RUNS

    notes = [
        f"{row['preset']} / {row['batching']} {row['precision']}: {row['note']}"
        for _, row in summary.iterrows()
        if isinstance(row.get("note"), str) and row["note"]
    ]
    caption = (
        "within the spread: the difference of the means is smaller than the larger run-to-run standard deviation "
        f"(issue 14's rule), judged only where both precisions have {SPREAD_RUNS} runs or more"
    )
    table = Table(
        title="Precision check: seen transformations, seen alphabets, per precision",
        caption="; ".join([caption, *notes]),
    )
    for column in ("preset", "batching", "precision", "runs", "mean", "sd", "vs fp32", "within the spread", "hardware"):
        table.add_column(column, justify="right" if column in ("runs", "mean", "sd", "vs fp32") else "left")
    show = lambda value, sign="": "-" if value != value else f"{value:{sign}.1f}"
    for _, row in summary.iterrows():
        verdict = {True: "yes", False: "no"}.get(row["within_spread"], "-")
        hardware = row.get("hardware")
        table.add_row(
            row["preset"], row["batching"], row["precision"], str(int(row["n"])), show(row["mean"]),
            show(row["sd"]), show(row["difference"], "+"), verdict, hardware if isinstance(hardware, str) else "",
        )  # fmt: skip
    console.print(table)


def _print_precision_over_training(matched, console) -> None:
    from rich.table import Table

    for (preset, batching, epoch), rows in matched.groupby(["preset", "batching", "epoch"], sort=True):
        table = Table(
            title=f"Precision check over training: {preset} / {batching}, seen-transformation val accuracy after epoch "
            f"{epoch:g}, the last that two runs of each precision reached (runs still training count)",
            caption="each run on its own validation sample, as its training logged it; precision_history.csv has every "
            "epoch",
        )
        for column in ("precision", "runs", "mean", "sd", "lowest-highest", "vs fp32"):
            table.add_column(column, justify="left" if column == "precision" else "right")
        fp32 = rows.loc[rows["precision"] == "fp32", "mean"]
        show = lambda value, sign="": "-" if value != value else f"{value:{sign}.1f}"
        for _, row in rows.iterrows():
            difference = row["mean"] - fp32.iloc[0] if len(fp32) and row["precision"] != "fp32" else float("nan")
            table.add_row(
                row["precision"], str(int(row["runs"])), show(row["mean"]), show(row["sd"]),
                f"{row['low']:.1f}-{row['high']:.1f}", show(difference, "+"),
            )  # fmt: skip
        console.print(table)


def _print_occurrence(summary, console) -> None:
    from rich.table import Table

    table = Table(
        title="Matching-head occurrence: runs with a matching head / runs analysed (paper, Appendix B)",
        caption="all: ours pools the batching methods of the runs analysed (named); the paper's, all four",
    )
    for column in ("preset", "batching", "ours", "paper"):
        table.add_column(column, justify="right" if column in ("ours", "paper") else "left")
    for _, row in summary.iterrows():
        paper = "-" if row["paper_n"] != row["paper_n"] else f"{int(row['paper_with_head'])}/{int(row['paper_n'])}"
        batching, methods = row["batching"], row.get("pooled")
        if batching == "all" and isinstance(methods, str) and methods:
            batching = f"all analysed: {methods}"
            paper += " (all four)" if paper != "-" else ""
        table.add_row(row["preset"], batching, f"{int(row['with_head'])}/{int(row['n'])}", paper)
    console.print(table)


def _counts_text(frame, counted, reasons) -> str:
    """How many runs runs.csv lists, how many count in the tables and why each other one does not."""
    text = (
        f"{len(frame)} runs in runs.csv, {len(counted)} counted in the tables and Figure 3 (one run per preset, "
        "batching method and seed)"
    )
    if len(reasons):
        text += "; not counted: " + "; ".join(f"{frame.loc[i, 'run']} ({reason})" for i, reason in reasons.items())
    return text


def _paper_sources_text() -> str:
    """Which of the paper's tables and figures each paper number of the output comes from, with copy-20's
    seenT/seenA in each, as they differ."""
    from lsa_interp.evaluation.paper_tables import PAPER_ALPHABETS, PAPER_BATCHING, PAPER_TABLE1

    return (
        "Paper numbers: Table 1 (table1.csv) is the paper's main results table (copy-20 seenT/seenA "
        f"{PAPER_TABLE1['copy-20'][0]:.1f}, the mean of 26 rows of four batching methods); the batching table "
        "(batching.csv) is the appendix's (copy-20 / random "
        f"{PAPER_BATCHING[('copy-20', 'random')][0][0]:.1f}, 11 rows: its 5 runs listed twice and a sixth); Figure "
        "3's open markers are the means of the authors' runs behind the paper's Figure 3 (copy-20 / random, 20 "
        f"alphabets: {PAPER_ALPHABETS[20]['random'][0]:.1f}, its 5 runs once each)."
    )


def register(app: typer.Typer) -> None:
    """Add the ``results`` command to ``app``."""

    @app.command(
        "results",
        epilog="Example: lsa-interp results --runs checkpoints --runs runs/grid --out runs/results (the repository's "
        "own tables in analyses/results are regenerated by the command in docs/results.md)",
    )
    def results(
        runs: Annotated[
            list[Path] | None,
            typer.Option(
                help="Directory to search for evaluated models (repeatable); default: the shipped checkpoints."
            ),
        ] = None,
        history: Annotated[
            list[Path] | None,
            typer.Option(
                help="Training run directory, or a directory of them (searched below: e.g. analyses/runs), whose "
                "metrics.jsonl to plot over epochs (repeatable)."
            ),
        ] = None,
        out: Annotated[
            Path,
            typer.Option(
                help="Where the tables (CSV) and figures (HTML) go (the repository's own: --out analyses/results)."
            ),
        ] = RESULTS_DIR,
        include_partial: Annotated[
            bool, typer.Option(help="Count runs that stopped before their last epoch in the means.")
        ] = False,
    ) -> None:
        """Collect every evaluated run into runs.csv, print Table 1 and the batching table (mean and bootstrap 95%
        interval over runs beside the paper's; a seed trained in several precisions counts once, in fp32) and the
        precision check where a condition was trained in several precisions (a verdict only where both precisions
        have 2 runs or more), and the matching head's occurrence over the runs analysed (by a sweep, or on a
        checkpoint's weights by ship); write figures.html: Figure 3 (accuracy by number of training alphabets), each
        analysed run's matching-head score against its share of sibling-rule answers (where evaluations have it),
        and with --history the training curves by preset, one run per seed as the tables count (and, where a
        condition's histories are in two precisions, the precision check over training: validation accuracy and
        training loss per epoch, and per epoch and precision the runs' mean and spread in precision_history.csv,
        printed at the last epoch that two runs of each precision reached)."""
        import html

        from rich.console import Console

        from lsa_interp.commands.common import refuse_foreign_out, writable_out
        from lsa_interp.evaluation import grid_summary
        from lsa_interp.evaluation.runs_table import find_runs, runs_table, write_runs_table
        from lsa_interp.evaluation.training_history import histories, matched_epoch, precision_by_epoch
        from lsa_interp.utils import atomic_write
        from lsa_interp.viz.grid_figures import (
            alphabets_figure,
            matching_vs_rule_figure,
            precision_curves_figure,
            training_curves_figure,
        )
        from lsa_interp.viz.html import figures_page

        curves = histories(history) if history else None  # a --history without runs fails before anything is written
        refuse_foreign_out(out)
        writable_out(out)
        from lsa_interp.model.checkpoint import CHECKPOINTS_DIR

        runs = runs or [CHECKPOINTS_DIR]
        model_dirs = find_runs(runs)
        if not model_dirs:
            raise ValueError(f"no evaluated model under {', '.join(map(str, runs))}")
        frame = runs_table(model_dirs)
        counted = grid_summary.counted_runs(frame, include_partial)
        frame = frame.assign(counted=frame.index.isin(counted.index))
        write_runs_table(frame, out / "runs.csv")
        summaries = {
            name: getattr(grid_summary, f"{name}_summary")(frame, include_partial)
            for name in ("table1", "batching", "alphabets", "few_shot", "precision", "occurrence")
        }
        for name, summary in summaries.items():
            write_runs_table(summary, out / f"{name}.csv")
        console = Console(width=160)
        _print_summaries(summaries["table1"], summaries["batching"], console)
        if not summaries["precision"].empty:
            _print_precision_check(summaries["precision"], console)
        if not summaries["occurrence"].empty:
            _print_occurrence(summaries["occurrence"], console)
        figures = {"Figure 3": alphabets_figure(summaries["alphabets"])}
        paired = matching_vs_rule_figure(frame)
        if paired.data:
            figures["Matching head and rule identification"] = paired
        counts = _counts_text(frame, counted, grid_summary.uncounted_reasons(frame, include_partial))
        intro = f"<p>{html.escape(counts)}.</p><p>{html.escape(_paper_sources_text())}</p>"
        if curves is not None and curves.empty:
            intro += "<p>No training curves: the --history runs have no epoch records yet.</p>"
        elif curves is not None:
            figures["Training curves"] = training_curves_figure(curves)
            by_precision = precision_curves_figure(curves)
            if by_precision is not None:
                figures["Precision check over training"] = by_precision
            over_training = precision_by_epoch(curves)
            if not over_training.empty:
                write_runs_table(over_training, out / "precision_history.csv")
                _print_precision_over_training(matched_epoch(over_training, curves), console)
        page = figures_page("Results over runs", figures, intro=intro)
        atomic_write(out / "figures.html", lambda p: p.write_text(page, encoding="utf-8"))
        console.print(f"{counts}; wrote {out}/runs.csv, the summaries and {out}/figures.html", highlight=False)
