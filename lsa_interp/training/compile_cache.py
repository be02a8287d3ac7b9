"""Compiled kernels kept from one machine to the next: torch's portable compile cache.

A GPU session starts on a fresh machine, so a compiled stack compiles its step again each time (most of the
start-up, about 70 s of a 15-minute session on the H100). ``torch.compiler.save_cache_artifacts`` packs what
inductor compiled in a process (its graphs, their Triton kernels, AOTAutograd's entries) into bytes that
``load_cache_artifacts`` puts back into another machine's caches, where the same torch, device and graph then
find them and only Dynamo traces again.

``LSA_COMPILE_CACHE`` names folders (separated like ``PATH``): `StackTrainer.run` of a compiled stack loads every
``*.bin`` in them before its first step and saves what the process compiled after it, into the first folder, as
``KEY.bin`` with a ``KEY.json`` that lists its artifacts (``KEY``: a hash of their keys, so the same kernels
give the same name and are not written twice). scripts/gpu_train.sh loads the committed
``benchmarks/compile-cache/KIND/`` and brings new files back in its bundle.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import torch

from lsa_interp.utils import atomic_write

COMPILE_CACHE_ENV = "LSA_COMPILE_CACHE"
"""The environment variable that names the cache folders (`cache_folders`)."""


def cache_folders() -> list[Path]:
    """The folders ``LSA_COMPILE_CACHE`` names, in order (none when it is unset or empty)."""
    return [Path(part) for part in os.environ.get(COMPILE_CACHE_ENV, "").split(os.pathsep) if part]


def load_compile_caches(folders: list[Path]) -> int:
    """Put every ``*.bin`` of ``folders`` into this process's compile caches; returns how many artifacts were
    loaded. A file torch cannot read is skipped with a warning: a cache may save time, never stop training."""
    loaded = 0
    for path in sorted(path for folder in folders if folder.is_dir() for path in folder.glob("*.bin")):
        try:
            info = torch.compiler.load_cache_artifacts(path.read_bytes())
        except Exception as error:  # torch raises several kinds for a file of another version or a broken one
            warnings.warn(f"compile cache {path} not loaded: {type(error).__name__}: {error}", stacklevel=2)
            continue
        loaded += 0 if info is None else sum(len(keys) for keys in info.artifacts.values())
    return loaded


def save_compile_cache(folders: list[Path]) -> Path | None:
    """Write what this process compiled into ``folders[0]`` (atomically, ``KEY.bin`` and ``KEY.json``); returns
    the ``.bin`` written, or None when nothing was compiled or a file of that name is in one of ``folders``."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None or not folders:
        return None
    data, info = saved
    artifacts = {kind: sorted(keys) for kind, keys in sorted(info.artifacts.items()) if keys}
    if not artifacts:
        return None
    name = hashlib.sha256(json.dumps(artifacts).encode()).hexdigest()[:16]
    if any((folder / f"{name}.bin").is_file() for folder in folders):
        return None
    folders[0].mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    about = {"torch": torch.__version__, "device": device, "bytes": len(data), "artifacts": artifacts}
    atomic_write(
        folders[0] / f"{name}.json", lambda tmp: tmp.write_text(json.dumps(about, indent=2) + "\n", encoding="utf-8")
    )
    atomic_write(folders[0] / f"{name}.bin", lambda tmp: tmp.write_bytes(data))
    return folders[0] / f"{name}.bin"
