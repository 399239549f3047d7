"""Multi-head attention: splitting into heads with einops, and the layer itself.

Introduced in 04_multi_head_attention.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from attn_course.attention import attention
from attn_course.exercise import exercise


@exercise("04_multi_head_attention", 1)
def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Split the last axis into heads: (b, t, h·d) -> (b, h, t, d).

    >>> split_heads(torch.ones(2, 5, 12), n_heads=3).shape
    torch.Size([2, 3, 5, 4])

    Introduced in 04_multi_head_attention.
    """
    return rearrange(x, "b t (h d) -> b h t d", h=n_heads)


@exercise("04_multi_head_attention", 2)
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads again, the inverse of split_heads: (b, h, t, d) -> (b, t, h·d).

    >>> merge_heads(torch.ones(2, 3, 5, 4)).shape
    torch.Size([2, 5, 12])

    Introduced in 04_multi_head_attention.
    """
    return rearrange(x, "b h t d -> b t (h d)")


@exercise("04_multi_head_attention", 3)
class MultiHeadAttention(nn.Module):
    """Multi-head self-attention with the parameters of torch.nn.MultiheadAttention.

    `qkv` projects to [q | k | v] along the last axis (like `in_proj_weight`), `out` is the
    output projection W^O (like `out_proj`). `mask` is a boolean mask (True = may attend)
    that broadcasts to (b, t, t) and applies to every head, as in `attention`.

    >>> MultiHeadAttention(d_model=12, n_heads=3)(torch.ones(2, 5, 12), is_causal=True).shape
    torch.Size([2, 5, 12])

    Introduced in 04_multi_head_attention.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads = d_model, n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values per head, each (b, h, t, d_k)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)
        return split_heads(q, self.n_heads), split_heads(k, self.n_heads), split_heads(v, self.n_heads)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention of every head; returns the layer's output (b, t, d_model) and weights (b, h, t, t)."""
        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t_q, t_k): same for all heads
        out, weights = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_k), (b, h, t, t)
        return self.out(merge_heads(out)), weights  # (b, t, d_model), (b, h, t, t)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> torch.Tensor:
        """Self-attention of x (b, t, d_model) -> (b, t, d_model)."""
        q, k, v = self.project(x)  # each (b, h, t, d_k)
        return self.attend(q, k, v, mask=mask, is_causal=is_causal)[0]

    def head_weights(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> torch.Tensor:
        """The attention weights of every head, (b, h, t, t), for drawing."""
        q, k, v = self.project(x)  # each (b, h, t, d_k)
        return self.attend(q, k, v, mask=mask, is_causal=is_causal)[1]


def mha_parameter_count(d_model: int, bias: bool = True) -> int:
    """Parameters of the layer: W^Q, W^K, W^V and W^O, each d_model², plus 4·d_model of bias.

    The number of heads does not appear: the heads split d_model, they do not add weights.

    >>> mha_parameter_count(512), mha_parameter_count(512, bias=False)
    (1050624, 1048576)

    Introduced in 04_multi_head_attention.
    """
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def mha_flops(b: int, t: int, d_model: int, n_heads: int) -> int:
    """Floating-point operations of one forward pass, counting a multiply-add as 2.

    The projections: x·W_qkv is 2·b·t·d_model·3·d_model, the output projection 2·b·t·d_model².
    Attention: q kᵀ is 2·t·t·d_k per head, weights·v the same, times h heads: 4·b·t²·d_model.
    Softmax, scaling and masking (O(b·h·t²)) are left out. n_heads cancels, but must divide d_model.

    >>> mha_flops(b=1, t=1024, d_model=512, n_heads=8) / 1e9
    4.294967296

    Introduced in 04_multi_head_attention.
    """
    if d_model % n_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    d_k = d_model // n_heads
    projections = 2 * b * t * d_model * (3 * d_model) + 2 * b * t * d_model * d_model
    attention = n_heads * (2 * b * t * t * d_k + 2 * b * t * t * d_k)
    return projections + attention
