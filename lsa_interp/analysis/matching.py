"""Matching heads: encoder heads in which a letter attends to the same letter in another role.

The paper's head "2.7" sends a query letter to the same letter in the alphabet and an example-output
letter to the same letter in the example input. `matching_scores` measures this for every encoder head:
for each non-alphabet letter (example input, example output, query) the attention mass on keys holding
the same letter in a different role, averaged over many tasks, minus what a uniform pattern over the
non-PAD keys would put there (the baseline). `detect_matching_heads` keeps the heads whose excess reaches
`MATCHING_THRESHOLD`; `matching_occurrence` counts the checkpoints with such a head per group of runs.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from lsa_interp.analysis.activations import eval_mode
from lsa_interp.analysis.prompts import rule_tasks
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import TokenBatch, encode_tasks
from lsa_interp.data.vocab import PAD, ROLE_ID
from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, load_model
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import HookedEncoderDecoder

MATCHING_THRESHOLD = 0.25
"""A head is a matching head when its score (attention mass on same-letter keys in another role, minus the
uniform baseline) is at least 0.25: on average every example/query letter puts a quarter of its attention
more on its partners than a uniform head would. Uniform and positional heads score about 0 (or below), a
clean matching head close to 1; the paper graded "liberally" (any visible example-in/out pattern), and
0.25 is a pattern plainly visible in an averaged attention plot."""
MATCHING_RULES: tuple[str, ...] = ("succ", "pred", "extend_sequence", "remove_redundant", "fix_alphabetic_seq", "sort")
"""Transformations of the tasks scored by default (their tasks fit in 64 positions)."""
QUERY_ROLES: tuple[str, ...] = ("example_in", "example_out", "query")
"""Roles of the letters whose attention is scored (each always has its partner in the alphabet)."""
_LETTER_ROLES = ("alphabet",) + QUERY_ROLES


def matching_tasks(n_per_rule: int = 20, seed: int = 0, rules: Sequence[str] = MATCHING_RULES) -> list[Task]:
    """``n_per_rule`` tasks per rule on the standard alphabet and as many on permuted alphabets."""
    return [
        task
        for rule in rules
        for alphabets in ("standard", "permuted")
        for task in rule_tasks(rule, n_per_rule, seed=seed, alphabets=alphabets)
    ]


@dataclass(frozen=True)
class MatchingScores:
    """Per-head matching measures, ``[layer, head]`` tensors (0-based).

    ``mass``: mean attention on same-letter keys in another role; ``baseline``: the same for a uniform
    pattern; ``by_roles``: (query role, key role) -> mean mass on same-letter keys of that role, over
    letters that have such a partner; ``n_letters``: letters scored.
    """

    mass: Float[Tensor, "layer head"]
    baseline: float
    by_roles: dict[tuple[str, str], Float[Tensor, "layer head"]]
    n_letters: int

    @property
    def score(self) -> Float[Tensor, "layer head"]:
        """Excess over the uniform baseline (the detection statistic)."""
        return self.mass - self.baseline

    def heads(self, threshold: float = MATCHING_THRESHOLD) -> list[Head]:
        """Heads whose score reaches ``threshold``, best first."""
        score = self.score
        found = [Head("encoder", layer, head) for layer, head in (score >= threshold).nonzero().tolist()]
        return sorted(found, key=lambda h: -float(score[h.layer, h.head]))

    def best(self) -> tuple[Head, float]:
        """The highest-scoring head and its score."""
        flat = int(self.score.argmax())
        layer, head = divmod(flat, self.score.shape[1])
        return Head("encoder", layer, head), float(self.score[layer, head])


def _encoder_patterns(model: HookedEncoderDecoder, batch: TokenBatch) -> Float[Tensor, "batch layer head q k"]:
    names = [f"encoder.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_encoder_layers)]
    _, cache = model.run_with_cache(batch, names_filter=names)
    return torch.stack([cache[name] for name in names], dim=1)


def matching_scores(
    model: HookedEncoderDecoder, tasks: Sequence[Task] | None = None, batch_size: int = 128
) -> MatchingScores:
    """Score every encoder head on ``tasks`` (default `matching_tasks`), ``batch_size`` at a time, in eval mode (no
    dropout; the model's mode is restored). Raises ValueError for no tasks or a ``batch_size`` below 1."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1 (tasks scored at a time), got {batch_size}")
    with torch.no_grad(), eval_mode(model):
        tasks = list(tasks) if tasks is not None else matching_tasks()
        if not tasks:
            raise ValueError("matching_scores needs at least one task")
        cfg = model.cfg
        shape = (cfg.n_encoder_layers, cfg.n_heads)
        mass, baseline, count = torch.zeros(shape), 0.0, 0
        pair_mass = {(q, k): torch.zeros(shape) for q in QUERY_ROLES for k in _LETTER_ROLES if q != k}
        pair_count = dict.fromkeys(pair_mass, 0)
        for start in range(0, len(tasks), batch_size):
            batch = encode_tasks(tasks[start : start + batch_size], with_answers=False).to(model.device)
            pattern = _encoder_patterns(model, batch).float().cpu()
            src, roles = batch.src.cpu(), batch.roles.cpu()
            scored = torch.isin(roles, torch.tensor([ROLE_ID[r] for r in QUERY_ROLES]))
            partner = (
                (src[:, :, None] == src[:, None, :]) & (roles[:, :, None] != roles[:, None, :]) & scored[:, :, None]
            )
            pairs = {
                (q_role, k_role): partner
                & (roles == ROLE_ID[q_role])[:, :, None]
                & (roles == ROLE_ID[k_role])[:, None, :]
                for q_role, k_role in pair_mass
            }
            summed = _summed_mass(pattern, torch.stack([partner, *pairs.values()], dim=1))
            mass += summed[0]
            baseline += float((partner.sum(-1) / (src != PAD).sum(-1, keepdim=True)).sum())
            count += int(partner.any(-1).sum())
            for (key, pair), pair_summed in zip(pairs.items(), summed[1:]):
                pair_mass[key] += pair_summed
                pair_count[key] += int(pair.any(-1).sum())
        by_roles = {key: pair_mass[key] / pair_count[key] for key in pair_mass if pair_count[key]}
        return MatchingScores(mass / count, baseline / count, by_roles, count)


def _summed_mass(
    pattern: Float[Tensor, "batch layer head q k"], keys: Bool[Tensor, "batch mask q k"]
) -> Float[Tensor, "mask layer head"]:
    """Attention on each mask's ``keys``, summed over the batch and the query positions (rows without keys add 0), in
    one batched product that reads ``pattern`` once."""
    batch, layers, heads, q_len, k_len = pattern.shape
    flat = pattern.reshape(batch, layers * heads, q_len * k_len).transpose(1, 2)
    return torch.bmm(keys.flatten(2).to(pattern.dtype), flat).sum(0).view(-1, layers, heads)


def detect_matching_heads(
    model: HookedEncoderDecoder, threshold: float = MATCHING_THRESHOLD, tasks: Sequence[Task] | None = None
) -> list[Head]:
    """Encoder heads whose matching score reaches ``threshold``, best first (possibly empty)."""
    return matching_scores(model, tasks).heads(threshold)


def matching_head(
    model: HookedEncoderDecoder, threshold: float = MATCHING_THRESHOLD, tasks: Sequence[Task] | None = None
) -> Head:
    """The best matching head. Raises ValueError when no head reaches ``threshold`` (naming the best one)."""
    return matching_heads(model, threshold, tasks)[0]


def matching_heads(
    model: HookedEncoderDecoder, threshold: float = MATCHING_THRESHOLD, tasks: Sequence[Task] | None = None
) -> list[Head]:
    """Every matching head, best first. Raises ValueError when no head reaches ``threshold`` (naming the best)."""
    scores = matching_scores(model, tasks)
    found = scores.heads(threshold)
    if not found:
        head, score = scores.best()
        raise ValueError(
            f"no matching head: no encoder head reaches the matching score threshold {threshold} "
            f"(best: {head.label} with {score:.3f}); pass a head explicitly"
        )
    return found


def control_head(score: Float[Tensor, "layer head"], head: Head) -> Head:
    """The control for ``head`` in patching: the head of the same encoder layer with the lowest matching score."""
    return Head("encoder", head.layer, int(score[head.layer].argmin()))


def example_pattern(
    model: HookedEncoderDecoder, head: Head, rule: str = "pred", n: int = 20, length: int = 5, seed: int = 0
) -> Float[Tensor, "out_pos in_pos"]:
    """``head``'s attention from example-output letters (rows) to example-input letters (columns), averaged
    over ``n`` tasks of ``rule`` with windows of ``length`` letters on permuted alphabets (the tasks whose
    example has the most common shape). Raises ValueError for an unknown rule or a non-encoder head."""
    if head.stack != "encoder" or head.attn != "attn":
        raise ValueError(f"{head.label} is not an encoder self-attention head")
    tasks = rule_tasks(rule, n, seed=seed, alphabets="permuted", lengths=(length,))
    batch = encode_tasks(tasks, with_answers=False).to(model.device)
    pattern = _encoder_patterns(model, batch)[:, head.layer, head.head].cpu()
    roles = batch.roles.cpu()
    blocks: dict[tuple[int, int], list[Tensor]] = {}
    for row, matrix in zip(roles, pattern):
        outs, ins = (row == ROLE_ID["example_out"]).nonzero()[:, 0], (row == ROLE_ID["example_in"]).nonzero()[:, 0]
        blocks.setdefault((len(outs), len(ins)), []).append(matrix[outs][:, ins])
    return torch.stack(max(blocks.values(), key=len)).mean(0)


def matching_analysis(
    model: HookedEncoderDecoder,
    model_name: str,
    threshold: float = MATCHING_THRESHOLD,
    rule: str = "pred",
    tasks: Sequence[Task] | None = None,
) -> AnalysisResult:
    """Scores of every encoder head (heat map), the detected heads, and the best head's average
    example-output x example-input pattern on ``rule`` tasks."""
    scores = matching_scores(model, tasks)
    found = scores.heads(threshold)
    best, best_score = scores.best()
    shown = found[0] if found else best
    block = example_pattern(model, shown, rule)
    figures = {
        "matching score per encoder head": head_heatmap(scores.score, f"matching score (threshold {threshold})"),
        f"head {shown.label}: example-out -> example-in ({rule})": _pattern_figure(block),
    }
    labels_found = ", ".join(h.label for h in found) or "none"
    return AnalysisResult(
        name="matching_heads",
        model=model_name,
        summary={
            "matching_heads": labels_found,
            "best_head": best.label,
            "best_score": best_score,
            "baseline": scores.baseline,
            "threshold": threshold,
            "letters_scored": scores.n_letters,
        },
        data={
            "score": scores.score,
            "mass": scores.mass,
            "baseline": scores.baseline,
            "by_roles": {f"{q}->{k}": v for (q, k), v in scores.by_roles.items()},
            "example_pattern": {"head": shown.label, "rule": rule, "matrix": block},
        },
        figures=figures,
        findings=[
            Finding(
                "matching head",
                "one encoder head (2.7) matches each letter to the same letter in another role",
                f"{labels_found} (best {best.label}: {best_score:.2f} above uniform)",
                bool(found),
                f"holds when some head scores >= {threshold} above uniform",
                best_score,
            )
        ],
    )


def write_matching_json(model: HookedEncoderDecoder, model_name: str, out_dir: str | Path) -> Path:
    """Run `matching_analysis` (default tasks and threshold, as a sweep's ``matching``) and write its JSON alone,
    ``matching_heads.json``, into ``out_dir`` (a shipped checkpoint's folder: no page). Returns its path."""
    result = matching_analysis(model, model_name)
    return dataclasses.replace(result, figures={}).write(out_dir)["json"]


def expand_checkpoints(pattern: str) -> list[Path]:
    """Checkpoint directories matched by a glob ``pattern``, relative to the working directory or else to the shipped
    checkpoints (``copy-200``, ``'replicates/copy-20-*'``, ``'checkpoints/*'`` from anywhere): a training run
    directory stands for its ``model/`` or every ``replicate-*/model``. Raises ValueError for an empty ``pattern``
    (it would match the checkpoints folder itself) and when nothing matches."""
    if not pattern.strip():
        raise ValueError("an empty checkpoint pattern; give a shipped name, a directory or a glob like 'replicates/*'")
    found: list[Path] = []
    roots = ("", str(CHECKPOINTS_DIR), str(CHECKPOINTS_DIR.parent))
    matches = next((m for root in roots if (m := sorted(glob.glob(os.path.join(root, pattern))))), [])
    for match in matches:
        path = Path(match)
        if (path / "model").is_dir():
            found.append(path / "model")
        elif replicates := sorted(path.glob("replicate-*/model")):
            found.extend(replicates)
        else:
            found.append(path)
    if not found:
        raise ValueError(f"no checkpoint matches {pattern!r}")
    return found


def matching_occurrence(
    groups: Mapping[str, Sequence[str | Path | HookedEncoderDecoder]],
    threshold: float = MATCHING_THRESHOLD,
    tasks: Sequence[Task] | None = None,
) -> AnalysisResult:
    """Which checkpoints of each group have a matching head (paper: 20/20 copy runs, 5/20 no-copy runs).

    ``groups`` maps a group name to checkpoints (paths or loaded models). Raises ValueError for an empty group
    and what `load_model` raises for a checkpoint that cannot be loaded: FileNotFoundError for a missing one,
    ValueError for a broken or foreign one.
    """
    import plotly.graph_objects as go

    tasks = list(tasks) if tasks is not None else matching_tasks()
    table: dict[str, list[dict]] = {}
    for group, members in groups.items():
        if not members:
            raise ValueError(f"group {group!r} has no checkpoints")
        rows = []
        for index, member in enumerate(members):
            model = member if isinstance(member, HookedEncoderDecoder) else load_model(member)
            scores = matching_scores(model, tasks)
            best, best_score = scores.best()
            found = scores.heads(threshold)
            name = str(member) if not isinstance(member, HookedEncoderDecoder) else f"{group}[{index}]"
            rows.append(
                {
                    "model": name,
                    "has_matching_head": bool(found),
                    "heads": [h.label for h in found],
                    "best_head": best.label,
                    "best_score": best_score,
                }
            )
        table[group] = rows
    rates = {group: sum(r["has_matching_head"] for r in rows) / len(rows) for group, rows in table.items()}
    summary = {f"{group}": f"{sum(r['has_matching_head'] for r in rows)}/{len(rows)}" for group, rows in table.items()}
    holds = rates["copy"] > rates["nocopy"] if {"copy", "nocopy"} <= set(rates) else None
    return AnalysisResult(
        name="matching_occurrence",
        model=", ".join(table),
        summary={**summary, "threshold": threshold},
        data={"runs": table, "rates": rates},
        figures={
            "runs with a matching head": go.Figure(  # pragma: no mutate
                go.Bar(x=list(rates), y=list(rates.values())),  # pragma: no mutate
                layout={"yaxis": {"title": "fraction of runs", "range": [0, 1]}},  # pragma: no mutate
            )
        },
        findings=[
            Finding(
                "matching-head occurrence",
                "20/20 copy runs vs 5/20 no-copy runs (20 alphabets)",
                ", ".join(f"{group} {value}" for group, value in summary.items()),
                holds,
            )
        ],
    )


def head_heatmap(
    values: Float[Tensor, "layer head"], title: str, zmin: float | None = None, zmax: float | None = None
):  # pragma: no mutate block
    """A plotly heat map of one number per encoder head, labelled 1-based as in the paper (layer rows)."""
    import plotly.graph_objects as go

    n_layers, n_heads = values.shape
    return go.Figure(
        go.Heatmap(
            z=values.tolist(),
            x=[f"head {h + 1}" for h in range(n_heads)],
            y=[f"layer {layer + 1}" for layer in range(n_layers)],
            colorscale="Viridis",
            zmin=zmin,
            zmax=zmax,
            colorbar={"title": title},
            texttemplate="%{z:.2f}",
        ),
        layout={"yaxis": {"autorange": "reversed"}, "title": title},
    )


def _pattern_figure(block: Float[Tensor, "out_pos in_pos"]):  # pragma: no mutate block
    import plotly.graph_objects as go

    return go.Figure(
        go.Heatmap(
            z=block.tolist(),
            x=[f"in {i + 1}" for i in range(block.shape[1])],
            y=[f"out {i + 1}" for i in range(block.shape[0])],
            colorscale="Blues",
            zmin=0,
            texttemplate="%{z:.2f}",
        ),
        layout={
            "yaxis": {"autorange": "reversed", "title": "example-output letter"},
            "xaxis": {"title": "example-input letter"},
        },
    )
