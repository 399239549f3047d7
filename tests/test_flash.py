"""The reference online softmax and tiled attention equal softmax, the course's attention and torch's SDPA."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from attn_course import flash
from attn_course.attention import attention
from attn_course.demos.attention_bench import PeakMemoryTracker
from attn_course.flash import (
    flash_attention,
    flash_attention_forward,
    flash_attention_query_block,
    online_softmax,
)
from attn_course.flash_fast import flash_attention_fast
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
@pytest.mark.parametrize("tiled", [flash_attention, flash_attention_fast], ids=["reference", "fast"])
def test_flash_attention_matches_sdpa_and_attention(tiled, t_q, t_k, block_size, is_causal, dtype):
    g = torch.Generator().manual_seed(t_q * 1000 + t_k)
    q = torch.randn(2, 3, t_q, 16, generator=g).to(dtype)  # (B, H, T_q, d)
    k = torch.randn(2, 3, t_k, 16, generator=g).to(dtype)  # (B, H, T_k, d)
    v = torch.randn(2, 3, t_k, 8, generator=g).to(dtype)  # (B, H, T_k, d_v)
    out = tiled(q, k, v, is_causal=is_causal, block_size=block_size)  # (B, H, T_q, d_v)
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
    torch.testing.assert_close(lse, scores.logsumexp(dim=-1))  # -inf where no key, as torch.logsumexp
    assert torch.equal(out[:, :10], torch.zeros_like(out[:, :10])) and lse[:, :10].eq(-math.inf).all()
    torch.testing.assert_close(out, attention(q, k, v, is_causal=True)[0])


def sdpa_and_grads(q, k, v, grad_out, mask):
    """SDPA's output and (dq, dk, dv) with an explicit boolean mask: what every implementation must give."""
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, attn_mask=mask)  # (..., T_q, d_v)
    return out.detach(), torch.autograd.grad(out, leaves, grad_out)


def rows_without_keys(dtype=torch.float64):
    """T_q = 7 queries after T_k = 3 keys, causal bottom-right: queries 0 to 3 see no key."""
    g = torch.Generator().manual_seed(29)
    q, k, v = (torch.randn(2, 2, t, 8, generator=g, dtype=dtype) for t in (7, 3, 3))
    return q, k, v, torch.randn(2, 2, 7, 8, generator=g, dtype=dtype)


@pytest.mark.skipif(torch.__version__ < "2.5", reason="SDPA gives 0 for rows without keys from torch 2.5 on")
@pytest.mark.parametrize("block_size", [2, 4, 64])
def test_rows_without_keys_give_sdpas_zeros_and_gradients_in_every_tiled_implementation(block_size):
    q, k, v, grad_out = rows_without_keys()
    expected, expected_grads = sdpa_and_grads(q, k, v, grad_out, causal_mask(7, 3))
    assert torch.equal(expected[..., :4, :], torch.zeros_like(expected[..., :4, :]))
    out, lse = flash_attention_forward(q, k, v, is_causal=True, block_size=block_size)
    fast, fast_lse = flash_attention_fast(q, k, v, is_causal=True, block_size=block_size, return_lse=True)
    for tiled, tiled_lse in ((out, lse), (fast, fast_lse)):
        torch.testing.assert_close(tiled, expected, atol=1e-12, rtol=1e-10)
        assert tiled_lse[..., :4].eq(-math.inf).all() and tiled_lse[..., 4:].isfinite().all()
    grads = flash.flash_attention_backward(q, k, v, out, lse, grad_out, True, block_size)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    function_out = flash.FlashAttentionFunction.apply(*leaves, True, block_size)
    function_grads = torch.autograd.grad(function_out, leaves, grad_out)
    for name, got in (("flash_attention_backward", grads), ("FlashAttentionFunction", function_grads)):
        for which, actual, wanted in zip("qkv", got, expected_grads, strict=True):
            assert actual.isfinite().all(), f"{name}: d{which} holds NaN or inf"
            torch.testing.assert_close(actual, wanted, atol=1e-12, rtol=1e-10, msg=f"{name}: d{which}")
        assert torch.equal(got[0][..., :4, :], torch.zeros_like(got[0][..., :4, :]))  # dq of those rows


def test_the_fast_path_gives_the_references_output_and_lse_also_under_autograd():
    q, k, v = (torch.randn(2, t, 16, dtype=torch.float64) for t in (50, 70, 70))  # (B, T, d)  # noqa: E501
    for is_causal in (False, True):
        expected = flash_attention(q, k, v, is_causal=is_causal, block_size=16, return_lse=True)
        torch.testing.assert_close(flash_attention_fast(q, k, v, is_causal, 16, return_lse=True), expected)
    q.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda q: flash_attention_fast(q, k[:, :9], v[:, :9], True, 4), (q[:, :7],)
    )


@pytest.mark.parametrize(("t_k", "block_size"), [(64, 16), (37, 8), (20, 1), (20, 64)])
def test_one_query_block_against_all_keys_is_that_block_of_attention(t_k, block_size):
    q, k, v = torch.randn(2, 3, 16, 8, dtype=torch.float64), torch.randn(2, 3, t_k, 8, dtype=torch.float64), torch.randn(2, 3, t_k, 5, dtype=torch.float64)  # noqa: E501  # fmt: skip
    out, lse = flash_attention_query_block(q, k, v, block_size)  # (2, 3, 16, 5), (2, 3, 16)
    torch.testing.assert_close(out, attention(q, k, v)[0])
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.mT / math.sqrt(8), dim=-1))


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


# ---------------------------------------------------------------------------------------------
# The backward (notebook 09)


@pytest.mark.parametrize(
    ("q_shape", "t_k", "is_causal", "block_size"),
    [
        ((2, 3, 37, 8), 37, True, 8),
        ((2, 20, 8), 45, True, 16),
        ((1, 2, 50, 8), 30, False, 7),
        ((9, 4), 9, True, 64),
    ],
)
def test_flash_attention_backward_gives_autograds_gradients(q_shape, t_k, is_causal, block_size):
    q = torch.randn(q_shape, dtype=torch.float64, requires_grad=True)
    k = torch.randn(*q_shape[:-2], t_k, q_shape[-1], dtype=torch.float64, requires_grad=True)
    v = torch.randn(*q_shape[:-2], t_k, 5, dtype=torch.float64, requires_grad=True)
    expected_out = attention(q, k, v, is_causal=is_causal)[0]  # (..., T_q, 5)
    grad_out = torch.randn_like(expected_out)
    expected = torch.autograd.grad(expected_out, (q, k, v), grad_out)
    out, lse = flash.flash_attention_forward(q.detach(), k.detach(), v.detach(), is_causal, block_size)
    grads = flash.flash_attention_backward(q.detach(), k.detach(), v.detach(), out, lse, grad_out, is_causal,
                                           block_size)  # fmt: skip
    for mine, ref in zip(grads, expected, strict=True):
        torch.testing.assert_close(mine, ref, atol=1e-10, rtol=1e-8)


def test_flash_attention_function_passes_gradcheck_and_saves_only_linear_tensors():
    q, k, v = (torch.randn(1, 2, n, 4, dtype=torch.float64, requires_grad=True) for n in (6, 9, 9))
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash.FlashAttentionFunction.apply(q, k, v, True, 4), (q, k, v)
    )
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x) or x, lambda x: x):
        flash.FlashAttentionFunction.apply(q, k, v, True, 4)
    assert [tuple(x.shape) for x in saved] == [
        (1, 2, 6, 4),
        (1, 2, 9, 4),
        (1, 2, 9, 4),
        (1, 2, 6, 4),
        (1, 2, 6),
    ]


def test_a_decoder_with_the_function_trains_like_the_course_attention():
    import copy

    from attn_course.backward import use_attention
    from attn_course.decoder import DecoderConfig, TinyDecoder
    from attn_course.demos.induction import train_induction

    torch.manual_seed(0)
    course = TinyDecoder(DecoderConfig(vocab_size=16, n_layers=2, n_heads=2, d_model=16, d_mlp=32))
    tiled = use_attention(
        copy.deepcopy(course), lambda q, k, v, c: flash.FlashAttentionFunction.apply(q, k, v, c, 8)
    )
    runs = [
        train_induction(m, 5, batch=8, seq_len=24, periods=(3, 6), progress=False) for m in (course, tiled)
    ]
    assert runs[0].losses == pytest.approx(runs[1].losses, abs=1e-5)
