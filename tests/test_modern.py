"""Notebook 10's package code against torch: GQA, sliding windows, FlexAttention's mods and fallbacks."""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F

from attn_course import flex, gqa, window
from attn_course.attention import attention
from attn_course.heads import merge_heads, split_heads
from attn_course.kv_cache import KVCache, cache_bytes


@pytest.mark.parametrize("n_kv_heads", [8, 4, 2, 1])
def test_gqa_equals_sdpa_with_enable_gqa(n_kv_heads):
    torch.manual_seed(n_kv_heads)
    layer = gqa.GroupedQueryAttention(32, 8, n_kv_heads).double()
    x = torch.randn(2, 7, 32, dtype=torch.float64)  # (b, t, d_model)
    q = split_heads(layer.q(x), 8)  # (b, h, t, d)
    k, v = split_heads(layer.k(x), n_kv_heads), split_heads(layer.v(x), n_kv_heads)  # (b, h_kv, t, d)
    fused = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (b, h, t, d)
    torch.testing.assert_close(
        layer(x, is_causal=True), layer.out(merge_heads(fused)), atol=1e-12, rtol=1e-10
    )


def test_repeat_kv_matches_repeat_interleave():
    x = torch.randn(2, 3, 5, 4)  # (b, h_kv, t, d)
    assert torch.equal(gqa.repeat_kv(x, 4), x.repeat_interleave(4, dim=1))


def test_cached_gqa_attention_equals_the_whole_sequence_and_caches_kv_heads_only():
    torch.manual_seed(0)
    layer = gqa.GroupedQueryAttention(32, 8, 2).double()
    x = torch.randn(2, 9, 32, dtype=torch.float64)  # (b, t, d_model)
    cache = KVCache()
    with torch.no_grad():
        pieces = [gqa.cached_gqa_attention(layer, x[:, a:b], cache, 0) for a, b in ((0, 4), (4, 5), (5, 9))]
        torch.testing.assert_close(torch.cat(pieces, dim=1), layer(x, is_causal=True), atol=1e-12, rtol=1e-10)
    assert cache.keys[0].shape == (2, 2, 9, 4)
    assert cache.nbytes() == cache_bytes(n_layers=1, n_heads=2, t=9, d_head=4, dtype=torch.float64, batch=2)


@pytest.mark.parametrize("config", gqa.PUBLISHED, ids=lambda c: c.name)
def test_bytes_per_token_measured_in_the_cache_equal_the_formula(config):
    assert gqa.measured_bytes_per_token(config, t=2) == gqa.kv_bytes_per_token(config)


@pytest.mark.parametrize(
    ("t_q", "t_k", "w", "block"), [(100, 100, 20, 32), (37, 91, 10, 16), (64, 64, 1, 8), (50, 50, 200, 16)]
)
def test_sliding_window_flash_equals_masked_attention_and_sdpa(t_q, t_k, w, block):
    q, k, v = torch.randn(2, 3, t_q, 8), torch.randn(2, 3, t_k, 8), torch.randn(2, 3, t_k, 5)
    mask = window.sliding_window_mask(t_q, t_k, w)  # (t_q, t_k)
    out = window.sliding_window_flash_attention(q, k, v, w, block)  # (2, 3, t_q, 5)
    torch.testing.assert_close(out, attention(q, k, v, mask=mask)[0], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=2e-6, rtol=1e-5
    )


def test_window_none_is_causal_and_a_long_window_is_the_causal_mask():
    q, k, v = torch.randn(3, 1, 2, 70, 8).unbind(0)
    causal = attention(q, k, v, is_causal=True)[0]
    torch.testing.assert_close(window.sliding_window_flash_attention(q, k, v, None, 16), causal)
    assert torch.equal(window.sliding_window_mask(5, 9, 9), torch.ones(5, 9, dtype=torch.bool).tril(4))


needs_flex = pytest.mark.skipif(flex.flex_problem() is not None, reason=str(flex.flex_problem()))


@needs_flex
@pytest.mark.parametrize(("w", "block"), [(256, 128), (100, 64), (None, 128)])
def test_the_course_tiles_are_flex_block_masks(w, block):
    from torch.nn.attention.flex_attention import create_block_mask

    mod = flex.causal_mask_mod if w is None else flex.sliding_window_mask_mod(w)
    block_mask = create_block_mask(mod, None, None, 1024, 1024, device="cpu", BLOCK_SIZE=block)
    assert torch.equal(flex.block_states(block_mask), window.window_tile_states(1024, 1024, w, block))


@needs_flex
def test_mods_evaluate_to_the_course_masks_and_alibi_matches_its_dense_bias():
    assert torch.equal(
        flex.evaluate_mask_mod(flex.sliding_window_mask_mod(3), 1, 7, 7)[0],
        window.sliding_window_mask(7, 7, 3),
    )
    ids = flex.document_ids_from_lengths([2, 3])
    expected = torch.block_diag(torch.ones(2, 2), torch.ones(3, 3)).bool() & torch.ones(5, 5).tril().bool()
    assert torch.equal(flex.evaluate_mask_mod(flex.document_mask_mod(ids), 1, 5, 5)[0], expected)


@needs_flex
@pytest.mark.parametrize("n_heads", [1, 3, 4, 6, 8, 12])
def test_alibi_score_mod_and_alibi_bias_give_the_same_bias_for_every_pair(n_heads):
    biased = flex.evaluate_score_mod(flex.alibi_score_mod(n_heads), torch.zeros(1, n_heads, 6, 6))[0]
    assert torch.equal(biased, flex.alibi_bias(n_heads, 6))  # (n_heads, 6, 6), future pairs included
    assert (flex.alibi_bias(n_heads, 6).triu(1) > 0).sum() == n_heads * 15  # positive above the diagonal


def paper_get_slopes(n):
    """`get_slopes` of the ALiBi paper's code (ofirpress/attention_with_linear_biases), as written there."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2)
        + paper_get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


@pytest.mark.parametrize("n_heads", range(1, 33))
def test_alibi_slopes_follow_the_papers_rule_for_every_head_count(n_heads):
    expected = torch.tensor(paper_get_slopes(n_heads), dtype=torch.float32)
    torch.testing.assert_close(flex.alibi_slopes(n_heads), expected, atol=0, rtol=1e-6)


def test_alibi_slopes_of_three_heads_and_of_bloom_176b():
    assert flex.alibi_slopes(3).tolist() == [0.0625, 0.00390625, 0.25]
    slopes = flex.alibi_slopes(112)  # BLOOM-176B: 64 slopes of 64 heads, then 48 of 128 heads' odd ones
    assert slopes.shape == (112,) and len(set(slopes.tolist())) == 112
    torch.testing.assert_close(slopes, torch.tensor(paper_get_slopes(112)), atol=0, rtol=1e-6)
    with pytest.raises(ValueError, match="at least 1"):
        flex.alibi_slopes(0)


@pytest.mark.slow  # compiles, then falls back
@needs_flex
def test_flex_falls_back_to_unfused_with_a_message_when_compiling_fails(capsys):
    runner = flex.Flex(compile=True)

    def no_compiler(*args, **kwargs):
        raise RuntimeError("no C++ compiler found")

    runner._compiled = no_compiler
    q, k, v = torch.randn(3, 1, 2, 16, 8).unbind(0)
    out = runner(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    assert "runs unfused from here on" in capsys.readouterr().out
    assert not runner.compiled and "no C++ compiler" in runner.describe()


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_untraced_flex_gives_the_traced_numbers_to_the_bit_and_restores_the_flag():
    from torch.nn.attention import flex_attention as module

    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 37, 16, generator=g)  # (b, h, t, d): 37 is not a multiple of the block
    k, v = torch.randn(2, 2, 2, 37, 16, generator=g).unbind(0)  # (b, h_kv, t, d): grouped heads
    mask = flex.sliding_window_mask_mod(5)

    def bias(score, b, h, q_idx, kv_idx):
        return score - 0.3 * (h + 1) * (q_idx - kv_idx).abs()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        blocks = module.create_block_mask(mask, None, None, 37, 37, device="cpu")
        return module.flex_attention(q, k, v, score_mod=bias, block_mask=blocks, enable_gqa=True,
                                     return_lse=True)  # fmt: skip

    traced = run()
    before = module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
    with flex.untraced():
        assert module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG is True
        untraced = run()
    assert module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG is before
    assert all(torch.equal(a, b) for a, b in zip(traced, untraced, strict=True))
    with pytest.raises(ValueError, match="a learner's error"), flex.untraced():
        raise ValueError("a learner's error")
    assert module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG is before


def test_flex_problem_names_the_torch_version_without_flex(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.nn.attention.flex_attention", None)
    assert "needs torch 2.5 or newer" in flex.flex_problem()


@pytest.mark.skipif(torch.__version__ < "2.5", reason="SDPA gives 0 for rows without keys from torch 2.5 on")
@pytest.mark.parametrize("window_size", [None, 2, 100])
@pytest.mark.parametrize("block_size", [2, 4, 64])
def test_window_rows_without_keys_give_sdpas_zeros_and_gradients(window_size, block_size):
    # T_q = 7 queries after T_k = 3 keys: queries 0 to 3 sit before the first key and see none
    g = torch.Generator().manual_seed(29)
    q, k, v = (torch.randn(2, 2, t, 8, generator=g, dtype=torch.float64) for t in (7, 3, 3))
    grad_out = torch.randn(2, 2, 7, 8, generator=g, dtype=torch.float64)
    mask = window.sliding_window_mask(7, 3, 10**6 if window_size is None else window_size)  # (7, 3)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    sdpa_leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = window.sliding_window_flash_attention(*leaves, window_size, block_size)  # (2, 2, 7, 8)
    expected = F.scaled_dot_product_attention(*sdpa_leaves, attn_mask=mask)  # (2, 2, 7, 8)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
    assert torch.equal(out[..., :4, :], torch.zeros_like(out[..., :4, :]))
    grads = torch.autograd.grad(out, leaves, grad_out)
    for actual, wanted in zip(grads, torch.autograd.grad(expected, sdpa_leaves, grad_out), strict=True):
        torch.testing.assert_close(actual, wanted, atol=1e-12, rtol=1e-10)
    with torch.no_grad():  # the in-place path, reusing its tiles
        fast = window.sliding_window_flash_attention(q, k, v, window_size, block_size)
    torch.testing.assert_close(fast, expected.detach(), atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("bad", [0, -1, -64, 2.5, True])
def test_a_window_that_admits_no_key_is_refused_everywhere(bad):
    q, k, v = torch.randn(3, 1, 8, 4).unbind(0)
    calls = {
        "sliding_window_mask": lambda: window.sliding_window_mask(8, 8, bad),
        "sliding_window_flash_attention": lambda: window.sliding_window_flash_attention(q, k, v, bad, 4),
        "window_key_blocks": lambda: window.window_key_blocks(0, 4, 8, 8, bad, 4),
        "visited_fraction": lambda: window.visited_fraction(8, bad, 4),
        "window_tile_states": lambda: window.window_tile_states(8, 8, bad, 4),
        "sliding_window_mask_mod": lambda: flex.sliding_window_mask_mod(bad),
    }
    for name, run in calls.items():
        with pytest.raises(ValueError, match=r"window must be a positive number of keys .*, got") as error:
            run()
        assert repr(bad) in str(error.value), name


def test_window_none_means_causal_where_accepted_and_is_refused_by_the_mask():
    q, k, v = torch.randn(3, 1, 8, 4).unbind(0)
    causal = window.sliding_window_flash_attention(q, k, v, None, 4)
    torch.testing.assert_close(causal, attention(q, k, v, is_causal=True)[0])
    with pytest.raises(ValueError, match="got None"):
        window.sliding_window_mask(8, 8, None)
    with pytest.raises(ValueError, match="block_size must be at least 1"):
        window.sliding_window_flash_attention(q, k, v, 2, 0)


@pytest.mark.parametrize(
    ("capability", "dtype", "phrase"),
    [
        ((7, 5), torch.float16, "without tensor cores"),  # a T4: Triton's FMA path
        ((7, 5), torch.float32, "without tensor cores"),
        ((7, 5), torch.bfloat16, "runs unfused; use float16"),  # torch.compile skips bf16 before sm80
        ((6, 0), torch.float16, "which torch allows from compute capability 7.0"),
        ((8, 0), torch.float32, "not tensor cores"),  # notebook 10's float32 on an A100: ieee products
        ((9, 0), torch.float32, "not tensor cores"),
    ],
)
def test_flex_gpu_note_says_what_the_compiled_kernel_lacks_on_each_card(capability, dtype, phrase):
    note = flex.flex_gpu_note(capability, "GPU", dtype)
    assert note is not None and phrase in note


@pytest.mark.parametrize("capability", [(8, 0), (9, 0)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flex_gpu_note_is_silent_on_tensor_cores(capability, dtype):
    assert flex.flex_gpu_note(capability, "GPU", dtype) is None
    assert flex.flex_gpu_note(capability, "GPU", torch.float32, tf32=True) is None
