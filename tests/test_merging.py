"""Notebook 11's merging of partial attention against torch's SDPA and attention over every key."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_course.merging import flash_decode, merge_attention, partial_attention, sm_busy_share


def _split(t_k: int, at: int, dtype: torch.dtype = torch.float64):
    torch.manual_seed(t_k + at)
    q = torch.randn(2, 3, 5, 8, dtype=dtype)  # (B, H, T_q, d)
    k = torch.randn(2, 3, t_k, 8, dtype=dtype)  # (B, H, T_k, d)
    v = torch.randn(2, 3, t_k, 6, dtype=dtype)  # (B, H, T_k, d_v)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_partial_attention_is_sdpa_with_the_log_sum_exp_of_the_scores(dtype):
    q, k, v = _split(11, 4, dtype)
    out, lse = partial_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    scores = q @ k.transpose(-2, -1) / 8**0.5  # (B, H, T_q, T_k)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1))


def test_partial_attention_causal_is_top_left_aligned_and_masks_combine():
    q, k, v = _split(7, 3)
    causal = torch.ones(5, 7, dtype=torch.bool).tril()  # (T_q, T_k): query i sees keys j <= i
    out, _ = partial_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=causal))
    padding = torch.tensor([True] * 5 + [False] * 2)  # (T_k,)
    out, _ = partial_attention(q, k, v, mask=padding, is_causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=causal & padding))


def test_a_row_that_sees_no_key_has_lse_minus_inf_and_output_zero():
    q, k, v = _split(6, 2)
    mask = torch.ones(5, 6, dtype=torch.bool)  # (T_q, T_k)
    mask[2] = False
    out, lse = partial_attention(q, k, v, mask=mask)
    assert torch.isneginf(lse[..., 2]).all() and torch.isfinite(lse[..., [0, 1, 3, 4]]).all()
    assert (out[..., 2, :] == 0).all() and torch.isfinite(out).all()


@pytest.mark.parametrize(("t_k", "at"), [(10, 4), (10, 1), (10, 9), (3, 1)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_merging_two_parts_is_attention_over_both(t_k, at, dtype):
    q, k, v = _split(t_k, at, dtype)
    a = partial_attention(q, k[..., :at, :], v[..., :at, :])
    b = partial_attention(q, k[..., at:, :], v[..., at:, :])
    out, lse = merge_attention(*a, *b)
    whole_out, whole_lse = partial_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(lse, whole_lse)
    assert out.dtype == lse.dtype == dtype
    torch.testing.assert_close(merge_attention(*b, *a)[0], whole_out)  # the order of the parts is free


def test_merging_rows_that_see_no_key_in_one_part_or_in_both():
    q, k, v = _split(8, 3)
    mask = torch.ones(5, 8, dtype=torch.bool)  # (T_q, T_k)
    mask[1, :3] = False  # row 1: no key in A
    mask[2, 3:] = False  # row 2: no key in B
    mask[4] = False  # row 4: no key at all
    a = partial_attention(q, k[..., :3, :], v[..., :3, :], mask=mask[:, :3])
    b = partial_attention(q, k[..., 3:, :], v[..., 3:, :], mask=mask[:, 3:])
    out, lse = merge_attention(*a, *b)
    whole_out, whole_lse = partial_attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, whole_out)
    torch.testing.assert_close(lse, whole_lse)
    assert torch.isneginf(lse[..., 4]).all() and (out[..., 4, :] == 0).all() and not out.isnan().any()
    sdpa = F.scaled_dot_product_attention(q[..., :4, :], k, v, attn_mask=mask[:4])  # rows with a key
    torch.testing.assert_close(out[..., :4, :], sdpa)


def test_merging_float32_lse_far_beyond_exps_range():
    q, k, v = _split(12, 5, torch.float32)
    q, k = q * 10, k * 10  # scores of magnitude about 100: exp(lse) is inf in float32
    a = partial_attention(q, k[..., :5, :], v[..., :5, :])
    b = partial_attention(q, k[..., 5:, :], v[..., 5:, :])
    assert (torch.exp(a[1]) == float("inf")).any()
    out, _ = merge_attention(*a, *b)
    exact = partial_attention(q.double(), k.double(), v.double())[0]
    torch.testing.assert_close(out, exact.float(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("t_q", "t_k", "chunk_size"), [(1, 37, 8), (4, 32, 8), (1, 20, 64), (2, 9, 1)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_flash_decode_is_sdpa_over_the_whole_cache(t_q, t_k, chunk_size, dtype):
    torch.manual_seed(t_k)
    q = torch.randn(2, 2, 3, t_q, 8, dtype=dtype)  # (B, H, G, T_q, d): several batch axes
    k = torch.randn(2, 2, 3, t_k, 8, dtype=dtype)  # (B, H, G, T_k, d)
    v = torch.randn(2, 2, 3, t_k, 5, dtype=dtype)  # (B, H, G, T_k, d_v)
    out = flash_decode(q, k, v, chunk_size)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    assert out.dtype == dtype


def test_flash_decode_takes_views():
    torch.manual_seed(0)
    q = torch.randn(2, 1, 3, 8).transpose(1, 2)  # (B, H, T_q, d) as split_heads makes it
    k = torch.randn(2, 30, 3, 8).transpose(1, 2)  # (B, H, T_k, d)
    v = torch.randn(2, 40, 3, 4).transpose(1, 2)[:, :, :30]  # (B, H, T_k, d_v), a slice too
    torch.testing.assert_close(flash_decode(q, k, v, 7), F.scaled_dot_product_attention(q, k, v))


def test_sm_busy_share_counts_the_last_waves_idle_sms():
    assert sm_busy_share(32, 132) == pytest.approx(32 / 132)
    assert sm_busy_share(264, 132) == 1.0
    assert sm_busy_share(32 * 5, 40) == 1.0  # 4 whole waves on a T4
    assert sm_busy_share(32 * 5, 132) == pytest.approx(160 / 264)  # two waves, the second 28 programs
