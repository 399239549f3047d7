"""The reference multi-head attention against torch.nn.MultiheadAttention, and its cost formulas."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attn_course.attention import attention
from attn_course.heads import MultiHeadAttention, merge_heads, mha_flops, mha_parameter_count, split_heads
from attn_course.masking import causal_mask, padding_mask
from attn_course.plots.heads import head_heatmaps

matplotlib.use("Agg")

TOLERANCE = {torch.float32: {"atol": 1e-5, "rtol": 1e-4}, torch.float64: {"atol": 1e-10, "rtol": 1e-8}}
LAYERS = [  # (d_model, n_heads, bias)
    (12, 3, True),
    (16, 4, False),
    (8, 1, True),
    (32, 8, True),
]


def twin_layers(d_model: int, n_heads: int, bias: bool, dtype: torch.dtype, seed: int):
    """Our layer and torch's, with the same seeded weights, in eval mode."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d_model, n_heads, bias=bias).to(dtype).eval()
    theirs = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True).to(dtype).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.qkv.weight)
        theirs.out_proj.weight.copy_(ours.out.weight)
        if bias:
            theirs.in_proj_bias.copy_(ours.qkv.bias)
            theirs.out_proj.bias.copy_(ours.out.bias)
    return ours, theirs


@pytest.mark.parametrize(("d_model", "n_heads", "bias"), LAYERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("is_causal", [False, True])
def test_reference_matches_torch_multihead_attention(d_model, n_heads, bias, dtype, is_causal) -> None:
    ours, theirs = twin_layers(d_model, n_heads, bias, dtype, seed=d_model)
    x = torch.randn(3, 7, d_model, dtype=dtype)  # (b, t, d_model)
    # torch's boolean attn_mask marks what may NOT be attended: the opposite of ours
    forbidden = ~causal_mask(7) if is_causal else None  # (t, t)
    expected, _ = theirs(x, x, x, attn_mask=forbidden, need_weights=False)  # (b, t, d_model)
    torch.testing.assert_close(ours(x, is_causal=is_causal), expected, **TOLERANCE[dtype])


@pytest.mark.parametrize(("d_model", "n_heads", "bias"), LAYERS)
@pytest.mark.parametrize("is_causal", [False, True])
def test_padding_mask_matches_torch_key_padding_mask(d_model, n_heads, bias, is_causal) -> None:
    dtype = torch.float64
    ours, theirs = twin_layers(d_model, n_heads, bias, dtype, seed=1)
    lengths = torch.tensor([6, 2, 4])
    x = torch.randn(3, 6, d_model, dtype=dtype)  # (b, t, d_model)
    real = padding_mask(lengths, 6)  # (b, t)
    forbidden = ~causal_mask(6) if is_causal else None  # (t, t)
    expected, _ = theirs(x, x, x, key_padding_mask=~real, attn_mask=forbidden, need_weights=False)
    got = ours(x, mask=real[:, None, :], is_causal=is_causal)  # (b, t, d_model)
    torch.testing.assert_close(got[real], expected[real], **TOLERANCE[dtype])


@pytest.mark.parametrize(("d_model", "n_heads", "bias"), LAYERS)
@pytest.mark.parametrize(("t_q", "t_k"), [(4, 9), (9, 4)])
def test_cross_attention_matches_torch_with_other_keys_and_values(d_model, n_heads, bias, t_q, t_k) -> None:
    ours, theirs = twin_layers(d_model, n_heads, bias, torch.float64, seed=2)
    x = torch.randn(3, t_q, d_model, dtype=torch.float64)  # (b, t_q, d_model): the queries' sequence
    context = torch.randn(3, t_k, d_model, dtype=torch.float64)  # (b, t_k, d_model): keys and values
    real = padding_mask(torch.tensor([t_k, t_k - 1, 2]), t_k)  # (b, t_k): the context's padding
    expected, _ = theirs(x, context, context, key_padding_mask=~real, need_weights=False)  # (b, t_q, d_model)
    got = ours(x, mask=real[:, None, :], context=context)  # (b, t_q, d_model)
    torch.testing.assert_close(got, expected, **TOLERANCE[torch.float64])
    assert ours.head_weights(x, context=context).shape == (3, n_heads, t_q, t_k)


def test_without_context_keys_and_values_come_from_x() -> None:
    torch.manual_seed(4)
    layer = MultiHeadAttention(12, 3).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)  # (b, t, d_model)
    torch.testing.assert_close(layer(x, is_causal=True), layer(x, is_causal=True, context=x))


@pytest.mark.parametrize("mask_shape", [(2, 5, 5), (5, 5), (2, 1, 5)])
def test_mask_of_each_broadcast_shape_applies_to_every_head(mask_shape) -> None:
    torch.manual_seed(3)
    layer = MultiHeadAttention(12, 3).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)  # (b, t, d_model)
    mask = (torch.rand(mask_shape) < 0.5) | torch.eye(5, dtype=torch.bool)[-mask_shape[-2] :]
    weights = layer.head_weights(x, mask=mask)  # (b, h, t, t)
    assert weights.shape == (2, 3, 5, 5)
    allowed = mask.unsqueeze(-3).expand_as(weights)  # (b, h, t, t)
    assert torch.equal(weights != 0, allowed)


def test_head_weights_match_torch_per_head_weights() -> None:
    ours, theirs = twin_layers(12, 3, True, torch.float64, seed=4)
    x = torch.randn(2, 5, 12, dtype=torch.float64)  # (b, t, d_model)
    _, expected = theirs(x, x, x, attn_mask=~causal_mask(5), average_attn_weights=False)  # (b, h, t, t)
    torch.testing.assert_close(ours.head_weights(x, is_causal=True), expected, **TOLERANCE[torch.float64])


@pytest.mark.parametrize(("d_model", "n_heads", "bias"), LAYERS)
def test_parameter_count_formula_matches_both_layers(d_model, n_heads, bias) -> None:
    ours, theirs = twin_layers(d_model, n_heads, bias, torch.float32, seed=0)
    assert sum(p.numel() for p in ours.parameters()) == mha_parameter_count(d_model, bias)
    assert sum(p.numel() for p in theirs.parameters()) == mha_parameter_count(d_model, bias)


@pytest.mark.parametrize(("b", "t", "d_model", "n_heads"), [(2, 16, 64, 4), (1, 33, 48, 6), (3, 8, 8, 1)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_flop_formula_matches_the_flop_counter(b, t, d_model, n_heads, is_causal) -> None:
    layer = MultiHeadAttention(d_model, n_heads)
    with FlopCounterMode(display=False) as counter:
        layer(torch.randn(b, t, d_model), is_causal=is_causal)  # (b, t, d_model)
    assert counter.get_total_flops() == mha_flops(b, t, d_model, n_heads)


def test_flops_do_not_depend_on_the_number_of_heads() -> None:
    assert len({mha_flops(2, 128, 64, h) for h in (1, 2, 4, 8, 16, 64)}) == 1
    with pytest.raises(ValueError, match="not divisible"):
        mha_flops(1, 4, 10, 3)


@pytest.mark.parametrize(("b", "t", "h", "d"), [(2, 5, 3, 4), (1, 1, 1, 1), (3, 4, 8, 2)])
def test_split_takes_contiguous_feature_blocks_and_merge_inverts_it(b, t, h, d) -> None:
    x = torch.randn(b, t, h * d)  # (b, t, h·d)
    heads = split_heads(x, h)  # (b, h, t, d)
    for i in range(h):
        assert torch.equal(heads[:, i], x[..., i * d : (i + 1) * d])
    assert torch.equal(merge_heads(heads), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_loop_over_heads_equals_batched_heads(dtype) -> None:
    torch.manual_seed(5)
    q, k, v = torch.randn(3, 2, 7, 12, dtype=dtype).unbind(0)  # each (b, t, d_model)
    h, d = 3, 4
    batched, _ = attention(split_heads(q, h), split_heads(k, h), split_heads(v, h), is_causal=True)
    looped = [
        attention(
            q[..., i * d : (i + 1) * d],
            k[..., i * d : (i + 1) * d],
            v[..., i * d : (i + 1) * d],
            is_causal=True,
        )[0]
        for i in range(h)
    ]
    # bit for bit on the machines we tried; other kernels may sum in another order
    torch.testing.assert_close(merge_heads(batched), torch.cat(looped, dim=-1), **TOLERANCE[dtype])


def test_head_heatmaps_draw_one_titled_map_per_head() -> None:
    weights = torch.softmax(torch.randn(3, 4, 5), dim=-1)  # (h, T_q, T_k)
    axes = head_heatmaps(weights, list("abcd"), list("vwxyz"), titles=["x", "y", "z"])
    assert [ax.get_title() for ax in axes] == ["x", "y", "z"]
    assert [label.get_text() for label in axes[0].get_xticklabels()] == list("vwxyz")
    assert axes[0].get_ylabel() and not axes[1].get_ylabel()
    plt.close("all")
    with pytest.raises(ValueError, match=r"\(h, T_q, T_k\)"):
        head_heatmaps(weights[0])
    with pytest.raises(ValueError, match="one title per head"):
        head_heatmaps(weights, titles=["only one"])
