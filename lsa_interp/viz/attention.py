"""Interactive attention viewer of one task: ``attention_view(model, task).write("view.html")``.

One offline HTML page (plotly.js inlined, nothing fetched) with encoder self-attention, decoder
self-attention and cross-attention (decoder steps x encoder tokens) over the model's own greedy decoding,
each with a layer and head selector and the head average; each encoder layer's hidden states; and the
decoder's top-k next-token probabilities at every step. ``write_circuitsvis`` exports the square views
through circuitsvis (its offline ``local_src``, which inlines circuitsvis' JavaScript).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from lsa_interp.data.task import Task
from lsa_interp.data.vocab import display_token
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS, HookedEncoderDecoder
from lsa_interp.utils import atomic_write
from lsa_interp.viz.attention_data import AttentionData, collect_attention
from lsa_interp.viz.attention_figures import attention_figure, hidden_state_figure, role_legend_html, top_k_figure
from lsa_interp.viz.html import figures_page

if TYPE_CHECKING:
    import plotly.graph_objects as go
    from circuitsvis.utils.render import RenderedHTML

BLOCK_TITLES: dict[str, str] = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention (causal)",
    "cross": "cross-attention (decoder steps x encoder tokens)",
}
"""Attention blocks of the viewer, by name; ``decoder`` and ``encoder`` are square (circuitsvis can show them)."""
_SQUARE_BLOCKS = ("encoder", "decoder")


class AttentionView:
    """The viewer of one task: ``figures`` (plotly, by heading), ``html()``, ``write(path)``, notebook display.

    ``data`` holds the numbers shown (`AttentionData`).
    """

    def __init__(self, data: AttentionData, title: str | None = None) -> None:
        self.data = data
        self.title = title or f"attention: {data.task.spaced()}"
        self.figures: dict[str, go.Figure] = _build_figures(data)

    def html(self) -> str:
        """The whole page as one self-contained HTML document."""
        return figures_page(self.title, self.figures, intro=self._intro())

    def write(self, path: str | Path) -> Path:
        """Write the page to ``path`` atomically (parent directories are created); return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        page = self.html()
        atomic_write(path, lambda tmp: tmp.write_text(page, encoding="utf-8"))
        return path

    def _repr_html_(self) -> str:
        return self.html()

    def circuitsvis(self, stack: str = "encoder", layer: int = 0) -> RenderedHTML:
        """circuitsvis' ``attention_heads`` view of one square block (``stack`` "encoder" or "decoder").

        ``layer`` is 0-based. Returns circuitsvis' ``RenderedHTML``; use its ``local_src`` offline (its
        ``str()`` loads JavaScript from a CDN). Raises ValueError for another stack or a layer out of range.
        """
        from circuitsvis.attention import attention_heads

        if stack not in _SQUARE_BLOCKS:
            raise ValueError(
                f"circuitsvis shows square attention only: stack must be 'encoder' or 'decoder', "
                f"got {stack!r} (cross-attention is in the plotly view)"
            )
        patterns = self.data.pattern(stack)
        if not 0 <= layer < patterns.shape[0]:
            raise ValueError(f"{stack} layer {layer} out of range: 0..{patterns.shape[0] - 1} (0-based)")
        tokens = self.data.src_tokens if stack == "encoder" else self.data.tgt_tokens
        names = [Head(stack, layer, head).label for head in range(patterns.shape[1])]
        return attention_heads(
            attention=patterns[layer].numpy(),
            tokens=list(tokens),
            attention_head_names=names,
            mask_upper_tri=stack == "decoder",
        )

    def write_circuitsvis(self, path: str | Path, stack: str = "encoder", layer: int = 0) -> Path:
        """Write one circuitsvis page (offline ``local_src`` in a full HTML document); return its path.

        Raises ValueError as `circuitsvis` does.
        """
        rendered = self.circuitsvis(stack, layer)
        title = f"{stack} layer {layer + 1} (1-based): {self.data.task.spaced()}"
        page = (
            "<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title></head><body style='font-family: system-ui, sans-serif'>"
            f"<h1 style='font-size: 1.2rem'>{html.escape(title)}</h1>{rendered.local_src}</body></html>"
        )
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: tmp.write_text(page, encoding="utf-8"))
        return path

    def write_all_circuitsvis(self, directory: str | Path) -> list[Path]:
        """Write ``encoder_layer_L.html`` and ``decoder_layer_L.html`` (1-based L) for every layer; return paths."""
        directory = Path(directory)
        return [
            self.write_circuitsvis(directory / f"{stack}_layer_{layer + 1}.html", stack, layer)
            for stack in _SQUARE_BLOCKS
            for layer in range(self.data.pattern(stack).shape[0])
        ]

    def _intro(self) -> str:
        data = self.data
        lines = [
            f"task: <code>{html.escape(data.task.spaced())}</code>",
            f"model's greedy answer: <code>{html.escape(data.answer) or '(empty)'}</code>",
        ]
        if data.task.answer is not None:
            verdict = "correct" if data.answer == data.task.answer else "wrong"
            lines.append(f"expected answer: <code>{html.escape(data.task.answer)}</code> ({verdict})")
        lines.append(
            "Layers and heads are numbered from 1, as in the paper (head 2.7 = encoder layer 2, head 7). "
            "Hover a cell for source -> destination: weight. Blank cells are masked: "
            "a decoder step cannot attend to the steps after it."
        )
        return "<p>" + "<br>".join(lines) + "</p>" + role_legend_html(data.src_roles)


def _build_figures(data: AttentionData) -> dict[str, go.Figure]:
    src, tgt, roles = data.src_labels, data.tgt_labels, data.src_roles
    axes = {"encoder": (src, src, roles, roles), "decoder": (tgt, tgt, None, None), "cross": (tgt, src, None, roles)}
    figures = {}
    for block, title in BLOCK_TITLES.items():
        q_labels, k_labels, q_roles, k_roles = axes[block]
        masked = data.masked(block)
        figures[title] = attention_figure(data.pattern(block), q_labels, k_labels, title, q_roles, k_roles, masked)
    figures["encoder hidden states"] = hidden_state_figure(data.resid, src, roles)
    tokens = [[display_token(t) for t in row] for row in data.top_ids.tolist()]
    figures["next-token probabilities"] = top_k_figure(data.tgt_tokens, data.predicted, tokens, data.top_probs.numpy())
    return figures


def attention_view(
    model: HookedEncoderDecoder,
    task: Task | str,
    top_k: int = 5,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    title: str | None = None,
) -> AttentionView:
    """Greedy-decode ``task`` (a `Task` or its text) with ``model`` and return its `AttentionView`.

    Raises TypeError for anything but one task (a list: view each task on its own), ValueError for an unparsable
    task text, a ``top_k`` outside 1..vocab or a bad ``max_new_tokens``.
    """
    task = Task.parse(task) if isinstance(task, str) else task
    if not isinstance(task, Task):
        raise TypeError(f"attention_view shows one task (a Task or its text), got {type(task).__name__}")
    return AttentionView(collect_attention(model, task, top_k, max_new_tokens), title)
