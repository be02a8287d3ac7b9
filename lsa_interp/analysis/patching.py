"""Attention-pattern patching between two transformations on minimal pairs.

A minimal pair shares the alphabet, the example input and the query; only the example output follows a
different rule (`lsa_interp.analysis.prompts.minimal_pairs`), so both prompts have the same token layout.
We run the *target* prompts with one encoder head's attention pattern replaced by the pattern the same
head has on the *source* prompts, decode greedily, and count the answers that become the source rule's
answer (a flip), stay the target's, or are neither. The logit difference is taken at the first decoder
step: logit of the source answer's first letter minus the target answer's first letter (pairs whose
answers start with the same letter get NaN).

Two engines compute the same thing: ``"hooks"`` (TransformerLens hooks on ``encoder.{l}.attn.hook_pattern``
around the model's KV-cached ``generate``; the encoder runs once, so patching its pattern there is
enough) and ``"nnsight"`` (nnsight 0.8 tracing ``generate`` of a copy of the model). In both, every
encoder layer runs its explicit (hooked) attention, so clean and patched runs and both engines execute the
same floating-point operations.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.analysis.activations import eval_mode
from lsa_interp.analysis.pair_batch import PairBatch, pair_batch
from lsa_interp.analysis.pattern_patches import Engine, LayerPatches, check_engine, replace_heads
from lsa_interp.analysis.prompts import MinimalPair, minimal_pairs
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.tokenizer import TokenBatch, decode_batch
from lsa_interp.data.vocab import ARROW, LETTERS
from lsa_interp.model.heads import Head, all_heads, parse_head
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS, HookedEncoderDecoder
from lsa_interp.utils import check_type

OUTCOMES: tuple[str, ...] = ("source", "target", "neither")
PAPER_LENGTHS = (3,)
"""Window lengths of the paper's minimal pairs (``ghi > fhi`` vs ``ghi > ghj``): equal length, no padding."""
FLIP_THRESHOLD = 0.05 ** (1 / 10)
"""The paper saw 10/10 predecessor outputs switch to the successor answer. A flip rate p is consistent with
that (10/10 has a chance of at least 5 %) when p**10 >= 0.05, i.e. p >= 0.741: the finding holds from there."""
_PAPER = "patching head 2.7 with successor patterns: 10/10 predecessor outputs switch to the successor answer"

Patterns = Mapping[Head, Float[Tensor, "batch q_pos k_pos"]]


def check_heads(model: HookedEncoderDecoder, heads: Sequence[Head]) -> None:
    """Raise ValueError unless every head is an encoder self-attention head of ``model``, each named once."""
    cfg = model.cfg
    twice = sorted({head.label for head in heads if heads.count(head) > 1})
    if twice:
        raise ValueError(f"head {', '.join(twice)} named more than once; name each head once (e.g. 1.3+2.3)")
    for head in heads:
        if (head.stack, head.attn) != ("encoder", "attn"):
            raise ValueError(f"head {head.label} is not an encoder self-attention head; only those can be patched")
        if not (0 <= head.layer < cfg.n_encoder_layers and 0 <= head.head < cfg.n_heads):
            raise ValueError(
                f"no head {head.label} in this model: layers 1..{cfg.n_encoder_layers}, heads 1..{cfg.n_heads}"
            )


def resolve_heads(model: HookedEncoderDecoder, spec: Head | str | Sequence[Head]) -> list[Head]:
    """Heads named by ``spec``: a `Head`, a list of them, a 1-based label (``"2.7"``), labels joined by ``+``
    (``"1.3+2.3"``), ``"auto"`` (every detected matching head, best first) or ``"all"`` (every encoder head).
    Raises ValueError for anything else or when no matching head is detected."""
    if isinstance(spec, Head):
        heads = [spec]
    elif isinstance(spec, str):
        text = spec.strip().lower()
        if text == "all":
            heads = all_heads(model.cfg)
        elif text == "auto":
            from lsa_interp.analysis.matching import matching_heads

            heads = matching_heads(model)
        else:
            heads = [parse_head(label, model.cfg) for label in text.split("+")]
    else:
        check_type(
            spec,
            (list, tuple),
            "heads are a Head, a label such as '2.7' or '1.3+2.3', 'auto', 'all' or a list of Heads",
        )
        heads = list(spec)
        if not heads or not all(isinstance(h, Head) for h in heads):
            raise ValueError("give a head label, 'auto', 'all' or a non-empty list of Head objects")
    check_heads(model, heads)
    return heads


def make_engine(model: HookedEncoderDecoder, engine: str, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> Engine:
    """The engine named ``engine`` for ``model``. Raises ValueError for an unknown name."""
    check_engine(engine)
    if engine == "nnsight":
        from lsa_interp.analysis.nnsight_engine import NNsightEngine

        return NNsightEngine(model, max_new_tokens)
    return HookEngine(model, max_new_tokens)


class HookEngine:
    """Patching with TransformerLens hooks on the model itself (see `Engine`)."""

    def __init__(self, model: HookedEncoderDecoder, max_new_tokens: int) -> None:
        self.model, self.max_new_tokens = model, max_new_tokens

    def patterns(self, batch: TokenBatch, layers: Sequence[int]) -> dict[int, Tensor]:
        """The encoder patterns of ``layers`` on ``batch`` (``[batch, head, q_pos, k_pos]`` each)."""
        with torch.no_grad():
            # Every encoder layer is hooked (as in `generate`), so all of them run the same explicit attention.
            names = [f"encoder.{layer}.attn.hook_pattern" for layer in range(self.model.cfg.n_encoder_layers)]
            _, cache = self.model.run_with_cache(batch, names_filter=names)
            return {layer: cache[names[layer]] for layer in layers}

    def generate(self, batch: TokenBatch, patches: LayerPatches) -> tuple[Tensor, Tensor]:
        """Greedy tokens and encoder output of ``batch`` with ``patches`` applied during the encoder pass."""
        with torch.no_grad():
            memory: list[Tensor] = []
            hooks = [
                (f"encoder.{layer}.attn.hook_pattern", functools.partial(_patch_hook, entries=patches.get(layer, [])))
                for layer in range(self.model.cfg.n_encoder_layers)
            ]
            hooks.append(("encoder.ln_final.hook_out", lambda x, hook: memory.append(x)))
            with self.model.hooks(fwd_hooks=hooks):
                tokens = self.model.generate(batch, max_new_tokens=self.max_new_tokens)
            return tokens, memory[0]


def _patch_hook(pattern: Tensor, hook, entries: list[tuple[int, Tensor]]) -> Tensor:
    return replace_heads(pattern, entries)


def patched_generate(
    model: HookedEncoderDecoder,
    batch: TokenBatch,
    patterns: Patterns,
    engine: str = "hooks",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> tuple[Int[Tensor, "batch n"], Float[Tensor, "batch vocab"]]:
    """Greedy-decode ``batch`` with the attention pattern of each head in ``patterns`` replaced; return the
    tokens (EOS included, PAD after it) and the first decoder step's logits. An empty mapping is the clean run.

    Raises ValueError for an unknown engine, a head that is not an encoder self-attention head of the model,
    or a pattern whose shape is not ``[batch, src_pos, src_pos]`` of ``batch``.
    """
    with torch.no_grad():
        check_heads(model, list(patterns))
        expected = (len(batch), batch.src.shape[1], batch.src.shape[1])
        by_layer: LayerPatches = {}
        for head, pattern in patterns.items():
            if tuple(pattern.shape) != expected:
                raise ValueError(
                    f"the pattern for head {head.label} has shape {tuple(pattern.shape)}, expected {expected}"
                )
            by_layer.setdefault(head.layer, []).append((head.head, pattern.to(model.device, model.pos_embedding.dtype)))
        batch = batch.to(model.device)
        tokens, memory = make_engine(model, engine, max_new_tokens).generate(batch, by_layer)
        return tokens, _first_step_logits(model, memory, batch)


def _first_step_logits(model: HookedEncoderDecoder, memory: Tensor, batch: TokenBatch) -> Tensor:
    start = torch.full((len(batch), 1), ARROW, dtype=torch.long, device=memory.device)
    return model.decode(start, memory, batch.src_pad_mask)[:, 0]


@dataclass(frozen=True)
class PatchResult:
    """Answers and first-step logit differences of the target prompts, clean and with ``heads`` patched
    (together, in one run)."""

    heads: tuple[Head, ...]
    source_answers: list[str]
    target_answers: list[str]
    clean: list[str]
    patched: list[str]
    logit_diff_clean: Float[Tensor, " pair"]
    logit_diff_patched: Float[Tensor, " pair"]

    @property
    def label(self) -> str:
        """The patched heads' labels joined by ``+`` (``"2.7"``, ``"1.3+2.3"``)."""
        return "+".join(head.label for head in self.heads)

    @staticmethod
    def _fractions(answers: list[str], source: list[str], target: list[str]) -> dict[str, float]:
        kinds = ["source" if a == s else "target" if a == t else "neither" for a, s, t in zip(answers, source, target)]
        return {kind: kinds.count(kind) / len(kinds) for kind in OUTCOMES}

    @property
    def outcomes(self) -> dict[str, float]:
        """Fractions of patched answers equal to the source answer, the target answer, or neither."""
        return self._fractions(self.patched, self.source_answers, self.target_answers)

    @property
    def clean_outcomes(self) -> dict[str, float]:
        """The same fractions for the clean (unpatched) answers."""
        return self._fractions(self.clean, self.source_answers, self.target_answers)

    @property
    def solved(self) -> int:
        """Pairs whose clean answer is the target rule's answer."""
        return sum(c == t for c, t in zip(self.clean, self.target_answers))

    @property
    def switched(self) -> int:
        """Solved pairs whose patched answer is the source rule's answer."""
        pairs = zip(self.clean, self.patched, self.source_answers, self.target_answers)
        return sum(c == t and a == s for c, a, s, t in pairs)

    @property
    def flip_rate(self) -> float:
        """Fraction of the solved pairs that switch to the source rule's answer (0 when none is solved): an answer
        that was the source's before patching did not switch."""
        return self.switched / self.solved if self.solved else 0.0

    def summary(self) -> dict[str, float | int | str]:
        """Headline numbers (rates, mean logit differences over pairs whose first letters differ)."""
        clean, patched = self.clean_outcomes, self.outcomes
        valid = ~torch.isnan(self.logit_diff_clean)
        return {
            "head": self.label,
            "pairs": len(self.clean),
            "clean_target_accuracy": clean["target"],
            "clean_source_rate": clean["source"],
            "flip_rate": self.flip_rate,
            "switched": self.switched,
            "solved": self.solved,
            "patched_source_rate": patched["source"],
            "stay_rate": patched["target"],
            "neither_rate": patched["neither"],
            "logit_diff_clean": float(self.logit_diff_clean[valid].mean()) if valid.any() else float("nan"),
            "logit_diff_patched": float(self.logit_diff_patched[valid].mean()) if valid.any() else float("nan"),
            "logit_diff_pairs": int(valid.sum()),
        }


def _logit_diff(logits: Tensor, pairs: PairBatch) -> Tensor:
    source = torch.tensor([LETTERS.index(a[0]) for a in pairs.source_answers])
    target = torch.tensor([LETTERS.index(a[0]) for a in pairs.target_answers])
    rows = torch.arange(len(source))
    diff = logits.float().cpu()[rows, source] - logits.float().cpu()[rows, target]
    return diff.masked_fill(source == target, float("nan"))


def patch_sweep(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair] | PairBatch,
    heads: Head | str | Sequence[Head] = "all",
    engine: str = "hooks",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> dict[Head, PatchResult]:
    """Patch each head of ``heads`` on its own (see `resolve_heads`): one clean run, the source patterns read
    once, then one batched encode + KV-cached greedy decode of all pairs per head. Raises ValueError for bad
    pairs, heads or engine."""
    with torch.no_grad(), eval_mode(model):
        batch = pairs if isinstance(pairs, PairBatch) else pair_batch(pairs)
        chosen = resolve_heads(model, heads)
        runner = make_engine(model, engine, max_new_tokens)
        patterns = runner.patterns(batch.source.to(model.device), sorted({h.layer for h in chosen}))
        target = batch.target.to(model.device)
        clean_tokens, clean_memory = runner.generate(target, {})
        clean = decode_batch(clean_tokens)
        clean_diff = _logit_diff(_first_step_logits(model, clean_memory, target), batch)
        results = {}
        for head in chosen:
            tokens, memory = runner.generate(target, {head.layer: [(head.head, patterns[head.layer][:, head.head])]})
            results[head] = PatchResult(
                (head,),
                batch.source_answers,
                batch.target_answers,
                clean,
                decode_batch(tokens),
                clean_diff,
                _logit_diff(_first_step_logits(model, memory, target), batch),
            )
        return results


def patch_pairs(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair] | PairBatch,
    head: Head | str | Sequence[Head] = "auto",
    engine: str = "hooks",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> PatchResult:
    """Patch the named heads together, in one run, on ``pairs`` (a `Head`, a list, a label such as ``"2.7"`` or
    ``"1.3+2.3"``, or ``"auto"``: every detected matching head). Raises ValueError for ``"all"`` (use
    `patch_sweep`), bad pairs, heads or engine."""
    with torch.no_grad(), eval_mode(model):
        if isinstance(head, str) and head.strip().lower() == "all":
            raise ValueError("patch_pairs patches the heads it is given together; use patch_sweep for every head")
        heads = resolve_heads(model, head)
        batch = pairs if isinstance(pairs, PairBatch) else pair_batch(pairs)
        runner = make_engine(model, engine, max_new_tokens)
        patterns = runner.patterns(batch.source.to(model.device), sorted({h.layer for h in heads}))
        target = batch.target.to(model.device)
        clean_tokens, clean_memory = runner.generate(target, {})
        patches: LayerPatches = {}
        for h in heads:
            patches.setdefault(h.layer, []).append((h.head, patterns[h.layer][:, h.head]))
        tokens, memory = runner.generate(target, patches)
        return PatchResult(
            tuple(heads),
            batch.source_answers,
            batch.target_answers,
            decode_batch(clean_tokens),
            decode_batch(tokens),
            _logit_diff(_first_step_logits(model, clean_memory, target), batch),
            _logit_diff(_first_step_logits(model, memory, target), batch),
        )


def flip_matrix(model: HookedEncoderDecoder, results: Mapping[Head, PatchResult]) -> Float[Tensor, "layer head"]:
    """Flip rate per encoder head as a ``[layer, head]`` grid (NaN for heads not in ``results``)."""
    grid = torch.full((model.cfg.n_encoder_layers, model.cfg.n_heads), float("nan"))
    for head, result in results.items():
        grid[head.layer, head.head] = result.flip_rate
    return grid


def patching_analysis(
    model: HookedEncoderDecoder,
    model_name: str,
    source: str = "succ",
    target: str = "pred",
    head: Head | str = "auto",
    n_pairs: int = 200,
    seed: int = 0,
    engine: str = "hooks",
    alphabets: str | Sequence[str] = "standard",
    lengths: Sequence[int] = PAPER_LENGTHS,
) -> AnalysisResult:
    """Patch ``head`` (or every head with ``"all"``) from ``source`` into ``target`` prompts on ``n_pairs``
    minimal pairs of windows of ``lengths`` letters (default 3: the paper's padding-free pairs). Raises
    ValueError for unknown rules or heads, no minimal pairs, or no matching head."""
    pairs = minimal_pairs(source, target, n_pairs, seed=seed, alphabets=alphabets, lengths=lengths)
    sweep = isinstance(head, str) and head.strip().lower() == "all"
    if sweep:
        results = patch_sweep(model, pairs, head, engine)
        best = max(results, key=lambda h: results[h].flip_rate)
        top = results[best]
    else:
        top = patch_pairs(model, pairs, head, engine)
    summary = {"source": source, "target": target, "engine": engine, **top.summary()}
    figures = {f"head {top.label}: answers of {target} prompts": _outcome_figure(top, source, target)}
    data: dict = {
        "pairs": [
            {
                "source": str(p.source),
                "target": str(p.target),
                "clean": c,
                "patched": a,
                "logit_diff_clean": float(dc),
                "logit_diff_patched": float(dp),
            }
            for p, c, a, dc, dp in zip(pairs, top.clean, top.patched, top.logit_diff_clean, top.logit_diff_patched)
        ]
    }
    if sweep:
        from lsa_interp.analysis.matching import head_heatmap

        grid = flip_matrix(model, results)
        heatmap = head_heatmap(grid, "flip rate", 0.0, 1.0)  # pragma: no mutate
        figures = {f"flip rate per head ({source} -> {target})": heatmap, **figures}
        data["flip_rate"] = grid
        data["heads"] = {h.label: r.summary() for h, r in results.items()}
        summary["best_head"] = top.label
    solved = top.clean_outcomes["target"]
    which = f"head{'s' if len(top.heads) > 1 else ''} {top.label}"
    ours = (
        f"{top.flip_rate:.0%} of {top.solved} solved {target} prompts switch to the {source} answer ({which}; "
        f"clean {target} accuracy {solved:.0%} of {len(pairs)})"
    )
    holds = top.flip_rate >= FLIP_THRESHOLD if solved >= 0.5 else None  # no verdict if the model fails the target
    return AnalysisResult(
        name="patching",
        model=model_name,
        summary=summary,
        data=data,
        figures=figures,
        findings=[
            Finding(
                f"attention-pattern patching{' (best single head)' if sweep else ''}",
                _PAPER,
                ours,
                holds,
                f"holds when >= {FLIP_THRESHOLD:.0%} of the solved prompts flip (10/10 is then at least 5 % likely)",
                top.flip_rate,
            )
        ],
    )


def _outcome_figure(result: PatchResult, source: str, target: str):  # pragma: no mutate block
    import plotly.graph_objects as go

    names = {"source": f"{source} answer", "target": f"{target} answer", "neither": "neither"}
    return go.Figure(
        [
            go.Bar(name=run, x=[names[k] for k in OUTCOMES], y=[values[k] for k in OUTCOMES])
            for run, values in (("clean", result.clean_outcomes), ("patched", result.outcomes))
        ],
        layout={"barmode": "group", "yaxis": {"title": "fraction of pairs", "range": [0, 1]}},
    )
