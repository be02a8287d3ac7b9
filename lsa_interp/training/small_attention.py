"""Attention for short rows and narrow heads, with dropout: one Triton program per (row, head), sized to the row.

The paper's model has 16-wide heads and rows of at most 93 source and 22 target tokens (49 and 7 on
average). cuDNN's fused attention tiles such heads for 64 and took 45% of a compiled R=64 stacked step on an
H100 (docs/performance.md), most of it on padding. Here one program holds a whole (row, head) in registers,
in a tile that fits that row: the rows are sorted into length classes (tiles of 16, 32, 64 and 128
positions), one launch per class, and a program whose row belongs to another class does nothing. It does:
- scores ``q k^T * scale`` for the row's keys (key padding: ``key_len``; ``causal`` masks later keys);
- the softmax, and attention dropout with keep probability ``1 - p`` and survivors scaled by ``1 / (1 - p)``;
- the weighted values for the row's first ``query_len`` queries (later queries get zeros), and the
  log-sum-exp for the backward pass.

The backward program recomputes the scores and draws the same dropout mask. The mask is a function of
``seed`` (a device tensor, read at launch, so a CUDA graph replays fresh masks when the seed tensor changes),
``call`` (one per attention call of a step) and each element's position at the full width, so a row draws
the same mask whatever its class. Each element's random number is a keyed integer hash of its position (two
rounds of a 32-bit mixer, about a tenth of the arithmetic of the Philox draw behind ``tl.rand``). On the
queries it computes, this is ``scaled_dot_product_attention`` with a boolean mask of the valid keys; only
the random numbers differ.

Runs on CUDA, or on the CPU under Triton's interpreter (``TRITON_INTERPRET=1`` before Triton is imported:
slow, for tests).
"""

import itertools
import math
from typing import no_type_check

import torch
import triton
import triton.language as tl
from jaxtyping import Float, Int
from torch import Tensor

CALLS_PER_STEP = 64
"""Seeds a step reserves for its attention calls: the kernel's seed is ``seed * CALLS_PER_STEP + call``."""

SMALLEST_TILE = 16
"""The smallest tile side (``tl.dot`` needs 16); each larger class doubles it, up to 128."""


def _by_tile(*rows: tuple[int, ...]) -> dict[tuple[int, int], int]:
    """A table of tiles whose rows are 16, 32, 64 and 128 queries and columns 16, 32, 64 and 128 keys."""
    sides = [SMALLEST_TILE << i for i in range(4)]
    return {(tq, tk): row[i] for tq, row in zip(sides, rows) for i, tk in enumerate(sides)}


WARPS: dict[str, dict[str, dict[tuple[int, int], int]]] = {
    "bf16": {
        "forward": _by_tile((2, 4, 4, 4), (4, 8, 4, 16), (8, 8, 8, 16), (16, 8, 8, 16)),
        "backward": _by_tile((2, 4, 8, 4), (2, 8, 8, 8), (4, 8, 16, 8), (8, 8, 16, 8)),
    },
    "fp32": {
        "forward": _by_tile((2, 4, 8, 8), (4, 4, 16, 16), (8, 8, 16, 8), (16, 16, 16, 16)),
        "backward": _by_tile((2, 4, 8, 8), (4, 8, 16, 16), (8, 8, 16, 16), (8, 8, 16, 8)),
    },
}
"""The warps each program launches with, by precision (``fp32``; ``bf16``, which fp16 shares), pass and tile
(queries, keys): the count that keeps the most warps resident on an H100 SM without spilling registers (fp32's
128 x 128 backward spills at every count: the least), from ptxas's counts (`benchmarks/kernel_registers.py`,
benchmarks/results/kernel-registers-sm90.json). Not timed yet: the first GPU timings used a tile's area over
512 warps, 1 to 8 (docs/performance.md)."""


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _mix(x):
    """A 32-bit integer mixer (xor-shift-multiply, the "lowbias32" constants)."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _keep(SEED, call, pid, p_drop, TQ: tl.constexpr, TK: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr,
          CALLS: tl.constexpr):  # fmt: skip
    """The dropout mask ``[TQ, TK]`` of program ``pid``: True where an element survives. Elements are numbered
    at the full ``[BQ, BK]`` width, so the mask does not depend on the tile."""
    seed = tl.load(SEED) * CALLS + call
    first = _mix((seed & 0xFFFFFFFF).to(tl.uint32) ^ _mix((seed >> 32).to(tl.uint32) ^ 0x9E3779B9))
    second = _mix(first ^ 0x85EBCA6B)
    rq, rk = tl.arange(0, TQ).to(tl.uint32), tl.arange(0, TK).to(tl.uint32)
    element = (pid.to(tl.uint32) * BQ + rq[:, None]) * BK + rk[None, :]
    bits = _mix(_mix(element + first) ^ second)
    return (bits >> 8).to(tl.float32) * (1.0 / 16777216.0) >= p_drop


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _scores(Q, K, qi, ki, h, q_n, q_h, q_l, k_n, k_h, k_l, lq, lk, scale, CAUSAL: tl.constexpr, TQ: tl.constexpr,
            TK: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr):  # fmt: skip
    """Scaled scores ``[TQ, TK]`` of one (row, head), -inf where a key is padding or (causal) later."""
    rq, rk, rd = tl.arange(0, TQ), tl.arange(0, TK), tl.arange(0, D)
    q = tl.load(Q + qi * q_n + h * q_h + rq[:, None] * q_l + rd[None, :], mask=rq[:, None] < lq, other=0.0)
    k = tl.load(K + ki * k_n + h * k_h + rk[:, None] * k_l + rd[None, :], mask=rk[:, None] < lk, other=0.0)
    if IEEE:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    valid = rk[None, :] < lk
    if CAUSAL:
        valid = valid & (rk[None, :] <= rq[:, None])
    return tl.where(valid, s * scale, float("-inf")), q, k


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _row(QROW, KROW, QLEN, KLEN, n, width_q, width_k, Q_LO: tl.constexpr, TQ: tl.constexpr, K_LO: tl.constexpr,
         TK: tl.constexpr):  # fmt: skip
    """Row ``n``'s query and key counts (at most the widths), whether the row is in this launch's class, and
    where its first query and first key are (``QROW[n]``, ``KROW[n]``: in units of the tensors' first stride)."""
    lq = tl.minimum(tl.load(QLEN + n), width_q)
    lk = tl.minimum(tl.load(KLEN + n), width_k)
    mine = (lq > Q_LO) & (lq <= TQ) & (lk > K_LO) & (lk <= TK)
    return lq, lk, mine, tl.load(QROW + n).to(tl.int64), tl.load(KROW + n).to(tl.int64)


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _forward(Q, K, V, OUT, LSE, QROW, KROW, QLEN, KLEN, SEED, q_n, q_h, q_l, k_n, k_h, k_l, v_n, v_h, v_l, o_n,
             o_h, o_l, width_q, width_k, scale, p_drop, call, CAUSAL: tl.constexpr, DROPOUT: tl.constexpr,
             Q_LO: tl.constexpr, TQ: tl.constexpr, K_LO: tl.constexpr, TK: tl.constexpr, BQ: tl.constexpr,
             BK: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr, CALLS: tl.constexpr):  # fmt: skip
    n, h = tl.program_id(0), tl.program_id(1)
    lq, lk, mine, qi, ki = _row(QROW, KROW, QLEN, KLEN, n, width_q, width_k, Q_LO, TQ, K_LO, TK)
    if mine:
        pid = n * tl.num_programs(1) + h
        s, q, k = _scores(Q, K, qi, ki, h, q_n, q_h, q_l, k_n, k_h, k_l, lq, lk, scale, CAUSAL, TQ, TK, D, IEEE)
        rq, rk, rd = tl.arange(0, TQ), tl.arange(0, TK), tl.arange(0, D)
        v = tl.load(V + ki * v_n + h * v_h + rk[:, None] * v_l + rd[None, :], mask=rk[:, None] < lk, other=0.0)
        top = tl.max(s, 1)
        top = tl.where(top == float("-inf"), 0.0, top)
        e = tl.exp(s - top[:, None])
        total = tl.sum(e, 1)
        total = tl.where(total == 0.0, 1.0, total)
        p = e / total[:, None]
        if DROPOUT:
            p = tl.where(_keep(SEED, call, pid, p_drop, TQ, TK, BQ, BK, CALLS), p / (1.0 - p_drop), 0.0)
        if IEEE:
            o = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            o = tl.dot(p.to(v.dtype), v)
        out = OUT + qi * o_n + h * o_h + rq[:, None] * o_l + rd[None, :]
        tl.store(out, o.to(OUT.dtype.element_ty), mask=rq[:, None] < lq)
        tl.store(LSE + pid * BQ + rq, top + tl.log(total))


@triton.jit
@no_type_check  # the test run's jaxtyping hook must leave Triton's source alone
def _backward(Q, K, V, DO, LSE, QROW, KROW, QLEN, KLEN, SEED, DQ, DK, DV, q_n, q_h, q_l, k_n, k_h, k_l, v_n, v_h,
              v_l, d_n, d_h, d_l, gq_n, gq_h, gq_l, gk_n, gk_h, gk_l, width_q, width_k, scale, p_drop, call,
              CAUSAL: tl.constexpr, DROPOUT: tl.constexpr, Q_LO: tl.constexpr, TQ: tl.constexpr,
              K_LO: tl.constexpr, TK: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, D: tl.constexpr,
              IEEE: tl.constexpr, CALLS: tl.constexpr):  # fmt: skip
    n, h = tl.program_id(0), tl.program_id(1)
    lq, lk, mine, qi, ki = _row(QROW, KROW, QLEN, KLEN, n, width_q, width_k, Q_LO, TQ, K_LO, TK)
    if mine:
        pid = n * tl.num_programs(1) + h
        s, q, k = _scores(Q, K, qi, ki, h, q_n, q_h, q_l, k_n, k_h, k_l, lq, lk, scale, CAUSAL, TQ, TK, D, IEEE)
        rq, rk, rd = tl.arange(0, TQ), tl.arange(0, TK), tl.arange(0, D)
        v = tl.load(V + ki * v_n + h * v_h + rk[:, None] * v_l + rd[None, :], mask=rk[:, None] < lk, other=0.0)
        do = tl.load(DO + qi * d_n + h * d_h + rq[:, None] * d_l + rd[None, :], mask=rq[:, None] < lq, other=0.0)
        p = tl.exp(s - tl.load(LSE + pid * BQ + rq)[:, None])
        if IEEE:
            grad_dropped = tl.dot(do, tl.trans(v), input_precision="ieee")
        else:
            grad_dropped = tl.dot(do, tl.trans(v))
        if DROPOUT:
            keep = _keep(SEED, call, pid, p_drop, TQ, TK, BQ, BK, CALLS)
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
        out_q = DQ + qi * gq_n + h * gq_h + rq[:, None] * gq_l + rd[None, :]
        tl.store(out_q, dq.to(DQ.dtype.element_ty), mask=rq[:, None] < lq)
        out_k = ki * gk_n + h * gk_h + rk[:, None] * gk_l + rd[None, :]
        tl.store(DK + out_k, dk.to(DK.dtype.element_ty), mask=rk[:, None] < lk)
        tl.store(DV + out_k, dv.to(DV.dtype.element_ty), mask=rk[:, None] < lk)


def _traceable(kernel):
    """``kernel`` as torch.compile traces it; under Triton's interpreter (no JIT kernel to wrap), itself."""
    return torch.library.wrap_triton(kernel) if isinstance(kernel, triton.runtime.JITFunction) else kernel


def _block(length: int) -> int:
    return max(SMALLEST_TILE, triton.next_power_of_2(length))


def _classes(width: int, shortest: int = 1) -> list[tuple[int, int]]:
    """The length classes of rows up to ``width``: (lengths above, tile side), from the tile of the ``shortest``
    row there can be (at least 16) up to the full block. The first class takes every row up to its tile, so
    a shorter row than ``shortest`` is still computed, only in a larger tile."""
    first, last = _block(min(shortest, width)), _block(width)
    tiles = [first << i for i in range(last.bit_length() - first.bit_length() + 1)]
    return [(0 if tile == first else tile // 2, tile) for tile in tiles]


def _class_pairs(widths: tuple[int, int], paired: bool, shortest: tuple[int, int]) -> list[tuple]:
    """The (query class, key class) of each launch: the same where ``paired`` (self-attention: a row's queries
    are its keys), else every pair of classes."""
    q_classes, k_classes = _classes(widths[0], shortest[0]), _classes(widths[1], shortest[1])
    return list(zip(q_classes, k_classes) if paired else itertools.product(q_classes, k_classes))


def launch_count(widths: tuple[int, int], paired: bool = False, shortest: tuple[int, int] = (1, 1)) -> int:
    """How many kernel launches one forward (or one backward) call makes for rows up to ``widths`` (queries,
    keys), ``paired`` and ``shortest`` as `packed_small_attention` takes them."""
    return len(_class_pairs(widths, paired, shortest))


def _launches(q: Tensor, widths: tuple[int, int], paired: bool, shortest: tuple[int, int], kind: str) -> list[dict]:
    """One launch's tile options per (query class, key class), with `WARPS` of pass ``kind``."""
    pairs = _class_pairs(widths, paired, shortest)
    ieee = q.dtype == torch.float32
    common = {"IEEE": ieee, "D": q.shape[-1], "CALLS": CALLS_PER_STEP, "BQ": _block(widths[0]), "BK": _block(widths[1])}
    warps = WARPS["fp32" if ieee else "bf16"][kind]
    return [
        {**common, "Q_LO": q_lo, "TQ": tq, "K_LO": k_lo, "TK": tk, "num_warps": warps[tq, tk]}
        for (q_lo, tq), (k_lo, tk) in pairs
    ]


def _strides(t: Tensor) -> tuple[int, int, int]:
    """(row unit, head, position) strides: a padded ``[row, head, pos, d]`` tensor's rows are its first
    dimension; a packed ``[token, head, d]`` tensor's rows start at a token, and positions are tokens."""
    return t.stride()[:3] if t.dim() == 4 else (t.stride(0), t.stride(1), t.stride(0))


# No ``from __future__ import annotations`` here: the operators' schemas are inferred from their annotations.
@torch.library.triton_op("lsa_interp::small_attention_forward", mutates_args=())
def _forward_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    query_row: Tensor,
    key_row: Tensor,
    query_len: Tensor,
    key_len: Tensor,
    seed: Tensor,
    widths: list[int],
    shortest: list[int],
    causal: bool,
    paired: bool,
    dropout_p: float,
    call: int,
) -> tuple[Tensor, Tensor]:
    rows, heads = len(query_len), q.shape[1]
    out = torch.zeros(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(rows * heads * _block(widths[0]), device=q.device, dtype=torch.float32)
    for options in _launches(q, (widths[0], widths[1]), paired, (shortest[0], shortest[1]), "forward"):
        _traceable(_forward)[(rows, heads)](
            q, k, v, out, lse, query_row, key_row, query_len, key_len, seed, *_strides(q), *_strides(k),
            *_strides(v), *_strides(out), widths[0], widths[1], 1.0 / math.sqrt(q.shape[-1]), dropout_p, call,
            CAUSAL=causal, DROPOUT=dropout_p > 0, **options,
        )  # fmt: skip
    return out, lse


@torch.library.triton_op("lsa_interp::small_attention_backward", mutates_args=())
def _backward_op(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lse: Tensor,
    query_row: Tensor,
    key_row: Tensor,
    query_len: Tensor,
    key_len: Tensor,
    seed: Tensor,
    widths: list[int],
    shortest: list[int],
    causal: bool,
    paired: bool,
    dropout_p: float,
    call: int,
) -> tuple[Tensor, Tensor, Tensor]:
    rows, heads = len(query_len), q.shape[1]
    grad = grad.contiguous()
    dq, dk, dv = (torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    for options in _launches(q, (widths[0], widths[1]), paired, (shortest[0], shortest[1]), "backward"):
        _traceable(_backward)[(rows, heads)](
            q, k, v, grad, lse, query_row, key_row, query_len, key_len, seed, dq, dk, dv, *_strides(q),
            *_strides(k), *_strides(v), *_strides(grad), *_strides(dq), *_strides(dk), widths[0], widths[1],
            1.0 / math.sqrt(q.shape[-1]), dropout_p, call, CAUSAL=causal, DROPOUT=dropout_p > 0, **options,
        )  # fmt: skip
    return dq, dk, dv


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, query_row, key_row, query_len, key_len, seed, *options = inputs
    ctx.save_for_backward(q, k, v, output[1], query_row, key_row, query_len, key_len)
    ctx.seed, ctx.options = seed, options


def _backward_rule(ctx, grad_out: Tensor, grad_lse: Tensor):
    dq, dk, dv = _backward_op(grad_out, *ctx.saved_tensors, ctx.seed, *ctx.options)
    return dq, dk, dv, *[None] * 11


torch.library.register_autograd(_forward_op, _backward_rule, setup_context=_setup_context)


def _check(q: Tensor, longest: int, call: int, dropout_p: float) -> None:
    d_head = q.shape[-1]
    if d_head < 16 or d_head & (d_head - 1):
        raise ValueError(f"heads must be a power of two of at least 16 wide, got {d_head}")
    if longest > 128:
        raise ValueError(f"rows of at most 128 positions fit one program, got {longest}")
    if not 0 <= call < CALLS_PER_STEP:
        raise ValueError(f"call must be in 0..{CALLS_PER_STEP - 1}, got {call}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {dropout_p}")


def _last_dim_dense(*tensors: Tensor) -> list[Tensor]:
    return [t if t.stride(-1) == 1 else t.contiguous() for t in tensors]


def small_attention(
    q: Float[Tensor, "row head q_pos d_head"],
    k: Float[Tensor, "row head k_pos d_head"],
    v: Float[Tensor, "row head k_pos d_head"],
    key_len: Int[Tensor, " row"],
    seed: Int[Tensor, " 1"],
    causal: bool = False,
    dropout_p: float = 0.0,
    call: int = 0,
    query_len: Int[Tensor, " row"] | None = None,
    shortest: tuple[int, int] = (1, 1),
) -> Float[Tensor, "row head q_pos d_head"]:
    """Attention of each row's first ``query_len`` queries over its first ``key_len`` keys (and, ``causal``,
    none after the query), with attention dropout ``dropout_p`` drawn from (``seed``, ``call``); see the
    module doc. Later queries, and rows without keys, get zeros. ``query_len=None``: self-attention, each
    row has as many queries as keys (then ``q`` and ``k`` must be equally wide). ``shortest`` (queries,
    keys): the shortest rows there can be, as in `packed_small_attention`.

    Raises ValueError for heads that are not a power of two of at least 16, rows longer than 128, a
    ``call`` outside ``0 .. CALLS_PER_STEP - 1``, a dropout probability outside [0, 1), or self-attention
    between queries and keys of different widths.
    """
    _check(q, max(q.shape[2], k.shape[2]), call, dropout_p)
    if query_len is None and q.shape[2] != k.shape[2]:
        raise ValueError(f"self-attention (no query_len) needs as many query as key positions, got {q.shape[2]} "
                         f"and {k.shape[2]}")  # fmt: skip
    q, k, v = _last_dim_dense(q, k, v)
    key_len = key_len.to(torch.int32)
    paired = query_len is None
    query_len = key_len if paired else query_len.to(torch.int32)
    rows = torch.arange(len(key_len), device=q.device, dtype=torch.int32)
    widths = [q.shape[2], k.shape[2]]
    options = (widths, list(shortest), causal, paired, float(dropout_p), call)
    return _forward_op(q, k, v, rows, rows, query_len, key_len, seed, *options)[0]


def packed_small_attention(
    q: Float[Tensor, "q_token head d_head"],
    k: Float[Tensor, "k_token head d_head"],
    v: Float[Tensor, "k_token head d_head"],
    query_start: Int[Tensor, " row"],
    query_len: Int[Tensor, " row"],
    key_start: Int[Tensor, " row"],
    key_len: Int[Tensor, " row"],
    widths: tuple[int, int],
    seed: Int[Tensor, " 1"],
    causal: bool = False,
    dropout_p: float = 0.0,
    call: int = 0,
    paired: bool = False,
    shortest: tuple[int, int] = (1, 1),
) -> Float[Tensor, "q_token head d_head"]:
    """`small_attention` over rows packed end to end: row n's queries are tokens ``query_start[n] ..
    + query_len[n]`` of ``q``, its keys tokens ``key_start[n] .. + key_len[n]`` of ``k`` and ``v``; no row is
    longer than ``widths`` (queries, keys). Tokens of no row get zeros. ``paired``: self-attention (each row's
    queries are its keys: the same starts and lengths), which launches fewer classes; ``shortest`` (queries,
    keys), the shortest rows there can be (no launches for smaller tiles: a shorter row is computed in the
    smallest tile launched). A row draws the dropout mask it would draw padded at ``widths``.

    Raises ValueError as `small_attention` does.
    """
    _check(q, max(widths), call, dropout_p)
    q, k, v = _last_dim_dense(q, k, v)
    lengths = [t.to(torch.int32) for t in (query_start, key_start, query_len, key_len)]
    options = (list(widths), list(shortest), causal, paired, float(dropout_p), call)
    return _forward_op(q, k, v, *lengths, seed, *options)[0]
