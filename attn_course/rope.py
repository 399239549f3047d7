"""Rotary position embeddings (RoPE, Su et al. 2021), interleaved pairs (x[2i], x[2i+1]).

Introduced in 05_rope.
"""

from __future__ import annotations

import torch
from einops import rearrange

from attn_course.heads import MultiHeadAttention


def rope_frequencies(d: int, base: float = 10000.0) -> torch.Tensor:
    """The d/2 rotation frequencies θ_i = base^(-2i/d), i = 0 … d/2 - 1, in float64.

    >>> rope_frequencies(8)
    tensor([1.0000, 0.1000, 0.0100, 0.0010], dtype=torch.float64)

    Introduced in 05_rope.
    """
    if d % 2:
        raise ValueError(f"RoPE needs an even dimension, got d={d}")
    return base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) of x (..., T, d) by the angle position·θ_i.

    `positions` (T,) defaults to 0 … T-1; they may start at an offset (decoding with a cache).
    Angles are computed in float64, so large positions stay exact whatever x's dtype; the
    result has x's shape and dtype.

    >>> apply_rope(torch.ones(2, 5, 8)).shape
    torch.Size([2, 5, 8])

    Introduced in 05_rope.
    """
    t, d = x.shape[-2:]
    if positions is None:
        positions = torch.arange(t, device=x.device)
    freqs = rope_frequencies(d, base).to(x.device)  # (d/2,)
    angles = positions.to(device=x.device, dtype=torch.float64)[:, None] * freqs  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2) each
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)
    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)


class RotaryMultiHeadAttention(MultiHeadAttention):
    """Multi-head self-attention with RoPE applied to q and k of every head, before the scores.

    `positions` (t,) are the tokens' absolute positions, 0 … t-1 by default.

    >>> RotaryMultiHeadAttention(d_model=12, n_heads=3)(torch.ones(2, 5, 12)).shape
    torch.Size([2, 5, 12])

    Introduced in 05_rope.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, base: float = 10000.0) -> None:
        super().__init__(d_model, n_heads, bias=bias)
        if (d_model // n_heads) % 2:
            raise ValueError(f"RoPE needs an even head size, got d_k={d_model // n_heads}")
        self.base = base

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Self-attention of x (b, t, d_model) with rotary positions -> (b, t, d_model)."""
        q, k, v = self.project(x)  # each (b, h, t, d_k)
        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)  # (b, h, t, d_k)
        return self.attend(q, k, v, mask=mask, is_causal=is_causal)[0]
