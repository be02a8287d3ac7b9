"""The explorer's whole view as a URL query string, and its parts parsed for the model.

``?model=copy-200&task=...&layer=3&graph=2&heads=all&cells=3:35-37:0-127:zero&ablate=2.7&patch=auto&source=...&pair=2``
(and ``&tab=patching&sender=1.3&answers=count``: the patching tab, its path patching from head 1.3, every patched
run's answer decoded)

A field is in the query only when it differs from its default (the model always): a control that shows a
stand-in for a default (the lens radio shows the last layer for ``layer=""``) does not add it.

Layers and heads are 1-based, as in the paper; cell positions and dimensions are 0-based (as on the
heatmap's axes). `ViewState.from_query` accepts any query string (unknown keys are ignored, bad values are
kept and reported when parsed), so a copied link always reproduces the view or names what is wrong.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from urllib.parse import parse_qs, urlencode

from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.explorer.compute import ABLATION_MODES, CellBox, Interventions
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.heads import Head, parse_head

DEFAULT_TASK = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd"
DEFAULT_SOURCE = "abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd"
HEAD_VIEWS = ("average", "all")
TABS = ("graph", "training", "patching")
ANSWER_VIEWS = ("off", "count")
"""The patching tab's ``answers``: the logit difference only, or every patched run's greedy answer as well."""


@dataclass(frozen=True)
class ViewState:
    """Everything the explorer shows, as strings from the URL (see the module docstring)."""

    model: str = ""
    task: str = DEFAULT_TASK
    layer: str = ""
    graph: str = "1"
    heads: str = "average"
    cells: str = ""
    ablate: str = ""
    patch: str = ""
    source: str = DEFAULT_SOURCE
    pair: str = ""
    tab: str = "graph"
    sender: str = ""
    answers: str = "off"

    def to_query(self) -> str:
        """``?key=value&...`` with the fields that differ from the defaults."""
        default = ViewState()
        items = {k: v for k, v in asdict(self).items() if v != getattr(default, k) or k == "model"}
        return "?" + urlencode(items)

    @classmethod
    def from_query(cls, query: str | None) -> ViewState:
        """The state of a query string (leading ``?`` optional); missing keys take their defaults."""
        values = parse_qs((query or "").lstrip("?"), keep_blank_values=True)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v[-1] for k, v in values.items() if k in known})

    def reset(self) -> ViewState:
        """The same model, task and view with every intervention cleared."""
        return replace(self, cells="", ablate="", patch="")


def parse_layer(text: str, n_layers: int) -> int:
    """A 1-based layer number from ``text`` ("" is the last layer), returned 0-based.

    Raises ValueError naming the allowed range for anything else, a digit other than ASCII 0-9 included (``int``
    reads a full-width "２" as 2)."""
    if not text.strip():
        return n_layers - 1
    try:
        layer = _number(text)
    except ValueError:
        layer = None
    if layer is None or not 1 <= layer <= n_layers:
        raise ValueError(f"layer {text!r} is not one of 1..{n_layers}")
    return layer - 1


def parse_pair(text: str) -> int:
    """The number of the succ/pred pair last drawn ("" when none was: 0). Raises ValueError for anything else."""
    if not text.strip():
        return 0
    try:
        return _number(text)
    except ValueError:
        raise ValueError(f"pair {text!r} is not a pair number (1, 2, ...)") from None


def parse_head_view(text: str) -> str:
    """The attention view, "average" (the heads' mean) or "all" (a panel per head). Raises ValueError for
    anything else (a link's ``heads=`` naming no view used to show the average without a word)."""
    if text not in HEAD_VIEWS:
        raise ValueError(f"heads {text!r} is not one of {', '.join(HEAD_VIEWS)} (the attention view)")
    return text


def parse_tab(text: str) -> str:
    """The tab, "graph", "training" or "patching". Raises ValueError for anything else (a link's unknown ``tab=``
    used to show neither tab: a blank page)."""
    if text not in TABS:
        raise ValueError(f"tab {text!r} is not one of {', '.join(TABS)}")
    return text


def parse_answers(text: str) -> bool:
    """Whether the patching tab decodes every patched run's answer (``"count"``) or reads the logit difference only
    (``"off"``). Raises ValueError for anything else."""
    if text not in ANSWER_VIEWS:
        raise ValueError(f"answers {text!r} is not one of {', '.join(ANSWER_VIEWS)} (the patched runs' answers)")
    return text == "count"


def parse_heads(text: str, cfg: ModelConfig) -> tuple[Head, ...]:
    """Heads joined by ``+`` (``"2.7+dec:1.3"``, 1-based; a space, as a ``+`` typed into a URL reads, joins them
    too); "" gives none. Raises ValueError for a bad label."""
    return tuple(parse_head(label, cfg) for label in text.replace(" ", "+").split("+") if label.strip())


def parse_cells(text: str) -> tuple[CellBox, ...]:
    """Cell boxes ``LAYER:P0-P1:D0-D1:MODE`` joined by ``,`` (layer 1-based; positions, dims 0-based; the mode in
    any case). Raises ValueError naming the malformed box (and, for an unknown mode, the allowed ones)."""
    boxes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        pieces = [piece.strip() for piece in part.split(":")]
        if len(pieces) != 4:
            raise ValueError(f"bad cell box {part!r}: write LAYER:P0-P1:D0-D1:MODE, mode zero or mean")
        mode = pieces[3].lower()
        if mode not in ABLATION_MODES:
            raise ValueError(
                f"bad cell box {part!r}: unknown mode {pieces[3]!r}; choose one of {', '.join(ABLATION_MODES)}"
            )
        try:
            layer = _number(pieces[0]) - 1
            (p0, p1), (d0, d1) = (tuple(_number(x) for x in r.split("-")) for r in pieces[1:3])
        except ValueError:
            raise ValueError(f"bad cell box {part!r}: numbers expected, e.g. 3:35-37:0-127:zero") from None
        boxes.append(CellBox(layer, (min(p0, p1), max(p0, p1)), (min(d0, d1), max(d0, d1)), mode))
    return tuple(boxes)


def _number(text: str) -> int:
    """``text`` (spaces around it aside) as an int when it is ASCII digits only; ValueError for anything else ``int``
    would read ("1_0", full-width digits, signs)."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(text)
    return int(text)


def format_cells(boxes: tuple[CellBox, ...]) -> str:
    """The inverse of `parse_cells`."""
    return ",".join(f"{b.layer + 1}:{b.positions[0]}-{b.positions[1]}:{b.dims[0]}-{b.dims[1]}:{b.mode}" for b in boxes)


def selection_box(selected: dict | None, layer: int, mode: str, n_pos: int, d_model: int) -> CellBox | None:
    """The cells inside a plotly box selection (``selectedData`` with a ``range``) on the hidden-state
    heatmap of 0-based ``layer`` (x: dimension, y: position); None when nothing is selected."""
    if not selected or "range" not in selected:
        return None
    (x0, x1), (y0, y1) = sorted(selected["range"]["x"]), sorted(selected["range"]["y"])
    dims = (max(0, round(x0)), min(d_model - 1, round(x1)))
    positions = (max(0, round(y0)), min(n_pos - 1, round(y1)))
    if dims[0] > dims[1] or positions[0] > positions[1]:
        return None
    return CellBox(layer, positions, dims, mode)


def interventions_of(state: ViewState, cfg: ModelConfig, matching: tuple[Head, ...] | None = None) -> Interventions:
    """The interventions named by ``state`` for a model of ``cfg``; ``patch=auto`` takes ``matching`` (the
    model's detected matching heads). Raises ValueError naming the first bad part."""
    patch_text = state.patch.strip().lower()
    if patch_text == "auto":
        if not matching:
            raise ValueError("patch=auto needs the model's matching heads, and none was detected")
        patched = matching
    else:
        patched = parse_heads(state.patch, cfg)
    return Interventions(
        lens_layer=parse_layer(state.layer, cfg.n_encoder_layers),
        cells=parse_cells(state.cells),
        ablated_heads=parse_heads(state.ablate, cfg),
        patched_heads=patched,
        source=_source_task(state.source) if patched else None,
    )


def _source_task(text: str) -> Task:
    """The source task of patching; a ValueError says it is the source task that is wrong."""
    try:
        return Task.parse(text)
    except ValueError as err:
        raise ValueError(f"source task: {err}") from None


def with_selection(state: ViewState, selected: dict | None, mode: str, cfg: ModelConfig) -> ViewState:
    """``state`` with the cells of a hidden-state box selection (on the graph layer) added in ``mode``.

    Unchanged when nothing is selected. Raises ValueError for a bad task, layer or existing cell text."""
    layer = parse_layer(state.graph, cfg.n_encoder_layers)
    n_pos = len(encode_tasks([Task.parse(state.task)], with_answers=False).src[0])
    box = selection_box(selected, layer, mode, n_pos, cfg.d_model)
    if box is None:
        return state
    return replace(state, cells=format_cells((*parse_cells(state.cells), box)))


def with_minimal_pair(state: ViewState, seed: int, source: str = "succ", target: str = "pred") -> ViewState:
    """``state`` with a ``target`` task and its ``source`` twin (a minimal pair, standard alphabet, 3-letter
    windows, drawn with ``seed``, which becomes the state's ``pair``) and the matching heads chosen for patching."""
    drawn = minimal_pairs(source, target, 1, seed=seed, lengths=(3,))[0]
    task, twin = str(drawn.target.with_answer(None)), str(drawn.source.with_answer(None))
    return replace(state, task=task, source=twin, patch="auto", pair=str(seed))


def with_next_pair(state: ViewState) -> ViewState:
    """``state`` with the succ/pred pair after the one it names (the first when it names none, or no pair number:
    the button mends a link's bad ``pair``): a reloaded link goes on from its own pair."""
    try:
        drawn = parse_pair(state.pair)
    except ValueError:
        drawn = 0
    return with_minimal_pair(state, seed=drawn + 1)
