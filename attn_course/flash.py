"""Online softmax and tiled (FlashAttention-style) attention: exact, without the T×T matrix.

`online_softmax` streams a row in blocks, keeping a running maximum and a running sum of
exponentials that is rescaled whenever the maximum grows (Milakov & Gimelshein, 2018).
`flash_attention` applies the same idea to attention (Dao et al., 2022), first for one block of
queries (`flash_attention_query_block`), then for all: for each block of queries it streams the
keys and values in blocks, keeping per query row a running maximum `m`, a running sum `denom` and
an output accumulator `acc`, and divides by `denom` at the end. It never holds more than one
(block, block) tile of scores per head, and also returns the log-sum-exp of each row's scores,
which is what a backward pass needs to recompute the probabilities. The code reads like notebook
06's solution; `attn_course.flash_fast` holds the same loop tuned for a CPU, which the benchmark times.

`flash_attention_backward` is FlashAttention's backward (Dao, 2023): for each block of keys it
streams the blocks of queries, recomputes each tile's probabilities P = exp(S - lse) from the
forward's log-sum-exp, and accumulates dK and dV for the key block and dQ for the query block,
with D = rowsum(dO ∘ O) in place of rowsum(dP ∘ P). `FlashAttentionFunction` joins the two in a
`torch.autograd.Function` that saves only q, k, v, out and lse.

Introduced in 06_flash_attention (the forward) and 09_backward (the backward).
"""

from __future__ import annotations

import math
from typing import Any, Literal, overload

import torch

from attn_course.exercise import exercise


@exercise("06_flash_attention", 1)
def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax(x) over the last axis, streaming that axis in blocks with a running max and sum.

    The first pass reads `block_size` entries at a time and keeps, per row, the running maximum
    `m` and the running sum `denom` of exp(x - m), rescaling `denom` by exp(m_old - m_new) whenever the
    maximum grows; the second pass writes exp(x - m) / denom. Rows of -inf only give NaN, as softmax does.

    >>> online_softmax(torch.randn(3, 10), block_size=4).shape
    torch.Size([3, 10])

    Introduced in 06_flash_attention.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    n = x.shape[-1]
    m = x.new_full((*x.shape[:-1], 1), -math.inf)  # (..., 1): running maximum
    denom = x.new_zeros((*x.shape[:-1], 1))  # (..., 1): running sum of exp(x - m)
    for start in range(0, n, block_size):
        block = x[..., start : start + block_size]  # (..., B), the last one may be shorter
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)
        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., 1): no -inf - -inf = NaN
        denom = denom * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(
            dim=-1, keepdim=True
        )  # (..., 1)
        m = m_new
    return torch.exp(x - m) / denom  # (..., N)


@exercise("06_flash_attention", 2)
def flash_attention_query_block(
    q_blk: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """One block of queries against every key, not causal: (out (..., B_q, d_v), lse (..., B_q)).

    Streams the keys and values in blocks of `block_size` (the last may be shorter), keeping per
    query row a running maximum `m`, a running sum `denom` of exp(s - m) and an unnormalised output
    `acc`, both rescaled by alpha = exp(m_old - m_new) whenever the maximum grows; at the end
    out = acc / denom and lse = m + log(denom). No guard for -inf is needed: without a mask the
    maximum is finite from the first key block on.

    >>> out, lse = flash_attention_query_block(torch.randn(2, 16, 8), torch.randn(2, 50, 8),
    ...                                        torch.randn(2, 50, 4), block_size=16)
    >>> out.shape, lse.shape
    (torch.Size([2, 16, 4]), torch.Size([2, 16]))

    Introduced in 06_flash_attention.
    """
    q_blk = q_blk / math.sqrt(q_blk.shape[-1])  # (..., Bq, d): the 1/√d scale, once per block
    m = q_blk.new_full((*q_blk.shape[:-1], 1), -math.inf)  # (..., Bq, 1): running maximum per row
    denom = q_blk.new_zeros((*q_blk.shape[:-1], 1))  # (..., Bq, 1): running sum of exp(s - m)
    acc = q_blk.new_zeros((*q_blk.shape[:-1], v.shape[-1]))  # (..., Bq, d_v): unnormalised output
    for ks in range(0, k.shape[-2], block_size):
        s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)  # (..., Bq, Bk)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)
        p = torch.exp(s - m_new)  # (..., Bq, Bk)
        alpha = torch.exp(m - m_new)  # (..., Bq, 1): rescales what was summed under the old max
        denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)
        acc = alpha * acc + p @ v[..., ks : ks + block_size, :]  # (..., Bq, d_v)
        m = m_new
    return acc / denom, (m + torch.log(denom)).squeeze(-1)  # (..., Bq, d_v), (..., Bq)


@overload
def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = ...,
    block_size: int = ...,
    return_lse: Literal[False] = ...,
) -> torch.Tensor: ...
@overload
def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = ...,
    block_size: int = ...,
    *,
    return_lse: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = ...,
    block_size: int = ...,
    return_lse: bool = ...,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]: ...


@exercise("06_flash_attention", 3)
def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    block_size: int = 64,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention (..., T_q, d_v) computed block by block, never holding T_q·T_k scores per head.

    Equal to `attention(q, k, v, is_causal=is_causal)[0]` up to float rounding. With `return_lse`
    it returns `(out, lse)`: lse (..., T_q) is the log-sum-exp of each query row's scaled, masked
    scores, m + log(l) in natural log (`torch.logsumexp(scores, dim=-1)`), -inf for a row that may
    attend no key; a backward pass recomputes the probabilities from it, exp(scores - lse).

    With `is_causal` the mask is bottom-right aligned like `attention`'s: query i may attend key j
    when j <= i + T_k - T_q. Key blocks entirely after a query block's last position are skipped;
    blocks that cross the diagonal are masked inside. A query row that may attend no key (causal
    with T_q > T_k: the first T_q - T_k queries) gets output 0, as `attention` and PyTorch's SDPA
    give it, and lse -inf, the log-sum-exp of no terms (`torch.logsumexp` of a row of -inf): its
    running sum stays 0, and the division uses 1 in its place. This is the code of notebook 06's
    solution; the benchmark times `attn_course.flash_fast.flash_attention_fast`, the same loop
    tuned for a CPU.

    >>> out, lse = flash_attention(torch.randn(2, 4, 100, 16), torch.randn(2, 4, 100, 16),
    ...                            torch.randn(2, 4, 100, 16), is_causal=True, block_size=32,
    ...                            return_lse=True)
    >>> out.shape, lse.shape
    (torch.Size([2, 4, 100, 16]), torch.Size([2, 4, 100]))

    Introduced in 06_flash_attention.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    t_q, d = q.shape[-2:]
    t_k = k.shape[-2]
    offset = t_k - t_q  # query i sits at key position i + offset (bottom-right alignment)
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))  # (..., T_q, d_v)
    lse = q.new_empty(q.shape[:-1])  # (..., T_q)
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)  # the last query block may be shorter
        q_blk = q[..., qs:qe, :] / math.sqrt(d)  # (..., Bq, d), scaled once per block
        m = q.new_full((*q_blk.shape[:-1], 1), -math.inf)  # (..., Bq, 1): running maximum per row
        denom = q.new_zeros((*q_blk.shape[:-1], 1))  # (..., Bq, 1): running sum of exp(s - m)
        acc = q.new_zeros((*q_blk.shape[:-1], v.shape[-1]))  # (..., Bq, d_v): unnormalised output
        k_end = min(t_k, qe + offset) if is_causal else t_k  # keys after the last row's position: skipped
        for ks in range(0, max(k_end, 0), block_size):
            ke = min(ks + block_size, t_k)  # the last key block may be shorter
            s = q_blk @ k[..., ks:ke, :].transpose(-1, -2)  # (..., Bq, Bk)
            if is_causal and ke - 1 > qs + offset:  # the block crosses the diagonal: mask inside it
                rows = torch.arange(qs, qe, device=q.device) + offset  # (Bq,) positions
                cols = torch.arange(ks, ke, device=q.device)  # (Bk,)
                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)  # (..., Bq, Bk)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)
            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., Bq, 1): rows without keys yet
            p = torch.exp(s - m_safe)  # (..., Bq, Bk)
            alpha = torch.exp(m - m_safe)  # (..., Bq, 1)
            denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)
            acc = alpha * acc + p @ v[..., ks:ke, :]  # (..., Bq, d_v)
            m = m_new
        out[..., qs:qe, :] = acc / torch.where(denom == 0, 1.0, denom)  # (..., Bq, d_v): 0 where no key
        lse[..., qs:qe] = (m + torch.log(denom)).squeeze(
            -1
        )  # (..., Bq): after the last key block, -inf where no key
    return (out, lse) if return_lse else out


def flash_attention_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, block_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled exact attention; returns (out (..., T_q, d_v), log-sum-exp of the scaled scores (..., T_q)).

    `flash_attention(..., return_lse=True)`, typed as the pair that a backward pass starts from.

    >>> out, lse = flash_attention_forward(torch.randn(2, 100, 16), torch.randn(2, 70, 16),
    ...                                    torch.randn(2, 70, 8), is_causal=True, block_size=32)
    >>> out.shape, lse.shape
    (torch.Size([2, 100, 8]), torch.Size([2, 100]))

    Introduced in 06_flash_attention.
    """
    out, lse = flash_attention(q, k, v, is_causal=is_causal, block_size=block_size, return_lse=True)
    return out, lse  # (..., T_q, d_v), (..., T_q)


@exercise("09_backward", 3)
def flash_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool = False,
    block_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of attention from the forward's out and lse, one (block, block) tile at a time.

    q (..., T_q, d), k (..., T_k, d), v (..., T_k, d_v), out and grad_out (..., T_q, d_v), lse
    (..., T_q) as `flash_attention_forward` returns it. The causal mask is bottom-right aligned;
    query blocks that no key of a key block may be seen by are skipped. Never holds a T_q × T_k
    tensor: per step one tile of scores, probabilities and their gradients. A query row that sees
    no key (lse -inf, output 0) gets dq 0 and adds nothing to dk and dv, as autograd through SDPA
    gives: its probabilities are computed against 0 in place of its -inf lse, exp(-inf - 0) = 0.

    >>> q, k, v = torch.randn(2, 50, 16), torch.randn(2, 70, 16), torch.randn(2, 70, 8)
    >>> out, lse = flash_attention_forward(q, k, v, is_causal=True, block_size=32)
    >>> dq, dk, dv = flash_attention_backward(q, k, v, out, lse, torch.randn(2, 50, 8), True, 32)
    >>> dq.shape, dk.shape, dv.shape
    (torch.Size([2, 50, 16]), torch.Size([2, 70, 16]), torch.Size([2, 70, 8]))

    Introduced in 09_backward.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    t_q, d = q.shape[-2:]
    t_k = k.shape[-2]
    offset = t_k - t_q  # query i sits at key position i + offset (bottom-right alignment)
    scale = 1.0 / math.sqrt(d)
    delta = (grad_out * out).sum(dim=-1, keepdim=True)  # (..., T_q, 1): D = rowsum(dO ∘ O)
    lse = torch.where(lse == -math.inf, 0.0, lse).unsqueeze(-1)  # (..., T_q, 1): no -inf - -inf = NaN
    dq = torch.zeros_like(q)  # (..., T_q, d): accumulated over the key blocks
    dk = torch.empty_like(k)  # (..., T_k, d)
    dv = torch.empty_like(v)  # (..., T_k, d_v)
    for ks in range(0, t_k, block_size):
        ke = min(ks + block_size, t_k)
        k_blk, v_blk = k[..., ks:ke, :], v[..., ks:ke, :]  # (..., Bk, d), (..., Bk, d_v)
        dk_blk = torch.zeros_like(k_blk)  # (..., Bk, d): accumulated over the query blocks
        dv_blk = torch.zeros_like(v_blk)  # (..., Bk, d_v)
        first_row = max(ks - offset, 0) if is_causal else 0  # the first query that may see key ks
        for qs in range(first_row // block_size * block_size, t_q, block_size):
            qe = min(qs + block_size, t_q)
            q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq, d), (..., Bq, d_v)
            s = q_blk @ k_blk.transpose(-1, -2) * scale  # (..., Bq, Bk)
            if is_causal and ke - 1 > qs + offset:  # the tile crosses the diagonal: mask inside it
                rows = torch.arange(qs + offset, qe + offset, device=q.device)  # (Bq,) positions
                cols = torch.arange(ks, ke, device=q.device)  # (Bk,)
                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)  # (..., Bq, Bk)
            p = torch.exp(s - lse[..., qs:qe, :])  # (..., Bq, Bk): the forward's probabilities
            dv_blk += p.transpose(-1, -2) @ do_blk  # (..., Bk, d_v)
            dp = do_blk @ v_blk.transpose(-1, -2)  # (..., Bq, Bk)
            ds = p * (dp - delta[..., qs:qe, :])  # (..., Bq, Bk): gradient of the scaled scores
            dq[..., qs:qe, :] += ds @ k_blk * scale  # (..., Bq, d)
            dk_blk += ds.transpose(-1, -2) @ q_blk * scale  # (..., Bk, d)
        dk[..., ks:ke, :] = dk_blk
        dv[..., ks:ke, :] = dv_blk
    return dq, dk, dv  # (..., T_q, d), (..., T_k, d), (..., T_k, d_v)


@exercise("09_backward", 4)
class FlashAttentionFunction(torch.autograd.Function):
    """Tiled attention with FlashAttention's backward: `.apply(q, k, v, is_causal, block_size)`.

    The forward saves q, k, v, out and the log-sum-exp only (linear in T); the backward recomputes
    the probabilities tile by tile from them.

    >>> q, k, v = (torch.randn(2, 40, 8, requires_grad=True) for _ in range(3))
    >>> FlashAttentionFunction.apply(q, k, v, True, 16).sum().backward()
    >>> q.grad.shape
    torch.Size([2, 40, 8])

    Introduced in 09_backward.
    """

    @staticmethod
    def forward(
        ctx: Any,  # torch.autograd.function.FunctionCtx, with the attributes the forward sets
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        is_causal: bool = False,
        block_size: int = 64,
    ) -> torch.Tensor:
        """Attention (..., T_q, d_v) by `flash_attention_forward`; saves q, k, v, out and lse."""
        out, lse = flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal, ctx.block_size = is_causal, block_size
        return out

    @staticmethod
    def backward(
        ctx: Any, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None, None]:
        """(dq, dk, dv) by `flash_attention_backward`; no gradient for is_causal and block_size."""
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(
            q, k, v, out, lse, grad_out, is_causal=ctx.is_causal, block_size=ctx.block_size
        )
        return dq, dk, dv, None, None
