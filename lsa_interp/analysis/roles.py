"""Role assignment (the paper's "Initialization" step): token representations separate by role after
encoder layer 1, whose heads attend to the separators (vertical stripes in their patterns).

A PCA(2) is fit on the encoder residual stream of every layer (each layer's input and the last layer's
output) over one half of the tasks and applied to the other half before (``encoder.0.hook_resid_pre``)
and after (``encoder.0.hook_resid_post``) layer 1. Separation is measured three ways on the held-out
tokens of the four roles the paper plots: the silhouette score (Euclidean; in the PCA plane and in the
full ``d_model`` space, on a role-balanced sample), the balanced accuracy of a logistic-regression role
probe (full space; fit on the other half's tokens), and the overlap of the per-role kernel density
estimates in the PCA plane. Every residual goes through the final encoder LayerNorm first, as the authors
read every encoder layer (``normed=False`` reads the raw residuals).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.analysis.activations import RUNNING_EXAMPLE, analysis_tasks, final_norm, map_cached
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import source_labels
from lsa_interp.data.transformations import SEEN
from lsa_interp.data.vocab import ROLE_ID
from lsa_interp.model.cache import ActivationCache
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import HookedEncoderDecoder

KDE_ROLES: tuple[str, ...] = ("alphabet", "example_in", "example_out", "query")
"""The roles of the paper's density plot (separators, arrows and EOS are left out of every measure)."""
ROLE_COLORS = {"alphabet": "#7f7f7f", "example_in": "#1f77b4", "example_out": "#d62728", "query": "#2ca02c"}
BEFORE, AFTER = "encoder.0.hook_resid_pre", "encoder.0.hook_resid_post"
SILHOUETTE_MARGIN = 0.05
"""'Roles separate more after layer 1' holds when the PCA-plane silhouette rises by at least this much."""
PROBE_MARGIN = 0.02
"""... and the held-out balanced accuracy of the role probe does not fall by more than this."""
OVERLAP_MARGIN = 0.05
"""'Example-out no longer overlaps example-in and query' holds when both density overlaps fall by this much."""
STRIPE_MASS = 0.5
"""A layer-1 head 'attends to the separators' (a vertical stripe) when at least this much of its attention,
averaged over the non-PAD tokens, goes to ``|`` and ``>``: most of it, the bar at which `rasp` calls a head
like a selector. The paper's stripe heads read almost only separators (SPEC 5b: 1.3, 1.4 and 1.7 send almost
all attention of almost every token to ``>``, 1.3 0.97-1.0); uniform attention puts about 0.06 there."""
ARROW_ALONE_MASS = 0.9
"""'Almost all' attention on ``>`` alone, as the paper's head 1.3: reported beside the finding, not judged."""
MIN_STRIPE_HEADS = 2
"""The paper sees 'multiple heads' of layer 1 with separator stripes."""
MAX_PER_ROLE = 1000
"""Tokens per role sampled for the silhouette, the probe's training set and the density estimates."""
GRID = 60
_OUT_PAIRS = {"in_out": ("example_in", "example_out"), "out_query": ("example_out", "query")}


def pca_hooks(n_layers: int) -> list[str]:
    """The residual hooks the PCA is fit on: every encoder layer's input and the last layer's output."""
    last = f"encoder.{n_layers - 1}.hook_resid_post"
    return [f"encoder.{layer}.hook_resid_pre" for layer in range(n_layers)] + [last]


def collect_residuals(
    model: HookedEncoderDecoder, tasks: Sequence[Task], hooks: Sequence[str], normed: bool = False
) -> tuple[dict[str, Float[np.ndarray, "tokens d_model"]], Int[np.ndarray, " tokens"]]:
    """The residual vectors of every non-PAD encoder token of ``tasks`` at each hook (through the final
    encoder norm when ``normed``), and their role ids."""

    def read(cache: ActivationCache, hook: str, keep: Tensor) -> np.ndarray:
        x = cache[hook][keep]
        return (final_norm(model, x) if normed else x).numpy()

    def reduce(chunk: list[Task], cache: ActivationCache) -> tuple[dict[str, np.ndarray], np.ndarray]:
        keep = cache.inputs.roles != ROLE_ID["pad"]
        return {hook: read(cache, hook, keep) for hook in hooks}, cache.inputs.roles[keep].numpy()

    parts = map_cached(model, tasks, hooks, reduce)
    return {hook: np.concatenate([p[0][hook] for p in parts]) for hook in hooks}, np.concatenate([p[1] for p in parts])


def balanced_sample(roles: Int[np.ndarray, " tokens"], max_per_role: int, seed: int = 0) -> Int[np.ndarray, " n"]:
    """Indices of at most ``max_per_role`` random tokens of each of the `KDE_ROLES` (sorted)."""
    rng = np.random.default_rng(seed)
    picks = []
    for role in KDE_ROLES:
        idx = np.flatnonzero(roles == ROLE_ID[role])
        picks.append(rng.choice(idx, size=min(len(idx), max_per_role), replace=False))
    return np.sort(np.concatenate(picks))


def silhouette(x: Float[np.ndarray, "tokens d"], roles: Int[np.ndarray, " tokens"], seed: int = 0) -> float:
    """Euclidean silhouette score of the `KDE_ROLES` clusters on a role-balanced sample (-1..1, higher is
    better separated). Raises ValueError when fewer than two roles are present."""
    from sklearn.metrics import silhouette_score

    idx = balanced_sample(roles, MAX_PER_ROLE, seed)
    return float(silhouette_score(x[idx], roles[idx], random_state=seed))


def probe_accuracy(
    x_train: Float[np.ndarray, "n d"],
    y_train: Int[np.ndarray, " n"],
    x_test: Float[np.ndarray, "m d"],
    y_test: Int[np.ndarray, " m"],
    seed: int = 0,
) -> float:
    """Balanced accuracy on the test tokens of a logistic-regression role probe (standardised features)
    fit on a role-balanced sample of the training tokens; chance is one over the number of roles."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    idx = balanced_sample(y_train, MAX_PER_ROLE, seed)
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    probe.fit(x_train[idx], y_train[idx])
    keep = np.isin(y_test, [ROLE_ID[r] for r in KDE_ROLES])
    return float(balanced_accuracy_score(y_test[keep], probe.predict(x_test[keep])))


def role_densities(
    points: Float[np.ndarray, "tokens 2"], roles: Int[np.ndarray, " tokens"], seed: int = 0
) -> tuple[Float[np.ndarray, " grid"], Float[np.ndarray, " grid"], dict[str, Float[np.ndarray, "grid grid"]]]:
    """Gaussian kernel density of each of the `KDE_ROLES` on a shared ``GRID x GRID`` grid (``[y, x]``
    indexing); each density sums to 1 over the grid. Raises ValueError when a role has no tokens."""
    from scipy.stats import gaussian_kde

    idx = balanced_sample(roles, MAX_PER_ROLE, seed)
    points, roles = points[idx], roles[idx]
    lo, hi = points.min(axis=0), points.max(axis=0)
    pad = 0.1 * (hi - lo)
    xs, ys = (np.linspace(lo[d] - pad[d], hi[d] + pad[d], GRID) for d in range(2))
    grid = np.stack([g.ravel() for g in np.meshgrid(xs, ys)])
    densities = {}
    for role in KDE_ROLES:
        mine = points[roles == ROLE_ID[role]]
        if len(mine) == 0:
            raise ValueError(f"no {role} tokens to estimate a density from")
        density = gaussian_kde(mine.T)(grid).reshape(GRID, GRID)
        densities[role] = density / density.sum()
    return xs, ys, densities


def overlaps(densities: dict[str, Float[np.ndarray, "grid grid"]]) -> dict[tuple[str, str], float]:
    """Overlap coefficient (sum of the pointwise minimum, 0..1) of every pair of role densities."""
    return {(a, b): float(np.minimum(densities[a], densities[b]).sum()) for a, b in combinations(densities, 2)}


def separator_attention(
    model: HookedEncoderDecoder, tasks: Sequence[Task], layer: int = 0
) -> dict[str, Float[np.ndarray, " head"] | float]:
    """Mean attention mass per head of encoder ``layer`` (0-based) that the non-PAD tokens put on ``|``
    (``"pipe"``) and on ``>`` (``"arrow"``), and ``"uniform"``: the mass uniform attention would put on both."""
    hook = f"encoder.{layer}.attn.hook_pattern"

    def reduce(chunk: list[Task], cache: ActivationCache) -> tuple[np.ndarray, np.ndarray, float, float]:
        roles, pattern = cache.inputs.roles, cache[hook]
        valid = (roles != ROLE_ID["pad"]).float()
        mass = [
            torch.einsum("bhqk,bk,bq->h", pattern, (roles == ROLE_ID[r]).float(), valid).numpy()
            for r in ("separator", "arrow")
        ]
        n_sep = ((roles == ROLE_ID["separator"]) | (roles == ROLE_ID["arrow"])).sum(1).float()
        return mass[0], mass[1], float(n_sep.sum()), float(valid.sum())

    parts = map_cached(model, tasks, [hook], reduce)
    tokens = sum(p[3] for p in parts)
    return {
        "pipe": sum(p[0] for p in parts) / tokens,
        "arrow": sum(p[1] for p in parts) / tokens,
        "uniform": sum(p[2] for p in parts) / tokens,
    }


def role_assignment(
    model: HookedEncoderDecoder,
    tasks: Sequence[Task] | None = None,
    *,
    n_tasks: int = 400,
    seed: int = 0,
    transformations: Sequence[str] = SEEN,
    alphabets: str = "both",
    model_name: str = "model",
    normed: bool = True,
) -> AnalysisResult:
    """Role separation before vs after encoder layer 1 and layer 1's attention to the separators (residuals
    through the final encoder norm when ``normed``).

    ``tasks`` (default: ``n_tasks`` `analysis_tasks` over ``transformations`` and ``alphabets``) are split
    alternately in two halves: the PCA and the probe are fit on the first, every measure is taken on the
    second. Returns an `AnalysisResult` with the density figure, the per-head separator attention and three
    findings. Raises ValueError for fewer than two tasks or bad task arguments.
    """
    from sklearn.decomposition import PCA

    tasks = list(tasks) if tasks is not None else analysis_tasks(transformations, n_tasks, seed, alphabets)
    if len(tasks) < 2:
        raise ValueError(f"role assignment needs at least 2 tasks (a fit half and a test half), got {len(tasks)}")
    fit, test = tasks[0::2], tasks[1::2]
    hooks = pca_hooks(model.cfg.n_encoder_layers)
    fit_x, fit_roles = collect_residuals(model, fit, list(dict.fromkeys([*hooks, AFTER])), normed)
    test_x, test_roles = collect_residuals(model, test, [BEFORE, AFTER], normed)
    pca = PCA(2, random_state=seed).fit(np.concatenate([fit_x[hook] for hook in hooks]))
    stages: dict[str, dict] = {}
    for stage, hook in (("before", BEFORE), ("after", AFTER)):
        plane = pca.transform(test_x[hook])
        xs, ys, densities = role_densities(plane, test_roles, seed)
        stages[stage] = {
            "silhouette_pca": silhouette(plane, test_roles, seed),
            "silhouette_full": silhouette(test_x[hook], test_roles, seed),
            "probe_accuracy": probe_accuracy(fit_x[hook], fit_roles, test_x[hook], test_roles, seed),
            "overlap": overlaps(densities),
            "kde": (xs, ys, densities),
        }
    sep = separator_attention(model, tasks)
    total = sep["pipe"] + sep["arrow"]
    stripe_heads = [Head("encoder", 0, int(h)).label for h in np.flatnonzero(total >= STRIPE_MASS)]
    arrow_head = int(np.argmax(sep["arrow"]))
    summary = {
        "tasks": len(tasks),
        "test_tokens": int(np.isin(test_roles, [ROLE_ID[r] for r in KDE_ROLES]).sum()),
        "pca_explained_variance": float(pca.explained_variance_ratio_.sum()),
        **{
            f"{key}_{stage}": stages[stage][key]
            for key in ("silhouette_pca", "silhouette_full", "probe_accuracy")
            for stage in ("before", "after")
        },
        **{
            f"overlap_{name}_{stage}": stages[stage]["overlap"][pair]
            for name, pair in _OUT_PAIRS.items()
            for stage in ("before", "after")
        },
        "uniform_separator_mass": sep["uniform"],
        "max_separator_mass": float(total.max()),
        "separator_heads": len(stripe_heads),
        "arrow_head": Head("encoder", 0, arrow_head).label,
        "max_arrow_mass": float(sep["arrow"][arrow_head]),
        "arrow_alone_heads": int((sep["arrow"] >= ARROW_ALONE_MASS).sum()),
    }
    findings = _findings(summary, stripe_heads, model.cfg.n_heads)
    data = {
        "hooks": {"pca_fit": hooks, "before": BEFORE, "after": AFTER, "final_norm": normed},
        "pca_explained_variance_ratio": pca.explained_variance_ratio_,
        "transformations": sorted({t.transformation or "?" for t in tasks}),
        "overlaps": {stage: stages[stage]["overlap"] for stage in stages},
        "separator_attention": [
            {"head": Head("encoder", 0, h).label, "pipe": float(sep["pipe"][h]), "arrow": float(sep["arrow"][h])}
            for h in range(model.cfg.n_heads)
        ],
        "separator_heads": stripe_heads,
        "constants": {
            "silhouette_margin": SILHOUETTE_MARGIN,
            "probe_margin": PROBE_MARGIN,
            "overlap_margin": OVERLAP_MARGIN,
            "stripe_mass": STRIPE_MASS,
            "arrow_alone_mass": ARROW_ALONE_MASS,
        },
    }
    figures = {
        "role densities before and after encoder layer 1 (PCA plane)": _density_figure(stages),
        "layer-1 attention mass on the separators": _separator_figure(sep),
        "layer-1 attention patterns (running example)": _pattern_figure(model),
    }
    return AnalysisResult("roles", model_name, summary, data, figures, findings)


def _findings(summary: dict, stripe_heads: list[str], n_heads: int) -> list[Finding]:
    s = summary
    separate = (
        s["silhouette_pca_after"] - s["silhouette_pca_before"] >= SILHOUETTE_MARGIN
        and s["probe_accuracy_after"] >= s["probe_accuracy_before"] - PROBE_MARGIN
    )
    out_apart = all(s[f"overlap_{n}_before"] - s[f"overlap_{n}_after"] >= OVERLAP_MARGIN for n in _OUT_PAIRS)
    return [
        Finding(
            "roles separate more after encoder layer 1",
            "roles cluster to some degree before layer 1, much more clearly after it (PCA(2) + KDE)",
            f"silhouette (PCA plane) {s['silhouette_pca_before']:.2f} -> {s['silhouette_pca_after']:.2f}; "
            f"full space {s['silhouette_full_before']:.2f} -> {s['silhouette_full_after']:.2f}; role probe "
            f"(balanced acc.) {s['probe_accuracy_before']:.2f} -> {s['probe_accuracy_after']:.2f}",
            separate,
            f"holds when the PCA-plane silhouette rises by >= {SILHOUETTE_MARGIN} and the probe accuracy falls "
            f"by < {PROBE_MARGIN}",
        ),
        Finding(
            "example-out no longer overlaps example-in and query",
            "after layer 1 the example-out density is apart from example-in and query",
            f"density overlap in/out {s['overlap_in_out_before']:.2f} -> {s['overlap_in_out_after']:.2f}, "
            f"out/query {s['overlap_out_query_before']:.2f} -> {s['overlap_out_query_after']:.2f}",
            out_apart,
            f"holds when both overlap coefficients fall by >= {OVERLAP_MARGIN}",
        ),
        Finding(
            "layer-1 heads attend to the separators",
            "multiple layer-1 heads put high attention on | and > (vertical stripes)",
            f"{len(stripe_heads)}/{n_heads} heads ({', '.join(stripe_heads) or 'none'}) put >= {STRIPE_MASS:g} of "
            f"their attention on separators (uniform {s['uniform_separator_mass']:.2f}); "
            f"max {s['max_separator_mass']:.2f}; on > alone: {s['arrow_head']} {s['max_arrow_mass']:.2f} "
            f"(paper's 1.3: 0.97-1.0), {s['arrow_alone_heads']} heads >= {ARROW_ALONE_MASS:g}",
            len(stripe_heads) >= MIN_STRIPE_HEADS,
            f"holds when at least {MIN_STRIPE_HEADS} heads put >= {STRIPE_MASS:g} of their attention on | and >",
        ),
    ]


def _density_figure(stages: dict[str, dict]):  # pragma: no mutate block
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("before encoder layer 1", "after encoder layer 1"))
    for col, stage in enumerate(("before", "after"), start=1):
        xs, ys, densities = stages[stage]["kde"]
        for role, density in densities.items():
            top = float(density.max())
            fig.add_trace(
                go.Contour(
                    x=xs,
                    y=ys,
                    z=density,
                    name=role,
                    legendgroup=role,
                    showlegend=col == 1,
                    showscale=False,
                    contours=dict(coloring="lines", start=0.15 * top, end=top, size=0.2 * top),
                    colorscale=[[0, ROLE_COLORS[role]], [1, ROLE_COLORS[role]]],
                    line_width=2,
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text="PC 1", row=1, col=col)
        fig.update_yaxes(title_text="PC 2", row=1, col=col)
    fig.update_layout(height=450, title="kernel density of each role (PCA fit on all encoder layers)")
    return fig


def _separator_figure(sep: dict):  # pragma: no mutate block
    import plotly.graph_objects as go

    labels = [Head("encoder", 0, h).label for h in range(len(sep["pipe"]))]
    fig = go.Figure([go.Bar(x=labels, y=sep["pipe"], name="|"), go.Bar(x=labels, y=sep["arrow"], name=">")])
    fig.add_hline(y=sep["uniform"], line_dash="dash", annotation_text="uniform attention")
    fig.add_hline(y=STRIPE_MASS, line_dash="dot", annotation_text=f"separator head ({STRIPE_MASS:g})")
    fig.update_layout(barmode="stack", xaxis_title="head (1-based L.H)", yaxis_title="mean attention mass", height=400)
    return fig


def _pattern_figure(model: HookedEncoderDecoder):  # pragma: no mutate block
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    hook = "encoder.0.attn.hook_pattern"
    pattern = map_cached(model, [RUNNING_EXAMPLE], [hook], lambda _, cache: cache[hook][0])[0]
    labels = list(source_labels(RUNNING_EXAMPLE))
    n_heads, cols = pattern.shape[0], min(4, pattern.shape[0])
    rows = -(-n_heads // cols)
    titles = [f"head {Head('encoder', 0, h).label}" for h in range(n_heads)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles)
    for h in range(n_heads):
        fig.add_trace(
            go.Heatmap(z=pattern[h].numpy(), x=labels, y=labels, coloraxis="coloraxis"),
            row=h // cols + 1,
            col=h % cols + 1,
        )
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(
        height=300 * rows,
        coloraxis=dict(colorscale="Blues", cmin=0, cmax=1),
        title=f"encoder layer 1 on {RUNNING_EXAMPLE} (rows: query token, columns: key token)",
    )
    return fig
