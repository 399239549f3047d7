"""What streaming code computes when it makes a known mistake: one simulator per idea, shared.

`streaming_softmax` is a softmax that reads a row in blocks (notebook 06's `online_softmax`, notebook
08's softmax kernel); `tiled_attention` is attention over (block_m, block_n) tiles with a running
maximum, sum and accumulator (notebook 06's `flash_attention`, notebook 08's FlashAttention kernel).
How the code is written is a frozen dataclass of named variants (`StreamingVariant`, `TiledVariant`)
whose defaults compute the right answer (tests check that); each other value is one mistake. Every
mistake is declared one way, `(message, variant)` (`STREAMING_SOFTMAX_VARIANTS`,
`tiled_attention_variants`, `tiled_lse_mistakes`' table); `STREAMING_SOFTMAX_MISTAKES` and
`tiled_attention_mistakes` turn them into `Mistake`s for every check that streams.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

from attn_course.checks._harness import Mistake
from attn_course.checks._memo import remembered

# ---------------------------------------------------------------------------------------------
# streaming softmax


@dataclass(frozen=True)
class StreamingVariant:
    """How one streaming softmax is written: the right one with the defaults, each other value a named
    mistake (`streaming_softmax` computes what it gives; `STREAMING_SOFTMAX_VARIANTS` names each).

    rescale: "right" (sum · exp(m_old - m_new)), "none", "inverted" (· exp(m_new - m_old)) or
    "inverted-guarded" (the same with its inf set to 0); block_max: each block's exponentials taken
    against its own maximum; tail: False drops the ragged last block; start_max: where the running
    maximum starts (0.0 is a mistake for negative rows); masked_lanes_zero: the last block padded with 0
    that counts; subtract_max: False uses exp(x); update_max: False never stores the new maximum (m stays
    at its start); safe_max: False subtracts a maximum that is still -inf after a block of -inf
    (exp(-inf - (-inf)) is NaN); carry_max: False takes each block's maximum alone as the running one
    (m_new = block max, not max(m, block max)); one_pass: each block written as soon as it is read, with
    the running maximum and sum so far.
    """

    rescale: str = "right"
    block_max: bool = False
    tail: bool = True
    start_max: float = -math.inf
    masked_lanes_zero: bool = False
    subtract_max: bool = True
    update_max: bool = True
    safe_max: bool = True
    carry_max: bool = True
    one_pass: bool = False


@remembered
def streaming_softmax(
    x: torch.Tensor, block_size: int, variant: StreamingVariant | None = None, **knobs: Any
) -> torch.Tensor:
    """softmax(x) over the last axis, read `block_size` entries at a time, written as `variant` (fields
    of `StreamingVariant` may also be given one by one, as keywords); the defaults are right."""
    w = dataclasses.replace(variant or StreamingVariant(), **knobs)
    rescale, block_max, tail, start_max, one_pass = w.rescale, w.block_max, w.tail, w.start_max, w.one_pass
    masked_lanes_zero, subtract_max, update_max = w.masked_lanes_zero, w.subtract_max, w.update_max
    safe_max, carry_max = w.safe_max, w.carry_max
    # without the maximum, overflow is the mistake: compute in x's dtype, as the learner's code does
    x64 = x.detach().to("cpu", torch.float64 if subtract_max else x.dtype)
    n = x64.shape[-1]
    if masked_lanes_zero:
        x64 = torch.nn.functional.pad(x64, (0, -n % block_size))  # (..., N rounded up): zeros count
    stop = x64.shape[-1] if tail else n - n % block_size
    m = torch.full_like(x64[..., :1], start_max)  # (..., 1)
    denom = torch.zeros_like(m)  # (..., 1)
    block_maxes, written = [], []
    for start in range(0, stop, block_size):
        block = x64[..., start : start + block_size]  # (..., B)
        block_m = block.amax(dim=-1, keepdim=True)  # (..., 1)
        block_maxes.append(block_m.expand_as(block))
        m_new = (torch.maximum(m, block_m) if carry_max else block_m) if subtract_max else torch.zeros_like(m)
        m_safe = torch.where(m_new == -math.inf, 0.0, m_new) if safe_max else m_new  # (..., 1)
        if block_max:
            denom = denom + torch.exp(block - block_m).sum(dim=-1, keepdim=True)
        else:
            alpha = {
                "right": torch.exp(m - m_safe),
                "none": torch.ones_like(m),
                "inverted": torch.exp(m_safe - m),  # inf while m is -inf: 0 · inf is NaN
                "inverted-guarded": torch.exp(m_safe - m).nan_to_num(posinf=0.0),
            }[rescale]
            denom = denom * alpha + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)
        m = m_new if update_max else m
        if one_pass:
            written.append(torch.exp(block - m) / denom)  # (..., B): before the row is complete
    if one_pass:
        return torch.cat(written, dim=-1)[..., :n].to(x.dtype)  # (..., N)
    if block_max:
        maxes = torch.cat(block_maxes, dim=-1)[..., :n]  # (..., N) or shorter without the tail
        return (torch.exp(x64[..., : maxes.shape[-1]] - maxes) / denom).to(x.dtype)
    return (torch.exp(x64[..., :n] - m) / denom).to(x.dtype)  # (..., N)


SAFE_MAX_MESSAGE = (
    "has no safe maximum: after a block whose scores are all -inf (a masked block) the running maximum "
    "is still -inf, and exp(-inf - (-inf)) is NaN. Subtract m_safe = torch.where(m_new == -inf, 0.0, "
    "m_new) in both exps (keep m = m_new)."
)
CARRY_MAX_MESSAGE = (
    "does not carry the running maximum over the blocks: it must be the maximum of all blocks so far, "
    "m_new = torch.maximum(m, block max), not this block's maximum alone; otherwise a block of scores "
    "far below an earlier block's makes exp(x - m) overflow."
)

STREAMING_SOFTMAX_VARIANTS: list[tuple[str, StreamingVariant]] = [
    (
        "writes each block as soon as it reads it, with the maximum and sum of the blocks seen so far: "
        "only the last block sees the whole row. Finish the first pass over every block (the row's "
        "maximum m and sum l), then a second pass writes exp(x - m) / l.",
        StreamingVariant(one_pass=True),
    ),
    (
        "starts the running maximum at 0 instead of -inf: for a row whose entries are all negative the "
        "maximum never moves, so exp(x - 0) can underflow to 0 (and 0 / 0 is NaN) for very negative rows. "
        "Start it at float('-inf').",
        StreamingVariant(start_max=0.0),
    ),
    (
        "does not rescale the running sum when the maximum grows: the exponentials summed so far were "
        "taken relative to the old maximum, so before adding a new block multiply the sum by "
        "exp(m_old - m_new), then add exp(block - m_new).sum().",
        StreamingVariant(rescale="none"),
    ),
    (
        "rescales the running sum the wrong way round: when the maximum grows from m_old to m_new the "
        "old terms exp(x - m_old) become exp(x - m_new) = exp(x - m_old) · exp(m_old - m_new), a factor "
        "below 1; you multiplied by exp(m_new - m_old).",
        StreamingVariant(rescale="inverted"),
    ),
    (
        "rescales the running sum the wrong way round: when the maximum grows from m_old to m_new the "
        "old terms exp(x - m_old) become exp(x - m_new) = exp(x - m_old) · exp(m_old - m_new), a factor "
        "below 1; you multiplied by exp(m_new - m_old).",
        StreamingVariant(rescale="inverted-guarded"),
    ),
    (
        "uses each block's own maximum and never brings the blocks to a common one: terms exp(x - m_b) "
        "of different blocks cannot be added. Keep one running maximum per row, rescale the running sum "
        "when it grows, and normalise every entry with the final maximum: exp(x - m) / denom.",
        StreamingVariant(block_max=True),
    ),
    (
        "drops the ragged last block: when the length is not a multiple of block_size the last block is "
        "shorter, and it counts too. Loop with range(0, n, block_size) and mask or slice that block "
        "(x[..., start:start + block_size] simply stops at the end).",
        StreamingVariant(tail=False),
    ),
    (
        "counts the padding of the last block (a kernel's masked lanes) as entries of value 0: they "
        "enter the maximum and add exp(0 - m) to the sum. Padded or masked positions must count as "
        "-inf (in Triton, tl.load(..., mask=cols < n_cols, other=float('-inf'))), so that they add "
        "exp(-inf) = 0.",
        StreamingVariant(masked_lanes_zero=True),
    ),
    (
        "never updates the running maximum (m = m_new after each block): m stays where it started, "
        "-inf, so each block's sum replaces the previous ones, and the final exp(x - m) is inf. "
        "Keep m_new as the new running maximum at the end of every block.",
        StreamingVariant(update_max=False),
    ),
    (
        "does not subtract the maximum: exp(x) overflows for large scores and underflows for very "
        "negative ones. Keep a running maximum m and sum exp(x - m).",
        StreamingVariant(subtract_max=False),
    ),
    (
        SAFE_MAX_MESSAGE,
        StreamingVariant(safe_max=False),
    ),
    (
        CARRY_MAX_MESSAGE,
        StreamingVariant(carry_max=False),
    ),
]
"""(message, variant) of every named mistake of a streaming softmax."""

STREAMING_SOFTMAX_MISTAKES = [
    Mistake(message, functools.partial(streaming_softmax, variant=variant))
    for message, variant in STREAMING_SOFTMAX_VARIANTS
]
"""Every named mistake of a streaming softmax, shared by `online_softmax` and `triton_softmax`."""

# ---------------------------------------------------------------------------------------------
# tiled attention


@dataclass(frozen=True)
class TiledVariant:
    """How one tiled attention is written: the right one with the defaults, each other value a named
    mistake (`tiled_attention` computes what it gives; `tiled_attention_table` names each).

    mask (causal only): "right" (key j allowed when j <= i + T_k - T_q), "strict" (<), "top-left"
    (offset 0, for the loop bound too), "skip-diagonal" (only key blocks wholly allowed are visited),
    "blocks-only" (blocks above the diagonal skipped, no mask inside the others), "tile-local" and
    "tile-local-offset" (in the tiles that cross the diagonal, a test on the tile's own row and column
    numbers, with T_k - T_q added to the rows or not; in every tile with `local_in_every_tile`),
    "offset-twice" (key j allowed when j <= i + 2 (T_k - T_q), the loop bound right), "none".
    bound (causal only): where the key loop stops: "last-query" (right), "first-query" (the bound
    computed from the block's first query, hi = qs + T_k - T_q + 1), "no-offset" (hi = qs + block_m),
    "one-block-short" (hi = qs + T_k - T_q), "one-key-short" (hi = qe - 1 + T_k - T_q). tail: False
    drops the ragged last key block; padded_score_zero: the keys past T_k in the last block score 0 and
    count; tile_softmax: a softmax per tile, carried on as if it were exp(s - m); average_blocks: a
    softmax per key block, averaged; rescale: "right" (alpha = exp(m_old - m_new)), "inverted"
    (exp(m_new - m_old)) or "old-max" (p taken against the maximum before this block); normalise: False
    returns acc without dividing; rescale_acc, rescale_sum: False leaves that one unrescaled; scale: the
    scores' scale (1/√d when None); guarded: a row that a mistake leaves with no key gives 0, as a
    kernel that divides by tl.where(l == 0, 1, l) stores, instead of NaN.
    """

    scale: float | None = None
    rescale_acc: bool = True
    rescale_sum: bool = True
    tail: bool = True
    mask: str = "right"
    bound: str = "last-query"
    average_blocks: bool = False
    tile_softmax: bool = False
    padded_score_zero: bool = False
    rescale: str = "right"
    normalise: bool = True
    guarded: bool = False
    local_in_every_tile: bool = False

    def knobs(self) -> dict[str, Any]:
        """The fields that differ from the right variant, as keyword arguments of `tiled_attention`."""
        right = TiledVariant()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) != getattr(right, f.name)
        }


@remembered
def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    block_m: int,
    block_n: int,
    variant: TiledVariant | None = None,
    **knobs: Any,
) -> torch.Tensor:
    """Attention over (block_m, block_n) tiles in float64, written as `variant` (fields of `TiledVariant`
    may also be given one by one, as keywords); the defaults are right."""
    w = dataclasses.replace(variant or TiledVariant(), **knobs)
    scale, mask, bound, rescale, tail = w.scale, w.mask, w.bound, w.rescale, w.tail
    rescale_acc, rescale_sum, normalise, guarded = w.rescale_acc, w.rescale_sum, w.normalise, w.guarded
    average_blocks, tile_softmax, padded_score_zero = w.average_blocks, w.tile_softmax, w.padded_score_zero
    local_in_every_tile = w.local_in_every_tile
    q, k, v = (x.detach().to("cpu", torch.float64) for x in (q, k, v))
    t_q, d = q.shape[-2:]
    t_k = k.shape[-2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    causal = causal and mask != "none"
    offset = 0 if mask == "top-left" else t_k - t_q
    key_stop = t_k if tail else t_k - t_k % block_n
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))  # (..., T_q, d_v)
    for qs in range(0, t_q, block_m):
        qe = min(qs + block_m, t_q)
        rows = torch.arange(qs, qe)  # (Bm,)
        q_blk = q[..., qs:qe, :]  # (..., Bm, d)
        m = q.new_full((*q_blk.shape[:-1], 1), -math.inf)  # (..., Bm, 1)
        total = torch.zeros_like(m)  # (..., Bm, 1)
        acc = q.new_zeros((*q_blk.shape[:-1], v.shape[-1]))  # (..., Bm, d_v)
        block_outs = []
        stop = key_stop
        if causal:
            last = {
                "last-query": qs + block_m,
                "first-query": qs + 1,
                "one-block-short": qs,
                "one-key-short": min(qs + block_m, t_q) - 1,
            }.get(bound)
            stop = min(key_stop, qs + block_m if last is None else last + offset)
        for ks in range(0, max(stop, 0), block_n):
            if causal and mask == "skip-diagonal" and min(ks + block_n, t_k) - 1 > qs + offset:
                continue
            width = block_n if padded_score_zero else min(block_n, t_k - ks)
            keys = torch.arange(ks, ks + width)  # (Bn,)
            inside = keys < t_k  # (Bn,)
            k_blk = q.new_zeros((*k.shape[:-2], width, d))  # (..., Bn, d)
            v_blk = q.new_zeros((*v.shape[:-2], width, v.shape[-1]))  # (..., Bn, d_v)
            k_blk[..., inside, :] = k[..., keys[inside], :]
            v_blk[..., inside, :] = v[..., keys[inside], :]
            s = q_blk @ k_blk.transpose(-1, -2) * scale  # (..., Bm, Bn)
            if not padded_score_zero:
                s = s.masked_fill(~inside, -math.inf)
            if causal and mask in ("tile-local", "tile-local-offset"):  # where the tile crosses, or in all
                if local_in_every_tile or min(ks + block_n, t_k) - 1 > qs + offset:
                    shift = offset if mask == "tile-local-offset" else 0
                    limit = (rows - qs)[:, None] + shift  # (Bm, 1): the tile's own row numbers
                    s = s.masked_fill((keys - ks)[None, :] > limit, -math.inf)  # (..., Bm, Bn)
            elif causal and mask not in ("skip-diagonal", "blocks-only"):
                limit = rows[:, None] + offset * (2 if mask == "offset-twice" else 1)  # (Bm, 1)
                allowed = keys[None, :] < limit if mask == "strict" else keys[None, :] <= limit  # (Bm, Bn)
                s = s.masked_fill(~allowed, -math.inf)
            if average_blocks:
                block_outs.append(torch.softmax(s, dim=-1) @ v_blk)  # (..., Bm, d_v)
                continue
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bm, 1)
            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., Bm, 1)
            alpha = torch.exp(m_safe - m) if rescale == "inverted" else torch.exp(m - m_safe)  # (..., Bm, 1)
            p = torch.exp(s - (m if rescale == "old-max" else m_safe))  # (..., Bm, Bn)
            if tile_softmax:  # each tile's p normalised on its own, then carried as if it were exp(s - m)
                p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # (..., Bm, Bn)
            total = (total * alpha if rescale_sum else total) + p.sum(dim=-1, keepdim=True)
            acc = (acc * alpha if rescale_acc else acc) + p @ v_blk  # (..., Bm, d_v)
            m = m_new
        if average_blocks:
            out[..., qs:qe, :] = torch.stack(block_outs).mean(dim=0)
        else:
            total = total.masked_fill(total == 0, 1.0) if guarded else total  # (..., Bm, 1)
            out[..., qs:qe, :] = acc / total if normalise else acc
    return out


_BLOCK_FREE = frozenset(
    {
        TiledVariant(mask="none"),
        TiledVariant(mask="strict", guarded=True),
        TiledVariant(mask="top-left"),
    }
)
"""Variants tried once, at any block sizes (their result does not depend on them). The unguarded strict
mask does not either, but is tried per block shape, as it was when this was a list of knob dicts."""


def tiled_attention_mistakes(
    simulate: Callable[..., torch.Tensor], causal: bool, *, python: bool, blocked: bool | None = None
) -> list[Mistake]:
    """The named mistakes of tiled attention; `simulate(**knobs)` computes one on the check's inputs.

    `python`: the messages speak of notebook 06's loops (else of notebook 08's kernel). `blocked`:
    None for all of them, False for those whose result does not depend on the block sizes (the
    causal mask's kind), True for the others (which a caller tries for each block shape).
    """
    table = tiled_attention_variants(causal, python=python)
    declared = {variant for _, variant in table}
    return [
        Mistake(message, functools.partial(simulate, **variant.knobs(), **guard))
        for message, variant in table
        if blocked is None or (variant in _BLOCK_FREE) != blocked
        # each with and without notebook 06's given guard (a row the slip leaves with no key gives 0 or
        # NaN), unless the table declares the guarded one itself
        for guard in (
            [{}] if dataclasses.replace(variant, guarded=True) in declared else [{}, {"guarded": True}]
        )
    ]


def tiled_attention_table(causal: bool, *, python: bool) -> list[tuple[dict[str, Any], str]]:
    """(knobs of `tiled_attention`, message) of every named mistake (`tiled_attention_variants`)."""
    return [
        (variant.knobs(), message) for message, variant in tiled_attention_variants(causal, python=python)
    ]


def tiled_attention_variants(causal: bool, *, python: bool) -> list[tuple[str, TiledVariant]]:
    """(message, variant) of every named mistake of tiled attention, for causal or plain attention."""
    acc = "the output accumulator" if python else "the accumulator acc"
    total = "the running sum" if python else "the running sum l"
    bound = "(qs + block) + T_k - T_q" if python else "(pid_m + 1) * BLOCK_M + T_k - T_q"
    table: list[tuple[str, TiledVariant]] = [
        (
            f"does not rescale {acc} when the running maximum grows: it holds sums of exp(s - m_old)·v, "
            "so multiply it by alpha = exp(m_old - m_new) before adding p @ v_block, exactly as you "
            "rescale the running sum.",
            TiledVariant(rescale_acc=False),
        ),
        (
            f"does not rescale {total} (the softmax denominator) when the running maximum grows: "
            "multiply it by alpha = exp(m_old - m_new) before adding the block's p.sum(-1), as you do "
            "for the accumulator.",
            TiledVariant(rescale_sum=False),
        ),
        (
            "rescales neither the running sum nor the accumulator when the maximum grows: terms "
            "computed with an old maximum must be multiplied by alpha = exp(m_old - m_new) before new "
            "ones are added.",
            TiledVariant(rescale_acc=False, rescale_sum=False),
        ),
        (
            "rescales the wrong way round: when the running maximum grows from m_old to m_new the old "
            "terms exp(s - m_old) become exp(s - m_new) = exp(s - m_old) · exp(m_old - m_new), so alpha "
            "= exp(m_old - m_new), a factor at most 1; you used exp(m_new - m_old) (which is inf while "
            "m_old is still -inf, hence NaN). The same NaN comes from p = exp(s - m_old) taken before "
            "the maximum is updated: compute m_new first, then p = exp(s - m_new).",
            TiledVariant(rescale="inverted"),
        ),
        (
            "never divides by the running sum: after the last key block the output of each query row is "
            "acc / l (the accumulated p @ v over the softmax's denominator).",
            TiledVariant(normalise=False),
        ),
        (
            "normalises each tile's probabilities on their own (a softmax per tile): the running sum is "
            "the one normaliser, so a tile's p is exp(s - m_new), unnormalised, and acc / l divides once at "
            "the end.",
            TiledVariant(tile_softmax=True),
        ),
        (
            "averages a softmax per key block: each block's softmax sums to 1 on its own, so averaging "
            "them weighs a block of unimportant keys like a block of important ones. Keep a running "
            "maximum, sum and accumulator per query row across the blocks and divide once at the end.",
            TiledVariant(average_blocks=True),
        ),
        (
            "drops the ragged last key block: when T_k is not a multiple of the block size the last "
            "block is shorter and still counts. Loop with range(0, T_k, block) and slice (or mask) it.",
            TiledVariant(tail=False),
        ),
    ]
    if causal:  # the loop bounds first: a bound that stops early can look like a dropped tail
        return _causal_table(bound) + table
    table.append(
        (
            "gives the keys past T_k in the last, ragged key block a score of 0, so they count in "
            "the softmax: masking their loads is not enough, also set their scores to -inf "
            "(tl.where(offs_n[None, :] < T_k, s, float('-inf'))).",
            TiledVariant(padded_score_zero=True),
        )
    )
    return table


def _causal_table(bound: str) -> list[tuple[str, TiledVariant]]:
    return [
        (
            "ignores is_causal=True: inside each block, mask with -inf the keys after the query's "
            "position (key j allowed when j <= i + T_k - T_q).",
            TiledVariant(mask="none"),
        ),
        (
            "stops the causal key loop one key short: the block's last query, row qe - 1, may attend "
            "key qe - 1 + T_k - T_q, so the loop must run to one past that key, min(T_k, qe + T_k - T_q); "
            "a bound one short leaves that key out where it is the first key of a block.",
            TiledVariant(bound="one-key-short"),
        ),
        *(
            (
                "masks the diagonal too: query i may attend key i + T_k - T_q, its own position. Keep "
                "key j when j <= i + T_k - T_q (<=, not <), and let the key loop reach that key (a bound one "
                "short of it leaves it out the same way).",
                TiledVariant(mask="strict", guarded=guarded),
            )
            for guarded in (False, True)  # a row left with no key: NaN, or 0 where l is guarded
        ),
        (
            "aligns the causal mask top-left: with T_q != T_k the queries are the LAST T_q positions "
            "(bottom-right alignment, as in attention and causal_mask), so query i sits at position "
            "i + T_k - T_q and may attend key j when j <= i + T_k - T_q; the loop bound moves by "
            "T_k - T_q too.",
            TiledVariant(mask="top-left"),
        ),
        (
            "stops the causal key loop at a bound computed from the block's FIRST query: the last "
            "query of the block, row qs + block - 1, sees keys up to qs + block - 1 + T_k - T_q, so "
            f"loop to min(T_k, {bound}). (It only shows when T_k - T_q is not a multiple of the block "
            "size.)",
            TiledVariant(bound="first-query"),
        ),
        (
            "stops the causal key loop at the block's own rows, without T_k - T_q: with more keys than "
            "queries the queries are the last T_q positions, so the block's last query sees keys up to "
            f"qs + block - 1 + T_k - T_q. Loop to min(T_k, {bound}).",
            TiledVariant(bound="no-offset"),
        ),
        (
            "stops the causal loop one block early: the key block that holds the diagonal is never "
            "visited. The block's last query sees keys up to its row + T_k - T_q, so loop to "
            f"min(T_k, {bound}).",
            TiledVariant(bound="one-block-short"),
        ),
        *(
            (
                "tests the causal condition on the tile's own row and column numbers (0, 1, … within "
                f"the tile){extra} instead of the positions they stand for: in the tile of query block qs "
                "and key block ks, row r is query qs + r, at position qs + r + T_k - T_q, and column c is "
                "key ks + c; keep the key when ks + c <= qs + r + T_k - T_q (rows from "
                "torch.arange(qs, qe), columns from torch.arange(ks, ke)).",
                TiledVariant(mask=local, local_in_every_tile=everywhere),
            )
            for local, extra in (
                ("tile-local", ""),
                ("tile-local-offset", " plus T_k - T_q, which leaves out the tile's starts qs and ks,"),
            )
            for everywhere in (False, True)  # the test in the tiles that cross the diagonal, or in all
        ),
        (
            "lets query i see keys up to i + 2·(T_k - T_q) in the tiles that cross the diagonal: the "
            "offset T_k - T_q is counted twice (added to the rows and taken from the columns, say). "
            "Count it once: keep key j when j <= i + T_k - T_q (rows from torch.arange(qs, qe), "
            "columns from torch.arange(ks, ke)).",
            TiledVariant(mask="offset-twice"),
        ),
        (
            "skips the blocks above the diagonal but masks no key inside the blocks that cross it (no "
            "mask there, or one that lets every key through): a block holding the diagonal still "
            "contains keys after some of its queries; mask them with -inf (key j allowed when "
            "j <= i + T_k - T_q, i and j absolute: torch.arange(qs, qe) and torch.arange(ks, ke)).",
            TiledVariant(mask="blocks-only"),
        ),
    ]


# ---------------------------------------------------------------------------------------------
# the log-sum-exp of tiled attention


@remembered
def tiled_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    causal: bool,
    block_m: int,
    block_n: int,
    kind: str = "right",
) -> torch.Tensor:
    """The log-sum-exp per query row (..., T_q) of the masked scaled scores, one `kind` per mistake.

    kind: "right"; "last-block" (the lse of the last key block visited only: m + log of that block's
    p.sum()); "max-only" (the running maximum m, no log of the sum); "log-sum-only" (log(l) without
    m); "log2" (m + log2(l)); "base2" (the lse in base 2, lse · log2(e), as exp2 code keeps it);
    "unscaled" (the lse of q @ kᵀ without 1/√d); "unscaled-max" (m/scale + log(l): the maximum of
    the unscaled scores, the sum of the scaled); "block-rows" (each query block's lse written to rows
    0 … B - 1, the rest left at 0); "unmasked" (the lse of every key's score, the causal mask left
    out of it).
    """
    q, k = (x.detach().to("cpu", torch.float64) for x in (q, k))
    t_q, d = q.shape[-2:]
    t_k = k.shape[-2]
    offset = t_k - t_q
    s = q @ k.transpose(-1, -2) * (1.0 if kind == "unscaled" else 1 / math.sqrt(d))  # (..., T_q, T_k)
    if causal and kind != "unmasked":
        allowed = torch.arange(t_k)[None, :] <= torch.arange(t_q)[:, None] + offset  # (T_q, T_k)
        s = s.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # (..., T_q)
    if kind in ("right", "unscaled", "unmasked"):
        return lse
    if kind == "base2":
        return lse * math.log2(math.e)
    m = s.amax(dim=-1)  # (..., T_q)
    if kind == "max-only":
        return m
    if kind == "log-sum-only":
        return lse - m
    if kind == "unscaled-max":
        return lse - m + m * math.sqrt(d)
    if kind == "log2":
        m_safe = torch.where(m == -math.inf, 0.0, m)
        return m + torch.log2(torch.exp(s - m_safe[..., None]).sum(dim=-1))
    if kind == "block-rows":
        wrong = torch.zeros_like(lse)
        for qs in range(0, t_q, block_m):
            qe = min(qs + block_m, t_q)
            wrong[..., : qe - qs] = lse[..., qs:qe]
        return wrong
    if kind == "last-block":
        wrong = torch.empty_like(lse)
        for qs in range(0, t_q, block_m):
            qe = min(qs + block_m, t_q)
            hi = max(min(t_k, qe + offset), 0) if causal else t_k
            last = (hi - 1) // block_n * block_n if hi > 0 else 0
            wrong[..., qs:qe] = torch.logsumexp(s[..., qs:qe, last:hi], dim=-1)
        return wrong
    raise ValueError(f"unknown kind {kind!r}")


def tiled_lse_mistakes(simulate: Callable[..., torch.Tensor]) -> list[Mistake]:
    """The named mistakes of the log-sum-exp; `simulate(kind=...)` computes one on the check's inputs.

    Declared as (message, variant), as every simulator's mistakes are: here the variant is one `kind`.
    """
    table = [
        (
            "is the log-sum-exp of the last key block only: the lse of a row is m + log(l) with the "
            "final running maximum m and running sum l over ALL key blocks, computed once after the "
            "key loop, not m + log(p.sum(-1)) of the block just visited.",
            "last-block",
        ),
        (
            "is the running maximum m without the log of the sum: the log-sum-exp of a row is "
            "m + log(l), with l the running sum of exp(s - m).",
            "max-only",
        ),
        (
            "mixes natural log and log2: m is a maximum of natural-log scores, so add log(l) "
            "(torch.log), not log2(l). The lse is in natural-log units: torch.logsumexp(scores, -1).",
            "log2",
        ),
        (
            "is in base 2 (it is the natural log-sum-exp times log2(e)): with exp2 and log2(e) folded "
            "into the scale, m and log2(l) are base-2 quantities; return (m + log2(l)) / log2(e), i.e. "
            "multiply by ln 2, so that lse = torch.logsumexp(scores, -1) in natural log.",
            "base2",
        ),
        (
            "is the log-sum-exp of the scores without the 1/√d scale: the lse is that of the scaled "
            "scores q @ kᵀ / √d that the softmax uses, m + log(l) with m their running maximum.",
            "unscaled",
        ),
        (
            "counts the keys the causal mask hides: the lse is that of the scores the softmax sees, "
            "so take it over the same masked scores (m + log(l) of the masked tile loop), not over "
            "every key.",
            "unmasked",
        ),
        (
            "writes each query block's lse to the rows counted from 0 within the block: store it at "
            "the block's absolute rows, lse[..., qs:qe].",
            "block-rows",
        ),
    ]
    table.append(
        (
            "is log(l) alone, without the running maximum: l sums exp(s - m), so the log-sum-exp of "
            "the scores is m + log(l), the maximum added back.",
            "log-sum-only",
        )
    )
    table.insert(
        5,
        (
            "is m + log(l) with m the maximum of the scores without the 1/√d scale, while l sums the "
            "exponentials of the scaled ones: take m from the scaled scores q @ kᵀ / √d too.",
            "unscaled-max",
        ),
    )
    return [Mistake(message, functools.partial(simulate, kind=kind)) for message, kind in table]
