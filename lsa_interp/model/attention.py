"""Multi-head attention with TransformerLens hook points, and the key/value cache of incremental decoding.

The weights use ``nn.MultiheadAttention``'s layout (``in_proj_weight`` = rows Q, K, V; ``out_proj``), so a
reference checkpoint loads by renaming keys. When none of the module's hook points has a hook attached
(TransformerLens hooks, PyTorch hooks, nnsight's wrapper or global module hooks), attention runs fused
through ``scaled_dot_product_attention`` (or, for one query position, as plain matmuls that skip the hook
points); otherwise every intermediate passes through its hook point.
"""

from __future__ import annotations

import math
from typing import no_type_check

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn.modules import module as torch_module
from transformer_lens.hook_points import HookPoint

from lsa_interp.model.config import ModelConfig
from lsa_interp.model.dropout import dropout

_GLOBAL_HOOK_DICTS = tuple(
    getattr(torch_module, name, {})
    for name in (
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
    )
)


@no_type_check  # hot, called at every attention: the tests check its callers (docs/testing.md)
def is_hooked(hook_points: list[HookPoint]) -> bool:
    """True when any of ``hook_points`` would run code when called (so it must be called)."""
    if any(_GLOBAL_HOOK_DICTS):
        return True
    return any(
        hp._forward_hooks
        or hp._forward_pre_hooks
        or hp._backward_hooks
        or hp._backward_pre_hooks
        or "forward" in hp.__dict__
        for hp in hook_points
    )


@no_type_check  # hot, called three times an attention: the tests check its callers (docs/testing.md)
def _heads_first(x: Float[Tensor, "batch pos head d_head"]) -> Float[Tensor, "batch head pos d_head"]:
    return rearrange(x, "batch pos head d_head -> batch head pos d_head")


class KVCache:
    """Keys and values of one attention layer in head-major layout ``[batch, head, pos, d_head]``.

    Cross-attention caches are filled once from the encoder output; self-attention caches are
    pre-allocated for ``capacity`` positions and grow by ``append``. Keys are stored transposed in memory
    (``[batch, head, d_head, pos]``, viewed as ``[batch, head, pos, d_head]``) so that ``q @ k^T`` reads
    them contiguously.
    """

    def __init__(self, keys: Tensor, values: Tensor, length: int) -> None:
        self.keys, self.values, self.length = keys, values, length

    @classmethod
    def empty(cls, batch: int, n_heads: int, capacity: int, d_head: int, like: Tensor) -> KVCache:
        """Return an empty cache able to hold ``capacity`` positions (dtype and device of ``like``)."""
        keys = like.new_empty(batch, n_heads, d_head, capacity).transpose(-1, -2)
        return cls(keys, like.new_empty(batch, n_heads, capacity, d_head), 0)

    @classmethod
    def filled(cls, k: Float[Tensor, "batch pos head d_head"], v: Float[Tensor, "batch pos head d_head"]) -> KVCache:
        """Return a full cache holding ``k`` and ``v`` (given in hook layout ``[batch, pos, head, d_head]``)."""
        keys = rearrange(k, "batch pos head d_head -> batch head d_head pos").contiguous().transpose(-1, -2)
        return cls(keys, rearrange(v, "batch pos head d_head -> batch head pos d_head").contiguous(), k.shape[1])

    def append(
        self, k: Float[Tensor, "batch head new d_head"], v: Float[Tensor, "batch head new d_head"]
    ) -> tuple[Tensor, Tensor]:
        """Store new positions; return keys and values of every position so far. Raises IndexError when full."""
        end = self.length + k.shape[2]
        if end > self.keys.shape[2]:
            raise IndexError(f"key/value cache holds {self.keys.shape[2]} positions, {end} requested")
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def select(self, rows: Tensor) -> KVCache:
        """Return a cache holding only ``rows`` (an index tensor or boolean mask over the batch)."""
        return KVCache(self.keys.transpose(-1, -2)[rows].transpose(-1, -2), self.values[rows], self.length)


class Attention(nn.Module):
    """Multi-head attention (self-attention, or cross-attention when ``cross``) with per-head hook points.

    Hook points: ``hook_q``/``hook_k``/``hook_v``/``hook_z`` ``[batch, pos, head, d_head]``,
    ``hook_attn_scores``/``hook_pattern`` ``[batch, head, q_pos, k_pos]`` (scores are scaled and masked
    with -inf), and ``hook_result`` ``[batch, pos, head, d_model]`` when ``cfg.use_hook_result``.
    """

    def __init__(self, cfg: ModelConfig, cross: bool = False) -> None:
        super().__init__()
        d = cfg.d_model
        self.cross = cross
        self.n_heads, self.d_head, self.d_model = cfg.n_heads, cfg.d_head, d
        self.dropout_p = cfg.dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d, d))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * d))
        self.out_proj = nn.Linear(d, d)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_attn_scores, self.hook_pattern, self.hook_z = HookPoint(), HookPoint(), HookPoint()
        self.set_use_hook_result(cfg.use_hook_result)

    def set_use_hook_result(self, use_hook_result: bool) -> None:
        """Add or remove the per-head ``hook_result`` hook point (the model's `set_use_hook_result` calls this)."""
        if use_hook_result and "hook_result" not in self._modules:
            self.hook_result = HookPoint()
        elif not use_hook_result and "hook_result" in self._modules:
            del self.hook_result
        self.use_hook_result = use_hook_result
        self._hook_points = [m for m in self.children() if isinstance(m, HookPoint)]

    @no_type_check  # hot, called at every attention: the tests check its callers (docs/testing.md)
    def _project(self, x: Tensor, first: int, count: int) -> Tensor:
        """Project ``x`` with ``count`` consecutive blocks of ``in_proj`` (0=Q, 1=K, 2=V)."""
        d = self.d_model
        rows = slice(first * d, (first + count) * d)
        out = F.linear(x, self.in_proj_weight[rows], self.in_proj_bias[rows])
        pattern = "batch pos (block head d_head) -> batch pos block head d_head"
        return rearrange(out, pattern, block=count, head=self.n_heads)

    def precompute_kv(self, source: Float[Tensor, "batch k_pos d_model"]) -> KVCache:
        """Return the cross-attention keys and values of ``source`` (firing ``hook_k``/``hook_v``)."""
        k, v = self._project(source, 1, 2).unbind(2)
        if is_hooked(self._hook_points):
            k, v = self.hook_k(k), self.hook_v(v)
        return KVCache.filled(k, v)

    def forward(
        self,
        x: Float[Tensor, "batch q_pos d_model"],
        source: Float[Tensor, "batch k_pos d_model"] | None = None,
        mask: Float[Tensor, "batch 1 q_pos k_pos"] | Float[Tensor, "batch 1 1 k_pos"] | None = None,
        cache: KVCache | None = None,
    ) -> Float[Tensor, "batch q_pos d_model"]:
        """Attend from ``x`` to itself (or to ``source`` for cross-attention); return the projected output.

        ``mask`` is additive (0 or -inf). With ``cache``, self-attention appends this step's keys and values
        to it and attends to all cached positions; cross-attention uses the cached keys and values.
        """
        hooked = is_hooked(self._hook_points)
        k = v = None
        if not self.cross:
            q, k, v = self._project(x, 0, 3).unbind(2)
        else:
            q = self._project(x, 0, 1)[:, :, 0]
            if cache is None:
                k, v = self._project(source, 1, 2).unbind(2)
        if hooked:
            q = self.hook_q(q)
            if k is not None:
                k, v = self.hook_k(k), self.hook_v(v)
        qh = _heads_first(q)
        if k is None:
            kh, vh = cache.keys, cache.values
        elif cache is not None:
            kh, vh = cache.append(_heads_first(k), _heads_first(v))
        else:
            kh, vh = _heads_first(k), _heads_first(v)
        if not hooked and qh.shape[2] > 1 and not self.training:
            z = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
            return self.out_proj(rearrange(z, "batch head pos d_head -> batch pos (head d_head)"))
        # Explicit attention: always when hooked; without hooks for a single query position (a decoding
        # step), where two small matmuls beat the fused kernel several times over on CPU; and in training,
        # where the fused kernel's bernoulli mask and fully-masked-row checks cost more than the explicit
        # path with `dropout`, and whose CUDA backward fails under `vmap` (stacked replicates).
        return self._explicit_attend(qh, kh, vh, mask, hooked)

    @no_type_check  # hot, called at every attention: the tests check its callers (docs/testing.md)
    def _explicit_attend(self, qh: Tensor, kh: Tensor, vh: Tensor, mask: Tensor | None, hooked: bool) -> Tensor:
        hook = (lambda point, x: point(x)) if hooked else (lambda point, x: x)
        # Scale the queries, not the scores: q is d_head/k_pos times smaller (as nn.MultiheadAttention does).
        scores = torch.matmul(qh * (1.0 / math.sqrt(self.d_head)), kh.transpose(-1, -2))
        if mask is not None:
            scores = scores + mask
        scores = hook(self.hook_attn_scores, scores)
        pattern = hook(self.hook_pattern, torch.softmax(scores, dim=-1))
        pattern = dropout(pattern, self.dropout_p, self.training)
        z = hook(self.hook_z, rearrange(torch.matmul(pattern, vh), "batch head pos d_head -> batch pos head d_head"))
        if not (hooked and self.use_hook_result):
            return self.out_proj(rearrange(z, "batch pos head d_head -> batch pos (head d_head)"))
        w_o = rearrange(self.out_proj.weight, "d_model (head d_head) -> head d_head d_model", head=self.n_heads)
        per_head = einsum(z, w_o, "batch pos head d_head, head d_head d_model -> batch pos head d_model")
        result = self.hook_result(per_head)
        return result.sum(dim=2) + self.out_proj.bias

    @property
    def W_Q(self) -> Float[Tensor, "head d_model d_head"]:
        """Per-head query weights (``x @ W_Q[h]`` gives head h's queries before the bias)."""
        return self._in_block(0)

    @property
    def W_K(self) -> Float[Tensor, "head d_model d_head"]:
        """Per-head key weights."""
        return self._in_block(1)

    @property
    def W_V(self) -> Float[Tensor, "head d_model d_head"]:
        """Per-head value weights."""
        return self._in_block(2)

    @property
    def W_O(self) -> Float[Tensor, "head d_head d_model"]:
        """Per-head output weights (``z[h] @ W_O[h]`` is head h's contribution before the bias)."""
        return rearrange(self.out_proj.weight, "d_model (head d_head) -> head d_head d_model", head=self.n_heads)

    def _in_block(self, index: int) -> Tensor:
        d = self.d_model
        block = self.in_proj_weight[index * d : (index + 1) * d]
        return rearrange(block, "(head d_head) d_model -> head d_model d_head", head=self.n_heads)
