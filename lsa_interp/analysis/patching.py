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

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.analysis.types import Head, all_heads, parse_head
from lsa_interp.data.tokenizer import TokenBatch, decode_batch, encode_tasks
from lsa_interp.data.vocab import ARROW, LETTERS, ROLE_ID
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS, HookedEncoderDecoder

ENGINES: tuple[str, ...] = ("hooks", "nnsight")
OUTCOMES: tuple[str, ...] = ("source", "target", "neither")

Patterns = Mapping[Head, Float[Tensor, "batch q_pos k_pos"]]
_Runner = Callable[[TokenBatch, dict[int, list[tuple[int, Tensor]]]], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class PairBatch:
    """The source and target prompts of minimal pairs, tokenized with the same layout, and their answers."""

    source: TokenBatch
    target: TokenBatch
    source_answers: list[str]
    target_answers: list[str]

    def __len__(self) -> int:
        return len(self.source)


def pair_batch(pairs: Sequence[MinimalPair]) -> PairBatch:
    """Tokenize ``pairs``. Raises ValueError for no pairs, answers that are missing or equal, or a pair whose
    prompts do not have the same token layout (patterns can only be swapped between aligned prompts)."""
    if not pairs:
        raise ValueError("patching needs at least one minimal pair")
    for index, pair in enumerate(pairs):
        if not pair.source_answer or not pair.target_answer:
            raise ValueError(f"pair {index} lacks an answer; both tasks of a minimal pair need one")
        if pair.source_answer == pair.target_answer:
            raise ValueError(f"pair {index}: source and target answers are both {pair.source_answer!r}")
    source = encode_tasks([p.source for p in pairs], with_answers=False)
    target = encode_tasks([p.target for p in pairs], with_answers=False)
    width = max(source.roles.shape[1], target.roles.shape[1])
    pad = lambda roles: torch.nn.functional.pad(roles, (0, width - roles.shape[1]), value=ROLE_ID["pad"])  # noqa: E731
    bad = (pad(source.roles) != pad(target.roles)).any(1).nonzero()
    if len(bad):
        index = int(bad[0])
        raise ValueError(
            f"pair {index}: source and target prompts have different token layouts "
            f"({pairs[index].source} vs {pairs[index].target}); patterns can only be patched between aligned prompts"
        )
    return PairBatch(source, target, [p.source_answer for p in pairs], [p.target_answer for p in pairs])


def check_heads(model: HookedEncoderDecoder, heads: Sequence[Head]) -> None:
    """Raise ValueError unless every head is an encoder self-attention head of ``model``."""
    cfg = model.cfg
    for head in heads:
        if (head.stack, head.attn) != ("encoder", "attn"):
            raise ValueError(f"head {head.label} is not an encoder self-attention head; only those can be patched")
        if not (0 <= head.layer < cfg.n_encoder_layers and 0 <= head.head < cfg.n_heads):
            raise ValueError(
                f"no head {head.label} in this model: layers 1..{cfg.n_encoder_layers}, heads 1..{cfg.n_heads}"
            )


def resolve_heads(model: HookedEncoderDecoder, spec: Head | str | Sequence[Head]) -> list[Head]:
    """Heads named by ``spec``: a `Head`, a list of them, a 1-based label (``"2.7"``), ``"auto"`` (the detected
    matching head) or ``"all"`` (every encoder head). Raises ValueError for anything else or no matching head."""
    if isinstance(spec, Head):
        heads = [spec]
    elif isinstance(spec, str):
        text = spec.strip().lower()
        if text == "all":
            heads = all_heads(model.cfg)
        elif text == "auto":
            from lsa_interp.analysis.matching import matching_head

            heads = [matching_head(model)]
        else:
            heads = [parse_head(text, model.cfg)]
    else:
        heads = list(spec)
        if not heads or not all(isinstance(h, Head) for h in heads):
            raise ValueError("give a head label, 'auto', 'all' or a non-empty list of Head objects")
    check_heads(model, heads)
    return heads


@torch.no_grad()
def source_patterns(
    model: HookedEncoderDecoder, batch: TokenBatch, layers: Sequence[int], engine: str = "hooks"
) -> dict[int, Float[Tensor, "batch head q_pos k_pos"]]:
    """Encoder attention patterns of ``layers`` on ``batch`` (read with ``engine``)."""
    if engine == "nnsight":
        return _nnsight(model).patterns(batch, layers)
    _, cache = model.run_with_cache(batch, names_filter=[f"encoder.{layer}.attn.hook_pattern" for layer in layers])
    return {layer: cache[f"encoder.{layer}.attn.hook_pattern"] for layer in layers}


def _check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def _hook_runner(model: HookedEncoderDecoder, max_new_tokens: int) -> _Runner:
    def run(batch: TokenBatch, by_layer: dict[int, list[tuple[int, Tensor]]]) -> tuple[Tensor, Tensor]:
        memory: list[Tensor] = []

        def patch(entries: list[tuple[int, Tensor]]):
            def hook(pattern: Tensor, hook) -> Tensor:
                if not entries:
                    return pattern
                patched = pattern.clone()
                for head, replacement in entries:
                    patched[:, head] = replacement
                return patched

            return hook

        hooks = [(f"encoder.{layer}.attn.hook_pattern", patch(by_layer.get(layer, [])))
                 for layer in range(model.cfg.n_encoder_layers)]
        hooks.append(("encoder.ln_final.hook_out", lambda x, hook: memory.append(x)))
        with model.hooks(fwd_hooks=hooks):
            tokens = model.generate(batch, max_new_tokens=max_new_tokens)
        return tokens, memory[0]

    return run


class _NNsightRunner:
    """nnsight 0.8 tracing ``generate`` of a deep copy of the model (nnsight instruments every module it
    wraps for good, which would switch the caller's model off its fused attention path)."""

    def __init__(self, model: HookedEncoderDecoder) -> None:
        from nnsight import NNsight

        self.wrapped = NNsight(copy.deepcopy(model))

    def _pattern_envoy(self, layer: int):
        return getattr(self.wrapped.encoder, str(layer)).attn.hook_pattern

    def patterns(self, batch: TokenBatch, layers: Sequence[int]) -> dict[int, Tensor]:
        saved: dict[int, Tensor] = {}
        with self.wrapped.trace(batch):
            for layer in sorted(layers):  # nnsight needs modules requested in execution order
                saved[layer] = self._pattern_envoy(layer).output.save()
        return saved

    def runner(self, max_new_tokens: int) -> _Runner:
        def run(batch: TokenBatch, by_layer: dict[int, list[tuple[int, Tensor]]]) -> tuple[Tensor, Tensor]:
            with self.wrapped.trace(batch, fn="generate", max_new_tokens=max_new_tokens) as tracer:
                for layer in sorted(by_layer):  # nnsight needs modules requested in execution order
                    envoy = self._pattern_envoy(layer)
                    patched = envoy.output.clone()
                    for head, replacement in by_layer[layer]:
                        patched[:, head] = replacement
                    envoy.output = patched
                memory = self.wrapped.encoder.ln_final.hook_out.output.save()
                tokens = tracer.result.save()
            return tokens, memory

        return run


_NNSIGHT_CACHE: dict[int, tuple[HookedEncoderDecoder, _NNsightRunner]] = {}


def _nnsight(model: HookedEncoderDecoder) -> _NNsightRunner:
    """The nnsight wrapper of ``model``'s copy, reused while ``model`` is the last model seen."""
    cached = _NNSIGHT_CACHE.get(id(model))
    if cached is None or cached[0] is not model:
        _NNSIGHT_CACHE.clear()
        _NNSIGHT_CACHE[id(model)] = cached = (model, _NNsightRunner(model))
    return cached[1]


def _runner(model: HookedEncoderDecoder, engine: str, max_new_tokens: int) -> _Runner:
    _check_engine(engine)
    if engine == "nnsight":
        return _nnsight(model).runner(max_new_tokens)
    return _hook_runner(model, max_new_tokens)


@torch.no_grad()
def patched_generate(
    model: HookedEncoderDecoder, batch: TokenBatch, patterns: Patterns, engine: str = "hooks",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> tuple[Int[Tensor, "batch n"], Float[Tensor, "batch vocab"]]:
    """Greedy-decode ``batch`` with the attention pattern of each head in ``patterns`` replaced; return the
    tokens (EOS included, PAD after it) and the first decoder step's logits. An empty mapping is the clean run.

    Raises ValueError for an unknown engine, a head that is not an encoder self-attention head of the model,
    or a pattern whose shape is not ``[batch, src_pos, src_pos]`` of ``batch``.
    """
    check_heads(model, list(patterns))
    expected = (len(batch), batch.src.shape[1], batch.src.shape[1])
    by_layer: dict[int, list[tuple[int, Tensor]]] = {}
    for head, pattern in patterns.items():
        if tuple(pattern.shape) != expected:
            raise ValueError(f"the pattern for head {head.label} has shape {tuple(pattern.shape)}, expected {expected}")
        by_layer.setdefault(head.layer, []).append((head.head, pattern.to(model.device, model.pos_embedding.dtype)))
    batch = batch.to(model.device)
    tokens, memory = _runner(model, engine, max_new_tokens)(batch, by_layer)
    return tokens, _first_step_logits(model, memory, batch)


def _first_step_logits(model: HookedEncoderDecoder, memory: Tensor, batch: TokenBatch) -> Tensor:
    start = torch.full((len(batch), 1), ARROW, dtype=torch.long, device=memory.device)
    return model.decode(start, memory, batch.src_pad_mask)[:, 0]


@dataclass(frozen=True)
class PatchResult:
    """Answers and first-step logit differences of the target prompts, clean and with ``heads`` patched."""

    heads: tuple[Head, ...]
    source_answers: list[str]
    target_answers: list[str]
    clean: list[str]
    patched: list[str]
    logit_diff_clean: Float[Tensor, " pair"]
    logit_diff_patched: Float[Tensor, " pair"]

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
    def flip_rate(self) -> float:
        """Fraction of pairs whose patched answer is the source rule's answer."""
        return self.outcomes["source"]

    def summary(self) -> dict[str, float | int | str]:
        """Headline numbers (rates, mean logit differences over pairs whose first letters differ)."""
        clean, patched = self.clean_outcomes, self.outcomes
        valid = ~torch.isnan(self.logit_diff_clean)
        return {
            "heads": ", ".join(h.label for h in self.heads), "pairs": len(self.clean),
            "clean_target_accuracy": clean["target"], "clean_source_rate": clean["source"],
            "flip_rate": patched["source"], "stay_rate": patched["target"], "neither_rate": patched["neither"],
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


@torch.no_grad()
def patch_sweep(
    model: HookedEncoderDecoder, pairs: Sequence[MinimalPair] | PairBatch, heads: Head | str | Sequence[Head] = "all",
    engine: str = "hooks", max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> dict[Head, PatchResult]:
    """Patch each head of ``heads`` on its own (see `resolve_heads`): one clean run, the source patterns read
    once, then one batched encode + KV-cached greedy decode of all pairs per head. Raises ValueError for bad
    pairs, heads or engine."""
    _check_engine(engine)
    batch = pairs if isinstance(pairs, PairBatch) else pair_batch(pairs)
    chosen = resolve_heads(model, heads)
    layers = sorted({h.layer for h in chosen})
    patterns = source_patterns(model, batch.source.to(model.device), layers, engine)
    run = _runner(model, engine, max_new_tokens)
    target = batch.target.to(model.device)
    clean_tokens, clean_memory = run(target, {})
    clean = decode_batch(clean_tokens)
    clean_diff = _logit_diff(_first_step_logits(model, clean_memory, target), batch)
    results = {}
    for head in chosen:
        tokens, memory = run(target, {head.layer: [(head.head, patterns[head.layer][:, head.head])]})
        results[head] = PatchResult(
            (head,), batch.source_answers, batch.target_answers, clean, decode_batch(tokens),
            clean_diff, _logit_diff(_first_step_logits(model, memory, target), batch),
        )
    return results


def patch_pairs(
    model: HookedEncoderDecoder, pairs: Sequence[MinimalPair] | PairBatch, head: Head | str = "auto",
    engine: str = "hooks", max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> PatchResult:
    """Patch one head (a `Head`, a 1-based label or ``"auto"``) on ``pairs``; see `patch_sweep`."""
    heads = resolve_heads(model, head)
    if len(heads) != 1:
        raise ValueError(f"patch_pairs patches one head, {len(heads)} were named; use patch_sweep for several")
    return patch_sweep(model, pairs, heads, engine, max_new_tokens)[heads[0]]


def flip_matrix(model: HookedEncoderDecoder, results: Mapping[Head, PatchResult]) -> Float[Tensor, "layer head"]:
    """Flip rate per encoder head as a ``[layer, head]`` grid (NaN for heads not in ``results``)."""
    grid = torch.full((model.cfg.n_encoder_layers, model.cfg.n_heads), float("nan"))
    for head, result in results.items():
        grid[head.layer, head.head] = result.flip_rate
    return grid
