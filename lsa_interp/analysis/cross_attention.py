"""Apply mapping: where the decoder's cross-attention looks at the first decoding step (paper, predecessor:
layer 1 -> the first query letter, layer 2 -> the changed example-out letter, layer 3 -> the answer
letter in the alphabet).

Every encoder position of a task falls in one category: the first query letter, an example-out letter
that differs from the example-in letter at the same index (or lies beyond its end), the alphabet
position of the answer's first letter, or else the other query / example-in / example-out / alphabet
letters, a separator (``|`` or ``>``) or EOS. For each decoder layer
we count over tasks which category holds the argmax of the head-mean pattern (and of each head's), and
the mean attention mass on each category.

As the authors did, the mechanism is read off tasks the model solves (``solved_only``, the default; with no
solved task there is no verdict), on prompts of the paper's form (``prompts="paper"``: standard alphabet,
3-letter windows, no letter shared between example and query, `prompts.paper_prompts`; ``"random"``:
`activations.analysis_tasks`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.analysis.activations import analysis_tasks, eval_mode, map_cached
from lsa_interp.analysis.prompts import paper_prompts
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.model.cache import ActivationCache
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import HookedEncoderDecoder

CATEGORIES: tuple[str, ...] = (
    "first_query",
    "changed_example_out",
    "answer_in_alphabet",
    "other_query",
    "example_in",
    "other_example_out",
    "other_alphabet",
    "separator",
    "eos",
)
"""Categories of encoder positions (the first three are the paper's targets); the integer id is the index in
this tuple (-1 marks PAD). ``separator`` holds both ``|`` and ``>``."""
CAT = {name: i for i, name in enumerate(CATEGORIES)}
EXPECTED: tuple[str, ...] = ("first_query", "changed_example_out", "answer_in_alphabet")
"""The paper's target of decoder layer 1, 2, 3 (0-based index 0, 1, 2)."""
_WORDS = {
    "first_query": "first query letter",
    "changed_example_out": "changed example-out letter",
    "answer_in_alphabet": "answer letter in the alphabet",
}
MIN_ARGMAX_SHARE = 0.5
"""A layer's finding holds when its head-mean pattern (the authors averaged over heads, SPEC 5b) has the argmax on
the expected category in at least this share of the tasks; the best single head is reported beside it."""


def position_categories(task: Task) -> list[int]:
    """The category id (`CATEGORIES`) of every encoder position of ``task``. Raises ValueError when the
    task has no answer (the answer's first letter is located in the alphabet)."""
    if not task.answer:
        raise ValueError(f"cross-attention categories need tasks with answers; {task} has none")
    cats = [CAT["other_alphabet"]] * len(task.alphabet) + [CAT["separator"]]
    for ex_in, ex_out in task.examples:
        cats += [CAT["example_in"]] * len(ex_in) + [CAT["separator"]]
        cats += [
            CAT["changed_example_out"] if i >= len(ex_in) or ex_in[i] != ch else CAT["other_example_out"]
            for i, ch in enumerate(ex_out)
        ]
        cats.append(CAT["separator"])
    cats += [CAT["first_query"]] + [CAT["other_query"]] * (len(task.query) - 1) + [CAT["eos"]]
    cats[task.alphabet.index(task.answer[0])] = CAT["answer_in_alphabet"]
    return cats


def category_matrix(tasks: Sequence[Task], width: int) -> Int[Tensor, "batch src_pos"]:
    """`position_categories` of each task, padded with -1 to ``width`` positions."""
    out = torch.full((len(tasks), width), -1, dtype=torch.long)
    for row, task in enumerate(tasks):
        cats = position_categories(task)
        out[row, : len(cats)] = torch.tensor(cats)
    return out


def first_step_attention(
    model: HookedEncoderDecoder, tasks: Sequence[Task]
) -> tuple[
    Float[Tensor, "layer task head category"],
    Int[Tensor, "layer task head"],
    Int[Tensor, "layer task"],
    Float[Tensor, "task category"],
    Float[Tensor, " task"],
]:
    """Cross-attention of the first decoding step, per decoder layer: the mass each head puts on each
    category, the category of each head's argmax and of the head-mean pattern's argmax; the share of
    positions in each category (what uniform attention would give); and whether the first greedy
    letter is the answer's (1.0) or not (0.0)."""
    n_layers = model.cfg.n_decoder_layers
    hooks = [f"decoder.{layer}.cross_attn.hook_pattern" for layer in range(n_layers)] + ["decoder.ln_final.hook_out"]

    def reduce(chunk: list[Task], cache: ActivationCache):
        cats = category_matrix(chunk, cache.inputs.src.shape[1])
        onehot = torch.nn.functional.one_hot(cats.clamp(min=0), len(CATEGORIES)).float() * (cats >= 0)[..., None]
        patterns = torch.stack([cache[hook][:, :, 0] for hook in hooks[:-1]])  # [layer, batch, head, src]
        mass = torch.einsum("lbhs,bsc->lbhc", patterns, onehot)
        layer_cats = cats.expand(n_layers, -1, -1)
        head_cat = torch.gather(layer_cats, 2, patterns.argmax(-1))
        mean_cat = torch.gather(layer_cats, 2, patterns.mean(2).argmax(-1, keepdim=True))[..., 0]
        uniform = onehot.sum(1) / (cats >= 0).sum(1, keepdim=True)
        first = model.unembed(cache["decoder.ln_final.hook_out"][:, 0].to(model.device)).argmax(-1).cpu()
        correct = (first == torch.tensor([ord(t.answer[0]) - ord("a") for t in chunk])).float()
        return mass, head_cat, mean_cat, uniform, correct

    parts = map_cached(model, tasks, hooks, reduce)
    mass, head_cat, mean_cat = (torch.cat([p[i] for p in parts], dim=1) for i in range(3))
    return mass, head_cat, mean_cat, torch.cat([p[3] for p in parts]), torch.cat([p[4] for p in parts])


def shares(categories: Int[Tensor, "*rest task"]) -> Float[Tensor, "*rest category"]:
    """The share of tasks (last axis) whose argmax falls in each category."""
    return torch.nn.functional.one_hot(categories, len(CATEGORIES)).float().mean(-2)


def cross_attention_targets(
    model: HookedEncoderDecoder,
    transformation: str = "pred",
    *,
    n_tasks: int = 200,
    seed: int = 0,
    alphabets: str = "both",
    tasks: Sequence[Task] | None = None,
    model_name: str = "model",
    prompts: str = "paper",
    solved_only: bool = True,
) -> AnalysisResult:
    """Which encoder positions each decoder layer's cross-attention targets at the first decoding step,
    over ``tasks`` (default: ``n_tasks`` prompts of kind ``prompts`` of ``transformation``; ``alphabets``
    is used by ``"random"`` only), only those the model solves when ``solved_only``. Returns an
    `AnalysisResult` with the per-layer table, per-head shares, figures and one finding per paper layer.
    Raises ValueError for an unknown transformation or prompt kind, tasks without answers or too few
    distinct tasks.
    """
    if tasks is None:
        if prompts not in ("paper", "random"):
            raise ValueError(f"unknown prompts {prompts!r}; choose paper or random")
        if prompts == "paper":
            tasks = paper_prompts(transformation, n_tasks, seed, fixed_query=False)
        else:
            tasks = analysis_tasks([transformation], n_tasks, seed, alphabets)
    tasks = list(tasks)
    with eval_mode(model):
        solved = [t for t, answer in zip(tasks, model.solve(tasks)) if answer == t.answer] if solved_only else tasks
        judged = solved or tasks
        mass, head_cat, mean_cat, uniform, correct = first_step_attention(model, judged)
    layer_share = shares(mean_cat)  # [layer, category]
    layer_mass = mass.mean(dim=(1, 2))
    head_share = shares(head_cat.transpose(1, 2))  # [layer, head, category]
    head_mass = mass.mean(1)
    uniform_mass = uniform.mean(0)
    n_layers, n_heads = model.cfg.n_decoder_layers, model.cfg.n_heads
    table = [
        {
            "layer": layer + 1,
            "category": name,
            "argmax_share": float(layer_share[layer, c]),
            "mean_mass": float(layer_mass[layer, c]),
            "uniform_mass": float(uniform_mass[c]),
        }
        for layer in range(n_layers)
        for c, name in enumerate(CATEGORIES)
    ]
    heads = [
        {
            "head": Head("decoder", layer, h, "cross_attn").label,
            **{f"{name}_share": float(head_share[layer, h, c]) for c, name in enumerate(CATEGORIES)},
            **{f"{name}_mass": float(head_mass[layer, h, c]) for c, name in enumerate(CATEGORIES)},
        }
        for layer in range(n_layers)
        for h in range(n_heads)
    ]
    summary: dict = {
        "tasks": len(tasks),
        "solved": len(solved) if solved_only else None,
        "judged_tasks": len(judged),
        "first_letter_accuracy": float(correct.mean()),
    }
    for layer in range(n_layers):
        summary[f"layer {layer + 1} argmax"] = CATEGORIES[int(layer_share[layer].argmax())]
        if layer < len(EXPECTED):
            summary[f"layer {layer + 1} {EXPECTED[layer]} share"] = float(layer_share[layer, CAT[EXPECTED[layer]]])
    data = {
        "transformations": sorted({t.transformation or "?" for t in tasks}),
        "categories": CATEGORIES,
        "table": table,
        "heads": heads,
        "min_argmax_share": MIN_ARGMAX_SHARE,
    }
    if not solved_only:
        over = f"{len(judged)} tasks"
    else:
        over = f"{len(judged)} solved tasks" if solved else f"all {len(judged)} tasks: none was solved"
    figures = {
        "argmax category of the head-mean cross-attention (first step)": _layer_figure(
            layer_share, "share of tasks", over=over
        ),
        "mean cross-attention mass per category (first step)": _layer_figure(
            layer_mass, "mean attention mass", uniform_mass, over
        ),
        "argmax category per head": _head_figure(head_share, over),
    }
    verdict = bool(solved)
    findings = [_finding(layer, layer_share, head_share, verdict) for layer in range(min(n_layers, len(EXPECTED)))]
    return AnalysisResult("cross_attention", model_name, summary, data, figures, findings)


def _finding(layer: int, layer_share: Tensor, head_share: Tensor, verdict: bool = True) -> Finding:
    expected = EXPECTED[layer]
    c, words = CAT[expected], _WORDS[expected]
    best = int(head_share[layer, :, c].argmax())
    mean_share, head_best = float(layer_share[layer, c]), float(head_share[layer, best, c])
    label = Head("decoder", layer, best, "cross_attn").label
    return Finding(
        f"decoder layer {layer + 1} attends to the {words}",
        f"layer {layer + 1} -> {words} (predecessor, first decoding step)",
        f"argmax there in {mean_share:.0%} of tasks (head mean), {head_best:.0%} for head {label}",
        mean_share >= MIN_ARGMAX_SHARE if verdict else None,
        f"holds when the head-mean attention (the paper's measure) has its argmax there in >= "
        f"{MIN_ARGMAX_SHARE:.0%} of the solved tasks; the best single head is shown beside it"
        + ("" if verdict else "; no verdict: the model solves none of the tasks"),
        mean_share,
    )


def _layer_figure(  # pragma: no mutate block
    values: Tensor, title: str, uniform: Tensor | None = None, over: str = ""
):
    import plotly.graph_objects as go

    fig = go.Figure(
        [
            go.Bar(x=list(CATEGORIES), y=values[layer].numpy(), name=f"decoder layer {layer + 1}")
            for layer in range(values.shape[0])
        ]
    )
    if uniform is not None:
        fig.add_trace(
            go.Scatter(
                x=list(CATEGORIES),
                y=uniform.numpy(),
                mode="markers",
                name="uniform attention",
                marker=dict(symbol="line-ew-open", size=30, color="black"),
            )
        )
    fig.update_layout(barmode="group", yaxis_title=title, height=420, title=f"over {over}" if over else None)
    return fig


def _head_figure(head_share: Tensor, over: str = ""):  # pragma: no mutate block
    import plotly.graph_objects as go

    n_layers, n_heads = head_share.shape[:2]
    labels = [Head("decoder", layer, h, "cross_attn").label for layer in range(n_layers) for h in range(n_heads)]
    z = head_share.reshape(n_layers * n_heads, -1).numpy()
    fig = go.Figure(go.Heatmap(z=z, x=list(CATEGORIES), y=labels, colorscale="Blues", zmin=0, zmax=1))
    fig.update_layout(
        title="share of tasks with each head's argmax in each category" + (f" (over {over})" if over else ""),
        yaxis_autorange="reversed",
        height=max(400, 22 * len(labels)),
    )
    return fig
