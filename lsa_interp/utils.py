"""Small helpers shared across the package."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PACKAGE_VERSION = "0.1.0"
"""The package's version (``lsa_interp.__version__``; recorded in dataset manifests)."""


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: building ~10^6 small objects otherwise triggers it constantly."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Call ``write`` on a temporary file next to ``path``, then rename it onto ``path``.

    Readers see the old file or the complete new one, never a half-written one; the file gets the usual
    permissions (0666 less the umask, not mkstemp's 0600). On error the temporary file is removed and the
    error re-raised.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def hardware_description(device_type: str) -> str:
    """A short description of the machine: the GPU's name on CUDA, else the CPU model and torch's thread count."""
    import torch

    if device_type == "cuda":
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    cpu = "CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in cpuinfo.read_text(encoding="utf-8").splitlines()
                if line.startswith("model name")
            ),
            cpu,
        )
    return f"{cpu}, {torch.get_num_threads()} torch threads"


def make_staging_dir(target: Path) -> Path:
    """A new empty directory beside ``target`` to fill and then rename onto it (usual permissions, not 0700)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def _umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def generated_doc_main(render: Callable[[], str], description: str, argv: list[str] | None = None) -> None:
    """Command-line entry of a generated document: print ``render()``, or write it to ``--out FILE``."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    text = render()
    if args.out is None:
        sys.stdout.write(text)
    else:
        atomic_write(args.out, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_json_lines(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a JSON-lines file that a training run appends to (``metrics.jsonl``), [] when it is missing.

    A last line without its newline that does not parse is a record being written (or cut by a kill) and is left
    out; any other line that does not parse raises ValueError naming the file and the line.
    """
    path = Path(path)
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == len(lines):  # the unterminated last line
                break
            raise ValueError(f"{path} line {number} is not JSON ({error}); the run's log is damaged") from None
    return records
