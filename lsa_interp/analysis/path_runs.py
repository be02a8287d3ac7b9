"""The runs path patching is made of (`lsa_interp.analysis.path_patching`): the source and target runs of some minimal
pairs keeping every head's output (run 1), the target with the senders' outputs from the source and every other
head's frozen (run 2), a chain's hops, and the target with only the receivers' inputs replaced (run 3); and what
each patch does to its activation."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from torch import Tensor

from lsa_interp.analysis.pair_batch import PairBatch, pair_batch
from lsa_interp.analysis.patch_grids import PatchEffect, attention_modules, patch_effect
from lsa_interp.analysis.patch_runs import (
    MEMORY_HOOK,
    PairRuns,
    Patch,
    answer_width,
    pair_runs,
    parting_steps,
    patched_target,
    run_patched,
)
from lsa_interp.analysis.path_ends import MEMORY, Positions, Receiver, Sender, Target
from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.model.hooked import HookedEncoderDecoder


class PathRuns:
    """Runs 1 of some pairs (every head's output of the source and the target) and runs 2 and 3 on them. Made and
    used under ``torch.no_grad()`` with the model in eval mode."""

    def __init__(self, model: HookedEncoderDecoder, pairs: Sequence[MinimalPair]):
        self.model, self.cfg = model, model.cfg
        self.batch: PairBatch = pair_batch(pairs)
        self.outputs = outputs = [f"{module}.hook_z" for module in attention_modules(self.cfg)]
        self.runs: PairRuns = pair_runs(model, pairs, outputs, self.batch, parting_steps(pairs), save_target=outputs)
        self.answers = (self.batch.source_answers, self.batch.target_answers)
        self.width = answer_width(self.batch.source_answers, self.batch.target_answers)

    def frozen(self, senders: Sequence[Sender], record: Sequence[str]) -> dict[str, Tensor]:
        """Run 2: the senders' outputs from the source (at their positions), every other head's output and the
        senders' elsewhere from the target; returns ``record``'s."""
        patches = self.frozen_outputs(self.sender_cells(senders), {})
        return run_patched(self.model, self.runs.target, self.runs.tgt, patches, save=record)

    def frozen_outputs(self, sent: dict[str, Cells], own: dict[str, Cells]) -> dict[str, Patch]:
        """Every head's output (``hook_z``) at the target run's, but the source run's at the ``sent`` cells and the
        patched run's own at the ``own`` cells."""
        return {
            hook: partial(
                _freeze,
                target=self.runs.target_saved[hook],
                source=self.runs.saved[hook],
                sent=sent.get(hook, []),
                own=own.get(hook, []),
            )
            for hook in self.outputs
        }

    def sender_cells(self, senders: Sequence[Sender]) -> dict[str, Cells]:
        """The senders' (head, positions) cells by output hook. Raises ValueError for a position past the prompts."""
        cells: dict[str, Cells] = {}
        for sender in senders:
            hook = sender.head.hook("z")
            _check_positions(f"sender {sender.label}: its output has", sender.positions, self.runs.saved[hook].shape[1])
            cells.setdefault(hook, []).append((sender.head.head, sender.positions))
        return cells

    def relayed(
        self,
        hop: Sequence[Receiver],
        recorded: dict[str, Tensor],
        record: Sequence[str],
        senders: Sequence[Sender] = (),
    ) -> dict[str, Tensor]:
        """A hop of a chain: the target with the ``hop``'s inputs from ``recorded`` and every other head's output
        frozen at the target's, so that only the hop's heads pass on what they received (and the ``senders`` send
        their source outputs alongside, for the direct path); returns ``record``'s."""
        heads = self.sender_cells([Sender(head) for head in dict.fromkeys(r.head for r in hop)])
        patches = _receiver_patches(hop, recorded) | self.frozen_outputs(self.sender_cells(senders), heads)
        return run_patched(self.model, self.runs.target, self.runs.tgt, patches, save=record)

    def through(self, receivers: Sequence[Target], recorded: dict[str, Tensor], answers: bool) -> PatchEffect:
        """Run 3: the target with the ``receivers``' inputs from run 2's ``recorded``."""
        patches = _receiver_patches(receivers, recorded)
        return self.effect(patches, answers and all(_encoder_fed(hook) for hook in patches))

    def effect(self, patches: dict[str, Patch], answers: bool) -> PatchEffect:
        """The target run under ``patches``, measured (and decoded greedily where ``answers``)."""
        runs = self.runs
        diff, outcomes = patched_target(self.model, runs, patches, self.answers if answers else None)
        return patch_effect(diff, runs.source_diff, runs.target_diff, outcomes)

    def whole(self, senders: Sequence[Sender], frozen: Sequence[Sender], answers: bool) -> PatchEffect:
        """The target with the ``senders``' outputs from the source (at their positions) and the ``frozen`` heads'
        kept at the target's, everything else free: the senders' whole effect, less the paths through ``frozen``."""
        sent, kept = self.sender_cells(senders), self.sender_cells(frozen)
        patches = {
            hook: partial(_outputs, runs=self.runs, hook=hook, sent=sent.get(hook, []), kept=kept.get(hook, []))
            for hook in sent.keys() | kept.keys()
        }
        return self.effect(patches, answers)


Cells = list[tuple[int, Positions]]
"""(head, positions) cells of a ``[batch, pos, head, d_head]`` activation; None: all positions."""


def _freeze(tensor: Tensor, target: Tensor, source: Tensor, sent: Cells, own: Cells) -> Tensor:
    """The target run's output with the source run's at the ``sent`` cells and this run's own at the ``own`` ones."""
    return _take(_take(target, source, sent), tensor, own)


def receiver_hooks(receivers: Sequence[Target]) -> list[str]:
    """The hooks whose activations the ``receivers`` read (their q, k or v, or the memory), each once, in order."""
    return list(dict.fromkeys(hook for receiver in receivers for hook in _hooks_of(receiver)))


def _hooks_of(receiver: Target) -> list[str]:
    return [MEMORY_HOOK] if receiver == MEMORY else receiver.hooks()


def _receiver_patches(receivers: Sequence[Target], recorded: dict[str, Tensor]) -> dict[str, Patch]:
    """Each receiver input's hook set to its ``recorded`` value: the memory whole, a head's input for that head (at
    the receiver's positions, where it names some)."""
    patches, cells = {}, {}
    for receiver in receivers:
        if receiver == MEMORY:
            patches[MEMORY_HOOK] = partial(_whole, donor=recorded[MEMORY_HOOK])
            continue
        for hook in receiver.hooks():
            _check_positions(f"receiver {receiver.label}: its inputs have", receiver.positions, recorded[hook].shape[1])
            cells.setdefault(hook, []).append((receiver.head.head, receiver.positions))
    return patches | {hook: partial(_take, donor=recorded[hook], cells=c) for hook, c in cells.items()}


def _check_positions(what: str, positions: Positions, length: int) -> None:
    """Raise ValueError, starting with ``what``, for a position past ``length``."""
    if positions is not None and positions[-1] >= length:
        raise ValueError(f"{what} {length} positions (0..{length - 1}) in these prompts")


def _whole(tensor: Tensor, donor: Tensor) -> Tensor:
    return donor.clone()


def _take(tensor: Tensor, donor: Tensor, cells: Cells) -> Tensor:
    """``tensor`` with ``donor``'s values at each of ``cells``."""
    patched = tensor.clone()
    for head, positions in cells:
        where = slice(None) if positions is None else list(positions)
        patched[:, where, head] = donor[:, where, head]
    return patched


def _encoder_fed(hook: str) -> bool:
    """Whether ``hook``'s activation depends on the encoder alone (so its patch also applies when decoding freely)."""
    return hook.startswith("encoder.") or hook.endswith(("cross_attn.hook_k", "cross_attn.hook_v"))


def _outputs(tensor: Tensor, runs: PairRuns, hook: str, sent: Cells, kept: Cells) -> Tensor:
    """A ``hook_z`` output with the source run's values at the ``sent`` cells and the target run's at ``kept``."""
    return _take(_take(tensor, runs.saved[hook], sent), runs.target_saved[hook], kept)
