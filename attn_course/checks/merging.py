"""Checks for notebook 11's merging of partial attention: `merge_attention` and `flash_decode`.

Both are compared with attention over every key at once (`partial_attention` over A ∪ B, in float64).
The inputs a learner's first answer misses are in the hand-picked cases: T_q = d_v without batch axes
(where a weight of shape (..., T_q) multiplies a (..., T_q, d_v) output along its columns without an
error), lse of 100 and more in float32 (where exp(lse) overflows), and rows that saw no key in one
part or in both. A wrong merge no named slip explains is read as a property: whether each
row is a weighted sum of out_a and out_b, whose weights sum to 1; whether the error lies only where a
part saw no key, or only where |lse| is large. A wrong flash_decode is read through its weights: with
v the identity (one value per key), its output is the weight it gives each key; weights that do not sum
to 1 are matched with the chunks' lse normalised over another axis than the chunks', and with one more
key of a fixed score and value 0 (a merge started from lse 0). One that is right on batch entry [0, 0]
alone, and raises or is wrong with batch axes, is said so, with its lines that cut a tensor along its
first axis (`_first_axis`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
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
    Returns,
    contract_cases,
    expect_contract_cases,
    expect_inputs_device,
)
from attn_course.checks._first_axis import first_axis_cuts
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    call,
    check,
    describe_args,
    expect_close,
    expect_tensor,
    is_close,
    narrow_slips,
    randn,
)
from attn_course.merging import partial_attention

_FLOATS = (torch.float32, torch.float64)
_INF = float("inf")

# ---------------------------------------------------------------------------------------------
# The contracts: what each exercise must accept and return.

MERGE_CONTRACT = Contract(
    "merge_attention",
    args=(
        Arg("out_a", ("B", "H", "T_q", "d_v"), views=VIEW_KINDS),
        Arg("lse_a", ("B", "H", "T_q"), views=VIEW_KINDS, slice_axis=-1),
        Arg("out_b", ("B", "H", "T_q", "d_v"), views=VIEW_KINDS),
        Arg("lse_b", ("B", "H", "T_q"), views=VIEW_KINDS, slice_axis=-1),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,), "a head count that is not a power of two"),
        Axis("T_q", (5, 1), "one query, as when decoding a token"),
        Axis("d_v", (6,)),
    ),
    returns=(Returns("out", ("B", "H", "T_q", "d_v")), Returns("lse", ("B", "H", "T_q"))),
    dtypes=_FLOATS,
    notes=("any lse, -inf included (that part saw no key), any out; two batch axes",),
)
"""Exercise 1 of 11: two batch axes, one query or several, each of the four inputs alone a view, float32
and float64, out and lse in the inputs' dtype on their device."""

DECODE_CONTRACT = Contract(
    "flash_decode",
    args=(
        Arg("q", ("B", "H", "T_q", "d"), views=VIEW_KINDS),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS),
        Arg("v", ("B", "H", "T_k", "d_v"), views=VIEW_KINDS),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,), "a head count that is not a power of two"),
        Axis("T_q", (1, 3), "several new queries at once"),
        Axis("T_k", (21, 16, 5), "chunk_size is 8: a ragged last chunk, two whole chunks, one short chunk"),
        Axis("d", (6,), "a head width that is not a power of two"),
        Axis("d_v", (5,)),
        Axis("C", (8, 1, 32), "chunks of one key, and one chunk longer than the cache"),
    ),
    returns=(Returns("out", ("B", "H", "T_q", "d_v")),),
    dtypes=_FLOATS,
    notes=("chunk_size = C; no mask: every query sees every key",),
)
"""Exercise 2 of 11: two batch axes, one new query or several, ragged, whole and short chunks, chunks of
one key and longer than the cache, each of q, k, v alone a view, float32 and float64."""


def _generated(contract: Contract, exercise: Exercise) -> int:
    """The contract's generated cases, then one with the inputs on another device; how many ran."""
    ran = expect_contract_cases(contract, exercise, contract_cases(contract))
    return ran + expect_inputs_device(contract, exercise)


def _pair(result: Any, expected: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
    """(out, lse) as returned (the hand-picked cases have required a pair already)."""
    return tuple(result) if isinstance(result, tuple | list) else (result,)


# ---------------------------------------------------------------------------------------------
# merge_attention: its inputs, from attention over two disjoint sets of keys


Parts = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""(out_a, lse_a, out_b, lse_b)."""


def _parts(
    batch: tuple[int, ...],
    t_q: int,
    t_k: tuple[int, int],
    d_v: int,
    dtype: torch.dtype,
    scale: tuple[float, ...] = (1.0,),
    empty_a: tuple[int, ...] = (),
    empty_both: tuple[int, ...] = (),
) -> tuple[Parts, tuple[torch.Tensor, torch.Tensor]]:
    """Attention of one set of queries over keys A and over keys B, and over A ∪ B (the answer, float64).

    `scale` multiplies q and k along the first axis (scores of magnitude about scale², lse as large); the
    query rows in `empty_a` see no key of A, those in `empty_both` no key at all.
    """
    d = 8
    by = torch.tensor(scale, dtype=torch.float64).reshape(-1, *[1] * (len(batch) + 1))  # (B or 1, 1, ..., 1)
    q = randn(*batch, t_q, d) * by
    k = randn(*batch, sum(t_k), d) * by
    v = randn(*batch, sum(t_k), d_v)
    mask = torch.ones(t_q, sum(t_k), dtype=torch.bool)  # (T_q, T_a + T_b)
    mask[list(empty_a), : t_k[0]] = False
    mask[list(empty_both), :] = False
    whole = partial_attention(q, k, v, mask=mask)  # float64: the answer
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    a = partial_attention(q, k[..., : t_k[0], :], v[..., : t_k[0], :], mask=mask[:, : t_k[0]])
    b = partial_attention(q, k[..., t_k[0] :, :], v[..., t_k[0] :, :], mask=mask[:, t_k[0] :])
    return (a[0], a[1], b[0], b[1]), (whole[0].to(dtype), whole[1].to(dtype))


_MERGE_CASES: list[tuple[str, Callable[[], tuple[Parts, tuple[torch.Tensor, torch.Tensor]]]]] = [
    ("4 queries, d_v = 4, no batch axes", lambda: _parts((), 4, (5, 7), 4, torch.float64)),
    ("B = 2, H = 3, 5 queries", lambda: _parts((2, 3), 5, (6, 3), 6, torch.float64)),
    ("one query (decoding), B = 2, H = 3", lambda: _parts((2, 3), 1, (9, 4), 5, torch.float64)),
    ("float32, B = 2", lambda: _parts((2,), 6, (8, 8), 5, torch.float32)),
    (
        "float32, B = 2, the scores of batch entry 1 of magnitude about 100 (lse up to 200: exp overflows)",
        lambda: _parts((2,), 6, (5, 5), 5, torch.float32, scale=(1.0, 10.0)),
    ),
    (
        "rows 1 and 3 see no key in A (lse_a = -inf, out_a = 0)",
        lambda: _parts((2, 2), 5, (4, 6), 5, torch.float64, empty_a=(1, 3)),
    ),
    (
        "row 2 sees no key in either part (lse_a = lse_b = -inf)",
        lambda: _parts((2, 2), 5, (4, 6), 5, torch.float64, empty_a=(0,), empty_both=(2,)),
    ),
]
"""T_q = d_v without batch axes first (a missing unsqueeze broadcasts there without an error); rows with
large lse before rows with no key (an unstabilised merge fails on both; it is named by the first)."""


def _share(lse_x: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """exp(lse_x - lse), 0 where lse is -inf."""
    return torch.exp(lse_x - torch.where(torch.isinf(lse), 0.0, lse))


def _merged_out(
    w_a: torch.Tensor, out_a: torch.Tensor, w_b: torch.Tensor, out_b: torch.Tensor
) -> torch.Tensor:
    return w_a.unsqueeze(-1) * out_a + w_b.unsqueeze(-1) * out_b  # (..., T_q, d_v)


def _averaged(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    return (out_a + out_b) / 2


def _unstabilised(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    total = torch.exp(lse_a) + torch.exp(lse_b)  # (..., T_q): inf above 88.7 in float32, 0 below -103
    return _merged_out(torch.exp(lse_a) / total, out_a, torch.exp(lse_b) / total, out_b)


def _by_max(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    lse = torch.maximum(lse_a, lse_b)
    return _merged_out(_share(lse_a, lse), out_a, _share(lse_b, lse), out_b)


def _by_sum(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    lse = lse_a + lse_b
    return _merged_out(_share(lse_a, lse), out_a, _share(lse_b, lse), out_b)


def _swapped(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    lse = torch.logaddexp(lse_a, lse_b)
    return _merged_out(_share(lse_b, lse), out_a, _share(lse_a, lse), out_b)


def _no_unsqueeze(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    lse = torch.logaddexp(lse_a, lse_b)
    return _share(lse_a, lse) * out_a + _share(lse_b, lse) * out_b  # (..., T_q) against (..., T_q, d_v)


def _unguarded(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    lse = torch.logaddexp(lse_a, lse_b)
    return _merged_out(torch.exp(lse_a - lse), out_a, torch.exp(lse_b - lse), out_b)


_NO_KEY_EITHER = (
    "gives NaN in the rows that saw no key in either part (lse_a = lse_b = -inf): there any difference of "
    "two of the lse is -inf - (-inf), which is NaN, whether in exp(lse_a - lse) with lse = -inf, in a "
    "softmax over the two stacked lse or in a sigmoid of lse_a - lse_b. Such a row must come out as 0 with "
    "lse -inf: weigh each part by exp(lse_a - lse) with a safe 0 in place of lse where it is -inf "
    "(torch.where(lse == -inf, 0.0, lse)), as notebook 06 guarded its running maximum."
)
_OVERFLOW = (
    "exponentiates the lse themselves, exp(lse_a) / (exp(lse_a) + exp(lse_b)): in float32 exp overflows "
    "to inf above 88.7 and underflows to 0 below -103, and a score of 100 is enough to give an lse there "
    "(inf / inf and 0 / 0 are NaN). Subtract first: with lse = torch.logaddexp(lse_a, lse_b), the weights "
    "are exp(lse_a - lse) and exp(lse_b - lse), never above 1."
)

_MERGE_OUT_MISTAKES = [
    Mistake(
        "averages the two outputs, (out_a + out_b) / 2: each part's out is normalised over its own keys "
        "only, so the parts count by their share of the whole row's sum of exp(score): out_a weighs "
        "exp(lse_a - lse) and out_b exp(lse_b - lse), with lse = logaddexp(lse_a, lse_b). A part with "
        "more (or larger) scores counts for more, and one with no key (lse -inf) for nothing.",
        _averaged,
    ),
    Mistake(_OVERFLOW, _unstabilised),
    Mistake(
        "takes the larger of the two lse as the merged one (torch.maximum): the log of a sum is not the "
        "largest log, and weights exp(lse_a - max) and exp(lse_b - max) do not sum to 1. The merged lse is "
        "log(exp(lse_a) + exp(lse_b)) = torch.logaddexp(lse_a, lse_b).",
        _by_max,
    ),
    Mistake(
        "adds the two lse to get the merged one: the parts' sums of exp(score) add, so their logs combine "
        "as log(exp(lse_a) + exp(lse_b)) = torch.logaddexp(lse_a, lse_b), not lse_a + lse_b (which is the "
        "log of their product).",
        _by_sum,
    ),
    Mistake(
        "weights each part's output by the other part's share: out_a must be multiplied by "
        "exp(lse_a - lse), its own share of the row's sum of exp(score), and out_b by exp(lse_b - lse).",
        _swapped,
    ),
    Mistake(
        "multiplies the weights of shape (..., T_q) with the outputs of shape (..., T_q, d_v) without a new "
        "last axis: broadcasting lines the weights up with the last axis, d_v, so column j is scaled by "
        "query j's weight (silently here, where T_q = d_v; with other sizes it raises). Give each weight "
        "an axis of its own: weight.unsqueeze(-1), or weight[..., None].",
        _no_unsqueeze,
    ),
    Mistake(_NO_KEY_EITHER, _unguarded),
]


def _lse_max(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    return torch.maximum(lse_a, lse_b)


def _lse_sum(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    return lse_a + lse_b


def _lse_unstabilised(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    return torch.log(torch.exp(lse_a) + torch.exp(lse_b))


_MERGE_LSE_MISTAKES = [
    Mistake(
        "is the larger of lse_a and lse_b: the log of a sum is more than its largest log (up to log 2 "
        "more, when the two are equal). Return torch.logaddexp(lse_a, lse_b), the log of exp(lse_a) + "
        "exp(lse_b), so that a later merge weighs this result right.",
        _lse_max,
    ),
    Mistake(
        "is lse_a + lse_b: that is the log of the product of the two sums of exp(score), not of their sum. "
        "Return torch.logaddexp(lse_a, lse_b).",
        _lse_sum,
    ),
    Mistake(
        "is log(exp(lse_a) + exp(lse_b)) computed as written: in float32 exp overflows to inf above 88.7 "
        "and underflows to 0 below -103. torch.logaddexp(lse_a, lse_b) computes the same without leaving "
        "exp's range (m + log(exp(lse_a - m) + exp(lse_b - m)) with m the larger).",
        _lse_unstabilised,
    ),
]


def _rows(mask: torch.Tensor) -> str:
    """The query rows (last axis) where `mask` (..., T_q) holds anywhere, in words."""
    rows = sorted({int(i) for i in mask.reshape(-1, mask.shape[-1]).any(dim=0).nonzero().flatten()})
    shown = ", ".join(str(r) for r in rows[:6]) + (", …" if len(rows) > 6 else "")
    return f"row {shown}" if len(rows) == 1 else f"rows {shown}"


def _where_parts(lse_a: torch.Tensor, lse_b: torch.Tensor) -> dict[str, torch.Tensor]:
    """(..., T_q) masks of the kinds of rows: one part empty, both empty, an lse far from 0."""
    empty_a, empty_b = torch.isinf(lse_a), torch.isinf(lse_b)
    large = torch.maximum(lse_a.abs().nan_to_num(posinf=0.0), lse_b.abs().nan_to_num(posinf=0.0))
    return {"one": empty_a ^ empty_b, "both": empty_a & empty_b, "large": ~(empty_a | empty_b) & (large > 80)}


def _diagnose_merge_out(parts: Parts, actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """Which property of the merged output fails: where (rows with a part empty, with a large lse), and
    whether each row is a weighted sum of out_a and out_b whose weights sum to 1."""
    out_a, lse_a, out_b, lse_b = (x.detach().double() for x in parts)
    a, e = actual.detach().double(), expected.detach().double()
    if a.shape != e.shape:
        return None
    wrong = ~torch.isclose(a, e, rtol=1e-4, atol=2e-5).all(dim=-1)  # (..., T_q)
    if not wrong.any():
        return None
    kinds = _where_parts(lse_a, lse_b)
    if (wrong <= kinds["both"]).all():
        return (
            f"is wrong only in the rows that saw no key in either part ({_rows(wrong)}: lse_a = lse_b = "
            "-inf). "
            "Such a row must come out as 0, its lse -inf: no weight may be exp(-inf - (-inf)), which is NaN; "
            "subtract a safe 0 where the merged lse is -inf."
        )
    if (wrong <= kinds["one"]).all():
        return (
            f"is wrong only in rows where one part saw no key ({_rows(wrong)}: its lse is -inf and its out "
            "0). "
            "Such a part adds nothing, weight exp(-inf - lse) = 0, and the other part's out comes through "
            "unchanged, with the other's lse as the merged one."
        )
    if (wrong <= kinds["large"]).all():
        return (
            f"is wrong only in the rows whose lse is large ({_rows(wrong)}, |lse| above 80 here; the rows "
            "with "
            "smaller lse are right): an error that grows with |lse| is exp of an lse leaving float32's "
            "range (inf "
            "above 88.7, 0 below -103). Subtract the merged lse before exp: exp(lse_a - lse), exp(lse_b - "
            "lse)."
        )
    return _combination(out_a, out_b, a, lse_a, lse_b, wrong)


def _combination(
    out_a: torch.Tensor,
    out_b: torch.Tensor,
    actual: torch.Tensor,
    lse_a: torch.Tensor,
    lse_b: torch.Tensor,
    wrong: torch.Tensor,
) -> str | None:
    """Whether each wrong row is w_a·out_a + w_b·out_b (least squares over d_v), and with what weights."""
    if out_a.shape[-1] < 3 or not torch.isfinite(actual).all():
        return None
    basis = torch.stack([out_a, out_b], dim=-1)  # (..., T_q, d_v, 2)
    weights = torch.linalg.lstsq(basis, actual.unsqueeze(-1)).solution  # (..., T_q, 2, 1)
    fitted = (basis @ weights).squeeze(-1)  # (..., T_q, d_v)
    spread = actual.abs().amax(dim=-1) + 1e-12  # (..., T_q)
    linear = ((fitted - actual).abs().amax(dim=-1) <= 1e-4 * spread + 1e-6) & wrong  # (..., T_q)
    if not (linear == wrong).all():
        return (
            f"is not a weighted sum of out_a and out_b in {_rows(wrong & ~linear)}: each row of the merged "
            "output "
            "must be w_a·out_a + w_b·out_b, one weight per row and part, the same for every column. (A "
            "weight "
            "of shape (..., T_q) needs a last axis, .unsqueeze(-1), to multiply a (..., T_q, d_v) output row "
            "by row.)"
        )
    total = weights.squeeze(-1).sum(dim=-1)  # (..., T_q)
    off = wrong & ((total - 1).abs() > 1e-4)
    if off.any():
        return (
            f"is a weighted sum of out_a and out_b in every row, but in {_rows(off)} the two weights do "
            "not sum "
            f"to 1 (they sum to {float(total[off].min()):.4g} to {float(total[off].max()):.4g}): attention "
            "over "
            "A ∪ B is a convex combination of the two parts' outputs. With lse = logaddexp(lse_a, lse_b), "
            "exp(lse_a - lse) + exp(lse_b - lse) = 1."
        )
    w_a = weights[..., 0, 0][wrong]
    right = torch.exp(lse_a - torch.logaddexp(lse_a, lse_b))[wrong]
    return (
        f"is a convex combination of out_a and out_b in every row, but with the wrong weights in "
        f"{_rows(wrong)}: where out_a should count exp(lse_a - lse) = {float(right[0]):.4g}, yours gives it "
        f"{float(w_a[0]):.4g}. Each part counts by its share of the row's sum of exp(score), lse = "
        "logaddexp(lse_a, lse_b)."
    )


def _diagnose_merge_lse(parts: Parts, actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """Which property of the merged lse fails: -inf kept where both parts are empty; between max and
    max + log 2."""
    _, lse_a, _, lse_b = (x.detach().double() for x in parts)
    a, e = actual.detach().double(), expected.detach().double()
    if a.shape != e.shape:
        return None
    wrong = ~(torch.isclose(a, e, rtol=1e-4, atol=2e-5) | (torch.isinf(a) & (a == e)))
    kinds = _where_parts(lse_a, lse_b)
    if wrong.any() and (wrong <= kinds["both"]).all():
        return (
            f"is wrong only in the rows that saw no key in either part ({_rows(wrong)}): there it must stay "
            "-inf, the log of an empty sum, as logaddexp(-inf, -inf) is."
        )
    top = torch.maximum(lse_a, lse_b)
    finite = torch.isfinite(top) & torch.isfinite(a)
    outside = finite & ((a < top - 1e-4) | (a > top + math.log(2) + 1e-4))
    if outside.any():
        return (
            f"is not the log of the two parts' summed exp-scores in {_rows(outside)}: log(exp(lse_a) + "
            "exp(lse_b)) lies between max(lse_a, lse_b) and that max + log 2. Use torch.logaddexp(lse_a, "
            "lse_b)."
        )
    return None


def _merge_result(
    result: Any, out: torch.Tensor, lse: torch.Tensor, what: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Require the pair (out, lse); name one tensor alone and the pair swapped."""
    if isinstance(result, torch.Tensor):
        raise CheckFailed(
            f"{what} returned one tensor of shape {tuple(result.shape)}: return the pair (out, lse). The "
            "merged "
            "lse is what the next merge needs: flash-decoding merges many chunks, ring attention one block "
            "after another, each merge reading the lse of the one before."
        )
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise CheckFailed(f"{what} should return the pair (out, lse), but returned {type(result).__name__}.")
    got_out, got_lse = result
    if (
        isinstance(got_out, torch.Tensor)
        and isinstance(got_lse, torch.Tensor)
        and got_out.shape == lse.shape
        and got_lse.shape == out.shape
    ):
        raise CheckFailed(f"{what} returned (lse, out): return them in the order (out, lse).")
    return got_out, got_lse


def _merge_slips(
    candidate: Callable[..., Any],
    made: list[tuple[str, Parts, tuple[torch.Tensor, torch.Tensor]]],
    mistakes: list[Mistake],
    index: int,
) -> list[tuple[list[Mistake], torch.Tensor, Callable[[], Any]]]:
    """Every case as `narrow_slips` reads it: its slips bound to its inputs, the answer (out or lse, by
    `index`), and the learner's."""
    return [
        (
            [Mistake(m.message, functools.partial(m.implementation, *parts)) for m in mistakes],
            expected[index],
            functools.partial(_part_of, candidate, parts, index),
        )
        for _, parts, expected in made
    ]


def _part_of(candidate: Callable[..., Any], parts: Parts, index: int) -> Any:
    with torch.no_grad():
        return candidate(*(x.clone() for x in parts))[index]


@check
def check_merge_attention(candidate: Callable[..., Any]) -> str:
    """Against attention over A ∪ B, on rows with large lse, with no key in one part and in both."""
    made = [(words, *make()) for words, make in _MERGE_CASES]
    for words, parts, (out, lse) in made:
        result = call("merge_attention", candidate, *parts)
        shapes = ", ".join(
            f"{n} {tuple(x.shape)}" for n, x in zip(("out_a", "lse_a", "out_b", "lse_b"), parts, strict=True)
        )
        what = f"Your merge_attention({shapes}; {words})"
        got_out, got_lse = _merge_result(result, out, lse, what)
        hints = {tuple(out.shape[:-1]): "That is one number per row: the output keeps its d_v columns."}
        got_out = expect_tensor(
            got_out, out.shape, f"{what}[0], the output,", device=out.device, finite=False, hints=hints
        )
        try:
            expect_close(
                got_out,
                out,
                f"{what}[0], the output,",
                mistakes=_MERGE_OUT_MISTAKES,
                args=parts,
                called_as="",
                diagnose=functools.partial(_diagnose_merge_out, parts),
                nonfinite_hint={"sub": _NO_KEY_EITHER.removeprefix("gives "), "": ""},
            )
        except (
            CheckFailed
        ) as failure:  # slips that give the same result here: keep those every case agrees with
            raise narrow_slips(failure, _merge_slips(candidate, made, _MERGE_OUT_MISTAKES, 0)) from None
        lse_hints = {(*lse.shape, 1): "Drop the last axis: one lse per row, shape (..., T_q)."}
        got_lse = expect_tensor(
            got_lse, lse.shape, f"{what}[1], the lse,", device=out.device, finite=False, hints=lse_hints
        )
        try:
            expect_close(
                got_lse,
                lse,
                f"{what}[1], the merged lse,",
                mistakes=_MERGE_LSE_MISTAKES,
                args=parts,
                called_as="",
                diagnose=functools.partial(_diagnose_merge_lse, parts),
            )
        except CheckFailed as failure:
            raise narrow_slips(failure, _merge_slips(candidate, made, _MERGE_LSE_MISTAKES, 1)) from None
    exercise = Exercise("merge_attention", lambda case: (candidate, reference.merge_attention), unpack=_pair)
    generated = _generated(MERGE_CONTRACT, exercise)
    return (
        f"{len(_MERGE_CASES)} cases against attention over both parts at once (batch axes, one query, "
        "float32 lse up to 200, rows with no key in one part and in both), out and lse; "
        f"{generated} more from the exercise's contract (each input alone a view, float32 and float64, "
        "on another device)"
    )


# ---------------------------------------------------------------------------------------------
# flash_decode


_DECODE_CASES = [  # (q shape, T_k, d_v, chunk_size, dtype, scale)
    ((2, 3, 1, 8), 37, 5, 8, torch.float64, 1.0),
    ((2, 3, 4, 8), 32, 5, 8, torch.float64, 1.0),
    ((1, 8), 20, 4, 64, torch.float64, 1.0),
    ((2, 1, 8), 9, 4, 1, torch.float64, 1.0),
    ((2, 2, 2, 1, 8), 50, 6, 16, torch.float64, 1.0),
    ((2, 2, 3, 8), 29, 5, 8, torch.float32, 10.0),
]
"""A ragged last chunk (37 = 4·8 + 5) for one new query, whole chunks for four, one chunk longer than the
cache, chunks of one key, three batch axes, and float32 scores of magnitude about 100."""


def _chunks(
    k: torch.Tensor, v: torch.Tensor, starts: range, size: int, skip: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(k[..., s + skip : s + size, :], v[..., s + skip : s + size, :]) for s in starts]


def _merge_all(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    outs = torch.stack([o for o, _ in parts])  # (n, ..., T_q, d_v)
    lses = torch.stack([lse for _, lse in parts])  # (n, ..., T_q)
    return (torch.softmax(lses, dim=0).unsqueeze(-1) * outs).sum(dim=0)  # (..., T_q, d_v)


def _decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    chunk_size: int,
    *,
    drop_ragged: bool = False,
    overlap: int = 0,
    skip: int = 0,
    twice: bool = False,
) -> torch.Tensor:
    """flash_decode with one slip: the ragged last chunk dropped, chunks overlapping or skipping keys,
    q scaled by 1/√d before a partial attention that scales again (`twice`)."""
    q_scale = 1 / math.sqrt(q.shape[-1]) if twice else 1.0
    t_k = k.shape[-2]
    end = t_k - t_k % chunk_size if drop_ragged and t_k >= chunk_size else t_k
    pieces = _chunks(k, v, range(0, end, chunk_size), chunk_size + overlap, skip)
    return _merge_all([partial_attention(q * q_scale, kc, vc) for kc, vc in pieces if kc.shape[-2] > 0])


def _chunk_average(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int) -> torch.Tensor:
    pieces = _chunks(k, v, range(0, k.shape[-2], chunk_size), chunk_size)
    return torch.stack([partial_attention(q, kc, vc)[0] for kc, vc in pieces]).mean(dim=0)  # (..., T_q, d_v)


def _stale_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int) -> torch.Tensor:
    pieces = _chunks(k, v, range(0, k.shape[-2], chunk_size), chunk_size)
    out, lse = partial_attention(q, *pieces[0])
    for kc, vc in pieces[1:]:
        out, _ = reference.merge_attention(out, lse, *partial_attention(q, kc, vc))
    return out


def _unstabilised_chunks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int) -> torch.Tensor:
    parts = [
        partial_attention(q, kc, vc)
        for kc, vc in _chunks(k, v, range(0, k.shape[-2], chunk_size), chunk_size)
    ]
    outs = torch.stack([o for o, _ in parts])  # (n, ..., T_q, d_v)
    exps = torch.exp(torch.stack([lse for _, lse in parts]))  # (n, ..., T_q): inf for an lse above 88.7
    return ((exps / exps.sum(dim=0)).unsqueeze(-1) * outs).sum(dim=0)  # (..., T_q, d_v)


_DECODE_MISTAKES = [
    Mistake(
        "drops the last, shorter chunk when chunk_size does not divide T_k (range(T_k // chunk_size) chunks, "
        "or a range that stops at T_k - chunk_size): its keys are never seen. Loop with range(0, T_k, "
        "chunk_size); the last slice k[..., start : start + chunk_size, :] is simply shorter.",
        functools.partial(_decode, drop_ragged=True),
    ),
    Mistake(
        "averages the chunks' outputs: each chunk's out is normalised over its own keys only, so chunk c "
        "counts by its share of the row's whole sum of exp(score), exp(lse_c - lse) with lse the logsumexp "
        "of every chunk's lse; merge them as merge_attention does.",
        _chunk_average,
    ),
    Mistake(
        "lets neighbouring chunks overlap: each chunk takes one key past its end (start : start + chunk_size "
        "+ 1), so the key at each chunk's edge is attended twice. A chunk is k[..., start : start + "
        "chunk_size, :], and the next starts where it ends.",
        functools.partial(_decode, overlap=1),
    ),
    Mistake(
        "skips a key at each chunk's edge (the last, start : start + chunk_size - 1): those keys get no "
        "weight. A chunk is k[..., start : start + chunk_size, :], and the next starts where it ends.",
        functools.partial(_decode, overlap=-1),
    ),
    Mistake(
        "skips a key at each chunk's edge (the first, start + 1 : start + chunk_size): those keys get no "
        "weight. A chunk is k[..., start : start + chunk_size, :], and the next starts where it ends.",
        functools.partial(_decode, skip=1),
    ),
    Mistake(
        "scales the scores twice: partial_attention already divides q·k by √d, so q divided by √d "
        "before it gives scores / d. Pass q as it is.",
        functools.partial(_decode, twice=True),
    ),
    Mistake(
        "merges the chunks one after another but keeps the first chunk's lse: after each merge the running "
        "lse must become the merged one (out, lse = merge_attention(out, lse, out_c, lse_c)), or every later "
        "chunk is weighed against the first chunk alone.",
        _stale_lse,
    ),
    Mistake(
        "weighs the chunks by exp(lse_c) / sum of exp(lse_c): in float32 exp overflows to inf above 88.7 "
        "(and underflows to 0 below -103), and scores of 100 give an lse there (inf / inf is NaN). Subtract "
        "the merged lse first, exp(lse_c - lse) with lse = torch.logsumexp of the stacked lse (or merge "
        "with your merge_attention).",
        _unstabilised_chunks,
    ),
]


def _shape(x: torch.Tensor | tuple[int, ...]) -> str:
    return str(tuple(x.shape if isinstance(x, torch.Tensor) else x))


def _alone(
    candidate: Callable[..., Any], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int
) -> tuple[str, str] | None:
    """("works without batch axes and fails with them: ...", what the learner's lines cut along a
    tensor's first axis) where their flash_decode is right on batch entry [0, ..., 0] alone; else None."""
    if q.dim() <= 2:
        return None
    entry = (0,) * (q.dim() - 2)
    q1, k1, v1 = (x[entry].clone() for x in (q, k, v))  # (T_q, d), (T_k, d), (T_k, d_v)
    try:
        with torch.no_grad():
            got = candidate(q1, k1, v1, chunk_size)
    except Exception:  # noqa: BLE001 - wrong without batch axes too: nothing to say here
        return None
    right = partial_attention(q1.double(), k1.double(), v1.double())[0]  # (T_q, d_v)
    if not isinstance(got, torch.Tensor) or not is_close(got, right.to(got.dtype)):
        return None
    alone = (
        f"works without batch axes and fails with them: on batch entry {list(entry)} alone (q "
        f"{_shape(q1)}, k {_shape(k1)}, v {_shape(v1)}, chunk_size={chunk_size}) it is right"
    )
    cuts = first_axis_cuts(lambda: candidate(q, k, v, chunk_size), [q.shape, k.shape, v.shape])
    lines: dict[tuple[int, str, str], list[str]] = {}  # (line, code, how) -> what it cuts
    for cut in cuts:
        names = " or ".join(n for n, x in (("q", q), ("k", k), ("v", v)) if tuple(x.shape) == cut.shape)
        lines.setdefault((cut.lineno, cut.code, cut.how), []).append(f"{names} {_shape(cut.shape)}")
    said = []
    for (lineno, code, how), what in list(lines.items())[:2]:
        line = f"Line {lineno} of your code, `{code}`," if code else f"Line {lineno} of your code"
        its = "its" if len(what) == 1 else "each one's"
        said.append(
            f"{line} {how} {' and '.join(what)} along {its} first axis: without batch axes that axis "
            f"is the {'queries' if what[0].startswith('q ') else 'keys'}, with them it is a batch axis "
            f"(here of size {q.shape[0]})."
        )
    if said:
        said.append(
            "Cut the key axis, second from the right, whatever axes come before it: k[..., start : start "
            "+ chunk_size, :] and v[..., start : start + chunk_size, :] (or .split(chunk_size, dim=-2))."
        )
    return alone, " ".join(said)


def _without_batch_axes(
    candidate: Callable[..., Any], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int
) -> str | None:
    """The reading of a wrong result that is right without batch axes, or None."""
    found = _alone(candidate, q, k, v, chunk_size)
    if found is None:
        return None
    alone, cuts = found
    return f"{alone}, but not with them.{' ' + cuts if cuts else ''}"


def _raised_with_batch_axes(
    failure: CheckFailed,
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    chunk_size: int,
) -> CheckFailed:
    """The failure of a call that raised, said again as working without batch axes where it does."""
    found = _alone(candidate, q, k, v, chunk_size)
    if found is None:
        return failure
    alone, cuts = found
    raised = str(failure).split("\n", 1)[0].removeprefix("`flash_decode` ")
    cuts = re.sub(  # the line the error quotes already: not quoted twice
        r"Line (\d+) of your code, `[^`]*`,",
        lambda m: "That line" if f"at line {m[1]} of your code" in raised else m[0],
        cuts,
    )
    return CheckFailed(
        f"Your flash_decode {alone}, but with them, on q {_shape(q)}, k {_shape(k)}, v {_shape(v)}, it "
        f"{raised}" + (f"\n{cuts}" if cuts else "")
    )


def _weights(
    candidate: Callable[..., Any], q: torch.Tensor, k: torch.Tensor, chunk_size: int
) -> torch.Tensor | None:
    """The weight the learner's flash_decode gives each key (..., T_q, T_k), float64: its output with v
    the identity (value j one-hot j); None where it raises or gives no finite tensor of that shape."""
    t_k = k.shape[-2]
    eye = torch.eye(t_k, dtype=k.dtype).expand(*k.shape[:-1], t_k)  # (..., T_k, T_k): value j is one-hot j
    try:
        with torch.no_grad():
            got = candidate(q, k, eye, chunk_size)
    except Exception:  # noqa: BLE001 - no reading then
        return None
    if (
        not isinstance(got, torch.Tensor)
        or got.shape != (*q.shape[:-1], t_k)
        or not torch.isfinite(got).all()
    ):
        return None
    return got.double()


def _true_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Attention's weights over every key (..., T_q, T_k), float64."""
    eye = torch.eye(k.shape[-2], dtype=torch.float64).expand(*k.shape[:-1], k.shape[-2])  # (..., T_k, T_k)
    return partial_attention(q.double(), k.double(), eye)[0]


def _normalised_over(q: torch.Tensor, k: torch.Tensor, chunk_size: int, got: torch.Tensor) -> list[int]:
    """The axes a >= 1 of the chunks' stacked lse (n, ..., T_q) for which the learner's weights are the
    chunks' weights exp(lse_c - logsumexp over a), each chunk's keys weighed right among themselves."""
    qd, kd = q.double(), k.double()
    starts = range(0, k.shape[-2], chunk_size)
    if len(starts) < 2:
        return []
    parts = []
    for s in starts:
        size = min(chunk_size, k.shape[-2] - s)
        eye = torch.eye(size, dtype=torch.float64).expand(*k.shape[:-2], size, size)  # (..., C, C)
        parts.append(partial_attention(qd, kd[..., s : s + size, :], eye))  # (..., T_q, C), (..., T_q)
    lses = torch.stack([lse for _, lse in parts])  # (n, ..., T_q)
    found = []
    for axis in range(1, lses.dim()):
        w = torch.softmax(lses, dim=axis)  # (n, ..., T_q): the chunks' weights so normalised
        each = [w[c].unsqueeze(-1) * p for c, (p, _) in enumerate(parts)]  # n × (..., T_q, C)
        mixed = torch.cat(each, dim=-1)  # (..., T_q, T_k)
        if is_close(got.to(q.dtype), mixed.to(q.dtype)):
            found.append(axis)
    return found


def _other_axis(
    candidate: Callable[..., Any], q: torch.Tensor, k: torch.Tensor, chunk_size: int, got: torch.Tensor
) -> str | None:
    """Weights that are the chunks' lse normalised over another axis than the chunks', said by that axis:
    read on a probe whose axes all differ in size (B = 2, H = 3, T_q = 4, 5 chunks), then confirmed on
    the failing case (where T_q = 1 would not tell the query axis from no normalisation at all)."""
    probe_q, probe_k = randn(2, 3, 4, 8), randn(2, 3, 37, 8)
    probe = _weights(candidate, probe_q, probe_k, 8)
    if probe is None:
        return None
    axes = _normalised_over(probe_q, probe_k, 8, probe)
    if len(axes) != 1:
        return None
    here = _normalised_over(q, k, chunk_size, got)
    batch = q.dim() - 2
    if axes[0] == 3:  # the probe's query axis
        if batch + 1 not in here:
            return None
        named = "the query axis (T_q)"
        over = "over the queries"
    else:
        index = axes[0] - 1  # the probe's batch axis 0 or 1, from the left or (2 - 1 - index) from the right
        if not ({index + 1, batch - (2 - index) + 1} & set(here)):
            return None
        named = f"batch axis {index} (q's dim {index})"
        over = f"over batch axis {index}"
    return (
        f"each chunk c counts exp(lse_c - lse) with lse the log-sum-exp of the chunks' lse taken over "
        f"{named}, not over the chunks' axis. Read with q {_shape(probe_q)} and k {_shape(probe_k)} "
        "(chunk_size=8, 5 chunks), your weights are exactly that: each chunk's weights sum to 1 "
        f"{over}, not over the chunks. Take the log-sum-exp over the axis that holds the chunks (dim=0 "
        "of torch.stack(lses)); the weights exp(lse_c - lse) then sum to 1 over the chunks in every row."
    )


def _extra_key(q: torch.Tensor, k: torch.Tensor, got: torch.Tensor, right: torch.Tensor) -> str | None:
    """Weights that are the right ones times S / (S + e^c) in every row (S the row's sum of exp(score),
    one c for all rows): attention with one more key of exp(score) e^c and value 0, said by c."""
    lse = partial_attention(q.double(), k.double(), k.double())[1]  # (..., T_q): log S of each row
    seen = right > 1e-12
    ratio = torch.where(seen, got / right.clamp_min(1e-300), torch.nan)  # (..., T_q, T_k)
    high, low = ratio.nan_to_num(-_INF).amax(dim=-1), ratio.nan_to_num(_INF).amin(dim=-1)  # (..., T_q)
    tol = 1e-7 if q.dtype == torch.float64 else 1e-4
    if not ((high - low <= tol * high.abs()) & (high < 1 - tol) & (high > tol)).all():
        return None
    f = high  # (..., T_q): each row's factor, S / (S + e^c)
    c = float((lse + torch.log((1 - f) / f)).flatten().median())
    if not torch.allclose(f, torch.sigmoid(lse - c), rtol=0, atol=10 * tol):
        return None
    if abs(c) < 1e-3:
        extra, start = "of score 0 (exp(score) = 1)", "lse 0"
    else:
        extra, start = f"of exp(score) = {math.exp(c):.4g}", f"lse {c:.4g}"
    return (
        f"each is the right weight times S / (S + {math.exp(c):.4g}), S the row's sum of exp(score): the "
        f"weights of attention over one more key, {extra} and value 0. A merge that starts from (or "
        f"takes in) a part of out 0 and {start} gives exactly that: {start} counts as a part whose sum of "
        f"exp(score) is {math.exp(c):.4g}, its value 0. Start from lse -inf (a part with no key: "
        "exp(-inf) = 0), or from the first chunk's (out, lse)."
    )


def _diagnose_decode(
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    chunk_size: int,
    actual: torch.Tensor,
    expected: torch.Tensor,
) -> str | None:
    """Whether it is right without batch axes; else the weights the learner's flash_decode gives each key,
    read with v the identity (one value per key): rows whose weights do not sum to 1 (the chunks' lse
    normalised over another axis, one more key of a fixed score and value 0), keys with no weight,
    chunks mixed in the wrong proportions."""
    batched = _without_batch_axes(candidate, q, k, v, chunk_size)
    if batched:
        return batched
    t_k = k.shape[-2]
    got = _weights(candidate, q, k, chunk_size)
    if got is None:
        return None
    right = _true_weights(q, k)  # (..., T_q, T_k)
    where = (
        "(with v the identity, one value per key, your output is the weight each key gets; "
        f"chunk_size={chunk_size})"
    )
    totals = got.sum(dim=-1)  # (..., T_q)
    if ((totals - 1).abs() > 1e-4).any():
        low, high = float(totals.min()), float(totals.max())
        sums = f"{low:.4g}" if high - low < 1e-4 else f"{low:.4g} to {high:.4g}"
        reading = (
            _other_axis(candidate, q, k, chunk_size, got)
            or _extra_key(q, k, got, right)
            or "every row of attention is a weighted average of the values."
        )
        return f"gives weights over the keys that do not sum to 1 (they sum to {sums}) {where}: {reading}"
    flat_got, flat_right = got.reshape(-1, t_k), right.reshape(-1, t_k)
    unseen = ((flat_got.abs() < 1e-9) & (flat_right > 1e-9)).any(dim=0).nonzero().flatten().tolist()
    if unseen:
        keys = ("keys " if len(unseen) > 1 else "key ") + ", ".join(str(j) for j in unseen[:8])
        keys += ", …" if len(unseen) > 8 else ""
        return (
            f"gives no weight to {keys} of {t_k} {where}: every key of the cache lies in exactly one chunk, "
            "chunks k[..., start : start + chunk_size, :] for start in range(0, T_k, chunk_size)."
        )
    ratio = flat_got / flat_right  # (rows, T_k)
    starts = range(0, t_k, chunk_size)
    within = all(
        bool(
            (
                ratio[:, s : s + chunk_size].amax(dim=-1) - ratio[:, s : s + chunk_size].amin(dim=-1)
                < 1e-4 * ratio[:, s : s + chunk_size].amax(dim=-1)
            ).all()
        )
        for s in starts
    )
    if within and len(starts) > 1:
        return (
            f"weighs the keys of each chunk right relative to one another, but mixes the chunks in the wrong "
            f"proportions {where}: chunk c must count exp(lse_c - lse), its share of the whole row's sum of "
            "exp(score), with lse the log-sum-exp over every chunk."
        )
    return None


class _Scores(TorchFunctionMode):
    """Notes the first product of the queries with all T_k keys at once (its shape), if any."""

    def __init__(self, t_q: int, t_k: int) -> None:
        super().__init__()
        self.t_q, self.t_k = t_q, t_k
        self.whole: tuple[int, ...] | None = None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name == "scaled_dot_product_attention":  # its scores stay inside: read the keys it was given
            key = args[1] if len(args) > 1 else (kwargs or {}).get("key")
            if isinstance(key, torch.Tensor) and key.shape[-2] == self.t_k:
                self.whole = self.whole or (*key.shape[:-2], self.t_q, self.t_k)
        if name in ("matmul", "__matmul__", "einsum", "bmm", "baddbmm"):
            if (
                isinstance(out, torch.Tensor)
                and out.dim() >= 2
                and tuple(out.shape[-2:]) == (self.t_q, self.t_k)
            ):
                self.whole = self.whole or tuple(out.shape)
        return out


def _expect_chunked(candidate: Callable[..., Any]) -> None:
    """Refuse an answer that multiplies the queries with all T_k keys at once: the numbers are right, but
    nothing is split (a GPU would run B·H programs, each over the whole cache)."""
    q, k, v = randn(2, 3, 3, 6), randn(2, 3, 40, 6), randn(2, 3, 40, 5)
    mode = _Scores(3, 40)
    with torch.no_grad(), mode:
        call("flash_decode", candidate, q, k, v, 8)
    if mode.whole is not None:
        raise CheckFailed(
            "Your flash_decode(q (2, 3, 3, 6), k (2, 3, 40, 6), v (2, 3, 40, 5), chunk_size=8) gives the "
            "right "
            f"numbers, but it computes the scores of every query against all 40 keys at once (a tensor of "
            f"shape {mode.whole}): attend each chunk of 8 keys on its own (partial_attention on k[..., "
            "start : "
            "start + chunk_size, :]) and merge the chunks' results, as the GPU programs of flash-decoding do."
        )


@check
def check_flash_decode(candidate: Callable[..., Any]) -> str:
    """Against attention over the whole cache: ragged, whole and single-key chunks, large float32 scores."""
    for q_shape, t_k, d_v, chunk_size, dtype, scale in _DECODE_CASES:
        q = randn(*q_shape, scale=scale)
        k = randn(*q_shape[:-2], t_k, q_shape[-1], scale=scale)
        v = randn(*q_shape[:-2], t_k, d_v)
        expected = partial_attention(q, k, v)[0].to(dtype)  # (..., T_q, d_v), float64 then cast
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        try:
            result = call("flash_decode", candidate, q, k, v, chunk_size)
        except CheckFailed as failure:
            raise _raised_with_batch_axes(failure, candidate, q, k, v, chunk_size) from None
        what = (
            f"Your flash_decode(q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
            f"chunk_size={chunk_size}"
            + (", float32, scores of magnitude about 100)" if dtype == torch.float32 else ")")
        )
        if isinstance(result, tuple | list):
            raise CheckFailed(
                f"{what} returned a {type(result).__name__} of {len(result)} items: return only the output "
                f"(..., T_q, d_v), shape {tuple(expected.shape)}."
            )
        n_full = (t_k // chunk_size) * chunk_size
        hints = {(*q.shape[:-2], n_full, d_v): "That is one row per key, not per query."} if n_full else {}
        out = expect_tensor(result, expected.shape, what, device=q.device, finite=False, hints=hints)
        expect_close(
            out,
            expected,
            what,
            mistakes=_DECODE_MISTAKES,
            args=(q, k, v, chunk_size),
            called_as=describe_args((q, k, v, chunk_size), {}),
            diagnose=functools.partial(_diagnose_decode, candidate, q, k, v, chunk_size),
        )
    _expect_chunked(candidate)
    exercise = Exercise(
        "flash_decode",
        lambda case: (candidate, reference.flash_decode),
        after=lambda case: (case.size["C"],),
    )
    generated = _generated(DECODE_CONTRACT, exercise)
    return (
        f"{len(_DECODE_CASES)} caches against attention over every key (a ragged last chunk, chunks of 1 and "
        f"longer than the cache, three batch axes, float32 scores near 100), each chunk attended on its own; "
        f"{generated} more from the exercise's contract (q, k or v a view, float32 and float64, on another "
        "device)"
    )
