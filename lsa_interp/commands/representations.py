"""CLI commands of the representation analyses: roles, invariance, cross-attention, elimination.

Each defaults to the authors' measurement (SPEC 5b: their prompts, residuals through the final encoder
LayerNorm, solved tasks only where a mechanism is read off); the options reach the library's variants.
Heavy imports (torch, scikit-learn, the analyses) happen inside the commands, so other commands start fast,
which is why the thresholds in the help texts are written out (a test checks them against the library).
"""

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
    parse_lengths,
)

PROMPT_KINDS = ("paper", "random")
RulesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--transformation",
        "-t",
        help="A transformation to include; repeat for several (default: the 10 seen ones). With --prompts random only.",
    ),
]
AlphabetsOption = Annotated[
    str | None,
    typer.Option(
        help="standard (a..z), permuted (unseen permuted alphabets) or both (half each); with --prompts random "
        "only (default: both)."
    ),
]
PromptsOption = Annotated[
    str,
    typer.Option(
        help="paper: prompts built as the authors built theirs (standard alphabet, 3-letter windows, no letter "
        "shared between example and query); random: example and query drawn independently."
    ),
]
FinalNormOption = Annotated[
    bool,
    typer.Option(
        "--final-norm/--raw",
        help="Read the residuals through the final encoder LayerNorm, as the authors read every layer, or raw.",
    ),
]
LayerOption = Annotated[
    int | None, typer.Option(min=1, help="Encoder layer, 1-based as in the paper (default: the last).")
]
TasksOption = Annotated[int, typer.Option("--tasks", min=1, help="Number of generated tasks (see above).")]
PairedTasksOption = Annotated[int, typer.Option("--tasks", min=2, help="Number of generated tasks (see above).")]
"""--tasks of roles (a fit half and a test half): at least 2."""
InvarianceTasksOption = Annotated[
    int,
    typer.Option(
        "--tasks",
        min=2,
        help="Number of prompts compared (pairwise cosines): 2 to, with --prompts paper, the number of the "
        "--transformation's prompts of the paper's form (pred: 19; other rules' differ, some with --seed), with "
        "--prompts random, of the distinct tasks that can be made; more is refused, naming the range.",
    ),
]
"""--tasks of invariance: at least 2 (a cosine needs two prompts), at most the prompts there are
(`_invariance_tasks`)."""


def _check(rules: list[str], alphabets: str | None) -> list[str]:
    """Validate transformation names and the alphabets choice before a model is loaded (ValueError: exit 2)."""
    from lsa_interp.analysis.activations import ALPHABET_KINDS
    from lsa_interp.data.transformations import get_transformation

    for rule in rules:
        get_transformation(rule)
    if alphabets is not None and alphabets not in ALPHABET_KINDS:
        raise ValueError(f"unknown --alphabets {alphabets!r}; choose one of {', '.join(ALPHABET_KINDS)}")
    return rules


def _check_prompts(prompts: str, **random_only: object) -> None:
    """Refuse an unknown --prompts, and options that only random prompts use given (even empty) with the paper's;
    raises ValueError (exit 2)."""
    if prompts not in PROMPT_KINDS:
        raise ValueError(f"unknown --prompts {prompts!r}; choose one of {', '.join(PROMPT_KINDS)}")
    given = [f"--{name}" for name, value in random_only.items() if value is not None]
    if prompts == "paper" and given:
        raise ValueError(f"{', '.join(given)} applies to --prompts random only; the paper's prompts fix it")


def _invariance_tasks(prompts: str, rule: str, tasks: int, seed: int, alphabets: str, lengths: list[int]) -> None:
    """Refuse (ValueError: exit 2), before a model is loaded, more --tasks than ``rule`` has prompts of the kind
    asked for, naming the allowed range."""
    from lsa_interp.analysis.activations import analysis_tasks
    from lsa_interp.analysis.prompts import paper_prompts
    from lsa_interp.data.transformations import ALPHABET_SIZE

    def error(n: int) -> ValueError | None:
        try:
            if prompts == "paper":
                paper_prompts(rule, n, seed)
            else:
                analysis_tasks([rule], n, seed, alphabets, lengths)
        except ValueError as e:
            return e
        return None

    problem = error(tasks)
    if problem is None:
        return
    if prompts == "paper":
        most = next((n for n in range(ALPHABET_SIZE - 2, 0, -1) if error(n) is None), 0)  # one per example window
        raise ValueError(
            f"--tasks {tasks} is out of range: {rule} has {most} prompts of the paper's form, so give 2..{most} "
            "(or --prompts random)"
        )
    each = "; --alphabets both asks half the tasks of each kind" if alphabets == "both" else ""
    raise ValueError(
        f"--tasks {tasks} is out of range: give 2 up to the distinct {rule} tasks these --alphabets and --lengths "
        f"make ({problem}{each})"
    )


def _layer(model, layer: int | None) -> int:
    """A 1-based --layer as the library's 0-based index (-1: the last); ValueError (exit 2) beyond the encoder."""
    if layer is None:
        return -1
    if layer > model.cfg.n_encoder_layers:
        raise ValueError(f"--layer {layer} is beyond the model's {model.cfg.n_encoder_layers} encoder layers")
    return layer - 1


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
        tasks: PairedTasksOption = 400,
        transformation: Annotated[
            list[str] | None,
            typer.Option(
                "--transformation", "-t", help="A transformation to include; repeat (default: the 10 seen ones)."
            ),
        ] = None,
        alphabets: Annotated[
            str, typer.Option(help="standard (a..z), permuted (unseen permuted alphabets) or both (half each).")
        ] = "both",
        final_norm: FinalNormOption = True,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Role assignment: do token roles separate more after encoder layer 1 (PCA densities, silhouette,
        role probe), and do the layer-1 heads attend to the separators? Of the --tasks, half fit the PCA and
        the probe and half are measured. Holds: the PCA-plane silhouette rises by >= 0.05 and the probe
        accuracy falls by < 0.02; both example-out density overlaps fall by >= 0.05; at least 2 layer-1 heads
        put >= 0.5 of their attention on the separators."""
        rules = _check(transformation or _seen(), alphabets)
        from lsa_interp.analysis.roles import role_assignment

        target = out_dir(out, model)
        net = open_model(model, device)
        result = role_assignment(
            net,
            n_tasks=tasks,
            seed=seed,
            transformations=rules,
            alphabets=alphabets,
            model_name=model,
            normed=final_norm,
        )
        finish(result, target, model)

    @app.command(
        "invariance",
        epilog="Example: lsa-interp invariance --model copy-200 --transformation pred --tasks 10\n\n"
        "As first measured here: lsa-interp invariance --prompts random --raw --alphabets both",
    )
    def invariance(
        model: ModelOption = "copy-200",
        tasks: InvarianceTasksOption = 10,
        transformation: Annotated[str, typer.Option(help="The transformation whose prompts are compared.")] = "pred",
        compare: Annotated[
            list[str] | None,
            typer.Option(help="Transformations of the by-rule table and control; repeat (default: the seen ones)."),
        ] = None,
        prompts: PromptsOption = "paper",
        final_norm: FinalNormOption = True,
        layer: LayerOption = None,
        alphabets: Annotated[
            str | None,
            typer.Option(help="standard, permuted or both; with --prompts random only (default: standard)."),
        ] = None,
        lengths: Annotated[
            str | None,
            typer.Option(help="Comma-separated window lengths; with --prompts random only (default: 3)."),
        ] = None,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Compute mapping: pairwise cosines of the encoder layer's output at the first example-out token
        across --tasks prompts of one transformation (paper: 10 pred prompts with the query fixed at bcd, 45
        cosines in 0.958..0.997; holds when the smallest is >= 0.958), the same for every --compare
        transformation, and controls (specific: the within-rule mean exceeds every control mean by >= 0.02)."""
        _check_prompts(prompts, alphabets=alphabets, lengths=lengths)
        rules = _check([transformation, *(compare or _seen())], alphabets)
        windows = parse_lengths(lengths if lengths is not None else "3")
        _invariance_tasks(prompts, transformation, tasks, seed, alphabets or "standard", windows)
        from lsa_interp.analysis.invariance import mapping_invariance

        target = out_dir(out, model)
        net = open_model(model, device)
        result = mapping_invariance(
            net,
            transformation,
            n_prompts=tasks,
            seed=seed,
            alphabets=alphabets or "standard",
            lengths=windows,
            layer=_layer(net, layer),
            compare=rules[1:],
            model_name=model,
            prompts=prompts,
            normed=final_norm,
        )
        finish(result, target, model)

    @app.command(
        "cross-attention",
        epilog=f"Example: lsa-interp cross-attention --model copy-200 --transformation pred --tasks 300\n\n{HEAD_HELP}",
    )
    def cross_attention(
        model: ModelOption = "copy-200",
        tasks: TasksOption = 200,
        transformation: Annotated[str, typer.Option(help="Transformation of the tasks (the paper's: pred).")] = "pred",
        prompts: PromptsOption = "paper",
        solved_only: Annotated[
            bool,
            typer.Option(
                "--solved-only/--all-tasks",
                help="Read the mechanism off the tasks the model solves (the authors' way), or off every task.",
            ),
        ] = True,
        alphabets: AlphabetsOption = None,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Apply mapping: where each decoder layer's cross-attention looks at the first decoding step (first
        query letter, changed example-out letter, answer letter in the alphabet, ...), over --tasks tasks.
        A layer's finding holds when the head mean has its argmax on the paper's target in >= 50 % of the judged
        tasks (the best single head is shown beside it, not counted; no verdict when the model solves none)."""
        _check_prompts(prompts, alphabets=alphabets)
        _check([transformation], alphabets)
        from lsa_interp.analysis.cross_attention import cross_attention_targets

        target = out_dir(out, model)
        net = open_model(model, device)
        result = cross_attention_targets(
            net,
            transformation,
            n_tasks=tasks,
            seed=seed,
            alphabets=alphabets or "both",
            model_name=model,
            prompts=prompts,
            solved_only=solved_only,
        )
        finish(result, target, model)

    @app.command(
        "elimination",
        epilog="Example: lsa-interp elimination --model copy-200 --tasks 200\n\n"
        "On tasks of other rules and alphabets: lsa-interp elimination --prompts random -t pred -t succ "
        "--alphabets both",
    )
    def elimination(
        model: ModelOption = "copy-200",
        tasks: TasksOption = 200,
        prompts: PromptsOption = "paper",
        final_norm: FinalNormOption = True,
        layer: LayerOption = None,
        transformation: RulesOption = None,
        alphabets: AlphabetsOption = None,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Elimination: the irrelevant tokens (separators and alphabet letters used nowhere in the task) of the
        encoder layer: their attention sink in the layer's strongest head (their mean attention on EOS, the paper's
        sink, and on their top key, whatever it is; holds from 0.4, the paper's lowest; the head mean is shown
        beside it) and their collapse (mean within-task pairwise
        cosine of their outputs, holds from 0.975, i.e. rounding to the paper's 0.98; norms kept: ratio to the
        other tokens >= 0.75). Default prompts: the paper's successor prompts (a..z | ghi > ghj | bcd and more
        of its form)."""
        _check_prompts(prompts, transformation=transformation, alphabets=alphabets)
        rules = _check(transformation or _seen(), alphabets)
        from lsa_interp.analysis.elimination import elimination as run_elimination

        target = out_dir(out, model)
        net = open_model(model, device)
        result = run_elimination(
            net,
            n_tasks=tasks,
            seed=seed,
            transformations=rules,
            alphabets=alphabets or "both",
            layer=_layer(net, layer),
            model_name=model,
            prompts=prompts,
            normed=final_norm,
        )
        finish(result, target, model)
