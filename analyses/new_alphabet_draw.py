"""How much a model's new-alphabet accuracy owes to which 20 alphabets the test set drew (docs/results.md).

The new-alphabet test set holds 20 permuted alphabets, 5 per permutation level. This decodes ``--rows``
non-copy rows of the seen transformations from it, scores each alphabet, and resamples the draw: 5
alphabets per level with replacement, 10,000 times, the set's accuracy as the row-weighted mean. It writes
``analyses/results/new_alphabet_draw.json``: per model, the accuracy overall, per level and per alphabet, and
the standard deviation and 95% range of the resampled set's accuracy.

    python analyses/new_alphabet_draw.py --model copy-20 --model copy-200 --rows 20000
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from lsa_interp.data.alphabets import permutation_level
from lsa_interp.evaluation.fit import fit_rows
from lsa_interp.evaluation.run import evaluation_dataset, predict
from lsa_interp.model import load_model
from lsa_interp.utils import atomic_write

SPLIT = "test_new_alphabets"
OUT = Path(__file__).parent / "results" / "new_alphabet_draw.json"


def percent(correct: int, total: int) -> float:
    """``correct`` of ``total`` in percent, to two decimals."""
    return round(100 * correct / total, 2)


def alphabet_draw(name: str, rows: int, resamples: int = 10_000, seed: int = 0) -> dict:
    """The per-alphabet accuracies of model ``name`` on ``rows`` new-alphabet rows and the spread of the set's
    accuracy over resampled draws of its alphabets (within each permutation level)."""
    model = load_model(name)
    dataset = evaluation_dataset(model, splits=(SPLIT,))
    tasks = fit_rows(dataset.splits[SPLIT], dataset.config.train_transformations, rows)
    answers = predict(model, tasks, 512)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task, answer in zip(tasks, answers, strict=True):
        counts[task.alphabet][0] += int(answer == task.answer)
        counts[task.alphabet][1] += 1
    levels: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    for alphabet, (correct, total) in sorted(counts.items()):
        levels[permutation_level(alphabet)].append((alphabet, correct, total))
    rng, draws = np.random.default_rng(seed), []
    for _ in range(resamples):
        picked = [group[i] for group in levels.values() for i in rng.integers(0, len(group), len(group))]
        draws.append(100 * sum(c for _, c, _ in picked) / sum(n for _, _, n in picked))
    return {
        "rows": len(tasks),
        "overall": percent(sum(c for c, _ in counts.values()), sum(n for _, n in counts.values())),
        "by_level": {
            str(level): {
                "percent": percent(sum(c for _, c, _ in group), sum(n for _, _, n in group)),
                "alphabets": {alphabet: percent(c, n) for alphabet, c, n in group},
            }
            for level, group in sorted(levels.items())
        },
        "draw_sd": round(float(np.std(draws)), 2),
        "draw_95": [round(float(x), 2) for x in np.percentile(draws, [2.5, 97.5])],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="a shipped model's name (repeatable)")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    result = {"split": SPLIT, "models": {name: alphabet_draw(name, args.rows) for name in args.model}}
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8"))
    for name, found in result["models"].items():
        levels = " / ".join(f"{v['percent']:.1f}" for v in found["by_level"].values())
        print(f"{name}: {found['overall']:.1f}% (levels {levels}); draw sd {found['draw_sd']}, 95% {found['draw_95']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
