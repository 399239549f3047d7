"""The KV cache: keys and values of past positions, so each generated token costs O(T), not O(T²).

Introduced in 07_kv_cache.
"""

from __future__ import annotations

import torch

from attn_course.rope import RotaryMultiHeadAttention


class KVCache:
    """The keys and values of every position seen so far, per layer."""

    def length(self, layer: int) -> int:
        """How many positions `layer` has cached (0 before its first append)."""
        raise NotImplementedError  # filled in by issue 7

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's k, v (b, h, t_new, d_k) to `layer`; return all of its keys and values so far."""
        raise NotImplementedError  # filled in by issue 7


def cached_attention(
    attn: RotaryMultiHeadAttention, x: torch.Tensor, cache: KVCache, layer: int
) -> torch.Tensor:
    """`attn`'s causal output (b, t_new, d_model) for new positions x, attending to the cache too."""
    raise NotImplementedError  # filled in by issue 7
