"""The checks of notebook 10 reject mistakes written as learners write them, and accept right answers."""

# ruff: noqa: E501  (tables of learner cases)
from __future__ import annotations

import linecache
import math

import pytest
import torch
import torch.nn.functional as F
from check_assertions import assert_accepted, assert_rejected
from einops import rearrange, repeat
from torch import nn

from attn_course import reference
from attn_course.checks import (
    CheckFailed,
    check_alibi_score_mod,
    check_document_mask_mod,
    check_GroupedQueryAttention,
    check_repeat_kv,
    check_sliding_window_flash_attention,
    check_sliding_window_mask,
)


def not_implemented(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# repeat_kv


def repeat_kv_einops(x, n_rep):
    return repeat(x, "b h t d -> b (h r) t d", r=n_rep)


def repeat_kv_expand(x, n_rep):  # as in Hugging Face's LLaMA
    b, h, t, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def repeat_kv_interleave(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=1)


def repeat_kv_tiled(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)


def repeat_kv_cat(x, n_rep):
    return torch.cat([x] * n_rep, dim=1)


def repeat_kv_time_axis(x, n_rep):
    return x.repeat_interleave(n_rep, dim=2)


def repeat_kv_no_merge(x, n_rep):
    return repeat(x, "b h t d -> b h r t d", r=n_rep)


def repeat_kv_reversed(x, n_rep):
    return x.flip(1).repeat_interleave(n_rep, dim=1)


def repeat_kv_detached(x, n_rep):
    return x.detach().repeat_interleave(n_rep, dim=1)


# ---------------------------------------------------------------------------------------------
# GroupedQueryAttention, as a learner writes it (one correct version, and text edits of it)

GQA_SOURCE = """
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
        q = rearrange(self.q(x), "b t (h d) -> b h t d", h=self.n_heads)
        k = rearrange(self.k(x), "b t (h d) -> b h t d", h=self.n_kv_heads)
        v = rearrange(self.v(x), "b t (h d) -> b h t d", h=self.n_kv_heads)
        n_rep = self.n_heads // self.n_kv_heads
        k = repeat_kv_einops(k, n_rep)
        v = repeat_kv_einops(v, n_rep)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)
        return self.out(rearrange(out, "b h t d -> b t (h d)"))
"""


def repeat_kv_by_heads(x, n_rep):  # the repeat count read off the tensor
    return x.repeat_interleave(x.shape[1], dim=1)


def gqa_class(*edits: tuple[str, str]) -> type:
    """The learner's class, with each (old, new) text replacement made (each must apply)."""
    source = GQA_SOURCE
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    namespace = {
        "nn": nn,
        "rearrange": rearrange,
        "repeat_kv_einops": repeat_kv_einops,
        "attention": reference.attention,
        "torch": torch,
        "F": F,
        "math": math,
    }
    filename = f"<learner's GroupedQueryAttention {len(linecache.cache)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)  # as IPython
    exec(compile(source, filename, "exec"), namespace)
    return namespace["GroupedQueryAttention"]


GQA_SDPA = (
    "        out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)",
    "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)",
)
GQA_ENABLE_GQA = (
    (
        "        k = repeat_kv_einops(k, n_rep)\n        v = repeat_kv_einops(v, n_rep)\n",
        "",
    ),
    (
        "        out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)",
        "        out = F.scaled_dot_product_attention(\n"
        "            q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True\n"
        "        )",
    ),
)


# ---------------------------------------------------------------------------------------------
# sliding_window_mask


def window_arange(t_q, t_k, window):
    query_pos = torch.arange(t_q)[:, None] + (t_k - t_q)
    key_pos = torch.arange(t_k)[None, :]
    return (key_pos <= query_pos) & (key_pos > query_pos - window)


def window_tril_triu(t_q, t_k, window):
    ones = torch.ones(t_q, t_k, dtype=torch.bool)
    return ones.tril(diagonal=t_k - t_q) & ones.triu(diagonal=t_k - t_q - window + 1)


def window_le(t_q, t_k, window):
    query_pos = torch.arange(t_q)[:, None] + (t_k - t_q)
    key_pos = torch.arange(t_k)[None, :]
    return (key_pos <= query_pos) & (query_pos - key_pos <= window)


def window_top_left(t_q, t_k, window):
    query_pos = torch.arange(t_q)[:, None]
    key_pos = torch.arange(t_k)[None, :]
    return (key_pos <= query_pos) & (key_pos > query_pos - window)


def window_abs(t_q, t_k, window):
    query_pos = torch.arange(t_q)[:, None] + (t_k - t_q)
    key_pos = torch.arange(t_k)[None, :]
    return (query_pos - key_pos).abs() < window


def window_no_causal(t_q, t_k, window):
    query_pos = torch.arange(t_q)[:, None] + (t_k - t_q)
    key_pos = torch.arange(t_k)[None, :]
    return query_pos - key_pos < window


def window_no_window(t_q, t_k, window):
    return torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)


def window_strict(t_q, t_k, window):
    query_pos = torch.arange(t_q)[:, None] + (t_k - t_q)
    key_pos = torch.arange(t_k)[None, :]
    return (key_pos < query_pos) & (key_pos >= query_pos - window)


def window_shifted_by_one_row(t_q, t_k, window):  # no known mistake: a row-wise description
    query_pos = torch.arange(t_q)[:, None] + (t_k - t_q)
    key_pos = torch.arange(t_k)[None, :]
    mask = (key_pos <= query_pos) & (key_pos > query_pos - window)
    mask[-1] = mask[-1] & (key_pos[0] != query_pos[-1, 0])
    return mask


def window_keys_on_rows(t_q, t_k, window):  # the right mask built with the keys along the rows
    return window_arange(t_q, t_k, window).T  # (t_k, t_q)


def window_without_itself(t_q, t_k, window):  # strictly before the query
    query_pos = torch.arange(t_q)[:, None] + (t_k - t_q)
    key_pos = torch.arange(t_k)[None, :]
    return (key_pos < query_pos) & (key_pos > query_pos - window)


def window_float(t_q, t_k, window):
    return window_arange(t_q, t_k, window).float()


# ---------------------------------------------------------------------------------------------
# sliding_window_flash_attention, as a learner writes it (one correct version, and text edits of it)

WINDOW_FLASH_SOURCE = """
def sliding_window_flash_attention(q, k, v, window, block_size=64):
    t_q, d = q.shape[-2:]
    t_k = k.shape[-2]
    offset = t_k - t_q
    outs = []
    for qs in range(0, t_q, block_size):
        q_blk = q[..., qs : qs + block_size, :] / math.sqrt(d)
        rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device) + offset
        m = torch.full((*q_blk.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
        denom = torch.zeros_like(m)
        acc = torch.zeros((*q_blk.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
        first = max(0, qs + offset - window + 1)
        start = (first // block_size) * block_size
        for ks in range(start, t_k, block_size):
            if ks > rows[-1]:
                break
            s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)
            cols = torch.arange(ks, ks + s.shape[-1], device=q.device)
            distance = rows[:, None] - cols[None, :]
            s = s.masked_fill((distance < 0) | (distance >= window), -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
            p = torch.exp(s - m_safe)
            alpha = torch.exp(m - m_safe)
            denom = alpha * denom + p.sum(dim=-1, keepdim=True)
            acc = alpha * acc + p @ v[..., ks : ks + block_size, :]
            m = m_new
        outs.append(acc / denom)
    return torch.cat(outs, dim=-2)
"""


def window_flash(*edits: tuple[str, str]):
    source = WINDOW_FLASH_SOURCE
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    namespace = {"torch": torch, "math": math, "F": F}
    filename = f"<learner's sliding_window_flash_attention {len(linecache.cache)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)  # as IPython
    exec(compile(source, filename, "exec"), namespace)
    return namespace["sliding_window_flash_attention"]


def window_flash_masked_full(q, k, v, window, block_size=64):
    t_q, t_k = q.shape[-2], k.shape[-2]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=window_arange(t_q, t_k, window))


# ---------------------------------------------------------------------------------------------
# alibi_score_mod


def paper_slopes(n):  # the ALiBi paper's get_slopes, as a learner copies it from its repository
    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    extra = paper_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    return get_slopes_power_of_2(closest_power_of_2) + extra


def alibi_odd_extra_slopes(n_heads):  # the extra heads' slopes from 2n's list, starting at the second
    n = 2 ** math.floor(math.log2(n_heads))
    slopes = paper_slopes(n) if n == n_heads else paper_slopes(n) + paper_slopes(2 * n)[1::2][: n_heads - n]
    table = torch.tensor(slopes)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h] * (kv_idx - q_idx)

    return score_mod


def alibi_tensor_slopes(n_heads):
    slopes = torch.tensor(paper_slopes(n_heads))

    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx)

    return score_mod


def alibi_exp2(n_heads):  # the exponent of each head computed inside the mod
    n = 2 ** int(math.log2(n_heads))

    def score_mod(score, b, h, q_idx, kv_idx):
        exponent = torch.where(h < n, -8.0 * (h + 1) / n, -4.0 * (2 * (h - n) + 1) / n)
        return score + torch.exp2(exponent) * (kv_idx - q_idx)

    return score_mod


def alibi_abs(n_heads):  # -|i - j| is the same bias at and before the diagonal
    slopes = torch.tensor(paper_slopes(n_heads), dtype=torch.float32)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    return score_mod


def alibi_plain_formula(n_heads):  # right for 2, 4 and 8 heads only
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def alibi_wrong_sign(n_heads):
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (q_idx - kv_idx)

    return score_mod


def alibi_one_slope(n_heads):
    slope = 2 ** (-8 / n_heads)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slope * (kv_idx - q_idx)

    return score_mod


def alibi_next_power_of_two(n_heads):  # any head count read as the power of two above it
    n = 2 ** math.ceil(math.log2(n_heads))
    slopes = torch.tensor([2 ** (-8 * (h + 1) / n) for h in range(n_heads)])

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def alibi_from_zero(n_heads):
    slopes = torch.tensor([2 ** (-8 * h / n_heads) for h in range(n_heads)])

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def alibi_eight_heads(n_heads):
    slopes = torch.tensor([2.0 ** -(h + 1) for h in range(n_heads)])

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def alibi_int_distance(
    n_heads,
):  # the learner's own error inside flex_attention's call: theirs, at their line
    slopes = torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])

    def score_mod(score, b, h, q_idx, kv_idx):
        distance = int(q_idx - kv_idx)
        return score - slopes[h] * distance

    return score_mod


def alibi_bias_only(n_heads):
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)

    def score_mod(score, b, h, q_idx, kv_idx):
        return slopes[h] * (kv_idx - q_idx)

    return score_mod


def alibi_python_if(n_heads):
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)

    def score_mod(score, b, h, q_idx, kv_idx):
        if kv_idx > q_idx:
            return score
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def alibi_applied(n_heads):
    return alibi_tensor_slopes(n_heads)(torch.zeros(()), 0, 0, 0, 0)


def alibi_squared_distance(n_heads):
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx) ** 2

    return score_mod


# ---------------------------------------------------------------------------------------------
# document_mask_mod


def document_right(document_ids):
    def mask_mod(b, h, q_idx, kv_idx):
        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)

    return mask_mod


def document_with_and_masks(document_ids):
    from torch.nn.attention.flex_attention import and_masks

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def same_doc(b, h, q_idx, kv_idx):
        return document_ids[q_idx] == document_ids[kv_idx]

    return and_masks(causal, same_doc)


def document_causal_only(document_ids):
    def mask_mod(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    return mask_mod


def document_same_doc_only(document_ids):
    def mask_mod(b, h, q_idx, kv_idx):
        return document_ids[q_idx] == document_ids[kv_idx]

    return mask_mod


def document_strict(document_ids):
    def mask_mod(b, h, q_idx, kv_idx):
        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx > kv_idx)

    return mask_mod


def document_kv_minus_one(document_ids):  # no known mistake: the message names a pair
    def mask_mod(b, h, q_idx, kv_idx):
        return (document_ids[q_idx] == document_ids[(kv_idx - 1).clamp(min=0)]) & (q_idx >= kv_idx)

    return mask_mod


def document_python_and(document_ids):
    def mask_mod(b, h, q_idx, kv_idx):
        return document_ids[q_idx] == document_ids[kv_idx] and q_idx >= kv_idx

    return mask_mod


def document_int_mask(document_ids):
    def mask_mod(b, h, q_idx, kv_idx):
        return ((document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)).int()

    return mask_mod


# ---------------------------------------------------------------------------------------------

CORRECT = [
    pytest.param(check_repeat_kv, reference.repeat_kv, id="repeat_kv-reference"),
    pytest.param(check_repeat_kv, repeat_kv_einops, id="repeat_kv-einops"),
    pytest.param(check_repeat_kv, repeat_kv_expand, id="repeat_kv-expand-reshape"),
    pytest.param(check_repeat_kv, repeat_kv_interleave, id="repeat_kv-repeat_interleave"),
    pytest.param(check_GroupedQueryAttention, reference.GroupedQueryAttention, id="gqa-reference"),
    pytest.param(check_GroupedQueryAttention, gqa_class(), id="gqa-learner"),
    pytest.param(check_GroupedQueryAttention, gqa_class(GQA_SDPA), id="gqa-sdpa"),
    pytest.param(check_GroupedQueryAttention, gqa_class(*GQA_ENABLE_GQA), id="gqa-sdpa-enable_gqa"),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(*[(f"{n}, bias=False)", f"{n})") for n in ("d_model", "n_kv_heads * d_head")]),
        id="gqa-with-bias",
    ),
    pytest.param(check_sliding_window_mask, reference.sliding_window_mask, id="window-reference"),
    pytest.param(check_sliding_window_mask, window_arange, id="window-arange"),
    pytest.param(check_sliding_window_mask, window_tril_triu, id="window-tril-triu"),
    pytest.param(
        check_sliding_window_flash_attention,
        reference.sliding_window_flash_attention,
        id="window-flash-reference",
    ),
    pytest.param(check_sliding_window_flash_attention, window_flash(), id="window-flash-learner"),
    pytest.param(check_alibi_score_mod, reference.alibi_score_mod, id="alibi-reference"),
    pytest.param(check_alibi_score_mod, alibi_tensor_slopes, id="alibi-tensor-of-slopes"),
    pytest.param(check_alibi_score_mod, alibi_exp2, id="alibi-exp2-of-h"),
    pytest.param(check_alibi_score_mod, alibi_abs, id="alibi-abs-distance"),
    pytest.param(check_document_mask_mod, reference.document_mask_mod, id="document-reference"),
    pytest.param(check_document_mask_mod, document_right, id="document-learner"),
    pytest.param(check_document_mask_mod, document_with_and_masks, id="document-and_masks"),
]

WRONG = [
    pytest.param(check_repeat_kv, not_implemented, "not implemented yet", id="repeat_kv-stub"),
    pytest.param(check_repeat_kv, repeat_kv_tiled, "interleaved instead of grouped", id="repeat_kv-tiled"),
    pytest.param(check_repeat_kv, repeat_kv_cat, "interleaved instead of grouped", id="repeat_kv-cat"),
    pytest.param(check_repeat_kv, repeat_kv_time_axis, "along the time axis", id="repeat_kv-time-axis"),
    pytest.param(check_repeat_kv, repeat_kv_no_merge, "Merge the new axis into the heads", id="repeat_kv-5d"),
    pytest.param(
        check_repeat_kv, repeat_kv_reversed, "the right heads in the wrong places", id="repeat_kv-reversed"
    ),
    pytest.param(check_repeat_kv, repeat_kv_detached, "No gradient flows", id="repeat_kv-detached"),
    pytest.param(check_GroupedQueryAttention, not_implemented, "not implemented yet", id="gqa-stub"),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(
            ("k = repeat_kv_einops(k, n_rep)", "k = k.repeat(1, n_rep, 1, 1)"),
            ("v = repeat_kv_einops(v, n_rep)", "v = v.repeat(1, n_rep, 1, 1)"),
        ),
        "interleaved instead of grouped",
        id="gqa-interleaved",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(("n_kv_heads * d_head, bias=False)", "d_model, bias=False)")),
        "k and v project to the n_kv_heads key/value heads only",
        id="gqa-full-size-kv",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(
            (
                'return self.out(rearrange(out, "b h t d -> b t (h d)"))',
                'return rearrange(out, "b h t d -> b t (h d)")',
            )
        ),
        "forgets the output projection",
        id="gqa-no-out",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(("attention(q, k, v, mask=mask, is_causal=is_causal)", "attention(q, k, v, mask=mask)")),
        "ignores is_causal=True",
        id="gqa-ignores-causal",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(("v = repeat_kv_einops(v, n_rep)", "v = v.repeat(1, n_rep, 1, 1)")),
        "shares the value heads interleaved (query head j reads value head j % n_kv_heads)",
        id="gqa-only-values-interleaved",
    ),
    # No table entry matches these: the probe reads the layer's merged heads (issue 27, family 1).
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(("attention(q, k, v, mask=mask", "attention(q, k, k, mask=mask")),
        "mixes the keys k instead of the values v",
        id="gqa-probe-keys-as-values",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(("return self.out(rearrange(out,", "return self.out(1.5 * rearrange(out,")),
        "gives 1.5 times a weighted average of the values",
        id="gqa-probe-factor",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(
            (
                "attention(q, k, v, mask=mask, is_causal=is_causal)",
                "attention(q, k, v, mask=mask, is_causal=is_causal)\n        out = out.flip(-2) if is_causal else out",
            )
        ),
        "is_causal=True query i attends keys 0 … i only",
        id="gqa-probe-causal-rows-reversed",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(
            (
                "self.out = nn.Linear(d_model, d_model, bias=False)",
                "self.out = nn.Linear(d_model, d_model, bias=False)\n"
                "        self.scale = nn.Parameter(torch.ones(1))",
            )
        ),
        "parameters besides",
        id="gqa-extra-parameter",
    ),
    pytest.param(
        check_sliding_window_mask,
        window_keys_on_rows,
        "as the right mask transposed does",
        id="window-keys-on-rows",
    ),
    pytest.param(
        check_sliding_window_mask,
        window_without_itself,
        "leaves out each query's own key",
        id="window-no-self",
    ),
    pytest.param(
        check_alibi_score_mod,
        alibi_next_power_of_two,
        "the head count taken as the power of two 4",
        id="alibi-ceil",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(
            (
                "rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device) + offset",
                "rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device)",
            )
        ),
        "so the rows' positions, the mask and the loop bound all carry that offset",
        id="window-flash-rows-without-offset",
    ),
    pytest.param(check_sliding_window_mask, not_implemented, "not implemented yet", id="window-stub"),
    pytest.param(
        check_sliding_window_mask, window_le, "window + 1 keys (off by one)", id="window-off-by-one"
    ),
    pytest.param(check_sliding_window_mask, window_top_left, "is aligned top-left", id="window-top-left"),
    pytest.param(check_sliding_window_mask, window_abs, "lets a query see its future", id="window-abs"),
    pytest.param(
        check_sliding_window_mask, window_no_causal, "also require p - j >= 0", id="window-no-causal"
    ),
    pytest.param(check_sliding_window_mask, window_no_window, "ignores the window", id="window-causal-only"),
    pytest.param(
        check_sliding_window_mask, window_strict, "leaves out the query's own position", id="window-strict"
    ),
    pytest.param(check_sliding_window_mask, window_shifted_by_one_row, "rows [", id="window-unknown"),
    pytest.param(check_sliding_window_mask, window_float, "should be a boolean tensor", id="window-float"),
    pytest.param(
        check_sliding_window_flash_attention, not_implemented, "not implemented yet", id="window-flash-stub"
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(("(distance >= window)", "(distance > window)")),
        "window + 1 keys (off by one)",
        id="window-flash-off-by-one",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(("offset = t_k - t_q", "offset = 0")),
        "aligns the window top-left",
        id="window-flash-top-left",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(("(distance < 0) | (distance >= window)", "distance < 0")),
        "does not mask the keys older than the window",
        id="window-flash-edge-unmasked",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(
            ("start = (first // block_size) * block_size", "start = -(-first // block_size) * block_size")
        ),
        "one block late",
        id="window-flash-late-start",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(("start = (first // block_size) * block_size", "start = 0")),
        "every key block up to the diagonal",
        id="window-flash-visits-causal",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(
            ("start = (first // block_size) * block_size", "start = 0"),
            ("            if ks > rows[-1]:\n                break\n", ""),
        ),
        "every key block: all T² scores",
        id="window-flash-visits-all",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash_masked_full,
        "fused attention",
        id="window-flash-sdpa",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(
            ("            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)\n", ""),
            ("torch.exp(s - m_safe)", "torch.exp(s - m_new)"),
            ("torch.exp(m - m_safe)", "torch.exp(m - m_new)"),
        ),
        "The first NaN is made at line 23 of your code, `p = torch.exp(s - m_new)`: −inf − (−inf)",
        id="window-flash-unguarded-max",  # NaN read as "attends nothing" before (blind set D, #100)
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(
            (
                'k = rearrange(self.k(x), "b t (h d) -> b h t d"',
                'k = rearrange(self.k(x), "b t (d h) -> b h t d"',
            )
        ),
        "has its keys split into heads as (d h)",
        id="gqa-keys-strided",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(("v = repeat_kv_einops(v, n_rep)", "v = repeat_kv_einops(v, n_rep).flip(1)")),
        "gives each head the values of another head",
        id="gqa-value-heads-reversed",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(('"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"')),
        "merges them as (d h)",
        id="gqa-merged-feature-first",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(
            (
                "rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device) + offset",
                "rows = torch.arange(qs, qs + block_size, device=q.device) + offset",
            )
        ),
        "is the length of the last, ragged block (37 = 4 × 8 + 5)",
        id="window-flash-full-last-block",
    ),
    pytest.param(check_repeat_kv, repeat_kv_by_heads, "the factor 2 (`n_rep`", id="repeat-kv-by-heads"),
    pytest.param(
        check_alibi_score_mod, alibi_odd_extra_slopes, "take the slopes at positions [1]", id="alibi-odd"
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(("n_rep = self.n_heads // self.n_kv_heads", "n_rep = self.n_heads")),
        "the shared heads were repeated too often",
        id="gqa-repeated-n-heads-times",
    ),
    pytest.param(check_alibi_score_mod, not_implemented, "not implemented yet", id="alibi-stub"),
    pytest.param(check_alibi_score_mod, alibi_wrong_sign, "wrong sign", id="alibi-sign"),
    pytest.param(check_alibi_score_mod, alibi_one_slope, "same slope for every head", id="alibi-one-slope"),
    pytest.param(check_alibi_score_mod, alibi_from_zero, "one head early", id="alibi-from-zero"),
    pytest.param(check_alibi_score_mod, alibi_eight_heads, "2^-(h+1) of 8 heads", id="alibi-eight-heads"),
    pytest.param(check_alibi_score_mod, alibi_bias_only, "returns only the bias", id="alibi-bias-only"),
    pytest.param(
        check_alibi_score_mod, alibi_int_distance, "`distance = int(q_idx - kv_idx)`", id="alibi-mod-raises"
    ),
    pytest.param(check_alibi_score_mod, alibi_python_if, "not Python `if`", id="alibi-python-if"),
    pytest.param(check_alibi_score_mod, alibi_applied, "should return a function", id="alibi-not-a-function"),
    pytest.param(check_alibi_score_mod, alibi_squared_distance, "per head, ALiBi adds", id="alibi-unknown"),
    pytest.param(
        check_alibi_score_mod,
        alibi_plain_formula,
        "the plain 2^(-8(h+1)/H) formula for a head count that is not a power of two",
        id="alibi-plain-formula",
    ),
    pytest.param(check_document_mask_mod, not_implemented, "not implemented yet", id="document-stub"),
    pytest.param(check_document_mask_mod, document_causal_only, "documents leak", id="document-leak"),
    pytest.param(
        check_document_mask_mod,
        document_same_doc_only,
        "later tokens of its own document",
        id="document-not-causal",
    ),
    pytest.param(check_document_mask_mod, document_strict, "leaves out the diagonal", id="document-strict"),
    pytest.param(
        check_document_mask_mod, document_kv_minus_one, "expected the opposite", id="document-unknown"
    ),
    pytest.param(check_document_mask_mod, document_python_and, "not Python `if`, `and`", id="document-and"),
    pytest.param(check_document_mask_mod, document_int_mask, "should be a boolean tensor", id="document-int"),
]


@pytest.mark.parametrize(("check", "candidate"), CORRECT)
def test_accepts_right_answers(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


@pytest.mark.parametrize(("check", "candidate", "phrase"), WRONG)
def test_names_each_mistake(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


def test_gqa_check_rejects_a_layer_instead_of_the_class(capsys):
    assert_rejected(
        check_GroupedQueryAttention, reference.GroupedQueryAttention(16, 4, 2), "your class itself", capsys
    )


def test_no_repair_turns_a_rows_maximum_into_the_whole_tensors():
    """`s.amax()` for `s.amax(dim=-1, keepdim=True)` removes the NaN by a shared shift, which is no fix."""
    unguarded = window_flash(
        ("            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)\n", ""),
        ("torch.exp(s - m_safe)", "torch.exp(s - m_new)"),
        ("torch.exp(m - m_safe)", "torch.exp(m - m_new)"),
    )
    with pytest.raises(AssertionError) as failure:
        check_sliding_window_flash_attention(unguarded)
    assert "passes this check written" not in str(failure.value)


def window_dense_keys_from_end(q, k, v, window, block_size=64):  # no tiles, keys numbered -T_k … -1
    t_q, t_k = q.shape[-2], k.shape[-2]
    p = torch.arange(t_q)[:, None]
    j = torch.arange(t_k)[None, :] - t_k
    allowed = (p - j >= 0) & (p - j < window)
    s = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1) @ v


def window_dense_offset_on_keys(q, k, v, window, block_size=64):  # the offset added to the keys instead
    t_q, t_k = q.shape[-2], k.shape[-2]
    p = torch.arange(t_q)[:, None]
    j = torch.arange(t_k)[None, :] + (t_k - t_q)
    allowed = (p - j >= 0) & (p - j < window)
    s = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1) @ v


def window_dense_keys_reversed(q, k, v, window, block_size=64):  # key j numbered T_k - 1 - j
    t_q, t_k = q.shape[-2], k.shape[-2]
    p = torch.arange(t_q)[:, None] + t_k - t_q
    j = (t_k - 1 - torch.arange(t_k))[None, :]
    allowed = (p - j >= 0) & (p - j < window)
    s = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1) @ v


KEY_COLUMNS = "cols = torch.arange(ks, ks + s.shape[-1], device=q.device)"


@pytest.mark.parametrize(
    ("candidate", "phrase"),
    [
        pytest.param(
            window_dense_keys_from_end, "attends no key at all in rows 7–36", id="dense-keys-from-end"
        ),
        pytest.param(
            window_dense_offset_on_keys,
            "(it is right with T_q = T_k, where the offset is 0): query i sits at position p = i + T_k − T_q "
            "and key j at position j",
            id="dense-offset-on-keys",
        ),
        pytest.param(
            window_dense_keys_reversed, "row 0 attends key 36, where its window is key 0", id="dense-reversed"
        ),
        pytest.param(
            window_flash((KEY_COLUMNS, KEY_COLUMNS + " - offset")),
            "attends no key at all in rows 0–20",
            id="tiled-keys-minus-offset",
        ),
        pytest.param(  # told before that "the key loop stops a block too early", which it does not
            window_flash((KEY_COLUMNS, KEY_COLUMNS + " - t_k")),
            "attends no key at all in rows 0–36",
            id="tiled-keys-from-the-end",
        ),
        pytest.param(
            window_flash((KEY_COLUMNS, "cols = torch.arange(s.shape[-1], device=q.device)")),
            "attends no key at all in rows 15–36",
            id="tiled-keys-tile-local",
        ),
    ],
)
def test_window_keys_numbered_wrongly_are_not_told_to_guard_the_maximum(candidate, phrase, capsys):
    """Keys numbered wrongly leave rows with no key: said as observed, not as notebook 06's missing guard
    (a dense pass has no running maximum, a tiled one here has its guard), nor as a loop that stops early."""
    assert_rejected(check_sliding_window_flash_attention, candidate, phrase, capsys)
    with pytest.raises(CheckFailed) as failure:
        check_sliding_window_flash_attention(candidate)
    assert "m_safe" not in str(failure.value) and "block too early" not in str(failure.value)


# ---------------------------------------------------------------------------------------------
# The contracts of notebook 10 (issue 44): inputs the text allows and the hand-picked cases never tried.
# Each wrong program below passed the checks before their contracts drove them (verified against main at
# 44ff56e) and is right on every hand-picked case. alibi_score_mod has none: its contract (5 heads and 1,
# a batch of 2, T_q != T_k) found no learner-style program that its six head counts let through.


def repeat_kv_view_flattened(x, n_rep):  # .view where reshape is needed: fine while x is contiguous
    b, h, t, d = x.shape
    return x.view(b * h, 1, t, d).expand(b * h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def repeat_kv_filled(x, n_rep):  # a new tensor of the default dtype, filled head by head
    b, h, t, d = x.shape
    out = torch.empty(b, h * n_rep, t, d)
    for j in range(h * n_rep):
        out[:, j] = x[:, j // n_rep]
    return out


def window_clamped_offset(t_q, t_k, window):  # the offset clamped at 0: right whenever t_k >= t_q
    query_pos = torch.arange(t_q)[:, None] + max(t_k - t_q, 0)
    key_pos = torch.arange(t_k)[None, :]
    return (key_pos <= query_pos) & (query_pos - key_pos < window)


def document_dense(document_ids):  # the (T, T) mask built once, looked up pair by pair
    t = len(document_ids)
    allowed = (document_ids[:, None] == document_ids[None, :]) & torch.ones(t, t, dtype=torch.bool).tril()

    def mask_mod(b, h, q_idx, kv_idx):
        return allowed[q_idx, kv_idx]

    return mask_mod


WINDOW_FLASH_ON_CPU = (  # every tensor it makes on the default device: a GPU run meets two devices
    (", device=q.device) + offset", ") + offset"),
    (", dtype=q.dtype, device=q.device)\n        denom", ", dtype=q.dtype)\n        denom"),
    (", dtype=q.dtype, device=q.device)\n        first", ", dtype=q.dtype)\n        first"),
    (
        "cols = torch.arange(ks, ks + s.shape[-1], device=q.device)",
        "cols = torch.arange(ks, ks + s.shape[-1])",
    ),
)
WINDOW_FLASH_VIEWS = (  # the batch axes flattened with .view, as if q, k, v were always contiguous
    (
        "    t_q, d = q.shape[-2:]\n",
        "    batch = q.shape[:-2]\n    t_q, d = q.shape[-2:]\n"
        "    q, k, v = q.view(-1, t_q, d), k.view(-1, k.shape[-2], d), v.view(-1, k.shape[-2], v.shape[-1])\n",
    ),
    ("return torch.cat(outs, dim=-2)", "return torch.cat(outs, dim=-2).view(*batch, t_q, -1)"),
)
GQA_PADDING_MASK_ONLY = (
    ("            mask = mask.unsqueeze(-3)", "            mask = mask.view(x.shape[0], 1, 1, -1)"),
)
GQA_OWN_CAUSAL_MASK = (
    (
        "        if mask is not None:\n            mask = mask.unsqueeze(-3)\n"
        "        out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)",
        "        t = x.shape[1]\n"
        "        allowed = torch.ones(t, t, dtype=torch.bool)\n"
        "        if is_causal:\n"
        "            allowed = allowed.tril()\n"
        "        if mask is not None:\n"
        "            allowed = allowed & mask.unsqueeze(-3)\n"
        "        out, _ = attention(q, k, v, mask=allowed)",
    ),
)

CONTRACT_WRONG = [
    pytest.param(
        check_repeat_kv,
        repeat_kv_view_flattened,
        "`x` passed as a transposed view, (B, T, H_kv, d).transpose(1, 2)",
        id="repeat-kv-view-of-a-transposed-x",
    ),
    pytest.param(
        check_repeat_kv,
        repeat_kv_filled,
        "has dtype float32 for float64 inputs: it must have the inputs' dtype",
        id="repeat-kv-default-dtype",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(*GQA_PADDING_MASK_ONLY),
        "`mask` (2, 1, 1, 25) cannot broadcast",
        id="gqa-padding-mask-only",
    ),
    pytest.param(
        check_GroupedQueryAttention,
        gqa_class(*GQA_OWN_CAUSAL_MASK),
        "comes from `torch.ones(…)` at line 20 of your code",
        id="gqa-mask-on-the-default-device",
    ),
    pytest.param(
        check_sliding_window_mask,
        window_clamped_offset,
        "lets the first queries see keys although t_q > t_k",
        id="window-clamped-offset",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(*WINDOW_FLASH_ON_CPU),
        "the first tensor your code makes off that device comes from `torch.arange(…)`",
        id="window-flash-default-device",
    ),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(*WINDOW_FLASH_VIEWS),
        "`q` passed as a transposed view, (B, T_q, H, d).transpose(1, 2)",
        id="window-flash-view-of-a-transposed-q",
    ),
    pytest.param(
        check_document_mask_mod,
        document_dense,
        "builds a tensor of shape (256, 256), 65,536 entries, before any pair is asked for",
        id="document-dense-mask",
    ),
]


@pytest.mark.parametrize(("check", "candidate", "phrase"), CONTRACT_WRONG)
def test_a_contracts_case_names_what_the_hand_picked_cases_let_through(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


def test_a_clamped_window_is_a_known_mistake_found_by_the_pipeline():
    with pytest.raises(CheckFailed) as failure:
        check_sliding_window_mask(window_clamped_offset)
    assert failure.value.finding == "known-mistake"


def repeat_kv_stacked(x, n_rep):  # a loop over the heads
    return torch.stack([x[:, i] for i in range(x.shape[1]) for _ in range(n_rep)], dim=1)


def repeat_kv_index_select(x, n_rep):  # the source head of each head, as an index made on x's device
    heads = torch.arange(x.shape[1] * n_rep, device=x.device) // n_rep
    return x.index_select(1, heads)


def repeat_kv_flatten(x, n_rep):
    return x.unsqueeze(2).expand(-1, -1, n_rep, -1, -1).flatten(1, 2)


def window_loops(t_q, t_k, window):  # a Python loop over the pairs
    rows = [[0 <= i + t_k - t_q - j < window for j in range(t_k)] for i in range(t_q)]
    return torch.tensor(rows, dtype=torch.bool).reshape(t_q, t_k)


def alibi_float64_slopes(n_heads):  # slopes kept in float64: flex_attention takes the score it returns
    slopes = torch.tensor(paper_slopes(n_heads), dtype=torch.float64)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def document_where(document_ids):
    ids = document_ids.clone()

    def mask_mod(b, h, q_idx, kv_idx):
        return torch.where(q_idx >= kv_idx, ids[q_idx] == ids[kv_idx], False)

    return mask_mod


WINDOW_FLASH_RESHAPED_FLOAT64 = (  # batch axes flattened with reshape, float64 inside, q's dtype out
    (
        "    t_q, d = q.shape[-2:]\n",
        "    batch, dtype = q.shape[:-2], q.dtype\n    t_q, d = q.shape[-2:]\n"
        "    q, k, v = (x.reshape(-1, x.shape[-2], x.shape[-1]).double() for x in (q, k, v))\n",
    ),
    ("return torch.cat(outs, dim=-2)", "return torch.cat(outs, dim=-2).reshape(*batch, t_q, -1).to(dtype)"),
)
GQA_EINSUM = (  # scores by einsum, its own causal mask on x's device, a mask given a head axis by indexing
    (
        "        if mask is not None:\n            mask = mask.unsqueeze(-3)\n"
        "        out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)",
        "        t = x.shape[1]\n"
        "        scores = torch.einsum('bhqd,bhkd->bhqk', q, k) / math.sqrt(q.shape[-1])\n"
        "        allowed = torch.ones(t, t, dtype=torch.bool, device=x.device)\n"
        "        if is_causal:\n"
        "            allowed = allowed.tril()\n"
        "        if mask is not None:\n"
        "            allowed = allowed & mask[:, None]\n"
        "        weights = scores.masked_fill(~allowed, float('-inf')).softmax(dim=-1)\n"
        "        out = torch.einsum('bhqk,bhkd->bhqd', weights, v)",
    ),
)

CONTRACT_RIGHT = [
    pytest.param(check_repeat_kv, repeat_kv_stacked, id="repeat-kv-stacked"),
    pytest.param(check_repeat_kv, repeat_kv_index_select, id="repeat-kv-index-select"),
    pytest.param(check_repeat_kv, repeat_kv_flatten, id="repeat-kv-flatten"),
    pytest.param(check_GroupedQueryAttention, gqa_class(*GQA_EINSUM), id="gqa-einsum"),
    pytest.param(check_sliding_window_mask, window_loops, id="window-loops"),
    pytest.param(
        check_sliding_window_flash_attention,
        window_flash(*WINDOW_FLASH_RESHAPED_FLOAT64),
        id="window-flash-f64",
    ),
    pytest.param(check_alibi_score_mod, alibi_float64_slopes, id="alibi-float64-slopes"),
    pytest.param(check_document_mask_mod, document_where, id="document-where"),
]


@pytest.mark.parametrize(("check", "candidate"), CONTRACT_RIGHT)
def test_right_answers_in_other_styles_pass_every_contract_case(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)
