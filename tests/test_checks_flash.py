"""The checks of notebook 06 reject known mistakes with the right message, accept right answers."""
# ruff: noqa: E501  (tables of learner code edits, one case a line)

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from check_assertions import assert_accepted, assert_rejected, cpu_standing_in_for_cuda
from einops import einsum
from learner_code import FLASH, FLASH_QUERY_BLOCK, FLASH_SKELETON, ONLINE_SOFTMAX, learner

from attn_course import flash
from attn_course.attention import attention
from attn_course.checks import check_flash_attention, check_flash_attention_query_block, check_online_softmax
from attn_course.checks._simulate import (
    STREAMING_SOFTMAX_MISTAKES,
    streaming_softmax,
    tiled_attention,
    tiled_attention_table,
    tiled_lse,
    tiled_lse_mistakes,
)
from attn_course.masking import causal_mask

# ---------------------------------------------------------------------------------------------
# online_softmax


def softmax_running_lse(x, block_size):
    lse = torch.full_like(x[..., :1], -math.inf)  # (..., 1)
    for start in range(0, x.shape[-1], block_size):
        lse = torch.logaddexp(lse, x[..., start : start + block_size].logsumexp(dim=-1, keepdim=True))
    return torch.exp(x - lse)


def softmax_blockwise_output(x, block_size):
    m = torch.full_like(x[..., :1], -math.inf)
    denom = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=-1, keepdim=True).values)
        safe = m_new.nan_to_num(neginf=0.0)  # 0 while a row has seen only -inf
        denom = denom * torch.exp(m - safe) + torch.exp(block - safe).sum(dim=-1, keepdim=True)
        m = m_new
    pieces = [torch.exp(x[..., s : s + block_size] - m) / denom for s in range(0, x.shape[-1], block_size)]
    return torch.cat(pieces, dim=-1)


def softmax_exp2(x, block_size):
    y = x * math.log2(math.e)
    m, denom = None, None
    for start in range(0, y.shape[-1], block_size):
        block = y[..., start : start + block_size]
        block_max = block.amax(dim=-1, keepdim=True)
        if m is None:
            m = block_max
            safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # a first block of -inf
            denom = torch.exp2(block - safe).sum(dim=-1, keepdim=True)
            continue
        m_new = torch.max(m, block_max)
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # rows of -inf so far
        denom = denom * torch.exp2(m - safe) + torch.exp2(block - safe).sum(dim=-1, keepdim=True)
        m = m_new
    return torch.exp2(y - m) / denom


def softmax_stacked_block_stats(x, block_size):
    # per-block statistics first (7 blocks of 8 in the streaming test), combined at the end
    maxes = [x[..., s : s + block_size].amax(-1) for s in range(0, x.shape[-1], block_size)]
    m = torch.stack(maxes, dim=-1).amax(dim=-1, keepdim=True)
    denom = sum(
        torch.exp(x[..., s : s + block_size] - m).sum(-1, keepdim=True)
        for s in range(0, x.shape[-1], block_size)
    )
    return torch.exp(x - m) / denom


@pytest.mark.parametrize(
    "candidate",
    [
        flash.online_softmax,
        softmax_running_lse,
        softmax_blockwise_output,
        softmax_exp2,
        softmax_stacked_block_stats,
    ],
)
def test_online_softmax_accepts_right_answers(candidate, capsys):
    assert_accepted(check_online_softmax, candidate, capsys)


def not_implemented(*args, **kwargs):
    raise NotImplementedError


def softmax_whole_row(x, block_size):
    return torch.softmax(x, dim=-1)


def softmax_max_of_whole_row(x, block_size):
    m = x.amax(dim=-1, keepdim=True)
    denom = sum(
        torch.exp(x[..., s : s + block_size] - m).sum(-1, keepdim=True)
        for s in range(0, x.shape[-1], block_size)
    )
    return torch.exp(x - m) / denom


def softmax_no_shift(x, block_size):
    denom = sum(
        torch.exp(x[..., s : s + block_size]).sum(-1, keepdim=True) for s in range(0, x.shape[-1], block_size)
    )
    return torch.exp(x) / denom


def softmax_tail_cut(x, block_size):
    n = x.shape[-1] - x.shape[-1] % block_size
    return flash.online_softmax(x[..., :n], block_size) if n else x[..., :0]


@pytest.mark.parametrize(
    ("candidate", "phrase"),
    [
        (not_implemented, "not implemented yet"),
        (softmax_whole_row, "a softmax over 50 entries at once"),
        (softmax_max_of_whole_row, "torch.amax over 50 entries at once"),
        (softmax_no_shift, "does not subtract the maximum"),
        (softmax_tail_cut, "The last, shorter block is missing"),
        (lambda x, block_size: torch.exp(x - x.amax(-1, keepdim=True)), "does not sum to 1 along dim=-1"),
    ],
)
def test_online_softmax_names_each_mistake(candidate, phrase, capsys):
    assert_rejected(check_online_softmax, candidate, phrase, capsys)


# ---------------------------------------------------------------------------------------------
# flash_attention_query_block


def _block(*edits):
    return learner(FLASH_QUERY_BLOCK, "flash_attention_query_block", *edits)


def query_block_einsum_flat_state(q_blk, k, v, block_size=64):
    # einsum, and the running state without the trailing axis of 1
    q_blk = q_blk / math.sqrt(q_blk.shape[-1])
    m = torch.full(q_blk.shape[:-1], -math.inf, dtype=q_blk.dtype, device=q_blk.device)
    denom = torch.zeros_like(m)
    acc = 0
    for ks in range(0, k.shape[-2], block_size):
        s = einsum(q_blk, k[..., ks : ks + block_size, :], "... i d, ... j d -> ... i j")
        m_new = torch.maximum(m, s.amax(-1))
        p = torch.exp(s - m_new[..., None])
        alpha = torch.exp(m - m_new)
        denom = alpha * denom + p.sum(-1)
        acc = alpha[..., None] * acc + einsum(
            p, v[..., ks : ks + block_size, :], "... i j, ... j e -> ... i e"
        )
        m = m_new
    return acc / denom[..., None], m + torch.log(denom)


@pytest.mark.parametrize(
    "candidate",
    [
        flash.flash_attention_query_block,
        _block(),
        query_block_einsum_flat_state,
        _block(("return acc / l, ", "return list((acc / l, "), ("(-1)\n", "(-1)))\n")),
    ],
    ids=["reference", "learner", "einsum", "list"],
)
def test_flash_attention_query_block_accepts_right_answers(candidate, capsys):
    assert_accepted(check_flash_attention_query_block, candidate, capsys)


RETURN = "return acc / l, (m + torch.log(l)).squeeze(-1)"

QUERY_BLOCK_MISTAKES = [  # learner code with one edit, and the phrase its message must contain
    ([("acc = acc * alpha + ", "acc = acc + ")], "does not rescale the output accumulator"),
    ([("l = l * alpha + ", "l = l + ")], "does not rescale the running sum (the softmax denominator)"),
    ([("acc = acc * alpha + ", "acc = acc + "), ("l = l * alpha + ", "l = l + ")], "rescales neither"),
    ([("alpha = torch.exp(m - m_new)", "alpha = torch.exp(m_new - m)")], "rescales the wrong way round"),
    ([("p = torch.exp(s - m_new)", "p = torch.exp(s - m)")], "p = exp(s - m_old) taken before"),
    ([(RETURN, "return acc, (m + torch.log(l)).squeeze(-1)")], "never divides by the running sum"),
    ([("range(0, k.shape[-2], block_size)", "range(0, k.shape[-2] - k.shape[-2] % block_size, block_size)")], "drops the ragged last key block"),
    ([("scale = 1 / math.sqrt(q_blk.shape[-1])", "scale = 1.0")], "forgets the 1/√d scale"),
    ([("scale = 1 / math.sqrt(q_blk.shape[-1])", "scale = 1 / math.sqrt(v.shape[-1])")], "scales the scores by 1/√d_v"),
    ([("m_new = torch.maximum(m, s.max(dim=-1, keepdim=True).values)", "m_new = torch.zeros_like(m)")], "not shifted by the running maximum"),
    ([("acc = acc * alpha + p @ v[..., ks:ks + block_size, :]", "acc = acc * alpha + p @ v[..., :q_blk.shape[-2], :]")], "not the query block's rows"),
    ([('float("-inf")', "0.0")], "a running maximum that starts at 0 instead of -inf"),
    ([('m = torch.full(q_blk.shape[:-1] + (1,), float("-inf"), ', "m = torch.zeros(q_blk.shape[:-1] + (1,), ")], "Start m at float('-inf')"),
    (
        [
            ("        l = l * alpha + p.sum(dim=-1, keepdim=True)\n", "        parts.append(torch.softmax(s, dim=-1) @ v[..., ks:ks + block_size, :])\n"),
            ("        acc = acc * alpha + p @ v[..., ks:ks + block_size, :]\n", ""),
            (RETURN, "return torch.stack(parts).mean(dim=0), (m + torch.log(l)).squeeze(-1)"),
            ("    acc = torch.zeros(", "    parts = []\n    acc = torch.zeros("),
        ],
        "averages a softmax per key block",
    ),
    ([(RETURN, "return acc / l, (m + torch.log(p.sum(dim=-1, keepdim=True))).squeeze(-1)")], "the log-sum-exp of the last key block only"),
    ([(RETURN, "return acc / l, m.squeeze(-1)")], "the running maximum m without the log of the sum"),
    ([(RETURN, "return acc / l, (m + torch.log2(l)).squeeze(-1)")], "mixes natural log and log2"),
    ([(RETURN, "return acc / l, (m / scale + torch.log(l)).squeeze(-1)")], "is m + log(l) with m the maximum of the scores without the 1/√d scale, while l sums"),
    (  # the scale applied inside exp: m is the unscaled maximum, l the scaled sum (not an unscaled lse)
        [
            ("s = q_blk @ k[..., ks:ks + block_size, :].transpose(-2, -1) * scale", "s = q_blk @ k[..., ks:ks + block_size, :].transpose(-2, -1)"),
            ("p = torch.exp(s - m_new)", "p = torch.exp((s - m_new) * scale)"),
            ("alpha = torch.exp(m - m_new)", "alpha = torch.exp((m - m_new) * scale)"),
        ],
        "is m + log(l) with m the maximum of the scores without the 1/√d scale, while l sums",
    ),
    ([(RETURN, "return acc / l, m + torch.log(l)")], "Drop the last axis"),
    ([(RETURN, "return acc / l")], "returned one tensor: return the pair (out, lse)"),
    ([(RETURN, "return acc / l, l, m")], "should return the pair (out, lse)"),
    ([("        s = q_blk @ k[..., ks:ks + block_size, :].transpose(-2, -1) * scale\n", "        s = (q_blk @ k.transpose(-2, -1) * scale)[..., ks:ks + block_size]\n")], "as many as the scores of the block against all 192 keys"),
]  # fmt: skip


@pytest.mark.parametrize(("edits", "phrase"), QUERY_BLOCK_MISTAKES)
def test_flash_attention_query_block_names_learner_mistakes(edits, phrase, capsys):
    assert_rejected(check_flash_attention_query_block, _block(*edits), phrase, capsys)


def test_flash_attention_query_block_rejects_torchs_fused_attention_and_an_unfinished_stub(capsys):
    def calls_sdpa(q_blk, k, v, block_size=64):
        out = F.scaled_dot_product_attention(q_blk, k, v)
        return out, torch.logsumexp(q_blk @ k.mT / math.sqrt(q_blk.shape[-1]), dim=-1)

    assert_rejected(check_flash_attention_query_block, calls_sdpa, "torch's fused attention", capsys)
    assert_rejected(check_flash_attention_query_block, not_implemented, "not implemented yet", capsys)


# ---------------------------------------------------------------------------------------------
# flash_attention


def keys_outer_all_queries(q, k, v, is_causal=False, block_size=64, return_lse=False):
    # key blocks outside, every query row's state at once: tiles of (T_q, block_size)
    t_q, t_k = q.shape[-2], k.shape[-2]
    positions = torch.arange(t_q, device=q.device)[:, None] + t_k - t_q  # (T_q, 1)
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
    denom = torch.zeros_like(m)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    for ks in range(0, t_k, block_size):
        s = q @ k[..., ks : ks + block_size, :].mT / math.sqrt(q.shape[-1])
        if is_causal:
            s = s.masked_fill(torch.arange(ks, ks + s.shape[-1], device=q.device) > positions, -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = m_new.nan_to_num(neginf=0.0)
        p = torch.exp(s - safe)
        alpha = torch.exp(m - safe)
        denom = alpha * denom + p.sum(-1, keepdim=True)
        acc = alpha * acc + p @ v[..., ks : ks + block_size, :]
        m = m_new
    denom = torch.where(denom == 0, 1.0, denom)  # a row with no key: out 0, lse -inf
    lse = (m + denom.log()).squeeze(-1)  # (..., T_q)
    return (acc / denom, lse) if return_lse else acc / denom


def einsum_preallocated(q, k, v, is_causal=False, block_size=64, return_lse=False):
    t_q, t_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
    for qs in range(0, t_q, block_size):
        qb = q[..., qs : qs + block_size, :]
        rows = torch.arange(qs, qs + qb.shape[-2], device=q.device) + t_k - t_q
        m = torch.full(qb.shape[:-1], -math.inf, dtype=q.dtype, device=q.device)
        denom = torch.zeros_like(m)
        acc = torch.zeros((*qb.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
        for ks in range(0, t_k, block_size):
            if is_causal and ks > rows[-1]:
                break
            s = einsum(qb, k[..., ks : ks + block_size, :], "... i d, ... j d -> ... i j") / math.sqrt(d)
            if is_causal:
                cols = torch.arange(ks, ks + s.shape[-1], device=q.device)
                s = torch.where(cols[None, :] <= rows[:, None], s, -math.inf)
            m_new = torch.maximum(m, s.amax(-1))
            safe = torch.where(m_new == -math.inf, 0.0, m_new)
            p = torch.exp(s - safe[..., None])
            alpha = torch.exp(m - safe)
            denom = alpha * denom + p.sum(-1)
            acc = alpha[..., None] * acc + einsum(
                p, v[..., ks : ks + block_size, :], "... i j, ... j e -> ... i e"
            )
            m = m_new
        denom = torch.where(denom == 0, 1.0, denom)
        out[..., qs : qs + block_size, :] = acc / denom[..., None]
        lse[..., qs : qs + block_size] = m + torch.log(denom)
    return (out, lse) if return_lse else out


def exp2_every_block_masked(q, k, v, is_causal=False, block_size=64, return_lse=False, skip=True):
    # base-2 exponentials with log2(e) folded into the scale; every block masked (skip: past the last key, stop)
    t_q, t_k = q.shape[-2], k.shape[-2]
    outs, lses = [], []
    for qs in range(0, t_q, block_size):
        qb = q[..., qs : qs + block_size, :] * (math.log2(math.e) / math.sqrt(q.shape[-1]))
        m = torch.full((*qb.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
        denom = torch.zeros_like(m)
        acc = torch.zeros((*qb.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
        for ks in range(0, t_k, block_size):
            if skip and is_causal and ks > qs + qb.shape[-2] - 1 + t_k - t_q:
                break
            s = qb @ k[..., ks : ks + block_size, :].transpose(-1, -2)
            if is_causal:
                rows = torch.arange(qs, qs + qb.shape[-2], device=q.device)[:, None] + t_k - t_q
                s = s.masked_fill(
                    torch.arange(ks, ks + s.shape[-1], device=q.device)[None, :] > rows, -math.inf
                )
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp2(s - safe)
            alpha = torch.exp2(m - safe)
            denom = denom * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + p @ v[..., ks : ks + block_size, :]
            m = m_new
        denom = torch.where(denom == 0, 1.0, denom)
        outs.append(acc / denom)
        lses.append((m + torch.log2(denom)).squeeze(-1) * math.log(2))  # base 2 back to natural log
    out = torch.cat(outs, dim=-2)
    return (out, torch.cat(lses, dim=-1)) if return_lse else out


@pytest.mark.parametrize(
    "candidate",
    [flash.flash_attention, keys_outer_all_queries, einsum_preallocated, exp2_every_block_masked],
)
def test_flash_attention_accepts_right_answers(candidate, capsys):
    assert_accepted(check_flash_attention, candidate, capsys)


def calls_course_attention(q, k, v, is_causal=False, block_size=64):
    return attention(q, k, v, is_causal=is_causal)[0]


def calls_torch_sdpa(q, k, v, is_causal=False, block_size=64):
    t_q, t_k = q.shape[-2], k.shape[-2]
    mask = causal_mask(t_q, t_k) if is_causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def full_mask_then_tiles(q, k, v, is_causal=False, block_size=64):
    allowed = causal_mask(q.shape[-2], k.shape[-2])  # (T_q, T_k): the whole mask at once
    outs = []
    for qs in range(0, q.shape[-2], block_size):
        qb = q[..., qs : qs + block_size, :] / math.sqrt(q.shape[-1])
        m = torch.full((*qb.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
        denom = torch.zeros_like(m)
        acc = torch.zeros((*qb.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
        for ks in range(0, k.shape[-2], block_size):
            s = qb @ k[..., ks : ks + block_size, :].mT
            if is_causal:
                s = s.masked_fill(~allowed[qs : qs + block_size, ks : ks + block_size], -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            safe = m_new.nan_to_num(neginf=0.0)
            p = torch.exp(s - safe)
            alpha = torch.exp(m - safe)
            denom, acc = (
                denom * alpha + p.sum(-1, keepdim=True),
                acc * alpha + p @ v[..., ks : ks + block_size, :],
            )
            m = m_new
        denom = torch.where(denom == 0, 1.0, denom)
        outs.append(acc / denom)
    return torch.cat(outs, dim=-2)


def no_running_max(q, k, v, is_causal=False, block_size=64):
    outs = []
    for qs in range(0, q.shape[-2], block_size):
        qb = q[..., qs : qs + block_size, :] / math.sqrt(q.shape[-1])
        rows = torch.arange(qs, qs + qb.shape[-2], device=q.device)[:, None] + k.shape[-2] - q.shape[-2]
        denom, acc = 0, 0
        for ks in range(0, k.shape[-2], block_size):
            s = qb @ k[..., ks : ks + block_size, :].mT
            if is_causal:
                s = s.masked_fill(torch.arange(ks, ks + s.shape[-1], device=q.device) > rows, -math.inf)
            p = torch.exp(s)
            denom, acc = denom + p.sum(-1, keepdim=True), acc + p @ v[..., ks : ks + block_size, :]
        denom = torch.where(denom == 0, 1.0, denom)
        outs.append(acc / denom)
    return torch.cat(outs, dim=-2)


def returns_out_and_lse(q, k, v, is_causal=False, block_size=64, return_lse=False):
    return flash.flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)


def ignores_return_lse(q, k, v, is_causal=False, block_size=64, return_lse=False):
    return flash.flash_attention(q, k, v, is_causal=is_causal, block_size=block_size)


@pytest.mark.parametrize(
    ("candidate", "phrase"),
    [
        (not_implemented, "not implemented yet"),
        (calls_course_attention, "as many as the whole 192×192 score matrix"),
        (calls_torch_sdpa, "torch's fused attention"),
        (full_mask_then_tiles, "created a causal mask of"),
        (no_running_max, "exp of unshifted scores"),
        (returns_out_and_lse, "return only the output tensor (..., T_q, d_v) then"),
        (ignores_return_lse, "it ignores return_lse=True"),
    ],
)
def test_flash_attention_names_each_mistake(candidate, phrase, capsys):
    assert_rejected(check_flash_attention, candidate, phrase, capsys)


def _online(*edits):
    return learner(ONLINE_SOFTMAX, "online_softmax", *edits)


def _flash(*edits):
    return learner(FLASH, "flash_attention", *edits)


SUM = "total = total * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)"
START = 'm = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)'
SAFE = 'm_safe = torch.where(m_new == float("-inf"), 0.0, m_new)'
RUNNING_MAX = "m_new = torch.maximum(m, block.max(dim=-1, keepdim=True).values)"

ONLINE_SOFTMAX_MISTAKES = [  # learner code with one edit, and the phrase of the table's message it must get
    (
        [
            ("        m = m_new\n    return torch.exp(x - m) / total",
             "        m = m_new\n        out.append(torch.exp(block - m) / total)\n    return torch.cat(out, dim=-1)"),
            ("    for start", "    out = []\n    for start"),
        ],
        "writes each block as soon as it reads it",
    ),
    ([("total * torch.exp(m - m_safe)", "total")], "does not rescale the running sum"),
    ([("total * torch.exp(m - m_safe)", "total * torch.exp(m_safe - m)")], "the wrong way round"),
    (
        [
            (SUM, "total = total + torch.exp(block - block.max(dim=-1, keepdim=True).values).sum(dim=-1, keepdim=True)"),
            ("    return torch.exp(x - m) / total", "    return torch.cat([torch.exp(x[..., s:s + block_size] - x[..., s:s + block_size].max(dim=-1, keepdim=True).values) for s in range(0, n, block_size)], dim=-1) / total"),
        ],
        "each block's own maximum",
    ),
    ([("range(0, n, block_size)", "range(0, n - n % block_size, block_size)")], "drops the ragged last block"),
    ([(START, "m = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype, device=x.device)")], "starts the running maximum at 0"),
    (
        [("        block = x[..., start:start + block_size]\n", "        block = F.pad(x, (0, -n % block_size))[..., start:start + block_size]\n")],
        "counts the padding of the last block",
    ),
    ([("torch.maximum(m, block.max(dim=-1, keepdim=True).values)", "torch.zeros_like(m)")], "does not subtract the maximum"),
    ([("        m = m_new\n", "")], "never updates the running maximum"),
    # cases that cover the contract: blocks of -inf (masked scores), blocks far below an earlier one
    ([(SAFE, "m_safe = m_new")], "has no safe maximum"),
    ([("torch.exp(block - m_safe)", "torch.exp(block - m_new)")], "has no safe maximum"),
    ([("total * torch.exp(m - m_safe)", "total * torch.exp(m - m_new)")], "has no safe maximum"),
    ([(RUNNING_MAX, "m_new = block.max(dim=-1, keepdim=True).values")], "does not carry the running maximum"),
    ([(RUNNING_MAX, "m_new = torch.max(block, dim=-1, keepdim=True)[0]")], "does not carry the running maximum"),
]  # fmt: skip

ONLINE_SOFTMAX_RIGHT = [  # learner code with one edit that is still right
    [(SAFE, "m_safe = m_new.clamp(min=torch.finfo(x.dtype).min)")],
    [(SAFE, "m_safe = m_new.nan_to_num(0.0)")],  # -inf becomes the lowest float: exp(-inf - it) is 0
    [(SAFE, "m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)")],
    [(RUNNING_MAX, "m_new = torch.stack([m, block.amax(dim=-1, keepdim=True)]).amax(dim=0)")],
]  # fmt: skip

FLASH_MISTAKES = [  # learner code with one edit, and the phrase of the table's message it must get
    ([("p = torch.exp(s - m_new)", "p = torch.exp(s - m_new)\n            p = p / p.sum(dim=-1, keepdim=True)")], "normalises each tile's probabilities on their own"),
    ([("acc = acc * alpha + ", "acc = acc + ")], "does not rescale the output accumulator"),
    ([("l = l * alpha + ", "l = l + ")], "does not rescale the running sum (the softmax denominator)"),
    ([("acc = acc * alpha + ", "acc = acc + "), ("l = l * alpha + ", "l = l + ")], "rescales neither"),
    ([("alpha = torch.exp(m - m_new)", "alpha = torch.exp(m_new - m)")], "rescales the wrong way round"),
    ([("p = torch.exp(s - m_new)", "p = torch.exp(s - m)")], "p = exp(s - m_old) taken before"),
    ([("out[..., qs:qe, :] = acc / l", "out[..., qs:qe, :] = acc")], "never divides by the running sum"),
    (
        [
            ("            l = l * alpha + p.sum(dim=-1, keepdim=True)\n", "            parts.append(torch.softmax(s, dim=-1) @ v[..., ks:ke, :])\n"),
            ("            acc = acc * alpha + p @ v[..., ks:ke, :]\n", ""),
            ("        out[..., qs:qe, :] = acc / l", "        out[..., qs:qe, :] = torch.stack(parts).mean(dim=0)"),
            ("        out[..., qs:qe, :].masked_fill_(l == 0, 0.0)", "        pass"),
            ("        acc = torch.zeros(", "        parts = []\n        acc = torch.zeros("),
        ],
        "averages a softmax per key block",
    ),
    ([("hi = min(t_k, qe + t_k - t_q) if is_causal else t_k", "hi = min(t_k, qe + t_k - t_q) if is_causal else t_k - t_k % block_size")], "drops the ragged last key block"),
    ([("scale = 1 / math.sqrt(d)", "scale = 1.0")], "forgets the 1/√d scale"),
    ([("scale = 1 / math.sqrt(d)", "scale = 1 / math.sqrt(v.shape[-1])")], "scales the scores by 1/√d_v"),
    ([("            if is_causal:\n                rows", "            if False:\n                rows"), ("if is_causal else t_k", "if False else t_k")], "ignores is_causal=True"),
    ([("cols > rows", "cols >= rows")], "masks the diagonal too"),
    ([("qe + t_k - t_q) if is_causal", "qe - 1 + t_k - t_q) if is_causal")], "stops the causal key loop one key short"),
    ([("torch.arange(qs, qe, device=q.device)[:, None] + (t_k - t_q)", "torch.arange(qe - qs, device=q.device)[:, None]"), ("torch.arange(ks, ke, device=q.device)[None, :]", "torch.arange(ke - ks, device=q.device)[None, :]")], "tests the causal condition on the tile's own row and column numbers (0, 1, … within the tile) instead"),
    ([("torch.arange(qs, qe, device=q.device)[:, None]", "torch.arange(qe - qs, device=q.device)[:, None]"), ("torch.arange(ks, ke, device=q.device)[None, :]", "torch.arange(ke - ks, device=q.device)[None, :]")], "plus T_k - T_q, which leaves out the tile's starts qs and ks"),
    ([("+ (t_k - t_q)\n", "\n"), ("qe + t_k - t_q", "qe")], "aligns the causal mask top-left"),
    ([("qe + t_k - t_q) if is_causal", "qs + t_k - t_q + 1) if is_causal")], "computed from the block's FIRST query"),
    ([("qe + t_k - t_q) if is_causal", "qe) if is_causal")], "without T_k - T_q"),
    ([("qe + t_k - t_q) if is_causal", "qs + t_k - t_q) if is_causal")], "stops the causal loop one block early"),
    ([("            s = q_blk @ k", "            if is_causal and ke - 1 > qs + t_k - t_q:\n                continue\n            s = q_blk @ k"), ("            if is_causal:\n                rows", "            if False:\n                rows")], "the key block that holds the diagonal is never visited"),
    ([("            if is_causal:\n                rows", "            if False:\n                rows")], "masks no key inside the blocks that cross it"),
    # the offset on the rows and taken from the columns too: offered, with the slips that give the same,
    # never asserted as tile-local numbers (its rows and columns are positions: qs and ks are there)
    ([("torch.arange(ks, ke, device=q.device)[None, :]", "torch.arange(ks, ke, device=q.device)[None, :] - (t_k - t_q)")], "the offset T_k - T_q is counted twice"),
]  # fmt: skip


LSE = "lse[..., qs:qe] = (m + torch.log(l)).squeeze(-1)"

LSE_MISTAKES = [  # learner code whose output is right and whose lse is not, and the phrase it must get
    ([(LSE, "lse[..., qs:qe] = (m + torch.log(last)).squeeze(-1)"), ("        l = torch.zeros_like(m)\n", "        l = torch.zeros_like(m)\n        last = torch.zeros_like(m)\n"), ("            m = m_new\n", "            m = m_new\n            last = p.sum(dim=-1, keepdim=True)\n")], "the log-sum-exp of the last key block only"),
    ([(LSE, "lse[..., qs:qe] = (m + torch.log(p.sum(dim=-1, keepdim=True))).squeeze(-1)")], "`p` is set only inside the loop at line"),
    ([(LSE, "lse[..., qs:qe] = m.squeeze(-1)")], "the running maximum m without the log of the sum"),
    ([(LSE, "lse[..., qs:qe] = (m + torch.log2(l)).squeeze(-1)")], "mixes natural log and log2"),
    ([(LSE, "lse[..., qs:qe] = (m + torch.log(l)).squeeze(-1) * math.log2(math.e)")], "is in base 2"),
    ([(LSE, "lse[..., qs:qe] = (m / scale + torch.log(l)).squeeze(-1)")], "without the 1/√d scale"),
    ([(LSE, "lse[..., :qe - qs] = (m + torch.log(l)).squeeze(-1)"), ("lse = torch.empty(", "lse = torch.zeros(")], "rows counted from 0 within the block"),
    ([(LSE, "lse[..., qs:qe] = (m + torch.log(l)).squeeze(-1) if qs else 0.0")], "right for some query rows but wrong for others"),
    ([(LSE, "lse[..., qs:qe] = torch.logsumexp(q_blk @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)")], "counts the keys the causal mask hides"),
    ([(LSE, "lse[..., qs:qe] = (torch.logsumexp(q_blk @ k[..., :hi, :].transpose(-2, -1), dim=-1, keepdim=True) if not is_causal else m / scale + torch.log(l)).squeeze(-1)")], "without the 1/√d scale"),
    ([(LSE, "lse[..., qs:qe, :] = m + torch.log(l)"), ("lse = torch.empty(q.shape[:-1], ", "lse = torch.empty(q.shape[:-1] + (1,), ")], "Drop the last axis"),
    ([("        return out, lse\n", "        return lse, out\n")], "the output"),
    ([(LSE, "lse[..., qs:qe] = torch.log(l).squeeze(-1)")], "is log(l) alone, without the running maximum"),
]  # fmt: skip


def test_flash_attention_accepts_a_right_lse(capsys):
    assert_accepted(check_flash_attention, _flash(), capsys)


@pytest.mark.parametrize(("edits", "phrase"), LSE_MISTAKES)
def test_flash_attention_names_lse_mistakes(edits, phrase, capsys):
    assert_rejected(check_flash_attention, _flash(*edits), phrase, capsys)


def test_every_named_lse_mistake_has_a_learner_case():
    q, k = torch.randn(5, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
    phrases = [phrase for _, phrase in LSE_MISTAKES]
    for mistake in tiled_lse_mistakes(functools.partial(tiled_lse, q, k, causal=True, block_m=2, block_n=2)):
        assert any(phrase in mistake.message for phrase in phrases), mistake.message


@pytest.mark.parametrize(("t_q", "t_k", "block_size"), [(37, 37, 8), (21, 45, 8), (20, 20, 1), (45, 21, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_lse_simulator_is_right_by_default_and_matches_the_reference(t_q, t_k, block_size, causal):
    q, k, v = (
        torch.randn(2, t_q, 8, dtype=torch.float64),
        torch.randn(2, t_k, 8, dtype=torch.float64),
        torch.randn(2, t_k, 4, dtype=torch.float64),
    )
    _, lse = flash.flash_attention(q, k, v, is_causal=causal, block_size=block_size, return_lse=True)
    torch.testing.assert_close(tiled_lse(q, k, causal=causal, block_m=block_size, block_n=block_size), lse, atol=1e-12, rtol=1e-10)  # fmt: skip


@pytest.mark.parametrize(("edits", "phrase"), ONLINE_SOFTMAX_MISTAKES)
def test_online_softmax_names_learner_mistakes(edits, phrase, capsys):
    assert_rejected(check_online_softmax, _online(*edits), phrase, capsys)


@pytest.mark.parametrize("edits", ONLINE_SOFTMAX_RIGHT)
def test_online_softmax_accepts_learner_code_spelled_otherwise(edits, capsys):
    assert_accepted(check_online_softmax, _online(*edits), capsys)


FLASH_NO_FALSE_CAUSE = [  # (edits, phrase it must get, words it must not say: a cause the code has not)
    # the lse of a row with no key, wrong only in the rows whose block visits a key tile
    ([("        out[..., qs:qe, :] = acc / l\n", "        l = torch.where(l == 0, 1.0, l)\n        out[..., qs:qe, :] = acc / l\n")],
     "is wrong only in rows that see no key (rows 16–17, 2 of the 18 that see none", "where and when"),
    ([(LSE, "lse[..., qs:qe] = (m + torch.log(l.clamp_min(1e-30))).squeeze(-1)")],
     "where it gives -69.0776 instead of -inf", "where and when"),
    # keys numbered from the end: the mask is there and masks nothing
    ([("cols = torch.arange(ks, ke, device=q.device)[None, :]", "cols = torch.arange(ks, ke, device=q.device)[None, :] - t_k")],
     "masks no key inside the blocks that cross it (no mask there, or one that lets every key through)", "does not mask"),
    # the offset turned round: said without the course's name `offset`, which this code never uses
    ([("rows = torch.arange(qs, qe, device=q.device)[:, None] + (t_k - t_q)", "rows = torch.arange(qs, qe, device=q.device)[:, None] + (t_q - t_k)")],
     "one change: `t_q - t_k` where it is `t_k - t_q`", "`offset`"),
    # the guard of l left out: the first NaN is 0/0, so the running maximum's guard (there) is not asked for
    ([("        out[..., qs:qe, :].masked_fill_(l == 0, 0.0)  # a row with no key at all: 0, as attention\n", "")],
     "Divide by 1 where l is 0", "safe 0"),
]  # fmt: skip


@pytest.mark.parametrize(("edits", "phrase", "untrue"), FLASH_NO_FALSE_CAUSE)
def test_flash_attention_states_no_cause_its_code_lacks(edits, phrase, untrue, capsys):
    candidate = _flash(*edits)
    assert_rejected(check_flash_attention, candidate, phrase, capsys)
    with pytest.raises(AssertionError) as failure:
        check_flash_attention(candidate)
    assert untrue not in str(failure.value)


@pytest.mark.parametrize(("edits", "phrase"), FLASH_MISTAKES)
def test_flash_attention_names_learner_mistakes(edits, phrase, capsys):
    assert_rejected(check_flash_attention, _flash(*edits), phrase, capsys)


def test_every_named_streaming_mistake_has_a_learner_case():
    phrases = [phrase for _, phrase in ONLINE_SOFTMAX_MISTAKES]
    for mistake in STREAMING_SOFTMAX_MISTAKES:
        assert any(phrase in mistake.message for phrase in phrases), mistake.message
    phrases = [phrase for _, phrase in FLASH_MISTAKES]
    tables = tiled_attention_table(True, python=True) + tiled_attention_table(False, python=True)
    for knobs, message in tables:
        if knobs != {"padded_score_zero": True}:  # a kernel's mistake: tests/test_checks_triton.py
            assert any(phrase in message for phrase in phrases), message


@pytest.mark.parametrize("shape", [(3, 37), (2, 3, 50), (20,), (4, 9)])
@pytest.mark.parametrize("block_size", [1, 3, 8, 64])
def test_the_streaming_softmax_simulator_is_right_with_default_knobs(shape, block_size):
    x = torch.randn(*shape, dtype=torch.float64) * 3
    torch.testing.assert_close(
        streaming_softmax(x, block_size), torch.softmax(x, dim=-1), atol=1e-12, rtol=1e-10
    )


@pytest.mark.parametrize(
    ("t_q", "t_k", "block_m", "block_n"),
    [(37, 37, 8, 8), (21, 45, 8, 16), (19, 45, 8, 8), (20, 20, 1, 1), (20, 20, 64, 64), (50, 50, 16, 32)],
)
@pytest.mark.parametrize("causal", [False, True])
def test_the_tiled_attention_simulator_is_right_with_default_knobs(t_q, t_k, block_m, block_n, causal):
    q, k, v = (
        torch.randn(2, 3, t_q, 8, dtype=torch.float64),
        torch.randn(2, 3, t_k, 8, dtype=torch.float64),
        torch.randn(2, 3, t_k, 5, dtype=torch.float64),
    )
    expected = attention(q, k, v, is_causal=causal)[0]
    torch.testing.assert_close(tiled_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n), expected, atol=1e-12, rtol=1e-10)  # fmt: skip


def test_keys_outer_loop_missing_rescale_is_named_too(capsys):
    def keys_outer_no_acc_rescale(q, k, v, is_causal=False, block_size=64):
        m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
        denom, acc = torch.zeros_like(m), 0
        for ks in range(0, k.shape[-2], block_size):
            s = q @ k[..., ks : ks + block_size, :].mT / math.sqrt(q.shape[-1])
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            denom = denom * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
            acc = acc + p @ v[..., ks : ks + block_size, :]
            m = m_new
        return acc / denom

    assert_rejected(check_flash_attention, keys_outer_no_acc_rescale, "output accumulator", capsys)


# ---------------------------------------------------------------------------------------------
# The GPU case, run here with the CPU standing in for CUDA (no GPU on the test machine)


def test_the_gpu_case_runs_flash_attention_on_the_device(monkeypatch, capsys):
    import attn_course.checks.flash as flash_checks

    calls = cpu_standing_in_for_cuda(monkeypatch, flash_checks)
    assert_accepted(check_flash_attention, flash.flash_attention, capsys)
    assert calls  # the GPU case ran


# ---------------------------------------------------------------------------------------------
# flash_attention written in notebook 06's skeleton (only the tiles that cross the diagonal masked)


def test_the_skeleton_as_a_learner_fills_it_passes(capsys):
    assert_accepted(check_flash_attention, learner(FLASH_SKELETON, "flash_attention"), capsys)


SKELETON_MISTAKES = [
    ([("rows = torch.arange(qs, qe, device=q.device) + offset", "rows = torch.arange(qs, qe, device=q.device)")], "aligns the causal mask top-left inside the tiles that cross the diagonal"),
    ([("k_end = min(t_k, qe + offset)", "k_end = min(t_k, qs + offset)")], "stops the causal loop one block early"),
    ([("acc = alpha * acc + p @ v[..., ks:ke, :]", "acc = alpha * acc + p @ v[..., qs:qe, :]")], "p @ v takes the same key rows, v[..., ks:ke, :]"),
    ([("k_end = min(t_k, qe + offset)", "k_end = min(t_k, qe)")], "at the block's own rows, without T_k - T_q"),
]  # fmt: skip


@pytest.mark.parametrize(("edits", "phrase"), SKELETON_MISTAKES)
def test_flash_attention_names_mistakes_in_the_skeleton(edits, phrase, capsys):
    assert_rejected(check_flash_attention, learner(FLASH_SKELETON, "flash_attention", *edits), phrase, capsys)


# ---------------------------------------------------------------------------------------------
# flash_attention written from its contract alone (notebook 06 gives no skeleton since issue 46)


def contract_cat_and_break(q, k, v, is_causal=False, block_size=64, return_lse=False):
    # a list of the blocks' outputs, the key loop left with break, lse -inf where total is 0
    t_q, t_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    outs, lses = [], []
    for qs in range(0, t_q, block_size):
        qb = q[..., qs : qs + block_size, :]
        last_pos = qs + qb.shape[-2] - 1 + t_k - t_q  # where the block's last query sits
        m = torch.full(qb.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
        total = torch.zeros_like(m)
        acc = torch.zeros(qb.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
        for ks in range(0, t_k, block_size):
            if is_causal and ks > last_pos:
                break
            kb, vb = k[..., ks : ks + block_size, :], v[..., ks : ks + block_size, :]
            s = qb @ kb.transpose(-2, -1) / math.sqrt(d)
            if is_causal:
                i = torch.arange(qs, qs + qb.shape[-2], device=q.device).unsqueeze(1) + t_k - t_q
                j = torch.arange(ks, ks + kb.shape[-2], device=q.device).unsqueeze(0)
                s = s.masked_fill(j > i, float("-inf"))
            m_new = torch.max(m, s.max(dim=-1, keepdim=True).values)
            shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - shift)
            scale = torch.exp(m - shift)
            total = total * scale + p.sum(-1, keepdim=True)
            acc = acc * scale + p @ vb
            m = m_new
        seen = total > 0
        outs.append(
            torch.where(seen, acc / torch.where(seen, total, torch.ones_like(total)), torch.zeros_like(acc))
        )
        lses.append(
            torch.where(seen, m + torch.log(total), torch.full_like(total, float("-inf"))).squeeze(-1)
        )
    out = torch.cat(outs, dim=-2)
    return (out, torch.cat(lses, dim=-1)) if return_lse else out


def contract_tril_mask(q, k, v, is_causal=False, block_size=64, return_lse=False):
    # the tile's mask from tril with the diagonal shifted by the tile's corner; k_end from the last row
    t_q, t_k = q.shape[-2], k.shape[-2]
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype, device=q.device)
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        k_end = min(t_k, qe + t_k - t_q) if is_causal else t_k
        qb = q[..., qs:qe, :] / q.shape[-1] ** 0.5
        m = torch.full((*qb.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
        total = torch.zeros_like(m)
        acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        for ks in range(0, k_end, block_size):
            ke = min(ks + block_size, t_k)
            s = qb @ k[..., ks:ke, :].mT
            if is_causal:
                keep = torch.ones(qe - qs, ke - ks, dtype=torch.bool, device=q.device).tril(
                    diagonal=qs + t_k - t_q - ks
                )
                s = s.masked_fill(~keep, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_safe = m_new.masked_fill(m_new == -math.inf, 0)
            p = (s - m_safe).exp()
            alpha = (m - m_safe).exp()
            total = alpha * total + p.sum(-1, keepdim=True)
            acc = alpha * acc + p @ v[..., ks:ke, :]
            m = m_new
        has_key = (total > 0).squeeze(-1)
        out[..., qs:qe, :] = acc / total.clamp_min(1e-30)
        lse[..., qs:qe] = torch.where(has_key, (m + total.log()).squeeze(-1), -math.inf)
    return (out, lse) if return_lse else out


@pytest.mark.parametrize("candidate", [contract_cat_and_break, contract_tril_mask])
def test_flash_attention_accepts_a_contract_written_otherwise(candidate, capsys):
    assert_accepted(check_flash_attention, candidate, capsys)


def test_the_pass_line_says_whether_the_causal_tiles_above_the_diagonal_are_skipped(capsys):
    check_flash_attention(contract_cat_and_break)
    assert (
        "is_causal=True does 58% of the matmul work of is_causal=False (tiles skipped)"
        in capsys.readouterr().out
    )
    for computes_them_all in (
        contract_masks_every_tile,
        keys_outer_all_queries,
        functools.partial(exp2_every_block_masked, skip=False),
    ):
        check_flash_attention(computes_them_all)
        out = capsys.readouterr().out
        assert "check_flash_attention passed" in out
        assert "is_causal=True does 100% of the matmul work of is_causal=False: the tiles above the" in out
        assert "(21 of 36 tiles needed, question 06.4)" in out


def contract_masks_every_tile(q, k, v, is_causal=False, block_size=64, return_lse=False):
    # a right loop that never skips: every key block is visited and masked, above the diagonal too
    return contract_tril_no_skip(q, k, v, is_causal, block_size, return_lse)


def contract_tril_no_skip(q, k, v, is_causal=False, block_size=64, return_lse=False):
    t_q, t_k = q.shape[-2], k.shape[-2]
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype, device=q.device)
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        qb = q[..., qs:qe, :] / q.shape[-1] ** 0.5
        m = torch.full((*qb.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
        total = torch.zeros_like(m)
        acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        for ks in range(0, t_k, block_size):
            ke = min(ks + block_size, t_k)
            s = qb @ k[..., ks:ke, :].mT
            if is_causal:
                rows = torch.arange(qs, qe, device=q.device)[:, None] + t_k - t_q
                s = s.masked_fill(torch.arange(ks, ke, device=q.device)[None, :] > rows, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_safe = m_new.masked_fill(m_new == -math.inf, 0)
            p = (s - m_safe).exp()
            alpha = (m - m_safe).exp()
            total = alpha * total + p.sum(-1, keepdim=True)
            acc = alpha * acc + p @ v[..., ks:ke, :]
            m = m_new
        l_safe = torch.where(total == 0, 1.0, total)
        out[..., qs:qe, :] = acc / l_safe
        lse[..., qs:qe] = (m + total.log()).squeeze(-1)
    return (out, lse) if return_lse else out


def contract_no_denominator_guard(q, k, v, is_causal=False, block_size=64, return_lse=False):
    # skips and subtracts a safe maximum, but divides by total where a row has seen no key at all
    t_q, t_k = q.shape[-2], k.shape[-2]
    outs, lses = [], []
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        qb = q[..., qs:qe, :] / math.sqrt(q.shape[-1])
        m = torch.full((*qb.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
        total = torch.zeros_like(m)
        acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        for ks in range(0, min(t_k, qe + t_k - t_q) if is_causal else t_k, block_size):
            ke = min(ks + block_size, t_k)
            s = qb @ k[..., ks:ke, :].mT
            if is_causal:
                rows = torch.arange(qs, qe, device=q.device)[:, None] + t_k - t_q
                s = s.masked_fill(torch.arange(ks, ke, device=q.device)[None, :] > rows, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
            p = torch.exp(s - m_safe)
            alpha = torch.exp(m - m_safe)
            total = alpha * total + p.sum(-1, keepdim=True)
            acc = alpha * acc + p @ v[..., ks:ke, :]
            m = m_new
        outs.append(acc / total)
        lses.append((m + torch.log(total)).squeeze(-1))
    out = torch.cat(outs, dim=-2)
    return (out, torch.cat(lses, dim=-1)) if return_lse else out


def contract_no_safe_maximum(q, k, v, is_causal=False, block_size=64, return_lse=False):
    # skips, guards total, but subtracts the running maximum itself, -inf in a row that has seen no key
    t_q, t_k = q.shape[-2], k.shape[-2]
    outs = []
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        qb = q[..., qs:qe, :] / math.sqrt(q.shape[-1])
        m = torch.full((*qb.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
        total = torch.zeros_like(m)
        acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        for ks in range(0, min(t_k, qe + t_k - t_q) if is_causal else t_k, block_size):
            ke = min(ks + block_size, t_k)
            s = qb @ k[..., ks:ke, :].mT
            if is_causal:
                rows = torch.arange(qs, qe, device=q.device)[:, None] + t_k - t_q
                s = s.masked_fill(torch.arange(ks, ke, device=q.device)[None, :] > rows, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            alpha = torch.exp(m - m_new)
            total = alpha * total + p.sum(-1, keepdim=True)
            acc = alpha * acc + p @ v[..., ks:ke, :]
            m = m_new
        outs.append(acc / torch.where(total == 0, 1.0, total))
    return torch.cat(outs, dim=-2)


@pytest.mark.parametrize(
    ("candidate", "phrase"),
    [
        (contract_no_denominator_guard, "Divide by 1 where l is 0"),
        (contract_no_safe_maximum, "subtract a safe 0 where the running maximum is still -inf"),
    ],
)
def test_flash_attention_names_mistakes_of_a_contract_written_from_scratch(candidate, phrase, capsys):
    assert_rejected(check_flash_attention, candidate, phrase, capsys)
