"""nnsight access to a hooked model, with several invokes of one trace batched as one forward pass.

nnsight's base wrapper runs a single invoke per trace. `traced` wraps a copy of the model in `TracedModel`,
which tells nnsight how many rows each invoke's input holds (a task, its text, a list of them, a `TokenBatch`
or an id tensor) and joins the invokes' inputs into one padded `TokenBatch`, so that the usual clean / corrupted
pattern works::

    nn = traced(load_model("copy-200"))
    with nn.trace() as tracer:
        barrier = tracer.barrier(2)
        with tracer.invoke(clean):
            pattern = nn.encoder[1].attn.hook_pattern.output
            barrier()
        with tracer.invoke(corrupted):
            barrier()
            nn.encoder[1].attn.hook_pattern.output[:, 2] = pattern[:, 2]
            logits = nn.output.save()

Each invoke sees only its own rows; the invokes run in one forward pass, so one that hands a value to another
meets it at a barrier (nnsight's ``tracer.barrier``). Rows are padded to the batch's longest input, so an
invoke's activations are as wide as the widest invoke's (its own positions come first; padding never changes
them).
"""

from __future__ import annotations

import copy
from typing import Any

from nnsight import NNsight

from lsa_interp.data.tokenizer import concat_batches
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.model.inputs import to_token_batch


class TracedModel(NNsight):
    """`NNsight` over a `HookedEncoderDecoder` whose traces may hold several invokes (see the module's text)."""

    def _batch_size(self, *inputs: Any, **kwargs: Any) -> int:
        """The rows of one invoke's input (0 for an invoke without one)."""
        return len(to_token_batch(inputs[0])) if inputs else 0

    def _batch(self, invokes: list[tuple], fn: Any) -> tuple:
        """The invokes' inputs as one padded `TokenBatch` (one invoke: its input as given)."""
        given = [(inputs, kwargs) for inputs, kwargs in invokes if inputs]
        if len(given) < 2:
            return super()._batch(given, fn)
        return (concat_batches([to_token_batch(inputs[0]) for inputs, _ in given]),), given[0][1]


def traced(model: HookedEncoderDecoder) -> TracedModel:
    """A `TracedModel` over a deep copy of ``model``: nnsight instruments the modules it wraps for good, which
    would move ``model``'s own attention off its fused path (docs/hooks.md)."""
    return TracedModel(copy.deepcopy(model))
