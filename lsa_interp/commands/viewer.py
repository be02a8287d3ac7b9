"""CLI command ``attention``: the interactive attention viewer of one task as an offline HTML page.

Torch and the viewer are imported inside the command, so ``--help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lsa_interp.commands.common import (
    DeviceOption,
    ModelOption,
    default_out,
    open_model,
    refuse_foreign_out,
    refuse_foreign_page,
    writable_out,
)

_EXAMPLE_TASK = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd"


def register(app: typer.Typer) -> None:
    """Add the ``attention`` command to ``app``."""

    @app.command(
        "attention",
        help="Interactive attention viewer of one task: encoder, decoder and cross-attention over the model's own "
        "greedy decoding (layer and head selectors, head average), encoder hidden states and the decoder's top-k "
        "next-token probabilities, in one offline HTML file. Layers and heads are shown 1-based, as in the paper "
        "(head 2.7 = encoder layer 2, head 7).",
        epilog=f'Example: lsa-interp attention --model copy-200 --task "{_EXAMPLE_TASK}" --out view.html\n\n'
        f'With circuitsvis pages: lsa-interp attention --model copy-200 --task "{_EXAMPLE_TASK}" --out view.html '
        "--circuitsvis runs/circuitsvis",
    )
    def attention(
        model: ModelOption = "copy-200",
        task: Annotated[
            str,
            typer.Option(
                help="The task in the paper's notation, 'alphabet | in > out | query' (spaces between letters allowed)."
            ),
        ] = _EXAMPLE_TASK,
        out: Annotated[
            Path | None, typer.Option(help="The HTML file to write; default runs/analysis/MODEL/attention.html.")
        ] = None,
        top_k: Annotated[int, typer.Option(min=1, max=30, help="Next-token probabilities shown per decoder step.")] = 5,
        circuitsvis: Annotated[
            Path | None,
            typer.Option(
                help="Also write circuitsvis pages here: encoder_layer_L.html and decoder_layer_L.html (L 1-based)."
            ),
        ] = None,
        device: DeviceOption = "cpu",
    ) -> None:
        """Write the interactive attention viewer of one task."""
        from lsa_interp.data.task import Task
        from lsa_interp.viz.attention import attention_view

        parsed = Task.parse(task)
        page = out if out is not None else default_out(model) / "attention.html"
        if page.is_dir():
            raise ValueError(f"--out {page} is a directory; give the page's file name (e.g. {page / 'attention.html'})")
        refuse_foreign_page(page)
        writable_out(page.parent)
        if circuitsvis is not None:
            refuse_foreign_out(circuitsvis, "--circuitsvis")
            writable_out(
                circuitsvis, "--circuitsvis"
            )  # both outputs checked before any work: no page left behind by a failure
        view = attention_view(open_model(model, device), parsed, top_k=top_k)
        path = view.write(page)
        print(f"answer: {view.data.answer or '(empty)'}")
        print(f"wrote {path}")
        if circuitsvis is not None:
            pages = view.write_all_circuitsvis(circuitsvis)
            print(f"wrote {len(pages)} circuitsvis pages to {circuitsvis}")
