"""Tests of attn_course/rope.py against rotary-embedding-torch, and the properties RoPE must have.

rotary-embedding-torch (lucidrains) is an independently published RoPE with the interleaved
convention: its `rotate_half` maps each pair (x[2i], x[2i+1]) to (-x[2i+1], x[2i]), and its
frequencies are 1 / theta^(arange(0, dim, 2) / dim), computed in float32.
"""

from __future__ import annotations

import math

import pytest
import torch
from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb

from attn_course import reference
from attn_course.heads import MultiHeadAttention, merge_heads
from attn_course.rope import (
    RotaryMultiHeadAttention,
    apply_rope,
    apply_rope_rotate_half,
    half_split_permutation,
    rope_angles,
    rope_decay_bound,
    rope_frequencies,
)

THEIRS = {"atol": 2e-5, "rtol": 1e-5}
"""Agreement with rotary-embedding-torch, which computes its angles in float32 (positions < 200)."""
EXACT = {"atol": 1e-12, "rtol": 1e-10}
"""Agreement of two float64 computations of the same thing."""


def seeded(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ---------------------------------------------------------------------------------------------
# against rotary-embedding-torch


@pytest.mark.parametrize("d", [4, 8, 64, 128])  # the library divides by dim - 2
@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_frequencies_match_rotary_embedding_torch(d: int, base: float) -> None:
    theirs = RotaryEmbedding(dim=d, theta=base).freqs.detach()  # (d/2,), float32
    ours = rope_frequencies(d, base)  # (d/2,), float64
    assert ours.shape == (d // 2,) and ours.dtype == torch.float64
    torch.testing.assert_close(ours.float(), theirs, atol=0, rtol=2e-7)


@pytest.mark.parametrize(
    ("seed", "shape", "dtype"),
    [
        (0, (1, 4), torch.float32),
        (1, (5, 8), torch.float32),
        (2, (2, 3, 7, 16), torch.float32),
        (3, (2, 4, 33, 64), torch.float64),
        (4, (1, 1, 150, 128), torch.float32),
    ],
)
def test_apply_rope_matches_rotary_embedding_torch(seed: int, shape: tuple[int, ...], dtype) -> None:
    x = seeded(seed, *shape, dtype=dtype)  # (..., T, d)
    theirs = RotaryEmbedding(dim=shape[-1]).rotate_queries_or_keys(x)  # (..., T, d)
    ours = apply_rope(x)  # (..., T, d)
    assert ours.dtype == x.dtype
    torch.testing.assert_close(ours, theirs.to(dtype), **THEIRS)


@pytest.mark.parametrize("offset", [1, 17, 100])
def test_offset_positions_match_rotary_embedding_torch(offset: int) -> None:
    x = seeded(5, 2, 3, 9, 32, dtype=torch.float32)  # (b, h, T, d)
    theirs = RotaryEmbedding(dim=32).rotate_queries_or_keys(x, offset=offset)  # (b, h, T, d)
    ours = apply_rope(x, torch.arange(9) + offset)  # (b, h, T, d)
    torch.testing.assert_close(ours, theirs, **THEIRS)


@pytest.mark.parametrize("base", [10000.0, 50.0])
def test_scattered_positions_and_base_match_rotary_embedding_torch(base: float) -> None:
    x = seeded(6, 4, 6, 16, dtype=torch.float32)  # (b, T, d)
    positions = torch.tensor([3, 0, 9, 4, 4, 120])  # (T,): any order, repeats, gaps
    rotary = RotaryEmbedding(dim=16, theta=base)
    theirs = apply_rotary_emb(rotary(positions.float()), x)  # (b, T, d)
    torch.testing.assert_close(apply_rope(x, positions, base), theirs, **THEIRS)


def test_rotate_half_pairing_disagrees_with_rotary_embedding_torch() -> None:
    x = seeded(7, 2, 5, 8, dtype=torch.float32)  # (b, T, d)
    theirs = RotaryEmbedding(dim=8).rotate_queries_or_keys(x)  # (b, T, d)
    assert (apply_rope_rotate_half(x) - theirs).abs().max() > 0.1


# ---------------------------------------------------------------------------------------------
# the rotation itself


def test_one_pair_is_the_rotation_by_position_times_theta() -> None:
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]], dtype=torch.float64)  # (T=3, d=2), θ_0 = 1
    positions = torch.tensor([0.5, 2.0, 7.0], dtype=torch.float64)
    out = apply_rope(x, positions)  # (3, 2)
    a, b, c = (positions[i].item() for i in range(3))
    expected = torch.tensor(
        [
            [math.cos(a), math.sin(a)],  # e_0 turned anticlockwise by a
            [-math.sin(b), math.cos(b)],
            [3 * math.cos(c) - 4 * math.sin(c), 3 * math.sin(c) + 4 * math.cos(c)],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(out, expected, **EXACT)


def test_pairs_are_interleaved_and_turn_at_their_own_frequency() -> None:
    d, position = 8, 3
    freqs = rope_frequencies(d)  # (4,)
    for i in range(d // 2):
        x = torch.zeros(1, d, dtype=torch.float64)  # (T=1, d)
        x[0, 2 * i] = 1.0
        out = apply_rope(x, torch.tensor([position]))  # (1, d)
        expected = torch.zeros(1, d, dtype=torch.float64)
        expected[0, 2 * i] = math.cos(position * freqs[i].item())
        expected[0, 2 * i + 1] = math.sin(position * freqs[i].item())
        torch.testing.assert_close(out, expected, **EXACT)


def test_complex_form_is_the_same_rotation() -> None:
    x = seeded(8, 2, 3, 11, 16)  # (b, h, T, d)
    positions = torch.arange(11) * 7 + 3  # (T,)
    angles = positions.double()[:, None] * rope_frequencies(16)  # (T, d/2)
    x_complex = torch.view_as_complex(x.reshape(2, 3, 11, 8, 2))  # (b, h, T, d/2)
    rotated = torch.view_as_real(
        x_complex * torch.polar(torch.ones_like(angles), angles)
    )  # (b, h, T, d/2, 2)
    torch.testing.assert_close(apply_rope(x, positions), rotated.flatten(-2), **EXACT)


@pytest.mark.parametrize("d", [2, 6, 64])
def test_rotate_half_is_the_same_rotation_on_permuted_channels(d: int) -> None:
    x = seeded(9, 3, 10, d)  # (b, T, d)
    p = half_split_permutation(d)  # (d,)
    assert sorted(p.tolist()) == list(range(d))
    torch.testing.assert_close(apply_rope_rotate_half(x[..., p]), apply_rope(x)[..., p], **EXACT)
    if d > 2:  # with one pair the two conventions coincide
        assert (apply_rope_rotate_half(x) - apply_rope(x)).abs().max() > 0.1


def test_norm_of_every_token_is_preserved() -> None:
    x = seeded(10, 4, 50, 64)  # (b, T, d)
    out = apply_rope(x, torch.arange(50) * 1000)  # (b, T, d)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), **EXACT)


def test_default_positions_are_arange() -> None:
    x = seeded(11, 2, 7, 12)
    torch.testing.assert_close(apply_rope(x), apply_rope(x, torch.arange(7)), atol=0, rtol=0)


@pytest.mark.parametrize("shift", [1, 37, 10_000, 1_000_000])
def test_score_depends_only_on_the_difference_of_positions(shift: int) -> None:
    q, k = seeded(12, 6, 32), seeded(13, 6, 32)  # (T, d) each
    positions_q, positions_k = torch.tensor([0, 5, 9, 2, 40, 3]), torch.tensor([1, 1, 30, 8, 0, 3])
    before = (apply_rope(q, positions_q) * apply_rope(k, positions_k)).sum(-1)  # (T,)
    after = (apply_rope(q, positions_q + shift) * apply_rope(k, positions_k + shift)).sum(-1)  # (T,)
    torch.testing.assert_close(after, before, atol=1e-9, rtol=1e-9)


def test_score_matrix_of_one_query_and_one_key_is_toeplitz() -> None:
    q, k = seeded(14, 1, 16), seeded(15, 1, 16)  # one query and one key vector
    t = 12
    rotated_q = apply_rope(q.expand(t, 16))  # (T, d): the query at positions 0 … T-1
    rotated_k = apply_rope(k.expand(t, 16))  # (T, d)
    scores = rotated_q @ rotated_k.T  # (T, T)
    for offset in range(-t + 1, t):
        diagonal = torch.diagonal(scores, offset=offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), **EXACT)
    assert scores[0].std() > 0.1  # but not constant: it does depend on the distance


def test_offset_positions_continue_the_sequence() -> None:
    x = seeded(16, 2, 20, 16)  # (b, T, d): a whole sequence
    last = apply_rope(x[:, 15:], torch.arange(15, 20))  # (b, 5, d): decoding the last tokens alone
    torch.testing.assert_close(last, apply_rope(x)[:, 15:], **EXACT)


# ---------------------------------------------------------------------------------------------
# dtypes and precision


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.bfloat16, 2e-2), (torch.float16, 2e-3)])
def test_low_precision_output_keeps_dtype_and_is_close(dtype, tolerance: float) -> None:
    x = seeded(17, 3, 8, 32)  # (b, T, d) float64
    positions = torch.arange(8) + 5000
    out = apply_rope(x.to(dtype), positions)  # (b, T, d)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(
        out.double(), apply_rope(x.to(dtype).double(), positions), atol=tolerance, rtol=tolerance
    )


def test_large_positions_do_not_alias_in_bfloat16() -> None:
    x = torch.ones(4, 8, dtype=torch.bfloat16)  # (T, d): the same vector at 4 neighbouring positions
    out = apply_rope(x, torch.arange(4) + 3000)  # (T, d)
    assert len({tuple(row) for row in out.float().tolist()}) == 4
    aliased = rope_angles(torch.arange(4) + 3000, 8, dtype=torch.bfloat16)  # (T, d/2)
    assert len(set(aliased[:, 0].tolist())) < 4  # what computing the angles in bfloat16 would do


def test_rope_angles_in_float64_are_exact_and_in_bfloat16_are_not() -> None:
    positions = torch.arange(0, 4096)
    exact = rope_angles(positions, 64)  # (T, d/2), float64
    torch.testing.assert_close(exact, positions.double()[:, None] * rope_frequencies(64), atol=0, rtol=0)
    rough = rope_angles(positions, 64, dtype=torch.bfloat16).double()  # (T, d/2)
    assert (rough - exact).abs().max() > 1.0  # worse than a radian at the highest frequency


def test_gradients_flow_to_x_in_float32() -> None:
    x = seeded(18, 2, 5, 8, dtype=torch.float32).requires_grad_(True)
    apply_rope(x, torch.tensor([4, 1, 7, 2, 30])).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach(), atol=1e-5, rtol=1e-5)  # a rotation: |Rx|² = |x|²


# ---------------------------------------------------------------------------------------------
# the long-range decay bound


def test_decay_bound_at_zero_and_far_away() -> None:
    bound = rope_decay_bound(torch.tensor([0, 10, 100, 1000]), d=128)  # (4,)
    assert bound[0].item() == pytest.approx((64 + 1) / 2)
    assert bound[0] > bound[1] > bound[2] > bound[3]


def test_decay_bound_bounds_the_score() -> None:
    d = 32
    q, k = seeded(19, d), seeded(20, d)  # (d,) each
    h = torch.view_as_complex(q.reshape(-1, 2)) * torch.view_as_complex(k.reshape(-1, 2)).conj()  # (d/2,)
    steps = (torch.cat([h[1:], h.new_zeros(1)]) - h).abs().max()  # max_i |h_{i+1} - h_i|
    distances = torch.arange(0, 300)
    rotated_q = apply_rope(q.expand(300, d), distances)  # (n, d): query at position Δ
    rotated_k = apply_rope(k.expand(300, d), torch.zeros(300, dtype=torch.long))  # (n, d): key at 0
    scores = (rotated_q * rotated_k).sum(-1)  # (n,)
    assert torch.all(scores.abs() <= steps * (d // 2) * rope_decay_bound(distances, d) + 1e-9)


# ---------------------------------------------------------------------------------------------
# RotaryMultiHeadAttention


def test_rotary_layer_matches_one_built_on_rotary_embedding_torch() -> None:
    torch.manual_seed(0)
    layer = reference.RotaryMultiHeadAttention(d_model=32, n_heads=4).double()
    x = seeded(21, 2, 9, 32)  # (b, t, d_model)
    rotary = RotaryEmbedding(dim=8)
    q, k, v = layer.project(x)  # each (b, h, t, d_k)
    q, k = rotary.rotate_queries_or_keys(q), rotary.rotate_queries_or_keys(k)
    theirs = layer.attend(q, k, v, is_causal=True)[0]  # (b, t, d_model)
    torch.testing.assert_close(layer(x, is_causal=True), theirs, **THEIRS)


def test_rotary_layer_output_does_not_change_when_every_position_shifts() -> None:
    torch.manual_seed(0)
    layer = reference.RotaryMultiHeadAttention(d_model=16, n_heads=2).double()
    x = seeded(22, 2, 7, 16)  # (b, t, d_model)
    shifted = layer(x, is_causal=True, positions=torch.arange(7) + 123_456)  # (b, t, d_model)
    torch.testing.assert_close(shifted, layer(x, is_causal=True), atol=1e-9, rtol=1e-9)
    gapped = layer(x, is_causal=True, positions=torch.tensor([0, 1, 2, 10, 11, 12, 13]))
    assert (gapped - layer(x, is_causal=True)).abs().max() > 1e-3  # relative distances changed


def test_rotary_layer_without_rotation_is_the_plain_layer_at_position_zero() -> None:
    torch.manual_seed(0)
    layer = reference.RotaryMultiHeadAttention(d_model=12, n_heads=3).double()
    x = seeded(23, 1, 5, 12)  # (b, t, d_model)
    q, k, v = layer.project(x)  # each (b, h, t, d_k)
    out, _ = reference.attention(q, k, v)  # (b, h, t, d_k)
    plain = layer.out(merge_heads(out))  # (b, t, d_model)
    torch.testing.assert_close(layer(x, positions=torch.zeros(5, dtype=torch.long)), plain, **EXACT)


def test_rotary_layer_rejects_an_odd_head_size() -> None:
    with pytest.raises(ValueError, match="even head size"):
        reference.RotaryMultiHeadAttention(d_model=9, n_heads=3)


def test_rotary_head_weights_are_the_weights_its_forward_uses():
    torch.manual_seed(0)
    layer = RotaryMultiHeadAttention(d_model=12, n_heads=3).double()
    x = torch.randn(2, 6, 12, dtype=torch.float64)  # (b, t, d_model)
    positions = torch.arange(10, 16)  # (t,)
    weights = layer.head_weights(x, is_causal=True, positions=positions)  # (b, h, t, t)
    _, _, v = layer.project(x)  # (b, h, t, d_k)
    rebuilt = layer.out(merge_heads(weights @ v))  # (b, t, d_model)
    torch.testing.assert_close(rebuilt, layer(x, is_causal=True, positions=positions))
    unrotated = MultiHeadAttention.head_weights(layer, x, is_causal=True)  # (b, h, t, t), without RoPE
    assert not torch.allclose(weights, unrotated)
