"""Server time per explorer interaction on a shipped model: new task, lens layer, head ablation, patch.

Each interaction is what the server does for one URL change: `ViewRenderer.render` (parse the state, the
clean run unless cached, the intervened run, the figures) plus serialising every figure to JSON (what Dash
sends). 50 interactions of each kind, each on its own task (minimal pairs of 3..7-letter windows), so no
result is served from a cache that a real click would miss; the slow one-off work (loading the model,
detecting the matching heads) is done before timing. Prints median and p95 per kind, of wall time and of the
process's user CPU time (on a shared machine the wall time also counts waiting for a core: the load average
is printed beside the numbers); the target is a wall p95 under 150 ms on 2 CPU cores.

    python benchmarks/explorer_latency.py [--model copy-200] [--n 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from dataclasses import replace

import plotly.io as pio
import torch

from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.explorer.catalogue import ModelCatalogue, discover_models
from lsa_interp.explorer.render import ViewRenderer
from lsa_interp.explorer.state import ViewState

TARGET_MS = 150.0


def _user_cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def timed(renderer: ViewRenderer, state: ViewState) -> tuple[float, float]:
    """Milliseconds (wall, user CPU) to render ``state`` and serialise its figures; raises RuntimeError if the
    view fails."""
    start, cpu = time.perf_counter(), _user_cpu()
    view = renderer.render(state)
    for figure in view.figures.values():
        pio.to_json(figure, validate=False)  # what Dash does with a figure dict
    elapsed = 1000 * (time.perf_counter() - start), 1000 * (_user_cpu() - cpu)
    if view.error:
        raise RuntimeError(f"{state.to_query()}: {view.error}")
    return elapsed


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="copy-200")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    catalogue = ModelCatalogue(discover_models([args.model], shipped=False))
    renderer = ViewRenderer(catalogue)
    n_layers = catalogue.model(args.model).cfg.n_encoder_layers
    pairs = minimal_pairs("succ", "pred", 2 * args.n)
    base = ViewState(model=args.model)
    renderer.render(replace(base, patch="auto"))  # loads the model and detects its matching heads (memoised)
    times: dict[str, list[tuple[float, float]]] = {
        "new task": [],
        "lens layer": [],
        "ablate head": [],
        "patch heads": [],
    }
    load_before = _load()
    for i, pair in enumerate(pairs[: args.n]):
        state = replace(base, task=str(pair.target.with_answer(None)), source=str(pair.source.with_answer(None)))
        times["new task"].append(timed(renderer, state))
        times["lens layer"].append(timed(renderer, replace(state, layer=str(1 + i % (n_layers - 1)))))
        times["ablate head"].append(timed(renderer, replace(state, ablate=f"{1 + i % n_layers}.{1 + i % 8}")))
        times["patch heads"].append(timed(renderer, replace(state, patch="auto")))
    print(f"explorer server time per interaction, {args.model}, {args.n} each, {args.threads} torch thread(s)")
    print(f"load average (1, 5, 15 min) before: {load_before}; after: {_load()}; {os.cpu_count()} CPU(s)")
    header = f"{'interaction':<14}{'median ms':>11}{'p95 ms':>9}{'cpu median':>12}{'cpu p95':>9}"
    print(f"{header}  target p95 < {TARGET_MS:.0f} ms")
    for kind, pairs in times.items():
        wall, cpu = [w for w, _ in pairs], [c for _, c in pairs]
        p95 = statistics.quantiles(wall, n=20)[-1]
        verdict = "ok" if p95 < TARGET_MS else "over"
        cpu_p95 = statistics.quantiles(cpu, n=20)[-1]
        row = f"{kind:<14}{statistics.median(wall):>11.1f}{p95:>9.1f}{statistics.median(cpu):>12.1f}{cpu_p95:>9.1f}"
        print(f"{row}  {verdict}")


if __name__ == "__main__":
    main()
