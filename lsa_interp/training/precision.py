"""How a run's precision (``fp32``, ``tf32`` or ``bf16``) is applied to its matmuls and its forward pass."""

from __future__ import annotations

import torch


def set_matmul_precision(precision: str) -> None:
    """Let fp32 matmuls use TF32 for ``tf32`` runs (a process-wide torch setting); other precisions keep it."""
    if precision == "tf32":
        torch.set_float32_matmul_precision("high")


def precision_autocast(precision: str, device_type: str, graphed: bool) -> torch.autocast:
    """The autocast context of a forward pass: bf16 for ``bf16`` runs, else a disabled context.

    Under a CUDA graph (``graphed``) autocast's cast cache stays off: its tensors would be freed under the graph.
    """
    enabled = precision == "bf16"
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=enabled, cache_enabled=not graphed)
