"""The reference KV cache and cached attention: exact history, and the layer's output on the full sequence."""

from __future__ import annotations

import pytest
import torch

from attn_course.kv_cache import KVCache, cache_bytes, cached_attention
from attn_course.rope import RotaryMultiHeadAttention


def test_append_returns_the_history_per_layer_and_counts_positions():
    cache = KVCache()
    k0, v0 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    k1, v1 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 5)
    cache.append(0, k0, v0)
    cache.append(1, k1, v1)
    keys, values = cache.append(0, k1, v1)
    torch.testing.assert_close(keys, torch.cat([k0, k1], dim=-2), atol=0, rtol=0)
    torch.testing.assert_close(values, torch.cat([v0, v1], dim=-2), atol=0, rtol=0)
    assert (cache.length(0), cache.length(1), cache.length(2)) == (5, 1, 0)


@pytest.mark.parametrize("chunks", [[1] * 9, [9], [4, 1, 3, 1], [2, 2, 5]])
@pytest.mark.parametrize("seed", [0, 1])
def test_cached_attention_in_chunks_matches_the_layer_on_the_whole_sequence(chunks, seed):
    torch.manual_seed(seed)
    attn = RotaryMultiHeadAttention(d_model=16, n_heads=4, base=100.0).double()
    x = torch.randn(3, sum(chunks), 16, dtype=torch.float64)  # (b, t, d_model)
    cache, outs, start = KVCache(), [], 0
    for t_new in chunks:
        outs.append(cached_attention(attn, x[:, start : start + t_new], cache, layer=3))
        start += t_new
    torch.testing.assert_close(torch.cat(outs, dim=1), attn(x, is_causal=True), atol=1e-10, rtol=1e-10)
    assert cache.length(3) == sum(chunks) and cache.length(0) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cache_bytes_formula_matches_the_tensors(dtype):
    n_layers, b, h, t, d = 3, 2, 4, 7, 8
    cache = KVCache()
    for layer in range(n_layers):
        cache.append(layer, torch.zeros(b, h, t, d, dtype=dtype), torch.zeros(b, h, t, d, dtype=dtype))
    assert cache.nbytes() == cache_bytes(n_layers, h, t, d, dtype, batch=b)
    assert cache_bytes(n_layers, h, t, d, dtype) * b == cache.nbytes()
