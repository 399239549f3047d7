"""Learner-like Triton solutions of notebook 08, and variants of them with one mistake each.

A variant is its template's source with some lines replaced, written to a module file and
imported, because Triton reads a kernel's source from its file. Each replacement must match
exactly once, so that a template edit cannot silently turn a "wrong" variant into the right one.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import Any

ADD = """
import torch
import triton
import triton.language as tl

BLOCK = 64


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def triton_add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    add_kernel[grid](x, y, out, n, BLOCK=BLOCK)
    return out
"""

SOFTMAX = """
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = float("-inf")
    total = 0.0
    for start in range(0, n_cols, BLOCK):  # pass 1
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=float("-inf"))  # load 1
        m_new = tl.maximum(m, tl.max(x, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        scale = tl.exp(m - m_safe)
        total = total * scale + tl.sum(tl.exp(x - m_safe), 0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(out_ptr + row * out_stride + cols, tl.exp(x - m) / total, mask=cols < n_cols)


def triton_softmax(x, block_size=64):
    x = x if x.stride(1) == 1 else x.contiguous()  # a row's elements next to each other
    out = torch.empty_like(x)
    n_rows, n_cols = x.shape
    grid = (n_rows,)
    softmax_kernel[grid](x, out, n_cols, x.stride(0), out.stride(0), BLOCK=block_size)
    return out
"""

FLASH = """
import math

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N = 32, 32


@triton.jit
def attention_kernel(
    Q, K, V, O, L, sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som, H, T_q, T_k, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_ptrs = Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < T_q, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    offset = T_k - T_q
    hi = T_k
    if IS_CAUSAL:
        hi = tl.minimum(T_k, (pid_m + 1) * BLOCK_M + offset)
    for start in range(0, hi, BLOCK_N):
        cols = start + offs_n
        k_ptrs = K + b * skb + h * skh + cols[:, None] * skn + offs_d[None, :]
        k = tl.load(k_ptrs, mask=cols[:, None] < T_k, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(cols[None, :] < T_k, s, float("-inf"))
        if IS_CAUSAL:
            s = tl.where(cols[None, :] <= offs_m[:, None] + offset, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, 1)
        v_ptrs = V + b * svb + h * svh + cols[:, None] * svn + offs_d[None, :]
        v = tl.load(v_ptrs, mask=cols[:, None] < T_k, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    l_safe = tl.where(l == 0.0, 1.0, l)  # a row that saw no key: output 0
    out = acc / l_safe[:, None]
    o_ptrs = O + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < T_q)
    lse = m + tl.log(l)
    tl.store(L + pid_bh * T_q + offs_m, lse, mask=offs_m < T_q)


def triton_flash_attention(q, k, v, is_causal=False, return_lse=False):
    B, H, T_q, D = q.shape
    T_k = k.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T_q, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(T_q, BLOCK_M), B * H)
    attention_kernel[grid](
        q, k, v, o, lse, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
        H, T_q, T_k, 1 / math.sqrt(D),
        D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, IS_CAUSAL=is_causal,
    )
    return (o, lse) if return_lse else o
"""

FAST = """
import math

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N = 32, 32
LOG2E = 1.4426950408889634


@triton.jit
def attend(acc, m, l, q, K, V, base_k, base_v, skn, svn, offs_m, offs_n, offs_d, start, stop, T_k, offset,
           qk_scale, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr):
    for start_n in range(start, stop, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + base_k + cols[:, None] * skn + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            keep = cols[None, :] < T_k
            if IS_CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + offset)
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, 1)
        v = tl.load(V + base_v + cols[:, None] * svn + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    return acc, m, l


@triton.jit
def fast_kernel(
    Q, K, V, O, L, sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som, H, T_q, T_k, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_ptrs = Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < T_q, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    offset = T_k - T_q
    qk_scale = scale * LOG2E
    hi = T_k
    full = T_k
    if IS_CAUSAL:
        hi = tl.minimum(T_k, (pid_m + 1) * BLOCK_M + offset)
        full = tl.minimum(T_k, tl.maximum(0, pid_m * BLOCK_M + offset + 1))
    full = full // BLOCK_N * BLOCK_N
    base_k = b * skb + h * skh
    base_v = b * svb + h * svh
    acc, m, l = attend(acc, m, l, q, K, V, base_k, base_v, skn, svn, offs_m, offs_n, offs_d, 0, full, T_k,
                       offset, qk_scale, MASKED=False, IS_CAUSAL=IS_CAUSAL, BLOCK_N=BLOCK_N)
    acc, m, l = attend(acc, m, l, q, K, V, base_k, base_v, skn, svn, offs_m, offs_n, offs_d, full, hi, T_k,
                       offset, qk_scale, MASKED=True, IS_CAUSAL=IS_CAUSAL, BLOCK_N=BLOCK_N)
    l_safe = tl.where(l == 0.0, 1.0, l)
    out = acc / l_safe[:, None]
    tl.store(O + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=offs_m[:, None] < T_q)
    lse = (m + tl.log2(l_safe)) * 0.6931471805599453
    tl.store(L + pid_bh * T_q + offs_m, lse, mask=offs_m < T_q)


def fast_flash_attention(q, k, v, is_causal=False, return_lse=False):
    B, H, T_q, D = q.shape
    T_k = k.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T_q, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(T_q, BLOCK_M), B * H)
    fast_kernel[grid](
        q, k, v, o, lse, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
        H, T_q, T_k, 1 / math.sqrt(D),
        D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, IS_CAUSAL=is_causal,
    )
    return (o, lse) if return_lse else o
"""

SCORES = """
import math

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N = 16, 32


@triton.jit
def scores_kernel(
    Q, K, S, sqb, sqh, sqm, skb, skh, skn, ssb, ssh, ssm, H, T_q, T_k, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_bh = tl.program_id(2)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_ptrs = Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :]
    k_ptrs = K + b * skb + h * skh + offs_n[:, None] * skn + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < T_q, other=0.0)
    k = tl.load(k_ptrs, mask=offs_n[:, None] < T_k, other=0.0)
    s = tl.dot(q, tl.trans(k)) * scale
    s_ptrs = S + b * ssb + h * ssh + offs_m[:, None] * ssm + offs_n[None, :]
    tl.store(s_ptrs, s, mask=(offs_m[:, None] < T_q) & (offs_n[None, :] < T_k))


def triton_scores(q, k):
    B, H, T_q, D = q.shape
    T_k = k.shape[2]
    s = torch.empty(B, H, T_q, T_k, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(T_q, BLOCK_M), triton.cdiv(T_k, BLOCK_N), B * H)
    scores_kernel[grid](
        q, k, s, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        s.stride(0), s.stride(1), s.stride(2), H, T_q, T_k, 1 / math.sqrt(D),
        D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )
    return s
"""

_counter = itertools.count()


def variant(template: str, folder: Path, function: str, *pairs: tuple[str, str]) -> Any:
    """`function` from `template` with each (old, new) text replacement applied, imported from a file."""
    source = template
    for old, new in pairs:
        assert source.count(old) == 1, f"{old!r} should occur once in the template"
        source = source.replace(old, new)
    path = folder / f"triton_variant_{next(_counter)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, function)
