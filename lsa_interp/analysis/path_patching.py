"""Path patching on minimal pairs: how much of the difference between two rules travels from some heads (the
*senders*) into the inputs of others (the *receivers*), as in Wang et al.'s IOI circuit and TransformerLens's path
patching.

Three runs, all teacher-forced on the target answers and measured as in `lsa_interp.analysis.activation_patching`
(the logit difference where the two answers part, normalised: 1 = the source prompt's, 0 = the target's):

1. the source and target prompts, keeping every head's output ``hook_z``;
2. the target prompt with the senders' outputs taken from the source and every other head's output frozen at its
   target value (MLPs and norms recompute), keeping what the receivers read there: their queries, keys or values;
3. the target prompt with only the receivers' inputs replaced by those of run 2.

So run 3 moves only what flows from the senders to the receivers along paths through no other head (the residual
stream, MLPs and norms). A sender is a head at all positions or at some (``"1.3@31,33"``); a receiver is a head and
the inputs it reads the senders through (``"2.3/v"``, ``"cross:3.1/kv"``), or the memory (``MEMORY``: the encoder
output every cross-attention reads); both as in `lsa_interp.analysis.path_ends`. A chain (``through`` hops) repeats
run 2 once per hop, each hop's heads sending what they received. An encoder head
reaches a later encoder head's queries, keys and values and every cross-attention's keys and values (through the
memory); a decoder head reaches the later decoder heads' queries, keys and values and the cross-attentions' queries
(their keys and values come from the memory). Receivers are patched together in run 3, each to its run-2 input,
which carries the direct paths only: a receiver that reads what an earlier one writes gets that change overwritten
(the memory would overwrite every encoder receiver, so it is refused beside them). With a last-layer encoder sender
its path into the memory is its whole effect, and a path into the memory is one into every cross-attention's keys
and values: both equal to the bit (tested), as every run calls each attention's hook points
(`lsa_interp.analysis.patch_runs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.analysis.activations import eval_mode
from lsa_interp.analysis.pair_batch import PairBatch, pair_batch
from lsa_interp.analysis.patch_grids import (
    PatchEffect,
    PatchingGrid,
    attention_modules,
    module_label,
    normalized_diff,
    patch_effect,
)
from lsa_interp.analysis.patch_runs import (
    PairRuns,
    Patch,
    answer_outcomes,
    answer_width,
    pair_runs,
    parting_steps,
    run_patched,
)
from lsa_interp.analysis.path_ends import (
    INPUTS,
    MEMORY,
    Positions,
    Receiver,
    Sender,
    Target,
    as_senders,
    check_chain,
    check_frozen,
    check_paths,
    labels,
    module_heads,
    parse_receiver,
    parse_receivers,
    parse_senders,
    reachable,
    senders_reaching,
    short_labels,
)
from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import HookedEncoderDecoder

__all__ = [
    "INPUTS",
    "MEMORY",
    "PatchEffect",
    "PathSweep",
    "Receiver",
    "Sender",
    "Target",
    "check_chain",
    "check_frozen",
    "check_paths",
    "labels",
    "parse_receiver",
    "parse_receivers",
    "parse_senders",
    "patch_path",
    "paths_from",
    "paths_into",
    "reachable",
    "sender_effect",
    "senders_reaching",
    "short_labels",
]

_MEMORY_HOOK = "encoder.ln_final.hook_out"


class _PathRuns:
    """Runs 1 of some pairs (every head's output of the source and the target) and runs 2 and 3 on them."""

    def __init__(self, model: HookedEncoderDecoder, pairs: Sequence[MinimalPair]):
        self.model, self.cfg = model, model.cfg
        self.batch: PairBatch = pair_batch(pairs)
        self.outputs = outputs = [f"{module}.hook_z" for module in attention_modules(self.cfg)]
        self.runs: PairRuns = pair_runs(model, pairs, outputs, self.batch, parting_steps(pairs), save_target=outputs)
        self.outcomes = answer_outcomes(model, self.runs.target, self.batch.source_answers, self.batch.target_answers)
        self.width = answer_width(self.batch.source_answers, self.batch.target_answers)

    def frozen(self, senders: Sequence[Sender], record: Sequence[str]) -> dict[str, Tensor]:
        """Run 2: the senders' outputs from the source (at their positions), every other head's output and the
        senders' elsewhere from the target; returns ``record``'s."""
        patches = self.frozen_outputs(self.sender_cells(senders), from_source=True)
        return run_patched(self.model, self.runs.target, self.runs.tgt, patches, save=record)

    def frozen_outputs(self, cells: dict[str, Cells], from_source: bool) -> dict[str, Patch]:
        """Every head's output (``hook_z``) at the target run's, but at ``cells``: the source run's there
        (``from_source``) or the patched run's own."""
        return {
            hook: partial(
                _freeze,
                target=self.runs.target_saved[hook],
                donor=self.runs.saved[hook] if from_source else None,
                cells=cells.get(hook, []),
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

    def relayed(self, hop: Sequence[Receiver], recorded: dict[str, Tensor], record: Sequence[str]) -> dict[str, Tensor]:
        """A hop of a chain: the target with the ``hop``'s inputs from ``recorded`` and every other head's output
        frozen at the target's, so that only the hop's heads pass on what they received; returns ``record``'s."""
        heads = self.sender_cells([Sender(head) for head in dict.fromkeys(r.head for r in hop)])
        patches = _receiver_patches(hop, recorded) | self.frozen_outputs(heads, from_source=False)
        return run_patched(self.model, self.runs.target, self.runs.tgt, patches, save=record)

    def through(self, receivers: Sequence[Target], recorded: dict[str, Tensor], answers: bool) -> PatchEffect:
        """Run 3: the target with the ``receivers``' inputs from run 2's ``recorded``."""
        patches = _receiver_patches(receivers, recorded)
        return self.effect(patches, answers and all(_encoder_fed(hook) for hook in patches))

    def effect(self, patches: dict[str, Patch], answers: bool) -> PatchEffect:
        """The target run under ``patches``, measured (and decoded greedily where ``answers``)."""
        runs = self.runs
        diff = float(runs.measure(run_patched(self.model, runs.target, runs.tgt, patches)["logits"]))
        return patch_effect(diff, runs.source_diff, runs.target_diff, self.outcomes(patches) if answers else None)


Cells = list[tuple[int, Positions]]
"""(head, positions) cells of a ``[batch, pos, head, d_head]`` activation; None: all positions."""


def _freeze(tensor: Tensor, target: Tensor, donor: Tensor | None, cells: Cells) -> Tensor:
    """The target run's output with ``donor``'s (None: this run's own) at ``cells``."""
    return _take(target, tensor if donor is None else donor, cells)


def _receiver_hooks(receivers: Sequence[Target]) -> list[str]:
    return list(dict.fromkeys(hook for receiver in receivers for hook in _hooks_of(receiver)))


def _hooks_of(receiver: Target) -> list[str]:
    return [_MEMORY_HOOK] if receiver == MEMORY else receiver.hooks()


def _receiver_patches(receivers: Sequence[Target], recorded: dict[str, Tensor]) -> dict[str, Patch]:
    """Each receiver input's hook set to its ``recorded`` value: the memory whole, a head's input for that head (at
    the receiver's positions, where it names some)."""
    patches, cells = {}, {}
    for receiver in receivers:
        if receiver == MEMORY:
            patches[_MEMORY_HOOK] = partial(_whole, donor=recorded[_MEMORY_HOOK])
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


def patch_path(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    senders: Sequence[Head | Sender],
    receivers: Sequence[Target],
    answers: bool = True,
    through: Sequence[Sequence[Target]] = (),
) -> PatchEffect:
    """The effect of the ``senders``' outputs (heads: at all positions; `Sender`s: at theirs; taken from the source
    prompts) on the target prompts' answers through the ``receivers``' inputs only. With ``through`` hops (each a
    list of receivers, `check_chain`), only along the chain senders -> first hop -> ... -> receivers: each hop's
    inputs are set to what the step before sends them with every head but the hop's frozen, and its heads' outputs
    are what the next hop receives. Answers are decoded where ``answers`` and every receiver is fed by the encoder
    alone. Raises ValueError for no receivers, `check_paths`' and `check_chain`'s cases, positions past the prompts
    and pairs `pair_batch` refuses."""
    if not receivers:
        raise ValueError("path patching needs at least one receiver (a head's q/k/v or 'memory')")
    check_chain(model.cfg, senders, through, receivers)
    stages = [*through, receivers]
    with torch.no_grad(), eval_mode(model):
        runs = _PathRuns(model, pairs)
        recorded = runs.frozen(as_senders(senders), _receiver_hooks(stages[0]))
        for hop, following in zip(through, stages[1:]):
            recorded = runs.relayed(hop, recorded, _receiver_hooks(following))
        return runs.through(receivers, recorded, answers)


def sender_effect(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    senders: Sequence[Head | Sender],
    frozen: Sequence[Head] = (),
) -> PatchEffect:
    """The ``senders``' whole effect (their outputs from the source prompts, at their positions, everything after
    them free): activation patching of their ``hook_z``, for comparison with their paths. With ``frozen`` heads,
    whose outputs stay at the target run's, what is left of it when the paths through them are cut. Answers are
    decoded where every sender and frozen head is an encoder head. Raises ValueError as `check_paths` (no
    receivers), for a head both sending and frozen, or frozen twice, and for positions past the prompts."""
    check_paths(model.cfg, senders, ())
    given = as_senders(senders)
    check_frozen(given, frozen)
    with torch.no_grad(), eval_mode(model):
        runs = _PathRuns(model, pairs)
        sent, kept = runs.sender_cells(given), runs.sender_cells(as_senders(frozen))
        patches = {
            hook: partial(_outputs, runs=runs.runs, hook=hook, sent=sent.get(hook, []), kept=kept.get(hook, []))
            for hook in sent.keys() | kept.keys()
        }
        heads = [s.head for s in given] + list(frozen)
        return runs.effect(patches, all(head.stack == "encoder" for head in heads))


def _outputs(tensor: Tensor, runs: PairRuns, hook: str, sent: Cells, kept: Cells) -> Tensor:
    """A ``hook_z`` output with the source run's values at the ``sent`` cells and the target run's at ``kept``."""
    return _take(_take(tensor, runs.saved[hook], sent), runs.target_saved[hook], kept)


@dataclass(frozen=True)
class PathSweep:
    """What `paths_from` and `paths_into` return: the grid (NaN where no path runs) and the unpatched runs' measures;
    `paths_from` adds the senders' path into the memory (None for decoder senders)."""

    grid: PatchingGrid
    source_logit_diff: float
    target_logit_diff: float
    memory: PatchEffect | None = None

    @property
    def normalized(self) -> Float[Tensor, "row column"]:
        """The grid as (patched - target run) / (source run - target run)."""
        return normalized_diff(self.grid.logit_diff, self.source_logit_diff, self.target_logit_diff)


def paths_from(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    senders: Sequence[Head | Sender],
    progress: Callable[[int, int], None] | None = None,
    answers: bool = True,
) -> PathSweep:
    """Every receiver of ``senders``: a row per later attention module and input (``q``, ``k``, ``v`` and all it
    reaches together), a column per head and one for all the module's heads together, and the path into the memory.
    One run 2 serves every cell (what it records does not depend on which inputs are patched afterwards). Raises
    ValueError as `check_paths` and `pair_batch`."""
    check_paths(model.cfg, senders, ())
    cfg, senders = model.cfg, as_senders(senders)
    rows: list[tuple[str, str, list[Receiver]]] = []
    for module in attention_modules(cfg):
        heads = module_heads(cfg, module)
        reached = reachable(cfg, senders, heads[0])
        for kind in [*reached, reached] if len(reached) > 1 else list(reached):
            hook = f"{module}.hook_{kind}" if len(kind) == 1 else f"{module}.hook_{{{','.join(kind)}}}"
            rows.append((hook, f"{module_label(module)}: {','.join(kind)}", [Receiver(h, kind) for h in heads]))
    encoder_senders = any(s.head.stack == "encoder" for s in senders)
    cells = [(row, column) for row in range(len(rows)) for column in range(cfg.n_heads + 1)]
    with torch.no_grad(), eval_mode(model):
        runs = _PathRuns(model, pairs)
        sheet = _Sheet(len(rows), cfg.n_heads + 1, runs.width if answers else 0)
        every = [receiver for _, _, row in rows for receiver in row] + ([MEMORY] if encoder_senders else [])
        recorded = runs.frozen(senders, _receiver_hooks(every))
        for done, (row, column) in enumerate(cells, 1):
            heads = rows[row][2]
            sheet.fill(row, column, runs.through(heads[column : column + 1] or heads, recorded, answers))
            if progress:
                progress(done, len(cells) + encoder_senders)
        memory = runs.through([MEMORY], recorded, answers) if encoder_senders else None
        if progress and memory:
            progress(len(cells) + 1, len(cells) + 1)
    site = "paths from " + ", ".join(short_labels(senders, cfg.n_heads))
    columns = (*_head_columns(cfg), "all heads")
    grid = sheet.grid(site, tuple(r[0] for r in rows), tuple(r[1] for r in rows), columns)
    return PathSweep(grid, runs.runs.source_diff, runs.runs.target_diff, memory)


def paths_into(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    receivers: Sequence[Target],
    progress: Callable[[int, int], None] | None = None,
    answers: bool = True,
) -> PathSweep:
    """Every sender of ``receivers``: a row per attention module, a column per head, each cell that head's path into
    the receivers (NaN for a head that does not reach every receiver input). Two runs per sender. Raises ValueError
    for no receivers, receivers no head reaches, and pairs `pair_batch` refuses."""
    cfg, modules = model.cfg, attention_modules(model.cfg)
    candidates = senders_reaching(cfg, receivers)
    with torch.no_grad(), eval_mode(model):
        runs = _PathRuns(model, pairs)
        sheet = _Sheet(len(modules), cfg.n_heads, runs.width if answers else 0)
        hooks = _receiver_hooks(receivers)
        for done, sender in enumerate(candidates, 1):
            cell = runs.through(receivers, runs.frozen([Sender(sender)], hooks), answers)
            sheet.fill(modules.index(sender.hook("z").removesuffix(".hook_z")), sender.head, cell)
            if progress:
                progress(done, len(candidates))
    rows, hooks_z = tuple(module_label(m) for m in modules), tuple(f"{m}.hook_z" for m in modules)
    site = f"paths into {', '.join(short_labels(receivers, cfg.n_heads))}"
    grid = sheet.grid(site, hooks_z, rows, _head_columns(cfg))
    return PathSweep(grid, runs.runs.source_diff, runs.runs.target_diff)


class _Sheet:
    """A sweep's cells as they are measured (NaN until filled), then its `PatchingGrid`; ``width`` answer positions
    (0: answers not decoded)."""

    def __init__(self, rows: int, columns: int, width: int):
        self.diff = torch.full((rows, columns), torch.nan)
        self.shares = torch.full((2, rows, columns), torch.nan)
        self.letters = torch.full((2, width, rows, columns), torch.nan) if width else None

    def fill(self, row: int, column: int, cell: PatchEffect) -> None:
        self.diff[row, column] = cell.logit_diff
        self.shares[:, row, column] = torch.tensor([cell.source_answers, cell.other_answers])
        if self.letters is not None and cell.source_letters:
            self.letters[:, :, row, column] = torch.tensor([cell.source_letters, cell.other_letters])

    def grid(self, site: str, hooks: tuple[str, ...], rows: tuple[str, ...], columns: tuple[str, ...]) -> PatchingGrid:
        letters = (None, None) if self.letters is None else tuple(self.letters)
        return PatchingGrid(site, hooks, rows, columns, self.diff, *self.shares, *letters)


def _head_columns(cfg: ModelConfig) -> tuple[str, ...]:
    return tuple(f"head {h + 1}" for h in range(cfg.n_heads))
