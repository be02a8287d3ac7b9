"""Which rule the shipped models apply to the rules whose queries look alike (docs/results.md).

Three families of seen rules share a query form, so only the example names the rule (`lsa_interp.evaluation.
rule_families`): extend_sequence / succ / pred, remove_redundant / rr_succ, fix_alphabetic_seq / fix_extend. This
decodes ``--rows`` non-copy val rows of those seven rules per model (seen alphabets) and counts the answers that are
correct, a sibling rule's answer on the same query, or other. It writes ``analyses/results/rule_families.json``.

    python analyses/rule_families.py --model copy-20 --model nocopy-20 --rows 4000

A ``--model`` may also be a training run directory: its last saved state (`lsa_interp.training.snapshot`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lsa_interp.evaluation import family_confusion
from lsa_interp.evaluation.fit import fit_rows
from lsa_interp.evaluation.rule_families import FAMILY_OF
from lsa_interp.evaluation.run import evaluation_dataset, predict
from lsa_interp.training.snapshot import load_run_or_model
from lsa_interp.utils import atomic_write

OUT = Path(__file__).parent / "results" / "rule_families.json"


def model_confusion(name: str, rows: int) -> dict:
    """The rule-family counts of model ``name`` on ``rows`` non-copy val rows of the family rules."""
    model = load_run_or_model(name)
    dataset = evaluation_dataset(model, splits=("val",))
    tasks = fit_rows(dataset.splits["val"], tuple(FAMILY_OF), rows)
    confusion = family_confusion(tasks, predict(model, tasks, 512))
    return {
        "epochs": model.metadata.get("epochs_completed"),
        "rows": len(tasks),
        "rules": {rule: counts.to_dict() for rule, counts in confusion.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", action="append", required=True, help="checkpoint name or directory, or training run (repeatable)"
    )
    parser.add_argument("--rows", type=int, default=4000, help="non-copy val rows of the family rules per model")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.rows < 1:
        print(f"rule_families: error: --rows must be positive, got {args.rows}", file=sys.stderr)
        return 2
    results = {name: model_confusion(name, args.rows) for name in args.model}
    text = json.dumps({"rows_per_model": args.rows, "split": "val", "models": results}, indent=2) + "\n"
    atomic_write(args.out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    for name, result in results.items():
        for rule, counts in result["rules"].items():
            siblings = ", ".join(f"{s} {100 * n / counts['total']:.1f}" for s, n in counts["as_rule"].items())
            correct, total = counts["percent_correct"], counts["total"]
            print(f"{name:24s} {rule:20s} correct {correct:5.1f}  as {siblings}  (n={total})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
