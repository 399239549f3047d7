"""Notebook 06's checks driven by each exercise's contract (issue 44): learner-written programs that are right
on every hand-picked case but wrong on inputs the exercise's text allows (a view, float64, a GPU), and right
programs in other styles that the generated cases must accept.

Every wrong program here passed the checks before their contracts were generated (checked once by hand
against the commit before, 44ff56e); each is one slip a learner makes.
"""

from __future__ import annotations

import math

import pytest
import torch
from check_assertions import assert_accepted, assert_rejected
from einops import rearrange
from learner_code import FLASH, FLASH_QUERY_BLOCK, ONLINE_SOFTMAX, learner

from attn_course.checks import (
    check_flash_attention,
    check_flash_attention_query_block,
    check_online_softmax,
)
from attn_course.checks._contracts import VIEW_KINDS, contract_cases
from attn_course.checks.flash import ATTENTION_CONTRACT, QUERY_BLOCK_CONTRACT, SOFTMAX_CONTRACT

pytestmark = pytest.mark.slow

N = "    n = x.shape[-1]\n"
ON_META = "with its inputs on another device than the CPU (PyTorch's meta device"


# ---------------------------------------------------------------------------------------------
# online_softmax


def softmax_rows_flattened_with_view(x, block_size):
    # one row at a time: the batch axes flattened into one, then back
    rows = x.view(-1, x.shape[-1])
    out = torch.empty_like(rows)
    for r in range(rows.shape[0]):
        m, total = -math.inf, torch.zeros((), dtype=x.dtype, device=x.device)
        for start in range(0, rows.shape[1], block_size):
            block = rows[r, start : start + block_size]
            m_new = max(m, block.max().item())
            safe = 0.0 if m_new == -math.inf else m_new
            total = total * math.exp(m - safe) + torch.exp(block - safe).sum()
            m = m_new
        out[r] = torch.exp(rows[r] - m) / total
    return out.view(x.shape)


SOFTMAX_WRONG = [  # (the learner's function, what the message must say)
    (
        learner(
            ONLINE_SOFTMAX,
            "online_softmax",
            ('float("-inf"), dtype=x.dtype, device=x.device)', 'float("-inf"), dtype=x.dtype)'),
            ("(1,), dtype=x.dtype, device=x.device)", "(1,), dtype=x.dtype)"),
        ),
        f"raised RuntimeError: Tensor on device meta is not on the expected device cpu!, {ON_META}",
    ),
    (
        softmax_rows_flattened_with_view,
        "`x` passed as a transposed view, (B, N, H).transpose(1, 2)",
    ),
    (
        learner(ONLINE_SOFTMAX, "online_softmax", (N, f"{N}    x = x.float()\n")),
        "has dtype float32 for float64 inputs: it must have the inputs' dtype",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("candidate", "phrase"), SOFTMAX_WRONG)
def test_online_softmax_refuses_what_only_its_contract_tries(candidate, phrase, capsys):
    assert_rejected(check_online_softmax, candidate, phrase, capsys)


def softmax_rows_flattened_with_reshape(x, block_size):
    # as above with reshape, which copies a view it cannot flatten: right for every layout
    rows = x.reshape(-1, x.shape[-1])
    m = torch.full_like(rows[:, :1], -math.inf)
    total = torch.zeros_like(m)
    for start in range(0, rows.shape[1], block_size):
        block = rows[:, start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=1, keepdim=True))
        safe = m_new.nan_to_num(neginf=0.0)
        total = total * torch.exp(m - safe) + torch.exp(block - safe).sum(dim=1, keepdim=True)
        m = m_new
    return (torch.exp(rows - m) / total).reshape(x.shape)


def softmax_in_float64(x, block_size):
    # the running statistics in float64, the result cast back to x's dtype
    y = x.double()
    m = y.new_full((*y.shape[:-1], 1), -math.inf)
    total = y.new_zeros((*y.shape[:-1], 1))
    for start in range(0, y.shape[-1], block_size):
        block = y[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), 0.0, m_new)
        total = total * torch.exp(m - safe) + torch.exp(block - safe).sum(dim=-1, keepdim=True)
        m = m_new
    return (torch.exp(y - m) / total).to(x.dtype)


def softmax_rearranged(x, block_size):
    # einops: the blocks of a padded row as an axis of their own, reduced one at a time
    n = x.shape[-1]
    pad = -n % block_size
    padded = torch.nn.functional.pad(x, (0, pad), value=-math.inf)  # (..., n + pad)
    blocks = rearrange(padded, "... (nb b) -> nb ... b", b=block_size)  # (nb, ..., b)
    m = torch.full_like(x[..., :1], -math.inf)
    total = torch.zeros_like(m)
    for block in blocks:
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        safe = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
        total = total * torch.exp(m - safe) + torch.exp(block - safe).sum(dim=-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / total


@pytest.mark.parametrize(
    "candidate", [softmax_rows_flattened_with_reshape, softmax_in_float64, softmax_rearranged]
)
def test_online_softmax_accepts_right_answers_on_every_contract_case(candidate, capsys):
    assert_accepted(check_online_softmax, candidate, capsys)


# ---------------------------------------------------------------------------------------------
# flash_attention_query_block: the state is given, made with q_blk's dtype and device; a learner who
# types it again without the device is right on the CPU only


BLOCK_STATE = 'm = torch.full(q_blk.shape[:-1] + (1,), float("-inf"), dtype=q_blk.dtype, device=q_blk.device)'


def test_flash_attention_query_block_refuses_a_state_made_on_the_default_device(capsys):
    candidate = learner(
        FLASH_QUERY_BLOCK,
        "flash_attention_query_block",
        (BLOCK_STATE, BLOCK_STATE.replace(", device=q_blk.device", "")),
    )
    phrase = "the first tensor your code makes off that device comes from `torch.full(…)`"
    assert_rejected(check_flash_attention_query_block, candidate, phrase, capsys)


def query_block_flattened(q_blk, k, v, block_size=64):
    # the batch axes flattened with reshape (views copied), einsum for both products
    batch = q_blk.shape[:-2]
    q3, k3, v3 = (x.reshape(-1, *x.shape[-2:]) for x in (q_blk, k, v))  # (n, T, width) each
    q3 = q3 / math.sqrt(q3.shape[-1])
    m = torch.full((*q3.shape[:-1], 1), -math.inf, dtype=q3.dtype, device=q3.device)
    denom = torch.zeros_like(m)
    acc = torch.zeros((*q3.shape[:-1], v3.shape[-1]), dtype=q3.dtype, device=q3.device)
    for ks in range(0, k3.shape[-2], block_size):
        s = torch.einsum("nqd,nkd->nqk", q3, k3[:, ks : ks + block_size])
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        denom = alpha * denom + p.sum(dim=-1, keepdim=True)
        acc = alpha * acc + torch.einsum("nqk,nkd->nqd", p, v3[:, ks : ks + block_size])
        m = m_new
    out, lse = acc / denom, (m + torch.log(denom)).squeeze(-1)
    return out.reshape(*batch, *out.shape[-2:]), lse.reshape(*batch, lse.shape[-1])


QUERY_BLOCK_RIGHT = [
    learner(FLASH_QUERY_BLOCK, "flash_attention_query_block"),
    learner(  # the scale folded into q once, mT for the transpose
        FLASH_QUERY_BLOCK,
        "flash_attention_query_block",
        ("k[..., ks:ks + block_size, :].transpose(-2, -1) * scale", "k[..., ks:ks + block_size, :].mT"),
        ("    for ks in", "    q_blk = q_blk * scale\n    for ks in"),
    ),
    query_block_flattened,
]


@pytest.mark.parametrize("candidate", QUERY_BLOCK_RIGHT)
def test_flash_attention_query_block_accepts_right_answers_on_every_contract_case(candidate, capsys):
    assert_accepted(check_flash_attention_query_block, candidate, capsys)


# ---------------------------------------------------------------------------------------------
# flash_attention

OUT = "out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)"
LSE = "lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)"
ZEROS_OUT = "out = torch.zeros(*q.shape[:-1], v.shape[-1], device=q.device)"
STATE = 'm = torch.full(q_blk.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)'


def flash_flattened_with_view(q, k, v, is_causal=False, block_size=64, return_lse=False):
    # the batch axes flattened into one with view, the tiled loops over (n, T, d), then back
    batch = q.shape[:-2]
    q3 = q.view(-1, q.shape[-2], q.shape[-1])
    k3 = k.view(-1, k.shape[-2], k.shape[-1])
    v3 = v.view(-1, v.shape[-2], v.shape[-1])
    out, lse = _flat_tiles(q3, k3, v3, is_causal, block_size)
    out, lse = out.view(*batch, *out.shape[1:]), lse.view(*batch, lse.shape[-1])
    return (out, lse) if return_lse else out


def _flat_tiles(q, k, v, is_causal, block_size):
    """The learner's tiled loops over (n, T, width) tensors: (out, lse)."""
    t_q, t_k, d = q.shape[1], k.shape[1], q.shape[2]
    out = q.new_zeros(q.shape[0], t_q, v.shape[2])
    lse = q.new_zeros(q.shape[0], t_q)
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        m = q.new_full((q.shape[0], qe - qs, 1), -math.inf)
        total = torch.zeros_like(m)
        acc = q.new_zeros(q.shape[0], qe - qs, v.shape[2])
        hi = min(t_k, qe + t_k - t_q) if is_causal else t_k
        for ks in range(0, max(hi, 0), block_size):
            ke = min(ks + block_size, t_k)
            s = torch.bmm(q[:, qs:qe], k[:, ks:ke].transpose(1, 2)) / math.sqrt(d)
            if is_causal:
                rows = torch.arange(qs, qe, device=q.device)[:, None] + (t_k - t_q)
                s = s.masked_fill(torch.arange(ks, ke, device=q.device) > rows, -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            safe = torch.where(m_new == -math.inf, 0.0, m_new)
            p = torch.exp(s - safe)
            alpha = torch.exp(m - safe)
            total = total * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + torch.bmm(p, v[:, ks:ke])
            m = m_new
        out[:, qs:qe] = acc / torch.where(total == 0, 1.0, total)
        lse[:, qs:qe] = (m + torch.log(total)).squeeze(-1)
    return out, lse


FLASH_WRONG = [  # (the learner's function, what the message must say)
    (
        learner(FLASH, "flash_attention", (OUT, ZEROS_OUT)),
        "Your `out` has dtype float32 for float64 inputs: it must have the inputs' dtype",
    ),
    (
        learner(FLASH, "flash_attention", (LSE, "lse = torch.empty(q.shape[:-1], device=q.device)")),
        "Your `lse` has dtype float32 for float64 inputs: it must have the inputs' dtype",
    ),
    (
        learner(FLASH, "flash_attention", (STATE, STATE.replace(", device=q.device", ""))),
        "the first tensor your code makes off that device comes from `torch.full(…)`",
    ),
    (
        flash_flattened_with_view,
        "`q` passed as a transposed view, (B, T_q, H, d).transpose(1, 2)",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("candidate", "phrase"), FLASH_WRONG)
def test_flash_attention_refuses_what_only_its_contract_tries(candidate, phrase, capsys):
    assert_rejected(check_flash_attention, candidate, phrase, capsys)


def flash_flattened_with_reshape(q, k, v, is_causal=False, block_size=64, return_lse=False):
    # as above with reshape: right for every layout
    batch = q.shape[:-2]
    q3, k3, v3 = (x.reshape(-1, *x.shape[-2:]) for x in (q, k, v))  # (n, T, width) each
    out, lse = _flat_tiles(q3, k3, v3, is_causal, block_size)
    out, lse = out.reshape(*batch, *out.shape[1:]), lse.reshape(*batch, lse.shape[-1])
    return (out, lse) if return_lse else out


def flash_in_float64(q, k, v, is_causal=False, block_size=64, return_lse=False):
    # the whole tiled pass in float64, both results cast back to the inputs' dtype
    out, lse = flash_flattened_with_reshape(
        q.double(), k.double(), v.double(), is_causal, block_size, return_lse=True
    )
    out, lse = out.to(q.dtype), lse.to(q.dtype)
    return (out, lse) if return_lse else out


FLASH_RIGHT = [
    learner(FLASH, "flash_attention"),
    learner(FLASH, "flash_attention", (OUT, "out = q.new_empty(*q.shape[:-1], v.shape[-1])")),
    flash_flattened_with_reshape,
    flash_in_float64,
]


@pytest.mark.parametrize("candidate", FLASH_RIGHT)
def test_flash_attention_accepts_right_answers_on_every_contract_case(candidate, capsys):
    assert_accepted(check_flash_attention, candidate, capsys)


# ---------------------------------------------------------------------------------------------
# the contracts themselves


@pytest.mark.parametrize(
    ("contract", "blocked"),
    [(SOFTMAX_CONTRACT, "N"), (QUERY_BLOCK_CONTRACT, "T_k"), (ATTENTION_CONTRACT, "T_q")],
)
def test_each_contract_tries_sizes_below_at_and_above_a_block_two_batch_axes_float64_and_views(
    contract, blocked
):
    cases = contract_cases(contract)
    assert {case.size[blocked] for case in cases} >= {7, 8, 9}  # blocks of 8
    assert {"B", "H"} <= {name for name, _ in cases[0].sizes}
    assert torch.float64 in {case.dtype for case in cases}
    viewed = {case.view for case in cases if case.view is not None}
    assert viewed == {(arg.name, kind) for arg in contract.args for kind in VIEW_KINDS}


def test_flash_attention_contract_has_rows_that_see_no_key():
    sizes = [case.size for case in contract_cases(ATTENTION_CONTRACT)]
    assert any(size["T_q"] > size["T_k"] for size in sizes)
