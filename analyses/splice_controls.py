"""Splicing the alphabet letters neither prompt uses, with its controls (docs/findings.md, memory splicing).

For each ``--model``, over the minimal pairs of ``lsa-interp splice`` (3-letter windows, standard alphabet): the
``unused letters`` splice both ways (pred into succ, succ into pred); a same-rule donor with another example (same
query); the letters near the answer's changed letter or further; the splice less the direction its changes share
(also stretched back to full length) and at 0.15 and 0.5 of its size; one vector added to every unused-letter state
instead (the mean pred-minus-succ difference of the other pairs, or a random direction of its length; 0.5 to 4 times
that vector both ways in the curves); the encoder layer where the difference forms, the last layer's attention on
the changed letter and the difference with that head or the others zeroed. Pred and succ change different places of
the example (the first letter, the last), so fix prompts whose example has its first or its last letter wrong (one
rule, the changed place only) are compared with them, and the curves also add the vector's part along their
first-minus-last direction, or the rest. Each row counts answers (own, the donor's, the query copied, other; and
unchanged) with how far the states moved and how alike their directions are, or the added vector's length. It writes
``analyses/results/splice_controls.json`` and its figures, ``.html``; the library part is
`lsa_interp.analysis.memory_direction`.

    python analyses/splice_controls.py --model copy-200 --model copy-20 --model nocopy-20
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
from torch import Tensor

from lsa_interp.analysis.memory_direction import (
    by_layer,
    changed_letter_attention,
    compare_mean_changes,
    decode_with_added,
    decode_with_changes,
    direction_vectors,
    mean_change,
    split_along,
    without_component,
)
from lsa_interp.analysis.prompts import changed_place_pairs, minimal_pairs, other_example_tasks
from lsa_interp.analysis.splice import (
    MEMORY_HOOK,
    NEAR,
    Case,
    encoder_memory,
    masked_change,
    memory_change,
    near_changed,
    splice_decode,
    splice_mask,
    unused_positions,
)
from lsa_interp.data.task import Task
from lsa_interp.model import HookedEncoderDecoder, load_model
from lsa_interp.utils import atomic_write
from lsa_interp.viz.html import figures_page

OUT = Path(__file__).parent / "results" / "splice_controls.json"
SCALES = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
"""Multiples of the mean pred-minus-succ difference added in the curves."""
SPLICE_FRACTIONS = (0.15, 0.5)
"""Sizes of the whole splice, as shares, that compare with the splice less its shared direction."""
PARTS = {"along": "along the fix direction", "less": "less the fix direction"}
"""The two parts of the mean difference that `added_part_row` adds: along the fix prompts' first-minus-last direction,
and the rest."""
WHOLE_CURVES = ("succ prompts plus s x (pred - succ)", "pred prompts plus s x (succ - pred)")
CURVES = (*WHOLE_CURVES, *(f"{curve} {phrase}" for curve in WHOLE_CURVES for phrase in PARTS.values()))


def outcomes(answers: list[str], clean: list[str], donors: list[Task], targets: list[Task]) -> dict:
    """Shares of the answers in four kinds that sum to 1, each answer in the first that fits: the target's own, the
    donor's, the query copied unchanged, other; and the share equal to the unperturbed (``clean``) answer."""
    kinds = [
        "own" if a == t.answer else "donor" if a == d.answer else "query_copied" if a == t.query else "other"
        for a, d, t in zip(answers, donors, targets, strict=True)
    ]
    n = len(kinds)
    return {
        "pairs": n,
        **{kind: kinds.count(kind) / n for kind in ("own", "donor", "query_copied", "other")},
        "unchanged": sum(a == c for a, c in zip(answers, clean, strict=True)) / n,
    }


@functools.lru_cache(maxsize=16)
def _memory(model: HookedEncoderDecoder, tasks: tuple[Task, ...]) -> Tensor:
    """`encoder_memory` of ``tasks``, computed once per model and prompt set (the rows share their prompts)."""
    return encoder_memory(model, tasks)


@functools.lru_cache(maxsize=16)
def _clean(model: HookedEncoderDecoder, tasks: tuple[Task, ...]) -> tuple[str, ...]:
    """The model's unperturbed answers to ``tasks``, decoded once per model and prompt set."""
    return tuple(model.solve(list(tasks)))


def _unused_change(
    model: HookedEncoderDecoder, donors: list[Task], targets: list[Task]
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The memories of donors and targets, the mask of each pair's unused letters, and donor minus target there
    (zero elsewhere), over the first positions both memories have. Raises ValueError when no pair has one."""
    positions = [unused_positions(d, t) for d, t in zip(donors, targets, strict=True)]
    donor_memory, target_memory = _memory(model, tuple(donors)), _memory(model, tuple(targets))
    mask = splice_mask(positions, len(targets), min(donor_memory.shape[1], target_memory.shape[1]))
    return donor_memory, target_memory, mask, masked_change(donor_memory, target_memory, mask)


def _solved(model: HookedEncoderDecoder, tasks: list[Task]) -> float:
    """The share of ``tasks`` the model answers right unperturbed."""
    return sum(a == t.answer for a, t in zip(_clean(model, tuple(tasks)), tasks, strict=True)) / len(tasks)


def _row(
    model: HookedEncoderDecoder, answers: list[str], donors: list[Task], targets: list[Task], mask: Tensor
) -> dict:
    """`outcomes` of ``answers`` and the spliced positions per pair."""
    return {
        **outcomes(answers, list(_clean(model, tuple(targets))), donors, targets),
        "positions_per_pair": float(mask.sum(1).float().mean()),
    }


def splice_row(model: HookedEncoderDecoder, donors: list[Task], targets: list[Task], case: Case) -> dict:
    """Outcome shares (`outcomes`), the spliced positions per pair and the state change (`memory_change`) of one
    splice over all pairs; a case that marks no position in any pair gives the pairs and a ``note`` only."""
    positions = [case(d, t) for d, t in zip(donors, targets, strict=True)]
    if not any(positions):
        return {"pairs": len(targets), "positions_per_pair": 0.0, "note": "no pair has a position in this case"}
    answers = splice_decode(model, targets, donors, positions)
    donor_memory, target_memory = _memory(model, tuple(donors)), _memory(model, tuple(targets))
    mask = splice_mask(positions, len(targets), min(donor_memory.shape[1], target_memory.shape[1]))
    return {**_row(model, answers, donors, targets, mask), **memory_change(donor_memory, target_memory, mask)}


def added_direction_row(
    model: HookedEncoderDecoder,
    donors: list[Task],
    targets: list[Task],
    random_seed: int | None = None,
    scale: float = 1.0,
) -> dict:
    """Targets decoded with one vector added to all their unused-letter states (`decode_with_added`): ``scale`` times
    the mean donor-minus-target difference there over the other pairs (so no pair sees its own donor), or with
    ``random_seed`` a random direction of each such vector's length. Returns `outcomes`, the positions per pair and
    ``vector_size``, the added vector's length over the states' (mean over the states it is added to). Raises
    ValueError when no pair has an unused letter."""
    donor_memory, target_memory, mask, _ = _unused_change(model, donors, targets)
    vectors = direction_vectors(donor_memory, target_memory, mask, scale, random_seed)
    return _added_row(model, donors, targets, mask, vectors)


def added_part_row(
    model: HookedEncoderDecoder,
    donors: list[Task],
    targets: list[Task],
    direction: Tensor,
    part: str,
    scale: float = 1.0,
) -> dict:
    """Targets decoded with one part of ``scale`` times the mean donor-minus-target difference over the other pairs
    (`direction_vectors`) added to all their unused-letter states: its component along ``direction`` (``part``
    ``along``) or the rest (``less``), each at its own length (`split_along`), so the two parts add up to the whole
    vector. Returns `outcomes`, the positions per pair and ``vector_size``. Raises ValueError for another part and when
    no pair has an unused letter."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; choose {' or '.join(PARTS)}")
    donor_memory, target_memory, mask, _ = _unused_change(model, donors, targets)
    along, rest = split_along(direction_vectors(donor_memory, target_memory, mask, scale), direction)
    return _added_row(model, donors, targets, mask, along if part == "along" else rest)


def _added_row(
    model: HookedEncoderDecoder, donors: list[Task], targets: list[Task], mask: Tensor, vectors: Tensor
) -> dict:
    """`_row` of the targets decoded with pair i's vector added at its ``mask`` states, and ``vector_size``."""
    answers = decode_with_added(model, targets, mask, vectors)
    size = (vectors.norm(dim=1)[:, None] / _memory(model, tuple(targets))[:, : mask.shape[1]].norm(dim=-1))[mask]
    return {**_row(model, answers, donors, targets, mask), "vector_size": float(size.mean())}


def changed_place(
    model: HookedEncoderDecoder, preds: list[Task], succs: list[Task], n_pairs: int, seed: int
) -> tuple[dict, Tensor]:
    """Where the example changed against which way: fix prompts whose example has its first or its last letter wrong
    (`changed_place_pairs`: one rule, the places pred and succ change) compared at their unused letters
    (`memory_change`) and with pred and succ (`compare_mean_changes`: the cosine of the mean first-minus-last and
    pred-minus-succ differences, the length of pred - succ's over the fix prompts', and the share of the pred - succ
    differences' squared length along the fix direction). Returns that summary and the fix direction (the mean
    first-minus-last difference) for `added_part_row`. Raises ValueError as `changed_place_pairs` and `_unused_change`
    do."""
    firsts, lasts = (list(prompts) for prompts in zip(*changed_place_pairs(n_pairs, seed)))
    fix = _unused_change(model, firsts, lasts)[:3]
    pred_succ = _unused_change(model, preds, succs)[:3]
    summary = {
        "pairs": len(firsts),
        "solved_first": _solved(model, firsts),
        "solved_last": _solved(model, lasts),
        "positions_per_pair": float(fix[2].sum(1).float().mean()),
        **memory_change(*fix),
        **{f"pred - succ {key}": value for key, value in compare_mean_changes(fix, pred_succ).items()},
    }
    return summary, mean_change(*fix)


def splice_without_direction_row(
    model: HookedEncoderDecoder, donors: list[Task], targets: list[Task], rescaled: bool = False
) -> dict:
    """The unused-letters splice less one direction: each spliced state is the donor's with its component along the
    pair's `direction_vectors` (the mean donor-minus-target difference of the other pairs) taken from the target's own;
    ``rescaled``, what is left is stretched back to the length of each state's whole change (so the splice differs in
    direction only, not in size). Returns `outcomes`, the positions per pair and ``change_kept``, the mean share of
    each state's change (length) that is spliced. Raises ValueError when no pair has an unused letter."""
    donor_memory, target_memory, mask, change = _unused_change(model, donors, targets)
    rest = without_component(change, direction_vectors(donor_memory, target_memory, mask))
    if rescaled:
        rest = rest * (change.norm(dim=-1, keepdim=True) / rest.norm(dim=-1, keepdim=True).clamp_min(1e-12))
    answers = decode_with_changes(model, targets, rest)
    kept = rest.norm(dim=-1)[mask] / change.norm(dim=-1)[mask].clamp_min(1e-12)
    return {**_row(model, answers, donors, targets, mask), "change_kept": float(kept.mean())}


def scaled_splice_row(model: HookedEncoderDecoder, donors: list[Task], targets: list[Task], factor: float) -> dict:
    """The unused-letters splice at ``factor`` of its size: each state moves that share of the way to the donor's.
    Returns `outcomes` and the positions per pair. Raises ValueError when no pair has an unused letter."""
    _, _, mask, change = _unused_change(model, donors, targets)
    answers = decode_with_changes(model, targets, factor * change)
    return {**_row(model, answers, donors, targets, mask), "factor": factor}


def controls(model: HookedEncoderDecoder, n_pairs: int, seed: int) -> dict:
    """Every row and curve of the table for one model, with the number of pairs (at most ``n_pairs``: as many as
    exist) and the share of succ and pred prompts it solves unspliced. Raises ValueError from the rows."""
    pairs = minimal_pairs("pred", "succ", n_pairs, seed=seed, lengths=(3,), at_most=True)
    preds, succs = [p.source for p in pairs], [p.target for p in pairs]
    unused = [unused_positions(p, s) for p, s in zip(preds, succs, strict=True)]
    attention = {
        rule: changed_letter_attention(model, tasks, unused) for rule, tasks in (("pred", preds), ("succ", succs))
    }
    head = int(attention["succ"]["index"])
    others = [other for other in range(model.cfg.n_heads) if other != head]
    fix, fix_direction = changed_place(model, preds, succs, n_pairs, seed)
    prompt_sets = {WHOLE_CURVES[0]: (preds, succs), WHOLE_CURVES[1]: (succs, preds)}
    return {
        "pairs": len(pairs),
        "solved_succ": _solved(model, succs),
        "solved_pred": _solved(model, preds),
        "rows": {
            "pred into succ": splice_row(model, preds, succs, unused_positions),
            "succ into pred": splice_row(model, succs, preds, unused_positions),
            "succ into succ, other example": splice_row(model, other_example_tasks(succs), succs, unused_positions),
            f"pred into succ, within {NEAR} of the changed letter": splice_row(model, preds, succs, near_changed(True)),
            f"pred into succ, further than {NEAR}": splice_row(model, preds, succs, near_changed(False)),
            "pred into succ, less the mean direction": splice_without_direction_row(model, preds, succs),
            "pred into succ, less the mean direction, at full length": splice_without_direction_row(
                model, preds, succs, rescaled=True
            ),
            **{
                f"pred into succ, at {factor} of its size": scaled_splice_row(model, preds, succs, factor)
                for factor in SPLICE_FRACTIONS
            },
            "succ plus the mean pred - succ difference": added_direction_row(model, preds, succs),
            "succ plus a random direction of that length": added_direction_row(model, preds, succs, random_seed=seed),
        },
        "fix, first vs last": fix,
        "pred vs succ by layer": by_layer(model, preds, succs, unused),
        "attention on the changed letter": attention,
        "pred vs succ, last-layer heads zeroed at the unused letters": {
            f"head {attention['succ']['head']}": {
                **by_layer(model, preds, succs, unused, [head])[MEMORY_HOOK],
                "its attention on the changed letter in pred prompts": attention["pred"]["per_head"][head],
            },
            "every other head": by_layer(model, preds, succs, unused, others)[MEMORY_HOOK],
        },
        "curves": {
            **{
                name: {str(scale): added_direction_row(model, donors, targets, scale=scale) for scale in SCALES}
                for name, (donors, targets) in prompt_sets.items()
            },
            **{
                f"{name} {phrase}": {
                    str(scale): added_part_row(model, donors, targets, fix_direction, part, scale) for scale in SCALES
                }
                for name, (donors, targets) in prompt_sets.items()
                for part, phrase in PARTS.items()
            },
        },
    }


def curve_figures(table: dict) -> dict:
    """Per direction, a plotly figure of the share of donor answers (solid) and of query copies (dotted) against the
    scale of the added vector, one colour per model."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    figures = {}
    for curve in CURVES:
        figure = go.Figure(
            layout={
                "xaxis": {"title": "scale of the mean donor-minus-target difference added to every unused letter"},
                "yaxis": {"title": "share of the prompts", "range": [0, 1]},
            }
        )
        for index, (name, result) in enumerate(table.items()):
            points = result["curves"][curve]
            scales = [float(scale) for scale in points]
            colour = qualitative.Plotly[index % len(qualitative.Plotly)]
            for key, label, dash in (("donor", "donor's answer", "solid"), ("query_copied", "query copied", "dot")):
                figure.add_scatter(
                    x=scales,
                    y=[cell[key] for cell in points.values()],
                    name=f"{name}: {label}",
                    line={"color": colour, "dash": dash},
                    legendgroup=name,
                )
        figures[curve] = figure
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="checkpoint name or directory (repeatable)")
    parser.add_argument("--pairs", type=int, default=100, help="minimal pairs (default 100, as `lsa-interp splice`)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the minimal pairs (0 or more)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small batches: a second thread only contends with other work on the machine
    if args.out.suffix != ".json":
        print(f"error: --out must be a .json file (the figures go beside it as .html), got {args.out}", file=sys.stderr)
        return 2
    targets = (args.out, args.out.with_suffix(".html"))
    if not args.out.parent.is_dir() or any(target.is_dir() for target in targets):
        print(
            f"error: cannot write {args.out} and its .html beside it: no such folder, or a folder there",
            file=sys.stderr,
        )
        return 2
    if args.seed < 0:
        print(f"error: --seed must be 0 or more, got {args.seed}", file=sys.stderr)
        return 2
    if args.pairs < 2:
        print(
            f"error: --pairs must be at least 2 (the same-rule control borrows another pair's example), "
            f"got {args.pairs}",
            file=sys.stderr,
        )
        return 2
    try:
        models = {name: load_model(name) for name in args.model}  # every name checked before any work
        table = {name: controls(model, args.pairs, args.seed) for name, model in models.items()}
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    result = {"pairs_asked": args.pairs, "seed": args.seed, "models": table}
    page = figures_page("Memory splicing: the letters neither prompt uses", curve_figures(table))
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8"))
    atomic_write(args.out.with_suffix(".html"), lambda tmp: tmp.write_text(page, encoding="utf-8"))
    for name, rows in table.items():
        print(f"{name}: solves {rows['solved_succ']:.0%} of succ, {rows['solved_pred']:.0%} of pred prompts")
        for row, cell in rows["rows"].items():
            if "note" in cell:
                print(f"  {row:48s} {cell['note']}")
                continue
            if "vector_size" in cell:
                moved = f"vector {cell['vector_size']:.2f} of the states' length"
            elif "factor" in cell:
                moved = f"the whole change at {cell['factor']} of its length"
            elif "change_kept" in cell:
                moved = f"{cell['change_kept']:.2f} of each state's change spliced"
            else:
                moved = f"change {cell['state change']:.2f}, alignment {cell['change alignment']:.2f}"
            print(
                f"  {row:48s} own {cell['own']:4.0%} donor {cell['donor']:4.0%} query {cell['query_copied']:4.0%} "
                f"other {cell['other']:4.0%} unchanged {cell['unchanged']:4.0%} | {cell['positions_per_pair']:4.1f} "
                f"positions, {moved}"
            )
        fix = rows["fix, first vs last"]
        print(
            f"  fix prompts, first vs last letter wrong ({fix['pairs']} pairs, solved {fix['solved_first']:.0%} and "
            f"{fix['solved_last']:.0%}): change {fix['state change']:.2f}, alignment {fix['change alignment']:.2f}; "
            f"pred - succ: cosine {fix['pred - succ cosine']:.2f}, length {fix['pred - succ length ratio']:.2f} "
            f"times, {fix['pred - succ share along']:.2f} of its squared length along it"
        )
        layers = ", ".join(
            f"{name}: {cell['state change']:.2f}/{cell['change alignment']:.2f}"
            for name, cell in rows["pred vs succ by layer"].items()
        )
        print(f"  pred vs succ at the unused letters by layer (change/alignment): {layers}")
        zeroed = ", ".join(
            f"{name}: {cell['state change']:.2f}/{cell['change alignment']:.2f}"
            for name, cell in rows["pred vs succ, last-layer heads zeroed at the unused letters"].items()
        )
        print(f"  pred vs succ in the memory with last-layer heads zeroed at the unused letters: {zeroed}")
        for rule, cell in rows["attention on the changed letter"].items():
            print(
                f"  {rule}: the unused letters' attention on the changed example-out letter, last encoder layer: "
                f"head {cell['head']} {cell['share']:.2f}, head mean {cell['head_mean']:.2f}"
            )
        for curve, points in rows["curves"].items():
            shares = ", ".join(
                f"{scale}: {cell['donor']:.0%}/{cell['query_copied']:.0%}" for scale, cell in points.items()
            )
            print(f"  {curve} (donor's answer / query copied): {shares}")
    print(f"wrote {args.out} and {args.out.with_suffix('.html')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
