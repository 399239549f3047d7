"""Checks for notebook 10: grouped-query attention, sliding windows and FlexAttention's mods."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from einops import rearrange
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attn_course import flex, reference
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
    size_cases,
)
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    call,
    check,
    difference,
    expect_close,
    expect_gradients,
    expect_tensor,
    is_close,
    learner_raised,
    library_dirs,
    randn,
)
from attn_course.checks._nan_origin import first_nan
from attn_course.checks._probe import Heads, diagnose_heads, merged_input, read_on
from attn_course.checks.flash import _FUSED, _OpRecorder
from attn_course.checks.masking import _expect_bool_mask
from attn_course.demos.memory import LargestTensor
from attn_course.heads import merge_heads, split_heads

# ---------------------------------------------------------------------------------------------
# The contracts of notebook 10: what each exercise must accept and return.

_FLOATS = (torch.float32, torch.float64)

REPEAT_CONTRACT = Contract(
    "repeat_kv",
    args=(Arg("x", ("B", "H_kv", "T", "d"), views=VIEW_KINDS, swap=(1, 2)),),
    axes=(
        Axis("B", (2,)),
        Axis("H_kv", (3,), "key/value heads that are not a power of two"),
        Axis("R", (3,), "n_rep"),
        Axis("T", (5,)),
        Axis("d", (6,), "a head width that is not a power of two"),
    ),
    returns=(Returns("out", ("B", "H_kv·R", "T", "d")),),
    dtypes=_FLOATS,
)
"""Exercise 1 of 10: x in any layout (the k and v of Exercise 2 come out of rearrange as transposed views,
(B, T, H_kv, d).transpose(1, 2)), float32 or float64, its dtype and device kept."""

FLASH_WINDOW_CONTRACT = Contract(
    "sliding_window_flash_attention",
    args=(
        Arg("q", ("B", "H", "T_q", "d"), views=VIEW_KINDS),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS),
        Arg("v", ("B", "H", "T_k", "d_v"), views=VIEW_KINDS),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (2, 3), "a head count that is not a power of two"),
        Axis("T_q", (9, 8, 7, 17), "one block (of 8), one short of it, and two blocks and one"),
        Axis("T_k", (17, 16, 9), "two blocks exactly, and as many keys as queries"),
        Axis("d", (6,), "a head width that is not a power of two"),
        Axis("d_v", (5,)),
        Axis("W", (5, 1, 40), "a window of 1, and one longer than the sequence"),
    ),
    returns=(Returns("out", ("B", "H", "T_q", "d_v")),),
    dtypes=_FLOATS,
    notes=("block_size=8 in every generated case; T_q <= T_k, so every query sees at least itself",),
)
"""Exercise 4 of 10: two batch axes, each of q, k and v alone a view (transposed as a multi-head layer
makes them), ragged sizes around a block, T_q < T_k, windows of 1 and beyond T, the inputs' dtype and
device."""

GQA_CONTRACT = Contract(
    "GroupedQueryAttention",
    args=(
        Arg("x", ("b", "t", "H·d_head"), views=VIEW_KINDS, swap=(0, 1)),
        Arg("mask", ("b", "t_m", "t"), views=VIEW_KINDS, swap=(1, 2), slice_axis=-1),
    ),
    axes=(
        Axis("b", (2, 1), "a batch of one"),
        Axis("t", (5,)),
        Axis("t_m", (5, 1), "a padding mask (b, 1, t) besides a (b, t, t) one"),
        Axis("H", (6,), "query heads that are not a power of two"),
        Axis("H_kv", (2, 3, 1), "groups of 3 and of 2 query heads, and one key/value head (MQA)"),
        Axis("d_head", (5,), "a head width that is not a power of two"),
    ),
    returns=(Returns("output", ("b", "t", "H·d_head")),),
    dtypes=_FLOATS,
    notes=("is_causal=True in every generated case; the mask allows every query its first key",),
)
"""Exercise 2 of 10's forward: a (b, t, t) mask and a (b, 1, t) one, head counts that are no power of two,
n_kv_heads from n_heads down to 1, x and the mask each alone a view, the output in x's dtype on x's
device."""

WINDOW_CONTRACT = Contract(
    "sliding_window_mask",
    args=(),
    axes=(
        Axis("T_q", (6, 9, 12), "as many queries as keys, and more: the first T_q - T_k rows see no key"),
        Axis("T_k", (9, 4), "fewer keys than queries"),
        Axis("W", (3, 1, 9, 20), "a window of 1, of T_k, and longer than the sequence"),
    ),
    returns=(Returns("mask", ("T_q", "T_k"), dtype="bool", device="cpu"),),
    notes=("bottom-right aligned: query i sits at position i + T_k - T_q; a row before every key is False",),
)
"""Exercise 3 of 10: any t_q and t_k, either larger, any window of at least 1; its generated sizes join the
hand-picked ones."""

ALIBI_CONTRACT = Contract(
    "alibi_score_mod",
    args=(),
    axes=(
        Axis("B", (2,), "a batch index b besides 0"),
        Axis("H", (4, 5, 1), "5 heads (one slope taken from 8 heads' list), and a single head"),
        Axis("T_q", (6, 4), "fewer queries than keys"),
        Axis("T_k", (6, 9), "more keys than queries"),
    ),
    returns=(Returns("scores", ("B", "H", "T_q", "T_k")),),
    notes=("compared where q_idx >= kv_idx, where ALiBi's causal mask keeps them; any dtype the mod gives",),
)
"""Exercise 5 of 10: the mod as flex_attention calls it (0-d indices under vmap), for every head count, any
batch index and T_q != T_k."""

DOCUMENT_CONTRACT = Contract(
    "document_mask_mod",
    args=(Arg("document_ids", ("T",), views=("sliced", "expanded"), slice_axis=0, expand_axis=0),),
    axes=(Axis("T", (10, 1, 17), "a single token, and a longer packing"),),
    returns=(Returns("mask", ("T", "T"), dtype="bool"),),
    dtypes=(torch.int64, torch.int32),
    notes=("document_ids may live on any device: the mod makes no tensor of its own",),
)
"""Exercise 6 of 10: document_ids of any integer dtype, a view or not, on any device (the mod evaluated
on the ids' device, as flex_attention evaluates it beside q)."""


def _function(contract: Contract, candidate: Callable[..., Any], **more: Any) -> Exercise:
    """A plain function's exercise: the learner's and the course's, the same on every case."""
    course = getattr(reference, contract.exercise)
    return Exercise(contract.exercise, lambda case: (candidate, course), **more)


def _generated(contract: Contract, exercise: Exercise, one_kind_each: bool = False) -> int:
    """The contract's generated cases, then one with the inputs on another device; how many ran."""
    ran = expect_contract_cases(contract, exercise, contract_cases(contract, one_kind_each))
    return ran + expect_inputs_device(contract, exercise)


# ---------------------------------------------------------------------------------------------
# repeat_kv

_GROUPED_HINT = (
    "query head j must read key/value head j // n_rep, so each head is repeated n_rep times in a row "
    "(grouped: 0, 0, 1, 1, 2, 2), not the whole set of heads n_rep times over (interleaved: 0, 1, 2, 0, "
    "1, 2, which is what x.repeat(1, n_rep, 1, 1) gives). Use x.repeat_interleave(n_rep, dim=1), or "
    'einops repeat(x, "b h t d -> b (h r) t d", r=n_rep).'
)


def _head_sources(out: torch.Tensor, x: torch.Tensor) -> list[int | None]:
    """For each head of out (b, h, t, d), the head of x (b, h_kv, t, d) it equals, or None."""
    sources: list[int | None] = []
    for j in range(out.shape[1]):
        found = [i for i in range(x.shape[1]) if is_close(out[:, j], x[:, i])]
        sources.append(found[0] if found else None)
    return sources


def _diagnose_heads(x: torch.Tensor, n_rep: int, out: torch.Tensor, expected: torch.Tensor) -> str:
    """Which head of x each head of the learner's result copies, if any: misplaced or computed heads."""
    sources = _head_sources(out, x)
    if all(s is not None for s in sources):
        want = [j // n_rep for j in range(x.shape[1] * n_rep)]
        return (
            f"holds the right heads in the wrong places: its heads are copies of heads {sources} of x, "
            f"but head j must be head j // n_rep, {want}: {_GROUPED_HINT}"
        )
    bad = [j for j, s in enumerate(sources) if s is None]
    return (
        f"has heads {bad} that are not copies of any head of x (repeat, do not compute): "
        f"{difference(out, expected)}"
    )


_REPEAT_MISTAKES = [
    Mistake(
        f"repeats the heads interleaved instead of grouped: {_GROUPED_HINT}",
        lambda x, n_rep: x.repeat(1, n_rep, 1, 1),
    ),
]


@check
def check_repeat_kv(candidate: Callable[..., Any]) -> str:
    """(b, h_kv, t, d) -> (b, h_kv·n_rep, t, d), head j a copy of head j // n_rep."""
    cases = [((2, 3, 5, 4), 2), ((1, 2, 3, 6), 3), ((2, 1, 4, 3), 4), ((2, 3, 5, 4), 1), ((3, 4, 2, 5), 2)]
    for shape, n_rep in cases:
        b, h_kv, t, d = shape
        x = randn(*shape)
        result = call("repeat_kv", candidate, x, n_rep)
        what = f"Your repeat_kv(x of shape {shape}, n_rep={n_rep})"
        hints = {
            (b, h_kv, t * n_rep, d): "It repeats along the time axis (dim=2): repeat the heads, dim=1.",
            (b * n_rep, h_kv, t, d): "It repeats along the batch axis (dim=0): repeat the heads, dim=1.",
            (b, h_kv, t, d * n_rep): "It repeats along the last axis: repeat the heads, dim=1.",
            (b, h_kv, n_rep, t, d): "Merge the new axis into the heads: (b, h_kv·n_rep, t, d).",
            (b, h_kv * n_rep * n_rep, t, d): "It repeats n_rep² times: each head appears n_rep times.",
        }
        out = expect_tensor(result, (b, h_kv * n_rep, t, d), what, hints=hints)
        expect_close(
            out,
            reference.repeat_kv(x, n_rep),
            what,
            mistakes=_REPEAT_MISTAKES,
            args=(x, n_rep),
            diagnose=functools.partial(_diagnose_heads, x, n_rep),
            called_as="",
            only=("known-mistake", "property"),
        )
    expect_gradients(
        "repeat_kv",
        lambda x: candidate(x, 2),
        lambda x: reference.repeat_kv(x, 2),
        [randn(2, 3, 4, 5)],
        ["x"],
    )
    generated = _generated(REPEAT_CONTRACT, _function(REPEAT_CONTRACT, candidate, after=_n_rep))
    return (
        f"5 shapes, n_rep 1 to 4 (MQA included), heads grouped, gradients, and {generated} cases from the "
        "exercise's contract (x a view, float32 and float64, on another device)"
    )


def _n_rep(case: Case) -> tuple[int]:
    return (case.size["R"],)


# ---------------------------------------------------------------------------------------------
# GroupedQueryAttention

_GQA_CONFIGS = [(16, 4, 4), (16, 4, 2), (24, 6, 3), (16, 4, 1)]
"""(d_model, n_heads, n_kv_heads): plain multi-head first, then grouped, then multi-query."""


@dataclass(frozen=True)
class GQAVariant:
    """How one GroupedQueryAttention is written: the right layer with the defaults, each other value a
    named slip (`_GQA_MISTAKES`)."""

    grouping: str = "grouped"
    """How k and v are shared: "grouped" (query head j reads head j // n_rep, right) or "interleaved"."""
    scale: str = "d_head"
    """What the scores are divided by the square root of: "d_head" (right), "d_model" or "none"."""
    out_proj: bool = True
    """False: the merged heads returned without self.out."""
    use_mask: bool = True
    """False: `mask` ignored."""
    use_causal: bool = True
    """False: is_causal ignored."""


def _gqa_forward(
    params: dict[str, torch.Tensor],
    n_heads: int,
    n_kv_heads: int,
    x: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    variant: GQAVariant = GQAVariant(),
) -> torch.Tensor:
    """The layer as `variant` writes it; the default variant is right."""

    def linear(name: str, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))

    t = x.shape[-2]
    n_rep = n_heads // n_kv_heads
    q = split_heads(linear("q", x), n_heads)  # (b, h, t, d)
    k, v = split_heads(linear("k", x), n_kv_heads), split_heads(linear("v", x), n_kv_heads)  # (b, h_kv, t, d)
    if variant.grouping == "grouped":
        k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)  # (b, h, t, d)
    else:  # interleaved
        k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)  # (b, h, t, d)
    d = {"d_head": q.shape[-1], "d_model": x.shape[-1], "none": 1}[variant.scale]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (b, h, t, t)
    allowed = torch.ones(t, t, dtype=torch.bool, device=x.device)  # (t, t)
    if mask is not None and variant.use_mask:
        allowed = allowed & mask.unsqueeze(-3)  # (b, 1, t, t)
    if is_causal and variant.use_causal:
        allowed = allowed & torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (b, h, t, t)
    weights = weights.nan_to_num(0.0)  # a row that allows no key gives 0, as the course's attention
    merged = merge_heads(weights @ v)  # (b, t, d_model)
    return linear("out", merged) if variant.out_proj else merged


_GQA_MISTAKES: list[tuple[str, GQAVariant]] = [
    (
        f"shares the key/value heads interleaved instead of grouped: {_GROUPED_HINT}",
        GQAVariant(grouping="interleaved"),
    ),
    (
        "looks like the scores were divided by √d_model: each head's scores are dot products of "
        "d_head = d_model / n_heads numbers, so divide by √d_head.",
        GQAVariant(scale="d_model"),
    ),
    ("looks like the scores were not scaled: divide them by √d_head.", GQAVariant(scale="none")),
    ("forgets the output projection: after merging the heads, apply self.out.", GQAVariant(out_proj=False)),
    ("ignores is_causal=True: pass it on to attention.", GQAVariant(use_causal=False)),
    (
        "ignores `mask`: pass it on to attention with a head axis, mask.unsqueeze(-3).",
        GQAVariant(use_mask=False),
    ),
]


def _gqa_layer(candidate: Callable[..., Any], d_model: int, n_heads: int, n_kv_heads: int) -> nn.Module:
    layer = call(
        "GroupedQueryAttention",
        candidate,
        d_model,
        n_heads,
        n_kv_heads,
        hint="The constructor is GroupedQueryAttention(d_model, n_heads, n_kv_heads); call "
        "super().__init__() first.",
    )
    if not isinstance(layer, nn.Module):
        raise CheckFailed(
            f"GroupedQueryAttention({d_model}, {n_heads}, {n_kv_heads}) should make an nn.Module, but made "
            f"{type(layer).__name__}: write `class GroupedQueryAttention(nn.Module):`."
        )
    d_kv = n_kv_heads * (d_model // n_heads)
    for name, d_out, signature in (
        ("q", d_model, "d_model, d_model"),
        ("k", d_kv, "d_model, n_kv_heads * d_head"),
        ("v", d_kv, "d_model, n_kv_heads * d_head"),
        ("out", d_model, "d_model, d_model"),
    ):
        weight = getattr(getattr(layer, name, None), "weight", None)
        make = f"self.{name} = nn.Linear({signature}, bias=False)"
        if not isinstance(weight, nn.Parameter):
            raise CheckFailed(
                f"Your GroupedQueryAttention has no nn.Linear `self.{name}`: create it in __init__ as {make}."
            )
        if tuple(weight.shape) != (d_out, d_model):
            raise CheckFailed(
                f"self.{name}.weight of GroupedQueryAttention({d_model}, {n_heads}, {n_kv_heads}) has shape "
                f"{tuple(weight.shape)}, expected {(d_out, d_model)}: {make}, d_head = d_model // n_heads"
                + (
                    " (k and v project to the n_kv_heads key/value heads only: that is the saving)."
                    if name in "kv"
                    else "."
                )
            )
    allowed = {f"{n}.{p}" for n in ("q", "k", "v", "out") for p in ("weight", "bias")}
    extra = sorted({name for name, _ in layer.named_parameters()} - allowed)
    if extra:
        raise CheckFailed(
            f"Your GroupedQueryAttention has parameters besides self.q, self.k, self.v and self.out: "
            f"{', '.join(extra)}. Remove them."
        )
    return layer


def _probe_gqa(
    candidate: Callable[..., Any],
    n_heads: int,
    n_kv_heads: int,
    mask: torch.Tensor | None,
    is_causal: bool,
    shown_d_model: int | None = None,
) -> str | None:
    """Which part of the learner's layer is wrong, on a layer with d_head = 8 ≥ the number of keys
    (`shown_d_model`: the size of the layer the call that failed was made on)."""
    d_model = 8 * n_heads
    layer = _gqa_layer(candidate, d_model, n_heads, n_kv_heads).double().eval()
    params = {}
    with torch.no_grad():
        for name, parameter in layer.named_parameters():
            parameter.copy_(randn(*parameter.shape) * (1.5 / math.sqrt(parameter.shape[-1])))
            params[name] = parameter.detach().clone()

    def linear(name: str, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))

    x = randn(2, 5, d_model)
    n_rep = n_heads // n_kv_heads
    q = split_heads(linear("q", x), n_heads)  # (b, h, t, d)
    k, v = split_heads(linear("k", x), n_kv_heads), split_heads(linear("v", x), n_kv_heads)  # (b, h_kv, t, d)
    allowed = torch.ones(2, n_heads, 5, 5, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask.unsqueeze(-3)
    causal = torch.ones(5, 5, dtype=torch.bool).tril() if is_causal else None
    if causal is not None:
        allowed = allowed & causal
    others = (
        (
            "mixes the keys k instead of the values v: out = weights @ v, with v its own projection.",
            k.repeat_interleave(n_rep, dim=1),
        ),
        (
            "shares the value heads interleaved (query head j reads value head j % n_kv_heads): it reads "
            "head j // (n_heads // n_kv_heads), as its key head does (repeat_kv, repeat_interleave).",
            v.repeat(1, n_rep, 1, 1),
        ),
    )
    strided_q = rearrange(linear("q", x), "b t (d h) -> b h t d", h=n_heads)  # (b, h, t, d): (d h)
    strided_k = rearrange(linear("k", x), "b t (d h) -> b h t d", h=n_kv_heads).repeat_interleave(
        n_rep, dim=1
    )
    split = "split into heads as (d h): head i gets every h-th feature; the heads are contiguous blocks"
    other_scores = (
        (f"has its queries {split}, rearrange(q, 'b t (h d) -> b h t d', h=n_heads).", strided_q,
         k.repeat_interleave(n_rep, dim=1)),
        (f"has its keys {split}, rearrange(k, 'b t (h d) -> b h t d', h=n_kv_heads).", q, strided_k),
        (f"has its queries and keys {split}, (h d), not (d h).", strided_q, strided_k),
    )  # fmt: skip
    heads = Heads(
        q, k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1), allowed, causal, others,
        other_scores,
    )  # fmt: skip
    given: dict[str, Any] = {"mask": mask} if mask is not None else {}
    if is_causal:
        given["is_causal"] = True
    found = diagnose_heads(merged_input(layer, lambda: layer(x, **given)), heads)
    built = f"GroupedQueryAttention({d_model}, {n_heads}, {n_kv_heads})"
    return read_on(found, built, d_model == shown_d_model)


_SHARING = (
    " It is right with n_kv_heads == n_heads (plain multi-head attention), so the sharing goes wrong: query "
    "head j reads key/value head j // (n_heads // n_kv_heads); repeat k and v with your repeat_kv before "
    "the scores."
)


def _gqa_reading(
    actual: torch.Tensor,
    expected: torch.Tensor,
    candidate: Any,
    heads: tuple[int, int],
    mask: torch.Tensor | None,
    is_causal: bool,
    shared_fails: bool,
    shown_d_model: int | None = None,
) -> str | None:
    """What the probe reads of the learner's heads; else, once plain multi-head attention passed, that
    the sharing of key/value heads goes wrong."""
    probed = _probe_gqa(candidate, *heads, mask, is_causal, shown_d_model)
    return probed or (f"is wrong: {difference(actual, expected)}{_SHARING}" if shared_fails else None)


@check
def check_GroupedQueryAttention(candidate: Any) -> str:  # noqa: N802 (exercise name)
    """Seeded weights copied into the learner's layer; MHA, GQA and MQA against the reference."""
    if isinstance(candidate, nn.Module):
        raise CheckFailed(
            "check_GroupedQueryAttention expects your class itself, not a layer made from it: call "
            "check_GroupedQueryAttention(GroupedQueryAttention)."
        )
    passed_mha = False
    for d_model, n_heads, n_kv_heads in _GQA_CONFIGS:
        layer = _gqa_layer(candidate, d_model, n_heads, n_kv_heads).double().eval()
        params = {}
        with torch.no_grad():
            for name, parameter in layer.named_parameters():
                value = randn(*parameter.shape) * (1.5 / math.sqrt(parameter.shape[-1]))
                parameter.copy_(value)
                params[name] = value
        b, t = 2, 5
        padding = reference.padding_mask(torch.tensor([5, 3]), t)[:, None, :]  # (b, 1, t)
        config = f"GroupedQueryAttention({d_model}, {n_heads}, {n_kv_heads})"
        for mask, is_causal, label in (
            (None, False, "without mask"),
            (None, True, "with is_causal=True"),
            (padding, True, "with a padding mask and is_causal=True"),
        ):
            x = randn(b, t, d_model)
            expected = _gqa_forward(params, n_heads, n_kv_heads, x, mask, is_causal)  # (b, t, d_model)
            kwargs: dict[str, Any] = {}
            if mask is not None:
                kwargs["mask"] = mask
            if is_causal:
                kwargs["is_causal"] = True
            result = call(
                f"{config}.forward",
                layer,
                x,
                **kwargs,
                hint="The signature is forward(self, x, mask=None, is_causal=False).",
            )
            what = f"Your {config} output {label}"
            out = expect_tensor(result, expected.shape, what, finite=False)
            if is_close(out, expected):
                continue
            mistakes = [
                Mistake(
                    message,
                    functools.partial(_gqa_forward, params, n_heads, n_kv_heads, x, mask, is_causal, variant),
                )
                for message, variant in _GQA_MISTAKES
            ]
            heads = (n_heads, n_kv_heads)
            reading = functools.partial(
                _gqa_reading,
                candidate=candidate,
                heads=heads,
                mask=mask,
                is_causal=is_causal,
                shared_fails=passed_mha,
                shown_d_model=d_model,
            )
            # the one pipeline (_diagnosis.py): the named slips, a one-change mutant, the probe, the own line
            expect_close(out, expected, what, mistakes=mistakes, diagnose=reading, called_as="")
        passed_mha = passed_mha or n_heads == n_kv_heads
    generated = _expect_gqa_contract(candidate)
    layer = _gqa_layer(candidate, 16, 4, 2).double()
    q_proj = cast(nn.Linear, layer.q)  # the learner's layer projects with nn.Linear, as the reference does
    ref = reference.GroupedQueryAttention(16, 4, 2, bias=q_proj.bias is not None).double()
    ref.load_state_dict(layer.state_dict())
    expect_gradients(
        "GroupedQueryAttention",
        lambda x: layer(x, is_causal=True),
        lambda x: ref(x, is_causal=True),
        [randn(2, 5, 16)],
        ["x"],
    )
    return (
        "MHA (4 of 4), GQA (2 of 4, 3 of 6) and MQA (1 of 4) heads, is_causal and masks, gradients, and "
        f"{generated} cases from the exercise's contract ((b, t, t) masks, 2 and 3 key/value heads of 6, "
        "x or the mask a view, float32 and float64, on another device)"
    )


def _gqa_pair(candidate: Any, case: Case) -> tuple[nn.Module, nn.Module]:
    """The learner's layer and the course's for a case's head counts, with the same seeded weights."""
    n_heads, n_kv_heads = case.size["H"], case.size["H_kv"]
    d_model = n_heads * case.size["d_head"]
    layer = _gqa_layer(candidate, d_model, n_heads, n_kv_heads)
    course = reference.GroupedQueryAttention(
        d_model, n_heads, n_kv_heads, bias=getattr(layer.q, "bias", None) is not None
    )
    theirs = dict(course.named_parameters())
    with torch.no_grad():
        for name, parameter in layer.named_parameters():  # the names and shapes _gqa_layer checked
            theirs[name].copy_(randn(*parameter.shape) * (1.5 / math.sqrt(parameter.shape[-1])))
            parameter.copy_(theirs[name])
    device = "meta" if case.changed == "meta" else None
    return layer.to(case.dtype).to(device), course.to(case.dtype).to(device)


def _first_key_allowed(case: Case, arg: Arg) -> Callable[..., torch.Tensor]:
    """A random mask that allows every query its first key (so that with is_causal no row is empty),
    seeded normal numbers for x."""
    if arg.name != "mask":
        return lambda *shape: randn(*shape, dtype=case.dtype)

    def mask(*shape: int) -> torch.Tensor:
        allowed = torch.rand(*shape) < 0.7  # shape of the mask
        allowed[..., 0] = True
        return allowed

    return mask


def _expect_gqa_contract(candidate: Any) -> int:
    """The contract's generated cases, with is_causal=True and a mask; then on the meta device."""
    exercise = Exercise(
        "GroupedQueryAttention.forward",
        functools.partial(_gqa_pair, candidate),
        extra=lambda case, tensors: {"is_causal": True},
        positional=1,
        alloc=_first_key_allowed,
    )
    return _generated(GQA_CONTRACT, exercise)


# ---------------------------------------------------------------------------------------------
# sliding_window_mask


@dataclass(frozen=True)
class WindowVariant:
    """How one sliding window is written: the right mask with the defaults, each other value a named slip
    (`_WINDOW_MISTAKES`, and `_FLASH_WINDOW_MISTAKES` for the tiled pass)."""

    near: int = 0
    """The least distance p - j kept: 0 (the query itself, right) or 1."""
    far: int = 0
    """Keys kept while p - j < window + far: 0 (right), 1 (window + 1 keys) or -1."""
    causal: bool = True
    """False: no near side at all, every key after p kept too."""
    two_sided: bool = False
    """True: |p - j| < window, the keys after p let in."""
    windowed: bool = True
    """False: the causal mask, no far side."""
    offset: str = "bottom-right"
    """Where query i sits: "bottom-right" (position i + t_k - t_q, right), "top-left" (position i where
    t_k > t_q) or "clamped" (position i where t_q > t_k: the offset clamped at 0)."""
    forward: bool = False
    """True: the distance taken as j - p (key minus query), a window ahead of the query."""
    inverted: bool = False
    """True: the mask negated."""
    blocks: str = "any"
    """For the tiled pass, the key blocks each query block visits: "any" (every block the mask needs),
    "window" (from the block holding the first row's first key) or "late" (the block after it)."""


def _window(
    t_q: int, t_k: int, window: int, variant: WindowVariant = WindowVariant(), block_size: int = 1
) -> torch.Tensor:
    """(t_q, t_k), allowed as `variant` writes it: near <= p - j < window + far, p the query's position."""
    offset = t_k - t_q
    if (variant.offset == "top-left" and offset > 0) or (variant.offset == "clamped" and offset < 0):
        offset = 0
    distance = (torch.arange(t_q)[:, None] + offset) - torch.arange(t_k)[None, :]  # (t_q, t_k): p - j
    if variant.forward:
        distance = -distance  # (t_q, t_k): j - p
    if variant.two_sided:
        distance = distance.abs()
    allowed = distance >= variant.near if variant.causal else torch.ones(t_q, t_k, dtype=torch.bool)
    if variant.windowed:
        allowed = allowed & (distance < window + variant.far)  # (t_q, t_k)
    if variant.blocks != "any":
        allowed = allowed & _visited(t_q, t_k, window, block_size, round_up=variant.blocks == "late")
    return ~allowed if variant.inverted else allowed


_WINDOW_MISTAKES: list[tuple[str, WindowVariant]] = [
    (
        "leaves out each query's own key (p - j = 0): the window counts the query itself, keys "
        "p - window + 1 … p: keep key j when 0 <= p - j < window (>=, not >, on the near side).",
        WindowVariant(near=1),
    ),
    (
        "points the window forward: it keeps the keys j - p = 0 … window - 1 after the query (key minus "
        "query), which are the future, as the right mask transposed does (keys on the rows). The distance is "
        "how far BACK the key is, p - j (query minus key), with the queries on the rows, (t_q, t_k).",
        WindowVariant(forward=True),
    ),
    (
        "lets each query see window + 1 keys (off by one): query at position p sees keys p - window + 1 … "
        "p, itself included, `window` keys in all: keep key j when 0 <= p - j < window (<, not <=).",
        WindowVariant(far=1),
    ),
    (
        "lets each query see only window - 1 keys (off by one): keys p - window + 1 … p, itself "
        "included, are `window` keys: keep key j when 0 <= p - j < window.",
        WindowVariant(far=-1),
    ),
    (
        "leaves out the query's own position: a token attends itself, keep key j when 0 <= p - j < window.",
        WindowVariant(near=1, far=1),
    ),
    (
        "is aligned top-left: with t_k > t_q the queries are the last t_q positions, so query i sits at "
        "position p = i + t_k - t_q (bottom-right, like your causal_mask).",
        WindowVariant(offset="top-left"),
    ),
    (
        "lets the first queries see keys although t_q > t_k: with more queries than keys, query i still "
        "sits at position p = i + t_k - t_q, so the first t_q - t_k queries come before every key and "
        "their rows are all False. Keep the negative offset (an offset clamped at 0 aligns it top-left).",
        WindowVariant(offset="clamped"),
    ),
    (
        "lets a query see its future: the window reaches back only, keys p - window + 1 … p; "
        "|p - j| < window also lets in the keys after p.",
        WindowVariant(two_sided=True),
    ),
    (
        "lets a query see its future: p - j < window alone holds for every key after p too (p - j is "
        "negative there); also require p - j >= 0, the causal part.",
        WindowVariant(causal=False),
    ),
    (
        "ignores the window: this is the causal mask. Also drop the keys more than window - 1 positions "
        "back, p - j < window.",
        WindowVariant(windowed=False),
    ),
    (
        "is inverted: True must mark the keys a query MAY attend, the window.",
        WindowVariant(inverted=True),
    ),
]


def _row_difference(got: torch.Tensor, expected: torch.Tensor, t_q: int, t_k: int) -> str:
    """Which query rows differ, and what the first one allows against what it should."""
    rows = [i for i in range(t_q) if not torch.equal(got[i].cpu(), expected[i])]
    i = rows[0]

    def keys(row: torch.Tensor) -> str:
        allowed = row.nonzero().flatten().tolist()
        return f"keys {allowed}" if allowed else "no key"

    return (
        f"rows {rows} differ. Query {i} (position {i + t_k - t_q}) may attend {keys(got[i].cpu())}, "
        f"but should attend {keys(expected[i])}."
    )


_WINDOW_SLIPS = [
    Mistake(message, functools.partial(_window, variant=variant)) for message, variant in _WINDOW_MISTAKES
]


def _equal(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether two masks are the same, entry for entry."""
    return actual.shape == expected.shape and torch.equal(actual.cpu(), expected.cpu())


def _diagnose_rows(t_q: int, t_k: int, actual: torch.Tensor, expected: torch.Tensor) -> str:
    """Which rows of a window mask differ (the property read where no slip matched)."""
    return f"is wrong: {_row_difference(actual, expected, t_q, t_k)}"


@check
def check_sliding_window_mask(candidate: Callable[..., Any]) -> str:
    """Boolean (t_q, t_k): key j allowed when 0 <= p - j < window, p = i + t_k - t_q."""
    hand_picked = [(6, 6, 3), (4, 9, 3), (5, 5, 1), (5, 5, 5), (5, 5, 8), (3, 7, 2), (1, 6, 4), (7, 7, 2)]
    generated = [(c.size["T_q"], c.size["T_k"], c.size["W"]) for c in size_cases(WINDOW_CONTRACT)]
    cases = list(dict.fromkeys([*hand_picked, *generated]))
    for t_q, t_k, window in cases:
        expected = reference.sliding_window_mask(t_q, t_k, window)
        got = call(
            "sliding_window_mask",
            candidate,
            t_q,
            t_k,
            window,
            hint="The signature is sliding_window_mask(t_q, t_k, window).",
        )
        what = f"sliding_window_mask({t_q}, {t_k}, window={window})"
        mask = _expect_bool_mask(got, expected, what).cpu()  # (t_q, t_k)
        expect_close(
            mask,
            expected,
            f"Your {what}",
            mistakes=_WINDOW_SLIPS,
            args=(t_q, t_k, window),
            close=_equal,
            diagnose=functools.partial(_diagnose_rows, t_q, t_k),
            called_as="",
            only=("known-mistake", "property"),
        )
    return (
        f"{len(cases)} sizes: square, t_k > t_q (bottom-right) and t_q > t_k (rows before every key), "
        "windows of 1, of t and beyond t, dtype bool"
    )


# ---------------------------------------------------------------------------------------------
# sliding_window_flash_attention


def _visited(t_q: int, t_k: int, window: int, block_size: int, round_up: bool = False) -> torch.Tensor:
    """(t_q, t_k): True where key j lies in a block the reference visits for query i's block."""
    visited = torch.zeros(t_q, t_k, dtype=torch.bool)
    offset = t_k - t_q
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        first = max(0, qs + offset - window + 1)
        start = -(-first // block_size) * block_size if round_up else first // block_size * block_size
        visited[qs:qe, start : max(0, min(t_k, qe + offset))] = True
    return visited


def _masked(variant: WindowVariant) -> Callable[..., torch.Tensor]:
    """The tiled pass as `variant` writes its window: attention with that mask."""

    def wrong(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, block_size: int = 64
    ) -> torch.Tensor:
        mask = _window(q.shape[-2], k.shape[-2], window, variant, block_size)  # (T_q, T_k)
        return reference.attention(q, k, v, mask=mask.to(q.device))[0]

    return wrong


_FLASH_WINDOW_MISTAKES: list[tuple[str, WindowVariant]] = [
    (
        "lets each query see window + 1 keys (off by one): query at position p sees keys p - window + 1 … p; "
        "mask key j when p - j >= window.",
        WindowVariant(far=1),
    ),
    (
        "aligns the window top-left: query i sits at position p = i + T_k - T_q (bottom-right).",
        WindowVariant(offset="top-left"),
    ),
    (
        "ignores the window: that is causal attention. Start each query block's key loop at the block "
        "holding its first row's first key, p - window + 1, and mask the older keys inside that block.",
        WindowVariant(windowed=False),
    ),
    (
        "lets a query see its future: mask the keys after p (p - j < 0) as well as those before the window.",
        WindowVariant(two_sided=True),
    ),
    (
        "visits the right key blocks but does not mask the keys older than the window inside the first "
        "ones: a block that holds the window's lower edge for some row also holds keys before it; mask "
        "key j with -inf when p - j >= window.",
        WindowVariant(windowed=False, blocks="window"),
    ),
    (
        "starts each query block's key loop one block late: the first key any of its rows needs, "
        "qs + T_k - T_q - window + 1, usually lies inside a block; start at that block's beginning, "
        "(first // block_size) * block_size, rounding down.",
        WindowVariant(blocks="late"),
    ),
]

_WINDOW_NONFINITE = {
    "sub": "Every query here sees at least itself, but a row can meet a whole block of keys outside its "
    "window first (the block is chosen for the query block's first row): guard its -inf maximum as in "
    "notebook 06, m_safe = torch.where(m_new == -inf, 0.0, m_new).",
    "": "Every query here sees at least one key, itself: query i sits at position p = i + T_k − T_q and "
    "sees key j when 0 <= p − j < window.",
}
"""Why a row's output is NaN or inf: the guard of notebook 06 only where the first NaN is −inf − (−inf)."""

_FLASH_WINDOW_CASES = [  # (q shape, T_k, d_v, window, block_size)
    ((2, 3, 37, 8), 37, 5, 8, 8),
    ((2, 21, 8), 45, 4, 10, 8),
    ((1, 2, 40, 8), 40, 8, 1, 16),
    ((2, 30, 8), 30, 8, 100, 7),
    ((3, 20, 4), 20, 4, 5, 1),
    ((1, 64, 8), 64, 3, 20, 16),
]
"""Ragged tails, T_q < T_k, a window of 1 and one longer than the sequence, block_size 1, no batch axis."""


@check
def check_sliding_window_flash_attention(candidate: Callable[..., Any]) -> str:
    """Numbers against masked attention; then the work done: only the window's key blocks."""
    for q_shape, t_k, d_v, window, block_size in _FLASH_WINDOW_CASES:
        q = randn(*q_shape)
        k, v = randn(*q_shape[:-2], t_k, q_shape[-1]), randn(*q_shape[:-2], t_k, d_v)
        kwargs: dict[str, Any] = {"block_size": block_size}
        result = call("sliding_window_flash_attention", candidate, q, k, v, window, **kwargs)
        mask = reference.sliding_window_mask(q_shape[-2], t_k, window)  # (T_q, T_k)
        expected = reference.attention(q, k, v, mask=mask)[0]  # (..., T_q, d_v)
        what = (
            f"Your sliding_window_flash_attention(q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)}, window={window}, block_size={block_size})"
        )
        out = expect_tensor(result, expected.shape, what, finite=False)
        expect_close(
            out,
            expected,
            what,
            mistakes=[Mistake(message, _masked(variant)) for message, variant in _FLASH_WINDOW_MISTAKES],
            args=(q, k, v, window),
            kwargs=kwargs,
            nonfinite_hint=_WINDOW_NONFINITE,
            diagnose=functools.partial(_diagnose_window_support, candidate, q, k, window, block_size),
        )
    exercise = _function(
        FLASH_WINDOW_CONTRACT,
        candidate,
        after=lambda case: (case.size["W"],),
        extra=lambda case, tensors: {"block_size": 8},
    )
    _expect_window_work(candidate)  # the loop itself first: no fused kernel, only the window's blocks
    generated = _generated(FLASH_WINDOW_CONTRACT, exercise)
    return (
        "6 shapes (ragged, T_q < T_k, window 1 and > T, block_size 1), only the window's blocks visited, "
        f"and {generated} cases from the exercise's contract (q, k or v a view, float32 and float64, on "
        "another device)"
    )


def _diagnose_window_support(
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    window: int,
    block_size: int,
    actual: torch.Tensor,
    expected: torch.Tensor,
) -> str | None:
    """Which keys each query really attended: with v the identity (d_v = T_k) the output is the weights."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    eye = torch.eye(t_k, dtype=q.dtype).expand(*q.shape[:-2], t_k, t_k)  # (..., T_k, T_k)
    try:
        with torch.no_grad():
            weights = candidate(q, k, eye, window, block_size=block_size)
    except Exception:
        return None
    if not isinstance(weights, torch.Tensor) or weights.shape != (*q.shape[:-2], t_q, t_k):
        return None
    if not bool(torch.isfinite(weights).all()):
        found = first_nan(candidate, (q, k, eye, window), {"block_size": block_size}, library_dirs())
        if found is None or found[0] not in {"div", "softmax"}:
            return None  # not a row that attended nothing: the harness says where the NaN is made
    seen = (weights.detach().nan_to_num(0.0).abs() > 1e-12).reshape(-1, t_q, t_k).any(0)  # (T_q, T_k)
    allowed = reference.sliding_window_mask(t_q, t_k, window)  # (T_q, T_k)
    positions = torch.arange(t_q)[:, None] + (t_k - t_q)
    keys = torch.arange(t_k)[None, :]
    extra, missing = seen & ~allowed, allowed & ~seen
    rows = sorted({int(i) for i in (extra | missing).nonzero()[:, 0]})
    where = f"rows {rows[0]}–{rows[-1]}" if len(rows) > 1 else f"row {rows[0]}" if rows else ""
    offset = (
        f" With T_q = {t_q} and T_k = {t_k} (it is right with T_q = T_k, where the offset is 0): query i "
        "sits at position p = i + T_k − T_q and key j at position j, so the rows' positions, the mask "
        "and the loop bound all carry that offset, and the keys' none."
        if t_q != t_k and _right_when_square(candidate, q, k, window, block_size)
        else ""
    )
    blind = sorted(int(i) for i in (~seen.any(-1)).nonzero()[:, 0])
    early = (  # each row misses whole key blocks up to its own position: the loop's end, seen as such
        missing.any()
        and not extra.any()
        and bool((keys == positions)[missing].any())
        and _whole_blocks_missing(missing, allowed, block_size)
    )
    if blind and not (early and not offset):  # what is observed, not why: a key numbered wrongly, ...
        named = f"rows {_spans(blind)}" if len(blind) > 1 else f"row {blind[0]}"
        their = "their output is" if len(blind) > 1 else "its output is"
        return f"attends no key at all in {named} ({their} 0/0 or NaN), but every query sees " + (
            f"at least itself.{offset}"
            if offset
            else "at least itself: query i sits at position p = i + T_k − T_q, key j at position j, "
            "and query i sees key j when 0 <= p − j < window."
        )
    if extra.any() and not missing.any():
        if bool((keys > positions)[extra].all()):
            return (
                "lets queries attend keys after themselves: a tile's mask needs both sides of the window, "
                "key j allowed when 0 <= p - j < window (the causal side too), for every tile it visits."
            )
        return (
            f"lets queries attend keys older than their window ({where}): mask p - j >= window in the tiles."
        )
    if missing.any() and not extra.any():
        late = bool((keys[0][None, :].expand_as(missing) >= positions - window + 1)[missing].all())
        if bool((keys == positions)[missing].any()) and offset:
            return f"never attends some keys of the window next to the query ({where}).{offset}"
        if bool((keys == positions)[missing].any()) and _whole_blocks_missing(missing, allowed, block_size):
            return (
                f"never attends some keys of the window next to the query ({where}), those of the key "
                "block holding its own position: the key loop stops a block too early; it runs up to "
                "the block holding the query's own position, p = i + T_k − T_q."
            )
        if late and _whole_blocks_missing(missing, allowed, block_size, earliest=True):
            return (
                f"never attends the earliest keys of some windows ({where}): the first key block to visit "
                "comes from the query block's FIRST row: the block holding "
                "max(0, qs + T_k − T_q − window + 1)."
            )
    if rows:  # what is observed in the first wrong row, where no reading above fits
        row = rows[0]
        attended = [int(j) for j in seen[row].nonzero()[:, 0]]
        window_keys = [int(j) for j in allowed[row].nonzero()[:, 0]]
        return (
            f"lets some queries attend keys outside their window or miss keys inside it ({where}): "
            f"row {row} attends {_keys(attended)}, where its window is {_keys(window_keys)}."
            + (
                offset
                or " (Query i sits at position p = i + T_k − T_q, key j at position j, and sees key j "
                "when 0 <= p − j < window.)"
            )
        )
    return None


def _spans(rows: list[int]) -> str:
    """'0–6, 15–36' for the sorted row numbers given."""
    spans: list[list[int]] = []
    for row in rows:
        if spans and row == spans[-1][1] + 1:
            spans[-1][1] = row
        else:
            spans.append([row, row])
    return ", ".join(f"{a}–{b}" if b > a else f"{a}" for a, b in spans)


def _keys(keys: list[int]) -> str:
    """'no key', 'key 3', 'keys 0–4, 7'."""
    return "no key" if not keys else f"key {keys[0]}" if len(keys) == 1 else f"keys {_spans(keys)}"


def _right_when_square(
    candidate: Callable[..., Any], q: torch.Tensor, k: torch.Tensor, window: int, block_size: int
) -> bool:
    """Whether the candidate is right on the same queries with T_k = T_q (the offset T_k − T_q is 0)."""
    t_q = q.shape[-2]
    k_square = k[..., :t_q, :]  # (..., T_q, d)
    v = randn(*k_square.shape)  # (..., T_q, d)
    expected = reference.attention(q, k_square, v, mask=reference.sliding_window_mask(t_q, t_q, window))[0]
    try:
        with torch.no_grad():
            got = candidate(q, k_square, v, window, block_size=block_size)
    except Exception:  # noqa: BLE001 - a reading that only adds to a message must never fail the check
        return False
    return isinstance(got, torch.Tensor) and got.shape == expected.shape and is_close(got, expected)


def _whole_blocks_missing(
    missing: torch.Tensor, allowed: torch.Tensor, block_size: int, earliest: bool = False
) -> bool:
    """Whether each row misses exactly its allowed keys from the start of the key block holding its own
    position on (before one key block's start, with `earliest`); missing and allowed are (T_q, T_k)."""
    keys = torch.arange(missing.shape[-1])  # (T_k,)
    for row_missing, row_allowed in zip(missing, allowed, strict=True):
        if not row_missing.any():
            continue
        if earliest:
            end = -(-(int(row_missing.nonzero()[-1, 0]) + 1) // block_size) * block_size
            edge = keys < end  # (T_k,)
        else:
            start = int(row_missing.nonzero()[0, 0]) // block_size * block_size
            if start != int(row_allowed.nonzero()[-1, 0]) // block_size * block_size:
                return False  # not the block holding the row's own position: not where the loop ends
            edge = keys >= start  # (T_k,)
        if not torch.equal(row_missing, row_allowed & edge):
            return False
    return True


def _expect_window_work(candidate: Callable[..., Any]) -> None:
    """Count the score pairs the candidate's matmuls compute: about T·(window + block), not T²/2."""
    t, d, window, block_size = 512, 8, 32, 32
    q, k, v = (randn(1, 1, t, d) for _ in range(3))  # each (1, 1, T, d)
    with FlopCounterMode(display=False) as counter, _OpRecorder() as recorder:
        call("sliding_window_flash_attention", candidate, q, k, v, window, block_size=block_size)
    for name, _, _outputs in recorder.ops:
        if any(part in name for part in _FUSED):
            raise CheckFailed(
                f"Your sliding_window_flash_attention calls torch's fused attention ({name}): write the "
                "tiled loop yourself (notebook 06's flash_attention, visiting only the window's key blocks)."
            )
    for name, _, outputs in recorder.ops:
        if any(numel >= t * t for numel, _ in outputs):
            raise CheckFailed(
                f"Your sliding_window_flash_attention, called with T = {t}, window={window}, block_size="
                f"{block_size}, created a tensor of T² = {t * t} elements or more ({name}): build each "
                "block's mask from the positions of its rows and columns, never the whole mask."
            )
    pairs = counter.get_total_flops() / (2 * (d + d))  # q·kᵀ and p·v: 2·d flops per (query, key) pair each
    bound = t * (window + 2 * block_size)
    if pairs > bound:
        causal = t * (t + block_size) / 2
        which = (
            "every key block: all T² scores"
            if pairs >= 0.9 * t * t
            else "every key block up to the diagonal, as causal attention does"
            if pairs >= 0.9 * causal
            else "more key blocks than the window needs"
        )
        raise CheckFailed(
            f"Your sliding_window_flash_attention gives the right numbers but visits {which}: with T = {t}, "
            f"window={window} and block_size={block_size} its matrix products computed {pairs:,.0f} (query, "
            f"key) scores, and a pass over the window's blocks computes at most T·(window + 2·block_size) = "
            f"{bound:,}. Start each query block's key loop at the block holding its first row's first key, "
            "(qs + T_k - T_q - window + 1) // block_size * block_size, and stop after the diagonal."
        )


# ---------------------------------------------------------------------------------------------
# FlexAttention mods


def _mod_from(name: str, candidate: Callable[..., Any], arg: Any, shown: str) -> Callable[..., Any]:
    mod = call(name, candidate, arg)
    if not callable(mod):
        raise CheckFailed(
            f"{name}({shown}) should return a function (the mod flex_attention calls), but returned "
            f"{type(mod).__name__}: define the mod inside and `return` it, without calling it."
        )
    return mod


def _evaluate(name: str, evaluate: Callable[[], torch.Tensor], signature: str) -> torch.Tensor:
    try:
        return evaluate()
    except Exception as error:
        raise learner_raised(
            f"The mod your {name} returns, run as flex_attention runs it,",
            error,
            f"It is called as {signature} with 0-d integer tensors (under torch.vmap, once per index): "
            "use tensor operations (+, *, ==, &, indexing a tensor with them), not Python `if`, `and`, "
            ".item() or int().",
        ) from None


_SLOPES: dict[str, Callable[[int], torch.Tensor]] = {
    "paper": flex.alibi_slopes,
    "same": lambda n: flex.alibi_slopes(n)[:1].expand(n),
    "from-zero": lambda n: 2.0 ** (-8.0 * torch.arange(n) / n),
    "reversed": lambda n: flex.alibi_slopes(n).flip(0),
    "halving": lambda n: 2.0 ** -torch.arange(1.0, n + 1),
    "geometric": flex._geometric_slopes,
}
"""Each head's slope, as a way of writing them gives it (n_heads,)."""


@dataclass(frozen=True)
class AlibiVariant:
    """How one alibi_score_mod is written: the right mod with the defaults, each other value a named slip
    (`_ALIBI_MISTAKES`)."""

    slopes: str = "paper"
    """The slopes, a key of `_SLOPES`: "paper" (the paper's rule for every head count, right), "same" (head
    0's for every head), "from-zero" (2^(-8h/H)), "reversed", "halving" (2^-(h+1)) or "geometric"
    (2^(-8(h+1)/H) for any H)."""
    sign: float = 1.0
    """The bias's sign: +1 (slope · (kv_idx - q_idx), right) or -1."""
    keep_score: bool = True
    """False: the bias returned without the score."""


def _alibi(scores: torch.Tensor, n_heads: int, variant: AlibiVariant = AlibiVariant()) -> torch.Tensor:
    """The scores (h, t_q, t_k) with the bias as `variant` adds it; the default variant is right."""
    t_q, t_k = scores.shape[-2:]
    distance = torch.arange(t_k)[None, :] - torch.arange(t_q)[:, None]  # (t_q, t_k): kv - q
    slopes = _SLOPES[variant.slopes](n_heads).to(scores.dtype)  # (h,)
    bias = variant.sign * slopes[:, None, None] * distance  # (h, t_q, t_k)
    return (scores if variant.keep_score else 0) + bias


_ALIBI_MISTAKES: list[tuple[str, AlibiVariant]] = [
    (
        "adds the bias with the wrong sign: past keys (kv_idx < q_idx) must be pushed down the further "
        "back they are, score + slope · (kv_idx - q_idx); yours pushes them up.",
        AlibiVariant(sign=-1.0),
    ),
    (
        "uses the same slope for every head: ALiBi gives head h its own slope (2^(-8(h+1)/n_heads) when "
        "n_heads is a power of two), indexed with the mod's `h` (slopes[h]).",
        AlibiVariant(slopes="same"),
    ),
    (
        "starts the slopes one head early: with n_heads a power of two head h has slope "
        "2^(-8(h+1)/n_heads), so head 0's is 2^(-8/n_heads), not 2^0 = 1.",
        AlibiVariant(slopes="from-zero"),
    ),
    (
        "gives the heads their slopes in reverse order: head 0 has the steepest of the power-of-two "
        "sequence, 2^(-8/n_heads).",
        AlibiVariant(slopes="reversed"),
    ),
    (
        "uses the slopes 2^-(h+1) of 8 heads for any number of heads: the exponent is -8(h+1)/n_heads "
        "for a power of two n_heads.",
        AlibiVariant(slopes="halving"),
    ),
    (
        "returns only the bias: a score_mod returns the changed score, score + bias.",
        AlibiVariant(keep_score=False),
    ),
    (
        "uses the plain 2^(-8(h+1)/H) formula for a head count that is not a power of two. ALiBi's "
        "slopes (the paper's get_slopes, as in BLOOM, MPT and Falcon) follow that formula only when H is a "
        "power of two; otherwise take the slopes of n = 2^floor(log2 H) heads, then every other slope of "
        "2n heads' list, the first H - n of them: slopes(n) + slopes(2n)[0::2][:H - n].",
        AlibiVariant(slopes="geometric"),
    ),
]


def _extra_slopes_from(slopes: torch.Tensor, n_heads: int, heads: list[int]) -> str:
    """Where the wrong heads' slopes sit in the list of 2n heads, when the head count is no power of two."""
    n = 2 ** int(math.log2(n_heads))
    if n != n_heads:  # the first H slopes of a power of two's list: the head count rounded
        for m in (2 * n, n):
            listed = flex.alibi_slopes(m)[:n_heads]  # (≤ H,)
            if len(listed) == n_heads and torch.allclose(slopes.to(listed.dtype), listed, rtol=1e-4):
                return (
                    f"\nYour slopes are the first {n_heads} of {m} heads' list: the head count taken as the "
                    f"power of two {m}. For {n_heads} heads ALiBi takes the {n} slopes of {n} heads, then "
                    f"every other one of {2 * n} heads' list: "
                    f"slopes({n}) + slopes({2 * n})[0::2][:{n_heads - n}]."
                )
    if n == n_heads or not heads or min(heads) < n:
        return ""
    longer = flex.alibi_slopes(2 * n)  # (2n,): the list ALiBi takes every other slope of
    places = []
    for h in heads:
        match = torch.isclose(longer, slopes[h].to(longer.dtype), rtol=1e-4).nonzero().flatten().tolist()
        if not match:
            return ""
        places.append(match[0])
    return (
        f"\nYour heads {heads} take the slopes at positions {places} of the {2 * n}-head list; ALiBi takes "
        f"every other one from the first, slopes({2 * n})[0::2][:{n_heads - n}], positions "
        f"{list(range(0, 2 * (n_heads - n), 2))}: the odd positions repeat slopes the first {n} heads have."
    )


def _alibi_past(
    scores: torch.Tensor, n_heads: int, past: torch.Tensor, variant: AlibiVariant
) -> torch.Tensor:
    """What `variant` gives at and before the diagonal (h, t, t), 0 after it."""
    return _alibi(scores, n_heads, variant).masked_fill(~past, 0.0)


def _diagnose_slopes(
    got: torch.Tensor, scores: torch.Tensor, n_heads: int, got_past: torch.Tensor, expected_past: torch.Tensor
) -> str:
    """Which heads are wrong, and the bias each adds one position back against ALiBi's."""
    bias = got[:, 1, 0] - scores[:, 1, 0]  # (h,): what it adds one step back
    heads = [h for h in range(n_heads) if not is_close(got_past[h], expected_past[h])]
    return (
        f"gives wrong scores in heads {heads}. One position back (q_idx=1, kv_idx=0) your mod adds "
        f"{[round(b, 5) for b in bias.tolist()]} per head, ALiBi adds -slope_h = "
        f"{[round(-s, 5) for s in flex.alibi_slopes(n_heads).tolist()]}; "
        f"{difference(got_past, expected_past)}" + _extra_slopes_from(-bias, n_heads, heads)
    )


def _alibi_exercise(candidate: Callable[..., Any]) -> Exercise:
    """alibi_score_mod(n_heads)'s scores on a case's (B, H, T_q, T_k), where q_idx >= kv_idx."""

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        size = case.size
        shape = (size["B"], size["H"], size["T_q"], size["T_k"])
        scores = randn(*shape, dtype=torch.float32)  # (B, H, T_q, T_k)
        past = torch.arange(size["T_q"])[:, None] >= torch.arange(size["T_k"])[None, :]  # (T_q, T_k)

        def scored(make: Callable[..., Any]) -> Callable[[int], torch.Tensor]:
            def run(n_heads: int) -> torch.Tensor:
                mod = _mod_from("alibi_score_mod", make, n_heads, str(n_heads))
                got = flex.evaluate_score_mod(mod, scores)  # (B, H, T_q, T_k)
                return got.to(scores.dtype).masked_fill(~past, 0.0)

            return run

        return scored(candidate), scored(reference.alibi_score_mod)

    return Exercise("alibi_score_mod", functions, after=lambda case: (case.size["H"],))


@check
def check_alibi_score_mod(candidate: Callable[..., Any]) -> str:
    """The mod, evaluated on every (head, query, key) as flex_attention does, at and before the diagonal."""
    for n_heads, t in ((4, 6), (8, 5), (2, 7), (3, 5), (6, 4), (12, 3)):  # powers of two first
        mod = _mod_from("alibi_score_mod", candidate, n_heads, str(n_heads))
        scores = randn(1, n_heads, t, t, dtype=torch.float32)  # (1, h, t, t)
        got = _evaluate(
            "alibi_score_mod",
            functools.partial(flex.evaluate_score_mod, mod, scores),
            "score_mod(score, b, h, q_idx, kv_idx)",
        )
        what = f"Your alibi_score_mod({n_heads}), on the scores at and before the diagonal,"
        shaped = f"The scores of alibi_score_mod({n_heads})"
        got = expect_tensor(got, scores.shape, shaped, finite=False)[0]  # (h, t, t)
        expected = flex.evaluate_score_mod(reference.alibi_score_mod(n_heads), scores)[0]  # (h, t, t)
        past = torch.ones(t, t, dtype=torch.bool).tril()  # (t, t): ALiBi runs with a causal mask
        got_past, expected_past = got.masked_fill(~past, 0.0), expected.masked_fill(~past, 0.0)
        mistakes = [
            Mistake(message, functools.partial(_alibi_past, scores[0], n_heads, past, variant))
            for message, variant in _ALIBI_MISTAKES
        ]
        expect_close(
            got_past,
            expected_past,
            what,
            mistakes=mistakes,
            diagnose=functools.partial(_diagnose_slopes, got, scores[0], n_heads),
            called_as="",
            only=("known-mistake", "property"),
        )
    generated = expect_contract_cases(  # no tensor goes in: nothing to put on another device
        ALIBI_CONTRACT, _alibi_exercise(candidate), contract_cases(ALIBI_CONTRACT)
    )
    return (
        "4, 8 and 2 heads (slopes 2^(-8(h+1)/n_heads)), 3, 6 and 12 heads (the paper's interleaved "
        f"slopes): the sign, the score kept; and {generated} cases from the exercise's contract (5 heads "
        "and 1, a batch of 2, T_q != T_k)"
    )


@dataclass(frozen=True)
class DocumentVariant:
    """How one document_mask_mod is written: the right mask with the defaults, each other value a named
    slip (`_DOCUMENT_MISTAKES`)."""

    same_document: bool = True
    """False: the documents not compared."""
    causal: str = ">="
    """How q_idx and kv_idx are compared: ">=" (right), ">" (the diagonal left out), "<=" (turned
    around) or "none"."""
    join: str = "&"
    """How the two conditions are joined: "&" (right) or "|"."""
    inverted: bool = False
    """True: the mask negated."""


def _document(document_ids: torch.Tensor, variant: DocumentVariant = DocumentVariant()) -> torch.Tensor:
    """The (T, T) mask as `variant` writes it; the default variant is right."""
    t = len(document_ids)
    everything = torch.ones(t, t, dtype=torch.bool)  # (T, T)
    same = document_ids[:, None] == document_ids[None, :] if variant.same_document else everything
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]  # (T, 1), (1, T): query and key
    causal = {">=": i >= j, ">": i > j, "<=": i <= j, "none": everything}[variant.causal]  # (T, T)
    allowed = same & causal if variant.join == "&" else same | causal
    return ~allowed if variant.inverted else allowed


_DOCUMENT_MISTAKES: list[tuple[str, DocumentVariant]] = [
    (
        "lets queries attend keys of earlier documents: the documents leak into each other. Also require "
        "document_ids[q_idx] == document_ids[kv_idx].",
        DocumentVariant(same_document=False),
    ),
    (
        "lets a query see the later tokens of its own document: also require q_idx >= kv_idx (causal).",
        DocumentVariant(causal="none"),
    ),
    ("leaves out the diagonal: a token attends itself, q_idx >= kv_idx.", DocumentVariant(causal=">")),
    ("is inverted: True marks the pairs a query MAY attend.", DocumentVariant(inverted=True)),
    (
        "turns the causal part around (kv_idx >= q_idx): a query sees the later tokens of its document, "
        "not the earlier ones. Keep q_idx >= kv_idx.",
        DocumentVariant(causal="<="),
    ),
    (
        "joins the two conditions with | (or): a pair passes when either holds. Both must hold: same "
        "document & (q_idx >= kv_idx).",
        DocumentVariant(join="|"),
    ),
]

_DOCUMENT_SLIPS = [
    Mistake(message, functools.partial(_document, variant=variant)) for message, variant in _DOCUMENT_MISTAKES
]


def _diagnose_pairs(document_ids: torch.Tensor, mask: torch.Tensor, expected: torch.Tensor) -> str:
    """The first pair of a document mask that differs, and how many do."""
    i, j = (mask != expected).nonzero()[0].tolist()
    may = "may" if mask[i, j] else "may not"
    return (
        f"is wrong: query {i} (document {int(document_ids[i])}) {may} attend key {j} (document "
        f"{int(document_ids[j])}), expected the opposite; {int((mask != expected).sum())} pairs differ."
    )


@check
def check_document_mask_mod(candidate: Callable[..., Any]) -> str:
    """The mask_mod, evaluated on every (query, key) as flex_attention does, for packed documents."""
    for lengths in ([3, 2, 4], [1, 5], [6], [2, 1, 1, 3]):
        document_ids = flex.document_ids_from_lengths(lengths)  # (T,)
        t = len(document_ids)
        mod = _mod_from("document_mask_mod", candidate, document_ids, f"document_ids={document_ids.tolist()}")
        got = _evaluate(
            "document_mask_mod",
            functools.partial(flex.evaluate_mask_mod, mod, 1, t, t),
            "mask_mod(b, h, q_idx, kv_idx)",
        )
        what = f"The mask of document_mask_mod(document_ids={document_ids.tolist()})"
        expected = flex.evaluate_mask_mod(reference.document_mask_mod(document_ids), 1, t, t)[0]  # (t, t)
        mask = _expect_bool_mask(got, expected[None], what)[0].cpu()  # (t, t)
        expect_close(
            mask,
            expected,
            what,
            mistakes=_DOCUMENT_SLIPS,
            args=(document_ids,),
            close=_equal,
            diagnose=functools.partial(_diagnose_pairs, document_ids),
            called_as="",
            only=("known-mistake", "property"),
        )
    _expect_no_dense_mask(candidate)
    generated = _generated(DOCUMENT_CONTRACT, _document_exercise(candidate))
    return (
        "4 packings (1 to 4 documents, documents of 1 token): causal within each document only, no dense "
        f"mask built; and {generated} cases from the exercise's contract (int32 ids, a slice, an expanded "
        "tensor, on another device)"
    )


def _packed(case: Case, arg: Arg) -> Callable[..., torch.Tensor]:
    """Document ids of a packing, documents of 3 tokens, in the case's integer dtype."""
    return lambda *shape: (torch.arange(math.prod(shape)) // 3).reshape(shape).to(case.dtype)


def _document_exercise(candidate: Callable[..., Any]) -> Exercise:
    """document_mask_mod(document_ids)'s mask on every pair, evaluated on the ids' device."""

    def masked(make: Callable[..., Any]) -> Callable[[torch.Tensor], torch.Tensor]:
        def run(document_ids: torch.Tensor) -> torch.Tensor:
            mod = _mod_from("document_mask_mod", make, document_ids, "document_ids")
            t, device = len(document_ids), document_ids.device
            indices = tuple(torch.arange(n, device=device) for n in (1, 1, t, t))
            return flex._vmapped(mod, indices, score=None)[0, 0]  # (T, T)

        return run

    return Exercise(
        "document_mask_mod",
        lambda case: (masked(candidate), masked(reference.document_mask_mod)),
        alloc=_packed,
        close=_equal,
    )


def _expect_no_dense_mask(candidate: Callable[..., Any]) -> None:
    """The mod keeps document_ids only: a (T, T) mask built beforehand is the cost a mask_mod avoids."""
    lengths = [100, 56, 100]
    document_ids = flex.document_ids_from_lengths(lengths)  # (T,)
    t = len(document_ids)
    largest = LargestTensor()
    with largest:
        _mod_from("document_mask_mod", candidate, document_ids, f"document_ids of {lengths} tokens")
    if largest.numel >= t * t // 4:
        raise CheckFailed(
            f"Your document_mask_mod(document_ids of T = {t} tokens) builds a tensor of shape "
            f"{largest.shape}, {largest.numel:,} entries, before any pair is asked for: a dense mask "
            "costs T² booleans per sequence, which is what a mask_mod avoids. Keep document_ids only, "
            "and compare document_ids[q_idx] with document_ids[kv_idx] inside the mod, one pair at a time."
        )
