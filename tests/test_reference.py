"""Tests of attn_course.reference against torch's softmax, tril and scaled_dot_product_attention.

The reference is the readable path; torch's fused attention is the path people ship. They must
agree everywhere, also on a query row that may attend to nothing: output 0 (weights 0) and finite
gradients, the convention torch's SDPA follows from 2.5 on and the course follows throughout.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from attn_course import reference

TOLERANCES = {
    torch.float32: {"atol": 2e-6, "rtol": 2e-5},
    torch.float64: {"atol": 1e-12, "rtol": 1e-10},
}
"""How closely the reference must match torch, per dtype (values are O(1))."""

DTYPES = [torch.float32, torch.float64]

# (seed, batch dims, T_q, T_k, d_k, d_v): T_q != T_k, batch and head dims, odd and unit sizes.
SHAPES = [
    (0, (), 1, 1, 1, 1),
    (1, (), 5, 5, 8, 8),
    (2, (3,), 4, 9, 7, 5),
    (3, (2, 3), 7, 7, 16, 4),
    (4, (2, 1), 9, 4, 3, 6),
    (5, (1, 4), 3, 11, 5, 5),
]


def qkv(seed: int, batch: tuple[int, ...], t_q: int, t_k: int, d_k: int, d_v: int, dtype):
    """Seeded queries (..., T_q, d_k), keys (..., T_k, d_k) and values (..., T_k, d_v)."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, t_q, d_k, generator=generator, dtype=dtype)
    k = torch.randn(*batch, t_k, d_k, generator=generator, dtype=dtype)
    v = torch.randn(*batch, t_k, d_v, generator=generator, dtype=dtype)
    return q, k, v


def bottom_right_mask(t_q: int, t_k: int) -> torch.Tensor:
    """Causal mask built entry by entry: query i sits at absolute position i + t_k - t_q."""
    return torch.tensor([[j <= i + t_k - t_q for j in range(t_k)] for i in range(t_q)])


def top_left_mask(t_q: int, t_k: int) -> torch.Tensor:
    """Causal mask built entry by entry as if query i sat at absolute position i."""
    return torch.tensor([[j <= i for j in range(t_k)] for i in range(t_q)])


def random_mask(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    """A seeded boolean mask in which every query row may attend at least its last key."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=generator) < 0.6
    mask[..., -1] = True
    return mask


# Masks


@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")
@pytest.mark.parametrize("t_q, t_k", [(1, 1), (1, 5), (4, 4), (3, 7), (7, 3), (6, 6)])
def test_causal_mask_is_bottom_right_aligned(t_q: int, t_k: int) -> None:
    mask = reference.causal_mask(t_q, t_k)
    assert mask.dtype == torch.bool and mask.shape == (t_q, t_k)
    assert torch.equal(mask, bottom_right_mask(t_q, t_k))
    assert torch.equal(mask, causal_lower_right(t_q, t_k)._materialize())
    assert mask[-1].all(), "the last query sees every key"


@pytest.mark.parametrize("t", [1, 2, 7, 16])
def test_square_causal_mask_is_torch_tril(t: int) -> None:
    expected = torch.tril(torch.ones(t, t, dtype=torch.bool))
    assert torch.equal(reference.causal_mask(t), expected)
    assert torch.equal(reference.causal_mask(t, t), expected)


def test_causal_mask_is_created_on_the_requested_device() -> None:
    assert reference.causal_mask(3, 5, device="cpu").device.type == "cpu"
    assert reference.causal_mask(3, device=torch.device("meta")).device.type == "meta"


@pytest.mark.parametrize(
    "lengths, t", [([1, 3], 4), ([0, 5, 2], 5), ([7], 7), ([2, 2, 2, 2], 3), ([4, 1, 6], 9)]
)
def test_padding_mask_marks_the_first_lengths_tokens(lengths: list[int], t: int) -> None:
    expected = torch.tensor([[j < n for j in range(t)] for n in lengths])
    mask = reference.padding_mask(torch.tensor(lengths), t)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, expected)


# Scores and softmax


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed, batch, t_q, t_k, d_k, d_v", SHAPES)
def test_dot_product_scores_match_matmul(seed, batch, t_q, t_k, d_k, d_v, dtype) -> None:
    q, k, _ = qkv(seed, batch, t_q, t_k, d_k, d_v, dtype)
    expected = q @ k.transpose(-2, -1)  # (..., T_q, T_k)
    torch.testing.assert_close(reference.dot_product_scores(q, k), expected, **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "seed, shape, dim, scale",
    [(0, (5,), -1, 1.0), (1, (3, 7), -1, 10.0), (2, (3, 7), 0, 1.0), (3, (2, 3, 4, 5), 1, 100.0)],
)
def test_softmax_matches_torch(seed, shape, dim, scale, dtype) -> None:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype) * scale
    torch.testing.assert_close(reference.softmax(x, dim=dim), torch.softmax(x, dim=dim), **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_matches_torch_on_huge_scores_and_minus_infinity(dtype) -> None:
    x = torch.tensor([[1e4, 0.0, -1e4], [3.0, -math.inf, 1.0], [-1e30, -1e30, -1e30]], dtype=dtype)
    torch.testing.assert_close(reference.softmax(x), torch.softmax(x, dim=-1), **TOLERANCES[dtype])


def test_softmax_of_an_all_minus_infinity_row_is_nan_like_torch() -> None:
    x = torch.full((2, 3), -math.inf)
    assert reference.softmax(x).isnan().all()
    assert torch.softmax(x, dim=-1).isnan().all()


# Attention


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed, batch, t_q, t_k, d_k, d_v", SHAPES)
def test_unmasked_attention_matches_torch(seed, batch, t_q, t_k, d_k, d_v, dtype) -> None:
    q, k, v = qkv(seed, batch, t_q, t_k, d_k, d_v, dtype)
    out, weights = reference.attention(q, k, v)  # (..., T_q, d_v), (..., T_q, T_k)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOLERANCES[dtype])
    expected_weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1)
    torch.testing.assert_close(weights, expected_weights, **TOLERANCES[dtype])
    out_02, weights_02 = reference.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out_02, out, atol=0.0, rtol=0.0)
    torch.testing.assert_close(weights_02, weights, atol=0.0, rtol=0.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed, batch, t_q, t_k, d_k, d_v", SHAPES)
def test_masked_attention_matches_torch_attn_mask(seed, batch, t_q, t_k, d_k, d_v, dtype) -> None:
    q, k, v = qkv(seed, batch, t_q, t_k, d_k, d_v, dtype)
    mask = random_mask(seed, (*batch, t_q, t_k))  # (..., T_q, T_k)
    out, weights = reference.attention(q, k, v, mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, **TOLERANCES[dtype])
    assert torch.equal(weights == 0, ~mask), "weights vanish exactly where the mask forbids"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed, lengths, t, heads", [(0, [5, 3, 1], 5, 2), (1, [7, 4], 7, 3)])
def test_broadcast_padding_mask_matches_torch(seed, lengths, t, heads, dtype) -> None:
    q, k, v = qkv(seed, (len(lengths), heads), t, t, 6, 4, dtype)  # (B, H, T, d)
    pad = reference.padding_mask(torch.tensor(lengths), t)  # (B, T)
    mask = pad[:, None, None, :]  # (B, 1, 1, T): broadcast over heads and queries
    out, _ = reference.attention(q, k, v, mask=mask)  # (B, H, T, d_v)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, **TOLERANCES[dtype])
    causal_out, _ = reference.attention(q, k, v, mask=mask, is_causal=True)  # (B, H, T, d_v)
    combined = mask & torch.tril(torch.ones(t, t, dtype=torch.bool))  # (B, 1, T, T)
    causal_expected = F.scaled_dot_product_attention(q, k, v, attn_mask=combined)
    torch.testing.assert_close(causal_out, causal_expected, **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "seed, batch, t, d_k, d_v", [(0, (), 1, 4, 4), (1, (2,), 6, 5, 3), (2, (2, 3), 9, 8, 8)]
)
def test_square_causal_attention_matches_torch_is_causal(seed, batch, t, d_k, d_v, dtype) -> None:
    q, k, v = qkv(seed, batch, t, t, d_k, d_v, dtype)
    out, _ = reference.attention(q, k, v, is_causal=True)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected, **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed, batch, t_q, t_k, d_k, d_v", [s for s in SHAPES if s[2] <= s[3]])
def test_causal_attention_is_bottom_right_like_an_explicit_mask(
    seed, batch, t_q, t_k, d_k, d_v, dtype
) -> None:
    q, k, v = qkv(seed, batch, t_q, t_k, d_k, d_v, dtype)
    out, _ = reference.attention(q, k, v, is_causal=True)
    explicit = F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right_mask(t_q, t_k))
    torch.testing.assert_close(out, explicit, **TOLERANCES[dtype])
    lower_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(t_q, t_k))
    torch.testing.assert_close(out, lower_right, **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed, t_q, t_k", [(0, 1, 4), (1, 3, 7), (2, 5, 6)])
def test_torch_is_causal_with_fewer_queries_is_top_left_and_differs(seed, t_q, t_k, dtype) -> None:
    q, k, v = qkv(seed, (2,), t_q, t_k, 8, 8, dtype)
    ours, _ = reference.attention(q, k, v, is_causal=True)
    torchs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    top_left = F.scaled_dot_product_attention(q, k, v, attn_mask=top_left_mask(t_q, t_k))
    torch.testing.assert_close(torchs, top_left, **TOLERANCES[dtype])
    assert (ours - torchs).abs().amax() > 1e-2, "bottom-right and top-left alignment must differ"
    # the two alignments differ in every row: query i sees t_k - t_q more keys with ours
    assert (ours - torchs).abs().amax(dim=-1).gt(0).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed, batch, t_q, t_k, d_k, d_v", [s for s in SHAPES if s[2] <= s[3]])
def test_is_causal_combines_with_mask_by_logical_and(seed, batch, t_q, t_k, d_k, d_v, dtype) -> None:
    q, k, v = qkv(seed, batch, t_q, t_k, d_k, d_v, dtype)
    mask = random_mask(seed, (*batch, t_q, t_k))  # every row keeps its last key...
    mask[..., 0] = True  # ...and its first, which the causal mask always allows
    out, weights = reference.attention(q, k, v, mask=mask, is_causal=True)
    combined = mask & bottom_right_mask(t_q, t_k)  # (..., T_q, T_k)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=combined)
    torch.testing.assert_close(out, expected, **TOLERANCES[dtype])
    assert torch.equal(weights == 0, ~combined)


@pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 5),
    reason="scaled_dot_product_attention returns zeros for fully masked rows since torch 2.5",
)
def test_fully_masked_row_gives_zeros_and_sdpas_gradients() -> None:
    """A query that may attend nothing: output and weights 0, as torch's SDPA (2.5 on), not NaN."""
    q, k, v = qkv(0, (2,), 3, 4, 5, 5, torch.float64)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False  # query 1 may attend nothing
    out, weights = reference.attention(q, k, v, mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(expected[:, 1], torch.zeros_like(expected[:, 1]))
    assert torch.equal(out[:, 1], torch.zeros_like(out[:, 1])) and torch.equal(
        weights[:, 1], torch.zeros(2, 4)
    )
    torch.testing.assert_close(out, expected, **TOLERANCES[torch.float64])


@pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 5),
    reason="scaled_dot_product_attention returns zeros for fully masked rows since torch 2.5",
)
@pytest.mark.parametrize("masked_by", ["is_causal", "mask"])
def test_rows_without_keys_match_sdpa_in_output_and_gradients(masked_by) -> None:
    """Causal with T_q = 7 > T_k = 3 (queries 0-3 before the first key), or a mask: SDPA's 0 and gradients."""
    q, k, v = qkv(7, (2, 2), 7, 3, 8, 6, torch.float64)
    grad_out = torch.randn(2, 2, 7, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    mask = bottom_right_mask(7, 3)  # (7, 3): rows 0 to 3 all False
    kwargs = {"is_causal": True} if masked_by == "is_causal" else {"mask": mask}
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out, _ = reference.attention(*leaves, **kwargs)
    grads = torch.autograd.grad(out, leaves, grad_out)
    sdpa_leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    expected = F.scaled_dot_product_attention(*sdpa_leaves, attn_mask=mask)
    expected_grads = torch.autograd.grad(expected, sdpa_leaves, grad_out)
    torch.testing.assert_close(out, expected, **TOLERANCES[torch.float64])
    by_hand = reference.attention_backward(q, k, v, grad_out, is_causal=True)
    for got in (grads, by_hand):
        for actual, wanted in zip(got, expected_grads, strict=True):
            assert actual.isfinite().all()
            torch.testing.assert_close(actual, wanted, **TOLERANCES[torch.float64])
        assert torch.equal(got[0][..., :4, :], torch.zeros(2, 2, 4, 8, dtype=torch.float64))
