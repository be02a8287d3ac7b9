"""Elimination (paper appendix): in the last encoder layer, tokens irrelevant to the mapping (most alphabet
letters, the separators) put 0.4-0.59 of their attention on EOS, and the layer's outputs at those tokens
collapse to nearly one direction (pairwise cosine ~0.98) while their norms stay (4.5-6).

A token is *irrelevant* when it is a separator (``|``, ``>``) or an alphabet letter that occurs nowhere in
the examples, the query or the answer. Two things are measured on those tokens, separately:

- the *sink*: where they send their attention in the last encoder layer, per head: the mass on EOS (the
  paper's sink) and on the single key that receives most of it, whatever that key is (a model may use another
  sink, e.g. the changed example-out letter or a separator). Judged on the layer's strongest such head, as the
  paper's 0.4-0.59 reads one head: in our copy models one layer-3 head takes 0.44-0.82 of the irrelevant
  tokens' attention to EOS while the head mean stays at 0.07-0.19, so a head mean of 0.4 would need half the
  heads to sink. The head mean is reported beside it, not judged;
- the *collapse*: the mean pairwise cosine of the irrelevant alphabet letters' representations within a
  task (the paper's h..z; with the separators too as a second number), on the layer's output and, for
  comparison, its input, both through the final encoder LayerNorm as the authors
  read every layer (``normed=False`` reads the raw residuals); and their norms against the other tokens'.

Default prompts (``prompts="paper"``): the paper's ``a..z | ghi > ghj | bcd`` and more successor prompts of
its form (`prompts.paper_prompts`: standard alphabet, 3-letter windows, no letter shared between example
and query). ``prompts="random"``: `activations.analysis_tasks` over the given rules and alphabets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from lsa_interp.analysis.activations import (
    analysis_tasks,
    final_norm,
    map_cached,
    off_diagonal,
    pairwise_cosine,
)
from lsa_interp.analysis.prompts import paper_prompts
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import source_labels
from lsa_interp.data.transformations import SEEN
from lsa_interp.data.vocab import ROLE_ID, ROLES
from lsa_interp.model.cache import ActivationCache
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import HookedEncoderDecoder

PAPER_PROMPT = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd > bce", transformation="succ")
"""The prompt of the paper's elimination figure."""
PAPER_EOS_RANGE = (0.4, 0.59)
"""Attention on EOS of the irrelevant tokens in the paper's figure."""
SINK_MIN = PAPER_EOS_RANGE[0]
"""'Irrelevant tokens attend to EOS' (and, for any sink, 'to one sink') holds when their mean attention on it
in one head of the layer reaches the paper's lowest value, 0.4."""
PAPER_COSINE = 0.98
COLLAPSE_MIN = 0.975
"""'Collapse' holds when the mean within-task cosine of the irrelevant tokens is at least 0.975: the paper's
"~0.98", given to two decimals, is any value that rounds to 0.98 or more."""
PAPER_NORMS = (4.5, 6.0)
NORM_RATIO_MIN = PAPER_NORMS[0] / PAPER_NORMS[1]
"""'Norms stay' holds when the irrelevant tokens keep at least 0.75 (= 4.5 / 6, the spread of the paper's
norms) of the other tokens' mean norm."""
PROMPT_KINDS = ("paper", "random")
GROUPS = ("irrelevant", "other", "between")


def group_cosines(x: Float[Tensor, "tokens d"], group: Bool[Tensor, " tokens"]) -> dict[str, float]:
    """Mean pairwise cosine among the ``group`` rows, among the others, and between the two (NaN for a side
    with fewer than two rows, or an empty side)."""
    cos = pairwise_cosine(x)
    others = ~group
    nan = float("nan")
    return {
        "irrelevant": float(off_diagonal(cos[group][:, group]).mean()) if group.sum() > 1 else nan,
        "other": float(off_diagonal(cos[others][:, others]).mean()) if others.sum() > 1 else nan,
        "between": float(cos[group][:, others].mean()) if group.any() and others.any() else nan,
    }


def _irrelevant(task: Task, roles: list[int]) -> list[bool]:
    """Separators and alphabet letters absent from the examples, query and answer (per encoder position)."""
    used = set(task.query + (task.answer or "") + "".join(a + b for a, b in task.examples))
    separators = (ROLE_ID["separator"], ROLE_ID["arrow"])
    return [r in separators or (r == ROLE_ID["alphabet"] and task.alphabet[i] not in used) for i, r in enumerate(roles)]


def token_statistics(
    model: HookedEncoderDecoder, tasks: Sequence[Task], layer: int = -1, normed: bool = True
) -> dict[str, np.ndarray]:
    """Per token of every task (PAD and EOS left out): ``eos_attention`` (head mean, encoder ``layer``,
    0-based, default the last) and ``eos_attention_heads`` (per head, ``[tokens, heads]``), ``role`` id,
    ``irrelevant`` flag, output and input ``norm_out``/``norm_in``; per task: the `group_cosines` of the
    irrelevant tokens on the layer's output (``cos_out_*``) and input (``cos_in_*``; the group is the irrelevant
    alphabet letters, ``cos_out_with_separators`` adds the separators), the irrelevant tokens' mean attention on
    their top key of the head mean (``sink_mass``), that key's ``sink_role`` id and ``sink_token`` (its
    `source_labels` label, e.g. ``"|·34"``), and the same per head (``sink_mass_heads``, ``sink_role_heads``,
    ``sink_token_heads``: ``[tasks, heads]``). Residuals go through the final encoder norm when ``normed``.
    Raises ValueError for a layer outside the encoder."""
    n_layers = model.cfg.n_encoder_layers
    if not -n_layers <= layer < n_layers:
        raise ValueError(f"encoder layer {layer} is outside the model's {n_layers} layers")
    layer %= n_layers
    hooks = [f"encoder.{layer}.{name}" for name in ("attn.hook_pattern", "hook_resid_pre", "hook_resid_post")]

    def reduce(chunk: list[Task], cache: ActivationCache) -> dict[str, list]:
        pattern, x_in, x_out = (cache[hook] for hook in hooks)
        if normed:
            x_in, x_out = final_norm(model, x_in), final_norm(model, x_out)
        keys = ("eos_attention", "eos_attention_heads", "role", "irrelevant", "norm_out", "norm_in", "sink_mass",
                "sink_role", "sink_token", "sink_mass_heads", "sink_role_heads", "sink_token_heads")  # fmt: skip
        out: dict[str, list] = {key: [] for key in keys}
        for group in GROUPS:
            out[f"cos_out_{group}"], out[f"cos_in_{group}"] = [], []
        out["cos_out_with_separators"] = []
        for row, task in enumerate(chunk):
            roles = cache.inputs.roles[row]
            eos = int((roles == ROLE_ID["eos"]).int().argmax())
            mean_pattern = pattern[row].mean(0)
            irrelevant = np.array(_irrelevant(task, roles[:eos].tolist()))
            mask = torch.from_numpy(irrelevant)
            out["eos_attention"].append(mean_pattern[:eos, eos].numpy())
            out["eos_attention_heads"].append(pattern[row, :, :eos, eos].T.numpy())
            out["role"].append(roles[:eos].numpy())
            out["irrelevant"].append(irrelevant)
            out["norm_out"].append(x_out[row, :eos].norm(dim=-1).numpy())
            out["norm_in"].append(x_in[row, :eos].norm(dim=-1).numpy())
            received = mean_pattern[:eos][mask].mean(0) if mask.any() else torch.zeros(eos + 1)
            sink = int(received.argmax())
            out["sink_mass"].append(float(received[sink]))
            out["sink_role"].append(int(roles[sink]))
            out["sink_token"].append(source_labels(task)[sink])
            by_head = pattern[row, :, :eos][:, mask].mean(1) if mask.any() else torch.zeros(pattern.shape[1], eos + 1)
            mass, keys_at = by_head.max(-1)
            out["sink_mass_heads"].append(mass.tolist())
            out["sink_role_heads"].append([int(roles[k]) for k in keys_at.tolist()])
            out["sink_token_heads"].append([source_labels(task)[k] for k in keys_at.tolist()])
            letters = mask & (roles[:eos] == ROLE_ID["alphabet"])
            out["cos_out_with_separators"].append(group_cosines(x_out[row, :eos], mask)["irrelevant"])
            for stage, x in (("out", x_out), ("in", x_in)):
                for group, value in group_cosines(x[row, :eos], letters).items():
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
    prompts: str = "paper",
    normed: bool = True,
) -> AnalysisResult:
    """The sink and the collapse of the irrelevant tokens in encoder ``layer`` (default the last), over
    ``tasks`` (default: ``n_tasks`` prompts of kind ``prompts``, module docstring; ``transformations`` and
    ``alphabets`` are used by ``"random"`` only). Returns an `AnalysisResult`; raises ValueError for bad task
    arguments, an unknown prompt kind or a layer outside the encoder."""
    if tasks is None:
        if prompts not in PROMPT_KINDS:
            raise ValueError(f"unknown prompts {prompts!r}; choose one of {', '.join(PROMPT_KINDS)}")
        if prompts == "paper":
            tasks = paper_prompts("succ", n_tasks, seed, fixed_query=False)
        else:
            tasks = analysis_tasks(transformations, n_tasks, seed, alphabets)
    tasks = list(tasks)
    stats = token_statistics(model, tasks, layer, normed)
    layer %= model.cfg.n_encoder_layers
    att, irrelevant, roles = stats["eos_attention"], stats["irrelevant"], stats["role"]
    by_head = stats["eos_attention_heads"]
    eos_by_head = [_mean(by_head[:, h], irrelevant) for h in range(by_head.shape[1])]
    eos_head = int(np.argmax(np.nan_to_num(eos_by_head, nan=-1.0)))
    sink_by_head = stats["sink_mass_heads"].mean(0)
    sink_head = int(sink_by_head.argmax())
    sink_roles, counts = np.unique(stats["sink_role_heads"][:, sink_head], return_counts=True)
    tokens, token_counts = np.unique(stats["sink_token_heads"][:, sink_head], return_counts=True)
    mean_tokens, mean_token_counts = np.unique(stats["sink_token"], return_counts=True)
    by_role = {
        ROLES[r]: {
            "tokens": int((roles == r).sum()),
            "mean_eos_attention": _mean(att, roles == r),
            "eos_head_attention": _mean(by_head[:, eos_head], roles == r),
        }
        for r in np.unique(roles)
    }
    summary = {
        "tasks": len(tasks),
        "tokens": int(att.size),
        "normed": normed,
        "eos_head": Head("encoder", layer, eos_head).label,
        "eos_head_irrelevant": eos_by_head[eos_head],
        "eos_head_relevant": _mean(by_head[:, eos_head], ~irrelevant),
        "irrelevant_mean_eos_attention": _mean(att, irrelevant),
        "relevant_mean_eos_attention": _mean(att, ~irrelevant),
        "sink_head": Head("encoder", layer, sink_head).label,
        "sink_mass": float(sink_by_head[sink_head]),
        "sink_role": ROLES[int(sink_roles[counts.argmax()])],
        "sink_token": str(tokens[token_counts.argmax()]),
        "sink_is_eos_share": float((stats["sink_role_heads"][:, sink_head] == ROLE_ID["eos"]).mean()),
        "sink_mass_head_mean": float(stats["sink_mass"].mean()),
        "sink_token_head_mean": str(mean_tokens[mean_token_counts.argmax()]),
        "norm_irrelevant": _mean(stats["norm_out"], irrelevant),
        "norm_other": _mean(stats["norm_out"], ~irrelevant),
    }
    for stage in ("out", "in"):
        for group in GROUPS:
            per_task = stats[f"cos_{stage}_{group}"]
            summary[f"cosine_{stage}_{group}"] = _mean(per_task, np.isfinite(per_task))
    with_separators = stats["cos_out_with_separators"]
    summary["cosine_out_with_separators"] = _mean(with_separators, np.isfinite(with_separators))
    summary["norm_ratio"] = summary["norm_irrelevant"] / summary["norm_other"]
    data = {
        "layer": layer + 1,
        "prompts": [str(t) for t in tasks[:20]],
        "by_role": by_role,
        "irrelevant_eos_attention_by_head": {Head("encoder", layer, h).label: v for h, v in enumerate(eos_by_head)},
        "sink_mass_by_head": {Head("encoder", layer, h).label: float(v) for h, v in enumerate(sink_by_head)},
        "sink_roles": {ROLES[int(r)]: int(c) for r, c in zip(sink_roles, counts)},
        "transformations": sorted({t.transformation or "?" for t in tasks}),
        "constants": {
            "paper_eos_range": PAPER_EOS_RANGE,
            "sink_min": SINK_MIN,
            "paper_cosine": PAPER_COSINE,
            "collapse_min": COLLAPSE_MIN,
            "norm_ratio_min": NORM_RATIO_MIN,
        },
    }
    example = token_statistics(model, [PAPER_PROMPT], layer, normed)
    figures = {
        "EOS attention per token (the paper's prompt)": _token_figure(
            example["eos_attention_heads"][:, eos_head], example["eos_attention"], summary["eos_head"]
        ),
        "EOS attention by role": _role_figure(by_head[:, eos_head], roles, seed, summary["eos_head"]),
        "within-task cosine by group": _cosine_figure(summary),
    }
    return AnalysisResult("elimination", model_name, summary, data, figures, _findings(summary))


def _mean(values: np.ndarray, mask: np.ndarray) -> float:
    """Mean of ``values[mask]`` as a float; NaN when the mask selects nothing."""
    return float(values[mask].mean()) if mask.any() else float("nan")


def _findings(s: dict) -> list[Finding]:
    lo, hi = PAPER_EOS_RANGE
    return [
        Finding(
            "irrelevant tokens attend to EOS in the last encoder layer",
            f"most alphabet letters and separators put {lo}-{hi} of their attention on EOS",
            f"head {s['eos_head']}: irrelevant tokens {s['eos_head_irrelevant']:.2f}, relevant tokens "
            f"{s['eos_head_relevant']:.2f}; head mean {s['irrelevant_mean_eos_attention']:.2f} "
            f"(relevant {s['relevant_mean_eos_attention']:.2f})",
            s["eos_head_irrelevant"] >= SINK_MIN,
            f"holds when their mean in the layer's strongest EOS head is >= {SINK_MIN} (the paper's lowest); "
            "the head mean is shown, not judged",
            s["eos_head_irrelevant"],
        ),
        Finding(
            "irrelevant tokens attend to one sink token (any)",
            f"EOS, {lo}-{hi}",
            f"head {s['sink_head']}: mean {s['sink_mass']:.2f} on their top key, most often {s['sink_token']} "
            f"({s['sink_role']}; EOS in {s['sink_is_eos_share']:.0%} of tasks); head mean "
            f"{s['sink_mass_head_mean']:.2f} on {s['sink_token_head_mean']}",
            s["sink_mass"] >= SINK_MIN,
            f"holds when the mean mass on their top key in the layer's strongest sink head is >= {SINK_MIN}; "
            "the sink is reported, not judged",
            s["sink_mass"],
        ),
        Finding(
            "irrelevant tokens collapse to one direction",
            f"pairwise cosine of their outputs ~{PAPER_COSINE}",
            f"irrelevant letters: cosine {s['cosine_in_irrelevant']:.3f} (layer input) -> "
            f"{s['cosine_out_irrelevant']:.3f} (output); with the separators {s['cosine_out_with_separators']:.3f}; "
            f"other tokens {s['cosine_out_other']:.3f}",
            s["cosine_out_irrelevant"] >= COLLAPSE_MIN,
            f"holds when the mean within-task cosine is >= {COLLAPSE_MIN} (rounds to the paper's 0.98)",
            s["cosine_out_irrelevant"],
        ),
        Finding(
            "their norms do not shrink",
            f"norms stay {PAPER_NORMS[0]}-{PAPER_NORMS[1]}",
            f"norm {s['norm_irrelevant']:.2f} vs {s['norm_other']:.2f} for other tokens (ratio {s['norm_ratio']:.2f})",
            s["norm_ratio"] >= NORM_RATIO_MIN,
            f"holds when the ratio is >= {NORM_RATIO_MIN:.2f} (4.5 / 6)",
            s["norm_ratio"],
        ),
    ]


def _token_figure(head: np.ndarray, mean: np.ndarray, label: str):  # pragma: no mutate block
    import plotly.graph_objects as go

    labels = list(source_labels(PAPER_PROMPT)[: len(head)])
    fig = go.Figure([go.Bar(x=labels, y=head, name=f"head {label}"), go.Bar(x=labels, y=mean, name="head mean")])
    fig.add_hrect(
        y0=PAPER_EOS_RANGE[0],
        y1=PAPER_EOS_RANGE[1],
        fillcolor="green",
        opacity=0.15,
        annotation_text="paper range",
        annotation_position="top left",
    )
    fig.update_layout(
        title=f"last encoder layer, attention on EOS (head {label}, the strongest, and the head mean): {PAPER_PROMPT}",
        barmode="group",
        yaxis_title="attention on EOS",
        yaxis_range=[0, 1],
        height=400,
    )
    return fig


def _role_figure(
    att: np.ndarray, roles: np.ndarray, seed: int, label: str, max_points: int = 2000
):  # pragma: no mutate block
    import plotly.graph_objects as go

    rng = np.random.default_rng(seed)
    fig = go.Figure()
    for r in np.unique(roles):
        values = att[roles == r]
        values = rng.choice(values, size=min(len(values), max_points), replace=False)
        fig.add_trace(go.Box(y=values, name=ROLES[r], boxpoints=False))
    fig.update_layout(
        title=f"attention on EOS by role (quartiles of a random sample of up to {max_points:,} positions per role)",
        yaxis_title=f"attention on EOS (head {label})",
        showlegend=False,
        height=400,
    )
    return fig


def _cosine_figure(summary: dict):  # pragma: no mutate block
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
