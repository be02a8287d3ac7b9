"""The files of a training run directory and the signal flag of the training loop (torch-free: the state file is
`lsa_interp.training.run_state`'s).

A run directory holds ``train_config.json``, ``metrics.jsonl`` (one JSON object a line), ``state.pt`` (the
latest resumable state) and, at the end, ``model/`` (a `save_model` checkpoint) or one
``replicate-{i}/model`` per replicate of a stacked run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from lsa_interp.utils import atomic_write

STATE_FILE, METRICS_FILE, CONFIG_FILE, MODEL_DIR = "state.pt", "metrics.jsonl", "train_config.json", "model"
DONE_FILE = "done"
"""Written when every run of a stack has trained all its steps (a sweep skips such a stack)."""


def prepare_run_dir(run_dir: str | os.PathLike, config: dict[str, Any], force: bool = False) -> Path:
    """Make ``run_dir`` a fresh run of ``config``: earlier states, metrics and models go, the config is written.

    Raises FileExistsError when ``run_dir`` is a file, or not empty and ``force`` is False.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise FileExistsError(f"{run_dir} is a file; give a directory for the run")
    if run_dir.exists() and any(run_dir.iterdir()) and not force:
        raise FileExistsError(f"{run_dir} is not empty; pass --force to overwrite it or --resume to continue it")
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in (STATE_FILE, METRICS_FILE, DONE_FILE):
        (run_dir / name).unlink(missing_ok=True)
    for old in [run_dir / MODEL_DIR, *run_dir.glob("replicate-*")]:
        shutil.rmtree(old, ignore_errors=True)
    text = json.dumps(config, indent=2) + "\n"
    atomic_write(run_dir / CONFIG_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return run_dir


def read_config(run_dir: Path) -> dict[str, Any]:
    """The parsed ``train_config.json`` of ``run_dir``, its dataset paths found from here (`located_data_dir`).
    Raises ValueError naming the file when it is not a JSON object (a damaged run), FileNotFoundError when it is
    missing."""
    path = run_dir / CONFIG_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is damaged (not JSON: {error}); start the run again") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is damaged (not a JSON object); start the run again")
    runs = data.get("runs") if isinstance(data.get("runs"), list) else []  # a wrong type is from_dict's to name
    for holder in [data, *(run for run in runs if isinstance(run, dict))]:
        if isinstance(holder.get("data_dir"), str):
            holder["data_dir"] = located_data_dir(holder["data_dir"], run_dir)
    return data


Parsed = TypeVar("Parsed")


def parse_config(run_dir: Path, parse: Callable[[dict[str, Any]], Parsed]) -> Parsed:
    """``parse`` of the run's `read_config` (e.g. ``TrainConfig.from_dict``); a ValueError it raises (a field missing
    or of the wrong type) is raised again with the file's path before it. Raises what `read_config` raises."""
    data = read_config(run_dir)
    try:
        return parse(data)
    except ValueError as error:
        raise ValueError(f"{run_dir / CONFIG_FILE}: {error}") from None


def located_data_dir(data_dir: str, run_dir: Path) -> str:
    """A run's dataset path as found from the working directory: ``data_dir`` itself where it holds a dataset or is
    absolute; else, for a relative path (runs before 2026-12-06 stored the path as typed, relative to where they
    started), the run's own ``RUN/data`` where the path names it (``.../RUN/data``: a run started without --data) and
    it holds a dataset; else unchanged, for the loader to name."""
    stored, own = Path(data_dir), run_dir / "data"
    if stored.is_absolute() or (stored / "manifest.json").is_file():
        return data_dir
    names_own = stored.name == "data" and stored.parent.name == run_dir.resolve().name
    return str(own) if names_own and (own / "manifest.json").is_file() else data_dir


def cut_metrics(run_dir: Path, offset: int) -> None:
    """Drop what ``metrics.jsonl`` gained after the state a run resumes from."""
    metrics = run_dir / METRICS_FILE
    if metrics.exists():
        with metrics.open("r+b") as handle:
            handle.truncate(offset)


def append_record(run_dir: Path, record: dict[str, Any]) -> None:
    """Append one JSON line to ``metrics.jsonl``."""
    with (run_dir / METRICS_FILE).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def replicate_dir(index: int) -> str:
    """The sub-directory of a stacked run that holds replicate ``index``'s final model."""
    return f"replicate-{index}"


class StoppedBySignal(KeyboardInterrupt):
    """Raised by work that goes on after a training loop has stopped on SIGINT/SIGTERM and saved its state (a
    sweep), so that it stops as an interrupted program does; ``signum`` is the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextmanager
def stop_on_signals() -> Iterator[dict[str, int]]:
    """Turn SIGINT/SIGTERM into a flag the loop checks after each step (so the state can be saved)."""
    flag: dict[str, int] = {}
    handler = lambda signum, _frame: flag.setdefault("signal", signum)
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
