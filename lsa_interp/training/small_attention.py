"""Attention for short rows and narrow heads, with dropout: one Triton program per (row, head).

The paper's model has 16-wide heads and rows of at most 93 source and 22 target tokens. cuDNN's fused
attention tiles such heads for 64 and took 45% of a compiled R=64 stacked step on an H100
(docs/performance.md). Here one program holds a whole (row, head) in registers. It does:
- scores ``q k^T * scale`` for the row's keys (key padding: ``key_len``; ``causal`` masks later keys);
- the softmax, and attention dropout with keep probability ``1 - p`` and survivors scaled by ``1 / (1 - p)``;
- the weighted values, and the log-sum-exp for the backward pass.

The backward program recomputes the scores and draws the same dropout mask from the same (seed, offset).
The mask is a function of ``seed`` (a device tensor, read at launch, so a CUDA graph replays fresh masks when
the seed tensor changes), ``call`` (one per attention call of a step) and each element's position. This is
the same computation as ``scaled_dot_product_attention`` with a boolean mask of the valid keys. Only the
random numbers differ.

Runs on CUDA, or on the CPU under Triton's interpreter (``TRITON_INTERPRET=1`` before Triton is imported:
slow, for tests).
"""

import math
from typing import no_type_check

import torch
import triton
import triton.language as tl
from jaxtyping import Float, Int
from torch import Tensor

CALLS_PER_STEP = 64
"""Seeds a step reserves for its attention calls: the kernel's seed is ``seed * CALLS_PER_STEP + call``."""


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _scores(Q, K, KLEN, n, h, q_n, q_h, q_l, k_n, k_h, k_l, lq, lk, scale, CAUSAL: tl.constexpr, BQ: tl.constexpr,
            BK: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr):  # fmt: skip
    """Scaled scores ``[BQ, BK]`` of one (row, head), -inf where a key is padding or (causal) later."""
    rq, rk, rd = tl.arange(0, BQ), tl.arange(0, BK), tl.arange(0, D)
    q = tl.load(Q + n * q_n + h * q_h + rq[:, None] * q_l + rd[None, :], mask=rq[:, None] < lq, other=0.0)
    k = tl.load(K + n * k_n + h * k_h + rk[:, None] * k_l + rd[None, :], mask=rk[:, None] < lk, other=0.0)
    if IEEE:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    valid = rk[None, :] < tl.load(KLEN + n)
    if CAUSAL:
        valid = valid & (rk[None, :] <= rq[:, None])
    return tl.where(valid, s * scale, float("-inf")), q, k


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _keep(seed, pid, p_drop, BQ: tl.constexpr, BK: tl.constexpr):
    """The dropout mask ``[BQ, BK]`` of program ``pid``: True where an element survives."""
    rq, rk = tl.arange(0, BQ), tl.arange(0, BK)
    return tl.rand(seed, (pid * BQ + rq[:, None]) * BK + rk[None, :]) >= p_drop


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _forward(Q, K, V, OUT, LSE, KLEN, SEED, q_n, q_h, q_l, k_n, k_h, k_l, v_n, v_h, v_l, o_n, o_h, o_l, H, lq, lk,
             scale, p_drop, call, CAUSAL: tl.constexpr, DROPOUT: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr,
             D: tl.constexpr, IEEE: tl.constexpr, CALLS: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    n, h = pid // H, pid % H
    s, q, k = _scores(Q, K, KLEN, n, h, q_n, q_h, q_l, k_n, k_h, k_l, lq, lk, scale, CAUSAL, BQ, BK, D, IEEE)
    rq, rk, rd = tl.arange(0, BQ), tl.arange(0, BK), tl.arange(0, D)
    v = tl.load(V + n * v_n + h * v_h + rk[:, None] * v_l + rd[None, :], mask=rk[:, None] < lk, other=0.0)
    top = tl.max(s, 1)
    top = tl.where(top == float("-inf"), 0.0, top)
    e = tl.exp(s - top[:, None])
    total = tl.sum(e, 1)
    total = tl.where(total == 0.0, 1.0, total)
    p = e / total[:, None]
    if DROPOUT:
        seed = tl.load(SEED) * CALLS + call
        p = tl.where(_keep(seed, pid, p_drop, BQ, BK), p / (1.0 - p_drop), 0.0)
    if IEEE:
        o = tl.dot(p.to(v.dtype), v, input_precision="ieee")
    else:
        o = tl.dot(p.to(v.dtype), v)
    out = OUT + n * o_n + h * o_h + rq[:, None] * o_l + rd[None, :]
    tl.store(out, o.to(OUT.dtype.element_ty), mask=rq[:, None] < lq)
    tl.store(LSE + pid * BQ + rq, top + tl.log(total))


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _backward(Q, K, V, DO, LSE, KLEN, SEED, DQ, DK, DV, q_n, q_h, q_l, k_n, k_h, k_l, v_n, v_h, v_l, d_n, d_h, d_l,
              gq_n, gq_h, gq_l, gk_n, gk_h, gk_l, H, lq, lk, scale, p_drop, call, CAUSAL: tl.constexpr,
              DROPOUT: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr,
              CALLS: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    n, h = pid // H, pid % H
    s, q, k = _scores(Q, K, KLEN, n, h, q_n, q_h, q_l, k_n, k_h, k_l, lq, lk, scale, CAUSAL, BQ, BK, D, IEEE)
    rq, rk, rd = tl.arange(0, BQ), tl.arange(0, BK), tl.arange(0, D)
    v = tl.load(V + n * v_n + h * v_h + rk[:, None] * v_l + rd[None, :], mask=rk[:, None] < lk, other=0.0)
    do = tl.load(DO + n * d_n + h * d_h + rq[:, None] * d_l + rd[None, :], mask=rq[:, None] < lq, other=0.0)
    p = tl.exp(s - tl.load(LSE + pid * BQ + rq)[:, None])
    if IEEE:
        grad_dropped = tl.dot(do, tl.trans(v), input_precision="ieee")
    else:
        grad_dropped = tl.dot(do, tl.trans(v))
    if DROPOUT:
        keep = _keep(tl.load(SEED) * CALLS + call, pid, p_drop, BQ, BK)
        dropped = tl.where(keep, p / (1.0 - p_drop), 0.0)
        grad_p = tl.where(keep, grad_dropped / (1.0 - p_drop), 0.0)
    else:
        dropped, grad_p = p, grad_dropped
    grad_s = p * (grad_p - tl.sum(p * grad_p, 1)[:, None]) * scale
    if IEEE:
        dv = tl.dot(tl.trans(dropped.to(do.dtype)), do, input_precision="ieee")
        dq = tl.dot(grad_s.to(k.dtype), k, input_precision="ieee")
        dk = tl.dot(tl.trans(grad_s.to(q.dtype)), q, input_precision="ieee")
    else:
        dv = tl.dot(tl.trans(dropped.to(do.dtype)), do)
        dq = tl.dot(grad_s.to(k.dtype), k)
        dk = tl.dot(tl.trans(grad_s.to(q.dtype)), q)
    out_q = DQ + n * gq_n + h * gq_h + rq[:, None] * gq_l + rd[None, :]
    tl.store(out_q, dq.to(DQ.dtype.element_ty), mask=rq[:, None] < lq)
    out_k = n * gk_n + h * gk_h + rk[:, None] * gk_l + rd[None, :]
    tl.store(DK + out_k, dk.to(DK.dtype.element_ty), mask=rk[:, None] < lk)
    tl.store(DV + out_k, dv.to(DV.dtype.element_ty), mask=rk[:, None] < lk)


def _traceable(kernel):
    """``kernel`` as torch.compile traces it; under Triton's interpreter (no JIT kernel to wrap), itself."""
    return torch.library.wrap_triton(kernel) if isinstance(kernel, triton.runtime.JITFunction) else kernel


def _block(length: int) -> int:
    return max(16, triton.next_power_of_2(length))


def _launch_options(q: Tensor) -> dict:
    options = {"IEEE": q.dtype == torch.float32, "D": q.shape[-1], "CALLS": CALLS_PER_STEP}
    return {**options, "num_warps": 4 if q.shape[2] <= 32 else 8}


# No ``from __future__ import annotations`` here: the operators' schemas are inferred from their annotations.
@torch.library.triton_op("lsa_interp::small_attention_forward", mutates_args=())
def _forward_op(
    q: Tensor, k: Tensor, v: Tensor, key_len: Tensor, seed: Tensor, causal: bool, dropout_p: float, call: int
) -> tuple[Tensor, Tensor]:
    rows, heads, lq, _ = q.shape
    lk = k.shape[2]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(rows * heads * _block(lq), device=q.device, dtype=torch.float32)
    _traceable(_forward)[(rows * heads,)](
        q, k, v, out, lse, key_len, seed, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        heads, lq, lk, 1.0 / math.sqrt(q.shape[-1]), dropout_p, call, CAUSAL=causal, DROPOUT=dropout_p > 0,
        BQ=_block(lq), BK=_block(lk), **_launch_options(q),
    )  # fmt: skip
    return out, lse


@torch.library.triton_op("lsa_interp::small_attention_backward", mutates_args=())
def _backward_op(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lse: Tensor,
    key_len: Tensor,
    seed: Tensor,
    causal: bool,
    dropout_p: float,
    call: int,
) -> tuple[Tensor, Tensor, Tensor]:
    rows, heads, lq, _ = q.shape
    lk = k.shape[2]
    grad = grad.contiguous()
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    _traceable(_backward)[(rows * heads,)](
        q, k, v, grad, lse, key_len, seed, dq, dk, dv, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
        *grad.stride()[:3], *dq.stride()[:3], *dk.stride()[:3], heads, lq, lk, 1.0 / math.sqrt(q.shape[-1]),
        dropout_p, call, CAUSAL=causal, DROPOUT=dropout_p > 0, BQ=_block(lq), BK=_block(lk), **_launch_options(q),
    )  # fmt: skip
    return dq, dk, dv


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, key_len, seed, causal, dropout_p, call = inputs
    ctx.save_for_backward(q, k, v, output[1], key_len)
    ctx.seed, ctx.options = seed, (causal, dropout_p, call)


def _backward_rule(ctx, grad_out: Tensor, grad_lse: Tensor):
    q, k, v, lse, key_len = ctx.saved_tensors
    dq, dk, dv = _backward_op(grad_out, q, k, v, lse, key_len, ctx.seed, *ctx.options)
    return dq, dk, dv, None, None, None, None, None


torch.library.register_autograd(_forward_op, _backward_rule, setup_context=_setup_context)


def small_attention(
    q: Float[Tensor, "row head q_pos d_head"],
    k: Float[Tensor, "row head k_pos d_head"],
    v: Float[Tensor, "row head k_pos d_head"],
    key_len: Int[Tensor, " row"],
    seed: Int[Tensor, " 1"],
    causal: bool = False,
    dropout_p: float = 0.0,
    call: int = 0,
) -> Float[Tensor, "row head q_pos d_head"]:
    """Attention of each row's queries over its first ``key_len`` keys (and, ``causal``, none after the
    query), with attention dropout ``dropout_p`` drawn from (``seed``, ``call``); see the module doc.

    Raises ValueError for heads that are not a power of two of at least 16, rows longer than 128, a
    ``call`` outside ``0 .. CALLS_PER_STEP - 1``, or a dropout probability outside [0, 1).
    """
    d_head, longest = q.shape[-1], max(q.shape[2], k.shape[2])
    if d_head < 16 or d_head & (d_head - 1):
        raise ValueError(f"heads must be a power of two of at least 16 wide, got {d_head}")
    if longest > 128:
        raise ValueError(f"rows of at most 128 positions fit one program, got {longest}")
    if not 0 <= call < CALLS_PER_STEP:
        raise ValueError(f"call must be in 0..{CALLS_PER_STEP - 1}, got {call}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {dropout_p}")
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    return _forward_op(q, k, v, key_len.to(torch.int32), seed, causal, float(dropout_p), call)[0]
