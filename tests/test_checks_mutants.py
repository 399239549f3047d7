"""The mutation layer (attn_course/checks/_mutants.py): mistakes derived from the reference, one change each.

The learner code here is written as a learner would write it, not as the reference with a knob
turned: each mistake is one no table of known mistakes names, and the layer must name the change
that it amounts to. The layer runs only after a check has failed, so it can never refuse a right
answer; what it must not do is name a change the learner did not make.
"""

from __future__ import annotations

import contextvars
import math

import pytest
import torch
from check_assertions import assert_accepted, assert_rejected

from attn_course import reference
from attn_course.checks import (
    _mutants,
    _repairs,
    check_attention,
    check_dot_product_attention,
    check_merge_heads,
    check_sliding_window_flash_attention,
)
from attn_course.masking import causal_mask


@pytest.fixture(autouse=True)
def unhurried(monkeypatch):
    """A busy machine may need more than the layer's 10 s to reach a mutant: these tests wait for it."""
    monkeypatch.setattr(_mutants, "BUDGET", 100_000)


def merge_heads_reshaped(x):  # the heads' rows laid end to end, not side by side
    b, h, t, d = x.shape
    return x.reshape(b, h, t * d)


def merge_heads_transposed_first(x):  # right
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def sliding_window_unscaled(q, k, v, window, block_size=64):  # dense, and no 1/√d
    t_q, t_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-1, -2)
    back = torch.arange(t_q)[:, None] + (t_k - t_q) - torch.arange(t_k)[None, :]  # how far back each key is
    scores = scores.masked_fill((back < 0) | (back >= window), -math.inf)
    return scores.softmax(dim=-1) @ v


def test_a_wrong_shape_is_named_by_the_pattern_it_amounts_to(capsys):
    assert_rejected(
        check_merge_heads,
        merge_heads_reshaped,
        "the pattern `b h t d -> b h (t d)` where it should be",
        capsys,
    )


def test_a_missing_factor_is_named_with_its_step(capsys):
    assert_rejected(
        check_sliding_window_flash_attention,
        sliding_window_unscaled,
        "the factor `1.0 / math.sqrt(d)` left out",
        capsys,
    )


def test_a_right_answer_still_passes(capsys):
    assert_accepted(check_merge_heads, merge_heads_transposed_first, capsys)


def test_with_no_budget_the_layer_is_silent(monkeypatch, capsys):
    monkeypatch.setattr(_mutants, "BUDGET", 0)
    with pytest.raises(AssertionError) as failure:
        check_merge_heads(merge_heads_reshaped)
    assert "one change" not in str(failure.value) and "should have shape (2, 5, 12)" in str(failure.value)


def test_a_mutant_that_breaks_the_numbers_names_nothing():
    """Starting the running maximum at +inf gives NaN rows: matching them says nothing about an idea."""
    q, k, v = torch.randn(3, 2, 21, 8, dtype=torch.float64).unbind(0)
    args, kwargs = (q, k, v, 10), {"block_size": 8}
    function = reference.sliding_window_flash_attention
    broken = next(m for m in _mutants.mutants(function) if "the sign of `-math.inf` dropped" in m.message)
    with torch.no_grad():
        actual = broken.function(*args, **kwargs)
    assert torch.isnan(actual).any()
    _mutants.note_call("sliding_window_flash_attention", args, kwargs)
    expected = function(*args, **kwargs)
    found = _mutants.name_by_mutation(actual, expected, lambda a, b: torch.allclose(a, b, equal_nan=True))
    assert found is None or "-math.inf" not in found


def test_functions_that_launch_kernels_get_no_mutants():
    """A kernel launched with a changed grid or stride would write outside its tensors."""
    assert _mutants.mutants(reference.triton_scores) == []
    assert _mutants.mutants(reference.triton_flash_attention) == []
    assert len(_mutants.mutants(reference.softmax)) > 5


def test_pattern_changes_swap_axes_and_take_groups_apart():
    changes = list(_mutants._pattern_changes("b t (h d) -> b h t d"))
    assert "b t (h d) -> b t h d" in changes  # the transpose forgotten
    assert "b t (d h) -> b h t d" in changes  # the head and feature axes in the wrong order
    assert "...dq,...kd->...qk" in list(_mutants._pattern_changes("...qd,...kd->...qk"))


def attention_mask_swapped(q, k, v, mask=None, is_causal=False):  # causal_mask(T_k, T_q)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), -math.inf)
    if is_causal:
        scores = scores.masked_fill(~causal_mask(k.shape[-2], q.shape[-2]), -math.inf)
    weights = torch.nan_to_num(scores.softmax(dim=-1))
    return weights @ v, weights


def dot_product_attention_transposed(q, k, v):  # the weights transposed before they multiply v
    weights = (q @ k.transpose(-2, -1)).softmax(dim=-1)
    return weights.transpose(-2, -1) @ v, weights


def test_an_error_the_reference_raises_with_one_change_is_named_by_that_change(capsys):
    assert_rejected(check_attention, attention_mask_swapped, "the arguments of `causal_mask(", capsys)
    assert_rejected(
        check_dot_product_attention,
        dot_product_attention_transposed,
        "The right computation raises it with one change",
        capsys,
    )
    with pytest.raises(AssertionError) as failure:
        check_dot_product_attention(dot_product_attention_transposed)
    assert "`weights` transposed in `weights @ v`" in str(failure.value)


def attention_keys_numbered_from_the_end(q, k, v, mask=None, is_causal=False):
    """Bottom-right queries, and keys numbered as if they ended with the queries too: the keys' line is
    wrong, the queries' line is right."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., t_q, t_k)
    if is_causal:
        query_pos = torch.arange(t_q, device=q.device)[:, None] + t_k - t_q  # (t_q, 1)
        key_pos = torch.arange(t_q - t_k, t_q, device=q.device)[None, :]  # (1, t_k)
        causal = key_pos <= query_pos
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights


def test_a_repair_never_swaps_a_name_for_one_its_statement_already_reads():
    """`+ t_k - t_q` written `+ t_k - t_k` cancels the queries' offset, which makes the keys' wrong offset
    right by accident: the repair named the right line as the mistake. A swap into a name the statement
    already reads names no mix-up of names (the rule of `_mutants._changes` for local pairs), so the
    repair layer no longer tries it."""
    function = attention_keys_numbered_from_the_end
    cancelled = [m for m in _mutants.mutants(function) if m.after.endswith("+ t_k - t_k")]
    assert cancelled and all(m.into_present for m in cancelled)
    assert _repairs._passes(check_attention.__wrapped__, cancelled[0].function)  # what it used to say

    def repaired() -> str | None:
        _repairs.begin_check(check_attention.__wrapped__, function)
        return _repairs.name_by_repair()

    found = contextvars.copy_context().run(repaired)
    assert found is None or "query_pos" not in found
