"""CLI command ``ship``: copy a finished run's model into ``checkpoints/NAME`` with its card and analyses."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the ``ship`` command to ``app``."""

    @app.command(
        "ship",
        epilog="Example: lsa-interp ship runs/copy-200 --name copy-200 --force  (replaces the shipped copy-200)\n\n"
        "A replicate in bf16: lsa-interp ship runs/copy-20-reps --replicate 2 --name replicates/copy-20-s2 "
        "--storage bf16",
    )
    def ship(
        run_dir: Annotated[Path, typer.Argument(help="A finished training run (lsa-interp train --out RUN_DIR).")],
        name: Annotated[str, typer.Option(help="Checkpoint name: written to checkpoints/NAME.")],
        replicate: Annotated[int | None, typer.Option(min=0, help="Which replicate of a --replicates run.")] = None,
        storage: Annotated[
            str, typer.Option(help="Parameter dtype: fp32, or fp16/bf16 when they change < 0.1% of val answers.")
        ] = "fp32",
        dest: Annotated[
            Path | None, typer.Option(help="Checkpoints directory; default the repository's checkpoints/.")
        ] = None,
        limit: Annotated[
            int | None,
            typer.Option(
                min=1,
                help="Evaluate a subset of N rows per split (to try shipping out: CI accepts only cards of the full "
                "splits).",
            ),
        ] = None,
        reevaluate: Annotated[
            bool,
            typer.Option(
                help="Evaluate again where the model has its full-split evaluation and fit beside it (a sweep's), "
                "which shipping otherwise reuses (fp16/bf16 storage after its val check)."
            ),
        ] = False,
        force: Annotated[bool, typer.Option(help="Replace a checkpoint of that name (a re-trained one).")] = False,
    ) -> None:
        """Copy a finished run's model into checkpoints/NAME with a model card (card.md), evaluation.json and the
        matching-head analysis of the stored weights (matching_heads.json)."""
        from lsa_interp.analysis.matching import write_matching_json
        from lsa_interp.commands.common import writable_out
        from lsa_interp.evaluation.card import check_checkpoint_name, ship_run
        from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, STORAGE_DTYPES

        check_checkpoint_name(name)

        if storage not in STORAGE_DTYPES:
            raise ValueError(f"unknown storage {storage!r}; choose one of: {', '.join(STORAGE_DTYPES)}")
        checkpoint = (dest or CHECKPOINTS_DIR) / name
        if checkpoint.exists() and not force:
            raise FileExistsError(f"{checkpoint} exists; pass --force to replace it")
        writable_out(checkpoint.parent, "--dest")  # a nested name's folder too, made before the evaluation
        target = ship_run(
            run_dir,
            name,
            replicate,
            dest or CHECKPOINTS_DIR,
            storage,
            limit,
            progress=True,
            reevaluate=reevaluate,
            analyse=lambda model, folder: write_matching_json(model, name, folder),
        )
        print(f"shipped {target} ({target / 'card.md'})")
