"""One real layer: Mistral 7B's attention, grouped heads with RoPE and a sliding window, in FlexAttention.

Mistral 7B's attention layer puts together what notebooks 05 and 10 built: 32 query heads sharing 8
key/value heads, RoPE on queries and keys (never values), and a sliding window of 4096 keys on top of
the causal mask. Written with FlexAttention, the window is a mask_mod and grouped heads are
`enable_gqa=True`; written densely, the same layer is a repeat and a boolean mask.

Introduced in 10_modern_attention.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from attn_course.exercise import exercise
from attn_course.flex import flex_problem, sliding_window_mask_mod
from attn_course.heads import merge_heads, split_heads
from attn_course.rope import apply_rope
from attn_course.window import require_window, sliding_window_mask


@exercise("10_modern_attention", 7)
def rotary_window_attention(
    layer: Any, x: torch.Tensor, window: int, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """Causal attention of x (b, t, d_model) within the last `window` keys, with RoPE -> (b, t, d_model).

    `layer` is a `GroupedQueryAttention` (its projections q, k, v, out and its n_heads, n_kv_heads);
    `positions` (t,) are the tokens' positions for RoPE, 0 … t-1 by default. Runs FlexAttention
    (unfused, as the check and the notebook's small sizes need) where torch has it, else the dense path.
    FlexAttention has no backward on a CPU: there, call it under `torch.no_grad()`.

    >>> from attn_course.gqa import GroupedQueryAttention
    >>> with torch.no_grad():
    ...     rotary_window_attention(GroupedQueryAttention(16, 4, 2), torch.ones(2, 5, 16), window=3).shape
    torch.Size([2, 5, 16])

    Introduced in 10_modern_attention.
    """
    require_window(window)
    if flex_problem():
        return rotary_window_dense(layer, x, window, positions)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    t = x.shape[-2]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)  # (b, h, t, d_head)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)  # (b, h_kv, t, d_head)
    v = split_heads(layer.v(x), layer.n_kv_heads)  # (b, h_kv, t, d_head): values are not rotated
    block_mask = create_block_mask(sliding_window_mask_mod(window), None, None, t, t, device=x.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile": unfused on purpose
        out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)  # (b, h, t, d_head)
    return layer.out(merge_heads(out))  # (b, t, d_model)


def rotary_window_dense(
    layer: Any, x: torch.Tensor, window: int, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """`rotary_window_attention` without FlexAttention: keys repeated, every score built, a boolean mask.

    >>> from attn_course.gqa import GroupedQueryAttention
    >>> rotary_window_dense(GroupedQueryAttention(16, 4, 2), torch.ones(2, 5, 16), window=3).shape
    torch.Size([2, 5, 16])

    Introduced in 10_modern_attention.
    """
    require_window(window)
    t, n_rep = x.shape[-2], layer.n_heads // layer.n_kv_heads
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)  # (b, h, t, d_head)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)  # (b, h_kv, t, d_head)
    v = split_heads(layer.v(x), layer.n_kv_heads)  # (b, h_kv, t, d_head)
    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)  # (b, h, t, d_head) each
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (b, h, t, t)
    allowed = sliding_window_mask(t, t, window, device=x.device)  # (t, t)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (b, h, t, t)
    return layer.out(merge_heads(weights @ v))  # (b, t, d_model)
