"""One model's report over several processes. The report's steps (`report.STEPS`) are independent, so on a
multi-core CPU they run in a pool of spawned workers, one torch thread each; the model and this process's
`report.REPORT_SIZES` go once to each worker, the costliest steps are handed out first, and the control
findings are then computed in this process. The `Report` is the one `report.run_report` returns (each step
runs the same code on the same model).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any

import torch

from lsa_interp.analysis.report import REPORT_SIZES, STEPS, Report, assemble, run_step
from lsa_interp.model.hooked import HookedEncoderDecoder

COST_ORDER: tuple[str, ...] = (
    "decoder lens",
    "patching",
    "roles",
    "matching heads",
    "cross-attention",
    "elimination",
    "splice",
    "invariance",
    "rasp",
    "copy attention",
)
"""`STEPS` from the costliest to the cheapest (CPU seconds on copy-200: the decoder lens takes about 45 % of
the report, patching 25 %, roles 15 %), the order in which they are handed to the workers."""

_WORKER: dict[str, Any] = {}


def _start_worker(blob: bytes, model_name: str, seed: int, sizes: dict[str, int]) -> None:
    torch.set_num_threads(1)
    REPORT_SIZES.update(sizes)
    _WORKER.update(model=torch.load(io.BytesIO(blob), weights_only=False), name=model_name, seed=seed)


def _run(name: str) -> tuple[str, Any]:
    return name, run_step(_WORKER["model"], _WORKER["name"], _WORKER["seed"], name)


def run_report_pool(
    model: HookedEncoderDecoder,
    model_name: str,
    seed: int = 0,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Every report step on ``model`` over ``workers`` processes (default: the CPU count, at most one per
    step; 1 runs in this process), ``progress(name)`` after each step. Returns the `Report`. Raises
    ValueError for ``workers < 1``."""
    workers = workers if workers is not None else os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    outcomes = {}
    if workers == 1:
        for name in STEPS:
            outcomes[name] = run_step(model, model_name, seed, name)
            if progress:
                progress(name)
        return assemble(model, model_name, seed, outcomes)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    context = get_context("spawn")
    with ProcessPoolExecutor(
        min(workers, len(STEPS)), context, _start_worker, (buffer.getvalue(), model_name, seed, dict(REPORT_SIZES))
    ) as pool:
        futures = [pool.submit(_run, name) for name in COST_ORDER]
        for future in as_completed(futures):
            name, outcome = future.result()
            outcomes[name] = outcome
            if progress:
                progress(name)
    return assemble(model, model_name, seed, outcomes)
