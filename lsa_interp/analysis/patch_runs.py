"""Runs of minimal pairs with activations patched in from the other prompt: teacher-forced (the logit difference where
the two answers part) and greedy (the answers); the labels of the positions all the prompts share. Every run calls
each attention's hook points, so source, target and patched runs all execute the same floating-point operations
(docs/hooks.md: the fused path rounds differently)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import no_type_check

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.analysis.pair_batch import PairBatch
from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.data.tokenizer import TokenBatch, decode_batch, encode_tasks
from lsa_interp.data.vocab import EOS, LETTERS, PAD, ROLES, display_token
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS, HookedEncoderDecoder

_ROLE_SHORT = {"example_in": "in", "example_out": "out", "query": "q"}
MEMORY_HOOK = "encoder.ln_final.hook_out"
"""The memory: the encoder output every cross-attention reads."""
Patch = Callable[[Tensor], Tensor]
"""What a patched hook does to its activation."""
TEACHER_MARGIN = 1e-3
"""How far a teacher-forced step's top logit must lead the runner-up, relative to its size (at least 1), for
`greedy_keeps_teacher` to trust it: a teacher-forced and a cached decode of the same prefix differ by rounding, at
most 2.5e-4 on logits up to 23 (1.1e-5 of them) over 2,000 val tasks of the shipped copy-200, under the patching
hooks; so a top-two gap moves by under 2.2e-5 of the top logit, 45 times less."""
Index = tuple[slice | int | list[int] | Tensor, ...]
"""Where a patch replaces an activation: ``(slice(None), 31)`` is position 31 of ``[batch, pos, ...]``,
``(slice(None), [31, 33], 2)`` head 2 at positions 31 and 33 of ``[batch, pos, head, d_head]``, ``(rows, steps)`` one
position per row (two index tensors)."""


def parting_steps(
    pairs: Sequence[MinimalPair],
) -> tuple[Int[Tensor, " pair"], Int[Tensor, " pair"], Int[Tensor, " pair"]]:
    """Each pair's first answer step where the source and target answers part (an answer's EOS counts: ``ab`` parts
    from ``abc`` at step 2), and the source's and the target's token there."""
    source = encode_tasks([p.source for p in pairs], with_answers=True).tgt_out
    target = encode_tasks([p.target for p in pairs], with_answers=True).tgt_out
    width = max(source.shape[1], target.shape[1])
    source, target = (torch.nn.functional.pad(t, (0, width - t.shape[1]), value=-1) for t in (source, target))
    step = (source != target).int().argmax(1)
    rows = torch.arange(len(pairs))
    return step, source[rows, step], target[rows, step]


def measure_at_parting(pairs: Sequence[MinimalPair]) -> Callable[[Tensor], Tensor]:
    """A function of the decoder's logits returning the mean logit difference (source token minus target token) at
    each pair's `parting_steps`."""
    return measure_at(*parting_steps(pairs))


def measure_at(
    step: Int[Tensor, " pair"], source_token: Int[Tensor, " pair"], target_token: Int[Tensor, " pair"]
) -> Callable[[Tensor], Tensor]:
    """`measure_at_parting` from the `parting_steps` already found."""
    rows = torch.arange(len(step))

    def measure(logits: Float[Tensor, "batch tgt_pos vocab"]) -> Tensor:
        at = logits.float().cpu()[rows, step]
        return (at[rows, source_token] - at[rows, target_token]).mean()

    return measure


@dataclass(frozen=True)
class PairRuns:
    """What every patched run of some pairs shares: the target prompts on the device, their decoder input (the target
    answers, teacher-forced) and output (the answers' tokens and EOS, what the decoder should predict), the measure,
    the source run's ``saved`` activations, both unpatched measures, the target run's ``target_saved`` activations, its
    ``target_memory``, which a run patched in the decoder only reads instead of running the encoder again, and its
    ``target_residual``: the encoder's residual stream entering each layer ``L`` from 1 on (``L = n_encoder_layers``:
    the final norm's input), from which a run patched no lower than layer ``L`` starts the encoder."""

    target: TokenBatch
    tgt: Int[Tensor, "batch tgt_pos"]
    tgt_out: Int[Tensor, "batch tgt_pos"]
    measure: Callable[[Tensor], Tensor]
    saved: dict[str, Tensor]
    source_diff: float
    target_diff: float
    target_saved: dict[str, Tensor]
    target_memory: Float[Tensor, "batch src_pos d_model"]
    target_residual: dict[int, Float[Tensor, "batch src_pos d_model"]]


def pair_runs(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    save: Sequence[str],
    batch: PairBatch,
    parting: tuple[Tensor, Tensor, Tensor],
    save_target: Sequence[str] = (),
) -> PairRuns:
    """The source run (keeping the ``save`` hooks' outputs) and the target run (keeping ``save_target``'s) of
    ``pairs`` (tokenized as ``batch``), measured at their `parting_steps` ``parting``."""
    answered = encode_tasks([p.target for p in pairs], with_answers=True)
    tgt, tgt_out = answered.tgt_in.to(model.device), answered.tgt_out.to(model.device)
    measure = measure_at(*parting)
    source, target = batch.source.to(model.device), batch.target.to(model.device)
    saved = run_patched(model, source, tgt, {}, save=save)
    source_diff = float(measure(saved.pop("logits")))
    entering = _entering_layers(model.cfg.n_encoder_layers)
    own = [MEMORY_HOOK, *entering.values()]
    target_saved = run_patched(model, target, tgt, {}, save=list(dict.fromkeys([*save_target, *own])))
    target_diff = float(measure(target_saved.pop("logits")))
    kept = {hook: target_saved[hook] if hook in save_target else target_saved.pop(hook) for hook in own}
    residual = {layer: kept[hook] for layer, hook in entering.items()}
    return PairRuns(
        target, tgt, tgt_out, measure, saved, source_diff, target_diff, target_saved, kept[MEMORY_HOOK], residual
    )


def _entering_layers(n_layers: int) -> dict[int, str]:
    """The hook that holds the encoder's residual stream entering each layer from 1 on (``n_layers``: the final
    norm)."""
    return {layer: f"encoder.{layer - 1}.hook_resid_post" for layer in range(1, n_layers + 1)}


def run_patched(
    model: HookedEncoderDecoder,
    inputs: TokenBatch,
    tgt: Int[Tensor, "batch tgt_pos"],
    patches: dict[str, Patch],
    save: Sequence[str] = (),
) -> dict[str, Tensor]:
    """Run ``inputs`` teacher-forced on ``tgt`` with every attention on its hooked path, ``patches`` applied and
    the ``save`` hooks' outputs kept; returns them with the ``"logits"``."""
    saved: dict[str, Tensor] = {}
    hooks = _hooks(model, patches) + [(name, partial(_store, into=saved)) for name in save]
    with model.hooks(fwd_hooks=hooks):
        saved["logits"] = model(inputs, tgt)
    return saved


@dataclass(frozen=True)
class AnswerOutcomes:
    """How patched target prompts answer when decoded greedily, against each pair's source and target answers: the
    shares of answers that are the source's and that are neither; and answer position by position (the EOS after
    an answer's last letter counts as one), over the pairs whose two answers differ there, the shares that have the
    source's token there and that have neither's (NaN at positions where no pair's answers differ)."""

    source: float
    other: float
    source_letters: tuple[float, ...]
    other_letters: tuple[float, ...]


def patched_target(
    model: HookedEncoderDecoder,
    runs: PairRuns,
    patches: dict[str, Patch],
    answers: tuple[Sequence[str], Sequence[str]] | None = None,
) -> tuple[float, AnswerOutcomes | None]:
    """The target run of ``runs`` teacher-forced under ``patches`` (as `run_patched`), measured; with ``answers``
    (each pair's source and target answer) also the `AnswerOutcomes` of its greedy answers, decoded from the same
    patched encoder output (the encoder runs once), so ``patches`` must then be encoder hooks only (or the decoder's
    cross-attention keys and values, which the encoder output alone feeds). Where the teacher-forced run already
    shows that greedy decoding gives every target answer (`greedy_keeps_teacher`), that is the answers and no greedy
    decode runs; else every prompt is decoded, as one batch. The encoder runs from the lowest layer a patch is in, on
    the target run's residual stream entering it; without a patch in the encoder it does not run: the target run's
    memory is read."""
    start = lowest_encoder_layer(patches, model.cfg.n_encoder_layers)
    with model.hooks(fwd_hooks=_hooks(model, patches)):
        if start is None:
            memory = runs.target_memory
        else:  # a copy of the kept stream: a patch may write into the activation it is given
            residual = runs.target_residual[start].clone() if start else None
            memory = model.encode(runs.target.src, start, residual)
        logits = model.decode(runs.tgt, memory, runs.target.src_pad_mask)
        diff = float(runs.measure(logits))
        if answers is None:
            return diff, None
        if greedy_keeps_teacher(logits, runs.tgt_out):
            generated = runs.tgt_out
        else:
            generated = model.greedy_decode(runs.target.src, DEFAULT_MAX_NEW_TOKENS, drop_finished=False, memory=memory)
    return diff, answer_outcomes(generated.cpu(), *answers)


def greedy_keeps_teacher(logits: Float[Tensor, "batch tgt_pos vocab"], tgt_out: Int[Tensor, "batch tgt_pos"]) -> bool:
    """Whether greedy decoding from the encoder output that gave the teacher-forced ``logits`` returns ``tgt_out``
    (answer tokens, EOS, then PAD) in every row: at each answer step and EOS the top logit is the teacher's token,
    ahead of the runner-up by more than `TEACHER_MARGIN` of its size. Then every greedy step is fed the teacher's
    prefix, sees these logits up to rounding and picks the same token."""
    top = logits.float().topk(2, dim=-1)
    picked = top.indices[..., 0] == tgt_out
    first, second = top.values.unbind(-1)
    clear = first - second > TEACHER_MARGIN * first.abs().clamp(min=1)
    return bool(((picked & clear) | (tgt_out == PAD)).all())


def lowest_encoder_layer(hooks: Iterable[str], n_layers: int) -> int | None:
    """The lowest encoder layer any of ``hooks`` is in: 0 for the embedding's, ``n_layers`` for the final norm's; None
    where none is in the encoder."""
    layers = [_encoder_layer(hook.split(".")[1], n_layers) for hook in hooks if hook.startswith("encoder.")]
    return min(layers, default=None)


def _encoder_layer(part: str, n_layers: int) -> int:
    """The layer of an encoder hook name's second part: a layer's index, ``ln_final`` or an embedding hook's name."""
    return int(part) if part.isdigit() else n_layers if part == "ln_final" else 0


def answer_outcomes(generated: Int[Tensor, "batch n"], source: Sequence[str], target: Sequence[str]) -> AnswerOutcomes:
    """The `AnswerOutcomes` of greedy answers ``generated`` (decoder tokens) against each row's ``source`` and
    ``target`` answers."""
    answers = decode_batch(generated)
    kinds = ["source" if a == s else "target" if a == t else "other" for a, s, t in zip(answers, source, target)]
    shares = kinds.count("source") / len(kinds), kinds.count("other") / len(kinds)
    return AnswerOutcomes(*shares, *letter_outcomes(generated, source, target))


def answer_width(source: Sequence[str], target: Sequence[str]) -> int:
    """How many answer positions `letter_outcomes` reports: the longest answer's letters and its EOS."""
    return max(map(len, [*source, *target])) + 1


def letter_outcomes(
    generated: Int[Tensor, "batch n"], source: Sequence[str], target: Sequence[str]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Position by position over the answers (each letter, then the EOS), among the rows whose ``source`` and
    ``target`` answers differ there: the share of ``generated`` rows (decoder tokens, EOS included) with the source's
    token there and the share with neither's; NaN where no row's answers differ. `answer_width` values each."""
    made = [_until_eos(row) for row in generated.tolist()]
    wanted = [(_tokens(s), _tokens(t)) for s, t in zip(source, target)]
    own, neither = [], []
    for position in range(answer_width(source, target)):
        told = [(_at(m, position), _at(s, position), _at(t, position)) for m, (s, t) in zip(made, wanted)]
        parted = [(m, s, t) for m, s, t in told if s != t]
        if parted:
            own.append(sum(m == s for m, s, _ in parted) / len(parted))
            neither.append(sum(m not in (s, t) for m, s, t in parted) / len(parted))
        else:
            own.append(math.nan)
            neither.append(math.nan)
    return tuple(own), tuple(neither)


def _tokens(answer: str) -> list[int]:
    """An answer's letters as token ids, then EOS."""
    return [LETTERS.index(letter) for letter in answer] + [EOS]


def _until_eos(row: list[int]) -> list[int]:
    return row[: row.index(EOS) + 1] if EOS in row else row


def _at(tokens: list[int], position: int) -> int | None:
    return tokens[position] if position < len(tokens) else None


def _hooks(model: HookedEncoderDecoder, patches: dict[str, Patch]) -> list[tuple[str, Callable]]:
    """Every attention's pattern hook (its hooked path) and the ``patches``."""
    keep = [(name, _keep) for name in model.hook_dict if name.endswith("hook_pattern")]
    return keep + [(name, partial(_apply, patch=patch)) for name, patch in patches.items()]


@no_type_check  # hot, called at every attention of a patched run: the tests check its callers (docs/testing.md)
def _keep(tensor: Tensor, hook) -> None:
    """A hook that changes nothing: attaching it moves an attention module onto its hooked (explicit) path."""


def _apply(tensor: Tensor, hook, patch: Patch) -> Tensor:
    return patch(tensor)


def _store(tensor: Tensor, hook, into: dict[str, Tensor]) -> None:
    into[hook.name] = tensor.detach().clone()


def replace_at(tensor: Tensor, donor: Tensor, index: Index) -> Tensor:
    """``tensor`` with ``donor``'s values at ``index`` (one position of ``[batch, pos, ...]``, or one head, at all
    positions or one, of ``[batch, pos, head, d_head]``)."""
    patched = tensor.clone()
    patched[index] = donor[index]
    return patched


def shared_position_labels(source: TokenBatch, target: TokenBatch) -> tuple[str, ...]:
    """One label per encoder position shared by every prompt: its token where all prompts have the same one (``a·0``),
    else its role and place in it (``out1·31``). Raises ValueError when the prompts' layouts differ."""
    roles = torch.cat([source.roles, target.roles])
    if not (roles == roles[0]).all():
        row = int((roles != roles[0]).any(1).nonzero()[0]) % len(source)
        raise ValueError(
            f"pair {row} does not share the first pair's token layout; activation patching compares positions across "
            "pairs, so all prompts need one layout (minimal pairs of one window length)"
        )
    tokens = torch.cat([source.src, target.src])
    labels, seen = [], dict.fromkeys(ROLES, 0)
    for position, role in enumerate(ROLES[int(r)] for r in roles[0]):
        seen[role] += 1
        same = bool((tokens[:, position] == tokens[0, position]).all())
        name = display_token(int(tokens[0, position])) if same else f"{_ROLE_SHORT.get(role, role)}{seen[role]}"
        labels.append(f"{name}·{position}")
    return tuple(labels)
