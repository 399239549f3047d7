"""The checks' simulators of learner mistakes, with their default knobs, are the reference.

A named mistake is a simulator with one knob turned; if a simulator drifted from the reference with
its defaults, every mistake made from it would be simulated wrongly, and a check would name the
wrong mistake or none. The simulators of notebooks 03-07 and 06's tiling are tested in their own
modules (test_checks_masking, _heads, _rope, _kv_cache, _flash); these are the others.
"""

from __future__ import annotations

import pytest
import torch

from attn_course import flex, reference
from attn_course.checks.backward import _tiled_backward
from attn_course.checks.decoder import (
    _ABLATE_MISTAKES,
    _BLOCK_MISTAKES,
    _CONFIG,
    _ablated,
    _block,
    _random_block,
    _random_model,
)
from attn_course.checks.generation import _PROBS_MISTAKES, ProbsVariant, _probs
from attn_course.checks.modern import WindowVariant, _alibi, _document, _gqa_forward, _masked, _window


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


def test_the_block_with_its_default_variant_is_the_reference():
    torch.manual_seed(0)
    block = _random_block()
    x = torch.randn(2, 5, _CONFIG.d_model, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(_block(block, x), reference.block_forward(block, x))
        for message, variant in _BLOCK_MISTAKES:  # each named mistake changes the result
            assert not torch.allclose(_block(block, x, variant), reference.block_forward(block, x)), message


def test_the_ablation_with_its_default_variant_is_the_reference():
    torch.manual_seed(0)
    model = _random_model()
    heads = [(1, 2), (0, 0)]
    tokens = torch.randint(0, _CONFIG.vocab_size, (2, 6))
    with torch.no_grad():
        expected = reference.ablate_heads(model, heads)(tokens)
        torch.testing.assert_close(_ablated(model, heads)(tokens), expected)
        for message, variant in _ABLATE_MISTAKES:  # each named mistake changes the result
            assert not torch.allclose(_ablated(model, heads, variant)(tokens), expected), message


@pytest.mark.parametrize(("t_q", "t_k", "window", "block"), [(9, 9, 3, 4), (5, 11, 4, 3), (8, 8, 20, 8)])
def test_the_tiled_window_with_its_default_variant_is_masked_attention(t_q, t_k, window, block):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, t_q, 4), torch.randn(2, t_k, 4), torch.randn(2, t_k, 3)
    expected = reference.sliding_window_flash_attention(q, k, v, window, block_size=block)
    for variant in (WindowVariant(), WindowVariant(blocks="window")):  # the window's blocks hold all it needs
        torch.testing.assert_close(_masked(variant)(q, k, v, window, block), expected)


@pytest.mark.parametrize("n_heads", [1, 3, 4, 6])
def test_the_alibi_scores_with_their_default_variant_are_the_reference(n_heads):
    scores = torch.randn(1, n_heads, 5, 5)
    expected = flex.evaluate_score_mod(reference.alibi_score_mod(n_heads), scores)[0]
    torch.testing.assert_close(_alibi(scores[0], n_heads), expected)


@pytest.mark.parametrize("lengths", [[3, 2, 4], [1], [2, 1, 1]])
def test_the_document_mask_with_its_default_variant_is_the_reference(lengths):
    ids = flex.document_ids_from_lengths(lengths)
    t = len(ids)
    assert torch.equal(_document(ids), flex.evaluate_mask_mod(reference.document_mask_mod(ids), 1, t, t)[0])


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, None), (0.5, 3), (1.7, 1), (0.8, 10)])
def test_next_token_probs_with_its_default_variant_is_the_reference(temperature, top_k):
    torch.manual_seed(0)
    logits = 2 * torch.randn(4, 10, dtype=torch.float64)
    expected = reference.next_token_probs(logits, temperature, top_k)
    torch.testing.assert_close(_probs(logits, temperature, top_k), expected)
    torch.testing.assert_close(_probs(logits, temperature, top_k, ProbsVariant()), expected)


@pytest.mark.parametrize(("message", "variant"), _PROBS_MISTAKES, ids=[m[:40] for m, _ in _PROBS_MISTAKES])
def test_each_named_next_token_probs_mistake_is_one_variant_that_differs(message, variant):
    torch.manual_seed(0)
    logits = 2 * torch.randn(4, 10, dtype=torch.float64)
    assert variant != ProbsVariant()
    right = ProbsVariant()
    assert sum(getattr(variant, f) != getattr(right, f) for f in ProbsVariant.__dataclass_fields__) == 1
    assert not torch.allclose(_probs(logits, 0.5, 3, variant), reference.next_token_probs(logits, 0.5, 3))


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
