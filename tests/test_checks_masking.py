"""The checks of notebook 03 reject known mistakes with the right message, accept right answers."""

# ruff: noqa: E501  (tables of learner code, one case a line)

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from check_assertions import assert_accepted, assert_rejected
from learner_code import ATTENTION, CAUSAL, PADDING, learner

from attn_course import reference
from attn_course.checks import check_attention, check_causal_mask, check_padding_mask
from attn_course.checks.masking import _masked_attention

# ---------------------------------------------------------------------------------------------
# causal_mask


def causal_tril(t_q, t_k=None, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def causal_arange(t_q, t_k=None, device=None):
    t_k = t_k or t_q
    query_pos = torch.arange(t_k - t_q, t_k, device=device)[:, None]
    key_pos = torch.arange(t_k, device=device)[None, :]
    return key_pos <= query_pos


def causal_triu_inverted(t_q, t_k=None, device=None):
    t_k = t_q if t_k is None else t_k
    return ~torch.ones(t_q, t_k, dtype=torch.bool, device=device).triu(diagonal=t_k - t_q + 1)


def causal_top_left(t_q, t_k=None, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril()


def causal_keys_on_rows(t_q, t_k=None, device=None):  # the right mask with keys along the rows
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_k, t_q, dtype=torch.bool, device=device).triu(t_q - t_k)


def causal_inverted(t_q, t_k=None, device=None):
    return ~causal_tril(t_q, t_k, device)


def causal_future_and_diagonal(t_q, t_k=None, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).triu(diagonal=t_k - t_q)


def causal_strict(t_q, t_k=None, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q - 1)


def causal_one_future(t_q, t_k=None, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q + 1)


def causal_float(t_q, t_k=None, device=None):
    return causal_tril(t_q, t_k, device).float()


def causal_no_default(t_q, t_k, device=None):
    return causal_tril(t_q, t_k, device)


def causal_ignores_t_k(t_q, t_k=None, device=None):
    return causal_tril(t_q, t_q, device)


def causal_ignores_device(t_q, t_k=None, device=None):
    return causal_tril(t_q, t_k)


def causal_keys_from_end(t_q, t_k=None, device=None):  # keys numbered -t_k … -1: every key allowed
    t_k = t_q if t_k is None else t_k
    return (torch.arange(t_k, device=device) - t_k)[None, :] <= torch.arange(t_q, device=device)[:, None]


def causal_abs_offset(t_q, t_k=None, device=None):  # the offset's size, whichever is longer
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(abs(t_k - t_q))


def not_implemented(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# padding_mask


def padding_arange(lengths, t):
    return torch.arange(t, device=lengths.device)[None, :] < lengths[:, None]


def padding_loop(lengths, t):
    mask = torch.zeros(len(lengths), t, dtype=torch.bool)
    for row, length in enumerate(lengths.tolist()):
        mask[row, :length] = True
    return mask


def padding_inverted(lengths, t):
    return ~padding_arange(lengths, t)


def padding_le(lengths, t):
    return torch.arange(t)[None, :] <= lengths[:, None]


def padding_transposed(lengths, t):
    return padding_arange(lengths, t).T


def padding_long(lengths, t):
    return padding_arange(lengths, t).long()


# ---------------------------------------------------------------------------------------------
# attention


def attention_masked_fill(q, k, v, mask=None, is_causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        causal = causal_tril(q.shape[-2], k.shape[-2], device=q.device)
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows that see no key: 0, as SDPA
    return weights @ v, weights


def attention_nan_in_empty_rows(
    q, k, v, mask=None, is_causal=False
):  # right before the course chose SDPA's 0
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        causal = causal_tril(q.shape[-2], k.shape[-2], device=q.device)
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def attention_minus_1e9_uniform(q, k, v, mask=None, is_causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        causal = causal_tril(q.shape[-2], k.shape[-2], device=q.device)
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def attention_zeros_only_the_output(q, k, v, mask=None, is_causal=False):
    out, weights = attention_nan_in_empty_rows(q, k, v, mask, is_causal)
    return out.nan_to_num(0.0), weights


def attention_minus_1e9(q, k, v, mask=None, is_causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(-1e9, dtype=scores.dtype))
    if is_causal:
        causal = causal_arange(q.shape[-2], k.shape[-2], device=q.device)
        scores = scores.masked_fill(~causal, -1e9)
    weights = F.softmax(scores, dim=-1)
    keeps_a_key = scores.amax(dim=-1, keepdim=True) > -1e9  # rows that allow some key
    weights = torch.where(keeps_a_key, weights, 0.0)
    return weights @ v, weights


def attention_renormalised_after(q, k, v, mask=None, is_causal=False):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    allowed = torch.ones_like(weights, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    if is_causal:
        allowed = allowed & causal_tril(q.shape[-2], k.shape[-2], device=q.device)
    weights = weights * allowed
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp(min=1e-30)  # 0 / tiny = 0 without a key
    return weights @ v, weights


def attention_only_out(q, k, v, mask=None, is_causal=False):
    return attention_masked_fill(q, k, v, mask, is_causal)[0]


def attention_no_mask_arg(q, k, v):
    return attention_masked_fill(q, k, v)


CORRECT = [
    pytest.param(check_causal_mask, reference.causal_mask, id="causal-reference"),
    pytest.param(check_causal_mask, causal_tril, id="causal-tril"),
    pytest.param(check_causal_mask, causal_arange, id="causal-arange"),
    pytest.param(check_causal_mask, causal_triu_inverted, id="causal-not-triu"),
    pytest.param(check_padding_mask, reference.padding_mask, id="padding-reference"),
    pytest.param(check_padding_mask, padding_arange, id="padding-arange"),
    pytest.param(check_padding_mask, padding_loop, id="padding-loop"),
    pytest.param(check_attention, reference.attention, id="attention-reference"),
    pytest.param(check_attention, attention_masked_fill, id="attention-masked-fill"),
    pytest.param(check_attention, attention_minus_1e9, id="attention-minus-1e9"),
    pytest.param(check_attention, attention_renormalised_after, id="attention-renormalised-after-softmax"),
]

WRONG = [
    pytest.param(  # told before that the term `t_q` was left out of `t_k - t_q`, which it never wrote
        check_causal_mask,
        causal_keys_from_end,
        "is True everywhere: every query may attend every key",
        id="causal-keys-from-end",
    ),
    pytest.param(
        check_causal_mask,
        causal_abs_offset,
        "keys up to i + 2, while query i sits at position i + t_k - t_q = i − 2",
        id="causal-abs-offset",
    ),
    pytest.param(
        check_causal_mask, causal_keys_on_rows, "the right mask transposed", id="causal-keys-on-rows"
    ),
    pytest.param(check_causal_mask, not_implemented, "is not implemented yet", id="causal-stub"),
    pytest.param(check_causal_mask, causal_top_left, "is aligned top-left", id="causal-top-left"),
    pytest.param(check_causal_mask, causal_inverted, "is inverted", id="causal-inverted"),
    pytest.param(
        check_causal_mask, causal_future_and_diagonal, "marks the future and the diagonal", id="causal-triu"
    ),
    pytest.param(check_causal_mask, causal_strict, "leaves out the diagonal", id="causal-strict"),
    pytest.param(check_causal_mask, causal_one_future, "one future key (off by one)", id="causal-off-by-one"),
    pytest.param(
        check_causal_mask,
        causal_float,
        "It has the right pattern, but its dtype is torch.float32",
        id="causal-float",
    ),
    pytest.param(check_causal_mask, causal_no_default, "t_k should default to t_q", id="causal-no-default"),
    pytest.param(check_causal_mask, causal_ignores_t_k, "it ignores t_k", id="causal-ignores-t_k"),
    pytest.param(check_causal_mask, causal_ignores_device, "pass device=device", id="causal-ignores-device"),
    pytest.param(check_padding_mask, not_implemented, "is not implemented yet", id="padding-stub"),
    pytest.param(check_padding_mask, padding_inverted, "is inverted", id="padding-inverted"),
    pytest.param(check_padding_mask, padding_le, "one position too many", id="padding-off-by-one"),
    pytest.param(check_padding_mask, padding_transposed, "one row per sequence", id="padding-transposed"),
    pytest.param(check_padding_mask, padding_long, "should be a boolean tensor", id="padding-long"),
    pytest.param(check_attention, not_implemented, "is not implemented yet", id="attention-stub"),
    pytest.param(
        check_attention,
        attention_nan_in_empty_rows,
        "are NaN in the 7 rows that may attend no key (the first T_q - T_k = 2 queries, before the first key, "
        "and every query of the all-padding sequence): rows with no visible key should give 0, as SDPA does",
        id="attention-nan-where-no-key",
    ),
    pytest.param(
        check_attention,
        attention_minus_1e9_uniform,
        "rows with no visible key should give 0, as SDPA does, but they are uniform, 1/T_k on every key",
        id="attention-uniform-where-no-key",
    ),
    pytest.param(
        check_attention,
        attention_zeros_only_the_output,
        "Your weights of attention(q (2, 5, 4)",
        id="attention-zeros-only-the-output",
    ),
    pytest.param(
        check_attention, attention_only_out, "should return a tuple (out, weights)", id="attention-only-out"
    ),
    pytest.param(
        check_attention,
        attention_no_mask_arg,
        "unexpected keyword argument 'mask'",
        id="attention-no-mask-arg",
    ),
]


def attention_ignores_is_causal(q, k, v, mask=None, is_causal=False):
    return attention_masked_fill(q, k, v, mask)


def attention_ignores_mask(q, k, v, mask=None, is_causal=False):
    return attention_masked_fill(q, k, v, None, is_causal)


WRONG.append(
    pytest.param(
        check_attention,
        attention_ignores_is_causal,
        "ignore is_causal=True: a query must not",
        id="attention-ignores-is-causal",
    )
)
WRONG.append(
    pytest.param(check_attention, attention_ignores_mask, "ignore `mask`: fill", id="attention-ignores-mask")
)


def attention_detached(q, k, v, mask=None, is_causal=False):
    out, weights = attention_masked_fill(q, k, v, mask, is_causal)
    return out.detach(), weights.detach()


def attention_gradient_only_through_v(q, k, v, mask=None, is_causal=False):
    return attention_masked_fill(q.detach(), k.detach(), v, mask, is_causal)


WRONG.append(pytest.param(check_attention, attention_detached, "No gradient flows", id="attention-detached"))
WRONG.append(
    pytest.param(
        check_attention,
        attention_gradient_only_through_v,
        "The gradient of your `attention` with respect to q",
        id="attention-no-gradient-to-q",
    )
)


@pytest.mark.parametrize(("check", "candidate"), CORRECT)
def test_check_accepts_correct_implementation(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


@pytest.mark.parametrize(("check", "candidate", "phrase"), WRONG)
def test_check_rejects_mistake_with_its_message(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


# ---------------------------------------------------------------------------------------------
# attention: mistakes as a learner writes them, text edits of a right solution (learner_code.py)

MASK_LINE = 'scores = scores.masked_fill(~mask, float("-inf"))'
COMBINE = "mask = causal if mask is None else mask & causal"
MASKED = "    if mask is not None:\n        " + MASK_LINE + "\n"
SOFTMAX = "    weights = torch.softmax(scores, dim=-1)\n"

LEARNER_WRONG = [
    ("attention", ATTENTION, [(" / math.sqrt(q.shape[-1])", "")], "without the 1/√d_k scale"),
    ("attention", ATTENTION, [(MASK_LINE, 'scores = scores.masked_fill(mask, float("-inf"))')],
     "use the mask the wrong way round"),
    ("attention", ATTENTION, [(MASK_LINE, "scores = scores.masked_fill(~mask, 0.0)")],
     "fill masked scores with 0"),
    ("attention", ATTENTION, [(MASKED + SOFTMAX, SOFTMAX + "    if mask is not None:\n        weights = weights * mask\n")],
     "apply the mask after the softmax"),
    ("attention", ATTENTION, [(COMBINE, "mask = causal if mask is None else mask")],
     "ignore is_causal=True when a mask"),
    ("attention", ATTENTION, [(COMBINE, "mask = causal")], "ignore `mask` when is_causal=True"),
    ("attention", ATTENTION, [(COMBINE, "mask = causal if mask is None else mask | causal")],
     "combine mask and is_causal with OR"),
    ("attention", ATTENTION, [("tril(diagonal=t_k - t_q)", "tril()")], "top-left aligned"),
    ("attention", ATTENTION, [("    if is_causal:\n", "    if False:\n")],
     "ignore is_causal=True: a query must not"),
    ("attention", ATTENTION, [(MASKED, "    if is_causal:\n        " + MASK_LINE + "\n")], "ignore `mask`: fill"),
]  # fmt: skip
"""(exercise, right learner solution, text edits, phrase the message must contain)."""


CAUSAL_LINE = "causal = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(diagonal=t_k - t_q)"
POSITIONS = "causal = (torch.arange(t_k, device=q.device){keys})[None, :] <= (torch.arange(t_q, device=q.device){queries})[:, None]"

CAUSAL_NUMBERED_WRONGLY = [  # each reads is_causal; none ignores it, though one lets every key through
    ([(CAUSAL_LINE, POSITIONS.format(keys=" - t_k", queries=""))],
     "your code runs something more for is_causal=True, but what it builds lets every key through, or never reaches"),
    ([(CAUSAL_LINE, POSITIONS.format(keys=" - (t_k - t_q)", queries=" + t_k - t_q"))],
     "let queries attend keys after their own position although is_causal=True (query i sits at position i + T_k − T_q = i + 4 (T_q = 2, T_k = 6))"),
    ([("tril(diagonal=t_k - t_q)", "triu(diagonal=t_k - t_q)")],
     "are the softmax over the keys j >= i, at and after a diagonal"),
    ([("tril(diagonal=t_k - t_q)", "tril(diagonal=t_k - t_q - 1)")],
     "are the softmax over a causal mask whose diagonal is at key j = i − 1"),
    ([("tril(diagonal=t_k - t_q)", "tril(diagonal=t_k - t_q + 1)")],
     "are the softmax over a causal mask whose diagonal is at key j = i + 1"),
    ([(CAUSAL_LINE, POSITIONS.format(keys="", queries=" - t_q"))],
     "are 0 in every row: no query attends any key"),
    ([("tril(diagonal=t_k - t_q)", "tril(diagonal=abs(t_k - t_q))")],
     "mask=padding of lengths [3, 0], is_causal=True) let queries attend keys after their own position although is_causal=True"),
    ([(CAUSAL_LINE, CAUSAL_LINE + "\n        causal = causal | True")],
     "your code runs something more for is_causal=True"),
]  # fmt: skip
"""(edits of the right attention that number the causal mask's keys or queries wrongly, phrase)."""


@pytest.mark.parametrize(("edits", "phrase"), CAUSAL_NUMBERED_WRONGLY)
def test_a_causal_mask_numbered_wrongly_is_not_said_to_ignore_is_causal(edits, phrase, capsys):
    """Issue 44: "ignore is_causal=True" only where the flag changes neither the result nor what runs; a
    mask whose diagonal is misplaced is said as the keys each query attends, a fill of 0 is not asked for."""
    candidate = learner(ATTENTION, "attention", *edits)
    assert_rejected(check_attention, candidate, phrase, capsys)
    with pytest.raises(AssertionError) as failure:
        check_attention(candidate)
    message = str(failure.value)
    assert "ignore is_causal" not in message and "after the softmax" not in message


@pytest.mark.parametrize(("exercise", "source", "edits", "phrase"), LEARNER_WRONG)
def test_learner_mistakes_are_named(exercise, source, edits, phrase, capsys):
    assert_rejected(check_attention, learner(source, exercise, *edits), phrase, capsys)


def test_the_attention_simulator_with_its_default_knobs_is_the_reference():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, t, d, dtype=torch.float64) for t, d in [(3, 8), (5, 8), (5, 4)])
    mask = torch.tensor([[True, False, True, True, True]] * 3)
    for m, causal in [(None, False), (mask, False), (None, True), (mask, True)]:
        want = reference.attention(q, k, v, m, causal)
        for got, expected in zip(_masked_attention(q, k, v, m, causal), want, strict=True):
            torch.testing.assert_close(got, expected)


# ---------------------------------------------------------------------------------------------
# The exercises' contracts: wrong programs a learner writes that pass every hand-picked case (the
# checks passed each of them before the contracts) and fail a generated one, with what it observes.

QUERY_ROWS = "rows = torch.arange(t_q, device=device)[:, None] + (t_k - t_q)"

CONTRACT_WRONG = [
    pytest.param(
        check_causal_mask,
        (CAUSAL, "causal_mask", (QUERY_ROWS, "rows = torch.arange(t_k, device=device)[-t_q:, None]")),
        "Your causal_mask(6, 4) should have shape (6, 4), but has (4, 4)",
        id="causal-last-key-positions",
    ),
    pytest.param(
        check_causal_mask,
        (CAUSAL, "causal_mask", (QUERY_ROWS, QUERY_ROWS.replace("(t_k - t_q)", "max(t_k - t_q, 0)"))),
        "lets the first queries see keys although t_q > t_k: with more queries than keys",
        id="causal-clamped-offset",
    ),
    pytest.param(
        check_padding_mask,
        (PADDING, "padding_mask", ("torch.arange(t, device=lengths.device)", "torch.arange(t)")),
        "Your padding_mask raised RuntimeError: Tensor on device meta is not on the expected device cpu!",
        id="padding-positions-on-cpu",
    ),
    pytest.param(
        check_attention,
        (ATTENTION, "attention", ("dtype=torch.bool, device=q.device)", "dtype=torch.bool)")),
        "the first tensor your code makes off that device comes from `torch.ones(…)` at line 13",
        id="attention-causal-on-cpu",
    ),
]


@pytest.mark.parametrize(("check", "program", "phrase"), CONTRACT_WRONG)
def test_contract_cases_catch_what_the_hand_picked_ones_pass(check, program, phrase, capsys):
    source, name, *edits = program
    assert_rejected(check, learner(source, name, *edits), phrase, capsys)


# ---------------------------------------------------------------------------------------------
# Two batch axes, transposed as split_heads makes them: "any number of batch axes may come first".
# attention's hand-picked cases hold a (2, 3, T, d) view transposed so, and the contract's cases now
# take (B, H) too; both refuse a `.view` that merges the batch axes, and take reshape, einsum and
# rearrange.

FLATTEN = (
    "    t_q, t_k = q.shape[-2], k.shape[-2]\n    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
)
FLAT_VIEW = (
    "    *batch, t_q, d = q.shape\n    t_k = k.shape[-2]\n"
    "    scores = torch.bmm(q.view(-1, t_q, d), k.view(-1, t_k, d).transpose(1, 2))\n"
    "    scores = scores.view(*batch, t_q, t_k) / math.sqrt(d)\n"
)
VIEW_ERROR = "view needs a contiguous tensor, and a transposed or permuted one is not: use .reshape(...)"

BATCH_AXES_WRONG = [
    ("attention", ATTENTION, [(FLATTEN, FLAT_VIEW)], VIEW_ERROR),
    ("attention", ATTENTION, [(FLATTEN, FLAT_VIEW.replace("q.view(-1", "q.reshape(-1"))], "line 12 of your code: `scores = torch.bmm(q.reshape(-1, t_q, d), k.view(-1, t_k, d).transpose(1, 2))`"),
]  # fmt: skip

BATCH_AXES_RIGHT = [
    ("attention", ATTENTION, [(FLATTEN, FLAT_VIEW.replace(".view(-1", ".reshape(-1"))]),
    ("attention", ATTENTION, [(FLATTEN, FLAT_VIEW.replace("q.view(-1, t_q, d)", 'rearrange(q, "... t d -> (...) t d")').replace("k.view(-1, t_k, d)", 'rearrange(k, "... t d -> (...) t d")'))]),
    ("attention", ATTENTION, [("q @ k.transpose(-2, -1)", 'torch.einsum("...qd,...kd->...qk", q, k)')]),
]  # fmt: skip


@pytest.mark.parametrize(("exercise", "source", "edits", "phrase"), BATCH_AXES_WRONG)
def test_flattening_batch_axes_with_view_is_caught(exercise, source, edits, phrase, capsys):
    assert_rejected(check_attention, learner(source, exercise, *edits), phrase, capsys)


@pytest.mark.parametrize(("exercise", "source", "edits"), BATCH_AXES_RIGHT)
def test_flattening_batch_axes_by_reshape_passes(exercise, source, edits, capsys):
    assert_accepted(check_attention, learner(source, exercise, *edits), capsys)


def test_each_attention_variant_is_a_mistake():
    from attn_course.checks.masking import ATTENTION_VARIANTS

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, t, d, dtype=torch.float64) for t, d in [(3, 8), (5, 8), (5, 4)])
    mask = torch.tensor([[True, False, True, True, False], [True, True, False, True, True]] * 2)[:3]
    right = reference.attention(q, k, v, mask, True)
    for message, variant in ATTENTION_VARIANTS:
        wrong = _masked_attention(q, k, v, mask, True, variant)
        assert not all(torch.allclose(w, r) for w, r in zip(wrong, right, strict=True)), message
