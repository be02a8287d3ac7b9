"""`ActivationCache`: the activations of one run, by hook name or by (stack, layer, kind)."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, ValuesView

import torch
from jaxtyping import Float
from torch import Tensor

from lsa_interp.data.tokenizer import TokenBatch
from lsa_interp.model.config import ModelConfig

_RESID_KINDS = {
    "encoder": ("pre", "mid", "post"),
    "decoder": ("pre", "mid", "mid_cross", "post"),
}
_ATTN_KINDS = {"encoder": ("attn",), "decoder": ("attn", "cross_attn")}


class ActivationCache:
    """Detached activations keyed by hook name (``cache["encoder.1.attn.hook_pattern"]``), in hook order.

    ``inputs`` is the `TokenBatch` that was run (``src``, ``roles``, ``tgt_in``), for aligning positions.
    Stack-aware accessors take 0-based layers; negative layers count from the end.
    """

    def __init__(self, activations: dict[str, Tensor], cfg: ModelConfig, inputs: TokenBatch | None = None) -> None:
        self._activations = activations
        self.cfg = cfg
        self.inputs = inputs

    def __getitem__(self, name: object) -> Tensor:
        """Return the activation of hook ``name``; raises KeyError naming close matches if it is not cached."""
        if not isinstance(name, str):
            raise KeyError(
                f"cache keys are full hook names such as 'encoder.1.attn.hook_pattern', not {name!r} (an "
                "encoder-decoder has no TransformerLens shorthand: ('pattern', 1) could be either stack)"
            )
        try:
            return self._activations[name]
        except KeyError:
            tail = name.rsplit(".", 1)[-1]
            similar = [key for key in self._activations if key.endswith(tail)][:6]
            hint = f"; cached hooks ending in {tail!r}: {similar}" if similar else ""
            raise KeyError(f"{name!r} is not in the cache ({len(self)} hooks cached{hint})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._activations

    def __len__(self) -> int:
        return len(self._activations)

    def __iter__(self) -> Iterator[str]:
        return iter(self._activations)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self)} hooks, batch={self._batch_size()})"

    def _batch_size(self) -> int | None:
        return None if self.inputs is None else len(self.inputs)

    def keys(self) -> KeysView[str]:
        """Cached hook names, in execution order."""
        return self._activations.keys()

    def values(self) -> ValuesView[Tensor]:
        """Cached tensors, in execution order."""
        return self._activations.values()

    def items(self) -> ItemsView[str, Tensor]:
        """(hook name, tensor) pairs, in execution order."""
        return self._activations.items()

    def to(self, target: torch.device | str | torch.dtype) -> ActivationCache:
        """Return a new cache with every tensor on the device ``target`` (the inputs too), or in the dtype
        ``target`` (the activations only: the inputs keep their integer token ids)."""
        moved = {name: tensor.to(target) for name, tensor in self._activations.items()}
        keep_inputs = self.inputs is None or isinstance(target, torch.dtype)
        return ActivationCache(moved, self.cfg, self.inputs if keep_inputs else self.inputs.to(target))

    def hook_name(self, stack: str, layer: int, hook: str) -> str:
        """Return the full hook name of ``hook`` (e.g. ``"attn.hook_pattern"``) in ``stack`` layer ``layer``.

        Raises ValueError for an unknown stack and IndexError for a layer out of range.
        """
        n_layers = self.cfg.n_layers(stack)
        if not -n_layers <= layer < n_layers:
            raise IndexError(f"{stack} layer {layer} out of range (the {stack} has {n_layers} layers)")
        return f"{stack}.{layer % n_layers}.{hook}"

    def pattern(self, stack: str, layer: int, kind: str = "attn") -> Float[Tensor, "batch head q_pos k_pos"]:
        """Attention pattern of ``kind`` ``"attn"`` (self) or ``"cross_attn"`` (decoder only).

        Raises ValueError for a kind the stack lacks, KeyError if it was not cached.
        """
        return self[self.hook_name(stack, layer, f"{_attn_kind(stack, kind)}.hook_pattern")]

    def scores(self, stack: str, layer: int, kind: str = "attn") -> Float[Tensor, "batch head q_pos k_pos"]:
        """Scaled, masked attention scores (pre-softmax) of ``kind`` ``"attn"`` or ``"cross_attn"``."""
        return self[self.hook_name(stack, layer, f"{_attn_kind(stack, kind)}.hook_attn_scores")]

    def resid(self, stack: str, layer: int, kind: str = "pre") -> Float[Tensor, "batch pos d_model"]:
        """Residual stream of a layer: ``"pre"`` (input), ``"mid"`` (after the self-attention norm),
        ``"mid_cross"`` (decoder: after the cross-attention norm) or ``"post"`` (the layer's output).

        Raises ValueError for an unknown kind, KeyError if it was not cached.
        """
        kinds = _RESID_KINDS[_check_stack(stack)]
        if kind not in kinds:
            raise ValueError(f"unknown residual kind {kind!r} for the {stack}; expected one of {kinds}")
        return self[self.hook_name(stack, layer, f"hook_resid_{kind}")]

    def accumulated_resid(
        self, stack: str, incl_mid: bool = False, return_labels: bool = False
    ) -> Float[Tensor, "component batch pos d_model"] | tuple[Float[Tensor, "component batch pos d_model"], list[str]]:
        """The residual stream of ``stack`` at every point between its sub-blocks, stacked along a first axis, as
        TransformerLens's ``accumulated_resid``: the embeddings (``"embed"``: layer 0's ``hook_resid_pre``), then
        each layer's output (``"L_post"``), with ``incl_mid`` its ``"L_mid"`` (and the decoder's
        ``"L_mid_cross"``) before it. The model is post-LN, so each is already normalised; the stack's
        ``ln_final`` is not applied. With ``return_labels``, also the labels. Raises ValueError for an unknown
        stack, KeyError naming a residual hook that was not cached.
        """
        kinds = [kind for kind in _RESID_KINDS[_check_stack(stack)][1:] if incl_mid or kind == "post"]
        parts = [("embed", self.resid(stack, 0, "pre"))]
        for layer in range(self.cfg.n_layers(stack)):
            parts += [(f"{layer}_{kind}", self.resid(stack, layer, kind)) for kind in kinds]
        stacked = torch.stack([tensor for _, tensor in parts])
        return (stacked, [label for label, _ in parts]) if return_labels else stacked


def _check_stack(stack: str) -> str:
    if stack not in _RESID_KINDS:
        raise ValueError(f"unknown stack {stack!r}; expected 'encoder' or 'decoder'")
    return stack


def _attn_kind(stack: str, kind: str) -> str:
    kinds = _ATTN_KINDS[_check_stack(stack)]
    if kind not in kinds:
        raise ValueError(f"unknown attention kind {kind!r} for the {stack}; expected one of {kinds}")
    return kind
