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
stream, MLPs and norms). A receiver is a head and the inputs it reads the senders through (``"2.3/v"``,
``"cross:3.1/kv"``), or the memory (``MEMORY``: the encoder output every cross-attention reads). An encoder head
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
from lsa_interp.analysis.patch_grids import PatchingGrid, attention_modules, module_label, normalized_diff
from lsa_interp.analysis.patch_runs import PairRuns, Patch, answer_outcomes, pair_runs, parting_steps, run_patched
from lsa_interp.analysis.prompts import MinimalPair
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.heads import Head, parse_head
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.utils import check_type

MEMORY = "memory"
"""The receiver that is the encoder output (``encoder.ln_final.hook_out``), read by every cross-attention."""
_MEMORY_HOOK = "encoder.ln_final.hook_out"
INPUTS = "qkv"


@dataclass(frozen=True, order=True)
class Receiver:
    """A head and the inputs through which it receives: a string of ``q``, ``k``, ``v`` in that order, at
    ``positions`` only (0-based positions of the input's sequence: the encoder's for encoder heads and for a
    cross-attention's keys and values, the decoder's otherwise) or at all (``None``)."""

    head: Head
    inputs: str = INPUTS
    positions: tuple[int, ...] | None = None

    @property
    def label(self) -> str:
        """``"2.3/v"``, ``"cross:3.1/kv"``, ``"3.7/kv@31,33"``."""
        at = "" if self.positions is None else "@" + ",".join(map(str, self.positions))
        return f"{self.head.label}/{self.inputs}{at}"

    def hooks(self) -> list[str]:
        """The hook of each input (``encoder.1.attn.hook_v``)."""
        return [self.head.hook(name) for name in self.inputs]


Target = Receiver | str
"""A receiver: a `Receiver` or `MEMORY`."""


def parse_receiver(text: str, cfg: ModelConfig) -> Target:
    """``"2.3/v"``, ``"cross:3.1/kv"``, ``"2.3"`` (all three inputs), ``"3.7/kv@31,33"`` (at those positions only)
    or ``"memory"`` for a model of ``cfg``. Raises ValueError naming what is allowed; TypeError for a non-string."""
    check_type(text, str, "a receiver is a str such as '2.3/v', 'cross:3.1/kv' or 'memory'")
    if text.strip() == MEMORY:
        return MEMORY
    spec, at, where = text.strip().partition("@")
    head, slash, inputs = spec.strip().partition("/")
    inputs = inputs.strip() if slash else INPUTS
    if not inputs or any(name not in INPUTS for name in inputs) or len(set(inputs)) < len(inputs):
        raise ValueError(f"bad receiver {text!r}: after '/' give some of q, k, v (e.g. '2.3/v', 'cross:3.1/kv')")
    places = [place.strip() for place in where.split(",")] if at else []
    if at and not (places and all(place.isascii() and place.isdigit() for place in places)):
        raise ValueError(f"bad receiver {text!r}: after '@' give 0-based positions, e.g. '3.7/kv@31,33'")
    positions = tuple(sorted({int(place) for place in places})) if at else None
    return Receiver(parse_head(head, cfg), "".join(name for name in INPUTS if name in inputs), positions)


def reachable(cfg: ModelConfig, senders: Sequence[Head], head: Head) -> str:
    """The inputs of ``head`` that ``senders`` reach along paths through no other head (``""`` for none): a later
    encoder head's q/k/v from an encoder sender, a cross-attention's k/v from any encoder sender, a later decoder
    head's q/k/v (a cross-attention's q) from a decoder sender."""
    encoder = [s.layer for s in senders if s.stack == "encoder"]
    decoder = [_order(cfg, s) for s in senders if s.stack == "decoder"]
    if head.stack == "encoder":
        return INPUTS if encoder and min(encoder) < head.layer else ""
    later = bool(decoder) and min(decoder) < _order(cfg, head)
    if head.attn == "cross_attn":
        return ("q" if later else "") + ("kv" if encoder else "")
    return INPUTS if later else ""


def _order(cfg: ModelConfig, head: Head) -> int:
    """The place of ``head``'s attention block in the forward pass."""
    if head.stack == "encoder":
        return head.layer
    return cfg.n_encoder_layers + 2 * head.layer + (head.attn == "cross_attn")


def _module_heads(cfg: ModelConfig, module: str) -> list[Head]:
    stack, layer, attn = module.split(".")
    return [Head(stack, int(layer), head, attn) for head in range(cfg.n_heads)]


@dataclass(frozen=True)
class PathEffect:
    """One path-patched run's measures (answers NaN where a receiver is fed by the decoder's teacher-forced input)."""

    normalized: float
    logit_diff: float
    source_answers: float
    other_answers: float


class _PathRuns:
    """Runs 1 of some pairs (every head's output of the source and the target) and runs 2 and 3 on them."""

    def __init__(self, model: HookedEncoderDecoder, pairs: Sequence[MinimalPair]):
        self.model, self.cfg = model, model.cfg
        self.batch: PairBatch = pair_batch(pairs)
        outputs = [f"{module}.hook_z" for module in attention_modules(self.cfg)]
        self.runs: PairRuns = pair_runs(model, pairs, outputs, self.batch, parting_steps(pairs), save_target=outputs)
        self.outcomes = answer_outcomes(model, self.runs.target, self.batch.source_answers, self.batch.target_answers)

    def frozen(self, senders: Sequence[Head], record: Sequence[str]) -> dict[str, Tensor]:
        """Run 2: the senders' outputs from the source, every other head's from the target; returns ``record``'s."""
        patches = {}
        for module in attention_modules(self.cfg):
            hook = f"{module}.hook_z"
            cells = [(s.head, None) for s in senders if s.hook("z") == hook]
            patches[hook] = partial(
                _freeze, target=self.runs.target_saved[hook], source=self.runs.saved[hook], cells=cells
            )
        return run_patched(self.model, self.runs.target, self.runs.tgt, patches, save=record)

    def through(self, receivers: Sequence[Target], recorded: dict[str, Tensor], answers: bool) -> PathEffect:
        """Run 3: the target with the ``receivers``' inputs from run 2's ``recorded``."""
        patches = _receiver_patches(receivers, recorded)
        return self.effect(patches, answers and all(_encoder_fed(hook) for hook in patches))

    def effect(self, patches: dict[str, Patch], answers: bool) -> PathEffect:
        """The target run under ``patches``, measured (and decoded greedily where ``answers``)."""
        runs = self.runs
        diff = float(runs.measure(run_patched(self.model, runs.target, runs.tgt, patches)["logits"]))
        shares = self.outcomes(patches) if answers else torch.full((2,), torch.nan)
        normalized = normalized_diff(diff, runs.source_diff, runs.target_diff)
        return PathEffect(normalized, diff, float(shares[0]), float(shares[1]))


Cells = list[tuple[int, tuple[int, ...] | None]]
"""(head, positions) cells of a ``[batch, pos, head, d_head]`` activation; None: all positions."""


def _freeze(tensor: Tensor, target: Tensor, source: Tensor, cells: Cells) -> Tensor:
    """The target run's output with the source run's at the senders' ``cells``."""
    return _take(target, source, cells)


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
            _check_positions(receiver, recorded[hook].shape[1])
            cells.setdefault(hook, []).append((receiver.head.head, receiver.positions))
    return patches | {hook: partial(_take, donor=recorded[hook], cells=c) for hook, c in cells.items()}


def _check_positions(receiver: Receiver, length: int) -> None:
    if receiver.positions is not None and receiver.positions[-1] >= length:
        raise ValueError(
            f"receiver {receiver.label}: its inputs have {length} positions (0..{length - 1}) in these prompts"
        )


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


def check_paths(cfg: ModelConfig, senders: Sequence[Head], receivers: Sequence[Target]) -> None:
    """Raise ValueError for no senders, a repeated sender, a receiver input no sender reaches, or the memory beside
    encoder receivers (patching it replaces all they changed)."""
    if not senders:
        raise ValueError("path patching needs at least one sender head")
    if len(set(senders)) < len(senders):
        raise ValueError(f"senders repeat a head: {', '.join(s.label for s in senders)}")
    if MEMORY in receivers and any(r != MEMORY and r.head.stack == "encoder" for r in receivers):
        raise ValueError(
            "the memory cannot receive beside encoder heads: patching the memory replaces the whole encoder output, "
            "so what the encoder receivers changed would not reach the decoder; patch them in separate runs"
        )
    for receiver in receivers:
        if receiver == MEMORY:
            if not any(s.stack == "encoder" for s in senders):
                raise ValueError("the memory receives only from encoder heads; the senders are all decoder heads")
            continue
        missing = [name for name in receiver.inputs if name not in reachable(cfg, senders, receiver.head)]
        if missing:
            raise ValueError(
                f"receiver {receiver.label}: no sender reaches its {'/'.join(missing)} along a path through no other "
                f"head (it reads {reachable(cfg, senders, receiver.head) or 'nothing'} of "
                f"{', '.join(s.label for s in senders)}); receivers sit after their senders"
            )


def patch_path(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    senders: Sequence[Head],
    receivers: Sequence[Target],
    answers: bool = True,
) -> PathEffect:
    """The effect of the ``senders``' outputs (all positions, taken from the source prompts) on the target prompts'
    answers through the ``receivers``' inputs only. Answers are decoded where ``answers`` and every receiver is fed
    by the encoder alone. Raises ValueError for no receivers, `check_paths`' cases and pairs `pair_batch` refuses."""
    if not receivers:
        raise ValueError("path patching needs at least one receiver (a head's q/k/v or 'memory')")
    check_paths(model.cfg, senders, receivers)
    with torch.no_grad(), eval_mode(model):
        runs = _PathRuns(model, pairs)
        return runs.through(receivers, runs.frozen(senders, _receiver_hooks(receivers)), answers)


def sender_effect(model: HookedEncoderDecoder, pairs: Sequence[MinimalPair], heads: Sequence[Head]) -> PathEffect:
    """The ``heads``' whole effect (their outputs from the source prompts, everything after them free): activation
    patching of their ``hook_z``, for comparison with their paths."""
    check_paths(model.cfg, heads, ())
    with torch.no_grad(), eval_mode(model):
        runs = _PathRuns(model, pairs)
        return runs.effect(_output_patches(runs, heads), all(h.stack == "encoder" for h in heads))


def _output_patches(runs: _PathRuns, heads: Sequence[Head]) -> dict[str, Patch]:
    by_hook: dict[str, Cells] = {}
    for head in heads:
        by_hook.setdefault(head.hook("z"), []).append((head.head, None))
    return {hook: partial(_take, donor=runs.runs.saved[hook], cells=c) for hook, c in by_hook.items()}


@dataclass(frozen=True)
class PathSweep:
    """What `paths_from` and `paths_into` return: the grid (NaN where no path runs) and the unpatched runs' measures;
    `paths_from` adds the senders' path into the memory (None for decoder senders)."""

    grid: PatchingGrid
    source_logit_diff: float
    target_logit_diff: float
    memory: PathEffect | None = None

    @property
    def normalized(self) -> Float[Tensor, "row column"]:
        """The grid as (patched - target run) / (source run - target run)."""
        return normalized_diff(self.grid.logit_diff, self.source_logit_diff, self.target_logit_diff)


def paths_from(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    senders: Sequence[Head],
    progress: Callable[[int, int], None] | None = None,
    answers: bool = True,
) -> PathSweep:
    """Every receiver of ``senders``: a row per later attention module and input (``q``, ``k``, ``v`` and all it
    reaches together), a column per head and one for all the module's heads together, and the path into the memory.
    One run 2 serves every cell (what it records does not depend on which inputs are patched afterwards). Raises
    ValueError as `check_paths` and `pair_batch`."""
    check_paths(model.cfg, senders, ())
    cfg = model.cfg
    rows: list[tuple[str, str, list[Receiver]]] = []
    for module in attention_modules(cfg):
        heads = _module_heads(cfg, module)
        reached = reachable(cfg, senders, heads[0])
        for kind in [*reached, reached] if len(reached) > 1 else list(reached):
            hook = f"{module}.hook_{kind}" if len(kind) == 1 else f"{module}.hook_{{{','.join(kind)}}}"
            rows.append((hook, f"{module_label(module)}: {','.join(kind)}", [Receiver(h, kind) for h in heads]))
    encoder_senders = any(s.stack == "encoder" for s in senders)
    cells = [(row, column) for row in range(len(rows)) for column in range(cfg.n_heads + 1)]
    diff = torch.full((len(rows), cfg.n_heads + 1), torch.nan)
    shares = torch.full((2, len(rows), cfg.n_heads + 1), torch.nan)
    with torch.no_grad(), eval_mode(model):
        runs = _PathRuns(model, pairs)
        every = [receiver for _, _, row in rows for receiver in row] + ([MEMORY] if encoder_senders else [])
        recorded = runs.frozen(senders, _receiver_hooks(every))
        for done, (row, column) in enumerate(cells, 1):
            heads = rows[row][2]
            cell = runs.through(heads[column : column + 1] or heads, recorded, answers)
            diff[row, column] = cell.logit_diff
            shares[:, row, column] = torch.tensor([cell.source_answers, cell.other_answers])
            if progress:
                progress(done, len(cells) + encoder_senders)
        memory = runs.through([MEMORY], recorded, answers) if encoder_senders else None
        if progress and memory:
            progress(len(cells) + 1, len(cells) + 1)
    site = "paths from " + ", ".join(s.label for s in senders)
    columns = (*_head_columns(cfg), "all heads")
    grid = PatchingGrid(site, tuple(r[0] for r in rows), tuple(r[1] for r in rows), columns, diff, *shares)
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
    diff = torch.full((len(modules), cfg.n_heads), torch.nan)
    shares = torch.full((2, len(modules), cfg.n_heads), torch.nan)
    with torch.no_grad(), eval_mode(model):
        runs = _PathRuns(model, pairs)
        hooks = _receiver_hooks(receivers)
        for done, sender in enumerate(candidates, 1):
            cell = runs.through(receivers, runs.frozen([sender], hooks), answers)
            row = modules.index(sender.hook("z").removesuffix(".hook_z"))
            diff[row, sender.head] = cell.logit_diff
            shares[:, row, sender.head] = torch.tensor([cell.source_answers, cell.other_answers])
            if progress:
                progress(done, len(candidates))
    rows, hooks_z = tuple(module_label(m) for m in modules), tuple(f"{m}.hook_z" for m in modules)
    site = f"paths into {', '.join(labels(receivers))}"
    grid = PatchingGrid(site, hooks_z, rows, _head_columns(cfg), diff, *shares)
    return PathSweep(grid, runs.runs.source_diff, runs.runs.target_diff)


def labels(items: Sequence[Head | Target]) -> list[str]:
    """The labels of heads and receivers: ``["1.3", "2.3/v", "memory"]``."""
    return [item if item == MEMORY else item.label for item in items]


def _head_columns(cfg: ModelConfig) -> tuple[str, ...]:
    return tuple(f"head {h + 1}" for h in range(cfg.n_heads))


def senders_reaching(cfg: ModelConfig, receivers: Sequence[Target]) -> list[Head]:
    """Every head, in forward order, that reaches every input of ``receivers``. Raises ValueError for no receivers
    or none such."""
    if not receivers:
        raise ValueError("path patching needs at least one receiver (a head's q/k/v or 'memory')")
    modules = attention_modules(cfg)
    candidates = [head for m in modules for head in _module_heads(cfg, m) if _reaches_all(cfg, head, receivers)]
    if not candidates:
        raise ValueError(f"no head reaches every input of {', '.join(labels(receivers))}; each needs a head before it")
    return candidates


def _reaches_all(cfg: ModelConfig, sender: Head, receivers: Sequence[Target]) -> bool:
    try:
        check_paths(cfg, [sender], receivers)
    except ValueError:
        return False
    return True
