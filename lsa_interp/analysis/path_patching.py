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
(`lsa_interp.analysis.patch_runs`). The runs themselves are in `lsa_interp.analysis.path_runs`; a `PathPatcher`
keeps run 1 for every path on the same pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.analysis.activations import eval_mode
from lsa_interp.analysis.patch_grids import (
    GridSheet,
    PatchEffect,
    PatchingGrid,
    attention_modules,
    module_label,
    normalized_diff,
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
    check_direct,
    check_frozen,
    check_paths,
    labels,
    module_heads,
    parse_positions,
    parse_receiver,
    parse_receivers,
    parse_senders,
    reachable,
    senders_reaching,
    short_labels,
)
from lsa_interp.analysis.path_runs import PathRuns, receiver_hooks
from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import HookedEncoderDecoder

__all__ = [
    "INPUTS",
    "MEMORY",
    "PatchEffect",
    "PathPatcher",
    "PathSweep",
    "Positions",
    "Receiver",
    "Sender",
    "Target",
    "check_chain",
    "check_direct",
    "check_frozen",
    "check_paths",
    "labels",
    "parse_receiver",
    "parse_positions",
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


class PathPatcher:
    """Path patching of one model on one set of minimal pairs, any number of times: the source and target runs every
    path needs (run 1) are made on first use and kept, so each later path, whole effect or sweep costs only its own
    runs. Its methods are the module's functions without ``model`` and ``pairs``, and give the same results to the
    bit (tested). Keep the model's weights as they are while it is in use: the kept runs are of those weights."""

    def __init__(self, model: HookedEncoderDecoder, pairs: Sequence[MinimalPair]):
        self.model, self.pairs = model, list(pairs)
        self._runs: PathRuns | None = None

    @contextmanager
    def _running(self) -> Iterator[PathRuns]:
        with torch.no_grad(), eval_mode(self.model):
            if self._runs is None:
                self._runs = PathRuns(self.model, self.pairs)
            yield self._runs

    def patch_path(
        self,
        senders: Sequence[Head | Sender],
        receivers: Sequence[Target],
        answers: bool = True,
        through: Sequence[Sequence[Target]] = (),
        direct: bool = False,
    ) -> PatchEffect:
        """`patch_path` on this patcher's model and pairs."""
        if not receivers:
            raise ValueError("path patching needs at least one receiver (a head's q/k/v or 'memory')")
        check_chain(self.model.cfg, senders, through, receivers)
        given, stages = as_senders(senders), [*through, receivers]
        if direct:
            check_direct(given, through)
        with self._running() as runs:
            recorded = runs.frozen(given, receiver_hooks(stages[0]))
            for hop, following in zip(through, stages[1:]):
                recorded = runs.relayed(hop, recorded, receiver_hooks(following), given if direct else ())
            return runs.through(receivers, recorded, answers)

    def sender_effect(self, senders: Sequence[Head | Sender], frozen: Sequence[Head] = ()) -> PatchEffect:
        """`sender_effect` on this patcher's model and pairs."""
        check_paths(self.model.cfg, senders, ())
        given = as_senders(senders)
        check_frozen(given, frozen)
        heads = [s.head for s in given] + list(frozen)
        with self._running() as runs:
            return runs.whole(given, as_senders(frozen), all(head.stack == "encoder" for head in heads))

    def paths_from(
        self,
        senders: Sequence[Head | Sender],
        progress: Callable[[int, int], None] | None = None,
        answers: bool = True,
    ) -> PathSweep:
        """`paths_from` on this patcher's model and pairs."""
        cfg = self.model.cfg
        check_paths(cfg, senders, ())
        senders = as_senders(senders)
        rows: list[tuple[str, str, list[Receiver]]] = []
        for module in attention_modules(cfg):
            heads = module_heads(cfg, module)
            reached = reachable(cfg, senders, heads[0])
            for kind in [*reached, reached] if len(reached) > 1 else list(reached):
                hook = f"{module}.hook_{kind}" if len(kind) == 1 else f"{module}.hook_{{{','.join(kind)}}}"
                rows.append((hook, f"{module_label(module)}: {','.join(kind)}", [Receiver(h, kind) for h in heads]))
        encoder_senders = any(s.head.stack == "encoder" for s in senders)
        cells = [(row, column) for row in range(len(rows)) for column in range(cfg.n_heads + 1)]
        with self._running() as runs:
            sheet = GridSheet(len(rows), cfg.n_heads + 1, runs.width if answers else 0)
            every = [receiver for _, _, row in rows for receiver in row] + ([MEMORY] if encoder_senders else [])
            recorded = runs.frozen(senders, receiver_hooks(every))
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
        self,
        receivers: Sequence[Target],
        progress: Callable[[int, int], None] | None = None,
        answers: bool = True,
        positions: Positions = None,
    ) -> PathSweep:
        """`paths_into` on this patcher's model and pairs."""
        cfg, modules = self.model.cfg, attention_modules(self.model.cfg)
        senders = [Sender(head, positions) for head in senders_reaching(cfg, receivers)]
        if positions is not None:  # the same positions for every head: the first one's check holds for all
            check_paths(cfg, senders[:1], receivers)
        with self._running() as runs:
            sheet = GridSheet(len(modules), cfg.n_heads, runs.width if answers else 0)
            hooks = receiver_hooks(receivers)
            for done, sender in enumerate(senders, 1):
                cell = runs.through(receivers, runs.frozen([sender], hooks), answers)
                sheet.fill(modules.index(sender.head.hook("z").removesuffix(".hook_z")), sender.head.head, cell)
                if progress:
                    progress(done, len(senders))
        rows, hooks_z = tuple(module_label(m) for m in modules), tuple(f"{m}.hook_z" for m in modules)
        site = f"paths into {', '.join(short_labels(receivers, cfg.n_heads))}"
        site += "" if positions is None else f" from @{','.join(map(str, positions))}"
        grid = sheet.grid(site, hooks_z, rows, _head_columns(cfg))
        return PathSweep(grid, runs.runs.source_diff, runs.runs.target_diff)


def patch_path(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    senders: Sequence[Head | Sender],
    receivers: Sequence[Target],
    answers: bool = True,
    through: Sequence[Sequence[Target]] = (),
    direct: bool = False,
) -> PatchEffect:
    """The effect of the ``senders``' outputs (heads: at all positions; `Sender`s: at theirs; taken from the source
    prompts) on the target prompts' answers through the ``receivers``' inputs only. With ``through`` hops (each a
    list of receivers, `check_chain`), only along the chain senders -> first hop -> ... -> receivers: each hop's
    inputs are set to what the step before sends them with every head but the hop's frozen, and its heads' outputs
    are what the next hop receives; with ``direct`` the senders keep sending in each hop's run too, so each step
    receives what comes through the hop before it and what comes from the senders directly, together. Answers are
    decoded where ``answers`` and every receiver is fed by the encoder alone. Raises ValueError for no receivers,
    `check_paths`', `check_chain`'s and `check_direct`'s cases, positions past the prompts and pairs `pair_batch`
    refuses. (Many paths on the same pairs: `PathPatcher`.)"""
    return PathPatcher(model, pairs).patch_path(senders, receivers, answers, through, direct)


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
    return PathPatcher(model, pairs).sender_effect(senders, frozen)


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
    return PathPatcher(model, pairs).paths_from(senders, progress, answers)


def paths_into(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    receivers: Sequence[Target],
    progress: Callable[[int, int], None] | None = None,
    answers: bool = True,
    positions: Positions = None,
) -> PathSweep:
    """Every sender of ``receivers``: a row per attention module, a column per head, each cell that head's path into
    the receivers (NaN for a head that does not reach every receiver input); with ``positions`` (sorted, distinct),
    each head's output there only. Two runs per sender. Raises ValueError for no receivers, receivers no head
    reaches, receivers that read none of the ``positions`` (`check_paths`), positions past the prompts, and pairs
    `pair_batch` refuses."""
    return PathPatcher(model, pairs).paths_into(receivers, progress, answers, positions)


def _head_columns(cfg: ModelConfig) -> tuple[str, ...]:
    return tuple(f"head {h + 1}" for h in range(cfg.n_heads))
