"""CLI commands of the representation analyses: roles, invariance, cross-attention, elimination.

Heavy imports (torch, scikit-learn, the analyses) happen inside the commands, so other commands start fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from lsa_interp.commands.common import HEAD_HELP, DeviceOption, ModelOption, OutOption, SeedOption, finish, open_model

RulesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--transformation", "-t", help="A transformation to include; repeat for several (default: the 10 seen ones)."
    ),
]
AlphabetsOption = Annotated[
    str, typer.Option(help="standard (a..z), permuted (unseen permuted alphabets) or both (half each).")
]

TasksOption = Annotated[int, typer.Option("--tasks", min=1, help="Number of generated tasks (see above).")]


def _check(rules: list[str], alphabets: str) -> list[str]:
    """Validate transformation names and the alphabets choice before a model is loaded (ValueError: exit 2)."""
    from lsa_interp.analysis.activations import ALPHABET_KINDS
    from lsa_interp.data.transformations import get_transformation

    for rule in rules:
        get_transformation(rule)
    if alphabets not in ALPHABET_KINDS:
        raise ValueError(f"unknown --alphabets {alphabets!r}; choose one of {', '.join(ALPHABET_KINDS)}")
    return rules


def _seen() -> list[str]:
    from lsa_interp.data.transformations import SEEN

    return list(SEEN)


def register(app: typer.Typer) -> None:
    """Add the ``roles``, ``invariance``, ``cross-attention`` and ``elimination`` commands to ``app``."""

    @app.command(
        "roles",
        epilog=f"Example: lsa-interp roles --model copy-200 --tasks 400 -t pred -t succ --out runs/roles\n\n"
        f"{HEAD_HELP}",
    )
    def roles(
        model: ModelOption = "copy-200",
        tasks: TasksOption = 400,
        transformation: RulesOption = None,
        alphabets: AlphabetsOption = "both",
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Role assignment: do token roles separate more after encoder layer 1 (PCA densities, silhouette,
        role probe), and do the layer-1 heads attend to the separators? Of the --tasks, half fit the PCA and
        the probe and half are measured."""
        rules = _check(transformation or _seen(), alphabets)
        from lsa_interp.analysis.roles import role_assignment

        net = open_model(model, device)
        result = role_assignment(
            net, n_tasks=tasks, seed=seed, transformations=rules, alphabets=alphabets, model_name=model
        )
        finish(result, out, model)

    @app.command(
        "invariance", epilog="Example: lsa-interp invariance --model copy-200 --transformation pred --tasks 10"
    )
    def invariance(
        model: ModelOption = "copy-200",
        tasks: TasksOption = 10,
        transformation: Annotated[str, typer.Option(help="The transformation whose prompts are compared.")] = "pred",
        compare: Annotated[
            list[str] | None,
            typer.Option(help="Transformations of the by-rule table and control; repeat (default: the seen ones)."),
        ] = None,
        alphabets: AlphabetsOption = "standard",
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Compute mapping: cosine similarity of the last encoder layer's output at the first example-out token
        across --tasks prompts of one transformation (paper: 10 prompts, 0.958..0.997 for pred), the same for
        every --compare transformation, and controls."""
        rules = _check([transformation, *(compare or _seen())], alphabets)
        from lsa_interp.analysis.invariance import mapping_invariance

        net = open_model(model, device)
        result = mapping_invariance(
            net, transformation, n_prompts=tasks, seed=seed, alphabets=alphabets, compare=rules[1:], model_name=model
        )
        finish(result, out, model)

    @app.command(
        "cross-attention",
        epilog=f"Example: lsa-interp cross-attention --model copy-200 --transformation pred --tasks 500\n\n{HEAD_HELP}",
    )
    def cross_attention(
        model: ModelOption = "copy-200",
        tasks: TasksOption = 200,
        transformation: Annotated[str, typer.Option(help="Transformation of the tasks (the paper's: pred).")] = "pred",
        alphabets: AlphabetsOption = "both",
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Apply mapping: where each decoder layer's cross-attention looks at the first decoding step (first
        query letter, changed example-out letter, answer letter in the alphabet, ...), over --tasks tasks."""
        _check([transformation], alphabets)
        from lsa_interp.analysis.cross_attention import cross_attention_targets

        net = open_model(model, device)
        result = cross_attention_targets(
            net, transformation, n_tasks=tasks, seed=seed, alphabets=alphabets, model_name=model
        )
        finish(result, out, model)

    @app.command("elimination", epilog="Example: lsa-interp elimination --model copy-200 --tasks 200 -t pred")
    def elimination(
        model: ModelOption = "copy-200",
        tasks: TasksOption = 200,
        transformation: RulesOption = None,
        alphabets: AlphabetsOption = "both",
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Elimination: attention on EOS per token in the last encoder layer (EOS-attending: head-mean
        attention >= 0.3) and the collapse of those tokens' outputs (pairwise cosine, norms), over --tasks
        tasks split over the transformations."""
        rules = _check(transformation or _seen(), alphabets)
        from lsa_interp.analysis.elimination import elimination as run_elimination

        net = open_model(model, device)
        result = run_elimination(
            net, n_tasks=tasks, seed=seed, transformations=rules, alphabets=alphabets, model_name=model
        )
        finish(result, out, model)
