"""The checks' simulators of learner mistakes, with their default knobs, are the reference.

A named mistake is a simulator with one knob turned; if a simulator drifted from the reference with
its defaults, every mistake made from it would be simulated wrongly, and a check would name the
wrong mistake or none. The simulators of notebooks 03-07 and 06's tiling are tested in their own
modules (test_checks_masking, _heads, _rope, _kv_cache, _flash); these are the others.
"""

from __future__ import annotations

import pytest
import torch

from attn_course import reference
from attn_course.checks.backward import _tiled_backward
from attn_course.checks.modern import _gqa_forward, _window


@pytest.mark.parametrize(
    ("t_q", "t_k", "causal", "block"), [(7, 7, False, 3), (5, 9, True, 2), (9, 9, True, 4)]
)
def test_the_tiled_backward_with_its_default_knobs_is_autograd(t_q, t_k, causal, block):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, t, 8, dtype=torch.float64, requires_grad=True) for t in (t_q, t_k, t_k))
    grad_out = torch.randn(2, t_q, 8, dtype=torch.float64)
    out, _ = reference.attention(q, k, v, is_causal=causal)
    expected = torch.autograd.grad(out, (q, k, v), grad_out)
    got = _tiled_backward(q, k, v, grad_out, causal, block, block)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)


def test_the_grouped_query_layer_with_its_default_knobs_is_the_reference():
    torch.manual_seed(0)
    layer = reference.GroupedQueryAttention(16, 4, 2).double()
    params = dict(layer.named_parameters())
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    mask = torch.rand(2, 6, 6) > 0.3
    mask[..., 0] = True
    for m, causal in [(None, False), (mask, False), (None, True), (mask, True)]:
        torch.testing.assert_close(
            _gqa_forward(params, 4, 2, x, m, causal), layer(x, mask=m, is_causal=causal)
        )


@pytest.mark.parametrize(("t_q", "t_k", "window"), [(6, 6, 3), (3, 8, 2), (5, 5, 1), (4, 4, 9)])
def test_the_window_with_its_default_knobs_is_the_reference(t_q, t_k, window):
    assert torch.equal(_window(t_q, t_k, window), reference.sliding_window_mask(t_q, t_k, window))


# notebook 10's last two exercises: the rotary window layer and its rolling buffer


@pytest.mark.parametrize(("n_heads", "n_kv_heads", "t", "window"), [(4, 2, 7, 3), (6, 3, 5, 9), (2, 1, 6, 1)])
def test_the_rotary_window_layer_and_its_rolling_buffer_with_their_default_variants_are_the_reference(
    n_heads, n_kv_heads, t, window
):
    from attn_course.checks.rolling_window import _decode
    from attn_course.checks.rotary_window import _dense, _layer

    layer = _layer(8 * n_heads, n_heads, n_kv_heads)
    x = torch.randn(2, t, 8 * n_heads, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(t) * 2 + 5
    with torch.no_grad():
        whole = reference.rotary_window_attention(layer, x, window, positions)
        torch.testing.assert_close(_dense(layer, x, window, positions), whole)
        torch.testing.assert_close(
            _decode(layer, x, window), reference.rotary_window_attention(layer, x, window)
        )
