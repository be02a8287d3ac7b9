"""Our models on the authors' own items, beside the authors' model's answers to them (docs/results.md).

The authors' repository keeps the tasks they gave their models for a comparison with language models, one file
per model (``analyses/predictions/llm_comparison/results_copy_20.csv`` and the like). Each row has the example
``A : B``, the query ``C``, the answer ``D``, the alphabet, its permutation level and the rule. It also has
``testlet``, which says whether the alphabet was one of their copy-20 model's training alphabets (every model's
file has the same items and labels), and their model's answer and whether it was right. The file is theirs and
is not shipped here: pass its path with ``--items``.

This decodes every row with each of our models and compares with their model row for row. Rows are grouped by
whose training alphabets they are in:
- ``new_to_both``: their "unseen alphabets" rows, less any in our model's training alphabets;
- ``their_training_alphabets``: the "seen alphabets" rows, less ours;
- ``our_training_alphabets``: ours.
For a file of another of their models than copy-20, ``testlet`` still names copy-20's alphabets. It writes
``analyses/results/reference_items.json``.

    python analyses/reference_items.py --items results_copy_20.csv --model copy-20 --model replicates/copy-20-s1-bf16
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd

from lsa_interp.data import STANDARD_ALPHABET, Task
from lsa_interp.evaluation.run import evaluation_dataset, predict
from lsa_interp.model import load_model
from lsa_interp.utils import atomic_write

OUT = Path(__file__).parent / "results" / "reference_items.json"
COLUMNS = ("A", "B", "C", "D", "testlet", "alphabet", "n_perm", "transformation", "distribution", "correct")
UNSEEN = "unseen alphabets"


def letters(spaced: str) -> str:
    """``"a b c"`` -> ``"abc"``."""
    return "".join(spaced.split())


def read_items(path: Path) -> pd.DataFrame:
    """The authors' item file as a frame, its letter strings unspaced. Raises ValueError naming missing columns."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path} lacks the column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}")
    for column in ("A", "B", "C", "D", "alphabet"):
        frame[column] = frame[column].map(letters)
    frame["correct"] = frame["correct"].astype(int).astype(bool)
    return frame


def percent(hits: pd.Series) -> float | None:
    """The share of true entries in percent, to two decimals (None when empty)."""
    return round(100 * float(hits.mean()), 2) if len(hits) else None


def compare(items: pd.DataFrame, name: str) -> dict:
    """Model ``name``'s answers to ``items`` against the authors' model, per group of rows: their alphabets new
    to both models (their ``unseen alphabets`` less our training alphabets) and their training alphabets, split
    by in- and out-of-distribution rules, and the new-to-both in-distribution rows by permutation level."""
    model = load_model(name)
    tasks = [Task(r.alphabet, ((r.A, r.B),), r.C, r.D, r.transformation) for r in items.itertuples()]
    ours = pd.Series([a == t.answer for t, a in zip(tasks, predict(model, tasks, 512), strict=True)])
    ours.index = items.index
    ours_trained = items["alphabet"].isin(evaluation_dataset(model, splits=("val",)).train_alphabets)
    groups = {
        "new_to_both": (items["testlet"] == UNSEEN) & ~ours_trained,
        "their_training_alphabets": (items["testlet"] != UNSEEN) & ~ours_trained,
        "our_training_alphabets": ours_trained,
    }
    out: dict = defaultdict(dict)
    for group, rows in groups.items():
        for distribution in ("in", "out-of"):
            picked = rows & (items["distribution"] == distribution)
            out[group][distribution] = {
                "rows": int(picked.sum()),
                "ours": percent(ours[picked]),
                "theirs": percent(items["correct"][picked]),
                "both_right": int((ours[picked] & items["correct"][picked]).sum()),
                "only_ours": int((ours[picked] & ~items["correct"][picked]).sum()),
                "only_theirs": int((~ours[picked] & items["correct"][picked]).sum()),
            }
    new_in = groups["new_to_both"] & (items["distribution"] == "in")
    out["new_to_both_in_by_level"] = {
        level: {"rows": int(rows.sum()), "ours": percent(ours[rows]), "theirs": percent(items["correct"][rows])}
        for level in sorted(items["n_perm"].unique(), key=int)
        if (rows := new_in & (items["n_perm"] == level)).any()
    }
    out["standard_alphabet_rows"] = int((items["alphabet"] == STANDARD_ALPHABET).sum())
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=Path, required=True, help="the authors' item file (results_<model>.csv)")
    parser.add_argument("--model", action="append", required=True, help="a shipped model's name (repeatable)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        items = read_items(args.items)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    result = {
        "items": args.items.name,
        "their_model": sorted(items["model"].unique()) if "model" in items else None,
        "rows": len(items),
        "models": {name: compare(items, name) for name in args.model},
    }
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8"))
    for name, found in result["models"].items():
        for group in ("new_to_both", "their_training_alphabets"):
            cell = found[group]["in"]
            print(f"{name}, {group}, seen rules: ours {cell['ours']} / theirs {cell['theirs']} ({cell['rows']} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
