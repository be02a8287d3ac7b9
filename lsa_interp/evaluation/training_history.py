"""The per-epoch validation history of training runs, read from their ``metrics.jsonl``.

A run directory of `lsa_interp.training` (one model, or a stack of replicates) logs one ``epoch`` record
per model and epoch: validation loss and accuracy (overall, copy / non-copy, seen / new transformations,
per transformation), its best matching-head score, the share of each rule family's rows answered with a sibling
rule's answer and, for stacks, the replicate's run name. This module
flattens them into one table: one row per (run, epoch).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

METRICS_FILE, CONFIG_FILE = "metrics.jsonl", "train_config.json"


def _replicate_labels(config: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    """(run name, preset, batching) per replicate of a run's saved config (a stack or a single run)."""
    if "runs" in config:
        return [
            (r.get("name") or f"replicate-{i}", r.get("preset"), r["batching"]) for i, r in enumerate(config["runs"])
        ]
    seed, replicates = config.get("seed", 0), config.get("replicates", 1)
    preset, batching = config.get("preset"), config.get("batching", "random")
    return [(f"{preset or 'data'}-{batching}-s{seed + i}", preset, batching) for i in range(replicates)]


def epoch_history(run_dir: str | os.PathLike) -> pd.DataFrame:
    """One row per (model, epoch) of one run directory: ``run``, ``preset``, ``batching``, ``precision`` (the
    training precision of the run or stack), ``epoch``, ``step``,
    every scalar of the epoch record, ``acc_<rule>`` per transformation and ``sibling_<family>`` per rule family
    (records written since the rule-family analysis). Raises FileNotFoundError when
    ``run_dir`` is not a training run."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run (no {CONFIG_FILE})")
    config = json.loads((run_dir / CONFIG_FILE).read_text())
    labels, precision = _replicate_labels(config), config.get("precision", "fp32")
    metrics = run_dir / METRICS_FILE
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    rows = []
    for line in lines:
        record = json.loads(line)
        if record.get("type") != "epoch":
            continue
        index = record.get("replicate", 0)
        name, preset, batching = labels[index] if index < len(labels) else (f"replicate-{index}", None, None)
        row = {"run": record.get("run", name), "preset": preset, "batching": batching, "precision": precision}
        row["replicate"] = index
        row.update({k: v for k, v in record.items() if not isinstance(v, dict) and k not in ("type", "run")})
        row.update({f"acc_{rule}": value for rule, value in record.get("val_acc_by_transformation", {}).items()})
        row.update({f"sibling_{family}": v for family, v in record.get("val_sibling_by_family", {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def histories(run_dirs: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """`epoch_history` of every run directory, concatenated (empty when none has epoch records)."""
    frames = [frame for frame in (epoch_history(path) for path in run_dirs) if not frame.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
