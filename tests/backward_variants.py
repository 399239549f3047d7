"""Learner-like solutions of notebook 09, as source text, for the checks' tests.

`FLASH_BACKWARD` is a tiled backward written as a learner would (key blocks outside, query blocks
inside); `TRITON_BACKWARD` the two kernels and the wrapper of the solution notebook's Triton
Exercises 5a (the dK/dV kernel, its set-up and stores given), 5b (the dQ kernel) and 5c (the
wrapper). A wrong variant is the template with one or two lines replaced, imported from a file
with `triton_variants.variant` (Triton reads a kernel's source from its file), so that each
mistake is a text edit of a right answer, never the checker's own simulator.
"""

from __future__ import annotations

FLASH_BACKWARD = """
import math

import torch


def flash_attention_backward(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    T_q, d = q.shape[-2], q.shape[-1]
    T_k = k.shape[-2]
    scale = 1 / math.sqrt(d)
    offset = T_k - T_q
    D = (grad_out * out).sum(dim=-1, keepdim=True)
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    for ks in range(0, T_k, block_size):
        ke = min(ks + block_size, T_k)
        kb = k[..., ks:ke, :]
        vb = v[..., ks:ke, :]
        dk_acc = torch.zeros_like(kb)
        dv_acc = torch.zeros_like(vb)
        for qs in range(0, T_q, block_size):
            qe = min(qs + block_size, T_q)
            if is_causal and ks > qe - 1 + offset:
                continue
            qb = q[..., qs:qe, :]
            dob = grad_out[..., qs:qe, :]
            s = qb @ kb.transpose(-1, -2) * scale
            if is_causal:
                rows = torch.arange(qs, qe, device=q.device)[:, None] + offset
                cols = torch.arange(ks, ke, device=q.device)[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            p = torch.exp(s - lse[..., qs:qe, None])
            dv_acc += p.transpose(-1, -2) @ dob
            dp = dob @ vb.transpose(-1, -2)
            ds = p * (dp - D[..., qs:qe, :])
            dq[..., qs:qe, :] += ds @ kb * scale
            dk_acc += ds.transpose(-1, -2) @ qb * scale
        dk[..., ks:ke, :] = dk_acc
        dv[..., ks:ke, :] = dv_acc
    return dq, dk, dv
"""

TRITON_BACKWARD = """
import math

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N = 32, 32


@triton.jit
def flash_attention_backward_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
    stride_dkb, stride_dkh, stride_dkn,
    heads, t_q, t_k, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // heads
    h = pid_bh % heads
    offset = t_k - t_q
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_inside = offs_d[None, :] < HEAD_DIM
    kv_mask = (offs_n[:, None] < t_k) & d_inside
    k_ptrs = k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]
    k = tl.load(k_ptrs, mask=kv_mask, other=0.0)
    v = tl.load(v_ptrs, mask=kv_mask, other=0.0)
    q_head = q_ptr + b * stride_qb + h * stride_qh
    do_head = do_ptr + b * stride_dob + h * stride_doh
    lse_head = lse_ptr + pid_bh * t_q
    delta_head = delta_ptr + pid_bh * t_q
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    # the learner's part of Exercise 5a, from here
    lo = 0
    if IS_CAUSAL:
        lo = tl.maximum(pid_n * BLOCK_N - offset, 0) // BLOCK_M * BLOCK_M
    for start_m in range(lo, t_q, BLOCK_M):
        rows = start_m + offs_m
        q_mask = (rows[:, None] < t_q) & d_inside
        q = tl.load(q_head + rows[:, None] * stride_qm + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(do_head + rows[:, None] * stride_dom + offs_d[None, :], mask=q_mask, other=0.0)
        lse = tl.load(lse_head + rows, mask=rows < t_q, other=0.0)
        delta = tl.load(delta_head + rows, mask=rows < t_q, other=0.0)
        s_t = tl.dot(k, tl.trans(q)) * sm_scale
        allowed = (offs_n[:, None] < t_k) & (rows[None, :] < t_q)
        if IS_CAUSAL:
            allowed = allowed & (offs_n[:, None] <= rows[None, :] + offset)
        p_t = tl.where(allowed, tl.exp(s_t - lse[None, :]), 0.0)
        dv += tl.dot(p_t.to(do.dtype), do)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = tl.where(allowed, p_t * (dp_t - delta[None, :]), 0.0)
        dk += tl.dot(ds_t.to(q.dtype), q)
    # to here; the stores are given
    dk_ptrs = dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :]
    dv_ptrs = dv_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :]
    tl.store(dk_ptrs, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def flash_attention_backward_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
    stride_dqb, stride_dqh, stride_dqm,
    heads, t_q, t_k, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // heads
    h = pid_bh % heads
    offset = t_k - t_q
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_inside = offs_d[None, :] < HEAD_DIM
    q_mask = (offs_m[:, None] < t_q) & d_inside
    q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    do_ptrs = do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :]
    q = tl.load(q_ptrs, mask=q_mask, other=0.0)
    do = tl.load(do_ptrs, mask=q_mask, other=0.0)
    lse = tl.load(lse_ptr + pid_bh * t_q + offs_m, mask=offs_m < t_q, other=0.0)
    delta = tl.load(delta_ptr + pid_bh * t_q + offs_m, mask=offs_m < t_q, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    hi = t_k
    if IS_CAUSAL:
        hi = tl.maximum(tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset), 0)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols[:, None] < t_k) & d_inside
        k_ptrs = k_ptr + b * stride_kb + h * stride_kh + cols[:, None] * stride_kn + offs_d[None, :]
        v_ptrs = v_ptr + b * stride_vb + h * stride_vh + cols[:, None] * stride_vn + offs_d[None, :]
        k = tl.load(k_ptrs, mask=kv_mask, other=0.0)
        v = tl.load(v_ptrs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        allowed = (cols[None, :] < t_k) & (offs_m[:, None] < t_q)
        if IS_CAUSAL:
            allowed = allowed & (cols[None, :] <= offs_m[:, None] + offset)
        p = tl.where(allowed, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = tl.where(allowed, p * (dp - delta[:, None]), 0.0)
        dq += tl.dot(ds.to(k.dtype), k)
    dq_ptrs = dq_ptr + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :]
    tl.store(dq_ptrs, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=q_mask)


def triton_flash_attention_backward(q, k, v, out, lse, grad_out, is_causal=False):
    q, k, v, grad_out = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v, grad_out))
    B, H, T_q, d = q.shape
    T_k = k.shape[2]
    delta = (grad_out.float() * out.float()).sum(-1).contiguous()
    lse = lse.float().contiguous()
    dq = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    dk = torch.empty(k.shape, device=q.device, dtype=q.dtype)
    dv = torch.empty(k.shape, device=q.device, dtype=q.dtype)
    strides = (q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
               v.stride(0), v.stride(1), v.stride(2), *grad_out.stride()[:3])
    blocks = dict(HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                  IS_CAUSAL=is_causal)
    grid_kv = (triton.cdiv(T_k, BLOCK_N), B * H)
    flash_attention_backward_dkdv_kernel[grid_kv](
        q, k, v, grad_out, lse, delta, dk, dv, *strides, dk.stride(0), dk.stride(1), dk.stride(2),
        H, T_q, T_k, 1 / math.sqrt(d), **blocks)
    grid_q = (triton.cdiv(T_q, BLOCK_M), B * H)
    flash_attention_backward_dq_kernel[grid_q](
        q, k, v, grad_out, lse, delta, dq, *strides, dq.stride(0), dq.stride(1), dq.stride(2),
        H, T_q, T_k, 1 / math.sqrt(d), **blocks)
    return dq, dk, dv
"""
