"""Keep the records of this CPU's long runs in the checkout (``bash scripts/cpu_runs.sh snapshot``).

A machine that is replaced takes its runs with it; their records (``train_config.json`` and ``metrics.jsonl``)
survive only where a session commits them, under ``analyses/runs/cpu/NAME``:

    python scripts/cpu_snapshot.py copy RUN_DIR analyses/runs/cpu/NAME    # the run's records, whole lines only
    python scripts/cpu_snapshot.py prune analyses/runs/cpu/NAME           # a shipped run's partial record

``copy`` keeps a committed record that reaches further than the run's own (a run started again from step 0 after
its machine was lost) and says so; where it replaces a record whose epochs differ from the run's (the same seed
trained on another kind of machine, parted by rounding), it names the first epoch whose record differs. ``prune``
removes a record that stops before the epochs its config plans: once the run is finished elsewhere (shipped, or
recorded by a GPU sweep), a partial copy of it would count its seed twice. A finished record (all its epochs) stays.
Standard library only, like the other scripts here.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

FILES = ("train_config.json", "metrics.jsonl")


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def reach(text: str) -> tuple[int, int]:
    """The last epoch and the last step that the lines of a ``metrics.jsonl`` record (0 where none)."""
    records = _records(text)
    epochs = [r["epoch"] for r in records if r.get("type") == "epoch"]
    steps = [r["step"] for r in records if r.get("type") in ("step", "epoch") and "step" in r]
    return max(epochs, default=0), max(steps, default=0)


def first_difference(kept: str, text: str) -> int | None:
    """The first epoch whose record differs between two ``metrics.jsonl`` texts, or None when every epoch both record
    is the same: a run resumed from its own saved state repeats its record, while the same seed trained again on
    another kind of machine can part from it by rounding."""
    kept_epochs, epochs = ({r["epoch"]: r for r in _records(t) if r.get("type") == "epoch"} for t in (kept, text))
    return min((e for e in kept_epochs.keys() & epochs.keys() if kept_epochs[e] != epochs[e]), default=None)


def copy(source: Path, target: Path) -> str:
    """Copy ``source``'s config and the whole lines of its metrics into ``target`` (each file written to a temporary
    name, then renamed), unless ``target`` already records a later step. Returns the line to print."""
    text = (source / "metrics.jsonl").read_bytes().decode("utf-8")
    text = text[: text.rfind("\n") + 1]  # a run still appending may be mid-line
    epoch, step = reach(text)
    replaced = ""
    if (target / "metrics.jsonl").is_file():
        kept = (target / "metrics.jsonl").read_text(encoding="utf-8")
        kept_epoch, kept_step = reach(kept)
        if kept_step > step:
            return (
                f"{target.name}: kept {target} (last epoch {kept_epoch}, step {kept_step:,}): the run here is behind "
                f"it (last epoch {epoch}, step {step:,}), started again"
            )
        differs = first_difference(kept, text)
        if differs is not None:
            replaced = (
                f"; it replaces a record that first differs from this run's at epoch {differs} (last epoch "
                f"{kept_epoch}, step {kept_step:,}; git's history keeps it)"
            )
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        temporary = target / f".{name}.tmp"
        if name == "metrics.jsonl":
            temporary.write_bytes(text.encode("utf-8"))
        else:
            shutil.copyfile(source / name, temporary)
        os.replace(temporary, target / name)
    return f"{target.name}: {target} (last epoch {epoch}, step {step:,}){replaced}"


def prune(target: Path) -> str | None:
    """Remove ``target`` when its record stops before the epochs its config plans; returns the line to print, or
    None when it is left (a finished record, or none there)."""
    if not (target / "metrics.jsonl").is_file() or not (target / "train_config.json").is_file():
        return None
    planned = json.loads((target / "train_config.json").read_text(encoding="utf-8")).get("epochs")
    epoch, step = reach((target / "metrics.jsonl").read_text(encoding="utf-8"))
    if planned is None or epoch >= planned:
        return None
    shutil.rmtree(target)
    return f"{target.name}: removed {target} (last epoch {epoch} of {planned}, step {step:,}): the run is shipped"


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "copy":
        print(copy(Path(argv[1]), Path(argv[2])))
        return 0
    if len(argv) == 2 and argv[0] == "prune":
        line = prune(Path(argv[1]))
        if line:
            print(line)
        return 0
    print("usage: cpu_snapshot.py copy RUN_DIR TARGET | prune TARGET", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
