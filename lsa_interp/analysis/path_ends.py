"""The two ends of a patched path (`lsa_interp.analysis.path_patching`): the *senders*, heads whose outputs are
taken from the source prompt, and the *receivers*, heads' queries, keys or values (or the memory) that read them;
their labels, which receivers a set of senders reaches along paths through no other head, and the checks of paths,
chains and frozen heads.

A sender is a head at all positions (``"1.3"``) or at some (``"1.3@31,33"``); a receiver a head and its inputs
(``"2.3/v"``, ``"cross:3.1/kv"``, ``"2.3"`` = q, k and v), at all positions or at some (``"3.7/kv@31,33"``), or
``"memory"``. Positions are 0-based places of the activation's sequence: the encoder's for encoder heads and a
cross-attention's keys and values, the decoder's for decoder heads' outputs and the other inputs. Between heads a
path runs through the residual stream, MLPs and norms, which act on each position alone: a sender at some positions
reaches a receiver in the same sequence at those positions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lsa_interp.analysis.patch_grids import attention_modules
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.heads import Head, parse_heads
from lsa_interp.utils import check_type

MEMORY = "memory"
"""The receiver that is the encoder output (``encoder.ln_final.hook_out``), read by every cross-attention."""
INPUTS = "qkv"

Positions = tuple[int, ...] | None
"""0-based positions, sorted and distinct; None: all."""


@dataclass(frozen=True, order=True)
class Sender:
    """A head whose output is taken from the source prompt, at ``positions`` only (``None``: at all)."""

    head: Head
    positions: Positions = None

    @property
    def label(self) -> str:
        """``"1.3"``, ``"1.3@31,33"``."""
        return self.head.label + _at(self.positions)


@dataclass(frozen=True, order=True)
class Receiver:
    """A head and the inputs through which it receives: a string of ``q``, ``k``, ``v`` in that order, at
    ``positions`` only or at all (``None``)."""

    head: Head
    inputs: str = INPUTS
    positions: Positions = None

    @property
    def label(self) -> str:
        """``"2.3/v"``, ``"cross:3.1/kv"``, ``"3.7/kv@31,33"``."""
        return f"{self.head.label}/{self.inputs}{_at(self.positions)}"

    def hooks(self) -> list[str]:
        """The hook of each input (``encoder.1.attn.hook_v``)."""
        return [self.head.hook(name) for name in self.inputs]


Target = Receiver | str
"""A receiver: a `Receiver` or `MEMORY`."""


def _at(positions: Positions) -> str:
    return "" if positions is None else "@" + ",".join(map(str, positions))


def _split_positions(text: str, kind: str, example: str) -> tuple[str, Positions]:
    """``text`` before ``@`` and the positions after it (None without ``@``). Raises ValueError for a bad list."""
    spec, at, where = text.strip().partition("@")
    if not at:
        return spec.strip(), None
    try:
        return spec.strip(), parse_positions(where)
    except ValueError:
        raise ValueError(f"bad {kind} {text!r}: after '@' give 0-based positions, e.g. {example!r}") from None


def parse_positions(text: str) -> tuple[int, ...]:
    """``"31,33"``: 0-based positions, sorted and distinct. Raises ValueError naming what is allowed; TypeError for a
    non-string."""
    check_type(text, str, "positions are a str such as '31,33'")
    places = [place.strip() for place in text.split(",")]
    if not all(place.isascii() and place.isdigit() for place in places):
        raise ValueError(f"bad positions {text!r}: give 0-based positions separated by commas, e.g. '31,33'")
    return tuple(sorted({int(place) for place in places}))


def parse_senders(text: str, cfg: ModelConfig) -> list[Sender]:
    """``"1.3"`` (at all positions), ``"1.3@31,33"`` (at those only), ``"dec:2.1@0"``, ``"1.*"`` (every head of
    the layer) for a model of ``cfg``: its senders. Raises ValueError naming what is allowed; TypeError for a
    non-string."""
    check_type(text, str, "senders are a str such as '1.3', '1.3@31,33' or '1.*'")
    heads, positions = _split_positions(text, "sender", "1.3@31,33")
    return [Sender(head, positions) for head in parse_heads(heads, cfg)]


def parse_receivers(text: str, cfg: ModelConfig) -> list[Target]:
    """``"2.3/v"``, ``"cross:3.1/kv"``, ``"2.3"`` (all three inputs), ``"3.7/kv@31,33"`` (at those positions only),
    ``"3.*/kv"`` (every head of the layer) or ``"memory"`` for a model of ``cfg``: its receivers. Raises ValueError
    naming what is allowed; TypeError for a non-string."""
    check_type(text, str, "a receiver is a str such as '2.3/v', 'cross:3.1/kv' or 'memory'")
    if text.strip() == MEMORY:
        return [MEMORY]
    spec, positions = _split_positions(text, "receiver", "3.7/kv@31,33")
    heads, slash, inputs = spec.partition("/")
    inputs = inputs.strip() if slash else INPUTS
    if not inputs or any(name not in INPUTS for name in inputs) or len(set(inputs)) < len(inputs):
        raise ValueError(f"bad receiver {text!r}: after '/' give some of q, k, v (e.g. '2.3/v', 'cross:3.1/kv')")
    ordered = "".join(name for name in INPUTS if name in inputs)
    return [Receiver(head, ordered, positions) for head in parse_heads(heads, cfg)]


def parse_receiver(text: str, cfg: ModelConfig) -> Target:
    """One receiver of `parse_receivers`. Raises ValueError for a layer's heads (``"3.*"``) and as it."""
    found = parse_receivers(text, cfg)
    if len(found) > 1:
        raise ValueError(f"bad receiver {text!r}: name one head here, not a layer's heads")
    return found[0]


def as_senders(items: Sequence[Head | Sender]) -> list[Sender]:
    """Heads as senders at all positions; senders as they are."""
    return [item if isinstance(item, Sender) else Sender(item) for item in items]


def reachable(cfg: ModelConfig, senders: Sequence[Head | Sender], head: Head) -> str:
    """The inputs of ``head`` that ``senders`` reach along paths through no other head (``""`` for none): a later
    encoder head's q/k/v from an encoder sender, a cross-attention's k/v from any encoder sender, a later decoder
    head's q/k/v (a cross-attention's q) from a decoder sender. Positions are not looked at (`check_paths` is)."""
    heads = [sender.head for sender in as_senders(senders)]
    return "".join(name for name in INPUTS if _reaching(cfg, heads, head, name))


def _reaching(cfg: ModelConfig, heads: Sequence[Head], receiver: Head, name: str) -> list[Head]:
    """The ``heads`` that reach ``receiver``'s input ``name``."""
    if receiver.attn == "cross_attn" and name in "kv":
        return [h for h in heads if h.stack == "encoder"]
    return [h for h in heads if h.stack == receiver.stack and _order(cfg, h) < _order(cfg, receiver)]


def _order(cfg: ModelConfig, head: Head) -> int:
    """The place of ``head``'s attention block in the forward pass."""
    if head.stack == "encoder":
        return head.layer
    return cfg.n_encoder_layers + 2 * head.layer + (head.attn == "cross_attn")


def module_heads(cfg: ModelConfig, module: str) -> list[Head]:
    """Every head of the attention ``module`` (``"decoder.1.cross_attn"``)."""
    stack, layer, attn = module.split(".")
    return [Head(stack, int(layer), head, attn) for head in range(cfg.n_heads)]


def check_paths(cfg: ModelConfig, senders: Sequence[Head | Sender], receivers: Sequence[Target]) -> None:
    """Raise ValueError for no senders, a head among them twice, a receiver input no sender reaches (or reaches at
    none of the receiver's positions), or the memory beside encoder receivers (patching it replaces all they
    changed)."""
    given = as_senders(senders)
    if not given:
        raise ValueError("path patching needs at least one sender head")
    heads = [sender.head for sender in given]
    if len(set(heads)) < len(heads):
        raise ValueError(
            f"senders repeat a head: {', '.join(labels(given))}; give each head once, with all its positions after @"
        )
    if MEMORY in receivers and any(r != MEMORY and r.head.stack == "encoder" for r in receivers):
        raise ValueError(
            "the memory cannot receive beside encoder heads: patching the memory replaces the whole encoder output, "
            "so what the encoder receivers changed would not reach the decoder; patch them in separate runs"
        )
    for receiver in receivers:
        if receiver == MEMORY:
            if not any(h.stack == "encoder" for h in heads):
                raise ValueError("the memory receives only from encoder heads; the senders are all decoder heads")
            continue
        missing = [name for name in receiver.inputs if name not in reachable(cfg, given, receiver.head)]
        if missing:
            raise ValueError(
                f"receiver {receiver.label}: no sender reaches its {'/'.join(missing)} along a path through no other "
                f"head (it reads {reachable(cfg, given, receiver.head) or 'nothing'} of "
                f"{', '.join(short_labels(given, cfg.n_heads))}); receivers sit after their senders"
            )
        _check_overlap(cfg, given, receiver)


def _check_overlap(cfg: ModelConfig, senders: list[Sender], receiver: Receiver) -> None:
    """Refuse a receiver input whose reaching senders all write at positions it does not read."""
    if receiver.positions is None:
        return
    for name in receiver.inputs:
        reaching = set(_reaching(cfg, [s.head for s in senders], receiver.head, name))
        written = [s.positions for s in senders if s.head in reaching]
        if all(w is not None and not set(w) & set(receiver.positions) for w in written):
            raise ValueError(
                f"receiver {receiver.label}: its {name} reads none of the positions its senders write "
                f"({', '.join(labels([s for s in senders if s.head in reaching]))}); a path between heads stays at "
                "its position"
            )


def check_chain(
    cfg: ModelConfig,
    senders: Sequence[Head | Sender],
    through: Sequence[Sequence[Target]],
    receivers: Sequence[Target],
) -> None:
    """Raise ValueError for an empty hop, the memory as a hop (it ends a path), or a step of the chain that
    `check_paths` refuses: the senders into the first hop, each hop's heads (at all positions) into the next, the
    last into the receivers."""
    if any(not hop for hop in through):
        raise ValueError("a hop of a chain needs at least one receiver (a head's q/k/v)")
    if any(MEMORY in hop for hop in through):
        raise ValueError("the memory ends a path: give it as a receiver, not as a hop")
    stages = [as_senders(senders), *through, receivers]
    for step, (before, after) in enumerate(zip(stages, stages[1:])):
        sending = before if step == 0 else [Sender(head) for head in dict.fromkeys(r.head for r in before)]
        check_paths(cfg, sending, after)


def check_direct(senders: Sequence[Head | Sender], through: Sequence[Sequence[Target]]) -> None:
    """Raise ValueError for a direct path beside no chain (``through`` empty: the path is direct already) or a
    sender that is also a hop's head (it cannot both send the source's output and relay what it receives)."""
    if not through:
        raise ValueError("a direct path joins a chain's: give through hops as well (without hops a path is direct)")
    hop_heads = {receiver.head for hop in through for receiver in hop if receiver != MEMORY}
    both = sorted({sender.head for sender in as_senders(senders)} & hop_heads)
    if both:
        raise ValueError(f"{', '.join(labels(both))}: a head cannot both send and relay in a hop of the same chain")


def check_frozen(senders: Sequence[Head | Sender], frozen: Sequence[Head]) -> None:
    """Raise ValueError for a head both among the ``senders`` and ``frozen``, or frozen twice."""
    if len(set(frozen)) < len(frozen):
        raise ValueError(f"frozen heads repeat a head: {', '.join(labels(frozen))}")
    both = sorted({sender.head for sender in as_senders(senders)} & set(frozen))
    if both:
        raise ValueError(f"{', '.join(labels(both))}: a head cannot both send and be frozen")


def senders_reaching(cfg: ModelConfig, receivers: Sequence[Target]) -> list[Head]:
    """Every head, in forward order, that reaches every input of ``receivers``. Raises ValueError for no receivers
    or none such."""
    if not receivers:
        raise ValueError("path patching needs at least one receiver (a head's q/k/v or 'memory')")
    modules = attention_modules(cfg)
    candidates = [head for m in modules for head in module_heads(cfg, m) if _reaches_all(cfg, head, receivers)]
    if not candidates:
        raise ValueError(f"no head reaches every input of {', '.join(labels(receivers))}; each needs a head before it")
    return candidates


def _reaches_all(cfg: ModelConfig, sender: Head, receivers: Sequence[Target]) -> bool:
    try:
        check_paths(cfg, [sender], receivers)
    except ValueError:
        return False
    return True


def labels(items: Sequence[Head | Sender | Target]) -> list[str]:
    """The labels of heads, senders and receivers: ``["1.3", "1.3@31", "2.3/v", "memory"]``."""
    return [item if item == MEMORY else item.label for item in items]


def short_labels(items: Sequence[Head | Sender | Target], n_heads: int) -> list[str]:
    """`labels`, with every head of a layer given alike (same inputs and positions) written once with ``*`` for the
    head: ``["1.3", "3.*/kv@31,33"]`` for a model of ``n_heads`` heads."""
    heads: dict[tuple, set[int]] = {}
    for item in items:
        if item != MEMORY:
            heads.setdefault(_alike(item), set()).add(_head(item).head)
    written, out = set(), []
    for item in items:
        key = None if item == MEMORY else _alike(item)
        if key is None or len(heads[key]) < n_heads:
            out.append(labels([item])[0])
        elif key not in written:
            written.add(key)
            head = _head(item)
            out.append(item.label.replace(f"{head.layer + 1}.{head.head + 1}", f"{head.layer + 1}.*", 1))
    return out


def _head(item: Head | Sender | Receiver) -> Head:
    return item if isinstance(item, Head) else item.head


def _alike(item: Head | Sender | Receiver) -> tuple:
    """What a layer's heads share when given alike: the kind of item, the block and layer, inputs and positions."""
    head = _head(item)
    return type(item), head.stack, head.attn, head.layer, getattr(item, "inputs", ""), getattr(item, "positions", None)
