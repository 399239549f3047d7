"""Multi-head attention: splitting into heads with einops, and the layer itself.

Introduced in 04_multi_head_attention.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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
    """Multi-head attention with the parameters of torch.nn.MultiheadAttention.

    `qkv` projects to [q | k | v] along the last axis (like `in_proj_weight`), `out` is the
    output projection W^O (like `out_proj`). `mask` is a boolean mask (True = may attend)
    that broadcasts to (b, t_q, t_k) and applies to every head, as in `attention`.

    Self-attention by default; given a `context` (b, t_k, d_model), cross-attention
    (encoder-decoder attention, MultiHead(Q, K, V) with K = V = the context): queries from x,
    keys and values from the context, with the same W^Q, W^K, W^V.

    >>> MultiHeadAttention(d_model=12, n_heads=3)(torch.ones(2, 5, 12), is_causal=True).shape
    torch.Size([2, 5, 12])
    >>> MultiHeadAttention(d_model=12, n_heads=3)(torch.ones(2, 5, 12), context=torch.ones(2, 9, 12)).shape
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

    def project(
        self, x: torch.Tensor, context: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries of x, keys and values of `context` (x itself by default) per head, (b, h, t, d_k)."""
        if context is None:
            q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)
        else:  # cross-attention: W^Q on x, W^K and W^V on the context
            sizes = [self.d_model, 2 * self.d_model]
            w_q, w_kv = self.qkv.weight.split(sizes)  # (d_model, d_model), (2·d_model, d_model)
            b_q, b_kv = (None, None) if self.qkv.bias is None else self.qkv.bias.split(sizes)
            q = F.linear(x, w_q, b_q)  # (b, t_q, d_model)
            k, v = F.linear(context, w_kv, b_kv).chunk(2, dim=-1)  # each (b, t_k, d_model)
        return split_heads(q, self.n_heads), split_heads(k, self.n_heads), split_heads(v, self.n_heads)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention of every head; the layer's output (b, t_q, d_model) and weights (b, h, t_q, t_k)."""
        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t_q, t_k): same for all heads
        out, weights = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b,h,t_q,d_k), (b,h,t_q,t_k)
        return self.out(merge_heads(out)), weights  # (b, t_q, d_model), (b, h, t_q, t_k)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        context: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention of x (b, t_q, d_model) to itself or to `context` (b, t_k, d_model); (b, t_q, d_model)."""
        q, k, v = self.project(x, context)  # (b, h, t_q, d_k), then (b, h, t_k, d_k) twice
        return self.attend(q, k, v, mask=mask, is_causal=is_causal)[0]

    def head_weights(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        context: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The attention weights of every head, (b, h, t_q, t_k), for drawing."""
        q, k, v = self.project(x, context)  # (b, h, t_q, d_k), then (b, h, t_k, d_k) twice
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
