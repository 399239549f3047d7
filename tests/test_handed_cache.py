"""Notebook 07's diagnosis: the colleague's cached step is right on a prefill, wrong after it, and named."""

from __future__ import annotations

import pytest
import torch
from check_assertions import assert_rejected
from einops import rearrange

from attn_course.attention import attention
from attn_course.checks import check_cached_attention
from attn_course.demos.handed_cache import chunk_differences, colleagues_cached_attention
from attn_course.kv_cache import cached_attention
from attn_course.rope import RotaryMultiHeadAttention, apply_rope


def mask_fixed_positions_not(attn, x, cache, layer):  # the learner fixed one of the two mistakes
    positions = torch.arange(x.shape[1])
    q, k, v = attn.project(x)
    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)
    keys, values = cache.append(layer, k, v)
    out, _ = attention(q, keys, values, is_causal=True)
    return attn.out(rearrange(out, "b h t d -> b t (h d)"))


@pytest.fixture
def layer_and_x():
    torch.manual_seed(0)
    return RotaryMultiHeadAttention(d_model=32, n_heads=4), torch.randn(1, 10, 32)


def test_the_colleagues_step_passes_a_prefill_and_fails_every_step_after_it(layer_and_x):
    attn, x = layer_and_x
    assert chunk_differences(colleagues_cached_attention, attn, x, [10]) == pytest.approx([0.0], abs=1e-5)
    after = chunk_differences(colleagues_cached_attention, attn, x, [6, 1, 1, 1, 1])
    assert after[0] < 1e-5 and min(after[1:]) > 0.1


def test_the_reference_passes_every_chunk(layer_and_x):
    attn, x = layer_and_x
    assert max(chunk_differences(cached_attention, attn, x, [6, 1, 1, 1, 1])) < 1e-5


def test_chunks_that_do_not_cover_x_are_refused(layer_and_x):
    attn, x = layer_and_x
    with pytest.raises(ValueError, match="add up to 9"):
        chunk_differences(cached_attention, attn, x, [6, 1, 1, 1])


def test_the_check_names_the_mask_first_then_the_positions(capsys):
    check = check_cached_attention
    assert_rejected(check, colleagues_cached_attention, "aligns the causal mask top-left", capsys)
    assert_rejected(check, mask_fixed_positions_not, "as if they started at position 0", capsys)
