"""Multi-head latent attention: the plain path against DeepSeek-V2's equations, the absorbed path against
the plain one token by token, and what each design caches per token."""

from __future__ import annotations

import math

import pytest
import torch

from attn_course.demos.memory import LargestTensor
from attn_course.gqa import PUBLISHED, kv_bytes_per_token
from attn_course.latent import (
    DEEPSEEK_V2,
    LatentAttention,
    LatentCache,
    absorbed_latent_attention,
    equivalent_gqa_groups,
    latent_attention,
    latent_bytes_per_token,
    latent_elements_per_token,
    measured_cache_bytes,
    per_head_keys_values,
)
from attn_course.rope import apply_rope, rope_frequencies


def seeded_layer(d_model=24, n_heads=3, d_head=8, d_latent=6, d_rope=4, base=50.0) -> LatentAttention:
    torch.manual_seed(0)
    attn = LatentAttention(d_model, n_heads, d_head, d_latent, d_rope, base=base).double()
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0.0, 1.5 / math.sqrt(p.shape[-1]))
    return attn


def rotate(vec: torch.Tensor, position: int, base: float) -> torch.Tensor:
    """RoPE of one vector (d,) at one position, pair by pair, as RoFormer writes the rotation matrix R_m."""
    out = vec.clone()
    for i, theta in enumerate(rope_frequencies(vec.shape[0], base).tolist()):
        c, s = math.cos(position * theta), math.sin(position * theta)
        out[2 * i] = c * vec[2 * i] - s * vec[2 * i + 1]
        out[2 * i + 1] = s * vec[2 * i] + c * vec[2 * i + 1]
    return out


def paper_mla(attn: LatentAttention, h_in: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """DeepSeek-V2's equations (9)-(19), token by token and head by head (no query compression: q_t^C =
    W^Q h_t stands in for W^UQ c_t^Q)."""
    n, d, dr = attn.n_heads, attn.d_head, attn.d_rope
    W_DKV, W_UK, W_UV = attn.kv_down.weight, attn.k_up.weight, attn.v_up.weight
    W_Q, W_QR, W_KR, W_O = attn.q.weight, attn.q_rope.weight, attn.k_rope.weight, attn.out.weight
    T = h_in.shape[0]
    c = [W_DKV @ h_in[t] for t in range(T)]  # (9)
    k_C = [W_UK @ c[t] for t in range(T)]  # (10), all heads concatenated
    v_C = [W_UV @ c[t] for t in range(T)]  # (11)
    k_R = [rotate(W_KR @ h_in[t], t + offset, attn.base) for t in range(T)]  # (14)
    outputs = []
    for t in range(T):
        q_C = W_Q @ h_in[t]
        q_R = W_QR @ h_in[t]
        heads = []
        for i in range(n):
            q_ti = torch.cat(
                [q_C[i * d : (i + 1) * d], rotate(q_R[i * dr : (i + 1) * dr], t + offset, attn.base)]
            )
            scores = torch.stack(
                [
                    q_ti @ torch.cat([k_C[j][i * d : (i + 1) * d], k_R[j]]) / math.sqrt(d + dr)
                    for j in range(t + 1)
                ]
            )
            weights = torch.softmax(scores, dim=0)  # (18): causal, j <= t
            heads.append(sum(weights[j] * v_C[j][i * d : (i + 1) * d] for j in range(t + 1)))
        outputs.append(W_O @ torch.cat(heads))  # (19)
    return torch.stack(outputs)  # (T, d_model)


@pytest.mark.parametrize("offset", [0, 7])
def test_plain_path_is_the_papers_equations(offset):
    attn = seeded_layer()
    x = torch.randn(2, 6, 24, dtype=torch.float64)
    positions = torch.arange(offset, offset + 6)
    got = latent_attention(attn, x, positions if offset else None)
    for b in range(2):
        torch.testing.assert_close(got[b], paper_mla(attn, x[b], offset), atol=1e-10, rtol=1e-8)


def test_absorbed_path_equals_the_plain_path_token_by_token():
    attn = seeded_layer()
    x = torch.randn(2, 10, 24, dtype=torch.float64)
    full = latent_attention(attn, x)
    cache, start = LatentCache(), 0
    for t_new in (4, 1, 3, 1, 1):
        got = absorbed_latent_attention(attn, x[:, start : start + t_new], cache, layer=0)
        torch.testing.assert_close(got, full[:, start : start + t_new], atol=1e-10, rtol=1e-8)
        start += t_new
    assert cache.latents[0].shape == (2, 10, 6) and cache.rope_keys[0].shape == (2, 10, 4)


def test_absorbed_path_makes_no_per_head_key_of_the_cache():
    attn = seeded_layer(d_model=32, n_heads=4, d_head=32, d_latent=8, d_rope=4)
    cache = LatentCache()
    absorbed_latent_attention(attn, torch.randn(1, 63, 32, dtype=torch.float64), cache, 0)
    largest = LargestTensor()
    with largest, torch.no_grad():
        absorbed_latent_attention(attn, torch.randn(1, 1, 32, dtype=torch.float64), cache, 0)
    assert largest.numel < 1 * 4 * 64 * 32 // 4, largest.shape  # per-head keys would be (1, 4, 64, 32)


def test_sdpa_agrees_with_the_plain_path():
    """The scores of MLA are a plain dot product of [q^C; q^R] with [k^C; k^R]: SDPA on the concatenations."""
    attn = seeded_layer()
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    keys, values = per_head_keys_values(attn, x)
    q = attn.q(x).view(2, 7, 3, 8).transpose(1, 2)
    q_rope = apply_rope(attn.q_rope(x).view(2, 7, 3, 4).transpose(1, 2), None, attn.base)
    out = torch.nn.functional.scaled_dot_product_attention(
        torch.cat([q, q_rope], dim=-1), keys, values, is_causal=True
    )  # scale 1/sqrt(d_head + d_rope): the width of the concatenation
    torch.testing.assert_close(attn.out(out.transpose(1, 2).reshape(2, 7, 24)), latent_attention(attn, x))


def test_deepseek_v2_cache_per_token():
    assert latent_elements_per_token(DEEPSEEK_V2) == 576
    mha_elements = 2 * 128 * 128  # k and v of 128 heads of 128, per layer
    assert mha_elements / latent_elements_per_token(DEEPSEEK_V2) == pytest.approx(56.888, abs=1e-3)
    assert equivalent_gqa_groups(DEEPSEEK_V2) == 2.25  # the paper's "GQA with only 2.25 groups"
    assert latent_bytes_per_token(DEEPSEEK_V2) == 60 * 576 * 2
    assert latent_bytes_per_token(DEEPSEEK_V2, torch.float32) == 60 * 576 * 4
    llama2 = PUBLISHED[0]
    assert kv_bytes_per_token(llama2, torch.bfloat16) / latent_bytes_per_token(DEEPSEEK_V2) == pytest.approx(
        7.585, 1e-3
    )


def test_measured_cache_bytes_match_the_formulas():
    attn = LatentAttention(32, 4, 8, 12, 4)
    latent, per_head = measured_cache_bytes(attn, torch.ones(2, 10, 32, dtype=torch.bfloat16))
    assert latent == 2 * 10 * (12 + 4) * 2
    assert per_head == 2 * 10 * 4 * (8 + 4 + 8) * 2
