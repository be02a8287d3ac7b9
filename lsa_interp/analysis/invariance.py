"""Compute mapping: the last encoder layer's residual at the first example-out token is (nearly) the same
for every task of a rule, whatever its letters (paper: 10 predecessor prompts, all 45 pairwise cosines
of ``encoder.ln_final(encoder.2.hook_resid_post)`` in 0.958..0.997).

Prompts (``prompts="paper"``, the default) are built as the authors built theirs (`prompts.paper_prompts`):
standard alphabet, 3-letter windows, the query fixed at ``bcd`` and only the example's letters varied, the
example never sharing a letter with the query. ``prompts="random"`` draws example and query independently
(`activations.analysis_tasks`), so some prompts share letters. The residual goes through the final encoder
LayerNorm unless ``final_norm=False``.

Controls, so that a high cosine is not just a property of the residual stream: the same measure between
tasks of different rules (same position and role), at other positions of the same tasks (the first
example-in and query tokens), and between any two tokens of the tasks (how anisotropic the stream is).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.analysis.activations import analysis_tasks, final_norm, map_cached, off_diagonal, pairwise_cosine
from lsa_interp.analysis.prompts import paper_prompts
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.data.transformations import SEEN, get_transformation
from lsa_interp.data.vocab import ROLE_ID
from lsa_interp.model.cache import ActivationCache
from lsa_interp.model.hooked import HookedEncoderDecoder

PAPER_RANGE = (0.958, 0.997)
"""The paper's 45 pairwise cosines (10 predecessor prompts) all lie in this range."""
COSINE_TOLERANCE = 0.0
"""'Invariant' holds when the smallest pairwise cosine is at least ``PAPER_RANGE[0] - COSINE_TOLERANCE``: the
paper claims all 45 cosines lie at or above 0.958, so ours must too (no tolerance: not looser)."""
CONTROL_MARGIN = 0.02
"""'Specific' holds when the mean within-rule cosine exceeds every control's mean by at least this much."""
PROMPT_KINDS = ("paper", "random")
DEFAULT_LENGTHS = (3,)
"""Window lengths of the prompts: 3, as in the running example, so the token sits at one position."""
CONTROL_ROLES = ("example_in", "query")


def first_token_vectors(
    model: HookedEncoderDecoder,
    tasks: Sequence[Task],
    hook: str,
    roles: Sequence[str] = ("example_out",),
    normed: bool = False,
) -> dict[str, Float[Tensor, "task d_model"]]:
    """The activation at ``hook`` (through the final encoder norm when ``normed``) of each task's first token
    of each role in ``roles``, plus ``"all"``: every non-PAD token of every task (``[tokens, d_model]``).
    Raises KeyError for an unknown role."""
    ids = [ROLE_ID[role] for role in roles]

    def reduce(chunk: list[Task], cache: ActivationCache) -> dict[str, Tensor]:
        acts, token_roles = cache[hook], cache.inputs.roles
        acts = final_norm(model, acts) if normed else acts
        rows = torch.arange(len(chunk))
        out = {role: acts[rows, (token_roles == i).int().argmax(1)] for role, i in zip(roles, ids)}
        out["all"] = acts[token_roles != ROLE_ID["pad"]]
        return out

    parts = map_cached(model, tasks, [hook], reduce)
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}


def cosine_summary(cosines: Float[Tensor, " pairs"]) -> dict[str, float]:
    """``min``, ``mean``, ``max`` and ``pairs`` (the count) of a set of cosines."""
    return {
        "min": float(cosines.min()),
        "mean": float(cosines.mean()),
        "max": float(cosines.max()),
        "pairs": int(cosines.numel()),
    }


def mapping_invariance(
    model: HookedEncoderDecoder,
    transformation: str = "pred",
    *,
    n_prompts: int = 10,
    seed: int = 0,
    alphabets: str = "standard",
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    layer: int = -1,
    compare: Sequence[str] = SEEN,
    model_name: str = "model",
    prompts: str = "paper",
    normed: bool = True,
) -> AnalysisResult:
    """Pairwise cosines of the encoder ``layer`` output (0-based, default the last; through the final encoder
    norm when ``normed``) at the first example-out token over ``n_prompts`` tasks of ``transformation``, the
    same for each rule in ``compare`` (a table; rules without enough prompts of the chosen kind are left
    out and listed), and the controls. ``prompts``: ``"paper"`` (module docstring; ``alphabets`` and
    ``lengths`` then unused) or ``"random"``. Returns an `AnalysisResult`; raises ValueError for an unknown
    rule or prompt kind, fewer than two prompts, a layer outside the encoder or too few distinct tasks.
    """
    if prompts not in PROMPT_KINDS:
        raise ValueError(f"unknown prompts {prompts!r}; choose one of {', '.join(PROMPT_KINDS)}")
    n_layers = model.cfg.n_encoder_layers
    if not -n_layers <= layer < n_layers:
        raise ValueError(f"encoder layer {layer} is outside the model's {n_layers} layers")
    if n_prompts < 2:
        raise ValueError(f"cosines need at least 2 prompts, got {n_prompts}")
    rules = list(dict.fromkeys([transformation, *compare]))
    for rule in rules:
        get_transformation(rule)
    hook = f"encoder.{layer % n_layers}.hook_resid_post"

    def make(rule: str) -> list[Task]:
        if prompts == "paper":
            return paper_prompts(rule, n_prompts, seed)
        return analysis_tasks([rule], n_prompts, seed, alphabets, lengths)

    tasks = {transformation: make(transformation)}
    skipped = []
    for rule in rules[1:]:
        try:
            tasks[rule] = make(rule)
        except ValueError:
            skipped.append(rule)
    rules = list(tasks)
    roles = ("example_out", *CONTROL_ROLES)
    vectors = {rule: first_token_vectors(model, tasks[rule], hook, roles, normed) for rule in rules}
    out = {rule: vectors[rule]["example_out"] for rule in rules}
    matrix = pairwise_cosine(out[transformation])
    by_rule = {rule: cosine_summary(off_diagonal(pairwise_cosine(out[rule]))) for rule in rules}
    between = np.array([[float(_pair_cosines(out[a], out[b], a == b).mean()) for b in rules] for a in rules])
    main = vectors[transformation]
    others = [rule for rule in rules if rule != transformation]
    varied = [role for role in CONTROL_ROLES if not (prompts == "paper" and role == "query")]  # a fixed query
    controls = {f"first {role} token": cosine_summary(off_diagonal(pairwise_cosine(main[role]))) for role in varied}
    if others:
        controls["other rules, same token"] = cosine_summary(
            torch.cat([_pair_cosines(out[transformation], out[rule]) for rule in others])
        )
    controls["any two tokens"] = cosine_summary(off_diagonal(pairwise_cosine(main["all"])))
    within = by_rule[transformation]
    summary = {
        "prompts": n_prompts,
        "pairs": within["pairs"],
        "hook": f"encoder.ln_final({hook})" if normed else hook,
        "prompts_kind": prompts,
        "cosine_min": within["min"],
        "cosine_mean": within["mean"],
        "cosine_max": within["max"],
        **{f"control_{name.replace(' ', '_').replace(',', '')}_mean": c["mean"] for name, c in controls.items()},
    }
    data = {
        "transformation": transformation,
        "prompts": [str(t) for t in tasks[transformation]],
        "rules_without_enough_prompts": skipped,
        "cosines": matrix,
        "by_transformation": by_rule,
        "between_transformations": {"rules": rules, "mean_cosine": between},
        "controls": controls,
        "constants": {
            "paper_range": PAPER_RANGE,
            "cosine_tolerance": COSINE_TOLERANCE,
            "control_margin": CONTROL_MARGIN,
        },
    }
    figures = {
        f"cosines at the first example-out token ({transformation})": _matrix_figure(
            matrix, tasks[transformation], summary["hook"]
        ),
        "mean cosine within and between transformations": _between_figure(between, rules),
        "within-rule cosines and controls": _summary_figure(by_rule, controls),
    }
    return AnalysisResult("invariance", model_name, summary, data, figures, _findings(transformation, within, controls))


def _pair_cosines(a: Float[Tensor, "n d"], b: Float[Tensor, "m d"], same: bool = False) -> Float[Tensor, " pairs"]:
    """Cosines of every (row of a, row of b) pair; each unordered pair once when ``same`` (a is b)."""
    if same:
        return off_diagonal(pairwise_cosine(a))
    return pairwise_cosine(torch.cat([a, b]))[: len(a), len(a) :].flatten()


def _findings(rule: str, within: dict[str, float], controls: dict[str, dict[str, float]]) -> list[Finding]:
    lo, hi = PAPER_RANGE
    top_name, top = max(((name, c["mean"]) for name, c in controls.items()), key=lambda item: item[1])
    return [
        Finding(
            "the first example-out residual is invariant to the letters",
            f"pred: 45 pairwise cosines (10 prompts) all in {lo}..{hi}",
            f"{rule}: {within['pairs']} cosines in {within['min']:.3f}..{within['max']:.3f} "
            f"(mean {within['mean']:.3f})",
            within["min"] >= lo - COSINE_TOLERANCE,
            f"holds when the smallest cosine is >= {lo - COSINE_TOLERANCE:.3f} (the paper's minimum)",
            within["min"],
        ),
        Finding(
            "the invariance is specific (not a property of every token)",
            "not reported; implied by the mapping being stored at this token",
            f"within-rule mean {within['mean']:.3f} vs highest control ({top_name}) {top:.3f}",
            within["mean"] - top >= CONTROL_MARGIN,
            f"holds when the within-rule mean exceeds every control mean by >= {CONTROL_MARGIN}",
            within["mean"] - top,
        ),
    ]


def _matrix_figure(matrix: Float[Tensor, "n n"], tasks: list[Task], hook: str):  # pragma: no mutate block
    import plotly.graph_objects as go

    labels = [f"{i}: {t.examples[0][0]}>{t.examples[0][1]} | {t.query}" for i, t in enumerate(tasks)]
    fig = go.Figure(
        go.Heatmap(
            z=matrix.numpy(),
            x=labels,
            y=labels,
            colorscale="Viridis",
            text=matrix.numpy(),
            texttemplate="%{text:.3f}" if len(tasks) <= 12 else None,
        )
    )
    fig.update_layout(
        title=f"pairwise cosine of {hook} at the first example-out token", height=600, yaxis_autorange="reversed"
    )
    return fig


def _between_figure(between: np.ndarray, rules: list[str]):  # pragma: no mutate block
    import plotly.graph_objects as go

    fig = go.Figure(
        go.Heatmap(z=between, x=rules, y=rules, colorscale="Viridis", text=between, texttemplate="%{text:.2f}")
    )
    fig.update_layout(
        title="mean cosine at the first example-out token (diagonal: within a rule)",
        height=600,
        yaxis_autorange="reversed",
    )
    return fig


def _summary_figure(by_rule: dict[str, dict], controls: dict[str, dict]):  # pragma: no mutate block
    import plotly.graph_objects as go

    rows = [(name, c, "within rule") for name, c in by_rule.items()] + [(n, c, "control") for n, c in controls.items()]
    fig = go.Figure()
    for group in ("within rule", "control"):
        picked = [(name, c) for name, c, g in rows if g == group]
        fig.add_trace(
            go.Bar(
                x=[name for name, _ in picked],
                y=[c["mean"] for _, c in picked],
                name=group,
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[c["max"] - c["mean"] for _, c in picked],
                    arrayminus=[c["mean"] - c["min"] for _, c in picked],
                ),
            )
        )
    lo, hi = PAPER_RANGE
    fig.add_hrect(y0=lo, y1=hi, fillcolor="green", opacity=0.15, annotation_text="paper (pred)")
    fig.update_layout(title="mean pairwise cosine (bars: min..max)", yaxis_title="cosine", height=450)
    return fig
