"""The paged KV cache against notebook 07's contiguous cache and attention over it (notebook 11)."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from attn_course.kv_cache import KVCache, cached_attention
from attn_course.paged_cache import BlockPool, PagedKVCache, append_kv, blocks_needed, gather_kv
from attn_course.rope import RotaryMultiHeadAttention, apply_rope


def expect_consistent(cache: PagedKVCache) -> None:
    """Counts are how many tables hold each block; the free list is the blocks no table holds."""
    held = [0] * len(cache.pool.refcount)
    for seq, table in cache.tables.items():
        assert len(table) == blocks_needed(cache.lengths[seq], cache.pool.block_size)
        for block in table:
            held[block] += 1
    assert cache.pool.refcount == held
    assert sorted(cache.pool.free) == [b for b, count in enumerate(held) if count == 0]


@pytest.mark.parametrize("block_size", [1, 3, 4, 64])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_appends_forks_and_frees_match_the_contiguous_cache_token_for_token(block_size, seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    h, d = 3, 5
    cache = PagedKVCache(BlockPool(200, h, block_size, d, dtype=torch.float64))
    contiguous = KVCache()  # layer = sequence id: notebook 07's cache, one per sequence
    live = [cache.new_sequence() for _ in range(3)]
    for _ in range(120):
        action = rng.random()
        if action < 0.08 and live:
            parent = rng.choice(live)
            child = cache.fork(parent)
            if contiguous.length(parent):
                contiguous.append(child, contiguous.keys[parent], contiguous.values[parent])
            live.append(child)
        elif action < 0.13 and len(live) > 1:
            seq = live.pop(rng.randrange(len(live)))
            cache.free(seq)
        else:
            seq = rng.choice(live)
            k, v = torch.randn(h, d, dtype=torch.float64), torch.randn(h, d, dtype=torch.float64)
            append_kv(cache, seq, k, v)
            contiguous.append(seq, k[None, :, None], v[None, :, None])  # (1, h, 1, d) each
        expect_consistent(cache)
        for seq in live:
            keys, values = cache.gather(seq)  # (h, length, d) each
            assert cache.lengths[seq] == contiguous.length(seq)
            if contiguous.length(seq):
                torch.testing.assert_close(keys, contiguous.keys[seq][0], atol=0, rtol=0)
                torch.testing.assert_close(values, contiguous.values[seq][0], atol=0, rtol=0)
    for seq in live:
        cache.free(seq)
    assert sorted(cache.pool.free) == list(range(200)) and not any(cache.pool.refcount)


def test_a_fork_shares_blocks_until_one_of_them_writes():
    cache = PagedKVCache(BlockPool(8, 2, 4, 3))
    a = cache.new_sequence()
    for _ in range(6):
        append_kv(cache, a, torch.randn(2, 3), torch.randn(2, 3))
    b = cache.fork(a)
    assert cache.tables[b] == cache.tables[a] == [0, 1] and cache.pool.refcount[:2] == [2, 2]
    before = [t.clone() for t in cache.gather(a)]
    append_kv(cache, b, torch.randn(2, 3), torch.randn(2, 3))  # block 1 is shared: b copies it
    assert cache.tables[b] == [0, 2] and cache.pool.refcount[:3] == [2, 1, 1]
    append_kv(cache, a, torch.randn(2, 3), torch.randn(2, 3))  # block 1 is a's alone now: no copy
    assert cache.tables[a] == [0, 1]
    torch.testing.assert_close(cache.gather(a)[0][:, :6], before[0])
    torch.testing.assert_close(cache.gather(b)[0][:, :6], before[0])
    assert not torch.equal(cache.gather(a)[0][:, 6], cache.gather(b)[0][:, 6])
    cache.free(a)
    assert cache.pool.refcount[:3] == [1, 0, 1] and 1 in cache.pool.free


def test_a_full_pool_says_so():
    pool = BlockPool(1, 1, 2, 2)
    pool.allocate()
    with pytest.raises(RuntimeError, match="all in use"):
        pool.allocate()


@pytest.mark.parametrize(("block_size", "table", "length"), [(4, [5, 0, 3], 9), (1, [2, 1], 2), (16, [1], 7)])
def test_gather_reads_position_t_from_its_block_and_slot(block_size, table, length):
    pool_k, pool_v = torch.randn(6, 2, block_size, 3), torch.randn(6, 2, block_size, 3)
    keys, values = gather_kv(pool_k, pool_v, table, length)
    for t in range(length):
        block, slot = table[t // block_size], t % block_size
        assert torch.equal(keys[:, t], pool_k[block, :, slot])
        assert torch.equal(values[:, t], pool_v[block, :, slot])


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_decoding_through_the_paged_cache_is_notebook_07s_cached_attention(block_size):
    torch.manual_seed(0)
    attn = RotaryMultiHeadAttention(d_model=12, n_heads=3).double().eval()
    x = torch.randn(1, 9, 12, dtype=torch.float64)  # (b, t, d_model)
    contiguous = KVCache()
    paged = PagedKVCache(BlockPool(16, 3, block_size, 4, dtype=torch.float64))
    seq = paged.new_sequence()
    with torch.no_grad():
        for t in range(9):
            want = cached_attention(attn, x[:, t : t + 1], contiguous, layer=0)  # (1, 1, d_model)
            q, k, v = attn.project(x[:, t : t + 1])  # each (1, h, 1, d)
            position = torch.tensor([t])
            q, k = apply_rope(q, position, attn.base), apply_rope(k, position, attn.base)
            append_kv(paged, seq, k[0, :, 0], v[0, :, 0])
            keys, values = paged.gather(seq)  # (h, t + 1, d) each
            out = F.scaled_dot_product_attention(q[0], keys, values)  # (h, 1, d): the new token sees all
            got = attn.out(out.transpose(0, 1).reshape(1, 1, 12))  # (1, 1, d_model)
            torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


def test_the_paged_cache_holds_one_partial_block_per_sequence_at_most():
    lengths = [5, 17, 64, 1, 33]
    cache = PagedKVCache(BlockPool(64, 2, 8, 4))
    for length in lengths:
        seq = cache.new_sequence()
        for _ in range(length):
            append_kv(cache, seq, torch.zeros(2, 4), torch.zeros(2, 4))
    token_bytes = 2 * 2 * 4 * 4  # k and v, 2 heads of 4 float32 numbers
    waste = cache.nbytes_held() - sum(lengths) * token_bytes
    assert 0 <= waste < len(lengths) * cache.pool.block_nbytes()
    assert waste == sum(-length % 8 for length in lengths) * token_bytes


def test_block_table_plot_colours_a_shared_block_grey_and_links_every_table_entry():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attn_course.plots.paged_cache import block_table_plot

    cache = PagedKVCache(BlockPool(6, 1, 2, 2))
    a = cache.new_sequence()
    for _ in range(3):
        append_kv(cache, a, torch.ones(1, 2), torch.ones(1, 2))
    b = cache.fork(a)
    append_kv(cache, b, torch.ones(1, 2), torch.ones(1, 2))  # b copies block 1 into block 2
    ax = block_table_plot(cache, {"a": a, "b": b})
    texts = [t.get_text() for t in ax.texts]
    assert "0\nshared ×2" in texts and "a (3)" in texts and "b (4)" in texts
    assert len(ax.lines) == len(cache.tables[a]) + len(cache.tables[b])  # one link per table entry
    plt.close(ax.figure)
