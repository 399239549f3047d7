"""The reference online softmax and tiled attention equal softmax, the course's attention and torch's SDPA."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from attn_course.attention import attention
from attn_course.attention_bench import PeakMemoryTracker
from attn_course.flash import flash_attention, flash_attention_forward, online_softmax
from attn_course.masking import causal_mask

TOL = {torch.float64: (1e-10, 1e-9), torch.float32: (2e-5, 1e-4), torch.bfloat16: (2e-2, 2e-2)}


@pytest.mark.parametrize(("shape", "block_size"), [((4, 50), 8), ((2, 3, 17), 1), ((9,), 100), ((3, 64), 64)])
def test_online_softmax_equals_softmax(shape, block_size):
    x = 50 * torch.randn(shape, generator=torch.Generator().manual_seed(0))  # far beyond exp's range
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)


def test_online_softmax_handles_leading_minus_infinity():
    x = torch.tensor([[-math.inf] * 5 + [1.0, 2.0, 3.0]])  # (1, 8): the first block is all -inf
    torch.testing.assert_close(online_softmax(x, 4), torch.softmax(x, dim=-1))


@pytest.mark.parametrize(
    ("t_q", "t_k", "block_size", "is_causal", "dtype"),
    [
        (t_q, t_k, block_size, is_causal, dtype)
        for (t_q, t_k), block_size, is_causal, dtype in itertools.product(
            [(64, 64), (37, 37), (21, 45), (45, 45), (1, 9)], [1, 8, 16, 100], [False, True], [torch.float64]
        )
    ]
    + [
        (100, 100, 32, True, torch.float32),
        (77, 130, 16, True, torch.float32),
        (64, 64, 16, False, torch.bfloat16),
    ],
)
def test_flash_attention_matches_sdpa_and_attention(t_q, t_k, block_size, is_causal, dtype):
    g = torch.Generator().manual_seed(t_q * 1000 + t_k)
    q = torch.randn(2, 3, t_q, 16, generator=g).to(dtype)  # (B, H, T_q, d)
    k = torch.randn(2, 3, t_k, 16, generator=g).to(dtype)  # (B, H, T_k, d)
    v = torch.randn(2, 3, t_k, 8, generator=g).to(dtype)  # (B, H, T_k, d_v)
    out = flash_attention(q, k, v, is_causal=is_causal, block_size=block_size)  # (B, H, T_q, d_v)
    mask = causal_mask(t_q, t_k) if is_causal else None  # bottom-right, as torch's causal_lower_right
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask).to(dtype)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
    torch.testing.assert_close(out, attention(q, k, v, is_causal=is_causal)[0], atol=atol, rtol=rtol)


def test_log_sum_exp_and_rows_without_keys():
    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(2, 30, 8, generator=g),
        torch.randn(2, 20, 8, generator=g),
        torch.randn(2, 20, 4, generator=g),
    )
    out, lse = flash_attention_forward(q, k, v, is_causal=True, block_size=8)  # T_q > T_k: 10 rows see no key
    scores = (q @ k.mT / math.sqrt(8)).masked_fill(~causal_mask(30, 20), -math.inf)  # (2, 30, 20)
    torch.testing.assert_close(lse, scores.logsumexp(dim=-1))
    assert torch.isnan(out[:, :10]).all() and torch.isinf(lse[:, :10]).all()
    torch.testing.assert_close(out, attention(q, k, v, is_causal=True)[0], equal_nan=True)


def test_flash_attention_is_differentiable():
    q, k, v = (torch.randn(1, 2, 19, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: flash_attention(q, k, v, True, 8), (q, k, v))


def test_flash_attention_never_holds_the_score_matrix():
    q, k, v = torch.randn(3, 1, 4, 512, 32).unbind(0)  # each (1, 4, 512, 32)
    with torch.no_grad(), PeakMemoryTracker() as tracker:
        flash_attention(q, k, v, is_causal=True, block_size=64)
    assert max(tracker.allocations) < 4 * 512 * 512  # fewer bytes than one head's float32 scores
    assert tracker.peak < 4 * 512 * 512 * 4 / 4  # under a quarter of the four heads' scores


def test_block_size_must_be_positive():
    with pytest.raises(ValueError, match="block_size"):
        flash_attention(torch.ones(3, 2), torch.ones(3, 2), torch.ones(3, 2), block_size=0)
