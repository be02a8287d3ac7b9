"""Elimination (paper appendix): in the last encoder layer, tokens irrelevant to the mapping (most alphabet
letters, the separators) put 0.4-0.6 of their attention on EOS, and the layer's outputs at those tokens
collapse to nearly one direction (pairwise cosine ~0.98) while their norms do not shrink.

A token is *EOS-attending* when the head-mean attention of the last encoder layer from it to EOS is at
least `EOS_ATTENTION_THRESHOLD`. A token is *irrelevant* when it is a separator (``|``, ``>``) or an
alphabet letter that occurs nowhere in the examples, the query or the answer. Cosines are taken between
the tokens of one task (EOS itself left out) and averaged over tasks, on the layer's output
(``hook_resid_post``) and, for comparison, its input (``hook_resid_pre``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jaxtyping import Bool, Float
from torch import Tensor

from lsa_interp.analysis.activations import (
    RUNNING_EXAMPLE,
    analysis_tasks,
    map_cached,
    off_diagonal,
    pairwise_cosine,
    token_labels,
)
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.data.transformations import SEEN
from lsa_interp.data.vocab import ROLE_ID, ROLES
from lsa_interp.model.cache import ActivationCache
from lsa_interp.model.hooked import HookedEncoderDecoder

EOS_ATTENTION_THRESHOLD = 0.3
"""Head-mean attention on EOS from which a token counts as EOS-attending (below the paper's 0.4-0.6)."""
PAPER_EOS_RANGE = (0.4, 0.6)
EOS_RANGE_TOLERANCE = 0.1
"""'Irrelevant tokens attend to EOS' holds when their mean EOS attention is within the paper's range +- this."""
PAPER_COSINE = 0.98
COSINE_TOLERANCE = 0.03
"""'Collapse' holds when the mean within-task cosine of EOS-attending outputs is >= PAPER_COSINE - this."""
NORM_RATIO_MIN = 0.8
"""'Norms do not shrink' holds when EOS-attending outputs keep >= this fraction of the other tokens' norm."""
GROUPS = ("eos_attending", "other", "between")


def group_cosines(x: Float[Tensor, "tokens d"], attending: Bool[Tensor, " tokens"]) -> dict[str, float]:
    """Mean pairwise cosine among the ``attending`` rows, among the others, and between the two groups
    (NaN for a group with fewer than two rows, or an empty side)."""
    cos = pairwise_cosine(x)
    others = ~attending
    nan = float("nan")
    return {
        "eos_attending": float(off_diagonal(cos[attending][:, attending]).mean()) if attending.sum() > 1 else nan,
        "other": float(off_diagonal(cos[others][:, others]).mean()) if others.sum() > 1 else nan,
        "between": float(cos[attending][:, others].mean()) if attending.any() and others.any() else nan,
    }


def _irrelevant(task: Task, roles: list[int]) -> list[bool]:
    """Separators and alphabet letters absent from the examples, query and answer (per encoder position)."""
    used = set(task.query + (task.answer or "") + "".join(a + b for a, b in task.examples))
    separators = (ROLE_ID["separator"], ROLE_ID["arrow"])
    return [r in separators or (r == ROLE_ID["alphabet"] and task.alphabet[i] not in used) for i, r in enumerate(roles)]


def token_statistics(model: HookedEncoderDecoder, tasks: Sequence[Task], layer: int = -1) -> dict[str, np.ndarray]:
    """Per token of every task (PAD and EOS left out): ``eos_attention`` (head mean, encoder ``layer``,
    0-based, default the last), ``role`` id, ``irrelevant`` flag, output and input ``norm_out``/``norm_in``;
    per task: the `group_cosines` of the layer's output (``cos_out_*``) and input (``cos_in_*``).
    Raises ValueError for a layer outside the encoder."""
    n_layers = model.cfg.n_encoder_layers
    if not -n_layers <= layer < n_layers:
        raise ValueError(f"encoder layer {layer} is outside the model's {n_layers} layers")
    layer %= n_layers
    hooks = [f"encoder.{layer}.{name}" for name in ("attn.hook_pattern", "hook_resid_pre", "hook_resid_post")]

    def reduce(chunk: list[Task], cache: ActivationCache) -> dict[str, list]:
        pattern, x_in, x_out = (cache[hook] for hook in hooks)
        out: dict[str, list] = {key: [] for key in ("eos_attention", "role", "irrelevant", "norm_out", "norm_in")}
        for group in GROUPS:
            out[f"cos_out_{group}"], out[f"cos_in_{group}"] = [], []
        for row, task in enumerate(chunk):
            roles = cache.inputs.roles[row]
            eos = int((roles == ROLE_ID["eos"]).int().argmax())
            eos_att = pattern[row, :, :eos, eos].mean(0)
            attending = eos_att >= EOS_ATTENTION_THRESHOLD
            out["eos_attention"].append(eos_att.numpy())
            out["role"].append(roles[:eos].numpy())
            out["irrelevant"].append(np.array(_irrelevant(task, roles[:eos].tolist())))
            out["norm_out"].append(x_out[row, :eos].norm(dim=-1).numpy())
            out["norm_in"].append(x_in[row, :eos].norm(dim=-1).numpy())
            for stage, x in (("out", x_out), ("in", x_in)):
                for group, value in group_cosines(x[row, :eos], attending).items():
                    out[f"cos_{stage}_{group}"].append(value)
        return out

    parts = map_cached(model, tasks, hooks, reduce)
    merged = {}
    for key, first in parts[0].items():
        values = [v for part in parts for v in part[key]]
        merged[key] = np.concatenate(values) if isinstance(first[0], np.ndarray) else np.array(values)
    return merged


def elimination(
    model: HookedEncoderDecoder,
    tasks: Sequence[Task] | None = None,
    *,
    n_tasks: int = 200,
    seed: int = 0,
    transformations: Sequence[str] = SEEN,
    alphabets: str = "both",
    layer: int = -1,
    model_name: str = "model",
) -> AnalysisResult:
    """EOS attention per token in encoder ``layer`` (default the last) and the collapse of the layer's
    outputs at EOS-attending tokens, over ``tasks`` (default: ``n_tasks`` `analysis_tasks` over
    ``transformations``). Returns an `AnalysisResult`; raises ValueError for bad task arguments or layer."""
    tasks = list(tasks) if tasks is not None else analysis_tasks(transformations, n_tasks, seed, alphabets)
    stats = token_statistics(model, tasks, layer)
    att, irrelevant = stats["eos_attention"], stats["irrelevant"]
    attending = att >= EOS_ATTENTION_THRESHOLD
    by_role = {
        ROLES[r]: {
            "tokens": int((stats["role"] == r).sum()),
            "mean_eos_attention": _mean(att, stats["role"] == r),
            "eos_attending_share": _mean(attending, stats["role"] == r),
        }
        for r in np.unique(stats["role"])
    }
    summary = {
        "tasks": len(tasks),
        "tokens": int(att.size),
        "threshold": EOS_ATTENTION_THRESHOLD,
        "eos_attending_share": float(attending.mean()),
        "irrelevant_mean_eos_attention": _mean(att, irrelevant),
        "relevant_mean_eos_attention": _mean(att, ~irrelevant),
        "irrelevant_eos_attending_share": _mean(attending, irrelevant),
        "relevant_eos_attending_share": _mean(attending, ~irrelevant),
        "norm_eos_attending": _mean(stats["norm_out"], attending),
        "norm_other": _mean(stats["norm_out"], ~attending),
    }
    for stage in ("out", "in"):
        for group in GROUPS:
            per_task = stats[f"cos_{stage}_{group}"]
            summary[f"cosine_{stage}_{group}"] = _mean(per_task, np.isfinite(per_task))
    summary["norm_ratio"] = summary["norm_eos_attending"] / summary["norm_other"]
    data = {
        "layer": layer % model.cfg.n_encoder_layers + 1,
        "by_role": by_role,
        "transformations": sorted({t.transformation or "?" for t in tasks}),
        "constants": {
            "threshold": EOS_ATTENTION_THRESHOLD,
            "paper_eos_range": PAPER_EOS_RANGE,
            "eos_range_tolerance": EOS_RANGE_TOLERANCE,
            "paper_cosine": PAPER_COSINE,
            "cosine_tolerance": COSINE_TOLERANCE,
            "norm_ratio_min": NORM_RATIO_MIN,
        },
    }
    example = token_statistics(model, [RUNNING_EXAMPLE], layer)
    figures = {
        "EOS attention per token (running example)": _token_figure(example["eos_attention"]),
        "EOS attention by role": _role_figure(att, stats["role"], seed),
        "within-task cosine by group": _cosine_figure(summary),
    }
    return AnalysisResult("elimination", model_name, summary, data, figures, _findings(summary))


def _mean(values: np.ndarray, mask: np.ndarray) -> float:
    """Mean of ``values[mask]`` as a float; NaN when the mask selects nothing."""
    return float(values[mask].mean()) if mask.any() else float("nan")


def _findings(s: dict) -> list[Finding]:
    lo, hi = PAPER_EOS_RANGE
    some = s["eos_attending_share"] > 0
    return [
        Finding(
            "irrelevant tokens attend to EOS in the last encoder layer",
            f"most alphabet letters and separators put {lo}-{hi} of their attention on EOS",
            f"irrelevant tokens: mean {s['irrelevant_mean_eos_attention']:.2f} "
            f"({s['irrelevant_eos_attending_share']:.0%} >= {EOS_ATTENTION_THRESHOLD}); "
            f"relevant tokens: mean {s['relevant_mean_eos_attention']:.2f}",
            lo - EOS_RANGE_TOLERANCE <= s["irrelevant_mean_eos_attention"] <= hi + EOS_RANGE_TOLERANCE,
            f"holds when their mean is in {lo - EOS_RANGE_TOLERANCE:.1f}..{hi + EOS_RANGE_TOLERANCE:.1f}",
        ),
        Finding(
            "EOS-attending tokens collapse to one direction",
            f"pairwise cosine of their outputs ~{PAPER_COSINE}",
            f"cosine {s['cosine_in_eos_attending']:.3f} (layer input) -> {s['cosine_out_eos_attending']:.3f} (output); "
            f"other tokens {s['cosine_out_other']:.3f}"
            if some
            else f"no token reaches {EOS_ATTENTION_THRESHOLD}",
            s["cosine_out_eos_attending"] >= PAPER_COSINE - COSINE_TOLERANCE if some else None,
            f"holds when the mean within-task cosine is >= {PAPER_COSINE - COSINE_TOLERANCE:.2f}",
        ),
        Finding(
            "their norms do not shrink",
            "the collapsed representations keep their norm",
            f"norm {s['norm_eos_attending']:.2f} vs {s['norm_other']:.2f} for other tokens "
            f"(ratio {s['norm_ratio']:.2f})"
            if some
            else f"no token reaches {EOS_ATTENTION_THRESHOLD}",
            s["norm_ratio"] >= NORM_RATIO_MIN if some else None,
            f"holds when the ratio is >= {NORM_RATIO_MIN}",
        ),
    ]


def _token_figure(eos_attention: np.ndarray):
    import plotly.graph_objects as go

    labels = token_labels(RUNNING_EXAMPLE)[: len(eos_attention)]
    colors = ["#d62728" if a >= EOS_ATTENTION_THRESHOLD else "#1f77b4" for a in eos_attention]
    fig = go.Figure(go.Bar(x=labels, y=eos_attention, marker_color=colors))
    fig.add_hline(y=EOS_ATTENTION_THRESHOLD, line_dash="dash", annotation_text="EOS-attending threshold")
    fig.update_layout(
        title=f"last encoder layer, head-mean attention on EOS: {RUNNING_EXAMPLE}",
        yaxis_title="attention on EOS",
        yaxis_range=[0, 1],
        height=400,
    )
    return fig


def _role_figure(att: np.ndarray, roles: np.ndarray, seed: int, max_points: int = 2000):
    import plotly.graph_objects as go

    rng = np.random.default_rng(seed)
    fig = go.Figure()
    for r in np.unique(roles):
        values = att[roles == r]
        values = rng.choice(values, size=min(len(values), max_points), replace=False)
        fig.add_trace(go.Box(y=values, name=ROLES[r], boxpoints=False))
    fig.add_hline(y=EOS_ATTENTION_THRESHOLD, line_dash="dash")
    fig.update_layout(yaxis_title="attention on EOS (head mean)", showlegend=False, height=400)
    return fig


def _cosine_figure(summary: dict):
    import plotly.graph_objects as go

    fig = go.Figure(
        [
            go.Bar(x=list(GROUPS), y=[summary[f"cosine_{stage}_{g}"] for g in GROUPS], name=name)
            for stage, name in (("in", "layer input"), ("out", "layer output"))
        ]
    )
    fig.add_hline(y=PAPER_COSINE, line_dash="dot", annotation_text="paper")
    fig.update_layout(barmode="group", yaxis_title="mean pairwise cosine within a task", height=400)
    return fig
