"""`StackedEncoderDecoder`: R copies of the paper's encoder-decoder computed as one model.

Every parameter of the R replicates lives in one ``[R, P]`` tensor (``flat``, replicate-major); the named
parameters (``encoder.0.attn.in_proj_weight``, ... as in `HookedEncoderDecoder`) are views ``[R, *shape]``
of it, made by ``flat.split`` so that backward writes the whole gradient with one concatenation and the
optimizer updates the stack with a handful of element-wise kernels. The forward pass is the post-LN
encoder-decoder of ``lsa_interp.model.layers`` for all replicates at once: batched matrix products
(``baddbmm``) with the replicate as batch, and attention through ``scaled_dot_product_attention`` with the
replicates folded into its batch dimension (key-padding and causal masks, attention dropout); with
``attention="triton"``, training steps use `lsa_interp.training.small_attention` instead (one program per
row and head, for 16-wide heads and short rows; seeded by the ``attention_step`` buffer, which each training
forward advances), and with ``attention="flash"`` packed training steps use FlashAttention-2's variable-length
kernel (`lsa_interp.training.packing.packed_flash`; CUDA, bf16). The per-replicate loss is the mean
cross-entropy over non-PAD targets, as `lsa_interp.training.validation.loss_fn`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from lsa_interp.data.vocab import ARROW, EOS, PAD
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.dropout import dropout as cpu_dropout
from lsa_interp.model.layers import sinusoidal_table
from lsa_interp.training.config import ATTENTIONS
from lsa_interp.training.packing import PackedRows, filler_sequences, packed_flash, packed_sdpa, sequence_bounds

Params = dict[str, Tensor]
"""Parameter name -> stacked view ``[R, *shape]``."""

ATTENTION_SEED_SHIFT = 32
"""The ``attention_step`` buffer starts at ``seeds[0] << ATTENTION_SEED_SHIFT``: each stack its own stream."""

SELF_CALLS, CROSS_CALLS = 16, 32
"""The dropout streams (`Keys.call`) of a step: encoder layer l is l, decoder layer l's self-attention
``SELF_CALLS + l`` and its cross-attention ``CROSS_CALLS + l`` (so at most 16 layers a stack)."""


class Keys(NamedTuple):
    """The keys one attention may see: a boolean mask for ``scaled_dot_product_attention`` (``[(rep batch), 1,
    q or 1, k]``, None for all), and for `small_attention` each row's key count ``[(rep batch)]`` and whether
    later keys are masked. ``call`` numbers the attention within a step (its dropout stream). ``queries``:
    each row's query count for cross-attention (None: self-attention, the row's queries are its keys).
    ``shortest``: the shortest (query, key) rows the data has, the kernel's hint for its smallest tile."""

    mask: Tensor | None
    lengths: Tensor | None
    causal: bool
    call: int
    queries: Tensor | None = None
    shortest: tuple[int, int] = (1, 1)


class PackedKeys(NamedTuple):
    """`Keys` of packed rows (`lsa_interp.training.packing`): the queries' and the keys' rows; ``paired`` for
    self-attention (the same rows); ``bounds``: the queries' and the keys' `sequence_bounds` where the flash
    attention runs (else None)."""

    queries: PackedRows
    keys: PackedRows
    causal: bool
    call: int
    paired: bool
    bounds: tuple[Tensor, Tensor] | None = None


def stacked_linear(
    x: Float[Tensor, "rep *rest d_in"], weight: Float[Tensor, "rep d_out d_in"], bias: Float[Tensor, "rep d_out"]
) -> Float[Tensor, "rep *rest d_out"]:
    """``x @ weight[r].T + bias[r]`` for every replicate ``r``, as one batched matrix product."""
    rows = x.reshape(x.shape[0], -1, x.shape[-1])
    out = torch.baddbmm(bias.unsqueeze(1), rows, weight.transpose(1, 2))
    return out.view(*x.shape[:-1], weight.shape[1])


class StackedEncoderDecoder(nn.Module):
    """R encoder-decoders of one `ModelConfig` stacked along a leading replicate dimension (see module doc).

    Build with `from_seeds` (replicate i = the model ``torch.manual_seed(seeds[i])`` then
    ``HookedEncoderDecoder(cfg)`` gives); `replicate_model` writes replicate i back into a
    `HookedEncoderDecoder`.
    """

    def __init__(self, cfg: ModelConfig, replicates: int, attention: str = "sdpa") -> None:
        super().__init__()
        if replicates < 1:
            raise ValueError(f"a stack needs at least one replicate, got {replicates}")
        if attention not in ATTENTIONS:
            raise ValueError(f"unknown attention {attention!r}; choose one of: {', '.join(ATTENTIONS)}")
        self.cfg, self.replicates, self.attention = cfg, replicates, attention
        template = _unseeded_model(cfg)
        self.names = [name for name, _ in template.named_parameters()]
        self.shapes = [tuple(param.shape) for _, param in template.named_parameters()]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        self.flat = nn.Parameter(torch.zeros(replicates, sum(self.sizes)))
        self.register_buffer("pos_embedding", sinusoidal_table(cfg.max_len, cfg.d_model))
        self.register_buffer("attention_step", torch.zeros(1, dtype=torch.long))
        if attention == "triton":
            if max(cfg.n_encoder_layers, cfg.n_decoder_layers) > SELF_CALLS:
                raise ValueError(f"the triton attention numbers the calls of at most {SELF_CALLS} layers a stack")
            try:
                from lsa_interp.training.small_attention import packed_small_attention, small_attention
            except ImportError as error:
                raise ValueError(f"the triton attention needs the triton package ({error})") from None
            self._small_attention, self._packed_small_attention = small_attention, packed_small_attention

    @classmethod
    def from_seeds(
        cls, cfg: ModelConfig, seeds: list[int], device: torch.device | str = "cpu", attention: str = "sdpa"
    ) -> StackedEncoderDecoder:
        """The stack whose replicate i is initialised exactly as a single model seeded with ``seeds[i]``."""
        stack = cls(cfg, len(seeds), attention)
        for index, seed in enumerate(seeds):
            torch.manual_seed(seed)
            stack.load_replicate(index, HookedEncoderDecoder(cfg))
        stack.attention_step.fill_(seeds[0] << ATTENTION_SEED_SHIFT)
        return stack.to(device)

    def load_replicate(self, index: int, model: HookedEncoderDecoder) -> None:
        """Copy ``model``'s parameters into replicate ``index``. Raises ValueError for another architecture."""
        params = dict(model.named_parameters())
        if list(params) != self.names or [tuple(p.shape) for p in params.values()] != self.shapes:
            raise ValueError("the model's parameters do not match the stack's architecture")
        with torch.no_grad():
            self.flat[index].copy_(torch.cat([p.detach().reshape(-1) for p in params.values()]))

    def views(self) -> Params:
        """Every named parameter as a view ``[R, *shape]`` of ``flat`` (gradients flow into ``flat``)."""
        pieces = self.flat.split(self.sizes, dim=1)
        return {
            name: piece.view(self.replicates, *shape) for name, piece, shape in zip(self.names, pieces, self.shapes)
        }

    def replicate_model(self, index: int) -> HookedEncoderDecoder:
        """A new `HookedEncoderDecoder` (eval mode, on the stack's device) holding replicate ``index``.

        Uses no random numbers. Raises IndexError for an index outside the stack.
        """
        return self.write_replicate(index, _unseeded_model(self.cfg).to(self.flat.device))

    def write_replicate(self, index: int, model: HookedEncoderDecoder) -> HookedEncoderDecoder:
        """Copy replicate ``index`` into ``model`` (same architecture) and return it in eval mode.

        Raises IndexError for an index outside the stack.
        """
        if not 0 <= index < self.replicates:
            raise IndexError(f"replicate {index} out of range for a stack of {self.replicates}")
        with torch.no_grad():
            state = {name: view[index] for name, view in self.views().items()}
            model.load_state_dict({**state, "pos_embedding": self.pos_embedding})
            return model.eval()

    def _dropout(self, x: Tensor) -> Tensor:
        # CUDA: the fused native kernel (one pass, a byte of mask); CPU: the cheaper mask of model.dropout.
        if not self.training or self.cfg.dropout == 0.0:
            return x
        return F.dropout(x, self.cfg.dropout, True) if x.is_cuda else cpu_dropout(x, self.cfg.dropout, True)

    def _key_lengths(self, keep: Tensor) -> Tensor | None:
        """Each row's key count ``[(rep batch)]`` where `small_attention` will run (else None: no kernel spent)."""
        return keep.sum(-1).flatten() if self.attention == "triton" and self.training else None

    def _embed(self, weight: Tensor, tokens: Tensor, start: int = 0, positions: Tensor | None = None) -> Tensor:
        """Token embeddings plus sinusoids: of positions ``start ..`` along the last axis of ``[rep batch pos]``
        tokens, or of each packed ``[rep capacity]`` token's own ``positions``."""
        reps, vocab = weight.shape[:2]
        offset = torch.arange(reps, device=tokens.device).view(reps, *[1] * (tokens.dim() - 1)) * vocab
        x = F.embedding(tokens + offset, weight.reshape(reps * vocab, -1))
        if positions is None:
            return self._dropout(x + self.pos_embedding[start : start + tokens.shape[-1]])
        return self._dropout(x + self.pos_embedding[positions])

    def _norm(self, p: Params, prefix: str, x: Tensor) -> Tensor:
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        normed = F.layer_norm(x, x.shape[-1:], eps=self.cfg.ln_eps)
        return torch.addcmul(p[prefix + "bias"].view(shape), normed, p[prefix + "weight"].view(shape))

    def _project(self, p: Params, prefix: str, x: Tensor, first: int, count: int) -> tuple[Tensor, ...]:
        """``count`` consecutive blocks of ``in_proj`` (0=Q, 1=K, 2=V), each ``[(rep batch), head, pos, d_head]``
        (packed ``x [rep capacity d]``: ``[(rep capacity), head, d_head]``)."""
        d = self.cfg.d_model
        cols = slice(first * d, (first + count) * d)
        out = stacked_linear(x, p[prefix + "in_proj_weight"][:, cols], p[prefix + "in_proj_bias"][:, cols])
        pattern = "r c (n h e) -> n (r c) h e" if x.dim() == 3 else "r b s (n h e) -> n (r b) h s e"
        return rearrange(out, pattern, n=count, h=self.cfg.n_heads).unbind(0)

    def _attend(self, p: Params, prefix: str, q: Tensor, k: Tensor, v: Tensor, keys: Keys | PackedKeys) -> Tensor:
        drop = self.cfg.dropout if self.training else 0.0
        if isinstance(keys, PackedKeys):
            z = rearrange(self._attend_packed(q, k, v, keys, drop), "(r c) h e -> r c (h e)", r=self.replicates)
            return stacked_linear(z, p[prefix + "out_proj.weight"], p[prefix + "out_proj.bias"])
        if self.attention == "triton" and self.training:
            z = self._small_attention(
                q, k, v, keys.lengths, self.attention_step, keys.causal, drop, keys.call, keys.queries, keys.shortest
            )
        else:
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=keys.mask, dropout_p=drop)
        z = rearrange(z, "(r b) h s e -> r b s (h e)", r=self.replicates)
        return stacked_linear(z, p[prefix + "out_proj.weight"], p[prefix + "out_proj.bias"])

    def _attend_packed(self, q: Tensor, k: Tensor, v: Tensor, keys: PackedKeys, drop: float) -> Tensor:
        if keys.bounds is not None:
            return packed_flash(q, k, v, keys.queries, keys.keys, keys.bounds, keys.causal, drop)
        if self.attention == "sdpa" or not self.training:
            return packed_sdpa(q, k, v, keys.queries, keys.keys, keys.causal, drop)
        rows = keys.queries, keys.keys
        return self._packed_small_attention(
            q, k, v, rows[0].starts, rows[0].lengths, rows[1].starts, rows[1].lengths, (rows[0].width, rows[1].width),
            self.attention_step, keys.causal, drop, keys.call, keys.paired, (rows[0].shortest, rows[1].shortest),
        )  # fmt: skip

    def _mlp(self, p: Params, prefix: str, x: Tensor) -> Tensor:
        hidden = F.gelu(stacked_linear(x, p[prefix + "fc_in.weight"], p[prefix + "fc_in.bias"]))
        return stacked_linear(self._dropout(hidden), p[prefix + "fc_out.weight"], p[prefix + "fc_out.bias"])

    def _sublayer(self, p: Params, norm: str, x: Tensor, out: Tensor) -> Tensor:
        return self._norm(p, norm, x + self._dropout(out))

    def encode(
        self, p: Params, src: Int[Tensor, "rep batch src_pos"], shortest: int = 1
    ) -> Float[Tensor, "rep batch src_pos d_model"]:
        """The encoder output of every replicate's batch (PAD keys masked); ``shortest``: the data's shortest
        source row, a hint for the triton attention (see `losses`)."""
        lengths = self._key_lengths(src != PAD)
        mask = rearrange(src != PAD, "r b k -> (r b) 1 1 k")
        keys = Keys(mask, lengths, False, 0, shortest=(shortest, shortest))
        return self._encoder(p, self._embed(p["encoder.embed.weight"], src), keys)

    def _encoder(self, p: Params, x: Tensor, keys: Keys | PackedKeys) -> Tensor:
        """The encoder layers over embedded ``x`` (layer l's attention is dropout call l)."""
        for layer in range(self.cfg.n_encoder_layers):
            pre, keys = f"encoder.{layer}.", keys._replace(call=layer)
            x = self._sublayer(
                p, pre + "ln1.", x, self._attend(p, pre + "attn.", *self._project(p, pre + "attn.", x, 0, 3), keys)
            )
            x = self._sublayer(p, pre + "ln2.", x, self._mlp(p, pre + "mlp.", x))
        return self._norm(p, "encoder.ln_final.", x)

    def _decoder_layer(self, p: Params, layer: int, x: Tensor, cross_kv: tuple, keys: tuple, cache=None) -> Tensor:
        """``keys``: the self-attention's and the cross-attention's `Keys`, their calls offset here by ``layer``."""
        pre = f"decoder.{layer}."
        own, cross = (k._replace(call=k.call + layer) for k in keys)
        q, k, v = self._project(p, pre + "attn.", x, 0, 3)
        if cache is not None:
            k, v = cache.append(layer, k, v)
        x = self._sublayer(p, pre + "ln1.", x, self._attend(p, pre + "attn.", q, k, v, own))
        (q,) = self._project(p, pre + "cross_attn.", x, 0, 1)
        x = self._sublayer(p, pre + "ln2.", x, self._attend(p, pre + "cross_attn.", q, *cross_kv, cross))
        return self._sublayer(p, pre + "ln3.", x, self._mlp(p, pre + "mlp.", x))

    def _cross_kv(self, p: Params, memory: Tensor) -> list[tuple[Tensor, ...]]:
        return [self._project(p, f"decoder.{i}.cross_attn.", memory, 1, 2) for i in range(self.cfg.n_decoder_layers)]

    def decode(
        self,
        p: Params,
        tgt_in: Int[Tensor, "rep batch tgt_pos"],
        memory: Float[Tensor, "rep batch src_pos d_model"],
        src_keep: Bool[Tensor, "rep batch src_pos"],
        shortest: tuple[int, int] = (1, 1),
    ) -> Float[Tensor, "rep batch tgt_pos vocab"]:
        """Teacher-forced decoder logits (causal self-attention; PAD keys masked in both attentions);
        ``shortest``: the data's shortest (source, target) rows, a hint for the triton attention."""
        n = tgt_in.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool, device=tgt_in.device).tril_()
        tgt_lengths = self._key_lengths(tgt_in != PAD)
        own_mask = rearrange(tgt_in != PAD, "r b k -> (r b) 1 1 k") & causal
        src_mask = rearrange(src_keep, "r b k -> (r b) 1 1 k")
        keys = (
            Keys(own_mask, tgt_lengths, True, SELF_CALLS, shortest=(shortest[1], shortest[1])),
            Keys(src_mask, self._key_lengths(src_keep), False, CROSS_CALLS, tgt_lengths, (shortest[1], shortest[0])),
        )
        return self._decoder(p, self._embed(p["decoder.embed.weight"], tgt_in), memory, keys)

    def _decoder(self, p: Params, x: Tensor, memory: Tensor, keys: tuple) -> Tensor:
        """The decoder layers over embedded ``x`` and the unembedding: logits."""
        for layer, kv in enumerate(self._cross_kv(p, memory)):
            x = self._decoder_layer(p, layer, x, kv, keys)
        return stacked_linear(self._norm(p, "decoder.ln_final.", x), p["unembed.weight"], p["unembed.bias"])

    def token_losses(
        self,
        src: Int[Tensor, "rep batch src_pos"],
        tgt_in: Int[Tensor, "rep batch tgt_pos"],
        tgt_out: Int[Tensor, "rep batch tgt_pos"],
        shortest: tuple[int, int] = (1, 1),
    ) -> tuple[Float[Tensor, " rep"], Int[Tensor, " rep"]]:
        """Per replicate: the summed cross-entropy over non-PAD targets, and how many targets there are."""
        if self.training and self.attention == "triton":
            self.attention_step.add_(1)
        p = self.views()
        logits = self.decode(p, tgt_in, self.encode(p, src, shortest[0]), src != PAD, shortest)
        flat_loss = F.cross_entropy(logits.float().flatten(0, 2), tgt_out.flatten(), ignore_index=PAD, reduction="none")
        return flat_loss.view(self.replicates, -1).sum(1), (tgt_out != PAD).flatten(1).sum(1)

    def packed_token_losses(
        self, src: PackedRows, tgt_in: PackedRows, tgt_out: Int[Tensor, "rep tgt_capacity"]
    ) -> tuple[Float[Tensor, " rep"], Int[Tensor, " rep"]]:
        """`token_losses` of packed rows (`lsa_interp.training.packing.pack_rows`; ``tgt_out`` packed like
        ``tgt_in``): the same numbers up to rounding, computed on real tokens only."""
        if self.training and self.attention == "triton":
            self.attention_step.add_(1)
        p = self.views()
        flash = self.attention == "flash" and self.training
        bounds = [sequence_bounds(side, filler_sequences(src, tgt_in)) for side in (src, tgt_in)] if flash else None
        pair = lambda queries, keys: (bounds[queries], bounds[keys]) if flash else None  # 0: source, 1: target
        x = self._embed(p["encoder.embed.weight"], src.tokens, positions=src.positions)
        memory = self._encoder(p, x, PackedKeys(src, src, False, 0, True, pair(0, 0)))
        keys = (
            PackedKeys(tgt_in, tgt_in, True, SELF_CALLS, True, pair(1, 1)),
            PackedKeys(tgt_in, src, False, CROSS_CALLS, False, pair(1, 0)),
        )
        x = self._embed(p["decoder.embed.weight"], tgt_in.tokens, positions=tgt_in.positions)
        logits = self._decoder(p, x, memory, keys)
        flat_loss = F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=PAD, reduction="none")
        return flat_loss.view(self.replicates, -1).sum(1), (tgt_out != PAD).sum(1)

    def packed_losses(
        self, src: PackedRows, tgt_in: PackedRows, tgt_out: Int[Tensor, "rep tgt_capacity"]
    ) -> Float[Tensor, " rep"]:
        """`losses` of packed rows (see `packed_token_losses`)."""
        total, count = self.packed_token_losses(src, tgt_in, tgt_out)
        return total / count.clamp(min=1)

    def losses(
        self,
        src: Int[Tensor, "rep batch src_pos"],
        tgt_in: Int[Tensor, "rep batch tgt_pos"],
        tgt_out: Int[Tensor, "rep batch tgt_pos"],
        shortest: tuple[int, int] = (1, 1),
    ) -> Float[Tensor, " rep"]:
        """Each replicate's mean cross-entropy over its non-PAD targets (0 for a batch without targets).
        ``shortest``: the shortest (source, target) rows the data has; the triton attention launches no tile
        below them (a shorter row is still computed, in a larger tile)."""
        total, count = self.token_losses(src, tgt_in, tgt_out, shortest)
        return total / count.clamp(min=1)

    def greedy_decode(self, src: Int[Tensor, "rep batch src_pos"], max_new_tokens: int) -> Int[Tensor, "rep batch n"]:
        """Greedy answers of every replicate from ``>`` with a key/value cache: EOS included, PAD after it.

        Stops once every row has emitted EOS (``n <= max_new_tokens``). Raises ValueError when
        ``max_new_tokens`` is not in 1..max_len.
        """
        if not 0 < max_new_tokens <= self.cfg.max_len:
            raise ValueError(f"max_new_tokens must be in 1..{self.cfg.max_len}, got {max_new_tokens}")
        with torch.no_grad():
            p = self.views()
            memory = self.encode(p, src)
            cross_kv = self._cross_kv(p, memory)
            cross = Keys(rearrange(src != PAD, "r b k -> (r b) 1 1 k"), None, False, CROSS_CALLS)
            keys = (Keys(None, None, False, SELF_CALLS), cross)
            cache = _SelfAttentionCache(max_new_tokens)
            token = torch.full(src.shape[:2], ARROW, dtype=torch.long, device=src.device)
            outputs = torch.full((*src.shape[:2], max_new_tokens), PAD, dtype=torch.long, device=src.device)
            done = torch.zeros(src.shape[:2], dtype=torch.bool, device=src.device)
            for step in range(max_new_tokens):
                x = self._embed(p["decoder.embed.weight"], token[..., None], start=step)
                for layer, kv in enumerate(cross_kv):
                    x = self._decoder_layer(p, layer, x, kv, keys, cache)
                logits = stacked_linear(self._norm(p, "decoder.ln_final.", x), p["unembed.weight"], p["unembed.bias"])
                token = logits[:, :, 0].argmax(-1)
                outputs[:, :, step] = token.masked_fill(done, PAD)
                done |= token == EOS
                if bool(done.all()):
                    return outputs[:, :, : step + 1]
            return outputs


def _unseeded_model(cfg: ModelConfig) -> HookedEncoderDecoder:
    """A model whose weights are about to be overwritten, made without advancing the global RNG."""
    with torch.random.fork_rng(devices=[]):
        return HookedEncoderDecoder(cfg)


class _SelfAttentionCache:
    """Keys and values of every decoder layer's self-attention, ``[(rep batch), head, pos, d_head]``."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.keys, self.values, self.length = capacity, {}, {}, {}

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if layer not in self.keys:
            shape = (*k.shape[:2], self.capacity, k.shape[3])
            self.keys[layer], self.values[layer], self.length[layer] = k.new_empty(shape), v.new_empty(shape), 0
        start = self.length[layer]
        end = start + k.shape[2]
        self.keys[layer][:, :, start:end], self.values[layer][:, :, start:end] = k, v
        self.length[layer] = end
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]
