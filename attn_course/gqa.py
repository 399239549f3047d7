"""Grouped-query attention (GQA): fewer key/value heads than query heads, and what it saves in the cache.

`n_heads` query heads share `n_kv_heads` key/value heads in groups of `n_heads // n_kv_heads`
consecutive heads (Ainslie et al., 2023): query head h reads key/value head h // n_rep. With one
key/value head it is multi-query attention (MQA, Shazeer 2019); with as many as query heads, plain
multi-head attention. The KV cache stores only the key/value heads.

Introduced in 10_modern_attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from einops import repeat
from torch import nn

from attn_course.attention import attention
from attn_course.exercise import exercise
from attn_course.heads import merge_heads, split_heads
from attn_course.kv_cache import KVCache


@exercise("10_modern_attention", 1)
def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Repeat each key/value head n_rep times, in groups: (b, h_kv, t, d) -> (b, h_kv·n_rep, t, d).

    Head j of the result is head j // n_rep of x (as torch's `repeat_interleave` on the head axis
    and `scaled_dot_product_attention(..., enable_gqa=True)` do).

    >>> repeat_kv(torch.arange(2.0).view(1, 2, 1, 1), 3).flatten().tolist()
    [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]

    Introduced in 10_modern_attention.
    """
    return repeat(x, "b h t d -> b (h r) t d", r=n_rep)


@exercise("10_modern_attention", 2)
class GroupedQueryAttention(nn.Module):
    """Self-attention with n_heads query heads sharing n_kv_heads key/value heads.

    `q` projects to n_heads·d_head = d_model features, `k` and `v` to n_kv_heads·d_head each, `out`
    back to d_model (the layout of LLaMA's q_proj, k_proj, v_proj, o_proj). `mask` (True = may attend)
    broadcasts to (b, t, t) and applies to every head.

    >>> GroupedQueryAttention(d_model=16, n_heads=4, n_kv_heads=2)(torch.ones(2, 5, 16)).shape
    torch.Size([2, 5, 16])

    Introduced in 10_modern_attention.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = False) -> None:
        super().__init__()
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(
                f"need n_heads | d_model and n_kv_heads | n_heads, got {d_model}, {n_heads}, {n_kv_heads}"
            )
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.q = nn.Linear(d_model, d_model, bias=bias)
        self.k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (b, n_heads, t, d_head), k and v (b, n_kv_heads, t, d_head), before any repeat."""
        q = split_heads(self.q(x), self.n_heads)  # (b, h, t, d_head)
        k = split_heads(self.k(x), self.n_kv_heads)  # (b, h_kv, t, d_head)
        v = split_heads(self.v(x), self.n_kv_heads)  # (b, h_kv, t, d_head)
        return q, k, v

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """The layer's output (b, t_q, d_model) from q (b, h, t_q, d) and k, v (b, h_kv, t_k, d)."""
        n_rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # each (b, h, t_k, d_head)
        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t_q, t_k): every head
        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t_q, d_head)
        return self.out(merge_heads(out))  # (b, t_q, d_model)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> torch.Tensor:
        """Self-attention of x (b, t, d_model) -> (b, t, d_model)."""
        q, k, v = self.project(x)  # (b, h, t, d), (b, h_kv, t, d) twice
        return self.attend(q, k, v, mask=mask, is_causal=is_causal)


def cached_gqa_attention(
    attn: GroupedQueryAttention, x: torch.Tensor, cache: KVCache, layer: int
) -> torch.Tensor:
    """`attn`'s causal output (b, t_new, d_model) for new positions x, with notebook 07's KVCache.

    The cache holds the n_kv_heads key/value heads, (b, h_kv, t, d_head): they are repeated for the
    query heads only when attending, never stored repeated.

    >>> attn, cache = GroupedQueryAttention(16, 4, 1), KVCache()
    >>> cached_gqa_attention(attn, torch.ones(2, 5, 16), cache, layer=0).shape, cache.keys[0].shape
    (torch.Size([2, 5, 16]), torch.Size([2, 1, 5, 4]))

    Introduced in 10_modern_attention.
    """
    q, k, v = attn.project(x)  # (b, h, t_new, d), (b, h_kv, t_new, d) twice
    keys, values = cache.append(layer, k, v)  # each (b, h_kv, t_past + t_new, d): the grouped heads
    return attn.attend(q, keys, values, is_causal=True)  # (b, t_new, d_model), bottom-right aligned


@dataclass(frozen=True)
class ModelConfig:
    """The attention shape of a published model: what sets its KV cache's size."""

    name: str
    n_layers: int
    n_heads: int
    """Query heads."""
    n_kv_heads: int
    """Key/value heads: n_heads for MHA, 1 for MQA, in between for GQA."""
    d_head: int


PUBLISHED = (
    ModelConfig("Llama-2-7B (MHA)", n_layers=32, n_heads=32, n_kv_heads=32, d_head=128),
    ModelConfig("Mistral-7B (GQA)", n_layers=32, n_heads=32, n_kv_heads=8, d_head=128),
    ModelConfig("Llama-3-8B (GQA)", n_layers=32, n_heads=32, n_kv_heads=8, d_head=128),
    ModelConfig("Llama-2-70B (GQA)", n_layers=80, n_heads=64, n_kv_heads=8, d_head=128),
    ModelConfig("Falcon-7B (MQA)", n_layers=32, n_heads=71, n_kv_heads=1, d_head=64),
)
"""Configurations from the models' published config.json files (num_hidden_layers,
num_attention_heads, num_key_value_heads, hidden_size / num_attention_heads)."""


def kv_bytes_per_token(config: ModelConfig, dtype: torch.dtype = torch.float16) -> int:
    """KV cache bytes per token of one sequence: 2 (k and v) · layers · KV heads · d_head · bytes.

    >>> kv_bytes_per_token(PUBLISHED[0]) // 1024, kv_bytes_per_token(PUBLISHED[1]) // 1024
    (512, 128)

    Introduced in 10_modern_attention.
    """
    bytes_per_number = torch.empty((), dtype=dtype).element_size()
    return 2 * config.n_layers * config.n_kv_heads * config.d_head * bytes_per_number


def measured_bytes_per_token(config: ModelConfig, t: int = 16, dtype: torch.dtype = torch.float16) -> float:
    """Fill notebook 07's KVCache with t tokens of keys and values of this shape; its bytes per token.

    >>> measured_bytes_per_token(PUBLISHED[1], t=4) == kv_bytes_per_token(PUBLISHED[1])
    True

    Introduced in 10_modern_attention.
    """
    cache = KVCache()
    for layer in range(config.n_layers):
        k = torch.empty(1, config.n_kv_heads, t, config.d_head, dtype=dtype)  # (1, h_kv, t, d_head)
        cache.append(layer, k, torch.empty_like(k))
    return cache.nbytes() / t


def gqa_parameter_count(d_model: int, n_heads: int, n_kv_heads: int) -> int:
    """Weights of the layer without bias: W_Q and W_O (d_model² each), W_K and W_V (d_model·h_kv·d_head each).

    >>> gqa_parameter_count(4096, 32, 32), gqa_parameter_count(4096, 32, 8)
    (67108864, 41943040)

    Introduced in 10_modern_attention.
    """
    d_head = d_model // n_heads
    return 2 * d_model * d_model + 2 * d_model * n_kv_heads * d_head
