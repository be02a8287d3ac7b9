"""Splicing the alphabet letters neither prompt uses, with its controls (docs/findings.md, memory splicing).

For each ``--model``, over the same minimal pairs as ``lsa-interp splice`` (3-letter windows, standard alphabet):
the ``unused letters`` case in both directions (pred into succ, succ into pred); a same-rule control (each succ
prompt decoded with the unused letters of a succ prompt whose example is another window and whose query is the same,
so only the example differs); pred into succ split by where the letters sit (within 3 alphabet places of the
answer's changed letter, or further), less the one direction the differences share (also stretched back to the
change's length), and at 0.15 and 0.5 of its size; and, instead of a splice, one vector added to all the succ
prompt's unused-letter states: the mean pred-minus-succ difference there over the other pairs, or a random direction
of its length, and that vector at 0.5 to 4 times its length in both directions (an interactive figure beside the
JSON); and after which encoder layer the pred and succ states at the unused letters come apart, how much the unused
letters attend to the example's changed output letter in the last, and the difference with that head, or every other
head of the last layer, zeroed there. Pred and succ change different letters of the example (the first, the last), so
it also compares fix prompts whose example has its first or its last letter wrong (one rule, the same letters, the
changed place only): how far apart their unused letters are, how their mean difference lines up with pred's and
succ's, and what succ prompts answer with that direction added, or with the pred - succ vector less it. The functions
it uses for the added and removed directions, the layers and the attention are in
`lsa_interp.analysis.memory_direction`. Each row counts the answers that are the prompt's own, the
donor's, the query copied unchanged, or other, and those equal to the unperturbed answer, and gives how far the
spliced states are from the own (relative to their size) and how alike their directions are (mean pairwise cosine),
or the added vector's relative length. It writes ``analyses/results/splice_controls.json`` and ``.html``.

    python analyses/splice_controls.py --model copy-200 --model copy-20 --model nocopy-20
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from lsa_interp.analysis.memory_direction import (
    by_layer,
    changed_letter_attention,
    decode_with_added,
    decode_with_changes,
    direction_vectors,
    mean_change,
    share_along,
    with_lengths_of,
    without_component,
)
from lsa_interp.analysis.prompts import changed_place_pairs, minimal_pairs
from lsa_interp.analysis.splice import (
    MEMORY_HOOK,
    Case,
    encoder_memory,
    memory_change,
    splice_decode,
    splice_mask,
    unused_positions,
)
from lsa_interp.data.task import Task
from lsa_interp.model import HookedEncoderDecoder, load_model
from lsa_interp.utils import atomic_write
from lsa_interp.viz.html import figures_page

OUT = Path(__file__).parent / "results" / "splice_controls.json"
NEAR = 3
"""Alphabet places from the answer's changed letter that count as near it."""
SCALES = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
"""Multiples of the mean pred-minus-succ difference added in the curves."""
SPLICE_FRACTIONS = (0.15, 0.5)
"""Sizes of the whole splice, as shares, that compare with the splice less its shared direction."""
CURVES = ("succ prompts plus s x (pred - succ)", "pred prompts plus s x (succ - pred)")


def other_example_donors(targets: Sequence[Task]) -> list[Task]:
    """For each target, the same prompt with the example of the next target (cyclically) whose example is not its
    own and shares no letter with its query and answer: same rule, same query, another example window. Raises
    ValueError when some target has no such example among the others."""
    donors = []
    for i, target in enumerate(targets):
        own = set(target.query) | set(target.answer or "")
        others = (targets[(i + k) % len(targets)] for k in range(1, len(targets)))
        fitting = (t.examples for t in others if t.examples != target.examples)
        example = next((e for e in fitting if not own & set("".join(e[0]))), None)
        if example is None:
            raise ValueError(f"no other example shares no letter with {target}")
        donors.append(Task(target.alphabet, example, target.query, target.answer, target.transformation))
    return donors


def changed_letter_place(task: Task) -> int | None:
    """Alphabet index of the answer's first letter that is not in the query (None when there is none)."""
    changed = next((letter for letter in task.answer or "" if letter not in task.query), None)
    return None if changed is None else task.alphabet.index(changed)


def near_changed(near: bool) -> Callable[[Task, Task], tuple[int, ...]]:
    """The unused positions within `NEAR` places of the target's changed answer letter (``near``) or further."""

    def positions(donor: Task, target: Task) -> tuple[int, ...]:
        place = changed_letter_place(target)
        return tuple(
            p for p in unused_positions(donor, target) if place is not None and (abs(p - place) <= NEAR) == near
        )

    return positions


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
    width = min(donor_memory.shape[1], target_memory.shape[1])
    mask = splice_mask(positions, len(targets), width)
    change = (donor_memory[:, :width] - target_memory[:, :width]) * mask[..., None]
    return donor_memory, target_memory, mask, change


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


def _added_row(
    model: HookedEncoderDecoder, donors: list[Task], targets: list[Task], mask: Tensor, vectors: Tensor
) -> dict:
    """`_row` of the targets decoded with pair i's vector added at its ``mask`` states, and ``vector_size``."""
    answers = decode_with_added(model, targets, mask, vectors)
    size = (vectors.norm(dim=1)[:, None] / _memory(model, tuple(targets))[:, : mask.shape[1]].norm(dim=-1))[mask]
    return {**_row(model, answers, donors, targets, mask), "vector_size": float(size.mean())}


def changed_place(model: HookedEncoderDecoder, preds: list[Task], succs: list[Task], n_pairs: int, seed: int) -> dict:
    """Where the example changed against which way: fix prompts whose example has its first or its last letter wrong
    (`changed_place_pairs`, the places pred and succ change) compared at their unused letters (`memory_change`, the
    cosine of their mean first-minus-last difference with the mean pred-minus-succ one, and the share of the
    pred-minus-succ differences along it); and succ prompts decoded with, added at their unused letters, that fix
    direction or the pred-minus-succ vector less its component along it, each at 1 and 2 times the length of the
    pair's pred-minus-succ vector (`direction_vectors`). Returns ``fix, first vs last`` and the decoded ``rows``."""
    firsts, lasts = (list(prompts) for prompts in zip(*changed_place_pairs(n_pairs, seed)))
    first_memory, last_memory, fix_mask, _ = _unused_change(model, firsts, lasts)
    pred_memory, succ_memory, mask, _ = _unused_change(model, preds, succs)
    place = mean_change(first_memory, last_memory, fix_mask)
    vectors = direction_vectors(pred_memory, succ_memory, mask)
    rest = with_lengths_of(without_component(vectors[:, None], place.expand_as(vectors))[:, 0], vectors)
    along = with_lengths_of(place.expand_as(vectors), vectors)
    rows = {}
    for scale, times in ((1, ""), (2, ", x2")):
        rows[f"succ plus the fix first - last direction{times}"] = _added_row(model, preds, succs, mask, scale * along)
        rows[f"succ plus pred - succ less the fix direction{times}"] = _added_row(
            model, preds, succs, mask, scale * rest
        )
    solved = lambda tasks: sum(a == t.answer for a, t in zip(_clean(model, tuple(tasks)), tasks)) / len(tasks)
    fix = {
        "pairs": len(firsts),
        "solved_first": solved(firsts),
        "solved_last": solved(lasts),
        "positions_per_pair": float(fix_mask.sum(1).float().mean()),
        **memory_change(first_memory, last_memory, fix_mask),
        "cosine with pred - succ": float(
            torch.cosine_similarity(place, mean_change(pred_memory, succ_memory, mask), 0)
        ),
        "pred - succ change along it": share_along(pred_memory, succ_memory, mask, place),
    }
    return {"fix, first vs last": fix, "rows": rows}


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
    place = changed_place(model, preds, succs, n_pairs, seed)
    return {
        "pairs": len(pairs),
        "solved_succ": sum(a == t.answer for a, t in zip(_clean(model, tuple(succs)), succs)) / len(succs),
        "solved_pred": sum(a == t.answer for a, t in zip(_clean(model, tuple(preds)), preds)) / len(preds),
        "rows": {
            "pred into succ": splice_row(model, preds, succs, unused_positions),
            "succ into pred": splice_row(model, succs, preds, unused_positions),
            "succ into succ, other example": splice_row(model, other_example_donors(succs), succs, unused_positions),
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
            **place["rows"],
        },
        "fix, first vs last": place["fix, first vs last"],
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
            name: {str(scale): added_direction_row(model, donors, targets, scale=scale) for scale in SCALES}
            for name, (donors, targets) in {
                CURVES[0]: (preds, succs),
                CURVES[1]: (succs, preds),
            }.items()
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
            f"{fix['solved_last']:.0%}): change {fix['state change']:.2f}, alignment {fix['change alignment']:.2f}, "
            f"cosine with pred - succ {fix['cosine with pred - succ']:.2f}, share of pred - succ along it "
            f"{fix['pred - succ change along it']:.2f}"
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
