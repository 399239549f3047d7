"""Partial attention over disjoint key sets, merged exactly through each part's log-sum-exp.

Attention of a query over keys A ∪ B (disjoint) is a weighted sum of the attention over A and over B:
with lse = logaddexp(lse_A, lse_B),

    out = exp(lse_A - lse) · out_A + exp(lse_B - lse) · out_B.

A part with no key a query may see has lse -inf and weight exp(-inf) = 0, whatever its out holds; a
query that sees no key in either part keeps lse -inf and out 0. Flash-decoding splits a long cache
into chunks and merges their partial results this way; ring attention merges the blocks of keys and
values as they travel between devices (`attn_course.ring`).

Introduced in 11_attention_at_scale.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange

from attn_course.exercise import exercise


def partial_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over these keys only, with each row's log-sum-exp: (out (..., T_q, d_v), lse (..., T_q)).

    q (..., T_q, d), k (..., T_k, d), v (..., T_k, d_v); `mask` (True = may attend) broadcasts to
    (..., T_q, T_k); `is_causal` lets query i see keys j <= i (top-left aligned, as on a ring's diagonal
    block). lse is the log of the sum of exp(scaled score) over the keys a row sees, -inf for a row that
    sees none, whose out is 0.

    >>> out, lse = partial_attention(torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6))
    >>> out.shape, lse.shape
    (torch.Size([2, 3, 6]), torch.Size([2, 3]))

    Introduced in 11_attention_at_scale.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if is_causal:
        t_q, t_k = q.shape[-2], k.shape[-2]
        causal = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril()  # (T_q, T_k)
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (..., T_q)
    seen = torch.isfinite(lse)  # rows with at least one key
    weights = torch.exp(scores - torch.where(seen, lse, 0.0).unsqueeze(-1))  # (..., T_q, T_k), 0 where masked
    return weights @ v, lse  # (..., T_q, d_v), (..., T_q)


@exercise("11_attention_at_scale", 1)
def merge_attention(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over keys A ∪ B from attention over A and over B: (out (..., T_q, d_v), lse (..., T_q)).

    out_a, out_b (..., T_q, d_v) and lse_a, lse_b (..., T_q) as `partial_attention` returns them; a
    row with lse -inf saw no key in that part and adds nothing. A row that saw no key in either keeps
    lse -inf and out 0.

    >>> q, k, v = torch.randn(3, 4), torch.randn(6, 4), torch.randn(6, 5)
    >>> merged, _ = merge_attention(*partial_attention(q, k[:2], v[:2]), *partial_attention(q, k[2:], v[2:]))
    >>> torch.allclose(merged, partial_attention(q, k, v)[0], atol=1e-6)
    True

    Introduced in 11_attention_at_scale.
    """
    lse = torch.logaddexp(lse_a, lse_b)  # (..., T_q), -inf only where both parts saw no key
    lse_safe = torch.where(torch.isfinite(lse), lse, 0.0)  # so that -inf - -inf never makes a NaN
    weight_a = torch.exp(lse_a - lse_safe).unsqueeze(-1)  # (..., T_q, 1), 0 where A saw no key
    weight_b = torch.exp(lse_b - lse_safe).unsqueeze(-1)  # (..., T_q, 1)
    return weight_a * out_a + weight_b * out_b, lse


@exercise("11_attention_at_scale", 2)
def flash_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """Attention of new queries over a long cache, split into chunks of keys merged by lse: (..., T_q, d_v).

    q (..., T_q, d) (T_q = 1 when decoding one token), k (..., T_k, d), v (..., T_k, d_v). Each chunk of
    `chunk_size` keys (the last may be shorter) is attended on its own, as one GPU program each would,
    and the partial results are merged in one reduction over the chunks. Equal to attention over every
    key; no mask: a new token sees its whole cache.

    >>> q, k, v = torch.randn(2, 1, 8), torch.randn(2, 100, 8), torch.randn(2, 100, 8)
    >>> torch.allclose(flash_decode(q, k, v, 32), partial_attention(q, k, v)[0], atol=1e-6)
    True

    Introduced in 11_attention_at_scale.
    """
    parts = [
        partial_attention(q, k[..., start : start + chunk_size, :], v[..., start : start + chunk_size, :])
        for start in range(0, k.shape[-2], chunk_size)
    ]
    outs = torch.stack([out for out, _ in parts])  # (n_chunks, ..., T_q, d_v)
    lses = torch.stack([lse for _, lse in parts])  # (n_chunks, ..., T_q)
    lse = torch.logsumexp(lses, dim=0)  # (..., T_q)
    weights = torch.exp(lses - lse)  # (n_chunks, ..., T_q)
    return (rearrange(weights, "n ... t -> n ... t 1") * outs).sum(dim=0)  # (..., T_q, d_v)


def sm_busy_share(n_programs: int, n_sms: int) -> float:
    """The share of a GPU's multiprocessors busy over a grid of `n_programs` equal programs, one SM each.

    The grid runs in ceil(n_programs / n_sms) waves; every SM works in every wave but the last, which
    holds the rest. Few programs (one per batch entry and head, as one-query decoding gives without
    splitting the cache) leave most SMs idle.

    >>> sm_busy_share(32, 132), sm_busy_share(132, 132), sm_busy_share(133, 132)
    (0.24242424242424243, 1.0, 0.5037878787878788)

    Introduced in 11_attention_at_scale.
    """
    waves = math.ceil(n_programs / n_sms)
    return n_programs / (waves * n_sms)
