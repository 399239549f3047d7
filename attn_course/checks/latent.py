"""Checks for notebook 11's latent attention (MLA): the plain path, and decoding from the latent cache."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from einops import rearrange
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

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
    difference,
    expect_close,
    expect_gradients,
    expect_tensor,
    is_close,
    randn,
)
from attn_course.heads import merge_heads, split_heads
from attn_course.latent import LatentAttention, LatentCache
from attn_course.rope import apply_rope

# ---------------------------------------------------------------------------------------------
# The contracts: what each exercise must accept and return.

LATENT_CONTRACT = Contract(
    "latent_attention",
    args=(Arg("x", ("b", "t", "D"), views=VIEW_KINDS, swap=(0, 1), slice_axis=1, expand_axis=0),),
    axes=(
        Axis("b", (2, 1), "one sequence"),
        Axis("t", (5, 1), "a single token"),
        Axis("D", (20,)),
        Axis("h", (3, 1), "a single head"),
        Axis("d", (6,), "a head width that is not a power of two"),
    ),
    returns=(Returns("output", ("b", "t", "D")),),
    dtypes=(torch.float64, torch.float32),
    notes=("layers of h heads of d, d_latent = 10, d_rope = 4, RoPE base 50",),
)
"""Exercise 6 of 11: x a view, one sequence, one token, one head, float32, on x's device."""

ABSORBED_CONTRACT = Contract(
    "absorbed_latent_attention",
    args=(Arg("x", ("b", "t_new", "D"), views=VIEW_KINDS, swap=(0, 1), slice_axis=1, expand_axis=0),),
    axes=(
        Axis("b", (2, 1), "one sequence"),
        Axis("t_past", (5, 0), "an empty cache: a prefill"),
        Axis("t_new", (3, 1), "one new token, as a decoding step has"),
        Axis("D", (20,)),
        Axis("h", (3, 1), "a single head"),
    ),
    returns=(Returns("output", ("b", "t_new", "D")),),
    dtypes=(torch.float64, torch.float32),
    notes=("the cache holds t_past positions of the same layer, filled by the same function",),
)
"""Exercise 7 of 11: x a view, after none or 5 cached positions, one token or 3, one head, float32."""

_BASE = 50.0
"""The RoPE base of every layer the checks build: not the default, so that ignoring attn.base shows."""


def _layer(d_model: int, n_heads: int, d_head: int, d_latent: int, d_rope: int) -> LatentAttention:
    """A course layer with seeded weights, in float64, scaled so that the softmax is neither flat nor hard."""
    attn = LatentAttention(d_model, n_heads, d_head, d_latent, d_rope, base=_BASE).double()
    with torch.no_grad():
        for parameter in attn.parameters():
            parameter.copy_(randn(*parameter.shape) * (1.5 / math.sqrt(parameter.shape[-1])))
    return attn


def _shape(attn: LatentAttention) -> str:
    return (
        f"LatentAttention(d_model={attn.d_model}, n_heads={attn.n_heads}, d_head={attn.d_head}, "
        f"d_latent={attn.d_latent}, d_rope={attn.d_rope})"
    )


_RIGHT_SCALE = "d_head + d_rope"


def _widths(attn: LatentAttention) -> dict[str, int]:
    """What a learner might divide the scores by the square root of: the layer's widths and their sums,
    1 (no scale), the right one squared (divided by it without the root, or by its root twice), and four
    times it (divided by twice its root)."""
    right = attn.d_head + attn.d_rope
    return {
        _RIGHT_SCALE: right,
        "d_head": attn.d_head,
        "d_latent": attn.d_latent,
        "d_latent + d_rope": attn.d_latent + attn.d_rope,
        "d_rope": attn.d_rope,
        "d_model": attn.d_model,
        "d_head + d_latent": attn.d_head + attn.d_latent,
        "1": 1,
        "squared": right * right,
        "doubled": 4 * right,
    }


def _root(name: str) -> str:
    return f"√({name})" if "+" in name else f"√{name}"


def _scale_mistakes(attn: LatentAttention, why: str) -> list[tuple[str, str]]:
    """(message, width) for each wrong scale this layer tells apart from the right one; widths of one
    value in this layer are named together, since the output cannot tell them apart."""
    widths = _widths(attn)
    by_value: dict[int, list[str]] = {}
    for name, value in widths.items():
        by_value.setdefault(value, []).append(name)
    found = []
    for value, names in by_value.items():
        if value == widths[_RIGHT_SCALE]:
            continue
        if names[0] == "1":
            message = f"looks like the scores were not scaled: divide them by {_root(_RIGHT_SCALE)}."
        elif names[0] == "squared":
            message = (
                f"looks like the scores were divided by {_RIGHT_SCALE} without the square root (or by "
                f"{_root(_RIGHT_SCALE)} twice): divide them once by {_root(_RIGHT_SCALE)}."
            )
        elif names[0] == "doubled":
            message = (
                f"looks like the scores were divided by 2·{_root(_RIGHT_SCALE)}, twice the right scale: "
                f"divide them by {_root(_RIGHT_SCALE)}."
            )
        else:
            shown = " or ".join(_root(n) for n in names if n not in ("1", "squared", "doubled"))
            same = f" (the same here, {value})" if len(names) > 1 else ""
            message = f"looks like the scores were divided by {shown}{same}: {why}"
        found.append((message, names[0]))
    return found


_INNER_NAMES = ("q", "k", "v", "q_rope", "out")
"""What a learner may split into heads (or merge from them) with the head axis inner, (d h)."""


def _inner_mistakes(labels: dict[str, str]) -> list[tuple[str, tuple[str, ...]]]:
    """(message, which) for each non-empty set of the splits and the merge written (d h), not (h d)."""
    found = []
    for size in range(1, len(_INNER_NAMES) + 1):
        for which in itertools.combinations(_INNER_NAMES, size):
            split = [labels[name] for name in which if name != "out"]
            said = []
            if split:
                listed = f"{', '.join(split[:-1])}{' and ' if len(split) > 1 else ''}{split[-1]}"
                said.append(f"splits {listed} into heads")
            if "out" in which:
                said.append("merges the heads' outputs")
            message = (
                f"{' and '.join(said)} with the head axis inner, (d h): head i takes every h-th feature (i, "
                "i + h, i + 2h, …) instead of its own block i·d_head … (i+1)·d_head - 1. Put the head axis "
                "outer, (h d), in every split into heads and every merge of them."
            )
            found.append((message, which))
    return found


# ---------------------------------------------------------------------------------------------
# latent_attention: the plain path


@dataclass(frozen=True)
class LatentVariant:
    """How one plain path is written: the right one with the defaults, each other value a named slip."""

    scale: str = _RIGHT_SCALE
    """What the scores are divided by the square root of: a name of `_widths` (d_head + d_rope, right)."""
    rotate: str = "rope"
    """What RoPE rotates: "rope" (the decoupled q^R and k^R, right), "all" (the compressed q and k too),
    "latent" (the latent before its up-projections), "latent-q" (the latent and q^C), "none"."""
    sides: str = "qk"
    """Which of the decoupled query and key are rotated: "qk" (right), "q" or "k"."""
    causal: bool = True
    """False: no causal mask."""
    positions: str = "given"
    """"given" (the `positions` argument, right) or "ignored" (0 … t-1 always)."""
    values: str = "v_up"
    """What the values are up-projected with: "v_up" (right) or "k_up"."""
    rope_part: bool = True
    """False: the RoPE part of the score left out."""
    out_proj: bool = True
    """False: attn.out left out."""
    base: bool = True
    """False: RoPE with its default base, not attn.base."""
    inner: tuple[str, ...] = ()
    """Which of q, k, v, q_rope are split into heads, and "out" merged from them, as (d h), not (h d)."""


def _plain(
    attn: LatentAttention,
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    variant: LatentVariant = LatentVariant(),
) -> torch.Tensor:
    """The plain path as `variant` writes it; the default variant is right."""
    w, h, t = variant, attn.n_heads, x.shape[-2]
    pos = positions if w.positions == "given" else None

    def rope(z: torch.Tensor) -> torch.Tensor:
        return apply_rope(z, pos, attn.base if w.base else 10000.0)

    def split(z: torch.Tensor, name: str) -> torch.Tensor:
        if name in w.inner:
            return rearrange(z, "b t (d h) -> b h t d", h=h)  # (b, h, t, d): every h-th feature
        return split_heads(z, h)  # (b, h, t, d)

    latent = attn.kv_down(x)  # (b, t, d_latent)
    if w.rotate in ("latent", "latent-q"):
        latent = rope(latent)  # (b, t, d_latent)
    q = split(attn.q(x), "q")  # (b, h, t, d_head)
    k = split(attn.k_up(latent), "k")  # (b, h, t, d_head)
    v = split((attn.v_up if w.values == "v_up" else attn.k_up)(latent), "v")  # (b, h, t, d_head)
    if w.rotate in ("all", "latent-q"):
        q = rope(q)
    if w.rotate == "all":
        k = rope(k)
    q_rope = split(attn.q_rope(x), "q_rope")  # (b, h, t, d_rope)
    k_rope = attn.k_rope(x).unsqueeze(1)  # (b, 1, t, d_rope)
    if w.rotate != "none":
        q_rope = rope(q_rope) if "q" in w.sides else q_rope
        k_rope = rope(k_rope) if "k" in w.sides else k_rope
    scores = q @ k.transpose(-2, -1)  # (b, h, t, t)
    if w.rope_part:
        scores = scores + q_rope @ k_rope.transpose(-2, -1)  # (b, h, t, t)
    scores = scores / math.sqrt(_widths(attn)[w.scale])
    if w.causal:
        scores = scores.masked_fill(~reference.causal_mask(t, device=x.device), float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v  # (b, h, t, d_head)
    if "out" in w.inner:
        merged = rearrange(heads, "b h t d -> b t (d h)")  # (b, t, h·d_head), the heads interleaved
    else:
        merged = merge_heads(heads)  # (b, t, h·d_head)
    return attn.out(merged) if w.out_proj else merged


_ROPE_ONLY = (
    "RoPE rotates only the decoupled parts, q^R of each head and the shared k^R: the compressed q^C and "
    "the keys up-projected from the latent stay unrotated, so that W^UK can later be absorbed into the query."
)

_PLAIN_SCALE = (
    "each score is the dot product of [q^C; q^R] with [k^C; k^R], d_head + d_rope numbers, so divide by "
    "√(d_head + d_rope)."
)
_PLAIN_SPLITS = {
    "q": "the queries W^Q x",
    "k": "the keys W^UK c",
    "v": "the values W^UV c",
    "q_rope": "the RoPE queries W^QR x",
}


def _plain_mistakes(attn: LatentAttention) -> list[tuple[str, LatentVariant]]:
    """The named slips of the plain path, the scales this layer tells apart among them."""
    scales = [(message, LatentVariant(scale=width)) for message, width in _scale_mistakes(attn, _PLAIN_SCALE)]
    inner = [(message, LatentVariant(inner=which)) for message, which in _inner_mistakes(_PLAIN_SPLITS)]
    return scales + _PLAIN_MISTAKES + inner


_PLAIN_MISTAKES: list[tuple[str, LatentVariant]] = [
    (f"rotates the compressed queries and keys too: {_ROPE_ONLY}", LatentVariant(rotate="all")),
    (f"rotates the latent: {_ROPE_ONLY}", LatentVariant(rotate="latent")),
    (f"rotates the latent and the compressed queries: {_ROPE_ONLY}", LatentVariant(rotate="latent-q")),
    (
        "never rotates the decoupled query and key: q^R = RoPE(W^QR x) and k^R = RoPE(W^KR x), at the "
        "tokens' positions, with base=attn.base.",
        LatentVariant(rotate="none"),
    ),
    ("rotates only the decoupled query: rotate the shared RoPE key k^R too.", LatentVariant(sides="q")),
    ("rotates only the shared RoPE key: rotate each head's q^R too.", LatentVariant(sides="k")),
    (
        "leaves out the RoPE part of the scores: each score is q^C·k^C + q^R·k^R, the second with the one "
        "rotated key k^R shared by every head.",
        LatentVariant(rope_part=False),
    ),
    (
        "has no causal mask: each query may see only itself and the tokens before it.",
        LatentVariant(causal=False),
    ),
    (
        "ignores `positions`: rotate at the positions given (0 … t-1 only when it is None), as notebook 05's "
        "apply_rope(z, positions, base) does.",
        LatentVariant(positions="ignored"),
    ),
    (
        "ignores attn.base: pass base=attn.base to apply_rope (this layer was built with base=50).",
        LatentVariant(base=False),
    ),
    ("up-projects the values with W^UK: the values are attn.v_up(latent).", LatentVariant(values="k_up")),
    (
        "forgets the output projection: after merging the heads, apply attn.out.",
        LatentVariant(out_proj=False),
    ),
]

_SIGNATURE = (
    "The signature is latent_attention(attn, x, positions=None); attn is a LatentAttention, x (b, t, "
    "d_model)."
)


def _learners_output(candidate: Callable[..., Any], attn: LatentAttention, x: torch.Tensor, **kw: Any) -> Any:
    """The learner's output, or None where it raises or is not a tensor of x's shape."""
    try:
        with torch.no_grad():
            got = candidate(attn, x, **kw)
    except Exception:
        return None
    return got if isinstance(got, torch.Tensor) and got.shape == x.shape else None


def _diagnose_plain(
    candidate: Callable[..., Any],
    attn: LatentAttention,
    x: torch.Tensor,
    positions: torch.Tensor | None,
    actual: Any,
    expected: Any,
) -> str | None:
    """What property fails: the causal order, the dependence on distance only, or which part is wrong.

    Every call repeats the failing case's `positions` (or its shift): outputs of other positions are
    not comparable."""
    t = x.shape[-2]
    if not torch.isfinite(actual).all():
        return None  # NaN or inf: the pipeline's own layer says where they come from
    given = {} if positions is None else {"positions": positions}
    changed = x.clone()
    changed[:, -1] = randn(x.shape[0], x.shape[-1])  # only the last token changes
    again = _learners_output(candidate, attn, changed, **given)
    if again is not None and not is_close(again[:, :-1], actual[:, :-1]):
        return (
            "lets a query see later tokens: changing only the last token changed the outputs before it. "
            "Mask the scores causally (query i sees keys j ≤ i) before the softmax."
        )
    base = torch.arange(t) if positions is None else positions  # (t,)
    shifted = _learners_output(candidate, attn, x, positions=base + 7)
    if shifted is not None and not is_close(shifted, actual):
        return (
            "changes when every position is shifted by the same amount (each 7 further along): "
            "with RoPE on q^R and k^R alone, each score depends on the distance between query and key "
            f"only. Something else is rotated, or one side only. {_ROPE_ONLY}"
        )
    return _read_parts(
        lambda layer: _learners_output(candidate, layer, x, **given),
        lambda layer: reference.latent_attention(layer, x, positions),
        attn,
        "q^R = RoPE(W^QR x) split into heads against k^R = RoPE(W^KR x), one for all heads",
        "q^C = W^Q x against the keys W^UK c of the latent c = W^DKV x",
    )


_NO_ROPE = ("q_rope", "k_rope")
_NO_QUERY = ("q", "q_rope")
_OUTPUT_SIDE = (
    "is wrong even with W^Q and W^QR zero, where every score is 0 and each query averages the tokens it "
    "may see: which tokens those are or how they are summed is wrong (the causal mask, the softmax over "
    "the keys' axis, the values W^UV c per head, the heads merged, W^O)"
)


def _read_parts(
    learners: Callable[[LatentAttention], Any],
    right: Callable[[LatentAttention], torch.Tensor],
    attn: LatentAttention,
    rope_part: str,
    compressed_part: str,
) -> str | None:
    """Which part is wrong, read on copies of attn with some weights zero: without the RoPE part (W^QR,
    W^KR zero), then with every score 0 (W^Q, W^QR zero: each query averages what it may see)."""
    no_rope = _zeroed(attn, _NO_ROPE)
    got = learners(no_rope)
    if got is None:
        return None
    if is_close(got, right(no_rope)):
        return (
            "is right once W^QR and W^KR are zero (no RoPE part), so the RoPE part of the scores is wrong: "
            f"{rope_part}, added to the compressed part before the division by √(d_head + d_rope)."
        )
    no_query = _zeroed(attn, _NO_QUERY)
    got = learners(no_query)
    if got is None:
        return None
    if is_close(got, right(no_query)):
        return (
            "is right once W^Q and W^QR are zero (every score 0, each query averaging the tokens it may "
            "see), and wrong without the RoPE part: the compressed part of the scores is wrong, "
            f"{compressed_part}, scaled by 1/√(d_head + d_rope)."
        )
    return _OUTPUT_SIDE + "."


def _zeroed(attn: LatentAttention, names: tuple[str, ...]) -> LatentAttention:
    """A copy of attn (its dtype) with the weights of the named projections zero."""
    copy = LatentAttention(attn.d_model, attn.n_heads, attn.d_head, attn.d_latent, attn.d_rope, attn.base)
    copy = copy.to(attn.kv_down.weight.dtype)
    copy.load_state_dict(attn.state_dict())
    with torch.no_grad():
        for name in names:
            getattr(copy, name).weight.zero_()
    return copy


@check
def check_latent_attention(candidate: Callable[..., Any]) -> str:
    """Two layers, with and without given positions, against the course's plain path."""
    for sizes in ((24, 3, 8, 6, 4), (16, 2, 6, 10, 2)):
        attn = _layer(*sizes)
        for given in (None, [3, 4, 6, 9, 10, 14]):  # unevenly spaced: a common shift would change nothing
            x = randn(2, 6, attn.d_model)  # (b, t, d_model)
            positions = None if given is None else torch.tensor(given)  # (t,)
            kwargs = {} if positions is None else {"positions": positions}
            shown = f"latent_attention(attn, x of shape {tuple(x.shape)}" + (
                f", positions=torch.tensor({given}))" if given is not None else ")"
            )
            with torch.no_grad():
                got = call("latent_attention", candidate, attn, x, hint=_SIGNATURE, **kwargs)
                what = f"The output of {shown}, attn = {_shape(attn)},"
                out = expect_tensor(got, x.shape, what, finite=False)
                expected = reference.latent_attention(attn, x, positions)  # (b, t, d_model)
                mistakes = [
                    Mistake(message, functools.partial(_plain, attn, x, positions, variant=variant))
                    for message, variant in _plain_mistakes(attn)
                ]
                expect_close(
                    out,
                    expected,
                    what,
                    mistakes=mistakes,
                    diagnose=functools.partial(_diagnose_plain, candidate, attn, x, positions),
                    called_as="",
                )
    attn = _layer(24, 3, 8, 6, 4)
    expect_gradients(
        "latent_attention",
        lambda x: candidate(attn, x),
        lambda x: reference.latent_attention(attn, x),
        [randn(2, 5, 24)],
        ["x"],
    )
    generated = _expect_plain_contract(candidate)
    return (
        "2 layers (d_latent below and above d_head), positions 0 … 5 and unevenly spaced ones, gradients, "
        "and "
        f"{generated} cases from the exercise's contract (one token, one head, x a view, float32, x's device)"
    )


def _expect_plain_contract(candidate: Callable[..., Any]) -> int:
    """The contract's generated cases, on a layer of each case's heads in its dtype, then on meta tensors."""

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        attn = _layer(case.size["D"], case.size["h"], case.size["d"], 10, 4)
        attn = attn.to("meta" if case.changed == "meta" else case.dtype)
        return functools.partial(candidate, attn), functools.partial(reference.latent_attention, attn)

    exercise = Exercise("latent_attention", functions)
    ran = expect_contract_cases(LATENT_CONTRACT, exercise, contract_cases(LATENT_CONTRACT))
    return ran + expect_inputs_device(LATENT_CONTRACT, exercise)


# ---------------------------------------------------------------------------------------------
# absorbed_latent_attention: decoding from the latent cache


@dataclass(frozen=True)
class AbsorbedVariant:
    """How one absorbed decoding step is written: the right one with the defaults, each other a named slip."""

    start: str = "past"
    """Where the new tokens are rotated: "past" (t_past …, right) or "zero" (0 …)."""
    alignment: str = "bottom-right"
    """The causal mask: "bottom-right" (right), "top-left" or "none"."""
    scale: str = _RIGHT_SCALE
    """What the scores are divided by the square root of: a name of `_widths` (d_head + d_rope, right)."""
    absorb: str = "transposed"
    """How W^UK_i meets the query: "transposed" ((W^UK_i)^T q_i, right) or "plain" (W^UK_i q_i, which runs
    only where d_head == d_latent)."""
    attend_to: str = "cache"
    """"cache" (every cached latent, right) or "new" (the new tokens' latents only)."""
    inner: tuple[str, ...] = ()
    """Which of q, q_rope and the blocks of W^UK ("k") and W^UV ("v") are split into heads, and "out"
    merged from them, as (d h), not (h d)."""


def _absorbed(
    attn: LatentAttention, x: torch.Tensor, cache: LatentCache, variant: AbsorbedVariant
) -> torch.Tensor:
    """One decoding step as `variant` writes it; the defaults are right."""
    w, h, t_past, t_new = variant, attn.n_heads, cache.length(0), x.shape[-2]
    start = t_past if w.start == "past" else 0
    positions = torch.arange(start, start + t_new)  # (t_new,)
    latent = attn.kv_down(x)  # (b, t_new, d_latent)
    k_rope = apply_rope(attn.k_rope(x), positions, attn.base)  # (b, t_new, d_rope)
    latents, rope_keys = cache.append(0, latent, k_rope)  # (b, t_k, d_latent), (b, t_k, d_rope)
    if w.attend_to == "new":
        latents, rope_keys = latent, k_rope

    def split(z: torch.Tensor, name: str) -> torch.Tensor:
        if name in w.inner:
            return rearrange(z, "b t (d h) -> b h t d", h=h)  # (b, h, t, d): every h-th feature
        return split_heads(z, h)  # (b, h, t, d)

    def blocks(weight: torch.Tensor, name: str) -> torch.Tensor:
        heads = "(d h) c" if name in w.inner else "(h d) c"  # (d h): every h-th row
        return rearrange(weight, f"{heads} -> h d c", h=h)  # (h, d_head, d_latent)

    q = split(attn.q(x), "q")  # (b, h, t_new, d_head)
    q_rope = apply_rope(split(attn.q_rope(x), "q_rope"), positions, attn.base)  # (b, h, t_new, d_rope)
    w_uk = blocks(attn.k_up.weight, "k")  # (h, d_head, d_latent)
    if w.absorb == "plain":
        w_uk = w_uk.transpose(-2, -1)  # (h, d_latent, d_head), read as (h, d_head, d_latent)
    q_latent = torch.einsum("bhtd,hdc->bhtc", q, w_uk)  # (b, h, t_new, d_latent)
    scores = torch.einsum("bhtc,bsc->bhts", q_latent, latents)  # (b, h, t_new, t_k)
    scores = scores + torch.einsum("bhtr,bsr->bhts", q_rope, rope_keys)  # (b, h, t_new, t_k)
    scores = scores / math.sqrt(_widths(attn)[w.scale])
    t_k = latents.shape[-2]
    allowed = {
        "bottom-right": reference.causal_mask(t_new, t_k),
        "top-left": torch.ones(t_new, t_k, dtype=torch.bool).tril(),
        "none": torch.ones(t_new, t_k, dtype=torch.bool),
    }[w.alignment]  # (t_new, t_k)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (b, h, t_new, t_k)
    summed = torch.einsum("bhts,bsc->bhtc", weights, latents)  # (b, h, t_new, d_latent)
    w_uv = blocks(attn.v_up.weight, "v")  # (h, d_head, d_latent)
    heads = torch.einsum("bhtc,hdc->bhtd", summed, w_uv)  # (b, h, t_new, d_head)
    if "out" in w.inner:
        return attn.out(rearrange(heads, "b h t d -> b t (d h)"))  # (b, t_new, d_model), heads interleaved
    return attn.out(merge_heads(heads))  # (b, t_new, d_model)


_POSITIONS = (
    "the new tokens sit at t_past … t_past + t_new - 1, with t_past = cache.length(layer) read before "
    "cache.append: rotate q^R and the new k^R at torch.arange(t_past, t_past + t_new)."
)

_ABSORBED_MISTAKES: list[tuple[str, AbsorbedVariant]] = [
    (f"rotates the new tokens as if they started at position 0: {_POSITIONS}", AbsorbedVariant(start="zero")),
    (
        "aligns the causal mask top-left: new query i sits at position t_past + i and sees every cached "
        "latent and the new ones up to its own (bottom-right: causal_mask(t_new, t_k)).",
        AbsorbedVariant(alignment="top-left"),
    ),
    (
        "has no causal mask: within a chunk of several new tokens, each may see only itself and the "
        "tokens before it (causal_mask(t_new, t_k), bottom-right aligned).",
        AbsorbedVariant(alignment="none"),
    ),
    (
        "absorbs W^UK without its transpose: k^C_i = W^UK_i c with W^UK_i (d_head, d_latent), so "
        "q_i·k^C_i = ((W^UK_i)^T q_i)·c. Head i's block of attn.k_up.weight is rows i·d_head … "
        "(i+1)·d_head - 1: rearrange(attn.k_up.weight, '(h d) c -> h d c'), then sum over d with q.",
        AbsorbedVariant(absorb="plain"),
    ),
    (
        "attends only to the new tokens: attend to every cached latent and RoPE key, what "
        "cache.append(layer, latent, rope_key) returns.",
        AbsorbedVariant(attend_to="new"),
    ),
]

_ABSORBED_SPLITS = {
    "q": "the queries W^Q x",
    "k": "the rows of attn.k_up.weight (W^UK)",
    "v": "the rows of attn.v_up.weight (W^UV)",
    "q_rope": "the RoPE queries W^QR x",
}


def _absorbed_mistakes(attn: LatentAttention) -> list[tuple[str, AbsorbedVariant]]:
    """The named slips of a decoding step, the scales this layer tells apart among them."""
    why = (
        "divide by √(d_head + d_rope), as the plain path does: absorbing W^UK changes how the scores are "
        "computed, not what they are."
    )
    scales = [(message, AbsorbedVariant(scale=width)) for message, width in _scale_mistakes(attn, why)]
    inner = [(message, AbsorbedVariant(inner=which)) for message, which in _inner_mistakes(_ABSORBED_SPLITS)]
    return scales + _ABSORBED_MISTAKES + inner


_ABSORBED_SIGNATURE = (
    "The signature is absorbed_latent_attention(attn, x, cache, layer); x (b, t_new, d_model) are the "
    "new positions, cache a LatentCache: cache.append(layer, latent, rope_key) returns every cached "
    "latent (b, t_k, d_latent) and rotated RoPE key (b, t_k, d_rope)."
)

_CHUNKS = [4, 1, 3, 1, 1]
"""New positions per call: a prefill, single tokens, and a chunk of 3 after 5 cached positions."""


def _replay(
    attn: LatentAttention, chunks: list[torch.Tensor], upto: int, variant: AbsorbedVariant
) -> torch.Tensor:
    """What a learner making this mistake returns on call `upto` (its cache filled its own way)."""
    cache, out = LatentCache(), torch.empty(0)
    for x in chunks[: upto + 1]:
        out = _absorbed(attn, x, cache, variant)
    return out


def _expect_cached(
    cache: Any, layer: int, attn: LatentAttention, chunk: torch.Tensor, t_k: int, shown: str
) -> None:
    """After the call, `layer` holds t_k positions: latents (b, t_k, d_latent) and RoPE keys (b, t_k, d_rope).

    What MLA caches is the exercise's point, so its shapes are required; their values are read only when
    the output is wrong (`_read_cache`)."""
    b, t_new = chunk.shape[0], chunk.shape[-2]
    got = cache.length(layer)
    if got != t_k:
        appended = got - (t_k - t_new)
        raise CheckFailed(
            f"After {shown}, the cache holds {got} positions, {t_k} expected: "
            + (
                "nothing was appended. "
                if appended == 0
                else f"{appended} were appended for {t_new} new ones. "
            )
            + "Call cache.append(layer, latent, rope_key) once per call, with the new tokens' latents "
            "and rotated RoPE keys, and attend with what it returns."
        )
    _expect_cache_shapes(cache, layer, attn, b, shown)


def _expect_layer_used(cache: LatentCache, layer: int, before: dict[int, int], shown: str) -> None:
    """The call changed no other layer of the cache than its own."""
    changed = [other for other, length in before.items() if cache.length(other) != length]
    if changed:
        raise CheckFailed(
            f"{shown} changed what the cache holds for layer {changed[0]}, not {layer}: pass `layer` on to "
            "cache.length(layer) and cache.append(layer, latent, rope_key), so that each layer keeps its own."
        )


def _expect_cache_shapes(cache: LatentCache, layer: int, attn: LatentAttention, b: int, shown: str) -> None:
    """The cached latents are (b, t_k, d_latent) and the RoPE keys (b, t_k, d_rope), one for all heads."""
    if layer not in cache.latents:
        return
    h, d = attn.n_heads, attn.d_head
    latents, rope_keys = cache.latents[layer], cache.rope_keys[layer]
    t_k = latents.shape[-2]
    if tuple(latents.shape) != (b, t_k, attn.d_latent):
        per_head = {(b, h, t_k, d), (b, t_k, h * d), (b, t_k, h, d)}
        raise CheckFailed(
            f"After {shown}, the cached latents have shape {tuple(latents.shape)}, expected "
            f"{(b, t_k, attn.d_latent)}"
            + (
                ": per-head keys or values, what MLA exists not to cache. Append the latent "
                "c = attn.kv_down(x) (b, t_new, d_latent), one for all heads."
                if tuple(latents.shape) in per_head
                else ": append the latent c = attn.kv_down(x) (b, t_new, d_latent)."
            )
        )
    if tuple(rope_keys.shape) != (b, t_k, attn.d_rope):
        raise CheckFailed(
            f"After {shown}, the cached RoPE keys have shape {tuple(rope_keys.shape)}, expected "
            f"{(b, t_k, attn.d_rope)}"
            + (
                ": a RoPE key per head. MLA's RoPE key is one, shared by every head: cache "
                "RoPE(attn.k_rope(x)) (b, t_new, d_rope) and let it meet each head's q^R when scoring."
                if rope_keys.dim() == 4 and rope_keys.shape[1] == h
                else ": append RoPE(attn.k_rope(x)) (b, t_new, d_rope), rotated at the new positions."
            )
        )


def _rotated_at(rope_keys: torch.Tensor, k_rope: torch.Tensor, base: float) -> list[int] | None:
    """The position each cached RoPE key (b, t_k, d_rope) was rotated at, from the unrotated keys; None
    where one is found at no position up to 4 t_k."""
    t_k, found = k_rope.shape[-2], []
    for j in range(t_k):
        key = k_rope[:, j : j + 1]  # (b, 1, d_rope)
        at = [
            p
            for p in range(4 * t_k)
            if is_close(rope_keys[:, j : j + 1], apply_rope(key, torch.tensor([p]), base))
        ]
        if not at:
            return None
        found.append(at[0])
    return found


def _replay_learners(
    candidate: Callable[..., Any], attn: LatentAttention, chunks: list[torch.Tensor], upto: int
) -> torch.Tensor | None:
    """The learner's output on call `upto`, its own cache filled by its own calls; None where it raises."""
    cache, out = LatentCache(), None
    try:
        with torch.no_grad():
            for x in chunks[: upto + 1]:
                out = candidate(attn, x, cache, 0)
    except Exception:
        return None
    return out if isinstance(out, torch.Tensor) and out.shape == chunks[upto].shape else None


def _read_cache(
    cache: LatentCache,
    layer: int,
    attn: LatentAttention,
    x: torch.Tensor,
    prefill_passed: bool,
    candidate: Callable[..., Any],
    chunks: list[torch.Tensor],
    upto: int,
    actual: Any,
    expected: Any,
) -> str | None:
    """What the cache holds, where it is not what a right step leaves: the latents rotated, the RoPE keys
    rotated at other positions. Else that the scores or the output are wrong, and after which call."""
    t_k = cache.length(layer)
    tokens = x[:, :t_k]  # (b, t_k, d_model): every token cached so far
    with torch.no_grad():
        latent = attn.kv_down(tokens)  # (b, t_k, d_latent)
        k_rope = attn.k_rope(tokens)  # (b, t_k, d_rope), not rotated
    latents, rope_keys = cache.latents[layer], cache.rope_keys[layer]
    if not is_close(latents, latent):
        if is_close(latents, apply_rope(latent, torch.arange(t_k), attn.base)):
            return (
                f"caches the latents rotated: {_ROPE_ONLY} (A rotated latent would tie every cached key "
                "to its position.)"
            )
        return (
            f"caches latents that are not attn.kv_down(x) of the tokens so far: {difference(latents, latent)}"
        )
    positions = _rotated_at(rope_keys, k_rope, attn.base)
    if positions is not None and positions != list(range(t_k)) and any(positions):
        return f"caches RoPE keys rotated at positions {positions}, not 0 … {t_k - 1}: {_POSITIONS}"
    parts = _read_parts(
        lambda layer: _replay_learners(candidate, layer, chunks, upto),
        lambda layer: _replay(layer, chunks, upto, AbsorbedVariant()),
        attn,
        "each head's q^R, rotated at the new positions, against the cached RoPE keys (one for all heads)",
        "W^UK absorbed into the query, (W^UK_i)^T q^C_i with head i's block of attn.k_up.weight, against "
        "the cached latents",
    )
    if parts is not None and prefill_passed and parts.startswith(_OUTPUT_SIDE):
        parts += " It is right on the first call (an empty cache): look at the causal mask's alignment."
    return parts or (
        "is wrong although the cache holds the right latents, so the scores or the output are: "
        f"{difference(actual, expected)}"
    )


@check
def check_absorbed_latent_attention(candidate: Callable[..., Any]) -> str:
    """Two layers fed chunks [4, 1, 3, 1, 1], each output equal to the plain path's for those tokens."""
    t = sum(_CHUNKS)
    cache = LatentCache()  # one cache, a layer of it per layer checked (d_latent, d_rope alike)
    for layer, sizes in enumerate(((16, 2, 6, 6, 4), (24, 3, 8, 6, 4))):  # d_head == d_latent, then not
        attn = _layer(*sizes)
        x = randn(2, t, attn.d_model)  # (b, t, d_model)
        with torch.no_grad():
            full = reference.latent_attention(attn, x)  # (b, t, d_model)
        chunks = [x[:, sum(_CHUNKS[:i]) : sum(_CHUNKS[: i + 1])] for i in range(len(_CHUNKS))]
        start, prefill_passed = 0, False
        with torch.no_grad():
            for index, chunk in enumerate(chunks):
                t_new = chunk.shape[-2]
                shown = (
                    f"absorbed_latent_attention(attn, x, cache, layer={layer}) for {t_new} new position"
                    f"{'s' if t_new > 1 else ''} ({start} … {start + t_new - 1}) after {start} cached, "
                    f"attn = {_shape(attn)}"
                )
                before = {other: cache.length(other) for other in (0, 1) if other != layer}
                try:
                    got = call(
                        "absorbed_latent_attention",
                        candidate,
                        attn,
                        chunk,
                        cache,
                        layer,
                        hint=_ABSORBED_SIGNATURE,
                    )
                except CheckFailed:  # what it cached is the likelier cause, when it is the wrong shape
                    _expect_layer_used(cache, layer, before, shown)
                    _expect_cache_shapes(cache, layer, attn, x.shape[0], shown)
                    raise
                _expect_layer_used(cache, layer, before, shown)
                _expect_cached(cache, layer, attn, chunk, start + t_new, shown)
                what = f"The output of {shown},"
                out = expect_tensor(got, chunk.shape, what, finite=False)
                mistakes = [
                    Mistake(message, functools.partial(_replay, attn, chunks, index, variant))
                    for message, variant in _absorbed_mistakes(attn)
                ]
                expect_close(
                    out,
                    full[:, start : start + t_new],
                    what,
                    mistakes=mistakes,
                    diagnose=functools.partial(
                        _read_cache, cache, layer, attn, x, prefill_passed, candidate, chunks, index
                    ),
                    called_as="",
                    only=("known-mistake", "property"),
                )
                prefill_passed = prefill_passed or index == 0
                start += t_new
    _expect_no_per_head_cache(candidate)
    generated = _expect_absorbed_contract(candidate)
    return (
        "2 layers (layers 0 and 1 of one cache) in chunks of 4, 1, 3, 1, 1 match the plain path token by "
        "token, the cache holds latents "
        "and one RoPE key per token, no per-head key or value of the cache is made, and "
        f"{generated} cases from the exercise's contract (one sequence, an empty cache, one token, one "
        "head, x a view, float32, x's device)"
    )


class _LargeTensors(TorchFunctionMode):
    """Keep every tensor a torch function returns with at least `threshold` entries (detached)."""

    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold
        self.seen: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and tensor.numel() >= self.threshold:
                self.seen.append(tensor.detach())
        return out


def _same_numbers(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a and b hold the same numbers in any layout (sorted, then compared)."""
    return a.numel() == b.numel() and is_close(a.flatten().sort().values, b.flatten().sort().values)


def _expect_no_per_head_cache(candidate: Callable[..., Any]) -> None:
    """One decoding step after 255 cached tokens makes no tensor the size of per-head keys or values."""
    attn = _layer(32, 4, 32, 8, 4)  # per-head keys (1, 4, 256, 32): 8 times any weight, 16 the latents
    b, t_past, h, d = 1, 255, attn.n_heads, attn.d_head
    x = randn(b, t_past + 1, attn.d_model)  # (b, t, d_model)
    cache = LatentCache()
    with torch.no_grad():
        call("absorbed_latent_attention", candidate, attn, x[:, :t_past], cache, 0, hint=_ABSORBED_SIGNATURE)
        large = _LargeTensors(b * h * (t_past + 1) * d // 2)
        with large:
            call("absorbed_latent_attention", candidate, attn, x[:, t_past:], cache, 0)
        latents = attn.kv_down(x)  # (b, t, d_latent)
        keys = attn.k_up(latents)  # (b, t, h·d_head)
        values = attn.v_up(latents)  # (b, t, h·d_head)
    if not large.seen:
        return
    biggest = max(large.seen, key=lambda z: z.numel())
    shown = (
        f"One decoding step of absorbed_latent_attention after {t_past} cached tokens (attn = "
        f"{_shape(attn)}) makes a tensor of shape {tuple(biggest.shape)}"
    )
    if any(_same_numbers(z, keys) for z in large.seen):
        raise CheckFailed(
            f"{shown}: the per-head keys W^UK c of every cached latent. The absorbed path never makes them: "
            "move W^UK into the query, q_latent_i = (W^UK_i)^T q_i (b, h, t_new, d_latent), and score "
            "q_latent against the cached latents directly."
        )
    if any(_same_numbers(z, values) for z in large.seen):
        raise CheckFailed(
            f"{shown}: the per-head values W^UV c of every cached latent, before the weighted sum. The "
            "numbers are right, but the memory is what MLA saves: sum the cached latents with the weights "
            "first, (b, h, t_new, d_latent), then apply each head's W^UV_i to that sum, then attn.out."
        )
    raise CheckFailed(
        f"{shown}, {biggest.numel():,} entries, as large as the per-head keys or values of every cached "
        f"position ({b * h * (t_past + 1) * d:,}): the absorbed path's largest tensors are the scores "
        "(b, h, t_new, t_k) and the latents (b, t_k, d_latent). Work in the latent space: no tensor of "
        "t_k · h · d_head numbers."
    )


def _after_prefill(
    step: Callable[..., Any], attn: LatentAttention, t_past: int
) -> Callable[[torch.Tensor], Any]:
    """A prefill of t_past seeded positions by `step` itself on a new cache, then `step` on x."""

    def run(x: torch.Tensor) -> Any:
        cache = LatentCache()
        if t_past:
            seeded = torch.Generator().manual_seed(t_past)
            prefix = x.new_empty(x.shape[0], t_past, x.shape[-1]).normal_(generator=seeded)  # (b, t_past, D)
            step(attn, prefix, cache, 0)
        return step(attn, x, cache, 0)

    return run


def _expect_absorbed_contract(candidate: Callable[..., Any]) -> int:
    """The contract's generated cases on a layer of each case's heads in its dtype, then on meta tensors."""

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        attn = _layer(case.size["D"], case.size["h"], 6, 10, 4)
        attn = attn.to("meta" if case.changed == "meta" else case.dtype)
        t_past = case.size["t_past"]
        return _after_prefill(candidate, attn, t_past), _after_prefill(
            reference.absorbed_latent_attention, attn, t_past
        )

    exercise = Exercise("absorbed_latent_attention", functions)
    ran = expect_contract_cases(ABSORBED_CONTRACT, exercise, contract_cases(ABSORBED_CONTRACT))
    return ran + expect_inputs_device(ABSORBED_CONTRACT, exercise)
