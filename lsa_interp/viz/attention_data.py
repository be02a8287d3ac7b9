"""What the attention viewer shows of one task, read from the model's own greedy decoding.

The decoder input is ``>`` + the generated answer (teacher-forced in one pass after decoding), so decoder
step ``i`` reads ``tgt_labels[i]`` and predicts ``predicted[i]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import decode
from lsa_interp.data.vocab import PAD, ROLES, display_token, position_labels
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS, HookedEncoderDecoder
from lsa_interp.model.inputs import decoder_input_from_generated


@dataclass(frozen=True)
class AttentionData:
    """Attention, hidden states and next-token probabilities of one task (batch dimension dropped).

    ``src_tokens``/``tgt_tokens`` are the encoder and decoder inputs as `display_token` strings, ``predicted``
    the token emitted at each decoder step; ``src_labels``/``tgt_labels`` add the positions (``g·27``).
    ``encoder_attn`` ``[layer, head, src, src]``, ``decoder_attn`` ``[layer, head, tgt, tgt]`` (causal),
    ``cross_attn`` ``[layer, head, tgt, src]``; ``resid`` is each encoder layer's ``hook_resid_post``;
    ``probs`` the next-token distribution at each decoder step (softmax of the logits, vocabulary order),
    ``top_ids``/``top_probs`` its ``top_k`` most probable tokens.
    """

    task: Task
    answer: str
    src_tokens: tuple[str, ...]
    src_roles: tuple[str, ...]
    tgt_tokens: tuple[str, ...]
    predicted: tuple[str, ...]
    encoder_attn: Float[Tensor, "enc_layer head src src"]
    decoder_attn: Float[Tensor, "dec_layer head tgt tgt"]
    cross_attn: Float[Tensor, "dec_layer head tgt src"]
    resid: Float[Tensor, "enc_layer src d_model"]
    probs: Float[Tensor, "tgt vocab"]
    top_k: int

    @property
    def top_ids(self) -> Int[Tensor, "tgt k"]:
        """The ``top_k`` most probable next tokens at each decoder step, most probable first."""
        return self.probs.topk(self.top_k, dim=-1).indices

    @property
    def top_probs(self) -> Float[Tensor, "tgt k"]:
        """Their probabilities."""
        return self.probs.topk(self.top_k, dim=-1).values

    @property
    def src_labels(self) -> tuple[str, ...]:
        """Encoder position labels, ``token·position``."""
        return position_labels(self.src_tokens)

    @property
    def tgt_labels(self) -> tuple[str, ...]:
        """Decoder position labels, ``token·position`` (``>·0`` first)."""
        return position_labels(self.tgt_tokens)

    def pattern(self, block: str) -> Float[Tensor, "layer head q_pos k_pos"]:
        """The patterns of ``block`` "encoder", "decoder" or "cross"; raises ValueError for another name."""
        patterns = {"encoder": self.encoder_attn, "decoder": self.decoder_attn, "cross": self.cross_attn}
        if block not in patterns:
            raise ValueError(f"unknown attention block {block!r}; expected one of {', '.join(patterns)}")
        return patterns[block]

    def masked(self, block: str) -> Bool[Tensor, "q_pos k_pos"]:
        """True where ``block``'s queries cannot attend the key: a later decoder step, or an encoder PAD.

        The patterns hold 0 there; figures draw these cells blank, so they differ from a real weight of 0.
        Raises ValueError as `pattern` does.
        """
        n_queries, n_keys = self.pattern(block).shape[-2:]
        if block == "decoder":
            return torch.ones(n_queries, n_keys, dtype=torch.bool).triu(1)
        pad = torch.tensor([token == display_token(PAD) for token in self.src_tokens])
        return pad.expand(n_queries, n_keys)


def _wanted(name: str) -> bool:
    return name.endswith("hook_pattern") or (name.startswith("encoder.") and name.endswith("hook_resid_post"))


@torch.no_grad()
def collect_attention(
    model: HookedEncoderDecoder, task: Task, top_k: int = 5, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
) -> AttentionData:
    """Greedy-decode ``task`` (in eval mode; the model's mode is restored), then cache one teacher-forced pass.

    Raises ValueError when ``top_k`` is not in 1..vocab size or ``max_new_tokens`` is out of range.
    """
    if not 1 <= top_k <= model.cfg.vocab_size:
        raise ValueError(f"top_k must be in 1..{model.cfg.vocab_size}, got {top_k}")
    was_training = model.training
    model.eval()
    try:
        generated = model.generate(task, max_new_tokens=max_new_tokens)
        tgt = decoder_input_from_generated(generated)
        # a PAD the model emitted was read unmasked while decoding (`HookedEncoderDecoder.generate`), so here too
        logits, cache = model.run_with_cache(task, tgt, names_filter=_wanted, device="cpu", mask_tgt_pad=False)
    finally:
        model.train(was_training)
    cfg = model.cfg

    def stacked(stack: str, kind: str) -> Tensor:
        return torch.stack([cache.pattern(stack, layer, kind)[0] for layer in range(cfg.n_layers(stack))])

    probs = torch.softmax(logits[0].float().cpu(), dim=-1)
    inputs = cache.inputs
    return AttentionData(
        task=task,
        answer=decode(generated[0]),
        src_tokens=tuple(display_token(t) for t in inputs.src[0].tolist()),
        src_roles=tuple(ROLES[role] for role in inputs.roles[0].tolist()),
        tgt_tokens=tuple(display_token(t) for t in tgt[0].tolist()),
        predicted=tuple(display_token(t) for t in generated[0, : tgt.shape[1]].tolist()),
        encoder_attn=stacked("encoder", "attn"),
        decoder_attn=stacked("decoder", "attn"),
        cross_attn=stacked("decoder", "cross_attn"),
        resid=torch.stack([cache.resid("encoder", layer, "post")[0] for layer in range(cfg.n_encoder_layers)]),
        probs=probs,
        top_k=top_k,
    )
