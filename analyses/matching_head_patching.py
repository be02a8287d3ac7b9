"""Do the detected matching heads carry the rule? Activation patching of every model's matching heads, over models.

For each ``--model``: the matching heads `detect_matching_heads` finds; the ``--pairs`` succ -> pred minimal pairs
(3-letter windows, standard alphabet) the model answers right on both sides; and, patched from the succ prompt into
the pred prompt at all positions (``attn.hook_z``): the matching heads together, their controls together (per
matching head the head of its layer with the lowest matching score, as `lsa-interp report` controls them), and every
encoder head alone. Per patch: the normalised logit difference where the answers part and the share of answers that
become succ's (docs/matching_and_patching.md, activation patching). It writes
``analyses/results/matching_head_patching.json``.

    python analyses/matching_head_patching.py             # the shipped models: copy-200, copy-20, nocopy-20, replicates
    python analyses/matching_head_patching.py --model copy-20 --pairs 50
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lsa_interp.analysis.activation_patching import HEADS, patch_activations, patch_together, solved_pairs
from lsa_interp.analysis.matching import control_head, matching_scores
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.model import load_model
from lsa_interp.model.heads import Head
from lsa_interp.utils import atomic_write

OUT = Path(__file__).parent / "results" / "matching_head_patching.json"
MODELS = (
    "copy-200",
    "copy-20",
    "nocopy-20",
    *(f"replicates/copy-20-s{seed}-bf16" for seed in range(5)),
)


def heads_patched(name: str, n_pairs: int) -> dict:
    """One model's row: its matching heads, the pairs it solves, and the patches' measures (None where no pair is
    solved on both sides or no head is a matching head)."""
    model = load_model(name)
    scores = matching_scores(model)
    found = scores.heads()
    offered = minimal_pairs("succ", "pred", n_pairs, lengths=(3,), at_most=True)
    pairs = solved_pairs(model, offered)
    row: dict = {
        "matching_heads": [head.label for head in found],
        "best_score": round(scores.best()[1], 4),
        "pairs_offered": len(offered),
        "pairs_solved": len(pairs),
    }
    if not pairs:
        return row
    grid = patch_activations(model, pairs, [HEADS])
    normalized, answers = grid.normalized(HEADS), grid.grids[HEADS].source_answers
    encoder = [
        Head("encoder", layer, head) for layer in range(model.cfg.n_encoder_layers) for head in range(model.cfg.n_heads)
    ]
    row["single_heads"] = {
        head.label: {
            "normalized": float(normalized[head.layer, head.head]),
            "succ_answers": float(answers[head.layer, head.head]),
        }
        for head in encoder
    }
    if found:
        controls = list(dict.fromkeys(control_head(scores.score, head) for head in found))
        for key, heads in (("matching_together", found), ("controls_together", controls)):
            joint = patch_together(
                model, pairs, [(f"encoder.{h.layer}.attn.hook_z", (slice(None), slice(None), h.head)) for h in heads]
            )
            row[key] = {
                "heads": [h.label for h in heads],
                "normalized": joint.normalized,
                "succ_answers": joint.source_answers,
            }
    return row


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
        result = {
            "pairs": args.pairs,
            "models": {name: heads_patched(name, args.pairs) for name in args.model or MODELS},
        }
    except (ValueError, FileNotFoundError) as error:
        print(f"matching_head_patching: error: {error}", file=sys.stderr)
        return 2
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8"))
    print(f"{'model':32s} {'matching':>12s} {'solved':>7s} {'together':>16s} {'controls':>16s} {'best other':>18s}")
    for name, row in result["models"].items():
        print(_line(name, row))
    return 0


def _line(name: str, row: dict) -> str:
    def measure(entry: dict | None) -> str:
        return f"{entry['normalized']:.2f} / {entry['succ_answers']:.0%}" if entry else "-"

    matching = ",".join(row["matching_heads"]) or "none"
    singles = row.get("single_heads", {})
    others = {label: entry for label, entry in singles.items() if label not in row["matching_heads"]}
    best = max(others, key=lambda label: others[label]["normalized"], default=None)
    shown = f"{best} {measure(others[best])}" if best else "-"
    together, controls = measure(row.get("matching_together")), measure(row.get("controls_together"))
    return f"{name:32s} {matching:>12s} {row['pairs_solved']:>7d} {together:>16s} {controls:>16s} {shown:>18s}"


if __name__ == "__main__":
    sys.exit(main())
