"""The benchmarked fast path of notebook 06's tiled attention: the same loop, tuned for a CPU allocator.

`flash_attention_fast` computes exactly what `attn_course.flash.flash_attention` computes, with the
same blocks, running maximum, sum and accumulator. What differs is memory management only: without
autograd it reuses two preallocated tiles (scores and p @ v) from step to step and updates in place,
because a CPU allocator hands big blocks back to the system, so a fresh (block × block) tensor per
step costs page faults on top of the arithmetic. `attn-course bench` times this version as "tiled";
learners compare their code with `flash.flash_attention`, which reads like the notebook.

Introduced in 06_flash_attention.
"""

from __future__ import annotations

import math

import torch


def flash_attention_fast(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    block_size: int = 64,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`flash.flash_attention` with tiles reused and updated in place: (..., T_q, d_v), or (out, lse).

    A query row that may attend no key gets output 0 and lse -inf, as in `flash.flash_attention`.

    >>> q, k, v = torch.randn(2, 100, 16), torch.randn(2, 70, 16), torch.randn(2, 70, 8)
    >>> flash_attention_fast(q, k, v, is_causal=True, block_size=32).shape
    torch.Size([2, 100, 8])

    Introduced in 06_flash_attention.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    *batch, t_q, d = q.shape
    t_k, d_v = k.shape[-2], v.shape[-1]
    offset = t_k - t_q  # query i sits at key position i + offset (bottom-right alignment)
    # Without autograd, two tiles of memory serve every step. With autograd recording, each step's
    # tiles must stay alive for the backward pass, so then every step makes fresh ones.
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
        out[..., qs:qe, :] = acc / torch.where(denom == 0, 1.0, denom)  # (..., Bq, d_v): 0 where no key
        lse[..., qs:qe] = (m + denom.log()).squeeze(-1)  # (..., Bq): -inf where no key
    return (out, lse) if return_lse else out  # (..., T_q, d_v), (..., T_q)
