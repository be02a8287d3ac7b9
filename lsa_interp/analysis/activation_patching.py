"""Activation patching (denoising) on minimal pairs: which activations carry the difference between two rules.

A minimal pair's prompts share the alphabet, the example input and the query; only the example output follows a
different rule (`lsa_interp.analysis.prompts.minimal_pairs`). We run the *target* prompt (the "corrupted" run of
TransformerLens's patching) with one activation taken from the *source* prompt (the "clean" run) and read the first
decoding step where the two answers part: both runs are teacher-forced on the answers' shared prefix (``pred`` on
``bcd`` gives ``acd``, ``succ`` gives ``bce``: step 0, ``a`` against ``b``). The measure is the logit difference
there, source letter minus target letter, its mean over pairs normalised as TransformerLens's patching does it::

    (patched - target run) / (source run - target run)

1 means the activation alone moves the answer's logits all the way to the source prompt's, 0 that it changes
nothing. For encoder activations the patched prompts are also decoded greedily: the shares of answers that become
the source prompt's and that are neither prompt's (a one-letter patch can make an example of neither rule).

Sites (TransformerLens's ``get_act_patch_resid_pre``, ``..._attn_out``, ``..._mlp_out``,
``..._attn_head_out_all_pos`` and ``..._by_pos``): the encoder's residual stream (``hook_resid_pre`` of each layer,
then the memory ``encoder.ln_final.hook_out``), its attention and MLP outputs, one position at a time; every head's
``hook_z`` at all positions, for the encoder, the decoder's self-attention and its cross-attention; and each encoder
head at each position; the decoder's residual stream at each pair's parting step. `patch_together` patches several
activations in one run. The positions of all pairs must
line up, so the pairs come from one window length. Every run (source, target, patched) calls each attention's
hook points, so all of them execute the same floating-point operations (docs/hooks.md: the fused path rounds
differently): patching nothing gives the target run, patching a whole layer the source run, to the bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.analysis.activations import eval_mode
from lsa_interp.analysis.attribution_patching import attribute_activations, check_steps
from lsa_interp.analysis.pair_batch import pair_batch
from lsa_interp.analysis.patch_grids import (
    ATTN_OUT,
    DECODER_RESID,
    DEFAULT_SITES,
    HEAD_POSITIONS,
    HEADS,
    MLP_OUT,
    RESID,
    SITES,
    ActivationPatching,
    GridSheet,
    PatchEffect,
    PatchingGrid,
    check_sites,
    module_label,
    patch_effect,
    site_rows,
)
from lsa_interp.analysis.patch_runs import (
    Index,
    answer_width,
    pair_runs,
    parting_steps,
    patched_target,
    replace_at,
    shared_position_labels,
)
from lsa_interp.analysis.prompts import MinimalPair, minimal_pairs
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.tokenizer import decode_batch
from lsa_interp.model.hooked import HookedEncoderDecoder

__all__ = [
    "ATTN_OUT",
    "DECODER_RESID",
    "DEFAULT_SITES",
    "HEADS",
    "HEAD_POSITIONS",
    "METHODS",
    "MLP_OUT",
    "RESID",
    "SITES",
    "ActivationPatching",
    "PatchEffect",
    "PatchingGrid",
    "activation_patching_analysis",
    "answers_text",
    "grid_data",
    "letters_text",
    "module_label",
    "offered_and_solved",
    "patch_activations",
    "patch_together",
    "patching_heatmap",
    "solved_pairs",
]
"""The sites and result types live in `lsa_interp.analysis.patch_grids` and are named here too."""
METHODS = ("exact", "attribution")
"""How `activation_patching_analysis` fills its grids: one patched run per cell, or `attribute_activations`."""


def patch_activations(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    sites: Sequence[str] = DEFAULT_SITES,
    progress: Callable[[int, int], None] | None = None,
    answers: bool = True,
) -> ActivationPatching:
    """Patch each activation of ``sites`` from the source prompts into the target prompts of ``pairs``, one at a
    time, all pairs in one batch; ``progress(done, total)`` after each patched run. Returns the grids; without
    ``answers`` no patched prompt is decoded greedily (the answers' shares are NaN; the logit differences only).

    Raises ValueError for an unknown site, pairs that `pair_batch` refuses, or pairs whose prompts do not share
    one token layout across pairs (use one window length)."""
    check_sites(sites)
    with torch.no_grad(), eval_mode(model):
        batch = pair_batch(pairs)
        positions = shared_position_labels(batch.source, batch.target)
        parting = parting_steps(pairs)
        layout = {site: site_rows(model, site, positions, (torch.arange(len(pairs)), parting[0])) for site in sites}
        needed = sorted({hook for rows, _ in layout.values() for hook, _, _ in rows})
        runs = pair_runs(model, pairs, needed, batch, parting)
        answered = (batch.source_answers, batch.target_answers)
        total, done = sum(len(rows) * len(columns) for rows, columns in layout.values()), 0
        width, grids = answer_width(batch.source_answers, batch.target_answers) if answers else 0, {}
        for site, (rows, columns) in layout.items():
            sheet = GridSheet(len(rows), len(columns), width)
            for row, (hook, _, indices) in enumerate(rows):
                for column, index in enumerate(indices):
                    patches = {hook: partial(replace_at, donor=runs.saved[hook], index=index)}
                    decoded = answered if answers and hook.startswith("encoder.") else None
                    diff, shares = patched_target(model, runs, patches, decoded)
                    sheet.fill(row, column, patch_effect(diff, runs.source_diff, runs.target_diff, shares))
                    done += 1
                    if progress:
                        progress(done, total)
            hooks, labels = tuple(hook for hook, _, _ in rows), tuple(label for _, label, _ in rows)
            grids[site] = sheet.grid(site, hooks, labels, columns)
        source_rule, target_rule = pairs[0].source.transformation or "", pairs[0].target.transformation or ""
        return ActivationPatching(
            source_rule, target_rule, len(pairs), positions, runs.source_diff, runs.target_diff, grids
        )


def patch_together(
    model: HookedEncoderDecoder, pairs: Sequence[MinimalPair], cells: Sequence[tuple[str, Index]]
) -> PatchEffect:
    """Patch every ``(hook, index)`` of ``cells`` from the source prompts into the target prompts in one run (e.g.
    ``[("encoder.0.attn.hook_z", (slice(None), slice(None), 2)), ("encoder.0.attn.hook_z", (slice(None), slice(None),
    5))]``: heads 1.3 and 1.6 together). Raises ValueError for no cells, a hook the model lacks, an index that does not
    fit its activation (batch axis first), or pairs that `pair_batch` refuses."""
    if not cells:
        raise ValueError("patch_together needs at least one (hook, index) cell")
    with torch.no_grad(), eval_mode(model):
        by_hook: dict[str, list[Index]] = {}
        for hook, index in cells:
            by_hook.setdefault(hook, []).append(index)
        batch = pair_batch(pairs)
        runs = pair_runs(model, pairs, list(by_hook), batch, parting_steps(pairs))
        for hook, indices in by_hook.items():
            _check_indices(hook, indices, runs.saved[hook])
        patches = {
            hook: partial(_replace_all, donor=runs.saved[hook], indices=indices) for hook, indices in by_hook.items()
        }
        answered = (batch.source_answers, batch.target_answers)
        encoder_only = all(hook.startswith("encoder.") for hook in by_hook)
        diff, outcomes = patched_target(model, runs, patches, answered if encoder_only else None)
        return patch_effect(diff, runs.source_diff, runs.target_diff, outcomes)


def _check_indices(hook: str, indices: list[Index], activation: Tensor) -> None:
    """Raise ValueError naming the cell whose index does not fit ``hook``'s activation (its batch axis first)."""
    for index in indices:
        try:
            activation[index]
        except (IndexError, TypeError) as error:
            shape = "[" + ", ".join(map(str, activation.shape)) + "]"
            message = f"cell ({hook!r}, {index!r}) does not index {hook}'s activation of shape {shape}: {error}"
            raise ValueError(message) from None


def _replace_all(tensor: Tensor, donor: Tensor, indices: list[Index]) -> Tensor:
    for index in indices:
        tensor = replace_at(tensor, donor, index)
    return tensor


def activation_patching_analysis(
    model: HookedEncoderDecoder,
    model_name: str = "model",
    source: str = "succ",
    target: str = "pred",
    n_pairs: int = 100,
    seed: int = 0,
    alphabets: str = "standard",
    length: int = 3,
    sites: Sequence[str] = DEFAULT_SITES,
    progress: Callable[[int, int], None] | None = None,
    method: str = "exact",
    steps: int = 10,
) -> AnalysisResult:
    """`patch_activations` (``method`` "exact") or its estimate `attribute_activations` ("attribution", with
    ``steps`` integration steps) on the ``n_pairs`` minimal pairs of ``length``-letter windows (fewer where fewer
    exist) that the model answers right on both sides: the grids normalised, a heat map of each and a row per site
    naming its largest effect (not in the paper: reported, not judged). Raises ValueError for unknown rules, sites or
    methods, fewer than one pair or step, rules without minimal pairs, or a model that answers no pair right."""
    check_sites(sites)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be at least 1 (minimal pairs offered), got {n_pairs}")
    check_steps(steps)
    offered, pairs = offered_and_solved(model, source, target, n_pairs, seed, alphabets, length)
    if method == "exact":
        result, how = patch_activations(model, pairs, sites, progress), "activation patching"
    else:
        result, how = attribute_activations(model, pairs, sites, steps, progress), "attribution patching"
    summary: dict[str, float | int | str] = {
        "method": how + ("" if method == "exact" else f" ({steps} integration steps)"),
        "source rule (patched in)": source,
        "target rule (run)": target,
        "pairs offered": len(offered),
        "pairs solved (both prompts)": len(pairs),
        "logit diff, source run": result.source_logit_diff,
        "logit diff, target run": result.target_logit_diff,
    }
    findings, figures, data = [], {}, {"positions": list(result.positions), "grids": {}}
    for site, grid in result.grids.items():
        normalized = result.normalized(site)
        row, column = divmod(int(normalized.argmax()), normalized.shape[1])
        where = f"{grid.rows[row]}, {grid.columns[column]}"
        summary[f"{site}: largest"] = f"{where}: {float(normalized[row, column]):.3f}"
        findings.append(
            Finding(
                f"Largest effect: {site}",
                f"not in the paper ({how}, as TransformerLens's patching module"
                + (")" if method == "exact" else "'s demos; a linear estimate)"),
                f"{where}: {float(normalized[row, column]):.2f} of the logit difference"
                + answers_text(grid.source_answers[row, column], grid.other_answers[row, column])
                + letters_text(grid.letters_at(row, column)),
                None,
                value=float(normalized[row, column]),
            )
        )
        figures[site] = patching_heatmap(grid, normalized, f"{site}: patched from {source} into {target}")
        data["grids"][site] = grid_data(grid, normalized)
    name = "activation_patching" if method == "exact" else "attribution_patching"
    return AnalysisResult(name, model_name, summary, data, figures, findings)


def offered_and_solved(
    model: HookedEncoderDecoder, source: str, target: str, n_pairs: int, seed: int, alphabets: str, length: int
) -> tuple[list[MinimalPair], list[MinimalPair]]:
    """The ``n_pairs`` minimal pairs of ``length``-letter windows offered (fewer where fewer exist) and those the model
    answers right on both sides. Raises ValueError for unknown rules, rules without minimal pairs, or a model that
    answers no pair right (naming how many prompts of each side it answers right)."""
    offered = minimal_pairs(source, target, n_pairs, seed=seed, alphabets=alphabets, lengths=(length,), at_most=True)
    answers = _greedy_answers(model, offered)
    pairs = _solved(offered, *answers)
    if not pairs:
        raise ValueError(_none_solved(offered, *answers))
    return offered, pairs


def solved_pairs(model: HookedEncoderDecoder, pairs: Sequence[MinimalPair]) -> list[MinimalPair]:
    """The pairs whose source and target prompts the model both answers right (greedy). Raises ValueError for pairs
    that `pair_batch` refuses."""
    return _solved(pairs, *_greedy_answers(model, pairs))


def _solved(pairs: Sequence[MinimalPair], source: list[str], target: list[str]) -> list[MinimalPair]:
    return [pair for s, t, pair in zip(source, target, pairs) if s == pair.source_answer and t == pair.target_answer]


def _greedy_answers(model: HookedEncoderDecoder, pairs: Sequence[MinimalPair]) -> tuple[list[str], list[str]]:
    batch = pair_batch(pairs)
    with eval_mode(model):
        return decode_batch(model.generate(batch.source)), decode_batch(model.generate(batch.target))


def _none_solved(pairs: Sequence[MinimalPair], source: list[str], target: list[str]) -> str:
    """Why no pair is usable, from the model's greedy answers to each side: how many prompts of each side it answers
    right, and how many pairs it gives one answer for both prompts (it does not tell the two rules apart)."""
    rules = pairs[0].source.transformation, pairs[0].target.transformation
    right = [
        sum(a == p.source_answer for a, p in zip(source, pairs)),
        sum(a == p.target_answer for a, p in zip(target, pairs)),
    ]
    same = sum(s == t for s, t in zip(source, target))
    return (
        f"the model answers both prompts of none of the {len(pairs)} {rules[0]}/{rules[1]} minimal pairs (right: "
        f"{right[0]} {rules[0]} and {right[1]} {rules[1]} prompts; the same answer to both prompts of {same} pairs); "
        "activation patching needs pairs it solves"
    )


def grid_data(grid: PatchingGrid, normalized: Float[Tensor, "row column"]) -> dict:
    """A grid as the JSON record of its analysis: its rows and columns, the measures and, where decoded, the answers'
    outcomes (with ``source_letters`` and ``other_letters`` as ``[letter][row][column]``)."""
    data = {
        "hooks": list(grid.hooks),
        "rows": list(grid.rows),
        "columns": list(grid.columns),
        "normalized": normalized,
        "logit_diff": grid.logit_diff,
        "source_answers": grid.source_answers,
        "other_answers": grid.other_answers,
    }
    if grid.source_letters is not None:
        data |= {"source_letters": grid.source_letters, "other_letters": grid.other_letters}
    return data


def answers_text(source: Float[Tensor, ""], other: Float[Tensor, ""]) -> str:
    """``", answers: 85% the source's, 3% neither"`` (nothing for a decoder hook, whose answers are not counted)."""
    if torch.isnan(source):
        return ""
    return f", answers: {float(source):.0%} the source's, {float(other):.0%} neither"


def letters_text(source_letters: Sequence[float]) -> str:
    """``"; the source's token where the answers differ: #1 94%, #3 3%"``: per answer position (1-based) where some
    pair's two answers differ, the share of patched answers with the source's token there (nothing without letters)."""
    shares = [f"#{position} {share:.0%}" for position, share in enumerate(source_letters, 1) if share == share]
    return f"; the source's token where the answers differ: {', '.join(shares)}" if shares else ""


def patching_heatmap(
    grid: PatchingGrid, normalized: Float[Tensor, "row column"], title: str
):  # pragma: no mutate block
    """A plotly heat map of the normalised grid; hovering shows the mean logit difference and, where they were
    counted, the answers' outcomes, whole and letter by letter."""
    import plotly.graph_objects as go

    detail = torch.stack([grid.logit_diff, grid.source_answers, grid.other_answers], -1).nan_to_num(-1).tolist()
    for row, cells in enumerate(detail):
        for column, cell in enumerate(cells):
            cell.append(letters_text(grid.letters_at(row, column)).removeprefix("; "))
    counted = not bool(grid.source_answers.isnan().all())
    answers = (
        "<br>answers: source's %{customdata[1]:.0%}, neither %{customdata[2]:.0%} (-100%: not counted)"
        "<br>%{customdata[3]}"
    )
    return go.Figure(
        go.Heatmap(
            z=normalized.tolist(),
            x=list(grid.columns),
            y=list(grid.rows),
            customdata=detail,
            colorscale="RdBu",
            reversescale=True,
            zmid=0,
            colorbar={"title": "normalised"},
            hovertemplate="%{y}, %{x}<br>normalised %{z:.3f}<br>logit diff %{customdata[0]:.3f}"
            + (answers if counted else "")
            + "<extra></extra>",
        ),
        layout={
            "title": title,
            "yaxis": {"autorange": "reversed"},
            "xaxis": {"tickangle": -60},
            "height": max(400, 22 * len(grid.rows) + 200),
        },
    )
