"""Wall time to generate the copy-20 and copy-200 presets from scratch.

Prints tasks/s for the library (in memory, and end to end through the CLI including the Parquet files)
and the ratio against a naive pipeline measured in the same run: the same problems, but every row
materialised as a `Task` before splitting and down-sampling with Python sets (copy-20 only).

    python benchmarks/data_generation.py
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lsa_interp.data import PRESETS, Task, generate_dataset
from lsa_interp.data.alphabets import make_alphabets
from lsa_interp.data.problems import add_copy_rows, build_problems, pair_examples


def naive_copy20(seed: int = 0) -> dict[str, list[Task]]:
    """Reference-style pipeline: build every row as an object, then split and sample in Python."""
    config = PRESETS["copy-20"]
    alphabets = make_alphabets(config.n_alphabets, seed)
    table = build_problems(alphabets, config.eval_transformations, config.window_lengths, f"problems/{seed}")
    rows = add_copy_rows(
        pair_examples(table, config.n_reshuffle, 1, np.random.default_rng(seed)), np.random.default_rng(seed + 1)
    )
    tasks = [
        Task(
            table.alphabets[table.alphabet[q]],
            ((table.query[e], table.answer[e]),),
            table.query[q],
            table.answer[q],
            table.transformations[table.transformation[q]],
        )
        for q, e in zip(rows.query.tolist(), rows.examples[:, 0].tolist())
    ]
    keys = sorted({f"{t.query}>{t.answer}" for t in tasks})
    random.Random(seed).shuffle(keys)
    cut = [round(0.8 * len(keys)), round(0.9 * len(keys))]
    split_of = {k: 0 if i < cut[0] else 1 if i < cut[1] else 2 for i, k in enumerate(keys)}
    seen = set(config.train_transformations)
    out: dict[str, list[Task]] = {"train": [], "val": [], "test": []}
    for t in tasks:
        split = ("train", "val", "test")[split_of[f"{t.query}>{t.answer}"]]
        if split != "train" or t.transformation in seen:
            out[split].append(t)
    size = len(out["train"]) // 8
    for split in ("val", "test"):
        out[split] = random.Random(seed).sample(out[split], size)
    return out


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    print(f"{'what':<44}{'seconds':>9}{'tasks':>11}{'tasks/s':>11}")
    results = {}
    for preset in ("copy-20", "copy-200"):
        dataset, seconds = timed(lambda p=preset: generate_dataset(PRESETS[p], seed=0))
        n = sum(dataset.sizes().values())
        results[preset] = seconds
        print(f"{'generate_dataset ' + preset:<44}{seconds:>9.2f}{n:>11,}{n / seconds:>11,.0f}")
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable,
                "-m",
                "lsa_interp",
                "data",
                "generate",
                "--preset",
                preset,
                "--out",
                str(Path(tmp) / "d"),
            ]
            _, cli_seconds = timed(lambda c=cmd: subprocess.run(c, check=True, capture_output=True))
        label = f"lsa-interp data generate {preset} (+files)"
        print(f"{label:<44}{cli_seconds:>9.2f}{n:>11,}{n / cli_seconds:>11,.0f}")
    naive, naive_seconds = timed(naive_copy20)
    n = sum(len(v) for v in naive.values())
    print(f"{'naive pipeline copy-20 (baseline)':<44}{naive_seconds:>9.2f}{n:>11,}{n / naive_seconds:>11,.0f}")
    print(f"speed-up over the naive pipeline (copy-20): {naive_seconds / results['copy-20']:.1f}x")
    print(f"copy-200 against the 10 s target: {results['copy-200'] / 10:.2f} of the budget")


if __name__ == "__main__":
    main()
