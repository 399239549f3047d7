"""The checks of notebook 04 reject known mistakes with the right message, accept right answers."""

# ruff: noqa: E501  (tables of learner cases, one case a line)
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from check_assertions import assert_accepted, assert_rejected, cpu_standing_in_for_cuda
from einops import rearrange
from learner_code import MERGE, MHA, SPLIT, learner
from torch import nn

from attn_course import reference
from attn_course.checks import check_merge_heads, check_MultiHeadAttention, check_split_heads

# ---------------------------------------------------------------------------------------------
# split_heads and merge_heads


def split_view_transpose(x, n_heads):
    b, t, d_model = x.shape
    return x.view(b, t, n_heads, d_model // n_heads).transpose(1, 2)


def split_einops(x, n_heads):
    return rearrange(x, "b t (h d) -> b h t d", h=n_heads)


def split_stack_chunks(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def split_reshape_only(x, n_heads):
    b, t, d_model = x.shape
    return x.reshape(b, n_heads, t, d_model // n_heads)


def split_d_h(x, n_heads):
    b, t, d_model = x.shape
    return x.view(b, t, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


def split_no_transpose(x, n_heads):
    b, t, d_model = x.shape
    return x.view(b, t, n_heads, d_model // n_heads)


def split_heads_as_width(x, n_heads):
    return rearrange(x, "b t (h d) -> b h t d", d=n_heads)


def split_detached(x, n_heads):
    return split_einops(x, n_heads).detach()


def merge_transpose_reshape(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def merge_contiguous_view(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).contiguous().view(b, t, h * d)


def merge_einops(x):
    return rearrange(x, "b h t d -> b t (h d)")


def merge_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_reshape_only(x):
    b, h, t, d = x.shape
    return x.reshape(b, t, h * d)


def merge_d_h(x):
    return rearrange(x, "b h t d -> b t (d h)")


def merge_not_flattened(x):
    return x.transpose(1, 2)


def merge_view_after_transpose(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).view(b, t, h * d)


def merge_with_n_heads(x, n_heads):
    return merge_einops(x)


def not_implemented(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention


class PlainMHA(nn.Module):
    """Multi-head attention written out with view and transpose, each knob a possible mistake."""

    def __init__(
        self,
        d_model,
        n_heads,
        bias=True,
        *,
        scale="d_k",
        out_proj=True,
        split="transpose",
        merge="transpose",
        order="qkv",
        use_mask=True,
        invert_mask=False,
        use_causal=True,
        softmax_dim=-1,
        head_axis=True,
    ):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.scale, self.out_proj, self.split, self.merge, self.order = scale, out_proj, split, merge, order
        self.use_mask, self.invert_mask, self.use_causal = use_mask, invert_mask, use_causal
        self.softmax_dim, self.head_axis = softmax_dim, head_axis

    def heads(self, x):
        b, t, d_model = x.shape
        h = self.n_heads
        if self.split == "reshape":
            return x.reshape(b, h, t, d_model // h)
        if self.split == "d h":
            return x.view(b, t, d_model // h, h).permute(0, 3, 1, 2)
        return x.view(b, t, h, d_model // h).transpose(1, 2)

    def forward(self, x, mask=None, is_causal=False, context=None):
        b, t, d_model = x.shape
        qkv = self.qkv(x)
        if self.order == "per-head":
            q, k, v = qkv.view(b, t, self.n_heads, 3, -1).permute(3, 0, 2, 1, 4)
        else:
            chunks = dict(zip(self.order, qkv.split(d_model, dim=-1), strict=True))
            q, k, v = (self.heads(chunks[name]) for name in "qkv")
        if context is not None:
            _, k, v = (self.heads(part) for part in self.qkv(context).split(d_model, dim=-1))
        d_k = q.shape[-1]
        divisor = {"d_k": math.sqrt(d_k), "d_model": math.sqrt(d_model), "none": 1.0}[self.scale]
        scores = q @ k.transpose(-2, -1) / divisor
        if mask is not None and self.use_mask:
            mask = mask.unsqueeze(-3) if self.head_axis else mask
            scores = scores.masked_fill(mask if self.invert_mask else ~mask, float("-inf"))
        if is_causal and self.use_causal:
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(diagonal=1)
            scores = scores.masked_fill(future, float("-inf"))
        heads = torch.softmax(scores, dim=self.softmax_dim) @ v
        if self.merge == "reshape":
            merged = heads.reshape(b, t, d_model)
        elif self.merge == "d h":
            merged = heads.permute(0, 2, 3, 1).reshape(b, t, d_model)
        else:
            merged = heads.transpose(1, 2).reshape(b, t, d_model)
        return self.out(merged) if self.out_proj else merged


class SdpaMHA(nn.Module):
    """The fused path: einops and F.scaled_dot_product_attention."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, is_causal=False, context=None):
        q, k, v = rearrange(self.qkv(x), "b t (three h d) -> three b h t d", three=3, h=self.n_heads)
        if context is not None:
            pattern = "b t (three h d) -> three b h t d"
            _, k, v = rearrange(self.qkv(context), pattern, three=3, h=self.n_heads)
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        else:
            t = x.shape[1]
            allowed = mask.unsqueeze(-3)
            if is_causal:
                allowed = allowed & torch.ones(t, t, dtype=torch.bool).tril()
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.out(rearrange(out, "b h t d -> b t (h d)"))


class OwnAttentionMHA(nn.Module):
    """Calls the learner's `attention` of notebook 03 (here: the reference) on all heads at once."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, is_causal=False, context=None):
        q, k, v = (reference.split_heads(part, self.n_heads) for part in self.qkv(x).chunk(3, dim=-1))
        if context is not None:
            parts = self.qkv(context).chunk(3, dim=-1)
            _, k, v = (reference.split_heads(part, self.n_heads) for part in parts)
        mask = None if mask is None else mask[..., None, :, :]
        out, _ = reference.attention(q, k, v, mask=mask, is_causal=is_causal)
        return self.out(reference.merge_heads(out))


class LoopMHA(nn.Module):
    """One single-head attention per head, in a Python loop, concatenated."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, is_causal=False, context=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if context is not None:
            _, k, v = self.qkv(context).chunk(3, dim=-1)
        d_k = q.shape[-1] // self.n_heads
        heads = []
        for i in range(self.n_heads):
            block = slice(i * d_k, (i + 1) * d_k)
            out, _ = reference.attention(q[..., block], k[..., block], v[..., block], mask, is_causal)
            heads.append(out)
        return self.out(torch.cat(heads, dim=-1))


class StubMHA(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        raise NotImplementedError

    def forward(self, x, mask=None, is_causal=False):
        raise NotImplementedError


class NoSuperInit(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)


class NotAModule:
    def __init__(self, d_model, n_heads, bias=True):
        self.layer = reference.MultiHeadAttention(d_model, n_heads, bias)

    def __call__(self, x, mask=None, is_causal=False, context=None):
        return self.layer(x, mask, is_causal, context)


class SeparateProjections(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, d_model, bias=bias) for _ in range(3))
        self.out = nn.Linear(d_model, d_model, bias=bias)


class NarrowQkv(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.qkv = nn.Linear(d_model, d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)


class TransposedQkv(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.qkv = nn.Linear(3 * d_model, d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)


class IgnoresBias(PlainMHA):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__(d_model, n_heads, bias=True)


class LearnedTemperature(PlainMHA):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__(d_model, n_heads, bias)
        self.temperature = nn.Parameter(torch.ones(()))


class ReturnsWeightsToo(PlainMHA):
    def forward(self, x, mask=None, is_causal=False):
        return super().forward(x, mask, is_causal), None


class NoIsCausal(PlainMHA):
    def forward(self, x, mask=None):
        return super().forward(x, mask)


class HeadsNotMerged(OwnAttentionMHA):
    def forward(self, x, mask=None, is_causal=False):
        q, k, v = (reference.split_heads(part, self.n_heads) for part in self.qkv(x).chunk(3, dim=-1))
        return reference.attention(q, k, v, is_causal=is_causal)[0]


class Detached(PlainMHA):
    def forward(self, x, mask=None, is_causal=False, context=None):
        with torch.no_grad():
            return super().forward(x, mask, is_causal, context)


class ViewAfterTranspose(PlainMHA):
    """Correct; .view after .transpose would fail, so it uses .contiguous()."""

    def forward(self, x, mask=None, is_causal=False, context=None):
        return super().forward(x.contiguous(), mask, is_causal, context)


class SplitWeights(nn.Module):
    """Correct: W^Q, W^K, W^V cut out of self.qkv.weight and applied with F.linear, as torch does."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, is_causal=False, context=None):
        context = x if context is None else context
        w_q, w_k, w_v = self.qkv.weight.chunk(3)
        b_q, b_k, b_v = self.qkv.bias.chunk(3) if self.qkv.bias is not None else (None, None, None)
        q, k, v = F.linear(x, w_q, b_q), F.linear(context, w_k, b_k), F.linear(context, w_v, b_v)
        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))
        mask = None if mask is None else mask.unsqueeze(-3)
        out, _ = reference.attention(q, k, v, mask=mask, is_causal=is_causal)
        return self.out(rearrange(out, "b h t d -> b t (h d)"))


class IgnoresContext(nn.Module):
    """A learner's layer that takes `context` but still projects keys and values from x."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, is_causal=False, context=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # k and v of x, whatever the context
        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))
        mask = None if mask is None else mask.unsqueeze(-3)
        out, _ = reference.attention(q, k, v, mask=mask, is_causal=is_causal)
        return self.out(rearrange(out, "b h t d -> b t (h d)"))


class QueriesFromContext(IgnoresContext):
    """Takes everything, queries too, from the context when there is one."""

    def forward(self, x, mask=None, is_causal=False, context=None):
        return super().forward(x if context is None else context, mask, is_causal)


class NoContext(PlainMHA):
    """Self-attention only: forward has no `context` argument."""

    def forward(self, x, mask=None, is_causal=False):
        return super().forward(x, mask, is_causal)


CORRECT = [
    pytest.param(check_split_heads, reference.split_heads, id="split-reference"),
    pytest.param(check_split_heads, split_view_transpose, id="split-view-transpose"),
    pytest.param(check_split_heads, split_einops, id="split-einops"),
    pytest.param(check_split_heads, split_stack_chunks, id="split-stack-chunks"),
    pytest.param(check_merge_heads, reference.merge_heads, id="merge-reference"),
    pytest.param(check_merge_heads, merge_transpose_reshape, id="merge-transpose-reshape"),
    pytest.param(check_merge_heads, merge_contiguous_view, id="merge-contiguous-view"),
    pytest.param(check_merge_heads, merge_einops, id="merge-einops"),
    pytest.param(check_merge_heads, merge_cat, id="merge-cat"),
    pytest.param(check_MultiHeadAttention, reference.MultiHeadAttention, id="mha-reference"),
    pytest.param(check_MultiHeadAttention, PlainMHA, id="mha-view-transpose"),
    pytest.param(check_MultiHeadAttention, SdpaMHA, id="mha-sdpa"),
    pytest.param(check_MultiHeadAttention, OwnAttentionMHA, id="mha-own-attention"),
    pytest.param(check_MultiHeadAttention, LoopMHA, id="mha-loop-over-heads"),
    pytest.param(check_MultiHeadAttention, ViewAfterTranspose, id="mha-contiguous"),
    pytest.param(check_MultiHeadAttention, SplitWeights, id="mha-split-weights-cross"),
]


WRONG = [
    pytest.param(check_split_heads, not_implemented, "is not implemented yet", id="split-stub"),
    pytest.param(check_split_heads, split_reshape_only, "tokens are mixed across heads", id="split-reshape"),
    pytest.param(check_split_heads, split_d_h, "groups the features as (d h)", id="split-d-h"),
    pytest.param(check_split_heads, split_no_transpose, "still behind the tokens", id="split-no-transpose"),
    pytest.param(check_split_heads, split_heads_as_width, "as the width of each head", id="split-width"),
    pytest.param(check_split_heads, split_detached, "No gradient flows", id="split-detached"),
    pytest.param(check_merge_heads, not_implemented, "is not implemented yet", id="merge-stub"),
    pytest.param(check_merge_heads, merge_reshape_only, "tokens are mixed across heads", id="merge-reshape"),
    pytest.param(check_merge_heads, merge_d_h, "interleaves the heads", id="merge-d-h"),
    pytest.param(check_merge_heads, merge_not_flattened, "but not merged", id="merge-not-flattened"),
    pytest.param(
        check_merge_heads, merge_view_after_transpose, "no longer contiguous", id="merge-view-after-transpose"
    ),
    pytest.param(
        check_merge_heads, merge_with_n_heads, "The signature is merge_heads(x)", id="merge-extra-argument"
    ),
    pytest.param(check_MultiHeadAttention, StubMHA, "is not implemented yet", id="mha-stub"),
    pytest.param(
        check_MultiHeadAttention,
        NoContext,
        "The signature is forward(self, x, mask=None, is_causal=False, context=None)",
        id="mha-cross-no-context-argument",
    ),
]


@pytest.mark.parametrize(("check", "candidate"), CORRECT)
def test_check_accepts_correct_implementation(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


@pytest.mark.parametrize(("check", "candidate", "phrase"), WRONG)
def test_check_rejects_mistake_with_its_message(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


def test_each_multi_head_mistake_message_is_tested_by_learner_code():
    from test_checks_learner_mistakes import DEVELOPMENT, HOLD_OUT

    from attn_course.checks.heads import MHA_VARIANTS

    phrases = [case[3] for case in [*DEVELOPMENT, *HOLD_OUT] if case[0] == "MultiHeadAttention"]
    phrases += [case[2] for case in LEARNER_WRONG]
    untested = [message for message, _ in MHA_VARIANTS if not any(phrase in message for phrase in phrases)]
    assert not untested


# ---------------------------------------------------------------------------------------------
# The GPU case, run here with the CPU standing in for CUDA (no GPU on the test machine)


@pytest.fixture
def cpu_stands_in_for_cuda(monkeypatch):
    import attn_course.checks.heads as heads_checks

    return cpu_standing_in_for_cuda(monkeypatch, heads_checks)


def test_the_gpu_case_runs_the_layer_moved_to_the_device(cpu_stands_in_for_cuda, capsys):
    assert_accepted(check_MultiHeadAttention, reference.MultiHeadAttention, capsys)
    assert cpu_stands_in_for_cuda  # the GPU case ran


# ---------------------------------------------------------------------------------------------
# Notebook 04 no longer shows the split and merge patterns before the exercises: spellings a
# learner reasons out, edits of the right solutions in learner_code.py.

_SPLIT_LINE = "x.view(b, t, n_heads, d).transpose(1, 2)"
_MERGE_LINE = "x.transpose(1, 2).reshape(b, t, h * d)"


def split_written(line):
    """The learner's split_heads with its one line written `line`."""
    return learner(SPLIT, "split_heads", (_SPLIT_LINE, line))


def merge_written(line):
    """The learner's merge_heads with its one line written `line`."""
    return learner(MERGE, "merge_heads", (_MERGE_LINE, line))


MHA_EINSUM = learner(
    MHA,
    "MultiHeadAttention",
    (
        "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)",
        'scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d_k)',
    ),
    (
        "out = (weights @ v).transpose(1, 2).reshape(b, t, d_model)",
        'out = rearrange(torch.einsum("bhqk,bhkd->bhqd", weights, v), "b h t d -> b t (h d)")',
    ),
)

REASONED_RIGHT = [
    pytest.param(check_split_heads, split_written("x.reshape(b, t, n_heads, d).permute(0, 2, 1, 3)")),
    pytest.param(check_split_heads, split_written("x.unflatten(-1, (n_heads, d)).movedim(2, 1)")),
    pytest.param(check_split_heads, split_written("torch.stack(x.split(d, dim=-1), dim=1)")),
    pytest.param(check_split_heads, split_written('rearrange(x, "b t (h d) -> b h t d", h=n_heads)')),
    pytest.param(check_merge_heads, merge_written("x.permute(0, 2, 1, 3).flatten(2)")),
    pytest.param(check_merge_heads, merge_written("torch.cat(x.unbind(1), dim=-1)")),
    pytest.param(check_merge_heads, merge_written('rearrange(x, "b h t d -> b t (h d)")')),
    pytest.param(check_MultiHeadAttention, MHA_EINSUM, id="mha-einsum-rearrange"),
]

REASONED_WRONG = [
    pytest.param(
        check_split_heads,
        split_written("x.transpose(1, 2).reshape(b, n_heads, t, d)"),
        "moves the axes before splitting",
        id="split-transpose-first",
    ),
    pytest.param(
        check_split_heads,
        split_written("torch.stack(x.split(d, dim=-1))"),
        "in front of the batch",
        id="split-heads-before-batch",
    ),
    pytest.param(
        check_merge_heads,
        merge_written("x.reshape(b, h * d, t).transpose(1, 2)"),
        "as if it were (d, t)",
        id="merge-reshape-first",
    ),
    pytest.param(
        check_merge_heads,
        merge_written('rearrange(x, "b h t d -> b t (d h)")'),
        "interleaves the heads",
        id="merge-rearrange-d-h",
    ),
]


@pytest.mark.parametrize(("check", "candidate"), REASONED_RIGHT)
def test_reasoned_out_spellings_pass(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


@pytest.mark.parametrize(("check", "candidate", "phrase"), REASONED_WRONG)
def test_reasoned_out_mistakes_are_named(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention: mistakes as a learner writes them, text edits of a right solution (learner_code.py)

SPLIT_Q, SPLIT_K, SPLIT_V = (f"{z} = {z}.view(b, t, self.n_heads, d_k).transpose(1, 2)" for z in "qkv")
MERGE_LINE = "out = (weights @ v).transpose(1, 2).reshape(b, t, d_model)"
CHUNK = "q, k, v = self.qkv(x).chunk(3, dim=-1)"
CAUSAL_LINES = (
    "        if is_causal:\n"
    "            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()\n"
    '            scores = scores.masked_fill(~causal, float("-inf"))\n'
)
MASK_LINES = (
    "        if mask is not None:\n"
    '            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))\n'
)


def _reshape_split(z):
    return f"{z} = {z}.reshape(b, self.n_heads, t, d_k)"


def _d_h_split(z):
    return f"{z} = {z}.view(b, t, d_k, self.n_heads).permute(0, 3, 1, 2)"


SPLITS = (SPLIT_Q, SPLIT_K, SPLIT_V)
SPLIT_RESHAPE = [(line, _reshape_split(z)) for line, z in zip(SPLITS, "qkv", strict=True)]
MERGE_RESHAPE = [(MERGE_LINE, "out = (weights @ v).reshape(b, t, d_model)")]

LEARNER_WRONG = [
    ("scale-d-model", [("/ math.sqrt(d_k)", "/ math.sqrt(d_model)")], "divided by √d_model"),
    ("unscaled", [("/ math.sqrt(d_k)", "")], "were not scaled"),
    ("no-out-projection", [("return self.out(out)", "return out")], "output projection is missing"),
    ("split-reshape", SPLIT_RESHAPE, "split by reshaping (b, t, d_model) straight"),
    ("merge-reshape", MERGE_RESHAPE, "merged by reshaping (b, h, t, d_k) straight"),
    ("split-merge-reshape", SPLIT_RESHAPE + MERGE_RESHAPE, "split and merged by reshaping"),
    ("d-h-grouping",
     [(line, _d_h_split(z)) for line, z in zip(SPLITS, "qkv", strict=True)]
     + [(MERGE_LINE, "out = (weights @ v).permute(0, 2, 3, 1).reshape(b, t, d_model)")],
     "grouped as (d h)"),
    *((f"order-{order}", [(CHUNK, f"{', '.join(order)} = self.qkv(x).chunk(3, dim=-1)")],
       f"in the wrong order ({', '.join(order)})")
      for order in ("kqv", "vkq", "qvk", "kvq", "vqk")),
    ("per-head-layout",
     [(f"{CHUNK}\n        {SPLIT_Q}\n        {SPLIT_K}\n        {SPLIT_V}",
       "q, k, v = self.qkv(x).view(b, t, self.n_heads, 3, d_k).permute(3, 0, 2, 1, 4)")],
     "read per head"),
    ("softmax-over-queries", [("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")],
     "softmax runs over the queries"),
    ("softmax-over-heads", [("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=1)")],
     "softmax runs over the heads"),
    ("v-reshaped", [(SPLIT_V, _reshape_split("v"))], "v alone was split into heads by reshaping"),
    ("causal-triu", [(".tril()", ".triu()")], "inverted causal mask"),
    ("ignores-causal", [(CAUSAL_LINES, "")], "ignores is_causal"),
    ("ignores-mask", [(MASK_LINES, "")], "ignores `mask`"),
    ("inverted-mask", [("~mask.unsqueeze(-3)", "mask.unsqueeze(-3)")], "uses the mask the wrong way round"),
    # No table entry matches these: the probe reads the layer's merged heads (issue 27, family 1).
    ("probe-scale-d-k", [("/ math.sqrt(d_k)", "/ d_k")], "divides the scores by d_k itself"),
    ("probe-weights-times-k", [("out = (weights @ v)", "out = (weights @ k)")], "mixes the keys k instead of the values v"),
    ("probe-causal-one-ahead", [(".tril()", ".tril(1)")], "puts weight on keys after their query"),
    ("probe-mask-fill-finite", [('~mask.unsqueeze(-3), float("-inf")', "~mask.unsqueeze(-3), -1.0")],
     "puts weight on keys the mask hides"),
    ("probe-weights-not-normalised", [("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-1) * 1.1")],
     "1.1 times a weighted average of the values"),
    ("probe-residual-inside", [("return self.out(out)", "return self.out(out) + x")], "is right up to self.out"),
    ("probe-one-head-flipped", [("weights = torch.softmax(scores, dim=-1)",
                                 "weights = torch.softmax(scores, dim=-1)\n"
                                 "        weights = torch.cat([weights[:, :1], weights[:, 1:].flip(-1)], dim=1)")],
     "Only head(s) 1–2 of 3 are wrong"),
]  # fmt: skip
"""(id, text edits of the right learner MultiHeadAttention, phrase the message must contain)."""


@pytest.mark.parametrize(("edits", "phrase"), [pytest.param(e, p, id=i) for i, e, p in LEARNER_WRONG])
def test_learner_mistakes_are_named(edits, phrase, capsys):
    assert_rejected(check_MultiHeadAttention, learner(MHA, "MultiHeadAttention", *edits), phrase, capsys)


def test_the_multi_head_simulator_with_its_default_knobs_is_the_reference():
    from attn_course.checks.heads import _multi_head

    torch.manual_seed(0)
    layer = reference.MultiHeadAttention(12, 3).double()
    params = dict(layer.named_parameters())
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = torch.rand(2, 5, 5) > 0.3
    mask[..., 0] = True
    for m, causal in [(None, False), (mask, False), (None, True), (mask, True)]:
        torch.testing.assert_close(_multi_head(params, 3, x, m, causal), layer(x, mask=m, is_causal=causal))


# ---------------------------------------------------------------------------------------------
# The exercises' contracts: wrong programs a learner writes that pass every hand-picked case (the
# checks passed each of them before the contracts) and fail a generated one, with what it observes.

LOOP_SPLIT = """    out = torch.zeros(b, n_heads, t, d)
    for i in range(n_heads):
        out[:, i] = x[..., i * d:(i + 1) * d]
    return out"""

LOOP_MERGE = """    out = torch.zeros(b, t, h * d, dtype=x.dtype)
    for i in range(h):
        out[..., i * d:(i + 1) * d] = x[:, i]
    return out"""

CONTRACT_WRONG = [
    pytest.param(
        check_split_heads,
        (SPLIT, "split_heads", ("    return x.view(b, t, n_heads, d).transpose(1, 2)", LOOP_SPLIT)),
        "Your `heads` has dtype float32 for float64 inputs: it must have the inputs' dtype (seen on b=2, "
        "t=5, h=3, d=6). The first float32 tensor your code makes comes from `torch.zeros(…)` at line 12",
        id="split-loop-float32",
    ),
    pytest.param(
        check_merge_heads,
        (MERGE, "merge_heads", ("    return x.transpose(1, 2).reshape(b, t, h * d)", LOOP_MERGE)),
        "the first tensor your code makes off that device comes from `torch.zeros(…)` at line 11",
        id="merge-loop-on-cpu",
    ),
    pytest.param(
        check_MultiHeadAttention,
        (MHA, "MultiHeadAttention", ("dtype=torch.bool, device=x.device)", "dtype=torch.bool)")),
        "Your MultiHeadAttention.forward raised RuntimeError: Tensor on device meta is not on the expected "
        "device cpu!",
        id="mha-causal-on-cpu",
    ),
]


@pytest.mark.parametrize(("check", "program", "phrase"), CONTRACT_WRONG)
def test_contract_cases_catch_what_the_hand_picked_ones_pass(check, program, phrase, capsys):
    source, name, *edits = program
    assert_rejected(check, learner(source, name, *edits), phrase, capsys)


def test_each_multi_head_variant_is_a_mistake():
    from attn_course.checks.heads import MHA_VARIANTS, _multi_head

    torch.manual_seed(0)
    layer = reference.MultiHeadAttention(12, 3).double()
    params = dict(layer.named_parameters())
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = torch.rand(2, 5, 5) > 0.3
    mask[..., 0] = True
    right = layer(x, mask=mask, is_causal=True)
    for message, variant in MHA_VARIANTS:
        wrong = _multi_head(params, 3, x, mask, True, variant)
        assert not torch.allclose(wrong, right, equal_nan=False), message
