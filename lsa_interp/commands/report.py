"""CLI command ``report``: every finding of the paper on one model, in one offline HTML page."""

from __future__ import annotations

import typer

from lsa_interp.commands.common import DeviceOption, ModelOption, OutOption, SeedOption, default_out, open_model


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to ``app``."""

    @app.command(
        "report",
        epilog="Example: lsa-interp report --model copy-200 --out runs/report/copy-200",
    )
    def report(
        model: ModelOption = "copy-200",
        out: OutOption = None,
        seed: SeedOption = 0,
        device: DeviceOption = "cpu",
    ) -> None:
        """Run every analysis (roles, matching heads, patching with a control head, invariance, cross-attention,
        elimination, decoder lens, RASP) and write report.html (findings table: paper vs ours, holds or not,
        plus every figure) and report.json. About two minutes on a 2-core CPU."""
        from rich.console import Console
        from rich.table import Table

        from lsa_interp.analysis.report import run_report

        console = Console(stderr=True)
        net = open_model(model, device)
        with console.status("analysing") as status:
            result = run_report(net, model, seed, progress=lambda name: status.update(f"running {name}"))
        table = Table(title=f"findings: {model}")
        for column in ("finding", "paper", "ours", "verdict"):
            table.add_column(column)
        for f in result.findings:
            table.add_row(
                f.name, f.paper, f.ours, {True: "[green]holds", False: "[red]does not hold"}.get(f.holds, "n/a")
            )
        Console(width=140).print(table)
        paths = result.write(out if out is not None else default_out(model))
        Console().print(
            f"wrote {paths['html']} and {paths['json']} in {sum(result.seconds.values()):.0f} s", highlight=False
        )
