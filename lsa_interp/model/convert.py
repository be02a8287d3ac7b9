"""Convert the reference checkpoint format (a plain ``nn.Transformer`` module's state dict) to the hooked model.

Key mapping (reference -> hooked): ``input_embedding`` -> ``encoder.embed``, ``output_embedding`` ->
``decoder.embed``, ``positional_encoding.pos_embedding`` -> ``pos_embedding`` (singleton dims squeezed to
``[max_len, d_model]``), ``transformer.{stack}.layers.{l}.self_attn`` -> ``{stack}.{l}.attn``,
``multihead_attn`` -> ``cross_attn``, ``linear1``/``linear2`` -> ``mlp.fc_in``/``mlp.fc_out``,
``norm{i}`` -> ``ln{i}``, ``transformer.{stack}.norm`` -> ``{stack}.ln_final``, ``out`` -> ``unembed``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lsa_interp.model.config import ModelConfig
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.model.reference import ReferenceTransformer
from lsa_interp.utils import NUMBER, is_json_kind

_FIRST_LINEAR = "transformer.encoder.layers.0.linear1.weight"
_ZIP_MAGIC, _PICKLE_PROTOCOL = b"PK\x03\x04", b"\x80"
"""How a file torch.save writes begins: a zip archive (torch >= 1.6), or the legacy format's pickle protocol."""
_LAYER_RE = re.compile(r"^transformer\.(encoder|decoder)\.layers\.(\d+)\.")
_SUBMODULES = {
    "self_attn": "attn",
    "multihead_attn": "cross_attn",
    "linear1": "mlp.fc_in",
    "linear2": "mlp.fc_out",
    "norm1": "ln1",
    "norm2": "ln2",
    "norm3": "ln3",
}
_FIXED = {
    "input_embedding.weight": "encoder.embed.weight",
    "output_embedding.weight": "decoder.embed.weight",
    "positional_encoding.pos_embedding": "pos_embedding",
    "transformer.encoder.norm.weight": "encoder.ln_final.weight",
    "transformer.encoder.norm.bias": "encoder.ln_final.bias",
    "transformer.decoder.norm.weight": "decoder.ln_final.weight",
    "transformer.decoder.norm.bias": "decoder.ln_final.bias",
    "out.weight": "unembed.weight",
    "out.bias": "unembed.bias",
}


def _rename(key: str) -> str | None:
    """Return the hooked-model name of reference key ``key`` (None when the key is not a reference name)."""
    if key in _FIXED:
        return _FIXED[key]
    match = _LAYER_RE.match(key)
    if match is None:
        return None
    stack, layer = match.groups()
    module, _, param = key[match.end() :].partition(".")
    if module not in _SUBMODULES or (stack == "encoder" and module in ("multihead_attn", "norm3")):
        return None
    return f"{stack}.{layer}.{_SUBMODULES[module]}.{param}"


def infer_reference_config(state_dict: Mapping[str, Tensor], n_heads: int = 8, dropout: float = 0.1) -> ModelConfig:
    """Infer the model config from reference weight shapes (heads and dropout are not in the weights).

    Raises ValueError when a required key is missing or the position table is not 2-D after squeezing.
    """
    for key in ("input_embedding.weight", "positional_encoding.pos_embedding", _FIRST_LINEAR):
        if key not in state_dict:
            raise ValueError(f"not a reference state dict: missing {key!r} (got {sorted(state_dict)[:8]}...)")
    vocab_size, d_model = state_dict["input_embedding.weight"].shape
    table = _squeeze_table(state_dict["positional_encoding.pos_embedding"], d_model)
    n_layers = {"encoder": 0, "decoder": 0}
    for key in state_dict:
        match = _LAYER_RE.match(key)
        if match:
            n_layers[match.group(1)] = max(n_layers[match.group(1)], int(match.group(2)) + 1)
    return ModelConfig(
        d_model=d_model,
        n_heads=n_heads,
        n_encoder_layers=n_layers["encoder"],
        n_decoder_layers=n_layers["decoder"],
        d_mlp=state_dict[_FIRST_LINEAR].shape[0],
        dropout=dropout,
        vocab_size=vocab_size,
        max_len=table.shape[0],
    )


def _squeeze_table(table: Tensor, d_model: int) -> Tensor:
    squeezed = table.reshape([n for n in table.shape if n != 1]) if table.dim() > 2 else table
    if squeezed.dim() != 2 or squeezed.shape[1] != d_model:
        raise ValueError(
            f"positional_encoding.pos_embedding has shape {tuple(table.shape)}; expected [max_len, {d_model}], "
            f"[max_len, 1, {d_model}] or [1, max_len, {d_model}]"
        )
    return squeezed


def convert_reference_state_dict(state_dict: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Return the hooked model's state dict for reference weights ``state_dict`` and config ``cfg``.

    Strict: raises ValueError listing unknown keys, missing keys and shape mismatches.
    """
    expected = HookedEncoderDecoder(cfg).state_dict()
    converted: dict[str, Tensor] = {}
    unknown = []
    for key, value in state_dict.items():
        new_key = _rename(key)
        if new_key is None or new_key not in expected:
            unknown.append(key)
            continue
        converted[new_key] = _squeeze_table(value, cfg.d_model) if new_key == "pos_embedding" else value
    missing = sorted(set(expected) - set(converted))
    bad_shapes = [
        f"{key}: {tuple(value.shape)} != {tuple(expected[key].shape)}"
        for key, value in converted.items()
        if value.shape != expected[key].shape
    ]
    problems = []
    if unknown:
        problems.append(f"unknown keys {sorted(unknown)}")
    if missing:
        problems.append(f"missing keys (hooked names) {missing}")
    if bad_shapes:
        problems.append(f"shape mismatches {bad_shapes}")
    if problems:
        raise ValueError("reference state dict does not match the model: " + "; ".join(problems))
    return {key: value.detach().clone().to(expected[key].dtype) for key, value in converted.items()}


def hooked_from_reference(model: ReferenceTransformer, metadata: dict[str, Any] | None = None) -> HookedEncoderDecoder:
    """Return a hooked model holding ``model``'s weights, on its device and in its train/eval mode.

    Leaves the global torch random state as it was (building a model draws initial weights), so calling it
    inside a training run does not shift the run's dropout stream.
    """
    with torch.random.fork_rng(devices=[]):
        hooked = HookedEncoderDecoder(model.cfg, metadata=metadata)
        hooked.load_state_dict(convert_reference_state_dict(model.state_dict(), model.cfg), strict=True)
    return hooked.to(model.out.weight.device).train(model.training)


_SETTINGS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "nhead": ("a positive integer", lambda v: is_json_kind(v, int) and v >= 1),
    "dropout": ("a number in [0, 1)", lambda v: is_json_kind(v, NUMBER) and 0 <= v < 1),
}
"""The settings read from a checkpoint's configs: what each must be, in words and as a test."""


def _config_value(metadata: dict[str, Any], key: str, default: float | int, path: Path) -> Any:
    """``key`` from the checkpoint's ``mlc_config`` or ``train_config`` dicts, else ``default``; raises ValueError
    naming the key and ``path`` when the value is not what `_SETTINGS` allows."""
    for section in ("mlc_config", "train_config"):
        values = metadata.get(section)
        if isinstance(values, dict) and key in values:
            value = values[key]
            wanted, allowed = _SETTINGS[key]
            if not allowed(value):
                raise ValueError(f"{path}: {section}[{key!r}] must be {wanted}, got {value!r}")
            return value
    return default


def load_reference_checkpoint(
    path: str | Path, n_heads: int | None = None, device: torch.device | str = "cpu", weights_only: bool = True
) -> HookedEncoderDecoder:
    """Load a reference ``torch.save`` checkpoint (a dict with ``net_state_dict``) into a hooked model (eval mode).

    ``n_heads`` defaults to ``nhead`` in the checkpoint's ``mlc_config``/``train_config`` if present, else 8
    (the dropout likewise: ``dropout``, else 0.1); neither is in the weights. The other entries
    (``mlc_config``, ``train_config``, ``loss_hist``, ``val_acc_hist``) become ``model.metadata``.
    ``weights_only=False`` unpickles arbitrary objects: only for trusted files. Raises ValueError when the
    file is not such a checkpoint (not even a torch.save file: said first, plainly), its ``nhead`` is no positive
    integer (or does not divide the model width) or its ``dropout`` no number in [0, 1), or its weights do not
    match; FileNotFoundError when it does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"reference checkpoint {path} does not exist")
    with path.open("rb") as file:
        head = file.read(4)
    if not head.startswith((_ZIP_MAGIC, _PICKLE_PROTOCOL)):
        raise ValueError(
            f"{path} is not a checkpoint (not a torch.save file); a model is a shipped checkpoint name, a "
            "checkpoint directory (config.json, model.safetensors), a training run directory or a reference .pt"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as err:  # torch.load raises many types on foreign bytes
        if "Weights only load failed" in str(err):
            raise ValueError(
                f"{path} holds Python objects other than tensors and plain containers; if it is a trusted "
                "checkpoint, load it with load_reference_checkpoint(path, weights_only=False)"
            ) from err
        raise ValueError(f"{path} is not a PyTorch checkpoint ({type(err).__name__}: {err})") from err
    if not isinstance(payload, dict) or "net_state_dict" not in payload:
        got = sorted(payload)[:10] if isinstance(payload, dict) else type(payload).__name__  # pragma: no mutate
        raise ValueError(f"{path} is not a reference checkpoint: expected a dict with 'net_state_dict', got {got}")
    metadata: dict[str, Any] = {key: value for key, value in payload.items() if key != "net_state_dict"}
    heads = n_heads if n_heads is not None else _config_value(metadata, "nhead", 8, path)
    dropout = float(_config_value(metadata, "dropout", 0.1, path))
    state_dict = payload["net_state_dict"]
    try:
        cfg = infer_reference_config(state_dict, n_heads=heads, dropout=dropout)
    except ValueError as err:  # e.g. an nhead that does not divide the weights' width: name the file
        raise ValueError(f"{path}: {err}") from err
    model = HookedEncoderDecoder(cfg, metadata={"source": "reference checkpoint", "path": str(path), **metadata})
    model.load_state_dict(convert_reference_state_dict(state_dict, cfg), strict=True)
    return model.to(device).eval()
