"""Checks for notebook 04: splitting and merging heads, and the multi-head attention layer."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attn_course import reference
from attn_course.checks._contracts import (
    VIEW_KINDS,
    Arg,
    Axis,
    Case,
    Contract,
    Exercise,
    Returns,
    contract_cases,
    expect_contract_cases,
    expect_inputs_device,
)
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    call,
    check,
    cuda_device,
    expect_close,
    expect_gradients,
    expect_tensor,
    randn,
)
from attn_course.checks._probe import Heads, diagnose_heads, merged_input, read_on

# ---------------------------------------------------------------------------------------------
# The contracts of notebook 04: what each exercise must accept and return.

_FLOATS = (torch.float64, torch.float32)
_HEADS = (
    Axis("b", (2,)),
    Axis("t", (5,)),
    Axis("h", (3,), "a head count that is not a power of two"),
    Axis("d", (6,), "a head width that is not a power of two"),
)

SPLIT_CONTRACT = Contract(
    "split_heads",
    args=(Arg("x", ("b", "t", "h·d"), views=VIEW_KINDS, swap=(0, 1), slice_axis=1, expand_axis=0),),
    axes=_HEADS,
    returns=(Returns("heads", ("b", "h", "t", "d")),),
    dtypes=_FLOATS,
)
"""Exercise 1 of 04: x (b, t, h·d) in any layout (as q, k, v come out of self.qkv(x).chunk, slices of the
last axis), its dtype and device kept."""

MERGE_CONTRACT = Contract(
    "merge_heads",
    args=(Arg("x", ("b", "h", "t", "d"), views=VIEW_KINDS, swap=(1, 2), slice_axis=2, expand_axis=0),),
    axes=_HEADS,
    returns=(Returns("merged", ("b", "t", "h·d")),),
    dtypes=_FLOATS,
)
"""Exercise 2 of 04: x (b, h, t, d) in any layout, its dtype and device kept."""

MHA_CONTRACT = Contract(
    "MultiHeadAttention",
    args=(
        Arg("x", ("b", "t", "d_model"), views=VIEW_KINDS, swap=(0, 1)),
        Arg("context", ("b", "t_k", "d_model"), views=VIEW_KINDS, swap=(0, 1)),
    ),
    axes=(
        Axis("b", (2,)),
        Axis("t", (5,)),
        Axis("t_k", (7, 3), "a context longer than x, and shorter"),
        Axis("d_model", (18,), "3 heads of d_k = 6, neither a power of two"),
    ),
    returns=(Returns("output", ("b", "t", "d_model")),),
    dtypes=_FLOATS,
    notes=("the generated cases are cross-attention, with a context; on the meta device, is_causal=True",),
)
"""Exercise 3 of 04's forward: x and the context each alone a view, T_k on both sides of t, float32, the
output in x's dtype on x's device."""


def _function(contract: Contract, candidate: Callable[..., Any], **more: Any) -> Exercise:
    """A plain function's exercise: the learner's and the reference, the same on every case."""
    course = getattr(reference, contract.exercise)
    return Exercise(contract.exercise, lambda case: (candidate, course), **more)


def _generated(contract: Contract, exercise: Exercise) -> int:
    """The contract's generated cases, then one with the inputs on another device; how many ran."""
    ran = expect_contract_cases(contract, exercise, contract_cases(contract))
    return ran + expect_inputs_device(contract, exercise)


# ---------------------------------------------------------------------------------------------
# split_heads and merge_heads

_SPLIT_CASES = [(2, 5, 3, 4), (3, 7, 2, 6), (1, 4, 6, 1), (2, 3, 1, 5)]
"""(b, t, h, d) of the inputs: heads, tokens and head widths all of different sizes where h > 1."""


def _split_mistakes() -> list[Mistake]:
    return [
        Mistake(
            "reshapes (b, t, h·d) straight to (b, h, t, d): the numbers keep their memory order, so a "
            "'head' gets pieces of several tokens (tokens are mixed across heads). Split the last axis "
            "first and then move the heads before the tokens: x.view(b, t, h, d).transpose(1, 2), or "
            'rearrange(x, "b t (h d) -> b h t d", h=n_heads).',
            lambda x, n_heads: x.reshape(x.shape[0], n_heads, x.shape[1], x.shape[2] // n_heads),
        ),
        Mistake(
            "groups the features as (d h): head i gets every h-th feature, i, i + h, i + 2h, …. Head i "
            "must be the contiguous block x[..., i·d:(i+1)·d], which is the grouping (h d): "
            'rearrange(x, "b t (h d) -> b h t d", h=n_heads), or x.view(b, t, h, d).transpose(1, 2).',
            lambda x, n_heads: rearrange(x, "b t (d h) -> b h t d", h=n_heads),
        ),
        Mistake(
            "moves the axes before splitting: transposing (b, t, h·d) to (b, h·d, t) and then reshaping to "
            "(b, h, t, d) gives head i its own features, but reads its (d, t) block of numbers as if it "
            "were (t, d), so each 'row' mixes tokens and features. Split the last axis first, "
            "x.view(b, t, h, d), then move the heads in front, .transpose(1, 2).",
            lambda x, n_heads: x.transpose(1, 2).reshape(
                x.shape[0], n_heads, x.shape[1], x.shape[2] // n_heads
            ),
        ),
    ]


def _merge_mistakes() -> list[Mistake]:
    return [
        Mistake(
            "reshapes (b, h, t, d) straight to (b, t, h·d) without moving the heads back behind the "
            "tokens: tokens are mixed across heads. Transpose first, x.transpose(1, 2).reshape(b, t, h * d), "
            'or rearrange(x, "b h t d -> b t (h d)").',
            lambda x: x.reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3]),
        ),
        Mistake(
            "swaps the token and feature axes (transpose(2, 3)) before reshaping, where the heads should "
            "move behind the tokens: transpose(1, 2), then reshape, x.transpose(1, 2).reshape(b, t, h * d), "
            'or rearrange(x, "b h t d -> b t (h d)").',
            lambda x: x.transpose(2, 3).reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3]),
        ),
        Mistake(
            "interleaves the heads, grouping the merged axis as (d h): the result must be head 0's d "
            'features, then head 1\'s, …, the grouping (h d): rearrange(x, "b h t d -> b t (h d)").',
            lambda x: rearrange(x, "b h t d -> b t (d h)"),
        ),
        Mistake(
            "reshapes (b, h, t, d) to (b, h·d, t) and then moves the tokens forward: that reads each "
            "head's (t, d) block of numbers as if it were (d, t), mixing tokens and features. Move the "
            "tokens in front of the heads first, x.transpose(1, 2), then flatten h and d: "
            ".reshape(b, t, h * d).",
            lambda x: x.reshape(x.shape[0], x.shape[1] * x.shape[3], x.shape[2]).transpose(1, 2),
        ),
    ]


@check
def check_split_heads(candidate: Callable[..., Any]) -> str:
    """(b, t, h·d) -> (b, h, t, d), head i = features i·d … (i+1)·d - 1 of every token."""
    mistakes = _split_mistakes()
    for b, t, h, d in _SPLIT_CASES:
        x = randn(b, t, h * d)
        expected = reference.split_heads(x, h)
        got = _call_with_hints(
            "split_heads",
            candidate,
            x,
            h,
            when={"raised TypeError": "The signature is split_heads(x, n_heads)."},
        )
        hints: dict[tuple[int, ...], str] = {
            (b, t, h, d): "That is (b, t, h, d): the heads are split off but still behind the tokens; "
            "move them in front with .transpose(1, 2) (or rearrange to 'b h t d').",
            (b, d, t, h): "You used n_heads as the width of each head: h = n_heads is the number of heads, "
            "d = x.shape[-1] // n_heads the width of each.",
            (
                b,
                h,
                d,
                t,
            ): "The last two axes are swapped: the result is (b, h, t, d), tokens before features.",
            (h, b, t, d): "The heads are in front of the batch: the head axis goes right after the batch "
            "axis, (b, h, t, d) (stack or move it to dim=1).",
        }
        result = expect_tensor(
            got, expected.shape, f"split_heads(x, n_heads={h}) of x {(b, t, h * d)}", hints=hints
        )
        expect_close(
            result,
            expected,
            f"Your split_heads(x, n_heads={h})",
            mistakes=mistakes,
            args=(x, h),
            diagnose=_diagnose_head_order,
        )
    expect_gradients(
        "split_heads", candidate, reference.split_heads, [randn(2, 5, 12)], ["x"], kwargs={"n_heads": 3}
    )
    generated = _generated(SPLIT_CONTRACT, _function(SPLIT_CONTRACT, candidate, after=_n_heads))
    return (
        f"4 shapes, head i = the i-th block of d features, gradients, and {generated} cases from the "
        "exercise's contract (x a view, float32, x's dtype and device)"
    )


@check
def check_merge_heads(candidate: Callable[..., Any]) -> str:
    """(b, h, t, d) -> (b, t, h·d), the inverse of split_heads."""
    mistakes = _merge_mistakes()
    for b, t, h, d in _SPLIT_CASES:
        x = randn(b, h, t, d)
        expected = reference.merge_heads(x)
        got = _call_merge(candidate, x)
        hints = {
            (b, t, h, d): "That is (b, t, h, d): the heads are behind the tokens but not merged; "
            "flatten the last two axes into h·d (.reshape(b, t, h * d)).",
            (b, h * t, d): "You merged heads with tokens: the merged axis is the features, (b, t, h·d).",
            (b, t * h * d): "That flattens the tokens into the features too: merge only the heads and the "
            "features, (b, t, h·d), with .flatten(2) after moving the heads behind the tokens, or "
            ".reshape(b, t, h * d).",
        }
        result = expect_tensor(got, expected.shape, f"merge_heads(x) of x {(b, h, t, d)}", hints=hints)
        expect_close(result, expected, "Your merge_heads(x)", mistakes=mistakes, args=(x,))
    expect_gradients("merge_heads", candidate, reference.merge_heads, [randn(2, 3, 5, 4)], ["x"])
    generated = _generated(MERGE_CONTRACT, _function(MERGE_CONTRACT, candidate))
    return (
        f"4 shapes, head after head in the merged axis, gradients, and {generated} cases from the "
        "exercise's contract (x a view, float32, x's dtype and device)"
    )


def _n_heads(case: Case) -> tuple[int]:
    return (case.size["h"],)


def _diagnose_head_order(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """Every head right but in another place: the heads are reordered."""
    h = expected.shape[1]
    order = []
    for i in range(h):
        same = [j for j in range(h) if torch.allclose(actual[:, i].double(), expected[:, j].double())]
        if not same:
            return None
        order.append(same[0])
    return (
        f"has every head, but in the wrong order: your heads 0 … {h - 1} are the right heads {order}. Head "
        "i must be the i-th block of d features, x[..., i·d:(i+1)·d]; nothing reorders (flips, rolls) "
        "the head axis."
    )


def _call_merge(candidate: Callable[..., Any], x: torch.Tensor) -> Any:
    return _call_with_hints(
        "merge_heads",
        candidate,
        x,
        when={
            "raised TypeError": "The signature is merge_heads(x): h and d are x's shape.",
            "view size is not compatible": "After .transpose the tensor is no longer contiguous in memory, "
            "so .view cannot merge its axes: use .reshape(...), .contiguous().view(...), or "
            'rearrange(x, "b h t d -> b t (h d)").',
        },
    )


def _call_with_hints(
    name: str, candidate: Callable[..., Any], *args: Any, when: dict[str, str], **kwargs: Any
) -> Any:
    """`call`, adding each hint of `when` whose key occurs in the failure message."""
    try:
        return call(name, candidate, *args, **kwargs)
    except CheckFailed as failure:
        message = str(failure)
        extra = [hint for phrase, hint in when.items() if phrase in message]
        if not extra:
            raise
        raise CheckFailed("\n".join([message, *extra])) from None


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention


@dataclass(frozen=True)
class MultiHeadVariant:
    """How one multi-head layer's forward is written: the right one with the defaults, each other value a
    named mistake (`_multi_head` computes what it gives; `MHA_VARIANTS` names each)."""

    scale: str = "d_k"
    """What the scores are divided by the square root of: "d_k" (right), "d_model", "n_heads" or "none"."""
    out_proj: bool = True
    """False: self.out never applied."""
    split: str = "h d"
    """How q, k, v are split into heads: "h d" (right), "d h" (every h-th feature) or "reshape" (straight
    to (b, h, t, d_k), tokens mixed)."""
    merge: str = "h d"
    """How the heads are merged: as `split`."""
    order: str = "qkv"
    """The order of the chunks of self.qkv(x): "qkv" (right), another permutation, or "per-head"."""
    use_mask: bool = True
    """False: `mask` ignored."""
    invert_mask: bool = False
    """True: `mask` used the wrong way round."""
    use_causal: bool = True
    """False: is_causal ignored."""
    invert_causal: bool = False
    """True: the causal mask's upper triangle."""
    softmax_dim: int = -1
    """The axis of the softmax: -1 (right), -2 (the queries) or 1 (the heads)."""
    split_v: str | None = None
    """How v alone is split, where it differs from q and k ("reshape")."""
    v_from_x: bool = False
    """True: v is x itself, not its projection."""
    causal_diagonal: int = 0
    """The causal mask's diagonal: 0 (right) or -1 (a strict mask, no key for the first query)."""


def _multi_head(
    params: dict[str, torch.Tensor],
    n_heads: int,
    x: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    variant: MultiHeadVariant | None = None,
) -> torch.Tensor:
    """Multi-head self-attention written as `variant` (the defaults are right)."""
    w = variant or MultiHeadVariant()
    scale, out_proj, split, merge, order = w.scale, w.out_proj, w.split, w.merge, w.order
    use_mask, invert_mask, use_causal = w.use_mask, w.invert_mask, w.use_causal
    invert_causal, causal_diagonal, softmax_dim = w.invert_causal, w.causal_diagonal, w.softmax_dim
    split_v, v_from_x = w.split_v, w.v_from_x
    b, t, d_model = x.shape
    d_k = d_model // n_heads
    qkv = F.linear(x, params["qkv.weight"], params.get("qkv.bias"))  # (b, t, 3·d_model)
    if order == "per-head":
        q, k, v = rearrange(
            qkv, "b t (h three d) -> three b h t d", three=3, h=n_heads
        )  # each (b, h, t, d_k)
    else:
        assigned = dict(zip(order, qkv.chunk(3, dim=-1), strict=True))  # each (b, t, d_model)
        q, k, v = (_split(assigned[name], n_heads, split) for name in "qkv")  # each (b, h, t, d_k)
        if split_v is not None:
            v = _split(assigned["v"], n_heads, split_v)  # (b, h, t, d_k)
    if v_from_x:
        v = _split(x, n_heads, "h d")  # (b, h, t, d_k): the input itself, not its projection
    divisor = {
        "d_k": math.sqrt(d_k), "d_model": math.sqrt(d_model), "n_heads": math.sqrt(n_heads), "none": 1.0
    }[scale]  # fmt: skip
    scores = q @ k.transpose(-2, -1) / divisor  # (b, h, t, t)
    allowed = torch.ones_like(scores, dtype=torch.bool)  # (b, h, t, t)
    if mask is not None and use_mask:
        head_mask = mask.unsqueeze(-3)  # (b, 1, t, t) or broadcastable
        allowed = allowed & (~head_mask if invert_mask else head_mask)
    if is_causal and use_causal:
        causal = torch.ones(t, t, dtype=torch.bool).tril(diagonal=causal_diagonal)  # (t, t)
        allowed = allowed & (causal.T if invert_causal else causal)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=softmax_dim)  # (b, h, t, t)
    merged = _merge(weights @ v, merge)  # (b, t, d_model)
    return F.linear(merged, params["out.weight"], params.get("out.bias")) if out_proj else merged


def _split(x: torch.Tensor, n_heads: int, how: str) -> torch.Tensor:
    b, t, d_model = x.shape
    if how == "reshape":
        return x.reshape(b, n_heads, t, d_model // n_heads)  # (b, h, t, d_k), tokens mixed
    return rearrange(x, f"b t ({how}) -> b h t d", h=n_heads)  # (b, h, t, d_k)


def _merge(x: torch.Tensor, how: str) -> torch.Tensor:
    b, h, t, d = x.shape
    if how == "reshape":
        return x.reshape(b, t, h * d)  # (b, t, d_model), tokens mixed
    return rearrange(x, f"b h t d -> b t ({how})")  # (b, t, d_model)


_ORDER_MESSAGE = (
    "looks like q, k and v were taken from self.qkv(x) in the wrong order ({order}): its output is "
    "[q | k | v] along the last axis, the first d_model features are q, then k, then v: "
    "q, k, v = self.qkv(x).chunk(3, dim=-1)."
)

MHA_VARIANTS: list[tuple[str, MultiHeadVariant]] = [
    (
        "looks like the scores were divided by √d_model: each head's scores are dot products of "
        "d_k = d_model / n_heads numbers, so divide by √d_k (q.shape[-1] after the split).",
        MultiHeadVariant(scale="d_model"),
    ),
    (
        "looks like the scores were not scaled: divide them by √d_k, d_k = d_model / n_heads.",
        MultiHeadVariant(scale="none"),
    ),
    (
        "looks like the scores were divided by √n_heads: the scale is √d_k, the width of each head's "
        "queries and keys (d_k = d_model / n_heads, q.shape[-1] after the split), not the number of heads.",
        MultiHeadVariant(scale="n_heads"),
    ),
    (
        "looks like v was taken from x itself, not from the projection: the values are the third chunk "
        "of self.qkv(x), split into heads like q and k.",
        MultiHeadVariant(v_from_x=True),
    ),
    (
        "masks the diagonal too (a strict causal mask, torch.tril(..., diagonal=-1) or key < query): a "
        "position may attend itself, so with is_causal=True keep key j when j <= i (torch.tril with "
        "diagonal=0); the first query then has no key at all, hence the NaN.",
        MultiHeadVariant(causal_diagonal=-1),
    ),
    (
        "looks like the output projection is missing: after merging the heads, apply self.out "
        "(the W^O that mixes what the heads found).",
        MultiHeadVariant(out_proj=False),
    ),
    (
        "looks like the heads were split by reshaping (b, t, d_model) straight to (b, h, t, d_k): that "
        "mixes tokens across heads. Use your split_heads (view to (b, t, h, d_k), then transpose(1, 2)).",
        MultiHeadVariant(split="reshape"),
    ),
    (
        "looks like the heads were merged by reshaping (b, h, t, d_k) straight to (b, t, d_model): that "
        "mixes tokens across heads. Use your merge_heads (transpose(1, 2) first, then reshape).",
        MultiHeadVariant(merge="reshape"),
    ),
    (
        "looks like the heads were split and merged by reshaping without transposing: that mixes tokens "
        "across heads. Use your split_heads and merge_heads.",
        MultiHeadVariant(split="reshape", merge="reshape"),
    ),
    (
        "looks like the features were grouped as (d h), every h-th feature in one head: head i is the "
        "contiguous block i·d_k … (i+1)·d_k - 1 of q, k and v, the grouping (h d).",
        MultiHeadVariant(split="d h", merge="d h"),
    ),
    *(
        (_ORDER_MESSAGE.format(order=", ".join(order)), MultiHeadVariant(order="".join(order)))
        for order in itertools.permutations("qkv")
        if order != ("q", "k", "v")
    ),
    (
        "looks like self.qkv(x) was read per head, as (h, 3, d_k): its output is [q | k | v], all of q "
        "first, so chunk it into q, k, v first and split each into heads after.",
        MultiHeadVariant(order="per-head"),
    ),
    (
        "looks like the softmax runs over the queries (dim=-2): each query's weights over the keys must "
        "sum to 1, so take the softmax over the last axis (dim=-1).",
        MultiHeadVariant(softmax_dim=-2),
    ),
    (
        "looks like the softmax runs over the heads (dim=1 of the (b, h, t, t) scores): each query's "
        "weights over the keys must sum to 1, so take the softmax over the last axis (dim=-1).",
        MultiHeadVariant(softmax_dim=1),
    ),
    (
        "looks like v alone was split into heads by reshaping (b, t, d_model) straight to (b, h, t, d_k), "
        "which mixes tokens across heads: split v exactly like q and k (view to (b, t, h, d_k), then "
        "transpose(1, 2)).",
        MultiHeadVariant(split_v="reshape"),
    ),
    (
        "uses an inverted causal mask (the upper triangle, torch.triu): with is_causal=True query i may "
        "attend keys 0 … i, the lower triangle with the diagonal (torch.tril), and masks the rest.",
        MultiHeadVariant(invert_causal=True),
    ),
    (
        "ignores is_causal=True: pass it on to attention (or to F.scaled_dot_product_attention), which "
        "adds the causal mask for every head.",
        MultiHeadVariant(use_causal=False),
    ),
    (
        "ignores `mask`: pass it on to attention with a head axis, mask.unsqueeze(-3), so that it "
        "applies to every head.",
        MultiHeadVariant(use_mask=False),
    ),
    (
        "uses the mask the wrong way round: True means the query MAY attend that key (the convention of "
        "your attention and of F.scaled_dot_product_attention; torch.nn.MultiheadAttention's own masks "
        "are the opposite).",
        MultiHeadVariant(invert_mask=True),
    ),
]
"""Each mistake of MultiHeadAttention.forward once: its message, and the variant that makes it."""

_CONFIGS = [(12, 3, True), (8, 4, False), (6, 1, True)]
"""(d_model, n_heads, bias) of the layers the check builds; batch 2 and 5 tokens never equal n_heads."""

_BROADCAST_HINT = (
    "The mask, a (b, 1, t) padding mask, a (b, t, t) or a (t, t) mask, broadcasts to (b, t, t) and "
    "applies to every head: insert a head axis just before the last two, mask.unsqueeze(-3), so that it "
    "broadcasts against the (b, h, t, t) scores."
)


@check
def check_MultiHeadAttention(candidate: Callable[..., Any]) -> str:
    """Build the learner's layer, copy seeded weights into it and the reference, compare the outputs."""
    if isinstance(candidate, nn.Module):
        raise CheckFailed(
            "check_MultiHeadAttention expects your class MultiHeadAttention itself, not a layer made "
            "from it: call check_MultiHeadAttention(MultiHeadAttention)."
        )
    for d_model, n_heads, bias in _CONFIGS:
        layer, ref, params = _build_pair(candidate, d_model, n_heads, bias, torch.float64)
        for x, mask, is_causal, label in _mha_cases(d_model):
            expected = ref(x, mask=mask, is_causal=is_causal)
            _compare(
                layer,
                expected,
                params,
                n_heads,
                x,
                mask,
                is_causal,
                f"({d_model}, {n_heads}, bias={bias})",
                label,
                probe=functools.partial(
                    _probe_mha, candidate, n_heads, bias, mask, is_causal, shown_d_model=d_model
                ),
            )
    layer, ref, params = _build_pair(candidate, 12, 3, True, torch.float32)
    x = randn(2, 5, 12, dtype=torch.float32)
    _compare(
        layer, ref(x, is_causal=True), params, 3, x, None, True, "(12, 3) in float32", "with is_causal=True"
    )
    _expect_cross_attention(candidate)
    _expect_layer_gradients(candidate)
    _expect_runs_on_cuda(candidate)
    generated = _expect_layer_contract(candidate)
    return (
        "3 layers (with and without bias, one head), is_causal, 3 kinds of mask, float32, "
        f"cross-attention (4 queries, 7 context tokens), gradients, and {generated} cases from the "
        "exercise's contract (3 heads of 6, x or the context a view, float32, x's device)"
    )


def _expect_layer_contract(candidate: Callable[..., Any]) -> int:
    """The contract's generated cases on one layer of 3 heads of d_k = 6, in each case's dtype; then
    self-attention with is_causal=True on the meta device (a mask made on the CPU meets x there)."""
    d_model, n_heads = MHA_CONTRACT.base_sizes()["d_model"], 3
    layer, ref, _ = _build_pair(candidate, d_model, n_heads, True, torch.float64)

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        if case.changed == "meta":
            learner, course, _ = _build_pair(candidate, d_model, n_heads, True, torch.float64)
            return learner.to("meta"), course.to("meta")
        return layer.to(case.dtype), ref.to(case.dtype)

    exercise = Exercise("MultiHeadAttention.forward", functions, positional=1)
    ran = expect_contract_cases(MHA_CONTRACT, exercise, contract_cases(MHA_CONTRACT))
    causal = Exercise(
        "MultiHeadAttention.forward",
        functions,
        positional=1,
        extra=lambda case, tensors: {"context": None, "is_causal": True},
    )
    return ran + expect_inputs_device(MHA_CONTRACT, causal)


_SIGNATURE = "The signature is forward(self, x, mask=None, is_causal=False, context=None)."

_CONTEXT_IGNORED = (
    "takes the keys and values from x instead of from `context`: with a context, only the queries "
    "come from x; the keys and values are projections of the context, for example "
    "_, k, v = self.qkv(context).chunk(3, dim=-1), so that each head's scores are (t_q, t_k)."
)


def _expect_cross_attention(candidate: Callable[..., Any]) -> None:
    """With a context of t_k != t_q tokens: queries from x, keys and values from the context."""
    layer, ref, _ = _build_pair(candidate, 12, 3, True, torch.float64)
    x, context = randn(2, 4, 12), randn(2, 7, 12)  # (b, t_q, d_model), (b, t_k, d_model)
    padding = reference.padding_mask(torch.tensor([7, 5]), 7)[:, None, :]  # (b, 1, t_k): the context's
    when = {
        "raised TypeError": f"{_SIGNATURE} With a context, keys and values come from it.",
        "must match the size of tensor": "With a context the scores are (b, h, t_q, t_k) and the context's "
        "padding mask (b, 1, t_k) broadcasts against them; scores of (b, h, t_q, t_q) mean that k and v "
        "still come from x: take them from self.qkv(context).",
    }
    for mask, label in ((None, "without mask"), (padding, "with the context's (b, 1, t_k) padding mask")):
        kwargs: dict[str, Any] = {"context": context} | ({} if mask is None else {"mask": mask})
        result = _call_with_hints("MultiHeadAttention.forward", layer, x, when=when, **kwargs)
        what = f"Your MultiHeadAttention(12, 3) output for 4 queries and a context of 7 tokens, {label},"
        hints: dict[tuple[int, ...], str] = {
            (2, 7, 12): "That is one row per context token: the output has one row per query of x, "
            "(b, t_q, d_model). Take q from self.qkv(x), and k, v from self.qkv(context).",
        }
        out = expect_tensor(result, (2, 4, 12), what, finite=False, hints=hints)
        ignored = Mistake(_CONTEXT_IGNORED, lambda x, context, mask=None: ref(x, mask=mask))
        probe = _diagnose_by_probe(functools.partial(_probe_mha, candidate, 3, True, mask, False, 7, 12))
        expect_close(
            out,
            ref(x, **kwargs),
            what,
            mistakes=[ignored],
            args=(x,),
            kwargs=kwargs,
            diagnose=probe,
        )


def _expect_runs_on_cuda(candidate: Callable[..., Any]) -> None:
    """Where there is a GPU: the layer moved there with .to() runs there and agrees with the reference."""
    device = cuda_device()
    if device is None:
        return
    layer, ref, _ = _build_pair(candidate, 12, 3, True, torch.float32)
    layer, ref = layer.to(device), ref.to(device)
    x = randn(2, 5, 12, dtype=torch.float32).to(device)  # (b, t, d_model)
    result = _call_with_hints(
        "MultiHeadAttention.forward",
        layer,
        x,
        is_causal=True,
        when={
            "same device": "Create new tensors (a mask, positions) on x.device, for example "
            "causal_mask(t, device=x.device)."
        },  # fmt: skip
    )
    what = f"Your MultiHeadAttention(12, 3) on {device.type}, with is_causal=True,"
    out = expect_tensor(result, (2, 5, 12), what, device=device, finite=False)
    expect_close(out, ref(x, is_causal=True), what)


def _build_pair(
    candidate: Callable[..., Any], d_model: int, n_heads: int, bias: bool, dtype: torch.dtype
) -> tuple[nn.Module, nn.Module, dict[str, torch.Tensor]]:
    """The learner's layer and the reference, both in eval mode with the same seeded parameters."""
    layer = _call_with_hints(
        "MultiHeadAttention",
        candidate,
        d_model,
        n_heads,
        bias=bias,
        when={
            "raised TypeError": "The constructor is MultiHeadAttention(d_model, n_heads, bias=True).",
            "before Module.__init__() call": "Call super().__init__() first in __init__, then create "
            "self.qkv and self.out.",
        },
    )
    if not isinstance(layer, nn.Module):
        raise CheckFailed(
            f"MultiHeadAttention({d_model}, {n_heads}) should make an nn.Module, but made "
            f"{type(layer).__name__}: write `class MultiHeadAttention(nn.Module):` and call "
            "super().__init__() in __init__."
        )
    _expect_linear(layer, "qkv", d_model, 3 * d_model, bias, "d_model, 3 * d_model")
    _expect_linear(layer, "out", d_model, d_model, bias, "d_model, d_model")
    expected_names = {"qkv.weight", "out.weight"} | ({"qkv.bias", "out.bias"} if bias else set())
    extra = sorted({name for name, _ in layer.named_parameters()} - expected_names)
    if extra:
        raise CheckFailed(
            f"Your MultiHeadAttention has parameters besides self.qkv and self.out: {', '.join(extra)}. "
            "The layer has the parameters of torch.nn.MultiheadAttention: one nn.Linear for q, k and v "
            "together (qkv) and one for the output (out); remove the others."
        )
    layer = layer.to(dtype).eval()
    ref = reference.MultiHeadAttention(d_model, n_heads, bias=bias).to(dtype).eval()
    params: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, parameter in ref.named_parameters():
            fan_in = parameter.shape[-1] if parameter.dim() == 2 else 4
            value = randn(*parameter.shape, dtype=dtype) * (1.5 / math.sqrt(fan_in))
            parameter.copy_(value)
            layer.get_parameter(name).copy_(value)
            params[name] = value
    return layer, ref, params


def _expect_linear(layer: nn.Module, name: str, d_in: int, d_out: int, bias: bool, signature: str) -> None:
    """Require `layer.NAME` to be a Linear(d_in, d_out) with a bias exactly when `bias`."""
    linear = getattr(layer, name, None)
    make = f"self.{name} = nn.Linear({signature}, bias=bias)"
    if linear is None:
        raise CheckFailed(
            f"Your MultiHeadAttention has no attribute `{name}`: create it in __init__ as {make}."
        )
    weight = getattr(linear, "weight", None)
    if not isinstance(weight, nn.Parameter):
        raise CheckFailed(f"self.{name} of your MultiHeadAttention should be an nn.Linear: {make}.")
    if tuple(weight.shape) != (d_out, d_in):
        swapped = " (in_features and out_features swapped?)" if tuple(weight.shape) == (d_in, d_out) else ""
        raise CheckFailed(
            f"self.{name}.weight has shape {tuple(weight.shape)}, but nn.Linear({signature}) with "
            f"d_model = {d_in} has weight shape {(d_out, d_in)}{swapped}: {make}."
        )
    has_bias = getattr(linear, "bias", None) is not None
    if has_bias != bias:
        state = "has a bias although" if has_bias else "has no bias although"
        raise CheckFailed(
            f"self.{name} {state} the layer was made with bias={bias}: pass the argument on, {make}."
        )


def _mha_cases(d_model: int) -> list[tuple[torch.Tensor, torch.Tensor | None, bool, str]]:
    """(x, mask, is_causal, label): no mask, causal, padding, a full (b, t, t) and a (t, t) mask, both."""
    b, t = 2, 5
    padding = reference.padding_mask(torch.tensor([5, 3]), t)[:, None, :]  # (b, 1, t)
    full = (torch.rand(b, t, t) < 0.6) | torch.eye(t, dtype=torch.bool)  # (b, t, t), the diagonal kept
    shared = (torch.rand(t, t) < 0.6) | torch.eye(t, dtype=torch.bool)  # (t, t)
    return [
        (randn(b, t, d_model), None, False, "without mask"),
        (randn(b, t, d_model), None, True, "with is_causal=True"),
        (randn(b, t, d_model), padding, False, "with a (b, 1, t) padding mask"),
        (randn(b, t, d_model), full, False, "with a (b, t, t) mask"),
        (randn(b, t, d_model), shared, False, "with a (t, t) mask"),
        (randn(b, t, d_model), padding, True, "with a padding mask and is_causal=True"),
    ]


def _call_forward(layer: nn.Module, x: torch.Tensor, mask: torch.Tensor | None, is_causal: bool) -> Any:
    kwargs: dict[str, Any] = {}
    if mask is not None:
        kwargs["mask"] = mask
    if is_causal:
        kwargs["is_causal"] = True
    when = {"raised TypeError": _SIGNATURE}
    if mask is not None:
        when["must match the size of tensor"] = _BROADCAST_HINT
    return _call_with_hints("MultiHeadAttention.forward", layer, x, when=when, **kwargs)


def _compare(
    layer: nn.Module,
    expected: torch.Tensor,
    params: dict[str, torch.Tensor],
    n_heads: int,
    x: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    config: str,
    label: str,
    probe: Callable[[], str | None] | None = None,
) -> None:
    result = _call_forward(layer, x, mask, is_causal)
    if isinstance(result, tuple | list):
        raise CheckFailed(
            f"forward returned a {type(result).__name__} of {len(result)} items: it should return only "
            "the output tensor (b, t, d_model). (torch.nn.MultiheadAttention returns (out, weights); "
            "ours does not.)"
        )
    b, t, d_model = x.shape
    hints = {
        (b, n_heads, t, d_model // n_heads): "Those are the heads before merging: merge them "
        "(merge_heads) and apply self.out.",
        (b, t, 3 * d_model): "That is the size of self.qkv(x): split it into q, k and v.",
    }
    what = f"Your MultiHeadAttention{config} output {label}"
    out = expect_tensor(result, expected.shape, what, finite=False, hints=hints)
    mistakes = [Mistake(message, _wrong(params, n_heads, variant)) for message, variant in MHA_VARIANTS]
    kwargs = {"mask": mask, "is_causal": is_causal}
    expect_close(
        out,
        expected,
        what,
        mistakes=mistakes,
        args=(x,),
        kwargs=kwargs,
        nonfinite_hint="In these tests every query may attend at least one key, itself.",
        diagnose=None if probe is None else _diagnose_by_probe(probe),
    )


def _diagnose_by_probe(probe: Callable[[], str | None]) -> Callable[[torch.Tensor, torch.Tensor], str | None]:
    """A `diagnose` for expect_close that ignores the outputs and runs the probe."""
    return lambda actual, expected: probe()


def _reference_heads(
    params: dict[str, torch.Tensor],
    n_heads: int,
    x: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    context: torch.Tensor | None = None,
) -> Heads:
    """The reference layer's per-head q, k, v and allowed keys, for the probe."""
    source = x if context is None else context

    def project(t: torch.Tensor) -> list[torch.Tensor]:
        qkv = F.linear(t, params["qkv.weight"], params.get("qkv.bias"))  # (b, t, 3·d_model)
        return [rearrange(c, "b t (h d) -> b h t d", h=n_heads) for c in qkv.chunk(3, dim=-1)]

    q = project(x)[0]  # (b, h, t_q, d)
    _, k, v = project(source)  # each (b, h, t_k, d)
    b, h, t_q, _ = q.shape
    t_k = k.shape[-2]
    allowed = torch.ones(b, h, t_q, t_k, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask.unsqueeze(-3)
    causal = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q) if is_causal else None
    if causal is not None:
        allowed = allowed & causal
    others = [("mixes the keys k instead of the values v: out = weights @ v, with v its own projection.", k)]
    if context is not None:
        x_values = project(x)[2]
        if x_values.shape == v.shape:
            others.append(
                ("takes the values from x: with a context, keys and values both come from it.", x_values)
            )
    return Heads(q, k, v, allowed, causal, tuple(others))


def _probe_mha(
    candidate: Callable[..., Any],
    n_heads: int,
    bias: bool,
    mask: torch.Tensor | None,
    is_causal: bool,
    context_tokens: int | None = None,
    shown_d_model: int | None = None,
) -> str | None:
    """Which part of the learner's layer is wrong, on a layer with d_k = 8 ≥ the number of keys
    (`shown_d_model`: the size of the layer the call that failed was made on)."""
    d_model = 8 * n_heads
    layer, ref, params = _build_pair(candidate, d_model, n_heads, bias, torch.float64)
    b = 2  # as in the check's cases, whose masks are (b, 1, t), (b, t, t) or (t, t)
    if context_tokens is None:
        x, context = randn(b, 5 if mask is None else mask.shape[-1], d_model), None
    else:
        x, context = randn(b, 4, d_model), randn(b, context_tokens, d_model)
    given: dict[str, Any] = {} if context is None else {"context": context}
    if mask is not None:
        given["mask"] = mask
    if is_causal:
        given["is_causal"] = True
    merged = merged_input(layer, lambda: layer(x, **given))
    heads = _reference_heads(params, n_heads, x, mask, is_causal, context)
    found = diagnose_heads(merged, heads)
    return read_on(found, f"MultiHeadAttention({d_model}, {n_heads})", d_model == shown_d_model)


def _wrong(
    params: dict[str, torch.Tensor], n_heads: int, variant: MultiHeadVariant
) -> Callable[..., torch.Tensor]:
    def wrong(x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        return _multi_head(params, n_heads, x, mask, is_causal, variant)

    return wrong


def _expect_layer_gradients(candidate: Callable[..., Any]) -> None:
    """Gradients with respect to x and to every parameter match the reference's."""
    layer, ref, _ = _build_pair(candidate, 12, 3, True, torch.float64)
    layer.zero_grad()
    mask = reference.padding_mask(torch.tensor([5, 4]), 5)[:, None, :]  # (b, 1, t)
    x = randn(2, 5, 12)

    def forward(module: nn.Module) -> Callable[..., Any]:
        return lambda x, mask=None, is_causal=False: module(x, mask=mask, is_causal=is_causal)

    kwargs = {"mask": mask, "is_causal": True}
    expect_gradients("MultiHeadAttention", forward(layer), forward(ref), [x], ["x"], kwargs=kwargs)
    for module in (layer, ref):
        module.zero_grad()
        out = module(x, mask=mask, is_causal=True)  # (b, t, d_model)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    for name, parameter in ref.named_parameters():
        grad = layer.get_parameter(name).grad
        if grad is None:
            raise CheckFailed(
                f"No gradient reaches self.{name} of your MultiHeadAttention: the output must be computed "
                f"from self.{name.split('.')[0]}(...) without .detach(), .data or torch.no_grad()."
            )
        assert parameter.grad is not None  # the reference's parameters all take part in its output
        expect_close(grad, parameter.grad, f"The gradient with respect to your self.{name}")
