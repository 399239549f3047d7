"""The KV cache: keys and values of past positions, so each generated token costs O(T), not O(T²).

Introduced in 07_kv_cache.
"""

from __future__ import annotations

import torch

from attn_course.attention import attention
from attn_course.exercise import exercise
from attn_course.heads import merge_heads
from attn_course.rope import RotaryMultiHeadAttention, apply_rope


@exercise("07_kv_cache", 3)
class KVCache:
    """The keys and values of every position seen so far, per layer.

    >>> cache = KVCache()
    >>> keys, values = cache.append(0, torch.ones(2, 4, 3, 8), torch.ones(2, 4, 3, 8))
    >>> keys, values = cache.append(0, torch.ones(2, 4, 1, 8), torch.ones(2, 4, 1, 8))
    >>> cache.length(0), cache.length(1), values.shape
    (4, 0, torch.Size([2, 4, 4, 8]))

    Introduced in 07_kv_cache.
    """

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)
        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)

    def length(self, layer: int) -> int:
        """How many positions `layer` has cached (0 before its first append)."""
        return self.keys[layer].shape[-2] if layer in self.keys else 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's k, v (b, h, t_new, d_k) to `layer`; return all of its keys and values so far."""
        if layer in self.keys:
            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)
            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def nbytes(self) -> int:
        """Bytes held by the cached keys and values of all layers."""
        tensors = [*self.keys.values(), *self.values.values()]
        return sum(t.numel() * t.element_size() for t in tensors)


@exercise("07_kv_cache", 4)
def cached_attention(
    attn: RotaryMultiHeadAttention, x: torch.Tensor, cache: KVCache, layer: int
) -> torch.Tensor:
    """`attn`'s causal output (b, t_new, d_model) for new positions x, attending to the cache too.

    The new tokens sit at the absolute positions t_past … t_past + t_new - 1: their q and k are
    rotated there, k and v are appended to the cache once, and the queries attend to every cached
    position with the bottom-right causal alignment (new token i sees the past and new tokens ≤ i).

    >>> attn = RotaryMultiHeadAttention(d_model=12, n_heads=3)
    >>> cache = KVCache()
    >>> cached_attention(attn, torch.ones(2, 5, 12), cache, layer=0).shape
    torch.Size([2, 5, 12])
    >>> cached_attention(attn, torch.ones(2, 1, 12), cache, layer=0).shape, cache.length(0)
    (torch.Size([2, 1, 12]), 6)

    Introduced in 07_kv_cache.
    """
    t_past, t_new = cache.length(layer), x.shape[-2]
    positions = torch.arange(t_past, t_past + t_new, device=x.device)  # (t_new,): absolute positions
    q, k, v = attn.project(x)  # each (b, h, t_new, d_k)
    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)  # each (b, h, t_new, d_k)
    keys, values = cache.append(layer, k, v)  # each (b, h, t_past + t_new, d_k)
    out, _ = attention(q, keys, values, is_causal=True)  # (b, h, t_new, d_k): bottom-right aligned
    return attn.out(merge_heads(out))  # (b, t_new, d_model)


def cache_bytes(n_layers: int, n_heads: int, t: int, d_head: int, dtype: torch.dtype, batch: int = 1) -> int:
    """Memory of a full cache: 2 (k and v) · layers · heads · T · d_head · bytes per number, per sequence.

    >>> cache_bytes(n_layers=32, n_heads=32, t=4096, d_head=128, dtype=torch.float16) / 2**30  # LLaMA-2 7B
    2.0

    Introduced in 07_kv_cache.
    """
    bytes_per_number = torch.empty((), dtype=dtype).element_size()
    return 2 * n_layers * n_heads * t * d_head * bytes_per_number * batch
