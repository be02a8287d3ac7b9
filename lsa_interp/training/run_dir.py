"""The files of a training run directory, the device choice and the signal flag of the training loop.

A run directory holds ``train_config.json``, ``metrics.jsonl`` (one JSON object a line), ``state.pt`` (the
latest resumable state) and, at the end, ``model/`` (a `save_model` checkpoint) or one
``replicate-{i}/model`` per replicate of a stacked run.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import torch

STATE_FILE, METRICS_FILE, CONFIG_FILE, MODEL_DIR = "state.pt", "metrics.jsonl", "train_config.json", "model"


def replicate_dir(index: int) -> str:
    """The sub-directory of a stacked run that holds replicate ``index``'s final model."""
    return f"replicate-{index}"


def pick_device(name: str) -> torch.device:
    """``auto`` gives CUDA when available, else CPU; raises ValueError for a device that is not there."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but no CUDA GPU is available")
    return device


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
