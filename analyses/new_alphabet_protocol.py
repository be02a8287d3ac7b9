"""A model's new-alphabet accuracy scored the way the paper scored it (docs/results.md).

The paper's new-alphabet numbers come from the test split of a 21-alphabet set (the 20 fresh alphabets and the
standard one), about 11,500 rows; our `test_new_alphabets` split is every row of the 20 fresh alphabets
(`lsa_interp.data.paper_protocol`). This builds ``--draws`` such test splits over the model's own new
alphabets, decodes their union once, and scores each draw with and without its standard-alphabet rows. It
writes ``analyses/results/new_alphabet_protocol.json`` (per model and draw; per draw, the mean over the models
given) and ``new_alphabet_protocol.html`` (one point per model and draw beside the paper's interval).

    python analyses/new_alphabet_protocol.py --model copy-20 --model replicates/copy-20-s0-bf16 --draws 6
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from lsa_interp.data import STANDARD_ALPHABET, Task
from lsa_interp.data.paper_protocol import paper_new_alphabet_draws
from lsa_interp.evaluation.paper_tables import PAPER_BATCHING
from lsa_interp.evaluation.run import evaluation_dataset, predict
from lsa_interp.model import load_model
from lsa_interp.utils import atomic_write

OUT = Path(__file__).parent / "results" / "new_alphabet_protocol.json"
CELLS = ("seen_transformations", "new_transformations")


def percent(hits: np.ndarray) -> float:
    """The share of true entries of ``hits`` in percent, to two decimals."""
    return round(100 * float(hits.mean()), 2)


def score_draw(tasks: Sequence[Task], correct: np.ndarray, index: np.ndarray, seen: set[str]) -> dict:
    """One draw's cells: for seen and new transformations, the accuracy with the standard alphabet (as the paper
    counted it) and without it, and the number of rows of each."""
    seen_rule = np.array([tasks[i].transformation in seen for i in index])
    standard = np.array([tasks[i].alphabet == STANDARD_ALPHABET for i in index])
    hits = correct[index]
    out = {}
    for cell, rule in zip(CELLS, (seen_rule, ~seen_rule), strict=True):
        out[cell] = {
            "with_standard": percent(hits[rule]),
            "without_standard": percent(hits[rule & ~standard]),
            "standard_only": percent(hits[rule & standard]),
            "rows": int(rule.sum()),
            "standard_rows": int((rule & standard).sum()),
        }
    return out


def protocol_scores(names: Sequence[str], draws: int) -> dict[str, dict]:
    """Each model of ``names`` scored on ``draws`` test splits of the paper's new-alphabet set over the new
    alphabets of their dataset (the same splits for every model). Raises ValueError when the models were
    trained on different datasets."""
    models = {name: load_model(name) for name in names}
    sources = {(m.metadata.get("preset"), m.metadata.get("data_seed")) for m in models.values()}
    if len(sources) > 1:
        raise ValueError(f"the models were trained on different datasets: {sorted(map(str, sources))}")
    dataset = evaluation_dataset(next(iter(models.values())), splits=("test_new_alphabets",))
    protocol = paper_new_alphabet_draws(dataset.config, dataset.new_alphabets, draws)
    seen = set(dataset.config.train_transformations)
    out = {}
    for name, model in models.items():
        answers = predict(model, protocol.tasks, 512)
        correct = np.array([a == t.answer for t, a in zip(protocol.tasks, answers, strict=True)])
        out[name] = {
            "preset": dataset.config.name,
            "batching": model.metadata.get("batching"),
            "decoded_rows": len(protocol.tasks),
            "draws": [score_draw(protocol.tasks, correct, index, seen) for index in protocol.draws],
        }
    return out


def summary(models: dict[str, dict]) -> dict:
    """Per cell: each draw's mean over the models (with the standard alphabet), and the mean and sample
    standard deviation of those draw means."""
    out = {}
    for cell in CELLS:
        per_draw = np.mean([[d[cell]["with_standard"] for d in m["draws"]] for m in models.values()], axis=0)
        out[cell] = {
            "draw_means": [round(float(x), 2) for x in per_draw],
            "mean": round(float(per_draw.mean()), 2),
            "sd_over_draws": round(float(per_draw.std(ddof=1)), 2) if len(per_draw) > 1 else None,
        }
    return out


def figure(models: dict[str, dict], draw_means: list[float]) -> go.Figure:
    """Seen-transformation new-alphabet accuracy per model and draw (with and without the standard alphabet) and
    the models' mean per draw (with it), beside the paper's mean and interval for the models' preset and
    batching where the paper has them."""
    fig = go.Figure()
    for key, label, symbol in (
        ("with_standard", "with the standard alphabet", "circle"),
        ("without_standard", "without it", "circle-open"),
    ):
        xs, ys = [], []
        for name, found in models.items():
            xs += [name] * len(found["draws"])
            ys += [d["seen_transformations"][key] for d in found["draws"]]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=f"a test split, {label}", marker_symbol=symbol))
    fig.add_trace(
        go.Scatter(
            x=["mean over these models"] * len(draw_means),
            y=draw_means,
            mode="markers",
            name="a test split, the models' mean",
        )
    )
    conditions = {(found["preset"], found["batching"]) for found in models.values()} & set(PAPER_BATCHING)
    for preset, batching in sorted(conditions):
        mean, low, high = PAPER_BATCHING[preset, batching][1]
        label = f"paper, {preset} {batching} batching: {mean} [{low}, {high}]"
        fig.add_hrect(y0=low, y1=high, fillcolor="gray", opacity=0.25, line_width=0, layer="below")
        fig.add_annotation(x=1, xref="paper", y=high, text=label, showarrow=False, xanchor="right", yanchor="bottom")
        fig.add_hline(y=mean, line_dash="dash")
    fig.update_layout(
        title="Seen transformations, new alphabets, scored on the paper's test split (each point one draw)",
        yaxis_title="exact match %",
        xaxis_title="model",
    )
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="a shipped model's name (repeatable)")
    parser.add_argument("--draws", type=int, default=6, help="test splits drawn (default 6)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error(f"--draws must be at least 1, got {args.draws}")
    try:
        models = protocol_scores(args.model, args.draws)
    except (ValueError, FileNotFoundError) as error:
        print(f"new_alphabet_protocol: error: {error}", file=sys.stderr)
        return 2
    result = {"draws": args.draws, "models": models, "summary": summary(models)}
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8"))
    html = args.out.with_suffix(".html")
    atomic_write(
        html,
        lambda tmp: figure(models, result["summary"]["seen_transformations"]["draw_means"]).write_html(
            tmp, include_plotlyjs=True
        ),
    )
    for name, found in models.items():
        cells = [d["seen_transformations"] for d in found["draws"]]
        shown = ", ".join(f"{c['with_standard']:.1f} ({c['without_standard']:.1f})" for c in cells)
        print(f"{name}: seen transformations, with the standard alphabet (without): {shown}")
    for cell, found in result["summary"].items():
        print(f"{cell}: mean over models per draw {found['draw_means']}; sd over draws {found['sd_over_draws']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
