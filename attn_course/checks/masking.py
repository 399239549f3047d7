"""Checks for notebook 03: causal and padding masks, and attention with masks."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
    size_cases,
)
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    as_view,
    call,
    check,
    cuda_device,
    diagnose_views,
    expect_close,
    expect_gradients,
    expect_tensor,
    is_close,
    randn,
    unpack_out_and_weights,
)

DEVICE_HINT = (
    "Create the mask on the inputs' device: torch.ones(..., device=q.device) or pass "
    "device=q.device to causal_mask."
)


def _expect_bool_mask(value: Any, expected: torch.Tensor, name: str) -> torch.Tensor:
    """Require a boolean mask of the expected shape (pattern hints for other dtypes)."""
    mask = expect_tensor(value, expected.shape, f"Your {name}", finite=False)
    if mask.dtype != torch.bool:
        same = mask.shape == expected.shape and torch.equal(mask.cpu() != 0, expected.cpu())
        pattern = "It has the right pattern, but " if same else ""
        raise CheckFailed(
            f"Your {name} should be a boolean tensor (dtype torch.bool, True = may attend). "
            f"{pattern}its dtype is {mask.dtype}: build it with comparisons or dtype=torch.bool."
        )
    return mask


# ---------------------------------------------------------------------------------------------
# The contracts of notebook 03: what each exercise must accept and return.

CAUSAL_CONTRACT = Contract(
    "causal_mask",
    args=(),
    axes=(
        Axis("T_q", (4, 6, 1), "more queries than keys: the first T_q - T_k rows see no key"),
        Axis("T_k", (4, 7, 1), "more keys than queries, and a single key"),
    ),
    returns=(Returns("mask", ("T_q", "T_k"), dtype="bool", device="the `device` argument"),),
    notes=("bottom-right aligned: query i sits at position i + T_k - T_q; a row before every key is False",),
)
"""Exercise 1 of 03: any t_q and t_k, either larger; its generated sizes join the hand-picked ones."""

PADDING_CONTRACT = Contract(
    "padding_mask",
    args=(Arg("lengths", ("B",), views=("sliced", "expanded"), slice_axis=0, expand_axis=0),),
    axes=(Axis("B", (3,)), Axis("t", (5,))),
    returns=(Returns("mask", ("B", "t"), dtype="bool"),),
    dtypes=(torch.int64, torch.int32),
)
"""Exercise 2 of 03: lengths of any integer dtype, a view or not, on any device: the mask on its device."""

ATTENTION_CONTRACT = Contract(
    "attention",
    args=(
        Arg("q", ("B", "H", "T_q", "d"), views=VIEW_KINDS, swap=(1, 2)),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS, swap=(1, 2)),
        Arg("v", ("B", "H", "T_k", "d_v"), views=VIEW_KINDS, swap=(1, 2)),
        Arg("mask", ("B", "H", "T_q", "T_k"), views=VIEW_KINDS, swap=(1, 2), slice_axis=-1, expand_axis=1),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,), "a second batch axis, the heads, whose count is not a power of two"),
        Axis("T_q", (3, 7), "more queries than keys: with is_causal the first 2 rows see no key"),
        Axis("T_k", (5,)),
        Axis("d", (6,), "a width that is not a power of two"),
        Axis("d_v", (3,)),
    ),
    returns=(Returns("out", ("B", "H", "T_q", "d_v")), Returns("weights", ("B", "H", "T_q", "T_k"))),
    dtypes=(torch.float64, torch.float32),
    notes=("is_causal=True and a mask together, AND-ed; a row that allows no key gives 0",),
)
"""Exercise 3 of 03 (is_causal=True and a (B, H, T_q, T_k) mask in every generated case): two batch axes
(B, H) as a multi-head layer passes them, T_q > T_k, the inputs' dtype and device, each of q, k, v and the
mask alone a view (q, k, v transposed as split_heads makes them; an expanded mask: one for every head)."""


def _masks(case: Case, arg: Arg) -> Any:
    """Random allowed keys for a mask, seeded normal numbers for the others."""
    if arg.name == "mask":
        return lambda *shape: torch.rand(*shape) < 0.7
    return lambda *shape: randn(*shape, dtype=case.dtype)


def _lengths(case: Case, arg: Arg) -> Any:
    """Lengths from 0 to t, in the case's integer dtype."""
    t = case.size["t"]
    return lambda *shape: ((torch.arange(math.prod(shape)) * 2 + t) % (t + 1)).reshape(shape).to(case.dtype)


# ---------------------------------------------------------------------------------------------
# causal_mask


def _causal_mistakes() -> list[Mistake]:
    def tril(t_q, t_k, shift):
        return torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=shift)

    return [
        Mistake(
            "is aligned top-left: with t_k > t_q the queries are the last t_q positions, so query i "
            "sits at position i + (t_k - t_q) and may see keys up to there (bottom-right alignment: "
            "torch.tril(..., diagonal=t_k - t_q)). torch's is_causal=True aligns top-left.",
            lambda t_q, t_k: tril(t_q, t_k, 0) if t_k >= t_q else None,
        ),
        Mistake(
            "lets the first queries see keys although t_q > t_k: with more queries than keys, query i "
            "still sits at position i + (t_k - t_q), so the first t_q - t_k queries come before every key "
            "and their rows are all False. Keep the negative offset: torch.tril(..., diagonal=t_k - t_q), "
            "or key position <= query position + t_k - t_q (an offset clamped at 0 aligns it top-left).",
            lambda t_q, t_k: tril(t_q, t_k, 0) if t_q > t_k else None,
        ),
        Mistake(
            "is inverted: True must mark the keys a query MAY attend (itself and the past, the lower "
            "triangle); yours marks the future. Use torch.tril, or ~ of what you have.",
            lambda t_q, t_k: ~tril(t_q, t_k, t_k - t_q),
        ),
        Mistake(
            "marks the future and the diagonal: True must mark the keys a query may attend (the "
            "lower triangle with the diagonal), use torch.tril. (For a square mask that is also the right "
            "mask transposed: keys on the rows, queries on the columns; rows are queries.)",
            lambda t_q, t_k: ~tril(t_q, t_k, t_k - t_q - 1),
        ),
        Mistake(
            "leaves out the diagonal: each token may attend to itself (use diagonal=0 for a square "
            "mask, not -1).",
            lambda t_q, t_k: tril(t_q, t_k, t_k - t_q - 1),
        ),
        Mistake(
            "lets each query see one future key (off by one): the diagonal of a square mask is "
            "diagonal=0 in torch.tril, or use key_position <= query_position, not <.",
            lambda t_q, t_k: tril(t_q, t_k, t_k - t_q + 1),
        ),
    ]


@check
def check_causal_mask(candidate: Callable[..., Any]) -> str:
    """Boolean (t_q, t_k) lower-triangular mask, bottom-right aligned when t_k > t_q."""
    mistakes = _causal_mistakes()
    got = call(
        "causal_mask",
        candidate,
        4,
        hint="t_k should default to t_q: def causal_mask(t_q, t_k=None, device=None).",
    )
    expected = reference.causal_mask(4)
    mask = _expect_bool_mask(got, expected, "causal_mask(4)")
    expect_close(
        mask, expected, "Your causal_mask(4)", mistakes=mistakes, args=(4, 4), diagnose=_diagnose_causal
    )
    generated = [(c.size["T_q"], c.size["T_k"]) for c in size_cases(CAUSAL_CONTRACT)]
    hand_picked = [(5, 5), (1, 1), (3, 5), (2, 6), (1, 7), (4, 7)]
    for t_q, t_k in dict.fromkeys([*hand_picked, *generated]):
        expected = reference.causal_mask(t_q, t_k)
        got = call("causal_mask", candidate, t_q, t_k)
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (t_q, t_q) and t_q != t_k:
            raise CheckFailed(
                f"causal_mask({t_q}, {t_k}) has shape ({t_q}, {t_q}): it ignores t_k. "
                f"The mask has one row per query and one column per key: ({t_q}, {t_k})."
            )
        mask = _expect_bool_mask(got, expected, f"causal_mask({t_q}, {t_k})")
        expect_close(
            mask,
            expected,
            f"Your causal_mask({t_q}, {t_k})",
            mistakes=mistakes,
            args=(t_q, t_k),
            diagnose=_diagnose_causal,
        )
    _expect_device_respected(candidate)
    return (
        "square, t_k > t_q (bottom-right) and t_q > t_k (rows before every key), default t_k, dtype, device"
    )


def _diagnose_causal(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """A lower triangle with another diagonal, or no triangle at all."""
    t_q, t_k = expected.shape
    ones = torch.ones(t_q, t_k, dtype=torch.bool)
    right = "row i (query i, at position i + t_k - t_q) must be True for keys 0 … i + t_k - t_q only"
    if bool(actual.cpu().all()) and not bool(expected.cpu().all()):
        return f"is True everywhere: every query may attend every key, those after it too, but {right}."
    if not bool(actual.cpu().any()) and bool(expected.cpu().any()):
        return f"is False everywhere: no query may attend any key, but {right}."
    for shift in range(-t_k - t_q, t_k + t_q):
        if torch.equal(actual.cpu(), ones.tril(diagonal=shift)):
            return (
                f"is a lower triangle, but shifted: it lets query i see keys up to {_plus(shift)}, while "
                f"query i sits at position i + t_k - t_q = {_plus(t_k - t_q)} (bottom-right alignment: "
                f"torch.tril(..., diagonal=t_k - t_q), or key position <= query position + t_k - t_q)."
            )
    return (
        "is not a lower triangle: row i (query i, at position i + t_k - t_q) must be True for keys "
        "0 … i + t_k - t_q and False after them."
    )


def _expect_device_respected(candidate: Callable[..., Any]) -> None:
    """The mask lands on the device asked for: CUDA when there is one, else the meta device."""
    device = cuda_device()
    if device is not None:
        got = call("causal_mask", candidate, 3, 5, device=device)
        expect_tensor(got, (3, 5), "causal_mask(3, 5, device='cuda')", device=device, finite=False)
        expect_close(got, reference.causal_mask(3, 5, device=device), "Your causal_mask(3, 5, device='cuda')")
        return
    try:  # the meta device has shapes but no data: enough to see where the mask is made
        got = candidate(3, 5, device=torch.device("meta"))
    except Exception:  # some correct implementations cannot run on meta tensors; not a mistake
        return
    if isinstance(got, torch.Tensor) and got.device.type != "meta":
        raise CheckFailed(
            "causal_mask(3, 5, device=torch.device('meta')) returned a tensor on "
            f"{got.device.type}: pass device=device to the tensor you create (torch.ones, torch.arange)."
        )


# ---------------------------------------------------------------------------------------------
# padding_mask


@check
def check_padding_mask(candidate: Callable[..., Any]) -> str:
    """Boolean (B, t) mask, True for the first lengths[b] positions of row b."""
    mistakes = [
        Mistake(
            "is inverted: True must mark the real tokens (position < length) and False the padding.",
            lambda lengths, t: ~reference.padding_mask(lengths, t),
        ),
        Mistake(
            "marks one position too many in each row (position <= length): row b must have exactly "
            "lengths[b] True entries, positions 0 … lengths[b] - 1; use <.",
            lambda lengths, t: torch.arange(t)[None, :] <= lengths[:, None],
        ),
        Mistake(
            "marks one position too few in each row: row b must have exactly lengths[b] True "
            "entries, positions 0 … lengths[b] - 1.",
            lambda lengths, t: torch.arange(t)[None, :] < lengths[:, None] - 1,
        ),
        Mistake(
            "marks the LAST lengths[b] positions of each row (left padding): in this course the "
            "sequences are padded on the right, so the real tokens are positions 0 … lengths[b] - 1: "
            "position < lengths[b].",
            lambda lengths, t: torch.arange(t)[None, :] >= t - lengths[:, None],
        ),
    ]
    cases = [([3, 1, 4], 4), ([0, 2], 3), ([5], 5), ([2, 2, 6, 1, 0], 7)]
    for lengths_list, t in cases:
        lengths = torch.tensor(lengths_list)
        expected = reference.padding_mask(lengths, t)
        got = call("padding_mask", candidate, lengths, t)
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (t, len(lengths_list)) != expected.shape:
            raise CheckFailed(
                f"Your padding_mask has shape {tuple(got.shape)}: it should be (B, t) = "
                f"{tuple(expected.shape)}, one row per sequence."
            )
        if isinstance(got, torch.Tensor) and len(lengths_list) > 1 and tuple(got.shape) in {(1, t), (t,)}:
            raise CheckFailed(
                f"Your padding_mask of {len(lengths_list)} sequences has shape {tuple(got.shape)}: one row "
                "for all of them, as if every sequence had the same length (one number such as "
                "lengths.max() in the comparison). Compare the positions with each sequence's own length, "
                "a (B, 1) column: positions[None, :] < lengths[:, None], which gives (B, t)."
            )
        mask = _expect_bool_mask(got, expected, "padding_mask")

        def diagnose(actual: torch.Tensor, expected: torch.Tensor, lengths: torch.Tensor = lengths) -> str:
            return _diagnose_padding(actual, lengths)

        expect_close(
            mask,
            expected,
            "Your padding_mask",
            mistakes=mistakes,
            args=(lengths, t),
            diagnose=diagnose,
        )
    device = cuda_device()
    if device is not None:
        lengths = torch.tensor([3, 1]).to(device)
        got = call("padding_mask", candidate, lengths, 4, hint=DEVICE_HINT)
        expect_tensor(got, (2, 4), "padding_mask of lengths on cuda", device=device, finite=False)
    exercise = Exercise(
        "padding_mask",
        lambda case: (candidate, reference.padding_mask),
        after=lambda case: (case.size["t"],),
        alloc=_lengths,
    )
    generated = expect_contract_cases(PADDING_CONTRACT, exercise, contract_cases(PADDING_CONTRACT))
    generated += expect_inputs_device(PADDING_CONTRACT, exercise)
    return (
        f"lengths 0 … t, one row per sequence, dtype bool; {generated} more from the exercise's contract "
        "(int32 lengths, a slice, an expanded tensor, on another device)"
    )


def _diagnose_padding(actual: torch.Tensor, lengths: torch.Tensor) -> str:
    """Row b must hold lengths[b] True entries, all at the start."""
    counts = actual.cpu().sum(dim=-1).tolist()
    wanted = lengths.tolist()
    if counts != wanted:
        return (
            f"has {counts} True entries in its rows, but the lengths are {wanted}: row b marks exactly "
            "the lengths[b] real tokens, positions 0 … lengths[b] - 1 (position < lengths[b]; each row "
            "uses its own length)."
        )
    return (
        "has the right number of True entries in each row, but not at the start: the real tokens are "
        "the first lengths[b] positions (padding is on the right)."
    )


# ---------------------------------------------------------------------------------------------
# attention


@dataclass(frozen=True)
class AttentionVariant:
    """How one masked attention is written: the right one with the defaults, each other value a named
    mistake (`_masked_attention` computes what it gives; `ATTENTION_VARIANTS` names each)."""

    scale: bool = True
    """False: the scores are not divided by √d_k."""
    fill: float = float("-inf")
    """What the forbidden scores are filled with (0.0 still gives them weight)."""
    invert: bool = False
    """True: the allowed set used the wrong way round."""
    after_softmax: bool = False
    """True: the weights are masked after the softmax, not the scores before it."""
    combine: str = "and"
    """How mask and is_causal join: "and" (right), "or", "no-causal", "no-mask", "mask-only" (is_causal
    ignored when a mask is given) or "causal-only" (the mask ignored when is_causal)."""
    causal_alignment: str = "bottom-right"
    """The causal mask's diagonal: "bottom-right" (right, tril(t_k - t_q)), "top-left" (tril(0)) or
    "negated" (tril(t_q - t_k))."""


def _masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    variant: AttentionVariant | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention written as `variant` (the defaults are right)."""
    w = variant or AttentionVariant()
    scale, fill, invert, after_softmax = w.scale, w.fill, w.invert, w.after_softmax
    combine, causal_alignment = w.combine, w.causal_alignment
    t_q, t_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1)  # (..., T_q, T_k)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    causal = None
    if is_causal:
        shift = {"bottom-right": t_k - t_q, "top-left": 0, "negated": t_q - t_k}[causal_alignment]
        causal = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=shift)
    if combine == "and":
        allowed = _and(mask, causal)
    elif combine == "or":
        allowed = mask | causal if mask is not None and causal is not None else _and(mask, causal)
    elif combine == "no-causal":
        allowed = mask
    elif combine == "no-mask":
        allowed = causal
    elif combine == "mask-only":
        allowed = mask if mask is not None else causal
    else:  # "causal-only"
        allowed = causal if causal is not None else mask
    if allowed is not None and invert:
        allowed = ~allowed
    if allowed is not None and not after_softmax:
        scores = scores.masked_fill(~allowed, fill)
    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k)
    if allowed is not None and after_softmax:
        weights = weights * allowed
    if allowed is not None:  # a row that allows no key: 0, as the reference and SDPA give it
        weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights


def _and(mask: torch.Tensor | None, causal: torch.Tensor | None) -> torch.Tensor | None:
    if mask is None:
        return causal
    return mask if causal is None else mask & causal


ATTENTION_VARIANTS: list[tuple[str, AttentionVariant]] = [
    (
        "match attention without the 1/√d_k scale: divide the scores by √d_k, d_k = q.shape[-1].",
        AttentionVariant(scale=False),
    ),
    (
        "use the mask the wrong way round: True means the query MAY attend that key, so fill the "
        "scores where the mask is False (scores.masked_fill(~mask, float('-inf'))).",
        AttentionVariant(invert=True),
    ),
    (
        "fill masked scores with 0, but exp(0) = 1 still gives them weight: fill them with "
        "float('-inf') (or a very negative number) before the softmax.",
        AttentionVariant(fill=0.0),
    ),
    (
        "apply the mask after the softmax: the masked weights are 0 but the rows no longer sum to 1. "
        "Mask the scores (fill with -inf) before the softmax instead.",
        AttentionVariant(after_softmax=True),
    ),
    (
        "ignore is_causal=True when a mask is given: combine both masks with a logical AND.",
        AttentionVariant(combine="mask-only"),
    ),
    (
        "ignore `mask` when is_causal=True: combine both masks with a logical AND.",
        AttentionVariant(combine="causal-only"),
    ),
    (
        "ignore is_causal=True: a query must not attend the keys after its own position; build "
        "your causal_mask(T_q, T_k) and combine it with `mask` by & (a key must pass both; | lets in "
        "every key either allows, and all of them when there is no mask).",
        AttentionVariant(combine="no-causal"),
    ),
    (
        "ignore `mask`: fill the scores where the mask is False with -inf before the softmax.",
        AttentionVariant(combine="no-mask"),
    ),
    (
        "combine mask and is_causal with OR: a key must be allowed by both, so use AND (mask & causal).",
        AttentionVariant(combine="or"),
    ),
    (
        "use a top-left aligned causal mask: with more keys than queries the queries are the last "
        "positions, so align it bottom-right (your causal_mask(t_q, t_k)), unlike torch's "
        "is_causal=True.",
        AttentionVariant(causal_alignment="top-left"),
    ),
    (
        "shift the causal diagonal the wrong way (diagonal=t_q - t_k): with more keys than queries, "
        "query i sits at position i + t_k - t_q, so it may see keys up to there, "
        "tril(diagonal=t_k - t_q) (your causal_mask(t_q, t_k)); with the minus sign the first queries "
        "see no key at all.",
        AttentionVariant(causal_alignment="negated"),
    ),
]
"""Each mistake of `attention` once: its message, and the variant that makes it."""

_ALLOWS_EVERY_KEY: list[tuple[str, AttentionVariant]] = [
    (
        "are the same with is_causal=True as with False, on every shape tried, so queries attend the keys "
        "after their own position; your code runs something more for is_causal=True, but what it builds "
        "lets every key through, or never reaches the scores. Query i sits at position i + T_k - T_q and "
        "may attend the keys j <= i + T_k - T_q (your causal_mask(T_q, T_k)); combine it with `mask` by & "
        "(a key must pass both; | lets in every key either allows, and all of them when there is no mask).",
        AttentionVariant(combine="no-causal"),
    ),
]
"""The slips that give is_causal no effect, as said where the learner's code reads the flag."""


def _attention_cases() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, bool]]:
    """(q, k, v, mask, is_causal): no mask, masks of several broadcast shapes, causal, both."""
    row_mask = torch.tensor(  # (3, 5): every row allows some keys and forbids others
        [[True, False, True, True, False], [False, True, False, False, True], [True, True, True, False, True]]
    )
    lengths = torch.tensor([5, 3])
    pad = reference.padding_mask(lengths, 5)[:, None, None, :]  # (B, 1, 1, T_k)
    batch_row_mask = torch.stack([row_mask, row_mask.flip(-1)])  # (2, 3, 5)
    return [
        (randn(4, 8), randn(4, 8), randn(4, 8), None, False),
        (randn(3, 6), randn(5, 6), randn(5, 3), row_mask, False),
        (randn(2, 3, 6), randn(2, 5, 6), randn(2, 5, 3), batch_row_mask, False),
        (randn(2, 3, 5, 4), randn(2, 3, 5, 4), randn(2, 3, 5, 2), pad, False),
        (randn(2, 5, 4), randn(2, 5, 4), randn(2, 5, 4), None, True),
        (randn(2, 2, 4), randn(2, 6, 4), randn(2, 6, 3), None, True),
        (randn(2, 3, 5, 4), randn(2, 3, 5, 4), randn(2, 3, 5, 2), pad, True),
        (randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 2), batch_row_mask[:, :, :5].clone(), True),
        (
            randn(1, 4, 6, dtype=torch.float32),
            randn(1, 7, 6, dtype=torch.float32),
            randn(1, 7, 5, dtype=torch.float32),
            reference.padding_mask(torch.tensor([6]), 7)[:, None, :],
            True,
        ),
        # Non-contiguous views (as after split_heads), with T_q > T_k and with T_q < T_k causally.
        (as_view(randn(2, 3, 6, 4)), as_view(randn(2, 3, 4, 4)), as_view(randn(2, 3, 4, 5)), None, False),
        (as_view(randn(2, 3, 4)), as_view(randn(2, 6, 4)), as_view(randn(2, 6, 3)), None, True),
    ]


@check
def check_attention(candidate: Callable[..., Any]) -> str:
    """Scaled attention with a boolean mask (True = may attend) and bottom-right is_causal."""
    effect = functools.cache(functools.partial(_causal_without_effect, candidate))
    slips = [(message, variant, "ignored") for message, variant in ATTENTION_VARIANTS]
    slips += [(message, variant, "allows-all") for message, variant in _ALLOWS_EVERY_KEY]
    on_out = [Mistake(message, _knob(variant, 0, effect, needs)) for message, variant, needs in slips]
    on_weights = [Mistake(message, _knob(variant, 1, effect, needs)) for message, variant, needs in slips]
    cases = _attention_cases()
    device = cuda_device()
    if device is not None:
        q, k, v, mask, is_causal = cases[-3]
        mask = None if mask is None else mask.to(device)
        cases.append((q.to(device), k.to(device), v.to(device), mask, is_causal))
    for q, k, v, mask, is_causal in cases:
        expected_out, expected_weights = reference.attention(q, k, v, mask=mask, is_causal=is_causal)
        hint = DEVICE_HINT if q.device.type != "cpu" else ""
        result = call("attention", candidate, q, k, v, mask=mask, is_causal=is_causal, hint=hint)
        out, weights = unpack_out_and_weights("attention", result, expected_out, expected_weights)
        expect_tensor(weights, expected_weights.shape, "Your weights", device=q.device, finite=False)
        expect_tensor(out, expected_out.shape, "Your output", device=q.device, finite=False)
        kwargs = {"mask": mask, "is_causal": is_causal}
        nonfinite = "Every row of these inputs keeps at least one key."
        expect_close(
            weights,
            expected_weights,
            "Your weights",
            mistakes=on_weights,
            args=(q, k, v),
            kwargs=kwargs,
            nonfinite_hint=nonfinite,
            diagnose=_first(
                diagnose_views(candidate, (q, k, v), kwargs, pick=lambda result: result[1]),
                functools.partial(
                    _diagnose_masked_weights,
                    allowed=_allowed(q.cpu(), k.cpu(), mask, is_causal),
                    keys_read=functools.partial(_keys_attended, q, k, mask, is_causal),
                ),
            ),
        )
        expect_close(
            out,
            expected_out,
            "Your output",
            mistakes=on_out,
            args=(q, k, v),
            kwargs=kwargs,
            nonfinite_hint=nonfinite,
            diagnose=diagnose_views(candidate, (q, k, v), kwargs, pick=lambda result: result[0]),
        )
    mask = reference.padding_mask(torch.tensor([5, 4]), 5)[:, None, :]  # (B, 1, T_k)
    inputs = [randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 3)]
    expect_gradients(
        "attention",
        candidate,
        reference.attention,
        inputs,
        ("q", "k", "v"),
        kwargs={"mask": mask, "is_causal": True},
        first_output=True,
    )
    _expect_zeros_where_no_key(candidate)
    exercise = Exercise(
        "attention",
        lambda case: (candidate, reference.attention),
        extra=lambda case, tensors: {"is_causal": True},
        unpack=lambda result, expected: unpack_out_and_weights("attention", result, *expected),
        positional=3,
        alloc=_masks,
        diagnose=_contract_reading,
    )
    generated = expect_contract_cases(ATTENTION_CONTRACT, exercise, contract_cases(ATTENTION_CONTRACT))
    generated += expect_inputs_device(ATTENTION_CONTRACT, exercise)
    return (
        "11 cases (masks of 3 shapes, is_causal with T_q ≤ T_k, both, T_q > T_k, transposed views), "
        "gradients, and 0 for the rows that may attend no key (causal with T_q > T_k, a padding mask of no "
        f"real token), as SDPA; {generated} more from the exercise's contract (two batch axes (B, H), each "
        "of q, k, v and the mask alone a view, float32, the inputs' device)"
    )


def _contract_reading(case: Case, called: Any) -> Callable[[torch.Tensor, torch.Tensor], str | None]:
    """Where the weights of a generated case go: to forbidden keys, or rows off 1 (see below)."""
    (q, k, _), kwargs = called
    allowed = _allowed(q.cpu(), k.cpu(), kwargs["mask"], kwargs["is_causal"])
    read = functools.partial(_keys_attended, q, k, kwargs["mask"], kwargs["is_causal"])
    return functools.partial(_diagnose_masked_weights, allowed=allowed, keys_read=read)


NO_KEY = "rows with no visible key should give 0, as SDPA does"
"""The course's convention for a query row that may attend no key, named in every message about it."""


def _expect_zeros_where_no_key(candidate: Callable[..., Any]) -> None:
    """Rows that may attend no key: weights and output 0, as SDPA (2.5 on), and finite gradients."""
    q, k, v = randn(2, 5, 4), randn(2, 3, 4), randn(2, 3, 2)  # causal, T_q = 5 > T_k = 3
    mask = reference.padding_mask(torch.tensor([3, 0]), 3)[:, None, :]  # (B, 1, T_k): sequence 1 all padding
    kwargs = {"mask": mask, "is_causal": True}
    expected_out, expected_weights = reference.attention(q, k, v, **kwargs)
    result = call("attention", candidate, q, k, v, **kwargs)
    out, weights = unpack_out_and_weights("attention", result, expected_out, expected_weights)
    called = (
        "attention(q (2, 5, 4), k (2, 3, 4), v (2, 3, 2), mask=padding of lengths [3, 0], is_causal=True)"
    )
    empty = ~_allowed(q, k, mask, True).any(dim=-1)  # (2, 5): rows 0, 1 of sequence 0, all of sequence 1
    for name, got in (("weights", weights), ("output", out)):
        shape = (expected_weights if name == "weights" else expected_out).shape
        got = expect_tensor(got, shape, f"Your {name}", finite=False).detach().cpu()
        rows = got[empty]  # (n_empty, ...)
        if torch.isnan(rows).any() or torch.isinf(rows).any():
            raise CheckFailed(
                f"Your {name} of {called} are NaN in the {int(empty.sum())} rows that may attend no key (the "
                f"first T_q - T_k = 2 queries, before the first key, and every query of the all-padding "
                f"sequence): {NO_KEY}. A row of -inf gives NaN in the softmax (-inf - (-inf)); after it, "
                "set such rows to 0: weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0), "
                "with `allowed` the combined mask."
            )
        if rows.abs().max() > 1e-6:
            uniform = name == "weights" and bool(((rows - 1 / k.shape[-2]).abs() < 1e-4).all())
            expected_here = (expected_weights if name == "weights" else expected_out).detach().cpu()
            others_right = is_close(got[~empty], expected_here[~empty])
            read = _keys_attended(q, k, mask, True, weights.detach().cpu().double()) if not uniform else None
            if not others_right and read:  # the keys attended are what is wrong, not a missing fill of 0
                raise CheckFailed(f"Your weights of {called} {read}")
            if not others_right and not uniform:
                raise CheckFailed(
                    f"Your {name} of {called}, in the {int(empty.sum())} rows that may attend no key: "
                    f"{NO_KEY}, but yours hold values up to {rows.abs().max():.3g} there, and the rows that "
                    "may attend keys are wrong too: query i sits at position i + T_k - T_q and may attend "
                    "the keys j <= i + T_k - T_q that the mask allows."
                )
            why = (
                "they are uniform, 1/T_k on every key, as a finite fill such as -1e9 or finfo.min makes "
                "them: the query then averages values it may not see"
                if uniform
                else f"yours hold values up to {rows.abs().max():.3g} there"
            )
            raise CheckFailed(
                f"Your {name} of {called}, in the {int(empty.sum())} rows that may attend no key: {NO_KEY}, "
                f"but {why}. Set such rows to 0 after the softmax: "
                "weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)."
            )
    expect_close(weights, expected_weights, f"Your weights of {called}", called_as="")
    expect_close(out, expected_out, f"Your output of {called}", called_as="")
    expect_gradients(
        "attention",
        candidate,
        reference.attention,
        [q, k, v],
        ("q", "k", "v"),
        kwargs=kwargs,
        first_output=True,
    )


def _first(*diagnoses: Callable[[torch.Tensor, torch.Tensor], str | None]) -> Callable[..., str | None]:
    """A diagnose that says what the first of `diagnoses` to find something says."""
    return lambda actual, expected: next((f for d in diagnoses if (f := d(actual, expected))), None)


def _allowed(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
    """Which (query, key) pairs may attend, broadcast to the weights' shape (..., T_q, T_k)."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    allowed = torch.ones(*q.shape[:-1], t_k, dtype=torch.bool)  # (..., T_q, T_k)
    if mask is not None:
        allowed = allowed & mask.cpu()
    if is_causal:
        allowed = allowed & reference.causal_mask(t_q, t_k)
    return allowed


def _diagnose_masked_weights(
    actual: torch.Tensor,
    expected: torch.Tensor,
    allowed: torch.Tensor,
    keys_read: Callable[[torch.Tensor], str | None] | None = None,
) -> str | None:
    """Where the weights go: to forbidden keys, only to forbidden keys, or NaN in rows that keep keys;
    first, with `keys_read`, whether they are right but for the set of keys each query attends."""
    a = actual.detach().to("cpu", torch.float64)
    if a.shape != allowed.shape:
        return None
    read = keys_read(a) if keys_read is not None and bool(torch.isfinite(a).all()) else None
    if read:
        return read
    if torch.isnan(a).all() and bool(allowed.all()):
        return (
            "are NaN in every row although nothing is masked here (every key allowed), as when every "
            "score is "
            "filled with -inf: the fill hits the allowed positions, the mask used the wrong way "
            "round. True means the query MAY attend that key, so fill where it is False, "
            "scores.masked_fill(~allowed, float('-inf'))."
        )
    if not torch.isfinite(a).all():
        return (
            "contain NaN or inf in rows that may attend some keys: a row becomes NaN when every one of "
            "its scores is -inf (all its keys masked, as with an inverted mask or causal mask) or when "
            "a score is filled with +inf or NaN. Fill the forbidden scores, where the mask is False, "
            "with float('-inf'), and keep the allowed ones."
        )
    forbidden = a[~allowed]
    if forbidden.numel() and bool((forbidden.abs() > 1e-6).any()):
        if bool((a[allowed].abs() <= 1e-6).all()):
            return (
                "are 0 exactly where the mask allows a key and positive where it forbids one: the mask "
                "is inverted. True means the query MAY attend the key, so fill the scores where the "
                "mask is False: scores.masked_fill(~mask, float('-inf'))."
            )
        index = [int(i) for i in (~allowed & (a.abs() > 1e-6)).nonzero()[0]]
        return (
            f"give weight to keys that the mask (or is_causal) forbids, for example at index {index}: "
            "fill those scores with float('-inf') before the softmax, so that their weight is exactly 0."
        )
    if not bool(((a.sum(dim=-1) - 1).abs() <= 1e-3).all()):
        return (
            "give no weight to forbidden keys, as they should, but their rows do not sum to 1: mask the "
            "scores (with -inf) before the softmax, not the weights after it."
        )
    return (
        "give no weight to forbidden keys and sum to 1, but the weights of the allowed keys are wrong: "
        "check the scores q @ kᵀ / √d_k (d_k = q.shape[-1]) and that the softmax runs over the keys."
    )


def _partial(triangle: torch.Tensor) -> bool:
    """Whether a triangle of a (T_q, T_k) matrix is neither all of it nor empty."""
    return bool(triangle.any()) and not bool(triangle.all())


def _plus(shift: int) -> str:
    """'i', 'i + 2' or 'i − 1'."""
    return "i" if shift == 0 else f"i {'+' if shift > 0 else '−'} {abs(shift)}"


def _keys_attended(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, is_causal: bool, weights: torch.Tensor
) -> str | None:
    """How the keys the learner's weights attend differ from the allowed ones, said only where the weights
    are exactly the right softmax over the keys they attend (the allowed set is then all that is wrong)."""
    q, k = q.detach().to("cpu", torch.float64), k.detach().to("cpu", torch.float64)
    t_q, t_k = q.shape[-2], k.shape[-2]
    seen = weights != 0  # (..., T_q, T_k)
    allowed = _allowed(q, k, mask, is_causal)  # (..., T_q, T_k)
    if seen.shape != allowed.shape or torch.equal(seen, allowed):
        return None
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~seen, -math.inf)
    redone = torch.softmax(scores, dim=-1).masked_fill(~seen.any(dim=-1, keepdim=True), 0.0)
    if not is_close(redone, weights):
        return None  # not only the keys: the scores or the softmax are wrong too
    right = t_k - t_q
    query = f"query i sits at position i + T_k − T_q = {_plus(right)} (T_q = {t_q}, T_k = {t_k})"
    if is_causal and not seen.any():
        return (
            f"are 0 in every row: no query attends any key, where {query} and may attend the keys "
            "j <= i + T_k − T_q, its own position included."
        )
    if is_causal:
        mask_only = _allowed(q, k, mask, False)  # (..., T_q, T_k)
        if torch.equal(seen, mask_only):
            return (
                f"let queries attend keys after their own position although is_causal=True ({query}): "
                "whatever causal mask you build allows every key here; combine causal_mask(T_q, T_k) "
                "with the mask by &."
            )
        ones = torch.ones(t_q, t_k, dtype=torch.bool)
        for shift in sorted(range(-t_q, t_k + 1), key=lambda shift: abs(shift - right)):
            lower, upper = ones.tril(shift), ones.triu(shift)  # (T_q, T_k) each
            if _partial(lower) and torch.equal(seen, mask_only & lower):
                return (
                    f"are the softmax over a causal mask whose diagonal is at key j = {_plus(shift)}: "
                    f"{query}, and it may attend the keys j <= i + T_k − T_q, its own position included "
                    "(causal_mask(T_q, T_k), bottom-right aligned)."
                )
            if _partial(upper) and torch.equal(seen, mask_only & upper):
                return (
                    f"are the softmax over the keys j >= {_plus(shift)}, at and after a diagonal, where "
                    f"{query} and may attend the keys j <= i + T_k − T_q: the causal mask keeps the lower "
                    "triangle (tril), not the upper one."
                )
    wrong = (seen != allowed).nonzero()[0].tolist()  # [..., i, j]
    index, row = wrong[:-1], seen[tuple(wrong[:-1])]
    attended = [int(j) for j in row.nonzero()[:, 0]]
    may = [int(j) for j in allowed[tuple(wrong[:-1])].nonzero()[:, 0]]
    return (
        f"are the softmax over other keys than the allowed ones: row {index} attends keys "
        f"{attended or 'none'}, where it may attend keys {may or 'none'}"
        + (f" ({query})." if is_causal else ".")
    )


class _Ops(TorchDispatchMode):
    """The names of the operations a call runs, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def _causal_without_effect(candidate: Callable[..., Any], with_mask: bool) -> str:
    """How is_causal=True changes the candidate's result for T_q = T_k, T_q < T_k and T_q > T_k (with a
    padding mask or none): "ignored" where neither the result nor the operations run change (the flag
    is never read), "allows-all" where only the operations do (a causal mask that allows every key, or
    one never applied), "changes" where the result changes, "" where a call fails."""
    ops_differ = False
    for t_q, t_k in ((5, 5), (2, 6), (6, 4)):
        q, k, v = randn(2, t_q, 4), randn(2, t_k, 4), randn(2, t_k, 3)
        mask = reference.padding_mask(torch.tensor([t_k, t_k - 1]), t_k)[:, None, :] if with_mask else None
        try:
            with torch.no_grad():
                with _Ops() as causal_ops:
                    causal = candidate(q, k, v, mask=mask, is_causal=True)
                with _Ops() as plain_ops:
                    plain = candidate(q, k, v, mask=mask, is_causal=False)
            same = all(is_close(a, b) for a, b in zip(causal, plain, strict=True))
        except Exception:  # noqa: BLE001 - a reading that cannot run confirms nothing
            return ""
        if not same:
            return "changes"
        ops_differ = ops_differ or causal_ops.names != plain_ops.names
    return "allows-all" if ops_differ else "ignored"


def _knob(
    variant: AttentionVariant, index: int, effect: Callable[[bool], str] | None = None, needs: str = "ignored"
) -> Callable[..., torch.Tensor]:
    """The slip `variant` as the check calls a mistake. One that gives is_causal no effect is offered only
    where `effect` confirms what its message says of the learner's code: with `needs` "ignored", that
    is_causal changes neither the result nor the operations run (without a mask; with one, for
    "mask-only", while it does change the result without one); with "allows-all", that it changes the
    operations only."""

    def wrong(q, k, v, mask=None, is_causal=False):
        if variant.combine == "no-causal" and effect is not None and effect(False) != needs:
            raise ValueError("not what the learner's code does with is_causal: not this slip")
        if variant.combine == "mask-only" and effect is not None:
            if effect(True) not in ("ignored", "allows-all") or effect(False) != "changes":
                raise ValueError("is_causal does not work without a mask either: not this slip")
        q, k, v = q.cpu(), k.cpu(), v.cpu()
        mask = mask.cpu() if mask is not None else None
        return _masked_attention(q, k, v, mask, is_causal, variant)[index]

    return wrong
