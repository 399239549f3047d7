"""Checks for notebook 05: rotary frequencies, apply_rope, and RoPE inside multi-head attention."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
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
)
from attn_course.checks._probe import Heads, diagnose_heads, merged_input, read_on
from attn_course.heads import merge_heads, split_heads
from attn_course.rope import RotaryMultiHeadAttention, apply_rope_rotate_half

_HALF = (torch.float16, torch.bfloat16)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ---------------------------------------------------------------------------------------------
# The contracts of notebook 05: what each exercise must accept and return.

FREQUENCIES_CONTRACT = Contract(
    "rope_frequencies",
    args=(),
    axes=(Axis("d", (8, 2, 10), "one pair, and a width that is not a power of two"),),
    returns=(Returns("frequencies", ("d/2",), dtype="float64"),),
    notes=("float64 or float32; its generated widths join the hand-picked ones",),
)
"""Exercise 1 of 05: any even d."""

ROPE_CONTRACT = Contract(
    "apply_rope",
    args=(
        Arg("x", ("B", "H", "T", "d"), views=VIEW_KINDS, swap=(1, 2), slice_axis=-2, expand_axis=0),
        Arg("positions", ("T",), views=("sliced", "expanded"), slice_axis=0, expand_axis=0),
    ),
    axes=(Axis("B", (2,)), Axis("H", (3,)), Axis("T", (5,)), Axis("d", (6,), "not a power of two")),
    returns=(Returns("rotated", ("B", "H", "T", "d")),),
    dtypes=(torch.float32, torch.float64, torch.float16, torch.bfloat16),
)
"""Exercise 2 of 05: x (..., T, d) in any layout and float dtype (its dtype kept), positions a view or not
(one position expanded: every token at the same place), on x's device; positions=None on the meta device."""

ROTARY_CONTRACT = Contract(
    "RotaryMultiHeadAttention",
    args=(
        Arg("x", ("b", "t", "d_model"), views=VIEW_KINDS, swap=(0, 1)),
        Arg("mask", ("b", "t", "t"), views=("transposed", "expanded", "sliced"), swap=(0, 1), slice_axis=-1),
        Arg("positions", ("t",), views=("sliced", "expanded"), slice_axis=0),
    ),
    axes=(Axis("b", (2,)), Axis("t", (5,)), Axis("d_model", (18,), "3 heads of d_k = 6")),
    returns=(Returns("output", ("b", "t", "d_model")),),
    dtypes=(torch.float32, torch.float64),
    notes=("a mask that broadcasts to (b, t, t): the expanded one is a (t, t) mask for the whole batch",),
)
"""Exercise 3 of 05's forward (is_causal=True with a mask and positions): each input alone a view (one kind
each, a layer being dearer: x transposed, the mask expanded, one (t, t) mask for the batch, positions
sliced), float64, the output in x's dtype on x's device; with no mask and no positions on the meta device."""


def _rope_values(case: Case, arg: Arg) -> Callable[..., torch.Tensor]:
    """Seeded numbers for x, scattered positions from 7 on, a mask keeping key 0."""
    if arg.name == "positions":
        return lambda *shape: torch.arange(math.prod(shape)).reshape(shape) * 3 + 7
    if arg.name == "mask":
        return _mask_keeping_key_0
    return lambda *shape: randn(*shape, dtype=case.dtype)


def _mask_keeping_key_0(*shape: int) -> torch.Tensor:
    """About 60% of the keys, and key 0 for every query (the last axis is the keys in every view kind):
    no row without a key, which the exercise leaves to the package's attention."""
    mask = torch.rand(*shape) < 0.6
    mask[..., 0] = True
    return mask


def _close_to_float32(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Agreement, where float32 arithmetic for float64 inputs is fine (torch.view_as_complex of x.float())."""
    return is_close(actual, expected.float() if expected.dtype == torch.float64 else expected)


# ---------------------------------------------------------------------------------------------
# rope_frequencies


def _frequencies(d: int, base: float = 10000.0, *, exponent: str = "-2i/d") -> torch.Tensor:
    """θ_i with each exponent a learner might write; the default is right."""
    i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)
    exponents = {
        "-2i/d": -2 * i / d,
        "-i/d": -i / d,
        "+2i/d": 2 * i / d,
        "-2(i+1)/d": -2 * (i + 1) / d,
        "linspace": -torch.linspace(0, 1, d // 2, dtype=torch.float64),
        "integer division": -((2 * i) // d),
        "floor division": (-2 * i) // d,
    }
    return base ** exponents[exponent]  # (d/2,)


def _frequency_mistakes() -> list[Mistake]:
    return [
        Mistake(
            "computes base ** -i / d, which Python reads as (base ** -i) / d: put the exponent in "
            "parentheses, base ** (-i / d) with i = 0, 2, …, d - 2.",
            lambda d, base=10000.0: base ** -torch.arange(0, d, 2, dtype=torch.float64) / d,
        ),
        Mistake(
            "uses the exponent -i/d: the pairs are i = 0 … d/2 - 1 and θ_i = base^(-2i/d), so the "
            "exponent steps by 2/d (torch.arange(0, d, 2) / d).",
            lambda d, base=10000.0: _frequencies(d, base, exponent="-i/d"),
        ),
        Mistake(
            "grows with i (base^(+2i/d)): the frequencies must fall from θ_0 = 1 to about 1/base, "
            "θ_i = base^(-2i/d); mind the minus sign.",
            lambda d, base=10000.0: _frequencies(d, base, exponent="+2i/d"),
        ),
        Mistake(
            "starts one pair late (θ_0 should be base^0 = 1): i runs from 0 to d/2 - 1, not from 1.",
            lambda d, base=10000.0: _frequencies(d, base, exponent="-2(i+1)/d"),
        ),
        Mistake(
            "spreads the exponent evenly from 0 to -1 (torch.linspace(0, 1, d // 2)): the last "
            "exponent is -(d - 2)/d, not -1; use torch.arange(0, d, 2) / d.",
            lambda d, base=10000.0: _frequencies(d, base, exponent="linspace"),
        ),
        Mistake(
            "is all ones: the exponent was computed with integer division (2i // d is 0). Divide "
            "a float tensor: torch.arange(0, d, 2, dtype=torch.float64) / d.",
            lambda d, base=10000.0: _frequencies(d, base, exponent="integer division"),
        ),
        Mistake(
            "divides with // (floor division): -2i // d rounds every exponent down to a whole number, "
            "-1 for every pair but the first, so θ_i = 1/base for i ≥ 1. Divide with /.",
            lambda d, base=10000.0: _frequencies(d, base, exponent="floor division"),
        ),
        Mistake(
            "ignores `base`: it uses 10000 whatever base is given.",
            lambda d, base=10000.0: _frequencies(d, 10000.0),
        ),
    ]


@check
def check_rope_frequencies(candidate: Callable[..., Any]) -> str:
    """θ_i = base^(-2i/d) for i = 0 … d/2 - 1, in float32 or float64."""
    mistakes = _frequency_mistakes()
    cases: list[tuple[int, float | None]] = [(8, None), (6, None), (64, None), (128, None), (16, 500.0)]
    generated = [(c.size["d"], None) for c in size_cases(FREQUENCIES_CONTRACT)]
    cases += [case for case in generated if case not in cases]
    for d, base in cases:
        kwargs = {} if base is None else {"base": base}
        shown = f"rope_frequencies({d}" + (f", base={base:g})" if base is not None else ")")
        got = call(
            "rope_frequencies",
            candidate,
            d,
            hint="The signature is def rope_frequencies(d, base=10000.0).",
            **kwargs,
        )
        expected = reference.rope_frequencies(d, **kwargs)  # (d/2,)
        hints: dict[tuple[int, ...], str] = {
            (d,): "One frequency per PAIR of channels: d/2 values, i = 0 … d/2 - 1 "
            "(torch.arange(0, d, 2) gives the 2i directly).",
            (len(range(0, d // 2, 2)),): "That is only the pairs up to d/4: the values 2i run 0, 2, …, d - 2 "
            "(torch.arange(0, d, 2), or 2 * torch.arange(d // 2)), not up to d/2.",
            (
                d // 2 + 1,
            ): "One frequency too many: the values 2i stop at d - 2, torch.arange(0, d, 2) (its end "
            "d is left out), which gives d/2 of them.",
        }
        freqs = expect_tensor(got, expected.shape, f"Your {shown}", hints=hints)
        if freqs.dtype in _HALF:
            raise CheckFailed(
                f"Your {shown} has dtype {_name(freqs.dtype)}: frequencies down to 1/base and the "
                "angles position·θ_i built from them need more precision than that. Compute them in "
                "float32 or float64 (torch.arange(..., dtype=torch.float64))."
            )
        if not freqs.is_floating_point():
            raise CheckFailed(
                f"Your {shown} has dtype {_name(freqs.dtype)}: frequencies are fractions, compute "
                "them in float32 or float64."
            )
        expect_close(
            freqs,
            expected,
            f"Your {shown}",
            mistakes=mistakes,
            args=(d,),
            kwargs=kwargs,
            diagnose=functools.partial(_diagnose_frequencies, d=d, base=base or 10000.0),
        )
    return "d = 2, 6, 8, 10, 64, 128, base 10000 and 500"


def _diagnose_frequencies(actual: torch.Tensor, expected: torch.Tensor, d: int, base: float) -> str | None:
    """Frequencies whose exponents are a multiple of the right ones, or that are not falling."""
    a = actual.detach().to("cpu", torch.float64)
    if not torch.isfinite(a).all() or not (a > 0).all():
        return "has zero, negative or infinite frequencies: θ_i = base^(-2i/d) lies between 1/base and 1."
    exponents = a.log() / math.log(base)  # (d/2,): yours, as powers of base
    right = expected.detach().to("cpu", torch.float64).log() / math.log(base)  # -2i/d
    if abs(float(exponents[0])) > 1e-9:
        return (
            f"starts at {float(a[0]):.4g}, but θ_0 = base^0 = 1: pair i = 0 is not rotated faster or "
            "slower than by its position. Let i run from 0, θ_i = base^(-2i/d)."
        )
    factor = float(exponents[1] / right[1])
    if not torch.allclose(exponents, factor * right, atol=1e-9):
        return None
    if math.isclose(factor, 1 / math.log(10), rel_tol=1e-6):
        return (
            "has exponents 1/ln(10) = 0.434 times the right ones -2i/d: it takes log10(base) where "
            "exp needs the natural log. base^x = exp(x · math.log(base)) (math.log, not math.log10), "
            "or simply base ** x."
        )
    if math.isclose(factor, 2.0, rel_tol=1e-6):
        return (
            "has exponents twice the right ones -2i/d: either the 2 of 2i is counted twice, or the "
            "exponent is divided by d/2 instead of d. θ_i = base^(-2i/d) for the pairs i = 0 … d/2 - 1. "
            "(torch.arange(0, d, 2) already gives the 2i; do not double it again.)"
        )
    return (
        f"has exponents {factor:.3g} times the right ones -2i/d: θ_i = base^(-2i/d) for the pairs "
        "i = 0 … d/2 - 1, base^x = exp(x · math.log(base))."
    )


# ---------------------------------------------------------------------------------------------
# apply_rope


@dataclass(frozen=True)
class RopeVariant:
    """How one apply_rope is written: the right one with the defaults, each other value a named mistake
    (`_rope` computes what it gives; `_rope_mistakes` names each)."""

    pairing: str = "interleaved"
    """Which channels pair up: "interleaved" (right, x[2i] and x[2i+1]) or "rotate-half" (x[i], x[i+d/2])."""
    exponent: str = "-2i/d"
    """θ_i's exponent, as `_frequencies` takes it ("-2i/d" is right)."""
    sign: float = 1.0
    """-1.0: rotated the wrong way."""
    use_positions: bool = True
    """False: `positions` ignored (0 … T-1 used)."""
    reassemble: str = "interleave"
    """How the rotated pairs go back: "interleave" (right), "concatenate" or "swap"."""
    angles_in_x_dtype: bool = False
    """True: the angles computed in x's dtype, not float64."""
    swap_cos_sin: bool = False
    """True: cos and sin in each other's place."""
    first_position: int = 0
    """Where the default positions start (1: one too late)."""


def _rope(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    base: float = 10000.0,
    variant: RopeVariant | None = None,
) -> torch.Tensor:
    """RoPE written as `variant`; the defaults give `reference.apply_rope`."""
    w = variant or RopeVariant()
    pairing, exponent, sign, use_positions = w.pairing, w.exponent, w.sign, w.use_positions
    reassemble, swap_cos_sin, first_position = w.reassemble, w.swap_cos_sin, w.first_position
    angle_dtype = x.dtype if w.angles_in_x_dtype else torch.float64
    t, d = x.shape[-2:]
    if positions is None or not use_positions:
        positions = torch.arange(t) + first_position
    freqs = _frequencies(d, base, exponent=exponent).to(angle_dtype)  # (d/2,)
    angles = sign * positions.cpu().to(angle_dtype)[:, None] * freqs  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2) each
    if swap_cos_sin:
        cos, sin = sin, cos
    x = x.cpu()
    if pairing == "rotate-half":
        first, second = x[..., : d // 2], x[..., d // 2 :]  # (..., T, d/2) each
    else:
        first, second = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    new_first, new_second = first * cos - second * sin, first * sin + second * cos  # (..., T, d/2) each
    if pairing == "rotate-half" or reassemble == "concatenate":
        return torch.cat([new_first, new_second], dim=-1)  # (..., T, d)
    if reassemble == "swap":
        new_first, new_second = new_second, new_first
    return rearrange(torch.stack([new_first, new_second]), "two ... half -> ... (half two)")  # (..., T, d)


def _written_as(variant: RopeVariant) -> Callable[..., torch.Tensor]:
    """apply_rope written as `variant`."""
    return lambda x, positions=None, base=10000.0: _rope(x, positions, base, variant)


def _rope_mistakes() -> list[Mistake]:
    return [
        Mistake(
            "pairs the wrong channels: you used the rotate-half (GPT-NeoX) pairing x[i], x[i+d/2]; "
            "this exercise uses interleaved pairs x[2i], x[2i+1] (x[..., 0::2] and x[..., 1::2]), "
            "as in the RoFormer paper and the complex form.",
            _written_as(RopeVariant(pairing="rotate-half")),
        ),
        Mistake(
            "puts the rotated halves back one after the other, [all even | all odd] (torch.cat): "
            "put each rotated pair back where it came from, interleaved: channel 2i gets the new "
            "x[2i] and 2i+1 the new x[2i+1] (torch.stack([...], dim=-1).flatten(-2), or "
            "rearrange(..., 'two ... half -> ... (half two)')).",
            _written_as(RopeVariant(reassemble="concatenate")),
        ),
        Mistake(
            "puts the rotated pair back in swapped order: channel 2i must get "
            "x[2i]·cos - x[2i+1]·sin and channel 2i+1 must get x[2i]·sin + x[2i+1]·cos.",
            _written_as(RopeVariant(reassemble="swap")),
        ),
        Mistake(
            "rotates the wrong way (by -position·θ_i): the rotation of (a, b) by an angle φ is "
            "(a·cos φ - b·sin φ, a·sin φ + b·cos φ); with complex numbers multiply by e^{+iφ}, "
            "not its conjugate.",
            _written_as(RopeVariant(sign=-1.0)),
        ),
        Mistake(
            "swaps cos and sin: the rotation of (a, b) by φ is (a·cos φ - b·sin φ, a·sin φ + b·cos φ).",
            _written_as(RopeVariant(swap_cos_sin=True)),
        ),
        Mistake(
            "uses the frequencies base^(-i/d): θ_i = base^(-2i/d) for pair i (use your rope_frequencies).",
            _written_as(RopeVariant(exponent="-i/d")),
        ),
        Mistake(
            "uses growing frequencies base^(+2i/d): θ_i = base^(-2i/d) (use your rope_frequencies).",
            _written_as(RopeVariant(exponent="+2i/d")),
        ),
        Mistake(
            "ignores `positions`: it rotates by 0 … T-1 whatever positions are given. Rotate token t "
            "by positions[t]·θ_i, and use torch.arange(T) only when positions is None.",
            _written_as(RopeVariant(use_positions=False)),
        ),
        Mistake(
            "counts positions from 1: by default the first token is at position 0 and is not "
            "rotated at all (positions = torch.arange(T)).",
            _written_as(RopeVariant(first_position=1)),
        ),
        Mistake(
            "ignores `base`: it uses 10000 whatever base is given; pass base on to rope_frequencies.",
            lambda x, positions=None, base=10000.0: _rope(x, positions, 10000.0),
        ),
        Mistake(
            "computes the angles position·θ_i in x's low-precision dtype: at positions in the "
            "hundreds and beyond, bfloat16 and float16 round positions and angles, so neighbouring "
            "positions get the same rotation. Compute the angles in float32 or float64 and cast only "
            "cos and sin (or the result) to x.dtype.",
            lambda x, positions=None, base=10000.0: _rope(
                x, positions, base, RopeVariant(angles_in_x_dtype=True)
            ),
        ),
    ]


def _rope_cases() -> list[tuple[torch.Tensor, torch.Tensor | None, float | None]]:
    """(x, positions, base): default positions, batch axes and odd T, offsets, gaps, dtypes."""
    return [
        (randn(5, 8), None, None),
        (randn(2, 3, 7, 16), None, None),
        (randn(2, 4, 12), torch.arange(4) + 50, None),
        (randn(6, 8), torch.tensor([3, 0, 9, 4, 4, 20]), None),
        (randn(3, 5, 10), None, 500.0),
        (randn(2, 9, 32, dtype=torch.float32), torch.arange(9) + 60, None),
        (randn(3, 6, 16, dtype=torch.bfloat16), torch.arange(6) * 3 + 1000, None),
        (randn(2, 5, 8, dtype=torch.float16), torch.arange(5) + 1500, None),
        (as_view(randn(2, 3, 7, 16)), torch.arange(7) + 4, None),  # a transposed view, as after split_heads
    ]


def _expect_rope_output(got: Any, x: torch.Tensor, shown: str) -> torch.Tensor:
    """Require a tensor of x's shape and dtype, with hints for the usual wrong shapes."""
    shape = tuple(x.shape)
    half = (*shape[:-1], shape[-1] // 2)
    hints = {
        half: "That is half the channels: rotate each pair and keep both of its new values.",
        (*half, 2): "The pairs were never flattened back: .flatten(-2) or "
        "rearrange(..., '... half two -> ... (half two)').",
        (2, *half): "The two halves were stacked but never interleaved back into the last axis: "
        "rearrange(..., 'two ... half -> ... (half two)').",
        shape[-2:]: "The batch axes are lost: x is (..., T, d); index the last two axes only "
        "(x[..., 0::2]), and let positions broadcast from (T, d/2).",
    }
    out = expect_tensor(got, shape, f"Your {shown}", device=x.device, hints=hints)
    if out.dtype != x.dtype:
        raise CheckFailed(
            f"Your {shown} has dtype {_name(out.dtype)}, but x is {_name(x.dtype)}: the output must "
            f"keep x's dtype. Cast cos and sin to x.dtype before multiplying (cos.to(x.dtype)), or "
            "the result at the end (.to(x.dtype), .type_as(x))."
        )
    return out


@check
def check_apply_rope(candidate: Callable[..., Any]) -> str:
    """Interleaved pairs rotated by position·θ_i, positions default to arange(T), x's dtype kept."""
    mistakes = _rope_mistakes()
    cases = _rope_cases()
    device = cuda_device()
    if device is not None:
        x, positions, base = cases[2]
        cases.append((x.to(device), None if positions is None else positions.to(device), base))
    signature = "The signature is def apply_rope(x, positions=None, base=10000.0)."
    for x, positions, base in cases:
        kwargs: dict[str, Any] = {}
        if positions is not None:
            kwargs["positions"] = positions
        if base is not None:
            kwargs["base"] = base
        shown = f"apply_rope of a {_name(x.dtype)} x of shape {tuple(x.shape)}"
        hint = signature if x.device.type == "cpu" else "Create new tensors on x.device."
        got = call("apply_rope", candidate, x, hint=hint, **kwargs)
        out = _expect_rope_output(got, x, shown)
        expected = reference.apply_rope(x, **kwargs)  # (..., T, d)
        if x.dtype == torch.float64:  # float32 arithmetic (torch.view_as_complex of x.float()) is fine
            expected = expected.float()
        expect_close(
            out,
            expected,
            f"Your {shown}",
            mistakes=mistakes,
            args=(x.cpu(),),
            kwargs=_on_cpu(kwargs),
            diagnose=_diagnose_rope_case(candidate, x, kwargs),
        )
    x, positions = randn(2, 5, 8, dtype=torch.float32), torch.tensor([4, 1, 7, 2, 30])
    expect_gradients(
        "apply_rope", candidate, reference.apply_rope, [x], ("x",), kwargs={"positions": positions}
    )
    exercise = Exercise(
        "apply_rope",
        lambda case: (candidate, reference.apply_rope),
        positional=1,
        alloc=_rope_values,
        close=_close_to_float32,
    )
    generated = expect_contract_cases(ROPE_CONTRACT, exercise, contract_cases(ROPE_CONTRACT))
    default_positions = Exercise(
        "apply_rope",
        lambda case: (candidate, reference.apply_rope),
        positional=1,
        extra=lambda case, tensors: {"positions": None},
    )
    generated += expect_inputs_device(ROPE_CONTRACT, default_positions)
    return (
        "9 cases (batch axes, odd T, offset and scattered positions, base, 4 dtypes, a transposed view), "
        f"gradients, and {generated} cases from the exercise's contract (x or positions alone a view, "
        "d = 6, each dtype kept, x's device)"
    )


def _diagnose_rope_case(
    candidate: Callable[..., Any], x: torch.Tensor, kwargs: dict[str, Any]
) -> Callable[[torch.Tensor, torch.Tensor], str | None]:
    """Right only for contiguous x, else which way the rotation fails."""
    views = diagnose_views(candidate, (x,), kwargs)
    return lambda actual, expected: views(actual, expected) or _diagnose_rope(actual, expected, x)


def _diagnose_rope(actual: torch.Tensor, expected: torch.Tensor, x: torch.Tensor) -> str | None:
    """A rotation keeps the length of every interleaved pair (x[2i], x[2i+1]); name which way it fails."""
    a = actual.detach().to("cpu", torch.float64)
    x64 = x.detach().to("cpu", torch.float64)
    tol = 1e-2 if x.dtype in _HALF else 1e-5
    pair_norm = (a[..., 0::2] ** 2 + a[..., 1::2] ** 2).sqrt()  # (..., T, d/2)
    right_norm = (x64[..., 0::2] ** 2 + x64[..., 1::2] ** 2).sqrt()  # (..., T, d/2)
    if torch.allclose(pair_norm, right_norm, rtol=tol, atol=tol):
        return (
            "keeps the length of every pair (x[2i], x[2i+1]), as a rotation does, but rotates the "
            "pairs by the wrong angles: pair i of the token at position p turns by p·θ_i, with "
            "θ_i = base^(-2i/d) and p from `positions` (0 … T-1 by default)."
        )
    half = a.shape[-1] // 2
    split_norm = (a[..., :half] ** 2 + a[..., half:] ** 2).sqrt()
    if torch.allclose(split_norm, right_norm, rtol=tol, atol=tol):
        return (
            "is not a rotation of the interleaved pairs (x[2i], x[2i+1]) put back in place: the "
            "lengths it keeps are those of (out[i], out[i + d/2]). Take the pairs as x[..., 0::2] and "
            "x[..., 1::2] and put each rotated pair back interleaved (stack on a new last axis, flatten)."
        )
    if _rotates_half_split_pairs(a, x64, tol):
        return (
            "rotates the pairs (x[i], x[i + d/2]) (the rotate-half pairing of GPT-NeoX and Llama code), "
            "whatever order it puts them back in. This course rotates neighbouring channels "
            "(x[2i], x[2i+1]): take x[..., 0::2] and x[..., 1::2], and put each pair back in place."
        )
    return (
        "changes the length of the pairs (x[2i], x[2i+1]), so it is not a rotation: for the angle "
        "φ = p·θ_i the pair becomes (x[2i]·cos φ - x[2i+1]·sin φ, x[2i]·sin φ + x[2i+1]·cos φ), the same "
        "cos and sin in both, with the two signs as written."
    )


def _rotates_half_split_pairs(a: torch.Tensor, x: torch.Tensor, tol: float) -> bool:
    """Whether the output's channels form pairs, each keeping the length of one pair (x[i], x[i + d/2]).

    Whatever order the rotated pairs are put back in (interleaved, concatenated, swapped), a rotation
    of the half-split pairs keeps out[c]² + out[c']² = x[i]² + x[i + d/2]² for some channels c, c'.
    """
    d = a.shape[-1]
    half = d // 2
    lengths = x[..., :half] ** 2 + x[..., half:] ** 2  # (..., T, d/2)
    squares = a**2  # (..., T, d)
    used: set[int] = set()
    for i in range(half):
        found = [
            (c, e)
            for c in range(d)
            for e in range(c + 1, d)
            if c not in used
            and e not in used
            and torch.allclose(squares[..., c] + squares[..., e], lengths[..., i], rtol=tol, atol=tol)
        ]
        if not found:
            return False
        used.update(found[0])
    return True


def _on_cpu(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {key: value.cpu() if isinstance(value, torch.Tensor) else value for key, value in kwargs.items()}


# ---------------------------------------------------------------------------------------------
# RotaryMultiHeadAttention


@dataclass(frozen=True)
class RotaryVariant:
    """How one RotaryMultiHeadAttention.forward is written: the right one with the defaults, each other
    value a named mistake (`_rotary_mha` computes what it gives; `ROTARY_VARIANTS` names each)."""

    rotate: str = "qk"
    """Which of q, k, v are rotated ("qk" is right)."""
    where: str = "heads"
    """Where: "heads" (right, (b, h, t, d_k)), "full" (before the split) or "bthd" ((b, t, h, d_k))."""
    use_positions: bool = True
    """False: `positions` ignored."""
    base: float | None = None
    """The base apply_rope is given: None (right, self.base) or a number of its own."""
    pairing: str = "interleaved"
    """"interleaved" (right) or "rotate-half"."""
    scale: str = "d_k"
    """What the scores are divided by the square root of: "d_k" (right) or "d_model"."""
    causal: str = "tril"
    """The causal mask: "tril" (right) or "triu" (the future allowed)."""


def _rotary_mha(
    module: RotaryMultiHeadAttention,
    x: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    positions: torch.Tensor | None = None,
    variant: RotaryVariant | None = None,
) -> torch.Tensor:
    """The reference layer written as `variant` (the defaults are right)."""
    w = variant or RotaryVariant()
    rotate, where, use_positions, base = w.rotate, w.where, w.use_positions, w.base
    pairing, scale, causal = w.pairing, w.scale, w.causal
    base = module.base if base is None else base
    positions = positions if use_positions else None

    def rope(t: torch.Tensor) -> torch.Tensor:
        if pairing == "rotate-half":
            return apply_rope_rotate_half(t, positions, base)
        return reference.apply_rope(t, positions, base)

    q, k, v = module.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)
    if where == "full":  # rotated before the split into heads
        q = rope(q) if "q" in rotate else q
        k = rope(k) if "k" in rotate else k
    if where == "bthd":  # rotated as (b, t, h, d_k): the head axis taken for positions
        q, k = (rearrange(t, "b t (h d) -> b t h d", h=module.n_heads) for t in (q, k))  # (b, t, h, d_k)
        q, k = rope(q), rope(k)  # (b, t, h, d_k)
        q, k = (rearrange(t, "b t h d -> b t (h d)") for t in (q, k))  # (b, t, d_model)
    q, k, v = (split_heads(t, module.n_heads) for t in (q, k, v))  # each (b, h, t, d_k)
    if where == "heads":
        q = rope(q) if "q" in rotate else q
        k = rope(k) if "k" in rotate else k
        v = rope(v) if "v" in rotate else v
    head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t)
    if scale == "d_model":  # scores divided by √d_model: the same as q scaled by √(d_k / d_model) first
        q = q * math.sqrt(q.shape[-1] / x.shape[-1])
    if is_causal and causal == "triu":  # the future allowed instead of the past
        t = x.shape[-2]
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu()  # (t, t)
        head_mask = future if head_mask is None else head_mask & future
        is_causal = False
    out, _ = reference.attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_k)
    return module.out(merge_heads(out))  # (b, t, d_model)


ROTARY_VARIANTS: list[tuple[str, RotaryVariant]] = [
    (
        "matches attention without any rotation: apply your apply_rope to q and k of every head "
        "(after the split into heads, before the scores), with the given positions. (Rotating "
        "(b, t, h, d_k) tensors has the same effect: apply_rope takes the second-to-last axis, "
        "the heads, for positions, and every query and key of a head turns by the same angle, "
        "which leaves their dot products unchanged. Rotate (b, h, t, d_k) tensors.)",
        RotaryVariant(rotate=""),
    ),
    (
        "also rotates the values v: RoPE rotates only q and k, so that their dot product sees the "
        "relative position; v is passed on as it is.",
        RotaryVariant(rotate="qkv"),
    ),
    (
        "rotates q and v but not k: RoPE rotates q and k (so that their dot product sees the "
        "relative position), and v is passed on as it is.",
        RotaryVariant(rotate="qv"),
    ),
    (
        "rotates only q: rotate k as well, by its own positions, so that the score depends on the "
        "difference of positions.",
        RotaryVariant(rotate="q"),
    ),
    (
        "rotates only k: rotate q as well, by its own positions, so that the score depends on the "
        "difference of positions.",
        RotaryVariant(rotate="k"),
    ),
    (
        "applies RoPE before the split into heads, on the full d_model channels: then the "
        "frequencies run over d_model instead of d_k, and each head gets a slice of them. Split "
        "into heads first, (b, h, t, d_k), then rotate q and k.",
        RotaryVariant(where="full", rotate="qk"),
    ),
    (
        "ignores `positions`: pass them on to apply_rope for q and k (positions=None means 0 … t-1).",
        RotaryVariant(use_positions=False),
    ),
    (
        "ignores `base`: pass self.base on to apply_rope (the constructor takes base=10000.0).",
        RotaryVariant(base=10000.0),
    ),
    (
        "looks like the scores were divided by √d_model: each head's scores are dot products of "
        "d_k = d_model / n_heads numbers, so divide by √d_k (q.shape[-1] after the split).",
        RotaryVariant(scale="d_model"),
    ),
    (
        "uses an inverted causal mask (the upper triangle, torch.triu): with is_causal=True query i may "
        "attend keys 0 … i, the lower triangle with the diagonal (torch.tril), and masks the rest.",
        RotaryVariant(causal="triu"),
    ),
    (
        "rotates with the rotate-half pairing (x[i], x[i+d/2]): this course uses interleaved pairs "
        "(x[2i], x[2i+1]), as your apply_rope does.",
        RotaryVariant(pairing="rotate-half"),
    ),
]
"""Each mistake of RotaryMultiHeadAttention.forward once: its message, and the variant that makes it."""

_LAYERS = (
    "RotaryMultiHeadAttention should have the layers of notebook 04's MultiHeadAttention: "
    "qkv = nn.Linear(d_model, 3 * d_model) and out = nn.Linear(d_model, d_model) (subclass "
    "attn_course.heads.MultiHeadAttention and call super().__init__(d_model, n_heads, bias=bias))."
)


def _copy_parameters(learner: Any, ref: nn.Module, shown: str) -> None:
    """Give the learner's module the reference's parameters, by name; explain what is missing."""
    if not isinstance(learner, nn.Module):
        raise CheckFailed(f"{shown} should be a torch.nn.Module, but it is {type(learner).__name__}.")
    theirs = dict(learner.named_parameters())
    ours = dict(ref.named_parameters())
    if set(theirs) != set(ours):
        extra = sorted(set(theirs) - set(ours))
        if extra and all(name.endswith("bias") for name in extra) and "qkv.weight" in theirs:
            raise CheckFailed(
                f"{shown} has {', '.join(extra)}, but it was built with bias=False: pass bias=bias "
                "on to super().__init__."
            )
        raise CheckFailed(f"{_LAYERS} Its parameters are: {', '.join(sorted(theirs)) or 'none'}.")
    with torch.no_grad():
        for name, param in ours.items():
            if theirs[name].shape != param.shape:
                raise CheckFailed(
                    f"{shown}: {name} has shape {tuple(theirs[name].shape)}, expected "
                    f"{tuple(param.shape)}. {_LAYERS}"
                )
            theirs[name].copy_(param)


def _mha_cases() -> list[dict[str, Any]]:
    """Constructor arguments and inputs: heads, odd t, positions with gaps, masks, base, no bias."""
    pad = reference.padding_mask(torch.tensor([7, 5]), 7)[:, None, :].expand(2, 7, 7)  # (b, t, t)
    key_padding = reference.padding_mask(torch.tensor([5, 3]), 5)[:, None, :]  # (b, 1, t)
    return [
        {"init": (12, 3), "x": randn(2, 5, 12), "forward": {}},
        {"init": (16, 2), "x": randn(2, 7, 16), "forward": {"is_causal": True}},
        {"init": (16, 4), "x": randn(1, 6, 16), "forward": {"positions": torch.tensor([0, 1, 2, 5, 6, 11])}},
        {
            "init": (16, 4),
            "x": randn(2, 7, 16),
            "forward": {"mask": pad, "is_causal": True, "positions": torch.arange(7) * 2 + 30},
        },
        {"init": (16, 2), "x": randn(2, 6, 16), "kwargs": {"base": 20.0}, "forward": {"is_causal": True}},
        {"init": (8, 2), "x": randn(3, 5, 8), "kwargs": {"bias": False}, "forward": {}},
        # masks that broadcast to (b, t, t), as the contract allows: one (t, t) mask for the whole batch
        # (with t ≠ n_heads, and t = n_heads, where a head axis in the wrong place still broadcasts),
        # and a key-padding mask (b, 1, t)
        {"init": (16, 4), "x": randn(2, 6, 16), "forward": {"mask": _tt_mask(6)}},
        {"init": (16, 4), "x": randn(2, 4, 16), "forward": {"mask": _tt_mask(4), "is_causal": True}},
        {"init": (12, 3), "x": randn(2, 5, 12), "forward": {"mask": key_padding}},
    ]


def _tt_mask(t: int) -> torch.Tensor:
    """A (t, t) boolean mask that allows the diagonal and about half of the rest."""
    return (torch.rand(t, t) < 0.5) | torch.eye(t, dtype=torch.bool)  # (t, t)


@check
def check_RotaryMultiHeadAttention(candidate: Callable[..., Any]) -> str:  # noqa: N802 (exercise name)
    """RoPE on q and k of every head after the split, with positions, base and bias honoured."""
    name = "RotaryMultiHeadAttention"
    signature = (
        "The signatures are RotaryMultiHeadAttention(d_model, n_heads, bias=True, base=10000.0) and "
        "forward(self, x, mask=None, is_causal=False, positions=None)."
    )
    for case in _mha_cases():
        d_model, n_heads = case["init"]
        init_kwargs = case.get("kwargs", {})
        forward_kwargs = {"mask": None, "is_causal": False, "positions": None, **case["forward"]}
        ref = reference.RotaryMultiHeadAttention(d_model, n_heads, **init_kwargs).float()
        shown = (
            f"RotaryMultiHeadAttention({d_model}, {n_heads}"
            + "".join(f", {key}={value!r}" for key, value in init_kwargs.items())
            + ")"
        )
        module = call(name, candidate, d_model, n_heads, hint=signature, **init_kwargs)
        _copy_parameters(module, ref, f"Your {shown}")
        x = case["x"].float()  # (b, t, d_model)
        given = case["forward"]
        hint = signature
        if "mask" in given:
            hint += (
                " The mask (b, t, t) applies to every head: give it a head axis, mask.unsqueeze(-3) "
                "→ (b, 1, t, t)."
            )
        try:
            got = call(f"{name}.forward", module, x, hint=hint, **given)
        except CheckFailed:
            _expect_mask_broadcasts(module, x, given, ref(x, **forward_kwargs), shown)
            raise
        if isinstance(got, tuple | list):
            raise CheckFailed(
                f"Your {shown}(x) returned a {type(got).__name__}: forward returns the output tensor "
                "only, (b, t, d_model)."
            )
        expected = ref(x, **forward_kwargs)  # (b, t, d_model)
        out = expect_tensor(got, expected.shape, f"The output of your {shown}")
        if not is_close(out, expected):
            _expect_mask_broadcasts(module, x, given, expected, shown)
        mistakes = [Mistake(message, _mha_knob(ref, variant)) for message, variant in ROTARY_VARIANTS]
        probe = functools.partial(
            _probe_rotary, candidate, n_heads, init_kwargs, given, tuple(x.shape[:2]), shown
        )
        expect_close(
            out,
            expected,
            f"The output of your {shown}",
            mistakes=mistakes,
            args=(x,),
            kwargs=forward_kwargs,
            diagnose=lambda actual, expected, probe=probe: probe(),  # type: ignore[misc]
        )
    module = call(name, candidate, 16, 4, hint=signature)
    ref = reference.RotaryMultiHeadAttention(16, 4)
    _copy_parameters(module, ref, "Your RotaryMultiHeadAttention(16, 4)")
    positions = torch.tensor([2, 3, 5, 8, 13])
    expect_gradients(
        name, module, ref, [randn(2, 5, 16, dtype=torch.float32)], ("x",), kwargs={"positions": positions}
    )
    _expect_rotary_runs_on_cuda(candidate, signature)
    generated = _expect_rotary_contract(candidate, signature)
    return (
        "9 cases (heads, causal, positions with gaps, masks (b, t, t), (t, t) and (b, 1, t), base, "
        f"bias=False), gradients, and {generated} cases from the exercise's contract (3 heads of 6, x, the "
        "mask or positions alone a view, float64, x's device)"
    )


def _expect_rotary_contract(candidate: Callable[..., Any], signature: str) -> int:
    """The contract's generated cases on one layer of 3 heads of d_k = 6, in each case's dtype; then
    is_causal=True without mask or positions on the meta device (what it makes on the CPU meets x)."""
    d_model, n_heads = ROTARY_CONTRACT.base_sizes()["d_model"], 3

    def pair() -> tuple[nn.Module, nn.Module]:
        ref = reference.RotaryMultiHeadAttention(d_model, n_heads)
        module = call("RotaryMultiHeadAttention", candidate, d_model, n_heads, hint=signature)
        _copy_parameters(module, ref, f"Your RotaryMultiHeadAttention({d_model}, {n_heads})")
        return module, ref

    module, ref = pair()

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        if case.changed == "meta":
            learner, course = pair()
            return learner.to("meta"), course.to("meta")
        return module.to(case.dtype), ref.to(case.dtype)

    exercise = Exercise(
        "RotaryMultiHeadAttention.forward",
        functions,
        positional=1,
        extra=lambda case, tensors: {"is_causal": True},
        alloc=_rope_values,
    )
    cases = contract_cases(ROTARY_CONTRACT, one_kind_each=True)  # the mask expanded: one (t, t) for the batch
    ran = expect_contract_cases(ROTARY_CONTRACT, exercise, cases)
    bare = Exercise(
        "RotaryMultiHeadAttention.forward",
        functions,
        positional=1,
        extra=lambda case, tensors: {"mask": None, "positions": None, "is_causal": True},
    )
    return ran + expect_inputs_device(ROTARY_CONTRACT, bare)


def _expect_mask_broadcasts(
    module: Any, x: torch.Tensor, given: dict[str, Any], expected: torch.Tensor, shown: str
) -> None:
    """A layer wrong (or raising) for a mask smaller than (b, t, t) but right for it expanded: say so."""
    mask = given.get("mask")
    b, t = x.shape[:2]
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) == (b, t, t):
        return
    try:
        got = call("RotaryMultiHeadAttention.forward", module, x, **{**given, "mask": mask.expand(b, t, t)})
    except CheckFailed:
        return
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and is_close(got, expected):
        raise CheckFailed(
            f"Your {shown} is right for a mask (b, t, t) but not for the same mask given as "
            f"{tuple(mask.shape)}, which the layer must take too (any mask that broadcasts to (b, t, t)): "
            "its head axis is put in the wrong place. Count it from the end, mask.unsqueeze(-3) -> "
            "(..., 1, t, t): unsqueeze(1) or mask[:, None] put it between the two t axes of a (t, t) mask."
        )


def _probe_rotary(
    candidate: Callable[..., Any],
    n_heads: int,
    init_kwargs: dict[str, Any],
    given: dict[str, Any],
    batch_and_tokens: tuple[int, int],
    shown: str = "",
) -> str | None:
    """Which part of the learner's layer is wrong, on a layer with d_k = 8 ≥ the number of keys (`shown`:
    the layer of the call that failed, as the message names it)."""
    d_model = 8 * n_heads
    ref = reference.RotaryMultiHeadAttention(d_model, n_heads, **init_kwargs).double()
    module = call("RotaryMultiHeadAttention", candidate, d_model, n_heads, **init_kwargs)
    _copy_parameters(module, ref, f"Your RotaryMultiHeadAttention({d_model}, {n_heads})")
    module = module.double()
    x = randn(*batch_and_tokens, d_model)  # (b, t, d_model)
    positions, mask = given.get("positions"), given.get("mask")
    with torch.no_grad():
        q, k, v = (split_heads(t, n_heads) for t in ref.qkv(x).chunk(3, dim=-1))  # each (b, h, t, d_k)
        plain_k = k
        q, k = (reference.apply_rope(t, positions, ref.base) for t in (q, k))  # each (b, h, t, d_k)
    b, h, t, _ = q.shape
    allowed = torch.ones(b, h, t, t, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask.unsqueeze(-3)
    causal = torch.ones(t, t, dtype=torch.bool).tril() if given.get("is_causal") else None
    if causal is not None:
        allowed = allowed & causal
    keys = "mixes the keys k instead of the values v: out = weights @ v, with v its own projection."
    others = ((keys, plain_k), (keys, k))
    plain_q = split_heads(ref.qkv(x).chunk(3, dim=-1)[0], n_heads).detach()  # (b, h, t, d_k)
    default_q, default_k = (reference.apply_rope(t, None, ref.base) for t in (plain_q, plain_k))
    stated = "rotates {} by the positions 0 … t-1 instead of the `positions` given: pass positions to both."
    other_scores: tuple[tuple[str, torch.Tensor, torch.Tensor], ...] = (
        ("rotates neither q nor k: apply_rope to both, after the split into heads.", plain_q, plain_k),
        (stated.format("k"), q, default_k),
        (stated.format("q"), default_q, k),
        (stated.format("q and k"), default_q, default_k),
    )
    if ref.base != 10000.0:
        based = (
            "rotates {} with the default base=10000 instead of self.base: pass base to apply_rope for both."
        )
        other_scores = (
            *other_scores,
            (based.format("k"), q, reference.apply_rope(plain_k, positions)),
            (based.format("q"), reference.apply_rope(plain_q, positions), k),
        )
    merged = merged_input(module, lambda: module(x, **given))
    found = diagnose_heads(merged, Heads(q, k, v, allowed, causal, others, other_scores))
    built = (
        f"RotaryMultiHeadAttention({d_model}, {n_heads}"
        + "".join(f", {key}={value!r}" for key, value in init_kwargs.items())
        + ")"
    )
    return read_on(found, built, shown == built)


def _expect_rotary_runs_on_cuda(candidate: Callable[..., Any], signature: str) -> None:
    """Where there is a GPU: the layer moved there runs with default positions and agrees."""
    device = cuda_device()
    if device is None:
        return
    name = "RotaryMultiHeadAttention"
    module = call(name, candidate, 16, 4, hint=signature)
    ref = reference.RotaryMultiHeadAttention(16, 4)
    _copy_parameters(module, ref, "Your RotaryMultiHeadAttention(16, 4)")
    module, ref = module.to(device), ref.to(device)
    x = randn(2, 5, 16, dtype=torch.float32).to(device)  # (b, t, d_model)
    hint = "Create new tensors (default positions, masks) on x.device: torch.arange(t, device=x.device)."
    got = call(f"{name}.forward", module, x, hint=hint, is_causal=True)
    what = f"The output of your RotaryMultiHeadAttention(16, 4) on {device.type}"
    out = expect_tensor(got, (2, 5, 16), what, device=device)
    expect_close(out, ref(x, is_causal=True), what)


def _mha_knob(ref: RotaryMultiHeadAttention, variant: RotaryVariant) -> Callable[..., torch.Tensor]:
    def wrong(x, mask=None, is_causal=False, positions=None):
        return _rotary_mha(ref, x, mask, is_causal, positions, variant)

    return wrong
