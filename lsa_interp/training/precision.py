"""How a run's precision (``fp32``, ``tf32`` or ``bf16``) is applied to its matmuls and its forward pass."""

from __future__ import annotations

import torch


def set_matmul_precision(precision: str) -> None:
    """Let fp32 matmuls use TF32 for ``tf32`` runs and keep them in full fp32 for every other precision.

    The setting is process-wide, so each trainer applies it at every step and validation: a run after (or
    alternating with) a ``tf32`` run in the same process, as in a sweep or a benchmark, keeps its own precision.
    """
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")


def precision_autocast(precision: str, device_type: str, graphed: bool) -> torch.autocast:
    """The autocast context of a forward pass: bf16 for ``bf16`` runs, else a disabled context.

    Under a CUDA graph (``graphed``) autocast's cast cache stays off: its tensors would be freed under the graph.
    """
    enabled = precision == "bf16"
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=enabled, cache_enabled=not graphed)
