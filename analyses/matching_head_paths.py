"""Where does the rule go after the matching heads? Path patching from every model's matching heads, over models.

For each ``--model``: the matching heads `detect_matching_heads` finds and the ``--pairs`` succ -> pred minimal pairs
(3-letter windows, standard alphabet) the model answers right on both sides. From the matching heads together (their
outputs from the succ prompt, every other head frozen at the pred prompt's): their whole effect; their paths into
each later attention module's heads together (q, k, v apart and together) and into the memory; the single head
that receives most in each module. And every other encoder head whose own output carries at least a quarter of the
difference (activation patching, as ``matching_head_patching.py``): its whole effect beside the path from the
matching heads into its inputs, which says how much of it is read from them. Then where and through what: the
matching heads' output at the example-output letters that differ between the two prompts only (their whole effect
there, and their path from there into each later layer's keys and values there), their whole effect with each
later encoder layer's other heads frozen at the pred prompt's (the paths through that layer cut), and the chain from
them through each later layer's other heads into the next layer's (what the first relays to the second), alone and
with the matching heads' direct path into the next layer beside it (``chains_and_direct``). Measures are
normalised logit differences where the answers part, with the share of answers that become succ's and, per answer
position, the share that take succ's letter there (docs/matching_and_patching.md, path patching). It writes
``analyses/results/matching_head_paths.json``.

    python analyses/matching_head_paths.py             # the shipped copy models: copy-200, copy-20, replicates
    python analyses/matching_head_paths.py --model copy-20 --pairs 50
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from lsa_interp.analysis.activation_patching import solved_pairs
from lsa_interp.analysis.matching import matching_scores
from lsa_interp.analysis.pair_batch import pair_batch
from lsa_interp.analysis.path_patching import PatchEffect, PathPatcher, Receiver, Sender
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.model import load_model
from lsa_interp.model.heads import Head, all_heads
from lsa_interp.utils import atomic_write

OUT = Path(__file__).parent / "results" / "matching_head_paths.json"
MODELS = ("copy-200", "copy-20", *(f"replicates/copy-20-s{seed}-bf16" for seed in range(5)))
OTHER_HEAD_THRESHOLD = 0.25
"""An encoder head outside the matching set is followed when its own output moves this much of the difference."""


def paths_of(name: str, n_pairs: int) -> dict:
    """One model's row: its matching heads, the pairs it solves and the paths' measures (no paths where it has no
    matching head or solves no pair)."""
    model = load_model(name)
    found = matching_scores(model).heads()
    offered = minimal_pairs("succ", "pred", n_pairs, lengths=(3,), at_most=True)
    pairs = solved_pairs(model, offered)
    row: dict = {"matching_heads": [h.label for h in found], "pairs_offered": len(offered), "pairs_solved": len(pairs)}
    if not pairs or not found:
        return row
    patcher = PathPatcher(model, pairs)  # one source and one target run for every path below
    sweep = patcher.paths_from(found)
    normalized, grid = sweep.normalized, sweep.grid
    row["whole"] = _measures(patcher.sender_effect(found))
    row["memory"] = _measures(sweep.memory)
    row["modules"] = {}
    for index, label in enumerate(grid.rows):
        module, kind = label.rsplit(": ", 1)
        entry = row["modules"].setdefault(module, {})
        together = {"normalized": float(normalized[index, -1]), "succ_answers": float(grid.source_answers[index, -1])}
        best = int(normalized[index, :-1].argmax())
        entry[kind] = together | {"best_head": best + 1, "best_head_normalized": float(normalized[index, best])}
    row["other_heads"] = {}
    for head in all_heads(model.cfg):
        if head in found or head.layer <= min(h.layer for h in found):
            continue
        alone = patcher.sender_effect([head])
        if alone.normalized >= OTHER_HEAD_THRESHOLD:
            path = patcher.patch_path(found, [Receiver(head)])
            row["other_heads"][head.label] = {"whole": _measures(alone), "from_matching_heads": _measures(path)}
    row |= _where_and_through(patcher, found)
    return row


def _where_and_through(patcher: PathPatcher, found: list[Head]) -> dict:
    """The matching heads at the changed positions (whole effect; paths into each later layer's keys and values
    there) and their whole effect with each later layer's other heads frozen, and with all of them."""
    model, changed = patcher.model, pair_batch(patcher.pairs).changed_positions()
    at = [Sender(head, changed) for head in found]
    later = range(min(h.layer for h in found) + 1, model.cfg.n_encoder_layers)
    every = {layer: [h for h in all_heads(model.cfg) if h.layer == layer] for layer in later}
    layers = {layer: [h for h in heads if h not in found] for layer, heads in every.items()}
    into = {
        f"encoder {layer + 1}": _measures(patcher.patch_path(at, [Receiver(h, "kv", changed) for h in heads]))
        for layer, heads in every.items()
    }
    frozen = {f"encoder {layer + 1}": _measures(patcher.sender_effect(found, heads)) for layer, heads in layers.items()}
    frozen["all later encoder layers"] = _measures(patcher.sender_effect(found, sum(layers.values(), [])))
    chains, with_direct = {}, {}
    for layer in (layer for layer in later if layer + 1 in layers):
        name, receivers = f"encoder {layer + 1} -> encoder {layer + 2}", [Receiver(h) for h in every[layer + 1]]
        hop = [[Receiver(h) for h in layers[layer]]]
        chains[name] = _measures(patcher.patch_path(found, receivers, through=hop))
        with_direct[name] = _measures(patcher.patch_path(found, receivers, through=hop, direct=True))
    return {
        "changed_positions": list(changed),
        "at_changed": {"whole": _measures(patcher.sender_effect(at)), "into_kv_there": into},
        "frozen": frozen,
        "chains": chains,
        "chains_and_direct": with_direct,
    }


def _measures(effect: PatchEffect | None) -> dict | None:
    """The effect's normalised logit difference, its share of succ answers and, per answer position, its share of
    succ's token among the pairs whose answers differ there (None where none do: succ and pred part at the first
    and last letters)."""
    if effect is None:
        return None
    letters = [None if math.isnan(share) else share for share in effect.source_letters]
    return {"normalized": effect.normalized, "succ_answers": effect.source_answers, "succ_letters": letters}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", action="append", help=f"checkpoint name or directory (repeatable; default: {', '.join(MODELS)})"
    )
    parser.add_argument(
        "--pairs", type=int, default=100, help="succ/pred minimal pairs offered to each model (default 100)"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    try:
        result = {"pairs": args.pairs, "models": {name: paths_of(name, args.pairs) for name in args.model or MODELS}}
    except (ValueError, FileNotFoundError) as error:
        print(f"matching_head_paths: error: {error}", file=sys.stderr)
        return 2
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8"))
    for name, row in result["models"].items():
        print(_lines(name, row))
    return 0


def _lines(name: str, row: dict) -> str:
    """A model's matching heads and whole effect, then a line per module (all heads: q / k / v / together, and the
    best single head of the together row), the memory, and the other heads followed."""
    matching = ",".join(row["matching_heads"]) or "no matching head"
    if "whole" not in row:
        return f"{name}: {matching}, {row['pairs_solved']} pairs solved: no paths"
    lines = [f"{name}: {matching} ({row['pairs_solved']} pairs), whole effect {_measure(row['whole'])}"]
    for module, entry in row["modules"].items():
        values = " / ".join(f"{kind} {cell['normalized']:.2f}" for kind, cell in entry.items())
        together = list(entry.values())[-1]
        best = f"head {together['best_head']} {together['best_head_normalized']:.2f}"
        lines.append(f"  into {module} (all heads): {values}; best single head: {best}")
    lines.append(f"  into the memory: {_measure(row['memory'])}")
    for label, other in row["other_heads"].items():
        whole, path = _measure(other["whole"]), _measure(other["from_matching_heads"])
        lines.append(f"  {label}: whole effect {whole}, path from the matching heads into it {path}")
    places, at = ",".join(map(str, row["changed_positions"])), row["at_changed"]
    into = ", ".join(f"{layer} {_measure(cell)}" for layer, cell in at["into_kv_there"].items())
    lines.append(
        f"  at the changed positions ({places}) only: whole effect {_measure(at['whole'])}; into k,v there: {into}"
    )
    cut = ", ".join(f"{layer} {_measure(cell)}" for layer, cell in row["frozen"].items())
    lines.append(f"  whole effect with the other heads of a later layer frozen: {cut}")
    if row["chains"]:
        chains = ", ".join(f"{chain} {_measure(cell)}" for chain, cell in row["chains"].items())
        lines.append(f"  chains from the matching heads through a layer's other heads into the next: {chains}")
        both = ", ".join(f"{chain} {_measure(cell)}" for chain, cell in row["chains_and_direct"].items())
        lines.append(f"  the same chains with the matching heads' direct paths into the next layer beside them: {both}")
    return "\n".join(lines)


def _measure(entry: dict) -> str:
    return f"{entry['normalized']:.2f} / {entry['succ_answers']:.0%}"


if __name__ == "__main__":
    sys.exit(main())
