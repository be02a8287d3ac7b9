"""CLI commands: ``decoder-lens`` (decode from intermediate encoder layers) and ``rasp`` (heads vs RASP-L
selectors). Torch and the analyses are imported inside the commands, so ``--help`` stays fast."""

from __future__ import annotations

from typing import Annotated

import typer

from lsa_interp.commands.common import (
    HEAD_HELP,
    DeviceOption,
    ModelOption,
    OutOption,
    SeedOption,
    finish,
    open_model,
    out_dir,
)


def register(app: typer.Typer) -> None:
    """Add this group's commands to ``app``."""

    @app.command(
        "decoder-lens",
        epilog="Example: lsa-interp decoder-lens --model copy-200 --tasks 2000 --out runs/analysis/copy-200\n\n"
        "Without generating the dataset: lsa-interp decoder-lens --model copy-200 --source rules",
    )
    def decoder_lens(
        model: ModelOption = "copy-200",
        tasks: Annotated[int, typer.Option(min=1, help="Number of tasks (a deterministic subset).")] = 1000,
        source: Annotated[
            str,
            typer.Option(
                help="new: the new-alphabet test set of the model's training preset (all 19 rules, no copy rows; "
                "the paper's); val: its non-copy val rows (training alphabets); "
                "rules: generated tasks of the 10 seen rules in the standard alphabet."
            ),
        ] = "new",
        seed: Annotated[
            int, typer.Option(min=0, help="Seed of the subset, or of the generated tasks with --source rules.")
        ] = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Exact match when the decoder reads encoder layer k (after the final encoder norm) instead of the
        encoder output, for every layer k (1-based), overall and by transformation (paper: 0.0 / 1.9 / 66.5 % on
        the new-alphabet test set; the last layer is the model's own accuracy). Holds when the best earlier
        layer (95 % Wilson lower bound) is at most 0.029 x the last layer (the paper's 1.9 / 66.5)."""
        from lsa_interp.analysis.decoder_lens import SOURCES, decoder_lens as run_lens, lens_tasks

        if source not in SOURCES:
            raise ValueError(f"unknown task source {source!r} (--source); choose one of {', '.join(SOURCES)}")
        target = out_dir(out, model)
        net = open_model(model, device)
        result = run_lens(
            net,
            lens_tasks(net, tasks, seed, source, remedy="use --source rules, which needs none"),
            model_name=model,
            source=source,
        )
        finish(result, target, model)

    @app.command(
        "rasp",
        help="Compare every encoder head's attention with the paper's RASP-L selectors (pipe, arrow, same-as): "
        "a selector's finding holds when some head puts >= 0.5 of its attention on the selected keys, judged in "
        "encoder layer 1 for pipe and arrow (the layer the claim names) and in any layer for same-as (the best "
        "head of any layer is reported beside it). " + HEAD_HELP,
        epilog="Example: lsa-interp rasp --model copy-200 --out runs/analysis/copy-200\n\n"
        "On 500 tasks of the seen rules: lsa-interp rasp --model copy-200 --seen-rules --tasks 500",
    )
    def rasp(
        model: ModelOption = "copy-200",
        tasks: Annotated[
            int,
            typer.Option(
                min=1,
                help="Number of tasks the scores average over: the paper's pred prompts (a..z | ghi > fhi | bcd "
                "and more with the query fixed; at most 19), or with --seen-rules tasks of the 10 seen rules.",
            ),
        ] = 19,
        seen_rules: Annotated[
            bool, typer.Option(help="Score on tasks of the 10 seen rules (standard alphabet) instead.")
        ] = False,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Compare every encoder head's attention with the paper's RASP-L selectors."""
        from lsa_interp.analysis.rasp import paper_rasp_tasks, rasp_comparison, seen_rule_tasks

        chosen = seen_rule_tasks(tasks, seed) if seen_rules else paper_rasp_tasks(tasks, seed)
        target = out_dir(out, model)
        net = open_model(model, device)
        finish(rasp_comparison(net, chosen, model_name=model), target, model)
