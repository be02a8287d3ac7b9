"""A run's resumable state and where it trains: ``state.pt`` read and written (`lsa_interp.training.run_dir` names
the run's files), the random generators a resumed run continues from, and the device choice."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch

from lsa_interp.training.run_dir import METRICS_FILE, STATE_FILE
from lsa_interp.utils import atomic_write


def read_state(run_dir: Path) -> dict[str, Any] | None:
    """The last saved resumable state of ``run_dir`` (on the CPU), or None when none was saved.

    Loaded with ``weights_only=True``: a state holds tensors, dicts, lists and numbers, nothing to unpickle.
    Raises ValueError naming the file when it is empty, truncated or holds more than a state (an object to unpickle).
    """
    path = run_dir / STATE_FILE
    if not path.is_file():
        return None
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except (EOFError, RuntimeError, OSError, pickle.UnpicklingError) as error:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        damaged = f"{path} is empty, truncated or not a training state"
        raise ValueError(f"{damaged} ({reason}); it cannot be resumed") from None


def write_state(run_dir: Path, state: dict[str, Any]) -> int:
    """Save ``state`` atomically with the current length of ``metrics.jsonl`` (``metrics_offset``, where a
    resumed run cuts the log); return that length."""
    metrics = run_dir / METRICS_FILE
    offset = metrics.stat().st_size if metrics.exists() else 0
    state = {**state, "metrics_offset": offset}
    atomic_write(run_dir / STATE_FILE, lambda tmp: torch.save(state, tmp))
    return offset


def rng_state(device: torch.device) -> dict[str, Any]:
    """The random generators a resumed run must continue from."""
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state() if device.type == "cuda" else None,
    }


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    """Set the random generators saved by `rng_state`."""
    torch.set_rng_state(state["torch_rng"])
    if device.type == "cuda" and state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(state["cuda_rng"])


def pick_device(name: str) -> torch.device:
    """The device ``name`` names: ``auto`` gives CUDA when available, else the CPU; ``cpu``, ``cuda``, ``cuda:N``.
    Raises ValueError for another name or a GPU that is not there."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not re.fullmatch(r"cuda:\d+", name):
        raise ValueError(f"unknown device {name!r}; choose one of: auto, cpu, cuda, cuda:N")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but no CUDA GPU is available")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"there is no {name}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    return device
