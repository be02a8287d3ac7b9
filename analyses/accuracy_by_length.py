"""Exact match of models by rule and query length, on the same val rows (docs/results.md, the bf16 runs).

Decodes every non-copy val row (seen alphabets) of the ``--rule`` rules for each ``--model`` and tabulates the
exact-match % per rule and query length (letters), with each wrong answer sorted by whether it has the answer's
length. It writes ``analyses/results/accuracy_by_length.json``.

    python analyses/accuracy_by_length.py --model copy-20 --model replicates/copy-20-s0-bf16 \
        --model replicates/copy-20-s1-bf16

The models must share a training preset and dataset seed (the rows are decoded from the first model's dataset).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from lsa_interp.evaluation.run import evaluation_dataset, predict
from lsa_interp.model import load_model
from lsa_interp.utils import atomic_write

OUT = Path(__file__).parent / "results" / "accuracy_by_length.json"
RULES = ("succ", "extend_sequence", "fix_extend", "fix_alphabetic_seq", "rr_sort")


def by_length(names: list[str], rules: tuple[str, ...]) -> dict:
    """Per model, rule and query length: rows, correct answers and wrong answers of the answer's length.
    Raises ValueError when the models were trained on different datasets."""
    models = {name: load_model(name) for name in names}
    sources = {(m.metadata.get("preset"), m.metadata.get("data_seed")) for m in models.values()}
    if len(sources) > 1:
        raise ValueError(f"the models were trained on different datasets: {sorted(map(str, sources))}")
    dataset = evaluation_dataset(next(iter(models.values())), splits=("val",))
    tasks = [t for t in dataset.splits["val"] if t.transformation in rules and not t.is_copy]
    table: dict = {}
    for name, model in models.items():
        cells: dict = defaultdict(lambda: {"rows": 0, "correct": 0, "wrong_same_length": 0})
        for task, answer in zip(tasks, predict(model, tasks, 512), strict=True):
            cell = cells[f"{task.transformation}/{len(task.query)}"]
            cell["rows"] += 1
            cell["correct"] += answer == task.answer
            cell["wrong_same_length"] += answer != task.answer and len(answer) == len(task.answer)
        table[name] = dict(sorted(cells.items()))
    return {"rows": len(tasks), "rules": list(rules), "split": "val", "models": table}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="checkpoint name or directory (repeatable)")
    parser.add_argument(
        "--rule",
        action="append",
        help=f"a rule (repeatable; default: {', '.join(RULES)}: four seen rules and the new rr_sort)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        result = by_length(args.model, tuple(args.rule or RULES))
    except (ValueError, FileNotFoundError) as error:
        print(f"accuracy_by_length: error: {error}", file=sys.stderr)
        return 2
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8"))
    cells = sorted({cell for table in result["models"].values() for cell in table})
    print(f"{'rule/length':24s} " + " ".join(f"{name[-18:]:>18s}" for name in args.model))
    for cell in cells:
        counts = [result["models"][name].get(cell) for name in args.model]
        shown = [f"{100 * c['correct'] / c['rows']:18.1f}" if c else f"{'-':>18s}" for c in counts]
        print(f"{cell:24s} " + " ".join(shown) + f"   (n={counts[0]['rows'] if counts[0] else 0})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
