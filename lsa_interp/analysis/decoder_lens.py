"""Decoder lens (the paper's appendix): exact match when the decoder reads an intermediate encoder layer.

For encoder layer k (1-based), the residual stream after layer k (``encoder.{k-1}.hook_resid_post``) goes
through the final encoder norm (``encoder.ln_final``) and replaces the encoder output ("memory") that every
decoder cross-attention layer reads; the decoder then decodes greedily as usual (the model's own cached
generation path, `lsa_interp.evaluation.predict`). The layers after k still run but their output is
discarded, so the last layer's lens *is* the model: its predictions equal the plain greedy ones.

Tasks (`lens_tasks`): by default (``source="new"``, as the authors did) the new-alphabet test set of the
model's training preset (as ``lsa-interp evaluate`` builds it from the model's metadata: all 19
transformations, alphabets never trained on, no copy rows), a deterministic random subset of ``n``;
``source="val"`` the non-copy val rows (training alphabets); ``source="rules"`` uses `seen_rule_tasks` (the
10 seen transformations in the standard alphabet) instead, without generating a dataset.

Findings, against the paper's copy-200 numbers (0.0 / 1.9 / 66.5 % for layers 1 / 2 / 3). The last
layer's lens is the model itself, so its number is the model's own accuracy on the tasks (reported, not
judged), and the earlier layers are compared with it:

- earlier layers decode (almost) nothing: the paper's best earlier layer decodes 1.9 / 66.5 = 2.9 % of what
  the model decodes; ours holds when that share is consistent with ours (the 95 % Wilson lower bound of
  the best earlier layer's accuracy is at most `PAPER_EARLY_SHARE` x the last layer's accuracy);
- the last layer's lens reproduces the model's plain greedy predictions exactly (a check of the method).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from lsa_interp.analysis.rasp import seen_rule_tasks
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.evaluation.metrics import in_paper_order
from lsa_interp.evaluation.run import DEFAULT_BATCH_SIZE, evaluation_dataset, predict, subsample
from lsa_interp.model import HookedEncoderDecoder

PAPER_LENS: dict[int, float] = {1: 0.0, 2: 1.9, 3: 66.5}
"""The paper's decoder-lens exact match (%) of copy-200, by 1-based encoder layer."""
PAPER_EARLY_SHARE = PAPER_LENS[2] / PAPER_LENS[3]
"""The paper's best earlier layer as a share of its last layer (1.9 / 66.5 = 0.029)."""
SOURCES = ("new", "val", "rules")


def lens_tasks(
    model: HookedEncoderDecoder, n: int, seed: int = 0, source: str = "new", remedy: str = "use source 'rules'"
) -> list[Task]:
    """Return ``n`` tasks with answers for the lens (see the module docstring for ``source``; ``remedy`` ends the
    message for a model whose metadata names no preset).

    ``"new"``: a deterministic subset (``seed``) of the new-alphabet test set of the model's training preset;
    ``"val"``: of its non-copy val rows. ``"rules"``: `seen_rule_tasks` (seen transformations, standard
    alphabet). Raises ValueError for an unknown source, a non-positive ``n`` or a model whose metadata names no preset.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown task source {source!r}; choose one of {', '.join(SOURCES)}")
    if n < 1:
        raise ValueError(f"the number of tasks must be positive, got {n}")
    if source == "rules":
        return seen_rule_tasks(n, seed)
    split = evaluation_dataset(model, remedy=remedy).splits["test_new_alphabets" if source == "new" else "val"]
    return subsample([task for task in split if not task.is_copy], n, seed)


def lens_predict(
    model: HookedEncoderDecoder, tasks: Sequence[Task], layer: int, batch_size: int = DEFAULT_BATCH_SIZE
) -> list[str]:
    """Return the greedy answers when the decoder reads encoder layer ``layer`` (1-based) through the final
    encoder norm. Raises ValueError when ``layer`` is not in 1..n_encoder_layers."""
    n_layers = model.cfg.n_encoder_layers
    if not 1 <= layer <= n_layers:
        raise ValueError(f"encoder layer {layer} is not in 1..{n_layers} (1-based)")
    with model.hooks(fwd_hooks=_swap_hooks(layer - 1, n_layers - 1)):
        return predict(model, tasks, batch_size)


def _swap_hooks(layer: int, last: int) -> list[tuple[str, Callable]]:
    """Hooks that save layer ``layer``'s output and hand it to ``ln_final`` in place of the last layer's."""
    saved = {}

    def save(resid, hook):
        saved["resid"] = resid

    def swap(resid, hook):
        return saved.pop("resid")

    return [(f"encoder.{layer}.hook_resid_post", save), (f"encoder.{last}.hook_resid_post", swap)]


def _percent(hits: Sequence[bool]) -> float:
    return 100.0 * sum(hits) / len(hits)


def _group(task: Task) -> str:
    return "copy" if task.is_copy else task.transformation or "unlabelled"


def decoder_lens(
    model: HookedEncoderDecoder,
    tasks: Sequence[Task],
    batch_size: int = DEFAULT_BATCH_SIZE,
    model_name: str = "",
    source: str = "",
) -> AnalysisResult:
    """Return the lens `AnalysisResult`: exact match (%) per 1-based encoder layer, overall and by
    transformation, the model's plain accuracy, bar charts and `Finding` rows vs the paper.

    ``source`` only labels the result. Raises ValueError for an empty task list or a task without answer.
    """
    if not tasks:
        raise ValueError("the decoder lens needs at least one task")
    missing = next((t for t in tasks if t.answer is None), None)
    if missing is not None:
        raise ValueError(f"task {missing} has no answer to score against")
    layers = list(range(1, model.cfg.n_encoder_layers + 1))
    predictions = {layer: lens_predict(model, tasks, layer, batch_size) for layer in layers}
    plain = predict(model, tasks, batch_size)
    hits = {layer: [p == t.answer for t, p in zip(tasks, preds)] for layer, preds in predictions.items()}
    accuracy = {layer: _percent(h) for layer, h in hits.items()}
    by_transformation = {
        name: {
            "n": sum(_group(t) == name for t in tasks),
            **{layer: _percent([h for t, h in zip(tasks, hits[layer]) if _group(t) == name]) for layer in layers},
        }
        for name in in_paper_order(_group(t) for t in tasks)
    }
    model_accuracy = _percent([p == t.answer for t, p in zip(tasks, plain)])
    reproduces = predictions[layers[-1]] == plain
    summary = {
        "tasks": len(tasks),
        **({"source": source} if source else {}),
        **{f"layer_{layer}_accuracy": accuracy[layer] for layer in layers},
        "model_accuracy": model_accuracy,
    }
    data = {
        "layers": layers,
        "accuracy": accuracy,
        "by_transformation": by_transformation,
        "model_accuracy": model_accuracy,
        "last_layer_reproduces_model": reproduces,
        "paper": PAPER_LENS,
    }
    return AnalysisResult(
        "decoder_lens",
        model_name,
        summary,
        data,
        figures=_figures(accuracy, by_transformation, model_name),
        findings=_findings(accuracy, model_accuracy, reproduces, len(tasks)),
    )


def wilson_lower(percent: float, n: int, z: float = 1.96) -> float:
    """The lower end (%) of the 95 % Wilson score interval of an accuracy of ``percent`` % over ``n`` tasks."""
    p = percent / 100.0
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, 100.0 * (centre - spread) / (1 + z * z / n))


def _findings(accuracy: dict[int, float], model_accuracy: float, reproduces: bool, n: int) -> list[Finding]:
    layers = sorted(accuracy)
    last = accuracy[layers[-1]]
    findings = []
    if len(layers) > 1:
        early = max(accuracy[layer] for layer in layers[:-1])
        allowed = PAPER_EARLY_SHARE * last
        findings.append(
            Finding(
                "decoder lens: earlier encoder layers decode (almost) nothing",
                f"layers 1/2: {PAPER_LENS[1]:.1f} / {PAPER_LENS[2]:.1f} % vs {PAPER_LENS[3]:.1f} % (layer 3)",
                " / ".join(f"{accuracy[layer]:.1f}" for layer in layers[:-1]) + f" % vs {last:.1f} %",
                wilson_lower(early, n) <= allowed,
                f"holds when the best earlier layer (95 % lower bound) is at most {PAPER_EARLY_SHARE:.3f} x the "
                f"last layer = {allowed:.1f} %",
                early / last if last else None,
            )
        )
    findings.append(
        Finding(
            "decoder lens: the last encoder layer (the model's own accuracy)",
            f"layer 3: {PAPER_LENS[3]:.1f} %",
            f"layer {layers[-1]}: {last:.1f} %",
            None,
            "not a finding about the lens: the last layer's lens is the model",
            last,
        )
    )
    findings.append(
        Finding(
            "decoder lens: the last layer reproduces the model",
            "by construction",
            f"{last:.1f} % vs {model_accuracy:.1f} % plain greedy",
            reproduces,
            "holds when every last-layer lens prediction equals the plain greedy prediction",
        )
    )
    return findings


def _figures(
    accuracy: dict[int, float], by_transformation: dict[str, dict], model_name: str
) -> dict:  # pragma: no mutate block
    import plotly.graph_objects as go

    layers = sorted(accuracy)
    names = [f"layer {layer}" for layer in layers]
    overall = go.Figure(go.Bar(name=model_name or "ours", x=names, y=[accuracy[k] for k in layers]))
    if len(layers) == len(PAPER_LENS):
        overall.add_bar(name="paper (copy-200)", x=names, y=[PAPER_LENS[k] for k in layers])
    total = sum(row["n"] for row in by_transformation.values())
    overall.update_layout(
        title=f"Decoder lens: exact match when the decoder reads encoder layer k (after the final norm), {total} tasks",
        yaxis_title="exact match (%)",
        yaxis_range=[0, 100],
        barmode="group",
    )
    groups = list(by_transformation)
    labels = [f"{g} (n={by_transformation[g]['n']})" for g in groups]
    per_rule = go.Figure(
        [
            go.Bar(
                name=f"layer {layer}",
                x=labels,
                y=[by_transformation[g][layer] for g in groups],
                customdata=[by_transformation[g]["n"] for g in groups],
                hovertemplate=f"layer {layer}, %{{x}}: %{{y:.1f}}% of %{{customdata}} tasks<extra></extra>",
            )
            for layer in layers
        ]
    )
    per_rule.update_layout(
        title="Decoder lens by transformation",
        yaxis_title="exact match (%)",
        yaxis_range=[0, 100],
        barmode="group",
    )
    return {"accuracy by encoder layer": overall, "accuracy by transformation": per_rule}
