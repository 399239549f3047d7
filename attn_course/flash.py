"""Online softmax and tiled (FlashAttention-style) attention: exact, without the T×T matrix.

`online_softmax` streams a row in blocks, keeping a running maximum and a running sum of
exponentials that is rescaled whenever the maximum grows (Milakov & Gimelshein, 2018).
`flash_attention_forward` applies the same idea to attention (Dao et al., 2022): for each block of
queries it streams the keys and values in blocks, keeping per query row a running maximum `m`, a
running sum `denom` and an output accumulator `acc`, and divides by `denom` at the end. It never holds more
than one (block, block) tile of scores per head, and also returns the log-sum-exp of each row's
scores, which is what a backward pass needs to recompute the probabilities.

Introduced in 06_flash_attention.
"""

from __future__ import annotations

import math

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


def flash_attention_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, block_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled exact attention; returns (out (..., T_q, d_v), log-sum-exp of the scaled scores (..., T_q)).

    With `is_causal` the mask is bottom-right aligned like `attention`'s: query i may attend key j
    when j <= i + T_k - T_q. Key blocks entirely above the diagonal are skipped; blocks that cross it
    are masked. A query row that may attend no key (causal with T_q > T_k) gets NaN and lse -inf.

    >>> out, lse = flash_attention_forward(torch.randn(2, 100, 16), torch.randn(2, 70, 16),
    ...                                    torch.randn(2, 70, 8), is_causal=True, block_size=32)
    >>> out.shape, lse.shape
    (torch.Size([2, 100, 8]), torch.Size([2, 100]))

    Introduced in 06_flash_attention.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    *batch, t_q, d = q.shape
    t_k, d_v = k.shape[-2], v.shape[-1]
    offset = t_k - t_q  # query i sits at key position i + offset (bottom-right alignment)
    # Without autograd, two tiles of memory serve every step: a CPU allocator hands big blocks back
    # to the system, so a fresh (block × block) tensor per step costs page faults on top of the
    # arithmetic. With autograd recording, each step's tiles must stay alive for the backward pass
    # (memory is then quadratic again: FlashAttention's own backward recomputes them from the lse).
    reuse = not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
    scores_tile = q.new_empty((*batch, min(block_size, t_q), min(block_size, t_k)))  # (..., Bq, Bk)
    values_tile = q.new_empty((*batch, min(block_size, t_q), d_v))  # (..., Bq, d_v)
    out = q.new_empty((*batch, t_q, d_v))  # (..., T_q, d_v)
    lse = q.new_empty((*batch, t_q))  # (..., T_q)
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        q_blk = q[..., qs:qe, :] * (1.0 / math.sqrt(d))  # (..., Bq, d), scaled once per block
        m = q.new_full((*batch, qe - qs, 1), -math.inf)  # (..., Bq, 1): running max per row
        denom = q.new_zeros((*batch, qe - qs, 1))  # (..., Bq, 1): running sum of exp(s - m)
        acc = q.new_zeros((*batch, qe - qs, d_v))  # (..., Bq, d_v): unnormalised output
        k_end = min(t_k, qe + offset) if is_causal else t_k  # keys after the last row's: skipped
        for ks in range(0, max(k_end, 0), block_size):
            ke = min(ks + block_size, t_k)
            tile = scores_tile[..., : qe - qs, : ke - ks] if reuse else None
            s = torch.matmul(q_blk, k[..., ks:ke, :].transpose(-1, -2), out=tile)  # (..., Bq, Bk)
            if is_causal and ke - 1 > qs + offset:  # the block crosses the diagonal: mask inside it
                rows = torch.arange(qs + offset, qe + offset, device=q.device)  # (Bq,) positions
                cols = torch.arange(ks, ke, device=q.device)  # (Bk,)
                s.masked_fill_(cols[None, :] > rows[:, None], -math.inf)  # in place: s is ours
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)
            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., Bq, 1): rows without keys yet
            p = (s.sub_(m_safe) if reuse else s - m_safe).exp_()  # (..., Bq, Bk): exp(s - m)
            alpha = torch.exp(m - m_safe)  # (..., Bq, 1): rescales what was summed under the old max
            denom = denom * alpha + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)
            tile = values_tile[..., : qe - qs, :] if reuse else None
            pv = torch.matmul(p, v[..., ks:ke, :], out=tile)  # (..., Bq, d_v)
            acc = acc.mul_(alpha).add_(pv) if reuse else torch.addcmul(pv, acc, alpha)  # acc·alpha + p v
            m = m_new
        out[..., qs:qe, :] = acc / denom  # (..., Bq, d_v)
        lse[..., qs:qe] = (m + denom.log()).squeeze(-1)  # (..., Bq)
    return out, lse  # (..., T_q, d_v), (..., T_q)


@exercise("06_flash_attention", 2)
def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, block_size: int = 64
) -> torch.Tensor:
    """Attention (..., T_q, d_v) computed block by block, never holding T_q·T_k scores per head.

    Equal to `attention(q, k, v, is_causal=is_causal)[0]` up to float rounding.

    >>> flash_attention(torch.randn(2, 4, 100, 16), torch.randn(2, 4, 100, 16),
    ...                 torch.randn(2, 4, 100, 16), is_causal=True, block_size=32).shape
    torch.Size([2, 4, 100, 16])

    Introduced in 06_flash_attention.
    """
    return flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)[0]
