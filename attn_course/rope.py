"""Rotary position embeddings (RoPE, Su et al. 2021), interleaved pairs (x[2i], x[2i+1]).

Introduced in 05_rope.
"""

from __future__ import annotations

import torch
from einops import rearrange

from attn_course.exercise import exercise
from attn_course.heads import MultiHeadAttention


@exercise("05_rope", 1)
def rope_frequencies(d: int, base: float = 10000.0) -> torch.Tensor:
    """The d/2 rotation frequencies θ_i = base^(-2i/d), i = 0 … d/2 - 1, in float64.

    >>> rope_frequencies(8)
    tensor([1.0000, 0.1000, 0.0100, 0.0010], dtype=torch.float64)

    Introduced in 05_rope.
    """
    if d % 2:
        raise ValueError(f"RoPE needs an even dimension, got d={d}")
    return base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)


@exercise("05_rope", 2)
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
    angles = rope_angles(positions.to(x.device), d, base)  # (T, d/2), float64
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2) each
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)
    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)


@exercise("05_rope", 3)
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
        return self._rotary_attend(x, mask, is_causal, positions)[0]

    def head_weights(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The attention weights of every head, with RoPE, (b, h, t, t), for drawing."""
        return self._rotary_attend(x, mask, is_causal, positions)[1]

    def _rotary_attend(
        self, x: torch.Tensor, mask: torch.Tensor | None, is_causal: bool, positions: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = self.project(x)  # each (b, h, t, d_k)
        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)  # (b, h, t, d_k)
        return self.attend(q, k, v, mask=mask, is_causal=is_causal)  # (b, t, d_model), (b, h, t, t)


# ---------------------------------------------------------------------------------------------
# For the demonstrations of 05_rope: the other pairing convention, angles in a chosen dtype, and
# the long-range decay of the score's upper bound.


def apply_rope_rotate_half(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    """RoPE with the rotate-half pairing of GPT-NeoX-style code: pair (x[..., i], x[..., i + d/2]).

    The same frequencies and angles as `apply_rope`, on other pairs of channels; the two agree up
    to the fixed channel permutation `half_split_permutation(d)`, and disagree on the same x.

    >>> apply_rope_rotate_half(torch.ones(2, 5, 8)).shape
    torch.Size([2, 5, 8])

    Introduced in 05_rope.
    """
    t, d = x.shape[-2:]
    if positions is None:
        positions = torch.arange(t, device=x.device)
    angles = rope_angles(positions.to(x.device), d, base)  # (T, d/2), float64
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2) each
    first, second = x[..., : d // 2], x[..., d // 2 :]  # (..., T, d/2) each
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)  # (..., T, d)


def half_split_permutation(d: int) -> torch.Tensor:
    """Channel order [0, 2, 4, …, 1, 3, 5, …] that turns interleaved pairs into rotate-half pairs.

    With p = half_split_permutation(d): apply_rope_rotate_half(x[..., p]) == apply_rope(x)[..., p].

    >>> half_split_permutation(6)
    tensor([0, 2, 4, 1, 3, 5])

    Introduced in 05_rope.
    """
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # (d,)


def rope_angles(
    positions: torch.Tensor, d: int, base: float = 10000.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """The angles position·θ_i (T, d/2), with positions and frequencies cast to `dtype` first.

    In float64 (the default) positions up to 2^53 are exact. In bfloat16, which keeps 8
    significant bits, integers above 256 are rounded to their neighbours: positions alias.

    >>> rope_angles(torch.tensor([300, 301]), d=2, dtype=torch.bfloat16)
    tensor([[300.],
            [300.]], dtype=torch.bfloat16)

    Introduced in 05_rope.
    """
    freqs = rope_frequencies(d, base).to(device=positions.device, dtype=dtype)  # (d/2,)
    return positions.to(dtype)[:, None] * freqs  # (T, d/2)


def rope_decay_bound(distances: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's long-range decay: the mean (2/d) Σ_{j=1}^{d/2} |S_j|, S_j = Σ_{i<j} e^{i·Δ·θ_i}.

    Write the score of a query and a key at distance Δ = m - n as Re Σ_i h_i e^{iΔθ_i}, with h_i
    the product of the query's pair i and the conjugate of the key's, as complex numbers. Summing
    by parts bounds it: |score| ≤ max_i |h_{i+1} - h_i| · Σ_j |S_j| (h_{d/2} = 0), that is d/2
    times this mean, which RoFormer plots. It decays as |Δ| grows; at Δ = 0 it is (d/2 + 1)/2.

    >>> rope_decay_bound(torch.tensor([0]), d=8)
    tensor([2.5000], dtype=torch.float64)

    Introduced in 05_rope.
    """
    angles = distances.to(torch.float64)[:, None] * rope_frequencies(d, base)  # (n, d/2)
    partial_sums = torch.polar(torch.ones_like(angles), angles).cumsum(dim=-1)  # (n, d/2): S_1 … S_{d/2}
    return partial_sums.abs().mean(dim=-1)  # (n,)
