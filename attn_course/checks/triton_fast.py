"""The check of notebook 08's stretch exercise: the learner's FlashAttention kernel, made faster.

`fast_flash_attention` must first be right, exactly as `triton_flash_attention` is checked
(`expect_flash_attention`). Then, where the kernel runs interpreted, `TileOps` counts what it
does to each tile of scores on three shapes (causal square, causal with T_q < T_k and ragged,
not causal and ragged), and the check names the work that is still there: masks on tiles that
every query sees whole, a natural exp where exp2 would do, more than one multiplication per score.
On a GPU the kernel is compiled and cannot be counted; the notebook's next cell times it there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from attn_course.checks._harness import CheckFailed, check
from attn_course.checks._triton_harness import Mode, kernel_mode, traced_call
from attn_course.checks.triton_flash import CONTRACT as FLASH_CONTRACT
from attn_course.checks.triton_flash import _FlashCase, expect_flash_attention
from attn_course.triton_flash.tile_ops import TileCounts, TileOps, tiles_needing_a_mask

NAME = "fast_flash_attention"

CONTRACT = replace(FLASH_CONTRACT, exercise=NAME)
"""Exercise 5 of 08 owes "the same results as `triton_flash_attention` ... on every input its check
tries": Exercise 4's contract, whose generated cases `expect_flash_attention` runs for both."""


_SHAPES = (  # the inputs the tiles are counted on
    _FlashCase(1, 2, 128, 128, 32, True),
    _FlashCase(1, 1, 40, 100, 32, True),  # T_k - T_q = 60: the diagonal crosses two key blocks
    _FlashCase(1, 1, 40, 100, 32, False),  # only the ragged last key block needs a mask
)

_FULL_BLOCKS = (
    "Every row of query block pid_m sees the keys before full_stop = min(T_k, max(0, pid_m * BLOCK_M + "
    "T_k - T_q + 1)) // BLOCK_N * BLOCK_N (T_k // BLOCK_N * BLOCK_N without the causal mask): run those "
    "blocks through a loop without tl.where, and only the blocks from full_stop to hi through the masked one."
)


@check
def check_fast_flash_attention(candidate: Callable[..., Any]) -> str:
    """Right as triton_flash_attention; interpreted, masks only where needed, exp2, one scale per score."""
    mode = kernel_mode(NAME, candidate)
    try:
        summary = expect_flash_attention(candidate, NAME)
    except CheckFailed:
        _expect_masks_of_their_own_mode(candidate, mode)  # raises its own message when it sees that mistake
        raise
    if not mode.traced:
        return (
            f"{summary} Compiled for the GPU, its tiles cannot be counted here; the next cell times it "
            "against your kernel of Exercise 4."
        )
    masked = computed = 0
    for shape in _SHAPES:
        counts = _count(candidate, mode, shape)
        _expect_fast(counts, shape)
        masked, computed = masked + counts.masked, computed + counts.computed
    return (
        f"{summary} Of its {computed} tiles of scores it masks only the {masked} on the diagonal or the "
        "ragged end, with one multiplication and one exp2 per score."
    )


def _expect_masks_of_their_own_mode(candidate: Callable[..., Any], mode: Mode) -> None:
    """Name a masked loop that applies the causal test without the causal mask (the split's own mistake)."""
    if not mode.traced:
        return
    shape = _FlashCase(1, 2, 50, 50, 32, False)
    q, k, v = torch.randn(3, shape.b, shape.h, shape.t_q, shape.d).unbind(0)  # each (B, H, T, d)
    try:
        with TileOps() as ops:
            out, _ = traced_call(NAME, candidate, mode, q, k, v, is_causal=False)
    except CheckFailed:  # it raised: the first failure's message stands
        return
    if ops.counts.block_shape is None or not isinstance(out, torch.Tensor) or out.shape != q.shape:
        return
    full_stop = shape.t_k // ops.counts.block_shape[1] * ops.counts.block_shape[1]
    keys, queries = torch.arange(shape.t_k), torch.arange(shape.t_q)[:, None]
    hidden = (keys >= full_stop) & (keys > queries)  # (T_q, T_k): the causal test in the masked blocks only
    scores = (q @ k.transpose(-1, -2) / math.sqrt(shape.d)).masked_fill(hidden, -math.inf)  # (B, H, T_q, T_k)
    if torch.allclose(out, scores.softmax(dim=-1) @ v, atol=1e-4, rtol=1e-4):
        raise CheckFailed(
            f"`{NAME}` applies the causal test in its masked blocks also when is_causal=False: without the "
            "causal mask only keys past T_k are hidden there, so add the diagonal condition under "
            "`if IS_CAUSAL:`.\n(Called as fast_flash_attention(q, k, v) with B=1, H=2, T_q=50, T_k=50, d=32.)"
        )


def _count(candidate: Callable[..., Any], mode: Mode, shape: _FlashCase) -> TileCounts:
    q = torch.randn(shape.b, shape.h, shape.t_q, shape.d)  # (B, H, T_q, d)
    k, v = torch.randn(2, shape.b, shape.h, shape.t_k, shape.d).unbind(0)  # each (B, H, T_k, d)
    with TileOps() as ops:
        traced_call(NAME, candidate, mode, q, k, v, is_causal=shape.causal)
    return ops.counts


def _expect_fast(counts: TileCounts, shape: _FlashCase) -> None:
    """Name the work a fast kernel would not do on this shape."""
    called = f"\n(Counted on {NAME}(q, k, v, ...) with {shape.describe()}.)"
    if counts.block_shape is None:
        raise CheckFailed(
            f"`{NAME}` is right, but it computes its scores without tl.dot: s = tl.dot(q, tl.trans(k)), "
            f"as in Exercise 4, is the product that runs on a GPU's tensor cores.{called}"
        )
    block_m, block_n = counts.block_shape
    _, needing = tiles_needing_a_mask(shape.t_q, shape.t_k, block_m, block_n, shape.causal)
    heads = shape.b * shape.h
    if counts.masked > needing * heads:
        which = (
            "those that cross the diagonal or hold keys past T_k"
            if shape.causal
            else "without the causal mask, only the ragged last key block of each program"
        )
        share = "every one" if counts.masked == counts.computed else f"{counts.masked}"
        raise CheckFailed(
            f"`{NAME}` is right, but it masks {share} of its {counts.computed} tiles of scores, where "
            f"{needing * heads} need a mask: {which}. "
            f"{_FULL_BLOCKS}{called}"
        )
    if counts.natural_exps_per_score > 0:
        raise CheckFailed(
            f"`{NAME}` is right, but it takes tl.exp of the scores, which a GPU computes as "
            "exp2(x · log2 e): one multiplication more per score. Fold log2(e) into the scale once, "
            "qk_scale = sm_scale * 1.4426950408889634, use tl.exp2 for p and alpha, and store the lse as "
            f"(m + tl.log2(l)) * 0.6931471805599453 (ln 2).{called}"
        )
    if counts.multiplications_per_score > 1:
        times = f"{counts.multiplications_per_score:g}"
        raise CheckFailed(
            f"`{NAME}` is right, but it multiplies each score {times} times (by 1/√d and by log2(e), say): "
            "fold both into one factor before the loop, qk_scale = sm_scale * 1.4426950408889634, and "
            f"multiply the scores once (or scale q once, before the loop).{called}"
        )
