"""Sliding-window attention: each query sees only the last `window` positions, itself included.

Mistral, Gemma 2 and 3 and others limit some or all layers to a window. The mask is notebook 03's
causal mask, bottom-right aligned, with a lower edge: query i at position p = i + t_k - t_q may
attend key j when p - window < j <= p. A tiled (FlashAttention) pass then visits only the key
blocks that meet the window, so its cost grows like T·window instead of T².

Introduced in 10_modern_attention.
"""

from __future__ import annotations

import math
import operator

import torch

from attn_course.exercise import exercise


def require_window(window: int | None, allow_none: bool = False) -> None:
    """Refuse a window that admits no key: `window` counts the keys a query sees, its own included.

    A window of 0 (or less) would mask every key, and every output row would be 0 or NaN without a
    word; `None` (no window, plain causal attention) is accepted where `allow_none`.

    >>> require_window(4), require_window(None, allow_none=True)
    (None, None)

    Introduced in 10_modern_attention.
    """
    if window is None and allow_none:
        return
    try:
        count = 0 if window is None else operator.index(window)  # an int, or a numpy integer
    except TypeError:  # 2.5, "4"
        count = 0
    if isinstance(window, bool) or count < 1:
        none = " or None (no window: plain causal attention)" if allow_none else ""
        raise ValueError(
            "window must be a positive number of keys (the query's own included, so 1 sees only itself)"
            f"{none}, got {window!r}"
        )


@exercise("10_modern_attention", 3)
def sliding_window_mask(
    t_q: int, t_k: int | None = None, window: int = 1, device: torch.device | str | None = None
) -> torch.Tensor:
    """Mask (t_q, t_k), True where query i may attend key j: the last `window` positions up to its own.

    Bottom-right aligned like `causal_mask`: query i sits at position p = i + t_k - t_q and sees
    keys p - window + 1 … p: `window` keys, its own included, as Hugging Face transformers' Mistral
    counts them. (PyTorch's FlexAttention examples, q_idx - kv_idx <= W, and Mistral's original
    reference admit W + 1.) With window >= t_k it is the causal mask; a window below 1 is refused.

    >>> sliding_window_mask(3, 5, window=2).int()
    tensor([[0, 1, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 1, 1]], dtype=torch.int32)

    Introduced in 10_modern_attention.
    """
    require_window(window)
    t_k = t_q if t_k is None else t_k
    query_positions = torch.arange(t_q, device=device) + (t_k - t_q)  # (t_q,)
    key_positions = torch.arange(t_k, device=device)  # (t_k,)
    distance = query_positions[:, None] - key_positions[None, :]  # (t_q, t_k): how far back key j is
    return (distance >= 0) & (distance < window)  # (t_q, t_k)


def window_key_blocks(qs: int, qe: int, t_q: int, t_k: int, window: int | None, block_size: int) -> range:
    """Starts of the key blocks queries qs … qe-1 need: from the first row's first key to the last row.

    >>> list(window_key_blocks(64, 96, t_q=128, t_k=128, window=32, block_size=32))
    [32, 64]

    Introduced in 10_modern_attention.
    """
    require_window(window, allow_none=True)
    offset = t_k - t_q
    last = min(t_k, qe + offset)  # one past the last row's position
    first = 0 if window is None else max(0, qs + offset - window + 1)  # the first row's first key
    return range(first // block_size * block_size, max(last, 0), block_size)


@exercise("10_modern_attention", 4)
def sliding_window_flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None, block_size: int = 64
) -> torch.Tensor:
    """Causal attention within a sliding window, tiled: (..., T_q, d_v), visiting only the window's blocks.

    Equal to `attention(q, k, v, mask=sliding_window_mask(T_q, T_k, window))[0]`; `window=None` is
    plain causal attention (every block up to the diagonal). Blocks that cross the window's edges are
    masked inside. A query that sees no key (T_q > T_k: the first T_q - T_k queries) gets 0, as in
    `attention` and SDPA. Like notebook 06's `flash_attention`, it reuses two tiles from step to step when
    autograd is off.

    >>> sliding_window_flash_attention(torch.randn(2, 100, 16), torch.randn(2, 100, 16),
    ...                                torch.randn(2, 100, 8), window=20, block_size=32).shape
    torch.Size([2, 100, 8])

    Introduced in 10_modern_attention.
    """
    require_window(window, allow_none=True)
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    *batch, t_q, d = q.shape
    t_k, d_v = k.shape[-2], v.shape[-1]
    offset = t_k - t_q
    reuse = not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
    scores_tile = q.new_empty((*batch, min(block_size, t_q), min(block_size, t_k)))  # (..., Bq, Bk)
    values_tile = q.new_empty((*batch, min(block_size, t_q), d_v))  # (..., Bq, d_v)
    out = q.new_empty((*batch, t_q, d_v))  # (..., T_q, d_v)
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        q_blk = q[..., qs:qe, :] * (1.0 / math.sqrt(d))  # (..., Bq, d)
        rows = torch.arange(qs + offset, qe + offset, device=q.device)  # (Bq,) positions
        m = q.new_full((*batch, qe - qs, 1), -math.inf)  # (..., Bq, 1)
        denom = q.new_zeros((*batch, qe - qs, 1))  # (..., Bq, 1)
        acc = q.new_zeros((*batch, qe - qs, d_v))  # (..., Bq, d_v)
        for ks in window_key_blocks(qs, qe, t_q, t_k, window, block_size):
            ke = min(ks + block_size, t_k)
            tile = scores_tile[..., : qe - qs, : ke - ks] if reuse else None
            s = torch.matmul(q_blk, k[..., ks:ke, :].transpose(-1, -2), out=tile)  # (..., Bq, Bk)
            crosses_diagonal = ke - 1 > qs + offset
            crosses_window = window is not None and ks <= qe - 1 + offset - window
            if crosses_diagonal or crosses_window:
                distance = rows[:, None] - torch.arange(ks, ke, device=q.device)[None, :]  # (Bq, Bk)
                outside = distance < 0 if window is None else (distance < 0) | (distance >= window)
                s.masked_fill_(outside, -math.inf)  # (..., Bq, Bk)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)
            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., Bq, 1)
            p = (s.sub_(m_safe) if reuse else s - m_safe).exp_()  # (..., Bq, Bk)
            alpha = torch.exp(m - m_safe)  # (..., Bq, 1)
            denom = denom * alpha + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)
            tile = values_tile[..., : qe - qs, :] if reuse else None
            pv = torch.matmul(p, v[..., ks:ke, :], out=tile)  # (..., Bq, d_v)
            acc = acc.mul_(alpha).add_(pv) if reuse else torch.addcmul(pv, acc, alpha)  # (..., Bq, d_v)
            m = m_new
        out[..., qs:qe, :] = acc / torch.where(denom == 0, 1.0, denom)  # (..., Bq, d_v): 0 where no key
    return out  # (..., T_q, d_v)


def visited_fraction(t: int, window: int | None, block_size: int) -> float:
    """The share of all (query block, key block) tiles a square pass visits.

    >>> visited_fraction(4096, None, 128), visited_fraction(4096, 512, 128)
    (0.515625, 0.146484375)

    Introduced in 10_modern_attention.
    """
    require_window(window, allow_none=True)
    n = math.ceil(t / block_size)
    visited = sum(
        len(window_key_blocks(qs, min(qs + block_size, t), t, t, window, block_size))
        for qs in range(0, t, block_size)
    )
    return visited / (n * n)


def window_tile_states(t_q: int, t_k: int, window: int | None, block_size: int) -> torch.Tensor:
    """Per (query block, key block): 0 skipped, 1 visited and masked inside, 2 visited with no mask.

    >>> window_tile_states(8, 8, window=3, block_size=4).tolist()
    [[1, 0], [1, 1]]

    Introduced in 10_modern_attention.
    """
    require_window(window, allow_none=True)
    offset = t_k - t_q
    n_q, n_k = math.ceil(t_q / block_size), math.ceil(t_k / block_size)
    states = torch.zeros(n_q, n_k, dtype=torch.long)  # (query blocks, key blocks)
    for r, qs in enumerate(range(0, t_q, block_size)):
        qe = min(qs + block_size, t_q)
        for ks in window_key_blocks(qs, qe, t_q, t_k, window, block_size):
            ke = min(ks + block_size, t_k)
            inside = ke - 1 <= qs + offset and (window is None or ks > qe - 1 + offset - window)
            states[r, ks // block_size] = 2 if inside else 1
    return states
