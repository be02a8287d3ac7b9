"""Our checkpoint format, and `load_model` for it, for reference ``.pt`` files and for shipped names.

A checkpoint is a directory holding ``model.safetensors`` (the weights) and ``config.json``:
``{"format": "lsa-interp", "format_version": 1, "model_config": {...}, "weights_file": "model.safetensors",
"weights_sha256": "<hex>", "metadata": {...}}``. The SHA-256 is checked before the weights are read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from lsa_interp.model.config import ModelConfig
from lsa_interp.model.convert import load_reference_checkpoint
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.utils import atomic_write, make_staging_dir, sha256_file

FORMAT_NAME = "lsa-interp"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CHECKPOINTS_DIR = Path(__file__).resolve().parents[2] / "checkpoints"
"""Shipped checkpoints: ``checkpoints/<name>/`` (our format) or ``checkpoints/<name>.pt`` (reference format)."""
REPLICATES = "replicates"
"""The folder of ``CHECKPOINTS_DIR`` whose checkpoints load as ``replicates/NAME``."""


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupted, truncated or of an unknown format."""


def _json_default(value: Any) -> Any:
    """JSON fallback for metadata: tensors and arrays become lists, sets lists, anything else its str."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


STORAGE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
"""Dtypes a checkpoint's floating-point weights may be stored in (they are loaded back as fp32)."""


def save_model(
    model: HookedEncoderDecoder,
    directory: str | Path,
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
    storage: str = "fp32",
) -> Path:
    """Write ``model`` as a checkpoint directory, atomically (temporary directory, then rename); return its path.

    ``metadata`` (JSON-serialisable; tensors become lists) is merged over ``model.metadata``. ``storage``
    (fp32, fp16 or bf16) is the dtype of the stored parameters (buffers stay fp32). Raises FileExistsError when
    ``directory`` exists and ``overwrite`` is False, ValueError for an unknown ``storage``.
    """
    if storage not in STORAGE_DTYPES:
        raise ValueError(f"unknown storage dtype {storage!r}; choose one of: {', '.join(STORAGE_DTYPES)}")
    dtype = STORAGE_DTYPES[storage]
    directory = Path(directory)
    if directory.exists() and not overwrite:
        raise FileExistsError(f"{directory} exists; pass overwrite=True to replace it")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = make_staging_dir(directory), directory.with_name(f".{directory.name}.old")
    try:
        parameters = {name for name, _ in model.named_parameters()}
        state = {
            key: value.detach().to("cpu", dtype=dtype if key in parameters else _buffer_dtype(value)).contiguous()
            for key, value in model.state_dict().items()
        }
        # safetensors creates its file 0600; atomic_write gives it 0666 less the umask, as the other files
        atomic_write(tmp / WEIGHTS_FILE, lambda path: save_file(state, str(path)))
        config = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "model_config": model.cfg.to_dict(),
            "weights_file": WEIGHTS_FILE,
            "weights_dtype": storage,
            "weights_sha256": sha256_file(tmp / WEIGHTS_FILE),
            "metadata": {**model.metadata, **(metadata or {})},
        }
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, default=_json_default) + "\n", encoding="utf-8")
        if directory.exists():
            shutil.rmtree(old, ignore_errors=True)  # left by a save that was killed between its two renames
            directory.rename(old)
            tmp.rename(directory)
            shutil.rmtree(old)
        else:
            tmp.rename(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not directory.exists():  # interrupted between the renames: the old model back
            old.rename(directory)
        raise
    return directory


def _read_config(directory: Path) -> dict[str, Any]:
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise CheckpointError(f"{directory} is not a checkpoint directory: {CONFIG_FILE} is missing")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{config_path} is corrupted (not valid JSON: {err})") from err
    if not isinstance(config, dict) or config.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{config_path} is not an {FORMAT_NAME} checkpoint config")
    if config.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{config_path} has format version {config.get('format_version')}; this version reads {FORMAT_VERSION}"
        )
    for key in ("model_config", "weights_file", "weights_sha256"):
        if key not in config:
            raise CheckpointError(f"{config_path} lacks {key!r}")
    for key in ("weights_file", "weights_sha256"):
        if not isinstance(config[key], str) or not config[key] or "/" in config[key] or "\\" in config[key]:
            raise CheckpointError(
                f"{config_path}: {key} is {config[key]!r}, not a file name of the checkpoint's folder"
            )
    if not isinstance(config["model_config"], dict):
        raise CheckpointError(
            f"{config_path}: model_config is {config['model_config']!r}, not an object of the model's hyper-parameters"
        )
    return config


def load_checkpoint_dir(directory: str | Path, device: torch.device | str = "cpu") -> HookedEncoderDecoder:
    """Load a checkpoint directory written by `save_model` (eval mode).

    Raises CheckpointError when a file is missing, the config is invalid, the weights' SHA-256 does not
    match (corrupted or truncated file) or the weights do not fit the config.
    """
    directory = Path(directory)
    config = _read_config(directory)
    weights = directory / config["weights_file"]
    if not weights.is_file():
        raise CheckpointError(f"{weights} is missing")
    digest = sha256_file(weights)
    if digest != config["weights_sha256"]:
        raise CheckpointError(
            f"{weights} is corrupted or truncated: SHA-256 {digest} does not match {config['weights_sha256']}"
        )
    try:
        cfg = ModelConfig.from_dict(config["model_config"])
        state = load_file(str(weights))
        model = HookedEncoderDecoder(cfg, metadata=config.get("metadata") or {})
        _check_weights_fit(state, model.state_dict(), config["weights_file"])
        model.load_state_dict(state, strict=True)
    except (SafetensorError, RuntimeError, ValueError, TypeError) as err:
        raise CheckpointError(f"cannot load {directory}: {err}") from err
    return model.to(device).eval()


def _check_weights_fit(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], weights_file: str) -> None:
    """Raise ValueError, in one line, naming the first weight of ``state`` that the config's model lacks, misses
    or shapes otherwise (torch's own message spans many lines, of which a command prints the first)."""
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{weights_file} does not fit config.json's model: {len(missing)} weight(s) missing ({missing[:3]}), "
            f"{len(unexpected)} unexpected ({unexpected[:3]})"
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise ValueError(
                f"{weights_file} does not fit config.json's model: {name} has shape {list(tensor.shape)}, the config "
                f"makes {list(expected[name].shape)}"
            )


def available_models(replicates: bool = True) -> list[str]:
    """Every name `load_model` takes for a shipped checkpoint: the top-level ones under ``checkpoints/``
    (directories and ``.pt`` files), sorted, then, unless ``replicates`` is False, the shipped replicates
    (``replicates/NAME``, `shipped_replicates`)."""
    if not CHECKPOINTS_DIR.is_dir():
        return []
    names = {p.name for p in CHECKPOINTS_DIR.iterdir() if p.is_dir() and (p / CONFIG_FILE).is_file()}
    names |= {p.stem for p in CHECKPOINTS_DIR.glob("*.pt")}
    return sorted(names) + (shipped_replicates() if replicates else [])


def shipped_replicates() -> list[str]:
    """Names (``replicates/NAME``) of the shipped replicates under ``checkpoints/replicates/``, sorted."""
    folder = CHECKPOINTS_DIR / REPLICATES
    if not folder.is_dir():
        return []
    return sorted(f"{REPLICATES}/{p.name}" for p in folder.iterdir() if (p / CONFIG_FILE).is_file())


def checkpoint_path(name_or_path: str | Path) -> Path:
    """The file or directory a shipped name (``copy-200``, ``replicates/copy-20-s1-bf16``, a ``.pt`` under
    ``checkpoints/``) or a path refers to. Raises FileNotFoundError listing the shipped names."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path
    name = str(name_or_path)
    replicate = len(path.parts) == 2 and path.parts[0] == REPLICATES  # a shipped replicate: replicates/copy-20-s2
    if ("/" not in name or replicate) and "\\" not in name:
        for candidate in (CHECKPOINTS_DIR / name, CHECKPOINTS_DIR / f"{name}.pt"):
            if candidate.exists():
                return candidate
    available = available_models()
    listing = ", ".join(available) if available else f"none (no checkpoints in {CHECKPOINTS_DIR})"
    if not CHECKPOINTS_DIR.is_dir():
        listing += (
            "; the shipped checkpoints are the repository's checkpoints/: install it from a clone with pip install -e"
        )
    raise FileNotFoundError(f"no checkpoint named or at {name!r}; available names: {listing}")


def checkpoint_name(name_or_path: str | Path) -> str | None:
    """The shipped name (``copy-200``, ``replicates/copy-20-s1-bf16``) of a checkpoint given by name or by its
    directory under ``checkpoints/``; None for anything else (a run, a reference ``.pt``, a directory elsewhere)."""
    try:
        path = checkpoint_path(name_or_path).resolve()
    except FileNotFoundError:
        return None
    root = CHECKPOINTS_DIR.resolve()
    if not (path / CONFIG_FILE).is_file() or path.parent not in {root, root / REPLICATES}:
        return None
    return path.relative_to(root).as_posix()


def load_model(name_or_path: str | Path, device: torch.device | str = "cpu") -> HookedEncoderDecoder:
    """Load a model (eval mode) from a shipped name (``copy-200``, ``replicates/copy-20-s1-bf16``), one of our
    checkpoint directories, or a reference ``.pt``.

    The format is detected: a directory (or its ``config.json``/``model.safetensors``) is ours, any other
    file is read as a reference ``torch.save`` checkpoint. Raises FileNotFoundError (listing the shipped
    names) when nothing matches, CheckpointError/ValueError for corrupted or foreign files.
    """
    path = checkpoint_path(name_or_path)
    if path.is_dir():
        return load_checkpoint_dir(path, device)
    if path.name in (CONFIG_FILE, WEIGHTS_FILE):
        return load_checkpoint_dir(path.parent, device)
    return load_reference_checkpoint(path, device=device)


def _buffer_dtype(value: torch.Tensor) -> torch.dtype:
    """Buffers are stored in fp32 when floating point (a model cast to bf16 would otherwise store its position
    table in bf16 under ``weights_dtype`` fp32), else in their own dtype."""
    return torch.float32 if value.is_floating_point() else value.dtype
