"""Checks for notebooks 01 (scores, softmax, attention) and 02 (scaling, score variance)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from attn_course import reference
from attn_course.checks._contracts import (
    VIEW_KINDS,
    Arg,
    Axis,
    Contract,
    Exercise,
    Memory,
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
    diagnose_softmax,
    expect_close,
    expect_gradients,
    expect_tensor,
    randn,
    unpack_out_and_weights,
)
from attn_course.demos.memory import LargestTensor

BATCH_HINT = (
    "Your function works for 2-D inputs but not with batch dimensions in front: transpose only the "
    "last two axes (k.transpose(-2, -1) or k.mT, not k.T), and write einsum with '...'."
)

# (q shape, k shape, v shape, dtype): T_q != T_k, square, a batch axis with d_v != d_k, two batch axes.
ATTENTION_CASES: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], torch.dtype]] = [
    ((3, 6), (5, 6), (5, 6), torch.float64),
    ((4, 8), (4, 8), (4, 8), torch.float64),
    ((2, 5, 4), (2, 7, 4), (2, 7, 3), torch.float64),
    ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 2), torch.float32),
]


# ---------------------------------------------------------------------------------------------
# The contracts of notebooks 01 and 02: what each exercise must accept and return.

_FLOATS = (torch.float64, torch.float32)
_SIZES = (
    Axis("B", (2,)),
    Axis("H", (3,), "a second batch axis, the heads, whose count is not a power of two"),
    Axis("T_q", (3, 7), "more queries than keys: T_k = 5"),
    Axis("T_k", (5,)),
    Axis("d", (6,), "a width that is not a power of two"),
)


def _batched(name: str, axes: tuple[str, ...]) -> Arg:
    """A (B, H, T, width) argument, two batch axes as a multi-head layer passes them, that may be passed
    as any view: transposed as split_heads makes it ((B, T, H, width).transpose(1, 2): rows H·width apart,
    heads width apart, so that B and H cannot be merged by .view), a slice of a longer sequence, or one
    batch entry expanded over the batch."""
    return Arg(name, axes, views=VIEW_KINDS, swap=(1, 2), slice_axis=-2, expand_axis=0)


SCORES_CONTRACT = Contract(
    "dot_product_scores",
    args=(_batched("q", ("B", "H", "T_q", "d")), _batched("k", ("B", "H", "T_k", "d"))),
    axes=_SIZES,
    returns=(Returns("scores", ("B", "H", "T_q", "T_k")),),
    dtypes=_FLOATS,
    memory=Memory(("B", "H", "T_q", "T_k", "d"), why="every product q_i·k_j before its sum"),
)
"""Exercise 1 of 01: any batch axes (two here, (B, H), as a multi-head layer passes them), T_q ≠ T_k
both ways, the inputs' dtype and device, any view."""

SOFTMAX_CONTRACT = Contract(
    "softmax",
    args=(Arg("x", ("B", "H", "T_q", "T_k"), views=VIEW_KINDS, swap=(1, 2), slice_axis=-1),),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,), "a second batch axis, the heads, whose count is not a power of two"),
        Axis("T_q", (3,)),
        Axis("T_k", (5, 1), "a row of one entry"),
    ),
    returns=(Returns("softmax", ("B", "H", "T_q", "T_k")),),
    dtypes=_FLOATS,
    memory=Memory(("B", "H", "T_q", "T_k"), factor=2, why="x's size"),
)
"""Exercise 2 of 01 (along dim=-1 in the generated cases): x of any shape, here (B, H, T_q, T_k) as a
multi-head layer's scores, the inputs' dtype and device, any view."""

_ATTENTION_ARGS = (
    _batched("q", ("B", "H", "T_q", "d")),
    _batched("k", ("B", "H", "T_k", "d")),
    _batched("v", ("B", "H", "T_k", "d_v")),
)
_ATTENTION_RETURNS = (
    Returns("out", ("B", "H", "T_q", "d_v")),
    Returns("weights", ("B", "H", "T_q", "T_k")),
)
_ATTENTION_AXES = (*_SIZES, Axis("d_v", (3,), "d_v ≠ d"))
_ATTENTION_MEMORY = Memory(("B", "H", "T_q", "T_k", "d"), why="every product q_i·k_j before its sum")

DOT_PRODUCT_ATTENTION_CONTRACT = Contract(
    "dot_product_attention",
    args=_ATTENTION_ARGS,
    axes=_ATTENTION_AXES,
    returns=_ATTENTION_RETURNS,
    dtypes=_FLOATS,
    memory=_ATTENTION_MEMORY,
)
"""Exercise 3 of 01: (out, weights) for any batch axes (two, (B, H)), T_q ≠ T_k, d_v ≠ d, in the inputs'
dtype and device, each of q, k, v alone a view."""

SCALED_CONTRACT = replace(DOT_PRODUCT_ATTENTION_CONTRACT, exercise="scaled_dot_product_attention")
"""Exercise 2 of 02: as dot_product_attention's."""

SCORE_VARIANCE_CONTRACT = Contract(
    "score_variance",
    args=(),
    axes=(Axis("n_samples", (1_500,)), Axis("d_k", (16,))),
    returns=(Returns("variance", (), dtype="float64"),),
    memory=Memory(("n_samples", "d_k"), factor=4, why="q and k, then one score per pair"),
    notes=("returns a Python float",),
)
"""Exercise 1 of 02: one score per pair, never every query against every key (n_samples × n_samples)."""


def _function(name: str, candidate: Callable[..., Any], ref: Callable[..., Any], **more: Any) -> Exercise:
    """The exercise `name` as a plain function: the learner's and the reference, the same on every case."""
    return Exercise(name, lambda case: (candidate, ref), **more)


def _out_and_weights(name: str) -> Callable[[Any, tuple[torch.Tensor, ...]], Any]:
    return lambda result, expected: unpack_out_and_weights(name, result, *expected)


def _expect_contract(contract: Contract, exercise: Exercise) -> int:
    """The contract's generated cases, then the same with its inputs on another device; how many ran."""
    ran = expect_contract_cases(contract, exercise, contract_cases(contract))
    return ran + expect_inputs_device(contract, exercise)


# ---------------------------------------------------------------------------------------------
# Known wrong implementations, shared by the attention checks.


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1)  # (..., T_q, T_k)


def _attend(scores: torch.Tensor, v: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    weights = torch.softmax(scores, dim=dim)  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, d_v)


def _scaled_by(size: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], float], power: float = -0.5):
    """Attention whose scores are multiplied by size(q, k, v) ** power."""

    def wrong(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _attend(_scores(q, k) * size(q, k, v) ** power, v)

    return wrong


def _d_k(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    return float(q.shape[-1])


def _out(variant: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> Callable[..., torch.Tensor]:
    return lambda *args: variant(*args)[0]


def _weights(variant: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> Callable[..., torch.Tensor]:
    return lambda *args: variant(*args)[1]


def _unscaled(q, k, v):
    return _attend(_scores(q, k), v)


def _scaled(q, k, v):
    return _scaled_by(_d_k)(q, k, v)


def _softmax_over_queries(scale: bool):
    def wrong(q, k, v):
        scores = _scores(q, k) / (math.sqrt(q.shape[-1]) if scale else 1.0)
        return _attend(scores, v, dim=-2)

    return wrong


def _no_softmax(scale: bool):
    def wrong(q, k, v):
        scores = _scores(q, k) / (math.sqrt(q.shape[-1]) if scale else 1.0)
        return scores @ v, scores

    return wrong


def _transposed_weights(scale: bool):
    def wrong(q, k, v):
        weights = torch.softmax(_scores(q, k) / (math.sqrt(q.shape[-1]) if scale else 1.0), dim=-1)
        return weights.transpose(-2, -1) @ v, weights.transpose(-2, -1)

    return wrong


def _scaled_after_softmax(q, k, v):
    weights = torch.softmax(_scores(q, k), dim=-1) / math.sqrt(q.shape[-1])
    return weights @ v, weights


def _common_attention_mistakes(scale: bool) -> list[tuple[str, Callable[..., Any]]]:
    return [
        (
            "are normalised over the queries (softmax over dim=-2): each query's weights over the "
            "keys must sum to 1, so take the softmax over the last axis (dim=-1).",
            _softmax_over_queries(scale),
        ),
        (
            "skip the softmax: the raw scores are used as weights. Turn each row of scores into "
            "probabilities with softmax(..., dim=-1) before multiplying by v.",
            _no_softmax(scale),
        ),
        (
            "are transposed: row i must hold query i's weights over the keys (softmax of q @ kᵀ "
            "over its last axis), and the output is weights @ v.",
            _transposed_weights(scale),
        ),
    ]


def _attention_mistakes(
    entries: list[tuple[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]]],
) -> tuple[list[Mistake], list[Mistake]]:
    """Split (message, wrong attention) pairs into mistakes on the output and on the weights."""
    on_out = [Mistake(message, _out(variant)) for message, variant in entries]
    on_weights = [Mistake(message, _weights(variant)) for message, variant in entries]
    return on_out, on_weights


def _check_attention_like(
    contract: Contract,
    candidate: Callable[..., Any],
    expected_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    entries: list[tuple[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]]],
) -> str:
    """Shared body of the two attention checks without masks; returns the pass detail."""
    name = contract.exercise
    on_out, on_weights = _attention_mistakes(entries)
    unstable_hint = (
        "Large scores overflow exp(): use a numerically stable softmax (subtract each row's max), "
        "for example your softmax from notebook 01 or torch.softmax."
    )
    cases: list[
        tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], torch.dtype, float, torch.device | None]
    ] = [(*shapes, 1.0, None) for shapes in ATTENTION_CASES]
    cases.append(((3, 4), (5, 4), (5, 2), torch.float32, 100.0, None))  # scores in the hundreds
    device = cuda_device()
    if device is not None:
        cases.append(((2, 5, 4), (2, 7, 4), (2, 7, 3), torch.float32, 1.0, device))
    for q_shape, k_shape, v_shape, dtype, scale, dev in cases:
        q, k, v = (
            randn(*q_shape, dtype=dtype, scale=scale),
            randn(*k_shape, dtype=dtype),
            randn(*v_shape, dtype=dtype),
        )
        if dev is not None:
            q, k, v = q.to(dev), k.to(dev), v.to(dev)
        expected_out, expected_weights = expected_fn(q, k, v)
        result = call(name, candidate, q, k, v, hint=BATCH_HINT if q.dim() > 2 else "")
        out, weights = unpack_out_and_weights(name, result, expected_out, expected_weights)
        expect_tensor(weights, expected_weights.shape, "Your weights", device=q.device, finite=False)
        expect_tensor(out, expected_out.shape, "Your output", device=q.device, finite=False)
        args = (q, k, v)
        expect_close(
            weights,
            expected_weights,
            "Your weights",
            mistakes=on_weights,
            args=args,
            nonfinite_hint=unstable_hint,
            diagnose=functools.partial(_diagnose_weights, q=q, k=k),
        )

        def diagnose(
            actual: torch.Tensor, expected: torch.Tensor, w: torch.Tensor = weights, v: torch.Tensor = v
        ) -> str | None:
            return _diagnose_output(actual, w, v)

        expect_close(
            out,
            expected_out,
            "Your output",
            mistakes=on_out,
            args=args,
            nonfinite_hint=unstable_hint,
            diagnose=diagnose,
        )
    exercise = _function(name, candidate, expected_fn, unpack=_out_and_weights(name))
    generated = _expect_contract(contract, exercise)
    inputs = [randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 3)]
    expect_gradients(name, candidate, expected_fn, inputs, ("q", "k", "v"), first_output=True)
    return (
        f"7 cases (T_q ≠ T_k, batch axes, d_v ≠ d_k, large scores, float32/64), {generated} more from the "
        "exercise's contract (two batch axes (B, H), T_q > T_k, each of q, k, v alone a view, as "
        "split_heads makes it too, the inputs' dtype and device) "
        "and gradients"
    )


def _diagnose_weights(
    actual: torch.Tensor, expected: torch.Tensor, q: torch.Tensor, k: torch.Tensor
) -> str | None:
    """Weights that are a softmax of the scores times some other factor, or no softmax over the keys."""
    scores = (q @ k.transpose(-2, -1)).detach().to("cpu", torch.float64)  # (..., T_q, T_k)
    a = actual.detach().to("cpu", torch.float64)
    if a.shape != scores.shape or not torch.isfinite(a).all():
        return None
    rows_ok = bool(((a.sum(dim=-1) - 1).abs() <= 1e-3).all()) and bool((a >= 0).all())
    if rows_ok:
        c = _softmax_scale(a, scores)
        right = _softmax_scale(expected.detach().to("cpu", torch.float64), scores)
        if c is not None and right is not None:
            d_k = q.shape[-1]
            should = "1 (no scale)" if abs(right - 1) < 1e-6 else f"1/√d_k = {right:.4g} (d_k = {d_k})"
            return (
                f"are a softmax of the scores q @ kᵀ multiplied by {c:.4g}, but the scores must be "
                f"multiplied by {should}: check the scale (what you divide the scores by, and where)."
            )
        return None
    return diagnose_softmax(actual, expected, dim=-1, plural=True)


def _softmax_scale(weights: torch.Tensor, scores: torch.Tensor) -> float | None:
    """c when weights = softmax(c · scores) along the last axis (least squares on log weights), else None."""
    log_p = weights.clamp_min(1e-300).log()
    centred_s = scores - scores.mean(-1, keepdim=True)
    centred_p = log_p - log_p.mean(-1, keepdim=True)
    c = float((centred_s * centred_p).sum() / (centred_s * centred_s).sum())
    return c if torch.allclose(centred_p, c * centred_s, atol=1e-4, rtol=1e-3) else None


def _diagnose_output(actual: torch.Tensor, weights: torch.Tensor, v: torch.Tensor) -> str | None:
    """Right weights (they were checked first), so the output is not weights @ v."""
    return (
        "is wrong although your weights are right: the output is the weighted sum of the values, "
        "weights @ v, of shape (..., T_q, d_v), with nothing else done to it."
    )


# ---------------------------------------------------------------------------------------------
# 01_dot_product_attention


@check
def check_dot_product_scores(candidate: Callable[..., Any]) -> str:
    """Raw scores q·kᵀ, shape (..., T_q, T_k), unscaled."""
    mistakes = [
        Mistake(
            "are divided by √d: this function returns the raw, unscaled scores q @ kᵀ "
            "(the 1/√d_k scale is notebook 02's topic).",
            lambda q, k: _scores(q, k) / math.sqrt(q.shape[-1]),
        ),
        Mistake(
            "are transposed: entry [i, j] must be query i · key j, so compute q @ kᵀ, not k @ qᵀ.",
            lambda q, k: k @ q.transpose(-2, -1),
        ),
        Mistake(
            "have a softmax applied: this function returns the raw scores, before any softmax.",
            lambda q, k: torch.softmax(_scores(q, k), dim=-1),
        ),
    ]
    for q_shape, k_shape, _, dtype in ATTENTION_CASES:
        q, k = randn(*q_shape, dtype=dtype), randn(*k_shape, dtype=dtype)
        expected = reference.dot_product_scores(q, k)
        transposed = (*expected.shape[:-2], expected.shape[-1], expected.shape[-2])
        got = call("dot_product_scores", candidate, q, k, hint=BATCH_HINT if q.dim() > 2 else "")
        expect_tensor(
            got,
            expected.shape,
            "Your scores",
            hints={
                transposed: "They are transposed: rows are queries and columns keys, "
                "so compute q @ kᵀ, not k @ qᵀ.",
                (*expected.shape[:-1], q.shape[-2]): "That is one column per QUERY: the scores compare "
                "the queries with themselves (q @ qᵀ). Each column is a key: q @ kᵀ.",
                (*expected.shape[:-2], k.shape[-2], k.shape[-2]): "That is one row and one column per KEY: "
                "the scores compare the keys with themselves (k @ kᵀ). Rows are queries: q @ kᵀ.",
            },
        )
        expect_close(got, expected, "Your scores", mistakes=mistakes, args=(q, k))
    exercise = _function("dot_product_scores", candidate, reference.dot_product_scores)
    generated = _expect_contract(SCORES_CONTRACT, exercise)
    inputs = [randn(2, 3, 4), randn(2, 5, 4)]
    expect_gradients("dot_product_scores", candidate, reference.dot_product_scores, inputs, ("q", "k"))
    return (
        f"4 shapes (T_q ≠ T_k, batch axes, float32/64), {generated} more from the exercise's contract "
        "(two batch axes (B, H), T_q > T_k, each input alone a view, the inputs' dtype and device) and "
        "gradients"
    )


@check
def check_softmax(candidate: Callable[..., Any]) -> str:
    """Stable softmax along `dim`; large and -inf inputs."""
    big = torch.tensor([[1e4, 0.0, -1e4, 5e3], [-1e4, -2e4, -1e4 + 1.0, -1.5e4]])
    inf = float("-inf")
    with_neg_inf = torch.tensor([[0.5, inf, 1.0, inf], [inf, inf, -2.0, 3.0], [1.0, 2.0, 3.0, inf]])
    cases: list[tuple[torch.Tensor, int, str]] = [
        (randn(5, 5), -1, ""),
        (randn(4, 6), -1, ""),
        (randn(2, 3, 5), 1, ""),
        (randn(3, 4), 0, ""),
        (randn(2, 3, 4, dtype=torch.float32), 2, ""),
        (
            with_neg_inf.double(),
            -1,
            "Entries of -inf (masked scores) must get weight exactly 0, since exp(-inf) = 0, as "
            "long as their row has a finite entry: subtract the row max (not the mean) before exp.",
        ),
        (
            big.double(),
            -1,
            "exp() overflows for large inputs (exp(1e4) = inf) and underflows for very negative "
            "ones: subtract each row's maximum (x.amax(dim, keepdim=True)) before exp. Subtracting "
            "the maximum of the whole tensor is not enough when rows differ a lot.",
        ),
    ]
    for x, dim, hint in cases:
        expected = torch.softmax(x, dim=dim)
        got = call("softmax", candidate, x, dim=dim)
        expect_tensor(got, x.shape, "Your softmax", finite=False)
        expect_close(
            got,
            expected,
            "Your softmax",
            mistakes=_softmax_mistakes(x, dim),
            args=(x,),
            kwargs={"dim": dim},
            nonfinite_hint=hint,
            diagnose=functools.partial(diagnose_softmax, dim=dim),
        )
    x = randn(3, 4)
    got = call("softmax", candidate, x)
    expect_close(
        got,
        torch.softmax(x, dim=-1),
        "Your softmax called without `dim`",
        args=(x,),
        mistakes=[
            Mistake(
                "should use dim=-1 by default (def softmax(x, dim=-1)).", lambda x: torch.softmax(x, dim=0)
            )
        ],
    )
    exercise = _function("softmax", candidate, reference.softmax, extra=lambda case, tensors: {"dim": -1})
    generated = _expect_contract(SOFTMAX_CONTRACT, exercise)
    expect_gradients("softmax", candidate, reference.softmax, [randn(3, 5)], ("x",), kwargs={"dim": -1})
    _expect_own_softmax(candidate)
    return (
        f"8 cases (dims 0, 1, 2, -1, ±1e4, -inf entries, float32/64), {generated} more from the exercise's "
        "contract (x of shape (B, H, T_q, T_k), alone a view, its dtype and device) and gradients"
    )


class _SoftmaxCalls(TorchFunctionMode):
    """Notes whether torch's own softmax (any spelling) is called."""

    def __init__(self) -> None:
        super().__init__()
        self.called = ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("softmax", "_softmax") and not self.called:
            self.called = name
        return func(*args, **(kwargs or {}))


def _expect_own_softmax(candidate: Callable[..., Any]) -> None:
    """The exercise is to write softmax: torch.softmax, F.softmax or x.softmax do not count."""
    with _SoftmaxCalls() as calls:
        call("softmax", candidate, randn(3, 4), dim=-1)
    if calls.called:
        raise CheckFailed(
            f"Your softmax calls torch's own {calls.called} (torch.softmax, F.softmax or x.softmax): "
            "that gives the right numbers, but this exercise is to write it yourself, from exp, a max "
            "and a sum along `dim` (torch.exp, x.amax, .sum and torch.logsumexp are all fine)."
        )


def _softmax_mistakes(x: torch.Tensor, dim: int) -> list[Mistake]:
    """Wrong softmaxes of x along dim, as learners write them."""
    other_dims = [d for d in range(x.dim()) if d != dim % x.dim()]
    wrong_axis = [
        Mistake(
            f"sums to 1 along dim={d} instead of along the dim={dim} you were given: use the `dim` "
            "argument in both the max and the sum (and keepdim=True).",
            lambda x, dim, d=d: torch.softmax(x, dim=d),
        )
        for d in other_dims
    ]
    wrong_axis += [
        Mistake(
            f"subtracts the max taken along dim={d} instead of along the dim={dim} you were given: then "
            "each row along dim is shifted by several different numbers, not by one, and the ratios of "
            "its probabilities change. Take the max along `dim` too: x.amax(dim=dim, keepdim=True).",
            lambda x, dim, d=d: torch.softmax(x - x.amax(dim=d, keepdim=True), dim=dim),
        )
        for d in other_dims
    ]
    return [
        *wrong_axis,
        Mistake(
            "is not normalised: after exp, divide by the sum along `dim` (keepdim=True) so that "
            "the probabilities sum to 1.",
            lambda x, dim: (x - x.amax(dim=dim, keepdim=True)).exp(),
        ),
        Mistake(
            "matches log-softmax: return the probabilities exp(x - max) / sum, not their logarithm.",
            lambda x, dim: torch.log_softmax(x, dim=dim),
        ),
        Mistake(
            "subtracts the max without keepdim=True, so it broadcasts along the wrong axis: use "
            "x.amax(dim=dim, keepdim=True) (or x.max(dim=dim, keepdim=True).values).",
            lambda x, dim: _no_keepdim_max(x, dim),
        ),
        Mistake(
            "divides by a sum taken without keepdim=True, which broadcasts along the wrong axis: "
            "use exps.sum(dim=dim, keepdim=True).",
            lambda x, dim: (e := (x - x.amax(dim=dim, keepdim=True)).exp()) / e.sum(dim=dim),
        ),
    ]


def _no_keepdim_max(x: torch.Tensor, dim: int) -> torch.Tensor:
    exps = (x - x.amax(dim=dim)).exp()
    return exps / exps.sum(dim=dim, keepdim=True)


@check
def check_dot_product_attention(candidate: Callable[..., Any]) -> str:
    """Unscaled softmax(q kᵀ) v, returning (out, weights)."""
    entries = [
        (
            "match attention *with* the 1/√d_k scale: this exercise is the unscaled softmax(q kᵀ) v "
            "(the scale is notebook 02's topic).",
            _scaled,
        ),
        *_common_attention_mistakes(scale=False),
    ]
    return _check_attention_like(
        DOT_PRODUCT_ATTENTION_CONTRACT, candidate, reference.dot_product_attention, entries
    )


# ---------------------------------------------------------------------------------------------
# 02_scaling


@check
def check_scaled_dot_product_attention(candidate: Callable[..., Any]) -> str:
    """softmax(q kᵀ / √d_k) v, returning (out, weights)."""
    entries = [
        (
            "match attention without the 1/√d_k scale: divide the scores by √d_k, d_k = q.shape[-1].",
            _unscaled,
        ),
        (
            "are divided by d_k instead of √d_k (or by √d_k twice, the queries and the scores): divide the "
            "scores once, by math.sqrt(q.shape[-1]).",
            _scaled_by(_d_k, power=-1.0),
        ),
        ("are multiplied by √d_k: divide the scores by √d_k instead.", _scaled_by(_d_k, power=0.5)),
        (
            "are scaled by √d_v, the width of the values: the scale uses the width of queries and "
            "keys, d_k = q.shape[-1].",
            _scaled_by(lambda q, k, v: float(v.shape[-1])),
        ),
        (
            "are scaled by the square root of q.shape[0] (a batch or sequence length), not of "
            "d_k: the feature axis is the last one, d_k = q.shape[-1].",
            _scaled_by(lambda q, k, v: float(q.shape[0])),
        ),
        (
            "are scaled by the square root of the number of queries, not of d_k = q.shape[-1].",
            _scaled_by(lambda q, k, v: float(q.shape[-2])),
        ),
        (
            "are scaled by the square root of the number of keys, not of d_k = q.shape[-1].",
            _scaled_by(lambda q, k, v: float(k.shape[-2])),
        ),
        (
            "are scaled after the softmax, so the weights no longer sum to 1: divide the scores by "
            "√d_k before the softmax.",
            _scaled_after_softmax,
        ),
        *_common_attention_mistakes(scale=True),
    ]
    return _check_attention_like(SCALED_CONTRACT, candidate, reference.scaled_dot_product_attention, entries)


@check
def check_score_variance(candidate: Callable[..., Any]) -> str:
    """Sample variance of q·k: about d_k unscaled and about 1 scaled; n numbers held, never n × n."""
    _expect_linear_memory(candidate)
    checked = []
    for d_k in (4, 16, 64):
        for scaled in (False, True):
            value = _as_float(call("score_variance", candidate, d_k, n_samples=20_000, scaled=scaled))
            expected = 1.0 if scaled else float(d_k)
            if abs(value - expected) <= 0.1 * expected:
                checked.append(value)
                continue
            found = _n_samples_dependence(candidate, scaled) or _variance_class(candidate, scaled)
            mistake = _score_variance_mistake(d_k, scaled, value, expected, n_samples=20_000)
            raise CheckFailed(found or mistake)
    return f"Var(q·k) ≈ d_k unscaled and ≈ 1 scaled, for d_k = 4, 16, 64 ({len(checked)} estimates)"


def _expect_linear_memory(candidate: Callable[..., Any]) -> None:
    """Refuse a score_variance that needs more memory than its contract: n × n entries where n belong."""
    sizes = SCORE_VARIANCE_CONTRACT.base_sizes()
    n_samples, d_k = sizes["n_samples"], sizes["d_k"]
    largest = LargestTensor()
    with largest:
        call("score_variance", candidate, d_k, n_samples=n_samples, scaled=False)
    assert SCORE_VARIANCE_CONTRACT.memory is not None
    if largest.numel <= SCORE_VARIANCE_CONTRACT.memory.bound(sizes):
        return
    if largest.numel >= n_samples * n_samples // 2:
        default = 20_000 * 20_000 * 8 / 2**30
        raise CheckFailed(
            f"score_variance({d_k}, n_samples={n_samples}) makes a tensor of shape {largest.shape}: every "
            f"query against every key (q @ k.T), {largest.numel:,} scores where the exercise needs "
            f"{n_samples:,}, one per pair, (q * k).sum(dim=-1). The variance may come out right, but at "
            f"the default n_samples=20000 that matrix takes {default:.1f} GiB in float64 and runs the "
            "machine out of memory."
        )
    raise CheckFailed(
        f"score_variance({d_k}, n_samples={n_samples}) makes a tensor of shape {largest.shape}, "
        f"{largest.numel:,} entries, where q and k hold {n_samples * d_k:,} each and the scores "
        f"{n_samples:,}, one per pair: hold no more than those, so that it fits at the default "
        "n_samples=20000 too."
    )


def _as_float(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise CheckFailed(
                "`score_variance` should return one number (a float), but returned a tensor of shape "
                f"{tuple(value.shape)}: take the variance over all samples, then .item()."
            )
        value = value.item()
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CheckFailed(f"`score_variance` should return a float, but returned {value!r:.80}.") from None
    if math.isnan(number):
        raise CheckFailed(
            f"`score_variance` returned {number}: the variance of a single number is NaN. Did you sum "
            "everything into one score? Each pair's score sums its own d_k products only (along the last "
            "axis), giving n_samples scores whose variance you take."
        )
    if not math.isfinite(number):
        raise CheckFailed(f"`score_variance` returned {number}, which is not a finite number.")
    return number


def _n_samples_dependence(candidate: Callable[..., Any], scaled: bool) -> str | None:
    """Name an estimate that grows or shrinks with n_samples: the variance of one score cannot."""
    small, large = (
        _as_float(call("score_variance", candidate, 64, n_samples=n, scaled=scaled)) for n in (2_000, 20_000)
    )
    if small <= 0 or large <= 0 or 1 / 3 < large / small < 3:
        return None
    return (
        f"score_variance(64, scaled={scaled}) returned {small:.3g} with n_samples=2000 and {large:.3g} with "
        "n_samples=20000: it changes with the number of samples, but the variance of one score q·k does "
        "not. Each score is the sum over the d_k components of one pair, (q * k).sum(dim=-1) (not a sum "
        "over the samples, dim=0), scaled by √d_k alone (nothing involving n_samples); the variance is "
        "then taken over the n_samples scores."
    )


_VARIANCE_DIMS = (4, 16, 64)

_UNIFORM = (
    "That is what uniform numbers give: torch.rand draws from [0, 1) (mean 1/2, variance 1/12), "
    "not from N(0, 1). Draw q and k with torch.randn."
)
_Q_IS_K = (
    "That is the variance of q·q, a sum of d_k squares (Var q_i² = 2): k is q, or drawn as q. Draw k "
    "on its own, torch.randn(n_samples, d_k), independent of q."
)
_VARIANCE_CLASSES: dict[bool, list[tuple[float, float, str, str]]] = {
    # scaled -> (factor c, power a, the law c · d_k^a, what gives it); theory: d_k, and 1 when scaled
    False: [
        (2.0, 1.0, "2·d_k", _Q_IS_K),
        (1.0, 2.0, "d_k²", "That is about d_k²: the scores should be sums of d_k products q_i·k_i of "
         "independent N(0, 1) numbers, without any extra factor."),
        (1.0, 0.5, "√d_k", "That is the standard deviation (≈ √d_k): return the variance (.var()), "
         "not .std()."),
        (1.0, 0.0, "1", "With scaled=False the variance should grow like d_k. Did you scale anyway, or take "
         "the variance of the single products q_i·k_i instead of their sum q·k over the d_k components?"),
        (1.0, -1.0, "1/d_k", "Dividing by d_k makes it ≈ 1/d_k: with scaled=True divide the scores by √d_k. "
         "With scaled=False do not divide them (a mean over the components, .mean(-1), divides the sum "
         "by d_k)."),
        (1 / 3, 1.0, "d_k/3", _UNIFORM),
        (7 / 144, 1.0, "7·d_k/144", _UNIFORM),
    ],
    True: [
        (2.0, 0.0, "2", _Q_IS_K),
        (1.0, 1.0, "d_k", "scaled=True had no effect: divide the scores by √d_k before taking the variance."),
        (1.0, -1.0, "1/d_k", "Dividing by d_k makes it ≈ 1/d_k: with scaled=True divide the scores by √d_k."),
        (1.0, 0.5, "√d_k", "That is the variance divided by √d_k (or the scores by d_k^¼): divide the scores "
         "by √d_k, which divides their variance by d_k."),
        (1.0, 2.0, "d_k²", "That is what scores multiplied by √d_k give: divide them by √d_k."),
        (1 / 3, 0.0, "1/3", _UNIFORM),
        (7 / 144, 0.0, "7/144", _UNIFORM),
    ],
}  # fmt: skip
"""The values typical mistakes give, as functions of d_k, told apart by evaluating at d_k = 4, 16, 64."""


def _variance_class(candidate: Callable[..., Any], scaled: bool) -> str | None:
    """Name the mistake by how the learner's variance grows with d_k: c · d_k^a for d_k = 4, 16, 64."""
    values = [_as_float(call("score_variance", candidate, d, scaled=scaled)) for d in _VARIANCE_DIMS]
    shown = ", ".join(f"{v:.3g}" for v in values)
    for factor, power, law, why in _VARIANCE_CLASSES[scaled]:
        laws = [factor * d**power for d in _VARIANCE_DIMS]
        if all(abs(v - want) <= 0.15 * want for v, want in zip(values, laws, strict=True)):
            theory = "1" if scaled else "d_k"
            return (
                f"score_variance(d_k, scaled={scaled}) returned {shown} for d_k = 4, 16, 64: about {law}, "
                f"where theory says {theory}. {why}"
            )
    return None


def _score_variance_mistake(
    d_k: int, scaled: bool, value: float, expected: float, n_samples: int = 20_000
) -> str:
    """Name the mistake behind a wrong variance estimate from its size."""
    called = f"score_variance({d_k}, scaled={scaled}) returned {value:.3g}; theory says about {expected:g}."
    if value >= 0.01 * n_samples and value > 10 * expected**2:
        return (
            f"{called} That grows with n_samples ({n_samples}): did you sum over the samples? Each "
            "pair's score sums its own d_k products, along the last axis (the components), not axis 0."
        )
    uniform = (
        "That is what uniform numbers give: torch.rand draws from [0, 1) (mean 1/2, variance 1/12), "
        "not from N(0, 1). Draw q and k with torch.randn."
    )
    guesses = [
        (
            math.sqrt(d_k),
            "That is the standard deviation (≈ √d_k): return the variance (.var()), not .std().",
        ),
        (1.0 / d_k, "Dividing by d_k makes it ≈ 1/d_k: with scaled=True divide the scores by √d_k."),
        (
            float(d_k) if scaled else 1.0,
            "scaled=True had no effect: divide the scores by √d_k before taking the variance."
            if scaled
            else "With scaled=False the variance should grow like d_k. Did you scale anyway, or take the "
            "variance of the single products q_i·k_i instead of their sum q·k over the d_k components?",
        ),
        (
            float(d_k) ** 2,
            "That is about d_k²: the scores should be sums of d_k products q_i·k_i of "
            "independent N(0, 1) numbers, without any extra factor.",
        ),
        (expected / 3, uniform),  # one of q, k uniform: E[k_i²] = 1/3
        (expected * 7 / 144, uniform),  # both uniform: Var(q_i k_i) = 1/9 - 1/16
    ]
    for guess, explanation in guesses:
        if guess != expected and abs(value - guess) <= 0.15 * guess:
            return f"{called} {explanation}"
    return (
        f"{called} Draw n_samples pairs q, k of shape (n_samples, d_k) with torch.randn, compute "
        "the scores (q * k).sum(-1), and return their variance."
    )
