"""Attention's backward pass, by hand: softmax's gradient, attention's gradients, and training with them.

With S = QKᵀ/√d (masked scores set to -inf), P = softmax(S) row by row and O = PV, the gradient of
a loss with respect to the inputs, given dO = ∂L/∂O, is

    dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP − rowsum(dP ∘ P)),   dQ = dS K / √d,   dK = dSᵀ Q / √d.

`softmax_backward` is the middle step, `attention_backward` all of it on whole (T_q, T_k)
matrices. `attn_course.flash` computes the same without ever holding P (FlashAttention's backward).
`use_attention` swaps the attention of notebook 07's decoder for another function, to train with it.

Introduced in 09_backward.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from attn_course.attention import attention
from attn_course.exercise import exercise
from attn_course.heads import merge_heads

if TYPE_CHECKING:
    from attn_course.heads import MultiHeadAttention

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]
"""attend(q, k, v, is_causal) -> out, all (b, h, t, d_k): one causal attention of every head."""


@exercise("09_backward", 1)
def softmax_backward(p: torch.Tensor, grad_p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The gradient with respect to x of a loss, given p = softmax(x, dim) and grad_p = ∂L/∂p.

    The Jacobian of softmax is diag(p) − p pᵀ, so the vector-Jacobian product is
    p ∘ (grad_p − Σ_j grad_p_j p_j): one elementwise product and one sum, never the Jacobian.

    >>> p = torch.softmax(torch.randn(3, 5), dim=-1)
    >>> softmax_backward(p, torch.ones(3, 5)).abs().max() < 1e-6  # a constant shift changes nothing
    tensor(True)

    Introduced in 09_backward.
    """
    return p * (grad_p - (grad_p * p).sum(dim=dim, keepdim=True))  # same shape as p


@exercise("09_backward", 2)
def attention_backward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor, is_causal: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of softmax(QKᵀ/√d)V given grad_out = ∂L/∂out, on whole (T_q, T_k) matrices.

    The probabilities are recomputed from q and k; the causal mask is bottom-right aligned, as in
    `attention`. Masked entries need no mask in the backward: their probability is 0, so is their dS.

    >>> q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
    >>> [g.shape for g in attention_backward(q, k, v, torch.randn(2, 5, 3), is_causal=True)]
    [torch.Size([2, 5, 8]), torch.Size([2, 7, 8]), torch.Size([2, 7, 3])]

    Introduced in 09_backward.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    _, p = attention(q, k, v, is_causal=is_causal)  # (..., T_q, T_k): the forward's probabilities
    dv = p.transpose(-1, -2) @ grad_out  # (..., T_k, d_v)
    dp = grad_out @ v.transpose(-1, -2)  # (..., T_q, T_k)
    ds = softmax_backward(p, dp, dim=-1)  # (..., T_q, T_k): gradient of the scaled scores
    dq = ds @ k * scale  # (..., T_q, d)
    dk = ds.transpose(-1, -2) @ q * scale  # (..., T_k, d)
    return dq, dk, dv


def use_attention(model: nn.Module, attend: AttentionFn) -> nn.Module:
    """Make every multi-head attention layer of `model` compute its heads with `attend`; returns `model`.

    `attend(q, k, v, is_causal)` gets each layer's rotated queries and keys and its values, all
    (b, h, t, d_k), and returns the heads' outputs (b, h, t, d_k): for example
    `lambda q, k, v, c: FlashAttentionFunction.apply(q, k, v, c, 16)`. The layer's projections,
    RoPE and output projection are unchanged, so the same weights give the same model. A layer
    changed this way no longer returns attention weights (`attention_maps` needs the original).

    Introduced in 09_backward.
    """
    from attn_course.heads import MultiHeadAttention

    for layer in model.modules():
        if isinstance(layer, MultiHeadAttention):
            # an instance attribute: this layer only; it returns no weights, unlike the method it shadows
            layer.attend = _heads_with(layer, attend)  # type: ignore[method-assign, assignment]
    return model


def _heads_with(layer: MultiHeadAttention, attend: AttentionFn) -> Callable[..., tuple[torch.Tensor, None]]:
    def heads(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, None]:
        if mask is not None:
            raise ValueError("use_attention supports is_causal only, not an explicit mask")
        out = attend(q, k, v, is_causal)  # (b, h, t, d_k)
        return layer.out(merge_heads(out)), None  # (b, t, d_model)

    return heads


__all__ = ["AttentionFn", "attention_backward", "softmax_backward", "use_attention"]
