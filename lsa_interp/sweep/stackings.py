"""The benchmark's stacking modes as a GPU session plans with them: what each adds to a recipe, the GPU checks it
needs on a new machine, and its step times as ``benchmarks/train_throughput.py --json`` measured them."""

from __future__ import annotations

from typing import Any

STACKING_RECIPE: dict[str, dict[str, bool | str]] = {
    "native": {},
    "native-compile": {"compile": True},
    "native-eager": {"cuda_graph": False},
    "native-triton": {"attention": "triton"},
    "native-compile-triton": {"compile": True, "attention": "triton"},
    "native-compile-packed": {"compile": True, "packing": True},
    "native-compile-triton-packed": {"compile": True, "attention": "triton", "packing": True},
}
"""The benchmark's stacking modes that train a grid, and what each adds to the queue's recipe."""
AUTO_STACKINGS = (
    "native", "native-compile", "native-triton", "native-compile-triton", "native-compile-packed",
    "native-compile-triton-packed",
)  # fmt: skip
"""What ``stacking="auto"`` chooses from (those the benchmark measured): the one that trains the most runs."""


def gpu_checks(stacking: str) -> int:
    """How many GPU checks `gpu_train.sh` runs on a new machine beside the start-up of a stack of ``stacking``:
    fresh dropout masks at every replay for a compiled or triton stack, and for a packed one also its losses
    against the padded stack's (none for the plain stack)."""
    recipe = STACKING_RECIPE[stacking]
    replayed = bool(recipe.get("compile")) or recipe.get("attention") == "triton"
    return int(replayed) + int(bool(recipe.get("packing")))


def check_kind(stacking: str) -> str:
    """The name `gpu_train.sh` gives the GPU checks of a stack of ``stacking`` (its ``preflight-KIND.txt``):
    ``compiled``, ``triton``, ``triton-compiled``, each with ``-packed`` for a packed stack; empty for a stack that
    needs none."""
    recipe = STACKING_RECIPE[stacking]
    kind = "compiled" if recipe.get("compile") else ""
    if recipe.get("attention") == "triton":
        kind = "triton-compiled" if kind else "triton"
    return f"{kind}-packed" if recipe.get("packing") else kind


def step_times(bench: dict[str, Any], stacking: str, precision: str) -> dict[int, float]:
    """Stack size -> milliseconds per step of ``stacking`` at ``precision`` in a ``train_throughput.py --json``
    document (``{"runs": [{"device": ..., "results": [...]}, ...]}``: its CUDA run where it has one).

    Raises ValueError for another document, or when it measured no such configuration.
    """
    table = {
        int(result["replicates"]): float(result["step_ms"])
        for result in merge_benchmarks([bench])["runs"][0]["results"]
        if result.get("stacking") == stacking and result.get("precision") == precision
    }
    if not table:
        raise ValueError(f"the benchmark measured no {stacking} stack at {precision}; run it with those options")
    return table


def merge_benchmarks(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """One benchmark document with the results of every document's CUDA run (else its first run), in order.

    Raises ValueError for a document that is not a ``train_throughput.py --json`` document.
    """
    results = []
    for document in documents:
        runs = document.get("runs")
        if not isinstance(runs, list) or not runs:
            raise ValueError("not a benchmarks/train_throughput.py --json document: it has no 'runs'")
        results += next((run for run in runs if run.get("device") == "cuda"), runs[0]).get("results", [])
    return {"runs": [{"device": "cuda", "results": results}]}


def step_ms_at(table: dict[int, float], replicates: int) -> float:
    """The step time of a stack of ``replicates``: measured, interpolated between the nearest measured sizes, or
    extrapolated linearly from the two largest (from the one size, in proportion); below the smallest measured size,
    the smallest's time (a smaller stack is not assumed faster than what was measured)."""
    if replicates in table:
        return table[replicates]
    sizes = sorted(table)
    if replicates < sizes[0]:
        return table[sizes[0]]
    if len(sizes) == 1:
        return table[sizes[0]] * replicates / sizes[0]
    below, above = [size for size in sizes if size < replicates], [size for size in sizes if size > replicates]
    low, high = (below[-1], above[0]) if above else (sizes[-2], sizes[-1])
    slope = (table[high] - table[low]) / (high - low)
    return max(table[low] + slope * (replicates - low), min(table.values()))
