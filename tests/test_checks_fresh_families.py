"""Families of mistakes no table lists, named by what they amount to (issue 27, 2026-12-05).

Each wrong case is written as a learner writes it, in a spelling of my own (not one of the blind
sets' texts): a result of the wrong shape read as axes merged, reduced or sized from the wrong
argument (`_shapes.py`); arguments passed in another order than the function takes them
(`_calls.py`); a layer whose one changed step a reference layer with the learner's own weights
reproduces (`_mutants._twin`); a product transposed; a tensor of the failing line whose shape its
namesake in the right computation never has; the learner's own line changed once so that it passes
(`_repairs.py`). Right answers must still pass.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
from check_assertions import assert_accepted, assert_rejected
from learner_code import (
    ABLATE,
    ATTENTION,
    CACHED,
    FLASH,
    MERGE,
    MHA,
    ONLINE_SOFTMAX,
    PADDING,
    SAMPLE,
    SCORES,
    SPLIT,
    learner,
)
from learner_mistakes_blind_a import load
from learner_mistakes_blind_b import HOLDOUT_B

from attn_course.checks import (
    CheckFailed,
    _mutants,
    _repairs,
    check_ablate_heads,
    check_attention,
    check_attention_backward,
    check_cached_attention,
    check_dot_product_scores,
    check_flash_attention,
    check_GroupedQueryAttention,
    check_merge_heads,
    check_MultiHeadAttention,
    check_online_softmax,
    check_padding_mask,
    check_sample_next,
    check_split_heads,
)
from attn_course.checks._calls import misplaced_arguments
from attn_course.checks._harness import call, describe_args
from attn_course.checks._shapes import explain_shape
from attn_course.latent import LatentAttention
from attn_course.masking import causal_mask


@pytest.fixture(autouse=True)
def unhurried(monkeypatch):
    """A busy machine may need more than the layer's 10 s to reach a mutant: these tests wait for it."""
    monkeypatch.setattr(_mutants, "BUDGET", 100_000)


# ---------------------------------------------------------------------------------------------
# Shapes


def test_a_width_taken_from_the_data_is_named_with_both_sources(capsys):
    wrong = learner(PADDING, "padding_mask", ("torch.arange(t, ", "torch.arange(int(lengths.max()), "))
    assert_rejected(check_padding_mask, wrong, "which is `t`: that size is taken from the wrong", capsys)


def test_heads_folded_into_the_batch_are_read_as_two_axes_merged(capsys):
    wrong = learner(
        SPLIT, "split_heads", ("x.view(b, t, n_heads, d).transpose(1, 2)", "x.reshape(b * n_heads, t, d)")
    )
    assert_rejected(check_split_heads, wrong, "are merged into one of", capsys)


def test_heads_averaged_instead_of_concatenated_are_read_as_parts_reduced(capsys):
    wrong = learner(MERGE, "merge_heads", ("x.transpose(1, 2).reshape(b, t, h * d)", "x.mean(dim=1)"))
    assert_rejected(check_merge_heads, wrong, "summed or averaged, where they belong side by side", capsys)


@pytest.mark.parametrize(
    ("actual", "expected", "phrase"),
    [
        ((2, 4, 3), (2, 3, 4), "another order"),
        ((2, 3, 5, 1, 4), (2, 3, 5, 4), "An extra axis of size 1"),
        ((2, 3, 5, 4), (2, 3, 20), "is split into"),
        ((2, 5), (2, 3, 5), "Axis 1 of the right shape, of size 3, is missing"),
        ((2, 6), (2, 5), "off by one"),
        ((2, 0, 5, 4), (2, 6, 5, 4), "a size computed as 0"),  # n_heads // n_kv_heads the wrong way round
    ],
)
def test_shape_readings(actual, expected, phrase):
    assert phrase in explain_shape(actual, expected)


def test_a_shape_no_reading_fits_says_nothing():
    assert explain_shape((7, 11), (2, 3, 5)) == ""


# ---------------------------------------------------------------------------------------------
# Arguments out of order


def attention_mask_arguments_swapped(q, k, v, mask=None, is_causal=False):
    t_q, t_k = q.shape[-2], k.shape[-2]
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if is_causal:
        allowed = causal_mask(t_k, t_q, device=q.device)
        scores = scores.masked_fill(~allowed, -math.inf)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = scores.softmax(dim=-1).nan_to_num()
    return weights @ v, weights


def test_arguments_in_another_order_are_named_with_the_signature(capsys):
    assert_rejected(
        check_attention,
        attention_mask_arguments_swapped,
        "passes `t_k` as its parameter `t_q` and `t_q` as its parameter `t_k`",
        capsys,
    )


def test_the_argument_reader_leaves_calls_in_order_and_unknown_functions_alone():
    def scale(x, factor):
        return x * factor

    namespace = {"scale": scale, "math": math}
    assert misplaced_arguments("y = scale(x, factor)", namespace) == ""
    assert misplaced_arguments("y = scale(y, x)", namespace) == ""  # one name out of place proves nothing
    assert misplaced_arguments("y = scale(x=factor, factor=x)", namespace) == ""  # by name: the caller's call
    assert misplaced_arguments("y = math.pow(factor, x)", namespace) == ""  # a builtin: no signature read
    assert "`factor` as its parameter `x` and `self.x` as its parameter `factor`" in misplaced_arguments(
        "y = scale(factor, self.x)", namespace
    )


# ---------------------------------------------------------------------------------------------
# A layer's one changed step, on the learner's own weights


def test_a_layer_whose_heads_average_the_queries_is_named_by_its_step(capsys):
    """The heads' reading names it; no change of the reference's own steps (its `split_heads` return,
    which this layer does not have) is said beside it."""
    wrong = learner(MHA, "MultiHeadAttention", ("out = (weights @ v)", "out = (weights @ q)"))
    assert_rejected(check_MultiHeadAttention, wrong, "not weighted averages of the values at all", capsys)
    with pytest.raises(CheckFailed) as failure:
        check_MultiHeadAttention(wrong)
    assert "split_heads(q, self.n_heads)" not in str(failure.value)


def test_a_right_layer_unlike_the_reference_still_passes(capsys):
    assert_accepted(check_MultiHeadAttention, learner(MHA, "MultiHeadAttention"), capsys)


def test_the_twin_carries_the_learners_weights_exactly():
    layer = learner(MHA, "MultiHeadAttention")(12, 3).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    _mutants.note_call("MultiHeadAttention.forward", (x,), {}, layer)
    twin = _mutants._twin("MultiHeadAttention.forward")
    assert twin is not None
    torch.testing.assert_close(twin(x), layer(x), atol=1e-12, rtol=0)


# ---------------------------------------------------------------------------------------------
# A product transposed; a tensor unlike its namesake


def attention_backward_dp_transposed(q, k, v, grad_out, is_causal=False):
    d = q.shape[-1]
    t_q, t_k = q.shape[-2], k.shape[-2]
    s = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(d)
    if is_causal:
        s = s.masked_fill(~torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q), -math.inf)
    p = s.softmax(dim=-1)
    dv = torch.einsum("...ij,...id->...jd", p, grad_out)
    dp = torch.einsum("...jd,...id->...ji", v, grad_out)  # (keys, queries): the other way round
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    return ds @ k / math.sqrt(d), ds.transpose(-2, -1) @ q / math.sqrt(d), dv


def test_a_transposed_product_is_named(capsys):
    assert_rejected(
        check_attention_backward,
        attention_backward_dp_transposed,
        "transposed (its last two axes swapped)",
        capsys,
    )


def test_a_tensor_unlike_its_namesake_in_the_right_computation_is_named(capsys):
    wrong = learner(
        ONLINE_SOFTMAX,
        "online_softmax",
        ("block.max(dim=-1, keepdim=True).values", "block.max(dim=-1).values"),
    )
    assert_rejected(check_online_softmax, wrong, "in the right computation it is", capsys)


# ---------------------------------------------------------------------------------------------
# One level into the helpers the reference calls; a loop's state left behind; no false names


def test_a_change_inside_a_helper_the_reference_calls_is_named_with_the_helper(capsys):
    """The reference's cached_attention merges the heads with merge_heads; the learner inline, (d h)."""
    wrong = learner(
        CACHED,
        "cached_attention",
        ("attn.out(merge_heads(out))", "attn.out(out.permute(0, 2, 3, 1).flatten(2))"),
    )
    assert_rejected(check_cached_attention, wrong, "with one change inside `merge_heads`", capsys)


def test_a_loop_state_never_updated_is_named_as_the_update_left_out(capsys):
    wrong = learner(FLASH, "flash_attention", ("            m = m_new\n", "            m_prev = m_new\n"))
    assert_rejected(check_flash_attention, wrong, "the step `m = m_new` left out", capsys)


def test_a_layers_error_is_not_named_by_a_change_that_raises_it_from_other_tensors(tmp_path):
    """Queries split into n_kv_heads heads fail where a mutant passing k for q fails too, with other q."""
    mistake = next(m for m in HOLDOUT_B if m.exercise == "GroupedQueryAttention" and "queries" in m.idea)
    with pytest.raises(AssertionError) as failure:
        check_GroupedQueryAttention(load(mistake, tmp_path))
    assert "into 2 heads of 8" in str(failure.value)
    assert "used where the right computation uses" not in str(failure.value)


# ---------------------------------------------------------------------------------------------
# The learner's own line, changed once so that it passes (checks/_repairs.py)


def test_a_wrong_value_is_shown_as_the_learners_line_and_the_line_that_passes(capsys):
    wrong = learner(
        SCORES,
        "dot_product_scores",
        ("q @ k.transpose(-2, -1)", "(q @ k.transpose(-2, -1)).roll(1, dims=-1)"),
    )
    assert_rejected(
        check_dot_product_scores,
        wrong,
        "passes this check written `return (q @ k.transpose(-2, -1)).roll(0, dims=-1)`",
        capsys,
    )


def test_an_error_is_shown_as_the_line_that_feeds_it_and_the_line_that_passes(capsys):
    wrong = learner(
        ONLINE_SOFTMAX,
        "online_softmax",
        ("block.max(dim=-1, keepdim=True).values", "block.max(dim=-1).values"),
    )
    assert_rejected(
        check_online_softmax,
        wrong,
        "passes this check written `m_new = torch.maximum(m, block.max(dim=-1, keepdim=True).values)`",
        capsys,
    )


def test_a_change_fitted_to_the_checks_sizes_is_not_offered(capsys):
    """k[:1] -> k[:2] passes where the batch is 2: a shifted index is never offered as the fix."""
    wrong = learner(SCORES, "dot_product_scores", ("q @ k.transpose(-2, -1)", "q @ k[:1].transpose(-2, -1)"))
    with pytest.raises(AssertionError) as failure:
        check_dot_product_scores(wrong)
    assert "passes this check" not in str(failure.value)


def test_with_no_budget_the_repair_layer_is_silent(monkeypatch):
    monkeypatch.setattr(_repairs, "BUDGET", 0)
    wrong = learner(
        SCORES,
        "dot_product_scores",
        ("q @ k.transpose(-2, -1)", "(q @ k.transpose(-2, -1)).roll(1, dims=-1)"),
    )
    with pytest.raises(AssertionError) as failure:
        check_dot_product_scores(wrong)
    assert "passes this check" not in str(failure.value)


def attention_nan_hidden_by_nan_to_num(q, k, v, mask=None, is_causal=False):
    """Right values, rows with no key included, but the softmax of such a row is NaN before nan_to_num."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        t_q, t_k = q.shape[-2], k.shape[-2]
        allowed = torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)
        mask = allowed if mask is None else mask & allowed
    if mask is not None:
        scores = scores + torch.zeros_like(scores).masked_fill(~mask, -math.inf)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def test_a_gradient_made_nan_behind_a_right_value_is_explained(capsys):
    assert_rejected(
        check_attention, attention_nan_hidden_by_nan_to_num, "is hidden in the values by nan_to_num", capsys
    )


def test_a_squeeze_of_every_axis_is_repaired_to_the_last_one(capsys):
    """m (b, Bq, 1, 1 after a broadcast slip) squeezed whole: right for a batch of one only."""
    wrong = learner(
        FLASH,
        "flash_attention",
        (
            "lse[..., qs:qe] = (m + torch.log(l)).squeeze(-1)",
            "lse[..., qs:qe] = torch.log(l).squeeze(-1) + m.squeeze()",
        ),
    )
    assert_rejected(check_flash_attention, wrong, "+ m.squeeze(-1)`", capsys)


# ---------------------------------------------------------------------------------------------
# Where a NaN is made


def _softmax_of_masked_rows(s):
    m = s.amax(dim=-1, keepdim=True)  # -inf for a row with every key masked
    return torch.exp(s - m)


def _weights_of_empty_rows(s):
    p = torch.exp(s.clamp(max=0)) * (s > 0)  # a row with no positive score sums to 0
    return p / p.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize(
    ("function", "operation", "code"),
    [
        (_softmax_of_masked_rows, "sub", "return torch.exp(s - m)"),
        (_weights_of_empty_rows, "div", "return p / p.sum(dim=-1, keepdim=True)"),
    ],
)
def test_the_first_nan_is_found_at_the_line_and_operation_that_make_it(function, operation, code):
    from attn_course.checks._harness import library_dirs
    from attn_course.checks._nan_origin import first_nan

    s = torch.tensor([[0.5, -1.0], [-math.inf, -math.inf]])  # (2, 2): row 1 has no key
    s = s if operation == "sub" else torch.tensor([[0.5, 2.0], [-1.0, -3.0]])
    found = first_nan(function, (s,), {}, library_dirs())
    assert found is not None and found[0] == operation and found[2] == code
    assert first_nan(torch.exp, (torch.zeros(2),), {}, library_dirs()) is None


def _weights_into_empty(s):
    out = torch.empty_like(s)  # every element written below
    p = torch.exp(s.clamp(max=0)) * (s > 0)  # a row with no positive score sums to 0
    out[:] = p / p.sum(dim=-1, keepdim=True)
    return out


def _last_row_unwritten(s):
    out = torch.empty_like(s)
    out[:-1] = torch.softmax(s[:-1], dim=-1)  # the last row is never written
    return out


def _written_by_numpy(s):
    out = torch.empty_like(s)
    out.numpy()[:] = np.log(s.numpy())  # NaN for a negative score, written where torch does not see
    return out


@contextlib.contextmanager
def _empty_memory_is_nan():
    """torch.empty's memory as NaN, as memory left over from earlier work can be (a full test run)."""
    saved = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0])
        torch.utils.deterministic.fill_uninitialized_memory = saved[1]


def test_memory_from_torch_empty_is_never_where_a_nan_is_born():
    from attn_course.checks._harness import library_dirs
    from attn_course.checks._nan_origin import first_nan

    s = torch.tensor([[0.5, 2.0], [-1.0, -3.0]])  # (2, 2): row 1 sums to 0
    with _empty_memory_is_nan():
        assert torch.isnan(torch.empty(3)).all()  # what a full run's leftover memory can hold
        found = first_nan(_weights_into_empty, (s,), {}, library_dirs())
    assert found is not None and found[0] == "div" and found[2] == "out[:] = p / p.sum(dim=-1, keepdim=True)"


def test_a_nan_only_unwritten_elements_explain_is_said_to_be_that_whatever_the_memory_held():
    from attn_course.checks._harness import library_dirs
    from attn_course.checks._nan_origin import first_nan

    s = torch.tensor([[0.5, 2.0], [-1.0, -3.0]])  # (2, 2)
    for memory in (contextlib.nullcontext(), _empty_memory_is_nan()):
        with memory:
            found = first_nan(_last_row_unwritten, (s,), {}, library_dirs())
        assert found is not None and found[:3:2] == ("unwritten", "out = torch.empty_like(s)")


def test_a_nan_written_where_torch_does_not_see_is_not_said_to_be_unwritten_memory():
    from attn_course.checks._harness import library_dirs
    from attn_course.checks._nan_origin import first_nan

    s = torch.tensor([[0.5, 2.0], [-1.0, 3.0]])  # (2, 2): log(-1) is NaN, as a Triton kernel's could be
    assert first_nan(_written_by_numpy, (s,), {}, library_dirs()) is None


def test_flash_attention_with_torch_empty_is_told_where_its_nan_is_made_whatever_the_memory_held(capsys):
    guard = "out[..., qs:qe, :].masked_fill_(l == 0, 0.0)  # a row with no key at all: 0, as attention\n"
    wrong = learner(FLASH, "flash_attention", (f"        {guard}", ""))  # 0/0 where no key; out: empty
    for memory in (contextlib.nullcontext(), _empty_memory_is_nan()):
        with memory, pytest.raises(CheckFailed) as failure:
            check_flash_attention(wrong)
        message = str(failure.value)
        assert "`out[..., qs:qe, :] = acc / l`: 0/0" in message and "Divide by 1 where l is 0" in message
        assert "torch.empty" not in message and "safe 0" not in message, message


# ---------------------------------------------------------------------------------------------
# Set E's families, in spellings of my own


def test_pairs_unpacked_the_other_way_round_are_named(capsys):
    wrong = learner(ABLATE, "ablate_heads", ("for layer, head in heads:", "for head, layer in heads:"))
    assert_rejected(check_ablate_heads, wrong, "yours were read as (head, layer)", capsys)


def test_a_draw_that_follows_no_softmax_is_not_blamed_on_the_temperature(capsys):
    """Probabilities times uniform noise, then the argmax: no temperature explains those frequencies."""
    draw = "return torch.multinomial(probs, num_samples=1, generator=generator)"
    noisy = (
        "noise = torch.rand(probs.shape, generator=generator, dtype=probs.dtype)\n"
        "    return (probs * noise).argmax(-1, keepdim=True)"
    )
    wrong = learner(SAMPLE, "sample_next", (draw, noisy))
    with pytest.raises(AssertionError) as failure:
        check_sample_next(wrong)
    assert "torch.multinomial(probs, 1, generator=generator) does" in str(failure.value)
    assert "fit a temperature" not in str(failure.value)


def test_an_einsum_letter_on_the_wrong_axes_is_placed_on_both(capsys):
    wrong = learner(
        SCORES, "dot_product_scores", ("q @ k.transpose(-2, -1)", 'torch.einsum("...iq,...ik->...qk", q, k)')
    )
    assert_rejected(check_dot_product_scores, wrong, "The letter i stands on axis -2 of `q`", capsys)


# ---------------------------------------------------------------------------------------------
# Set F's families, in spellings of my own


def test_a_result_of_the_opposite_sign_is_named_as_such():
    from attn_course.checks._harness import describe_error

    expected = torch.randn(3, 4, dtype=torch.float64)
    assert "the opposite sign" in describe_error(-expected, expected)


def test_a_wrong_shape_is_shown_with_the_learners_line_that_gives_the_right_one(capsys):
    from learner_code import learner as build

    source = """
def repeat_kv(x, n_rep):
    return x.repeat_interleave(n_rep + 1, dim=1)
"""
    wrong = build(source, "repeat_kv")
    from attn_course.checks import check_repeat_kv

    assert_rejected(check_repeat_kv, wrong, "passes this check written", capsys)


def test_a_difference_turned_round_is_a_mutation():
    def gap(a, b):
        return a - b

    assert any("the difference turned round" in m.message for m in _mutants.mutants(gap))


# ---------------------------------------------------------------------------------------------
# Set G's and H's families, in spellings of my own


def test_scores_multiplied_entry_by_entry_are_named(capsys):
    wrong = learner(SCORES, "dot_product_scores", ("q @ k.transpose(-2, -1)", "(k * q).sum(dim=-1)"))
    assert_rejected(check_dot_product_scores, wrong, "are multiplied entry by entry", capsys)


def test_heads_split_by_their_width_are_named(capsys):
    wrong = learner(
        MHA,
        "MultiHeadAttention",
        ("        d_k = d_model // self.n_heads\n", "        d_k = self.n_heads\n"),
        ("self.n_heads, d_k).transpose(1, 2)\n        k = k", "-1, d_k).transpose(1, 2)\n        k = k"),
        ("k = k.view(b, t, self.n_heads, d_k)", "k = k.view(b, t, -1, d_k)"),
        ("v = v.view(b, t, self.n_heads, d_k)", "v = v.view(b, t, -1, d_k)"),
    )
    assert_rejected(check_MultiHeadAttention, wrong, "the count and the width are swapped", capsys)


def test_masks_joined_by_or_are_told_to_join_by_and(capsys):
    wrong = learner(
        ATTENTION,
        "attention",
        (
            "mask = causal if mask is None else mask & causal",
            "mask = causal if mask is None else mask | causal",
        ),
        ("mask = causal if mask is None", "mask = torch.ones_like(causal) | causal if mask is None"),
    )
    assert_rejected(check_attention, wrong, "by & (a key must pass both", capsys)


def test_a_softmax_whose_rows_sum_nearly_to_one_is_not_called_unproportional(capsys):
    """exps / (sum + 1e-3): the proportions are exp(x)'s, the rows sum to a little under 1."""
    from learner_code import SOFTMAX

    from attn_course.checks import check_softmax

    wrong = learner(
        SOFTMAX,
        "softmax",
        ("total = exps.sum(dim=dim, keepdim=True)", "total = exps.sum(dim=dim, keepdim=True) + 1e-3"),
    )
    with pytest.raises(AssertionError) as failure:
        check_softmax(wrong)
    assert "has the right proportions within each row" in str(failure.value)
    assert "not proportional" not in str(failure.value)


def test_a_mean_where_a_sum_belongs_is_shown_in_the_learners_line(capsys):
    from attn_course.checks import check_softmax_backward

    wrong = learner(
        "\ndef softmax_backward(p, grad_p, dim=-1):\n"
        "    weighted = (grad_p * p).mean(dim=dim, keepdim=True)\n"
        "    return p * (grad_p - weighted)\n",
        "softmax_backward",
    )
    assert_rejected(
        check_softmax_backward, wrong, "passes this check written `weighted = (grad_p * p).sum(", capsys
    )


# ---------------------------------------------------------------------------------------------
# Set L's families: shapes and lengths

GQA = """
from attn_course.attention import attention
from attn_course.gqa import repeat_kv


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        d_head = d_model // n_heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.v = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask=None, is_causal=False):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.n_heads, -1).transpose(1, 2)
        k = self.k(x).view(b, t, self.n_kv_heads, -1).transpose(1, 2)
        v = self.v(x).view(b, t, self.n_kv_heads, -1).transpose(1, 2)
        n_rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        head_mask = None if mask is None else mask.unsqueeze(1)
        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)
        return self.out(out.transpose(1, 2).reshape(b, t, -1))
"""


def test_a_product_with_every_axis_reversed_names_the_reversed_operand(capsys):
    """k.transpose(0, -1) reverses a 3-D k: the batch axes that clash are q's and that operand's."""
    wrong = learner(SCORES, "dot_product_scores", ("k.transpose(-2, -1)", "k.transpose(0, -1)"))
    with pytest.raises(CheckFailed) as failure:
        check_dot_product_scores(wrong)
    text = str(failure.value)
    assert "`k.transpose(0, -1)` (4, 7, 2)" in text
    assert "`q` (2, 5, 4) and `k` (2, 7, 4)" not in text
    assert_rejected(check_dot_product_scores, wrong, "(2 meets 4)", capsys)


def test_a_mask_made_on_the_failing_line_is_the_operand_named_not_another_tensor(capsys):
    """A (t_q, t_q) mask built inside masked_fill: the clash is the scores' against it, not q's."""
    wrong = learner(
        ATTENTION,
        "attention",
        (
            '        scores = scores.masked_fill(~mask, float("-inf"))\n',
            '        scores = scores.masked_fill(~mask, float("-inf"))\n'
            "    if is_causal:\n"
            "        scores = scores.masked_fill(torch.ones(t_q, t_q, dtype=torch.bool, device=q.device)"
            '.triu(1), float("-inf"))\n',
        ),
        ("mask = causal if mask is None else mask & causal", "mask = mask"),
    )
    with pytest.raises(CheckFailed) as failure:
        check_attention(wrong)
    text = str(failure.value)
    assert "`scores` (2, 2, 6) and `torch.ones(t_q, t_q, dtype=torch.bool, device=q.device)" in text
    assert "`q` (2, 2, 4)" not in text
    assert_rejected(check_attention, wrong, "6 is the length of `k` and 2 that of `q`", capsys)


def test_lengths_that_are_also_the_block_size_are_not_said_to_be_swapped(capsys):
    """k's features sliced as its rows: p is (Bq, T_k), and 16 is q_blk's length and block_size too."""
    from learner_code import FLASH_QUERY_BLOCK

    from attn_course.checks import check_flash_attention_query_block

    wrong = learner(
        FLASH_QUERY_BLOCK,
        "flash_attention_query_block",
        ("k[..., ks:ks + block_size, :].transpose", "k[..., ks:ks + block_size].transpose"),
    )
    with pytest.raises(CheckFailed) as failure:
        check_flash_attention_query_block(wrong)
    text = str(failure.value)
    assert "built with the other's length" not in text
    assert "qs:qe" not in text  # this function has no query rows to slice
    assert "v[..., ks:ke, :]" in text
    assert_rejected(
        check_flash_attention_query_block, wrong, "64 is the length of `k` and 16 that of `q_blk`", capsys
    )


def test_repeated_heads_are_described_as_held_not_as_split(capsys):
    """k viewed as n_heads heads of half the width, then repeated: it holds 8 heads, 4 distinct."""
    wrong = learner(
        GQA,
        "GroupedQueryAttention",
        (
            "k = self.k(x).view(b, t, self.n_kv_heads, -1)",
            "k = self.k(x).view(b, t, self.n_heads, -1)",
        ),
    )
    with pytest.raises(CheckFailed) as failure:
        check_GroupedQueryAttention(wrong)
    text = str(failure.value)
    assert "is split into 8 heads" not in text
    assert_rejected(check_GroupedQueryAttention, wrong, "`k` (2, 8, 5, 2) holds 8 heads of width 2", capsys)


def test_right_grouped_query_attention_of_this_spelling_passes(capsys):
    assert_accepted(check_GroupedQueryAttention, learner(GQA, "GroupedQueryAttention"), capsys)


def test_a_tensor_named_only_in_the_lines_comment_is_not_an_operand():
    """`# as big as w`: w is not on the line, and its shape must not stand for the operand made there."""
    from attn_course.checks._harness import explain_error

    wrong = learner(
        "\ndef widen(x, w):\n    return x * torch.ones(4, 3)  # as big as w\n",
        "widen",
    )
    with pytest.raises(RuntimeError) as error:
        wrong(torch.zeros(2, 3), torch.zeros(4, 3))
    text = explain_error(error.value)
    assert "`x` (2, 3) and `torch.ones(4, 3)` do not line up from the right (2 meets 4)" in text
    assert "`w` (4, 3)" not in text  # w may be named as the input whose length 4 is, not as an operand


# Set L's families: mutants and the Triton mask


def test_queries_rotated_at_their_own_indices_get_no_mutant_sentence_naming_another_argument(capsys):
    """q rotated at 0 … t-1 while k gets `positions`: the reading of the heads names it; the reference
    with `mask` where it passes `positions` gives the same only because mask is None in that call."""
    from learner_code import ROTARY

    from attn_course.checks import check_RotaryMultiHeadAttention

    wrong = learner(
        ROTARY,
        "RotaryMultiHeadAttention",
        ("q = apply_rope(q, positions, self.base)", "q = apply_rope(q, torch.arange(t), self.base)"),
    )
    assert_rejected(check_RotaryMultiHeadAttention, wrong, "rotates q by the positions 0 … t-1", capsys)
    with pytest.raises(CheckFailed) as failure:
        check_RotaryMultiHeadAttention(wrong)
    message = str(failure.value)
    assert "`mask` used where" not in message and "apply_rope(q, positions, self.base)" not in message
    # the reading was made on a layer of another size than the call that failed: said of that layer
    assert "(Seen on" not in message and "Built as RotaryMultiHeadAttention(32, 4)" in message


def test_a_square_causal_mask_is_not_called_a_swap_of_its_arguments(capsys):
    """causal_mask given T_q alone raises where the keys are longer: nothing was swapped."""
    wrong = learner(
        "\ndef attention(q, k, v, mask=None, is_causal=False):\n"
        "    t_q = q.shape[-2]\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    allowed = torch.ones_like(scores, dtype=torch.bool)\n"
        "    if mask is not None:\n"
        "        allowed = allowed & mask\n"
        "    if is_causal:\n"
        "        allowed = allowed & causal_mask(t_q, device=q.device)\n"
        "    scores = scores.masked_fill(~allowed, float('-inf'))\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)\n"
        "    return weights @ v, weights\n",
        "attention",
    )
    wrong.__globals__["causal_mask"] = causal_mask
    assert_rejected(check_attention, wrong, "with one change to its call of `causal_mask`", capsys)
    with pytest.raises(CheckFailed) as failure:
        check_attention(wrong)
    message = str(failure.value)
    assert "swapped" not in message and "k.shape[-2]" not in message


def test_a_flat_count_taken_from_one_axis_blames_n_not_the_mask(capsys, tmp_path):
    """The grid from x.numel() covers every element, the mask's bound is x.size(0): the mask's form is
    right, what it compares with is not (and one program is not "1 programs")."""
    pytest.importorskip("triton")
    from triton_variants import ADD, variant

    from attn_course.checks import check_triton_add

    wrong = variant(
        ADD,
        tmp_path,
        "triton_add",
        ("BLOCK = 64", "BLOCK = 1024"),  # one program covers the whole input
        (
            "add_kernel[grid](x, y, out, n, BLOCK=BLOCK)",
            "add_kernel[grid](x, y, out, x.size(0), BLOCK=BLOCK)",
        ),
    )
    assert_rejected(check_triton_add, wrong, "n counts every element, x.numel(), not one axis", capsys)
    with pytest.raises(CheckFailed) as failure:
        check_triton_add(wrong)
    message = str(failure.value)
    assert "(1 program of 1024)" in message
    assert "offsets < n - 1" not in message and "1 programs" not in message


def test_a_change_the_learners_own_code_makes_is_still_said_beside_the_reading(capsys):
    """The shift read from the mask, then the change their own `t_q - t_k` makes: theirs, so said."""
    from attn_course.checks import check_causal_mask

    wrong = learner(
        "\ndef causal_mask(t_q, t_k=None, device=None):\n"
        "    t_k = t_q if t_k is None else t_k\n"
        "    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_q - t_k)\n",
        "causal_mask",
    )
    assert_rejected(check_causal_mask, wrong, "`t_q - t_k` where it is `t_k - t_q`", capsys)


# ---------------------------------------------------------------------------------------------
# The operands of a line of two products


TWO_PRODUCTS = """
def scores_with_position_part(q, k, q_pos, k_pos):
    return torch.matmul(q, k.mT) + torch.matmul(q_pos, k_pos.mT)
"""


def test_of_two_products_on_a_line_the_one_that_failed_is_named():
    """q and k_pos clash by their sizes, but no operation of the line combines them: q_pos, k_pos.mT met."""
    wrong = learner(TWO_PRODUCTS, "scores_with_position_part")
    q, k = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)  # (b, h, t, d)
    q_pos, k_pos = torch.randn(2, 3, 5, 2), torch.randn(2, 5, 2)  # (b, h, t, r), (b, t, r): no head axis
    with pytest.raises(CheckFailed) as failure:
        call("scores_with_position_part", wrong, q, k, q_pos, k_pos)
    message = str(failure.value)
    assert "`k_pos.mT` (2, 2, 5) lacks axes that `q_pos` (2, 3, 5, 2) has" in message
    assert "`k_pos.mT[:, None]`" in message
    assert "`q` (2, 3, 5, 4)" not in message


def test_a_layer_argument_is_described_on_one_line_by_its_sizes():
    layer = LatentAttention(24, 3, 8, 6, 4)
    shown = describe_args((layer, torch.zeros(2, 6, 24)), {})
    assert shown == (
        "LatentAttention(d_model=24, n_heads=3, d_head=8, d_latent=6, d_rope=4), "
        "<float32 tensor of shape (2, 6, 24)>"
    )
