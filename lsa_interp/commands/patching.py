"""CLI commands: ``matching-heads`` (detect matching heads, occurrence over runs), ``patch`` (attention-
pattern patching between two transformations), ``activation-patching`` (every layer, position and head) and
``path-patching`` (from sender heads into receivers' inputs).
Torch and the analyses are imported inside the commands, so ``--help`` and ``lsa-interp data ...`` stay fast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lsa_interp.commands.common import (
    HEAD_HELP,
    DeviceOption,
    ModelOption,
    OutOption,
    SeedOption,
    check_models,
    finish,
    open_model,
    out_dir,
    parse_lengths,
    progress_bar,
)

_ENGINES = ("hooks", "nnsight")
_ALPHABETS = ("standard", "permuted")
FromOption = Annotated[str, typer.Option("--from", help="Transformation whose activations are patched in.")]
ToOption = Annotated[str, typer.Option("--to", help="Transformation whose prompts are run.")]
PairsOption = Annotated[
    int, typer.Option(min=1, help="Minimal pairs offered (fewer where fewer exist); the solved ones are used.")
]
LengthOption = Annotated[
    int, typer.Option(min=2, max=24, help="Window length of the pairs (all prompts need one layout).")
]
AlphabetsOption = Annotated[
    str, typer.Option(help="Alphabets of the pairs: standard (a..z; default) or permuted (unseen ones).")
]
"""The minimal pairs' options of ``activation-patching`` and ``path-patching``."""


def _groups(compare: list[str]) -> dict[str, list[Path]]:
    """``NAME=GLOB`` options -> checkpoint paths per group; raises ValueError for a malformed option."""
    from lsa_interp.analysis.matching import expand_checkpoints

    groups: dict[str, list[Path]] = {}
    for item in compare:
        name, sep, pattern = item.partition("=")
        if not (sep and name.strip() and pattern.strip()):
            raise ValueError(f"--compare takes NAME=GLOB (e.g. copy='checkpoints/replicates/copy-20-*'), got {item!r}")
        groups.setdefault(name.strip(), []).extend(expand_checkpoints(pattern.strip()))
    return groups


def register(app: typer.Typer) -> None:
    """Add this group's commands to ``app``."""

    @app.command(
        "matching-heads",
        help="Score every encoder head for matching (a letter attends to the same letter in another role) and "
        "detect matching heads; with --compare, count the runs of each group that have one. " + HEAD_HELP,
        epilog="Example: lsa-interp matching-heads --model copy-200 --out runs/analysis/copy-200\n\n"
        "Occurrence over replicate runs (quote the globs): lsa-interp matching-heads "
        "--compare copy='checkpoints/replicates/copy-20-s*' --compare nocopy=checkpoints/nocopy-20",
    )
    def matching_heads(
        model: ModelOption = "copy-200",
        compare: Annotated[
            list[str] | None,
            typer.Option(
                help="NAME=GLOB: a group of checkpoints (run directories are searched for model/ and "
                "replicate-*/model); repeat for each group. Replaces --model."
            ),
        ] = None,
        threshold: Annotated[
            float | None, typer.Option(help="Matching-score threshold; default 0.25 (MATCHING_THRESHOLD).")
        ] = None,
        tasks: Annotated[int, typer.Option(min=1, help="Tasks per rule and alphabet kind (standard, permuted).")] = 20,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Detect matching heads (``--model``) or tabulate their occurrence over runs (``--compare``)."""
        from lsa_interp.analysis.matching import (
            MATCHING_THRESHOLD,
            matching_analysis,
            matching_occurrence,
            matching_tasks,
        )

        if threshold is not None and not 0 < threshold <= 1:
            raise ValueError(f"--threshold must be in (0, 1] (a matching score above uniform), got {threshold}")
        limit = MATCHING_THRESHOLD if threshold is None else threshold
        if compare:
            groups = _groups(compare)
            check_models(path for paths in groups.values() for path in paths)
            target = out_dir(out, "matching-occurrence")
            finish(matching_occurrence(groups, limit, matching_tasks(tasks, seed)), target, "matching-occurrence")
            return
        target = out_dir(out, model)
        net = open_model(model, device)
        finish(matching_analysis(net, model, limit, tasks=matching_tasks(tasks, seed)), target, model)

    @app.command(
        "patch",
        help="Attention-pattern patching: run the --to prompts with encoder heads' attention patterns taken "
        "from the --from prompts of minimal pairs (same alphabet, example input and query) and count the answers "
        "that switch to the --from rule's answer. The finding holds when >= 74 % switch (the paper's 10/10 is "
        "then at least 5 % likely); no verdict when the model solves under half the --to prompts. " + HEAD_HELP,
        epilog="Example: lsa-interp patch --model copy-200 --head 2.7 --from succ --to pred --pairs 200\n\n"
        "Every head (flip-rate heat map): lsa-interp patch --head all\n\n"
        "Two heads together: lsa-interp patch --head 1.3+2.3\n\n"
        "Steering matrix of the detected matching heads: lsa-interp patch --head auto --matrix --pairs 50\n\n"
        "Over a few rules: lsa-interp patch --matrix --rules succ,pred,remove_redundant,rr_succ (4 of its 12 cells; "
        "among the seen rules only succ/pred and remove_redundant/rr_succ prompts align token for token, the other "
        "cells are NaN and listed under missing)",
    )
    def patch(
        model: ModelOption = "copy-200",
        head: Annotated[
            str,
            typer.Option(
                help="'L.H' (1-based, as in the paper: 2.7 = encoder layer 2, head 7), several "
                "joined by '+' and patched together (1.3+2.3), 'auto' (every detected matching "
                "head, together) or 'all' (every encoder head, one at a time)."
            ),
        ] = "auto",
        source: Annotated[str, typer.Option("--from", help="Transformation whose pattern is patched in.")] = "succ",
        target: Annotated[str, typer.Option("--to", help="Transformation whose prompts are run.")] = "pred",
        pairs: Annotated[int, typer.Option(min=1, help="Minimal pairs (per cell with --matrix).")] = 200,
        engine: Annotated[str, typer.Option(help="hooks (batched TransformerLens hooks) or nnsight.")] = "hooks",
        matrix: Annotated[
            bool, typer.Option(help="Patch every ordered pair of --rules (the --head heads): the steering matrix.")
        ] = False,
        rules: Annotated[
            str | None, typer.Option(help="Comma-separated transformations of --matrix; default: the paper's 19.")
        ] = None,
        lengths: Annotated[
            str | None,
            typer.Option(
                help="Comma-separated window lengths of the minimal pairs; default 3 (the paper's: padding-free "
                "pairs of equal length), or e.g. 3,4,5,6,7 for every training length (the --matrix default: "
                "many rule pairs have no 3-letter pairs)."
            ),
        ] = None,
        alphabets: Annotated[
            str | None,
            typer.Option(
                help="Alphabets of the minimal pairs: standard (a..z, the paper's; default) or permuted (unseen ones)."
            ),
        ] = None,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Patch heads' attention patterns from --from prompts into --to prompts (or --matrix)."""
        from lsa_interp.analysis.patching import PAPER_LENGTHS
        from lsa_interp.analysis.prompts import WINDOW_LENGTHS
        from lsa_interp.data.transformations import PAPER, get_transformation

        if engine not in _ENGINES:
            raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(_ENGINES)}")
        if matrix and head.strip().lower() == "all":
            raise ValueError("--matrix patches the heads it is given together; give --head L.H, L.H+L.H or auto")
        if rules is not None and not matrix:
            raise ValueError("--rules chooses the rules of --matrix; without it, patch --from into --to")
        if matrix and (source, target) != ("succ", "pred"):
            raise ValueError("--matrix patches every ordered pair of --rules; --from and --to do not apply")
        if alphabets is not None and alphabets not in _ALPHABETS:
            raise ValueError(f"unknown --alphabets {alphabets!r}; choose one of {', '.join(_ALPHABETS)}")
        names = [name.strip() for name in rules.split(",") if name.strip()] if rules is not None else list(PAPER)
        if not names:
            raise ValueError("--rules names no rule: give rules joined by commas, e.g. succ,pred")
        windows = parse_lengths(lengths) if lengths is not None else (WINDOW_LENGTHS if matrix else PAPER_LENGTHS)
        for name in (source, target, *names):
            get_transformation(name)
        if source == target:
            message = f"--from and --to are both {source!r}"
            raise ValueError(f"{message}; give two different rules, e.g. --from succ --to pred")
        target_dir = out_dir(out, model)
        net = open_model(model, device)
        if matrix:
            from lsa_interp.analysis.steering import steering_analysis

            result = steering_analysis(
                net, model, head, names, pairs, seed, engine, alphabets=alphabets or "standard", lengths=windows
            )
            finish(result, target_dir, model)
            return
        from lsa_interp.analysis.patching import patching_analysis

        result = patching_analysis(
            net, model, source, target, head, pairs, seed, engine, alphabets=alphabets or "standard", lengths=windows
        )
        finish(result, target_dir, model)

    @app.command(
        "activation-patching",
        help="Activation patching on minimal pairs (same alphabet, example input and query): run the --to prompts "
        "with one activation taken from the --from prompts (the encoder's residual stream, attention and MLP "
        "outputs at each position; every encoder and decoder head at all positions) and measure the logit "
        "difference where the two answers part, normalised: 1 = the --from prompt's, 0 = unchanged. Uses the "
        "pairs the model answers right on both sides; not a finding of the paper, so reported, not judged.",
        epilog="Example: lsa-interp activation-patching --model copy-200 --from succ --to pred --pairs 100\n\n"
        "Heads only: lsa-interp activation-patching --site heads\n\n"
        "Each encoder head at each position: lsa-interp activation-patching --site 'encoder heads by position'\n\n"
        "Estimated from gradients (attribution patching, integrated over 10 steps): lsa-interp activation-patching "
        "--method attribution --site 'encoder heads by position'",
    )
    def activation_patching(
        model: ModelOption = "copy-200",
        source: FromOption = "succ",
        target: ToOption = "pred",
        pairs: PairsOption = 100,
        length: LengthOption = 3,
        site: Annotated[
            list[str] | None,
            typer.Option(
                help="What to patch, repeatable: 'encoder residual', 'encoder attention output', "
                "'encoder MLP output', heads, 'encoder heads by position' (24 x 39 runs for the paper's model) or "
                "'decoder residual' (each layer's residual stream at the step where the answers part); default the "
                "first four."
            ),
        ] = None,
        alphabets: AlphabetsOption = "standard",
        method: Annotated[
            str,
            typer.Option(
                help="exact (one patched run per cell; default) or attribution (every cell estimated from gradients: "
                "(source - target activation) . gradient, integrated over --steps; seconds, not minutes, but an "
                "estimate: docs/matching_and_patching.md has how close it comes)."
            ),
        ] = "exact",
        steps: Annotated[
            int,
            typer.Option(
                min=1, help="With --method attribution: integration steps (1: the gradient at the --to run alone)."
            ),
        ] = 10,
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Patch every encoder position, layer and head from --from prompts into --to prompts."""
        from lsa_interp.analysis.activation_patching import DEFAULT_SITES, METHODS, SITES, activation_patching_analysis

        sites = site or list(DEFAULT_SITES)
        unknown = [name for name in sites if name not in SITES]
        if unknown:
            raise ValueError(f"unknown --site {unknown[0]!r}; choose from: {', '.join(SITES)}")
        if method not in METHODS:
            raise ValueError(f"unknown --method {method!r}; choose one of {', '.join(METHODS)}")
        _check_pair_options(source, target, alphabets)
        target_dir = out_dir(out, model)
        net = open_model(model, device)
        with progress_bar() as bar:
            task = bar.add_task("patched runs" if method == "exact" else "gradient runs", total=None)
            result = activation_patching_analysis(
                net,
                model,
                source,
                target,
                pairs,
                seed,
                alphabets,
                length,
                sites,
                lambda done, total: bar.update(task, completed=done, total=total),
                method,
                steps,
            )
        finish(result, target_dir, model)

    @app.command(
        "path-patching",
        help="Path patching on minimal pairs: run the --to prompts with the --sender heads' outputs taken from the "
        "--from prompts and every other head frozen, record what the --receiver heads read (their q, k or v; or the "
        "memory, the encoder output), then patch only those inputs. Measures what travels from the senders to the "
        "receivers along paths through no other head, normalised as activation-patching: 1 = the --from prompt's "
        "logit difference. With senders only: every receiver they reach; with receivers only: every sender. "
        + HEAD_HELP,
        epilog="Example: lsa-interp path-patching --model copy-200 --sender 1.3\n\n"
        "One path: lsa-interp path-patching --model checkpoints/replicates/copy-20-s2-bf16 --sender 1.7 "
        "--receiver 2.3\n\n"
        "Every head's path into the keys and values of the last layer's cross-attention head 1: lsa-interp "
        "path-patching --receiver cross:3.1/kv\n\n"
        "A chain: lsa-interp path-patching --model checkpoints/replicates/copy-20-s2-bf16 --sender 1.7 --through 2.3 "
        "--receiver 3.1\n\n"
        "From 1.3's output at the two changed letters into layer 3's keys and values there, and 1.3's whole effect "
        "with layer 3 frozen: lsa-interp path-patching --sender 1.3@31,33 --receiver '3.*/kv@31,33' --freeze '3.*'",
    )
    def path_patching(
        model: ModelOption = "copy-200",
        sender: Annotated[
            list[str] | None,
            typer.Option(
                help="A sender head ('1.3', 'dec:1.2', 'cross:2.1'; '1.*': every head of the layer), repeatable; its "
                "output at some positions only with '@' ('1.3@31,33', 0-based)."
            ),
        ] = None,
        receiver: Annotated[
            list[str] | None,
            typer.Option(
                help="A receiver, repeatable: a head and the inputs it reads through ('2.3/v', 'cross:3.1/kv'; a bare "
                "head reads through q, k and v; '3.*/kv': every head of the layer), at some positions only with '@' "
                "('3.7/kv@31,33', 0-based), or 'memory'."
            ),
        ] = None,
        through: Annotated[
            list[str] | None,
            typer.Option(
                help="A hop between the senders and the receivers, repeatable, in order: receivers as for --receiver "
                "('2.3', '2.*/v'); the path then runs from the senders into the first hop's inputs, from its heads "
                "into the next hop's, and so on into the receivers, every other head frozen at each step."
            ),
        ] = None,
        freeze: Annotated[
            list[str] | None,
            typer.Option(
                help="Also measure the senders' whole effect with these heads' outputs kept at the --to prompt's, "
                "which cuts every path through them ('2.7'; '2.*': a layer's heads), repeatable."
            ),
        ] = None,
        direct: Annotated[
            bool,
            typer.Option(
                "--direct",
                help="With --through: the senders keep sending at every hop, so the receivers get what comes "
                "through the hops and what comes from the senders directly, together.",
            ),
        ] = False,
        sender_positions: Annotated[
            str | None,
            typer.Option(
                help="With --receiver and no --sender: every head's path from its output at these 0-based positions "
                "only ('31,33'), not at all positions."
            ),
        ] = None,
        source: FromOption = "succ",
        target: ToOption = "pred",
        pairs: PairsOption = 100,
        length: LengthOption = 3,
        alphabets: AlphabetsOption = "standard",
        seed: SeedOption = 0,
        out: OutOption = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Patch the paths from --sender heads into --receiver inputs, from --from prompts into --to prompts."""
        from lsa_interp.analysis.path_patching_analysis import path_patching_analysis, path_request

        if not sender and not receiver:
            raise ValueError(
                "give --sender heads (e.g. --sender 1.3), --receiver inputs (e.g. --receiver 2.3/v) or both"
            )
        _check_pair_options(source, target, alphabets)
        target_dir = out_dir(out, model)
        net = open_model(model, device)
        path_request(net.cfg, sender or [], receiver or [], freeze or [], through or [], sender_positions, direct)
        with progress_bar() as bar:
            task = bar.add_task("patched paths", total=None)
            result = path_patching_analysis(
                net,
                model,
                sender or [],
                receiver or [],
                source,
                target,
                pairs,
                seed,
                alphabets,
                length,
                lambda done, total: bar.update(task, completed=done, total=total),
                freeze or [],
                through or [],
                sender_positions,
                direct,
            )
        finish(result, target_dir, model)


def _check_pair_options(source: str, target: str, alphabets: str) -> None:
    """Raise ValueError (exit 2) for unknown rules or alphabets, or one rule on both sides of the pairs."""
    from lsa_interp.data.transformations import get_transformation

    if alphabets not in _ALPHABETS:
        raise ValueError(f"unknown --alphabets {alphabets!r}; choose one of {', '.join(_ALPHABETS)}")
    get_transformation(source), get_transformation(target)
    if source == target:
        message = f"--from and --to are both {source!r}"
        raise ValueError(f"{message}; give two different rules, e.g. --from succ --to pred")
