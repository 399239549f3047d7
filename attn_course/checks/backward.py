"""Checks for notebook 09: softmax's and attention's gradients, FlashAttention's backward and its Function.

Gradients are compared with autograd through the course's `attention` in float64. When they
differ, the check first tries the known mistakes, each simulated by `_tiled_backward` (a tiled
backward with one slip) on the same inputs; when none matches, it says which of dq, dk and dv is
wrong and where: only in rows whose tile crosses the causal diagonal, only in the ragged last
block, in some blocks, or everywhere. `check_flash_attention_backward` also watches every tensor
the candidate creates, as notebook 06's check does, and `check_FlashAttentionFunction` every
tensor the forward saves for the backward.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

from attn_course import flash, reference
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
from attn_course.checks._diagnosis import Failure, fail
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    call,
    check,
    cuda_device,
    describe_error,
    difference,
    expect_tensor,
    is_close,
    is_learners,
    learner_raised,
    randn,
)
from attn_course.checks._memo import remembered
from attn_course.checks.flash import _FUSED, _OpRecorder

Grads = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""(q, k, v, grad_out) of a backward case."""
NAMES = ("dq", "dk", "dv")

# ---------------------------------------------------------------------------------------------
# What a backward with one mistake computes


@dataclass(frozen=True)
class BackwardVariant:
    """How one tiled backward is written: the right one with the defaults, each other value a named slip.

    `_tiled_backward` computes what a variant gives; the slip tables below pair each with its message.
    """

    delta: str = "out"
    """D: "out" (rowsum(dO ∘ O), right), "none" (dS = P ∘ dP), "tile" (rowsum(dP ∘ P) of this tile only),
    "dp" (rowsum(dP), without P), "over-queries" (dP ∘ P summed over the queries)."""
    probs: str = "lse"
    """P: "lse" (exp(S - lse), right), "tile-max" (exp(S - the tile's row max)), "tile-softmax" (a softmax
    within each tile), "raw" (exp(S))."""
    lse_rows: str = "query"
    """Whose lse a tile subtracts: "query" (right) or "key" (the key block's rows)."""
    scale_q: str = "once"
    """The 1/√d of dQ: "once" (right), "none" or "twice"."""
    scale_k: str = "once"
    """The 1/√d of dK: "once" (right), "none" or "twice"."""
    mask: str = "right"
    """The causal mask: "right", "none" (not in the recomputation, every block visited), "blocks-only"
    (blocks above the diagonal skipped, none masked inside), "top-left" (j <= i), "top-left-all" (j <= i
    in the forward too), "ignored" (no mask in the forward either)."""
    accumulate_q: bool = True
    """False: each key block's dQ replaces the earlier ones'."""
    accumulate_kv: bool = True
    """False: each query block's dK and dV replace the earlier ones'."""
    transpose_ds: bool = False
    """True: dS transposed the wrong way round."""
    transpose_p: bool = True
    """False: dV = P dO."""
    tail: bool = True
    """False: the ragged last key block dropped."""
    recompute_scale: bool = True
    """False: the scores recomputed without 1/√d."""
    skip_offset: bool = True
    """False: key blocks skipped after the query block's last row without T_k - T_q."""
    sm_scale: float | None = None
    """The scale a wrapper gives the kernels for S, dQ and dK (1/√d when None)."""
    lse_factor: float = 1.0
    """A factor a wrapper puts on the lse it hands the kernels."""
    do_for_kv: str = "grad_out"
    """What the dK/dV pass reads as dO: "grad_out" (right) or "out"."""

    @property
    def transposes(self) -> bool:
        """Whether a tile is transposed the wrong way (a slip that runs only where tiles are square)."""
        return self.transpose_ds or not self.transpose_p


_RIGHT = BackwardVariant()


@remembered
def _tiled_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool,
    block_m: int,
    block_n: int,
    variant: BackwardVariant = _RIGHT,
) -> Grads:
    """(dq, dk, dv) of a tiled backward (key blocks outside, query blocks inside) written as `variant`.

    With one block each way it is the naive backward.
    """
    delta, probs, lse_rows, mask = variant.delta, variant.probs, variant.lse_rows, variant.mask
    accumulate_q, accumulate_kv, tail = variant.accumulate_q, variant.accumulate_kv, variant.tail
    transpose_ds, transpose_p, do_for_kv = variant.transpose_ds, variant.transpose_p, variant.do_for_kv
    recompute_scale, skip_offset = variant.recompute_scale, variant.skip_offset
    sm_scale, lse_factor = variant.sm_scale, variant.lse_factor
    factors = {"once": 1.0, "none": math.sqrt(q.shape[-1]), "twice": 1 / math.sqrt(q.shape[-1])}
    scale_q, scale_k = factors[variant.scale_q], factors[variant.scale_k]
    q, k, v, grad_out = (x.detach().to("cpu", torch.float64) for x in (q, k, v, grad_out))
    is_causal = is_causal and mask != "ignored"
    t_q, d = q.shape[-2:]
    t_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d)
    offset = 0 if mask in ("top-left", "top-left-all") else t_k - t_q
    scores = q @ k.transpose(-1, -2) * scale  # (..., T_q, T_k): the forward's, for out and lse
    if is_causal:
        forward_offset = offset if mask == "top-left-all" else t_k - t_q
        keep = torch.ones(t_q, t_k, dtype=torch.bool).tril(forward_offset)  # (T_q, T_k)
        scores = scores.masked_fill(~keep, -math.inf)
    lse = scores.logsumexp(dim=-1)  # (..., T_q)
    out = torch.softmax(scores, dim=-1) @ v  # (..., T_q, d_v)
    lse = lse.unsqueeze(-1) * lse_factor  # (..., T_q, 1)
    scale = scale if sm_scale is None else sm_scale  # the scale the kernels are given
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    stop = t_k if tail else t_k - t_k % block_n
    for ks in range(0, stop, block_n):
        ke = min(ks + block_n, t_k)
        k_blk, v_blk = k[..., ks:ke, :], v[..., ks:ke, :]  # (..., Bk, d), (..., Bk, d_v)
        for qs in range(0, t_q, block_m):
            qe = min(qs + block_m, t_q)
            causal = is_causal and mask != "none"
            if causal and ks > qe - 1 + (offset if skip_offset else 0):
                continue  # every key of the block lies after every query of the block
            q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq, d), (..., Bq, d_v)
            s = q_blk @ k_blk.transpose(-1, -2) * (scale if recompute_scale else 1.0)  # (..., Bq, Bk)
            if causal and mask != "blocks-only":
                rows = torch.arange(qs, qe)[:, None] + offset  # (Bq, 1)
                s = s.masked_fill(torch.arange(ks, ke)[None, :] > rows, -math.inf)  # (..., Bq, Bk)
            if probs == "lse":
                row_lse = lse[..., qs:qe, :] if lse_rows == "query" else lse[..., ks:ke, :]  # (..., Bq, 1)
                p = torch.exp(s - row_lse)  # (..., Bq, Bk)
            elif probs == "tile-max":
                p = torch.exp(s - s.amax(dim=-1, keepdim=True))  # (..., Bq, Bk)
            elif probs == "tile-softmax":
                p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # (..., Bq, Bk): rows sum to 1 in each tile
            else:
                p = torch.exp(s)  # (..., Bq, Bk)
            do_kv = out[..., qs:qe, :] if do_for_kv == "out" else do_blk  # what the dK/dV pass reads as dO
            dv_tile = p.transpose(-1, -2) @ do_kv if transpose_p else p @ do_kv  # (..., Bk, d_v)
            dp = do_blk @ v_blk.transpose(-1, -2)  # (..., Bq, Bk)
            if delta == "out":
                row_delta = (grad_out[..., qs:qe, :] * out[..., qs:qe, :]).sum(
                    -1, keepdim=True
                )  # (..., Bq, 1)
            elif delta == "tile":
                row_delta = (dp * p).sum(dim=-1, keepdim=True)  # (..., Bq, 1)
            elif delta == "dp":
                row_delta = dp.sum(dim=-1, keepdim=True)  # (..., Bq, 1)
            elif delta == "over-queries":
                row_delta = (dp * p).sum(dim=-2, keepdim=True)  # (..., 1, Bk): one per key, not per query
            else:
                row_delta = torch.zeros_like(dp[..., :1])  # (..., Bq, 1)
            ds = p * (dp - row_delta)  # (..., Bq, Bk)
            ds_kv = p * (do_kv @ v_blk.transpose(-1, -2) - row_delta)  # (..., Bq, Bk): the dK/dV pass's
            ds_q, ds_k = (ds.transpose(-1, -2), ds_kv) if transpose_ds else (ds, ds_kv.transpose(-1, -2))
            dq_tile = ds_q @ k_blk * scale * scale_q  # (..., Bq, d)
            dk_tile = ds_k @ q_blk * scale * scale_k  # (..., Bk, d)
            if accumulate_q:
                dq[..., qs:qe, :] += dq_tile
            else:
                dq[..., qs:qe, :] = dq_tile
            if accumulate_kv:
                dk[..., ks:ke, :] += dk_tile
                dv[..., ks:ke, :] += dv_tile
            else:
                dk[..., ks:ke, :] = dk_tile
                dv[..., ks:ke, :] = dv_tile
    return dq, dk, dv


Slip = tuple[str, BackwardVariant]
"""(message, how the backward with that slip is written)."""

_SCALE_SLIPS: list[Slip] = [
    (
        "forgets the 1/√d scale in dQ: S = QKᵀ/√d, so dQ = dS K / √d (the scale of the forward comes back "
        "in the backward).",
        BackwardVariant(scale_q="none"),
    ),
    ("forgets the 1/√d scale in dK: S = QKᵀ/√d, so dK = dSᵀ Q / √d.", BackwardVariant(scale_k="none")),
    (
        "forgets the 1/√d scale in both dQ and dK: S = QKᵀ/√d, so dQ = dS K / √d and dK = dSᵀ Q / √d.",
        BackwardVariant(scale_q="none", scale_k="none"),
    ),
    (
        "applies the 1/√d scale twice in dQ: once is enough, dQ = dS K / √d (dS is the gradient of the "
        "scaled scores, so it carries no scale of its own).",
        BackwardVariant(scale_q="twice"),
    ),
    (
        "applies the 1/√d scale twice in dK: once is enough, dK = dSᵀ Q / √d.",
        BackwardVariant(scale_k="twice"),
    ),
    (
        "applies the 1/√d scale twice in dQ and dK: dS is the gradient of the scaled scores S = QKᵀ/√d, "
        "so dQ = dS K / √d and dK = dSᵀ Q / √d, each scaled once.",
        BackwardVariant(scale_q="twice", scale_k="twice"),
    ),
]

_COMMON_SLIPS: list[Slip] = [
    (
        "leaves out the D term: dS = P ∘ (dP − D) with D_i = Σ_j dP_ij P_ij, one number per query row "
        "(softmax's backward), not P ∘ dP.",
        BackwardVariant(delta="none"),
    ),
    (
        "subtracts rowsum(dP) instead of rowsum(dP ∘ P): D_i = Σ_j P_ij dP_ij weighs each entry of dP by its "
        "probability.",
        BackwardVariant(delta="dp"),
    ),
    (
        "sums dP ∘ P over the queries (dim=-2): D_i = Σ_j dP_ij P_ij is one number per query row, a sum "
        "over the keys, dim=-1 (keepdim=True).",
        BackwardVariant(delta="over-queries"),
    ),
    (
        "recomputes the scores without the 1/√d scale before P = exp(S − lse): the lse belongs to the "
        "scaled scores, S = Q Kᵀ / √d.",
        BackwardVariant(recompute_scale=False),
    ),
    *_SCALE_SLIPS,
    (
        "transposes dS the wrong way round: dQ = dS K (dS is (T_q, T_k)) and dK = dSᵀ Q.",
        BackwardVariant(transpose_ds=True),
    ),
    (
        "computes dV = P dO: the values' gradient collects over the queries, dV = Pᵀ dO (transpose P).",
        BackwardVariant(transpose_p=False),
    ),
    (
        "ignores is_causal: with is_causal=True the probabilities are the causal ones, the scores of keys "
        "j > i + T_k − T_q set to −inf before the softmax (then their P, and their dS, are 0).",
        BackwardVariant(mask="ignored"),
    ),
    (
        "ignores is_causal in the backward: the probabilities must be the forward's, with the scores of keys "
        "j > i + T_k − T_q set to −inf before the exp (then their P, and their dS, are 0).",
        BackwardVariant(mask="none"),
    ),
    (
        "aligns the causal mask top-left: with T_q ≠ T_k query i sits at position i + T_k − T_q and may see "
        "keys j <= i + T_k − T_q (bottom-right, as in the forward).",
        BackwardVariant(mask="top-left"),
    ),
    (
        "aligns the causal mask top-left: with T_q ≠ T_k the queries are the last T_q positions, so query i "
        "may see keys j <= i + T_k − T_q (bottom-right, as `attention` and `causal_mask` do).",
        BackwardVariant(mask="top-left-all"),
    ),
]

_TILED_SLIPS: list[Slip] = [
    (
        "skips the key blocks after the query block's last row without the offset T_k − T_q: with "
        "T_q < T_k query i sees keys up to i + T_k − T_q, so a block is skipped only when "
        "ks > qe − 1 + T_k − T_q.",
        BackwardVariant(skip_offset=False),
    ),
    (
        "computes D from the tile's dP ∘ P: that sums over one key block only. D_i = Σ_j dP_ij P_ij over "
        "all keys, which equals rowsum(dO ∘ O): compute it once, before the loops, as "
        "(grad_out * out).sum(-1).",
        BackwardVariant(delta="tile"),
    ),
    (
        "uses the unnormalised exp(S − m) (the tile's row maximum) instead of the probabilities: "
        "P = exp(S − lse), with the log-sum-exp the forward returned for each query row.",
        BackwardVariant(probs="tile-max"),
    ),
    (
        "uses exp(S) instead of the probabilities: P = exp(S − lse), with the log-sum-exp the forward "
        "returned for each query row.",
        BackwardVariant(probs="raw"),
    ),
    (
        "normalises P within each tile (a softmax over the tile's keys): each row of a tile then sums "
        "to 1, but a query's probabilities sum to 1 over ALL its keys. P = exp(S − lse), with the "
        "log-sum-exp the forward returned for each query row, which already holds the whole row's sum.",
        BackwardVariant(probs="tile-softmax"),
    ),
    (
        "uses the lse of the key block's rows: the lse belongs to the queries, so the tile needs "
        "lse[..., qs:qe] (the query block's rows), as grad_out and D do.",
        BackwardVariant(lse_rows="key"),
    ),
    (
        "applies the causal mask in the forward but masks no key in the recomputation (no mask there, or "
        "one that lets every key through): inside a tile that crosses the diagonal, set the scores of keys "
        "j > i + T_k − T_q to −inf before P = exp(S − lse), i and j absolute (torch.arange(qs, qe) and "
        "torch.arange(ks, ke)), or those keys get gradients the forward never gave them weight for.",
        BackwardVariant(mask="blocks-only"),
    ),
    (
        "does not accumulate dQ over the key blocks: each key block adds its dS K to the query block's rows "
        "(dq[..., qs:qe, :] += ...), it does not replace what the earlier key blocks gave.",
        BackwardVariant(accumulate_q=False),
    ),
    (
        "does not accumulate dK and dV over the query blocks: each query block adds its dSᵀ Q and Pᵀ dO to "
        "the key block's accumulators (dk_block += ...), it does not replace them.",
        BackwardVariant(accumulate_kv=False),
    ),
    (
        "drops the ragged last key block: when T_k is not a multiple of block_size the last block is shorter "
        "and still counts. Loop with range(0, T_k, block_size).",
        BackwardVariant(tail=False),
    ),
]


def _grads_close(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> bool:
    return all(is_close(a, e.to(a.dtype)) for a, e in zip(actual, expected, strict=True))


_LAYERS = ("known-mistake", "mutant", "repair", "misplaced-arguments", "where-wrong")
"""The diagnosis layers a backward check runs on its gradients (in the pipeline's one order)."""

_CAUSAL_PART = (
    "\nThe cases with is_causal=False passed, so the mistake is in the causal part: the mask inside "
    "the tiles that cross the diagonal (key j allowed when j <= i + T_k − T_q, the scores of the "
    "others −inf before P = exp(S − lse)) or the blocks the loops skip."
)


def _close_part(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    return is_close(actual, expected.to(actual.dtype))


def _diagnose(
    what: str,
    actual: Grads,
    expected: Grads,
    slips: Iterable[Slip],
    inputs: Inputs,
    is_causal: bool,
    blocks: tuple[int, int],
    called_as: str,
    plain_passed: bool = False,
    candidate: Any = None,
    wiring: Sequence[Mistake] = (),
) -> NoReturn:
    """Raise naming the slips whose gradients `actual` matches; else say where `actual` is wrong.

    The one diagnosis pipeline (`_diagnosis.py`) on the tuple (dq, dk, dv): the `wiring` mistakes and
    the `slips`, the reference's mutants, the learner's line changed once or their misplaced
    arguments, and `_locate`. `plain_passed`: the same function passed the cases without the causal
    mask. `candidate`: the learner's function or class (else the one the check called last), read for
    misplaced arguments. `called_as=""` where `what` says how it was called.
    """
    simulated = [
        Mistake(message, functools.partial(_tiled_backward, *inputs, is_causal, *blocks, slip))
        for message, slip in slips
    ]
    failure = Failure(
        actual,
        expected,
        what,
        f"\n(Called as {called_as}.)" if called_as else "",
        _close_part,
        [*wiring, *simulated],
        parts=NAMES,
        locate=lambda: _locate(actual, expected, inputs, is_causal, blocks),
        candidate=candidate,
        first_slip_only=True,
        unnamed_hint=_CAUSAL_PART if is_causal and plain_passed else "",
    )
    fail(failure, only=_LAYERS)


def _locate(
    actual: Grads,
    expected: Grads,
    inputs: tuple[torch.Tensor, ...],
    is_causal: bool,
    blocks: tuple[int, int],
    owned: Sequence[int] = (0, 1, 2),
) -> str:
    """Which of dq, dk, dv is wrong, and in which rows: causal tiles, the ragged end, some blocks, all.

    `owned`: the gradients the code under check computed (a Triton kernel of notebook 09 computes dq,
    or dk and dv); the others are neither compared nor named.
    """
    wrong = [i for i in owned if not is_close(actual[i], expected[i].to(actual[i].dtype))]
    if other_d := _wrong_d(actual, expected, inputs, is_causal, wrong, owned):
        return other_d
    if upstream := _upstream_ignored(actual, inputs, is_causal, wrong):
        return upstream
    for i, j in itertools.combinations(wrong, 2):  # two gradients in each other's place
        a_i, a_j = actual[i], actual[j]
        if a_i.shape == expected[j].shape and a_j.shape == expected[i].shape:
            if is_close(a_i, expected[j].to(a_i.dtype)) and is_close(a_j, expected[i].to(a_j.dtype)):
                return (
                    f"gives {NAMES[i]} and {NAMES[j]} in each other's place: your {NAMES[i]} is the right "
                    f"{NAMES[j]} and your {NAMES[j]} the right {NAMES[i]} (a buffer or a return passed in "
                    "the other's slot)."
                )
    right = [NAMES[i] for i in owned if i not in wrong]
    first = wrong[0]
    a, e = actual[first], expected[first]
    for i in wrong:
        if not torch.isfinite(actual[i]).all() and torch.isfinite(expected[i]).all():
            a, e, first = actual[i], expected[i], i
            break
    gap = (a.detach().double().cpu() - e.double().cpu()).abs().nan_to_num(nan=math.inf)  # (..., T, d)
    per_row = gap.reshape(-1, *gap.shape[-2:]).amax(dim=(0, 2))  # (T,): the largest gap of each row
    bad_rows = torch.nonzero(per_row > 1e-4 + 1e-4 * e.abs().max().item()).flatten().tolist()
    q, k = inputs[0], inputs[1]
    t_q, t_k = q.shape[-2], k.shape[-2]
    is_query_side = first == 0
    length, block = (t_q, blocks[0]) if is_query_side else (t_k, blocks[1])
    side = "query" if is_query_side else "key"
    names = ", ".join(NAMES[i] for i in wrong[:-1]) + (" and " if len(wrong) > 1 else "") + NAMES[wrong[-1]]
    verb = "it is" if len(wrong) == 1 else "they are"
    head = f"gives the wrong {names}" + (
        f" ({' and '.join(right)} {'is' if len(right) == 1 else 'are'} right)" if right else ""
    )
    nonfinite = "" if torch.isfinite(a).all() else " (it holds NaN or inf)"
    rows = f"{side} rows {min(bad_rows)}–{max(bad_rows)}" if bad_rows else f"the {side} rows"
    if not bad_rows or len(bad_rows) == length:
        place = f"in every {side} row{nonfinite}"
    elif is_causal and _in_diagonal_tiles(bad_rows, is_query_side, t_q, t_k, blocks):
        place = f"only in {rows}, whose tiles cross the causal diagonal{nonfinite}"
    elif min(bad_rows) >= length - length % block and length % block:
        place = (
            f"only in {rows}, the last, ragged {side} block{nonfinite}: slices past the end stop at the "
            "end, and that shorter block counts too"
        )
    elif block < length:
        touched = sorted({r // block for r in bad_rows})
        place = f"only in {side} blocks {touched} of {math.ceil(length / block)} ({rows}){nonfinite}"
    else:
        place = f"in {rows}{nonfinite}"
    scale = _scale_factor(a, e, q.shape[-1])
    if scale:
        why = (
            "dV = Pᵀ dO carries no scale; the 1/√d belongs to dQ and dK."
            if first == 2
            else "dQ and dK carry the 1/√d of S = QKᵀ/√d exactly once."
        )
        return f"{head}: {NAMES[first]} is {scale} times the right one. {why}"
    return f"{head}: {verb} wrong {place}. For {NAMES[first]}, {describe_error(a, e)}"


def _upstream_ignored(
    actual: Grads, inputs: tuple[torch.Tensor, ...], is_causal: bool, wrong: Sequence[int]
) -> str:
    """When the wrong gradients are those of an upstream gradient of ones, or of the output: say so, or ""."""
    q, k, v, grad_out = inputs[:4]
    out = reference.attention(*(x.detach().to("cpu", torch.float64) for x in (q, k, v)), is_causal=is_causal)[
        0
    ]
    for words, stand_in in (
        ("1 everywhere (torch.ones_like)", torch.ones_like(grad_out)),
        ("the output itself", out),
    ):
        grads = _autograd_grads(q, k, v, stand_in, is_causal)
        if all(is_close(actual[i], grads[i].to(actual[i].dtype)) for i in wrong):
            return (
                f"gives the gradients of an upstream gradient of {words}, not of grad_out: dO is what the "
                "loss says about the output, and it must reach every gradient (dV = Pᵀ dO, dP = dO Vᵀ). "
                "Pass grad_out on as it is."
            )
    return ""


def _wrong_d(
    actual: Grads,
    expected: Grads,
    inputs: tuple[torch.Tensor, ...],
    is_causal: bool,
    wrong: Sequence[int],
    owned: Sequence[int],
) -> str:
    """When dq (and dk) are off by exactly what another D gives, dv right: which D the code used, or "".

    dS = P ∘ (dP − D), so a D off by e_i in query row i moves dQ's row i by −e_i·(P K)_i/√d: e is
    read from dq by least squares, row by row, and kept only if it explains dq (and dk) entirely.
    """
    if wrong[:1] != [0] or 2 in wrong or 2 not in owned:
        return ""
    q, k, v, grad_out = (x.detach().to("cpu", torch.float64) for x in inputs[:4])
    t_q = q.shape[-2]
    scale = q.shape[-1] ** -0.5
    out, p = reference.attention(q, k, v, is_causal=is_causal)  # (..., T_q, d_v), (..., T_q, T_k)
    d_right = (grad_out * out).sum(-1, keepdim=True)  # (..., T_q, 1)
    p_k = p @ k  # (..., T_q, d)
    moved = actual[0].detach().to("cpu", torch.float64) - expected[0]  # (..., T_q, d)
    weight = (p_k * p_k).sum(-1, keepdim=True)  # (..., T_q, 1)
    e = -(moved * p_k).sum(-1, keepdim=True) / (scale * weight).clamp_min(1e-300)  # (..., T_q, 1)
    e = torch.where(weight > 1e-20, e, 0.0)

    def explained(got: torch.Tensor, want: torch.Tensor) -> bool:
        return float((got - want).norm()) <= 2e-2 * float(want.norm()) + 1e-6

    if not explained(moved, -scale * e * p_k):
        return ""
    if 1 in owned:
        moved_k = actual[1].detach().to("cpu", torch.float64) - expected[1]  # (..., T_k, d)
        if not explained(moved_k, -scale * (p * e).mT @ q):
            return ""
    used = d_right + e  # (..., T_q, 1): the D the code subtracted
    candidates = (
        ("0: D is left out, dS = P ∘ dP", torch.zeros_like(d_right)),
        ("rowsum(dO): the output O is left out of dO ∘ O", grad_out.sum(-1, keepdim=True)),
        ("rowsum(O): dO is left out of dO ∘ O", out.sum(-1, keepdim=True)),
        ("−rowsum(dO ∘ O): its sign is flipped", -d_right),
        ("rowsum(dO ∘ O)/√d: D carries no scale", d_right * scale),
        ("rowsum(dO ∘ O)·√d: D carries no scale", d_right / scale),
    )
    which = next((words for words, value in candidates if explained(used, value)), "")
    rows = torch.nonzero(e.abs().reshape(-1, t_q).amax(0) > 1e-6 * (1 + d_right.abs().max())).flatten()
    some = f" (in query rows {int(rows[0])}–{int(rows[-1])} of {t_q})" if 0 < len(rows) < t_q else ""
    return (
        f"gives the wrong {' and '.join(NAMES[i] for i in wrong)} while dv is right, and they are off by "
        f"exactly what another D gives: dS = P ∘ (dP − D) with D_i = Σ_j dO_ij O_ij = rowsum(dO ∘ O), one "
        f"number per query row{some}. "
        + (f"Yours is {which}." if which else "Yours is another number: look at how D is computed.")
    )


def _scale_factor(actual: torch.Tensor, expected: torch.Tensor, d: int) -> str:
    """'1/√d' or '√d' when actual is expected times that factor (as a scale in the wrong place), else ''."""
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    if not bool(torch.isfinite(a).all()) or float((e * e).sum()) == 0:
        return ""
    factor = float((a * e).sum() / (e * e).sum())
    for words, value in ((f"1/√d = {d**-0.5:.4g}", d**-0.5), (f"√d = {d**0.5:.4g}", d**0.5)):
        if abs(factor / value - 1) < 1e-2 and bool(torch.allclose(a, value * e, rtol=1e-2, atol=1e-3)):
            return words
    return ""


def _in_diagonal_tiles(
    rows: list[int], query_side: bool, t_q: int, t_k: int, blocks: tuple[int, int]
) -> bool:
    """Whether every row lies in a block that shares a tile with the causal diagonal."""
    block_m, block_n = blocks
    offset = t_k - t_q
    diagonal = set()
    for qs in range(0, t_q, block_m):
        qe = min(qs + block_m, t_q)
        for ks in range(0, t_k, block_n):
            ke = min(ks + block_n, t_k)
            if ks <= qe - 1 + offset and ke - 1 > qs + offset:  # some keys of the tile masked, some not
                diagonal.add(qs // block_m if query_side else ks // block_n)
    block = block_m if query_side else block_n
    return bool(diagonal) and all(r // block in diagonal for r in rows)


def _autograd_grads(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor, is_causal: bool
) -> Grads:
    """Gradients of attention by autograd through the course's `attention`, in float64."""
    leaves = [x.detach().to("cpu", torch.float64).requires_grad_(True) for x in (q, k, v)]
    out = reference.attention(*leaves, is_causal=is_causal)[0]  # (..., T_q, d_v)
    dq, dk, dv = torch.autograd.grad(out, leaves, grad_out.detach().to("cpu", torch.float64))
    return dq, dk, dv


def _expect_three(name: str, result: Any, like: Sequence[torch.Tensor], what: str) -> Grads:
    """Require (dq, dk, dv) shaped and placed like (q, k, v); name a wrong count, order or shape."""
    if isinstance(result, torch.Tensor) or not isinstance(result, tuple | list) or len(result) != 3:
        raise CheckFailed(
            f"`{name}` should return a tuple (dq, dk, dv), one gradient per input, but returned "
            f"{_what_is(result)}. End with `return dq, dk, dv`."
        )
    shapes = [tuple(x.shape) for x in like]
    got = [tuple(r.shape) if isinstance(r, torch.Tensor) else None for r in result]
    if got != shapes and sorted(map(str, got)) == sorted(map(str, shapes)):
        raise CheckFailed(
            f"`{name}` returned its gradients in the wrong order (shapes {got}): return (dq, dk, dv), "
            f"shaped like (q, k, v): {shapes}."
        )
    dq, dk, dv = (
        expect_tensor(r, x.shape, f"{n} of {what}", device=x.device, finite=False)
        for r, x, n in zip(result, like, NAMES, strict=True)
    )
    return dq, dk, dv


def _what_is(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"one tensor of shape {tuple(value.shape)}"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"{type(value).__name__}"


# ---------------------------------------------------------------------------------------------
# softmax_backward

_SOFTMAX_CASES = [  # (shape, dim, dtype)
    ((4, 7), -1, torch.float64),
    ((2, 5, 6), 1, torch.float64),
    ((2, 3, 5), -1, torch.float32),
    ((9,), 0, torch.float64),
]


def _softmax_slip(kind: str) -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    def slip(p: torch.Tensor, grad_p: torch.Tensor, dim: int) -> torch.Tensor:
        if kind == "no-sum":
            return p * grad_p
        if kind == "sum-of-grad":
            return p * (grad_p - grad_p.sum(dim=dim, keepdim=True))
        if kind == "no-outer-p":
            return grad_p - (grad_p * p).sum(dim=dim, keepdim=True)
        if kind == "whole-sum":
            return p * (grad_p - (grad_p * p).sum())
        return p * (grad_p - (grad_p * p).sum(dim=-1, keepdim=True))  # "last-dim"

    return slip


_SOFTMAX_SLIPS = [
    (
        "multiplies grad_p by p and stops: softmax's Jacobian is diag(p) − p pᵀ, so the p pᵀ part gives a "
        "second "
        "term, dx = p ∘ (grad_p − Σ_j grad_p_j p_j).",
        "no-sum",
    ),
    (
        "subtracts the plain sum of grad_p: the term from p pᵀ is Σ_j grad_p_j p_j, each entry weighed by "
        "its "
        "probability: dx = p ∘ (grad_p − (grad_p * p).sum(dim, keepdim=True)).",
        "sum-of-grad",
    ),
    (
        "forgets the outer factor p: dx = p ∘ (grad_p − Σ_j grad_p_j p_j) (the Jacobian's rows are scaled by "
        "p_i).",
        "no-outer-p",
    ),
    (
        "sums over the last axis instead of the `dim` it was given: use dim in the sum (keepdim=True).",
        "last-dim",
    ),
    (
        "subtracts one sum over the whole tensor: Σ_j grad_p_j p_j belongs to each row (each softmax) on "
        "its own, (grad_p * p).sum(dim=dim, keepdim=True), one number per row.",
        "whole-sum",
    ),
]


# ---------------------------------------------------------------------------------------------
# The exercise is to write the gradients: asking autograd for them does not count

_FORMULAS = "dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − rowsum(dO ∘ O)), dQ = dS K / √d and dK = dSᵀ Q / √d"
_OWN_GRADIENTS = {
    "softmax_backward": (
        "from p and grad_p alone: dx = p ∘ (grad_p − D), with D = Σ grad_p ∘ p along dim (keepdim=True)"
    ),
    "attention_backward": f"from the forward's P, matrix by matrix: {_FORMULAS}",
    "flash_attention_backward": (
        "tile by tile: recompute each tile's P = exp(S − lse), then accumulate the same formulas, "
        f"{_FORMULAS}, with rowsum(dO ∘ O) computed once per query row"
    ),
    "triton_flash_attention_backward": (
        "in your two kernels: dK and dV per key block, dQ per query block, from P = exp(S − lse) "
        f"recomputed in each tile ({_FORMULAS})"
    ),
    "FlashAttentionFunction": (
        "backward(ctx, grad_out) should take what forward saved (q, k, v, out, lse) and return your "
        "flash_attention_backward's dq, dk, dv (then None, None), without autograd inside"
    ),
}


class _AutogradCalls:
    """Counts the runs of autograd's engine (torch.autograd.grad, .backward(), torch.autograd.backward,
    and torch.func or torch.autograd.functional, which call them) while it is entered; `nested` counts
    those started inside another (a Function's backward that asks autograd again)."""

    def __init__(self) -> None:
        self.calls = 0
        self.nested = 0
        self._depth = 0
        self._original: Any = None

    def __enter__(self) -> _AutogradCalls:
        import torch.autograd as autograd

        self._original = getattr(autograd, "_engine_run_backward", None)
        if self._original is not None:  # both grad and backward run it (torch >= 2.4)
            original = self._original

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls += 1
                self.nested += self._depth > 0
                self._depth += 1
                try:
                    return original(*args, **kwargs)
                finally:
                    self._depth -= 1

            autograd._engine_run_backward = counted
        return self

    def __exit__(self, *exc: object) -> None:
        if self._original is not None:
            import torch.autograd as autograd

            autograd._engine_run_backward = self._original


def _refuse_autograd(name: str, calls: _AutogradCalls, nested: bool = False) -> None:
    """A CheckFailed when the learner's `name` asked autograd for the gradients it is to write."""
    if calls.nested if nested else calls.calls:
        raise CheckFailed(
            f"Your {name} asks torch.autograd for the gradients (torch.autograd.grad or .backward(), "
            "for example through attention): that gives the right numbers, but this exercise is to write "
            f"them yourself, {_OWN_GRADIENTS[name]}."
        )


def _call_own(name: str, candidate: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call`, refusing a candidate that runs autograd for its gradients."""
    with _AutogradCalls() as calls:
        result = call(name, candidate, *args, **kwargs)
    _refuse_autograd(name, calls)
    return result


@check
def check_softmax_backward(candidate: Callable[..., Any]) -> str:
    """Compare with autograd through torch.softmax, on several axes and dtypes."""
    for shape, dim, dtype in _SOFTMAX_CASES:
        x = randn(*shape, dtype=dtype, scale=2.0)
        p = torch.softmax(x, dim=dim)
        grad_p = randn(*shape, dtype=dtype)
        result = _call_own(
            "softmax_backward",
            candidate,
            p,
            grad_p,
            dim=dim,
            hint="The sum over `dim` needs keepdim=True to broadcast against p.",
        )
        what = f"Your softmax_backward(p of shape {shape}, grad_p, dim={dim})"
        out = expect_tensor(
            result,
            shape,
            what,
            finite=False,
            hints={
                tuple(
                    s for i, s in enumerate(shape) if i != dim % len(shape)
                ): "That is one number per row: return the gradient dx, shaped like p.",
            },
        )
        leaf = x.clone().requires_grad_(True)
        (expected,) = torch.autograd.grad(torch.softmax(leaf, dim=dim), leaf, grad_p)
        if is_close(out, expected):
            continue
        mistakes = [
            Mistake(message, functools.partial(_softmax_slip(kind), p, grad_p, dim))
            for message, kind in _SOFTMAX_SLIPS
        ]
        reading = functools.partial(_softmax_property, candidate, p, grad_p, dim)
        failure = Failure(
            out,
            expected,
            what,
            "",
            is_close,
            mistakes,
            diagnose=reading,
            own_line_with_property=True,
            first_slip_only=True,
        )
        fail(failure, only=("known-mistake", "property", "repair", "where-wrong"))
    exercise = Exercise(
        "softmax_backward",
        lambda case: (candidate, reference.softmax_backward),
        extra=lambda case, tensors: {"dim": -1},
        alloc=_softmax_values,
    )
    generated = _expect_contract(SOFTMAX_BACKWARD_CONTRACT, exercise)
    return (
        f"4 shapes, dim=-1, 1 and 0, float32 and float64, against autograd; {generated} more from the "
        "exercise's contract (two batch axes, p or grad_p alone a view, a row of one entry, float64, the "
        "inputs' device)"
    )


def _softmax_property(
    candidate: Callable[..., Any],
    p: torch.Tensor,
    grad_p: torch.Tensor,
    dim: int,
    actual: torch.Tensor,
    expected: torch.Tensor,
) -> str | None:
    """What property a wrong dx breaks: a diagonal Jacobian, or entries that do not sum to 0 (else None)."""
    if _elementwise(candidate, p, grad_p, dim, actual):
        return (
            "treats softmax as if each output depended on its own input only: each entry of "
            "your dx moves with its own grad_p entry and no other, a diagonal Jacobian (p(1 − p) is "
            "only its diagonal). Every p_j depends on every x_i, J = diag(p) − p pᵀ, so "
            "dx = p ∘ (grad_p − D), D = Σ_j grad_p_j p_j per row, over dim (keepdim=True)."
        )
    sums = actual.detach().double().sum(dim=dim)
    if not torch.allclose(sums, torch.zeros_like(sums), atol=1e-4):
        return (
            f"is wrong, and its entries do not sum to 0 along dim={dim}: a softmax's outputs sum "
            "to 1 whatever x is, so the gradient of x must sum to 0 along the same axis. "
            "dx = p ∘ (grad_p − D) does, with D = Σ_j grad_p_j p_j taken per row, over dim "
            f"(keepdim=True). ({difference(actual, expected)})"
        )
    return None


def _elementwise(
    candidate: Callable[..., Any], p: torch.Tensor, grad_p: torch.Tensor, dim: int, out: torch.Tensor
) -> bool:
    """Whether the candidate's dx moves only where grad_p is changed (one entry): a diagonal Jacobian."""
    if p.shape[dim] < 2:
        return False
    nudged = grad_p.clone()
    nudged.view(-1)[0] += 1.0
    try:
        moved = candidate(p.clone(), nudged, dim=dim)
    except Exception:  # noqa: BLE001 - the property is only looked for, never required
        return False
    if not isinstance(moved, torch.Tensor) or moved.shape != out.shape:
        return False
    changed = (moved.detach() - out.detach()).abs() > 1e-9  # (same shape as p)
    return bool(changed.view(-1)[0]) and int(changed.sum()) == 1


# ---------------------------------------------------------------------------------------------
# attention_backward

_ATTENTION_CASES = [  # (q shape, T_k, d_v, is_causal)
    ((2, 3, 6, 8), 6, 8, False),
    ((1, 2, 9, 8), 5, 6, False),
    ((2, 6, 8), 6, 8, True),
    ((2, 5, 8), 9, 4, True),
    ((7, 16), 7, 16, True),
]
"""Batch axes or none, T_q < T_k causal (bottom-right), T_q > T_k, d_v ≠ d."""


@check
def check_attention_backward(candidate: Callable[..., Any]) -> str:
    """Compare (dq, dk, dv) with autograd through attention; name the slips of the backward's formulas."""
    for q_shape, t_k, d_v, is_causal in _ATTENTION_CASES:
        q = randn(*q_shape)
        k = randn(*q_shape[:-2], t_k, q_shape[-1])
        v = randn(*q_shape[:-2], t_k, d_v)
        grad_out = randn(*q_shape[:-1], d_v)
        _compare_naive(candidate, q, k, v, grad_out, is_causal)
    q, k, v = (randn(2, 2, 10, 8, dtype=torch.float32) for _ in range(3))
    _compare_naive(candidate, q, k, v, randn(2, 2, 10, 8, dtype=torch.float32), True)
    exercise = Exercise(
        "attention_backward",
        lambda case: (candidate, reference.attention_backward),
        extra=lambda case, tensors: {"is_causal": True},
        unpack=_grads_of("attention_backward"),
    )
    generated = _expect_contract(ATTENTION_BACKWARD_CONTRACT, exercise)
    return (
        "6 shapes (batch axes, T_q ≠ T_k, causal bottom-right, float32) against autograd; "
        f"{generated} more from the exercise's contract (causal, rows with no key, each input alone a "
        "view, float64, the inputs' device)"
    )


def _compare_naive(
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool,
) -> None:
    result = _call_own("attention_backward", candidate, q, k, v, grad_out, is_causal=is_causal)
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    what = f"Your attention_backward({shapes}, grad_out, is_causal={is_causal})"
    grads = _expect_three("attention_backward", result, (q, k, v), what)
    expected = _autograd_grads(q, k, v, grad_out, is_causal)
    if _grads_close(grads, expected):
        return
    blocks = (q.shape[-2], k.shape[-2])  # one tile: the whole matrices
    _diagnose(
        what,
        grads,
        expected,
        _COMMON_SLIPS,
        (q, k, v, grad_out),
        is_causal,
        blocks,
        f"attention_backward({shapes}, grad_out, is_causal={is_causal})",
        plain_passed=is_causal,
    )


# ---------------------------------------------------------------------------------------------
# flash_attention_backward

_FLASH_CASES = [  # (q shape, T_k, d_v, is_causal, block_size)
    ((1, 2, 32, 8), 32, 8, False, 8),
    ((2, 3, 37, 8), 37, 5, False, 8),
    ((2, 29, 8), 45, 6, False, 16),
    ((1, 2, 32, 8), 32, 8, True, 8),
    ((1, 2, 37, 8), 37, 8, True, 8),
    ((2, 21, 8), 45, 4, True, 8),
    ((2, 19, 8), 30, 6, True, 8),  # T_k - T_q = 11: the diagonal enters a key block mid-way
    ((3, 20, 4), 20, 4, True, 1),
    ((2, 20, 8), 20, 8, True, 64),
    ((30, 8), 30, 8, True, 7),
]
"""Square tiles, ragged tails, T_q < T_k (causal bottom-right, also with T_k - T_q no multiple of the
block, so that a skip decided by a block's first row instead of its last drops a tile) and T_q > T_k,
block_size 1 and longer than the sequence, and no batch axis; the cases without the causal mask first,
so that a mistake in the causal part alone is seen as such."""

_FLASH_HINT = (
    "Each tile needs the lse, D and grad_out of its query rows (lse[..., qs:qe]) and the keys and "
    "values of its key block; the last block of each may be shorter."
)


@check
def check_flash_attention_backward(candidate: Callable[..., Any]) -> str:
    """Compare with autograd through attention (ragged, causal, T_q ≠ T_k); reject a T_q × T_k tensor."""
    for q_shape, t_k, d_v, is_causal, block_size in _FLASH_CASES:
        q = randn(*q_shape)
        k = randn(*q_shape[:-2], t_k, q_shape[-1])
        v = randn(*q_shape[:-2], t_k, d_v)
        grad_out = randn(*q_shape[:-1], d_v)
        _compare_flash(candidate, q, k, v, grad_out, is_causal, block_size, plain_passed=is_causal)
    q, k, v, grad_out = (randn(2, 24, 8, dtype=torch.float32, scale=s) for s in (4.0, 4.0, 1.0, 1.0))
    _compare_flash(candidate, q, k, v, grad_out, True, 8, plain_passed=True)
    _expect_tiled(candidate)
    _expect_runs_on_cuda(candidate)
    exercise = Exercise(
        "flash_attention_backward",
        lambda case: (candidate, reference.flash_attention_backward),
        extra=_with_forward,
        unpack=_grads_of("flash_attention_backward"),
    )
    generated = _expect_contract(FLASH_BACKWARD_CONTRACT, exercise)
    return (
        "10 shapes (ragged, T_q ≠ T_k, causal, block_size 1 and > T), float32, never T_q×T_k; "
        f"{generated} more from the exercise's contract (lengths around a block, each input alone a "
        "view, float64, the inputs' device)"
    )


def _compare_flash(
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool,
    block_size: int,
    plain_passed: bool = False,
) -> None:
    out, lse = flash.flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)
    kwargs = {"is_causal": is_causal, "block_size": block_size}
    result = _call_own(
        "flash_attention_backward", candidate, q, k, v, out, lse, grad_out, hint=_FLASH_HINT, **kwargs
    )
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    flags = f"is_causal={is_causal}, block_size={block_size}"
    called = f"flash_attention_backward({shapes}, out, lse, grad_out, {flags})"
    what = f"Your {called}"
    grads = _expect_three("flash_attention_backward", result, (q, k, v), what)
    expected = _autograd_grads(q, k, v, grad_out, is_causal)
    if _grads_close(grads, expected):
        return
    block = (min(block_size, q.shape[-2]), min(block_size, k.shape[-2]))
    _diagnose(
        what,
        grads,
        expected,
        [*_COMMON_SLIPS, *_TILED_SLIPS],
        (q, k, v, grad_out),
        is_causal,
        block,
        called,
        plain_passed,
    )


def _expect_tiled(candidate: Callable[..., Any]) -> None:
    """Run once under an op recorder: no fused attention, no tensor of T_q·T_k elements or more."""
    t = 128
    block_size = 32
    for is_causal in (False, True):
        q, k, v, grad_out = (randn(1, 1, t, 8) for _ in range(4))  # each (1, 2, T, 8)
        out, lse = flash.flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)
        with _OpRecorder() as recorder:
            call(
                "flash_attention_backward",
                candidate,
                q,
                k,
                v,
                out,
                lse,
                grad_out,
                is_causal=is_causal,
                block_size=block_size,
            )
        for name, _, outputs in recorder.ops:
            if any(part in name for part in _FUSED):
                raise CheckFailed(
                    f"Your flash_attention_backward calls torch's fused attention ({name}): the exercise is "
                    "to write the tiled backward yourself, recomputing each tile's P from the lse."
                )
            for numel, dtype in outputs:
                if numel >= t * t:
                    what = "a causal mask" if dtype == torch.bool else "a tensor"
                    raise CheckFailed(
                        f"Your flash_attention_backward, called with T_q = T_k = {t} and block_size="
                        f"{block_size} (is_causal={is_causal}), created {what} of {numel} elements, as many "
                        "as "
                        f"the whole {t}×{t} matrix of probabilities or more ({name}): the point of the "
                        "FlashAttention backward is to recompute P one (block, block) tile at a time from "
                        "the "
                        "lse, never holding all of it (nor autograd through a naive attention)."
                    )


def _expect_runs_on_cuda(candidate: Callable[..., Any]) -> None:
    """Where there is a GPU: inputs there give gradients there that agree with the reference."""
    device = cuda_device()
    if device is None:
        return
    q, k, v, grad_out = (randn(2, 2, 40, 8, dtype=torch.float32).to(device) for _ in range(4))
    out, lse = flash.flash_attention_forward(q, k, v, is_causal=True, block_size=16)
    result = call(
        "flash_attention_backward",
        candidate,
        q,
        k,
        v,
        out,
        lse,
        grad_out,
        is_causal=True,
        block_size=16,
        hint="Create new tensors (dq, dk, dv, masks) on q.device.",
    )
    what = "Your flash_attention_backward on cuda (is_causal=True, block_size=16)"
    grads = _expect_three("flash_attention_backward", result, (q, k, v), what)
    expected = _autograd_grads(q, k, v, grad_out, True)
    for name, got, want in zip(NAMES, grads, expected, strict=True):
        if not is_close(got, want.to(got.dtype)):
            raise CheckFailed(f"{what}: {name} is wrong: {difference(got, want)}")


# ---------------------------------------------------------------------------------------------
# FlashAttentionFunction


@check
def check_FlashAttentionFunction(candidate: Any) -> str:
    """Forward is attention, saves only q, k, v, out and lse; its gradients pass gradcheck (float64)."""
    if not (isinstance(candidate, type) and issubclass(candidate, torch.autograd.Function)):
        raise CheckFailed(
            "FlashAttentionFunction should be a class that subclasses torch.autograd.Function (with "
            "static methods forward(ctx, q, k, v, is_causal, block_size) and backward(ctx, grad_out)); "
            f"got {_what_is(candidate)}. Pass the class itself: "
            "check_FlashAttentionFunction(FlashAttentionFunction)."
        )
    cases = [((2, 2, 12, 4), 12, True, 4), ((2, 7, 4), 11, True, 4), ((1, 2, 9, 4), 9, False, 16)]
    for q_shape, t_k, is_causal, block_size in cases:
        _compare_function(candidate, q_shape, t_k, is_causal, block_size)
    _gradcheck(candidate)
    exercise = Exercise(
        "FlashAttentionFunction.apply",
        lambda case: (_through_function(candidate), _through_function(reference.FlashAttentionFunction)),
        unpack=lambda result, expected: tuple(result),
    )
    generated = _expect_contract(FUNCTION_CONTRACT, exercise)
    return (
        "forward and gradients match attention's (causal, T_q < T_k, batch axes), saves only q, k, v, "
        "out and lse, and passes torch.autograd.gradcheck in float64; "
        f"{generated} more from the exercise's contract (each input alone a view, float32, the inputs' "
        "device)"
    )


def _apply(candidate: Any, *args: Any) -> Any:
    def run(*inputs: Any) -> Any:
        return candidate.apply(*inputs)

    run.__name__ = "FlashAttentionFunction.apply"
    return call(
        "FlashAttentionFunction.apply",
        run,
        *args,
        hint=(
            "forward(ctx, q, k, v, is_causal, block_size) gets the arguments of apply after ctx; "
            "backward(ctx, "
            "grad_out) returns one gradient per forward argument: dq, dk, dv, None, None."
        ),
    )


def _compare_function(
    candidate: Any, q_shape: tuple[int, ...], t_k: int, is_causal: bool, block_size: int
) -> None:
    d = q_shape[-1]
    q = randn(*q_shape).requires_grad_(True)
    k = randn(*q_shape[:-2], t_k, d).requires_grad_(True)
    v = randn(*q_shape[:-2], t_k, d).requires_grad_(True)
    called = (
        f"FlashAttentionFunction.apply(q {tuple(q.shape)}, k {tuple(k.shape)}, v, {is_causal}, {block_size})"
    )
    saved: list[torch.Tensor] = []

    def pack(x: torch.Tensor) -> torch.Tensor:
        saved.append(x)
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        out = _apply(candidate, q, k, v, is_causal, block_size)
    if isinstance(out, tuple | list):
        raise CheckFailed(
            f"{called} returned a {type(out).__name__} of {len(out)} items: forward should return only the "
            "output; keep the lse for the backward with ctx.save_for_backward(q, k, v, out, lse)."
        )
    expected_out = reference.attention(q.detach(), k.detach(), v.detach(), is_causal=is_causal)[0]
    out = expect_tensor(out, expected_out.shape, f"The output of {called}", finite=False)
    if not is_close(out, expected_out):
        other = reference.attention(q.detach(), k.detach(), v.detach(), is_causal=not is_causal)[0]
        if is_close(out, other):
            raise CheckFailed(
                f"The output of {called} is attention with is_causal={not is_causal}: forward must pass its "
                "is_causal on to flash_attention_forward (and keep it on ctx for the backward)."
            )
        raise CheckFailed(f"The output of {called} is not attention's: {difference(out, expected_out)}")
    if out.grad_fn is None:
        raise CheckFailed(
            f"The output of {called} has no grad_fn: call your function as FlashAttentionFunction.apply(...) "
            "(not FlashAttentionFunction.forward), on inputs that require grad."
        )
    _expect_saved_only(called, out, saved, (q, k, v), expected_out)
    grad_out = randn(*out.shape)
    try:
        with _AutogradCalls() as calls:
            grads = torch.autograd.grad(out, (q, k, v), grad_out, allow_unused=True)
        _refuse_autograd("FlashAttentionFunction", calls, nested=True)
    except NotImplementedError:
        raise CheckFailed(
            "the backward of FlashAttentionFunction (or the flash_attention_backward it calls) is not "
            "implemented yet: replace `raise NotImplementedError` with your code, run that cell, then run "
            "this check again."
        ) from None
    except Exception as error:  # autograd's complaint about what backward returned, or the learner's raise
        first = str(error).splitlines()[0] if str(error) else ""
        if "incorrect number of gradients" in first:
            raise CheckFailed(
                f"The backward of {called} raised RuntimeError: {first}. backward must return one gradient "
                "per argument of forward (after ctx): dq, dk, dv, None, None."
            ) from None
        if not is_learners(error) and not isinstance(error, RuntimeError):
            raise
        raise learner_raised(f"The backward of {called}", error) from None
    dq, dk, dv = (torch.zeros_like(x) if g is None else g for g, x in zip(grads, (q, k, v), strict=True))
    grads = (dq, dk, dv)
    expected = _autograd_grads(q, k, v, grad_out, is_causal)
    if _grads_close(grads, expected):
        return
    q0, k0, v0 = q.detach(), k.detach(), v.detach()
    out0, lse0 = flash.flash_attention_forward(q0, k0, v0, is_causal=is_causal, block_size=block_size)

    def wrong_order(order: tuple[int, int, int]) -> Callable[[], Grads]:
        return lambda: (expected[order[0]], expected[order[1]], expected[order[2]])

    wiring = [
        Mistake(
            "passes is_causal=False to the backward (or none at all): keep the forward's is_causal on ctx "
            "(ctx.is_causal = is_causal) and hand it to flash_attention_backward.",
            lambda: reference.flash_attention_backward(q0, k0, v0, out0, lse0, grad_out, False, block_size),
        ),
        Mistake(
            "returns dk before dq: backward returns the gradients in the order of forward's arguments, "
            "dq, dk, dv, None, None.",
            wrong_order((1, 0, 2)),
        ),
        Mistake(
            "returns dv before dk: backward returns the gradients in the order of forward's arguments, "
            "dq, dk, dv, None, None.",
            wrong_order((0, 2, 1)),
        ),
    ]
    _diagnose(
        f"The backward of {called}",
        grads,
        expected,
        [*_COMMON_SLIPS, *_TILED_SLIPS],
        (q0, k0, v0, grad_out),
        is_causal,
        (min(block_size, q.shape[-2]), min(block_size, t_k)),
        "",
        candidate=candidate,
        wiring=wiring,
    )


def _expect_saved_only(
    called: str,
    out: torch.Tensor,
    saved: list[torch.Tensor],
    inputs: tuple[torch.Tensor, ...],
    expected_out: torch.Tensor,
) -> None:
    """Require the saved tensors to be q, k, v, out and lse, and no tensor kept on ctx otherwise."""
    q, k, v = inputs
    stashed = [(name, x) for name, x in vars(out.grad_fn).items() if isinstance(x, torch.Tensor)]
    if stashed:
        name, x = stashed[0]
        raise CheckFailed(
            f"{called} keeps a tensor on ctx.{name} (shape {tuple(x.shape)}): tensors for the backward go "
            "through ctx.save_for_backward(q, k, v, out, lse) (autograd then checks they were not changed in "
            "place), and only those five."
        )
    kinds = []
    for x in saved:
        kind = next(
            (
                n
                for n, y in zip("qkv", inputs, strict=True)
                if x.shape == y.shape and torch.equal(x.detach(), y.detach())
            ),
            None,
        )
        if kind is None and x.shape == expected_out.shape and is_close(x.detach(), expected_out):
            kind = "out"
        if kind is None and x.shape == q.shape[:-1]:
            kind = "lse"
        if kind is None:
            quadratic = x.numel() >= q.shape[-2] * k.shape[-2] * math.prod(q.shape[:-2])
            why = (
                "as large as the whole T_q × T_k matrix of probabilities: saving it is what FlashAttention's "
                "backward avoids, by recomputing P from the lse tile by tile"
                if quadratic
                else "the backward needs only q, k, v, out and lse"
            )
            raise CheckFailed(
                f"{called} saves a tensor of shape {tuple(x.shape)} for the backward, {why}. "
                "Save exactly ctx.save_for_backward(q, k, v, out, lse)."
            )
        kinds.append(kind)
    missing = [n for n in ("q", "k", "v", "out", "lse") if n not in kinds]
    if missing:
        raise CheckFailed(
            f"{called} does not save {', '.join(missing)} for the backward: save "
            "ctx.save_for_backward(q, k, v, out, lse) in forward (out and lse from flash_attention_forward), "
            "and read them back with q, k, v, out, lse = ctx.saved_tensors."
        )


def _gradcheck(candidate: Any) -> None:
    """torch.autograd.gradcheck in float64 on a small causal case with T_q < T_k and ragged blocks."""
    q = randn(1, 2, 5, 4).requires_grad_(True)
    k = randn(1, 2, 7, 4).requires_grad_(True)
    v = randn(1, 2, 7, 3).requires_grad_(True)

    def function(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return candidate.apply(q, k, v, True, 3)

    try:
        torch.autograd.gradcheck(function, (q, k, v), eps=1e-6, atol=1e-5, rtol=1e-4)
    except Exception as error:  # GradcheckError, or what the learner's code raised
        if is_learners(error):
            called = "FlashAttentionFunction.apply(q (1, 2, 5, 4), k (1, 2, 7, 4), v (1, 2, 7, 3), True, 3)"
            raise learner_raised(f"Your code, under torch.autograd.gradcheck of {called},", error) from None
        first = str(error).strip().splitlines()[0][:300]
        raise CheckFailed(
            "torch.autograd.gradcheck (float64, q (1, 2, 5, 4), k (1, 2, 7, 4), v (1, 2, 7, 3), causal, "
            f"block_size=3) finds your backward disagrees with finite differences of your forward: {first}"
        ) from None


# ---------------------------------------------------------------------------------------------
# The contracts of notebook 09's PyTorch exercises: what each must accept and return.

SOFTMAX_BACKWARD_CONTRACT = Contract(
    "softmax_backward",
    args=(
        Arg("p", ("B", "H", "T", "n"), views=VIEW_KINDS),
        Arg("grad_p", ("B", "H", "T", "n"), views=VIEW_KINDS),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,)),
        Axis("T", (5,)),
        Axis("n", (6, 1), "a single entry per row: p = 1 and its gradient 0"),
    ),
    returns=(Returns("dx", ("B", "H", "T", "n")),),
    dtypes=(torch.float32, torch.float64),
)
"""Exercise 1 of 09 (dim=-1 in the generated cases; the hand-picked ones try dim 1 and 0): two batch
axes, p and grad_p each alone a view, float64, a row of one entry."""

ATTENTION_BACKWARD_CONTRACT = Contract(
    "attention_backward",
    args=(
        Arg("q", ("B", "H", "T_q", "d"), views=VIEW_KINDS),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS),
        Arg("v", ("B", "H", "T_k", "d_v"), views=VIEW_KINDS),
        Arg("grad_out", ("B", "H", "T_q", "d_v"), views=VIEW_KINDS),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,)),
        Axis("T_q", (5, 9), "more queries than keys: with is_causal the first 2 rows see no key"),
        Axis("T_k", (7, 3), "fewer keys than queries"),
        Axis("d", (6,), "a width that is not a power of two"),
        Axis("d_v", (5,)),
    ),
    returns=(
        Returns("dq", ("B", "H", "T_q", "d")),
        Returns("dk", ("B", "H", "T_k", "d")),
        Returns("dv", ("B", "H", "T_k", "d_v")),
    ),
    dtypes=(torch.float32, torch.float64),
    notes=("is_causal=True in every generated case; a query row that sees no key gets dq 0",),
)
"""Exercise 2 of 09: T_q ≠ T_k both ways, causal, each input alone a view, float64, the inputs' device."""

FLASH_BLOCK = 4
"""The block_size of `flash_attention_backward`'s generated cases."""

FLASH_BACKWARD_CONTRACT = Contract(
    "flash_attention_backward",
    args=(
        Arg("q", ("B", "H", "T_q", "d"), views=VIEW_KINDS),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS),
        Arg("v", ("B", "H", "T_k", "d_v"), views=VIEW_KINDS),
        Arg("out", ("B", "H", "T_q", "d_v"), views=("transposed", "sliced")),
        Arg("lse", ("B", "H", "T_q"), views=("transposed", "sliced"), slice_axis=-1),
        Arg("grad_out", ("B", "H", "T_q", "d_v"), views=VIEW_KINDS),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,)),
        Axis("T_q", (6, 3, 4, 9), "below, at and above one block of 4"),
        Axis("T_k", (10, 4), "fewer keys than queries (is_causal=False there)"),
        Axis("d", (8, 6), "a width that is not a power of two"),
        Axis("d_v", (5,)),
    ),
    returns=(
        Returns("dq", ("B", "H", "T_q", "d")),
        Returns("dk", ("B", "H", "T_k", "d")),
        Returns("dv", ("B", "H", "T_k", "d_v")),
    ),
    dtypes=(torch.float32, torch.float64),
    notes=(
        "block_size=FLASH_BLOCK; is_causal=True where T_q <= T_k (no row without a key), else False; "
        "out and lse are the forward's for q, k, v, laid out as the case asks",
    ),
)
"""Exercise 3 of 09: ragged lengths around a block, T_q ≠ T_k both ways, each input alone a view, float64.
The tensor-size limit stays the hand-written `_expect_tiled` (T = 128)."""

FUNCTION_CONTRACT = Contract(
    "FlashAttentionFunction",
    args=(
        Arg("q", ("B", "H", "T_q", "d"), views=VIEW_KINDS),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS),
        Arg("v", ("B", "H", "T_k", "d"), views=VIEW_KINDS),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,)),
        Axis("T_q", (6, 9), "above two blocks of 4"),
        Axis("T_k", (10,)),
        Axis("d", (6,), "a width that is not a power of two"),
    ),
    returns=(
        Returns("out", ("B", "H", "T_q", "d")),
        Returns("dq", ("B", "H", "T_q", "d")),
        Returns("dk", ("B", "H", "T_k", "d")),
        Returns("dv", ("B", "H", "T_k", "d")),
    ),
    dtypes=(torch.float32, torch.float64),
    notes=("apply(q, k, v, True, FLASH_BLOCK); the gradients of one fixed grad_out",),
)
"""Exercise 4 of 09: the output and the gradients autograd gets through the Function, each input alone a
view, float64."""


def _softmax_values(case: Case, arg: Arg) -> Callable[..., torch.Tensor]:
    """p a softmax along its last axis (each row sums to 1), grad_p seeded normal numbers."""
    if arg.name == "p":
        return lambda *shape: torch.softmax(randn(*shape, dtype=case.dtype, scale=2.0), dim=-1)
    return lambda *shape: randn(*shape, dtype=case.dtype)


def _causal(case: Case) -> bool:
    """Whether a generated flash case is causal: where every query row sees a key."""
    return case.size["T_q"] <= case.size["T_k"]


def _with_forward(case: Case, tensors: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    """Write the forward's out and lse for the case's q, k, v into its out and lse (laid out as asked)."""
    q, k, v, out, lse, _ = tensors
    with torch.no_grad():
        right_out, right_lse = flash.flash_attention_forward(q, k, v, is_causal=_causal(case))
        out.copy_(right_out)
        lse.copy_(right_lse)
    return {"is_causal": _causal(case), "block_size": FLASH_BLOCK}


def _through_function(function: Any) -> Callable[..., tuple[torch.Tensor, ...]]:
    """apply(q, k, v, True, block) of `function`, and the gradients autograd gets through it."""

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
        with torch.enable_grad():
            out = function.apply(*leaves, True, FLASH_BLOCK)
            if not isinstance(out, torch.Tensor):
                return (out,)
            gen = torch.Generator().manual_seed(1)
            grad_out = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device)
            grads = torch.autograd.grad(out, leaves, grad_out, allow_unused=True)
        dq, dk, dv = (torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves, strict=True))
        return out.detach(), dq, dk, dv

    run.__name__ = "FlashAttentionFunction.apply"
    return run


def _grads_of(name: str) -> Callable[[Any, tuple[Any, ...]], Sequence[Any]]:
    """How a generated case reads the learner's (dq, dk, dv): as the hand-picked cases do."""

    def unpack(result: Any, expected: tuple[Any, ...]) -> Sequence[Any]:
        if isinstance(result, tuple | list) and len(result) == 3:
            return tuple(result)
        raise CheckFailed(
            f"`{name}` should return a tuple (dq, dk, dv), one gradient per input, but returned "
            f"{_what_is(result)}. End with `return dq, dk, dv`."
        )

    return unpack


def _expect_contract(contract: Contract, exercise: Exercise) -> int:
    """The contract's generated cases, then the meta-device run; how many ran."""
    ran = expect_contract_cases(contract, exercise, contract_cases(contract))
    return ran + expect_inputs_device(contract, exercise)
