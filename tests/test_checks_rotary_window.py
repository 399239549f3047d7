"""check_rotary_window_attention against right and wrong layers written as learners write them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from check_assertions import assert_accepted, assert_rejected
from einops import rearrange

from attn_course import reference
from attn_course.checks import check_rotary_window_attention
from attn_course.gqa import repeat_kv
from attn_course.heads import merge_heads, split_heads
from attn_course.rope import apply_rope, apply_rope_rotate_half
from attn_course.window import sliding_window_mask

flex_attention_module = pytest.importorskip("torch.nn.attention.flex_attention")
flex_attention = flex_attention_module.flex_attention
create_block_mask = flex_attention_module.create_block_mask


def not_implemented(layer, x, window, positions=None):
    raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# Right answers, in the ways people write them


def with_flex(layer, x, window, positions=None):  # the notebook's solution
    t = x.shape[1]
    q = rearrange(layer.q(x), "b t (h d) -> b h t d", h=layer.n_heads)
    k = rearrange(layer.k(x), "b t (h d) -> b h t d", h=layer.n_kv_heads)
    v = rearrange(layer.v(x), "b t (h d) -> b h t d", h=layer.n_kv_heads)
    q, k = apply_rope(q, positions), apply_rope(k, positions)

    def in_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    block_mask = create_block_mask(in_window, None, None, t, t, device=x.device)
    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)
    return layer.out(rearrange(out, "b h t d -> b t (h d)"))


def with_sdpa_and_repeat(layer, x, window, positions=None):  # no FlexAttention: repeat, then a dense mask
    b, t, _ = x.shape
    d_head = layer.q.out_features // layer.n_heads
    q = layer.q(x).view(b, t, layer.n_heads, d_head).transpose(1, 2)
    k = layer.k(x).view(b, t, layer.n_kv_heads, d_head).transpose(1, 2)
    v = layer.v(x).view(b, t, layer.n_kv_heads, d_head).transpose(1, 2)
    n_rep = layer.n_heads // layer.n_kv_heads
    k, v = repeat_kv(apply_rope(k, positions), n_rep), repeat_kv(v, n_rep)  # rotate before the repeat
    q = apply_rope(q, positions)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=sliding_window_mask(t, t, window, device=x.device)
    )
    return layer.out(out.transpose(1, 2).reshape(b, t, -1))


def rope_after_repeat(layer, x, window, positions=None):  # rotating the repeated keys is the same rotation
    t = x.shape[1]
    n_rep = layer.n_heads // layer.n_kv_heads
    q = split_heads(layer.q(x), layer.n_heads)
    k = repeat_kv(split_heads(layer.k(x), layer.n_kv_heads), n_rep)
    v = repeat_kv(split_heads(layer.v(x), layer.n_kv_heads), n_rep)
    q, k = apply_rope(q, positions), apply_rope(k, positions)

    def in_window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx > q_idx - window)

    mask = create_block_mask(in_window, None, None, t, t, device="cpu")
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask)))


def by_hand(layer, x, window, positions=None):  # every score, the mask built with torch.tril
    t = x.shape[1]
    n_rep = layer.n_heads // layer.n_kv_heads
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions).repeat_interleave(n_rep, dim=1)
    v = split_heads(layer.v(x), layer.n_kv_heads).repeat_interleave(n_rep, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    ones = torch.ones(t, t, dtype=torch.bool, device=x.device)
    keep = ones.tril() & ~ones.tril(-window)
    weights = scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)
    return layer.out(merge_heads(weights @ v))


def einsum_in_float64(layer, x, window, positions=None):  # einsum over the groups, scores in float64
    b, t, _ = x.shape
    g = layer.n_heads // layer.n_kv_heads
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    q = q.reshape(b, layer.n_kv_heads, g, t, -1)  # (b, h_kv, g, t, d): consecutive query heads share
    scores = torch.einsum("bkgqd,bkjd->bkgqj", q.double(), k.double()) / math.sqrt(q.shape[-1])
    i = torch.arange(t, device=x.device)
    keep = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)
    weights = scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)
    out = torch.einsum("bkgqj,bkjd->bkgqd", weights, v.double()).to(x.dtype)
    return layer.out(out.reshape(b, layer.n_heads, t, -1).transpose(1, 2).reshape(b, t, -1))


def with_flex_scale_given(layer, x, window, positions=None):  # scale written out, positions made explicit
    t = x.shape[1]
    if positions is None:
        positions = torch.arange(t)
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(
        lambda b, h, q_idx, kv_idx: (q_idx - kv_idx >= 0) & (q_idx - kv_idx < window), None, None, t, t
    )
    out = flex_attention(q, k, v, block_mask=mask, enable_gqa=True, scale=1 / math.sqrt(q.shape[-1]))
    return layer.out(merge_heads(out))


CORRECT = [
    pytest.param(reference.rotary_window_attention, id="reference"),
    pytest.param(with_flex, id="flex"),
    pytest.param(with_sdpa_and_repeat, id="sdpa-repeat"),
    pytest.param(rope_after_repeat, id="rope-after-repeat"),
    pytest.param(by_hand, id="by-hand"),
    pytest.param(with_flex_scale_given, id="scale-given"),
    pytest.param(einsum_in_float64, id="einsum-float64"),
]


@pytest.mark.parametrize("candidate", CORRECT)
def test_accepts_right_answers(candidate, capsys):
    assert_accepted(check_rotary_window_attention, candidate, capsys)


# ---------------------------------------------------------------------------------------------
# Wrong answers, as learners write them


def forgot_rope(layer, x, window, positions=None):
    t = x.shape[1]
    q = split_heads(layer.q(x), layer.n_heads)
    k, v = split_heads(layer.k(x), layer.n_kv_heads), split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def rope_on_queries_only(layer, x, window, positions=None):
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k, v = split_heads(layer.k(x), layer.n_kv_heads), split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def rope_on_everything(layer, x, window, positions=None):
    t = x.shape[1]
    q, k, v = (
        apply_rope(split_heads(proj(x), h), positions)
        for proj, h in ((layer.q, layer.n_heads), (layer.k, layer.n_kv_heads), (layer.v, layer.n_kv_heads))
    )
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def neox_rope(layer, x, window, positions=None):  # copied from a GPT-NeoX style model
    t = x.shape[1]
    q = apply_rope_rotate_half(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope_rotate_half(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def positions_dropped(layer, x, window, positions=None):
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads))
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads))
    v = split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def pytorch_blog_window(layer, x, window, positions=None):  # the FlexAttention examples' `<=`
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki <= window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def window_without_causal(layer, x, window, positions=None):
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi - ki).abs() < window, None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def only_causal(layer, x, window, positions=None):  # is_causal through SDPA: the window forgotten
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    return layer.out(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)))


def tiled_heads(layer, x, window, positions=None):  # k.repeat: the interleaved order
    t, n_rep = x.shape[1], layer.n_heads // layer.n_kv_heads
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions).repeat(1, n_rep, 1, 1)
    v = split_heads(layer.v(x), layer.n_kv_heads).repeat(1, n_rep, 1, 1)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask)))


def scaled_by_hand_too(layer, x, window, positions=None):  # q / √d, and flex scales again
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    q = q / math.sqrt(q.shape[-1])
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def no_out_projection(layer, x, window, positions=None):
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True))


def window_one_short(layer, x, window, positions=None):  # nobody listed this one: "window - 1 before"
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    short = max(window - 1, 1)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < short), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def positions_added_to_x(layer, x, window, positions=None):  # nobody listed this one: absolute positions
    t = x.shape[1]
    if positions is None:
        positions = torch.arange(t)
    x = x + 0.01 * positions.to(x.dtype)[:, None]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def keys_as_values(layer, x, window, positions=None):  # nobody listed this one
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    unrotated_keys = split_heads(layer.k(x), layer.n_kv_heads)
    mask = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < window), None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, unrotated_keys, block_mask=mask, enable_gqa=True)))


def python_if_in_mask(layer, x, window, positions=None):
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)

    def in_window(b, h, q_idx, kv_idx):
        if q_idx >= kv_idx:
            return q_idx - kv_idx < window
        return False

    mask = create_block_mask(in_window, None, None, t, t)
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def first_keys_only(layer, x, window, positions=None):  # a window that does not slide: the sequence's start
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)

    def first_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (kv_idx < window)

    mask = create_block_mask(first_window, None, None, t, t, device="cpu")
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def mod_indices_reversed(layer, x, window, positions=None):  # the mod's indices named key first
    t = x.shape[1]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)
    v = split_heads(layer.v(x), layer.n_kv_heads)

    def near(batch, head, key, query):
        return (key <= query) & (query - key < window)

    mask = create_block_mask(near, None, None, t, t, device="cpu")
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


def rope_on_the_projections(layer, x, window, positions=None):  # rotated over d_model, then split
    t = x.shape[1]
    q = split_heads(apply_rope(layer.q(x), positions), layer.n_heads)
    k = split_heads(apply_rope(layer.k(x), positions), layer.n_kv_heads)
    v = split_heads(layer.v(x), layer.n_kv_heads)

    def in_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    mask = create_block_mask(in_window, None, None, t, t, device="cpu")
    return layer.out(merge_heads(flex_attention(q, k, v, block_mask=mask, enable_gqa=True)))


# The contract's cases (issue 44): the old check passed each of these.


def mask_made_on_the_cpu(layer, x, window, positions=None):  # a GPU's scores meet a CPU mask
    t = x.shape[1]
    n_rep = layer.n_heads // layer.n_kv_heads
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions).repeat_interleave(n_rep, dim=1)
    v = split_heads(layer.v(x), layer.n_kv_heads).repeat_interleave(n_rep, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    keep = torch.ones(t, t, dtype=torch.bool).tril() & ~torch.ones(t, t, dtype=torch.bool).tril(-window)
    weights = scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)
    return layer.out(merge_heads(weights @ v))


def course_mask_without_device(layer, x, window, positions=None):  # sliding_window_mask on the CPU
    b, t, _ = x.shape
    n_rep = layer.n_heads // layer.n_kv_heads
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = repeat_kv(apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions), n_rep)
    v = repeat_kv(split_heads(layer.v(x), layer.n_kv_heads), n_rep)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(t, t, window))
    return layer.out(merge_heads(out))


def band_of_diagonals(layer, x, window, positions=None):  # the window as its diagonals: none past t - 1
    t = x.shape[1]
    n_rep = layer.n_heads // layer.n_kv_heads
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions).repeat_interleave(n_rep, dim=1)
    v = split_heads(layer.v(x), layer.n_kv_heads).repeat_interleave(n_rep, dim=1)
    keep = torch.zeros(t, t, dtype=torch.bool, device=x.device)
    for offset in range(window):  # the query's own key, then each one further back
        keep |= torch.ones(t - offset, dtype=torch.bool, device=x.device).diag(-offset)
    weights = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~keep, float("-inf"))
    return layer.out(merge_heads(weights.softmax(dim=-1) @ v))


CONTRACT_WRONG = [
    pytest.param(
        mask_made_on_the_cpu,
        "the first tensor your code makes off that device comes from `torch.ones(…)` at line",
        id="mask-on-cpu",
    ),
    pytest.param(
        course_mask_without_device,
        "called without device=, first reaches `torch.scaled_dot_product_attention(…)`",
        id="course-mask-on-cpu",
    ),
    pytest.param(band_of_diagonals, "only in that it has t = 1 (a single token)", id="band"),
]


@pytest.mark.parametrize(("candidate", "phrase"), CONTRACT_WRONG)
def test_the_contract_catches_what_the_old_cases_passed(candidate, phrase, capsys):
    assert_rejected(check_rotary_window_attention, candidate, phrase, capsys)


WRONG = [
    pytest.param(not_implemented, "not implemented yet", id="stub"),
    pytest.param(rope_on_the_projections, "applies RoPE before the split into heads", id="rope-before-split"),
    pytest.param(
        mod_indices_reversed, "passes this check written `def near(batch, head, query, key):`", id="mod-order"
    ),
    pytest.param(forgot_rope, "has no rotary positions", id="no-rope"),
    pytest.param(
        first_keys_only, "keeps the first `window` keys of the sequence", id="window-does-not-slide"
    ),
    pytest.param(rope_on_queries_only, "rotates the queries but not the keys", id="rope-q-only"),
    pytest.param(rope_on_everything, "rotates the values too", id="rope-v"),
    pytest.param(neox_rope, "rotate-half", id="rope-rotate-half"),
    pytest.param(positions_dropped, "ignores `positions`", id="positions-ignored"),
    pytest.param(pytorch_blog_window, "admits window + 1 keys", id="window-plus-one"),
    pytest.param(window_without_causal, "keys after it", id="window-two-sided"),
    pytest.param(only_causal, "without the window", id="causal-only"),
    pytest.param(tiled_heads, "interleaved instead of grouped", id="interleaved"),
    pytest.param(scaled_by_hand_too, "scales the scores twice", id="scaled-twice"),
    pytest.param(no_out_projection, "forgets the output projection", id="no-out"),
    pytest.param(window_one_short, "one position short", id="window-one-short"),
    pytest.param(positions_added_to_x, "shifted by 1000", id="absolute-positions"),
    pytest.param(keys_as_values, "takes the values from the key projection", id="keys-as-values"),
    pytest.param(python_if_in_mask, "runs under torch.vmap", id="python-if"),
]


@pytest.mark.parametrize(("candidate", "phrase"), WRONG)
def test_names_each_mistake(candidate, phrase, capsys):
    assert_rejected(check_rotary_window_attention, candidate, phrase, capsys)
