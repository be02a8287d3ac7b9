"""Small helpers shared across the package."""

from __future__ import annotations

import gc
import hashlib
import importlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PACKAGE_VERSION = "0.1.0"
"""The package's version (``lsa_interp.__version__``; recorded in dataset manifests)."""


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for names (``exports``: name -> the package's module that defines
    it) imported on first use, so that importing one module of a package (a grid file's reader, a config) does not
    import torch and TransformerLens through its siblings. ``__getattr__`` raises AttributeError for any other
    name."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__


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
    threads = torch.get_num_threads()
    return f"{cpu}, {threads} torch thread{'' if threads == 1 else 's'}"


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
    """The records (JSON objects) of a JSON-lines file that a training run appends to (``metrics.jsonl``), [] when
    it is missing.

    A last line without its newline that does not parse (or decode as UTF-8) is a record being written (or cut by a
    kill) and is left out; any other line that does not, or is not a JSON object, raises ValueError naming the file
    and the line.
    """
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_bytes().split(b"\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            if number == len(lines):  # the unterminated last line
                break
            problem = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else f"not JSON ({error})"
            raise ValueError(f"{path} line {number} is {problem}; the run's log is damaged") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path} line {number} is {_shown(record)}, not a JSON object; the run's log is damaged")
        records.append(record)
    return records


NUMBER = (int, float)
"""The types a JSON number reads as, for `JsonObject.get`."""
_NEEDED: Any = object()
_KIND_NAMES = {dict: "an object", list: "a list", str: "a string", int: "a whole number", float: "a number",
               bool: "true or false", type(None): "null"}  # fmt: skip


def is_json_kind(value: Any, kinds: type | tuple[type, ...]) -> bool:
    """Whether ``value`` is of ``kinds`` as a JSON value is read: true and false are of ``bool`` only, not numbers."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))


def check_type(value: Any, kinds: type | tuple[type, ...], what: str) -> None:
    """Raise TypeError ``"{what}, got {type} {value!r}"`` unless ``value`` is of ``kinds``: a Python argument of the
    wrong type, which a type checker refuses but a user at a prompt may still pass."""
    if not isinstance(value, kinds):
        raise TypeError(f"{what}, got {type(value).__name__} {value!r}")


def _shown(value: Any) -> str:
    """``value`` as JSON on one line, cut to 40 characters."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


class JsonObject:
    """A JSON object read from ``path``, whose fields `get` reads checked; ``expected`` says what the file should
    be (every error ends ``; expected {expected}``)."""

    def __init__(self, data: dict[str, Any], path: str | os.PathLike, expected: str) -> None:
        self.data, self.path, self.expected = data, Path(path), expected

    def error(self, problem: str) -> ValueError:
        """A one-line ValueError: ``{path}: {problem}; expected {expected}``."""
        return ValueError(f"{self.path}: {problem}; expected {self.expected}")

    def get(self, keys: str, kinds: type | tuple[type, ...], default: Any = _NEEDED) -> Any:
        """The value at ``keys`` (dotted: ``"n_tasks.seen_alphabets"``; a number indexes a list: ``"runs.0.name"``),
        ``default`` where one is given and it is missing or null. Raises ValueError (`error`) where a value on the
        way is not an object, the value is not of ``kinds`` (true and false are of ``bool`` only, not numbers), or it
        is missing and no default is given."""
        value: Any = self.data
        names = keys.split(".")
        for depth, key in enumerate(names):
            if isinstance(value, list) and key.isdigit():
                value = {str(index): item for index, item in enumerate(value)}
            if not isinstance(value, dict):
                raise self.error(f"'{'.'.join(names[:depth])}' is {_shown(value)}, not an object")
            if value.get(key) is None and default is not _NEEDED:
                return default
            if key not in value:
                raise self.error(f"no '{keys}'")
            value = value[key]
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if not is_json_kind(value, kinds):
            allowed = " or ".join(_KIND_NAMES[kind] for kind in kinds if not (kind is int and float in kinds))
            raise self.error(f"'{keys}' is {_shown(value)}, not {allowed}")
        return value


def read_json_object(path: str | os.PathLike, expected: str) -> JsonObject:
    """The JSON object in the file at ``path`` (``expected`` says what it should be: see `JsonObject`). Raises
    ValueError naming the file when it is not UTF-8, not JSON or not an object, OSError when it cannot be read."""
    result = JsonObject({}, path, expected)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise result.error("not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise result.error(f"not JSON ({error})") from None
    if not isinstance(data, dict):
        raise result.error(f"{_shown(data)} is not a JSON object")
    result.data = data
    return result
