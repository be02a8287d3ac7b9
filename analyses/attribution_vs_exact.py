"""How close does attribution patching come to exact activation patching on the shipped models?

For each ``--model``: the ``--pairs`` succ -> pred minimal pairs (3-letter windows, standard alphabet) the model
answers right on both sides; every site of `lsa_interp.analysis.activation_patching` patched exactly (one run per
cell) and estimated by `attribute_activations` with each of ``--steps`` (1: the gradient at the pred run alone, as in
attribution patching; more: integrated gradients on the inputs). Per site and step count: Pearson's correlation of the
normalised cells, the largest absolute difference, and the exact value at the estimate's largest cell beside the
exact grid's largest; and the seconds each took. It writes ``analyses/results/attribution_vs_exact.json``.

    python analyses/attribution_vs_exact.py                     # copy-200 and copy-20, steps 1, 5, 10, 20
    python analyses/attribution_vs_exact.py --model copy-20 --pairs 50 --steps 1 --steps 10
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from lsa_interp.analysis.activation_patching import SITES, patch_activations, solved_pairs
from lsa_interp.analysis.attribution_patching import attribute_activations, compare_grids
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.model import load_model
from lsa_interp.utils import atomic_write

OUT = Path(__file__).parent / "results" / "attribution_vs_exact.json"
MODELS = ("copy-200", "copy-20")
STEPS = (1, 5, 10, 20)


def agreement_of(name: str, n_pairs: int, steps: tuple[int, ...]) -> dict:
    """One model's row: the pairs it solves, the exact grids' time and each step count's agreement and time."""
    model = load_model(name)
    pairs = solved_pairs(model, minimal_pairs("succ", "pred", n_pairs, lengths=(3,), at_most=True))
    row: dict = {"pairs_solved": len(pairs)}
    if not pairs:
        return row
    started = time.perf_counter()
    exact = patch_activations(model, pairs, SITES, answers=False)
    row["exact_seconds"] = round(time.perf_counter() - started, 2)
    row["estimates"] = {}
    for count in steps:
        started = time.perf_counter()
        estimate = attribute_activations(model, pairs, SITES, steps=count)
        seconds = round(time.perf_counter() - started, 2)
        sites = {site: asdict(agreement) for site, agreement in compare_grids(estimate, exact).items()}
        row["estimates"][str(count)] = {"seconds": seconds, "sites": sites}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", action="append", help=f"checkpoint name or directory (repeatable; default: {', '.join(MODELS)})"
    )
    parser.add_argument("--pairs", type=int, default=100, help="succ/pred minimal pairs offered (default 100)")
    parser.add_argument(
        "--steps",
        type=int,
        action="append",
        help=f"integration steps (repeatable; default {', '.join(map(str, STEPS))})",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    steps = tuple(args.steps or STEPS)
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    if min(steps) < 1:
        parser.error(f"--steps must be at least 1, got {min(steps)}")
    try:
        models = {name: agreement_of(name, args.pairs, steps) for name in args.model or MODELS}
    except (ValueError, FileNotFoundError) as error:
        print(f"attribution_vs_exact: error: {error}", file=sys.stderr)
        return 2
    result = {"pairs": args.pairs, "steps": list(steps), "models": models}
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8"))
    for name, row in models.items():
        print(_lines(name, row))
    return 0


def _lines(name: str, row: dict) -> str:
    """A model's header, then per step count a line per site: r, the largest error, exact at the estimate's top."""
    if "estimates" not in row:
        return f"{name}: no pair solved on both sides"
    lines = [f"{name}: {row['pairs_solved']} pairs, exact grids {row['exact_seconds']} s"]
    for count, estimate in row["estimates"].items():
        lines.append(f"  {count} step(s), {estimate['seconds']} s:")
        for site, a in estimate["sites"].items():
            top = f"{a['exact_at_estimated_top']:.2f} of the best {a['exact_top']:.2f}"
            lines.append(f"    {site:28s} r {a['correlation']:6.3f}  largest error {a['max_abs_error']:.2f}  top {top}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
