"""Dot-product attention, from raw scores to the masked, scaled form.

Introduced in 01_dot_product_attention (scores, softmax, attention), 02_scaling (the 1/sqrt(d_k)
scale) and 03_causal_masking (masks).
"""

from __future__ import annotations

import math

import torch

from attn_course.exercise import exercise
from attn_course.masking import causal_mask


@exercise("01_dot_product_attention", 1)
def dot_product_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Raw compatibility scores q·kᵀ of every query with every key, unscaled.

    >>> dot_product_scores(torch.ones(2, 5, 8), torch.ones(2, 7, 8)).shape
    torch.Size([2, 5, 7])

    Introduced in 01_dot_product_attention.
    """
    return torch.einsum("...qd,...kd->...qk", q, k)  # (..., T_q, T_k)


@exercise("01_dot_product_attention", 2)
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax: exp(x - max) / sum(exp(x - max)) along `dim`.

    Finite for finite inputs of any magnitude; -inf entries get weight 0 as long as their
    row holds a finite entry.

    >>> softmax(torch.tensor([1e4, 0.0, -float("inf")]))
    tensor([1., 0., 0.])

    Introduced in 01_dot_product_attention.
    """
    shifted = x - x.amax(dim=dim, keepdim=True)  # same shape as x, largest entry 0
    exps = shifted.exp()
    return exps / exps.sum(dim=dim, keepdim=True)


@exercise("01_dot_product_attention", 3)
def dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unscaled attention softmax(q kᵀ) v; returns (out, weights).

    >>> out, w = dot_product_attention(torch.ones(5, 8), torch.ones(7, 8), torch.ones(7, 3))
    >>> out.shape, w.shape
    (torch.Size([5, 3]), torch.Size([5, 7]))

    Introduced in 01_dot_product_attention.
    """
    weights = softmax(dot_product_scores(q, k), dim=-1)  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)


@exercise("02_scaling", 2)
def scaled_dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention softmax(q kᵀ / sqrt(d_k)) v; returns (out, weights).

    >>> out, w = scaled_dot_product_attention(torch.ones(5, 8), torch.ones(7, 8), torch.ones(7, 3))
    >>> out.shape
    torch.Size([5, 3])

    Introduced in 02_scaling.
    """
    scores = dot_product_scores(q, k) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    weights = softmax(scores, dim=-1)  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)


@exercise("03_causal_masking", 3)
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention with an optional boolean mask (True = may attend).

    `mask` broadcasts to (..., T_q, T_k); `is_causal` adds the bottom-right aligned causal
    mask and combines with `mask` (both must allow a position). Returns (out, weights).

    A query row that may attend no key (every key masked, or causal with T_q > T_k, whose first
    T_q - T_k queries sit before the first key) gets weights 0 and output 0, as PyTorch's
    `F.scaled_dot_product_attention` gives it from 2.5 on, and its gradients are finite: 0 for its
    query, nothing added to any key's or value's. (The softmax alone would give NaN there, since
    -inf - (-inf) is NaN; the course uses SDPA's convention in every implementation.)

    >>> out, w = attention(torch.ones(2, 5, 8), torch.ones(2, 7, 8), torch.ones(2, 7, 3), is_causal=True)
    >>> w[0, 0]
    tensor([0.3333, 0.3333, 0.3333, 0.0000, 0.0000, 0.0000, 0.0000])

    Introduced in 03_causal_masking.
    """
    scores = dot_product_scores(q, k) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    allowed = torch.ones_like(scores, dtype=torch.bool)  # (..., T_q, T_k)
    if mask is not None:
        allowed = allowed & mask
    if is_causal:
        allowed = allowed & causal_mask(q.shape[-2], k.shape[-2], device=q.device)
    scores = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k)
    weights = softmax(scores, dim=-1)  # (..., T_q, T_k): NaN in a row that allows no key
    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)  # such rows: 0, as SDPA's
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)
