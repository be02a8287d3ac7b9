"""How much of a model's val answers repeat a training row's answer for the same alphabet and query (docs/results.md).

The split is by problem string, so a val row's query can be trained in its alphabet under another rule with
another answer (`lsa_interp.evaluation.recall`). This decodes every non-copy val row per model (seen alphabets, all 19
rules; ``--rows`` for fewer) and counts, apart for rows whose query was trained with another answer and the rest, the
answers that are correct, a trained answer (recalled), another seen rule's untrained answer (seen rule), or other.
A model that reads the rule from the example is as right on the first kind of row as on the second; one that reads
only the query gives the trained answer. The same count on the new-alphabet test set
(``--new-alphabet-rows``), where nothing was trained, counts a seen rule applied to the query without recall.
It writes ``analyses/results/training_recall.json`` and ``.html``.

    python analyses/training_recall.py --model copy-20 --model nocopy-20

A ``--model`` may also be a training run directory: its last saved state (`lsa_interp.training.snapshot`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lsa_interp.data.transformations import PAPER
from lsa_interp.evaluation.fit import fit_rows
from lsa_interp.evaluation.recall import (
    OUTCOMES,
    ROW_KINDS,
    recall_figure,
    recall_totals,
    trained_answers,
    training_recall,
)
from lsa_interp.evaluation.run import evaluation_dataset, predict
from lsa_interp.training.snapshot import load_run_or_model
from lsa_interp.utils import atomic_write
from lsa_interp.viz.html import figures_page

OUT = Path(__file__).parent / "results" / "training_recall.json"
LOOK_ALIKE_RULES = ("pred", "succ", "remove_redundant", "rr_succ")
"""Seen rules whose look-alike siblings differ only in which letter changes: the example alone tells them apart."""
WINDOW_NEW_RULES = ("extend_pred", "extend_extend_succ", "reverse", "shift", "replicate")
"""New rules whose queries are runs of the alphabet, which the train split holds under succ, pred and extend."""


SPLITS = {"val": "val", "new_alphabets": "test_new_alphabets"}
"""The rows decoded: the val split (the training alphabets) and the new-alphabet test set (nothing to recall)."""


def model_recall(name: str, rows: dict[str, int | None]) -> dict:
    """The recall counts of model ``name`` per rule, on ``rows[key]`` (None: all) non-copy rows of each split of
    `SPLITS`, and the model's epochs."""
    model = load_run_or_model(name)
    dataset = evaluation_dataset(model, splits=("train", *SPLITS.values()))
    trained = trained_answers(dataset.splits["train"])
    result: dict = {"epochs": model.metadata.get("epochs_completed")}
    for key, split in SPLITS.items():
        tasks = fit_rows(dataset.splits[split], PAPER, rows[key])
        result[key] = {"rows": len(tasks), "per_rule": training_recall(tasks, predict(model, tasks, 512), trained)}
    return result


def _pick(per_rule: dict, rules: tuple[str, ...]) -> dict:
    return {rule: per_rule[rule] for rule in rules if rule in per_rule}


def _line(name: str, rule: str, kind: str, counts: dict) -> str:
    shares = "  ".join(f"{o} {counts[f'percent_{o}']:5.1f}" for o in OUTCOMES)
    return f"{name:28s} {rule:20s} {kind:9s} {shares}  (n={counts['rows']})"


def _summary(part: dict) -> dict:
    return {
        "rows": part["rows"],
        "totals": {group: counts.to_dict() for group, counts in recall_totals(part["per_rule"]).items()},
        "rules": {rule: counts.to_dict() for rule, counts in part["per_rule"].items()},
    }


def _figures(results: dict) -> dict:
    val = {name: result["val"]["per_rule"] for name, result in results.items()}
    new = {name: result["new_alphabets"]["per_rule"] for name, result in results.items()}
    return {
        "Look-alike seen rules, training alphabets": recall_figure(
            {name: _pick(per_rule, LOOK_ALIKE_RULES) for name, per_rule in val.items()},
            "Val rows whose query was trained in their alphabet under another rule, and the rest",
        ),
        "New rules on trained queries, training alphabets": recall_figure(
            {name: _pick(per_rule, WINDOW_NEW_RULES) for name, per_rule in val.items()},
            "New rules whose query was trained in its alphabet under a seen rule",
            kinds=("trained",),
        ),
        "The same rules on new alphabets (nothing to recall)": recall_figure(
            {name: _pick(per_rule, LOOK_ALIKE_RULES + WINDOW_NEW_RULES) for name, per_rule in new.items()},
            "New-alphabet rows: a seen rule's answer here is a rule applied to the query",
            kinds=("untrained",),
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", action="append", required=True, help="checkpoint name or directory, or training run (repeatable)"
    )
    parser.add_argument("--rows", type=int, default=None, help="non-copy val rows per model (default: all of them)")
    parser.add_argument(
        "--new-alphabet-rows", type=int, default=20000, help="non-copy rows of the new-alphabet test set per model"
    )
    parser.add_argument("--out", type=Path, default=OUT, help="the JSON file; the figures go beside it (.html)")
    args = parser.parse_args(argv)
    for option, value in (("--rows", args.rows), ("--new-alphabet-rows", args.new_alphabet_rows)):
        if value is not None and value < 1:
            print(f"training_recall: error: {option} must be positive, got {value}", file=sys.stderr)
            return 2
    if args.out.suffix != ".json":
        print(f"training_recall: error: --out must be a .json file, got {args.out}", file=sys.stderr)
        return 2
    rows = {"val": args.rows, "new_alphabets": args.new_alphabet_rows}
    results = {name: model_recall(name, rows) for name in args.model}
    summary = {
        name: {"epochs": result["epochs"], **{key: _summary(result[key]) for key in SPLITS}}
        for name, result in results.items()
    }
    text = json.dumps({"rows_per_model": rows, "models": summary}, indent=2) + "\n"
    page = figures_page("Training recall: answers that repeat a trained answer", _figures(results))
    atomic_write(args.out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    atomic_write(args.out.with_suffix(".html"), lambda tmp: tmp.write_text(page, encoding="utf-8"))
    for name, result in summary.items():
        for key in SPLITS:
            for rule in (*LOOK_ALIKE_RULES, *WINDOW_NEW_RULES):
                for kind, counts in result[key]["rules"].get(rule, {}).items():
                    if kind in ROW_KINDS and counts["rows"]:
                        print(_line(name, rule, f"{key[:3]} {kind}", counts))
            leaked = sum(counts["leaked"] for counts in result[key]["totals"].values())
            if leaked:
                print(f"{name}: {leaked} {key} rows whose own answer was trained for their alphabet and query")
    return 0


if __name__ == "__main__":
    sys.exit(main())
